"""The narrow views a controller plans from (planviews.py) plan exactly what full objects do, and
cost what they promise: one render per VM shape and settings, no reconcile for status noise."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest
from harvester_quota.generic.store import Store
from harvester_quota.generic.views import NamespaceViews
from harvester_quota.util.launcher import LauncherSettings, VmiView
from harvester_quota.util.resourcequota.plan import NamespaceSnapshot, QuotaPlan, plan_quota
from harvester_quota.util.resourcequota.planviews import (
    RenderedUsages,
    migration_plan_view,
    plan_acted_on,
    vmi_facts,
)
from harvester_quota.util.resourcequota.podindex import NamespacePods, pod_view
from harvester_quota.util.resourcequota.rooms import decentralized_side
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.objects import (
    bare_launcher,
    launcher_pod,
    managed_quota,
    migration,
    rancher_namespace,
    vmi,
)
from tests.unit.fakes import upsert

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
SETTINGS = LauncherSettings(ratio="1.5", kubevirt_version="1.6")
V170_LIMIT = {"limitsCpu": "30000m", "limitsMemory": "50000Mi"}
V170_HARD = {"limits.cpu": "30", "limits.memory": "50000Mi"}


class Caches:
    """Migration and VMI stores with the controller's views, as QuotaReconciler keeps them."""

    def __init__(self, migrations: list[dict[str, Any]], vmis: list[dict[str, Any]]) -> None:
        self.changed: list[str] = []
        self.migration_store, self.vmi_store = Store(), Store()
        self.migrations: NamespaceViews[dict[str, Any]] = NamespaceViews(
            self.changed.append, acted_on=plan_acted_on
        )
        self.facts: NamespaceViews[VmiView] = NamespaceViews(self.changed.append)
        self.migration_store.add_view("plan", migration_plan_view, self.migrations.changed)
        self.vmi_store.add_view("plan", vmi_facts, self.facts.changed)
        self.migration_store.replace(copy.deepcopy(migrations))
        self.vmi_store.replace(copy.deepcopy(vmis))
        self.usages = RenderedUsages(self.vmi_store.get)

    def snapshot(self, full: NamespaceSnapshot) -> NamespaceSnapshot:
        return NamespaceSnapshot(
            namespace=full.namespace,
            quota=full.quota,
            migrations=self.migrations.namespace("ns"),
            vmis=self.facts.by_name("ns"),
            pods=full.pods,
            now=full.now,
            launcher=full.launcher,
            usage=self.usages.usage,
        )


def full_snapshot(
    migrations: list[dict[str, Any]], vmis: list[dict[str, Any]], pods: list[dict[str, Any]]
) -> NamespaceSnapshot:
    return NamespaceSnapshot(
        namespace=rancher_namespace("ns", V170_LIMIT),
        quota=managed_quota("ns", V170_HARD),
        migrations=sorted(migrations, key=lambda m: m["metadata"]["name"]),
        vmis={v["metadata"]["name"]: v for v in vmis},
        pods=pods,
        now=NOW,
        launcher=SETTINGS,
    )


def summary(plan: QuotaPlan) -> tuple[Any, ...]:
    rooms = [(r.migration, r.room, r.reason, r.estimated, r.target_pod) for r in plan.rooms.rooms]
    return (plan.hard, plan.annotations, plan.remove_annotations, rooms, plan.used, plan.warnings)


# One VM's migration in each state the plan tells apart.
STATES = (
    "pending",
    "running-with-target",
    "succeeded-source-counts",
    "succeeded-source-gone",
    "succeeded-unrecorded-source-counts",
    "succeeded-unrecorded-source-gone",
    "failed-target-counts",
    "failed-target-gone",
    "vmi-gone",
    "restarted-vm",
)


def one_vm(index: int, state: str) -> tuple[list[Any], list[Any], list[Any]]:
    """(migrations, vmis, pods) of VM `index` in `state`."""
    vm = vmi(f"vm{index}", cores=1 + index % 3, memory=f"{1 + index % 2}Gi")
    source = launcher_pod(vm, f"virt-launcher-vm{index}-src")
    phase = {"running": "Running", "succeeded": "Succeeded", "failed": "Failed"}.get(
        state.split("-", maxsplit=1)[0], "Pending"
    )
    recorded = source["metadata"]["name"] if state.startswith("succeeded-source") else None
    mig = migration(f"m{index}", vm, phase=phase, source_pod=recorded)
    mig["metadata"]["creationTimestamp"] = "2026-01-01T10:00:00Z"
    vm["metadata"]["creationTimestamp"] = "2026-01-01T09:00:00Z"
    pods = [] if state.endswith("source-gone") else [source]
    if state in ("running-with-target", "failed-target-counts") or phase == "Succeeded":
        pods.append(launcher_pod(vm, f"virt-launcher-vm{index}-dst", migration=mig))
    if state == "vmi-gone":
        return [mig], [], pods
    if state == "restarted-vm":
        vm["metadata"]["creationTimestamp"] = "2026-01-01T11:00:00Z"
    return [mig], [vm], pods


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(STATES), min_size=1, max_size=8))
def test_the_views_plan_what_the_full_objects_plan(states: list[str]) -> None:
    migrations, vmis, pods = [], [], []
    for index, state in enumerate(states):
        m, v, p = one_vm(index, state)
        migrations += m
        vmis += v
        pods += p
    full = full_snapshot(migrations, vmis, pods)
    caches = Caches(migrations, vmis)
    assert summary(plan_quota(caches.snapshot(full))) == summary(plan_quota(full))


def test_a_launcher_pod_is_rendered_once_per_vm_shape_and_settings() -> None:
    vmis = [vmi(f"vm{i}", cores=2, memory="4Gi") for i in range(6)]
    vmis.append(vmi("big", cores=8, memory="16Gi"))
    migrations = [migration(f"m-{v['metadata']['name']}", v) for v in vmis]
    full = full_snapshot(
        migrations, vmis, [bare_launcher(v, f"src-{i}") for i, v in enumerate(vmis)]
    )
    caches = Caches(migrations, vmis)
    first = plan_quota(caches.snapshot(full))
    assert caches.usages.renders == 2, "six VMs of one shape and one other"
    again = plan_quota(caches.snapshot(full))
    assert caches.usages.renders == 2 and summary(again) == summary(first)
    other = NamespaceSnapshot(**{**vars(caches.snapshot(full)), "launcher": LauncherSettings()})
    plan_quota(other)
    assert caches.usages.renders == 4, "other settings render again"


def test_a_spec_change_renders_again_and_status_noise_does_not() -> None:
    vm = vmi("vm1", cores=2, memory="4Gi")
    mig = migration("m1", vm)
    caches = Caches([mig], [vm])
    full = full_snapshot([mig], [vm], [bare_launcher(vm, "src")])
    before = plan_quota(caches.snapshot(full)).rooms.rooms[0].room
    caches.changed.clear()
    noisy = copy.deepcopy(vm)
    noisy["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    noisy["metadata"].setdefault("labels", {})["kubevirt.io/nodeName"] = "kwok-node-7"
    noisy["metadata"].setdefault("annotations", {})["harvesterhci.io/migrationState"] = "Migrating"
    upsert(caches.vmi_store, noisy)
    assert caches.changed == [], "the plan reads none of it: no reconcile"
    grown = copy.deepcopy(vm)
    grown["spec"]["domain"]["resources"]["limits"]["memory"] = "8Gi"
    grown["spec"]["domain"]["memory"] = {"guest": "8Gi"}
    upsert(caches.vmi_store, grown)
    assert caches.changed == ["ns"]
    grown_full = full_snapshot([mig], [grown], [bare_launcher(grown, "src")])
    after = plan_quota(caches.snapshot(grown_full)).rooms.rooms[0].room
    assert after["limits.memory"] > before["limits.memory"]


def test_migration_status_noise_and_steps_under_way_queue_nothing_and_an_end_does() -> None:
    """KubeVirt's status noise queues nothing, nor do its steps between Pending and a final
    phase (the view stored still shows the exact phase); Succeeded and a delete do."""
    vm = vmi("vm1")
    mig = migration("m1", vm, phase="Scheduling")
    caches = Caches([mig], [vm])
    caches.changed.clear()
    noisy = copy.deepcopy(mig)
    noisy["metadata"]["resourceVersion"] = "77"
    noisy["status"]["phaseTransitionTimestamps"] = [{"phase": "Scheduling"}]
    noisy["status"]["migrationState"] = {"targetNode": "kwok-node-2"}
    upsert(caches.migration_store, noisy)
    assert caches.changed == []
    for phase in ("Scheduled", "PreparingTarget", "TargetReady", "Running"):
        noisy["status"]["phase"] = phase
        upsert(caches.migration_store, copy.deepcopy(noisy))
    assert caches.changed == []
    assert caches.migrations.namespace("ns")[0]["status"]["phase"] == "Running"
    noisy["status"]["phase"] = "Succeeded"
    upsert(caches.migration_store, copy.deepcopy(noisy))
    assert caches.changed == ["ns"]
    caches.migration_store.delete("ns/m1")
    assert caches.changed == ["ns", "ns"] and caches.migrations.namespace("ns") == []


UNDER_WAY_PHASES = (
    "Scheduling",
    "Scheduled",
    "PreparingTarget",
    "TargetReady",
    "Running",
    "WaitingForSync",
    "Synchronizing",
)


def plan_outputs(plan: QuotaPlan) -> tuple[Any, ...]:
    """Everything a reconcile does with a plan: what it writes, holds, waits for and says."""
    return (*summary(plan), plan.holds_room, plan.gathers, plan.requeue_after, plan.skipped)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.sampled_from(STATES), min_size=1, max_size=6),
    st.lists(st.sampled_from(UNDER_WAY_PHASES), min_size=6, max_size=6),
    st.booleans(),
)
def test_a_plan_is_the_same_whichever_step_under_way_each_migration_is_at(
    states: list[str], phases: list[str], decentralized: bool
) -> None:
    """What the views' `plan_acted_on` leaves out is what the plan never reads apart: each
    migration under way (with or without its target pod, decentralized or not) moved to any
    other step between Pending and a final phase plans the same writes, rooms, holds and
    waits. So the steps a view change no longer queues could not have changed a plan."""
    migrations, vmis, pods = [], [], []
    for index, state in enumerate(states):
        m, v, p = one_vm(index, state)
        if state == "running-with-target" and index % 2:
            p = [pod for pod in p if not pod["metadata"]["name"].endswith("-dst")]
        if decentralized:
            for each in m:
                each["spec"]["receive"] = {"migrationID": "x"}
        migrations += m
        vmis += v
        pods += p
    baseline = plan_outputs(plan_quota(full_snapshot(migrations, vmis, pods)))
    moved = copy.deepcopy(migrations)
    for index, each in enumerate(moved):
        if each["status"]["phase"] == "Running":
            each["status"]["phase"] = phases[index % len(phases)]
            assert plan_acted_on(migration_plan_view(each)) == plan_acted_on(
                migration_plan_view(migrations[index])
            )
    assert plan_outputs(plan_quota(full_snapshot(moved, vmis, pods))) == baseline


KUBEVIRT_STEPS = ("", "Pending", *UNDER_WAY_PHASES[:5], "Succeeded")
"""A migration's phases in the order virt-controller writes them ("": none yet; the steps
under way of a migration that is not decentralized)."""


def plan_writes(plan: QuotaPlan) -> tuple[Any, ...]:
    """`plan_outputs` without each room's reason ("pending" or "migrating"): the only part of a
    plan that reads a phase step apart, shown only in the log line and Event of a write, which
    reads the view stored (the exact phase) when it happens."""
    rooms = [(r.migration, r.room, r.estimated, r.target_pod) for r in plan.rooms.rooms]
    outputs = plan_outputs(plan)
    return (*outputs[:3], rooms, *outputs[4:])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.sampled_from(STATES), max_size=4),
    st.integers(min_value=0, max_value=len(KUBEVIRT_STEPS)),
    st.booleans(),
    st.booleans(),
)
def test_each_step_of_a_migration_plans_from_the_views_what_the_objects_plan(
    others: list[str], target_at: int, target_runs: bool, source_recorded: bool
) -> None:
    """A migration walked through KubeVirt's steps, its target pod appearing at any step or
    never, running or not, among other migrations in any state: at every step the plan from the
    controller's views is the plan from the full objects (a view that dropped a field the plan
    reads fails here), and a step that queues no plan plans the same writes as the step before
    it (a view or `plan_acted_on` that hid a change the plan acts on fails here)."""
    migrations, vmis, pods = [], [], []
    for index, state in enumerate(others, start=1):
        m, v, p = one_vm(index, state)
        migrations += m
        vmis += v
        pods += p
    vm = vmi("vm0", cores=2, memory="4Gi")
    vm["metadata"]["creationTimestamp"] = "2026-01-01T09:00:00Z"
    source = launcher_pod(vm, "virt-launcher-vm0-src")
    mig = migration("m0", vm, phase="")
    mig["metadata"]["creationTimestamp"] = "2026-01-01T10:00:00Z"
    del mig["status"]["phase"]
    caches = Caches(migrations, [*vmis, vm])
    before = None
    for index, phase in enumerate(KUBEVIRT_STEPS):
        step = copy.deepcopy(mig)
        if phase:
            step["status"]["phase"] = phase
        if source_recorded and phase:
            step["status"]["migrationState"] = {"sourcePod": source["metadata"]["name"]}
        caches.changed.clear()
        upsert(caches.migration_store, step)
        at_step = [*pods, source]
        if index >= target_at:
            target_phase = "Running" if target_runs else "Pending"
            at_step.append(
                launcher_pod(vm, "virt-launcher-vm0-dst", migration=mig, phase=target_phase)
            )
        full = full_snapshot([*migrations, step], [*vmis, vm], at_step)
        plan = plan_quota(caches.snapshot(full))
        assert summary(plan) == summary(plan_quota(full)), phase
        if not caches.changed and index != target_at:
            assert before is not None and plan_writes(plan) == plan_writes(before), phase
        before = plan


@pytest.mark.parametrize("phase", ["", "Pending", "Scheduling", "TargetReady", "Running"])
@pytest.mark.parametrize("side", ["sendTo", "receive"])
def test_the_view_keeps_which_side_of_a_decentralized_migration_it_is(
    phase: str, side: str
) -> None:
    """The view kept only spec.vmiName, so the controller planned a sending side as holding
    room and a receiving side as an ordinary migration: the views plan what full objects do."""
    vm = vmi("vm1")
    mig = migration("m1", vm, phase=phase)
    mig["spec"][side] = {"migrationID": "x", "connectURL": "peer:9185"}
    pods = [] if side == "receive" else [bare_launcher(vm, "src")]
    full = full_snapshot([mig], [vm], pods)
    caches = Caches([mig], [vm])
    view = caches.migrations.namespace("ns")[0]
    assert decentralized_side(view) == decentralized_side(mig) is not None
    assert summary(plan_quota(caches.snapshot(full))) == summary(plan_quota(full))


def test_a_null_side_is_not_a_decentralized_migration_in_the_view() -> None:
    vm = vmi("vm1")
    mig = migration("m1", vm, phase="Running")
    mig["spec"]["sendTo"] = None
    assert decentralized_side(migration_plan_view(mig)) is None


def test_a_migration_view_keeps_what_events_and_refusals_need_and_no_source_pod() -> None:
    """The source pod KubeVirt records is not kept: no reader reads it (rooms find pods by
    their labels), and KubeVirt writes it with Pending, which then queues no plan."""
    mig = migration("m1", vmi("vm1"), rejected=True, source_pod="src")
    view = migration_plan_view(mig)
    assert view["kind"] == "VirtualMachineInstanceMigration"
    assert view["metadata"]["uid"] == mig["metadata"]["uid"]
    assert view["status"]["conditions"] == [
        {"type": "migrationRejectedByResourceQuota", "status": "True"}
    ]
    assert "migrationState" not in view["status"]
    assert "labels" not in view["metadata"]


def test_a_malformed_vmi_gets_facts_and_its_error_at_planning() -> None:
    vm = vmi("vm1")
    vm["spec"]["domain"]["resources"]["limits"]["memory"] = "lots"
    mig = migration("m1", vm)
    caches = Caches([mig], [vm])
    plan = plan_quota(caches.snapshot(full_snapshot([mig], [vm], [bare_launcher(vm, "src")])))
    assert any("cannot size the room of migration m1" in w for w in plan.warnings)


def test_namespace_views_forget_an_empty_namespace() -> None:
    changed: list[str] = []
    views: NamespaceViews[int] = NamespaceViews(changed.append)
    assert views.changed("a/x", 1) and views.changed("a/y", 2)
    assert not views.changed("a/x", 1), "an equal view changes nothing"
    assert views.namespace("a") == [1, 2] and dict(views.by_name("a")) == {"x": 1, "y": 2}
    assert views.changed("a/x", None) and views.changed("a/y", None)
    assert not views.changed("a/y", None)
    assert views.namespace("a") == [] and views.get("a", "x") is None
    assert changed == ["a", "a", "a", "a"]


def test_a_finished_migration_is_decided_without_reading_its_vmi() -> None:
    """A namespace keeps its finished migrations (KubeVirt keeps about 250 in a busy one): a
    plan reads the VMI only of those still holding room, or that need it to tell, and then
    once (a succeeded one that did not record its source pod needs it three times)."""
    from collections.abc import Iterator, Mapping

    class CountingVmis(Mapping[str, Any]):
        def __init__(self, vmis: dict[str, Any]) -> None:
            self.vmis, self.read = vmis, []

        def __getitem__(self, name: str) -> Any:
            self.read.append(name)
            return self.vmis[name]

        def __iter__(self) -> Iterator[str]:
            return iter(self.vmis)

        def __len__(self) -> int:
            return len(self.vmis)

    migrations, vmis, pods = [], [], []
    states = ["succeeded-source-gone", "failed-target-gone", "pending", "succeeded"]
    for index, state in enumerate(states):
        m, v, p = one_vm(index, state)
        migrations, vmis, pods = migrations + m, vmis + v, pods + p
    full = full_snapshot(migrations, vmis, pods)
    counting = CountingVmis(dict(full.vmis))
    plan = plan_quota(NamespaceSnapshot(**{**vars(full), "vmis": counting}))
    assert [r.vm_name for r in plan.rooms.rooms] == ["vm2", "vm3"]
    assert counting.read == ["vm2", "vm3"]


class CountingPods(NamespacePods):
    """NamespacePods that count the sums of the namespace a plan asks for."""

    sums = 0

    def used_without(self, *args: Any, **kwargs: Any) -> Any:
        self.sums += 1
        return super().used_without(*args, **kwargs)


def test_a_plan_holding_room_sums_the_namespace_once_unless_pods_arrived_since() -> None:
    """The floor is the usage without the pods created since the rooms began; with none such
    it is the usage itself, which the plan summed already (issue 30, item 3: each sum copies
    the namespace's tally)."""
    vm = vmi("vm1")
    vm["metadata"]["creationTimestamp"] = "2026-01-01T09:00:00Z"
    mig = migration("m1", vm, phase="Running")
    mig["metadata"]["creationTimestamp"] = "2026-01-01T10:00:00Z"
    pods = [launcher_pod(vm, "src"), launcher_pod(vm, "dst", migration=mig)]
    counting = CountingPods(pod_view(pod) for pod in pods)
    full = full_snapshot([mig], [vm], pods)
    plan = plan_quota(NamespaceSnapshot(**{**vars(full), "pods": counting}))
    assert plan.holds_room and counting.sums == 1
    arrived = bare_launcher(vmi("vm2"), "arrived")
    arrived["metadata"]["creationTimestamp"] = "2026-01-01T10:00:05Z"
    counting.put(pod_view(arrived))
    with_arrival = plan_quota(NamespaceSnapshot(**{**vars(full), "pods": counting}))
    assert counting.sums == 3, "the floor leaves the arrival out: a second sum"
    assert with_arrival.used["limits.cpu"] > plan.used["limits.cpu"]
    assert with_arrival.hard == plan.hard, "no raise follows the arrival"


def test_namespace_views_store_a_change_outside_acted_on_without_telling_it() -> None:
    told: list[str] = []
    views: NamespaceViews[dict[str, int]] = NamespaceViews(
        told.append, acted_on=lambda v: v["acted"]
    )
    assert views.changed("ns/a", {"acted": 1, "noise": 1})
    assert views.changed("ns/a", {"acted": 1, "noise": 2}), "the listing changed"
    assert told == ["ns"] and views.get("ns", "a") == {"acted": 1, "noise": 2}
    assert views.changed("ns/a", {"acted": 2, "noise": 2})
    assert not views.changed("ns/a", {"acted": 2, "noise": 2})
    views.changed("ns/a", None)
    assert told == ["ns", "ns", "ns"]
