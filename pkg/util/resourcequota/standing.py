"""Whether a raise of ours still stands in a namespace, and the one rule that follows from it.

The rule (the design's "the room belongs to the migration, and so does the raise"): outside
KubeVirt's own targets of a migration holding room, no pod is admitted above the base while any
raise of ours still stands. A raise stands from the write
that raises spec.hard until both spec.hard and status.hard (what quota admission enforces, which
kube-controller-manager copies a moment after spec.hard) are back at the base. It outlives the
room it was made for: a migration ends (its source pod gone, so quota admission drops
status.used at once) before the controller's release write lands, and in that moment no room is
held while the raise is still enforced. The webhook holds pods to the base throughout
(`raise_enforced`), and MTQ mode takes a namespace over only once nothing of the room mode's raise
stands (`raise_stands`).

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

from collections.abc import Mapping
from typing import Any

from ...generic.meta import annotations_of
from ..annotations import MIGRATING_PREFIX
from ..resources import ResourceList, parse_resource_list_leniently
from .base import ANNOTATION_APPLIED, ANNOTATION_RANCHER_BASE
from .floor import ANNOTATION_ROOMS_SINCE


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
