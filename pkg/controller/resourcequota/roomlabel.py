"""The room-held label of the room mode's namespaces: when it is set, how long it lingers.

LABEL_ROOM_HELD puts a namespace under the webhook's fail-closed pods rule. The reconcile sets it
before a raise is written and removes it after the room is given back and a linger is over, so
the rule covers the whole time a raised quota could admit a pod, and a drain's next wave is
raised without the label's round trip on its path. A namespace whose Rancher quota we raise
directly, where no namespace write may be made while a raise stands, keeps it for good instead
(`label_policy`). The write itself, and its permission gate, are the QuotaWriter's
(controller/quotawriter.py); this keeps the linger and records each label write in the
namespaces' pending writes (generic/pendingwrites.py). Not thread-safe: event loop only, per
namespace from one worker at a time (the workqueue's guarantee).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...generic.clock import Clock
from ...generic.meta import labels
from ...generic.pendingwrites import PendingWrites
from ...generic.resource import Object
from ...util.annotations import LABEL_ROOM_HELD
from ..quotawriter import QuotaWriter


@dataclass(frozen=True)
class LabelPolicy:
    """What one plan of a namespace does with its label (`label_policy`)."""

    labels_room: bool
    """Set it now: the plan holds room and a namespace write is safe."""
    for_good: bool
    """Keep it whether or not room is held: set whenever it is missing, never removed."""
    waits: bool
    """A namespace write now would have Rancher's agent reset a standing raise: a label this
    policy does not keep for good is not removed now."""


def label_policy(
    *, managed: bool, holds_room: bool, may_label: bool, raise_stands: bool, fail_closed: bool
) -> LabelPolicy:
    """The label's policy for a plan. Where a namespace write is safe during a room
    (`may_label`), the label is set for the room and lingers after it. Where it is not (a
    Rancher quota raised directly), a label per room could never be written, which left those
    rooms on the pods rule that fails open; with `fail_closed` the label is kept there for
    good instead. It is written once, normally when the namespace is first planned, before any
    raise; found missing while a raise stands (an upgrade from a version that did not keep it,
    the write refused until then), it is written all the same: Rancher's agent may then reset
    the raise once, which the next plan raises again, where leaving the room on the fail-open
    rule would let pods in for as long as it lasts. A label not kept for good there is only
    removed while no raise of ours `raise_stands`."""
    return LabelPolicy(
        labels_room=managed and holds_room and may_label,
        for_good=managed and not may_label and fail_closed,
        waits=not may_label and (holds_room or raise_stands),
    )


def is_labelled(namespace: Object) -> bool:
    """Whether the namespace carries LABEL_ROOM_HELD=true."""
    return labels(namespace).get(LABEL_ROOM_HELD) == "true"


class RoomHeldLabel:
    """Sets and removes the label through `writer`, each write recorded in `pending` (the
    namespaces' pending writes); `linger` seconds after room was last held."""

    def __init__(
        self, writer: QuotaWriter, clock: Clock, linger: float, pending: PendingWrites
    ) -> None:
        self.writer = writer
        self.pending = pending
        self.clock = clock
        self.linger = linger
        self._last_held: dict[str, float] = {}
        """Namespace -> the monotonic moment a plan of it last held room, while its label
        lingers (`lingers`)."""

    def held_now(self, key: str) -> None:
        """A plan of namespace `key` holds room now (the linger counts from here)."""
        self._last_held[key] = self.clock.monotonic()

    async def set(self, namespace: Object, held: bool) -> Object:
        """Sets or removes the label, if it differs; returns the namespace as stored after (or
        `namespace`, when nothing was written: equal already, or the write's gate closed)."""
        written = await self.writer.label_room_held(namespace, held)
        if written is not namespace:
            self.pending.wrote(written)
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

    def due(self, key: str, namespace: Object, holds_room: bool) -> bool:
        """Whether a label on `namespace` outstayed its room: room is not held and its linger
        (counted from the last plan that held room, as `lingers` counts it) is over, or no plan
        of this process ever saw it held. Pure: the linger's moment is not started here."""
        if holds_room or not is_labelled(namespace):
            return False
        held_at = self._last_held.get(key)
        return held_at is None or held_at + self.linger <= self.clock.monotonic()

    def retry_removal(self, namespace: Object) -> float | None:
        """After a removal of the label: None if it is gone; else the seconds until label writes
        may be tried again (at least 1 s), since a label left on would keep the fail-closed pods
        rule on the namespace and nothing else runs it again."""
        if not is_labelled(namespace):
            return None
        return max(self.writer.label_retry_in(), 1.0)

    def retry_labelling(self, namespace: Object) -> float | None:
        """For a namespace labelled for good: None if it carries the label; else the seconds
        until label writes may be tried again while the write's gate is closed (a raise still
        standing is not retried from here: giving it back runs the reconcile again)."""
        if is_labelled(namespace):
            return None
        wait = self.writer.label_retry_in()
        return max(wait, 1.0) if wait > 0 else None

    def forget(self, key: str) -> None:
        """The namespace is no longer ours (deleted, or without a managed quota)."""
        self._last_held.pop(key, None)
