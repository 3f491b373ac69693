"""The floor's shortcut (floor.floor_of) against its full computation (`used_before` below, the
oracle): when no pod arrived since the rooms began, the floor is the usage the plan summed already; in every other
case it is the full sum. Arrivals as main's floor tells them: a decentralized migration's target
pod and a target pod whose migration is gone are arrivals; a target pod of a migration within the
namespace, planned or set aside by planviews.py, replaces a launcher pod and is not."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from harvester_quota.apis.kubevirt import LABEL_MIGRATION_JOB
from harvester_quota.util.quotascope import UNSCOPED, QuotaScope
from harvester_quota.util.resourcequota import plan as plan_module
from harvester_quota.util.resourcequota.plan import QuotaPlan
from harvester_quota.util.resourcequota.podindex import NamespacePods, pod_view
from harvester_quota.util.resourcequota.raises import arrivals, floor_of
from harvester_quota.util.resources import ResourceList
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.objects import launcher_pod, vmi
from tests.unit.test_plan_views import summary
from tests.unit.test_podindex import BATCH_ONLY, NOW, pod
from tests.unit.test_rooms_against_lies import (
    migrated_vm,
    migration_of,
    plan,
    running_vm,
    tenant_pod,
)


def used_before(
    pods: NamespacePods,
    targets: frozenset[str],
    since: str | None,
    now: datetime.datetime,
    scope: QuotaScope = UNSCOPED,
    *,
    replacing: frozenset[str],
) -> ResourceList:
    """The floor summed in full, the oracle `floor_of` must equal: the pods' usage with the
    targets and every arrival (`arrivals`) left out."""
    return pods.used_without(targets | frozenset(arrivals(pods, since, replacing)), now, scope)


def case(name: str) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
    """vm1 migrating (the room period begins with m1 at 10:00) in a namespace over its base, so
    the floor shows in spec.hard, and one pod more by `name`: migrations, VMIs, pods, settled."""
    instance, source = running_vm("vm1")
    over = tenant_pod("over", "9", "2026-01-01T08:00:00Z")
    mig = migration_of("m1", instance)
    migrations, vmis, pods, settled = [mig], [instance], [source, over], []
    if name == "nothing arrived":
        pass
    elif name == "the room's own target":
        target = launcher_pod(instance, "virt-launcher-vm1-dst", migration=mig)
        target["metadata"]["creationTimestamp"] = "2026-01-01T10:00:10Z"
        pods.append(target)
    elif name.startswith("a migrated vm"):
        moved, done, new_home = migrated_vm()
        vmis.append(moved)
        pods.append(new_home)
        if name == "a migrated vm, its migration planned":
            migrations.append(done)
        elif name == "a migrated vm, its migration set aside":
            settled.append(done)
        else:
            assert name == "a migrated vm, its migration deleted"
    elif name.startswith("a decentralized"):
        arriving = vmi("vm2")
        received = migration_of("r1", arriving, "2026-01-01T09:30:00Z")
        side = "sendTo" if "sendTo" in name else "receive"
        received["spec"][side] = {"migrationID": "x", "connectURL": "peer:9185"}
        target = launcher_pod(arriving, "virt-launcher-vm2-dst", migration=received)
        target["metadata"]["creationTimestamp"] = "2026-01-01T10:00:30Z"
        vmis.append(arriving)
        pods.append(target)
        if "set aside" in name:
            received["status"] = {"phase": "Succeeded"}
            settled.append(received)
        elif "deleted" not in name:
            migrations.append(received)
    else:
        assert name == "a tenant pod"
        pods.append(tenant_pod("late", "1", "2026-01-01T10:00:40Z"))
    return migrations, vmis, pods, settled


SHORTCUT = ["nothing arrived", "the room's own target", "a migrated vm, its migration planned"]
SHORTCUT += ["a migrated vm, its migration set aside"]
FULL = ["a migrated vm, its migration deleted", "a decentralized receive"]
FULL += ["a decentralized sendTo", "a decentralized receive, set aside"]
FULL += ["a decentralized receive, deleted", "a tenant pod"]


@pytest.mark.parametrize("name", SHORTCUT + FULL)
def test_the_plans_floor_is_the_full_floor_in_every_case(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each plan's floor_of call gives what used_before gives for the same arguments, the plan
    is the plan of the full computation, and the shortcut is taken exactly where nothing
    arrived (where something did, the full floor differs from the usage: a shortcut that took
    an arrival for a replacing target would fail here)."""
    migrations, vmis, pods, settled = case(name)
    calls: list[tuple[ResourceList, ResourceList, ResourceList]] = []

    def recorded(*args: Any, used: ResourceList, **kwargs: Any) -> ResourceList:
        floor = floor_of(*args, used=used, **kwargs)
        calls.append((floor, used_before(*args, **kwargs), used))
        return floor

    monkeypatch.setattr(plan_module, "floor_of", recorded)
    shortcut = plan(migrations, vmis, pods, settled=settled)
    [(floor, full, used)] = calls
    assert shortcut.holds_room
    assert exact(floor) == exact(full)
    if name in SHORTCUT:
        assert floor is used, "nothing arrived: the usage summed already"
    else:
        assert full != used, "an arrival, left out of the floor"

    def full_only(*args: Any, used: ResourceList, **kwargs: Any) -> ResourceList:
        return used_before(*args, **kwargs)

    monkeypatch.setattr(plan_module, "floor_of", full_only)
    reference: QuotaPlan = plan(migrations, vmis, pods, settled=settled)
    assert summary(shortcut) == summary(reference)


TIMES = ["2026-01-01T08:00:00Z", "2026-01-01T10:00:00Z", "2026-01-01T10:00:30Z"]


@st.composite
def namespaces(draw: st.DrawFn) -> tuple[list[Any], frozenset[str], str | None, frozenset[str]]:
    """Pods created before, at or after the period's start, some being deleted, some of the
    batch priority class, some target pods of migrations `replacing` holds or does not."""
    pods = []
    for i in range(draw(st.integers(0, 7))):
        uid = draw(st.sampled_from([None, "a", "b", "c"]))
        labels = {LABEL_MIGRATION_JOB: uid} if uid else {}
        made = pod(
            f"p{i}",
            cpu=draw(st.sampled_from(["100m", "1", "2500m"])),
            deleted_seconds_ago=draw(st.sampled_from([None, 10, 60])),
            priority_class=draw(st.sampled_from(["", "batch"])),
            **labels,
        )
        made["metadata"]["creationTimestamp"] = draw(st.sampled_from(TIMES))
        pods.append(made)
    names = [p["metadata"]["name"] for p in pods] + ["gone"]
    targets = frozenset(draw(st.lists(st.sampled_from(names), max_size=3)))
    since = draw(st.sampled_from([None, *TIMES]))
    replacing = frozenset(draw(st.lists(st.sampled_from(["a", "b", "c"]), max_size=3)))
    return pods, targets, since, replacing


@settings(max_examples=200, deadline=None)
@given(namespaces(), st.sampled_from([UNSCOPED, BATCH_ONLY]))
def test_the_shortcut_is_the_full_floor_for_any_pods(
    namespace: tuple[list[Any], frozenset[str], str | None, frozenset[str]], scope: QuotaScope
) -> None:
    pods, targets, since, replacing = namespace
    indexed = NamespacePods(pod_view(p) for p in pods)
    used = indexed.used_without(targets, NOW, scope)
    floor = floor_of(indexed, targets, since, NOW, scope, replacing=replacing, used=used)
    full = used_before(indexed, targets, since, NOW, scope, replacing=replacing)
    assert exact(floor) == exact(full)


def exact(resources: ResourceList) -> dict[str, str]:
    """The quantities as written (Quantity's == compares amounts only, not formats)."""
    return {key: str(value) for key, value in resources.items()}
