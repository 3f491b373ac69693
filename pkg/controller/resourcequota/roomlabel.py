"""The room-held label of the room mode's namespaces: when it is set, how long it lingers.

LABEL_ROOM_HELD puts a namespace under the webhook's fail-closed pods rule. The reconcile sets it
before a raise is written and removes it after the room is given back and a linger is over, so
the rule covers the whole time a raised quota could admit a pod, and a drain's next wave is
raised without the label's round trip on its path. The write itself, and its permission gate,
are the QuotaWriter's (controller/quotawriter.py); this keeps the linger and our label writes
until the namespace cache shows them. Not thread-safe: event loop only, per namespace from one
worker at a time (the workqueue's guarantee).
"""

from __future__ import annotations

from ...generic.clock import Clock
from ...generic.meta import labels, metadata
from ...generic.ownwrites import OwnWrites
from ...generic.resource import Object
from ...util.annotations import LABEL_ROOM_HELD
from ..quotawriter import QuotaWriter


def is_labelled(namespace: Object) -> bool:
    """Whether the namespace carries LABEL_ROOM_HELD=true."""
    return labels(namespace).get(LABEL_ROOM_HELD) == "true"


class RoomHeldLabel:
    """Sets and removes the label through `writer`; `linger` seconds after room was last held."""

    def __init__(self, writer: QuotaWriter, clock: Clock, linger: float) -> None:
        self.writer = writer
        self.clock = clock
        self.linger = linger
        self._writes = OwnWrites()
        """Our label writes by namespace, until the cache has them (one write per change)."""
        self._last_held: dict[str, float] = {}
        """Namespace -> the monotonic moment a plan of it last held room, while its label
        lingers (`lingers`)."""

    def newest(self, key: str, namespace: Object) -> Object:
        """The namespace as we last wrote it, if the cache does not show that write yet."""
        return self._writes.newest(key, namespace)

    def held_now(self, key: str) -> None:
        """A plan of namespace `key` holds room now (the linger counts from here)."""
        self._last_held[key] = self.clock.monotonic()

    async def set(self, namespace: Object, held: bool) -> Object:
        """Sets or removes the label, if it differs; returns the namespace as stored after (or
        `namespace`, when nothing was written: equal already, or the write's gate closed)."""
        meta = metadata(namespace)
        written = await self.writer.label_room_held(namespace, held)
        if written is not namespace:
            self._writes.wrote(str(meta["name"]), str(meta.get("resourceVersion", "")), written)
        return written

    def lingers(self, key: str, namespace: Object, holds_room: bool) -> float | None:
        """Seconds the label stays on a namespace whose room was given back, or None when it
        goes now. It stays `linger` seconds after a plan last held room (counted from now for a
        label this process did not set); a plan that holds room where the label may not be
        removes it at once. The moment is forgotten only once the label is seen gone, so a
        removal that failed is tried again at once, not after another linger."""
        if holds_room or not is_labelled(namespace):
            self._last_held.pop(key, None)
            return None
        now = self.clock.monotonic()
        held_at = self._last_held.setdefault(key, now)
        left = held_at + self.linger - now
        return left if left > 0 else None

    def retry_removal(self, namespace: Object) -> float | None:
        """After a removal of the label: None if it is gone; else the seconds until label writes
        may be tried again (at least 1 s), since a label left on would keep the fail-closed pods
        rule on the namespace and nothing else runs it again."""
        if not is_labelled(namespace):
            return None
        return max(self.writer.label_retry_in(), 1.0)

    def forget(self, key: str) -> None:
        """The namespace is no longer ours (deleted, or without a managed quota)."""
        self._last_held.pop(key, None)
