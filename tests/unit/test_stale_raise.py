"""The safety net (controller/resourcequota/staleraise.py): a raise standing while no migration
holds room is found within two sweeps, reported once per episode and planned again; a release
under way is never taken for one."""

from __future__ import annotations

import asyncio
import json
import logging
from functools import partial
from typing import Any

import pytest
from harvester_quota.config.metrics import QuotaMetrics
from harvester_quota.controller.resourcequota.planner import NamespacePlanner
from harvester_quota.controller.resourcequota.staleraise import (
    REASON,
    LeftBehind,
    StaleRaiseSweep,
    left_behind,
    left_to_give_back,
    raise_shows,
)
from harvester_quota.controller.resourcequota.writes import is_labelled
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.util.annotations import LABEL_ROOM_HELD
from harvester_quota.util.resourcequota.base import (
    ANNOTATION_APPLIED,
    ANNOTATION_BASE,
    ANNOTATION_RANCHER_APPLIED,
    ANNOTATION_RANCHER_BASE,
)
from harvester_quota.util.resourcequota.plan import NamespaceSnapshot, QuotaPlan, plan_quota
from prometheus_client import CollectorRegistry

from tests.objects import managed_quota, plain_namespace, rancher_namespace
from tests.unit.test_resourcequota_controller import NOW, real_planner

BASE = {"limits.cpu": "3"}
RAISED = {"limits.cpu": "5"}
ROOM = json.dumps({"limits.cpu": "2"})


def compact(hard: dict[str, str]) -> str:
    """An annotation as the controller writes it (compact JSON)."""
    return json.dumps(hard, separators=(",", ":"))


def standalone_raised(namespace: str = "ns") -> dict[str, Any]:
    """A quota as our raise left it: 2 CPUs above its recorded base, a VM's room recorded."""
    return managed_quota(
        namespace,
        RAISED,
        {
            ANNOTATION_BASE: compact(BASE),
            ANNOTATION_APPLIED: compact(RAISED),
            "harvesterhci.io/migrating-vm1": ROOM,
        },
    )


def plan(namespace: dict[str, Any], quota: dict[str, Any]) -> QuotaPlan:
    """The plan with no migration at all (every room ended)."""
    return plan_quota(
        NamespaceSnapshot(
            namespace=namespace, quota=quota, migrations=[], vmis={}, pods=[], now=NOW
        )
    )


# What shows a raise (no plan) ----------------------------------------------------------------


def test_a_quota_at_its_recorded_base_shows_no_raise() -> None:
    at_base = managed_quota("ns", BASE, {ANNOTATION_BASE: compact(BASE)})
    assert not raise_shows(at_base, plain_namespace("ns"))


def test_records_a_label_or_spec_hard_off_its_base_show_a_raise() -> None:
    namespace = plain_namespace("ns")
    assert raise_shows(standalone_raised(), namespace)
    above = managed_quota("ns", RAISED, {ANNOTATION_BASE: compact(BASE)})
    assert raise_shows(above, namespace)
    labelled = {**namespace, "metadata": {"name": "ns", "labels": {LABEL_ROOM_HELD: "true"}}}
    assert raise_shows(managed_quota("ns", BASE, {ANNOTATION_BASE: compact(BASE)}), labelled)
    rancher = rancher_namespace("ns", {"limitsCpu": "3000m"})
    assert raise_shows(managed_quota("ns", RAISED), rancher)
    assert not raise_shows(managed_quota("ns", BASE), rancher)


# What a plan that holds no room leaves to give back -------------------------------------------


def test_a_raise_with_no_migration_left_is_left_to_give_back() -> None:
    quota, namespace = standalone_raised(), plain_namespace("ns")
    why = left_to_give_back(
        quota, namespace, plan(namespace, quota), through_rancher=False, label_due=False
    )
    assert why == "spec.hard or its records stand above the plan"


def test_a_quota_at_its_plan_leaves_nothing_unless_its_label_is_due() -> None:
    quota = managed_quota("ns", BASE, {ANNOTATION_BASE: compact(BASE)})
    namespace = plain_namespace("ns")
    planned = plan(namespace, quota)
    assert (
        left_to_give_back(quota, namespace, planned, through_rancher=False, label_due=False) is None
    )
    assert left_to_give_back(quota, namespace, planned, through_rancher=True, label_due=True) == (
        "the room-held label stands for a room no longer held"
    )


def test_a_raise_through_rancher_left_on_its_annotation_is_left_to_give_back() -> None:
    base_text = json.dumps({"limit": {"limitsCpu": "3000m"}})
    raised_text = json.dumps({"limit": {"limitsCpu": "5000m"}})
    namespace = rancher_namespace("ns", {"limitsCpu": "5000m"})
    namespace["metadata"]["annotations"] |= {
        ANNOTATION_RANCHER_BASE: base_text,
        ANNOTATION_RANCHER_APPLIED: raised_text,
        "field.cattle.io/resourceQuota": raised_text,
    }
    quota = managed_quota("ns", RAISED)
    why = left_to_give_back(
        quota, namespace, plan(namespace, quota), through_rancher=True, label_due=False
    )
    assert why == "Rancher's annotation still carries the raise"


def test_a_base_rancher_never_copied_into_the_quota_names_rancher_agent() -> None:
    namespace = rancher_namespace("ns", {"limitsCpu": "3000m"})
    quota = managed_quota("ns", RAISED)
    why = left_to_give_back(
        quota, namespace, plan(namespace, quota), through_rancher=True, label_due=False
    )
    assert why == "Rancher's agent has not copied the annotation's base into the quota"


# The sweep ------------------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def event(self, obj: dict[str, Any], kind: str, reason: str, message: str) -> None:
        self.events.append((obj["metadata"]["namespace"], reason, message))


class Planner:
    """The sweep's candidates and what each leaves behind: namespaces whose raise stands (`standing`: key -> why); `broken` raises."""

    def __init__(self) -> None:
        self.standing: dict[str, str] = {}
        self.broken: set[str] = set()

    def candidates(self) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
        keys = sorted(set(self.standing) | self.broken)
        return [(key, plain_namespace(key), standalone_raised(key)) for key in keys]

    def left_behind(self, key: str, namespace: dict[str, Any], quota: dict[str, Any]) -> str | None:
        if key in self.broken:
            raise ValueError("a plan that fails")
        return self.standing.get(key)


def sweep_of(
    planner: Planner, clock: FakeClock
) -> tuple[StaleRaiseSweep, list[str], Recorder, QuotaMetrics]:
    queued: list[str] = []
    recorder = Recorder()
    metrics = QuotaMetrics(CollectorRegistry())
    sweep = StaleRaiseSweep(
        planner.candidates,
        planner.left_behind,
        queued.append,
        clock=clock,
        metrics=metrics,
        recorder=recorder,  # type: ignore[arg-type]
        interval=30.0,
        stale_after=30.0,
    )
    return sweep, queued, recorder, metrics


async def test_a_raise_standing_a_whole_interval_is_reported_once_and_queued_every_sweep(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, planner = FakeClock(), Planner()
    sweep, queued, recorder, metrics = sweep_of(planner, clock)
    planner.standing["ns"] = "spec.hard or its records stand above the plan"
    assert await sweep.sweep() == []  # first seen: a release may be under way
    clock.step(30.0)
    with caplog.at_level(logging.WARNING):
        assert await sweep.sweep() == ["ns"]
    assert queued == ["ns"]
    assert [(ns, reason) for ns, reason, _ in recorder.events] == [("ns", REASON)]
    assert "a raise stood 30s with no migration holding room" in caplog.text
    assert metrics.stale_raises._value.get() == 1  # type: ignore[attr-defined]
    clock.step(30.0)
    assert await sweep.sweep() == ["ns"]  # still standing: queued again, not reported again
    assert queued == ["ns", "ns"] and len(recorder.events) == 1
    planner.standing.clear()
    assert await sweep.sweep() == [] and "ns" not in sweep.episodes
    planner.standing["ns"] = "again"
    await sweep.sweep()
    clock.step(30.0)
    await sweep.sweep()
    assert len(recorder.events) == 2  # a new episode is reported anew


async def test_a_release_under_way_is_never_taken_for_a_stale_raise() -> None:
    clock, planner = FakeClock(), Planner()
    sweep, queued, recorder, _ = sweep_of(planner, clock)
    planner.standing["ns"] = "spec.hard or its records stand above the plan"
    await sweep.sweep()
    planner.standing.clear()  # the reconcile released it before the next sweep
    clock.step(30.0)
    assert await sweep.sweep() == [] and queued == [] and recorder.events == []


async def test_one_namespace_whose_plan_fails_does_not_stop_the_sweep(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, planner = FakeClock(), Planner()
    sweep, queued, _, _ = sweep_of(planner, clock)
    planner.broken.add("a-broken")
    planner.standing["b-raised"] = "spec.hard or its records stand above the plan"
    await sweep.sweep()
    clock.step(30.0)
    with caplog.at_level(logging.ERROR):
        assert await sweep.sweep() == ["b-raised"]
    assert queued == ["b-raised"]
    assert "namespace a-broken: cannot tell whether a raise stands" in caplog.text


async def test_the_sweep_runs_every_interval_until_stopped() -> None:
    clock, planner = FakeClock(), Planner()
    sweep, queued, _, _ = sweep_of(planner, clock)
    planner.standing["ns"] = "spec.hard or its records stand above the plan"
    sweep.start()
    await clock.advance(30.0)  # first look
    assert queued == []
    await clock.advance(30.0)  # second look, a whole interval later
    assert queued == ["ns"]
    await sweep.stop()
    await clock.advance(60.0)
    assert queued == ["ns"]
    assert clock.sleepers == 0
    await asyncio.sleep(0)


# The planner's side (left_behind) ---------------------------------------------------------------


def view_of(planner: NamespacePlanner) -> LeftBehind:
    """The sweep's `left_behind` of `planner`, no label's linger running (a label is due once no
    room is held)."""
    return partial(left_behind, planner, lambda _key, ns, held: not held and is_labelled(ns))


def test_the_planners_view_finds_what_its_own_plan_would_give_back() -> None:
    namespace = plain_namespace("ns")
    view = view_of(real_planner(standalone_raised()))
    assert view("ns", namespace, standalone_raised()) == (
        "spec.hard or its records stand above the plan"
    )
    at_base = managed_quota("ns", BASE, {ANNOTATION_BASE: compact(BASE)})
    assert view_of(real_planner(at_base))("ns", namespace, at_base) is None


def test_a_label_kept_for_good_is_never_due_but_a_leftover_one_is() -> None:
    """A Rancher namespace raised directly keeps its label for good (fail closed): not stale;
    told to fail open, the same label with no room is one to take off."""
    labelled = rancher_namespace("ns", {"limitsCpu": "3000m"})
    labelled["metadata"]["labels"] = {LABEL_ROOM_HELD: "true"}
    at_base = managed_quota("ns", BASE)
    kept = view_of(real_planner(at_base, fail_closed=True))
    assert kept("ns", labelled, at_base) is None
    left = view_of(real_planner(at_base, fail_closed=False))
    assert left("ns", labelled, at_base) == ("the room-held label stands for a room no longer held")


def test_a_namespace_mtq_mode_handles_is_no_stale_raise_of_ours() -> None:
    """MTQ mode's budget stands above the recorded base by design: once our raise there is
    given back, the sweep does not take it for a stale raise of ours."""
    namespace = plain_namespace("ns")
    budget = managed_quota("ns", RAISED, {ANNOTATION_BASE: compact(BASE)})
    planner = real_planner(budget)
    assert view_of(planner)("ns", namespace, budget) is not None
    planner.defer_to = lambda _key: True
    assert view_of(planner)("ns", namespace, budget) is None


def test_a_rancher_namespace_labelled_for_good_at_its_base_shows_no_raise() -> None:
    """Review finding: every Rancher namespace raised directly keeps its label for good
    (fail closed), so a pre-filter that counted the label planned every such namespace."""
    labelled = rancher_namespace("ns", {"limitsCpu": "3000m"})
    labelled["metadata"]["labels"] = {LABEL_ROOM_HELD: "true"}
    assert not raise_shows(managed_quota("ns", BASE), labelled)
    assert raise_shows(managed_quota("ns", RAISED), labelled)


async def test_no_sweep_runs_before_the_caches_have_synced() -> None:
    """Review finding: caches still filling show raises whose migrations are not listed yet."""
    clock, planner = FakeClock(), Planner()
    queued: list[str] = []
    synced = [False]
    sweep = StaleRaiseSweep(
        planner.candidates,
        planner.left_behind,
        queued.append,
        clock=clock,
        metrics=QuotaMetrics(CollectorRegistry()),
        recorder=Recorder(),  # type: ignore[arg-type]
        interval=30.0,
        stale_after=30.0,
        ready=lambda: synced[0],
    )
    planner.standing["ns"] = "spec.hard or its records stand above the plan"
    sweep.start()
    await clock.advance(90.0)
    assert sweep.episodes == {} and queued == []
    synced[0] = True
    await clock.advance(60.0)
    assert queued == ["ns"]
    await sweep.stop()
