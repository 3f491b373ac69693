"""bench/reconcile_causes.py patches the framework's internals (the store's views, the informers'
handlers, the work queue, the soon window, the reconcile): it follows them as they move only if
something runs it. Here its patches are installed in a process of their own (they replace class
attributes) over the controller's real informers and handlers, and a quota's changes are fed
through them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

DRIVE = """
import asyncio, copy, json, sys
from bench import reconcile_causes as causes
causes.install(sys.argv[1])
from bench.watchevent import Controller

QUOTA = {
    "apiVersion": "v1", "kind": "ResourceQuota",
    "metadata": {"name": "q", "namespace": "tenant", "resourceVersion": "1", "uid": "u"},
    "spec": {"hard": {"cpu": "1"}},
}

async def main():
    quotas = Controller().informers["resourcequotas"]
    quotas.on_event("ADDED", QUOTA)
    counted = copy.deepcopy(QUOTA)
    counted["metadata"]["resourceVersion"] = "2"
    counted["status"] = {"hard": {"cpu": "1"}, "used": {"cpu": "500m"}}
    quotas.on_event("MODIFIED", counted)
    print(json.dumps(dict(causes._pending)))

asyncio.run(main())
"""


def test_its_patches_name_a_quotas_add_and_its_count_queued_soon_on_the_controllers_handlers(
    tmp_path: Path,
) -> None:
    ran = subprocess.run(
        [sys.executable, "-c", DRIVE, str(tmp_path)],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert "handler failed" not in ran.stderr, ran.stderr
    causes = json.loads(ran.stdout.strip().splitlines()[-1])
    assert causes["tenant"][0] == "namespaces resourcequotas (resourcequotas): added"
    assert any(
        cause.startswith("soon namespaces resourcequotas") and "status.used" in cause
        for cause in causes["tenant"][1:]
    ), causes
