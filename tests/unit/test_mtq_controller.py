"""The MTQ reconcile's step order on an in-memory API: lock, record, raise, restore, unlock; a
controller killed at every write ends with the original quotas and no lock; the deadline; the
Warning once per change; shared raises; admin edits kept; a VMMRQ deleted while locked."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from harvester_quota.apis.kubevirt import (
    LABEL_MIGRATION_JOB,
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
    VIRTUAL_MACHINE_INSTANCES,
)
from harvester_quota.apis.mtq import VMMRQS
from harvester_quota.controller.mtq.reports import WAITING_REASON
from harvester_quota.controller.mtq.vmmrq_controller import MtqReconciler
from harvester_quota.controller.mtq.writes import FINALIZER
from harvester_quota.generic.resource import NAMESPACES, PODS, RESOURCE_QUOTAS
from harvester_quota.util.annotations import LABEL_PAUSED
from harvester_quota.util.launcher import target_quota_usage
from harvester_quota.util.mtq import (
    ANNOTATION_LOCK,
    ANNOTATION_RAISED,
    LABEL_LOCKED,
    NOT_ENOUGH_REASON,
    Lock,
    parse_lock,
)
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.resources import ResourceList, to_json_dict

from tests.objects import migration, plain_namespace, vmi
from tests.unit.mtq_fakes import Harness, Killed, harness

KEYS = ("requests.memory", "requests.cpu")


def usage_of(h: Harness, instance: dict[str, Any]) -> ResourceList:
    settings = h.reconciler().blocked.launcher_settings("tenant")
    return target_quota_usage(instance, settings)


def setup(
    h: Harness,
    vms: int = 1,
    budget_targets: int = 1,
    budget_minus: str | None = None,
    quota_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A full namespace: each quota key used up to its hard (the quota labelled
    `quota_labels`); `vms` migrations refused by quota; a VMMRQ holding `budget_targets` target
    pods' worth on every key."""
    h.cluster.put(NAMESPACES, plain_namespace("tenant"))
    instances = [vmi(f"vm{i}", "tenant") for i in range(vms)]
    need = usage_of(h, instances[0])
    original = {k: str(need[k] * 2) for k in KEYS}
    h.cluster.put(
        RESOURCE_QUOTAS,
        {
            "metadata": {"name": "rq", "namespace": "tenant", "labels": quota_labels or {}},
            "spec": {"hard": original},
            "status": {"hard": original, "used": original},
        },
    )
    budget = to_json_dict({k: need[k] * budget_targets for k in KEYS})
    if budget_minus is not None:
        budget["requests.memory"] = str(need["requests.memory"] * budget_targets - _q(budget_minus))
    h.cluster.put(
        VMMRQS,
        {
            "metadata": {"name": "budget", "namespace": "tenant"},
            "spec": {"additionalMigrationResources": budget},
        },
    )
    migrations = []
    for index, instance in enumerate(instances):
        h.cluster.put(VIRTUAL_MACHINE_INSTANCES, instance)
        migrations.append(
            h.cluster.put(
                VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
                migration(f"mig{index}", instance, rejected=True, uid=f"mig-uid-{index}"),
            )
        )
    return {"original": original, "need": need, "budget": budget, "migrations": migrations}


def _q(text: str) -> Quantity:
    return Quantity.parse(text)


def quota_hard(h: Harness) -> dict[str, str]:
    quota = h.cluster.get(RESOURCE_QUOTAS, "tenant/rq")
    assert quota is not None
    return dict(quota["spec"]["hard"])


def namespace_labels(h: Harness) -> dict[str, str]:
    namespace = h.cluster.get(NAMESPACES, "tenant")
    assert namespace is not None
    return dict(namespace["metadata"].get("labels") or {})


def vmmrq(h: Harness) -> dict[str, Any] | None:
    return h.cluster.get(VMMRQS, "tenant/budget")


def target_pod_appears(h: Harness, index: int) -> None:
    """KubeVirt retried after the raise: the target pod exists, the VMIM left Pending."""
    h.cluster.put(
        PODS,
        {
            "metadata": {
                "name": f"target-{index}",
                "namespace": "tenant",
                "labels": {"kubevirt.io": "virt-launcher", LABEL_MIGRATION_JOB: f"mig-uid-{index}"},
            }
        },
    )
    current = h.cluster.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, f"tenant/mig{index}")
    assert current is not None
    current["status"] = {"phase": "Scheduling"}
    h.cluster.put(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, current)


def raised(setup_: dict[str, Any], targets: int = 1) -> dict[str, str]:
    need = setup_["need"]
    return {k: str(_q(v) + need[k] * targets) for k, v in setup_["original"].items()}


def assert_back_to_original(h: Harness, s: dict[str, Any]) -> None:
    assert {k: str(_q(v)) for k, v in quota_hard(h).items()} == {
        k: str(_q(v)) for k, v in s["original"].items()
    }
    assert LABEL_LOCKED not in namespace_labels(h)
    remaining = vmmrq(h)
    if remaining is not None:
        assert FINALIZER not in (remaining["metadata"].get("finalizers") or [])
        assert "originalBlockingResourceQuotas" not in (remaining.get("status") or {})


async def test_the_whole_flow_in_order_with_two_quota_writes_per_quota() -> None:
    h = harness()
    s = setup(h)
    reconciler = h.reconciler()
    await h.reconcile(reconciler)
    assert h.cluster.writes == ["namespaces tenant"], "the raise waits for the lock's watch event"
    await h.reconcile(reconciler)
    assert h.cluster.writes == [
        "namespaces tenant",
        "virtualmachinemigrationresourcequotas tenant/budget",
        "virtualmachinemigrationresourcequotas/status tenant/budget",
        "resourcequotas tenant/rq",
        "resourcequotas/status tenant/rq",
    ]
    lock = parse_lock(h.cluster.get(NAMESPACES, "tenant"))
    assert lock is not None and lock.migrations == {"mig-uid-0": "mig0"}
    assert lock.until == h.clock.now() + datetime.timedelta(seconds=30)
    status = (vmmrq(h) or {})["status"]
    assert status["originalBlockingResourceQuotas"] == [
        {"name": "rq", "spec": {"hard": s["original"]}}
    ]
    assert status["migrationsToBlockingResourceQuotas"] == {"mig0": ["rq"]}
    assert quota_hard(h) == raised(s)
    quota = h.cluster.get(RESOURCE_QUOTAS, "tenant/rq") or {}
    assert quota["status"]["hard"] == raised(s), "published for quota admission at once"

    h.cluster.writes.clear()
    await h.reconcile(reconciler)
    assert h.cluster.writes == [], "nothing to do until something changes"

    target_pod_appears(h, 0)
    await h.reconcile(reconciler)
    assert_back_to_original(h, s)
    assert [w.split()[0] for w in h.cluster.writes] == [
        "resourcequotas",
        "resourcequotas/status",
        "virtualmachinemigrationresourcequotas/status",
        "virtualmachinemigrationresourcequotas",
        "namespaces",
    ]
    assert reconciler.stats.quota_writes == 2 and reconciler.stats.locks == 1
    assert len(h.cluster.writes) + 5 == FULL_FLOW_WRITES, "the crash test kills at each of them"


async def lock_and_raise(h: Harness, reconciler: MtqReconciler) -> None:
    """The lock is written, then (on its watch event) the record and the raise."""
    await h.reconcile(reconciler)
    await h.reconcile(reconciler)


async def converge(
    h: Harness, reconciler: MtqReconciler, original: dict[str, str], max_rounds: int = 6
) -> None:
    """Reconciles as events would, with KubeVirt creating the target pod once the quota is
    raised, until a round writes nothing."""
    for _ in range(max_rounds):
        before = len(h.cluster.writes)
        await h.reconcile(reconciler)
        if quota_hard(h) != original and h.cluster.get(PODS, "tenant/target-0") is None:
            target_pod_appears(h, 0)
            continue
        if len(h.cluster.writes) == before:
            return
    raise AssertionError("did not converge")


FULL_FLOW_WRITES = 10


async def test_a_decentralized_receive_refused_by_quota_gets_no_budget() -> None:
    """A receive's target pod is the VM arriving for good: MTQ's budget is for the moment a
    namespace runs one VM twice, which a receive never does, so no lock and no raise."""
    h = harness()
    (refused,) = setup(h)["migrations"]
    refused["spec"]["receive"] = {"migrationID": "x"}
    h.cluster.put(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, refused)
    before = quota_hard(h)
    await h.reconcile(h.reconciler())
    assert parse_lock(h.cluster.get(NAMESPACES, "tenant")) is None
    assert quota_hard(h) == before


@pytest.mark.parametrize("killed_at", range(FULL_FLOW_WRITES))
async def test_killed_at_every_write_ends_with_the_original_quota_and_no_lock(
    killed_at: int,
) -> None:
    """Steps: lock, finalizer, record, raise, publish | target pod | restore, publish, forget,
    finalizer, unlock. The process dies before write `killed_at`; a new one takes over."""
    h = harness()
    s = setup(h)
    h.cluster.writes_left = killed_at
    first = h.reconciler()
    try:
        await lock_and_raise(h, first)
        target_pod_appears(h, 0)
        await h.reconcile(first)
    except Killed:
        pass
    h.cluster.writes_left = None
    await converge(h, h.reconciler(), s["original"])
    assert_back_to_original(h, s)


async def test_a_controller_dead_past_the_deadline_restores_and_unlocks_on_start() -> None:
    h = harness()
    s = setup(h)
    await lock_and_raise(h, h.reconciler())  # lock | finalizer, record, raise, publish
    assert quota_hard(h) == raised(s)
    # The process dies here, and KubeVirt's retry never comes (no target pod).
    await h.clock.advance(31)
    restarted = h.reconciler()
    await h.reconcile(restarted)
    assert_back_to_original(h, s)
    h.cluster.writes.clear()
    await h.reconcile(restarted)
    assert h.cluster.writes == [], "the migration waits for a change or its backoff: no new lock"
    assert any(delay >= 60 for _name, delay in h.namespaces.delayed)


async def test_the_deadline_ends_the_window_and_the_next_waits_for_a_change() -> None:
    h = harness()
    s = setup(h)
    reconciler = h.reconciler(lock_seconds=10)
    await h.reconcile(reconciler)
    assert ("tenant", pytest.approx(10.05)) in h.namespaces.delayed
    await h.clock.advance(10)
    await h.reconcile(reconciler)
    assert_back_to_original(h, s)
    changed = h.cluster.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, "tenant/mig0") or {}
    changed["metadata"]["labels"] = {"touched": "yes"}
    h.cluster.put(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, changed)
    await h.reconcile(reconciler)
    assert LABEL_LOCKED in namespace_labels(h), "the migration changed: a new window"


async def test_a_budget_too_small_warns_once_per_change_and_touches_nothing() -> None:
    h = harness()
    setup(h, budget_minus="1Mi")
    reconciler = h.reconciler()
    await h.reconcile(reconciler)
    await h.reconcile(reconciler)
    assert h.cluster.writes == ["virtualmachinemigrationresourcequotas/status tenant/budget"], (
        "only MTQ's copy of the budget into status: no lock, no quota write"
    )
    assert [(name, reason) for name, reason, _ in h.events] == [("mig0", NOT_ENOUGH_REASON)]
    message = h.events[0][2]
    assert "quota rq requests.memory" in message and "short by 1048576" in message
    budget = vmmrq(h) or {}
    budget["spec"]["additionalMigrationResources"]["requests.memory"] = "1Ki"
    h.cluster.put(VMMRQS, budget)
    await h.reconcile(reconciler)
    assert len(h.events) == 2, "a new reason, a new event"


async def test_several_migrations_share_one_raise_and_restore_after_the_last_target() -> None:
    h = harness()
    s = setup(h, vms=2, budget_targets=2)
    reconciler = h.reconciler()
    await lock_and_raise(h, reconciler)
    lock = parse_lock(h.cluster.get(NAMESPACES, "tenant"))
    assert lock is not None and set(lock.migrations.values()) == {"mig0", "mig1"}
    assert quota_hard(h) == raised(s, targets=2)
    target_pod_appears(h, 0)
    await h.reconcile(reconciler)
    assert quota_hard(h) == raised(s, targets=2), "still raised for mig1"
    target_pod_appears(h, 1)
    await h.reconcile(reconciler)
    assert_back_to_original(h, s)
    assert reconciler.stats.quota_writes == 2, "one raise, one restore for both"


async def test_an_admin_edit_during_the_window_is_kept() -> None:
    h = harness()
    s = setup(h)
    reconciler = h.reconciler()
    await lock_and_raise(h, reconciler)
    quota = h.cluster.get(RESOURCE_QUOTAS, "tenant/rq") or {}
    quota["spec"]["hard"]["requests.cpu"] = "64"
    quota["spec"]["hard"]["pods"] = "10"
    h.cluster.put(RESOURCE_QUOTAS, quota)
    target_pod_appears(h, 0)
    await h.reconcile(reconciler)
    assert quota_hard(h) == {
        "requests.memory": s["original"]["requests.memory"],
        "requests.cpu": "64",
        "pods": "10",
    }
    assert LABEL_LOCKED not in namespace_labels(h)


async def test_a_vmmrq_deleted_while_locked_restores_before_it_goes() -> None:
    h = harness()
    s = setup(h)
    reconciler = h.reconciler()
    await lock_and_raise(h, reconciler)
    h.cluster.delete_gracefully(VMMRQS, "tenant/budget")
    assert vmmrq(h) is not None, "held by the finalizer"
    await h.reconcile(reconciler)
    assert vmmrq(h) is None
    assert_back_to_original(h, s)


async def test_a_vmmrq_whose_finalizer_a_tenant_removed_and_deleted_still_restores() -> None:
    """Issue 38 item 4: a tenant with update and delete on its VMMRQ removes the finalizer and
    deletes it while the quota is raised: the VMMRQ, and the originals its status held, are
    gone at once, and the namespace was unlocked with the budget left in the quota for good.
    The raise carries its own record on the quota, which only our controller writes: the quota
    is restored from it, the record dropped, and only then is the namespace unlocked."""
    h = harness()
    s = setup(h)
    reconciler = h.reconciler()
    await lock_and_raise(h, reconciler)
    assert quota_hard(h) == raised(s)
    stripped = vmmrq(h)
    assert stripped is not None
    stripped["metadata"]["finalizers"] = []
    h.cluster.put(VMMRQS, stripped)
    h.cluster.delete_gracefully(VMMRQS, "tenant/budget")
    assert vmmrq(h) is None, "the premise: without the finalizer it goes at once"
    await h.reconcile(reconciler)
    assert_back_to_original(h, s)
    quota = h.cluster.get(RESOURCE_QUOTAS, "tenant/rq")
    assert quota is not None
    assert ANNOTATION_RAISED not in (quota["metadata"].get("annotations") or {})


async def test_the_whole_flow_leaves_no_raise_record_behind() -> None:
    """The record goes with the restore, so a later VMMRQ-less pass restores nothing twice."""
    h = harness()
    s = setup(h)
    reconciler = h.reconciler()
    await lock_and_raise(h, reconciler)
    quota = h.cluster.get(RESOURCE_QUOTAS, "tenant/rq")
    assert quota is not None and ANNOTATION_RAISED in quota["metadata"]["annotations"]
    await converge(h, reconciler, s["original"])
    assert_back_to_original(h, s)
    quota = h.cluster.get(RESOURCE_QUOTAS, "tenant/rq")
    assert quota is not None
    assert ANNOTATION_RAISED not in (quota["metadata"].get("annotations") or {})


async def test_a_namespace_locked_without_a_vmmrq_is_unlocked() -> None:
    h = harness()
    namespace = plain_namespace("tenant")
    namespace["metadata"]["labels"] = {LABEL_LOCKED: "true"}
    namespace["metadata"]["annotations"] = {ANNOTATION_LOCK: "{}"}
    h.cluster.put(NAMESPACES, namespace)
    await h.reconcile(h.reconciler())
    assert LABEL_LOCKED not in namespace_labels(h)


async def mig0_locked_before_mig1_is_refused(h: Harness) -> tuple[MtqReconciler, Lock]:
    """mig1 not refused yet (Pending), mig0 refused: the lock taken for mig0 alone, and the
    raise under it; the controller and that lock."""
    late = h.cluster.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, "tenant/mig1") or {}
    late["status"] = {"phase": "Pending"}
    h.cluster.put(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, late)
    reconciler = h.reconciler()
    await lock_and_raise(h, reconciler)
    first = parse_lock(h.cluster.get(NAMESPACES, "tenant"))
    assert first is not None and set(first.migrations.values()) == {"mig0"}
    return reconciler, first


async def test_a_migration_joining_a_held_lock_keeps_its_deadline() -> None:
    h = harness()
    s = setup(h, vms=2, budget_targets=2)
    reconciler, first = await mig0_locked_before_mig1_is_refused(h)
    await h.clock.advance(5)
    late = h.cluster.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, "tenant/mig1") or {}
    late["status"] = s["migrations"][1]["status"]
    h.cluster.put(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, late)
    await lock_and_raise(h, reconciler)
    widened = parse_lock(h.cluster.get(NAMESPACES, "tenant"))
    assert widened is not None and set(widened.migrations.values()) == {"mig0", "mig1"}
    assert widened.until == first.until, "never extended"
    assert reconciler.stats.quota_writes == 1, "the raise is shared, not repeated"


async def test_an_evacuation_refused_later_takes_a_held_lock_from_a_user_migration() -> None:
    """A budget for one target: a user's migration holds the lock, its target pod not made yet;
    then a drain's evacuation (system-critical) is refused by quota. The lock now admits the
    evacuation alone, and the user's migration is told it waits for it (review: the held lock
    had kept both, and whichever target KubeVirt made first took the budget)."""
    h = harness()
    s = setup(h, vms=2, budget_targets=1)
    reconciler, _ = await mig0_locked_before_mig1_is_refused(h)
    evacuation = h.cluster.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, "tenant/mig1") or {}
    evacuation["status"] = s["migrations"][1]["status"]
    evacuation["spec"]["priority"] = "system-critical"
    h.cluster.put(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, evacuation)
    await lock_and_raise(h, reconciler)
    taken = parse_lock(h.cluster.get(NAMESPACES, "tenant"))
    assert taken is not None and set(taken.migrations.values()) == {"mig1"}
    assert ("mig0", WAITING_REASON) in [(name, reason) for name, reason, _ in h.events]


async def test_paused_mtq_mode_releases_no_budget_and_restores_a_held_raise() -> None:
    """The global switch and the namespace's opt-out pause MTQ mode too (they paused the room
    mode only, so a tenant could keep an uninstall's release from ever finding nothing of ours
    left by migrating in a VMMRQ namespace): nothing is raised or locked for a refused
    migration, and a raise standing when the switch comes is restored and unlocked."""
    h = harness()
    s = setup(h)
    paused = h.reconciler(paused=True)
    await lock_and_raise(h, paused)
    assert quota_hard(h) == s["original"] and LABEL_LOCKED not in namespace_labels(h)
    assert paused.stats.quota_writes == 0 and paused.stats.locks == 0
    opted = harness()
    s = setup(opted)
    await lock_and_raise(opted, opted.reconciler())
    assert quota_hard(opted) != s["original"], "raised while not paused"
    namespace = opted.cluster.get(NAMESPACES, "tenant") or {}
    namespace["metadata"].setdefault("labels", {})[LABEL_PAUSED] = "true"
    opted.cluster.put(NAMESPACES, namespace)
    await lock_and_raise(opted, opted.reconciler())
    assert quota_hard(opted) == s["original"] and LABEL_LOCKED not in namespace_labels(opted)


async def test_with_two_vmmrqs_the_one_recording_a_raise_is_used_and_the_other_named() -> None:
    h = harness()
    setup(h)
    reconciler = h.reconciler()
    await lock_and_raise(h, reconciler)
    h.cluster.put(  # sorts first by name, but records nothing
        VMMRQS,
        {
            "metadata": {"name": "another", "namespace": "tenant"},
            "spec": {"additionalMigrationResources": {"requests.memory": "1"}},
        },
    )
    await h.reconcile(reconciler)
    await h.reconcile(reconciler)
    warned = [(name, reason) for name, reason, _ in h.events]
    assert warned == [("another", "MultipleMigrationResourceQuotas")], "once"
    assert "originalBlockingResourceQuotas" in ((vmmrq(h) or {}).get("status") or {})


async def test_a_target_counted_before_the_caches_show_it_raises_no_false_warning() -> None:
    """Quota admission counted the target pod in status.used; the pod and the VMIM's new phase
    are not in the caches yet: the migration looks short of budget, but it is the lock's own."""
    h = harness()
    s = setup(h)
    reconciler = h.reconciler()
    await lock_and_raise(h, reconciler)
    quota = h.cluster.get(RESOURCE_QUOTAS, "tenant/rq") or {}
    quota["status"]["used"] = {
        k: str(_q(v) + s["need"][k]) for k, v in quota["status"]["used"].items()
    }
    h.cluster.put(RESOURCE_QUOTAS, quota)
    await h.reconcile(reconciler)
    assert h.events == []


async def test_events_of_namespaces_without_a_vmmrq_queue_nothing_for_mtq() -> None:
    """Quota, migration and target pod events matter to MTQ only where a VMMRQ is: elsewhere
    they would queue reconciles of namespaces it leaves at once (virt-controller writes a
    migration's status several times a second)."""
    h = harness()
    reconciler = h.reconciler()
    h.cluster.put(NAMESPACES, plain_namespace("tenant"))
    event = migration("mig", vmi("vm", "tenant"))
    resolve = reconciler._where_managed(lambda obj: [obj["metadata"]["namespace"]])
    assert resolve(event) == []
    setup(h)
    assert resolve(event) == ["tenant"]


async def test_a_budget_that_leaves_out_the_attachment_pod_releases_nothing() -> None:
    """A VM with a hotplugged volume gets virt-controller's attachment pod beside its target
    (100m / 80M limits by default): a budget that holds the launcher alone would let the
    launcher in and the attachment pod be refused, failing the migration. MTQ mode sized the
    launcher alone; now the budget must hold both, or it warns and touches nothing."""
    h = harness()
    setup(h)
    instance = h.cluster.get(VIRTUAL_MACHINE_INSTANCES, "tenant/vm0")
    assert instance is not None
    instance["spec"].setdefault("volumes", []).append(
        {"name": "hp", "persistentVolumeClaim": {"claimName": "hp", "hotpluggable": True}}
    )
    h.cluster.put(VIRTUAL_MACHINE_INSTANCES, instance)
    reconciler = h.reconciler()
    await h.reconcile(reconciler)
    assert LABEL_LOCKED not in namespace_labels(h)
    assert [(name, reason) for name, reason, _ in h.events] == [("mig0", NOT_ENOUGH_REASON)]


def tamper_with_status(h: Harness, originals: list[dict[str, Any]], budget: dict[str, str]) -> None:
    """A tenant with update on its VMMRQ's status writes its own originals and budget."""
    tampered = vmmrq(h)
    assert tampered is not None
    tampered["status"]["originalBlockingResourceQuotas"] = originals
    tampered["status"]["additionalMigrationResources"] = budget
    h.cluster.put(VMMRQS, tampered)


async def test_a_status_rewritten_by_a_tenant_restores_from_the_quotas_record() -> None:
    """Review M6: originals X' and budget B' with X' + B' = the raised value made the restore
    go to X' (the raised value itself here, with B' = 0): the budget stayed in the quota for
    good. The quota's own record, which only our controller writes, is what is restored."""
    h = harness()
    s = setup(h)
    reconciler = h.reconciler()
    await lock_and_raise(h, reconciler)
    assert quota_hard(h) == raised(s)
    tamper_with_status(
        h, [{"name": "rq", "spec": {"hard": raised(s)}}], dict.fromkeys(s["budget"], "0")
    )
    target_pod_appears(h, 0)
    await h.reconcile(reconciler)
    assert_back_to_original(h, s)
    quota = h.cluster.get(RESOURCE_QUOTAS, "tenant/rq")
    assert quota is not None
    assert ANNOTATION_RAISED not in (quota["metadata"].get("annotations") or {})


async def test_originals_dropped_from_the_status_by_a_tenant_still_restore() -> None:
    """The same with the quota left out of the status's originals: nothing planned its restore,
    and the release unlocked the namespace raised. A quota that carries a record is restored
    from it whatever the status says."""
    h = harness()
    s = setup(h)
    reconciler = h.reconciler()
    await lock_and_raise(h, reconciler)
    tamper_with_status(h, [], s["budget"])
    target_pod_appears(h, 0)
    await h.reconcile(reconciler)
    assert_back_to_original(h, s)
