"""The webhook's rules (design principle 8): guard the base and the migration room.

- Lowering a namespace's base (Rancher's annotation) or the managed quota's spec.hard below what
  the namespace uses is denied at any time; lowering it while a migration holds room is denied;
  raising is always allowed. Direct spec.hard edits by our own controller are not checked.
- A VM may start only if its launcher pod, overhead included, fits under the base next to what the
  namespace uses without migration targets (Harvester's "insufficient resources due to resource
  quota" check, on every key the pod uses).
- While a migration holds room, a pod that is not a migration target may not push the namespace's
  usage (targets excluded) above the base: that is taking the room a target is waiting for, and
  would let the namespace grow above its base through the raised quota. Target pods (labelled
  kubevirt.io/migrationJobUID, created by KubeVirt's controller) always pass.
Every denial says, with numbers, what would be exceeded.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..config.kubevirt import KubeVirtSettings
from ..controller.migration.rooms import (
    LABEL_MIGRATION_JOB,
    RoomInputs,
    RoomPlan,
    plan_rooms,
)
from ..controller.namespace.base import ANNOTATION_BASE, BaseError, rancher_base
from ..generic.resource import Object
from ..util import resources
from ..util.annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA, parse_migration_annotations
from ..util.podusage import launcher_quota_usage, pod_quota_usage
from ..util.quantity import Quantity
from ..util.rancher import LIMIT_FIELDS
from ..util.resources import ResourceList
from .admission import Denied, Request, annotations_of

DEFAULT_TARGET_CREATORS = (
    "system:serviceaccount:harvester-system:kubevirt-controller",
    "system:serviceaccount:kubevirt:kubevirt-controller",
)
DEFAULT_CONTROLLER_USERS = ("system:serviceaccount:harvester-system:harvester-quota",)
RUNNING_STRATEGIES = frozenset({"Always", "RerunOnFailure", "Once"})


class Lookups(Protocol):
    """What the validators read (the webhook's informer caches, or fakes in unit tests)."""

    def managed_quota(self, namespace: str) -> Object | None: ...

    def namespace(self, name: str) -> Object | None: ...

    def migrations(self, namespace: str) -> Sequence[Object]: ...

    def vmis(self, namespace: str) -> Mapping[str, Object]: ...

    def launcher_pods(self, namespace: str) -> Sequence[Object]: ...

    def kubevirt_settings(self) -> KubeVirtSettings: ...

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
        return ", ".join(names) if names else "an earlier controller's migrations"

    def used_without_targets(self) -> ResourceList:
        consumed = resources.total(r.room for r in self.rooms.rooms if not r.estimated)
        return resources.subtract_non_negative(self.used, consumed)


def _quantities(value: Any) -> ResourceList:
    try:
        return resources.parse_resource_list(value or {})
    except ValueError:
        return {}


def view_of(lookups: Lookups, namespace: str, quota: Object) -> NamespaceView:
    settings = lookups.kubevirt_settings()
    rooms = plan_rooms(
        RoomInputs(
            migrations=lookups.migrations(namespace),
            vmis=lookups.vmis(namespace),
            pods=lookups.launcher_pods(namespace),
            now=lookups.now(),
            launcher_options=settings.launcher_options([quota]),
        )
    )
    recorded = parse_migration_annotations(annotations_of(quota))
    return NamespaceView(
        quota=quota,
        hard=_quantities((quota.get("spec") or {}).get("hard")),
        used=_quantities((quota.get("status") or {}).get("used")),
        rooms=rooms,
        legacy_room_keys=recorded.migrating_keys,
    )


def base_of(lookups: Lookups, namespace: str, view: NamespaceView) -> ResourceList:
    """The base the controller works from: Rancher's annotation, else our recorded base, else
    spec.hard less the rooms recorded on the quota (a quota adopted mid-migration)."""
    ns = lookups.namespace(namespace)
    try:
        from_rancher = rancher_base(ns) if ns is not None else None
    except BaseError:
        from_rancher = None
    if from_rancher is not None:
        return from_rancher
    text = annotations_of(view.quota).get(ANNOTATION_BASE)
    if text:
        try:
            return resources.loads(text)
        except ValueError:
            pass
    rooms = parse_migration_annotations(annotations_of(view.quota)).migrating_total()
    unscaled = resources.subtract_non_negative(view.hard, rooms)
    return {key: unscaled.get(key, value) for key, value in view.hard.items()}


# Lowering limits --------------------------------------------------------------------------------


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
    """Denies a lowered limit while room is held, or below what the namespace uses."""
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


_RANCHER_NAMES = {k8s: field_name for field_name, k8s in LIMIT_FIELDS}


def validate_namespace_update(request: Request, lookups: Lookups) -> None:
    """Rancher's quota annotation is the base: guard lowering it (Harvester's namespace check,
    on every key, plus the migration-room rule)."""
    old_text = annotations_of(request.old).get(CATTLE_ANNOTATION_RESOURCE_QUOTA, "")
    new_text = annotations_of(request.obj).get(CATTLE_ANNOTATION_RESOURCE_QUOTA, "")
    if not new_text.strip() or old_text == new_text:
        return  # unchanged, or removed (removing the annotation is always allowed)
    try:
        new_base = rancher_base(request.obj or {}) or {}
    except BaseError as error:
        raise Denied(
            str(error).replace(" the quota is left as it is until the annotation is fixed", "")
        ) from error
    try:
        old_base = rancher_base(request.old or {}) or {}
    except BaseError:
        old_base = {}
    quota = lookups.managed_quota(request.name)
    view = view_of(lookups, request.name, quota) if quota is not None else None
    check_lowering(
        "namespace", request.name, old=old_base, new=new_base, view=view, names=_RANCHER_NAMES
    )


def validate_quota_update(request: Request, lookups: Lookups, identities: Identities) -> None:
    """Direct edits of the managed quota's spec.hard follow the same rules, except our own."""
    if request.username in identities.controllers:
        return
    old_hard = _quantities(((request.old or {}).get("spec") or {}).get("hard"))
    try:
        new_hard = resources.parse_resource_list(
            ((request.obj or {}).get("spec") or {}).get("hard") or {}
        )
    except ValueError as error:
        raise Denied(f"quota {request.name}: {error}") from error
    quota = lookups.managed_quota(request.namespace) or request.old or {}
    view = view_of(lookups, request.namespace, quota)
    check_lowering(
        "quota", f"{request.namespace}/{request.name}", old=old_hard, new=new_hard, view=view
    )


# Starting VMs -----------------------------------------------------------------------------------


def _will_run(vm: Mapping[str, Any]) -> bool:
    spec = vm.get("spec") or {}
    strategy = spec.get("runStrategy")
    if strategy is not None:
        return str(strategy) in RUNNING_STRATEGIES
    return bool(spec.get("running"))


def validate_vm_start(request: Request, lookups: Lookups) -> None:
    """A VM that is to run but has no instance yet must fit under the base, overhead and
    sidecars included (Harvester checks this on VM create and update, limits only)."""
    vm = request.obj or {}
    if not _will_run(vm) or request.name in lookups.vmis(request.namespace):
        return  # halted, or already running (its pod is counted already)
    quota = lookups.managed_quota(request.namespace)
    if quota is None:
        return
    template = (vm.get("spec") or {}).get("template") or {}
    vmi = {
        "metadata": {"name": request.name, "namespace": request.namespace},
        "spec": template.get("spec") or {},
    }
    view = view_of(lookups, request.namespace, quota)
    settings = lookups.kubevirt_settings()
    try:
        needed = launcher_quota_usage(vmi, **settings.launcher_options([quota]))
    except ValueError as error:
        raise Denied(
            f"VM {request.name}: cannot size its launcher pod: {error}", code=422
        ) from error
    check_fits_base(f"VM {request.name}", needed, base_of(lookups, request.namespace, view), view)


def check_fits_base(
    subject: str, needed: ResourceList, base: ResourceList, view: NamespaceView
) -> None:
    """Denies, naming every key and its numbers, if ``needed`` does not fit under the base next
    to what the namespace uses without migration targets."""
    used = view.used_without_targets()
    short = []
    for key, limit in sorted(base.items()):
        want = needed.get(key)
        if want is None or want.sign() <= 0:
            continue
        in_use = used.get(key, want * 0)
        if in_use + want > limit:
            free = limit - in_use
            short.append(
                f"{key} insufficient resources due to resource quota "
                f"{(view.quota.get('metadata') or {}).get('name')}: needs {want}, "
                f"{free if free.sign() > 0 else Quantity.from_int(0)} left of the base {limit} "
                f"(in use {in_use}, migration targets excluded)"
            )
    if short:
        raise Denied(f"{subject}: " + "; ".join(short))


# Pods -------------------------------------------------------------------------------------------


def is_migration_target(request: Request, identities: Identities) -> bool:
    labels = ((request.obj or {}).get("metadata") or {}).get("labels") or {}
    return LABEL_MIGRATION_JOB in labels and request.username in identities.target_creators


def validate_pod_create(request: Request, lookups: Lookups, identities: Identities) -> None:
    """Non-target pods may not take the room migrations hold (see module docstring)."""
    if is_migration_target(request, identities):
        return
    quota = lookups.managed_quota(request.namespace)
    if quota is None:
        return
    view = view_of(lookups, request.namespace, quota)
    if not view.holds_room:
        return  # quota admission at hard == base is all the protection needed
    try:
        needed = pod_quota_usage(request.obj or {})
    except ValueError as error:
        raise Denied(f"pod {request.name}: {error}", code=422) from error
    base = base_of(lookups, request.namespace, view)
    check_fits_base(
        f"pod {request.name or '(generated name)'} would take room reserved for the live migration "
        f"of {view.holders()}",
        needed,
        base,
        view,
    )
