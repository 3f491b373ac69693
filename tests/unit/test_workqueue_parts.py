"""The work queue's collaborators on their own: the FIFO with its parked getters, the background
tasks, and the refresher of the unfinished-work gauges (the queue's own behaviour is in
test_workqueue.py and test_workqueue_metrics.py)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from harvester_quota.generic.workqueue.background import BackgroundTasks
from harvester_quota.generic.workqueue.fifo import Fifo
from harvester_quota.generic.workqueue.metrics import QueueMetrics
from harvester_quota.generic.workqueue.unfinished_work import (
    UNFINISHED_WORK_UPDATE_PERIOD,
    UnfinishedWorkRefresher,
)
from harvester_quota.testbench.clock import FakeClock, settle
from prometheus_client import CollectorRegistry

LOG = logging.getLogger("test.workqueue.parts")


# Fifo -------------------------------------------------------------------------------------------


def test_fifo_pops_in_push_order_and_none_when_empty() -> None:
    fifo: Fifo[str] = Fifo()
    assert fifo.pop() is None
    for item in ("a", "b", "c"):
        fifo.push(item)
    assert len(fifo) == 3
    assert [fifo.pop(), fifo.pop(), fifo.pop(), fifo.pop()] == ["a", "b", "c", None]
    assert len(fifo) == 0


async def test_a_push_wakes_the_oldest_parked_getter_only() -> None:
    fifo: Fifo[str] = Fifo()
    first = asyncio.ensure_future(fifo.wait())
    second = asyncio.ensure_future(fifo.wait())
    await settle()
    fifo.push("a")
    await settle()
    assert first.done() and not second.done()
    assert fifo.pop() == "a", "a woken getter is not handed the item: it pops it"
    fifo.push("b")
    await settle()
    assert second.done()


async def test_a_getter_cancelled_after_its_wake_up_passes_it_on() -> None:
    fifo: Fifo[str] = Fifo()
    leaving = asyncio.ensure_future(fifo.wait())
    staying = asyncio.ensure_future(fifo.wait())
    await settle()
    fifo.push("a")  # wakes `leaving`, which is cancelled before it runs
    leaving.cancel()
    await settle()
    assert leaving.cancelled()
    assert staying.done(), "the item would wait while a getter could take it"
    assert fifo.pop() == "a"


async def test_a_getter_cancelled_while_parked_takes_no_wake_up() -> None:
    fifo: Fifo[str] = Fifo()
    cancelled = asyncio.ensure_future(fifo.wait())
    await settle()
    cancelled.cancel()
    await settle()
    other = asyncio.ensure_future(fifo.wait())
    await settle()
    fifo.push("a")
    await settle()
    assert other.done()


async def test_wake_all_wakes_every_parked_getter() -> None:
    fifo: Fifo[str] = Fifo()
    getters = [asyncio.ensure_future(fifo.wait()) for _ in range(3)]
    await settle()
    fifo.wake_all()
    await settle()
    assert all(getter.done() for getter in getters)
    assert fifo.pop() is None


# BackgroundTasks --------------------------------------------------------------------------------


async def ended(background: BackgroundTasks) -> None:
    """Waits until every task `background` runs now has ended (at once if none runs)."""
    if background._tasks:
        await asyncio.wait(set(background._tasks))


async def test_a_spawned_task_is_named_after_the_queue_and_forgotten_when_it_ends() -> None:
    background = BackgroundTasks("vmim", LOG)
    release = asyncio.Event()

    async def work() -> None:
        await release.wait()

    task = background.spawn(asyncio.get_running_loop(), work(), "waiting loop")
    assert task.get_name() == "workqueue vmim: waiting loop"
    waiter = asyncio.ensure_future(ended(background))
    await settle()
    assert not waiter.done()
    release.set()
    await asyncio.wait_for(waiter, 5)
    await asyncio.wait_for(ended(background), 5)  # none left: returns at once


async def test_cancel_all_ends_every_running_task() -> None:
    background = BackgroundTasks("q", LOG)
    loop = asyncio.get_running_loop()
    tasks = [background.spawn(loop, asyncio.Event().wait(), f"waiter {i}") for i in range(2)]
    background.cancel_all()
    await asyncio.wait_for(ended(background), 5)
    assert all(task.cancelled() for task in tasks)


async def test_a_failed_task_is_logged_with_the_queue_name_and_raises_to_nobody(
    caplog: pytest.LogCaptureFixture,
) -> None:
    background = BackgroundTasks("vmim", LOG)

    async def broken() -> None:
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger=LOG.name):
        background.spawn(asyncio.get_running_loop(), broken(), "broken")
        await asyncio.wait_for(ended(background), 5)
        await settle()
    [record] = [r for r in caplog.records if r.name == LOG.name]
    assert record.getMessage() == "work queue 'vmim': background task workqueue vmim: broken failed"
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)


# UnfinishedWorkRefresher ------------------------------------------------------------------------


def refresher(
    clock: FakeClock, processing: set[str], *, named: bool = True
) -> tuple[UnfinishedWorkRefresher[str], QueueMetrics[str], BackgroundTasks]:
    metrics: QueueMetrics[str] = QueueMetrics("parts", clock, CollectorRegistry())
    background = BackgroundTasks("parts", LOG)
    made = UnfinishedWorkRefresher(metrics if named else None, processing, clock, background)
    return made, metrics, background


def test_the_refresher_does_not_start_outside_the_event_loop() -> None:
    made, _, _ = refresher(FakeClock(), set())
    made.start()
    assert not made.started


async def test_the_refresher_starts_once_inside_the_loop_and_never_unnamed_or_stopped() -> None:
    clock = FakeClock()
    made, _, background = refresher(clock, set())
    made.start()
    made.start()
    assert made.started
    assert len([t for t in asyncio.all_tasks() if "unfinished work" in t.get_name()]) == 1
    background.cancel_all()
    await ended(background)

    unnamed, _, _ = refresher(clock, set(), named=False)
    unnamed.start()
    unnamed.resume()
    assert not unnamed.started

    stopped, _, _ = refresher(clock, set())
    stopped.stop()
    stopped.start()
    stopped.resume()
    assert not stopped.started


async def test_an_idle_refresher_sleeps_on_no_timer_until_resumed() -> None:
    clock = FakeClock()
    processing: set[str] = set()
    made, metrics, background = refresher(clock, processing)
    metrics.stats.unfinished_work = 1.0  # stale
    made.start()
    await settle()
    assert metrics.stats.unfinished_work == 0, "idle: the gauges are set to 0 once"
    assert clock.sleepers == 0

    processing.add("ns/a")
    metrics.get("ns/a")
    made.resume()
    await settle()
    assert clock.sleepers == 1
    await clock.advance(UNFINISHED_WORK_UPDATE_PERIOD)
    assert metrics.stats.unfinished_work == pytest.approx(UNFINISHED_WORK_UPDATE_PERIOD)

    made.stop()
    background.cancel_all()
    await asyncio.wait_for(ended(background), 5)
