"""The global switch (`run --paused`) and the per-namespace opt-out label: every room given back,
none raised, said in the plan, `explain`, a metric and the leader Lease; and what a tenant who
sets the label itself gains (nothing but the loss of its own rooms)."""

from __future__ import annotations

import copy
import json
from typing import Any, cast

import pytest
from harvester_quota.config.metrics import QuotaMetrics
from harvester_quota.explain import Explanation, explain, render_text
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.leader import lease_metadata
from harvester_quota.main import build_parser
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.util.annotations import (
    ANNOTATION_PAUSED,
    LABEL_PAUSED,
    migrating_vm_annotation_key,
)
from harvester_quota.util.resourcequota.plan import (
    PAUSED_GLOBALLY,
    PAUSED_HERE,
    patch_for,
    plan_quota,
)
from harvester_quota.webhook.admission import Denied
from harvester_quota.webhook.resources.common import Identities
from harvester_quota.webhook.resources.pod.targets import QuotaChanges
from prometheus_client import CollectorRegistry

from tests.objects import launcher_pod, managed_quota, migration, rancher_namespace, vmi
from tests.unit.test_quota_plan import V170_HARD, V170_LIMIT, snapshot
from tests.unit.test_quota_scopes_in_fit_checks import ReadOnlyCluster
from tests.unit.test_target_room_wait import BASE as WAIT_BASE
from tests.unit.test_target_room_wait import admitting
from tests.unit.test_target_room_wait import quota as wait_quota
from tests.unit.test_webhook import FakeLookups, plain_pod, request, validate_pod

RAISED = {"limits.cpu": "5015m", "limits.memory": "10040344313"}
ROOM = '{"limits.cpu":"2015m","limits.memory":"4797464313"}'


def labelled(value: str) -> dict[str, Any]:
    namespace = rancher_namespace("ns", V170_LIMIT)
    namespace["metadata"].setdefault("labels", {})[LABEL_PAUSED] = value
    return namespace


def migrating(namespace: dict[str, Any], *, raised: bool, paused: bool = False) -> Any:
    """A snapshot of vm1 migrating in `namespace`, its quota raised for it or not yet."""
    vm = vmi("vm1")
    annotations = {migrating_vm_annotation_key("vm1"): ROOM} if raised else {}
    quota = managed_quota("ns", RAISED if raised else V170_HARD, annotations)
    taken = snapshot(
        namespace,
        quota,
        migrations=[migration("m", vm)],
        vmis=[vm],
        pods=[launcher_pod(vm, "src")],
    )
    taken.paused = paused
    return taken


def test_the_global_switch_gives_a_held_room_back_in_one_write() -> None:
    taken = migrating(rancher_namespace("ns", V170_LIMIT), raised=True, paused=True)
    plan = plan_quota(taken)
    assert plan.paused == PAUSED_GLOBALLY and plan.skipped and not plan.holds_room
    assert plan.hard == V170_HARD
    patch = patch_for(taken.quota, plan)
    assert patch is not None
    assert patch["spec"]["hard"] == V170_HARD
    assert patch["metadata"]["annotations"][migrating_vm_annotation_key("vm1")] is None


def test_the_opt_out_label_gives_the_namespaces_room_back_and_says_why() -> None:
    plan = plan_quota(migrating(labelled("true"), raised=True))
    assert plan.paused == PAUSED_HERE and not plan.holds_room
    assert plan.hard == V170_HARD


@pytest.mark.parametrize("value", ["false", "True", "yes", ""])
def test_a_paused_label_other_than_true_changes_nothing(value: str) -> None:
    plan = plan_quota(migrating(labelled(value), raised=False))
    assert plan.paused is None and plan.holds_room
    assert plan.hard != V170_HARD


def test_no_raise_while_paused_for_a_migration_that_starts_then() -> None:
    taken = migrating(rancher_namespace("ns", V170_LIMIT), raised=False, paused=True)
    plan = plan_quota(taken)
    assert plan.hard == V170_HARD and not plan.annotations
    assert patch_for(taken.quota, plan) is None


def test_a_tenant_that_opts_out_mid_migration_gets_no_pod_into_what_is_still_raised() -> None:
    """Abuse: a tenant able to label its namespace (the chart's paused-label policy refuses it,
    docs/security.md, row 5k) sets the opt-out while vm1's room is raised. The plan lowers spec.hard
    and drops the room's annotation in one write; quota admission enforces status.hard, which
    still holds the raise for a moment, and a tenant pod that would take it is denied all the
    same: the room-held label goes only once both are down (raise_down), and the webhook holds
    pods to the base while status.hard stands above it. What the tenant got: its own migration
    lost its room."""
    taken = migrating(labelled("true"), raised=True)
    plan = plan_quota(taken)
    patch = patch_for(taken.quota, plan)
    assert patch is not None
    quota = copy.deepcopy(taken.quota)
    quota["spec"]["hard"] = dict(patch["spec"]["hard"])
    quota["metadata"]["annotations"] = {
        k: v
        for k, v in quota["metadata"].get("annotations", {}).items()
        if k not in patch_keys(patch)
    }
    quota["status"] = {
        "hard": dict(RAISED),  # kube-controller-manager has not published the lowering yet
        "used": {"limits.cpu": "2015m", "limits.memory": "4797464313"},
    }
    lookups = FakeLookups(quotas={"ns": quota}, namespaces={"ns": labelled("true")})
    grab = request("Pod", plain_pod("grab", "2", "4Gi"), operation="CREATE")
    with pytest.raises(Denied):
        validate_pod(grab, lookups, Identities())


def patch_keys(patch: dict[str, Any]) -> set[str]:
    return {k for k, v in patch["metadata"]["annotations"].items() if v is None}


def test_explain_says_the_namespace_is_paused() -> None:
    explanation = Explanation("ns", "q", managed=True, paused=PAUSED_HERE)
    text = render_text(explanation)
    assert f"paused: {PAUSED_HERE}; every room is given back and none raised" in text
    assert json.loads(json.dumps(explanation.as_dict()))["paused"] == PAUSED_HERE


async def test_explain_reads_the_global_switch_from_the_leader_lease() -> None:
    """`explain` plans as the paused controller does, and says why, from the annotation the
    leader keeps on its Lease; with no Lease it plans unpaused and says it could not tell."""
    vm = vmi("vm1")
    objects: dict[str, list[dict[str, Any]]] = {
        "namespaces": [rancher_namespace("ns", V170_LIMIT)],
        "resourcequotas": [managed_quota("ns", V170_HARD)],
        "virtualmachineinstancemigrations": [migration("m", vm)],
        "virtualmachineinstances": [vm],
        "pods": [launcher_pod(vm, "src")],
    }
    unknown = await explain(cast(ApiClient, ReadOnlyCluster(objects)), "ns")
    assert unknown.paused is None and unknown.rooms
    assert any("harvester-system/harvester-quota is not found" in w for w in unknown.warnings)
    lease = {"metadata": {"name": "harvester-quota", "annotations": {ANNOTATION_PAUSED: "true"}}}
    objects["leases"] = [lease]
    found = await explain(cast(ApiClient, ReadOnlyCluster(objects)), "ns")
    assert found.paused == PAUSED_GLOBALLY
    assert all(values["desired"] == values["actual"] for values in found.hard.values())


def test_the_metrics_count_the_switch_and_each_opted_out_namespace() -> None:
    registry = CollectorRegistry()
    metrics = QuotaMetrics(registry)
    metrics.paused.set(1)
    metrics.set_namespace_paused("ns", True)
    assert registry.get_sample_value("harvester_quota_paused") == 1
    labels = {"namespace": "ns"}
    assert registry.get_sample_value("harvester_quota_namespace_paused", labels) == 1
    metrics.forget("ns")
    assert registry.get_sample_value("harvester_quota_namespace_paused", labels) is None


def test_the_leader_lease_carries_the_switch_and_loses_it_when_unpaused() -> None:
    others = {"name": "l", "annotations": {"someone/else": "x"}}
    paused = lease_metadata(others, {ANNOTATION_PAUSED: "true"})
    assert paused["annotations"] == {"someone/else": "x", ANNOTATION_PAUSED: "true"}
    assert lease_metadata(paused, {ANNOTATION_PAUSED: None})["annotations"] == {"someone/else": "x"}
    assert "annotations" not in lease_metadata({"name": "l"}, {ANNOTATION_PAUSED: None})


def test_run_takes_the_switch_as_a_flag() -> None:
    args = build_parser().parse_args(["run", "--paused"])
    assert args.paused is True
    assert build_parser().parse_args(["run"]).paused is False


async def test_a_target_pod_in_an_opted_out_namespace_waits_for_no_raise() -> None:
    """The webhook knows the opt-out label as it knows the skip annotation: a migration's
    target pod that does not fit goes on at once (quota admission then decides), not after
    the target-room wait; the label with another value still waits."""
    clock = FakeClock()
    for value, waits in (("true", False), ("false", True)):
        lookups = FakeLookups(
            quotas={"ns": wait_quota(WAIT_BASE, WAIT_BASE)},
            namespaces={"ns": {"metadata": {"name": "ns", "labels": {LABEL_PAUSED: value}}}},
        )
        task = await admitting(lookups, clock, QuotaChanges(clock))
        assert task.done() != waits, value
        if waits:
            task.cancel()
        else:
            assert task.result().outcome == "no-raise-coming"
