"""The order in which a work queue hands items out, and the getters waiting for one.

client-go's ``workqueue.Typed`` keeps its FIFO behind a ``Queue`` interface (``Push``, ``Pop``,
``Len``) apart from the dirty and processing sets that decide what may be pushed, and parks its
getters on a condition variable. ``Fifo`` is both halves on asyncio: the deque of items and the
futures of the getters waiting for the next push.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Hashable
from typing import Generic, TypeVar

T = TypeVar("T", bound=Hashable)


class Fifo(Generic[T]):
    """Items in the order they were pushed, and the getters parked until one is.

    Ordering: ``pop`` returns the oldest item pushed and not yet popped; ``push`` wakes the oldest
    parked getter (one per push), so getters are served in the order they parked. A woken getter
    is not handed the item: like a waiter on a condition variable it must ``pop`` again, and may
    find the queue empty if another caller popped first.

    Consistency: the FIFO does not deduplicate; its owner pushes an item only when it is not
    already in it (``Queue`` does so through its dirty set). ``None`` cannot be an item, because
    ``pop`` returns it for "empty".

    Concurrency: one event loop, no lock; every method but ``wait`` is atomic (``wait`` suspends
    until a push wakes it, or its caller is cancelled). ``push`` and ``pop`` are O(1);
    only ``wait`` allocates (one future).
    """

    __slots__ = ("_getters", "_items")

    def __init__(self) -> None:
        self._items: collections.deque[T] = collections.deque()
        self._getters: collections.deque[asyncio.Future[None]] = collections.deque()

    def __len__(self) -> int:
        """How many items wait to be popped."""
        return len(self._items)

    def push(self, item: T) -> None:
        """Appends `item` and wakes the oldest parked getter, if any."""
        self._items.append(item)
        if self._getters:
            self._wake_one()

    def pop(self) -> T | None:
        """The oldest item, removed; None if there is none (never waits)."""
        items = self._items
        return items.popleft() if items else None

    async def wait(self) -> None:
        """Parks the caller until a ``push`` or ``wake_all`` wakes it; it must then re-check.

        A getter cancelled after it was woken for an item passes the wake-up on to the next
        parked getter, so the item is not left waiting while someone could take it.
        """
        getter = asyncio.get_running_loop().create_future()
        self._getters.append(getter)
        try:
            await getter
        except BaseException:
            getter.cancel()
            with contextlib.suppress(ValueError):
                self._getters.remove(getter)
            if self._items and not getter.cancelled():
                # We were woken for an item but are leaving: pass the wake-up on.
                self._wake_one()
            raise

    def wake_all(self) -> None:
        """Wakes every parked getter (at shutdown: each re-checks and sees the queue closing)."""
        while self._wake_one():
            pass

    def _wake_one(self) -> bool:
        """Wakes the oldest getter still parked; False if there was none."""
        getters = self._getters
        while getters:
            getter = getters.popleft()
            if not getter.done():
                getter.set_result(None)
                return True
        return False
