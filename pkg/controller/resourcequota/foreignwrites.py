"""Writes of a managed quota's spec.hard by anyone but us, told: who, and what changed.

Harvester's own controllers (when they run beside us), a GitOps tool or a person may change
spec.hard, which our plans write. The reconcile plans the namespace again either way (a quota
change queues it); this says who did it, so that an operator can find the other writer before
the two fight. On every update event of a managed quota (the informer's handler gets the old and
the new version; nothing is listed) whose spec.hard changed, the writer is among the newest
managedFields entries that own a key that changed (writers.change_writers: managedFields are not
in write order, so of one second each is a candidate); if one of them is neither us nor
Rancher's agent (RANCHER_MANAGERS, syncing spec.hard to its base; or a write of the keys it
changed to the namespace's Rancher base, `sets_rancher_base`, by anyone but Harvester's
controllers, which write the base too), the write is counted
(harvester_quota_foreign_quota_writes_total, by manager) and, at most once per quota per
EVENT_INTERVAL, logged and told in a ForeignQuotaWrite Warning on the quota: who, which keys
from what to what, and what the controller does about it (NEXT); the writes that waited are
counted in the next message.

Only the replica whose controllers run (the leader) reports: a warm standby sees the same events
and is told it is one (`standby`, set by ControllerApp as the refusals' is).
Event loop only.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ...config.metrics import QuotaMetrics
from ...generic.clock import Clock
from ...generic.events import WARNING, EventRecorder
from ...generic.logformat import fields
from ...generic.meta import metadata
from ...generic.resource import Object
from ...generic.rest import FIELD_MANAGER
from ...util.quantity import Quantity
from ...util.resourcequota.base import is_managed_quota, rancher_base, spec_hard
from ...util.resourcequota.conditional import RANCHER_MANAGERS, change_writers

log = logging.getLogger(__name__)

REASON: Final = "ForeignQuotaWrite"
EVENT_INTERVAL: Final = 60.0
"""Seconds between two ForeignQuotaWrite Events (and log lines) of one quota: a GitOps tool
that sets spec.hard back after each of our writes makes one a minute, not one per write."""
MAX_QUOTAS: Final = 4096
"""Quotas whose last Event time is remembered; beyond, those whose interval ended go first."""
HARVESTER_MANAGER: Final = "harvester"
"""The field manager of Harvester's controllers: its resourcequota controller also sets spec.hard
back to the base, so a write of the base by it is told all the same."""
NEXT: Final = (
    "the controller plans the namespace again: where the base is Rancher's annotation it writes "
    "its plan back; without it an edit of spec.hard becomes the base (or, while room is held, "
    "moves it by as much)"
)


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
        """Key -> (when it was last admitted, how many were refused since), in the order of
        their last admission: the first is the one to forget."""

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
        while len(self._last) > self.max_keys:
            self._last.popitem(last=False)
        return 0 if last is None else last[1]


@dataclass
class ForeignWriteReports:
    """The quota informer's update handler that tells foreign writes of spec.hard (`on_update`)."""

    metrics: QuotaMetrics
    recorder: EventRecorder
    clock: Clock
    interval: float = EVENT_INTERVAL
    namespace_of: Callable[[str], Object | None] = lambda _name: None
    """The cached namespace of a name (the namespaces informer's store), for its Rancher base."""
    standby: bool = False
    """True while this replica's controllers are held (a warm standby, ControllerApp.warm):
    nothing is reported then; the leader reports."""

    def __post_init__(self) -> None:
        self.events = PerKeyInterval(self.clock, self.interval)

    def on_update(self, old: Object, new: Object) -> None:
        """Tells the write between `old` and `new` of a managed quota if it changed spec.hard
        and one of its candidate writers (writers.change_writers; the last listed of those that
        are foreign is named) is neither us nor Rancher's agent."""
        if self.standby or not is_managed_quota(new):
            return
        changes = hard_changes(old, new)
        foreign = [
            writer
            for writer in (change_writers(old, new, changes) if changes else [])
            if writer.manager != FIELD_MANAGER and writer.manager not in RANCHER_MANAGERS
        ]
        if not foreign:
            return
        writer, meta = foreign[-1], metadata(new)
        namespace = str(meta.get("namespace") or "")
        if writer.manager != HARVESTER_MANAGER and sets_rancher_base(
            self.namespace_of(namespace), new, changes
        ):
            return
        self.metrics.count_foreign_write(writer.manager)
        key = f"{namespace}/{meta.get('name')}"
        waited = self.events.admit(key)
        if waited is None:
            return
        when = f", {writer.time}" if writer.time else ""
        message = (
            f"written by {writer.manager or 'an unnamed field manager'} ({writer.operation or '?'}"
            f"{when}), not by {FIELD_MANAGER}: {'; '.join(f'spec.hard {k} {how}' for k, how in changes.items())}; {NEXT}"
        )
        if waited:
            message += f" ({waited} more foreign write{'s' if waited > 1 else ''} of this quota "
            message += "since the last such event)"
        told = fields(
            namespace=namespace,
            quota=meta.get("name"),
            manager=writer.manager,
            fields=[f"spec.hard {key}" for key in changes],
        )
        log.warning("quota %s: %s", key, message, extra=told)
        self.recorder.event(new, WARNING, REASON, message)


def sets_rancher_base(
    namespace: Object | None, quota: Mapping[str, Any], keys: Iterable[str]
) -> bool:
    """Whether each of `keys` of the quota's spec.hard is what the namespace's Rancher base
    (base.rancher_base) gives it, absent where the base has no such key: Rancher's sync of the
    quota, whatever its field manager. False without a namespace, a base, or a readable one."""
    try:
        base = rancher_base(namespace) if namespace is not None else None
        hard = spec_hard(quota)
    except ValueError:  # a BaseError too
        return False
    return base is not None and all(hard.get(key) == base.get(key) for key in keys)


def hard_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, str]:
    """Each key of spec.hard whose value differs between `old` and `new` (quantities compared
    by value, so 3 and 3000m are the same), in key order, with how: '3 -> 8', '(none) -> 8',
    '3 -> (removed)'."""
    before, after = _hard(old), _hard(new)
    return {
        key: f"{before.get(key, '(none)')} -> {after.get(key, '(removed)')}"
        for key in sorted(set(before) | set(after))
        if not _same(before.get(key), after.get(key))
    }


def _hard(quota: Mapping[str, Any]) -> dict[str, str]:
    hard = (quota.get("spec") or {}).get("hard")
    return {str(k): str(v) for k, v in hard.items()} if isinstance(hard, Mapping) else {}


def _same(old: str | None, new: str | None) -> bool:
    if old is None or new is None or old == new:
        return old == new
    try:
        return Quantity.parse(old) == Quantity.parse(new)
    except ValueError:
        return False
