"""NewestPerKey: one run per key at a time, the newest value after it, failures said and dropped."""

from __future__ import annotations

import asyncio
import logging

import pytest
from harvester_quota.generic.newest import NewestPerKey


class Work:
    """Records each value it is given; a value's run waits until `release(value)`."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.finished: list[str] = []
        self._gates: dict[str, asyncio.Event] = {}
        self.failing: set[str] = set()
        self._progress = asyncio.Condition()

    def gate(self, value: str) -> asyncio.Event:
        return self._gates.setdefault(value, asyncio.Event())

    def release(self, value: str) -> None:
        self.gate(value).set()

    async def __call__(self, value: str) -> None:
        self.started.append(value)
        async with self._progress:
            self._progress.notify_all()
        await self.gate(value).wait()
        if value in self.failing:
            raise RuntimeError(f"{value} refused")
        self.finished.append(value)

    async def until_started(self, count: int) -> None:
        async with self._progress:
            await self._progress.wait_for(lambda: len(self.started) >= count)


async def running_a(work: Work, name: str = "copy") -> NewestPerKey[str]:
    """A NewestPerKey over `work` whose key "ns" has value "a" under way."""
    newest: NewestPerKey[str] = NewestPerKey(name, work)
    newest.submit("ns", "a")
    await work.until_started(1)
    return newest


async def test_a_key_runs_one_value_at_a_time_and_then_only_the_newest() -> None:
    work = Work()
    newest = await running_a(work)
    newest.submit("ns", "b")
    newest.submit("ns", "c")
    assert work.started == ["a"], "b and c wait for a"
    work.release("a")
    await work.until_started(2)
    work.release("c")
    await newest.idle("ns")
    assert work.finished == ["a", "c"], "b was replaced by c before its turn"
    assert not newest.busy("ns")


async def test_keys_run_beside_each_other() -> None:
    work = Work()
    newest: NewestPerKey[str] = NewestPerKey("copy", work)
    newest.submit("ns-1", "a")
    newest.submit("ns-2", "b")
    await work.until_started(2)
    work.release("b")
    await newest.idle("ns-2")
    assert work.finished == ["b"], "ns-2 did not wait for ns-1"
    work.release("a")
    await newest.idle("ns-1")


async def test_a_failed_run_is_logged_and_the_next_value_still_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    work = Work()
    work.failing.add("a")
    newest = await running_a(work, "copying spec.hard")
    newest.submit("ns", "b")
    with caplog.at_level(logging.WARNING):
        work.release("a")
        work.release("b")
        await newest.idle("ns")
    assert work.finished == ["b"]
    assert "copying spec.hard of ns failed: a refused" in caplog.text


async def test_stop_cancels_runs_and_ignores_later_values() -> None:
    work = Work()
    newest = await running_a(work)
    newest.submit("ns", "b")
    waiting = asyncio.ensure_future(newest.idle("ns"))
    await newest.stop()
    await waiting  # a wait for a cancelled run ends, without raising into the waiter
    assert not newest.busy("ns")
    newest.submit("ns", "c")
    assert not newest.busy("ns"), "stopped: nothing runs any more"
    await asyncio.sleep(0)
    assert work.started == ["a"] and work.finished == []
