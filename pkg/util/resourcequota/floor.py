"""What a raise may stand on: the usage a namespace had before its rooms began.

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
creationTimestamp, also set by the API server. KubeVirt's target pods of migrations within the
namespace are never new: each replaces a launcher pod that already counted (the labels that mark
them are KubeVirt's alone, see docs/security.md), so a VM over its base after the overhead ratio
was raised (the v1.7.0 seed) migrates again and again. The target pod of a decentralized
migration is new: it is a VM arriving from elsewhere (rooms.py), and no raise follows it. A
target pod counts as replacing only while its migration exists (planned, or finished and set aside
by settled.py) and is within the namespace; one whose migration is gone (a finished receive its
tenant deleted) is new, so deleting the migration does not launder its VM into the floor. The
price: an ordinary migration deleted while a room period is open takes its VM out of the floor;
in a namespace over its base that may leave the next target short until the period ends.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from ...generic.meta import annotations_of
from ..quotascope import UNSCOPED, QuotaScope
from ..resources import ResourceList
from .podindex import NamespacePods

ANNOTATION_ROOMS_SINCE: Final = "harvester-quota.io/rooms-since"
"""On the managed quota while rooms are held: when the room period began (RFC 3339, UTC)."""

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


def floor_of(
    pods: NamespacePods,
    targets: frozenset[str],
    since: str | None,
    now: datetime.datetime,
    scope: QuotaScope = UNSCOPED,
    *,
    replacing: frozenset[str],
    used: ResourceList,
) -> ResourceList:
    """What the namespace's pods a quota of `scope` charges use at `now`, the rooms' target
    pods aside, counting only the pods created before `since` and the target pods of the
    `replacing` migrations (all pods when `since` is None). `used` is the usage with `targets`
    aside (`pods.used_without(targets, now, scope)`, which a plan sums anyway): when no pod
    arrived since the rooms began (no room held, or a migration's usual case), the floor leaves
    out nothing more, so it is `used` and the namespace is not summed again (each sum copies its
    tally). Which pods arrived is decided by `arrivals` with the same `replacing` either way, so
    a decentralized migration's target pod, or one whose migration is gone, takes the full sum;
    a set-aside migration's does not (tests/unit/test_floor_shortcut.py compares the two).

    Harvester's `compensatePendingMigration` and `compensateResourceQuotaBase` raise the base
    once a migration's target pod was refused (`CalculateCompensationResourceQuotaWithVMI`, on
    limits.memory); here the floor is in every plan, on every key, before any refusal."""
    arrived = arrivals(pods, since, replacing)
    if not arrived:
        return used
    return pods.used_without(targets | frozenset(arrived), now, scope)


def arrivals(pods: NamespacePods, since: str | None, replacing: frozenset[str]) -> list[str]:
    """The pods created at or after `since` that are not target pods of the `replacing`
    migrations (the uids of the namespace's migrations within it, as the plan knows them): what
    the namespace took while room was held, and no raise follows. A target pod of a
    decentralized migration, or of a migration no longer known, is an arrival."""
    if since is None:
        return []
    return [
        pod.name
        for pod in pods.created_since(since)
        if not pod.migration_uid or pod.migration_uid not in replacing
    ]
