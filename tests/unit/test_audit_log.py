"""The audit log reader: records, counts, marks across a torn last line and rotations, and the
policy and flags the local cluster's API server is started with."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from harvester_quota.testbench.localcluster import audit
from harvester_quota.testbench.localcluster.audit import AuditLog, AuditMark, WriteKey
from harvester_quota.testbench.localcluster.cluster import ClusterInfo, LocalCluster, Ports
from harvester_quota.testbench.localcluster.errors import ClusterError

TENANT = "system:serviceaccount:team-a:tenant"
REFUSAL = (
    'resourcequotas "compute" is forbidden: User "system:serviceaccount:team-a:tenant" cannot '
    'update resource "resourcequotas" in API group "" in the namespace "team-a"'
)
# As kube-apiserver v1.36 writes it at level Metadata (one line, here wrapped).
ADMIN_UPDATE = (
    b'{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata",'
    b'"auditID":"5f0c1e7a-1b2c-4d5e-8f90-0a1b2c3d4e5f","stage":"ResponseComplete",'
    b'"requestURI":"/api/v1/namespaces/team-a/resourcequotas/compute","verb":"update",'
    b'"user":{"username":"admin","groups":["system:masters","system:authenticated"]},'
    b'"sourceIPs":["127.0.0.1"],"userAgent":"python-requests/2.32",'
    b'"objectRef":{"resource":"resourcequotas","namespace":"team-a","name":"compute",'
    b'"apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200},'
    b'"requestReceivedTimestamp":"2026-03-01T10:00:00.123456Z",'
    b'"stageTimestamp":"2026-03-01T10:00:00.130001Z",'
    b'"annotations":{"authorization.k8s.io/decision":"allow","authorization.k8s.io/reason":""}}\n'
)


def event(
    *,
    user: str = TENANT,
    verb: str = "update",
    resource: str = "resourcequotas",
    namespace: str | None = "team-a",
    code: int = 403,
    message: str | None = REFUSAL,
    stage: str = "ResponseComplete",
    received: str = "2026-03-01T10:00:01.000000Z",
    **object_ref: str,
) -> bytes:
    """One audit event's JSON line, as kube-apiserver writes it."""
    status: dict[str, Any] = {"metadata": {}, "code": code}
    if message:
        status |= {"status": "Failure", "message": message, "reason": "Forbidden"}
    target = {"resource": resource, "name": "compute", "apiVersion": "v1", **object_ref}
    if namespace:
        target["namespace"] = namespace
    body = {
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "Metadata",
        "auditID": "a1",
        "stage": stage,
        "verb": verb,
        "user": {"username": user, "groups": ["system:serviceaccounts", "system:authenticated"]},
        "userAgent": "harvester-quota-tests",
        "objectRef": target,
        "responseStatus": status,
        "requestReceivedTimestamp": received,
        "stageTimestamp": received,
    }
    return orjson.dumps(body) + b"\n"


def append(path: Path, *lines: bytes) -> None:
    with path.open("ab") as handle:
        handle.write(b"".join(lines))


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    return tmp_path / "audit.log"


def test_a_record_holds_who_did_what_and_the_answer(log_path: Path) -> None:
    append(log_path, ADMIN_UPDATE, event())
    admin, tenant = AuditLog(log_path).since(AuditMark(None, 0))
    assert (admin.user, admin.verb, admin.target, admin.namespace, admin.name) == (
        "admin",
        "update",
        "resourcequotas",
        "team-a",
        "compute",
    )
    assert admin.groups == ("system:masters", "system:authenticated")
    assert (admin.code, admin.accepted, admin.message) == (200, True, None)
    assert admin.received == datetime(2026, 3, 1, 10, 0, 0, 123456, tzinfo=UTC)
    assert admin.completed == datetime(2026, 3, 1, 10, 0, 0, 130001, tzinfo=UTC)
    assert (admin.user_agent, admin.api_group, admin.impersonated_user) == (
        "python-requests/2.32",
        "",
        None,
    )
    assert (tenant.user, tenant.code, tenant.accepted, tenant.message) == (
        TENANT,
        403,
        False,
        REFUSAL,
    )


def test_a_record_at_request_level_holds_the_requests_body(log_path: Path) -> None:
    line = orjson.loads(event(code=200, message=None))
    body = {"metadata": {"annotations": {"harvesterhci.io/migrating-vm0": "{}"}}}
    append(log_path, orjson.dumps({**line, "level": "Request", "requestObject": body}) + b"\n")
    append(log_path, event(code=200, message=None))

    with_body, without = AuditLog(log_path).since(AuditMark(None, 0))

    assert with_body.request_object == body
    assert without.request_object is None


def test_a_torn_last_line_is_left_until_it_is_complete(log_path: Path) -> None:
    torn = event(code=200, message=None)
    append(log_path, ADMIN_UPDATE, torn[:50])
    log = AuditLog(log_path)
    assert [record.user for record in log.since(AuditMark(None, 0))] == ["admin"]
    mark = log.mark()
    assert mark.offset == len(ADMIN_UPDATE), "the mark stops before the torn line"
    append(log_path, torn[50:])
    assert [record.user for record in log.since(mark)] == [TENANT]


def test_since_a_mark_is_what_was_written_after_it(log_path: Path) -> None:
    append(log_path, ADMIN_UPDATE)
    log = AuditLog(log_path)
    mark = log.mark()
    assert log.since(mark) == []
    append(log_path, event(), event(verb="patch", code=200, message=None))
    assert [(record.verb, record.code) for record in log.since(mark)] == [
        ("update", 403),
        ("patch", 200),
    ]


def test_counts_are_by_user_verb_resource_and_answer_in_one_namespace(log_path: Path) -> None:
    log = AuditLog(log_path)
    mark = log.mark()
    assert mark == AuditMark(None, 0), "no log yet: everything to come is after the mark"
    append(
        log_path,
        ADMIN_UPDATE,
        event(),
        event(),
        event(
            user="admin", verb="patch", resource="resourcequotas", subresource="status", code=409
        ),
        event(namespace="team-b"),
        event(verb="get", code=200, message=None),
    )
    assert log.count_writes(mark, namespace="team-a") == {
        WriteKey("admin", "update", "resourcequotas", accepted=True): 1,
        WriteKey(TENANT, "update", "resourcequotas", accepted=False): 2,
        WriteKey("admin", "patch", "resourcequotas/status", accepted=False): 1,
    }
    assert log.count_writes(mark)[WriteKey(TENANT, "update", "resourcequotas", False)] == 3


def test_only_finished_requests_are_records(log_path: Path) -> None:
    append(log_path, event(stage="RequestReceived"), b"\n", event(code=201, message=None))
    (record,) = AuditLog(log_path).since(AuditMark(None, 0))
    assert record.code == 201


def test_a_complete_line_that_is_no_audit_event_is_an_error(log_path: Path) -> None:
    append(log_path, ADMIN_UPDATE, b'{"kind":"Event","stage":"ResponseComplete"}\n')
    with pytest.raises(ClusterError, match="not an audit event"):
        AuditLog(log_path).since(AuditMark(None, 0))


def test_a_mark_follows_the_log_into_its_rotated_backups(log_path: Path) -> None:
    log = AuditLog(log_path)
    append(log_path, ADMIN_UPDATE)
    mark = log.mark()
    append(log_path, event(verb="create", code=201, message=None))
    log_path.rename(log_path.with_name("audit-2026-03-01T10-00-02.000.log"))
    append(log_path, event(verb="patch", code=200, message=None))
    log_path.rename(log_path.with_name("audit-2026-03-01T10-00-03.000.log"))
    append(log_path, event(verb="delete", code=200, message=None))
    assert [record.verb for record in log.since(mark)] == ["create", "patch", "delete"]


def test_a_mark_whose_file_is_gone_is_an_error(log_path: Path) -> None:
    append(log_path, ADMIN_UPDATE)
    log = AuditLog(log_path)
    mark = log.mark()
    log_path.rename(log_path.with_name("elsewhere.log"))  # as a restart's move to logs.previous
    append(log_path, event())
    with pytest.raises(ClusterError, match="no longer beside"):
        log.since(mark)


def test_received_since_a_time_reads_the_backups_written_since(log_path: Path) -> None:
    """A backup last written before the time holds nothing received since (its one record here,
    received "later", would show if it were read)."""
    when = datetime(2026, 3, 1, 10, 0, 3, tzinfo=UTC)
    stale = log_path.with_name("audit-2026-03-01T09-00-00.000.log")
    append(stale, event(verb="patch", received="2026-03-01T10:00:09.000000Z"))
    backup = log_path.with_name("audit-2026-03-01T10-00-05.000.log")
    append(backup, event(received="2026-03-01T10:00:00.000000Z"))
    append(backup, event(verb="create", received="2026-03-01T10:00:04.000000Z"))
    append(log_path, event(verb="delete", received="2026-03-01T10:00:06.000000Z"))
    for path, written in ((stale, -3600), (backup, 2), (log_path, 3)):
        os.utime(path, (when.timestamp() + written,) * 2)
    log = AuditLog(log_path)
    assert [record.verb for record in log.received_since(when)] == ["create", "delete"]
    assert sum(log.count_writes(when).values()) == 2


def test_the_policy_audits_finished_writes_of_quotas_pods_and_kubevirt_only(
    tmp_path: Path,
) -> None:
    path = tmp_path / "policy.yaml"
    audit.write_policy(path)
    policy = yaml.safe_load(path.read_text())
    assert (policy["apiVersion"], policy["kind"]) == ("audit.k8s.io/v1", "Policy")
    assert set(policy["omitStages"]) == {"RequestReceived", "ResponseStarted", "Panic"}
    leases, pod_creates, quota_writes, writes, rest = policy["rules"]
    assert leases == {
        "level": "None",
        "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}],
    }
    # With their bodies: pod creates and quota spec writes only, never a pod's status.
    assert pod_creates == {
        "level": "Request",
        "verbs": ["create"],
        "resources": [{"group": "", "resources": ["pods"]}],
    }
    assert quota_writes == {
        "level": "Request",
        "verbs": ["update", "patch"],
        "resources": [{"group": "", "resources": ["resourcequotas"]}],
    }
    assert writes["level"] == "Metadata"
    assert writes["verbs"] == ["create", "update", "patch", "delete"]
    audited = {group["group"]: set(group["resources"]) for group in writes["resources"]}
    assert {"resourcequotas", "namespaces", "pods"} <= audited[""]
    assert "pods/status" not in audited[""]
    assert {
        "virtualmachineinstances",
        "virtualmachineinstancemigrations",
        "virtualmachines",
    } <= audited["kubevirt.io"]
    assert rest == {"level": "None"}


def test_the_api_server_writes_its_audit_log_beside_the_other_logs(tmp_path: Path) -> None:
    local = LocalCluster(tmp_path)
    args = local._apiserver_args(Ports(1, 2, 3, 4, 5))
    log = tmp_path.resolve() / "logs" / "audit.log"
    assert f"--audit-policy-file={local.audit_policy_path}" in args
    assert f"--audit-log-path={log}" in args
    assert "--audit-log-format=json" in args
    assert f"--audit-log-maxsize={audit.MAX_SIZE_MB}" in args
    assert f"--audit-log-maxbackup={audit.MAX_BACKUPS}" in args
    assert not any(arg.startswith("--audit-log-mode") for arg in args), "the default: blocking"
    info = ClusterInfo(
        state_dir=local.state_dir,
        kubeconfig=local.kubeconfig_path,
        server="https://127.0.0.1:3",
        ca_file=local.pki_dir / "ca.crt",
        client_cert=local.pki_dir / "admin.crt",
        client_key=local.pki_dir / "admin.key",
        ports=Ports(1, 2, 3, 4, 5),
    )
    assert info.audit_log == log
