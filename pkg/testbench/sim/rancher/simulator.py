"""Rancher's namespace resource-quota sync, simulated on a real API server.

`RancherQuotaSync` runs what Rancher's cattle-cluster-agent does for namespace quotas, for the
namespaces of the projects it is given (a namespace joins a project through its
`field.cattle.io/projectId` annotation, `<cluster>:<project>`; others are left alone), as
released in v2.14 and v2.15 (rancher/rancher release/v2.14 096e380e, release/v2.15 2e25858e,
`pkg/controllers/managementuser/resourcequota`):

- `resourceQuotaSyncController`, on every namespace event (create or update, any change at all):
  derives the default ResourceQuota from the namespace's `field.cattle.io/resourceQuota` and the
  project (`derive.derive`: no namespace default, no quota); before a create or an update it
  writes the merged limit back into the annotation and checks the project fit against every other
  namespace of the project, validated or not (condition `ResourceQuotaValidated` in
  `cattle.io/status`, "Resource quota [...] exceeds project limit"); then creates the quota
  (generateName `default-`, label `resourcequota.management.cattle.io/default-resource-quota`;
  keys that do not fit at "0"), replaces its whole `spec` when `spec.hard` differs and it fits
  (else leaves it as it is), or deletes it and strips the annotation;
- `resourceQuotaUsedLimitController`, on the same events: tracks the namespace's project in
  `field.cattle.io/resourceQuotaProjectId` and writes the project's `usedLimit` (the sum of its
  validated namespaces' annotations) into its Project object (`projects.ProjectObjects`);
- it has no handler on ResourceQuotas: a hand edit of `spec.hard` stands until the next namespace
  or project event, or `agent_restart()` (a cattle-cluster-agent restart relists every namespace);
- `set_project` is a project update: every namespace of the project is synced again.

It reads the existing quota with a live list rather than from a cache (Rancher uses an informer
cache without a handler; a live read makes tests deterministic). Not modelled: the LimitRange for
`containerDefaultResourceLimit`, and moves between projects beyond the bookkeeping annotation.
The write protection of v2.14.6+/v2.15.2+ is rancher-webhook's, served by
`twin.RancherWebhookTwin` (pass its `sudo` client as `quota_client`).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from ....generic.client import ApiClient
from ....generic.clock import REAL_CLOCK, Clock
from ....generic.controller import ControllerFactory
from ....generic.informer import SharedInformerFactory
from ....generic.resource import NAMESPACES, RESOURCE_QUOTAS, Object
from ....util import resources
from ....util.annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA, LABEL_DEFAULT_RESOURCE_QUOTA
from ....util.resources import ResourceList
from .derive import (
    CONDITION_INIT,
    CONDITION_VALIDATED,
    CREATOR_LABEL,
    PROJECT_ID_ANNOTATION,
    QUOTA_PROJECT_ID_ANNOTATION,
    STATUS_ANNOTATION,
    Derived,
    Operation,
    Project,
    RancherFlavour,
    RancherLimit,
    annotation_text,
    condition_is_set,
    derive,
    is_quota_fit,
    limit_from_keys,
    operation,
    requested_limit,
    set_condition,
    spec_hard,
    zero_out,
)
from .projects import ProjectObjects

log = logging.getLogger(__name__)

DEFAULT_VERSION = "2.12"
AGENT_USER_AGENT = "agent/v2.12.0 (linux/amd64) kubernetes/$Format"
"""The user agent of the agent's quota writes: client-go's default for Rancher's agent binary
(`agent`), so the API server names their field manager `agent`, as on a Rancher cluster."""
DEFAULT_WORKERS = 2
IDLE_POLL = 0.05
"""Seconds between looks while waiting for the sync to go idle."""


@dataclass(frozen=True)
class SyncAction:
    """One write the sync made to a ResourceQuota (for reports and assertions)."""

    namespace: str
    operation: Operation
    hard: dict[str, str] | None
    at: float


class RancherQuotaSync:
    """Rancher's namespace quota sync for the given projects (see the module docstring)."""

    def __init__(
        self,
        client: ApiClient,
        *,
        projects: Iterable[Project] = (),
        version: str = DEFAULT_VERSION,
        clock: Clock = REAL_CLOCK,
        workers: int = DEFAULT_WORKERS,
        quota_client: ApiClient | None = None,
        sync_delay: float = 0.0,
    ) -> None:
        """`sync_delay`: seconds between dequeuing a namespace and syncing it, as a busy agent's
        queue takes (its reset of a hand-edited quota then lands after writes made meanwhile)."""
        self.client = client
        self.sync_delay = sync_delay
        self.quota_client = quota_client or client
        """Writes ResourceQuotas: Rancher's sudo account where its write protection is on."""
        self.flavour = RancherFlavour.parse(version)
        self.clock = clock
        self.workers = workers
        self.projects: dict[str, Project] = {p.annotation_id: p for p in projects}
        self.actions: list[SyncAction] = []
        self.syncs: dict[str, int] = {}
        self.project_objects = ProjectObjects(client)
        """The projects as Project objects on the cluster, with the usedLimit computed here."""
        self.used_limits: dict[str, RancherLimit] = {}
        """Project annotation id -> the usedLimit last computed."""
        self._factory: ControllerFactory | None = None
        self._busy = 0
        self._written: dict[str, str] = {}
        self._writer: ApiClient | None = None
        """quota_client's identity with the agent's user agent (AGENT_USER_AGENT), while started."""

    # Lifecycle ----------------------------------------------------------------------------------

    async def start(self, *, sync_timeout: float | None = 30.0) -> None:
        """Starts a fresh agent: a namespace informer whose initial list syncs every namespace."""
        if self._factory is not None:
            return
        self._writer = ApiClient(self.quota_client.config, user_agent=AGENT_USER_AGENT)
        for project in self.projects.values():
            await self.project_objects.publish(project)
        factory = ControllerFactory(
            self.client,
            SharedInformerFactory(self.client, clock=self.clock),
            clock=self.clock,
            workers=self.workers,
        )
        factory.namespaces().on_change("resourcequota-sync", self._sync)
        self._factory = factory
        if not await factory.start(sync_timeout=sync_timeout):
            await self.stop()
            raise TimeoutError(f"the namespace cache did not sync within {sync_timeout}s")
        controller = factory.namespaces()
        for key in controller.informer.store.list_keys():
            controller.enqueue_key(key)

    async def stop(self) -> None:
        if self._factory is not None:
            factory, self._factory = self._factory, None
            await factory.stop()
        if self._writer is not None:
            writer, self._writer = self._writer, None
            await writer.close()

    @property
    def writer(self) -> ApiClient:
        """The client of the agent's quota writes: quota_client's identity, the agent's user
        agent, once started (quota_client itself before)."""
        return self._writer or self.quota_client

    async def __aenter__(self) -> RancherQuotaSync:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def agent_restart(self, *, timeout: float | None = 30.0) -> None:
        """What killing the cattle-cluster-agent pod does: a new agent lists every namespace and
        syncs each one (resetting hand-edited quotas). Returns once that sync is done."""
        await self.stop()
        await self.start(sync_timeout=timeout)
        await self.wait_idle(timeout)

    async def wait_idle(self, timeout: float | None = 30.0) -> bool:
        """Waits until the sync has nothing left to do: no namespace queued or being synced, and
        the events of its own namespace writes (which sync again) seen and handled; idle on two
        looks in a row, so that an event between cache and queue is not missed. False after
        `timeout` seconds."""
        deadline = None if timeout is None else self.clock.monotonic() + timeout
        calm = 0
        while calm < 2:
            calm = calm + 1 if self.idle() else 0
            if deadline is not None and self.clock.monotonic() > deadline:
                return False
            await self.clock.sleep(IDLE_POLL)
        return True

    def idle(self) -> bool:
        """Nothing queued, nothing being synced, and the cache has caught up with our writes."""
        if self._factory is None:
            return True
        controller = self._factory.namespaces()
        if controller.queue.len() or self._busy:
            return False
        for name, written in self._written.items():
            cached = controller.informer.store.get(name)
            if cached is not None and not _at_least(_version(cached), written):
                return False
        return True

    # Projects -----------------------------------------------------------------------------------

    async def set_project(self, project: Project) -> None:
        """Adds or changes a project: its object is updated and, like a Project update, every
        namespace of it is synced."""
        self.projects[project.annotation_id] = project
        await self.project_objects.publish(project)
        self._enqueue_project(project.annotation_id)

    def remove_project(self, project: Project) -> None:
        """Forgets a project (its namespaces are left as they are)."""
        self.projects.pop(project.annotation_id, None)

    def _enqueue_project(self, annotation_id: str) -> None:
        if self._factory is None:
            return
        controller = self._factory.namespaces()
        for namespace in controller.informer.store.objects():
            if _annotations(namespace).get(PROJECT_ID_ANNOTATION) == annotation_id:
                controller.enqueue(None, _name(namespace))

    def project_of(self, namespace: Object) -> Project | None:
        return self.projects.get(_annotations(namespace).get(PROJECT_ID_ANNOTATION, ""))

    # The sync -----------------------------------------------------------------------------------

    async def _sync(self, key: str, namespace: Object | None) -> Object | None:
        self._busy += 1
        try:
            if namespace is None or (namespace.get("metadata") or {}).get("deletionTimestamp"):
                return None
            project = self.project_of(namespace)
            if project is None:
                return await self._track_used_limit(namespace)
            if self.sync_delay:
                await self.clock.sleep(self.sync_delay)
            self.syncs[key] = self.syncs.get(key, 0) + 1
            namespace = await self._sync_namespace(namespace, project)
            return await self._track_used_limit(namespace)
        finally:
            self._busy -= 1

    async def _sync_namespace(self, namespace: Object, project: Project) -> Object:
        name = _name(namespace)
        existing = await self._existing_quota(name)
        existing_hard = None
        if existing is not None:
            existing_hard = resources.parse_resource_list((existing.get("spec") or {}).get("hard"))
        derived = derive(
            _annotations(namespace).get(CATTLE_ANNOTATION_RESOURCE_QUOTA), project, self.flavour
        )
        op = operation(existing_hard, derived)
        if op is Operation.CREATE:
            assert derived is not None
            namespace = await self._create(namespace, project, derived)
        elif op is Operation.UPDATE:
            assert derived is not None and existing is not None
            namespace = await self._update(namespace, project, derived, existing)
        elif op is Operation.DELETE:
            assert existing is not None
            namespace = await self._delete(namespace, existing)
        return await self._mark_initialised(namespace)

    async def _existing_quota(self, namespace: str) -> Object | None:
        listed = await self.client.list_all(
            RESOURCE_QUOTAS, namespace, label_selector=f"{LABEL_DEFAULT_RESOURCE_QUOTA}=true"
        )
        return listed.items[0] if listed.items else None

    async def _create(self, namespace: Object, project: Project, derived: Derived) -> Object:
        fits, namespace, bad = await self._validate(namespace, project, derived)
        limit = derived.limit if fits else zero_out(derived.limit, bad)
        hard = spec_hard(limit.hard())
        labels = {LABEL_DEFAULT_RESOURCE_QUOTA: "true"}
        if self.flavour.creator_label:
            labels[CREATOR_LABEL] = "norman"
        await self.writer.create(
            RESOURCE_QUOTAS,
            {"metadata": {"generateName": "default-", "labels": labels}, "spec": {"hard": hard}},
            _name(namespace),
        )
        self._record(namespace, Operation.CREATE, hard)
        log.info("Creating default resource quota for namespace %s", _name(namespace))
        return namespace

    async def _update(
        self, namespace: Object, project: Project, derived: Derived, existing: Object
    ) -> Object:
        fits, namespace, _ = await self._validate(namespace, project, derived)
        if not fits:
            return namespace  # Rancher leaves the quota alone; only the condition says why
        spec = {"hard": spec_hard(derived.hard)}  # keys as Rancher converts them
        if self.flavour.skip_unchanged_writes and existing.get("spec") == spec:
            return namespace
        updated = copy.deepcopy(existing)
        updated["spec"] = spec  # the whole spec: extra keys, scopes and selectors go
        await self.writer.update(RESOURCE_QUOTAS, updated)
        self._record(namespace, Operation.UPDATE, spec["hard"])
        log.info("Updating default resource quota for namespace %s", _name(namespace))
        return namespace

    async def _delete(self, namespace: Object, existing: Object) -> Object:
        annotations = _annotations(namespace)
        if CATTLE_ANNOTATION_RESOURCE_QUOTA in annotations:
            stripped = copy.deepcopy(namespace)
            del stripped["metadata"]["annotations"][CATTLE_ANNOTATION_RESOURCE_QUOTA]
            namespace = await self.client.update(NAMESPACES, stripped)
            self._written[_name(namespace)] = _version(namespace)
        await self.writer.delete(RESOURCE_QUOTAS, _name(existing), _name(namespace))
        self._record(namespace, Operation.DELETE, None)
        log.info("Deleting default resource quota for namespace %s", _name(namespace))
        return namespace

    async def _validate(
        self, namespace: Object, project: Project, derived: Derived
    ) -> tuple[bool, Object, list[str]]:
        """validateAndSetNamespaceQuota: write the merged limit back into the annotation, check
        the namespace and every sibling against the project limit, set the condition."""
        project_limit = project.quota_limit
        if project_limit is None:
            return True, namespace, []
        updated = copy.deepcopy(namespace)
        updated["metadata"].setdefault("annotations", {})[CATTLE_ANNOTATION_RESOURCE_QUOTA] = (
            annotation_text(derived.limit)
        )
        namespace = await self._write_namespace(namespace, updated)
        fit = is_quota_fit(
            derived.hard, self._sibling_limits(namespace, project), project_limit.hard()
        )
        updated = copy.deepcopy(namespace)
        annotations = updated["metadata"].setdefault("annotations", {})
        annotations[STATUS_ANNOTATION] = set_condition(
            annotations.get(STATUS_ANNOTATION),
            CONDITION_VALIDATED,
            fit.fits,
            fit.message(),
            self.clock.now(),
        )
        namespace = await self._write_namespace(namespace, updated)
        return fit.fits, namespace, sorted(fit.exceeded)

    def _members(self, project: Project) -> list[Object]:
        """The project's namespaces, as the agent's cache has them."""
        assert self._factory is not None
        return [
            other
            for other in self._factory.namespaces().informer.store.objects()
            if _annotations(other).get(PROJECT_ID_ANNOTATION) == project.annotation_id
        ]

    def _sibling_limits(self, namespace: Object, project: Project) -> list[ResourceList]:
        """The requested limits of the project's other namespaces, validated or not (Rancher
        counts them all: a namespace marked not fitting may hold good keys)."""
        limits = []
        for other in self._members(project):
            if _name(other) == _name(namespace):
                continue
            requested = requested_limit(
                _annotations(other).get(CATTLE_ANNOTATION_RESOURCE_QUOTA), self.flavour
            )
            if requested is not None:
                limits.append(requested.hard())
        return limits

    # The used limit -------------------------------------------------------------------------------

    async def _track_used_limit(self, namespace: Object) -> Object:
        """calculateResourceQuotaUsed: keep `field.cattle.io/resourceQuotaProjectId` on the
        namespace's project and recompute the usedLimit of the project it was (and is) in."""
        annotations = _annotations(namespace)
        now = annotations.get(PROJECT_ID_ANNOTATION, "")
        before = annotations.get(QUOTA_PROJECT_ID_ANNOTATION, "")
        if now not in self.projects and before not in self.projects:
            return namespace  # another agent's namespace (tests share the cluster)
        if before and before != now:
            await self._compute_used_limit(before)
        elif now and before == now:
            await self._compute_used_limit(now)
        if before == now:
            return namespace
        updated = copy.deepcopy(namespace)
        updated_annotations = updated["metadata"].setdefault("annotations", {})
        if now:
            updated_annotations[QUOTA_PROJECT_ID_ANNOTATION] = now
        else:
            updated_annotations.pop(QUOTA_PROJECT_ID_ANNOTATION, None)
        return await self._write_namespace(namespace, updated)

    async def _compute_used_limit(self, annotation_id: str) -> None:
        """The sum of the requested limits of the project's validated, not deleting namespaces,
        written into its Project object when it changed (projects unknown here are left)."""
        project = self.projects.get(annotation_id)
        if project is None or project.limit is None:
            return
        total: ResourceList = {}
        for member in self._members(project):
            annotations = _annotations(member)
            if (member.get("metadata") or {}).get("deletionTimestamp"):
                continue
            if not condition_is_set(annotations.get(STATUS_ANNOTATION), CONDITION_VALIDATED, True):
                continue
            requested = requested_limit(
                annotations.get(CATTLE_ANNOTATION_RESOURCE_QUOTA), self.flavour
            )
            if requested is not None:
                total = resources.add(total, requested.hard())
        used = limit_from_keys({key: str(value) for key, value in total.items()})
        if self.used_limits.get(annotation_id) == used:
            return
        self.used_limits[annotation_id] = used
        await self.project_objects.write_used_limit(project, used)

    async def _mark_initialised(self, namespace: Object) -> Object:
        annotations = _annotations(namespace)
        if condition_is_set(annotations.get(STATUS_ANNOTATION), CONDITION_INIT, True):
            return namespace
        updated = copy.deepcopy(namespace)
        updated_annotations = updated["metadata"].setdefault("annotations", {})
        updated_annotations[STATUS_ANNOTATION] = set_condition(
            annotations.get(STATUS_ANNOTATION), CONDITION_INIT, True, "", self.clock.now()
        )
        return await self._write_namespace(namespace, updated)

    async def _write_namespace(self, current: Object, updated: Object) -> Object:
        """Updates the namespace (from v2.14 only when something changed; before, always, which
        the API server turns into a no-op when nothing did)."""
        if self.flavour.skip_unchanged_writes and updated == current:
            return current
        written = await self.client.update(NAMESPACES, updated)
        self._written[_name(written)] = _version(written)
        return written

    def _record(self, namespace: Object, op: Operation, hard: dict[str, str] | None) -> None:
        self.actions.append(SyncAction(_name(namespace), op, hard, self.clock.monotonic()))

    def actions_for(self, namespace: str) -> list[SyncAction]:
        return [action for action in self.actions if action.namespace == namespace]


def _annotations(obj: Object) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def _name(obj: Object) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _version(obj: Object) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


def _at_least(cached: str, written: str) -> bool:
    """Whether the cached resourceVersion is the written one or later. Versions are opaque, but
    the API server's are etcd revisions (integers); anything else is compared for equality."""
    if cached.isdigit() and written.isdigit():
        return int(cached) >= int(written)
    return cached == written
