"""Runs asked for soon (generic/soonruns.py, Controller.enqueue_soon): a burst of changes to one
key read by one run, never held back past the window, and no run lost."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import cast

import pytest
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.controller import Controller
from harvester_quota.generic.informer import SharedInformer
from harvester_quota.generic.resource import PODS, Object
from harvester_quota.generic.soonruns import SoonRuns
from harvester_quota.testbench.clock import FakeClock, settle

from tests.unit.fakes import HANG, FakeApi, ScriptedListerWatcher, event, pod

WINDOW = 0.1


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def started_with(
    clock: FakeClock, handler: Callable[[str, Object | None], Awaitable[None]]
) -> tuple[Controller, SharedInformer]:
    """A started controller with the soon window whose one handler is `handler`."""
    lw = ScriptedListerWatcher()
    lw.add_list(rv="1")
    lw.add_watch(HANG)
    informer = SharedInformer(lw, name="pods", clock=clock, rng=random.Random(1))
    controller = Controller(cast(ApiClient, FakeApi()), informer, PODS, name="t", clock=clock)
    controller.set_soon_window(WINDOW)
    controller.on_change("handler", handler)
    informer.start()
    await informer.wait_for_sync(1)
    controller.start()
    await settle(100)
    return controller, informer


async def running(clock: FakeClock, runs: list[str]) -> tuple[Controller, SharedInformer]:
    """A started controller with the soon window, recording every run's key."""

    async def record(key: str, _obj: Object | None) -> None:
        runs.append(key)

    return await started_with(clock, record)


async def stop(controller: Controller, informer: SharedInformer) -> None:
    await controller.stop()
    await informer.stop()


async def test_a_burst_of_soon_changes_is_read_by_one_run_at_the_windows_end(
    clock: FakeClock,
) -> None:
    runs: list[str] = []
    controller, informer = await running(clock, runs)
    for _ in range(20):
        controller.enqueue_soon("ns")
        await clock.advance(WINDOW / 40)
    assert runs == [], "held back within the window"
    await clock.advance(WINDOW / 2)
    assert runs == ["ns"], "one run for the burst, once the window from its first change passed"
    await clock.advance(WINDOW * 5)
    assert runs == ["ns"], "no run left behind"
    await stop(controller, informer)


async def test_a_flood_of_soon_changes_never_holds_a_run_back_past_the_window(
    clock: FakeClock,
) -> None:
    """A tenant churning its own pods cannot postpone its namespace's plan: the window runs from
    the first change after a run, not from the last."""
    runs: list[float] = []
    controller, informer = await running(clock, [])

    async def record(_key: str, _obj: Object | None) -> None:
        runs.append(clock.monotonic())

    controller.on_change("when", record)
    start = clock.monotonic()
    for _ in range(100):
        controller.enqueue_soon("ns")
        await clock.advance(WINDOW / 10)
    assert len(runs) >= 9, runs
    gaps = [b - a for a, b in zip([start, *runs], runs, strict=False)]
    assert max(gaps) <= WINDOW * 1.2, gaps
    await stop(controller, informer)


async def test_a_run_at_once_reads_the_soon_changes_before_it_and_ends_their_timer(
    clock: FakeClock,
) -> None:
    runs: list[str] = []
    controller, informer = await running(clock, runs)
    controller.enqueue_soon("ns")
    controller.enqueue_key("ns")
    await settle(100)
    assert runs == ["ns"]
    await clock.advance(WINDOW * 3)
    assert runs == ["ns"], "the timer of a change the run read ended with the run's start"
    controller.enqueue_soon("ns")
    await clock.advance(WINDOW * 1.5)
    assert runs == ["ns", "ns"], "a change after the run gets a run of its own"
    await stop(controller, informer)


async def test_a_soon_change_while_a_run_is_queued_adds_no_run(clock: FakeClock) -> None:
    added: list[str] = []
    queued = {"ns"}
    soon = SoonRuns(clock, WINDOW, added.append, queued.__contains__)
    soon.ask("ns")
    assert soon.pending() == 0 and added == [], "the queued run starts later and reads it"
    queued.clear()
    soon.ask("ns")
    soon.ask("ns")
    assert soon.pending() == 1
    await clock.advance(WINDOW)
    assert added == ["ns"] and soon.pending() == 0


async def test_a_window_of_zero_queues_at_once_and_a_negative_one_is_refused(
    clock: FakeClock,
) -> None:
    added: list[str] = []
    soon = SoonRuns(clock, 0.0, added.append, lambda _key: False)
    soon.ask("ns")
    assert added == ["ns"] and soon.pending() == 0
    with pytest.raises(ValueError, match="window"):
        SoonRuns(clock, -1.0, added.append, lambda _key: False)
    with pytest.raises(ValueError, match="window"):
        SoonRuns(clock, float("nan"), added.append, lambda _key: False)


async def test_a_window_by_key_holds_each_key_its_own_time_and_a_bad_answer_queues_at_once(
    clock: FakeClock,
) -> None:
    """A window that is a function of the key, read at each ask: each key waits its own
    window; an answer of 0, below 0, not finite or not a number above 0 queues at once (never a
    run lost nor one held for ever)."""
    added: list[str] = []
    windows = {"slow": 1.0, "quick": 0.1, "zero": 0.0, "negative": -1.0, "nan": float("nan")}
    windows["endless"] = float("inf")
    soon = SoonRuns(clock, windows.__getitem__, added.append, lambda _key: False)
    for key in windows:
        soon.ask(key)
    assert added == ["zero", "negative", "nan", "endless"], "queued at once"
    await clock.advance(0.1)
    assert added[4:] == ["quick"]
    windows["slow"] = 0.0
    soon.ask("slow")
    assert added[5:] == [], "a pending timer keeps its deadline"
    await clock.advance(0.9)
    assert added[5:] == ["slow"] and soon.pending() == 0


async def test_a_stopped_controller_drops_its_soon_runs(clock: FakeClock) -> None:
    runs: list[str] = []
    controller, informer = await running(clock, runs)
    controller.enqueue_soon("ns")
    await stop(controller, informer)
    await clock.advance(WINDOW * 2)
    assert runs == []


async def test_related_updates_that_may_wait_are_queued_after_the_window_adds_at_once(
    clock: FakeClock,
) -> None:
    runs: list[str] = []
    controller, informer = await running(clock, runs)
    lw = ScriptedListerWatcher()
    lw.add_list(pod("a", "1"), rv="2")
    lw.add_watch(event("MODIFIED", "a", "3"), event("MODIFIED", "a", "4"), HANG)
    related = SharedInformer(lw, name="related", clock=clock, rng=random.Random(2))
    waits: list[tuple[str, str]] = []

    def may_wait(old: Object, new: Object) -> bool:
        waits.append((old["metadata"]["resourceVersion"], new["metadata"]["resourceVersion"]))
        return new["metadata"]["resourceVersion"] == "3"

    def by_version(obj: Object) -> list[str]:
        return [obj["metadata"]["resourceVersion"]]

    controller.watch_related(related, by_version, may_wait=may_wait)
    related.start()
    await related.wait_for_sync(1)
    await settle(200)
    assert waits == [("1", "3"), ("3", "4")]
    assert sorted(runs) == ["1", "3", "4"], "the add and the update that may not wait, at once"
    await clock.advance(WINDOW)
    # 1 -> 3 may wait: keys 1 and 3 soon; 3 -> 4 may not: keys 3 and 4 at once, and the run of
    # 3 reads what its soon timer was for.
    assert sorted(runs) == ["1", "1", "3", "4"], "key 1 once more, after the window"
    await stop(controller, informer)
    await related.stop()


async def test_a_change_asked_soon_during_a_run_after_its_read_is_read_by_a_later_run(
    clock: FakeClock,
) -> None:
    """The run that starts cancels the timer of what was asked before it, never of what is
    asked after: a change it did not read gets a run that reads it."""
    value, read = ["old"], []
    gate = asyncio.Event()

    async def reads(_key: str, _obj: Object | None) -> None:
        read.append(value[0])
        if len(read) == 1:
            await gate.wait()

    controller, informer = await started_with(clock, reads)
    controller.enqueue_soon("ns")
    await clock.advance(WINDOW)
    assert read == ["old"], "the first run read, and waits"
    value[0] = "new"
    controller.enqueue_soon("ns")
    assert not controller.queue.queued("ns") and controller._soon.pending() == 1
    gate.set()
    await settle(100)
    await clock.advance(WINDOW)
    assert read == ["old", "new"]
    await stop(controller, informer)


async def test_a_change_asked_soon_while_a_rerun_is_queued_is_read_by_that_rerun(
    clock: FakeClock,
) -> None:
    read: list[int] = []
    gate = asyncio.Event()
    value = [0]

    async def reads(_key: str, _obj: Object | None) -> None:
        if not read:
            await gate.wait()
        read.append(value[0])

    controller, informer = await started_with(clock, reads)
    controller.enqueue_key("ns")
    await settle(50)
    controller.enqueue_key("ns")
    value[0] = 1
    controller.enqueue_soon("ns")
    assert controller._soon.pending() == 0, "the queued rerun starts later and reads it"
    gate.set()
    await settle(100)
    assert read == [1, 1]
    await clock.advance(WINDOW * 2)
    assert read == [1, 1], "no run more"
    await stop(controller, informer)


async def test_a_stopped_controller_asks_no_run_and_leaves_no_timer(clock: FakeClock) -> None:
    runs: list[str] = []
    controller, informer = await running(clock, runs)
    controller.enqueue_soon("a")
    await stop(controller, informer)
    controller.enqueue_soon("b")
    assert controller._soon.pending() == 0
    await clock.advance(WINDOW * 2)
    assert runs == [] and clock.sleepers == 0


async def test_waiting_for_a_keys_runs_queues_its_soon_run_at_once_and_waits_for_it(
    clock: FakeClock,
) -> None:
    """wait_pending_runs (the VMI annotations' wait for their namespace's quota) counts a run
    asked for soon: it is queued at once and waited for."""
    runs: list[str] = []
    controller, informer = await running(clock, runs)
    controller.enqueue_soon("ns")
    assert await controller.wait_pending_runs("ns", 1.0)
    assert runs == ["ns"] and controller._soon.pending() == 0
    await stop(controller, informer)
