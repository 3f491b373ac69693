"""Pods that slipped into a held room, and the floor that keeps them out for good.

Within a room period floor.py keeps the period's arrivals out of the floor. Across periods that
was not enough: by the next migration a pod that slipped in was old, the raise stood on it, and a
tenant who migrated its own VM again and again while our webhook was down gained one room each
time (12 -> 18 CPU used over a 10-CPU base in four migrations, at plan level). So in the
namespaces whose pods rule fails open while room is held (those whose Rancher quota is raised
directly, never labelled room-held: `judges_arrivals`), each arrival is judged once, when first
seen settled, and the verdict is recorded on the quota, which no tenant can write:

- judged oldest first against ``max(base, floor)``: an arrival that fits next to the floor and the
  arrivals before it that fitted is the namespace's (our webhook admitted it so); one that does
  not slipped in;
- a verdict is never redone (``through``: the arrivals created up to that second are judged), so
  an honest pod is not recorded later because the floor grew for other reasons (a target larger
  than its source, a VM stopped mid-migration whose pods still count);
- a slipped-in launcher pod is recorded by its VMI, so neither it nor the pods its VMI runs in
  later (its migration targets) come back into the floor; any other pod by name and creation;
- at most `MAX_ENTRIES` entries (the annotation stays a few KiB): the usage of what does not fit
  is kept as one sum (``over``) taken off the floor, failing closed;
- entries go with their pods, ``over`` shrinks with the namespace's usage above the base, and the
  whole record goes once nothing is above the base.

While recorded pods exist they stay out of every floor, so what slipped in never exceeds one
period's rooms; a migration that needs the room they took waits until they go, with a Warning
naming them. Pure: the caller writes the record with the plan.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from ...generic.meta import annotations_of
from .. import resources
from ..quotascope import UNSCOPED, QuotaScope
from ..resources import ResourceList
from .podindex import NamespacePods, PodView

ANNOTATION_SLIPPED_IN: Final = "harvester-quota.io/slipped-in"
"""On the managed quota: the pods that slipped into a held room (SlippedRecord, JSON)."""

MAX_ENTRIES: Final = 100
"""Entries named at most; what slipped in beyond them is kept as one sum (`over`)."""

SETTLE_SECONDS: Final = 5
"""An arrival is judged once it is this old: the pods created in its second have reached the
caches by then (one later is judged by the next plan, never twice)."""

_TIME_FORMAT: Final = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True)
class SlippedRecord:
    """What the quota records of the pods that slipped in; immutable."""

    pods: frozenset[str] = frozenset()
    """``<name>@<creationTimestamp>`` of pods that are not launchers."""
    vmis: frozenset[str] = frozenset()
    """uids of VMIs whose launcher pod slipped in."""
    over: ResourceList = field(default_factory=dict)
    """The usage of what slipped in beyond `MAX_ENTRIES`, taken off the floor."""
    through: str | None = None
    """This room period's arrivals created at or before this second are judged."""

    @property
    def empty(self) -> bool:
        return not (self.pods or self.vmis or self.over or self.through)

    def text(self) -> str | None:
        """The annotation's value (None: nothing to record)."""
        if self.empty:
            return None
        value: dict[str, Any] = {"pods": sorted(self.pods), "vmis": sorted(self.vmis)}
        if self.over:
            value["over"] = {key: str(quantity) for key, quantity in sorted(self.over.items())}
        if self.through:
            value["through"] = self.through
        return json.dumps(value, separators=(",", ":"))


def recorded(quota: Mapping[str, Any]) -> SlippedRecord:
    """The quota's record; an unreadable one is empty (the plan then writes what it judges)."""
    text = annotations_of(quota).get(ANNOTATION_SLIPPED_IN)
    if not text:
        return SlippedRecord()
    try:
        value = json.loads(text)
        if not isinstance(value, dict):
            return SlippedRecord()
        return SlippedRecord(
            pods=_strings(value.get("pods")),
            vmis=_strings(value.get("vmis")),
            over=resources.parse_resource_list_leniently(value.get("over")),
            through=value["through"] if isinstance(value.get("through"), str) else None,
        )
    except (ValueError, TypeError):
        return SlippedRecord()


def _strings(value: Any) -> frozenset[str]:
    if not isinstance(value, list):
        return frozenset()
    return frozenset(item for item in value if isinstance(item, str))


def pod_key(view: PodView) -> str:
    return f"{view.name}@{view.created}"


@dataclass(frozen=True)
class Judgment:
    """The floor of a plan, with the record it leaves."""

    floor: ResourceList
    record: SlippedRecord
    kept_out: tuple[str, ...] = ()
    """The pods kept out of the floor for having slipped in, by name."""
    newly: tuple[PodView, ...] = ()
    """The arrivals this plan judged slipped in."""
    judge_again_in: float | None = None
    """Seconds until an arrival not yet settled can be judged."""


@dataclass(frozen=True)
class Namespace:
    """What a judgment reads of the namespace (the plan's inputs)."""

    pods: NamespacePods
    targets: frozenset[str]
    base: ResourceList
    now: datetime.datetime
    scope: QuotaScope = UNSCOPED


def judged(
    namespace: Namespace,
    record: SlippedRecord,
    since: str | None,
    sources: frozenset[str] = frozenset(),
    *,
    ended: str | None = None,
    settled_now: bool = False,
) -> Judgment:
    """The floor of a room period begun at `since` (None: no room is held), the record's pods
    kept out of it and this period's arrivals (not KubeVirt's targets, not the rooms' `sources`)
    judged as the module says. With no room held, `ended` is when the period that just ended
    began (the quota still records it): its arrivals not judged yet are judged now, settled or
    not, since a period shorter than `SETTLE_SECONDS` would otherwise leave them unjudged and
    old by the next. Deterministic for the same inputs; costs the recorded and arrived pods, not
    the namespace."""
    pods, now, scope = namespace.pods, namespace.now, namespace.scope
    kept = _kept_out(pods, record)
    used = pods.used_without(namespace.targets, now, scope)
    if since is None and ended is None:
        record = _pruned(record, pods, kept, namespace.base, used, through=None)
        return Judgment(used, record, tuple(sorted(kept)))
    if since is None:
        last = judged(namespace, record, ended, sources, settled_now=True)
        record = replace(last.record, through=None)
        return Judgment(used, record, last.kept_out, last.newly)
    arrived = [
        view
        for view in pods.created_since(since)
        if not view.migration_uid and view.name not in sources
    ]
    excluded = namespace.targets | kept | {view.name for view in arrived}
    floor = resources.subtract_non_negative(pods.used_without(excluded, now, scope), record.over)
    settle = 0 if settled_now else SETTLE_SECONDS
    settled_by = (now - datetime.timedelta(seconds=settle)).strftime(_TIME_FORMAT)
    through = record.through
    earlier = [view for view in arrived if through is not None and view.created <= through]
    later = [view for view in arrived if view not in earlier and view.name not in kept]
    ready = [view for view in later if view.created <= settled_by]
    running = resources.add(floor, _usage(earlier, kept, now, scope))
    allowance = {k: max(v, floor.get(k, v * 0)) for k, v in namespace.base.items()}
    newly = [view for view in ready if not _took(running, view, allowance, now, scope)]
    through = max([view.created for view in ready], default=through)
    grown = _with(record, newly, now)
    record = _pruned(grown, pods, _kept_out(pods, grown), namespace.base, used, through=through)
    return Judgment(
        floor,
        record,
        tuple(sorted(_kept_out(pods, record))),
        tuple(newly),
        _wait(later, ready, now),
    )


def _took(
    running: dict[str, Any],
    view: PodView,
    allowance: ResourceList,
    now: datetime.datetime,
    scope: QuotaScope,
) -> bool:
    """Whether `view` fits next to `running` (which it then joins)."""
    usage = view.usage_at(now) if scope.matches(view.scope) else {}
    if any(
        running.get(key, value * 0) + value > allowance[key]
        for key, value in usage.items()
        if key in allowance
    ):
        return False
    running.update(resources.add(running, usage))
    return True


def _usage(
    views: Iterable[PodView], kept: frozenset[str], now: datetime.datetime, scope: QuotaScope
) -> ResourceList:
    return resources.total(
        view.usage_at(now) for view in views if view.name not in kept and scope.matches(view.scope)
    )


def _kept_out(pods: NamespacePods, record: SlippedRecord) -> frozenset[str]:
    """The names of the existing pods the record keeps out of the floor."""
    names = {view.name for uid in record.vmis for view in pods.launchers_of(uid)}
    for key in record.pods:
        name, _, created = key.rpartition("@")
        view = pods.get(name)
        if view is not None and view.created == created:
            names.add(name)
    return frozenset(names)


def _with(record: SlippedRecord, newly: list[PodView], now: datetime.datetime) -> SlippedRecord:
    """`record` with `newly` added; beyond MAX_ENTRIES their usage joins `over`."""
    vmis, names, over = set(record.vmis), set(record.pods), dict(record.over)
    for view in newly:
        if len(vmis) + len(names) >= MAX_ENTRIES:
            over = resources.add(over, view.usage_at(now))
        elif view.launcher and view.created_by:
            vmis.add(view.created_by)
        else:
            names.add(pod_key(view))
    return replace(record, pods=frozenset(names), vmis=frozenset(vmis), over=over)


def _pruned(
    record: SlippedRecord,
    pods: NamespacePods,
    kept: frozenset[str],
    base: ResourceList,
    used: ResourceList,
    *,
    through: str | None,
) -> SlippedRecord:
    """Entries of pods that exist; `over` no more than the usage above the base; nothing when
    nothing is above the base (what slipped in then fits)."""
    above = resources.subtract_non_negative(resources.mask(used, base), base)
    if not resources.remove_zeros(above):
        return SlippedRecord(through=through)
    vmis = frozenset(uid for uid in record.vmis if pods.launchers_of(uid))
    names = frozenset(key for key in record.pods if key.rpartition("@")[0] in kept)
    over = resources.remove_zeros(
        {k: min(v, above[k]) for k, v in record.over.items() if k in above}
    )
    return SlippedRecord(pods=names, vmis=vmis, over=over, through=through)


def _wait(later: list[PodView], ready: list[PodView], now: datetime.datetime) -> float | None:
    """Seconds until the oldest arrival not yet settled is."""
    waiting = [view.created for view in later if view not in ready]
    if not waiting:
        return None
    created = datetime.datetime.strptime(min(waiting), _TIME_FORMAT).replace(tzinfo=datetime.UTC)
    return max(0.0, (created - now).total_seconds() + SETTLE_SECONDS)


def same_second_sources(
    pods: NamespacePods, vmi_uids: Iterable[str], since: str | None
) -> frozenset[str]:
    """The launcher pods of the rooms' VMIs created in the very second the room period began:
    creationTimestamp has whole seconds, so a VM started and migrated within one second would
    make its own source an arrival of its room period (and a tenant's pods of that second,
    judged first by name, would take its place under the base). Launchers created later in the
    period are arrivals like any pod."""
    if since is None:
        return frozenset()
    return frozenset(
        view.name
        for uid in vmi_uids
        for view in pods.launchers_of(uid)
        if not view.migration_uid and view.created == since
    )
