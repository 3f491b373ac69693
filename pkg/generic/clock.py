"""An injectable clock, so that time-dependent logic is tested by stepping time, not sleeping.

Everything in ``pkg`` that waits, times out, backs off or stamps a time takes a ``Clock``. Production
code uses ``RealClock`` (the event loop's monotonic time and the wall clock); unit tests use the test
bench's ``FakeClock`` (``harvester_quota.testbench.clock``), which moves only when a test moves it.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Any, Protocol


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


async def wait_at_most(clock: Clock, task: asyncio.Future[Any], seconds: float) -> bool:
    """Waits until ``task`` is done or ``seconds`` have passed on ``clock``, whichever comes first;
    True if ``task`` is done. ``task`` is left as it is, running or done: cancelling it is the
    caller's choice."""
    timer = asyncio.ensure_future(clock.sleep(seconds))
    try:
        await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        timer.cancel()
    return task.done()
