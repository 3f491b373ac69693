"""The room mode's raises where Rancher protects its quota: written through Rancher's annotation
(`RancherPath`), each judged first against the room of the namespace's Rancher project
(`ProjectRoom`, which reads the project: `ProjectReader`). Who waits for a project's room, and
the sibling namespaces' rooms counted as taken, are projectdemands.py's.

Rancher 2.14.6+/2.15.2+ refuses every write of its labelled default quota but its own agent's.
Where the base is Rancher's and Rancher refused a quota write (its own refusal only,
errors.denied_by_rancher, and per namespace), or a raise through the annotation is under way
(recorded on the namespace, so a restarted controller finishes it), the plan is written into
the namespace's field.cattle.io/resourceQuota instead (util/resourcequota/rancherpath.py), and
Rancher's agent copies it into the quota within the project's limits. A raise the project has no
room for is held back and checked again PROJECT_RECHECK seconds later (`ProjectRoom`), and
so is one whose room goes first to migrations of sibling namespaces earlier in KubeVirt's order
(projectdemands.py), which are queued again as soon as such a room is given or goes.
Not thread-safe: event loop only, per namespace from one worker at a time; one project's
namespaces judge and write one at a time (the project's lock).

The project's room (`ProjectRoom`): a namespace of a Rancher project names it in
``field.cattle.io/projectId`` (``<cluster>:<project>``); the project is a management.cattle.io/v3
Project named ``<project>`` in namespace ``<cluster>``, present where Rancher runs in the cluster
itself (Harvester's embedded Rancher), absent on a cluster imported into another Rancher. It is
read only before a raise through the annotation and while Rancher marks the namespace as not
fitting (rancher/project.py): a GET, kept `PROJECT_TTL` seconds. A project that is not there (no such
kind, no such project) is None for the same time; a refusal (no RBAC for it) closes the reads for a
backoff (permission.py), logged once.

A raise that fits the project is judged again with the rooms the project's other namespaces
have not been given counted as taken, those earlier in KubeVirt's order that could fit once
the rooms given to later migrations are back
(util/resourcequota/rancherpath.py, planned by projectdemands.siblings_waiting): where it
no longer fits, it waits for them, and the Warning names the first of each
(PROJECT_QUEUED_REASON).
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ...config.metrics import QuotaMetrics
from ...generic import errors
from ...generic.client import ApiClient
from ...generic.clock import Clock
from ...generic.events import NORMAL, WARNING, EventRecorder
from ...generic.logformat import fields
from ...generic.meta import annotations_of, metadata
from ...generic.pendingwrites import PendingWrites
from ...generic.permission import Permission
from ...generic.resource import Object
from ...util.annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA
from ...util.quantity import Quantity
from ...util.rancher.project import (
    PROJECT_ID_ANNOTATION,
    PROJECTS,
    NoRoom,
    ProjectQuota,
    namespace_limit,
    project_reference,
    queued_verdict,
    refusal_verdict,
)
from ...util.resourcequota.base import ANNOTATION_RANCHER_BASE, RANCHER
from ...util.resourcequota.plan import NamespaceSnapshot, QuotaPlan
from ...util.resourcequota.rancherpath import (
    MemberTotals,
    OrderKey,
    Step,
    annotation_patch,
    given,
    kept,
    kept_raise,
    lacks_alone,
    ladder,
    last_waiting,
    unjudged_record,
    waits_behind,
)
from ..quotawriter import QuotaWriter
from .projectdemands import ProjectDemands
from .reports import NamespaceReports, room_event_targets

log = logging.getLogger(__name__)

RANCHER_DENIAL_REASON: Final = "QuotaWriteDeniedByRancher"
"""Warning event reason when Rancher's webhook refuses a write of its default quota."""
PROJECT_RECHECK: Final = 30.0
"""Seconds until a raise held back for its project's room is checked again (the project's limit
may be raised meanwhile; nothing else queues the namespace then)."""
PROJECT_NO_ROOM_REASON: Final = "ProjectHasNoRoom"
"""Warning event reason when a raise through Rancher's annotation does not fit its project."""
PROJECT_QUEUED_REASON: Final = "WaitingForEarlierMigrationsInProject"
"""Warning event reason when a raise would fit its project but the room goes first to
migrations of sibling namespaces earlier in KubeVirt's order (projectdemands.py)."""
PROJECT_TTL: Final = 5.0
"""Seconds a project read (or its absence) is used: a raised project limit is seen that soon."""
PROJECT_INDEX: Final = "rancher-project"
"""The namespace cache's index of the project each namespace names (`project_index`)."""


# Writes through Rancher's annotation --------------------------------------------------------------


@dataclass
class RancherPath:
    """Which namespaces' raises go through Rancher's annotation; their writes, into `pending`."""

    writer: QuotaWriter
    pending: PendingWrites
    metrics: QuotaMetrics
    recorder: EventRecorder
    project_room: ProjectRoom
    reports: NamespaceReports
    writes: Counter[str]
    """Quota writes per namespace, shared with the reconcile's (an annotation write counts)."""
    protected: set[str] = field(default_factory=set, init=False)
    """Namespaces where Rancher refused a write of its default quota: raises there go
    through its annotation from then on. Per namespace, and only on Rancher's own refusal:
    another policy's denial in one namespace changes nothing elsewhere."""

    def through(self, namespace: Object, plan: QuotaPlan) -> bool:
        """Whether this namespace's plan goes through Rancher's annotation: the base is Rancher's
        and Rancher refused a quota write in this process, or a raise through it is under way
        (recorded on the namespace, so a restarted controller finishes it)."""
        if plan.base is None or plan.base.source != RANCHER:
            return False
        return metadata(namespace).get(
            "name"
        ) in self.protected or ANNOTATION_RANCHER_BASE in annotations_of(namespace)

    def refused(self, error: errors.ApiError, plan: QuotaPlan) -> bool:
        """Whether `error` is Rancher's own refusal of a write of a quota whose base is its."""
        if not errors.denied_by_rancher(error) or plan.base is None:
            return False
        return plan.base.source == RANCHER

    def report_denial(
        self,
        namespace: Object,
        quota: Object,
        plan: QuotaPlan,
        snapshot: NamespaceSnapshot,
        error: errors.ApiError,
    ) -> None:
        """Marks the namespace protected and says where someone will look (the quota, the
        namespace and every migration holding room) that Rancher refused the write, and what
        happens instead."""
        name = str(metadata(namespace).get("name"))
        self.protected.add(name)
        self.metrics.rancher_denials.labels(name).inc()
        message = (
            f"Rancher refused the quota write ({error.message}); raising through the namespace's "
            "field.cattle.io/resourceQuota instead, which Rancher copies to the quota within the "
            "project's limits"
        )
        log.warning("%s: %s", name, message, extra=fields(namespace=name))
        for target in room_event_targets(namespace, quota, plan, snapshot):
            self.recorder.event(target, WARNING, RANCHER_DENIAL_REASON, message)

    async def take_over(
        self,
        error: errors.ApiError,
        namespace: Object,
        quota: Object,
        plan: QuotaPlan,
        snapshot: NamespaceSnapshot,
        *,
        spec: bool,
    ) -> float | None:
        """After a write of the quota was refused with `error`: where it is Rancher's own refusal
        of a quota whose base is its (`refused`), marks the namespace protected (told where
        someone will look when the write changed the `spec`, `report_denial`; one info line
        when it only touched annotations, `note_protected`) and writes the plan through
        Rancher's annotation instead (`write`, whose result it returns); any other error is
        raised again."""
        if not self.refused(error, plan):
            raise error
        if spec:
            self.report_denial(namespace, quota, plan, snapshot, error)
        else:
            self.note_protected(namespace, error)
        return await self.write(namespace, quota, plan, snapshot)

    def note_protected(self, namespace: Object, error: errors.ApiError) -> None:
        """Marks the namespace protected after Rancher refused a write that raised nothing (an
        annotation-only patch: adopting the quota from Harvester, tidying keys): one info line,
        no Warning nor denial counted, since no room was refused. A raise then goes through
        Rancher's annotation at once."""
        name = str(metadata(namespace).get("name"))
        self.protected.add(name)
        log.info(
            "%s: Rancher protects its quota (%s); its annotations are left as they are, rooms go "
            "through the namespace's field.cattle.io/resourceQuota",
            name,
            error.message,
            extra=fields(namespace=name),
        )

    async def write(
        self, namespace: Object, quota: Object, plan: QuotaPlan, snapshot: NamespaceSnapshot
    ) -> float | None:
        """Writes the plan into Rancher's annotation (conditional on the annotations it reads,
        QuotaWriter.patch_rancher_annotation), unless it is a raise the Rancher project has no
        room for, or whose room goes first to sibling namespaces' migrations earlier in
        KubeVirt's order (projectdemands.py); then the raise for the rooms that fit. Returns the
        seconds until the project's room is checked again while the raise waits, else None.
        The judgments and writes of one project's namespaces run one at a time (its lock), each
        seeing our earlier writes of it and its siblings (`pending`)."""
        namespace = self.pending.newest(namespace)
        project = annotations_of(namespace).get(PROJECT_ID_ANNOTATION)
        if not project:
            return await self._write(namespace, quota, plan, snapshot, None)
        async with self.project_room.demands.judging(project):
            return await self._write(namespace, quota, plan, snapshot, project)

    async def _write(
        self,
        namespace: Object,
        quota: Object,
        plan: QuotaPlan,
        snapshot: NamespaceSnapshot,
        project: str | None,
    ) -> float | None:
        """`write` under the project's lock: judge, write what fits, record what waits. A room
        is asked of the project anew unless the raise standing was given for its migration
        (rancherpath.given): a new migration does not inherit the room of one that ended
        ahead of a sibling's earlier room. One `_Judgment` serves every step judged here."""
        steps = ladder(namespace, plan)
        flags = given(namespace, steps)
        judgment = _Judgment.of(self.project_room, namespace, steps, flags)
        changes = annotation_patch(namespace, plan)
        ahead_of = last_waiting(steps, flags)
        no_room = await self.project_room.lacking(namespace, plan, changes, ahead_of, judgment)
        if no_room is None:
            changes = await self.project_room.recorded(namespace, changes, judgment)
            self.project_room.report(namespace, quota, plan, snapshot, None)
            if changes is None:
                self.reports.explain_blocked(snapshot, quota, plan)
            else:
                await self._patch(namespace, quota, plan, changes)
            await self.project_room.settle(project, judgment, [], wrote=changes is not None)
            return None
        # The raise is held back (or stands, refused by Rancher): what fits is written.
        self.reports.explain_blocked(snapshot, quota, plan, cause=no_room.message)
        wrote = await _WhatFits(self.project_room, self._patch).write(
            namespace, quota, plan, steps, flags=flags, judgment=judgment
        )
        if wrote is None:
            waiting = [step for step, done in zip(steps, flags, strict=True) if not done]
        else:
            waiting = steps[wrote:]
        held = {step.room.migration for step in waiting} if no_room.first else None
        self.project_room.report(namespace, quota, plan, snapshot, no_room, held=held)
        await self.project_room.settle(
            project, judgment, waiting, wrote=wrote is not None, no_room=no_room
        )
        return PROJECT_RECHECK

    async def _patch(
        self, namespace: Object, quota: Object, plan: QuotaPlan, changes: Mapping[str, Any]
    ) -> None:
        """The annotation write itself, counted, logged and told in an Event on the quota."""
        name = str(metadata(namespace).get("name"))
        try:
            written = await self.writer.patch_rancher_annotation(namespace, changes)
        except errors.Conflict:
            self.metrics.quota_writes.labels("conflict").inc()
            raise
        except errors.ApiError:
            self.metrics.quota_writes.labels("error").inc()
            raise
        self.metrics.quota_writes.labels("written").inc()
        self.pending.wrote(written)
        self.writes[name] += 1
        raised = changes.get(CATTLE_ANNOTATION_RESOURCE_QUOTA)
        log.info(
            "%s: %s set to %s through Rancher",
            name,
            CATTLE_ANNOTATION_RESOURCE_QUOTA,
            raised,
            extra=fields(namespace=name),
        )
        reason = "MigrationRoomReserved" if plan.holds_room else "MigrationRoomReleased"
        self.recorder.event(
            quota,
            NORMAL,
            reason,
            f"{CATTLE_ANNOTATION_RESOURCE_QUOTA} set to {raised} (Rancher copies it)",
        )

    def asks_nothing(self, namespace: str) -> None:
        """The namespace's plan does not go through Rancher's annotation: it waits for no room
        of its project (its siblings are queued if it did)."""
        self.project_room.demands.forget(namespace)

    def forget(self, namespace: str) -> None:
        """The namespace is no longer ours: learned again on Rancher's next refusal there."""
        self.protected.discard(namespace)
        self.project_room.forget(namespace)


@dataclass(frozen=True)
class _WhatFits:
    """Where a namespace's Rancher project lacks room for its whole raise (or owes it to
    siblings' earlier rooms): the raise for the rooms that fit, the raise standing kept for the
    rooms given, or every room given back (`write`). `patch` writes the annotation as
    RancherPath does (counted, logged, told). Lives for one write, under the project's lock."""

    project_room: ProjectRoom
    patch: Callable[[Object, Object, QuotaPlan, Mapping[str, Any]], Awaitable[None]]

    async def write(
        self,
        namespace: Object,
        quota: Object,
        plan: QuotaPlan,
        steps: list[Step],
        *,
        flags: list[bool],
        judgment: _Judgment,
    ) -> int | None:
        """Where the project lacks room for the whole raise (or owes it to siblings' earlier
        rooms), the raise for as many migrations as it has room for, in KubeVirt's priority
        order (rancherpath.prefixes, rancherpath.ladder): the furthest step that fits, its rooms
        not given judged against the siblings' earlier ones, is written, or kept where it stands
        (a standing step is kept while it fits the project on its own, never lowered to a nearer
        one that fits too: that took a room back at every recheck; lowered once it no longer
        fits, the project limit lowered). A room given to this namespace (`kept`, they lead the
        ladder) is not dropped while the raise standing fits the project: where even the given
        rooms do not fit as they are planned now (one grew), the raise standing is kept for
        them alone (`_kept_for_given`), their growth waiting: no given room is lowered or handed
        to a sibling for another's growth. Only where the raise standing no longer fits are smaller
        sets of given rooms tried, judged against the project alone (a given room waits behind
        no sibling). Where no step fits, the raise is given back: the rooms of migrations that
        ended go, or a sibling waiting for them would wait for good. Only a plan whose raise was
        judged (the project read): where it cannot be read, nothing is written. Returns how many
        steps the annotation asks for after a write, None where nothing was written."""
        if not await self.project_room.judged(namespace):
            return None
        given_count = kept(flags)
        standing_judged = False
        for count in range(len(steps) - 1, 0, -1):
            if count < given_count and not standing_judged:
                standing_judged = True
                if await self._kept_for_given(namespace, quota, plan, steps[count], judgment):
                    return None
            step = steps[count - 1]
            judged = {CATTLE_ANNOTATION_RESOURCE_QUOTA: step.annotation}
            ahead_of = last_waiting(steps[:count], flags)
            if await self.project_room.lacking(namespace, step.plan, judged, ahead_of, judgment):
                continue
            changes = annotation_patch(namespace, step.plan)
            if changes is None or CATTLE_ANNOTATION_RESOURCE_QUOTA not in changes:
                return None  # it stands already, or records to drop first (someone else's edit)
            holders = ", ".join(s.room.vm_name for s in steps[:count])
            log.info(
                "%s: the project has room for the raise of %s only (KubeVirt's priority order)",
                metadata(namespace).get("name"),
                holders,
                extra=fields(namespace=str(metadata(namespace).get("name"))),
            )
            await self.patch(namespace, quota, step.plan, changes)
            return count
        if (
            given_count
            and not standing_judged
            and await self._kept_for_given(namespace, quota, plan, steps[0], judgment)
        ):
            return None
        return await self._give_back(namespace, quota, plan)

    async def _give_back(self, namespace: Object, quota: Object, plan: QuotaPlan) -> int | None:
        """The release of every room (none fits, or none is owed to this namespace first);
        0 once written, None where there was nothing to give back."""
        released = dataclasses.replace(plan, rooms=dataclasses.replace(plan.rooms, rooms=[]))
        changes = annotation_patch(namespace, released)
        if changes is None or CATTLE_ANNOTATION_RESOURCE_QUOTA not in changes:
            return None
        log.info(
            "%s: no room of the raise goes to it first: its raise is given back",
            metadata(namespace).get("name"),
            extra=fields(namespace=str(metadata(namespace).get("name"))),
        )
        await self.patch(namespace, quota, released, changes)
        return 0

    async def _kept_for_given(
        self, namespace: Object, quota: Object, plan: QuotaPlan, given: Step, judgment: _Judgment
    ) -> bool:
        """Whether the raise standing still fits the project; then it is kept for the given
        rooms alone (`given`: the step of all of them, as planned now)."""
        if not await self._standing_fits(namespace, plan, judgment):
            return False
        await self._keep_given(namespace, quota, given.plan)
        return True

    async def _keep_given(self, namespace: Object, quota: Object, given_plan: QuotaPlan) -> None:
        """The raise standing, kept for the given rooms alone: `given_plan` (the step of the
        given rooms as planned now) capped, key by key, at the annotation standing, so it still
        fits the project while the rooms of migrations that ended, or written unjudged, go,
        and the record names the given rooms only. Nothing is written where that is
        what stands."""
        standing = namespace_limit(annotations_of(namespace).get(CATTLE_ANNOTATION_RESOURCE_QUOTA))
        ceiling = standing.hard() if standing is not None else {}
        hard = {
            key: str(ceiling[key])
            if key in ceiling and Quantity.parse(value) > ceiling[key]
            else value
            for key, value in given_plan.hard.items()
        }
        kept_plan = dataclasses.replace(given_plan, hard=hard)
        changes = annotation_patch(namespace, kept_plan)
        if changes is None or CATTLE_ANNOTATION_RESOURCE_QUOTA not in changes:
            return
        await self.patch(namespace, quota, kept_plan, changes)

    async def _standing_fits(self, namespace: Object, plan: QuotaPlan, judgment: _Judgment) -> bool:
        """Whether the raise standing on `namespace` (its given rooms as they were written)
        still fits its Rancher project as the project stands, siblings' waits aside."""
        standing = annotations_of(namespace).get(CATTLE_ANNOTATION_RESOURCE_QUOTA)
        if standing is None:
            return False
        judged = {CATTLE_ANNOTATION_RESOURCE_QUOTA: standing}
        return await self.project_room.lacking(namespace, plan, judged, None, judgment) is None


# The Rancher project's room -----------------------------------------------------------------------


def project_index(namespace: Object) -> list[str]:
    """The project id (``<cluster>:<project>``) the namespace names in field.cattle.io/projectId,
    if any: what a ProjectRoom's `members` looks up. A tenant's `edit` role has no verb on
    namespaces, but Rancher gives a project member who may create namespaces every verb on the
    project's namespaces (`<project>-namespaces-edit`): such a member may edit this annotation
    and our records on them, as it may Rancher's quota annotation (docs/security.md row 5m')."""
    project = annotations_of(namespace).get(PROJECT_ID_ANNOTATION)
    return [project] if project else []


class ProjectReader:
    """Reads the Rancher project of a namespace, with a short cache."""

    def __init__(self, client: ApiClient, clock: Clock) -> None:
        self.client = client
        self.clock = clock
        self.permission = Permission(
            "read Rancher projects",
            "a raise through Rancher's annotation is written without checking the project's "
            "room; grant get on projects.management.cattle.io",
            clock,
        )
        self._cache: dict[tuple[str, str], tuple[float, ProjectQuota | None]] = {}

    async def project_of(self, namespace: Mapping[str, Any]) -> ProjectQuota | None:
        """The namespace's project, or None (none named, not there, not readable now)."""
        reference = project_reference(namespace)
        if reference is None:
            return None
        now = self.clock.monotonic()
        cached = self._cache.get(reference)
        if cached is not None and now - cached[0] < PROJECT_TTL:
            return cached[1]
        if not self.permission.allowed():
            return None
        cluster, name = reference
        try:
            found: ProjectQuota | None = ProjectQuota.from_object(
                await self.client.get(PROJECTS, name, cluster)
            )
        except errors.NotFound:
            found = None
        except errors.Forbidden as error:
            self.permission.refused(error)
            return None
        except errors.ApiError as error:
            log.info("cannot read Rancher project %s/%s now: %s", cluster, name, error)
            return None  # an optional check: the raise is not held up for it
        self.permission.granted()
        self._cache[reference] = (now, found)
        return found


class ProjectRoom:
    """Whether a namespace's Rancher project has room for a raise through Rancher's annotation,
    counting as taken the rooms its sibling namespaces wait for that come earlier in KubeVirt's
    order (`demands`), and the Warning while it has not (once per change)."""

    def __init__(
        self,
        reader: ProjectReader,
        recorder: EventRecorder,
        members: Callable[[str], list[Object]],
        demands: ProjectDemands | None = None,
        siblings_waiting: Callable[[str, str], Awaitable[list[Step]]] | None = None,
    ) -> None:
        self.reader = reader
        self.recorder = recorder
        self.members = members
        """The cached namespaces naming a project id (`project_index`), read through the
        namespaces' pending writes (generic/pendingwrites.py): the namespace and its siblings as
        we last wrote them, so a sibling queued at once does not judge against an annotation we
        replaced. Asked only once the project is read, never per reconcile of a namespace
        whose raise needs no verdict."""
        self.demands = demands if demands is not None else ProjectDemands(lambda _key: None)
        """Who waits for each project's room, queued when room moves (projectdemands.py)."""
        self.siblings_waiting = siblings_waiting or self._recorded
        """(project id, namespace) -> the steps the project's other namespaces have not been
        given, planned from the caches now (the reconciler's); by default as they recorded
        them."""
        self._reported: dict[str, str] = {}
        """Namespace -> the project's lack of room last reported (a Warning once per change)."""

    async def _recorded(self, project: str, besides: str) -> list[Step]:
        """The siblings' waiting steps as they recorded them (no planner given)."""
        return self.demands.waiting(project, besides)

    async def lacking(
        self,
        namespace: Object,
        plan: QuotaPlan,
        changes: Mapping[str, Any] | None,
        ahead_of: OrderKey | None = None,
        judgment: _Judgment | None = None,
    ) -> NoRoom | None:
        """Whether the Rancher project lacks room for the raise: before writing one (when the
        project can be read), or, with our raise standing, as Rancher's condition says. With
        `ahead_of` (the order of the raise's last room not given yet), the rooms sibling
        namespaces wait for that come earlier count as taken (`queued_verdict`). `judgment`: the
        write's (its siblings planned and the members summed once for all its steps); a new
        one, counting the namespace as it stands, without."""
        if not plan.holds_room:
            return None
        raised = (changes or {}).get(CATTLE_ANNOTATION_RESOURCE_QUOTA)
        if raised is not None:
            judgment = judgment or _Judgment(self, namespace, None)
            return await self._raise_verdict(judgment, raised, ahead_of)
        if changes is not None or ANNOTATION_RANCHER_BASE not in annotations_of(namespace):
            return None  # no raise of ours standing (or records to drop first)
        verdict = refusal_verdict(namespace, None, ())
        if verdict is None:
            return None
        project = await self.reader.project_of(namespace)
        return refusal_verdict(namespace, project, self._members(project))

    async def judged(self, namespace: Object) -> bool:
        """Whether a raise of `namespace` is judged against its project (the project can be
        read now): a raise the project was not asked about is never written in part."""
        return await self.reader.project_of(namespace) is not None

    async def _raise_verdict(
        self, judgment: _Judgment, raised: str, ahead_of: OrderKey | None
    ) -> NoRoom | None:
        """`lacking` of a raise to `raised`: against the project as it stands, then, with
        `ahead_of`, behind the siblings' earlier rooms."""
        project = await self.reader.project_of(judgment.namespace)
        if project is None:
            return None
        totals = judgment.totals(project)
        verdict = lacks_alone(totals, raised)
        if verdict is not None or ahead_of is None:
            return verdict
        return await self._behind_siblings(judgment, totals, raised, ahead_of)

    async def _behind_siblings(
        self, judgment: _Judgment, totals: MemberTotals, raised: str, ahead_of: OrderKey
    ) -> NoRoom | None:
        """The verdict on a raise that fits the project as it stands, once the rooms its
        siblings wait for ahead of it are counted as taken (rancherpath.waits_behind)."""
        waiting = [*await judgment.siblings_waiting(totals.project.id), *judgment.own]
        first = waits_behind(waiting, ahead_of, totals, raised)
        if not first:
            return None
        return queued_verdict(
            [step.describe() for step in first],
            [(step.namespace, step.room.migration_uid) for step in first],
        )

    async def recorded(
        self, namespace: Object, changes: dict[str, Any] | None, judgment: _Judgment
    ) -> dict[str, Any] | None:
        """`changes`, a raise `lacking` let through, as written: where its project could not be
        read (no judgment), the record names only the rooms given before (a transient read
        error gives no room ahead of the order); None: nothing to write."""
        if changes is None or await self.judged(namespace):
            return changes
        given = {step.room.migration_uid for step in judgment.own}
        return unjudged_record(namespace, changes, given)

    async def settle(
        self,
        project: str | None,
        judgment: _Judgment,
        waiting: Sequence[Step],
        *,
        wrote: bool,
        no_room: NoRoom | None = None,
    ) -> None:
        """After a write's judgment: what the namespace's project has not given it yet,
        whether its annotation was written (its waiting siblings are judged again then), the
        siblings' migrations it waits behind (projectdemands.py); where the project's wave
        awaited this judgment, whom it goes on with (`next_in_wave`)."""
        demands, name = self.demands, judgment.name
        if project is None:
            demands.forget(name)
            return
        behind = no_room.behind if no_room is not None else ()
        demands.record(project, name, waiting, wrote=wrote, behind=behind)
        if no_room is not None and demands.heading(project, name):
            to = await self.next_in_wave(judgment, waiting, no_room, demands.firsts(project))
            demands.advance(project, name, to)

    async def next_in_wave(
        self,
        judgment: _Judgment,
        waiting: Sequence[Step],
        no_room: NoRoom,
        firsts: Mapping[str, Step],
    ) -> str | None:
        """Whom the project's wave judges after the judged namespace, which still waits
        (projectdemands.py): no one where it waits behind a sibling's earlier room, or where
        its own first waiting room could fit once the rooms given to later migrations are back
        (it holds every later room back: rancherpath.MemberTotals.eventual); else the first in
        KubeVirt's order of `firsts` (the waves's others, by their first waiting room) whose
        first room fits the project as it stands. One planning of the siblings at most (the judgment's)."""
        if no_room.first or not waiting:
            return None
        project = await self.reader.project_of(judgment.namespace)
        if project is None:
            return None
        totals = judgment.totals(project)
        steps = [*await judgment.siblings_waiting(project.id), *judgment.own]
        if totals.eventual(steps).could_fit(waiting[0]):
            return None
        for name, step in sorted(firsts.items(), key=lambda item: item[1].order):
            if name != judgment.name and totals.fits(name, step.annotation):
                return name
        return None

    def _members(self, project: ProjectQuota | None) -> list[Object]:
        """The project's namespaces (`members`: our writes the cache does not show yet applied;
        none without a project: no verdict then)."""
        if project is None:
            return []
        return self.members(project.id)

    def report(
        self,
        namespace: Object,
        quota: Object,
        plan: QuotaPlan,
        snapshot: NamespaceSnapshot,
        no_room: NoRoom | None,
        *,
        held: Collection[str] | None = None,
    ) -> None:
        """A Warning once per change while the raise is held back: where the project lacks the
        room, ProjectHasNoRoom on the quota, the namespace and every migration holding room;
        where the room goes first to sibling namespaces' migrations, the Warning naming them on
        the quota, the namespace and the migrations held (`held`, by name; None: every one)."""
        name = str(metadata(namespace).get("name"))
        if no_room is None:
            self._reported.pop(name, None)
            return
        if self._reported.get(name) == no_room.message:
            return
        self._reported[name] = no_room.message
        log.warning("%s: %s", name, no_room.message, extra=fields(namespace=name))
        reason = PROJECT_QUEUED_REASON if no_room.first else PROJECT_NO_ROOM_REASON
        targets = room_event_targets(namespace, quota, plan, snapshot)
        if held is not None:
            migrations = [m for m in snapshot.migrations if metadata(m).get("name") in held]
            targets = [quota, namespace, *migrations]
        for target in targets:
            self.recorder.event(target, WARNING, reason, no_room.message)

    def forget(self, namespace: str) -> None:
        """The namespace is no longer ours: nothing reported or waited for there."""
        self._reported.pop(namespace, None)
        self.demands.forget(namespace)


class _Judgment:
    """One write's judgments of a namespace against its Rancher project: the siblings' waiting
    rooms planned once and the project's members summed once (rancherpath.MemberTotals),
    however many of the write's steps are judged; the namespace counted at `keeps` (the raise
    for the rooms it keeps; None: its annotation as it stands) where a sibling's room is judged.
    Lives for one write, under the project's lock; reads the caches when first asked."""

    def __init__(
        self,
        room: ProjectRoom,
        namespace: Object,
        keeps: str | None,
        own: Sequence[Step] = (),
    ) -> None:
        self.room = room
        self.own = [step for step in own if step.given]
        """The namespace's own given steps (rancherpath.MemberTotals.eventual reads when each was
        given)."""
        self.namespace = namespace
        self.name = str(metadata(namespace).get("name"))
        self.keeps = (
            keeps
            if keeps is not None
            else annotations_of(namespace).get(CATTLE_ANNOTATION_RESOURCE_QUOTA)
        )
        self._totals: tuple[ProjectQuota, MemberTotals] | None = None
        self._waiting: list[Step] | None = None

    @classmethod
    def of(
        cls, room: ProjectRoom, namespace: Object, steps: Sequence[Step], flags: Sequence[bool]
    ) -> _Judgment:
        """The judgment of a write of `namespace` whose ladder is `steps`, `flags` given: the
        namespace counted at the raise for the rooms it keeps (rancherpath.kept_raise)."""
        keeps, own = kept_raise(namespace, steps, flags)
        return cls(room, namespace, keeps, own)

    def totals(self, project: ProjectQuota) -> MemberTotals:
        """The members summed (once per project read)."""
        if self._totals is None or self._totals[0] is not project:
            members = self.room._members(project)
            self._totals = (project, MemberTotals(project, members, self.name, self.keeps))
        return self._totals[1]

    async def siblings_waiting(self, project: str) -> list[Step]:
        """The project's other namespaces' steps, `given` marked (planned once): the rooms
        they have not been given, and those they have (rancherpath.MemberTotals.eventual)."""
        if self._waiting is None:
            self._waiting = await self.room.siblings_waiting(project, self.name)
        return self._waiting
