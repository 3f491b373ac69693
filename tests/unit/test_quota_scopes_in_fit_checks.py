"""Quota scopes in every fit check: the room plan, the webhook's pod, VM-start and target checks.

A managed quota scoped to a priority class the launchers do not use charges their pods nothing:
no room is held on it, nothing is raised, nothing of theirs is refused or held by it. A quota
scoped to the launchers' class works as an unscoped one, its floor counting only the pods it
charges. (MTQ's use of scopes is in test_mtq_model.py; the scopes themselves in
test_quotascope.py.)"""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any, cast

import pytest
from harvester_quota.explain import explain, render_text
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.resourcequota.plan import plan_quota
from harvester_quota.webhook.admission import Denied
from harvester_quota.webhook.resources.common import Identities
from harvester_quota.webhook.resources.pod.targets import QuotaChanges, admit_target
from harvester_quota.webhook.resources.virtualmachine.validator import validate_vm_start

from tests.objects import launcher_pod, managed_quota, migration, rancher_namespace, vmi
from tests.unit.test_quota_plan import V170_HARD, V170_LIMIT, snapshot
from tests.unit.test_target_room_wait import KUBEVIRT, LiveQuota, admitting, target
from tests.unit.test_webhook import (
    FakeLookups,
    create_pod,
    plain_pod,
    quota_with,
    request,
    room_held,
    running_vm,
    validate_pod,
    vm_object,
)

ROOM = {"limits.cpu": Quantity.parse("2015m"), "limits.memory": Quantity.parse("4797464313")}


def scoped(quota: dict[str, Any], operator: str, *values: str) -> dict[str, Any]:
    """`quota`, charging only pods its PriorityClass selector picks."""
    expression: dict[str, Any] = {"scopeName": "PriorityClass", "operator": operator}
    if values:
        expression["values"] = list(values)
    scoped_quota = copy.deepcopy(quota)
    scoped_quota["spec"]["scopeSelector"] = {"matchExpressions": [expression]}
    return scoped_quota


def with_class(obj: dict[str, Any], name: str) -> dict[str, Any]:
    obj["spec"]["priorityClassName"] = name
    return obj


def v170_plan(quota: dict[str, Any], *, vm_class: str = "", extra: list[Any] = ()) -> Any:  # type: ignore[assignment]
    """The v1.7.0 seed (a 2-core/4Gi VM migrating in a full namespace) under `quota`."""
    vm = vmi("vm1")
    if vm_class:
        with_class(vm, vm_class)
    source = launcher_pod(vm, "virt-launcher-vm1-src")
    if vm_class:
        with_class(source, vm_class)
    return plan_quota(
        snapshot(
            rancher_namespace("quota-test", V170_LIMIT),
            quota,
            migrations=[migration("vm1-mig", vm)],
            vmis=[vm],
            pods=[source, *extra],
        )
    )


def test_a_quota_for_a_class_the_launcher_does_not_use_is_not_raised() -> None:
    quota = scoped(managed_quota("quota-test", V170_HARD), "In", "batch")
    plan = v170_plan(quota)
    assert plan.managed and not plan.holds_room
    assert {k: Quantity.parse(v) for k, v in plan.hard.items()} == {
        k: Quantity.parse(v) for k, v in V170_HARD.items()
    }, "hard stays the base"


def test_a_quota_for_the_launchers_class_is_raised_by_the_room() -> None:
    quota = scoped(managed_quota("quota-test", V170_HARD), "In", "vm-high")
    plan = v170_plan(quota, vm_class="vm-high")
    assert plan.holds_room
    assert Quantity.parse(plan.hard["limits.cpu"]) == Quantity.parse("3") + ROOM["limits.cpu"]


def test_the_floor_counts_only_the_pods_the_quota_charges() -> None:
    """A batch pod using 4 CPUs is outside a quota for every class but batch: the raise stands
    on the base, not on the 6015m the namespace's pods use in all (unscoped, the floor would be
    that and the quota would be raised to 8030m)."""
    batch = with_class(plain_pod("batch-job", "4", "1Gi"), "batch")
    quota = scoped(managed_quota("quota-test", V170_HARD), "NotIn", "batch")
    plan = v170_plan(quota, extra=[batch])
    assert Quantity.parse(plan.hard["limits.cpu"]) == Quantity.parse("3") + ROOM["limits.cpu"]
    unscoped = v170_plan(managed_quota("quota-test", V170_HARD), extra=[batch])
    assert Quantity.parse(unscoped.hard["limits.cpu"]) == Quantity.parse("8030m")


def test_a_pod_outside_the_quotas_scope_may_be_created_while_room_is_held() -> None:
    lookups = FakeLookups()
    room_held(lookups)
    lookups.quotas["ns"] = scoped(lookups.quotas["ns"], "NotIn", "batch")
    with pytest.raises(Denied):
        validate_pod(create_pod("greedy", "1"), lookups, Identities())
    batch = request("Pod", with_class(plain_pod("job", "1", "1Mi"), "batch"), operation="CREATE")
    validate_pod(batch, lookups, Identities())


def test_the_room_of_a_launcher_outside_the_scope_is_no_room() -> None:
    """The quota charges only batch pods: vm1's migration needs no room on it (the controller
    writes none), so the webhook's room rule does not judge a batch pod (quota admission does)."""
    lookups = FakeLookups()
    running_vm(lookups)
    lookups.migration_list.append(migration("m", lookups.vmi_list[0]))
    base = {"limits.cpu": "3", "limits.memory": "5000Mi"}
    lookups.quotas["ns"] = scoped(quota_with({}, base), "In", "batch")
    job = request("Pod", with_class(plain_pod("job", "4", "1Mi"), "batch"), operation="CREATE")
    validate_pod(job, lookups, Identities())
    lookups.quotas["ns"] = quota_with({}, base)
    with pytest.raises(Denied):
        validate_pod(job, lookups, Identities())


def test_a_vm_whose_launcher_the_quota_does_not_charge_may_start() -> None:
    base = {"limits.cpu": "3", "limits.memory": "5000Mi"}
    lookups = FakeLookups(quotas={"ns": quota_with({"limits.memory": "4Gi"}, base)})
    vm = vm_object("vm9", 2, "4Gi")
    with pytest.raises(Denied):
        validate_vm_start(request("VirtualMachine", vm, operation="CREATE"), lookups)
    lookups.quotas["ns"] = scoped(lookups.quotas["ns"], "In", "batch")
    validate_vm_start(request("VirtualMachine", vm, operation="CREATE"), lookups)


async def test_a_target_pod_the_quota_does_not_charge_is_not_held() -> None:
    clock = FakeClock()
    base = {"limits.cpu": "3", "limits.memory": "5000Mi"}
    full = quota_with({"limits.cpu": "3", "limits.memory": "5000Mi"}, base)
    full["status"]["hard"] = base
    lookups = FakeLookups(quotas={"ns": scoped(full, "In", "batch")})
    admission = await admit_target(
        request("Pod", target(), operation="CREATE", user=KUBEVIRT),
        lookups,
        QuotaChanges(clock),
        clock,
        wait=8.0,
    )
    assert admission.outcome == "fits" and admission.waited == 0


async def test_a_target_pod_the_quota_does_not_charge_is_not_judged_on_the_live_quota() -> None:
    """As deployed the first look also reads the quota live; that read judged the pod on the
    quota's numbers without its scopes, found it short and held it for the next change."""
    clock = FakeClock()
    base = {"limits.cpu": "3", "limits.memory": "5000Mi"}
    full = quota_with({"limits.cpu": "3", "limits.memory": "5000Mi"}, base)
    full["status"]["hard"] = base
    lookups = FakeLookups(quotas={"ns": scoped(full, "In", "batch")})
    live = LiveQuota(lookups.quotas["ns"])
    task = await admitting(lookups, clock, QuotaChanges(clock), live=live)
    assert task.done(), "held for a quota that does not charge it"
    assert task.result().outcome == "fits" and live.reads == 0


class ReadOnlyCluster:
    """The two reads explain makes, over a fixed set of objects by resource plural (a get of
    what is not there: NotFound, as the API server answers)."""

    def __init__(self, objects: dict[str, list[dict[str, Any]]]) -> None:
        self.objects = objects

    async def get(self, resource: Any, name: str, namespace: str | None = None) -> Any:
        for found in self.objects.get(resource.plural, []):
            if found["metadata"]["name"] == name:
                return found
        raise errors.NotFound(f"{resource.plural} {name} not found")

    async def list_all(self, resource: Any, namespace: str | None = None) -> Any:
        return SimpleNamespace(items=list(self.objects.get(resource.plural, [])))


async def test_explain_says_the_quotas_scopes_and_holds_no_room_outside_them() -> None:
    vm = vmi("vm1", "quota-test")
    quota = scoped(managed_quota("quota-test", V170_HARD), "In", "batch")
    cluster = ReadOnlyCluster(
        {
            "namespaces": [rancher_namespace("quota-test", V170_LIMIT)],
            "resourcequotas": [quota],
            "virtualmachineinstancemigrations": [migration("vm1-mig", vm)],
            "virtualmachineinstances": [vm],
            "pods": [launcher_pod(vm, "virt-launcher-vm1-src")],
        }
    )
    found = await explain(cast(ApiClient, cluster), "quota-test", kubevirt_version="1.6")
    assert found.scope == "PriorityClass In (batch)" and found.rooms == []
    assert "scopes: PriorityClass In (batch)" in render_text(found)
