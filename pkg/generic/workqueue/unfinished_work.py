"""The refresh of a named queue's unfinished-work gauges (client-go's ``updateUnfinishedWorkLoop``).

``workqueue_unfinished_work_seconds`` and ``workqueue_longest_running_processor_seconds`` grow while
an item is processed, but no queue operation happens meanwhile to update them; a background task
sets them every ``UNFINISHED_WORK_UPDATE_PERIOD`` instead, as client-go's queue does from a ticker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Set
from typing import Generic, TypeVar

from ..clock import Clock
from .background import BackgroundTasks
from .metrics import QueueMetrics

T = TypeVar("T", bound=Hashable)

UNFINISHED_WORK_UPDATE_PERIOD = 0.5
"""Seconds between refreshes of the unfinished-work gauges (client-go's
``defaultUnfinishedWorkUpdatePeriod``): often enough to see a stuck worker within a scrape interval,
rare enough to cost nothing."""


class UnfinishedWorkRefresher(Generic[T]):
    """Refreshes one queue's unfinished-work gauges from a background task.

    The task starts on the first `start` made on the event loop (a call outside it does nothing,
    and the next one inside starts it) and runs until the queue shuts down: `stop`, then the
    queue's `BackgroundTasks.cancel_all`. While items are in progress it
    refreshes the gauges every period; with nothing in progress it sets them to 0 once and waits
    for `resume` (a worker took an item) instead of ticking, so an idle queue costs no timer and
    puts no sleeper on a test's FakeClock.

    `processing` is the queue's own set of items in progress, read (never written) at each tick.
    An unnamed queue has no metrics: its refresher never starts. Event loop only, no lock.
    """

    __slots__ = (
        "_background",
        "_clock",
        "_metrics",
        "_processing",
        "_resumed",
        "_stopped",
        "started",
    )

    def __init__(
        self,
        metrics: QueueMetrics[T] | None,
        processing: Set[T],
        clock: Clock,
        background: BackgroundTasks,
    ) -> None:
        self._metrics = metrics
        self._processing = processing
        """The queue's items in progress: read at each tick, never written."""
        self._clock = clock
        self._background = background
        """Where the task runs, so that the queue's shutdown cancels it with the others."""
        self.started: bool = False
        """Whether the task was started (read only): a queue checks it before calling `start`
        on its hot path, where a call per add would cost more than the rest of the metrics."""
        self._stopped: bool = False
        self._resumed: asyncio.Future[None] | None = None
        """Set while the task, with nothing in progress, waits for the next get."""

    def start(self) -> None:
        """Starts the task unless it was started already, the queue is unnamed or stopped, or no
        event loop is running (the next call inside it starts the task)."""
        metrics = self._metrics
        if self.started or metrics is None or self._stopped:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self.started = True
        self._background.spawn(loop, self._refresh(metrics), "unfinished work")

    def resume(self) -> None:
        """A worker took an item: wakes the idle task, or starts it if it never was."""
        resumed = self._resumed
        if resumed is not None:
            self._resumed = None
            if not resumed.done():  # done means cancelled with the task
                resumed.set_result(None)
        elif not self.started:
            self.start()

    def stop(self) -> None:
        """The queue shuts down: the task is not started any more, and one running ends at its
        next tick (its owner's `BackgroundTasks.cancel_all` ends it at once)."""
        self._stopped = True

    async def _refresh(self, metrics: QueueMetrics[T]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._processing:
                metrics.update_unfinished_work()
                resumed = self._resumed = loop.create_future()
                await resumed
            await self._clock.sleep(UNFINISHED_WORK_UPDATE_PERIOD)
            if self._stopped:
                return
            metrics.update_unfinished_work()
