"""Scarce MTQ budget goes to migrations in KubeVirt's priority order, and explain shows each
migration's priority: util/mtq.py `prioritized`,
util/migrationpriority.py."""

from __future__ import annotations

from typing import cast

from harvester_quota.apis.mtq import Vmmrq
from harvester_quota.explain import explain, render_text
from harvester_quota.generic.client import ApiClient
from harvester_quota.preflight.report import render_text as render_preflight
from harvester_quota.util.kubevirtversion import parse_kubevirt_version
from harvester_quota.util.migrationpriority import (
    DEFAULT,
    PRIORITIES,
    SYSTEM_CRITICAL,
    evacuation_priority,
    migration_priority,
    priority_name,
)
from harvester_quota.util.mtq import Blocked, QuotaView, plan_namespace, quota_view

from tests.objects import launcher_pod, managed_quota, migration, rancher_namespace, vmi
from tests.unit.test_quota_plan import V170_HARD, V170_LIMIT
from tests.unit.test_quota_scopes_in_fit_checks import ReadOnlyCluster

from .test_mtq_model import POD, quota, vmmrq
from .test_preflight import drain, only_vm, running, state

EVACUATION = PRIORITIES[SYSTEM_CRITICAL]


def one_pod_of_budget() -> tuple[Vmmrq, list[QuotaView]]:
    """A full quota and a budget that lets exactly one more target pod (POD) in."""
    full = quota_view(
        quota("q", {"requests.memory": "2Gi", "requests.cpu": "1"}, {"requests.memory": "2Gi"})
    )
    return vmmrq({"requests.memory": "1Gi", "requests.cpu": "500m"}), [full]


def test_an_evacuation_takes_a_budget_for_one_before_an_older_user_migration() -> None:
    budget, quotas = one_pod_of_budget()
    user = Blocked("user", "uid-user", POD, created="2026-11-26T10:00:00Z")
    evacuation = Blocked(
        "kubevirt-evacuation-x",
        "uid-evac",
        POD,
        priority=EVACUATION,
        created="2026-11-26T10:05:00Z",
    )
    plan = plan_namespace(budget, [user, evacuation], quotas)
    assert plan.uids == {"uid-evac": "kubevirt-evacuation-x"}, "only the evacuation's target in"
    assert plan.waiting == {"user": ("kubevirt-evacuation-x",)}
    assert "user" not in plan.migrations and not plan.refused


def test_among_equals_nothing_changes_each_is_judged_alone_as_mtq_does() -> None:
    budget, quotas = one_pod_of_budget()
    first = Blocked("a", "uid-a", POD, created="2026-11-26T10:00:00Z")
    second = Blocked("b", "uid-b", POD, created="2026-11-26T10:05:00Z")
    plan = plan_namespace(budget, [first, second], quotas)
    assert plan.uids == {"uid-a": "a", "uid-b": "b"} and not plan.waiting


def test_a_budget_for_both_releases_both_whatever_their_priorities() -> None:
    full = quota_view(quota("q", {"requests.memory": "2Gi"}, {"requests.memory": "2Gi"}))
    user = Blocked("user", "uid-user", POD)
    evacuation = Blocked("evac", "uid-evac", POD, priority=EVACUATION)
    plan = plan_namespace(vmmrq({"requests.memory": "2Gi"}), [user, evacuation], [full])
    assert set(plan.uids.values()) == {"user", "evac"} and not plan.waiting


def test_the_priority_is_kubevirts_spec_priority_and_nothing_else() -> None:
    """A tenant's label or annotation naming a priority changes nothing: only spec.priority,
    which virt-api and the chart's policy keep to KubeVirt's own account, is read."""
    forged = {
        "metadata": {
            "labels": {"priority": SYSTEM_CRITICAL},
            "annotations": {"kubevirt.io/priority": SYSTEM_CRITICAL},
        },
        "spec": {"vmiName": "vm"},
    }
    assert migration_priority(forged) == DEFAULT
    assert migration_priority({"spec": {"priority": SYSTEM_CRITICAL}}) == EVACUATION
    assert migration_priority({"spec": {"priority": "urgent-please"}}) == DEFAULT
    assert migration_priority({"spec": {"priority": ["system-critical"]}}) == DEFAULT
    assert migration_priority({"spec": "not a mapping"}) == DEFAULT
    assert priority_name(EVACUATION) == SYSTEM_CRITICAL and priority_name(DEFAULT) == "default"


async def test_explain_shows_each_migrations_kubevirt_priority() -> None:
    vm1, vm2 = vmi("vm1", "ns"), vmi("vm2", "ns")
    evacuation = migration("kubevirt-evacuation-a", vm1)
    evacuation["spec"]["priority"] = SYSTEM_CRITICAL
    cluster = ReadOnlyCluster(
        {
            "namespaces": [rancher_namespace("ns", V170_LIMIT)],
            "resourcequotas": [managed_quota("ns", V170_HARD)],
            "virtualmachineinstancemigrations": [evacuation, migration("mine", vm2)],
            "virtualmachineinstances": [vm1, vm2],
            "pods": [
                launcher_pod(vm1, "virt-launcher-vm1"),
                launcher_pod(vm2, "virt-launcher-vm2"),
            ],
        }
    )
    found = await explain(cast(ApiClient, cluster), "ns", kubevirt_version="1.6")
    assert {r["migration"]: r["priority"] for r in found.rooms} == {
        "kubevirt-evacuation-a": SYSTEM_CRITICAL,
        "mine": "default",
    }
    assert "priority system-critical)" in render_text(found)


def test_a_drains_migration_is_system_critical_where_kubevirts_priority_queue_is_on() -> None:
    v16, v17, v18, v19 = (parse_kubevirt_version(v) for v in ("1.6", "1.7", "1.8", "1.9"))
    assert evacuation_priority(v16, {"MigrationPriorityQueue"}) == "default", "no such gate"
    assert evacuation_priority(v17, set()) == "default", "Alpha: off unless listed"
    assert evacuation_priority(v17, {"MigrationPriorityQueue"}) == SYSTEM_CRITICAL
    assert evacuation_priority(v18, set()) == "default", "Beta in v1.8: still off unless listed"
    assert evacuation_priority(v19, set()) == SYSTEM_CRITICAL, "GA: on whatever the CR says"


def test_preflight_shows_the_priority_of_each_evacuation() -> None:
    instance, pod = running("vm1")
    cluster = state([instance], [pod])
    cluster.kubevirt_version = "1.9"
    report = drain(cluster)
    assert only_vm(report).migration_priority == SYSTEM_CRITICAL
    assert "ns/vm1 -> n2 (" in render_preflight(report) and "priority system-critical)" in (
        render_preflight(report)
    )
    cluster.kubevirt_version = "1.6"
    assert only_vm(drain(cluster)).migration_priority == "default"
