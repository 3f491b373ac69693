"""The scale run's Harvester arm on Harvester's own controllers: its writes counted from the
audit log, its room seen on the quota, and the cluster and flags each strategy runs with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.testbench.localcluster.audit import AuditLog, AuditMark
from harvester_quota.testbench.localcluster.cluster import ClusterInfo, Ports
from harvester_quota.testbench.localcluster.harvester import HARVESTER_USER
from harvester_quota.testbench.scale.cli import harvester_for
from harvester_quota.testbench.scale.harvester import (
    HarvesterRealProduct,
    harvester_writes,
    metrics_of,
)
from harvester_quota.testbench.scale.observe import ProcessSample, QuotaWatch
from harvester_quota.testbench.scale.plan import HARVESTER_VERSION
from harvester_quota.testbench.scale.product import ProcessArgs
from harvester_quota.testbench.scale.run import drop_adoption, process_args_on
from harvester_quota.util.annotations import (
    ANNOTATION_ADOPTED,
    ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING,
    adopted_migrating_vm_annotation_key,
    migrating_uid_annotation_key,
)

KUBEVIRT_ACCOUNT = "system:serviceaccount:harvester-system:kubevirt-controller"


def audit_line(
    user: str,
    verb: str,
    resource: str,
    code: int,
    *,
    group: str = "",
    subresource: str | None = None,
    impersonated: str | None = None,
) -> bytes:
    """One ResponseComplete event as kube-apiserver writes it at level Metadata."""
    target: dict[str, Any] = {"resource": resource, "namespace": "scale-000", "name": "x"}
    if group:
        target["apiGroup"] = group
    if subresource:
        target["subresource"] = subresource
    event: dict[str, Any] = {
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "Metadata",
        "auditID": "a",
        "stage": "ResponseComplete",
        "verb": verb,
        "user": {"username": user, "groups": ["system:authenticated"]},
        "objectRef": target,
        "responseStatus": {"metadata": {}, "code": code},
        "requestReceivedTimestamp": "2026-11-26T23:00:00.000000Z",
        "stageTimestamp": "2026-11-26T23:00:00.010000Z",
    }
    if impersonated:
        event["impersonatedUser"] = {"username": impersonated}
    return orjson.dumps(event) + b"\n"


def test_harvester_s_writes_are_its_service_account_s_in_the_audit_log_by_kind_and_outcome(
    tmp_path: Path,
) -> None:
    log = tmp_path / "audit.log"
    log.write_bytes(
        b"".join(
            [
                audit_line(HARVESTER_USER, "update", "resourcequotas", 200),
                audit_line(HARVESTER_USER, "update", "resourcequotas", 200),
                audit_line(HARVESTER_USER, "update", "resourcequotas", 409),
                audit_line(HARVESTER_USER, "update", "resourcequotas", 400),
                # Its VMI writes impersonate KubeVirt's account: the impersonator is Harvester.
                audit_line(
                    HARVESTER_USER,
                    "update",
                    "virtualmachineinstances",
                    200,
                    group="kubevirt.io",
                    impersonated=KUBEVIRT_ACCOUNT,
                ),
                audit_line(HARVESTER_USER, "update", "virtualmachines", 200, group="kubevirt.io"),
                # Others' writes are not Harvester's.
                audit_line("admin", "update", "resourcequotas", 200),
                audit_line(KUBEVIRT_ACCOUNT, "update", "virtualmachineinstances", 200),
                audit_line(
                    "system:serviceaccount:kube-system:resourcequota-controller",
                    "update",
                    "resourcequotas",
                    200,
                    subresource="status",
                ),
            ]
        )
    )
    writes = harvester_writes(AuditLog(log).since(AuditMark(None, 0)))
    metrics = metrics_of(writes, ProcessSample(1.5, 2048))

    assert metrics.writes == {"spec": 4.0, "vmi": 1.0, "vm": 1.0}, "sent, whatever the answer"
    assert metrics.quota_writes == {"written": 2.0, "conflict": 1.0, "refused": 1.0}
    assert metrics.requests == {
        ("update", "resourcequotas"): 4.0,
        ("update", "virtualmachineinstances"): 1.0,
        ("update", "virtualmachines"): 1.0,
    }
    assert (metrics.cpu_seconds, metrics.rss_bytes) == (1.5, 2048.0)


def _cluster(tmp_path: Path, harvester: str | None) -> ClusterInfo:
    return ClusterInfo(
        state_dir=tmp_path,
        kubeconfig=tmp_path / "kubeconfig",
        server="https://127.0.0.1:3",
        ca_file=tmp_path / "ca.crt",
        client_cert=tmp_path / "admin.crt",
        client_key=tmp_path / "admin.key",
        ports=Ports(1, 2, 3, 4, 5),
        kubevirt_version="v1.8.4",
        harvester_version=harvester,
    )


def test_the_harvester_arm_refuses_a_cluster_without_harvester_s_controllers(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match="Harvester's own controllers"):
        HarvesterRealProduct(_cluster(tmp_path, None))


def test_the_harvester_arm_starts_harvester_s_controllers_and_ours_keeps_what_the_cluster_runs(
    tmp_path: Path,
) -> None:
    assert harvester_for("harvester", None) == HARVESTER_VERSION
    assert harvester_for("harvester", _cluster(tmp_path, None)) == HARVESTER_VERSION
    assert harvester_for("ours", None) is None
    assert harvester_for("ours", _cluster(tmp_path, None)) is None
    assert harvester_for("ours", _cluster(tmp_path, "v1.8.2")) == "v1.8.2", "beside Harvester"


def test_ours_beside_harvester_s_controllers_adopts_the_quotas_and_only_there(
    tmp_path: Path,
) -> None:
    flag = "--adopt-harvester-quotas"
    given = ProcessArgs(("--workers=10",), ("--target-room-wait=4",))
    beside = process_args_on(_cluster(tmp_path, "v1.8.2"), given)
    assert beside == ProcessArgs(("--workers=10", flag), ("--target-room-wait=4",))
    assert process_args_on(_cluster(tmp_path, "v1.8.2"), beside) == beside, "not twice"
    assert process_args_on(_cluster(tmp_path, None), given) == given


def test_a_harvester_run_gives_back_only_the_quotas_our_controller_adopted() -> None:
    adopted = {
        "metadata": {
            "annotations": {
                ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING: "true",
                ANNOTATION_ADOPTED: "true",
            }
        }
    }
    drop_adoption(adopted)
    assert adopted["metadata"]["annotations"] == {}
    # An administrator's opt-out (the skip annotation without our marker) is not ours to remove.
    opted_out = {"metadata": {"annotations": {ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING: "true"}}}
    drop_adoption(opted_out)
    assert opted_out["metadata"]["annotations"] == {
        ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING: "true"
    }


def _quota(hard: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": "default-quota", "namespace": "ns", "annotations": annotations},
        "spec": {"hard": {"limits.cpu": hard}},
    }


def _watch(clock: FakeClock) -> QuotaWatch:
    from harvester_quota.generic.client import ApiClient
    from harvester_quota.generic.config import ClientConfig

    api = ApiClient(ClientConfig(host="https://127.0.0.1:1", ssl_context=False))
    return QuotaWatch(api, lambda namespace: namespace == "ns", clock)


async def test_harvester_s_room_is_the_first_rise_of_the_quota_after_its_uid_key() -> None:
    clock = FakeClock()
    watch = _watch(clock)
    key = migrating_uid_annotation_key("uid-1")
    watch._seen(_quota("4", {}))
    clock.step(1.0)
    watch._seen(_quota("5", {}))  # a rise before the key: not this migration's
    clock.step(1.0)
    recorded = clock.monotonic()
    watch._seen(_quota("5", {key: '{"limits.cpu":"1"}'}))  # its migration controller's write
    assert watch.raised_at("ns", "vm1", 0.0, vmi_uid="uid-1", harvester=True) is None
    clock.step(0.5)
    watch._seen(_quota("6", {key: '{"limits.cpu":"1"}'}))  # its resourcequota controller's
    raised = watch.raised_at("ns", "vm1", 0.0, vmi_uid="uid-1", harvester=True)
    assert raised == recorded + 0.5
    assert watch.raised_at("ns", "vm1", 0.0, vmi_uid="uid-2", harvester=True) is None
    assert watch.raised_at("ns", "vm1", 0.0) is None, "Harvester's key is no room of ours"


async def test_our_room_on_an_adopted_quota_is_its_digest_key_not_harvester_s_uid_key() -> None:
    clock = FakeClock()
    watch = _watch(clock)
    watch._seen(_quota("4", {migrating_uid_annotation_key("uid-1"): "{}"}))
    clock.step(1.0)
    ours = adopted_migrating_vm_annotation_key("vm1")
    watch._seen(_quota("5", {migrating_uid_annotation_key("uid-1"): "{}", ours: "{}"}))
    assert watch.raised_at("ns", "vm1", 0.0) == clock.monotonic()
    assert watch.raised_at("ns", "vm2", 0.0) is None


def test_harvester_s_writes_beside_ours_are_tabled_per_step_and_arm_with_both_quota_writes() -> (
    None
):
    from harvester_quota.testbench.scale.plan import Step
    from harvester_quota.testbench.scale.product import Metrics
    from harvester_quota.testbench.scale.stats import beside_table, summarize_step

    step = summarize_step(
        Step("drain", (("scale-000", "vm1"), ("scale-001", "vm2"))),
        records=[],
        latencies=[],
        create_seconds=[],
        metrics=Metrics({}, {}, 0.0, 0.0, writes={"spec": 2.0, "status": 1.0}),
        cpu={},
        seconds=1.0,
        settle_seconds=0.0,
        drift=0,
        stale=0,
        beside_writes={"spec": 4.0, "vmi": 6.0, "vm": 3.0},
    )
    assert step.to_json()["harvester_beside_writes_per_migration_by_kind"] == {
        "spec": 2.0,
        "vm": 1.5,
        "vmi": 3.0,
    }
    rows = beside_table({"ours": [step]}).splitlines()
    assert rows[2] == "| drain | ours | 2.00 / 3.00 / 1.50 | 1.50 + 2.00 |"


def test_beside_harvester_the_kubevirt_policies_exempt_exactly_kubevirt_s_two_accounts() -> None:
    """The run's KubeVirt policies take the account Harvester's VMI writes impersonate (KubeVirt's
    on a Harvester) for KubeVirt's controller too, and no one else: a tenant stays bound."""
    from harvester_quota.testbench.localcluster.cluster import VIRT_CONTROLLER_USER
    from harvester_quota.testbench.localcluster.deploy import kubevirt_policies
    from harvester_quota.testbench.localcluster.harvester import HARVESTER_KUBEVIRT_USER

    def first_conditions(**extra: Any) -> list[str]:
        documents = kubevirt_policies(
            {"run": "x"}, kubevirt_user=VIRT_CONTROLLER_USER, name="p", **extra
        )
        return [
            d["spec"]["matchConditions"][0]["expression"]
            for d in documents
            if d["kind"] == "ValidatingAdmissionPolicy"
        ]

    alone = first_conditions()
    assert all(HARVESTER_KUBEVIRT_USER not in e for e in alone), alone
    beside = first_conditions(also_kubevirt=(HARVESTER_KUBEVIRT_USER,))
    exactly = (
        f"!(request.userInfo.username in ['{VIRT_CONTROLLER_USER}', '{HARVESTER_KUBEVIRT_USER}'"
    )
    assert beside[0] == beside[2] == exactly + "])", "the labels and priority policies"
    assert beside[1].startswith(exactly + ", "), "the status policy: KubeVirt's other accounts too"
