"""An injectable clock, so that time-dependent logic is tested by stepping time, not sleeping.

Everything in ``pkg`` that waits, times out, backs off or stamps a time takes a ``Clock``. Production
code uses ``RealClock`` (the event loop's monotonic time and the wall clock); unit tests use
``FakeClock`` and call ``step`` or ``advance`` to move time: sleepers whose deadline has passed wake
up, in deadline order, and nothing really sleeps.
"""

from __future__ import annotations

import asyncio
import datetime
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    """Monotonic seconds for intervals, wall time for timestamps, and an awaitable sleep."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards; only differences are meaningful."""
        ...

    def now(self) -> datetime.datetime:
        """The current wall time, timezone-aware UTC (for timestamps written to the API)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Returns after ``seconds`` of this clock's time have passed."""
        ...


class RealClock:
    """The running event loop's time and the system's wall clock."""

    def monotonic(self) -> float:
        try:
            return asyncio.get_running_loop().time()
        except RuntimeError:
            return time.monotonic()

    def now(self) -> datetime.datetime:
        return datetime.datetime.now(datetime.UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


REAL_CLOCK = RealClock()


class FakeClock:
    """A clock that moves only when a test moves it.

    ``sleep`` parks the caller on a heap of deadlines; ``step`` advances time and wakes every
    sleeper whose deadline is reached. ``advance`` does the same and then lets the woken tasks run,
    which is what most tests want: "one second later, and everything that happens as a result".
    """

    def __init__(
        self,
        start: float = 1000.0,
        wall: datetime.datetime | None = None,
    ) -> None:
        self._now = start
        self._wall_start = wall or datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
        self._start = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._sequence = itertools.count()

    def monotonic(self) -> float:
        return self._now

    def now(self) -> datetime.datetime:
        return self._wall_start + datetime.timedelta(seconds=self._now - self._start)

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._sequence), future))
        await future

    @property
    def sleepers(self) -> int:
        """How many tasks are waiting on this clock (cancelled ones excluded)."""
        return sum(1 for _, _, future in self._sleepers if not future.done())

    def next_deadline(self) -> float | None:
        """The earliest time a sleeper is waiting for, if any."""
        self._drop_cancelled()
        return self._sleepers[0][0] if self._sleepers else None

    def step(self, seconds: float) -> None:
        """Moves time forward and wakes the sleepers that are due (they run at the next await)."""
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self._now += seconds
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)

    async def advance(self, seconds: float) -> None:
        """Steps time in order of the sleepers' deadlines, letting each woken task run.

        Waking sleepers one deadline at a time means a task that wakes and sleeps again (a
        backoff loop) sees each intermediate time, as it would with a real clock.
        """
        target = self._now + seconds
        await settle()
        while True:
            deadline = self.next_deadline()
            if deadline is None or deadline > target:
                break
            self.step(max(0.0, deadline - self._now))
            await settle()
        self.step(target - self._now)
        await settle()

    def _drop_cancelled(self) -> None:
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)


async def settle(rounds: int = 20) -> None:
    """Lets ready tasks run until the loop is quiet (a bounded number of scheduling rounds)."""
    for _ in range(rounds):
        await asyncio.sleep(0)
