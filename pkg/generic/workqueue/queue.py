"""The work queue: a FIFO of keys with dirty/processing bookkeeping, as client-go's ``workqueue.Typed``.

A controller's event handlers ``add`` keys ("namespace/name"); workers ``get`` a key, reconcile it and
call ``done``. Two sets make that safe and cheap:

* ``dirty`` holds every key that needs processing. Adding a key that is already dirty is a no-op, so
  a burst of events for one object collapses into one reconcile.
* ``processing`` holds the keys workers hold now. A key added while it is processed is marked dirty
  but not queued; ``done`` queues it again. So a key is never handed to two workers at once, and an
  event that arrives mid-reconcile is never lost.

Everything runs on one event loop, so there is no lock: each method body is atomic between awaits.
``add``, ``get`` (when an item is ready) and ``done`` are O(1) and do not allocate beyond the deque
and set entries; a blocked ``get`` costs one future.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Hashable
from types import TracebackType
from typing import Generic, Literal, Self, TypedDict, TypeVar

from prometheus_client import CollectorRegistry

from ..clock import REAL_CLOCK, Clock
from .metrics import QueueMetrics, new_queue_metrics

T = TypeVar("T", bound=Hashable)

UNFINISHED_WORK_UPDATE_PERIOD = 0.5
"""Seconds between refreshes of the unfinished-work gauges (client-go's
``defaultUnfinishedWorkUpdatePeriod``): often enough to see a stuck worker within a scrape interval,
rare enough to cost nothing."""

_log = logging.getLogger(__name__)


class QueueOptions(TypedDict, total=False):
    """The keyword options of every queue of this package (each optional, defaults in `Queue`):
    subclasses take them as ``**options`` and hand them on."""

    name: str
    """Names the queue's metrics; an unnamed queue ("") records none."""
    clock: Clock
    """What delays and metric durations are measured on (REAL_CLOCK: the event loop's)."""
    registry: CollectorRegistry | None
    """Where a named queue's metrics go (None: the default registry)."""


class Queue(Generic[T]):
    """A FIFO work queue with client-go's guarantees (see the module docstring).

    ``get`` returns ``(item, False)`` or, once the queue is shut down and empty, ``(None, True)``.
    ``None`` is therefore not a valid item. A named queue records Prometheus metrics (see
    ``harvester_quota.generic.workqueue.metrics``) and refreshes its unfinished-work gauges from a background
    task, started on first use (or on ``async with``), idle while nothing is in progress, and
    stopped by shutdown.
    """

    __slots__ = (
        "_clock",
        "_dirty",
        "_drain",
        "_drain_waiters",
        "_getters",
        "_metrics",
        "_name",
        "_processing",
        "_processing_resumed",
        "_queue",
        "_refresher",
        "_shutting_down",
        "_tasks",
    )

    def __init__(
        self,
        *,
        name: str = "",
        clock: Clock = REAL_CLOCK,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self._name = name
        self._clock = clock
        self._queue: collections.deque[T] = collections.deque()
        self._dirty: set[T] = set()
        self._processing: set[T] = set()
        self._getters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._shutting_down = False
        self._drain = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._metrics: QueueMetrics[T] | None = new_queue_metrics(name, clock, registry)
        self._refresher: asyncio.Task[None] | None = None
        # Set while the refresher, with nothing in progress, waits for the next get.
        self._processing_resumed: asyncio.Future[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def name(self) -> str:
        """The queue's name, the ``name`` label of its metrics ("" records no metrics)."""
        return self._name

    def add(self, item: T) -> None:
        """Marks ``item`` as needing processing; ignored once the queue is shutting down."""
        if self._shutting_down or item in self._dirty:
            return
        if item is None:
            raise TypeError("None cannot be queued: get() returns None to signal shutdown")
        self._dirty.add(item)
        metrics = self._metrics
        if metrics is not None:
            metrics.add(item)
            if self._refresher is None:
                self._start_refresher()
        if item in self._processing:
            return  # done() queues it again
        self._queue.append(item)
        if self._getters:
            self._wake_one_getter()

    def queued(self, item: T) -> bool:
        """Whether `item` will be handed out (again): added and not yet taken, or added while a
        worker holds it. A worker may use it to leave to that next run what it would undo."""
        return item in self._dirty

    def processing(self, item: T) -> bool:
        """Whether a worker holds `item` (handed out, `done` not yet called)."""
        return item in self._processing

    def len(self) -> int:
        """How many items wait to be handed out (for information: do not gate add or get on it)."""
        return len(self._queue)

    def in_flight(self) -> int:
        """How many items are handed out and not yet done (for information, like `len`)."""
        return len(self._processing)

    async def get(self) -> tuple[T, Literal[False]] | tuple[None, Literal[True]]:
        """Waits for an item and hands it out; the caller must call ``done(item)`` afterwards.

        After shutdown, the items still queued are handed out as usual; once the queue is empty,
        ``get`` returns ``(None, True)`` at once and the worker should stop.
        """
        queue = self._queue
        while not queue:
            if self._shutting_down:
                return None, True
            await self._wait_for_item()
        item = queue.popleft()
        self._dirty.discard(item)
        self._processing.add(item)
        metrics = self._metrics
        if metrics is not None:
            metrics.get(item)
            resumed = self._processing_resumed
            if resumed is not None:
                self._processing_resumed = None
                if not resumed.done():  # done means cancelled with the refresher
                    resumed.set_result(None)
            elif self._refresher is None:
                self._start_refresher()
        return item, False

    def done(self, item: T) -> None:
        """Marks the processing of ``item`` finished; queues it again if it was added meanwhile.

        Calling it for an item no worker holds does nothing (client-go would queue a duplicate).
        """
        try:
            self._processing.remove(item)
        except KeyError:
            return
        if self._metrics is not None:
            self._metrics.done(item)
        if item in self._dirty:
            self._queue.append(item)
            if self._getters:
                self._wake_one_getter()
        elif not self._processing and self._drain_waiters:
            self._wake_drainers()

    def shut_down(self) -> None:
        """Ignores further adds; workers get the queued items, then ``(None, True)``.

        Also ends a ``shut_down_with_drain`` that is waiting (a second Ctrl-C), and stops the
        queue's background tasks.
        """
        self._drain = False
        self._begin_shutdown()
        self._wake_drainers()

    async def shut_down_with_drain(self) -> None:
        """Shuts down like ``shut_down``, then waits until no item is being processed.

        As in client-go, the wait is on the items in progress: an item a worker takes while the drain
        waits is waited for too. Workers must call ``done`` or this never returns (unless
        ``shut_down`` is called).
        """
        self._drain = True
        self._begin_shutdown()
        loop = asyncio.get_running_loop()
        while self._processing and self._drain:
            waiter = loop.create_future()
            self._drain_waiters.append(waiter)
            try:
                await waiter
            finally:
                with contextlib.suppress(ValueError):
                    self._drain_waiters.remove(waiter)
        await self._wait_background_stopped()

    def shutting_down(self) -> bool:
        """Whether shutdown has begun."""
        return self._shutting_down

    async def __aenter__(self) -> Self:
        """Starts the background work now rather than on first use."""
        self._start_background()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Shuts the queue down and waits for its background tasks to end."""
        self.shut_down()
        await self._wait_background_stopped()

    def _begin_shutdown(self) -> None:
        self._shutting_down = True
        getters = self._getters
        while getters:
            getter = getters.popleft()
            if not getter.done():
                getter.set_result(None)
        self._stop_background()

    async def _wait_for_item(self) -> None:
        """Parks the caller until an add (or shutdown) wakes it; the caller re-checks the queue."""
        getter = asyncio.get_running_loop().create_future()
        self._getters.append(getter)
        try:
            await getter
        except BaseException:
            getter.cancel()
            with contextlib.suppress(ValueError):
                self._getters.remove(getter)
            if self._queue and not getter.cancelled():
                # We were woken for an item but are leaving: pass the wake-up on.
                self._wake_one_getter()
            raise

    def _wake_one_getter(self) -> None:
        getters = self._getters
        while getters:
            getter = getters.popleft()
            if not getter.done():
                getter.set_result(None)
                return

    def _wake_drainers(self) -> None:
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)

    # Background tasks.

    def _start_background(self) -> None:
        """Starts the queue's background tasks if they are due (overridden to add more)."""
        if self._metrics is not None and self._refresher is None:
            self._start_refresher()

    def _start_refresher(self) -> None:
        metrics = self._metrics
        if metrics is None or self._shutting_down:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # used outside the loop: the next add or get inside it starts the task
        self._refresher = self._track(
            loop.create_task(
                self._refresh_unfinished_work(metrics),
                name=f"workqueue {self._name}: unfinished work",
            )
        )

    async def _refresh_unfinished_work(self, metrics: QueueMetrics[T]) -> None:
        """Refreshes the gauges every period while items are in progress.

        With nothing in progress the gauges read 0 and the task waits for the next ``get`` instead
        of ticking, so an idle queue costs no timer (and puts no sleeper on a test's FakeClock).
        """
        loop = asyncio.get_running_loop()
        while True:
            if not self._processing:
                metrics.update_unfinished_work()
                resumed = self._processing_resumed = loop.create_future()
                await resumed
            await self._clock.sleep(UNFINISHED_WORK_UPDATE_PERIOD)
            if self._shutting_down:
                return
            metrics.update_unfinished_work()

    def _track(self, task: asyncio.Task[None]) -> asyncio.Task[None]:
        self._tasks.add(task)
        task.add_done_callback(self._forget_task)
        return task

    def _forget_task(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _log.error(
                "work queue %r: background task %s failed",
                self._name,
                task.get_name(),
                exc_info=task.exception(),
            )

    def _stop_background(self) -> None:
        for task in self._tasks:
            task.cancel()

    async def _wait_background_stopped(self) -> None:
        if self._tasks:
            await asyncio.wait(set(self._tasks))
