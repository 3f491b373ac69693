"""Quota refusals noted as the migrations change, read by the namespace's reconcile."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from harvester_quota.config.metrics import QuotaMetrics
from harvester_quota.controller.resourcequota.reports import (
    STANDING_SINCE,
    NamespaceReports,
    RefusalTracker,
    refused_by_quota,
)
from harvester_quota.generic.views import NamespaceViews
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.util.resourcequota.planviews import migration_plan_view, plan_acted_on
from prometheus_client import CollectorRegistry

from tests.objects import migration, vmi
from tests.unit.test_plan_inputs import inputs as plan_inputs

KEY = "ns/m1"


def standing(tracker: RefusalTracker) -> int:
    """Migrations `tracker` holds refused now, in all namespaces."""
    return sum(
        1
        for tracked in tracker._by_namespace.values()
        for refusal in tracked.pending.values()
        if refusal.ended is None
    )


def view(*, phase: str = "Pending", rejected: bool = False, uid: str = "u1") -> dict[str, Any]:
    return migration_plan_view(migration("m1", vmi("vm1"), phase=phase, uid=uid, rejected=rejected))


def refused(uid: str = "u1") -> dict[str, Any]:
    return view(rejected=True, uid=uid)


def pending() -> dict[str, Any]:
    return view()


def started() -> dict[str, Any]:
    """Past Pending: KubeVirt admitted its target pod."""
    return view(phase="Scheduling")


def test_only_a_pending_migration_with_the_condition_true_is_refused() -> None:
    assert refused_by_quota(refused())
    assert not refused_by_quota(pending())
    assert not refused_by_quota(view(phase="Scheduling", rejected=True))
    assert not refused_by_quota(None)
    false_condition = pending()
    false_condition["status"]["conditions"] = [
        {"type": "migrationRejectedByResourceQuota", "status": "False"}
    ]
    assert not refused_by_quota(false_condition)


def test_a_refusal_set_and_cleared_before_a_settle_is_counted_once_then_timed() -> None:
    clock = FakeClock()
    tracker = RefusalTracker(clock)
    tracker.seen(KEY, pending())
    tracker.seen(KEY, refused())
    clock.step(2.5)
    tracker.seen(KEY, pending())
    settled = tracker.settle("ns")
    assert (settled.new_refusals, settled.blocked_seconds) == (1, [])
    clock.step(1)
    tracker.seen(KEY, started())
    last = tracker.settle("ns")
    assert (last.new_refusals, last.blocked_seconds) == (0, [2.5]), "until it was seen cleared"
    assert standing(tracker) == 0


def test_a_migration_deleted_while_refused_is_timed_to_its_deletion() -> None:
    clock = FakeClock()
    tracker = RefusalTracker(clock)
    tracker.seen(KEY, refused())
    tracker.seen(KEY, refused())  # a status write that keeps the condition: the same refusal
    first = tracker.settle("ns")
    assert (first.new_refusals, first.blocked_seconds) == (1, [])
    assert standing(tracker) == 1
    clock.step(4)
    tracker.seen(KEY, None)
    last = tracker.settle("ns")
    assert (last.new_refusals, last.blocked_seconds) == (0, [4.0])


@pytest.mark.parametrize("settle_between", [False, True])
def test_refused_again_is_the_same_migration_whenever_the_reconciles_ran(
    settle_between: bool,
) -> None:
    """KubeVirt refuses, the condition clears, KubeVirt refuses again: one migration refused,
    blocked from the first refusal to the last clearing, whether a reconcile read the tracker
    in between or not."""
    clock = FakeClock()
    tracker = RefusalTracker(clock)
    counted = 0
    tracker.seen(KEY, refused())
    clock.step(1)
    tracker.seen(KEY, pending())
    if settle_between:
        counted += tracker.settle("ns").new_refusals
    tracker.seen(KEY, refused())
    clock.step(2)
    tracker.seen(KEY, pending())
    tracker.seen(KEY, started())
    settled = tracker.settle("ns")
    assert (counted + settled.new_refusals, settled.blocked_seconds) == (1, [3.0])


def test_a_migration_recreated_under_the_same_name_is_another_refusal() -> None:
    clock = FakeClock()
    tracker = RefusalTracker(clock)
    tracker.seen(KEY, refused("u1"))
    clock.step(1)
    tracker.seen(KEY, refused("u2"))  # the delete and the create folded, as after a relist
    settled = tracker.settle("ns")
    assert (settled.new_refusals, settled.blocked_seconds) == (2, [1.0])
    assert standing(tracker) == 1


def test_namespaces_are_settled_and_forgotten_apart() -> None:
    """Forgetting a namespace drops its ended refusals uncounted and keeps those standing, as
    counted: never counted later, still exported while they stand, gone when they end."""
    tracker = RefusalTracker(FakeClock(wall=WALL))
    tracker.seen("a/m1", refused())
    tracker.seen("a/m2", refused())
    tracker.seen("a/m2", None)
    tracker.seen("b/m1", refused())
    tracker.forget("a")
    assert tracker.settle("a").new_refusals == 0 and tracker.settle("a").blocked_seconds == []
    assert tracker.settle("b").new_refusals == 1
    assert set(tracker.standing_since()) == {"a", "b"}
    tracker.seen("a/m1", started())
    assert tracker.settle("a").new_refusals == 0
    assert set(tracker.standing_since()) == {"b"}


def test_a_block_standing_when_its_namespace_is_ours_again_is_exported_and_counted_once() -> None:
    """The managed quota deleted (the reconcile forgets the namespace) and made again while a
    migration stands refused: its block is exported at once, though the migration does not
    change, and neither a refusal cleared and come back nor its end counts it twice."""
    clock = FakeClock(wall=WALL)
    managed = [True]
    tracker = RefusalTracker(clock, counted=lambda _namespace: managed[0])
    tracker.seen(KEY, refused())
    assert tracker.settle("ns").new_refusals == 1
    managed[0] = False
    tracker.forget("ns")
    assert tracker.standing_since() == {}
    managed[0] = True
    assert set(tracker.standing_since()) == {"ns"}
    tracker.seen(KEY, pending())
    tracker.seen(KEY, refused())
    clock.step(2)
    tracker.seen(KEY, started())
    settled = tracker.settle("ns")
    assert (settled.new_refusals, settled.blocked_seconds) == (0, [2])


def test_the_reconcile_counts_a_refusal_its_run_came_too_late_to_see() -> None:
    """On a busy control plane the workqueue folds "refused" and "cleared" into one reconcile,
    which sees a migration no longer refused: it still counts the refusal (failed in a loaded
    CI-equivalent when counted from what the reconcile saw)."""
    inputs, _queued = plan_inputs()  # namespace ns has a managed quota
    clock = inputs.management.clock
    assert isinstance(clock, FakeClock)
    registry = CollectorRegistry()
    reports = NamespaceReports(QuotaMetrics(registry), None, inputs.refusals)  # type: ignore[arg-type]
    inputs._migration_changed(KEY, refused())
    clock.step(0.5)
    inputs._migration_changed(KEY, pending())
    inputs._migration_changed(KEY, started())
    reports._count_refusals("ns")
    reports._count_refusals("ns")
    assert (
        registry.get_sample_value("harvester_quota_target_pods_refused_total", {"namespace": "ns"})
        == 1
    )
    assert registry.get_sample_value("harvester_quota_migration_blocked_seconds_count") == 1
    assert registry.get_sample_value("harvester_quota_migration_blocked_seconds_sum") == 0.5
    assert [shown["status"] for shown in inputs.migration_views.namespace("ns")] == [
        started()["status"]
    ]


def test_a_standby_keeps_only_the_refusals_that_stand_and_its_first_settle_counts_those() -> None:
    """A warm standby settles nothing: refusals that end while it waits leave no note (the
    leader of the time reported them), one standing when it wins is counted then."""
    clock = FakeClock()
    tracker = RefusalTracker(clock)
    tracker.standby = True
    for uid in ("u1", "u2", "u3"):
        tracker.seen(KEY, refused(uid))
        tracker.seen(KEY, started())
    assert tracker.settle("ns").new_refusals == 0, "ended while standby: nothing kept"
    tracker.seen(KEY, refused("u4"))
    tracker.standby = False
    assert tracker.settle("ns").new_refusals == 1


def refused_at(moment: str | None, uid: str = "u1") -> dict[str, Any]:
    """Refused, with the condition's lastProbeTime as virt-controller sets it (None: none)."""
    found = refused(uid)
    if moment is not None:
        found["status"]["conditions"][0]["lastProbeTime"] = moment
    return found


WALL = datetime.datetime(2026, 11, 26, 12, 0, tzinfo=datetime.UTC)


def test_the_oldest_standing_refusal_is_reported_while_it_stands_and_not_once_cleared() -> None:
    """A block is seen while it lasts: per namespace, when the longest-standing refusal began
    (a refused-again migration keeps its first moment); a cleared one no longer counts, though
    it is still Pending."""
    clock = FakeClock(wall=WALL)
    start = clock.now().timestamp()
    tracker = RefusalTracker(clock)
    assert tracker.standing_since() == {}
    tracker.seen(KEY, refused())
    clock.step(10)
    tracker.seen("ns/m2", refused("u2"))
    clock.step(400)
    assert tracker.standing_since() == {"ns": start}
    tracker.seen(KEY, pending())
    assert tracker.standing_since() == {"ns": start + 10}, "m1 cleared: m2 is the oldest"
    tracker.seen("ns/m2", started())
    tracker.seen(KEY, refused())
    assert tracker.standing_since() == {"ns": start}, "refused again: its first moment"
    tracker.seen(KEY, started())
    assert tracker.standing_since() == {}


def test_a_controller_that_starts_mid_block_reports_when_kubevirt_says_it_began() -> None:
    """A new leader (a restart, a cold standby, an upgrade) first sees a refusal 4 minutes
    into it: the start is virt-controller's lastProbeTime, not its first sight, so the alert's
    5 minutes do not start over. A time in the future, or one that cannot be read, is our first
    sight (a block never starts later than we saw it)."""
    clock = FakeClock(wall=WALL)
    tracker = RefusalTracker(clock)
    tracker.seen(KEY, refused_at("2026-11-26T11:56:00Z"))
    tracker.seen("other/m1", refused_at("2026-11-26T12:30:00Z"))
    tracker.seen("third/m1", refused_at("yesterday"))
    tracker.seen("fourth/m1", refused_at(None))
    now = WALL.timestamp()
    assert tracker.standing_since() == {
        "ns": now - 240,
        "other": now,
        "third": now,
        "fourth": now,
    }


def test_the_view_keeps_the_refusals_probe_time_and_no_other_conditions() -> None:
    view = migration_plan_view(
        {
            **refused_at("2026-11-26T11:56:00Z"),
            "status": {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "migrationRejectedByResourceQuota",
                        "status": "True",
                        "lastProbeTime": "2026-11-26T11:56:00Z",
                        "reason": "x",
                    },
                    {"type": "Other", "status": "True", "lastProbeTime": "2026-11-26T11:00:00Z"},
                ],
            },
        }
    )
    assert view["status"]["conditions"] == [
        {
            "type": "migrationRejectedByResourceQuota",
            "status": "True",
            "lastProbeTime": "2026-11-26T11:56:00Z",
        },
        {"type": "Other", "status": "True"},
    ]


def test_the_scrape_exports_the_standing_refusals_and_nothing_from_a_standby() -> None:
    """Read at each scrape: a reconcile that failed cannot leave a value behind; a cleared
    refusal is gone from the next scrape; a standby exports none."""
    clock = FakeClock(wall=WALL)
    registry = CollectorRegistry()
    tracker = RefusalTracker(clock)
    registry.register(tracker)
    since = STANDING_SINCE
    tracker.seen(KEY, refused_at("2026-11-26T11:56:00Z"))
    assert registry.get_sample_value(since, {"namespace": "ns"}) == WALL.timestamp() - 240
    tracker.standby = True
    assert registry.get_sample_value(since, {"namespace": "ns"}) is None
    tracker.standby = False
    tracker.seen(KEY, started())
    assert registry.get_sample_value(since, {"namespace": "ns"}) is None


def test_a_refusal_and_its_end_each_queue_the_namespace_through_the_phase_classes() -> None:
    """The tracker's contract (every change it notes queues the namespace) under the views'
    phase classes: refused while Pending, admitted (Scheduling, the condition still set, as
    KubeVirt leaves it until it drops it) and the condition dropped are each told."""
    queued: list[str] = []
    views: NamespaceViews[dict[str, Any]] = NamespaceViews(queued.append, acted_on=plan_acted_on)
    tracker = RefusalTracker(FakeClock(wall=WALL))
    steps = [refused(), view(phase="Scheduling", rejected=True), view(phase="Scheduling")]
    told = []
    for step in steps:
        before = len(queued)
        tracker.seen(KEY, step)
        views.changed(KEY, step)
        told.append(len(queued) > before)
    assert told == [True, True, True]
    assert tracker.standing_since() == {}


def test_outside_the_room_mode_a_refusal_is_kept_only_while_it_stands_and_never_exported() -> None:
    """A namespace not `counted` (no managed quota, or MTQ mode's) is never settled by the room
    mode: a tenant refused there again and again leaves no record once each migration goes,
    and none is exported. One standing when the namespace becomes the room mode's is counted
    then, its blocked time from our first sight of it."""
    clock = FakeClock(wall=WALL)
    room = {"ns"}
    tracker = RefusalTracker(clock, counted=lambda namespace: namespace in room)
    for n in range(1000):
        tracker.seen("other/m1", refused(f"u{n}"))
        assert tracker.standing_since() == {}, "not exported"
        tracker.seen("other/m1", None)
    assert tracker.settle("other").new_refusals == 0, "nothing left behind"
    tracker.seen("other/m2", refused_at("2026-11-26T11:59:00Z", uid="v1"))
    clock.step(5)
    room.add("other")
    assert tracker.standing_since() == {"other": WALL.timestamp() - 60}
    tracker.seen("other/m2", started())
    settled = tracker.settle("other")
    assert (settled.new_refusals, settled.blocked_seconds) == (1, [5])


def test_a_refusal_that_ends_while_its_namespace_has_no_managed_quota_leaves_no_record() -> None:
    """The quota deleted and made again before any reconcile (a GitOps tool, Rancher restoring
    its default quota): a refusal that ended in between is dropped, not held standing, so the
    block alert does not fire for it once the quota is back."""
    clock = FakeClock()
    managed = [True]
    tracker = RefusalTracker(clock, counted=lambda _namespace: managed[0])
    tracker.seen(KEY, refused())
    managed[0] = False
    tracker.seen(KEY, started())
    tracker.seen(KEY, None)
    managed[0] = True
    assert tracker.standing_since() == {}
    assert tracker.settle("ns").new_refusals == 0
