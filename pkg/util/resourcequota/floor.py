"""What a raise may stand on: the usage a namespace had before its rooms began (principle 5).

While migrations hold room, ``hard = max(base, floor) + rooms``. The floor is what the
namespace's pods use, targets aside, counting only pods that existed before the room period
began. A pod that slipped in while room was held (our webhook down, on an ``Ignore`` rule) uses
the raised quota, but no raise ever follows it: without this, each such pod raised ``used`` and
the next plan raised the quota again for it, so the quota followed the tenant upward (+39 CPU
over a 5-CPU base after two migrations, measured). With it, an outage's excess is bounded by the
rooms held, and the pods that took it are charged against the base (``UsageAboveBase``).

When the period began is a fact no tenant can shift: the creation time the API server gave the
earliest migration holding room, recorded on the quota (``harvester-quota.io/rooms-since``,
written with the first raise, removed with the last release) so that the period does not move
forward while overlapping migrations follow one another. A pod is "new" by its own
creationTimestamp, also set by the API server. KubeVirt's migration target pods are never new:
each replaces a launcher pod that already counted (the labels that mark them are KubeVirt's
alone, see docs/security.md), so a VM over its base after the overhead ratio was raised (the
v1.7.0 seed) migrates again and again.

A pod that slipped in stays out of the floor for as long as it runs, in later room periods too:
without that, by the next migration it was old, the raise stood on it, and a tenant who migrated
its own VM again and again while the webhook stayed down gained one room each time (12 -> 18 CPU
used over a 10-CPU base in four migrations). Which arrivals slipped in is judged in creation
order against ``max(base, floor)``: an arrival that fits next to the pods before it (as our
webhook admits them) is the namespace's own, the first that does not fit, and every later one
that does not, slipped in. The judgment is recorded on the quota
(``harvester-quota.io/slipped-in``, each pod by name and creation time), because once the period
ends an arrival can no longer be told from a pod that was always there. So the pods that slipped
in never use more than the rooms of one period; while they run, a migration that needs the room
they took waits (a Warning names them), and an honest pod, which fit when it came, is never one
of them.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ...generic.meta import annotations_of
from ..quotascope import UNSCOPED, QuotaScope
from ..resources import ResourceList
from .podindex import NamespacePods, PodView
from .rooms import MigrationRoom

ANNOTATION_ROOMS_SINCE: Final = "harvester-quota.io/rooms-since"
"""On the managed quota while rooms are held: when the room period began (RFC 3339, UTC)."""

ANNOTATION_SLIPPED_IN: Final = "harvester-quota.io/slipped-in"
"""On the managed quota while pods that slipped into a held room still exist: a JSON list of
them, each ``<name>@<creationTimestamp>`` (a pod re-created under the name is another pod)."""

MAX_RECORDED: Final = 1000
"""At most this many pods are recorded (a longer record would crowd the quota's annotations;
those beyond it are still judged, period by period, as arrivals)."""

_RFC3339_UTC: Final = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
"""The form the API server writes creationTimestamp in; only such strings compare as times."""


def rooms_since(quota: Mapping[str, Any], migrations_created: Iterable[str]) -> str | None:
    """When the room period began: the earlier of the recorded moment and the creation of the
    earliest migration holding room now; None when no room is held. A recorded value that is
    not an API-server timestamp is ignored (the plan rewrites it)."""
    created = [moment for moment in migrations_created if _RFC3339_UTC.match(moment)]
    if not created:
        return None
    recorded = annotations_of(quota).get(ANNOTATION_ROOMS_SINCE)
    if recorded is not None and _RFC3339_UTC.match(recorded):
        created.append(recorded)
    return min(created)


def pod_key(view: PodView) -> str:
    """How a pod is named in the slipped-in record: its name and creation time."""
    return f"{view.name}@{view.created}"


def recorded_slipped_in(quota: Mapping[str, Any]) -> frozenset[str]:
    """The pods the quota records as slipped in (empty when unrecorded or unreadable: the plan
    then rewrites the record from what it judges)."""
    text = annotations_of(quota).get(ANNOTATION_SLIPPED_IN)
    if not text:
        return frozenset()
    try:
        value = json.loads(text)
    except ValueError:
        return frozenset()
    if not isinstance(value, list):
        return frozenset()
    return frozenset(item for item in value if isinstance(item, str))


def slipped_in_text(slipped: Iterable[PodView]) -> str | None:
    """The record's text for `slipped` (None: nothing to record)."""
    keys = sorted(pod_key(view) for view in slipped)[:MAX_RECORDED]
    return json.dumps(keys, separators=(",", ":")) if keys else None


@dataclass(frozen=True)
class Floor:
    """What a raise may stand on, and the pods kept out of it for having slipped in."""

    used: ResourceList
    """The floor: what the namespace's pods use, targets, arrivals and slipped-in pods aside."""
    slipped_in: tuple[PodView, ...] = ()
    """The pods that slipped into a held room and still exist, oldest first."""
    newly_slipped_in: tuple[PodView, ...] = ()
    """Those this plan judged so for the first time."""


def floor_of(
    pods: NamespacePods,
    targets: frozenset[str],
    since: str | None,
    *,
    sources: frozenset[str] = frozenset(),
    allowance_base: ResourceList,
    recorded: frozenset[str],
    now: datetime.datetime,
    scope: QuotaScope = UNSCOPED,
) -> Floor:
    """The floor of a namespace whose rooms began at `since` (None: no room is held), the pods
    in `recorded` (recorded_slipped_in) kept out of it while they exist, and the arrivals since
    `since` judged oldest first against ``max(allowance_base, floor)``, key by key over the
    base's keys: an arrival that fits next to the floor and the arrivals before it that fitted
    is the namespace's; one that does not slipped in. The rooms' `sources` (sources_of) are
    never arrivals. Deterministic for the same pods and record; costs the recorded and arrived
    pods, not the namespace."""
    earlier = tuple(
        view for view in (_recorded_view(pods, key) for key in sorted(recorded)) if view is not None
    )
    if since is None:
        return Floor(used=pods.used_without(targets, now, scope), slipped_in=earlier)
    arrived = arrivals_of(pods, since, sources)
    excluded = targets | {view.name for view in (*earlier, *arrived)}
    floor = pods.used_without(frozenset(excluded), now, scope)
    new = _judged(
        arrived, recorded, floor=floor, allowance_base=allowance_base, now=now, scope=scope
    )
    slipped = sorted((*earlier, *new), key=lambda view: (view.created, view.name))
    return Floor(used=floor, slipped_in=tuple(slipped), newly_slipped_in=tuple(new))


def _judged(
    arrived: list[PodView],
    recorded: frozenset[str],
    *,
    floor: ResourceList,
    allowance_base: ResourceList,
    now: datetime.datetime,
    scope: QuotaScope,
) -> list[PodView]:
    """The arrivals not recorded yet that do not fit, oldest first (floor_of)."""
    allowance = {
        key: max(value, floor.get(key, value * 0)) for key, value in allowance_base.items()
    }
    running = dict(floor)
    new: list[PodView] = []
    for view in arrived:
        if pod_key(view) in recorded:
            continue  # slipped in already (floor_of's `earlier`)
        usage = view.usage_at(now) if scope.matches(view.scope) else {}
        if not _fits(running, usage, allowance):
            new.append(view)
            continue
        for key, value in usage.items():
            running[key] = running[key] + value if key in running else value
    return new


def _recorded_view(pods: NamespacePods, key: str) -> PodView | None:
    name, _, created = key.rpartition("@")
    view = pods.get(name)
    return view if view is not None and view.created == created else None


def _fits(running: ResourceList, usage: ResourceList, allowance: ResourceList) -> bool:
    return all(
        running.get(key, value * 0) + value <= allowance[key]
        for key, value in usage.items()
        if key in allowance
    )


def arrivals_of(
    pods: NamespacePods, since: str | None, sources: frozenset[str] = frozenset()
) -> list[PodView]:
    """The pods created at or after `since` that are neither KubeVirt migration targets nor
    `sources` (sources_of), oldest first: what the namespace took while room was held, and no
    raise follows."""
    if since is None:
        return []
    return [
        pod
        for pod in pods.created_since(since)
        if not pod.migration_uid and pod.name not in sources
    ]


def sources_of(pods: NamespacePods, rooms: Iterable[MigrationRoom]) -> frozenset[str]:
    """The launcher pods the rooms' VMIs ran in when their migrations were created: never
    arrivals, though creationTimestamp, whole seconds, may give a VM started and migrated
    within one second the moment its room period began (and then a tenant's pods of that
    second, judged first by name, took its place under the base). The labels that make a pod
    a VMI's launcher are KubeVirt's alone (docs/security.md)."""
    return frozenset(
        view.name
        for room in rooms
        for view in pods.launchers_of(room.vmi_uid)
        if view.migration_uid != room.migration_uid and view.created <= room.created
    )
