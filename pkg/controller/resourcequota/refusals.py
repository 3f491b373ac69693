"""Migrations KubeVirt reports refused by quota, noted as their objects change.

virt-controller sets `migrationRejectedByResourceQuota` on a pending VMIM when quota admission
refuses its target pod, and clears it once a target pod is admitted. On a busy control plane both
can happen before the namespace's reconcile runs (the workqueue folds the two changes into one
run), so counting refusals from what a reconcile sees misses the short ones, and those are the
ones a raise fixed. The tracker therefore notes each change when the cache applies it (a store
view listener), and the reconcile reads what was noted (`settle`). What it reports does not
depend on when reconciles run:

- a migration (by uid) is counted once, at the first settle after its first refusal, however
  briefly that stood and however often KubeVirt refused it again;
- its blocked time runs from its first refusal to the last time it was seen cleared, and is
  reported once, when it leaves Pending or is deleted (before that, a later refusal would
  extend it);
- while any of the namespace's migrations stands refused, `StandingRefusals` exports, at each
  scrape, when the longest-standing of them began (wall time), so a block is seen while it
  lasts, not only once it ends. That moment is virt-controller's own (the condition's
  lastProbeTime, set once when it adds the condition; only KubeVirt writes a VMIM's status),
  so a controller that restarts or takes over mid-block reports the block's true start, not
  when it first saw it; it is never later than that first sight.

A migration is kept while it is pending after a refusal (one small record each). Not
thread-safe: event loop only, like the store listeners that feed it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ...apis.kubevirt import CONDITION_REJECTED_BY_QUOTA, PHASE_PENDING
from ...generic.clock import Clock
from ...generic.meta import has_condition, metadata, status
from ...util.vmispec import parse_time


def _pending(migration: Mapping[str, Any]) -> bool:
    return str(status(migration).get("phase") or PHASE_PENDING) == PHASE_PENDING


def refused_by_quota(migration: Mapping[str, Any] | None) -> bool:
    """Whether `migration` is pending with KubeVirt's quota refusal condition True."""
    if migration is None:
        return False
    return _pending(migration) and has_condition(migration, CONDITION_REJECTED_BY_QUOTA)


@dataclass
class _Refusal:
    uid: str
    since: float
    """Monotonic moment of its first refusal."""
    began: float
    """Unix time it began: KubeVirt's lastProbeTime of the condition, or our first sight if
    that is earlier or the time cannot be read."""
    ended: float | None = None
    """Monotonic moment it was last seen cleared (or gone); None while refused."""
    counted: bool = False


@dataclass
class Settled:
    """What `RefusalTracker.settle` found for one namespace."""

    new_refusals: int = 0
    """Migrations refused for the first time since the last settle."""
    blocked_seconds: list[float] = field(default_factory=list)
    """How long each migration that left Pending (or was deleted) since stayed refused."""


@dataclass
class _Namespace:
    pending: dict[str, _Refusal] = field(default_factory=dict)
    """By migration name: refused at least once and still pending."""
    closed: list[_Refusal] = field(default_factory=list)
    """Left Pending or deleted since the last settle."""


class RefusalTracker:
    """Refused migrations per namespace, kept until a settle or forget of their namespace reads
    them. Every change noted here is a change of the plan's migration view, which queues the
    namespace, so each is read by that namespace's next reconcile.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._by_namespace: dict[str, _Namespace] = {}
        self.standby = False
        """True while nothing settles (a warm standby): a refusal that ends then is dropped,
        not kept for a count the leader of the time reports, so the notes stay as few as the
        refusals standing and the new leader counts what a first list would show it."""

    def seen(self, key: str, migration: Mapping[str, Any] | None) -> None:
        """The store's view of `key` ("namespace/name") is now `migration` (None: deleted)."""
        namespace, _, name = key.rpartition("/")
        tracked = self._by_namespace.get(namespace)
        noted = tracked.pending.get(name) if tracked is not None else None
        uid = str(metadata(migration).get("uid", "")) if migration is not None else None
        now = self._clock.monotonic()
        if noted is not None and tracked is not None:
            if migration is None or uid != noted.uid or not _pending(migration):
                noted.ended = noted.ended if noted.ended is not None else now
                ended = tracked.pending.pop(name)
                if not self.standby:
                    tracked.closed.append(ended)
                elif not tracked.pending and not tracked.closed:
                    del self._by_namespace[namespace]
            elif refused_by_quota(migration):
                noted.ended = None
            elif noted.ended is None:
                noted.ended = now
        if migration is not None and refused_by_quota(migration):
            tracked = self._by_namespace.setdefault(namespace, _Namespace())
            if name not in tracked.pending:
                began = _refused_at(migration, self._clock.now().timestamp())
                tracked.pending[name] = _Refusal(str(uid), now, began)

    def settle(self, namespace: str) -> Settled:
        """Counts the namespace's migrations refused for the first time since the last settle,
        and reports the blocked time of those that left Pending or were deleted since."""
        result = Settled()
        tracked = self._by_namespace.get(namespace)
        if tracked is None:
            return result
        for refusal in [*tracked.closed, *tracked.pending.values()]:
            if not refusal.counted:
                refusal.counted = True
                result.new_refusals += 1
        for refusal in tracked.closed:
            assert refusal.ended is not None  # set when it was closed
            result.blocked_seconds.append(refusal.ended - refusal.since)
        tracked.closed.clear()
        if not tracked.pending:
            del self._by_namespace[namespace]
        return result

    def standing_since(self) -> dict[str, float]:
        """Namespace -> Unix time the longest-standing refusal refused now began (namespaces
        with none left out)."""
        found: dict[str, float] = {}
        for namespace, tracked in self._by_namespace.items():
            began = [r.began for r in tracked.pending.values() if r.ended is None]
            if began:
                found[namespace] = min(began)
        return found

    def forget(self, namespace: str) -> None:
        """Drops the namespace's notes without counting them (it is no longer ours to report)."""
        self._by_namespace.pop(namespace, None)

    def standing(self) -> int:
        """Migrations refused now, in all namespaces (for tests and debugging)."""
        return sum(
            1
            for tracked in self._by_namespace.values()
            for r in tracked.pending.values()
            if r.ended is None
        )


def _refused_at(migration: Mapping[str, Any], seen_at: float) -> float:
    """When the quota refusal condition of `migration` began: its lastProbeTime, which
    virt-controller sets once when it adds the condition, if readable and not later than
    `seen_at` (our first sight, Unix time), else `seen_at`."""
    for condition in status(migration).get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == CONDITION_REJECTED_BY_QUOTA:
            try:
                probed = parse_time(condition.get("lastProbeTime"), "lastProbeTime").timestamp()
            except ValueError:
                return seen_at
            return min(probed, seen_at)
    return seen_at


class StandingRefusals(Collector):
    """`harvester_quota_migration_refused_since_timestamp_seconds{namespace}`, read from the
    tracker at each scrape: per namespace, when its longest-standing refusal began (absent
    while none stands, and from a standby, which reports nothing). A collector rather than a
    gauge set by reconciles: a scrape can never show a value a failed reconcile left behind.
    Scrapes run on the event loop (generic/health.py), like everything that changes the
    tracker."""

    NAME: Final = "harvester_quota_migration_refused_since_timestamp_seconds"

    def __init__(self, tracker: RefusalTracker) -> None:
        self._tracker = tracker

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            self.NAME,
            "Unix time the namespace's longest-standing refusal of a migration target pod by "
            "quota began (KubeVirt's condition), while it stands; per namespace.",
            labels=["namespace"],
        )
        if not self._tracker.standby:
            for namespace, began in sorted(self._tracker.standing_since().items()):
                family.add_metric([namespace], began)
        yield family
