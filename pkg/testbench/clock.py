"""A clock for tests: time moves only when a test moves it (the product's ``Clock`` protocol).

Unit tests and benches pass a ``FakeClock`` where the product takes a ``Clock``
(``harvester_quota.generic.clock``) and call ``step`` or ``advance`` to move time: sleepers whose
deadline has passed wake up, in deadline order, and nothing really sleeps.
"""

from __future__ import annotations

import asyncio
import datetime
import heapq
import itertools


class FakeClock:
    """A clock that moves only when a test moves it.

    ``sleep`` parks the caller on a heap of deadlines; ``step`` advances time and wakes every
    sleeper whose deadline is reached. ``advance`` does the same and then lets the woken tasks run,
    which is what most tests want: "one second later, and everything that happens as a result".

    Time is kept in whole nanoseconds (the resolution of Go's clocks), so steps add up exactly:
    ``advance(0.199)`` then ``advance(0.001)`` reaches a deadline set with ``sleep(0.2)``, which
    float seconds would miss by 1e-13 and leave the sleeper parked.
    """

    def __init__(
        self,
        start: float = 1000.0,
        wall: datetime.datetime | None = None,
    ) -> None:
        self._now_ns = _nanoseconds(start)
        self._start_ns = self._now_ns
        self._wall_start = wall or datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
        self._sleepers: list[tuple[int, int, asyncio.Future[None]]] = []
        self._sequence = itertools.count()

    def monotonic(self) -> float:
        return self._now_ns / _NANOSECONDS_PER_SECOND

    def now(self) -> datetime.datetime:
        elapsed_us = (self._now_ns - self._start_ns) / 1000
        return self._wall_start + datetime.timedelta(microseconds=elapsed_us)

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        deadline_ns = self._now_ns + _nanoseconds(seconds)
        heapq.heappush(self._sleepers, (deadline_ns, next(self._sequence), future))
        await future

    @property
    def sleepers(self) -> int:
        """How many tasks are waiting on this clock (cancelled ones excluded)."""
        return sum(1 for _, _, future in self._sleepers if not future.done())

    def next_deadline(self) -> float | None:
        """The earliest time a sleeper is waiting for, if any."""
        deadline_ns = self._next_deadline_ns()
        return None if deadline_ns is None else deadline_ns / _NANOSECONDS_PER_SECOND

    def step(self, seconds: float) -> None:
        """Moves time forward and wakes the sleepers that are due (they run at the next await)."""
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self._step_to(self._now_ns + _nanoseconds(seconds))

    async def advance(self, seconds: float) -> None:
        """Steps time in order of the sleepers' deadlines, letting each woken task run.

        Waking sleepers one deadline at a time means a task that wakes and sleeps again (a
        backoff loop) sees each intermediate time, as it would with a real clock.
        """
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        target_ns = self._now_ns + _nanoseconds(seconds)
        await settle()
        while True:
            deadline_ns = self._next_deadline_ns()
            if deadline_ns is None or deadline_ns > target_ns:
                break
            self._step_to(max(deadline_ns, self._now_ns))
            await settle()
        self._step_to(target_ns)
        await settle()

    def _step_to(self, now_ns: int) -> None:
        self._now_ns = now_ns
        while self._sleepers and self._sleepers[0][0] <= now_ns:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)

    def _next_deadline_ns(self) -> int | None:
        self._drop_cancelled()
        return self._sleepers[0][0] if self._sleepers else None

    def _drop_cancelled(self) -> None:
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)


_NANOSECONDS_PER_SECOND = 1_000_000_000


def _nanoseconds(seconds: float) -> int:
    """``seconds`` as whole nanoseconds, rounded to the nearest (float noise is far below 1 ns)."""
    return round(seconds * _NANOSECONDS_PER_SECOND)


async def settle(rounds: int = 20) -> None:
    """Lets ready tasks run until the loop is quiet (a bounded number of scheduling rounds)."""
    for _ in range(rounds):
        await asyncio.sleep(0)
