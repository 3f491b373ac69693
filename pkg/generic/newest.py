"""Work done beside a controller's reconciles, for the newest value of each key only.

`NewestPerKey` runs ``work(value)`` in its own task, one run per key at a time. A value submitted
while its key's run is under way waits; a later one replaces it (only the newest is worth
doing: an older one is superseded by it). Values of different keys run concurrently.

For writes that must not hold a workqueue key: the reconcile hands the value over and returns, so
the key's next run is not delayed by a request it does not need the answer of. The work is
best effort: what it raises is logged and dropped, never retried here. Use it only for work whose
loss costs time, not correctness (the caller names who does it otherwise).

Ordering: per key, runs happen in submit order, each after the previous one ended; a skipped value
was replaced before its turn. Not thread-safe: submit from the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

V = TypeVar("V")


class NewestPerKey(Generic[V]):
    """See the module docstring. `name` appears in the log lines of failed runs."""

    def __init__(self, name: str, work: Callable[[V], Awaitable[object]]) -> None:
        self.name = name
        self._work = work
        self._waiting: dict[str, V] = {}
        self._runners: dict[str, asyncio.Task[None]] = {}
        self._stopped = False

    def submit(self, key: str, value: V) -> None:
        """Has `value` worked on after the key's run under way, replacing any value waiting.
        Never blocks, never raises; ignored once stopped."""
        if self._stopped:
            return
        self._waiting[key] = value
        if key not in self._runners:
            self._runners[key] = asyncio.ensure_future(self._run(key))

    def busy(self, key: str) -> bool:
        """Whether a value of `key` is being worked on or waits."""
        return key in self._runners

    async def idle(self, key: str) -> None:
        """Returns once no value of `key` is being worked on or waits (also when `stop`
        cancelled the run; cancelling the caller cancels only its wait)."""
        while (runner := self._runners.get(key)) is not None:
            await asyncio.wait({runner})

    async def stop(self) -> None:
        """Drops waiting values and cancels runs under way; later submits are ignored."""
        self._stopped = True
        self._waiting.clear()
        runners = list(self._runners.values())
        for runner in runners:
            runner.cancel()
        for runner in runners:
            with contextlib.suppress(asyncio.CancelledError):
                await runner

    async def _run(self, key: str) -> None:
        try:
            while key in self._waiting:
                value = self._waiting.pop(key)
                try:
                    await self._work(value)
                except Exception as error:  # best effort: said, then dropped (see module doc)
                    log.warning("%s of %s failed: %s", self.name, key, error)
        finally:
            del self._runners[key]
