"""A stand-in for virt-handler (and virt-api's two writes) beside KubeVirt's real virt-controller.

The local cluster runs KubeVirt's own virt-controller; what runs on the nodes, virt-handler, cannot
run on kwok. `VirtHandler` does exactly the node side's share, nothing of virt-controller's:

- VMI start: once virt-controller reports a VMI ``Scheduled`` on a node, the VMI becomes
  ``Running`` with a ``selinuxContext`` (``none``: no SELinux here; without it virt-controller
  fails every migration) and ``LiveMigratable=True`` (the evacuation controller needs it).
- Migration, once virt-controller has handed it off (``status.migrationState.targetNode`` set):
  the target reports its address (TargetReady), the source starts (Running), after the VM's
  migration time the target detects and readies the domain, then the migration completes: the
  VMI moves to the target node (``status.nodeName``, the ``kubevirt.io/nodeName`` label), the
  migration-target and outdated-launcher labels go, and so do its eviction-source annotation,
  launcher image version and evacuation node (virt-controller reads the version again from the
  target pod: until then no workload updater takes the VMI for outdated). virt-controller then
  marks the migration Succeeded.
- After a completed migration the source virt-launcher exits: its pod goes ``Succeeded`` after
  `HandlerTimings.source_shutdown` (the v1.2.1 seed saw about 31 s); virt-controller does not
  delete it. After a failed or aborted one, the target launcher exits (``Failed``).
- Abort (virt-controller sets ``abortRequested`` when the migration is deleted after hand-off):
  the source reports ``abortStatus: Succeeded`` and the migration failed.
- Injected failure (`fail_next_migration`): the source reports the migration failed.
- VMI deletion: the domain is shut down once the VMI's ``terminationGracePeriodSeconds`` is
  over (no guest here shuts down sooner), and every running launcher of the VMI exits (its pod
  ``Succeeded``): the source and, mid-migration, the target. virt-controller deletes the pods with the launcher's own grace, the VMI's padded
  by 30 s, and kwok removes a pod only once that grace ends; without the exit a pod would count
  for quota admission that long, where on a node it stops as soon as its launcher has exited.
- virt-api's share: the ``kubevirt.io/migrationJobFinalize`` finalizer on every new migration.

Writes to a VMI go to the object itself (KubeVirt's VMI CRD has no status subresource) as merge
patches of the fields this stand-in owns, so they never overwrite virt-controller's. Each VMI is
handled by one worker at a time (a work queue keyed by VMI); timing uses the injected clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from ....apis.kubevirt import (
    LABEL_CREATED_BY,
    LABEL_KUBEVIRT,
    LAUNCHER,
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
    VIRTUAL_MACHINE_INSTANCES,
)
from ....generic import errors
from ....generic.client import ApiClient
from ....generic.clock import REAL_CLOCK, Clock
from ....generic.informer import ResourceEventHandler, SharedInformerFactory
from ....generic.reconcileloop import run_reconcile_loop
from ....generic.resource import PODS, Object, key_of
from ....generic.store import Tombstone
from ....generic.tasks import cancel_and_wait
from ....generic.workqueue import RateLimitingQueue, default_controller_rate_limiter
from .objects import (
    ANNOTATION_EVICTION_SOURCE,
    LABEL_MIGRATION_TARGET_NODE,
    LABEL_NODE_NAME,
    LABEL_OUTDATED_LAUNCHER_IMAGE,
    MIGRATION_FINALIZER,
    meta,
    status,
    timestamp,
)
from .phases import FINAL, MigrationTimings, Phase, StepTimings

log = logging.getLogger(__name__)

SELINUX_NONE: Final = "none"
"""The selinuxContext virt-handler reports on a node without SELinux."""
CONDITION_LIVE_MIGRATABLE: Final = "LiveMigratable"
TERMINAL_POD_PHASES: Final = frozenset({"Succeeded", "Failed"})
DEFAULT_VMI_GRACE_SECONDS: Final = 30
"""KubeVirt's terminationGracePeriodSeconds for a VMI that leaves it unset
(v1.DefaultGracePeriodSeconds)."""

DurationSource = Callable[[str, str], "float | None"]
"""(namespace, VMI name) -> that VM's migration time in seconds, or None for the default."""


@dataclass(frozen=True)
class HandlerTimings(StepTimings):
    """Seconds each node-side step takes (fast defaults for tests; `like_v121_seed` for the
    seed's pace)."""

    preparing_target: float = 0.1
    """Hand-off until the target reports its address (TargetReady)."""
    target_ready: float = 0.1
    """TargetReady until the source starts sending (Running)."""
    migration: float = 0.5
    """Running until the domain is ready on the target, unless the VM has its own time."""
    source_shutdown: float = 1.0
    """Completion until the source virt-launcher exits (its pod Succeeded)."""
    target_exit: float = 1.0
    """A failed or aborted migration until the target virt-launcher exits (its pod Failed)."""
    abort: float = 0.1
    """abortRequested until the source reports the abort done."""

    @classmethod
    def like_v121_seed(cls) -> HandlerTimings:
        """The v1.2.1 seed's pace (`MigrationTimings.like_v121_seed`, its one record): a launcher
        starts in seconds, 5 s of Running, the source pod gone about 31 s after the migration
        succeeded."""
        return cls.node_side_of(MigrationTimings.like_v121_seed())

    @classmethod
    def node_side_of(cls, walk: MigrationTimings) -> HandlerTimings:
        """The steps of the simulator's walk `walk` that are virt-handler's: hand-off, target
        ready, the migration itself, the source pod's linger and grace, a failed target's
        linger, an abort."""
        return cls(
            preparing_target=walk.preparing_target,
            target_ready=walk.target_ready,
            migration=walk.running,
            source_shutdown=walk.source_pod_linger + walk.source_pod_grace_seconds,
            target_exit=walk.failed_target_linger,
            abort=walk.abort_duration,
        )


class VirtHandler:
    """The node side of KubeVirt for every VMI it can see (`namespaces`: only those; None: all).

    `start` returns once the caches are synced and the workers run; `stop` ends them. Not
    thread-safe; all methods run on one event loop.
    """

    def __init__(
        self,
        client: ApiClient,
        *,
        timings: HandlerTimings | None = None,
        namespaces: frozenset[str] | None = None,
        migration_duration: DurationSource | None = None,
        clock: Clock = REAL_CLOCK,
        workers: int = 4,
    ) -> None:
        self._client = client
        self.timings = timings or HandlerTimings()
        self._namespaces = namespaces
        self._duration = migration_duration or (lambda _ns, _name: None)
        self._clock = clock
        self._workers = workers
        self._factory = SharedInformerFactory(client, clock=clock)
        self.vmis = self._factory.informer(VIRTUAL_MACHINE_INSTANCES)
        self.migrations = self._factory.informer(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS)
        self.queue: RateLimitingQueue[str] = RateLimitingQueue(
            default_controller_rate_limiter(clock=clock), clock=clock
        )
        self._seen: dict[tuple[str, str], float] = {}
        """(migration uid, step) -> monotonic time the step was first seen waiting."""
        self._failing: set[str] = set()
        """VMI keys whose next migration fails."""
        self._ending: set[str] = set()
        """VMI keys whose running migration ends now, whatever its duration."""
        self._exited: set[str] = set()
        """Pod names (namespace/name) already made to exit."""
        self._tasks: list[asyncio.Task[None]] = []
        self._finalizing: set[asyncio.Task[None]] = set()
        self._register()

    # Lifecycle ----------------------------------------------------------------------------------

    async def start(self, sync_timeout: float = 30.0) -> None:
        self._factory.start()
        if not await self._factory.wait_for_cache_sync(sync_timeout):
            await self._factory.stop()
            raise TimeoutError(
                f"the virt-handler stand-in's caches did not sync in {sync_timeout}s"
            )
        self._tasks = [
            asyncio.ensure_future(
                run_reconcile_loop(
                    self.queue, self.reconcile, name="virt-handler stand-in", log=log
                )
            )
            for _ in range(self._workers)
        ]

    async def stop(self) -> None:
        self.queue.shut_down()
        await cancel_and_wait([*self._tasks, *self._finalizing])
        self._tasks.clear()
        await self._factory.stop()

    def fail_next_migration(self, namespace: str, vmi: str) -> None:
        """The next migration of that VMI fails on the source once it runs."""
        self._failing.add(f"{namespace}/{vmi}")

    def end_migration_now(self, namespace: str, vmi: str) -> None:
        """That VMI's migration stops waiting out its duration: it completes (or fails, if a
        failure was asked for) at the next look, which this asks for. A test holds a migration
        with a long duration while it looks at the room, then ends it instead of waiting."""
        key = f"{namespace}/{vmi}"
        self._ending.add(key)
        self.queue.add(key)

    # Events -------------------------------------------------------------------------------------

    def _in_scope(self, obj: Object) -> bool:
        return self._namespaces is None or meta(obj).get("namespace") in self._namespaces

    def _register(self) -> None:
        def vmi_event(obj: Object | Tombstone) -> None:
            vmi = obj.obj if isinstance(obj, Tombstone) else obj
            if self._in_scope(vmi):
                self.queue.add(key_of(vmi))

        self.vmis.add_event_handler(
            ResourceEventHandler.of_latest(vmi_event),
            name="virt-handler stand-in vmis",
        )
        self.migrations.add_event_handler(
            ResourceEventHandler.of_latest(self._migration_added),
            name="virt-handler stand-in migrations",
        )

    def _migration_added(self, migration: Object) -> None:
        """virt-api's mutating webhook: a new, unfinished migration gets KubeVirt's finalizer."""
        if not self._in_scope(migration) or meta(migration).get("deletionTimestamp"):
            return
        if Phase.parse(status(migration).get("phase")) in FINAL:
            return
        if MIGRATION_FINALIZER in (meta(migration).get("finalizers") or []):
            return
        task = asyncio.ensure_future(self._add_finalizer(migration))
        self._finalizing.add(task)
        task.add_done_callback(self._finalizing.discard)

    async def _add_finalizer(self, migration: Object) -> None:
        finalizers = [*(meta(migration).get("finalizers") or []), MIGRATION_FINALIZER]
        body = {
            "metadata": {
                "finalizers": finalizers,
                "resourceVersion": meta(migration).get("resourceVersion"),
            }
        }
        with contextlib.suppress(errors.Conflict, errors.NotFound):
            await self._client.patch(
                VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
                str(meta(migration).get("name")),
                body,
                str(meta(migration).get("namespace")),
            )

    # Workers ------------------------------------------------------------------------------------

    async def reconcile(self, key: str) -> float | None:
        """One look at one VMI; returns when to look again (None: on its next change)."""
        vmi = self.vmis.store.get(key)
        if vmi is None:
            return None
        if meta(vmi).get("deletionTimestamp"):
            return await self._shut_down(vmi)
        return await self._live(vmi)

    async def _live(self, vmi: Object) -> float | None:
        """One look at a VMI not being deleted: its start, then its migrations."""
        phase = status(vmi).get("phase")
        if phase == "Scheduled" and status(vmi).get("nodeName"):
            await self._run(vmi)
            return None
        if phase != "Running":
            return None
        state = status(vmi).get("migrationState")
        if not isinstance(state, dict) or not state.get("targetNode"):
            return None
        if state.get("completed"):
            return await self._launcher_exits(vmi, state)
        return await self._migrate(vmi, state)

    # VMI start ----------------------------------------------------------------------------------

    async def _run(self, vmi: Object) -> None:
        now = timestamp(self._clock.now())
        conditions = [
            c
            for c in status(vmi).get("conditions") or []
            if c.get("type") != CONDITION_LIVE_MIGRATABLE
        ]
        conditions.append(
            {
                "type": CONDITION_LIVE_MIGRATABLE,
                "status": "True",
                # Not null: a merge patch drops a null, Go writes it back, and virt-controller's
                # test-and-replace patches of the VMI status would never match again.
                "lastProbeTime": now,
                "lastTransitionTime": now,
            }
        )
        transitions = [
            *(status(vmi).get("phaseTransitionTimestamps") or []),
            {"phase": "Running", "phaseTransitionTimestamp": now},
        ]
        await self._patch_vmi(
            vmi,
            {
                # virt-controller writes this list too: fail on a stale copy rather than lose
                # its conditions (the worker retries with the next one).
                "metadata": {"resourceVersion": meta(vmi).get("resourceVersion")},
                "status": {
                    "phase": "Running",
                    "selinuxContext": SELINUX_NONE,
                    "conditions": conditions,
                    "phaseTransitionTimestamps": transitions,
                    "migrationMethod": "LiveMigration",
                    "migrationTransport": "Unix",
                },
            },
        )
        log.info(
            "virt-handler stand-in: VMI %s Running on %s", key_of(vmi), status(vmi)["nodeName"]
        )

    # Migration ----------------------------------------------------------------------------------

    def _waited(self, uid: str, step: str, seconds: float) -> float | None:
        """None once `step` of migration `uid` has waited `seconds`, else the time still left."""
        now = self._clock.monotonic()
        since = self._seen.setdefault((uid, step), now)
        left = since + seconds - now
        return None if left <= 0 else left

    async def _migrate(self, vmi: Object, state: dict[str, Any]) -> float | None:
        uid = str(state.get("migrationUid", ""))
        now = timestamp(self._clock.now())
        if state.get("abortRequested") and not state.get("abortStatus"):
            return await self._step(vmi, uid, "abort", self.timings.abort, self._aborted(now))
        if not state.get("targetNodeAddress"):
            body = {"targetNodeAddress": f"{state['targetNode']}:49152"}
            return await self._step(vmi, uid, "target", self.timings.preparing_target, body)
        if not state.get("startTimestamp"):
            return await self._step(
                vmi, uid, "start", self.timings.target_ready, {"startTimestamp": now}
            )
        return await self._transfer(vmi, state, uid, now)

    async def _transfer(
        self, vmi: Object, state: dict[str, Any], uid: str, now: str
    ) -> float | None:
        """Running: after the VM's migration time the domain is ready on the target and the
        migration completes (or fails, if a failure was asked for)."""
        key = key_of(vmi)
        duration = self._duration(str(meta(vmi).get("namespace")), str(meta(vmi).get("name")))
        seconds = self.timings.migration if duration is None else duration
        if key in self._ending:
            seconds = 0.0
        if key in self._failing:
            left = self._waited(uid, "fail", seconds)
            if left is not None:
                return left
            self._failing.discard(key)
            self._ending.discard(key)
            return await self._step(vmi, uid, "fail", 0.0, self._failed(now, "injected failure"))
        if not state.get("targetNodeDomainReadyTimestamp"):
            body: dict[str, Any] = {
                "targetNodeDomainDetected": True,
                "targetNodeDomainReadyTimestamp": now,
            }
            return await self._step(vmi, uid, "domain", seconds, body)
        await self._complete(vmi, state, now)
        self._ending.discard(key)
        return None

    async def _step(
        self, vmi: Object, uid: str, step: str, seconds: float, state: dict[str, Any]
    ) -> float | None:
        left = self._waited(uid, step, seconds)
        if left is not None:
            return left
        await self._patch_vmi(vmi, {"status": {"migrationState": state}})
        log.info("virt-handler stand-in: %s migration %s: %s", key_of(vmi), uid, step)
        return None

    @staticmethod
    def _aborted(now: str) -> dict[str, Any]:
        return {
            "abortStatus": "Succeeded",
            "failed": True,
            "completed": True,
            "endTimestamp": now,
            "failureReason": "Live migration aborted",
        }

    @staticmethod
    def _failed(now: str, reason: str) -> dict[str, Any]:
        return {"failed": True, "completed": True, "endTimestamp": now, "failureReason": reason}

    async def _complete(self, vmi: Object, state: dict[str, Any], now: str) -> None:
        """The hand-off virt-handler writes once the target readied the domain (KubeVirt
        v1.8/v1.9 ``ackMigrationCompletion``, and the completion v1.9 writes after it in
        ``finalizeMigration``, here in one write; no ``Migrated`` Event): the VMI on the target
        node, and what described the source cleared. Its launcher image version goes
        (virt-controller reads it again from the target pod; till then no workload updater
        counts the VMI as outdated, so none migrates it twice), as do the outdated-launcher
        label, the eviction-source annotation and the evacuation node; the target's memory
        overhead, where virt-controller reported one, becomes the VMI's."""
        target = str(state["targetNode"])
        labels: dict[str, Any] = {
            LABEL_NODE_NAME: target,
            LABEL_MIGRATION_TARGET_NODE: None,
            LABEL_OUTDATED_LAUNCHER_IMAGE: None,
        }
        handed_off: dict[str, Any] = {
            "nodeName": target,
            "migrationState": {"endTimestamp": now, "completed": True},
            "launcherContainerImageVersion": None,
            "evacuationNodeName": None,
            "migrationTransport": "Unix",
        }
        if state.get("targetMemoryOverhead"):
            handed_off["memory"] = {"memoryOverhead": state["targetMemoryOverhead"]}
        await self._patch_vmi(
            vmi,
            {
                "metadata": {"labels": labels, "annotations": {ANNOTATION_EVICTION_SOURCE: None}},
                "status": handed_off,
            },
        )
        log.info("virt-handler stand-in: %s migrated to %s", key_of(vmi), target)

    async def _launcher_exits(self, vmi: Object, state: dict[str, Any]) -> float | None:
        """The launcher that lost the VM exits: the source after success, else the target."""
        uid = str(state.get("migrationUid", ""))
        if state.get("failed"):
            pod, seconds, phase = state.get("targetPod"), self.timings.target_exit, "Failed"
        else:
            pod, seconds, phase = state.get("sourcePod"), self.timings.source_shutdown, "Succeeded"
        if not pod:
            return None
        namespace = str(meta(vmi).get("namespace"))
        if f"{namespace}/{pod}" in self._exited:
            return None
        left = self._waited(uid, "exit", seconds)
        if left is not None:
            return left
        await self._pod_exits(namespace, str(pod), phase)
        return None

    # VMI deletion -------------------------------------------------------------------------------

    async def _shut_down(self, vmi: Object) -> float | None:
        """A deleted VMI's domain is shut down once its grace period is over, then each of its
        launchers that runs exits, whether or not virt-controller has deleted its pod yet (those
        it deletes stay, terminating, until their own grace ends); a launcher pod that never ran
        is left to its deletion. Returns the grace left, or None once every running launcher of
        the VMI has exited."""
        uid = str(meta(vmi).get("uid") or "")
        left = self._waited(uid, "shutdown", vmi_grace_seconds(vmi))
        if left is not None:
            return left
        namespace = str(meta(vmi).get("namespace"))
        selector = f"{LABEL_KUBEVIRT}={LAUNCHER},{LABEL_CREATED_BY}={uid}"
        listed = await self._client.list(PODS, namespace, label_selector=selector)
        for pod in listed.get("items") or []:
            name = str(meta(pod).get("name"))
            running = status(pod).get("phase") == "Running"
            if running and f"{namespace}/{name}" not in self._exited:
                await self._pod_exits(namespace, name, "Succeeded", deleted_too=True)
        return None

    async def _pod_exits(
        self, namespace: str, name: str, phase: str, *, deleted_too: bool = False
    ) -> None:
        """The launcher in pod `name` exits: the pod ends in `phase`. A pod already terminal,
        or being deleted (unless `deleted_too`: its launcher exits all the same), is left as it
        is."""
        try:
            pod = await self._client.get(PODS, name, namespace)
        except errors.NotFound:
            self._exited.add(f"{namespace}/{name}")
            return
        deleting = bool(meta(pod).get("deletionTimestamp")) and not deleted_too
        if status(pod).get("phase") in TERMINAL_POD_PHASES or deleting:
            self._exited.add(f"{namespace}/{name}")
            return
        now = timestamp(self._clock.now())
        exit_code = 0 if phase == "Succeeded" else 1
        containers = [
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "started": False,
                "state": {
                    "terminated": {"exitCode": exit_code, "finishedAt": now, "startedAt": now}
                },
            }
            for c in (pod.get("spec") or {}).get("containers") or []
        ]
        body = {
            "status": {
                "phase": phase,
                "containerStatuses": containers,
                "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now}],
            }
        }
        with contextlib.suppress(errors.NotFound):  # removed meanwhile: nothing left to exit
            await self._client.patch(PODS, name, body, namespace, subresource="status")
        self._exited.add(f"{namespace}/{name}")
        log.info("virt-handler stand-in: launcher %s/%s exited (%s)", namespace, name, phase)

    async def _patch_vmi(self, vmi: Object, body: Object) -> None:
        await self._client.patch(
            VIRTUAL_MACHINE_INSTANCES,
            str(meta(vmi).get("name")),
            body,
            str(meta(vmi).get("namespace")),
        )


def vmi_grace_seconds(vmi: Object) -> float:
    """The VMI's spec.terminationGracePeriodSeconds (KubeVirt's default where it is unset or
    unreadable): how long virt-handler lets a deleted VMI's domain shut down."""
    grace = (vmi.get("spec") or {}).get("terminationGracePeriodSeconds")
    try:
        return DEFAULT_VMI_GRACE_SECONDS if grace is None else max(0.0, float(grace))
    except (TypeError, ValueError):
        return DEFAULT_VMI_GRACE_SECONDS
