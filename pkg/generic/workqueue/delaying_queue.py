"""A work queue that can add an item later, as client-go's delaying queue.

``add_after(item, delay)`` parks the item on a min-heap ordered by ready time; one background task
(the waiting loop) sleeps on the injected clock until the earliest ready time, adds what is due, and
sleeps again. An item parked twice keeps the earlier ready time, so a short retry is never pushed back
by a longer one. The loop runs only while something is parked: it starts on the first ``add_after``
with a positive delay and ends when the heap is empty or the queue shuts down.
"""

from __future__ import annotations

import asyncio
import heapq
import math
from collections.abc import Hashable
from typing import TypeVar, Unpack

from .metrics import QueueStats, new_retry_stats
from .queue import Queue, QueueOptions

T = TypeVar("T", bound=Hashable)

MAX_WAIT = 10.0
"""Longest single sleep of the waiting loop, in seconds (client-go's ``maxWait`` heartbeat): cheap
insurance that a due item never sits parked for more than 10 s, whatever happens to a timer."""

_TIME_RESOLUTION = 1e-9
"""Ready times within a nanosecond of now count as due. Go's clocks tick in nanoseconds; below that,
a difference is floating-point noise from ``now + delay`` and must not cost another sleep."""

_COMPACT_SLACK = 64
"""Superseded heap entries (an item re-parked earlier) are skipped when popped; the heap is rebuilt
when they outnumber the live ones by this many, so memory stays proportional to parked items."""


class DelayingQueue(Queue[T]):
    """A ``Queue`` with ``add_after``. Every ``add_after`` counts in ``workqueue_retries_total``."""

    __slots__ = (
        "_ready_at",
        "_retry_stats",
        "_sequence",
        "_waiting",
        "_waiting_loop_task",
        "_wake_at",
    )

    def __init__(self, **options: Unpack[QueueOptions]) -> None:
        super().__init__(**options)
        self._retry_stats: QueueStats | None = new_retry_stats(self._name, options.get("registry"))
        # Heap of (ready time, sequence, item); the sequence keeps equal ready times FIFO and keeps
        # items (which need not be orderable) out of comparisons.
        self._waiting: list[tuple[float, int, T]] = []
        # The live ready time of each parked item; a heap entry with another time is superseded.
        self._ready_at: dict[T, float] = {}
        self._sequence = 0
        # When the waiting loop will next look at the heap: +inf when no loop runs, -inf when a
        # new loop is about to start (it looks at the heap first thing).
        self._wake_at = math.inf
        self._waiting_loop_task: asyncio.Task[None] | None = None

    def add_after(self, item: T, delay: float) -> None:
        """Adds ``item`` once ``delay`` seconds have passed (now, if ``delay <= 0``).

        Ignored once the queue is shutting down. If the item is already parked, the earlier of the
        two ready times wins. Needs the running event loop for a positive delay.
        """
        if self._shutting_down:
            return
        if self._retry_stats is not None:
            self._retry_stats.retries += 1
        if not delay > 0:
            if delay <= 0:
                self.add(item)
                return
            raise ValueError(f"delay must be a number of seconds, got {delay!r}")
        if item is None:
            raise TypeError("None cannot be queued: get() returns None to signal shutdown")
        ready_at = self._clock.monotonic() + delay
        parked_at = self._ready_at.get(item)
        if parked_at is not None and parked_at <= ready_at:
            return
        # Outside the event loop this raises here, before anything is parked that no loop would add.
        loop = asyncio.get_running_loop() if ready_at < self._wake_at else None
        self._ready_at[item] = ready_at
        self._sequence += 1
        heapq.heappush(self._waiting, (ready_at, self._sequence, item))
        if len(self._waiting) > 2 * len(self._ready_at) + _COMPACT_SLACK:
            self._compact()
        if loop is not None:
            self._restart_waiting_loop(loop)

    def waiting(self) -> int:
        """How many items are parked for later (for information and tests)."""
        return len(self._ready_at)

    def _restart_waiting_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Starts a waiting loop that looks at the heap first, replacing one that sleeps too long.

        The loop's only await is its sleep, so cancelling it there loses nothing: the heap is the
        state, and the new loop picks it up.
        """
        task = self._waiting_loop_task
        if task is not None:
            task.cancel()
        self._wake_at = -math.inf
        self._waiting_loop_task = self._background.spawn(loop, self._wait_and_add(), "waiting loop")

    async def _wait_and_add(self) -> None:
        clock = self._clock
        while not self._shutting_down:
            now = clock.monotonic()
            next_ready_at = self._add_due(now)
            if next_ready_at is None:
                self._wake_at = math.inf
                self._waiting_loop_task = None
                return
            wait = min(next_ready_at - now, MAX_WAIT)
            self._wake_at = now + wait
            await clock.sleep(wait)

    def _add_due(self, now: float) -> float | None:
        """Adds the parked items that are due; returns the next ready time, if any."""
        waiting = self._waiting
        ready_at = self._ready_at
        due_before = now + _TIME_RESOLUTION
        while waiting:
            head_ready_at, _, item = waiting[0]
            if ready_at.get(item) != head_ready_at:
                heapq.heappop(waiting)  # superseded by an earlier ready time, or already added
                continue
            if head_ready_at > due_before:
                return head_ready_at
            heapq.heappop(waiting)
            del ready_at[item]
            self.add(item)
        return None

    def _compact(self) -> None:
        live: list[tuple[float, int, T]] = []
        seen: set[T] = set()
        for entry in self._waiting:
            ready_at, _, item = entry
            if self._ready_at.get(item) == ready_at and item not in seen:
                seen.add(item)
                live.append(entry)
        heapq.heapify(live)
        self._waiting = live

    def _stop_background(self) -> None:
        super()._stop_background()
        # Parked items are dropped at shutdown, as in client-go.
        self._waiting.clear()
        self._ready_at.clear()
        self._waiting_loop_task = None
        self._wake_at = math.inf
