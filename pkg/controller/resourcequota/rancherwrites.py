"""The room mode's raises where Rancher protects its quota: through Rancher's annotation.

Rancher 2.14.6+/2.15.2+ refuses every write of its labelled default quota but its own agent's.
Where the base is Rancher's and Rancher refused a quota write (its own refusal only,
errors.denied_by_rancher, and per namespace), or a raise through the annotation is under way
(recorded on the namespace, so a restarted controller finishes it), the plan is written into
the namespace's field.cattle.io/resourceQuota instead (util/resourcequota/rancherpath.py), and
Rancher's agent copies it into the quota within the project's limits. A raise the project has no
room for is held back and checked again PROJECT_RECHECK seconds later (projects.ProjectRoom), and
so is one whose room goes first to migrations of sibling namespaces earlier in KubeVirt's order
(projectdemands.py), which are queued again as soon as such a room is given or goes.
Not thread-safe: event loop only, per namespace from one worker at a time; one project's
namespaces judge and write one at a time (the project's lock).
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ...config.metrics import QuotaMetrics
from ...generic import errors
from ...generic.events import NORMAL, WARNING, EventRecorder
from ...generic.logformat import fields
from ...generic.meta import annotations_of, metadata
from ...generic.pendingwrites import PendingWrites
from ...generic.resource import Object
from ...util.annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA
from ...util.quantity import Quantity
from ...util.rancher.project import PROJECT_ID_ANNOTATION, namespace_limit
from ...util.resourcequota.base import ANNOTATION_RANCHER_BASE, RANCHER
from ...util.resourcequota.plan import NamespaceSnapshot, QuotaPlan
from ...util.resourcequota.rancherpath import (
    Step,
    annotation_patch,
    given,
    kept,
    ladder,
    last_waiting,
)
from ..quotawriter import QuotaWriter
from .rancherprojects import Judgment, ProjectRoom
from .reports import NamespaceReports, room_event_targets

log = logging.getLogger(__name__)

RANCHER_DENIAL_REASON: Final = "QuotaWriteDeniedByRancher"
"""Warning event reason when Rancher's webhook refuses a write of its default quota."""
PROJECT_RECHECK: Final = 30.0
"""Seconds until a raise held back for its project's room is checked again (the project's limit
may be raised meanwhile; nothing else queues the namespace then)."""


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
        ahead of a sibling's earlier room. One `Judgment` serves every step judged here."""
        steps = ladder(namespace, plan)
        flags = given(namespace, steps)
        judgment = Judgment.of(self.project_room, namespace, steps, flags)
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
        wrote = await self._write_what_fits(
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

    async def _write_what_fits(
        self,
        namespace: Object,
        quota: Object,
        plan: QuotaPlan,
        steps: list[Step],
        *,
        flags: list[bool],
        judgment: Judgment,
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
        them alone (`GivenRooms`), their growth waiting: no given room is lowered or handed to a
        sibling for another's growth. Only where the raise standing no longer fits are smaller
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
                if await GivenRooms(self.project_room, self._patch).kept_for_given(
                    namespace, quota, plan, steps[count], judgment
                ):
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
            await self._patch(namespace, quota, step.plan, changes)
            return count
        if (
            given_count
            and not standing_judged
            and await GivenRooms(self.project_room, self._patch).kept_for_given(
                namespace, quota, plan, steps[0], judgment
            )
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
        await self._patch(namespace, quota, released, changes)
        return 0

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
class GivenRooms:
    """A raise standing for rooms given to a namespace, kept for them alone where their growth
    does not fit its Rancher project (RancherPath._write_what_fits). `patch`
    writes the annotation as RancherPath does (counted, logged, told)."""

    project_room: ProjectRoom
    patch: Callable[[Object, Object, QuotaPlan, Mapping[str, Any]], Awaitable[None]]

    async def kept_for_given(
        self, namespace: Object, quota: Object, plan: QuotaPlan, given: Step, judgment: Judgment
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

    async def _standing_fits(self, namespace: Object, plan: QuotaPlan, judgment: Judgment) -> bool:
        """Whether the raise standing on `namespace` (its given rooms as they were written)
        still fits its Rancher project as the project stands, siblings' waits aside."""
        standing = annotations_of(namespace).get(CATTLE_ANNOTATION_RESOURCE_QUOTA)
        if standing is None:
            return False
        judged = {CATTLE_ANNOTATION_RESOURCE_QUOTA: standing}
        return await self.project_room.lacking(namespace, plan, judged, None, judgment) is None
