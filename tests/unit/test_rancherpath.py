"""Raising through Rancher's annotation where Rancher protects its default quota (pure)."""

from __future__ import annotations

import datetime
from typing import Any

from harvester_quota.util.annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA as CATTLE
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.resourcequota.base import (
    ANNOTATION_RANCHER_APPLIED as APPLIED,
)
from harvester_quota.util.resourcequota.base import (
    ANNOTATION_RANCHER_BASE as BASE,
)
from harvester_quota.util.resourcequota.base import (
    ANNOTATION_RANCHER_GIVEN as GIVEN,
)
from harvester_quota.util.resourcequota.base import Base, rancher_base
from harvester_quota.util.resourcequota.plan import NamespaceSnapshot, QuotaPlan
from harvester_quota.util.resourcequota.rancherpath import (
    annotation_patch,
    given_migrations,
    raised_annotation,
)
from harvester_quota.util.resourcequota.rooms import MigrationRoom, RoomPlan

SEED = '{"limit":{"limitsCpu":"3000m","limitsMemory":"5000Mi"}}'
RAISED = '{"limit":{"limitsCpu":"5015m","limitsMemory":"10040344313"}}'


def namespace(**annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": "ns", "annotations": annotations}}


def plan(hard: dict[str, str], holding: bool) -> QuotaPlan:
    rooms = (
        [MigrationRoom("m", "uid", "vm1", "vmi-uid", "Pending", {}, None, True, "pending")]
        if holding
        else []
    )
    base = Base(
        hard={"limits.cpu": Quantity.parse("3"), "limits.memory": Quantity.parse("5000Mi")},
        source="rancher",
    )
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    snapshot = NamespaceSnapshot(namespace(), {}, [], {}, [], now)
    return QuotaPlan(
        managed=True, snapshot=snapshot, base=base, hard=hard, rooms=RoomPlan(rooms=rooms)
    )


RAISE = {"limits.cpu": "5015m", "limits.memory": "10040344313"}
AT_BASE = {"limits.cpu": "3", "limits.memory": "5000Mi"}


def test_a_raise_writes_the_annotation_and_records_the_base() -> None:
    patch = annotation_patch(namespace(**{CATTLE: SEED}), plan(RAISE, holding=True))
    assert patch == {CATTLE: RAISED, BASE: SEED, APPLIED: RAISED, GIVEN: "uid"}


def test_while_raised_the_base_is_the_recorded_text() -> None:
    raised = namespace(**{CATTLE: RAISED, BASE: SEED, APPLIED: RAISED, GIVEN: "uid"})
    assert rancher_base(raised) == {
        "limits.cpu": Quantity.parse("3"),
        "limits.memory": Quantity.parse("5000Mi"),
    }
    assert annotation_patch(raised, plan(RAISE, holding=True)) is None, "already there"


def test_a_release_restores_the_exact_text_and_drops_the_records() -> None:
    raised = namespace(**{CATTLE: RAISED, BASE: SEED, APPLIED: RAISED, GIVEN: "uid"})
    assert annotation_patch(raised, plan(AT_BASE, holding=False)) == {
        CATTLE: SEED,
        BASE: None,
        APPLIED: None,
        GIVEN: None,
    }


def test_an_edit_by_someone_else_becomes_the_base() -> None:
    edited = '{"limit":{"limitsCpu":"8","limitsMemory":"5000Mi"}}'
    ns = namespace(**{CATTLE: edited, BASE: SEED, APPLIED: RAISED})
    assert rancher_base(ns) == {
        "limits.cpu": Quantity.parse("8"),
        "limits.memory": Quantity.parse("5000Mi"),
    }
    assert annotation_patch(ns, plan(RAISE, holding=True)) == {
        BASE: None,
        APPLIED: None,
        GIVEN: None,
    }


def test_nothing_to_do_at_the_base() -> None:
    assert annotation_patch(namespace(**{CATTLE: SEED}), plan(AT_BASE, holding=False)) is None


def test_other_fields_are_kept_and_values_unchanged_keep_their_text() -> None:
    text = '{"limit":{"pods":"10","limitsCpu":"3000m","extended":{"example.com/gpu":"2"}}}'
    raised = raised_annotation(text, {"limits.cpu": "5", "pods": "10"})
    assert raised == '{"limit":{"pods":"10","limitsCpu":"5","extended":{"example.com/gpu":"2"}}}'
    assert raised_annotation(text, {"limits.cpu": "3"}) == text


def test_the_same_raise_for_another_migration_records_it_as_given() -> None:
    """Review 50, major 1: a raise whose text stands but was given for another migration (one
    that ended) is written again, recording the migration it is for now."""
    raised = namespace(**{CATTLE: RAISED, BASE: SEED, APPLIED: RAISED, GIVEN: "ended-uid"})
    assert annotation_patch(raised, plan(RAISE, holding=True)) == {
        CATTLE: RAISED,
        BASE: SEED,
        APPLIED: RAISED,
        GIVEN: "uid",
    }


def test_a_given_record_counts_only_beside_our_own_raise() -> None:
    """The record of given migrations counts only while the annotation is the raise we wrote:
    with someone else's text there (a project owner's edit), nothing is given by us, whatever
    the record names."""
    ours = namespace(**{CATTLE: RAISED, BASE: SEED, APPLIED: RAISED, GIVEN: "a,b"})
    assert given_migrations(ours) == {"a", "b"}
    edited = namespace(**{CATTLE: SEED, BASE: SEED, APPLIED: RAISED, GIVEN: "a,b"})
    assert given_migrations(edited) == frozenset()
    forged = namespace(**{CATTLE: SEED, GIVEN: "a"})
    assert given_migrations(forged) == frozenset()
    older = namespace(**{CATTLE: RAISED, BASE: SEED, APPLIED: RAISED})
    assert given_migrations(older) is None, "a raise of an older version: all it covers"
    recorded = annotation_patch(older, plan(RAISE, holding=True))
    assert recorded is not None and recorded[GIVEN] == "uid", "the first reconcile records it"
    assert recorded[CATTLE] == RAISED, "the raise itself stands as it is"
