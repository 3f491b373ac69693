"""Adopting quotas from Harvester's own controllers (resourcequota/plan.py): the skip
annotation with our marker from the first plan, our room key never Harvester's name key,
Harvester's live UID key left alone, an administrator's skip annotation never adopted, and an
adopted quota given back only once no room stands (or at once when paused)."""

from __future__ import annotations

from typing import Any

from harvester_quota.util.annotations import (
    ANNOTATION_ADOPTED,
    ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING,
    adopted_migrating_vm_annotation_key,
    legacy_migrating_vm_annotation_key,
    migrating_uid_annotation_key,
    parse_migration_annotations,
)
from harvester_quota.util.resourcequota.plan import NamespaceSnapshot, patch_for, plan_quota

from tests.objects import launcher_pod, managed_quota, migration, rancher_namespace, vmi
from tests.unit.test_pause import RAISED, ROOM, labelled
from tests.unit.test_quota_plan import V170_HARD, V170_LIMIT, snapshot

ADOPTED = {ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING: "true", ANNOTATION_ADOPTED: "true"}
ADMINS_SKIP = {ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING: "true"}
HARVESTERS_ROOM = '{"limits.cpu":"2","limits.memory":"4563402752"}'
VM1 = vmi("vm1")
"""The one VMI of every snapshot here (its UID is Harvester's key)."""


def taken(
    annotations: dict[str, str],
    *,
    adopt: bool,
    migrating: bool = True,
    raised: bool = False,
    namespace: dict[str, Any] | None = None,
) -> NamespaceSnapshot:
    """vm1 in a Rancher namespace, migrating or not, its quota raised or at its base."""
    vm = VM1
    quota = managed_quota("ns", RAISED if raised else V170_HARD, dict(annotations))
    taken = snapshot(
        namespace or rancher_namespace("ns", V170_LIMIT),
        quota,
        migrations=[migration("m", vm)] if migrating else [],
        vmis=[vm],
        pods=[launcher_pod(vm, "src")],
    )
    taken.adopt_harvester = adopt
    return taken


def uid_key() -> str:
    return migrating_uid_annotation_key(str(VM1["metadata"]["uid"]))


def test_the_first_plan_adopts_a_quota_at_its_base_in_one_write() -> None:
    at_base = taken({}, adopt=True, migrating=False)
    plan = plan_quota(at_base)
    assert plan.annotations == ADOPTED
    patch = patch_for(at_base.quota, plan)
    assert patch is not None and patch["metadata"]["annotations"] == ADOPTED
    assert "spec" not in patch or patch["spec"]["hard"] == {}


def test_an_adopted_quota_is_raised_under_a_key_harvester_never_deletes() -> None:
    plan = plan_quota(taken(ADOPTED, adopt=True))
    assert plan.holds_room and not plan.skipped
    key = adopted_migrating_vm_annotation_key("vm1")
    assert key in plan.annotations
    assert legacy_migrating_vm_annotation_key("vm1") not in plan.annotations


def test_our_old_name_key_is_replaced_by_the_adopted_key_in_the_adopting_write() -> None:
    held = taken({legacy_migrating_vm_annotation_key("vm1"): ROOM}, adopt=True, raised=True)
    plan = plan_quota(held)
    assert legacy_migrating_vm_annotation_key("vm1") in plan.remove_annotations
    assert adopted_migrating_vm_annotation_key("vm1") in plan.annotations
    assert plan.annotations.items() >= ADOPTED.items()


def test_harvesters_uid_key_of_a_running_migration_stays_and_counts_in_no_room() -> None:
    with_harvesters = taken({**ADOPTED, uid_key(): HARVESTERS_ROOM}, adopt=True)
    without = taken(dict(ADOPTED), adopt=True)
    plan = plan_quota(with_harvesters)
    assert uid_key() not in plan.remove_annotations
    assert plan.hard == plan_quota(without).hard


def test_harvesters_uid_key_with_no_migration_is_removed() -> None:
    stale = taken({**ADOPTED, uid_key(): HARVESTERS_ROOM}, adopt=True, migrating=False)
    assert uid_key() in plan_quota(stale).remove_annotations


def test_without_adoption_harvesters_uid_key_is_stripped_as_before() -> None:
    plan = plan_quota(taken({uid_key(): HARVESTERS_ROOM}, adopt=False))
    assert uid_key() in plan.remove_annotations


def test_an_administrators_skip_annotation_is_never_adopted() -> None:
    """The abuse: the marker is ours alone to add; a quota an administrator opted out stays
    opted out (no room raised, no marker written)."""
    plan = plan_quota(taken(ADMINS_SKIP, adopt=True))
    assert plan.skipped and not plan.holds_room
    assert ANNOTATION_ADOPTED not in plan.annotations
    assert ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING not in plan.remove_annotations


def test_beside_harvester_its_uid_key_stays_on_an_administrators_opted_out_quota() -> None:
    plan = plan_quota(taken({**ADMINS_SKIP, uid_key(): HARVESTERS_ROOM}, adopt=True))
    assert uid_key() not in plan.remove_annotations


def test_the_marker_without_the_skip_annotation_adopts_nothing_by_itself() -> None:
    recorded = parse_migration_annotations({ANNOTATION_ADOPTED: "true"})
    assert not recorded.adopted and not recorded.skip_auto_scaling


def test_the_skip_annotation_with_our_marker_is_no_opt_out() -> None:
    recorded = parse_migration_annotations(ADOPTED)
    assert recorded.adopted and not recorded.skip_auto_scaling


def test_given_back_only_once_no_room_stands() -> None:
    """Given back under a standing room, Harvester's resourcequota controller would add our room
    key to its own and raise twice: the annotations stay until the room is released."""
    held = taken({**ADOPTED, adopted_migrating_vm_annotation_key("vm1"): ROOM}, adopt=False)
    plan = plan_quota(held)
    assert plan.holds_room
    assert ANNOTATION_ADOPTED not in plan.remove_annotations
    released = taken(
        {**ADOPTED, adopted_migrating_vm_annotation_key("vm1"): ROOM},
        adopt=False,
        migrating=False,
        raised=True,
    )
    plan = plan_quota(released)
    assert plan.hard == V170_HARD
    assert set(plan.remove_annotations) >= {
        ANNOTATION_ADOPTED,
        ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING,
        adopted_migrating_vm_annotation_key("vm1"),
    }


def test_a_paused_namespace_gives_its_rooms_back_and_stays_adopted() -> None:
    """Given back to Harvester while we still plan it, Harvester's raise and our plan's lowering
    would fight: paused, nobody raises, Harvester's live UID key stays."""
    paused = taken(
        {**ADOPTED, adopted_migrating_vm_annotation_key("vm1"): ROOM, uid_key(): HARVESTERS_ROOM},
        adopt=True,
        raised=True,
        namespace=labelled("true"),
    )
    plan = plan_quota(paused)
    assert plan.skipped and plan.hard == V170_HARD
    assert adopted_migrating_vm_annotation_key("vm1") in plan.remove_annotations
    assert not {ANNOTATION_ADOPTED, ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING, uid_key()} & set(
        plan.remove_annotations
    )


def test_a_stale_marker_goes_so_a_later_administrators_skip_is_never_taken_for_ours() -> None:
    """The abuse: our marker left behind after someone removed the skip annotation, then an
    administrator's skip annotation, would read as ours (adopted, raised)."""
    stale = taken({ANNOTATION_ADOPTED: "true"}, adopt=False, migrating=False)
    assert ANNOTATION_ADOPTED in plan_quota(stale).remove_annotations


def test_a_standalone_quotas_first_base_is_not_lowered_by_harvesters_uid_key() -> None:
    """Harvester records its UID key without Rancher's annotation too, and never raises there:
    the first plan of a standalone quota takes spec.hard whole."""
    quota = managed_quota("ns", V170_HARD, {uid_key(): HARVESTERS_ROOM})
    standalone = snapshot(
        {"metadata": {"name": "ns"}},
        quota,
        migrations=[migration("m", VM1)],
        vmis=[VM1],
        pods=[launcher_pod(VM1, "src")],
    )
    standalone.adopt_harvester = True
    plan = plan_quota(standalone)
    assert plan.base is not None
    assert {key: str(value) for key, value in plan.base.hard.items()} == V170_HARD


def test_paused_without_adoption_the_quota_is_given_back_with_its_rooms() -> None:
    """The uninstall's steps (paused, adoption off): every room and the adoption go in one
    write, whatever migration runs."""
    paused = taken(
        {**ADOPTED, adopted_migrating_vm_annotation_key("vm1"): ROOM},
        adopt=False,
        raised=True,
        namespace=labelled("true"),
    )
    plan = plan_quota(paused)
    assert plan.hard == V170_HARD
    assert {ANNOTATION_ADOPTED, ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING} <= set(
        plan.remove_annotations
    )
