"""A bounded queue served round-robin per namespace, so one namespace cannot crowd out others.

The event recorder's background writer takes its work from here: a tenant whose objects raise a
flood of Warnings fills its own share (PER_KEY) and loses its own newest events, while every other
namespace's events are still accepted and written in turn, one per namespace per round, whatever
the flood's size. The whole queue is bounded too (the recorder's QUEUE_SIZE): when it is full, the
key holding the most gives up its oldest item to a newcomer of a key that holds fewer. Event loop
only, not thread-safe.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from typing import Final, Generic, TypeVar

T = TypeVar("T")

PER_KEY: Final = 100
"""Items one key (namespace) may hold: a tenth of the recorder's queue, so at least ten
namespaces' floods fit before any eviction, and a flood waits behind at most one item of each
other namespace per round."""


class FairQueue(Generic[T]):
    """Items by key, at most `per_key` per key and `size` in all, taken round-robin by key."""

    def __init__(self, size: int, per_key: int = PER_KEY) -> None:
        if size < 1 or per_key < 1:
            raise ValueError(f"size {size} and per_key {per_key} must be positive")
        self.size = size
        self.per_key = per_key
        self._items: OrderedDict[str, deque[T]] = OrderedDict()
        self._count = 0
        self._unfinished = 0
        self._ready = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    def __len__(self) -> int:
        return self._count

    def put(self, key: str, item: T) -> T | None:
        """Adds `item` under `key`; returns the item dropped to make room (`item` itself when
        `key` is at its share, or the queue is full and no key holds more than `key`), else
        None."""
        mine = self._items.get(key)
        held = len(mine) if mine is not None else 0
        if held >= self.per_key:
            return item
        evicted: T | None = None
        if self._count >= self.size:
            fullest = max(self._items, key=lambda k: len(self._items[k]))
            if len(self._items[fullest]) <= held + 1:
                return item
            evicted = self._items[fullest].popleft()
            self._count -= 1
            self._unfinished -= 1
        self._items.setdefault(key, deque()).append(item)
        self._count += 1
        self._unfinished += 1
        self._idle.clear()
        self._ready.set()
        return evicted

    async def get(self) -> T:
        """The oldest item of the key whose turn it is (keys in turn, one item each)."""
        while not self._items:
            self._ready.clear()
            await self._ready.wait()
        key, items = next(iter(self._items.items()))
        item = items.popleft()
        del self._items[key]
        if items:
            self._items[key] = items  # to the back of the round
        self._count -= 1
        return item

    def task_done(self) -> None:
        """One item taken by `get` is handled (for `join`)."""
        self._unfinished -= 1
        if self._unfinished <= 0:
            self._unfinished = 0
            self._idle.set()

    async def join(self) -> None:
        """Returns once every item put has been taken and handled (or evicted)."""
        await self._idle.wait()
