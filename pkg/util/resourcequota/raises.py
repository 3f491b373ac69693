"""A raise of ours: what it may stand on (`floor_of`), and whether it still stands (`raise_stands`).

What a raise may stand on is the usage a namespace had before its rooms began.

While migrations hold room, ``hard = max(base, floor) + rooms``. The floor is what the
namespace's pods use, targets aside, counting only pods that existed before the room period
began. A pod that slipped in while room was held (our webhook down, on an ``Ignore`` rule) uses
the raised quota, but no raise ever follows it: without this, each such pod raised ``used`` and
the next plan raised the quota again for it, so the quota followed the tenant upward (+39 CPU
over a 5-CPU base after two migrations, measured). With it, an outage's excess is bounded by the
rooms held, and the pods that took it are charged against the base (``UsageAboveBase``).

When the period began is a fact no tenant can shift: the creation time the API server gave the
earliest migration holding room, recorded on the quota (``harvester-quota.io/rooms-since``, written
with the first raise, removed with the last release) so that the period does not move forward while
overlapping migrations follow one another. A pod is "new" by its own creationTimestamp, also set by
the API server. KubeVirt's target pods of migrations within the namespace are never new: each
replaces a launcher pod that already counted (the labels that mark them are KubeVirt's alone, see
docs/security.md), so a VM over its base after the overhead ratio was raised (the v1.7.0 seed)
migrates again and again. The target pod of a decentralized migration is new: it is a VM arriving
from elsewhere (rooms.py), and no raise follows it. A target pod counts as replacing only while its
migration exists (planned, or finished and set aside by planviews.SettledMigrations) and is within
the namespace; one whose migration is gone (a finished receive its tenant deleted) is new, so
deleting the migration does not launder its VM into the floor. The price: an ordinary migration
deleted while a room period is open takes its VM out of the floor; in a namespace over its base
that may leave the next target short until the period ends.

Whether a raise of ours still stands in a namespace decides one rule. The rule (the design's "the
room belongs to the migration, and so does the raise"): outside KubeVirt's own targets of a
migration holding room, no pod is admitted above the base while any raise of ours still stands. A
raise stands from the write that raises spec.hard until both spec.hard and status.hard (what quota
admission enforces, which kube-controller-manager copies a moment after spec.hard) are back at the
base. It outlives the room it was made for: a migration ends (its source pod gone, so quota
admission drops status.used at once) before the controller's release write lands, and in that
moment no room is held while the raise is still enforced. The webhook holds pods to the base
throughout (`raise_enforced`), and MTQ mode takes a namespace over only once nothing of the room
mode's raise stands (`raise_stands`).

What marks a raise as ours, never a label, annotation or name a tenant can set:
- our records on the quota (per-VM room keys, ours or Harvester's; the applied spec.hard; the
  room period), which only the controller and administrators may write;
- on Rancher's path, Rancher's annotation being the base: spec.hard above it is no limit anyone
  set (Rancher resets spec.hard to it), so it is a raise until Rancher's agent copies it down;
- status.hard above spec.hard: a lowering of spec.hard not yet copied into what quota admission
  enforces (our release, after our records are gone).
An administrator's raise of spec.hard carries none of these: once status.hard follows, it is the
new limit.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from ...generic.meta import annotations_of
from ..annotations import MIGRATING_PREFIX
from ..quotascope import UNSCOPED, QuotaScope
from ..resources import ResourceList, parse_resource_list_leniently
from .base import ANNOTATION_APPLIED, ANNOTATION_RANCHER_BASE
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


def raise_records(quota: Mapping[str, Any] | None, namespace: Mapping[str, Any] | None) -> bool:
    """Whether the quota carries our records of a raise or a room (per-VM room keys, ours or an
    earlier controller's, the applied spec.hard, the room period), or the namespace the Rancher
    annotation text we raised through. The controller removes them with its release write."""
    if ANNOTATION_RANCHER_BASE in annotations_of(namespace):
        return True
    return any(
        key.startswith(MIGRATING_PREFIX) or key in (ANNOTATION_APPLIED, ANNOTATION_ROOMS_SINCE)
        for key in annotations_of(quota)
    )


def status_lags(quota: Mapping[str, Any] | None) -> bool:
    """Whether status.hard stands above spec.hard on a key of both: a lowering quota admission
    does not enforce yet."""
    hard, enforced = limits(quota)
    return above(enforced, hard)


def raise_stands(
    quota: Mapping[str, Any] | None,
    namespace: Mapping[str, Any] | None,
    rancher_base: ResourceList | None = None,
) -> bool:
    """Whether the room mode's raise may still be enforced by quota admission: our records
    stand (`raise_records`), status.hard still lags a lowered spec.hard, or, where Rancher's
    annotation is the base (`rancher_base`), spec.hard or status.hard stands above it (a
    release through the annotation removes our records at once; Rancher's agent copies it a
    moment later). The webhook keeps a namespace with a VMMRQ under the room mode's pod rules
    until this is False."""
    if raise_records(quota, namespace) or status_lags(quota):
        return True
    if rancher_base is None:
        return False
    hard, enforced = limits(quota)
    return above(hard, rancher_base) or above(enforced, rancher_base)


def raise_enforced(
    quota: Mapping[str, Any],
    namespace: Mapping[str, Any] | None,
    base: ResourceList,
    *,
    rancher: bool,
) -> bool:
    """Whether pods must be held to `base` though no room is held: spec.hard or status.hard
    stands above `base` on a key of the base, and the raise is ours (see the module docstring;
    `rancher`: the base is Rancher's annotation). Pure; errs toward True only where a record of
    ours is on the quota or namespace."""
    if not (rancher or raise_stands(quota, namespace)):
        return False
    hard, enforced = limits(quota)
    return above(hard, base) or above(enforced, base)


def limits(quota: Mapping[str, Any] | None) -> tuple[ResourceList, ResourceList]:
    """The quota's spec.hard and status.hard, read leniently (a key that cannot be read is left
    out)."""
    quota = quota or {}
    return (
        parse_resource_list_leniently((quota.get("spec") or {}).get("hard")),
        parse_resource_list_leniently((quota.get("status") or {}).get("hard")),
    )


def above(limits: ResourceList, reference: ResourceList) -> bool:
    """Whether `limits` stands above `reference` on a key both have."""
    return any(key in limits and limits[key] > value for key, value in reference.items())
