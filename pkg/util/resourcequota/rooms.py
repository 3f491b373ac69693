"""Which live migrations hold quota room in a namespace, and how much.

This is design principle 3 and 4 as a pure function of what the cluster shows now:

- A migration holds room from the moment its VirtualMachineInstanceMigration exists until its
  source pod is really gone; a failed or aborted migration holds it until its target pod is gone.
  ("Gone" means no longer charged by the quota evaluator: deleted, terminal, or past its grace
  period.) Harvester gives the room back at "Succeeded", while the source pod still counts, which
  is why a second migration in a full namespace was refused in the v1.2.1 seed.
- The room is the target pod's real quota usage on every key (all containers, requests and
  limits, pods, ephemeral storage, ...). Before the target pod exists it is the usage of the pod
  KubeVirt would render for the VMI now, with the overhead ratio in force now.
- Nothing is kept in memory between calls: a controller restart, a lost watch, a deleted VMI or
  VMIM all come out right on the next call.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...apis.kubevirt import (
    LABEL_CREATED_BY,
    LABEL_KUBEVIRT,
    LABEL_MIGRATION_JOB,
    LAUNCHER,
    PHASE_FAILED,
    PHASE_PENDING,
    PHASE_SUCCEEDED,
)
from ...generic.meta import labels, metadata, status
from ...generic.resource import Object
from .. import resources
from ..launcher import DEFAULT_LAUNCHER_SETTINGS, LauncherSettings, launcher_quota_usage
from ..resources import ResourceList
from .podindex import NamespacePods, PodView, namespace_pods

log = logging.getLogger(__name__)


def is_launcher(pod: Mapping[str, Any]) -> bool:
    return labels(pod).get(LABEL_KUBEVIRT) == LAUNCHER


def target_pod_index(pod: Object) -> list[str]:
    """Pods by the migration that created them (kubevirt.io/migrationJobUID)."""
    uid = labels(pod).get(LABEL_MIGRATION_JOB)
    return [uid] if uid else []


def vmi_pod_index(pod: Object) -> list[str]:
    """Launcher pods by the VMI that owns them (kubevirt.io/created-by = VMI uid)."""
    uid = labels(pod).get(LABEL_CREATED_BY)
    return [uid] if uid and is_launcher(pod) else []


@dataclass(frozen=True)
class MigrationRoom:
    """One migration that holds room, the room, and why it still holds it."""

    migration: str
    migration_uid: str
    vm_name: str
    vmi_uid: str
    phase: str
    room: ResourceList
    target_pod: str | None
    estimated: bool
    reason: str


@dataclass(frozen=True)
class RoomPlan:
    """The rooms held in one namespace and the pods they are made of."""

    rooms: list[MigrationRoom] = field(default_factory=list)
    target_pods: frozenset[str] = frozenset()
    """Names of the target pods whose usage is a room (excluded from "used")."""
    estimate_errors: dict[str, str] = field(default_factory=dict)
    """Migration name -> why its room could not be estimated (a Warning event)."""

    def total(self) -> ResourceList:
        return resources.total(room.room for room in self.rooms)

    @property
    def holds_room(self) -> bool:
        return bool(self.rooms)


HARVESTER_MIGRATION_PREFIX = "harvesterhci.io/migration"
"""Harvester's migration annotations on a VMI (migrationUID, migrationState,
migrationTargetNodeName): written by our own migration controllers, read by Harvester's UI, never
by the plan or the launcher rendering."""


LazyVmi = Callable[[], Object | None]
"""The migration's VMI, looked up only when called (None: gone)."""


def _source_pod_name(migration: Mapping[str, Any], vmi: LazyVmi) -> str | None:
    """The migration's source pod as KubeVirt records it: on the VMIM, or (the VMI read only
    then) on the VMI while its migrationState is about this migration."""
    own = status(migration).get("migrationState")
    if isinstance(own, Mapping) and own.get("sourcePod"):
        return str(own["sourcePod"])
    shared = status(vmi()).get("migrationState")
    if (
        isinstance(shared, Mapping)
        and shared.get("migrationUid") == metadata(migration).get("uid")
        and shared.get("sourcePod")
    ):
        return str(shared["sourcePod"])
    return None


def _still_counts(pod: PodView | None, now: datetime.datetime) -> bool:
    return pod is not None and pod.counts(now)


VmiUsage = Callable[[Mapping[str, Any], LauncherSettings], ResourceList]
"""launcher_quota_usage's contract: the quota usage of the launcher pod rendered for a VMI."""


@dataclass
class RoomInputs:
    """Everything about one namespace that decides its rooms."""

    migrations: Sequence[Object]
    vmis: Mapping[str, Object]
    """VMIs of the namespace by name (only those migrations name are looked up)."""
    pods: Iterable[Object] | NamespacePods
    """Every pod of the namespace (the quota charges all of them), as objects or as the views a
    PodIndex keeps."""
    now: datetime.datetime
    launcher: LauncherSettings = DEFAULT_LAUNCHER_SETTINGS
    """The settings in force for this namespace (room estimates before a target pod exists)."""
    keys: Iterable[str] | None = None
    """The quota keys rooms are reported on (None: every key the pod uses)."""
    usage: VmiUsage = launcher_quota_usage
    """How a VMI's room is estimated before its target pod exists (planviews.RenderedUsages
    for the narrow VMIs a controller keeps)."""


def plan_rooms(inputs: RoomInputs) -> RoomPlan:
    """Every migration of the namespace that holds room, with its room. Costs the migrations and
    their pods, not the namespace's other pods (given NamespacePods)."""
    pods = namespace_pods(inputs.pods)
    rooms: list[MigrationRoom] = []
    errors: dict[str, str] = {}
    for migration in inputs.migrations:
        try:
            room = _room_of(migration, inputs, pods)
        except ValueError as error:
            errors[str(metadata(migration).get("name"))] = str(error)
            continue
        if room is not None:
            rooms.append(room)
    return RoomPlan(
        rooms=rooms,
        target_pods=frozenset(r.target_pod for r in rooms if r.target_pod and not r.estimated),
        estimate_errors=errors,
    )


class _Once:
    """A lookup made at the first call and remembered (functools.cache's wrapper cost more to
    build, once per migration and plan, than the lookups it saved)."""

    __slots__ = ("_done", "_lookup", "_value")

    def __init__(self, lookup: LazyVmi) -> None:
        self._lookup = lookup
        self._done = False
        self._value: Object | None = None

    def __call__(self) -> Object | None:
        if not self._done:
            self._value, self._done = self._lookup(), True
        return self._value


def _room_of(migration: Object, inputs: RoomInputs, pods: NamespacePods) -> MigrationRoom | None:
    meta = metadata(migration)
    target = pods.target_of(str(meta.get("uid", "")))
    vmi_name = str((migration.get("spec") or {}).get("vmiName", ""))
    # Looked up once, and only if needed: a lookup builds the narrow VMI (NamespaceVmis).
    vmi: LazyVmi = _Once(lambda: inputs.vmis.get(vmi_name))
    # Why it holds room first: a finished migration (a namespace keeps many) is mostly decided
    # from itself and its pods, without reading its VMI.
    reason = _holding_reason(migration, vmi, target, inputs.now, pods)
    if reason is None:
        return None
    found = vmi()
    if found is None:
        # Nothing can be migrated, nothing will be admitted: the migration holds no room.
        return None
    if _of_an_earlier_instance(migration, found, target):
        return None
    return _room(migration, found, target, reason, inputs)


def _of_an_earlier_instance(migration: Object, vmi: Object, target: PodView | None) -> bool:
    """Whether the migration belongs to a VMI of the same name that no longer exists (the VM
    restarted): its target pod was made for another VMI uid, or the migration is older than the
    current VMI (KubeVirt only admits a migration for an existing VMI)."""
    if target is not None and target.created_by not in (None, metadata(vmi).get("uid")):
        return True
    migration_created = metadata(migration).get("creationTimestamp")
    vmi_created = metadata(vmi).get("creationTimestamp")
    # RFC 3339 UTC timestamps of the same form compare correctly as strings.
    return bool(migration_created and vmi_created and str(migration_created) < str(vmi_created))


def _holding_reason(
    migration: Object,
    vmi: LazyVmi,
    target: PodView | None,
    now: datetime.datetime,
    pods: NamespacePods,
) -> str | None:
    """Why the migration still holds room, or None once it does not (principle 3)."""
    phase = str(status(migration).get("phase") or "")
    target_counts = _still_counts(target, now)
    if phase == PHASE_SUCCEEDED:
        source_name = _source_pod_name(migration, vmi)
        if source_name is not None:
            counts = _still_counts(pods.get(source_name), now)
            return f"source pod {source_name} still counts" if counts else None
        # KubeVirt did not record the source pod: any other launcher pod of this VMI that still
        # counts is one the migration left behind.
        instance = vmi()
        if instance is None:
            return None
        leftover = any(
            (target is None or pod.name != target.name)
            and pod.migration_uid is None
            and pod.counts(now)
            for pod in pods.launchers_of(str(metadata(instance).get("uid")))
        )
        return "source pod still counts" if leftover else None
    if phase == PHASE_FAILED:
        return "target pod of a failed migration still counts" if target_counts else None
    if metadata(migration).get("deletionTimestamp") and target is None:
        return None  # aborted before a target pod was made: nothing to admit any more
    return "migrating" if phase and phase != PHASE_PENDING else "pending"


def _room(
    migration: Object, vmi: Object, target: PodView | None, reason: str, inputs: RoomInputs
) -> MigrationRoom:
    """The room: the real target pod's usage once it exists, else the rendered estimate."""
    if target is not None and _still_counts(target, inputs.now):
        room, estimated = target.usage_at(inputs.now), False
    else:
        room, estimated = inputs.usage(vmi, inputs.launcher), True
    if inputs.keys is not None:
        room = resources.mask(room, inputs.keys)
    return MigrationRoom(
        migration=str(metadata(migration).get("name", "")),
        migration_uid=str(metadata(migration).get("uid", "")),
        vm_name=str(metadata(vmi).get("name", "")),
        vmi_uid=str(metadata(vmi).get("uid", "")),
        phase=str(status(migration).get("phase") or ""),
        room=room,
        target_pod=target.name if target is not None else None,
        estimated=estimated,
        reason=reason,
    )


def used_without_targets(
    pods: Iterable[Object] | NamespacePods, target_pods: frozenset[str], now: datetime.datetime
) -> ResourceList:
    """The namespace's pod usage now, not counting the target pods that make up rooms."""
    return namespace_pods(pods).used_without(target_pods, now)


def next_release(pods: Iterable[Object] | NamespacePods, now: datetime.datetime) -> float | None:
    """Seconds until a terminating pod stops counting (its grace period ends), if any.

    A pod that stops counting may not produce an event at that moment, so the reconcile asks to
    run again then.
    """
    soonest: float | None = None
    for pod in namespace_pods(pods).changing():
        if pod.deadline is None:
            continue
        seconds = (pod.deadline - now).total_seconds()
        if seconds > 0 and (soonest is None or seconds < soonest):
            soonest = seconds
    return soonest
