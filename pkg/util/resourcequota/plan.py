"""The desired state of a namespace's managed ResourceQuota, computed from the cluster as it is.

Compensation as arithmetic, per key k the base limits:

    while any migration holds room on k:  hard_k = max(base_k, floor_k) + sum of the rooms on k
    otherwise:                            hard_k = base_k

where floor_k is what the namespace's pods are charged now, not counting the target pods that make
up the rooms nor the pods that arrived since the rooms began (raises.py). A VM that went over its
quota after the overhead ratio was raised can therefore still migrate (max with the floor), while
no new VM can start above the base (the webhook keeps non-target pods out of the room) and no raise
follows a pod that got in while room was held. Keys of spec.hard that the base does not know pass
through untouched.

A quota with scopes (quotascope.py) charges only the pods they match: only those count in the floor,
and only a migration whose target pod it charges holds room on it (a quota for a priority class the
launchers do not use is never raised).

The plan also says which annotations the quota must carry: one ResourceList JSON per migrating VM
(``harvesterhci.io/migrating-<vm>``, so Harvester's own readers still sum them), our recorded base
in standalone mode, and nothing stale: every other historic Harvester key is removed. The caller
writes once, only if something differs (``patch_for``).

Beside Harvester's own controllers the plan adopts the quotas we manage (docs/design.md, "Beside
Harvester's own controllers"; `adoption_changes`, below). No Harvester release can turn its
migration and resourcequota controllers off, so on a Harvester both run. Adoption is how we run
beside them, chosen by measurement against Harvester v1.8.2's own code (the closing numbers are in
docs/design.md):

- Harvester's resourcequota controller, the one that sets spec.hard (to the Rancher base plus
  the rooms its annotations record), honours its own skip annotation
  (``harvesterhci.io/skipResourceQuotaAutoScaling: "true"``). An adopted quota carries it, with
  our marker ANNOTATION_ADOPTED beside it, from the first plan that manages it: that controller
  never writes an adopted quota again, so nothing raises twice and nothing lowers under a room.
- Harvester's migration controller ignores the skip annotation: while a migration is Pending it
  records the VMI's room under ``migratingUID-<vmi uid>``, and when the migration ends it
  deletes that key and the VM's name key. Its UID key of a migration still running is left
  where it is (stripping it only made it write it again), and it counts in no plan of ours.
- Without the marker the skip annotation is an administrator's opt-out, as before: never adopted.
  Beside Harvester (adoption on) its live UID keys stay there too: the quota is left to the
  administrator, and stripping them only made Harvester's migration controller write again.
- A controller started without adoption gives an adopted quota back once no migration holds
  room in it: both annotations go in the write that brings it to its base, so Harvester's
  resourcequota controller owns it again and finds nothing to add (given back while a room
  stood, that controller would add our room key to its own and raise twice). That is the
  uninstall procedure's first step (docs/operations.md, "On Harvester").
- A namespace whose raising is paused (its opt-out label, or ``run --paused``) keeps its quota
  adopted while adoption is on: its rooms are given back and nobody raises it, neither we nor
  Harvester's resourcequota controller. (Given back to Harvester while we still plan it, its
  raises and our plan's lowering would fight.) Only a controller without adoption hands quotas
  back; paused and without adoption (the uninstall's steps), it does so at once.
- Our marker without the skip annotation (someone removed or changed that) is stale: it goes,
  so that an administrator's later skip annotation is never taken for ours.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...generic.meta import annotations_of, metadata, spec
from ...generic.resource import Object
from .. import resources
from ..annotations import (
    ANNOTATION_ADOPTED,
    ANNOTATION_MIGRATING_UID_PREFIX,
    ANNOTATION_ROOM_MIGRATIONS,
    ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING,
    LABEL_PAUSED,
    MIGRATING_PREFIX,
    TRUE,
    MigrationAnnotations,
    adopted_migrating_vm_annotation_key,
    migrating_vm_annotation_key,
    opted_out,
    parse_migration_annotations,
)
from ..launcher import DEFAULT_LAUNCHER_SETTINGS, LauncherSettings, VmiSource, as_view
from ..launcher.parts import LAUNCHER_PART
from ..quantity import Quantity
from ..quotascope import quota_scope
from ..resources import ResourceList, parse_resource_list_leniently
from .base import (
    ANNOTATION_APPLIED,
    ANNOTATION_BASE,
    STANDALONE,
    Base,
    BaseError,
    Mode,
    managed_quota,
    resolve_base,
)
from .podindex import NamespacePods, namespace_pods
from .raises import ANNOTATION_ROOMS_SINCE, floor_of, raise_records, rooms_since
from .rooms import (
    MigrationRoom,
    RoomPlan,
    VmiUsage,
    decentralized_side,
    next_release,
    plan_rooms,
    used_without_targets,
)


@dataclass
class NamespaceSnapshot:
    """One namespace as the caches show it now. Also the plan source of its own namespace
    (controller/resourcequota/planner.py's `_PlanSource`) where it holds objects listed from the
    API server or simulated on top of them (`explain`, `preflight`): nothing of ours pending."""

    namespace: Object
    quota: Object
    migrations: Sequence[Object]
    vmis: Mapping[str, VmiSource]
    """The namespace's VMIs by name: views (the controller's narrow ones) or full objects."""
    pods: Iterable[Object] | NamespacePods
    """Every pod of the namespace: objects, or the views a PodIndex keeps (the controller's)."""
    now: datetime.datetime
    launcher: LauncherSettings = DEFAULT_LAUNCHER_SETTINGS
    mode: Mode = "auto"
    usage: VmiUsage = LAUNCHER_PART.render
    """How rooms are estimated from `vmis` (rooms.plan_rooms `usage`)."""
    settled: Sequence[Object] = ()
    """Finished migrations set aside from planning (planviews.SettledMigrations): read only to
    tell whose target pods replace a launcher pod (raises.py), since they still exist."""
    paused: bool = False
    """The controller's global switch (`run --paused`): every plan gives every room back."""
    adopt_harvester: bool = False
    """Adopt the quota from Harvester's resourcequota controller (`adoption_changes`)."""

    def quotas_of(self, _key: str) -> tuple[Object | None, list[Object]]:
        """Its quota where that is a managed one (else None), and it alone as the list."""
        return managed_quota([self.quota]), [self.quota]

    def newest(self, namespace: Object) -> Object:
        return namespace

    def snapshot(
        self, namespace: Object, quota: Object, _quotas: list[Object]
    ) -> NamespaceSnapshot:
        """This snapshot, of `namespace` and `quota`."""
        return dataclasses.replace(self, namespace=namespace, quota=quota)


@dataclass
class QuotaPlan:
    """What the managed quota should be, and what it was made from; ``managed`` False means leave
    it entirely alone."""

    managed: bool
    snapshot: NamespaceSnapshot = field(repr=False, compare=False)
    """The namespace as planned: its namespace, quota and what the plan read (`plan_quota`)."""
    base: Base | None = None
    hard: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    remove_annotations: list[str] = field(default_factory=list)
    rooms: RoomPlan = field(default_factory=RoomPlan)
    used: ResourceList = field(default_factory=dict)
    skipped: bool = False
    """No room is raised (Harvester's skip annotation, or `paused`): rooms are given back."""
    paused: str | None = None
    """Why raising is paused here (the global switch or the namespace's opt-out label), if it
    is: the plan is then `skipped`."""
    warnings: list[str] = field(default_factory=list)
    requeue_after: float | None = None
    gathers: bool = False
    """The write would only give room back while another migration of the namespace still holds
    room (`release_gathers`): a release the writer may hold back a moment, to give it back with
    the next ones (controller/resourcequota/writes.py, ReleaseGathering)."""
    labels_room: bool = False
    """Set LABEL_ROOM_HELD now: the plan holds room and a namespace write is safe. This flag and
    the next two are the room-held label's policy, which the reconcile's planner sets
    (controller/resourcequota/planner.py, `label_policy`); `plan_quota` leaves them False."""
    labelled_for_good: bool = False
    """The namespace keeps LABEL_ROOM_HELD whether or not room is held: set whenever it is
    missing, never removed."""
    label_writes_wait: bool = False
    """No label write now: one would have Rancher's agent reset the raise standing here (a
    label not kept for good is not removed now)."""

    @property
    def holds_room(self) -> bool:
        return self.rooms.holds_room and not self.skipped


def plan_quota(snapshot: NamespaceSnapshot) -> QuotaPlan:
    """The desired spec.hard and annotations for the snapshot's managed quota.

    Harvester's `scaleResourceQuotaWithVMI` and `scaleResourceQuotaOnDemand` made as one plan,
    recomputed from the cluster every time, so `ContainsMigratingVM` ("already scaled") has no
    twin: every key is recomputed."""
    recorded = parse_migration_annotations(annotations_of(snapshot.quota))
    warnings = [f"ignored invalid annotation {key}: {why}" for key, why in recorded.invalid.items()]
    pods = namespace_pods(snapshot.pods)
    scope = quota_scope(snapshot.quota)
    room_plan = plan_rooms(
        snapshot.migrations,
        snapshot.vmis,
        pods,
        snapshot.now,
        launcher=snapshot.launcher,
        usage=snapshot.usage,
    ).within(scope)
    warnings += [
        f"cannot size the room of migration {m}: {why}"
        for m, why in room_plan.estimate_errors.items()
    ]
    warnings += [
        f"{view.error}; what cannot be read is charged nothing by this plan; fix or delete it"
        for view in pods.unreadable()
    ]
    paused = pause_of(snapshot)
    skipped = recorded.skip_auto_scaling or paused is not None
    try:
        base = resolve_base(
            snapshot.namespace,
            snapshot.quota,
            mode=snapshot.mode,
            raise_recorded=raise_records(snapshot.quota, None),
            # Room keys of ours only: Harvester records its UID key in a namespace without
            # Rancher's annotation too, but raises only from that annotation (v1.8.2), so a
            # standalone quota's spec.hard never holds the room of its UID keys.
            recorded_rooms=resources.total(list(recorded.name_keyed.values())),
        )
    except BaseError as error:
        return QuotaPlan(
            managed=False, snapshot=snapshot, warnings=[*warnings, str(error)], rooms=room_plan
        )
    if base is None:
        return QuotaPlan(managed=False, snapshot=snapshot, warnings=warnings, rooms=room_plan)
    warnings += list(base.notes)
    rooms = RoomPlan(target_pods=room_plan.target_pods) if skipped else room_plan
    rooms = _mask_rooms(rooms, base.hard.keys())
    used = used_without_targets(pods, rooms.target_pods, snapshot.now, scope)
    since = rooms_since(snapshot.quota, (room.created for room in rooms.rooms))
    # Without room held there are no arrivals to set aside: the floor is what is used. Nor is
    # there when no pod arrived since the rooms began (a migration's usual case): floor_of then
    # gives `used` too, summed once.
    floor = (
        used
        if since is None
        else floor_of(
            pods,
            rooms.target_pods,
            since,
            snapshot.now,
            scope,
            replacing=_replacing(snapshot),
            used=used,
        )
    )
    managed_hard = desired_hard(base.hard, floor, rooms.total())
    plan = QuotaPlan(
        managed=True,
        snapshot=snapshot,
        base=base,
        rooms=rooms,
        used=used,
        skipped=skipped,
        paused=paused,
        warnings=warnings,
        requeue_after=next_release(pods, snapshot.now),
    )
    if lowering_waits(managed_hard, snapshot.quota, rooms):
        current = (snapshot.quota.get("spec") or {}).get("hard") or {}
        plan.hard = {str(key): str(value) for key, value in current.items()}
        return plan  # no annotation changes either: the write waits whole
    plan.hard = _full_hard(snapshot.quota, base, managed_hard)
    plan.gathers = plan.holds_room and release_gathers(managed_hard, snapshot.quota)
    adoption = adoption_changes(
        adopt=snapshot.adopt_harvester,
        holds_room=bool(rooms.rooms),
        recorded=recorded,
        current=annotations_of(snapshot.quota),
        migrations=snapshot.migrations,
        vmis=snapshot.vmis,
    )
    plan.annotations, plan.remove_annotations = _annotation_changes(
        snapshot.quota, base, rooms.rooms, managed_hard, since, adoption=adoption
    )
    return plan


PAUSED_GLOBALLY = "raising is paused for every namespace (harvester-quota run --paused)"
PAUSED_HERE = f"raising is paused in this namespace (label {LABEL_PAUSED}={TRUE})"


def pause_of(snapshot: NamespaceSnapshot) -> str | None:
    """Why the namespace's rooms are given back and none raised, or None. The global switch
    first; then the namespace's opt-out label, exactly "true" (any other value is no opt-out).
    A paused plan takes the path of Harvester's skip annotation (`skipped`): the raise comes
    down with its migration annotations in one write, and the room-held label goes only after
    it (raise_down), so the webhook never lets a pod into a raise still standing."""
    if snapshot.paused:
        return PAUSED_GLOBALLY
    if opted_out(snapshot.namespace):
        return PAUSED_HERE
    return None


def _mask_rooms(plan: RoomPlan, keys: Any) -> RoomPlan:
    wanted = list(keys)
    return dataclasses.replace(plan, rooms=[room.masked(wanted) for room in plan.rooms])


def desired_hard(base: ResourceList, used: ResourceList, rooms: ResourceList) -> ResourceList:
    """spec.hard, key by key of `base` (compensation as arithmetic): where `rooms` holds some of
    the key, max(base, used) + room, `used` being the floor (raises.py); else the base.

    Harvester's functions for it: `CalculateNewResourceQuotaFromBaseDelta` (base plus the
    rooms), `CalculateCompensationResourceQuotaWithVMI` (here the max with `used`, on every key,
    so `IsResourceQuotaManagedByNamespaceAnnotationWithMemoryLimits` has no twin: compensation is
    not memory-only), and `restoreResourceQuota` and `restoreResourceQuotaWithVMI` (a plan
    without rooms is the base). Only the base's keys are planned, so `checkResourceQuotaAndVMI`,
    `isEmpty`, `IsEmptyResourceQuota` and `isMemoryLimitEmpty` have nothing to test."""
    hard: ResourceList = {}
    for key, base_value in base.items():
        room = rooms.get(key)
        if room is None or room.sign() <= 0:
            hard[key] = base_value
            continue
        floor = max(base_value, used.get(key, base_value * 0))
        # Keep the base's format (e.g. 5000Mi + bytes prints as bytes, "3" + 2015m as 5015m).
        hard[key] = Quantity(nanos=floor.nanos, fmt=base_value.format) + room
    return hard


def lowering_waits(hard: ResourceList, quota: Mapping[str, Any], rooms: RoomPlan) -> bool:
    """Whether the quota should stay as it is for now: a target pod is still to be admitted,
    `hard` raises no key, and it lowers some key below what quota admission would count,
    status.used plus the rooms whose target pod does not exist yet.

    Quota admission checks a new pod against status.used, which kube-controller-manager
    recounts a moment after a pod goes; the plan counts the pods as they are now. When a
    migration's source pod had just gone, the plan lowered the quota by its usage before
    status.used did, and a waiting target was refused (measured: about one migration in a
    hundred in a 3,000-VM namespace, blocked 1-2 s). The recount is a status change of the
    quota, which plans again: the quota comes down then, in the one write it always took (holding
    one key while writing the rest, and the released room's annotation, took two: 2.75 writes
    per migration in the drain-20 scenario). Nothing is raised on status.used: it counts a
    target pod as admission admits it, before the pod caches show it (2.2 writes per migration
    when it raised)."""
    pending = [room.room for room in rooms.rooms if room.estimated]
    if not pending:
        return False
    current = parse_resource_list_leniently((quota.get("spec") or {}).get("hard"))
    if any(key not in current or value > current[key] for key, value in hard.items()):
        return False
    used = parse_resource_list_leniently((quota.get("status") or {}).get("used"))
    to_admit = resources.total(pending)
    return any(
        value < current[key] and used[key] + to_admit.get(key, value * 0) > value
        for key, value in hard.items()
        if key in used
    )


def release_gathers(hard: ResourceList, quota: Mapping[str, Any]) -> bool:
    """Whether bringing the quota to `hard` only gives room back: lowers some key of spec.hard
    and raises none (a key of `hard` spec.hard lacks counts as a raise).

    The plan's `gathers` is this while the plan still holds room (`QuotaPlan.holds_room`): a
    migration's end while others of the namespace go on. The writer may hold such a release
    a few seconds (controller/resourcequota/writes.py, ReleaseGathering), so that the ends of a
    drain's migrations are given back several in one write: each spec.hard write makes
    kube-controller-manager recount the namespace, and one written as the next target pod is
    created can make that pod's quota admission conflict. Holding it keeps nothing from a
    tenant's pods: room is held, so the webhook holds them to the base
    (webhook/resources/pod/validator.py)."""
    current = parse_resource_list_leniently((quota.get("spec") or {}).get("hard"))
    if any(key not in current or value > current[key] for key, value in hard.items()):
        return False
    return any(value < current[key] for key, value in hard.items())


def _full_hard(quota: Mapping[str, Any], base: Base, managed: ResourceList) -> dict[str, str]:
    """spec.hard as it should be: managed keys computed, others untouched (and the base's format
    kept where the value is unchanged, so nothing is rewritten for formatting alone)."""
    current = dict((quota.get("spec") or {}).get("hard") or {})
    result: dict[str, str] = {}
    for key, text in current.items():
        if key not in managed:
            result[key] = str(text)
    for key, value in managed.items():
        text = current.get(key)
        if text is not None and _same(str(text), value):
            result[key] = str(text)
        else:
            result[key] = str(value)
    return result


def _same(text: str, value: Quantity) -> bool:
    try:
        return Quantity.parse(text) == value
    except ValueError:
        return False


_RECORDS = (ANNOTATION_BASE, ANNOTATION_APPLIED, ANNOTATION_ROOMS_SINCE, ANNOTATION_ROOM_MIGRATIONS)
"""Our records on the quota besides the per-VM keys: removed once no plan wants them."""


def _annotation_changes(
    quota: Mapping[str, Any],
    base: Base,
    rooms: Sequence[MigrationRoom],
    managed_hard: ResourceList,
    since: str | None,
    *,
    adoption: _AdoptionChanges,
) -> tuple[dict[str, str], list[str]]:
    """(annotations to set, annotation keys to remove) for the quota: a per-VM key for each
    VM whose migration holds room (Harvester's `AddMigratingVM`), the uids of those migrations
    (ANNOTATION_ROOM_MIGRATIONS, in the same write as the raise), and every migrating key no
    room needs removed (`DeleteMigratingVM`), a compensation or resync flag Harvester left among
    them (we never write a compensation: `AddMigratingCompensation` has no twin, and
    `DeleteMigratingCompensation` is this removal)."""
    wanted: dict[str, str] = dict(adoption.wanted)
    per_vm: dict[str, list[ResourceList]] = {}
    for room in rooms:
        per_vm.setdefault(room.vm_name, []).append(room.room)
    key_of = adopted_migrating_vm_annotation_key if adoption.wanted else migrating_vm_annotation_key
    for vm_name, vm_rooms in per_vm.items():
        wanted[key_of(vm_name)] = resources.dumps(resources.total(vm_rooms))
    if base.source == STANDALONE:
        wanted[ANNOTATION_BASE] = resources.dumps(base.hard)
        if rooms:
            wanted[ANNOTATION_APPLIED] = resources.dumps(managed_hard)
    if rooms and since is not None:
        wanted[ANNOTATION_ROOMS_SINCE] = since
    if rooms:
        uids = sorted({room.migration_uid for room in rooms})
        wanted[ANNOTATION_ROOM_MIGRATIONS] = ",".join(uids)
    current = annotations_of(quota)
    ours = [key for key in current if key.startswith(MIGRATING_PREFIX) or key in _RECORDS]
    ours += [key for key in adoption.remove if key in current]
    remove = sorted(key for key in ours if key not in wanted and key not in adoption.keep)
    changed = {key: value for key, value in wanted.items() if current.get(key) != value}
    return changed, remove


def patch_for(quota: Mapping[str, Any], plan: QuotaPlan) -> dict[str, Any] | None:
    """The merge patch that brings the quota to the plan, or None if it is there already."""
    if not plan.managed:
        return None
    current_hard = dict((quota.get("spec") or {}).get("hard") or {})
    hard_patch: dict[str, Any] = {}
    for key, text in plan.hard.items():
        current = current_hard.get(key)
        if current is None or not _same_text(str(current), text):
            hard_patch[key] = text
    for key in current_hard:
        if key not in plan.hard:
            hard_patch[key] = None
    annotation_patch: dict[str, Any] = dict(plan.annotations)
    annotation_patch.update(dict.fromkeys(plan.remove_annotations))
    if not hard_patch and not annotation_patch:
        return None
    patch: dict[str, Any] = {}
    if hard_patch:
        patch["spec"] = {"hard": hard_patch}
    if annotation_patch:
        patch["metadata"] = {"annotations": annotation_patch}
    return patch


def _same_text(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return Quantity.parse(a) == Quantity.parse(b)
    except ValueError:
        return False


def _replacing(snapshot: NamespaceSnapshot) -> frozenset[str]:
    """The uids of the namespace's migrations within it, planned or settled: their target pods
    replace a launcher pod that counted. Those of decentralized migrations are VMs arriving, and
    those of migrations that no longer exist count as arrivals too (raises.py)."""
    return frozenset(
        str(metadata(m).get("uid"))
        for m in (*snapshot.migrations, *snapshot.settled)
        if decentralized_side(m) is None
    )


ADOPTION_ANNOTATIONS = {ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING: TRUE, ANNOTATION_ADOPTED: TRUE}


@dataclass(frozen=True)
class _AdoptionChanges:
    """What adoption adds to a plan's annotation changes."""

    wanted: dict[str, str] = field(default_factory=dict)
    """Annotations the quota must carry."""
    keep: frozenset[str] = frozenset()
    """Harvester's keys a plan must leave where they are (its live UID keys)."""
    remove: tuple[str, ...] = ()
    """Annotations to remove (an adopted quota given back)."""


def adoption_changes(
    *,
    adopt: bool,
    holds_room: bool,
    recorded: MigrationAnnotations,
    current: Mapping[str, str],
    migrations: Iterable[Object],
    vmis: Mapping[str, VmiSource],
) -> _AdoptionChanges:
    """The annotation changes adoption asks of a managed quota.

    ``adopt``: the controller adopts (its option); ``holds_room``: the plan holds room for a
    migration (never when raising is paused here: its rooms are given back). An
    administrator's skip annotation (`recorded.skip_auto_scaling`) is never adopted."""
    # Paused with adoption on, the first branch keeps it adopted; paused without (the uninstall
    # steps), no room stands, so it is given back.
    keeps_adopted = recorded.adopted and holds_room
    beside_harvester = adopt or keeps_adopted
    keep = harvesters_live_keys(current, migrations, vmis) if beside_harvester else frozenset()
    if (adopt and not recorded.skip_auto_scaling) or keeps_adopted:
        return _AdoptionChanges(wanted=dict(ADOPTION_ANNOTATIONS), keep=keep)
    if recorded.adopted:
        return _AdoptionChanges(remove=tuple(sorted(ADOPTION_ANNOTATIONS)), keep=keep)
    if ANNOTATION_ADOPTED in current:
        return _AdoptionChanges(remove=(ANNOTATION_ADOPTED,), keep=keep)
    return _AdoptionChanges(keep=keep)


def harvesters_live_keys(
    current: Mapping[str, str], migrations: Iterable[Object], vmis: Mapping[str, VmiSource]
) -> frozenset[str]:
    """Harvester's ``migratingUID-<uid>`` keys on the quota whose VMI has a migration in
    ``migrations`` (the namespace's unfinished ones, as the plan reads them)."""
    uids = set()
    for migration in migrations:
        vmi = vmis.get(str(spec(migration).get("vmiName", "")))
        uid = as_view(vmi).uid if vmi is not None else None
        if uid:
            uids.add(ANNOTATION_MIGRATING_UID_PREFIX + str(uid))
    return frozenset(key for key in current if key in uids)
