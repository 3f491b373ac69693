"""Runs asked for "soon": a burst of changes to one key read by one run instead of one run each.

A controller whose reconcile reads a whole group of objects (a namespace's pods, migrations and
quota) is told of every change of every one of them. Many changes cannot make the reconcile do
anything that is waited for (a pod's step, a quota's status echoing a write): queued at once,
each makes a run of its own, and a burst of them (a wave of migrations) makes dozens of runs
that read nearly the same caches. `SoonRuns` queues such a change's key `window` seconds after
the first of them instead; every change of the key until then, and every change before a run
of the key starts, is read by that one run. Changes that must be acted on at once are queued
with `Controller.enqueue_key` as before.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from functools import partial

from .clock import Clock


class SoonRuns:
    """Per key, at most one pending "run soon"; a window of 0 queues at once.

    Contract: `ask(key)` makes the key queued no later than its window's seconds of `clock`
    after the call (`window`: the same for every key, or a function of the key read at each
    `ask`, whose answer below 0 or not finite counts as 0): either a run is queued already
    (`queued(key)`: it starts after the call, so it reads the change), or a timer adds the key at
    that deadline (`now` adds it at once). A run that starts (`started`) ends the key's timer,
    since it reads every change asked for before it; a change asked for after that starts a new
    timer, and a pending timer keeps the deadline it was given. After `stop`, `ask` queues
    nothing. Event loop only, no lock.
    """

    def __init__(
        self,
        clock: Clock,
        window: float | Callable[[str], float],
        add: Callable[[str], None],
        queued: Callable[[str], bool],
    ) -> None:
        if not callable(window) and not (window >= 0 and math.isfinite(window)):
            raise ValueError(f"a soon-run window must be a finite number >= 0 s, not {window!r}")
        self.clock = clock
        self.window = window if callable(window) else partial(_same, window)
        """The seconds a key asked for may wait, by key."""
        self._add = add
        self._queued = queued
        self._timers: dict[str, asyncio.Task[None]] = {}
        self._stopped = False

    def ask(self, key: str) -> None:
        """Queues `key` at most `window` seconds from now (see the class's contract)."""
        if self._stopped:
            return
        if key in self._timers or self._queued(key):
            return
        window = self.window(key)
        if not window > 0 or not math.isfinite(window):
            self._add(key)
            return
        deadline = self.clock.monotonic() + window
        self._timers[key] = asyncio.ensure_future(self._add_at(key, deadline))

    def now(self, key: str) -> None:
        """Queues `key` at once if a timer of it is pending (a caller waits for its runs)."""
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
            self._add(key)

    def started(self, key: str) -> None:
        """A run of `key` started: what was asked for before now is read by it."""
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def pending(self) -> int:
        """How many keys wait for their timer (for tests and information)."""
        return len(self._timers)

    def stop(self) -> None:
        """Drops every timer, and asks from now on queue nothing (the controller stops)."""
        self._stopped = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    async def _add_at(self, key: str, deadline: float) -> None:
        await self.clock.sleep(deadline - self.clock.monotonic())
        del self._timers[key]
        self._add(key)


def _same(seconds: float, _key: str) -> float:
    return seconds
