"""What the room mode's plans read (controller/resourcequota/planner.py) on a real informer factory
that never connects: which changes queue a namespace, and what is derived once per change."""

from __future__ import annotations

import copy
from typing import Any, cast

from harvester_quota.apis.kubevirt import is_finished
from harvester_quota.app import ControllerApp
from harvester_quota.config.management import Management, Options
from harvester_quota.controller.resourcequota.planner import PlanInputs
from harvester_quota.controller.resourcequota.planqueue import (
    RANCHER_SOON_WINDOW,
    SOON_WINDOW,
    quota_may_wait,
)
from harvester_quota.controller.resourcequota.resourcequota_controller import QuotaReconciler
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.config import ClientConfig
from harvester_quota.generic.pendingwrites import PendingWrites
from harvester_quota.generic.store import Store
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.util.annotations import migrating_uid_annotation_key
from harvester_quota.util.resourcequota.base import ANNOTATION_RANCHER_BASE
from prometheus_client import CollectorRegistry

from tests.objects import (
    launcher_pod,
    managed_quota,
    migration,
    plain_namespace,
    rancher_namespace,
    vmi,
)
from tests.unit.fakes import upsert


def inputs() -> tuple[PlanInputs, list[str]]:
    """PlanInputs on a Management whose client is never used, and the namespaces it queued."""
    client = ApiClient(ClientConfig(host="https://127.0.0.1:1", ssl_context=False))
    management = Management(
        client=client, options=Options(), clock=FakeClock(), registry=CollectorRegistry()
    )
    queued: list[str] = []
    plan_inputs = PlanInputs(management, queued.append)
    with_managed_quotas(plan_inputs, "ns")
    return plan_inputs, queued


def with_managed_quotas(plan_inputs: PlanInputs, *namespaces: str) -> None:
    """Caches a managed quota in each of `namespaces`: only their changes are planned."""
    for namespace in namespaces:
        upsert(plan_inputs.informers.quotas.store, managed_quota(namespace, {"limits.cpu": "4"}))


def kubevirt(ratio: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": "kubevirt", "resourceVersion": "1"},
        "spec": {"configuration": {"additionalGuestMemoryOverheadRatio": ratio}},
        "status": {"observedKubeVirtVersion": "v1.6.0"},
    }


def test_a_migration_queues_its_namespace_at_each_phase_class_and_each_refusal() -> None:
    """The migration's first sight, a refusal set and cleared and the end each queue;
    KubeVirt's steps before the end (Pending, Scheduling, PreparingTarget, TargetReady,
    Running) do not: no plan reads them apart (planviews.plan_acted_on)."""
    plan_inputs, queued = inputs()
    store = plan_inputs.informers.migrations.store
    vm = vmi("vm1")
    mig = migration("m1", vm, phase="Pending")
    steps: list[tuple[str, bool]] = [
        ("Pending", False),
        ("Pending", True),
        ("Pending", False),
        ("Scheduling", False),
        ("PreparingTarget", False),
        ("TargetReady", False),
        ("Running", False),
        ("Succeeded", False),
    ]
    queues = [True, True, True, False, False, False, False, True]
    seen = []
    for phase, rejected in steps:
        step = copy.deepcopy(mig)
        step["status"]["phase"] = phase
        if rejected:
            step["status"]["conditions"] = [
                {"type": "migrationRejectedByResourceQuota", "status": "True"}
            ]
        before = len(queued)
        upsert(store, step)
        seen.append(len(queued) > before)
    assert seen == queues
    assert plan_inputs.refusals.settle("ns").new_refusals == 1
    store.delete("ns/m1")
    assert queued[-1] == "ns" and len(queued) == sum(queues) + 1


def test_a_pod_whose_view_is_unchanged_queues_nothing() -> None:
    plan_inputs, queued = inputs()
    store = plan_inputs.informers.pods.store
    pod = launcher_pod(vmi("vm1"), "virt-launcher-vm1", phase="Pending")
    upsert(store, copy.deepcopy(pod))
    assert queued == ["ns"]
    pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    upsert(store, copy.deepcopy(pod))
    assert queued == ["ns"]
    pod["status"]["phase"] = "Running"
    upsert(store, copy.deepcopy(pod))
    assert queued == ["ns", "ns"]


def test_a_namespace_is_planned_by_its_workloads_only_while_it_has_a_managed_quota() -> None:
    """A namespace without a managed quota has no plan, so its migrations, VMIs and pods queue
    nothing, and its quota refusals are not exported: none at all, one without the managed
    label, one created being deleted. Once a managed quota is cached each of the three queues
    it, and no longer once that quota is being deleted or has gone."""
    plan_inputs, queued = routed_inputs()
    quotas = plan_inputs.informers.quotas.store
    steps = iter(range(1, 100))

    def workloads_change() -> set[str]:
        """A VMI reshaped, its launcher pod's step and its migration refused, each alone: which
        of the three queued namespace other."""
        step = next(steps)
        plan_inputs.informers.migrations.store.delete("other/m1")  # refused anew below
        vm = vmi("vm1", namespace="other", cores=1 + step)
        mig = at("Pending", migration("m1", vm, uid="u1"), rejected=True)
        mig["metadata"]["resourceVersion"] = str(step)
        pod = launcher_pod(vm, "virt-launcher-vm1", phase="Running" if step % 2 else "Pending")
        pod["metadata"]["resourceVersion"] = str(step)
        queuing = set()
        for what, store, obj in (
            ("migration", plan_inputs.informers.migrations.store, mig),
            ("vmi", plan_inputs.informers.vmis.store, vm),
            ("pod", plan_inputs.informers.pods.store, pod),
        ):
            before = len(queued)
            upsert(store, obj)
            if "other" in (ns for _, ns in queued[before:]):
                queuing.add(what)
        return queuing

    def refusals_noted() -> int:
        return len(plan_inputs.refusals.standing_since())

    assert workloads_change() == set() and refusals_noted() == 0, "no quota at all"
    unlabelled = managed_quota("other", {"limits.cpu": "4"})
    unlabelled["metadata"]["labels"] = {}
    upsert(quotas, unlabelled)
    assert workloads_change() == set() and refusals_noted() == 0, "a quota not managed"
    deleting = managed_quota("other", {"limits.cpu": "4"}, name="deleting")
    deleting["metadata"]["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    upsert(quotas, deleting)
    assert workloads_change() == set() and refusals_noted() == 0, "a quota being deleted"
    labelled = managed_quota("other", {"limits.cpu": "4"}, name="managed")
    upsert(quotas, labelled)
    assert workloads_change() == {"migration", "vmi", "pod"}, "a managed quota"
    assert refusals_noted() == 1
    labelled["metadata"]["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    labelled["metadata"]["resourceVersion"] = "2"
    upsert(quotas, labelled)
    assert workloads_change() == set(), "its quota being deleted: nothing again"
    quotas.delete("other/managed")
    assert workloads_change() == set(), "its quota gone: nothing again"


def test_a_cluster_wide_setting_queues_every_namespace_with_a_managed_quota_and_no_other() -> None:
    """The KubeVirt CR or Harvester's setting sizes every room: its change names each namespace
    with a managed quota once, and none whose quota is unlabelled or being deleted."""
    plan_inputs, _queued = routed_inputs()
    quotas = plan_inputs.informers.quotas.store
    upsert(quotas, managed_quota("ns", {"limits.cpu": "4"}, name="second"))
    upsert(quotas, managed_quota("b", {"limits.cpu": "4"}))
    unlabelled = managed_quota("c", {"limits.cpu": "4"})
    unlabelled["metadata"]["labels"] = {}
    upsert(quotas, unlabelled)
    deleting = managed_quota("d", {"limits.cpu": "4"})
    deleting["metadata"]["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    upsert(quotas, deleting)
    assert plan_inputs.managed_namespaces(kubevirt("2")) == ["b", "ns"]


def test_mtq_modes_namespaces_are_queued_by_their_workloads_without_a_managed_quota() -> None:
    """MTQ mode's handler runs on the same namespaces controller and sizes a blocked target
    from the VMI, which it does not watch: a namespace `also_queued` names (MTQ's, as the
    controller wires it) is queued by its workloads without a managed quota, and its refusals
    are still not exported (not the room mode's to count)."""
    app = ControllerApp(
        cast(ApiClient, object()), Options(), clock=FakeClock(), registry=CollectorRegistry()
    )
    assert app.mtq is not None
    assert app.reconciler.inputs.also_queued == app.mtq.has_budget
    plan_inputs, queued = routed_inputs()
    plan_inputs.also_queued = lambda namespace: namespace == "mtq"
    vm = vmi("vm1", namespace="mtq")
    upsert(
        plan_inputs.informers.migrations.store, at("Pending", migration("m1", vm), rejected=True)
    )
    upsert(plan_inputs.informers.vmis.store, vm)
    upsert(plan_inputs.informers.pods.store, launcher_pod(vm, "virt-launcher-vm1"))
    upsert(plan_inputs.informers.vmis.store, vmi("other-vm", namespace="elsewhere"))
    assert queued == [("now", "mtq"), ("now", "mtq"), ("now", "mtq")]
    upsert(plan_inputs.informers.quotas.store, managed_quota("mtq", {"limits.cpu": "4"}))
    assert plan_inputs.refusals.standing_since() == {}, "not with a managed quota either"


def test_a_refusal_cached_before_its_namespaces_quota_is_exported_once_the_quota_is() -> None:
    """At a start the migrations may be listed before the quotas: a block standing then is
    noted all the same, and exported (the block alert's gauge) once the managed quota is
    cached, with the moment virt-controller refused it."""
    plan_inputs, _queued = routed_inputs()
    refused = at("Pending", migration("m1", vmi("vm1", namespace="late")), rejected=True)
    refused["status"]["conditions"][0]["lastProbeTime"] = "2025-12-31T23:00:00Z"
    upsert(plan_inputs.informers.migrations.store, refused)
    assert plan_inputs.refusals.standing_since() == {}
    upsert(plan_inputs.informers.quotas.store, managed_quota("late", {"limits.cpu": "4"}))
    assert plan_inputs.refusals.standing_since() == {"late": 1767222000.0}


def test_the_cluster_settings_are_derived_again_only_when_their_objects_change() -> None:
    plan_inputs, _queued = inputs()
    store = plan_inputs.informers.kubevirts.store
    upsert(store, kubevirt("1.5"))
    first = plan_inputs.cluster_settings()
    assert first == plan_inputs.informers.kubevirt_settings() and first.ratio == "1.5"
    assert plan_inputs.cluster_settings() is first, "kept while nothing changed"
    upsert(store, kubevirt("2"))
    assert plan_inputs.cluster_settings().ratio == "2"
    store.delete("kubevirt/kubevirt")
    assert plan_inputs.cluster_settings() == plan_inputs.informers.kubevirt_settings()
    assert plan_inputs.cluster_settings().ratio != "2", "derived again after the delete"


def test_a_relist_of_the_kubevirt_cr_derives_the_settings_again() -> None:
    """A watch that expired is followed by a relist (store.replace): the cached settings must
    follow it like an upsert."""
    plan_inputs, _queued = inputs()
    store = plan_inputs.informers.kubevirts.store
    upsert(store, kubevirt("1.5"))
    assert plan_inputs.cluster_settings().ratio == "1.5"
    store.replace([kubevirt("2.5")])
    assert plan_inputs.cluster_settings().ratio == "2.5"
    store.replace([])
    assert plan_inputs.cluster_settings() == plan_inputs.informers.kubevirt_settings()


def harvester_setting(value: str) -> dict[str, Any]:
    return {
        "apiVersion": "harvesterhci.io/v1beta1",
        "kind": "Setting",
        "metadata": {"name": "additional-guest-memory-overhead-ratio", "resourceVersion": "1"},
        "value": value,
    }


def test_without_a_kubevirt_cr_the_settings_follow_harvesters_setting_as_it_changes() -> None:
    """The derived settings are dropped on a change of Harvester's setting too, not only of the
    KubeVirt CR (a cluster where the CR is not visible reads the ratio from the setting)."""
    plan_inputs, _queued = inputs()
    store = plan_inputs.informers.settings.store
    upsert(store, harvester_setting("2"))
    first = plan_inputs.cluster_settings().ratio
    upsert(store, {**harvester_setting("3"), "metadata": {**harvester_setting("3")["metadata"]}})
    assert first == "2"
    assert plan_inputs.cluster_settings().ratio == "3"
    assert plan_inputs.cluster_settings() == plan_inputs.informers.kubevirt_settings()


def routed_inputs() -> tuple[PlanInputs, list[tuple[str, str]]]:
    """PlanInputs whose two queues (at once, soon) record into one list, in order."""
    client = ApiClient(ClientConfig(host="https://127.0.0.1:1", ssl_context=False))
    management = Management(
        client=client, options=Options(), clock=FakeClock(), registry=CollectorRegistry()
    )
    queued: list[tuple[str, str]] = []
    plan_inputs = PlanInputs(
        management,
        lambda ns: queued.append(("now", ns)),
        lambda ns: queued.append(("soon", ns)),
    )
    with_managed_quotas(plan_inputs, "ns")
    return plan_inputs, queued


def at(phase: str, mig: dict[str, Any], *, rejected: bool = False) -> dict[str, Any]:
    step = copy.deepcopy(mig)
    step["status"]["phase"] = phase
    if rejected:
        step["status"]["conditions"] = [
            {"type": "migrationRejectedByResourceQuota", "status": "True"}
        ]
    return step


def test_a_migration_not_finished_is_planned_at_once_and_its_end_and_removal_soon() -> None:
    """Its arrival and a quota refusal's start and end may make room a target pod waits for; its
    end and removal with no other migration of its VMI waiting can only give room back."""
    plan_inputs, queued = routed_inputs()
    migrations = plan_inputs.informers.migrations.store
    mig = migration("m1", vmi("vm1"), phase="Pending")
    for step in (mig, at("Pending", mig, rejected=True), at("Pending", mig)):
        upsert(migrations, step)
    assert queued == [("now", "ns")] * 3
    upsert(migrations, at("Succeeded", mig))
    migrations.delete("ns/m1")
    assert queued[3:] == [("soon", "ns")] * 2


def test_a_migrations_end_is_planned_at_once_while_another_of_its_vmi_waits() -> None:
    """A VMI's next migration may hold room only once the earlier one stops: that end can
    raise. Another VMI's waiting migration does not make this one's end urgent."""
    plan_inputs, queued = routed_inputs()
    migrations = plan_inputs.informers.migrations.store
    first = migration("m1", vmi("vm1"), phase="Running", uid="u1")
    upsert(migrations, first)
    upsert(migrations, migration("other", vmi("vm2"), phase="Pending", uid="u2"))
    upsert(migrations, at("Failed", first))
    assert queued[-1] == ("soon", "ns"), "only another VMI's migration waits"
    upsert(migrations, migration("m2", vmi("vm1"), phase="Pending", uid="u3"))
    upsert(migrations, at("Running", first))
    upsert(migrations, at("Failed", first))
    assert queued[-1] == ("now", "ns"), "m2 of the same VMI waits for m1's end"
    migrations.delete("ns/m1")
    assert queued[-1] == ("now", "ns"), "and for its removal"


def test_a_vmi_change_is_planned_at_once_only_while_a_migration_of_it_is_not_finished() -> None:
    plan_inputs, queued = routed_inputs()
    vmis, migrations = plan_inputs.informers.vmis.store, plan_inputs.informers.migrations.store
    upsert(vmis, vmi("vm1"))
    assert queued == [("soon", "ns")], "no migration of it"
    mig = migration("m1", vmi("vm1"), phase="Pending")
    upsert(migrations, mig)
    upsert(vmis, vmi("vm1", cores=4))
    assert queued[-1] == ("now", "ns"), "a VMI grown while its migration waits raises"
    upsert(migrations, at("Succeeded", mig))
    upsert(vmis, vmi("vm1", cores=8))
    assert queued[-1] == ("soon", "ns")


def test_a_launcher_that_starts_running_is_planned_at_once_unless_it_is_a_waiting_target() -> None:
    """A VMI's pod starting to run lets its waiting migration hold room; a migration's own
    target pod never makes its room, and a tenant's pod labelled as one waits the window at
    most; any other pod change (an arrival, an end) only gives room back."""
    plan_inputs, queued = routed_inputs()
    pods, migrations = plan_inputs.informers.pods.store, plan_inputs.informers.migrations.store
    vm = vmi("vm1")
    source = launcher_pod(vm, "virt-launcher-vm1-a", phase="Pending")
    upsert(pods, source)
    assert queued == [("soon", "ns")], "a pod that does not run"
    upsert(pods, launcher_pod(vm, "virt-launcher-vm1-a"))
    assert queued[-1] == ("now", "ns"), "the source starts running"
    mig = migration("m1", vm, phase="Running", uid="u1")
    upsert(migrations, mig)
    target = launcher_pod(vm, "virt-launcher-vm1-b", migration=mig, phase="Pending")
    upsert(pods, target)
    assert queued[-1] == ("soon", "ns"), "a target pod's arrival"
    upsert(pods, launcher_pod(vm, "virt-launcher-vm1-b", migration=mig))
    assert queued[-1] == ("soon", "ns"), "the target of a migration under way runs"
    upsert(pods, launcher_pod(vm, "virt-launcher-vm1-a", phase="Succeeded"))
    assert queued[-1] == ("soon", "ns"), "the source ends"
    upsert(migrations, at("Succeeded", mig))
    upsert(pods, launcher_pod(vm, "virt-launcher-vm1-c", migration=mig))
    assert queued[-1] == ("now", "ns"), "a running pod whose migration is over: a source again"


def registered(clock: FakeClock, *managed: str) -> tuple[QuotaReconciler, ApiClient]:
    """The room mode's reconcile registered on a Management whose client never connects, a
    managed quota cached in namespace ns and each of `managed`."""
    client = ApiClient(ClientConfig(host="https://127.0.0.1:1", ssl_context=False))
    management = Management(
        client=client, options=Options(), clock=clock, registry=CollectorRegistry()
    )
    reconciler = QuotaReconciler(management)
    reconciler.register()
    with_managed_quotas(reconciler.inputs, "ns", *managed)
    return reconciler, client


async def test_the_room_mode_plans_a_migrations_arrival_at_once_and_a_pod_step_within_the_window() -> (
    None
):
    """As registered (QuotaReconciler): the namespaces controller's queue holds the namespace at
    once for a migration's arrival, and only after SOON_WINDOW for a target pod's arrival."""
    clock = FakeClock()
    reconciler, client = registered(clock)
    queue, informers = reconciler.namespaces.queue, reconciler.inputs.informers
    vm = vmi("vm1")
    mig = migration("m1", vm, phase="Running", uid="u1")
    upsert(informers.migrations.store, mig)
    assert queue.queued("ns"), "a migration's arrival is queued at once"
    await queue.get()
    queue.done("ns")
    upsert(informers.pods.store, launcher_pod(vm, "virt-launcher-vm1-b", migration=mig))
    assert not queue.queued("ns")
    await clock.advance(SOON_WINDOW / 2)
    assert not queue.queued("ns"), "a target pod's arrival waits within the window"
    await clock.advance(SOON_WINDOW / 2)
    assert queue.queued("ns"), "and is queued at its end"
    await reconciler.namespaces.stop()
    await client.close()


async def test_while_a_raise_through_rancher_stands_a_soon_change_waits_a_moment_only() -> None:
    """As registered: while a namespace's raise through Rancher's annotation stands (it carries
    harvester-quota.io/rancher-base), its release is not gathered and may be what a sibling's
    raise waits for within the project's room: whatever the controller queues soon there (a pod's
    step through the plan queue, a quota status write through enqueue_soon) is planned within
    RANCHER_SOON_WINDOW. A Rancher namespace raised directly or not raised, and a plain one, wait
    up to SOON_WINDOW, and so does the first once given back. A namespace's own annotations set
    only its own window."""
    clock = FakeClock()
    reconciler, client = registered(clock, "raised", "rancher", "p")
    queue, informers = reconciler.namespaces.queue, reconciler.inputs.informers
    store = reconciler.inputs.namespaces.store
    raised = rancher_namespace("raised", {"limitsCpu": "4"})
    raised["metadata"]["annotations"][ANNOTATION_RANCHER_BASE] = '{"limit":{"limitsCpu":"2"}}'
    namespaces = [raised, rancher_namespace("rancher", {"limitsCpu": "4"}), plain_namespace("p")]

    async def queued_after(seconds: float) -> list[str]:
        await clock.advance(seconds)
        keys = []
        while queue.len():
            key, _ = await queue.get()
            queue.done(key)
            keys.append(key)
        return sorted(keys)

    try:
        for cached in namespaces:
            upsert(store, cached)
        for name in ("raised", "rancher", "p"):
            pending = launcher_pod(vmi("vm1", namespace=name), "p1", phase="Pending")
            upsert(informers.pods.store, pending)
        assert await queued_after(0) == []
        assert await queued_after(RANCHER_SOON_WINDOW) == ["raised"]
        assert await queued_after(SOON_WINDOW - RANCHER_SOON_WINDOW) == ["p", "rancher"]
        reconciler.namespaces.enqueue_soon("raised")  # a quota status write's route
        assert await queued_after(RANCHER_SOON_WINDOW) == ["raised"]
        given_back = copy.deepcopy(raised)
        del given_back["metadata"]["annotations"][ANNOTATION_RANCHER_BASE]
        given_back["metadata"]["resourceVersion"] = "2"
        upsert(store, given_back)
        reconciler.namespaces.enqueue_soon("raised")
        assert await queued_after(RANCHER_SOON_WINDOW) == [], "given back: the whole window"
        assert await queued_after(SOON_WINDOW) == ["raised"]
    finally:
        await reconciler.namespaces.stop()
        await client.close()


def test_a_quota_update_waits_only_for_status_writes_and_our_own_write_coming_back() -> None:
    """Anyone else's spec.hard write (Rancher's agent resetting a raise, an administrator) may
    have taken a raise away: planned at once. Quota admission's and kube-controller-manager's
    status writes, and our own write seen again, cannot."""
    ours = PendingWrites(Store(), FakeClock())
    may_wait = quota_may_wait(ours)

    def quota(version: str, cpu: str, used: str = "1") -> dict[str, Any]:
        return {
            "metadata": {"name": "q", "namespace": "ns", "uid": "u", "resourceVersion": version},
            "spec": {"hard": {"limits.cpu": cpu}},
            "status": {"hard": {"limits.cpu": cpu}, "used": {"limits.cpu": used}},
        }

    assert may_wait(quota("1", "10"), quota("2", "10", used="3")), "a status write"
    assert may_wait(quota("2", "10"), quota("3", "10000m")), "the same quantity written anew"
    assert not may_wait(quota("2", "12"), quota("3", "10")), "someone else lowered spec.hard"
    assert not may_wait(quota("3", "10"), quota("4", "12")), "someone else raised it"
    ours.wrote(quota("5", "14"))
    assert may_wait(quota("4", "12"), quota("5", "14")), "our own write coming back"
    assert not may_wait(quota("5", "14"), quota("6", "10")), "a reset of our raise after it"
    assert not may_wait({"metadata": {}, "spec": []}, quota("7", "10")), "an odd spec"


def test_the_last_release_published_in_status_hard_is_planned_at_once() -> None:
    """status.hard lowered on a quota that carries no record of a raise any more (the last
    release published, by our copy or kube-controller-manager's) is when the room-held label may
    go, and with the webhook down its fail-closed rule refuses the namespace's pods while it
    stands: planned at once, our own write coming back included. A release published while a
    room's record stays (the label stays for it), status.hard raised, or only status.used moving
    may wait; a key gone or a value that cannot be read is at once."""
    ours = PendingWrites(Store(), FakeClock())
    may_wait = quota_may_wait(ours)

    def quota(
        version: str, published: dict[str, Any], used: str = "1", room: bool = False
    ) -> dict[str, Any]:
        annotations = {migrating_uid_annotation_key("u1"): '{"limits.cpu":"2"}'} if room else {}
        return {
            "metadata": {
                "name": "q",
                "namespace": "ns",
                "uid": "u",
                "resourceVersion": version,
                "annotations": annotations,
            },
            "spec": {"hard": {"limits.cpu": "10", "pods": "20"}},
            "status": {"hard": published, "used": {"limits.cpu": used}},
        }

    both = {"limits.cpu": "12", "pods": "20"}
    lowered = {"limits.cpu": "10", "pods": "20"}
    assert not may_wait(quota("1", both), quota("2", lowered))
    assert not may_wait(quota("1", both), quota("2", {"limits.cpu": "11500m", "pods": "20"}))
    assert may_wait(quota("1", both, room=True), quota("2", lowered, room=True)), "a room stays"
    assert may_wait(quota("1", {"limits.cpu": "10"}), quota("2", {"limits.cpu": "12"})), "a raise"
    assert may_wait(quota("1", both), quota("2", {"limits.cpu": "12000m", "pods": 20}, used="4"))
    assert not may_wait(quota("1", both), quota("2", {"limits.cpu": "12"})), "a key gone"
    assert not may_wait(quota("1", both), quota("2", {"limits.cpu": "twelve", "pods": "20"}))
    too_long = {"limits.cpu": 10**5000, "pods": "20"}  # str() refuses it: a ValueError
    assert not may_wait(quota("1", both), quota("2", too_long)), "unreadable: at once, no error"
    assert may_wait(quota("1", {}), quota("2", {"limits.cpu": "12"})), "first published"
    ours.wrote(quota("3", lowered))
    assert not may_wait(quota("2", both), quota("3", lowered)), "our own copy of the last release"


def test_a_migration_whose_phase_is_no_string_counts_as_not_finished_and_breaks_no_listener() -> (
    None
):
    """A tenant may write a VMIM's status: a phase that is a list or a number is read as not
    final (planned at once, as a migration under way), never raised on."""
    plan_inputs, queued = routed_inputs()
    migrations = plan_inputs.informers.migrations.store
    odd = migration("m1", vmi("vm1"), phase="Pending")
    for phase in (["Succeeded"], 7):
        step = copy.deepcopy(odd)
        step["status"]["phase"] = phase
        upsert(migrations, step)
        assert not is_finished(step) and queued[-1] == ("now", "ns")
    assert is_finished(at("Failed", odd)) and not is_finished({"status": []})
