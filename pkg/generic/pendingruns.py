"""Waiting for the runs of a key that a controller has pending (`Controller.wait_pending_runs`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from .clock import Clock, wait_at_most
from .workqueue import Queue


@dataclass(eq=False)
class _RunWaiter:
    """A caller of `PendingRuns.wait`: how many runs of its key are still to end."""

    runs: int
    ended: asyncio.Future[None]


class PendingRuns:
    """The callers waiting for a key's pending runs on one controller's queue.

    A run is pending when the queue holds the key for a worker (``queued``) or a worker holds it
    (``processing``): at most two per key, by the queue's guarantees. The controller's workers
    call `run_ended` after each run (after ``done``), and every waiter of that key counts one
    down. Runs queued after a `wait` began are not waited for. Event loop only, no lock.
    """

    __slots__ = ("_clock", "_queue", "_waiters")

    def __init__(self, queue: Queue[str], clock: Clock) -> None:
        self._queue = queue
        self._clock = clock
        self._waiters: dict[str, list[_RunWaiter]] = {}

    async def wait(self, key: str, seconds: float) -> bool:
        """Waits until the runs of `key` pending now have ended, at most `seconds` by the clock;
        True if they ended (at once when none is pending)."""
        runs = int(self._queue.queued(key)) + int(self._queue.processing(key))
        if runs == 0:
            return True
        waiter = _RunWaiter(runs, asyncio.get_running_loop().create_future())
        self._waiters.setdefault(key, []).append(waiter)
        try:
            return await wait_at_most(self._clock, waiter.ended, seconds)
        finally:
            self._forget(key, waiter)

    def run_ended(self, key: str) -> None:
        """A worker finished a run of `key`: each of its waiters has one run fewer to wait for."""
        for waiter in self._waiters.get(key, ()):
            waiter.runs -= 1
            if waiter.runs == 0 and not waiter.ended.done():
                waiter.ended.set_result(None)

    def _forget(self, key: str, waiter: _RunWaiter) -> None:
        waiters = self._waiters.get(key, [])
        if waiter in waiters:
            waiters.remove(waiter)
        if not waiters:
            self._waiters.pop(key, None)
