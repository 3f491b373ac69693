"""The quota plan against a tenant who lies (issue 25): every room rests on facts a tenant cannot
forge (pods KubeVirt made, times the API server set), never on a label, a name or a status a
tenant can write. Each test is one abuse; each fails on the plan that trusted the lie."""

from __future__ import annotations

import copy
import datetime
from collections.abc import Callable
from typing import Any

import pytest
from harvester_quota.util.annotations import ANNOTATION_ROOM_MIGRATIONS, room_migrations
from harvester_quota.util.launcher import LauncherSettings
from harvester_quota.util.podusage import pod_quota_usage
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.resourcequota.plan import NamespaceSnapshot, QuotaPlan, plan_quota
from harvester_quota.util.resourcequota.raises import ANNOTATION_ROOMS_SINCE

from tests.objects import launcher_pod, managed_quota, migration, rancher_namespace, vmi

NOW = datetime.datetime(2026, 1, 1, 12, tzinfo=datetime.UTC)
LIMIT = {"limitsCpu": "10000m", "limitsMemory": "40Gi"}
HARD = {"limits.cpu": "10", "limits.memory": "40Gi"}
VM_STARTED = "2026-01-01T09:00:00Z"
MIGRATED = "2026-01-01T10:00:00Z"


def running_vm(name: str, cores: int = 2) -> tuple[dict[str, Any], dict[str, Any]]:
    """A VMI and its Running source launcher pod (created by KubeVirt when the VMI started)."""
    instance = vmi(name, cores=cores)
    instance["metadata"]["creationTimestamp"] = VM_STARTED
    return instance, launcher_pod(instance, f"virt-launcher-{name}-src")


def migration_of(name: str, instance: dict[str, Any], created: str = MIGRATED) -> dict[str, Any]:
    mig = migration(name, instance)
    mig["metadata"]["creationTimestamp"] = created
    return mig


def migrated_vm() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """vm0, migrated before the room period began: its VMI, its Succeeded migration and its new
    launcher pod (the migration's target pod, created during the room period)."""
    moved = vmi("vm0")
    moved["metadata"]["creationTimestamp"] = VM_STARTED
    done = migration_of("m0", moved, "2026-01-01T10:00:05Z")
    done["status"] = {"phase": "Succeeded"}
    new_home = launcher_pod(moved, "virt-launcher-vm0-dst", migration=done)
    new_home["metadata"]["creationTimestamp"] = "2026-01-01T10:00:20Z"
    return moved, done, new_home


def tenant_pod(name: str, cpu: str, created: str, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": labels,
            "creationTimestamp": created,
        },
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": cpu}}}]},
        "status": {"phase": "Running"},
    }


def plan(
    migrations: list[dict[str, Any]],
    vmis: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    quota: dict[str, Any] | None = None,
    settled: list[dict[str, Any]] | None = None,
) -> QuotaPlan:
    return plan_quota(
        NamespaceSnapshot(
            namespace=rancher_namespace("ns", LIMIT),
            quota=quota or managed_quota("ns", HARD),
            migrations=migrations,
            vmis={v["metadata"]["name"]: v for v in vmis},
            pods=pods,
            now=NOW,
            launcher=LauncherSettings(ratio="1.5", kubevirt_version="1.6"),
            settled=settled or (),
        )
    )


def cpu(plan_: QuotaPlan) -> Quantity:
    return Quantity.parse(plan_.hard["limits.cpu"])


def room_cpu(pod: dict[str, Any]) -> Quantity:
    return pod_quota_usage(pod)["limits.cpu"]


def test_twenty_migrations_of_one_vmi_hold_one_room() -> None:
    """Twenty migrations of one running VMI created at once held twenty rooms (spec.hard 3 ->
    43-62 CPU, measured); KubeVirt runs one at a time, so one room is all a VMI can need."""
    instance, source = running_vm("vm1")
    migrations = [migration_of(f"m{i:02}", instance) for i in range(20)]
    planned = plan(migrations, [instance], [source])
    assert [room.migration for room in planned.rooms.rooms] == ["m00"], "the oldest holds it"
    assert cpu(planned) == Quantity.parse("10") + room_cpu(source)


def test_the_migration_whose_target_exists_holds_the_vmis_room() -> None:
    instance, source = running_vm("vm1")
    first, second = migration_of("m-a", instance), migration_of("m-b", instance)
    target = launcher_pod(instance, "virt-launcher-vm1-dst", migration=second)
    planned = plan([first, second], [instance], [source, target])
    assert [(r.migration, r.estimated) for r in planned.rooms.rooms] == [("m-b", False)]


def test_a_vmi_whose_pod_never_ran_gets_no_room() -> None:
    """A 64-core VMI whose launcher pod was refused, plus a migration of it, raised the quota by
    64 cores: nothing runs, nothing can migrate, nothing is raised."""
    big = vmi("big", cores=64, memory="256Gi")
    big["metadata"]["creationTimestamp"] = VM_STARTED
    refused_or_pending = launcher_pod(big, "virt-launcher-big-x", phase="Pending")
    for pods in ([], [refused_or_pending]):
        planned = plan([migration_of("m1", big)], [big], pods)
        assert not planned.holds_room and cpu(planned) == Quantity.parse("10")


def test_a_vmi_kubevirt_reports_not_live_migratable_gets_no_room() -> None:
    instance, source = running_vm("vm1")
    instance["status"] = {"conditions": [{"type": "LiveMigratable", "status": "False"}]}
    assert not plan([migration_of("m1", instance)], [instance], [source]).holds_room


def test_a_pod_labelled_as_a_migrations_target_after_the_migration_began_is_an_ordinary_pod() -> (
    None
):
    """A 500m tenant pod labelled kubevirt.io/migrationJobUID=<uid> became the migration's
    "target": the room shrank to 500m and the real target was refused. A pod is a target only
    if KubeVirt made it for the migration's VMI, no earlier than the migration."""
    instance, source = running_vm("vm1")
    mig = migration_of("m1", instance)
    uid = mig["metadata"]["uid"]
    forgeries = [
        # relabelled: created before the migration
        tenant_pod("old", "500m", VM_STARTED, **{"kubevirt.io/migrationJobUID": uid}),
        # not a launcher of this VMI
        tenant_pod("new", "500m", "2026-01-01T10:00:05Z", **{"kubevirt.io/migrationJobUID": uid}),
        # a launcher label set by hand, for another VMI
        tenant_pod(
            "other",
            "500m",
            "2026-01-01T10:00:05Z",
            **{
                "kubevirt.io": "virt-launcher",
                "kubevirt.io/created-by": "another-vmi",
                "kubevirt.io/migrationJobUID": uid,
            },
        ),
    ]
    honest = plan([mig], [instance], [source])
    for forged in forgeries:
        lied = plan([mig], [instance], [source, forged])
        assert [(r.estimated, r.target_pod) for r in lied.rooms.rooms] == [(True, None)]
        assert lied.rooms.rooms[0].room == honest.rooms.rooms[0].room, "the whole room stands"
        assert "limits.cpu" in lied.used and lied.used["limits.cpu"] == room_cpu(
            source
        ) + Quantity.parse("500m"), "the pod is charged against the base"


def test_a_succeeded_migration_without_kubevirts_target_pod_holds_no_room() -> None:
    """A tenant can write a migration's status: "Succeeded" naming the VM's own pod as the
    source held a room for as long as the VM ran. A finished migration holds room only through
    the pods KubeVirt made for it."""
    instance, source = running_vm("vm1")
    forged = migration_of("m1", instance)
    forged["status"] = {
        "phase": "Succeeded",
        "migrationState": {"sourcePod": source["metadata"]["name"]},
    }
    assert not plan([forged], [instance], [source]).holds_room


def test_a_succeeded_migration_holds_room_while_its_source_still_counts() -> None:
    instance, source = running_vm("vm1")
    done = migration_of("m1", instance)
    done["status"] = {"phase": "Succeeded"}
    target = launcher_pod(instance, "virt-launcher-vm1-dst", migration=done)
    planned = plan([done], [instance], [source, target])
    assert [(r.migration, r.estimated) for r in planned.rooms.rooms] == [("m1", False)]
    source_gone = copy.deepcopy(source)
    source_gone["status"]["phase"] = "Succeeded"
    assert not plan([done], [instance], [source_gone, target]).holds_room


def completed_source_with_unreadable_deletion(source: dict[str, Any]) -> None:
    source["status"]["phase"] = "Succeeded"
    source["metadata"]["deletionTimestamp"] = "2026-01-01T11:00:00Z"
    source["metadata"]["deletionGracePeriodSeconds"] = "thirty"


def source_past_its_grace_with_an_unreadable_quantity(source: dict[str, Any]) -> None:
    source["metadata"]["deletionTimestamp"] = "2026-01-01T11:00:00Z"
    source["metadata"]["deletionGracePeriodSeconds"] = 30
    source["spec"]["containers"][0]["resources"]["limits"]["example.com/x"] = "1" * 1001


@pytest.mark.parametrize(
    "unreadable_and_gone",
    [completed_source_with_unreadable_deletion, source_past_its_grace_with_an_unreadable_quantity],
)
def test_an_unreadable_source_pod_that_no_longer_counts_holds_no_room(
    unreadable_and_gone: Callable[[dict[str, Any]], None],
) -> None:
    """A pod that could not be read counted whatever its phase and deletion: a source launcher
    Completed or past its grace period kept a succeeded migration's room while it existed."""
    instance, source = running_vm("vm1")
    done = migration_of("m1", instance)
    done["status"] = {"phase": "Succeeded"}
    target = launcher_pod(instance, "virt-launcher-vm1-dst", migration=done)
    unreadable_and_gone(source)
    planned = plan([done], [instance], [source, target])
    assert not planned.holds_room
    assert any(source["metadata"]["name"] in warning for warning in planned.warnings)


def test_one_unreadable_quantity_hides_no_pod_from_usage_above_the_base() -> None:
    """A tenant hid slipped-in pods from UsageAboveBase by adding one unparsable quantity on a
    key the quota does not list: their CPU and memory left `used`."""
    instance, source = running_vm("vm1")
    slipped_in = tenant_pod("slipped-in", "8", "2026-01-01T10:00:30Z")
    slipped_in["spec"]["containers"][0]["resources"]["limits"]["example.com/x"] = "1" * 1001
    planned = plan([migration_of("m1", instance)], [instance], [source, slipped_in])
    assert planned.used["limits.cpu"] == room_cpu(source) + Quantity.parse("8")
    assert cpu(planned) == Quantity.parse("10") + room_cpu(source), "and no raise follows it"
    assert any("pod slipped-in" in warning for warning in planned.warnings)


def test_no_raise_follows_a_pod_that_arrived_while_room_was_held() -> None:
    """With the webhook down, pods that got in while room was held raised `used`, and the plan
    raised the quota again for them (+39 CPU over a 5-CPU base after two migrations). Now the
    raise stands on what was used before the room period began."""
    instance, source = running_vm("vm1")
    mig = migration_of("m1", instance)
    before = plan([mig], [instance], [source])
    slipped_in = tenant_pod("slipped-in", "8", "2026-01-01T10:00:30Z")
    after = plan([mig], [instance], [source, slipped_in])
    assert cpu(after) == cpu(before) == Quantity.parse("10") + room_cpu(source)
    assert after.used["limits.cpu"] > Quantity.parse("8"), "reported as used all the same"


@pytest.mark.parametrize("side", ["receive", "sendTo"])
def test_no_raise_follows_a_received_vms_target_pod_that_arrived_while_room_was_held(
    side: str,
) -> None:
    """Review of the receive rule: a decentralized receive's target pod that got in while vm1's
    room was raised was counted as a target that replaces a launcher, so the floor rose with it
    and the quota followed the arriving VM upward. It is a VM arriving: no raise follows it."""
    instance, source = running_vm("vm1")
    full = tenant_pod("full", "8", "2026-01-01T08:00:00Z")  # the namespace at its base
    mig = migration_of("m1", instance)
    before = plan([mig], [instance], [source, full])
    arriving = vmi("vm2")
    received = migration_of("r1", arriving, "2026-01-01T09:30:00Z")
    received["spec"][side] = {"migrationID": "x", "connectURL": "peer:9185"}
    target = launcher_pod(arriving, "virt-launcher-vm2-dst", migration=received)
    target["metadata"]["creationTimestamp"] = "2026-01-01T10:00:30Z"
    after = plan([mig, received], [instance, arriving], [source, full, target])
    assert cpu(after) == cpu(before) == Quantity.parse("8") + room_cpu(source) * 2
    assert after.used["limits.cpu"] == Quantity.parse("8") + room_cpu(source) + room_cpu(target)


def test_a_received_vm_stays_out_of_the_floor_once_its_migration_is_deleted() -> None:
    """Re-review: the floor told a receive's target pod by its migration, so once the tenant
    deleted the finished receive (or KubeVirt's garbage collection did) the VM counted as a
    target that replaced a launcher, and the quota rose for it. A target pod whose migration is
    no longer known is an arrival."""
    instance, source = running_vm("vm1")
    full = tenant_pod("full", "8", "2026-01-01T08:00:00Z")
    mig = migration_of("m1", instance)
    before = plan([mig], [instance], [source, full])
    arriving = vmi("vm2")
    received = migration_of("r1", arriving, "2026-01-01T09:30:00Z")
    received["spec"]["receive"] = {"migrationID": "x"}
    target = launcher_pod(arriving, "virt-launcher-vm2-dst", migration=received)
    target["metadata"]["creationTimestamp"] = "2026-01-01T10:00:30Z"
    deleted = plan([mig], [instance, arriving], [source, full, target])
    assert cpu(deleted) == cpu(before), "no raise for the VM whose receive was deleted"
    received["status"] = {"phase": "Succeeded"}
    settled = plan([mig], [instance, arriving], [source, full, target], settled=[received])
    assert cpu(settled) == cpu(before), "nor once planviews.py has set the receive aside"


def test_a_finished_migrations_target_pod_stays_in_the_floor_while_the_migration_exists() -> None:
    """Targets of the namespace's own migrations are never new: vm0, migrated (its migration
    Succeeded, its source gone) after the room period began, still stands in the floor of vm1's
    raise in a namespace over its base (the v1.7.0 seed), also once planviews.py has set its
    migration aside from planning (re-review: set aside, it left the floor, and the next
    migration's target was refused). Deleted, it leaves the floor: the documented price of
    letting no deleted receive launder its VM (raises.py)."""
    instance, source = running_vm("vm1")
    moved, done, new_home = migrated_vm()
    over = tenant_pod("over", "9", "2026-01-01T08:00:00Z")
    pods = [source, over, new_home]
    mig = migration_of("m1", instance)
    known = plan([done, mig], [moved, instance], pods)
    floor = Quantity.parse("9") + room_cpu(source) + room_cpu(new_home)
    assert cpu(known) == floor + room_cpu(source)
    settled = plan([mig], [moved, instance], pods, settled=[done])
    assert cpu(settled) == cpu(known), "set aside, it still exists: its VM stays in the floor"
    deleted = plan([mig], [moved, instance], pods)
    assert cpu(deleted) == cpu(known) - room_cpu(new_home)


def test_usage_above_the_base_from_before_the_rooms_is_still_raised_for() -> None:
    """The v1.7.0 seed: a VM over the base since the overhead ratio was raised still migrates:
    pods older than the room period are the floor."""
    instance, source = running_vm("vm1")
    old = tenant_pod("old", "9", "2026-01-01T08:00:00Z")
    planned = plan([migration_of("m1", instance)], [instance], [source, old])
    assert cpu(planned) == Quantity.parse("9") + room_cpu(source) + room_cpu(source)


def test_the_room_period_is_recorded_with_the_raise_and_holds_across_overlapping_migrations() -> (
    None
):
    """Migrations that follow one another must not move the period forward: the moment is
    recorded on the quota with the first raise and kept while any room is held."""
    first_vm, first_source = running_vm("vm1")
    second_vm, second_source = running_vm("vm2")
    first = migration_of("m1", first_vm, "2026-01-01T10:00:00Z")
    raised = plan([first], [first_vm], [first_source, second_source])
    assert raised.annotations[ANNOTATION_ROOMS_SINCE] == "2026-01-01T10:00:00Z"
    quota = managed_quota("ns", HARD, {ANNOTATION_ROOMS_SINCE: "2026-01-01T10:00:00Z"})
    second = migration_of("m2", second_vm, "2026-01-01T10:05:00Z")
    slipped_in = tenant_pod("slipped-in", "4", "2026-01-01T10:02:00Z")
    later = plan([second], [second_vm], [first_source, second_source, slipped_in], quota)
    assert cpu(later) == Quantity.parse("10") + room_cpu(second_source)
    assert ANNOTATION_ROOMS_SINCE not in later.annotations, "already recorded"
    released = plan([], [second_vm], [first_source, second_source], quota)
    assert ANNOTATION_ROOMS_SINCE in released.remove_annotations


def test_the_raise_names_the_migrations_it_holds_room_for_and_the_release_removes_them() -> None:
    """The webhook trusts a cached quota that names a target pod's migration (pod/targets.py
    `raised_for`): the names must come in the write that raises for them, a migration that
    takes over a VM's unchanged room must be named too, and none may outlive the rooms."""
    first_vm, first_source = running_vm("vm1")
    second_vm, second_source = running_vm("vm2")
    first, second = migration_of("m1", first_vm), migration_of("m2", second_vm)
    raised = plan([first, second], [first_vm, second_vm], [first_source, second_source])
    uids = {first["metadata"]["uid"], second["metadata"]["uid"]}
    assert room_migrations(raised.annotations) == uids
    assert ANNOTATION_ROOM_MIGRATIONS in raised.annotations, "in the same write as the raise"
    quota = managed_quota("ns", HARD, dict(raised.annotations))
    again = migration_of("m1-again", first_vm)
    taken_over = plan([again, second], [first_vm, second_vm], [first_source, second_source], quota)
    named = {again["metadata"]["uid"], second["metadata"]["uid"]}
    assert room_migrations(taken_over.annotations) == named
    released = plan([], [first_vm, second_vm], [first_source, second_source], quota)
    assert ANNOTATION_ROOM_MIGRATIONS in released.remove_annotations


def test_a_recorded_moment_that_is_not_a_timestamp_is_replaced() -> None:
    instance, source = running_vm("vm1")
    quota = managed_quota("ns", HARD, {ANNOTATION_ROOMS_SINCE: "0000"})
    planned = plan([migration_of("m1", instance)], [instance], [source], quota)
    assert planned.annotations[ANNOTATION_ROOMS_SINCE] == MIGRATED


def test_a_pod_that_cannot_be_read_is_named_in_a_warning_and_plans_the_rest() -> None:
    instance, source = running_vm("vm1")
    unreadable = tenant_pod("huge", "1" * 1001, VM_STARTED)
    planned = plan([migration_of("m1", instance)], [instance], [source, unreadable])
    assert planned.holds_room and planned.managed
    assert any(
        "pod huge" in warning and "charged nothing" in warning for warning in planned.warnings
    )


def test_a_forged_target_that_sorts_first_does_not_hide_kubevirts_real_target() -> None:
    """The plan looked only at the first pod (by name) labelled with the migration's uid: a
    forged one named to sort first, rejected rightly, hid KubeVirt's real target, which was
    then charged as an ordinary pod and the quota raised for it (spec.hard 6145m, measured)."""
    instance, source = running_vm("vm1")
    mig = migration_of("m1", instance)
    real = launcher_pod(instance, "virt-launcher-vm1-zzzzz", migration=mig)
    decoy = tenant_pod(
        "aaa-decoy", "100m", VM_STARTED, **{"kubevirt.io/migrationJobUID": mig["metadata"]["uid"]}
    )
    planned = plan([mig], [instance], [source, decoy, real])
    assert [(r.target_pod, r.estimated) for r in planned.rooms.rooms] == [
        (real["metadata"]["name"], False)
    ]
    assert planned.used["limits.cpu"] == room_cpu(source) + Quantity.parse("100m")


NESTED_HOOKS = '[{"image":"x","x":' + "[" * 100_000 + "]" * 100_000 + "}]"


def test_a_vmi_whose_hook_annotation_cannot_be_rendered_gets_no_room_and_plans_the_rest() -> None:
    """A nested hooks annotation on a running VMI raised RecursionError: every plan of the
    namespace failed (no migration got room) for as long as the VMI lived."""
    instance, source = running_vm("vm1")
    liar, liar_source = running_vm("vm2")
    liar["metadata"].setdefault("annotations", {})["hooks.kubevirt.io/hookSidecars"] = NESTED_HOOKS
    planned = plan(
        [migration_of("m1", instance), migration_of("m2", liar)],
        [instance, liar],
        [source, liar_source],
    )
    assert [room.migration for room in planned.rooms.rooms] == ["m1"]
    assert cpu(planned) == Quantity.parse("10") + room_cpu(source)
    assert any("cannot size the room of migration m2" in w for w in planned.warnings)


def test_any_failure_of_a_room_estimate_is_an_estimate_error_not_a_failed_plan() -> None:
    instance, source = running_vm("vm1")

    def broken(vmi_: Any, settings: LauncherSettings) -> dict[str, Quantity]:
        raise RecursionError("maximum recursion depth exceeded")

    planned = plan_quota(
        NamespaceSnapshot(
            namespace=rancher_namespace("ns", LIMIT),
            quota=managed_quota("ns", HARD),
            migrations=[migration_of("m1", instance)],
            vmis={"vm1": instance},
            pods=[source],
            now=NOW,
            usage=broken,
        )
    )
    assert planned.managed and not planned.rooms.rooms
    assert planned.rooms.estimate_errors == {
        "m1": "cannot render the VMI's launcher pod (RecursionError)"
    }


@pytest.mark.parametrize("forged", ["1", "1099511627776"], ids=["shrink", "inflate"])
def test_a_forged_overhead_report_neither_shrinks_nor_inflates_a_room(forged: str) -> None:
    """KubeVirt v1.9 reports the overhead it rendered in the launcher pod's annotation
    kubevirt.io/memory-overhead-bytes and copies it into the VMI's status.memory.memoryOverhead
    and, from the target, status.migrationState.targetMemoryOverhead; a tenant may edit a pod's
    annotations, so all three may carry its number. The room is our rendering, whatever they say."""
    instance, source = running_vm("vm1")
    honest = plan([migration_of("m1", instance)], [instance], [source])
    lied_vmi = copy.deepcopy(instance)
    lied_vmi.setdefault("status", {})["memory"] = {"memoryOverhead": forged}
    lied_vmi["status"]["migrationState"] = {"targetMemoryOverhead": forged}
    lied_source = copy.deepcopy(source)
    lied_source["metadata"].setdefault("annotations", {})["kubevirt.io/memory-overhead-bytes"] = (
        forged
    )
    lied = plan([migration_of("m1", lied_vmi)], [lied_vmi], [lied_source])
    assert len(honest.rooms.rooms) == 1
    assert [r.room for r in lied.rooms.rooms] == [r.room for r in honest.rooms.rooms]
    assert lied.hard == honest.hard
