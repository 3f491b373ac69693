"""`make demo`: shows, on a real local cluster, the quota admission this project exists to manage.

It starts a cluster in its own state directory, lists the fake nodes, creates a namespace whose
ResourceQuota fits one VM-sized pod, shows that a pod of that size is admitted and that a second one,
as a migration target would be, is refused with the API server's own "exceeded quota" message, and
stops the cluster again.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pkg.localcluster import LocalCluster
from pkg.localcluster.cluster import default_state_dir
from pkg.localcluster.rest import ApiError, RestClient

NAMESPACE = "demo-quota"


def _say(text: str = "") -> None:
    print(text, flush=True)


def _launcher_pod(name: str, cpu: str, memory: str) -> dict[str, Any]:
    resources = {"cpu": cpu, "memory": memory}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"kubevirt.io": "virt-launcher"}},
        "spec": {
            "containers": [
                {
                    "name": "compute",
                    "image": "virt-launcher",
                    "resources": {"limits": resources, "requests": resources},
                }
            ]
        },
    }


def _wait(condition: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the cluster did not reach the expected state in time")
        time.sleep(0.2)


def _quota_ready(rest: RestClient) -> bool:
    quota = rest.get(f"/api/v1/namespaces/{NAMESPACE}/resourcequotas/vm-quota")
    return "used" in quota.get("status", {})


def _show_quota(rest: RestClient) -> None:
    quota = rest.get(f"/api/v1/namespaces/{NAMESPACE}/resourcequotas/vm-quota")
    hard, used = quota["status"]["hard"], quota["status"].get("used", {})
    for key in sorted(hard):
        _say(f"    {key:<16} used {used.get(key, '0'):>12} of {hard[key]}")


def _steps(rest: RestClient, nodes: list[str]) -> None:
    listed = rest.get("/api/v1/nodes")["items"]
    _say(f"  nodes ({len(listed)}, simulated by kwok):")
    for node in listed:
        ready = next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready")
        _say(f"    {node['metadata']['name']:<14} Ready={ready}")
    rest.post("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    _wait(lambda: rest.exists(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"))
    quota = {
        "metadata": {"name": "vm-quota"},
        "spec": {"hard": {"limits.cpu": "3", "limits.memory": "5000Mi"}},
    }
    rest.post(f"/api/v1/namespaces/{NAMESPACE}/resourcequotas", quota)
    _wait(lambda: _quota_ready(rest))
    _say(f"\n  namespace {NAMESPACE} with ResourceQuota vm-quota (limits.cpu 3, 5000Mi):")
    # The v1.7.0 seed's VM: 2 cores, 4Gi, whose launcher pod counts 2015m and 4797464313 bytes.
    pod = _launcher_pod("virt-launcher-vm1-source", "2015m", "4797464313")
    pod["spec"]["nodeName"] = nodes[0]
    rest.post(f"/api/v1/namespaces/{NAMESPACE}/pods", pod)
    _say("  created virt-launcher-vm1-source (2015m CPU, 4797464313 bytes): admitted")
    _wait(
        lambda: (
            rest.get(f"/api/v1/namespaces/{NAMESPACE}/resourcequotas/vm-quota")["status"]
            .get("used", {})
            .get("limits.cpu")
            == "2015m"
        )
    )
    _show_quota(rest)
    target = _launcher_pod("virt-launcher-vm1-target", "2015m", "4797464313")
    target["spec"]["nodeName"] = nodes[1]
    _say("\n  creating the migration target virt-launcher-vm1-target of the same size ...")
    try:
        rest.post(f"/api/v1/namespaces/{NAMESPACE}/pods", target)
    except ApiError as error:
        _say(f"  REFUSED by the API server ({error.status} {error.reason}):")
        _say(f"    {error.message}")
    else:
        raise RuntimeError("the over-quota pod was admitted: quota admission is not working")
    _say("\n  This is the refusal that leaves a live migration Pending during a node drain.")


def run_demo(state_dir: Path | None = None) -> int:
    cluster = LocalCluster(state_dir or default_state_dir().parent / "demo")
    _say("== harvester-quota demo: a real local cluster and a quota that blocks a migration ==")
    started = time.monotonic()
    info = cluster.up()
    _say(f"  cluster up in {time.monotonic() - started:.1f}s at {info.server}")
    try:
        _steps(info.rest(), info.nodes)
    finally:
        cluster.down()
        _say("\n  cluster stopped; nothing left running")
    return 0
