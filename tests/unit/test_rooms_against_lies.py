"""The quota plan against a tenant who lies (issue 25): every room rests on facts a tenant cannot
forge (pods KubeVirt made, times the API server set), never on a label, a name or a status a
tenant can write. Each test is one abuse; each fails on the plan that trusted the lie."""

from __future__ import annotations

import copy
import datetime
import json
from collections.abc import Callable
from typing import Any, cast

import pytest
from harvester_quota.explain import explain, render_text
from harvester_quota.generic.client import ApiClient
from harvester_quota.util.launcher import LauncherSettings
from harvester_quota.util.podusage import pod_quota_usage
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.resourcequota.floor import ANNOTATION_ROOMS_SINCE
from harvester_quota.util.resourcequota.plan import NamespaceSnapshot, QuotaPlan, plan_quota
from harvester_quota.util.resourcequota.slippedin import ANNOTATION_SLIPPED_IN

from tests.objects import launcher_pod, managed_quota, migration, rancher_namespace, vmi
from tests.unit.test_quota_scopes_in_fit_checks import ReadOnlyCluster

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


def _carried(quota: dict[str, Any], planned: QuotaPlan) -> dict[str, Any]:
    """The quota after the plan's write: its hard and annotation changes applied."""
    written = copy.deepcopy(quota)
    written["spec"]["hard"] = dict(planned.hard)
    annotations = written["metadata"]["annotations"]
    annotations.update(planned.annotations)
    for key in planned.remove_annotations:
        annotations.pop(key, None)
    return written


def _used_cpu(pods: list[dict[str, Any]]) -> Quantity:
    total = Quantity.parse("0")
    for pod in pods:
        total = total + pod_quota_usage(pod)["limits.cpu"]
    return total


def test_pods_that_slipped_in_gain_nothing_in_later_room_periods() -> None:
    """Review finding 3: with the webhook down, a tenant who migrated its own VM again and again
    gained one room each time (12 -> 18 CPU used over a 10-CPU base in four migrations): a pod
    that slipped in was an arrival only for its room period, and the next raise stood on it.
    Quota admission is played here as it judges (a pod gets in if it fits under spec.hard); the
    tenant fills each held room, the migration is then given up. What slipped in stays at most
    one room, whatever the number of periods."""
    instance, source = running_vm("vm1")
    pods = [source, tenant_pod("old", "7", VM_STARTED)]
    quota = managed_quota("ns", HARD)
    for period in range(4):
        mig = migration_of(f"m{period}", instance, f"2026-01-01T1{period}:00:00Z")
        raised = plan([mig], [instance], pods, quota)
        quota = _carried(quota, raised)
        free = cpu(raised) - _used_cpu(pods)
        if free.sign() > 0:
            pods.append(tenant_pod(f"slipper-{period}", str(free), f"2026-01-01T1{period}:00:30Z"))
        quota = _carried(quota, plan([mig], [instance], pods, quota))
        quota = _carried(quota, plan([], [instance], pods, quota))  # given up: released
    above_base = _used_cpu(pods) - Quantity.parse("10")
    assert above_base <= room_cpu(source), f"{above_base} above the base after four periods"
    assert cpu(plan([], [instance], pods, quota)) == Quantity.parse("10")


def test_a_pod_that_slipped_in_is_recorded_named_once_and_holds_no_raise_next_period() -> None:
    instance, source = running_vm("vm1")
    old = tenant_pod("old", "7", VM_STARTED)
    first = migration_of("m1", instance, "2026-01-01T10:00:00Z")
    slipper = tenant_pod("slipper", "2", "2026-01-01T10:00:30Z")
    judged = plan([first], [instance], [source, old, slipper])
    assert judged.slipped_in == ["slipper"]
    assert json.loads(judged.annotations[ANNOTATION_SLIPPED_IN])["pods"] == [
        "slipper@2026-01-01T10:00:30Z"
    ]
    assert [w for w in judged.warnings if "slipper@2026-01-01T10:00:30Z" in w], judged.warnings
    quota = _carried(managed_quota("ns", HARD), judged)
    again = plan([first], [instance], [source, old, slipper], quota)
    assert not [w for w in again.warnings if "slipper" in w], "named once, when first judged"
    released = _carried(quota, plan([], [instance], [source, old, slipper], quota))
    assert ANNOTATION_SLIPPED_IN in released["metadata"]["annotations"], "kept while it exists"
    second = migration_of("m2", instance, "2026-01-01T11:00:00Z")
    later = plan([second], [instance], [source, old, slipper], released)
    assert cpu(later) == Quantity.parse("10") + room_cpu(source), "no raise stands on it"


def test_a_pod_that_fitted_the_base_when_it_came_is_never_judged_slipped_in() -> None:
    """The honest case the first try at this got wrong: a pod our webhook admitted within the
    base while room was held is the namespace's own, and the next period's raise stands on it
    like any older pod, however the pods came in order."""
    instance, source = running_vm("vm1")
    old = tenant_pod("old", "7", VM_STARTED)
    first = migration_of("m1", instance, "2026-01-01T10:00:00Z")
    honest = [tenant_pod(f"honest-{i}", "400m", f"2026-01-01T10:00:{i:02}Z") for i in (30, 31)]
    planned = plan([first], [instance], [source, old, *honest])
    assert planned.slipped_in == []
    record = json.loads(planned.annotations[ANNOTATION_SLIPPED_IN])
    assert record["pods"] == record["vmis"] == [], "only that they were judged"
    bigger_vm = tenant_pod("grown", "1", "2026-01-01T08:00:00Z")  # now over the base honestly
    second = migration_of("m2", instance, "2026-01-01T11:00:00Z")
    later = plan([second], [instance], [source, old, bigger_vm, *honest])
    floor = room_cpu(source) + Quantity.parse("8800m")
    assert cpu(later) == floor + room_cpu(source), "the floor counts the honest pods"


def test_the_record_forgets_pods_that_are_gone_and_a_pod_recreated_under_the_name() -> None:
    instance, source = running_vm("vm1")
    record = json.dumps({"pods": ["slipper@2026-01-01T10:00:30Z"]})
    quota = managed_quota("ns", HARD, {ANNOTATION_SLIPPED_IN: record})
    recreated = tenant_pod("slipper", "500m", "2026-01-01T10:20:00Z")
    for pods in ([source], [source, recreated]):
        planned = plan([], [instance], pods, quota)
        assert planned.slipped_in == [] and ANNOTATION_SLIPPED_IN in planned.remove_annotations


def test_a_record_that_is_not_a_list_of_pods_is_rewritten_from_the_judgment() -> None:
    instance, source = running_vm("vm1")
    slipper = tenant_pod("slipper", "9", "2026-01-01T10:00:30Z")
    for text in ("{", '{"a": 1}', "[1, 2]"):
        quota = managed_quota("ns", HARD, {ANNOTATION_SLIPPED_IN: text})
        planned = plan([migration_of("m1", instance)], [instance], [source, slipper], quota)
        assert json.loads(planned.annotations[ANNOTATION_SLIPPED_IN])["pods"] == [
            "slipper@2026-01-01T10:00:30Z"
        ], text


def test_a_vm_migrated_in_the_second_it_started_is_never_judged_slipped_in() -> None:
    """creationTimestamp has whole seconds: a VM started and migrated within one second made its
    source launcher an arrival of the room period, and the tenant's pods of that second, named
    to be judged first, took its place under the base (measured on the local cluster: the
    launcher recorded as slipped in, the tenant's pod not)."""
    instance, source = running_vm("vm1")
    source["metadata"]["creationTimestamp"] = MIGRATED
    first_by_name = tenant_pod("aaa", "7", MIGRATED)
    squeezed = tenant_pod("aab", "2", MIGRATED)
    planned = plan([migration_of("m1", instance)], [instance], [source, first_by_name, squeezed])
    assert source["metadata"]["name"] not in planned.slipped_in
    assert planned.slipped_in == ["aab"]


async def test_explain_names_the_pods_that_slipped_in_and_how_to_free_their_room() -> None:
    instance, source = running_vm("vm1")
    instance["metadata"]["namespace"] = source["metadata"]["namespace"] = "ns"
    slipper = tenant_pod("slipper", "9", "2026-01-01T10:00:30Z")
    record = json.dumps({"pods": ["slipper@2026-01-01T10:00:30Z"]})
    cluster = ReadOnlyCluster(
        {
            "namespaces": [rancher_namespace("ns", LIMIT)],
            "resourcequotas": [managed_quota("ns", HARD, {ANNOTATION_SLIPPED_IN: record})],
            "virtualmachineinstances": [instance],
            "pods": [source, slipper],
        }
    )
    found = await explain(cast(ApiClient, cluster), "ns", kubevirt_version="1.6")
    assert found.slipped_in == ["slipper"]
    assert "delete them to free the room they took): slipper" in render_text(found)
