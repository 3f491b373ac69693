"""What the webhook's validators share: the caches they read, the namespace view, the checks.

The rules themselves are one module per kind (Harvester's pkg/webhook/resources/<kind>), each
guarding the base and the migration room (the room belongs to the migration, and so does the
raise until it is down: util/resourcequota/raises.py):

- Lowering a namespace's base (Rancher's annotation) or the managed quota's spec.hard below what
  the namespace uses is denied at any time; lowering it while a migration holds room is denied;
  raising is always allowed. Direct spec.hard edits by our own controller are not checked.
- A VM may start only if its launcher pod, overhead included, fits under the base next to what the
  namespace uses without migration targets (Harvester's "insufficient resources due to resource
  quota" check, on every key the pod uses).
- While a migration holds room, a pod that is not a migration target may not push the namespace's
  usage (targets excluded) above the base: that is taking the room a target is waiting for, and
  would let the namespace grow above its base through the raised quota. Target pods of
  migrations within the namespace (labelled kubevirt.io/migrationJobUID, created by KubeVirt's
  controller) always pass; a decentralized migration's target pod is the VM arriving and meets
  this rule like any pod (pod/validator.py `is_room_target`).
Every denial says, with numbers, what would be exceeded.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ...generic.meta import annotations_of
from ...generic.resource import Object
from ...util import resources
from ...util.annotations import parse_migration_annotations
from ...util.launcher import LauncherSettings, VmiSource
from ...util.podusage import QuotaFeatures
from ...util.quantity import Quantity
from ...util.quotascope import quota_scope
from ...util.rancher.annotation import LIMIT_FIELDS
from ...util.resourcequota.base import BaseError, Mode, rancher_base, shortfalls, standalone_base
from ...util.resourcequota.podindex import NamespacePods
from ...util.resourcequota.raises import raise_records
from ...util.resourcequota.rooms import RoomPlan, plan_rooms
from ...util.resources import ResourceList, parse_resource_list_leniently
from ..admission import Denied

DEFAULT_TARGET_CREATORS = (
    "system:serviceaccount:harvester-system:kubevirt-controller",
    "system:serviceaccount:kubevirt:kubevirt-controller",
)
DEFAULT_CONTROLLER_USERS = ("system:serviceaccount:harvester-system:harvester-quota",)


class Lookups(Protocol):
    """What the validators read (the webhook's informer caches, or fakes in unit tests)."""

    def managed_quota(self, namespace: str) -> Object | None: ...

    def namespace(self, name: str) -> Object | None: ...

    def migrations(self, namespace: str) -> Sequence[Object]: ...

    def migration(self, namespace: str, uid: str) -> Object | None:
        """The namespace's migration with `uid`, if the cache holds it (one lookup, not a scan:
        a namespace keeps thousands of finished migrations)."""
        ...

    def vmis(self, namespace: str) -> Mapping[str, Object]: ...

    def launcher_pods(self, namespace: str) -> Iterable[Object] | NamespacePods:
        """The namespace's launcher pods: objects, or the views a PodIndex keeps (what the
        webhook's caches give, so no admission reads or sizes every pod of a namespace)."""
        ...

    def kubevirt_settings(self) -> LauncherSettings: ...

    def launcher_usage(self, vmi: VmiSource, settings: LauncherSettings) -> ResourceList:
        """target_quota_usage's contract (a room's estimate before its target pod exists),
        answered from a cache of renders where the implementation keeps one (renders.py)."""
        ...

    def migrations_under_way(self, namespace: str) -> bool:
        """Whether a migration of the namespace has not finished yet (one lookup, not a scan)."""
        ...

    def base_mode(self) -> Mode:
        """The controller's --mode: in "standalone" Rancher's annotation is no base."""
        ...

    def quota_features(self) -> QuotaFeatures:
        """The API server's gates that change what quota charges a pod (--quota-feature-gates):
        what a pod's create or resize is charged, and the launcher pods' usage, are computed
        with them."""
        ...

    def limit_ranges(self, namespace: str) -> Sequence[Object]:
        """The namespace's LimitRanges (their container defaults change a launcher's charge)."""
        ...

    def now(self) -> datetime.datetime: ...


@dataclass(frozen=True)
class Identities:
    """Who may edit the managed quota freely, and who creates migration target pods."""

    controllers: frozenset[str] = frozenset(DEFAULT_CONTROLLER_USERS)
    target_creators: frozenset[str] = frozenset(DEFAULT_TARGET_CREATORS)


@dataclass
class NamespaceView:
    """A namespace's quota as the validators need it."""

    quota: Object
    hard: ResourceList
    used: ResourceList
    rooms: RoomPlan
    legacy_room_keys: frozenset[str] = field(default_factory=frozenset)

    @property
    def holds_room(self) -> bool:
        return self.rooms.holds_room or bool(self.legacy_room_keys)

    def holders(self) -> str:
        names = sorted({room.vm_name for room in self.rooms.rooms})
        if names:
            return ", ".join(names)
        if self.legacy_room_keys:
            return "an earlier controller's migrations"
        return "migrations whose raise is still being given back"

    def used_without_targets(self) -> ResourceList:
        consumed = resources.total(r.in_use for r in self.rooms.rooms)
        return resources.subtract_non_negative(self.used, consumed)


def launcher_settings(lookups: Lookups, namespace: str, quota: Object) -> LauncherSettings:
    """The launcher settings in force in `namespace`: the managed quota's keys, the namespace's
    labels and its LimitRange defaults."""
    return lookups.kubevirt_settings().for_namespace(
        [quota], lookups.namespace(namespace), lookups.limit_ranges(namespace)
    )


def view_of(lookups: Lookups, namespace: str, quota: Object) -> NamespaceView:
    """The namespace as the validators read it: rooms are those of migrations whose target pod
    the quota's scopes charge (as the controller's plan holds them)."""
    rooms = plan_rooms(
        lookups.migrations(namespace),
        lookups.vmis(namespace),
        lookups.launcher_pods(namespace),
        lookups.now(),
        launcher=launcher_settings(lookups, namespace, quota),
        usage=lookups.launcher_usage,
    ).within(quota_scope(quota))
    recorded = parse_migration_annotations(annotations_of(quota))
    return NamespaceView(
        quota=quota,
        hard=parse_resource_list_leniently((quota.get("spec") or {}).get("hard")),
        used=parse_resource_list_leniently((quota.get("status") or {}).get("used")),
        rooms=rooms,
        legacy_room_keys=recorded.migrating_keys,
    )


def rancher_base_of(lookups: Lookups, namespace: str) -> ResourceList | None:
    """The base Rancher's annotation gives the namespace (the one recorded before our raise
    while the annotation is still our raise); None without one, when it cannot be read, or in
    standalone mode (where the controller's base is its own record, whatever Rancher says)."""
    if lookups.base_mode() == "standalone":
        return None
    ns = lookups.namespace(namespace)
    try:
        return rancher_base(ns) if ns is not None else None
    except BaseError:
        return None


def base_of(lookups: Lookups, namespace: str, view: NamespaceView) -> ResourceList:
    """The base the controller works from (`base_given`, with `rancher_base_of` the namespace)."""
    return base_given(view, rancher_base_of(lookups, namespace))


def base_given(view: NamespaceView, from_rancher: ResourceList | None) -> ResourceList:
    """The base the controller works from: Rancher's annotation (`from_rancher`, as
    `rancher_base_of` reads it), else our recorded base, else spec.hard less the rooms recorded
    on the quota (a quota adopted mid-migration)."""
    return quota_base(view.quota, view.hard, from_rancher)


def quota_base(
    quota: Object, hard: ResourceList, from_rancher: ResourceList | None
) -> ResourceList:
    """`base_given` from the quota and its parsed spec.hard alone (no rooms needed): Rancher's
    base where given, else the controller's own reading of the recorded base
    (util/resourcequota/base.py `standalone_base`, user edits followed as the controller
    follows them), else spec.hard less the rooms recorded on the quota where it cannot be read."""
    if from_rancher is not None:
        return from_rancher
    recorded = parse_migration_annotations(annotations_of(quota))
    try:
        base = standalone_base(
            quota,
            raise_recorded=raise_records(quota, None),
            recorded_rooms=resources.total(list(recorded.name_keyed.values())),
        )
    except BaseError:
        base = None
    if base is not None:
        return base.hard
    unscaled = resources.subtract_non_negative(hard, recorded.migrating_total())
    return {key: unscaled.get(key, value) for key, value in hard.items()}


# Checks shared by the validators --------------------------------------------------------------------------------


def _lowered(old: ResourceList, new: ResourceList) -> dict[str, tuple[Quantity | None, Quantity]]:
    """Keys whose limit goes down (a key that appears is lowered from "no limit")."""
    return {
        key: (old.get(key), value)
        for key, value in new.items()
        if key not in old or value < old[key]
    }


def check_lowering(
    what: str,
    subject: str,
    *,
    old: ResourceList,
    new: ResourceList,
    view: NamespaceView | None,
    names: Mapping[str, str] | None = None,
) -> None:
    """Denies a lowered limit while room is held, or below what the namespace uses: Harvester's
    `checkIfNewResourceQuotaIsSufficient` (limits.cpu and limits.memory), on every key."""
    if view is None:
        return
    label = names or {}
    for key, (before, after) in sorted(_lowered(old, new).items()):
        shown = label.get(key, key)
        if view.holds_room:
            raise Denied(
                f"{what} {subject}: can't lower {shown} from {before if before is not None else 'no limit'} "
                f"to {after} while live migrations ({view.holders()}) hold room in this namespace; "
                "retry when they have finished"
            )
        used = view.used.get(key)
        if used is not None and after < used:
            raise Denied(
                f"{what} {subject}: {shown} {after} is lower than what the namespace uses now ({used}); "
                "free resources first or choose a limit of at least that much"
            )


RANCHER_NAMES = {k8s: field_name for field_name, k8s in LIMIT_FIELDS}
"""Quota key -> Rancher's field name in field.cattle.io/resourceQuota, for denial messages."""


def check_fits_base(
    subject: str,
    needed: ResourceList,
    base: ResourceList,
    view: NamespaceView,
    *,
    in_use: ResourceList | None = None,
) -> None:
    """Denies, naming every key and its numbers, if ``needed`` does not fit under the base next
    to what the namespace uses without migration targets (``in_use``, default: as the view's
    quota status shows it)."""
    current = view.used_without_targets() if in_use is None else in_use
    short = [
        f"{s.key} insufficient resources due to resource quota "
        f"{(view.quota.get('metadata') or {}).get('name')}: needs {s.needed}, "
        f"{s.free} left of the base {s.limit} "
        f"(in use {s.in_use}, migration targets excluded)"
        for s in shortfalls(needed, base, current)
    ]
    if short:
        raise Denied(f"{subject}: " + "; ".join(short))
