"""Rancher projects, read when a raise goes through Rancher's annotation, and their room.

A namespace of a Rancher project names it in ``field.cattle.io/projectId`` (``<cluster>:<project>``);
the project is a management.cattle.io/v3 Project named ``<project>`` in namespace ``<cluster>``,
present where Rancher runs in the cluster itself (Harvester's embedded Rancher), absent on a
cluster imported into another Rancher. It is read only before a raise through the annotation and
while Rancher marks the namespace as not fitting (projectroom.py): a GET, kept `TTL` seconds. A
project that is not there (no such kind, no such project) is None for the same time; a refusal
(no RBAC for it) closes the reads for a backoff (permission.py), logged once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

from ...generic import errors
from ...generic.client import ApiClient
from ...generic.clock import Clock
from ...generic.events import WARNING, EventRecorder
from ...generic.logformat import fields
from ...generic.meta import annotations_of, metadata
from ...generic.permission import Permission
from ...generic.resource import Object
from ...util.annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA
from ...util.rancher.project import (
    PROJECT_ID_ANNOTATION,
    PROJECTS,
    ProjectQuota,
    project_reference,
)
from ...util.rancher.projectroom import NoRoom, raise_verdict, refusal_verdict
from ...util.resourcequota.base import ANNOTATION_RANCHER_BASE
from ...util.resourcequota.plan import NamespaceSnapshot, QuotaPlan
from .reports import room_event_targets

log = logging.getLogger(__name__)

PROJECT_NO_ROOM_REASON: Final = "ProjectHasNoRoom"
"""Warning event reason when a raise through Rancher's annotation does not fit its project."""
TTL: Final = 5.0
"""Seconds a project read (or its absence) is used: a raised project limit is seen that soon."""
PROJECT_INDEX: Final = "rancher-project"
"""The namespace cache's index of the project each namespace names (`project_index`)."""


def project_index(namespace: Object) -> list[str]:
    """The project id (``<cluster>:<project>``) the namespace names in field.cattle.io/projectId,
    if any: what a ProjectRoom's `members` looks up. Only Rancher and cluster administrators
    write a namespace's annotations (a tenant's `edit` role has no verb on namespaces)."""
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
        if cached is not None and now - cached[0] < TTL:
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
    and the ProjectHasNoRoom Warning while it has not (once per change)."""

    def __init__(
        self,
        reader: ProjectReader,
        recorder: EventRecorder,
        members: Callable[[str], list[Object]],
    ) -> None:
        self.reader = reader
        self.recorder = recorder
        self.members = members
        """The cached namespaces naming a project id (`project_index`): the namespace and its
        siblings. Asked only once the project is read, never per reconcile of a namespace
        whose raise needs no verdict."""
        self._reported: dict[str, str] = {}
        """Namespace -> the project's lack of room last reported (a Warning once per change)."""

    async def lacking(
        self, namespace: Object, plan: QuotaPlan, changes: Mapping[str, Any] | None
    ) -> NoRoom | None:
        """Whether the Rancher project lacks room for the raise: before writing one (when the
        project can be read), or, with our raise standing, as Rancher's condition says."""
        if not plan.holds_room:
            return None
        raised = (changes or {}).get(CATTLE_ANNOTATION_RESOURCE_QUOTA)
        if raised is not None:
            project = await self.reader.project_of(namespace)
            return raise_verdict(namespace, raised, project, self._members(project))
        if changes is not None or ANNOTATION_RANCHER_BASE not in annotations_of(namespace):
            return None  # no raise of ours standing (or records to drop first)
        verdict = refusal_verdict(namespace, None, ())
        if verdict is None:
            return None  # Rancher has not marked it: nothing to read the project for
        project = await self.reader.project_of(namespace)
        return refusal_verdict(namespace, project, self._members(project)) if project else verdict

    async def judged(self, namespace: Object) -> bool:
        """Whether a raise of `namespace` is judged against its project (the project can be
        read now): a raise the project was not asked about is never written in part."""
        return await self.reader.project_of(namespace) is not None

    def _members(self, project: ProjectQuota | None) -> list[Object]:
        """The project's namespaces in the cache (none without a project: no verdict then)."""
        return self.members(project.id) if project is not None else []

    def report(
        self,
        namespace: Object,
        quota: Object,
        plan: QuotaPlan,
        snapshot: NamespaceSnapshot,
        no_room: NoRoom | None,
    ) -> None:
        """A Warning on the quota, the namespace and every migration holding room, once per
        change, while the Rancher project lacks room for the raise."""
        name = str(metadata(namespace).get("name"))
        if no_room is None:
            self._reported.pop(name, None)
            return
        if self._reported.get(name) == no_room.message:
            return
        self._reported[name] = no_room.message
        log.warning("%s: %s", name, no_room.message, extra=fields(namespace=name))
        for target in room_event_targets(namespace, quota, plan, snapshot):
            self.recorder.event(target, WARNING, PROJECT_NO_ROOM_REASON, no_room.message)

    def forget(self, namespace: str) -> None:
        self._reported.pop(namespace, None)
