"""Every log line about a migration carries its namespace and VM as fields (docs/operations.md,
"Logs"): the JSON formatter writes them as keys, the text formatter as `namespace=.. vm=..`."""

from __future__ import annotations

import ast
import datetime
import json
import logging
from pathlib import Path

import pytest
from harvester_quota.controller.mtq.windows import ExpiredWindows
from harvester_quota.generic.logformat import JsonFormatter, TextFormatter
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.util.mtq import Lock
from harvester_quota.webhook.resources.pod.targets import QuotaChanges, admit_target

from tests.unit.test_webhook import FakeLookups, plain_pod, request

KUBEVIRT = "system:serviceaccount:kubevirt:kubevirt-controller"


def _only_record(caplog: pytest.LogCaptureFixture, logger: str) -> logging.LogRecord:
    (record,) = [r for r in caplog.records if r.name == logger]
    return record


async def test_a_target_pod_that_cannot_be_read_is_logged_with_its_namespace_and_vm(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pod = plain_pod(
        "virt-launcher-db-0-x",
        "lots",
        "1Gi",
        **{"kubevirt.io/migrationJobUID": "m1", "vm.kubevirt.io/name": "db-0"},
    )
    clock = FakeClock()
    caplog.set_level(logging.INFO)
    admission = await admit_target(
        request("Pod", pod, operation="CREATE", user=KUBEVIRT),
        FakeLookups(),
        QuotaChanges(clock),
        clock,
        wait=8.0,
    )
    assert admission.outcome == "unreadable"
    record = _only_record(caplog, "harvester_quota.webhook.resources.pod.targets")
    line = json.loads(JsonFormatter().format(record))
    assert (line["namespace"], line["vm"]) == ("ns", "db-0")
    assert TextFormatter().format(record).endswith("namespace=ns vm=db-0")


def test_a_lock_window_that_ended_is_logged_with_the_migrations_namespace_and_vm(
    caplog: pytest.LogCaptureFixture,
) -> None:
    migration = {
        "metadata": {"name": "db-0-mig", "namespace": "tenant-a", "uid": "u1"},
        "spec": {"vmiName": "db-0"},
    }
    enqueued: list[tuple[str, float]] = []
    windows = ExpiredWindows(
        FakeClock(), has_target=lambda uid: False, enqueue_after=lambda *a: enqueued.append(a)
    )
    lock = Lock(datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC), "q", {"u1": "db-0-mig"})
    caplog.set_level(logging.INFO)
    windows.expire(lock, [migration])
    assert enqueued, "the window's end was not recorded: nothing was logged either"
    record = _only_record(caplog, "harvester_quota.controller.mtq.windows")
    line = json.loads(JsonFormatter().format(record))
    assert (line["namespace"], line["vm"], line["migration"]) == ("tenant-a", "db-0", "db-0-mig")


PKG = Path(__file__).resolve().parents[2] / "pkg"
MIGRATION_MODULES = (
    "controller/migration/vmi_controller.py",
    "controller/mtq/windows.py",
    "controller/mtq/blocked.py",
    "controller/resourcequota/writes.py",
    "controller/resourcequota/rancher.py",
    "controller/resourcequota/staleraise.py",
    "controller/mtq/writes.py",
    "webhook/pods.py",
    "webhook/resources/pod/targets.py",
)
"""The modules whose log lines are about a migration or the quota it raises."""
LEVELS = {"debug", "info", "warning", "error", "exception"}
NOT_ABOUT_A_NAMESPACE = {
    "the sweep for stale raises failed; trying again next interval",
    "cannot read Rancher project %s/%s now: %s",
}
"""Lines of those modules about the process or a Rancher project, not a migration or a namespace."""


def _log_calls_without_fields(source: str) -> list[int]:
    """Line numbers of `log.<level>(...)` calls that pass no `extra=` (debug lines exempt:
    they are ours at -v 1, for developers)."""
    missing = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "log"
            and node.func.attr in LEVELS - {"debug"}
            and not any(keyword.arg == "extra" for keyword in node.keywords)
            and not (
                node.args
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value in NOT_ABOUT_A_NAMESPACE
            )
        ):
            missing.append(node.lineno)
    return missing


def test_the_field_check_finds_a_log_call_without_extra() -> None:
    assert _log_calls_without_fields('log.info("x")\nlog.info("y", extra={})\n') == [1]


@pytest.mark.parametrize("module", MIGRATION_MODULES)
def test_every_log_line_of_a_migration_module_passes_its_fields(module: str) -> None:
    source = (PKG / module).read_text()
    assert "log." in source
    assert _log_calls_without_fields(source) == []
