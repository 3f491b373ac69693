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

As in client-go, ``Queue`` keeps only those two sets and the shutdown state; its
collaborators hold the rest: the FIFO and its parked getters (``fifo.Fifo``, client-go's ``Queue``
interface), the metrics bookkeeping (``metrics.QueueMetrics``, client-go's ``queueMetrics``), the
refresh of the unfinished-work gauges (``unfinished_work.UnfinishedWorkRefresher``) and the
background tasks that shutdown ends (``background.BackgroundTasks``).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Generic, Literal, TypedDict, TypeVar

from prometheus_client import CollectorRegistry

from ..clock import REAL_CLOCK, Clock
from .background import BackgroundTasks
from .fifo import Fifo
from .metrics import QueueMetrics, new_queue_metrics
from .unfinished_work import UnfinishedWorkRefresher

T = TypeVar("T", bound=Hashable)

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
    task, started on first use, idle while nothing is in progress, and
    stopped by shutdown.

    Subclasses run their own background work through ``self._background`` and extend
    ``_stop_background`` to drop what shutdown discards.
    """

    __slots__ = (
        "_background",
        "_clock",
        "_dirty",
        "_fifo",
        "_metrics",
        "_name",
        "_processing",
        "_refresher",
        "_shutting_down",
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
        self._fifo: Fifo[T] = Fifo()
        self._dirty: set[T] = set()
        self._processing: set[T] = set()
        self._shutting_down = False
        self._metrics: QueueMetrics[T] | None = new_queue_metrics(name, clock, registry)
        self._background = BackgroundTasks(name, _log)
        self._refresher = UnfinishedWorkRefresher(
            self._metrics, self._processing, clock, self._background
        )

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
            if not self._refresher.started:
                self._refresher.start()
        if item in self._processing:
            return  # done() queues it again
        self._fifo.push(item)

    def queued(self, item: T) -> bool:
        """Whether `item` will be handed out (again): added and not yet taken, or added while a
        worker holds it. A worker may use it to leave to that next run what it would undo."""
        return item in self._dirty

    def processing(self, item: T) -> bool:
        """Whether a worker holds `item` (handed out, `done` not yet called)."""
        return item in self._processing

    def len(self) -> int:
        """How many items wait to be handed out (for information: do not gate add or get on it)."""
        return len(self._fifo)

    def in_flight(self) -> int:
        """How many items are handed out and not yet done (for information, like `len`)."""
        return len(self._processing)

    async def get(self) -> tuple[T, Literal[False]] | tuple[None, Literal[True]]:
        """Waits for an item and hands it out; the caller must call ``done(item)`` afterwards.

        After shutdown, the items still queued are handed out as usual; once the queue is empty,
        ``get`` returns ``(None, True)`` at once and the worker should stop.
        """
        fifo = self._fifo
        item = fifo.pop()
        while item is None:
            if self._shutting_down:
                return None, True
            await fifo.wait()
            item = fifo.pop()
        self._dirty.discard(item)
        self._processing.add(item)
        metrics = self._metrics
        if metrics is not None:
            metrics.get(item)
            self._refresher.resume()
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
            self._fifo.push(item)

    def shut_down(self) -> None:
        """Ignores further adds; workers get the queued items, then ``(None, True)``; stops the
        queue's background tasks."""
        self._begin_shutdown()

    def _begin_shutdown(self) -> None:
        self._shutting_down = True
        self._fifo.wake_all()
        self._stop_background()

    def _stop_background(self) -> None:
        """Ends the background work at shutdown (extended by subclasses to drop their own)."""
        self._refresher.stop()
        self._background.cancel_all()
