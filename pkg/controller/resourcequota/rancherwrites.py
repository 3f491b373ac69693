"""The room mode's raises where Rancher protects its quota: through Rancher's annotation.

Rancher 2.14.6+/2.15.2+ refuses every write of its labelled default quota but its own agent's.
Where the base is Rancher's and Rancher refused a quota write (its own refusal only,
errors.denied_by_rancher, and per namespace), or a raise through the annotation is under way
(recorded on the namespace, so a restarted controller finishes it), the plan is written into
the namespace's field.cattle.io/resourceQuota instead (util/resourcequota/rancherpath.py), and
Rancher's agent copies it into the quota within the project's limits. A raise the project has no
room for is held back and checked again PROJECT_RECHECK seconds later (projects.ProjectRoom).
Not thread-safe: event loop only, per namespace from one worker at a time.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ...config.metrics import QuotaMetrics
from ...generic import errors
from ...generic.events import NORMAL, WARNING, EventRecorder
from ...generic.logformat import fields
from ...generic.meta import annotations_of, metadata
from ...generic.resource import Object
from ...util.annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA
from ...util.resourcequota.base import ANNOTATION_RANCHER_BASE, RANCHER
from ...util.resourcequota.plan import NamespaceSnapshot, QuotaPlan
from ...util.resourcequota.priorityprefix import prefixes
from ...util.resourcequota.rancherpath import annotation_patch
from ..quotawriter import QuotaWriter
from .rancherprojects import ProjectRoom
from .reports import NamespaceReports, room_event_targets

log = logging.getLogger(__name__)

RANCHER_DENIAL_REASON: Final = "QuotaWriteDeniedByRancher"
"""Warning event reason when Rancher's webhook refuses a write of its default quota."""
PROJECT_RECHECK: Final = 30.0
"""Seconds until a raise held back for its project's room is checked again (the project's limit
may be raised meanwhile; nothing else queues the namespace then)."""


@dataclass
class RancherPath:
    """Which namespaces' raises go through Rancher's annotation, and those writes."""

    writer: QuotaWriter
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
        QuotaWriter.patch_rancher_annotation), unless it is a raise the Rancher project has no room for. Returns the seconds until the
        project's room is checked again while it has none, else None."""
        changes = annotation_patch(namespace, plan)
        no_room = await self.project_room.lacking(namespace, plan, changes)
        self.project_room.report(namespace, quota, plan, snapshot, no_room)
        if no_room is not None:  # the raise is held back (or stands, refused by Rancher)
            self.reports.explain_blocked(snapshot, quota, plan, cause=no_room.message)
            await self._write_what_fits(namespace, quota, plan)
            return PROJECT_RECHECK
        if changes is None:
            self.reports.explain_blocked(snapshot, quota, plan)
            return None
        await self._patch(namespace, quota, plan, changes)
        return None

    async def _write_what_fits(self, namespace: Object, quota: Object, plan: QuotaPlan) -> None:
        """Where the project lacks room for the whole raise, the raise for as many migrations
        as it has room for, in KubeVirt's priority order (priorityprefix.py): the first fitting
        plan of `prefixes` is written, if it changes the annotation. Only a plan whose raise
        was judged (the project read): where it cannot be read, nothing is written."""
        if len(plan.rooms.rooms) < 2 or not await self.project_room.judged(namespace):
            return
        for fewer in prefixes(plan):
            changes = annotation_patch(namespace, fewer)
            if changes is None or CATTLE_ANNOTATION_RESOURCE_QUOTA not in changes:
                continue
            if await self.project_room.lacking(namespace, fewer, changes) is not None:
                continue
            holders = ", ".join(room.vm_name for room in fewer.rooms.rooms)
            log.info(
                "%s: the project has room for the raise of %s only (KubeVirt's priority order)",
                metadata(namespace).get("name"),
                holders,
                extra=fields(namespace=str(metadata(namespace).get("name"))),
            )
            await self._patch(namespace, quota, fewer, changes)
            return

    async def _patch(
        self, namespace: Object, quota: Object, plan: QuotaPlan, changes: Mapping[str, Any]
    ) -> None:
        """The annotation write itself, counted, logged and told in an Event on the quota."""
        name = str(metadata(namespace).get("name"))
        try:
            await self.writer.patch_rancher_annotation(namespace, changes)
        except errors.Conflict:
            self.metrics.quota_writes.labels("conflict").inc()
            raise
        except errors.ApiError:
            self.metrics.quota_writes.labels("error").inc()
            raise
        self.metrics.quota_writes.labels("written").inc()
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

    def forget(self, namespace: str) -> None:
        """The namespace is no longer ours: learned again on Rancher's next refusal there."""
        self.protected.discard(namespace)
        self.project_room.forget(namespace)
