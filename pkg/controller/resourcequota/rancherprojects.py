"""Rancher projects, read when a raise goes through Rancher's annotation, and their room.

A namespace of a Rancher project names it in ``field.cattle.io/projectId`` (``<cluster>:<project>``);
the project is a management.cattle.io/v3 Project named ``<project>`` in namespace ``<cluster>``,
present where Rancher runs in the cluster itself (Harvester's embedded Rancher), absent on a
cluster imported into another Rancher. It is read only before a raise through the annotation and
while Rancher marks the namespace as not fitting (rancher/project.py): a GET, kept `TTL` seconds. A
project that is not there (no such kind, no such project) is None for the same time; a refusal
(no RBAC for it) closes the reads for a backoff (permission.py), logged once.

A raise that fits the project is judged again with the rooms the project's other namespaces
have not been given counted as taken, those earlier in KubeVirt's order that could fit once
the rooms given to later migrations are back
(util/resourcequota/rancherpath.py, planned by projectdemands.ProjectSiblingsView): where it
no longer fits, it waits for them, and the Warning names the first of each
(PROJECT_QUEUED_REASON).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
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
    NoRoom,
    ProjectQuota,
    project_reference,
    queued_verdict,
    refusal_verdict,
)
from ...util.resourcequota.base import ANNOTATION_RANCHER_BASE
from ...util.resourcequota.plan import NamespaceSnapshot, QuotaPlan
from ...util.resourcequota.rancherpath import (
    MemberTotals,
    OrderKey,
    Step,
    kept_raise,
    lacks_alone,
    unjudged_record,
    waits_behind,
)
from .projectdemands import ProjectDemands
from .reports import room_event_targets

log = logging.getLogger(__name__)

PROJECT_NO_ROOM_REASON: Final = "ProjectHasNoRoom"
"""Warning event reason when a raise through Rancher's annotation does not fit its project."""
PROJECT_QUEUED_REASON: Final = "WaitingForEarlierMigrationsInProject"
"""Warning event reason when a raise would fit its project but the room goes first to
migrations of sibling namespaces earlier in KubeVirt's order (projectdemands.py)."""
TTL: Final = 5.0
"""Seconds a project read (or its absence) is used: a raised project limit is seen that soon."""
PROJECT_INDEX: Final = "rancher-project"
"""The namespace cache's index of the project each namespace names (`project_index`)."""


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
        judgment: Judgment | None = None,
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
            judgment = judgment or Judgment(self, namespace, None)
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
        self, judgment: Judgment, raised: str, ahead_of: OrderKey | None
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
        self, judgment: Judgment, totals: MemberTotals, raised: str, ahead_of: OrderKey
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
        self, namespace: Object, changes: dict[str, Any] | None, judgment: Judgment
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
        judgment: Judgment,
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
        judgment: Judgment,
        waiting: Sequence[Step],
        no_room: NoRoom,
        firsts: Mapping[str, Step],
    ) -> str | None:
        """Whom the project's wave judges after the judged namespace, which still waits
        (projectdemands.py): no one where it waits behind a sibling's earlier room, or where
        its own first waiting room could fit once the rooms given to later migrations are back
        (it holds every later room back: rancherpath.EventualFit); else the first in KubeVirt's
        order of `firsts` (the waves's others, by their first waiting room) whose first room
        fits the project as it stands. One planning of the siblings at most (the judgment's)."""
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


class Judgment:
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
        """The namespace's own given steps (rancherpath.EventualFit reads when each was
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
    ) -> Judgment:
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
        they have not been given, and those they have (rancherpath.EventualFit)."""
        if self._waiting is None:
            self._waiting = await self.room.siblings_waiting(project, self.name)
        return self._waiting
