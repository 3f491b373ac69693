"""wait_at_most: a task or a timeout on the injected clock, whichever comes first."""

from __future__ import annotations

import asyncio

from harvester_quota.generic.clock import wait_at_most
from harvester_quota.testbench.clock import FakeClock, settle


async def test_a_task_that_finishes_first_is_reported_done_and_the_timer_is_dropped() -> None:
    clock = FakeClock()
    gate = asyncio.Event()
    task = asyncio.ensure_future(gate.wait())
    waiting = asyncio.ensure_future(wait_at_most(clock, task, 10.0))
    await settle()
    gate.set()
    assert await waiting is True
    await settle()
    assert clock.sleepers == 0


async def test_a_timeout_first_reports_not_done_and_leaves_the_task_running() -> None:
    clock = FakeClock()
    task = asyncio.ensure_future(asyncio.Event().wait())
    waiting = asyncio.ensure_future(wait_at_most(clock, task, 5.0))
    await settle()
    await clock.advance(4.9)
    assert not waiting.done()
    await clock.advance(0.1)
    assert await waiting is False
    assert not task.done()
    task.cancel()
