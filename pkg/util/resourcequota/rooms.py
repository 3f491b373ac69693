"""Which live migrations hold quota room in a namespace, and how much.

This is the principle that a migration holds room from its creation until its pods stop counting,
as a pure function of what the cluster shows now:

- A migration holds room from the moment its VirtualMachineInstanceMigration exists until its
  source pod is really gone; a failed or aborted migration holds it until its target pod is gone.
  ("Gone" means no longer charged by the quota evaluator: deleted, terminal, or past its grace
  period.) Harvester gives the room back at "Succeeded", while the source pod still counts, which
  is why a second migration in a full namespace was refused in the v1.2.1 seed.
- The room is the real quota usage, on every key (all containers, requests and limits, pods,
  ephemeral storage, ...), of every pod the migration creates on the target side, one
  `_RoomPart` per kind registered in launcher/parts.py: the target launcher pod and, for a VMI
  with hotplugged volumes, the hotplug attachment pod virt-controller creates beside it
  (`pods_beside`). A pod that does not exist yet is counted as KubeVirt would render it for
  the VMI now, with the settings in force now (launcher/render.py, launcher/attachment.py).
- Decentralized live migrations (KubeVirt v1.6+, exactly one of `spec.sendTo` and
  `spec.receive`, across namespaces or clusters) hold no room on either side. Room is for the
  moment a namespace runs one VM twice; here neither does. The sending side creates no pod in
  its namespace, and its source pod leaves. The receiving side's target pod becomes the VM's
  pod for good, so it is the VM arriving, charged to the base like a VM that starts (the
  webhook checks a receiving VM against the base when it is created). A room there would let
  a tenant bring VMs into a namespace past its quota. Volume migrations
  (`updateVolumesStrategy: Migration`) are migrations virt-controller creates itself: their
  target pod is the VMI's launcher pod rendered with the new claims, sized like any other.
- Nothing is kept in memory between calls: a controller restart, a lost watch, a deleted VMI or
  VMIM all come out right on the next call.

Why a migration's room can be bigger than the pod it replaces (`target_growth`, below).

A source launcher pod keeps the resources KubeVirt rendered when it was created; its target is
rendered now, with the overhead ratio in force now and the running KubeVirt's formula. Raise the
ratio (Harvester's `additional-guest-memory-overhead-ratio`) or upgrade KubeVirt, and every
migration's target asks for more than its source, which a quota sized for the running VMs
refuses. `explain` says so, with the numbers.

Only what the API server and KubeVirt vouch for is read: the source is a launcher pod of the VMI
(the guarded `kubevirt.io=virt-launcher` and `kubevirt.io/created-by` labels) that is not a target
of this migration, its usage is its spec as created; the overhead named is our rendering, never
the pod annotation `kubevirt.io/memory-overhead-bytes`, which a tenant may edit
(docs/security.md).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

from ...apis.kubevirt import (
    PHASE_FAILED,
    PHASE_PENDING,
    PHASE_SUCCEEDED,
)
from ...generic.logformat import migration_fields
from ...generic.meta import metadata, status
from ...generic.resource import Object
from .. import resources
from ..kubevirtversion import KubeVirtVersion
from ..launcher import DEFAULT_LAUNCHER_SETTINGS, LauncherSettings, rendered_memory_overhead
from ..launcher.parts import LAUNCHER_PART, PartKind, PartRender, target_part_kinds
from ..launcher.vmiview import VmiSource, VmiView, as_view
from ..migrationpriority import DEFAULT as DEFAULT_PRIORITY
from ..migrationpriority import migration_priority
from ..overhead import SpecSource
from ..quantity import Quantity
from ..quotascope import PLAIN_FACTS, UNSCOPED, PodScopeFacts, QuotaScope
from ..resources import ResourceList
from .podindex import NamespacePods, PodView, namespace_pods

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _RoomPart:
    """One kind of pod of a migration's target side, as its room holds it (launcher/parts.py)."""

    kind: str
    """The PartKind's name ("launcher", "attachment", ...)."""
    pods: tuple[str, ...]
    """Its real pods whose usage is `room` (): not made yet, `room` is rendered)."""
    room: ResourceList
    facts: PodScopeFacts
    """What quota scopes read of it: a real pod's own facts, else the rendered pod's."""

    def masked(self, keys: Iterable[str]) -> _RoomPart:
        return dataclasses.replace(self, room=resources.mask(self.room, keys))


@dataclass(frozen=True)
class MigrationRoom:
    """One migration that holds room, the room, and why it still holds it."""

    migration: str
    migration_uid: str
    vm_name: str
    vmi_uid: str
    phase: str
    room: ResourceList
    """The sum of its parts' rooms."""
    target_pod: str | None
    estimated: bool
    reason: str
    created: str = ""
    """The migration's creationTimestamp (which of a VMI's migrations holds its room)."""
    priority: int = DEFAULT_PRIORITY
    """KubeVirt's queue priority of the migration (util/migrationpriority.py): where room is
    scarce, it goes in KubeVirt's order (`scarce_room_order`)."""
    parts: tuple[_RoomPart, ...] = ()
    """Every pod of the target side that makes up `room`, the launcher first (launcher/parts.py;
    () for a room made by hand: all of it the launcher's, of plain facts)."""

    @property
    def finished(self) -> bool:
        return self.phase in (PHASE_SUCCEEDED, PHASE_FAILED)

    @property
    def facts(self) -> PodScopeFacts:
        """What quota scopes read of its target launcher pod (quotascope.py)."""
        return self.parts[0].facts if self.parts else PLAIN_FACTS

    @property
    def in_use(self) -> ResourceList:
        """The part of the room its pods already use, quota admission counting them: nothing
        while the target is estimated, the room less the rendered parts whose pods do not
        exist yet, else the whole room."""
        if self.estimated:
            return {}
        missing = [part.room for part in self.parts[1:] if part.room and not part.pods]
        return _without(self.room, resources.total(missing)) if missing else self.room

    def within(self, scope: QuotaScope) -> MigrationRoom | None:
        """The room as a quota of `scope` charges it: each of the target's pods is in it only if
        the scope matches that pod (a launcher of a priority class the quota selects is charged
        there, its attachment pod, of no class, is not); None when the quota charges none."""
        if not self.parts:
            return self if scope.matches(PLAIN_FACTS) else None
        launcher, *others = self.parts
        charged = [part for part in others if part.room and scope.matches(part.facts)]
        uncharged = [part.room for part in others if part.room and not scope.matches(part.facts)]
        if scope.matches(launcher.facts):
            if not uncharged:
                return self
            return dataclasses.replace(self, room=_without(self.room, resources.total(uncharged)))
        if charged:
            return dataclasses.replace(self, room=resources.total(p.room for p in charged))
        return None

    def masked(self, keys: Iterable[str]) -> MigrationRoom:
        """The room and its parts on `keys` only (itself when they hold no other key)."""
        wanted = set(keys)
        if wanted.issuperset(self.room) and all(wanted.issuperset(p.room) for p in self.parts):
            return self
        return dataclasses.replace(
            self,
            room=resources.mask(self.room, wanted),
            parts=tuple(part.masked(wanted) for part in self.parts),
        )


def _without(room: ResourceList, part: ResourceList) -> ResourceList:
    """`room` less `part`, keys only `part` charged dropped."""
    rest = resources.subtract(room, part)
    return {key: value for key, value in rest.items() if key not in part or value.sign() != 0}


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

    def within(self, scope: QuotaScope) -> RoomPlan:
        """The rooms a quota of `scope` is charged for, each reduced to the target's pods it
        charges (MigrationRoom.within): a migration whose target pods are all outside the scope
        needs no room on that quota."""
        if scope.unscoped:
            return self
        rooms = [r for r in (room.within(scope) for room in self.rooms) if r is not None]
        return RoomPlan(
            rooms=rooms, target_pods=_room_pods(rooms), estimate_errors=self.estimate_errors
        )


def _room_pods(rooms: Iterable[MigrationRoom]) -> frozenset[str]:
    """The pods whose usage makes up `rooms`: real target pods and their attachment pods."""
    names: set[str] = set()
    for room in rooms:
        if room.target_pod and not room.estimated:
            names.add(room.target_pod)
        for part in room.parts[1:]:
            names.update(part.pods)
    return frozenset(names)


HARVESTER_MIGRATION_PREFIX = "harvesterhci.io/migration"
"""Harvester's migration annotations on a VMI (migrationUID, migrationState,
migrationTargetNodeName): written by our own migration controllers, read by Harvester's UI, never
by the plan or the launcher rendering."""


def _still_counts(pod: PodView | None, now: datetime.datetime) -> bool:
    return pod is not None and pod.counts(now)


VmiUsage = PartRender
"""The launcher part's render contract (target_quota_usage's for a view): the quota usage of
the migration target pod rendered for a VMI."""


def plan_rooms(
    migrations: Sequence[Object],
    vmis: Mapping[str, VmiSource],
    pods: Iterable[Object] | NamespacePods,
    now: datetime.datetime,
    *,
    launcher: LauncherSettings = DEFAULT_LAUNCHER_SETTINGS,
    usage: VmiUsage = LAUNCHER_PART.render,
) -> RoomPlan:
    """Every migration of the namespace that holds room, with its room, at most one migration
    under way per VMI (`_one_under_way_per_vmi`). Costs the migrations and their pods, not the
    namespace's other pods (given NamespacePods). With `plan_quota`, Harvester's
    `scaleResourceQuotaWithVMI`, for every migration at once.

    `vmis`: the namespace's VMIs by name, as views or full objects (only those migrations name
    are looked up, each adapted once: launcher.as_view). `pods`: every pod of the namespace (the
    quota charges all of them), as objects or as the views a PodIndex keeps. `launcher`: the
    settings in force for this namespace (room estimates before a target pod exists). `usage`:
    how a VMI's target launcher pod is estimated before it exists (planviews.RenderedUsages for
    the narrow VMIs a controller keeps); the other parts render as their PartKind says (they
    read only what narrow VMIs keep)."""
    indexed = namespace_pods(pods)
    estimate = partial(_estimate, usage=usage, launcher=launcher)
    rooms: list[MigrationRoom] = []
    errors: dict[str, str] = {}
    views: dict[str, VmiView] = {}
    for migration in migrations:
        try:
            room = _room_of(
                migration, vmis=vmis, now=now, estimate=estimate, pods=indexed, views=views
            )
        except ValueError as error:
            errors[str(metadata(migration).get("name"))] = str(error)
            continue
        if room is not None:
            rooms.append(room)
    rooms = _one_under_way_per_vmi(rooms)
    return RoomPlan(rooms=rooms, target_pods=_room_pods(rooms), estimate_errors=errors)


def _one_under_way_per_vmi(rooms: list[MigrationRoom]) -> list[MigrationRoom]:
    """KubeVirt runs one migration of a VMI at a time, so a VMI holds one room for the
    migrations under way however many name it (twenty created at once held twenty rooms): the
    one whose target pod exists, else the oldest. A finished migration's room stands beside it:
    it is made of a pod that still counts (`_finished_reason`)."""
    chosen: dict[str, MigrationRoom] = {}
    for room in rooms:
        if room.finished:
            continue
        held = chosen.get(room.vmi_uid)
        if held is None or _preferred(room) < _preferred(held):
            chosen[room.vmi_uid] = room
    kept = set(map(id, chosen.values()))
    return [room for room in rooms if room.finished or id(room) in kept]


def _preferred(room: MigrationRoom) -> tuple[bool, str, str]:
    return (room.target_pod is None, room.created, room.migration)


def decentralized_side(migration: Mapping[str, Any]) -> str | None:
    """ "source" or "target" for one side of a decentralized migration (KubeVirt v1.6+:
    exactly one of spec.sendTo and spec.receive), None for a migration within the cluster
    (neither, or both: KubeVirt's IsDecentralized)."""
    spec = migration.get("spec")
    if not isinstance(spec, Mapping):
        return None
    send, receive = spec.get("sendTo") is not None, spec.get("receive") is not None
    if send == receive:
        return None
    return "source" if send else "target"


_Estimate = Callable[[PartKind, VmiView], ResourceList]
"""`_estimate` with the plan's launcher usage and settings."""


def _room_of(
    migration: Object,
    *,
    vmis: Mapping[str, VmiSource],
    now: datetime.datetime,
    estimate: _Estimate,
    pods: NamespacePods,
    views: dict[str, VmiView],
) -> MigrationRoom | None:
    """The room `migration` holds, or None; `views` keeps each VMI's view once adapted (one
    plan: twenty migrations of one VMI adapt it once)."""
    meta = metadata(migration)
    if decentralized_side(migration) is not None:
        return None  # neither side runs the VM twice in this namespace (module docstring)
    phase = str(status(migration).get("phase") or "")
    candidates = pods.labelled_targets(str(meta.get("uid", "")))
    labelled = _likeliest_target(candidates, migration)
    if phase in (PHASE_SUCCEEDED, PHASE_FAILED) and not _may_hold_room(phase, labelled, pods, now):
        # Most of the finished migrations a namespace keeps are decided here, without reading
        # their VMI (`_finished_reason` decides the rest).
        return None
    vmi_name = str((migration.get("spec") or {}).get("vmiName", ""))
    found = vmis.get(vmi_name)
    if found is None:
        # Nothing can be migrated, nothing will be admitted: the migration holds no room.
        return None
    vmi = views.get(vmi_name)
    if vmi is None:
        vmi = views[vmi_name] = as_view(found)
    if _of_an_earlier_instance(migration, vmi):
        return None
    target = next((pod for pod in candidates if is_target_of(pod, migration, vmi)), None)
    reason = _holding_reason(migration, vmi, target, now, pods)
    if reason is None:
        return None
    return _room(migration, vmi, target, reason, now=now, estimate=estimate, pods=pods)


def _likeliest_target(candidates: list[PodView], migration: Object) -> PodView | None:
    """Before the VMI is read: the labelled launcher pod created no earlier than the migration,
    if any (a forged one sorted first must not hide KubeVirt's)."""
    created = str(metadata(migration).get("creationTimestamp") or "")
    return next((pod for pod in candidates if pod.launcher and pod.created >= created), None)


def _may_hold_room(
    phase: str, labelled: PodView | None, pods: NamespacePods, now: datetime.datetime
) -> bool:
    """What `_finished_reason` needs, as far as the pods alone tell: a target pod that counts
    and, for a success, an older launcher pod of the same VMI that still counts."""
    if labelled is None or not labelled.counts(now):
        return False
    if phase == PHASE_FAILED:
        return True
    return _older_launcher(pods, labelled.created_by or "", labelled, now) is not None


def is_target_of(pod: PodView | None, migration: Mapping[str, Any], vmi: VmiView) -> bool:
    """Whether `pod` is the migration's target as only KubeVirt can make one: labelled with the
    migration's uid and, as a launcher, with the VMI's uid (labels the shipped admission policy
    lets no one but KubeVirt's controller set), and created no earlier than the migration (a
    time the API server sets). A pod relabelled after it was created, or made for another VMI,
    is an ordinary pod, charged against the base."""
    if pod is None or not pod.launcher:
        return False
    if pod.created_by != vmi.uid:
        return False
    return pod.created >= str(metadata(migration).get("creationTimestamp") or "")


def _of_an_earlier_instance(migration: Object, vmi: VmiView) -> bool:
    """Whether the migration belongs to a VMI of the same name that no longer exists (the VM
    restarted): the migration is older than the current VMI (KubeVirt only admits a migration
    for an existing VMI)."""
    migration_created = metadata(migration).get("creationTimestamp")
    vmi_created = vmi.created
    # RFC 3339 UTC timestamps of the same form compare correctly as strings.
    return bool(migration_created and vmi_created and str(migration_created) < str(vmi_created))


def _holding_reason(
    migration: Object,
    vmi: VmiView,
    target: PodView | None,
    now: datetime.datetime,
    pods: NamespacePods,
) -> str | None:
    """Why the migration still holds room, or None once it does not, decided
    from pods alone: what a tenant can write (a migration's or VMI's status, which neither has
    as a subresource) never makes room. Harvester's `handlePendingMigration` raises once for a
    pending migration; here a pending migration of a running VMI holds room in every plan."""
    phase = str(status(migration).get("phase") or "")
    if phase in (PHASE_SUCCEEDED, PHASE_FAILED):
        return _finished_reason(phase, vmi, target, now, pods)
    if metadata(migration).get("deletionTimestamp") and target is None:
        return None  # aborted before a target pod was made: nothing to admit any more
    if not _can_migrate(vmi, target, now, pods):
        return None
    return "migrating" if phase and phase != PHASE_PENDING else "pending"


def _finished_reason(
    phase: str, vmi: VmiView, target: PodView | None, now: datetime.datetime, pods: NamespacePods
) -> str | None:
    """A finished migration holds room while its target pod counts and, once it succeeded,
    while a launcher pod of the VMI older than that target (its source) still counts too.
    Harvester's `handleFinishedMigration` gives the room back at once; this holds it until the
    pods stop counting."""
    if not _still_counts(target, now) or target is None:
        return None
    if phase == PHASE_FAILED:
        return "target pod of a failed migration still counts"
    source = _older_launcher(pods, str(vmi.uid), target, now)
    return f"source pod {source.name} still counts" if source is not None else None


def _older_launcher(
    pods: NamespacePods, vmi_uid: str, target: PodView, now: datetime.datetime
) -> PodView | None:
    for pod in pods.launchers_of(vmi_uid):
        if pod.name != target.name and pod.created <= target.created and pod.counts(now):
            return pod
    return None


def _can_migrate(
    vmi: VmiView,
    target: PodView | None,
    now: datetime.datetime,
    pods: NamespacePods,
) -> bool:
    """A migration under way makes room only for a VMI that runs: a launcher pod of the VMI
    (not the migration's own target) that the kubelet reports Running and that still counts. A
    VMI whose pod never started (refused, unschedulable) has nothing to migrate; neither has one
    KubeVirt reports not live-migratable."""
    vmi_uid = str(vmi.uid)
    if vmi.not_migratable:
        return False
    return any(
        pod.running and pod.counts(now) and (target is None or pod.name != target.name)
        for pod in pods.launchers_of(vmi_uid)
    )


def _estimate(
    kind: PartKind, vmi: VmiView, *, usage: VmiUsage, launcher: LauncherSettings
) -> ResourceList:
    """The rendered pod of `kind` for `vmi` ({}: the VMI gets none; the launcher through
    `usage`, which may keep renders). Any failure of the estimate is a ValueError (an
    estimate error: that migration gets no room and a Warning, the rest is planned), whatever
    raised it: the VMI's spec and annotations are the tenant's to write, and a plan that fails
    on them leaves every migration of the namespace without room and the webhook answering 500."""
    try:
        return (usage if kind.primary else kind.render)(vmi, launcher)
    except ValueError:
        raise
    except Exception as error:
        log.warning(
            "cannot render the %s pod of VMI %s",
            kind.name,
            vmi.name,
            exc_info=True,
            extra=migration_fields(vmi.namespace, vmi.name),
        )
        raise ValueError(
            f"cannot render the VMI's {kind.name} pod ({type(error).__name__})"
        ) from error


def _room(
    migration: Object,
    vmi: VmiView,
    target: PodView | None,
    reason: str,
    *,
    now: datetime.datetime,
    estimate: _Estimate,
    pods: NamespacePods,
) -> MigrationRoom:
    """The room: one part per kind of pod the target side charges (launcher/parts.py), each
    the usage of its real pods once they exist, else, while the migration is under way, the pod
    KubeVirt would render for the VMI now (a finished migration's missing parts hold nothing).
    Harvester's `CalculateScaleResourceQuotaWithVMI` sizes it from the VMI's limits and the
    compute container's overhead instead, on limits.cpu and limits.memory only."""
    real = target if target is not None and _still_counts(target, now) else None
    under_way = str(status(migration).get("phase") or "") not in (PHASE_SUCCEEDED, PHASE_FAILED)
    parts: list[_RoomPart] = []
    for kind in target_part_kinds():
        part = _part(kind, migration, vmi, real, under_way, now=now, estimate=estimate, pods=pods)
        if part is not None:
            parts.append(part)
    return MigrationRoom(
        migration=str(metadata(migration).get("name", "")),
        migration_uid=str(metadata(migration).get("uid", "")),
        vm_name=vmi.name,
        vmi_uid=vmi.uid or "",
        phase=str(status(migration).get("phase") or ""),
        room=resources.total(part.room for part in parts),
        target_pod=target.name if target is not None else None,
        estimated=real is None,
        reason=reason,
        created=str(metadata(migration).get("creationTimestamp") or ""),
        priority=migration_priority(migration),
        parts=tuple(parts),
    )


def _part(
    kind: PartKind,
    migration: Object,
    vmi: VmiView,
    target: PodView | None,
    under_way: bool,
    *,
    now: datetime.datetime,
    estimate: _Estimate,
    pods: NamespacePods,
) -> _RoomPart | None:
    """The part of `kind` given the real target launcher pod (None: not made, or gone): its
    real pods, else its rendered pod; None for a part beside the launcher that holds nothing."""
    if kind.primary:
        real = [target] if target is not None else []
    elif target is not None:
        real = pods_beside(migration, target, pods, now, kind.label)
    else:
        real = []
    if real:
        room = resources.total(pod.usage_at(now) for pod in real)
        facts = real[0].scope
    elif kind.primary or under_way:
        room = estimate(kind, vmi)
        facts = kind.facts(vmi, room)
    else:
        return None
    if not (kind.primary or real or room):
        return None
    return _RoomPart(kind.name, tuple(pod.name for pod in real), room, facts)


def pods_beside(
    migration: Mapping[str, Any],
    target: PodView,
    pods: NamespacePods,
    now: datetime.datetime,
    label: str,
) -> list[PodView]:
    """The pods of one kind beside the launcher (labelled kubevirt.io=`label`) KubeVirt made
    for the migration's target, as only KubeVirt can make one: labelled with the migration's
    uid (a label only KubeVirt's controller may set), controlled by the target launcher pod (its
    uid, the API server's), created no earlier than the migration, and still counting."""
    created = str(metadata(migration).get("creationTimestamp") or "")
    return [
        pod
        for pod in pods.labelled_targets(str(metadata(migration).get("uid", "")))
        if pod.part == label
        and not pod.launcher
        and target.uid
        and pod.controller_uid == target.uid
        and pod.created >= created
        and pod.counts(now)
    ]


def used_without_targets(
    pods: Iterable[Object] | NamespacePods,
    target_pods: frozenset[str],
    now: datetime.datetime,
    scope: QuotaScope = UNSCOPED,
) -> ResourceList:
    """The usage now of the namespace's pods a quota of `scope` charges, not counting the
    target pods that make up rooms."""
    return namespace_pods(pods).used_without(target_pods, now, scope)


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


MEMORY_KEYS: Final = ("requests.memory", "limits.memory", "memory")


@dataclass(frozen=True)
class _TargetGrowth:
    """How much a room asks beyond its source pod, and the overhead the target is rendered with."""

    source_pod: str
    grown: ResourceList
    """The keys the room asks more of than the source pod charges, by how much."""
    overhead_now: int
    """The memory overhead KubeVirt adds to the target's compute container now (bytes)."""
    ratio: str | None
    version: KubeVirtVersion

    def sentence(self) -> str:
        """One line for `explain`: what grew, and the overhead in force when memory did."""
        grown = ", ".join(f"{key} +{value}" for key, value in self.grown.items())
        line = f"bigger than its source pod {self.source_pod}: {grown}"
        if any(key in self.grown for key in MEMORY_KEYS):
            ratio = self.ratio if self.ratio is not None else "unset"
            line += (
                f"; the target is rendered with {Quantity.from_scaled(self.overhead_now, 0)} of"
                f" memory overhead (overhead ratio {ratio}, KubeVirt {self.version}): a source"
                " created under a lower ratio or an older KubeVirt carries less, or the VMI grew"
            )
        return line


def source_pod(
    pods: NamespacePods, vmi_uid: str, migration_uid: str, now: datetime.datetime
) -> PodView | None:
    """The VMI's oldest launcher pod that still counts and is no target of this migration."""
    candidates = [
        view
        for view in pods.launchers_of(vmi_uid)
        if view.launcher and view.migration_uid != migration_uid and view.counts(now)
    ]
    return min(candidates, key=lambda view: (view.created, view.name), default=None)


def target_growth(
    room: ResourceList,
    vmi: SpecSource,
    source: PodView,
    settings: LauncherSettings,
) -> _TargetGrowth | None:
    """How `room` exceeds what `source` charges, or None when it does not (nothing grew)."""
    grown: ResourceList = {}
    for key, needed in room.items():
        had = source.usage.get(key)
        if had is None or needed > had:
            grown[key] = needed - had if had is not None else needed
    if not grown:
        return None
    return _TargetGrowth(
        source_pod=source.name,
        grown=dict(sorted(grown.items())),
        overhead_now=rendered_memory_overhead(vmi, settings),
        ratio=None if settings.ratio is None else str(settings.ratio),
        version=settings.version,
    )
