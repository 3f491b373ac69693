"""Writes of a managed quota by anyone but us, seen and told: who changed which field.

Harvester's own controllers (when they run beside us), a GitOps tool or a person may change
what our plans write: spec.hard of the keys the base knows, and our annotations. The reconcile
plans the namespace again either way (a quota change queues it) and writes its plan back where it
differs; this says who did it, so that an operator can find the other writer before the two
fight. On every update event of a managed quota (the informer's handler gets the old and the new
version; nothing is listed), the fields a plan writes are compared (writers.field_changes: two
small maps, so a status write costs next to nothing); a change is put down to its writer from
the quota's managedFields (writers.foreign_writes), leaving out our own writes, status writes,
Rancher's agent syncing spec.hard to its base and Harvester's UID annotations. Each foreign write
is counted (harvester_quota_foreign_quota_writes_total, by manager) and, at most once per quota
per EVENT_INTERVAL, logged and told in a ForeignQuotaWrite Warning on the quota: who, which
fields from what to what, and what the controller does next (`Judge`); the writes that waited are
counted in the next message.

Only the replica whose controllers run (the leader) reports: a warm standby sees the same events
and is told it is one (`standby`, set by ControllerApp as the refusals' is).
Event loop only.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from ...config.metrics import QuotaMetrics
from ...generic.clock import Clock
from ...generic.events import WARNING, EventRecorder
from ...generic.logformat import fields
from ...generic.meta import annotations_of, metadata
from ...generic.resource import Object
from ...util.resourcequota.base import STANDALONE, BaseError, rancher_base
from ...util.resourcequota.managed import is_managed_quota
from ...util.resourcequota.plan import QuotaPlan
from ...util.resourcequota.writers import (
    FIELD_MANAGER,
    SPEC_HARD,
    FieldChange,
    ForeignWrite,
    field_changes,
    foreign_writes,
    same_value,
)
from ...util.resources import ResourceList

log = logging.getLogger(__name__)

REASON: Final = "ForeignQuotaWrite"
EVENT_INTERVAL: Final = 60.0
"""Seconds between two ForeignQuotaWrite Events (and log lines) of one quota: a GitOps tool
that sets spec.hard back after each of our writes makes one a minute, not one per write."""
MAX_QUOTAS: Final = 4096
"""Quotas whose last Event time is remembered; beyond, those whose interval ended go first."""


class Judge(Protocol):
    """What the controller does next about namespace `key`'s quota after `changes` (a clause)."""

    def __call__(self, key: str, changes: Sequence[FieldChange]) -> str: ...


class PerKeyInterval:
    """At most one admission per key per `interval` seconds of `clock`; the refused ones are
    counted and handed to the next admission of the key. Bounded to `max_keys` keys: past that
    the key admitted longest ago is forgotten (with the count it held; one whose interval ended
    is older than any whose did not), and an admission of it then is as if it were new."""

    def __init__(self, clock: Clock, interval: float, max_keys: int = MAX_QUOTAS) -> None:
        self.clock = clock
        self.interval = interval
        self.max_keys = max_keys
        self._last: OrderedDict[str, tuple[float, int]] = OrderedDict()
        """Key -> (when it was last admitted, how many were refused since)."""

    def admit(self, key: str) -> int | None:
        """The number of refusals of `key` since its last admission if it is admitted now
        (counted from then), else None (and this one is counted)."""
        now = self.clock.monotonic()
        last = self._last.get(key)
        if last is not None and now - last[0] < self.interval:
            self._last[key] = (last[0], last[1] + 1)
            return None
        self._last[key] = (now, 0)
        self._last.move_to_end(key)
        self._trim()
        return 0 if last is None else last[1]

    def _trim(self) -> None:
        """Keys are in the order of their last admission (`admit` moves an admitted key to the
        end), so the first is the oldest: those whose interval ended go before any other, each
        in O(1), never a scan of every key."""
        while len(self._last) > self.max_keys:
            self._last.popitem(last=False)


@dataclass
class ForeignWriteReports:
    """The quota informer's update handler that finds and tells foreign writes (`on_update`)."""

    metrics: QuotaMetrics
    recorder: EventRecorder
    clock: Clock
    judge: Judge
    namespace_of: Callable[[str], Object | None]
    """The cached namespace by name (for Rancher's base), None if not cached."""
    interval: float = EVENT_INTERVAL
    standby: bool = False
    """True while this replica's controllers are held (a warm standby, ControllerApp.warm):
    nothing is reported then; the leader reports."""

    def __post_init__(self) -> None:
        self.events = PerKeyInterval(self.clock, self.interval)

    def on_update(self, old: Object, new: Object) -> None:
        """Finds the foreign writes between `old` and `new` of a managed quota and tells each."""
        if self.standby or not is_managed_quota(new):
            return
        changes = field_changes(old, new)
        if not changes:
            return  # a status write, a label, another annotation: the usual update
        name = str(metadata(new).get("namespace") or "")
        base = self._rancher_base(name)
        for write in foreign_writes(old, new, rancher_base=base, changes=changes):
            self.metrics.count_foreign_write(write.writer.manager)
            self._tell(name, new, write)

    def _rancher_base(self, name: str) -> ResourceList | None:
        namespace = self.namespace_of(name)
        if namespace is None:
            return None
        try:
            return rancher_base(namespace)
        except BaseError:
            return None  # the plan reports the annotation; every key is ours to judge meanwhile

    def _tell(self, namespace: str, quota: Object, write: ForeignWrite) -> None:
        """The log line and the Warning, unless one of this quota's was told within the
        interval (then it waits, counted, for the next)."""
        meta = metadata(quota)
        key = f"{namespace}/{meta.get('name')}"
        waited = self.events.admit(key)
        if waited is None:
            return
        message = foreign_write_message(write, self.judge(namespace, write.changes), waited)
        log.warning(
            "quota %s: %s",
            key,
            message,
            extra=fields(
                namespace=namespace,
                quota=meta.get("name"),
                manager=write.writer.manager,
                fields=[str(c.field) for c in write.changes],
            ),
        )
        self.recorder.event(quota, WARNING, REASON, message)


def foreign_write_message(write: ForeignWrite, next_step: str, waited: int) -> str:
    """The Warning's text: who, what from what to what, what next, and the writes not told."""
    writer = write.writer
    when = f", {writer.time}" if writer.time else ""
    message = (
        f"written by {writer.manager or 'an unnamed field manager'} ({writer.operation or '?'}"
        f"{when}), not by {FIELD_MANAGER}: {write.describe()}; {next_step}"
    )
    if waited:
        message += f" ({waited} more foreign write{'s' if waited > 1 else ''} of this quota "
        message += "since the last such event)"
    return message


# What the controller does next -------------------------------------------------------------------

KEEPS_STANDALONE: Final = (
    "without Rancher's annotation an edit of spec.hard becomes the base (or, while room is held, "
    "moves it by as much)"
)


def next_step(
    plan: QuotaPlan, quota: Object, changes: Sequence[FieldChange], *, through_rancher: bool
) -> str:
    """What the reconcile, planning the namespace again, does about `changes`: `plan` is its
    plan made now from the caches, `quota` the quota it was made from. Judged against the values
    the foreign writer set, so it holds whether or not our write back has landed already."""
    if not plan.managed:
        why = "; ".join(plan.warnings) or "the quota's base cannot be determined"
        return f"the controller leaves the quota as it is: it manages none of it ({why})"
    if through_rancher and any(c.field.section == SPEC_HARD for c in changes):
        return (
            "the controller planned again: its raises go through Rancher's annotation, which "
            "Rancher's agent copies into spec.hard on the namespace's next event"
        )
    back = [
        f"{c.field} {c.new if c.new is not None else '(none)'} -> {wanted or '(none)'}"
        for c in changes
        if not same_value(wanted := _planned_value(plan, quota, c), c.new)
    ]
    if back:
        return "the controller planned again and writes its plan back: " + ", ".join(back)
    kept = "the controller planned again and keeps the change"
    standalone = plan.base is not None and plan.base.source == STANDALONE
    if standalone and any(c.field.section == SPEC_HARD for c in changes):
        return f"{kept}: {KEEPS_STANDALONE}"
    return kept


def _planned_value(plan: QuotaPlan, quota: Object, change: FieldChange) -> str | None:
    """The value the plan gives the changed field (None: absent)."""
    key = change.field.key
    if change.field.section == SPEC_HARD:
        return plan.hard.get(key)
    if key in plan.remove_annotations:
        return None
    return plan.annotations.get(key, annotations_of(quota).get(key))
