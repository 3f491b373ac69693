"""A raise on Rancher's protected path: written through Rancher's own annotation, for Rancher
versions that protect the default quota, and ordered across the namespaces of a Rancher project
(the project's queue, below).

Rancher 2.14.6+ and 2.15.2+ deny every write of the ResourceQuota labelled
``resourcequota.management.cattle.io/default-resource-quota`` that does not come from Rancher's
``rancher-webhook-sudo`` account (rancher/rancher#54690). Rancher's source of truth stays writable:
the namespace annotation ``field.cattle.io/resourceQuota``, checked against the project's limits
and copied to the quota by Rancher's agent. So the raise a plan wants goes there instead:

- raising: the annotation gets the plan's values on the keys it limits (other fields, such as
  ``extended``, kept as they are); the annotation's text before the first raise is recorded in
  ``harvester-quota.io/rancher-base``, what we wrote in ``harvester-quota.io/rancher-applied``,
  and the Rancher project and migrations it was given for in ``harvester-quota.io/rancher-given``
  (written again when they change, even where the text does not, and where a raise of an older
  version lacks it);
- releasing: the recorded text goes back exactly, and the records go;
- an annotation someone else changed meanwhile is theirs: it is the base from then on
  (base.rancher_base_text) and the stale records are dropped.

Pure: `annotation_patch` computes the namespace's metadata.annotations merge patch from the
namespace and the plan; the caller writes it, conditional on the annotations it reads
(conditional.annotation_patch_if), not on the namespace's resourceVersion.

A Rancher project's scarce room across its namespaces, in KubeVirt's order. On Rancher's protected
path a namespace's raise is its ``field.cattle.io/resourceQuota``, which Rancher's agent copies
into the quota only while the project's namespaces together stay within the project's limit
(util/rancher/project.py). Within one namespace the room goes to its migrations in KubeVirt's order
(`prefixes`, below); across the namespaces of a project, this module says which rooms of the
siblings come first, so that a user's migration in one namespace does not take the room a drain's
evacuation (system-critical) in another is waiting for.

- `ladder`: a namespace's rooms, those its raise was given for first, then the others, each part
  in KubeVirt's order, each with the annotation the namespace would ask for with that room and
  every earlier one given (a step per room, cumulative, as the namespace's raises are written:
  `prefixes`). A room once given is never taken back for an earlier one that arrives
  after it (KubeVirt does not preempt a running migration either).
- `given`: which steps of the ladder the project has given the namespace: a room whose migration
  is among those our standing raise was given for (`given_migrations`, above: recorded by our
  controller, with the project that gave it), whatever its size now (a room that grew stays
  given; only its growth is judged, against the project alone). A room the annotation would
  cover but that was not given for it (a new migration taking the room of one that ended) is
  not given: it waits in the project's order like any other. Without a record (a raise of an
  older version, until the next write records it), the rooms the annotation covers (`covered`); the steps not given wait; `kept`:
  how many leading steps are given (the raise the namespace keeps: `kept_raise`, with its given
  steps, where every judgment starts); `last_waiting`: the order of
  the furthest room a raise to a step asks the project for anew.
- `MemberTotals`: the project's namespaces' annotations parsed and summed once per judgment, so
  that each fit test costs one addition, not a parse of every member (module cost: one judgment
  is O(members + waiting steps) fit tests).
- `claims_ahead`: per sibling namespace, the furthest of its waiting steps earlier in KubeVirt's
  order than the room being judged that could fit the project once the rooms given to
  migrations later than it are given back (`_EventualFit`), whether or not it fits now: room
  freeing a bit at a time is not taken by later, smaller rooms. A step bigger than the project
  limit less the bases and the rooms given to earlier migrations holds no one back (no one
  starves behind a room the project can never give). Steps are tried from the furthest down and
  the first that could fit is the claim; the judged raise is then judged beside the claims, the
  others as they stand. `waits_behind`: the raise judged beside those claims, and
  whom it waits behind (the controller's judgment, and preflight's prediction of it).

Scarce room within one namespace, a plan raised for its first migrations only: where a
namespace's whole raise cannot be had (its Rancher project lacks the room for it), the room goes
to migrations in KubeVirt's priority order: a node drain's evacuations (system-critical) before a
user's migration, then the migration created first (util/migrationpriority.py
`scarce_room_order`). `prefixes` gives the plans that raise for the first k rooms in that order,
k from one fewer than all down to one, each with spec.hard as `plan_quota` gives it for those
rooms alone: per key, the base where none of them holds room, else the same floor (the base or
what is used without targets, whichever is more) plus their rooms. The caller writes the first
one that fits; the rest wait for the project's room.

The order key is `scarce_room_order` (spec.priority, which only virt-controller may set; the
API server's creationTimestamp; the migration's name), then the namespace: a total order across
the project. Nothing a tenant writes on its own objects but the name moves it, and the name only
between migrations of one priority created in the same second.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...generic.meta import annotations_of, metadata
from ..annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA
from ..migrationpriority import priority_name, scarce_room_order
from ..quantity import Quantity
from ..rancher.annotation import RancherLimit, parse_namespace_resource_quota_details
from ..rancher.project import (
    PROJECT_ID_ANNOTATION,
    Fit,
    NoRoom,
    ProjectQuota,
    complete_quota,
    fit,
    fit_verdict,
    namespace_limit,
)
from ..resources import ResourceList, add, less_or_equal, subtract, total
from .base import (
    ANNOTATION_RANCHER_APPLIED,
    ANNOTATION_RANCHER_BASE,
    ANNOTATION_RANCHER_GIVEN,
    RANCHER,
    rancher_base_text,
)
from .plan import QuotaPlan
from .rooms import MigrationRoom, RoomPlan


def raised_annotation(base_text: str, hard: Mapping[str, str]) -> str:
    """The base annotation with the plan's values on the keys the base limits (the same text
    as the base when the values are the base's)."""
    details = parse_namespace_resource_quota_details(base_text)
    fixed = dict(details.fixed)
    for key, current in details.limit().items():
        wanted = hard.get(key)
        if wanted is not None and Quantity.parse(wanted) != current:
            fixed[key] = wanted
    if fixed == details.fixed:
        return base_text
    return RancherLimit(fixed, details.extended).canonical_text()


def annotation_patch(namespace: Mapping[str, Any], plan: QuotaPlan) -> dict[str, Any] | None:
    """The namespace annotations that carry the plan through Rancher, or None if they do."""
    annotations = annotations_of(namespace)
    current = annotations.get(CATTLE_ANNOTATION_RESOURCE_QUOTA)
    base_text = rancher_base_text(namespace)
    if not plan.managed or plan.base is None or current is None or base_text is None:
        return None
    if ANNOTATION_RANCHER_BASE in annotations and current != annotations.get(
        ANNOTATION_RANCHER_APPLIED
    ):
        return {
            ANNOTATION_RANCHER_BASE: None,
            ANNOTATION_RANCHER_APPLIED: None,
            ANNOTATION_RANCHER_GIVEN: None,
        }
    wanted = raised_annotation(base_text, plan.hard) if plan.holds_room else base_text
    if wanted != base_text:
        given = given_text(plan, annotations.get(PROJECT_ID_ANNOTATION))
        raise_it = {
            CATTLE_ANNOTATION_RESOURCE_QUOTA: wanted,
            ANNOTATION_RANCHER_BASE: base_text,
            ANNOTATION_RANCHER_APPLIED: wanted,
            ANNOTATION_RANCHER_GIVEN: given,
        }
        # A raise of ours without the record (written before it existed) gets one now: the
        # rooms given are frozen at the migrations it covers at the first reconcile that finds
        # it missing, so no later migration inherits a room of one that ended.
        stands = wanted == current and annotations.get(ANNOTATION_RANCHER_GIVEN) == given
        return None if stands else raise_it
    return _release(annotations, base_text)


def given_text(plan: QuotaPlan, project: str | None = None) -> str:
    """ANNOTATION_RANCHER_GIVEN's value for a raise of `plan`: the Rancher project it was given
    by (the namespace's field.cattle.io/projectId), a space, its rooms' migration uids."""
    uids = ",".join(sorted({room.migration_uid for room in plan.rooms.rooms}))
    return f"{project} {uids}" if project else uids


def given_migrations(namespace: Mapping[str, Any]) -> frozenset[str] | None:
    """The migration uids our raise standing on the namespace was given for: empty unless the
    annotation is still the raise we wrote (someone else's edit gives nothing of ours) and the
    record names the project the namespace is in now (a namespace moved to another project was
    given nothing by it); None for a raise of ours without the record (written by a version
    before it): every room it covers counts as given then, until the next reconcile writes it
    (annotation_patch). A record without a project (written by the version before that) counts
    for the namespace's project."""
    annotations = annotations_of(namespace)
    current = annotations.get(CATTLE_ANNOTATION_RESOURCE_QUOTA)
    if current is None or current != annotations.get(ANNOTATION_RANCHER_APPLIED):
        return frozenset()
    text = annotations.get(ANNOTATION_RANCHER_GIVEN)
    if text is None:
        return None
    project, _, uids = text.rpartition(" ")
    if project and project != annotations.get(PROJECT_ID_ANNOTATION):
        return frozenset()
    return frozenset(uid for uid in uids.split(",") if uid)


def unjudged_record(
    namespace: Mapping[str, Any], changes: Mapping[str, Any], given: Collection[str]
) -> dict[str, Any] | None:
    """`changes` (a raise) written without the project's judgment (its project could not be
    read now): the record names only the rooms given already (`given`, their migrations'
    uids), so the others still
    wait in the project's order and are judged once it can be read; None where that leaves
    nothing to write."""
    if changes.get(ANNOTATION_RANCHER_GIVEN) is None:
        return dict(changes)
    annotations = annotations_of(namespace)
    uids = ",".join(sorted(set(given)))
    project = annotations.get(PROJECT_ID_ANNOTATION)
    written = {**changes, ANNOTATION_RANCHER_GIVEN: f"{project} {uids}" if project else uids}
    if all(annotations.get(key) == value for key, value in written.items()):
        return None
    return written


def _release(annotations: Mapping[str, str], base_text: str) -> dict[str, Any] | None:
    """Back to the recorded text, records dropped (nothing to do when there are none)."""
    if ANNOTATION_RANCHER_BASE not in annotations:
        return None
    return {
        CATTLE_ANNOTATION_RESOURCE_QUOTA: base_text,
        ANNOTATION_RANCHER_BASE: None,
        ANNOTATION_RANCHER_APPLIED: None,
        ANNOTATION_RANCHER_GIVEN: None,
    }


RANCHER_PATH_KEYS = (
    PROJECT_ID_ANNOTATION,
    CATTLE_ANNOTATION_RESOURCE_QUOTA,
    ANNOTATION_RANCHER_BASE,
    ANNOTATION_RANCHER_APPLIED,
    ANNOTATION_RANCHER_GIVEN,
)
"""The namespace annotations a ladder and `given` read."""

OrderKey = tuple[int, str, str, str]
"""(-priority, creationTimestamp, migration name, namespace): smaller goes first."""


def order_key(namespace: str, room: MigrationRoom) -> OrderKey:
    """Where `room` of `namespace` stands in KubeVirt's order across a project."""
    return (*scarce_room_order(room.priority, room.created, room.migration), namespace)


def in_priority_order(rooms: list[MigrationRoom]) -> list[MigrationRoom]:
    """`rooms` in the order scarce room is handed out (KubeVirt's)."""
    return sorted(rooms, key=lambda r: scarce_room_order(r.priority, r.created, r.migration))


def prefixes(plan: QuotaPlan, ordered: list[MigrationRoom] | None = None) -> Iterator[QuotaPlan]:
    """The plans raising for fewer of `plan`'s rooms, most rooms first (module docstring), the
    rooms taken in `ordered` (default: KubeVirt's order); nothing for a plan that holds one
    room or none, or has no base."""
    if plan.base is None or not plan.holds_room or len(plan.rooms.rooms) < 2:
        return
    ordered = ordered if ordered is not None else in_priority_order(plan.rooms.rooms)
    everyone = plan.rooms.total()
    for count in range(len(ordered) - 1, 0, -1):
        kept = ordered[:count]
        hard = _hard_for(plan, everyone, total(room.room for room in kept))
        rooms = RoomPlan(rooms=kept, target_pods=plan.rooms.target_pods)
        yield dataclasses.replace(plan, hard=hard, rooms=rooms)


def _hard_for(plan: QuotaPlan, everyone: ResourceList, kept: ResourceList) -> dict[str, str]:
    """spec.hard of `plan` with only the `kept` rooms (module docstring)."""
    assert plan.base is not None
    hard = dict(plan.hard)
    for key, base in plan.base.hard.items():
        room, mine = everyone.get(key), kept.get(key)
        if key not in hard or room is None or room.sign() <= 0:
            continue
        if mine is None or mine.sign() <= 0:
            hard[key] = str(base)
            continue
        floor = Quantity.parse(hard[key]) - room
        hard[key] = str(floor + mine)
    return hard


@dataclass(frozen=True)
class Step:
    """One room of a namespace's ladder: the room, its order, and the namespace's annotation
    with it and every earlier room of the namespace given (`plan`: that raise's plan)."""

    namespace: str
    room: MigrationRoom
    order: OrderKey
    annotation: str
    plan: QuotaPlan
    given: bool = False
    """Whether the project gave the namespace this room (`given`; set by `project_steps`)."""

    @functools.cached_property
    def limit(self) -> ResourceList:
        """The annotation's limit, as Rancher's agent sums a sibling's (ValueError if bad;
        parsed once per step)."""
        return _hard(self.annotation)

    def describe(self) -> str:
        """``namespace/migration (priority P, created T)``, as Events and logs name it."""
        return (
            f"{self.namespace}/{self.room.migration} (priority "
            f"{priority_name(self.room.priority)}, created {self.room.created or 'unknown'})"
        )


def ladder(namespace: Mapping[str, Any], plan: QuotaPlan) -> list[Step]:
    """The namespace's steps: the rooms its raise was given for first, then the others, each
    part in KubeVirt's order (a room once given is never taken back for an earlier one that
    arrives after it; a raise without the record, of an older version: KubeVirt's order
    alone); [] for a plan that holds no room or a namespace without Rancher's annotation
    (nothing is asked of the project then)."""
    base_text = rancher_base_text(namespace)
    if not plan.holds_room or plan.base is None or base_text is None:
        return []
    name = str(metadata(namespace).get("name", ""))
    ordered = in_priority_order(plan.rooms.rooms)
    uids = given_migrations(namespace)
    if uids:
        ordered = [r for r in ordered if r.migration_uid in uids] + [
            r for r in ordered if r.migration_uid not in uids
        ]
    plans = [*reversed(list(prefixes(plan, ordered))), plan] if len(ordered) > 1 else [plan]
    return [
        Step(name, room, order_key(name, room), raised_annotation(base_text, fewer.hard), fewer)
        for room, fewer in zip(ordered, plans, strict=True)
    ]


def covered(namespace: Mapping[str, Any], steps: Sequence[Step]) -> int:
    """How many of `steps` the namespace's annotation asks for already: the furthest step whose
    request it meets on every key (0 when none, or when an annotation cannot be read)."""
    try:
        asked = namespace_limit(annotations_of(namespace).get(CATTLE_ANNOTATION_RESOURCE_QUOTA))
        if asked is None:
            return 0
        have = asked.hard()
        for count in range(len(steps), 0, -1):
            wanted = namespace_limit(steps[count - 1].annotation)
            if wanted is not None and less_or_equal(wanted.hard(), have)[0]:
                return count
    except ValueError:
        return 0
    return 0


def given(namespace: Mapping[str, Any], steps: Sequence[Step]) -> list[bool]:
    """Per step, whether the project gave the namespace its room (module docstring): its
    migration's uid is in our record, whatever the room's size now (a room that grew stays
    given; only its growth is judged, against the project alone). Without a record (a raise
    written by a version before it, until the next reconcile writes one), the rooms the
    annotation covers."""
    uids = given_migrations(namespace)
    if uids is None:
        asked = covered(namespace, steps)
        return [index < asked for index in range(len(steps))]
    return [step.room.migration_uid in uids for step in steps]


def kept(flags: Sequence[bool]) -> int:
    """How many leading steps are given: the raise the namespace keeps whatever it waits for."""
    count = 0
    while count < len(flags) and flags[count]:
        count += 1
    return count


def kept_raise(
    namespace: Mapping[str, Any], steps: Sequence[Step], flags: Sequence[bool]
) -> tuple[str | None, list[Step]]:
    """What a judgment of `namespace` against its project starts from, its ladder `steps` and
    `flags` (`given`): the raise it keeps for the rooms given to it (the annotation of its last
    leading given step; without one its base text, None where it has none), and its given
    steps marked `given` (`_EventualFit` reads when each was given). The controller's judgment
    of a write and preflight's prediction of it both take it from here."""
    count = kept(flags)
    keeps = steps[count - 1].annotation if count else rancher_base_text(namespace)
    own = [
        dataclasses.replace(step, given=True)
        for step, done in zip(steps, flags, strict=True)
        if done
    ]
    return keeps, own


def last_waiting(steps: Sequence[Step], flags: Sequence[bool]) -> OrderKey | None:
    """The order of the furthest of `steps` not given (None: a raise to them asks nothing new)."""
    orders = [step.order for step, done in zip(steps, flags, strict=False) if not done]
    return max(orders) if orders else None


def project_steps(namespace: Mapping[str, Any], plan: QuotaPlan) -> list[Step]:
    """The namespace's ladder, each step marked `given` or not (what a sibling's judge reads:
    its waiting steps, and its given ones for `_EventualFit`)."""
    steps = ladder(namespace, plan)
    return [
        dataclasses.replace(step, given=done)
        for step, done in zip(steps, given(namespace, steps), strict=True)
    ]


def asks_project(namespace: Mapping[str, Any], plan: QuotaPlan | None) -> bool:
    """Whether a member namespace's rooms take part in its Rancher project's order (its
    `project_steps` count for its siblings' judges and its own): not Terminating (its rooms
    will never be given), planned (None: no managed quota, or handed over to MTQ mode), and its
    plan's base Rancher's annotation (else its raise does not go through the project): the rule
    the controller's siblings_waiting applies to its siblings, planned over its caches;
    preflight plans over the state it listed, the step's evacuations added. A namespace MTQ
    mode handles is planned with no room (NamespacePlanner's `defer_to`): it asks nothing."""
    if plan is None or metadata(namespace).get("deletionTimestamp"):
        return False
    return plan.base is not None and plan.base.source == RANCHER


class WaitingCache:
    """Per namespace, its `project_steps` for the last (annotations, plan) they were computed
    from: a sibling whose annotations and plan did not change since the last write of its
    project is not laddered again (a ladder renders a raise per room). Keyed by value (the
    Rancher path's annotations and the plan's fields a ladder reads), so a change of either is
    a new ladder; one entry per namespace, dropped once its project no longer lists it (`keep`)
    or the namespace is no longer ours (`forget`). Event loop only."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[str, str, list[Step]]] = {}
        """Namespace -> (its project id, the fingerprint, its steps)."""

    def steps(self, namespace: Mapping[str, Any], plan: QuotaPlan, project: str) -> list[Step]:
        """`project_steps(namespace, plan)`, computed again only where its inputs changed."""
        return self._entry(namespace, plan, project)[2]

    def _entry(
        self, namespace: Mapping[str, Any], plan: QuotaPlan, project: str
    ) -> tuple[str, str, list[Step]]:
        name = _name(namespace)
        key = _fingerprint(namespace, plan)
        known = self._entries.get(name)
        if known is not None and known[1] == key:
            return known
        steps = project_steps(namespace, plan)
        entry = (project, key, steps)
        self._entries[name] = entry
        return entry

    def keep(self, project: str, members: Collection[str]) -> None:
        """Drops the entries of `project`'s namespaces not among `members` (deleted, moved)."""
        gone = [n for n, entry in self._entries.items() if entry[0] == project and n not in members]
        for name in gone:
            del self._entries[name]

    def forget(self, namespace: str) -> None:
        """Drops the namespace's entry (deleted, or no longer ours)."""
        self._entries.pop(namespace, None)


def _fingerprint(namespace: Mapping[str, Any], plan: QuotaPlan) -> str:
    """What a ladder and `given` read, as one string: the namespace's Rancher-path annotations,
    and the plan's base, spec.hard, rooms (every field) and target pods."""
    annotations = annotations_of(namespace)
    read = [annotations.get(key) for key in RANCHER_PATH_KEYS]
    return repr(
        (
            read,
            plan.managed,
            plan.skipped,
            plan.base,
            sorted(plan.hard.items()),
            plan.rooms.rooms,
            sorted(plan.rooms.target_pods),
        )
    )


class MemberTotals:
    """The project's namespaces but the judged one, their annotations parsed once, as Rancher's
    agent sums them (rancher/project.py `namespace_fit`): `fit` of the judged namespace, or of a
    sibling with the judged namespace at `keeps`, costs one sum. Built per judgment from one
    read of the caches; not updated. `readable` is False where a member's annotation cannot be
    read (Rancher's agent fails then too): nothing is judged against the project then."""

    def __init__(
        self,
        project: ProjectQuota,
        members: Sequence[Mapping[str, Any]],
        judged: str,
        keeps: str | None,
    ) -> None:
        self.project = project
        self.judged = judged
        self.limits: dict[str, ResourceList] = {}
        self.bases: dict[str, ResourceList] = {}
        """Each member's base (its Rancher annotation before any raise of ours), the judged
        namespace's included: what it asks once every room given to it is given back."""
        self.readable = True
        try:
            for member in members:
                name = _name(member)
                if annotations_of(member).get(PROJECT_ID_ANNOTATION) != project.id:
                    continue
                self.bases[name] = _hard(rancher_base_text(member))
                if name == judged:
                    continue
                self.limits[name] = _hard(
                    annotations_of(member).get(CATTLE_ANNOTATION_RESOURCE_QUOTA)
                )
            self.keeps = _hard(keeps)
        except ValueError:
            self.readable = False
            self.keeps = {}
        self.others = total(self.limits.values())
        self._fits: dict[tuple[str, str], bool] = {}
        self._eventual: _EventualFit | None = None

    def eventual(self, steps: Sequence[Step]) -> _EventualFit:
        """The `_EventualFit` of these members and `steps`, built once: a judgment passes the
        same steps (its siblings' and its own) to every claims_ahead of its totals."""
        if self._eventual is None:
            self._eventual = _EventualFit(self, steps)
        return self._eventual

    def fit(self, name: str, annotation: str, claims: Sequence[Step] = ()) -> Fit | None:
        """Namespace `name` (the judged one or a sibling) with `annotation` as its request, the
        `claims` given to their siblings, the judged namespace at `keeps` where `name` is a
        sibling: Rancher's verdict (None: no quota or default on the project, or unreadable)."""
        project = self.project
        if project.limit is None or project.namespace_default is None or not self.readable:
            return None
        requested = namespace_limit(annotation) or RancherLimit()
        merged = complete_quota(requested, project.namespace_default).hard()
        others = self.others
        if name != self.judged:
            others = add(subtract(others, self.limits.get(name, {})), self.keeps)
        for claim in claims:
            others = add(subtract(others, self.limits.get(claim.namespace, {})), claim.limit)
        return fit(merged, [others], project.limit.hard())

    def fits(self, name: str, annotation: str) -> bool:
        """Whether `fit` says it fits (an annotation that cannot be read does not); each
        (namespace, annotation) judged once per judgment, however many steps ask."""
        known = self._fits.get((name, annotation))
        if known is None:
            try:
                verdict = self.fit(name, annotation)
            except ValueError:
                verdict = None
            known = self._fits[name, annotation] = verdict is not None and verdict.fits
        return known


def _hard(annotation: str | None) -> ResourceList:
    return (namespace_limit(annotation) or RancherLimit()).hard()


class _EventualFit:
    """Whether a sibling's waiting step could fit the project once the rooms given to
    migrations later than it in KubeVirt's order are given back (they will be: each ends):
    the step's namespace at the step, its rooms given to later migrations taken out, beside
    every other member at its base plus the rooms given to it for migrations earlier than the
    step. A step that does not fit even so cannot be given before an earlier migration ends,
    so it holds no later room back; one that does holds every later room back, whether or not
    it fits now, so that room freeing a bit at a time is not taken by later, smaller rooms.

    `steps`: the ladders of the members (`project_steps`), their `given` steps read:
    a member with none listed counts at its annotation as it stands (a namespace not on
    Rancher's path, or whose rooms the caller did not plan: nothing of it is given back).
    Built once per judgment: O(G log G) for G given steps, then each test is a bisection and a
    few sums."""

    def __init__(self, totals: MemberTotals, steps: Iterable[Step]) -> None:
        self.totals = totals
        self._given: dict[str, list[tuple[OrderKey, ResourceList]]] = {}
        """Member -> its given steps in ladder order: (order, its limit with that room and
        every earlier given one)."""
        for step in steps:
            if step.given and step.namespace in totals.bases:
                self._given.setdefault(step.namespace, []).append((step.order, step.limit))
        self._events: list[tuple[OrderKey, ResourceList]] = []
        """Every given room across the project, in KubeVirt's order: (order, its size)."""
        base: dict[str, ResourceList] = {}
        for name in {*totals.limits, totals.judged}:
            base[name] = self._now(name)
        for name, given in self._given.items():
            base[name] = totals.bases[name]
            before = totals.bases[name]
            for order, limit in given:
                self._events.append((order, subtract(limit, before)))
                before = limit
        self._events.sort(key=lambda event: event[0])
        self._orders = [order for order, _ in self._events]
        self._sums: list[ResourceList] = [{}]
        for _, room in self._events:
            self._sums.append(add(self._sums[-1], room))
        self._base_total = total(base.values())
        self._could: dict[tuple[str, str, OrderKey], bool] = {}

    def _now(self, name: str) -> ResourceList:
        if name == self.totals.judged:
            return self.totals.keeps
        return self.totals.limits.get(name, {})

    def _member_at(self, name: str, order: OrderKey) -> ResourceList:
        """The member with its given rooms earlier than `order` only."""
        given = self._given.get(name)
        if given is None:
            return self._now(name)
        count = sum(1 for at, _ in given if at < order)
        return given[count - 1][1] if count else self.totals.bases[name]

    def could_fit(self, step: Step) -> bool:
        """Whether `step` (waiting) fits once later given rooms are back (each step judged
        once)."""
        key = (step.namespace, step.annotation, step.order)
        known = self._could.get(key)
        if known is None:
            known = self._could[key] = self._could_fit(step)
        return known

    def _could_fit(self, step: Step) -> bool:
        totals = self.totals
        project = totals.project
        if project.limit is None or project.namespace_default is None or not totals.readable:
            return False
        try:
            requested = namespace_limit(step.annotation) or RancherLimit()
        except ValueError:
            return False
        merged = complete_quota(requested, project.namespace_default).hard()
        given = self._given.get(step.namespace)
        if given:
            later = subtract(given[-1][1], self._member_at(step.namespace, step.order))
            merged = subtract(merged, later)
        earlier = self._sums[bisect.bisect_left(self._orders, step.order)]
        others = add(self._base_total, earlier)
        mine = self._member_at(step.namespace, step.order)
        others = subtract(others, mine)
        return fit(merged, [others], project.limit.hard()).fits


def claims_ahead(waiting: Iterable[Step], ahead_of: OrderKey, totals: MemberTotals) -> list[Step]:
    """Per sibling namespace, the furthest of its `waiting` steps earlier than `ahead_of` that
    could fit the project once the rooms given to later migrations are given back
    (`_EventualFit`), tried from the furthest down; a sibling not among the members `totals`
    counts claims nothing. `waiting` may hold given steps too (`Step.given`): they are never
    claims, only read for `_EventualFit` (built at the first call for `totals`: pass the same
    steps for one `totals`)."""
    listed = list(waiting)
    eventual = totals.eventual(listed)
    by_namespace: dict[str, list[Step]] = {}
    for step in listed:
        if not step.given and step.order < ahead_of and step.namespace in totals.limits:
            by_namespace.setdefault(step.namespace, []).append(step)
    claims = []
    for _, steps in sorted(by_namespace.items()):
        for step in sorted(steps, key=lambda s: s.order, reverse=True):
            if eventual.could_fit(step):
                claims.append(step)
                break
    return claims


def _name(namespace: Mapping[str, Any]) -> str:
    return str(metadata(namespace).get("name", ""))


def first_waiting(claims: Sequence[Step], waiting: Iterable[Step]) -> list[Step]:
    """For each claim, its namespace's first waiting step: the migration that goes first."""
    first: dict[str, Step] = {}
    for step in waiting:
        if step.given:
            continue
        known = first.get(step.namespace)
        if known is None or step.order < known.order:
            first[step.namespace] = step
    return [first[claim.namespace] for claim in claims]


def lacks_alone(totals: MemberTotals, raised: str) -> NoRoom | None:
    """A raise's first judgment, the controller's and preflight's: NoRoom where the judged
    namespace at `raised` does not fit the project as it stands (an annotation Rancher cannot
    read either is no verdict: its agent fails too). None: judge it next against the rooms its
    siblings wait for (`waits_behind`)."""
    try:
        return fit_verdict(totals.fit(totals.judged, raised, ()))
    except ValueError:
        return None


def waits_behind(
    waiting: Sequence[Step], ahead_of: OrderKey, totals: MemberTotals, raised: str
) -> list[Step]:
    """The judged namespace's raise to `raised` (its furthest room not given at `ahead_of`)
    against the rooms its siblings wait for (`waiting`): where it fits the project beside the
    siblings' claims ahead of it (`claims_ahead`), or cannot be judged (an annotation Rancher
    cannot read either), []; else the first waiting migration of each claiming sibling, the
    rooms it waits behind (the controller's and preflight's one judgment of this)."""
    claims = claims_ahead(waiting, ahead_of, totals)
    if not claims:
        return []
    try:
        if fit_verdict(totals.fit(totals.judged, raised, claims)) is None:
            return []
    except ValueError:
        return []
    return first_waiting(claims, waiting)
