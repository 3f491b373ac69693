"""What the room mode tells about its namespaces: metrics, Events and log lines, none of which
writes a quota. Three sources feed it: each plan (`NamespaceReports`), the migrations KubeVirt reports
refused by quota, noted as their objects change (`RefusalTracker`), and the writes of a managed
quota's spec.hard by anyone but us (`ForeignWriteReports`). Not thread-safe: event loop only.

Each plan (`NamespaceReports`): every reconcile of a managed namespace exports its room, its usage
above the base and the migrations refused by quota since the last run (config/metrics.py), and says
in Events what an operator should look at: warnings of the plan (QuotaNotScaled), a namespace using
more than its base (UsageAboveBase, once per change), and for each migration KubeVirt reports
refused by quota that our arithmetic cannot admit either, which key and by how much
(MigrationBlockedByQuota).

Refusals (`RefusalTracker`): virt-controller sets `migrationRejectedByResourceQuota` on a pending
VMIM when quota admission refuses its target pod, and clears it once a target pod is admitted. On a
busy control plane both can happen before the namespace's reconcile runs (the workqueue folds the
two changes into one run), so counting refusals from what a reconcile sees misses the short ones,
and those are the ones a raise fixed. The tracker therefore notes each change when the cache
applies it (a store view listener), and the reconcile reads what was noted (`settle`). What it
reports does not depend on when reconciles run:

- a migration (by uid) is counted once, at the first settle after its first refusal, however
  briefly that stood and however often KubeVirt refused it again;
- its blocked time runs from its first refusal to the last time it was seen cleared, and is
  reported once, when it leaves Pending or is deleted (before that, a later refusal would
  extend it);
- while any of the namespace's migrations stands refused, the tracker exports, at each
  scrape, when the longest-standing of them began (wall time), so a block is seen while it
  lasts, not only once it ends. That moment is virt-controller's own (the condition's
  lastProbeTime, set once when it adds the condition; only KubeVirt writes a VMIM's status),
  so a controller that restarts or takes over mid-block reports the block's true start, not
  when it first saw it; it is never later than that first sight.

A migration is kept while it is pending after a refusal (one small record each). Not
thread-safe: event loop only, like the store listeners that feed it.

Foreign writes (`ForeignWriteReports`), told: who, and what changed. Harvester's own controllers
(when they run beside us), a GitOps tool or a person may change spec.hard, which our plans write.
The reconcile plans the namespace again either way (a quota change queues it); this says who did
it, so that an operator can find the other writer before the two fight. On every update event of a
managed quota (the informer's handler gets the old and the new version; nothing is listed) whose
spec.hard changed, the writer is among the newest managedFields entries that own a key that changed
(writers.change_writers: managedFields are not in write order, so of one second each is a
candidate); if one of them is neither us nor Rancher's agent (RANCHER_MANAGERS, syncing spec.hard
to its base; or a write of the keys it changed to the namespace's Rancher base,
`sets_rancher_base`, by anyone but Harvester's controllers, which write the base too), the write is
counted (harvester_quota_foreign_quota_writes_total, by manager) and, at most once per quota per
EVENT_INTERVAL, logged and told in a ForeignQuotaWrite Warning on the quota: who, which keys from
what to what, and what the controller does about it (FOREIGN_WRITE_NEXT); the writes that waited
are counted in the next message.

Only the replica whose controllers run (the leader) reports: a warm standby sees the same events
and is told it is one (`standby`, set by ControllerApp as the refusals' is).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ...apis.kubevirt import CONDITION_REJECTED_BY_QUOTA, PHASE_PENDING
from ...config.metrics import QuotaMetrics
from ...generic.clock import Clock
from ...generic.events import WARNING, EventRecorder
from ...generic.logformat import fields
from ...generic.meta import has_condition, metadata, status
from ...generic.perkeyinterval import PerKeyInterval
from ...generic.resource import Object
from ...generic.rest import FIELD_MANAGER
from ...util.launcher import as_view
from ...util.quantity import Quantity
from ...util.resourcequota.base import is_managed_quota, rancher_base, spec_hard
from ...util.resourcequota.conditional import RANCHER_MANAGERS, change_writers
from ...util.resourcequota.plan import PAUSED_HERE, NamespaceSnapshot, QuotaPlan
from ...util.resourcequota.rooms import decentralized_side
from ...util.resources import parse_resource_list_leniently
from ...util.vmispec import parse_time

log = logging.getLogger(__name__)

STANDING_SINCE: Final = "harvester_quota_migration_refused_since_timestamp_seconds"
"""The gauge family RefusalTracker exports at each scrape."""


# Refusals by quota, noted as the migrations change ------------------------------------------------


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
class _Settled:
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


class RefusalTracker(Collector):
    """Refused migrations per namespace, kept until a settle or forget of their namespace reads
    them. Every change noted here is a change of the plan's migration view (which keeps the
    refusal condition's type and status, and a refused migration's phase apart from one under
    way: planviews.py `plan_acted_on`), which queues the namespace if it has a managed quota, so
    each is read by that namespace's next reconcile. Refusals are noted in every namespace (at a
    start, a namespace's migrations may be cached before its quota), but only where `counted`
    (the room mode's namespaces: a managed quota, no MTQ budget) is an ended one kept for a
    settle and a standing one exported; elsewhere an ended one is dropped, so what is kept
    there is one record per refused migration that exists and is Pending.

    Registered as a collector, it exports STANDING_SINCE at each scrape
    (`harvester_quota_migration_refused_since_timestamp_seconds{namespace}`): per namespace,
    when its longest-standing refusal began (absent while none stands, and from a standby,
    which reports nothing). A collector rather than a gauge set by reconciles: a scrape can
    never show a value a failed reconcile left behind. Scrapes run on the event loop
    (generic/health.py), like everything that changes the tracker.
    """

    def __init__(
        self, clock: Clock, counted: Callable[[str], bool] = lambda _namespace: True
    ) -> None:
        self._clock = clock
        self._counted = counted
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
                if not self.standby and self._counted(namespace):
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

    def settle(self, namespace: str) -> _Settled:
        """Counts the namespace's migrations refused for the first time since the last settle,
        and reports the blocked time of those that left Pending or were deleted since."""
        result = _Settled()
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
        with none, and those not `counted`, left out)."""
        found: dict[str, float] = {}
        for namespace, tracked in self._by_namespace.items():
            began = [r.began for r in tracked.pending.values() if r.ended is None]
            if began and self._counted(namespace):
                found[namespace] = min(began)
        return found

    def forget(self, namespace: str) -> None:
        """The namespace is no longer ours to report: its ended refusals are dropped uncounted,
        and those standing are kept, as counted, until they end. So a block that still stands
        when the namespace is ours again (its managed quota deleted and made again) is exported
        at once, and a migration is never counted twice."""
        tracked = self._by_namespace.get(namespace)
        if tracked is None:
            return
        tracked.closed.clear()
        for refusal in tracked.pending.values():
            refusal.counted = True
        if not tracked.pending:
            del self._by_namespace[namespace]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            STANDING_SINCE,
            "Unix time the namespace's longest-standing refusal of a migration target pod by "
            "quota began (KubeVirt's condition), while it stands; per namespace.",
            labels=["namespace"],
        )
        if not self.standby:
            for namespace, began in sorted(self.standing_since().items()):
                family.add_metric([namespace], began)
        yield family


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


# Each plan's metrics and Events -------------------------------------------------------------------


USAGE_ABOVE_BASE_REASON = "UsageAboveBase"
"""Warning event reason when a namespace's pods use more than its base (targets excluded)."""


class NamespaceReports:
    """Exports and reports each plan of a namespace; `forget` when it is no longer ours."""

    def __init__(
        self, metrics: QuotaMetrics, recorder: EventRecorder, refusals: RefusalTracker
    ) -> None:
        self.metrics = metrics
        self.recorder = recorder
        self.refusals = refusals
        self._above_base: dict[str, str] = {}
        """Namespace -> the excess last reported (a Warning event once per change)."""

    def export(self, namespace: str, snapshot: NamespaceSnapshot, plan: QuotaPlan) -> None:
        """Room, usage above the base and refusals of the namespace as they are now."""
        holding = plan.rooms.rooms if plan.holds_room else []
        self.metrics.set_room(namespace, plan.rooms.total() if holding else {}, len(holding))
        base = plan.base.hard if plan.base is not None else {}
        excess = {k: plan.used[k] - v for k, v in base.items() if k in plan.used}
        self.metrics.set_above_base(namespace, excess)
        self.metrics.set_namespace_paused(namespace, plan.paused == PAUSED_HERE)
        self._report_above_base(namespace, snapshot.quota, base, plan.used, excess)
        self._count_refusals(namespace)

    def _report_above_base(
        self,
        namespace: str,
        quota: Object,
        base: Mapping[str, Quantity],
        used: Mapping[str, Quantity],
        excess: Mapping[str, Quantity],
    ) -> None:
        """A Warning on the quota, once per change, while the namespace's pods (migration targets
        excluded) use more than its base: how a tenant got past the room guard (pods admitted
        before a room-held label, the label removed by hand) or a VM grew with the overhead ratio.
        The next migration's raise starts from that usage, so an operator should look."""
        positive = {k: v for k, v in sorted(excess.items()) if v.sign() > 0}
        text = ", ".join(f"{k} {used[k]} used of {base[k]} (+{v})" for k, v in positive.items())
        if text == self._above_base.get(namespace, ""):
            return
        if text:
            self._above_base[namespace] = text
            message = f"namespace {namespace} uses more than its base: {text}"
            log.warning("%s", message, extra=fields(namespace=namespace))
            self.recorder.event(quota, WARNING, USAGE_ABOVE_BASE_REASON, message)
        else:
            self._above_base.pop(namespace, None)

    def _count_refusals(self, namespace: str) -> None:
        """Counts each migration KubeVirt reported refused by quota once, however briefly, and
        observes how long each refusal that ended since stood (`RefusalTracker`)."""
        settled = self.refusals.settle(namespace)
        if settled.new_refusals:
            self.metrics.target_pods_refused.labels(namespace).inc(settled.new_refusals)
        for seconds in settled.blocked_seconds:
            self.metrics.blocked_seconds.observe(seconds)

    def warnings(self, namespace: Object, quota: Object, plan: QuotaPlan) -> None:
        """The plan's warnings (a room it cannot size, say), each a QuotaNotScaled Warning."""
        for warning in plan.warnings:
            name = metadata(namespace).get("name")
            log.warning("%s: %s", name, warning, extra=fields(namespace=name))
            self.recorder.event(quota, WARNING, "QuotaNotScaled", warning)

    def explain_blocked(
        self,
        snapshot: NamespaceSnapshot,
        quota: Object,
        plan: QuotaPlan,
        *,
        cause: str | None = None,
    ) -> None:
        """A Warning on every migration KubeVirt reports refused by quota that our arithmetic
        cannot admit either, saying which key and by how much (the quota as written is final),
        and why (`cause`, when the caller knows it: a Rancher project without room)."""
        hard = parse_resource_list_leniently((quota.get("spec") or {}).get("hard"))
        used = parse_resource_list_leniently((quota.get("status") or {}).get("used"))
        for migration in snapshot.migrations:
            if not refused_by_quota(migration):
                continue
            vmi = snapshot.vmis.get(str((migration.get("spec") or {}).get("vmiName")))
            if vmi is None:
                continue
            try:
                needed = snapshot.usage(as_view(vmi), snapshot.launcher)
            except ValueError:
                continue  # reported already as a QuotaNotScaled warning ("cannot size the room")
            short = [
                f"{key}: needs {needed[key]}, used {used.get(key, Quantity.from_int(0))}, hard {limit}"
                for key, limit in sorted(hard.items())
                if key in needed and used.get(key, needed[key] * 0) + needed[key] > limit
            ]
            if not short:
                continue
            self.recorder.event(
                migration,
                WARNING,
                "MigrationBlockedByQuota",
                f"target pod does not fit quota {metadata(quota).get('name')} "
                f"({cause or _why_not_raised(plan, migration)}): " + "; ".join(short),
            )

    def forget(self, namespace: str) -> None:
        """Drops the namespace's metrics and notes (it is no longer ours to report)."""
        self.metrics.forget(namespace)
        self._above_base.pop(namespace, None)
        self.refusals.forget(namespace)


def room_event_targets(
    namespace: Object, quota: Object, plan: QuotaPlan, snapshot: NamespaceSnapshot
) -> list[Object]:
    """Where someone will look when a raise cannot be written: the quota, the namespace and
    every migration holding room in the plan."""
    holders = {r.migration for r in plan.rooms.rooms}
    return [
        quota,
        namespace,
        *(m for m in snapshot.migrations if metadata(m).get("name") in holders),
    ]


def _why_not_raised(plan: QuotaPlan, migration: Object) -> str:
    """Why the quota as written is final for a migration it does not fit."""
    if decentralized_side(migration) is not None:
        return (
            "a decentralized migration brings the VM into this namespace for good, so it must "
            "fit the quota as it is: free room, or raise the quota"
        )
    if plan.paused:
        return plan.paused
    if plan.skipped:
        return "auto-scaling is disabled by harvesterhci.io/skipResourceQuotaAutoScaling"
    if plan.managed:
        return "these keys are not part of the base this controller scales"
    return "the quota's base cannot be determined (see the quota's events)"


# Writes of spec.hard by anyone else ---------------------------------------------------------------

FOREIGN_WRITE_REASON: Final = "ForeignQuotaWrite"
EVENT_INTERVAL: Final = 60.0
"""Seconds between two ForeignQuotaWrite Events (and log lines) of one quota: a GitOps tool
that sets spec.hard back after each of our writes makes one a minute, not one per write."""
MAX_QUOTAS: Final = 4096
"""Quotas whose last Event time is remembered; beyond, those whose interval ended go first."""
HARVESTER_MANAGER: Final = "harvester"
"""The field manager of Harvester's controllers: its resourcequota controller also sets spec.hard
back to the base, so a write of the base by it is told all the same."""
FOREIGN_WRITE_NEXT: Final = (
    "the controller plans the namespace again: where the base is Rancher's annotation it writes "
    "its plan back; without it an edit of spec.hard becomes the base (or, while room is held, "
    "moves it by as much)"
)


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
        self.events = PerKeyInterval(self.clock, self.interval, max_keys=MAX_QUOTAS)

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
            f"{when}), not by {FIELD_MANAGER}: {'; '.join(f'spec.hard {k} {how}' for k, how in changes.items())}; {FOREIGN_WRITE_NEXT}"
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
        self.recorder.event(new, WARNING, FOREIGN_WRITE_REASON, message)


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
