"""Who wrote a scenario's quotas (scenario/writers.py): audit records counted per identity and
outcome, quota and Namespace writes apart; Harvester's error lines by namespace and cause; the
comparison's summary."""

from __future__ import annotations

import datetime

from harvester_quota.testbench.localcluster.audit import AuditRecord
from harvester_quota.testbench.localcluster.deploy import CONTROLLER_USER
from harvester_quota.testbench.localcluster.harvester import HARVESTER_USER
from harvester_quota.testbench.scenario.progress import writers_summary
from harvester_quota.testbench.scenario.writers import (
    OURS_IN_SCENARIOS,
    error_cause,
    error_lines_by_namespace,
    writes_by_identity,
)

NOW = datetime.datetime(2026, 11, 26, tzinfo=datetime.UTC)
RUN = {"test-migration": "test-migration-abcde"}


def record(
    user: str,
    verb: str = "update",
    resource: str = "resourcequotas",
    *,
    code: int = 200,
    namespace: str | None = "test-migration-abcde",
    name: str = "default-quota",
    subresource: str | None = None,
) -> AuditRecord:
    return AuditRecord(
        audit_id="x",
        user=user,
        groups=(),
        impersonated_user=None,
        verb=verb,
        api_group="",
        resource=resource,
        subresource=subresource,
        namespace=namespace,
        name=name,
        code=code,
        message=None,
        user_agent=None,
        received=NOW,
        completed=NOW,
    )


def test_quota_writes_are_counted_per_identity_and_outcome_in_the_runs_namespaces_only() -> None:
    records = [
        record(HARVESTER_USER),
        record(HARVESTER_USER, code=409),
        record(OURS_IN_SCENARIOS, "patch"),
        record(CONTROLLER_USER, "patch"),
        record("admin", "create"),  # the runner's setup: not a quota write
        record("admin", subresource="status"),  # status: kube-controller-manager's
        record("admin", namespace="someone-elses"),
    ]
    counted = writes_by_identity(records, RUN, "resourcequotas")
    assert counted == {
        "test-migration": {
            "harvester": {"accepted": 1, "refused": 1},
            "harvester-quota": {"accepted": 2, "refused": 0},
        }
    }


def test_namespace_writes_are_counted_by_the_namespaces_name_apart_from_quota_writes() -> None:
    label = record(
        OURS_IN_SCENARIOS, "patch", "namespaces", namespace=None, name="test-migration-abcde"
    )
    assert writes_by_identity([label], RUN, "resourcequotas") == {}
    assert writes_by_identity([label], RUN, "namespaces") == {
        "test-migration": {"harvester-quota": {"accepted": 1, "refused": 0}}
    }


def test_harvesters_error_lines_are_counted_by_namespace_and_cause() -> None:
    lines = [
        "level=error msg=\"error syncing 'test-migration-abcde/q': admission webhook "
        '\\"resourcequotas.harvester-quota.io\\" denied the request"',
        "level=error msg=\"error syncing 'test-migration-abcde/vm1': admission webhook "
        '\\"rancher.cattle.io.resourcequotas\\" denied the request"',
        'level=error msg="test-migration-abcde/vm1: something else"',
        'level=info msg="test-migration-abcde: not an error"',
        'level=error msg="another-namespace/vm1: not ours"',
    ]
    assert error_lines_by_namespace(lines, RUN) == {
        "test-migration": {
            "refused by harvester-quota": 1,
            "refused by Rancher's protection": 1,
            "other": 1,
        }
    }
    assert error_cause("Operation cannot be fulfilled: the object has been modified") == "conflict"
    assert error_cause('virtualmachineinstances.kubevirt.io "vm1" not found') == "an object gone"


def test_the_summary_sums_writes_and_says_n_a_without_an_audit_log() -> None:
    writers = {
        "writes_by_identity": {
            "a": {"harvester": {"accepted": 2, "refused": 1}},
            "b": {"harvester-quota": {"accepted": 3, "refused": 0}},
        },
        "harvester_error_lines": {"a": 4, "b": 0},
        "unavailable": None,
    }
    assert writers_summary(writers) == {
        "our_writes": "3 / 0",
        "harvester_writes": "2 / 1",
        "harvester_errors": "4",
    }
    assert writers_summary(None)["our_writes"] == "n/a"
    assert writers_summary({**writers, "unavailable": "rotated"})["harvester_writes"] == "n/a"
