"""virt-controller's migration controller, and virt-handler's share of a migration, simulated.

Informer-driven like the real one: every VirtualMachineInstanceMigration change, every change of a
target pod, of the VMI, and (KubeVirt v0.59+) of a ResourceQuota of the namespace whose migrations
were refused by quota, queues the migration; workers reconcile it one key at a time:

- Pending: respect parallelMigrationsPerCluster / parallelOutboundMigrationsPerNode (look again
  later) and a VMI that still has two pods (look again in 1 s); create the target launcher pod on
  another node, rendered for the overhead ratio in force now. A refusal ("exceeded quota") adds the
  condition `migrationRejectedByResourceQuota` once and is retried through client-go's default
  rate limiter (5 ms doubling), as virt-controller's "reenqueuing Migration" is.
- Scheduling .. Running: walked by `phases.next_step`, writing the VMI's migrationState as
  virt-handler would (hand-off, target address, start, completion) and moving the VMI to the
  target node at the end; the source pod is then deleted with its grace period.
- A deletion request (abort) before hand-off deletes the target pod and fails the migration; after
  hand-off the VMI's migrationState reports abortStatus Succeeded, the migration fails, and the
  target pod is deleted after `failed_target_linger`.
- A VMI that shuts down or disappears fails its migrations; a vanished VMI's migrations are deleted.

Not modelled: PodDisruptionBudgets, migration policies, hotplug attachment pods, the backoff of
repeatedly failing evacuations, the pending-pod timeouts, and garbage collection of old migrations.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ....apis.kubevirt import VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, VIRTUAL_MACHINE_INSTANCES
from ....config.kubevirt import host_architecture
from ....generic import errors
from ....generic.events import NORMAL
from ....generic.informer import ResourceEventHandler
from ....generic.reconcileloop import run_reconcile_loop
from ....generic.resource import PODS, Object, key_of
from ....generic.store import Tombstone
from ....generic.tasks import cancel_and_wait
from ....generic.workqueue import RateLimitingQueue, default_controller_rate_limiter
from ....util.launcher import LauncherSettings
from .limits import InFlight, limit_reached
from .objects import (
    ANNOTATION_EVACUATION,
    ANNOTATION_LATEST_API,
    ANNOTATION_STORAGE_API,
    API_VERSION,
    CONDITION_ABORT_REQUESTED,
    CONDITION_REJECTED_BY_QUOTA,
    HOSTNAME_LABEL,
    LABEL_MIGRATION_TARGET_NODE,
    LABEL_NODE_NAME,
    LABEL_VMI_NAME,
    MIGRATION_FINALIZER,
    MigrationRef,
    meta,
    name_label,
    render_launcher_pod,
    status,
    timestamp,
)
from .phases import (
    FINAL,
    HANDED_OFF,
    Advance,
    Blocked,
    Phase,
    Wait,
    next_step,
)
from .record import MigrationRecord, Moment, Outcome
from .view import pod_is_down, pod_is_ready

if TYPE_CHECKING:
    from .simulator import KubeVirtSimulator

log = logging.getLogger(__name__)

EXCEEDED_QUOTA = "exceeded quota"
FINAL_VMI_PHASES = frozenset({"Succeeded", "Failed"})
FAKE_TARGET_ADDRESS = "10.52.0.69"
"""A target node address when the target pod has no IP yet (kwok assigns one; this is a fallback)."""


def _shut_down(vmi: Object) -> bool:
    """The VMI has ended or is being deleted."""
    return status(vmi).get("phase") in FINAL_VMI_PHASES or bool(meta(vmi).get("deletionTimestamp"))


class Requeue(Exception):
    """Retry this migration through the rate limiter (virt-controller's "reenqueuing Migration")."""


@dataclass
class Cleanup:
    """A pod to delete once the clock reaches `due` (monotonic), with that grace period."""

    pod: str
    due: float
    grace: int


@dataclass
class Flight:
    """The simulator's state of one migration (by key; `uid` tells a reused name apart)."""

    key: str
    uid: str
    namespace: str
    name: str
    vmi_name: str
    record: MigrationRecord
    phase: Phase
    entered: float
    transitions: list[Object] = field(default_factory=list)
    conditions: list[Object] = field(default_factory=list)
    state: Object = field(default_factory=dict)
    target_pod: str | None = None
    target_pod_uid: str | None = None
    target_seen: bool = False
    abort_due: float | None = None
    cleanups: list[Cleanup] = field(default_factory=list)

    def has_condition(self, condition_type: str) -> bool:
        return any(c.get("type") == condition_type for c in self.conditions)


class MigrationController:
    """The migration half of the simulated virt-controller (see the module docstring).

    It works with `simulator`'s API client, clock, cluster view, configuration, migration log and
    event recorder, and asks it for the overhead ratio in force and each VM's migration time.
    """

    def __init__(self, simulator: KubeVirtSimulator) -> None:
        self._sim = simulator
        self._timings = simulator.config.timings
        self.queue: RateLimitingQueue[str] = RateLimitingQueue(
            default_controller_rate_limiter(clock=simulator.clock), clock=simulator.clock
        )
        self._flights: dict[str, Flight] = {}
        self._source_pods: dict[str, MigrationRecord] = {}
        self._start_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._writes: set[asyncio.Task[None]] = set()
        """activePods writes under way (stop cancels them; none starts after stop)."""
        self._stopped = False
        self._register_handlers()

    # Events -----------------------------------------------------------------------------------

    def _register_handlers(self) -> None:
        def migration_event(obj: Object | Tombstone) -> None:
            self.queue.add(obj.key if isinstance(obj, Tombstone) else key_of(obj))

        self._sim.view.migrations.add_event_handler(
            ResourceEventHandler.of_latest(migration_event, migration_event),
            name="sim virt-controller migrations",
        )
        self._sim.view.pods.add_event_handler(
            ResourceEventHandler.of_latest(self._pod_changed, self._pod_deleted),
            name="sim virt-controller pods",
        )
        self._sim.view.vmis.add_event_handler(
            ResourceEventHandler(
                on_add=lambda obj, _initial: self._vmi_changed(obj),
                on_update=lambda _old, new: self._vmi_changed(new),
                on_delete=lambda obj: self._vmi_changed(
                    obj.obj if isinstance(obj, Tombstone) else obj
                ),
            ),
            name="sim virt-controller vmis",
        )
        if self._sim.config.quota_condition:
            self._sim.view.quotas.add_event_handler(
                ResourceEventHandler(
                    on_update=lambda _old, new: self._quota_changed(new),
                    on_delete=lambda obj: self._quota_changed(
                        obj.obj if isinstance(obj, Tombstone) else obj
                    ),
                ),
                name="sim virt-controller quotas",
            )

    def _pod_changed(self, pod: Object) -> None:
        uid = (meta(pod).get("labels") or {}).get("kubevirt.io/migrationJobUID")
        if not uid:
            return
        migration = self._sim.view.migration_by_uid(str(uid))
        if migration is not None:
            self.queue.add(key_of(migration))

    def _pod_deleted(self, obj: Object | Tombstone) -> None:
        """A launcher pod is gone: wake its migration; a migration source leaves activePods
        (written by a task of its own: an informer's handler does not await)."""
        pod = obj.obj if isinstance(obj, Tombstone) else obj
        self._pod_changed(pod)
        record = self._source_pods.pop(key_of(pod), None)
        if record is None:
            return
        record.source_pod_gone = Moment.now(self._sim.clock)
        self._sim.records.changed()
        uid = str(meta(pod).get("uid", ""))
        if self._stopped:
            return  # the simulator's view outlives this controller while it stops
        writing = asyncio.ensure_future(self._drop_active_pod(record, uid))
        self._writes.add(writing)
        writing.add_done_callback(self._writes.discard)

    async def _drop_active_pod(self, record: MigrationRecord, uid: str) -> None:
        try:
            await self._sim.client.patch(
                VIRTUAL_MACHINE_INSTANCES,
                record.vmi,
                {"status": {"activePods": {uid: None}}},
                record.namespace,
                subresource="status",
            )
        except errors.ApiError as error:
            log.debug("could not drop pod %s from the VMI's activePods: %s", uid, error)
        except Exception:
            log.exception("dropping pod %s from the VMI's activePods failed", uid)

    def _vmi_changed(self, vmi: Object) -> None:
        namespace = str(meta(vmi).get("namespace", ""))
        for migration in self._sim.view.migrations_of_vmi(
            namespace, str(meta(vmi).get("name", ""))
        ):
            self.queue.add(key_of(migration))

    def _quota_changed(self, quota: Object) -> None:
        """KubeVirt v0.59+: a quota change re-queues the namespace's quota-refused migrations."""
        namespace = str(meta(quota).get("namespace", ""))
        for migration in self._sim.view.migrations_in(namespace):
            conditions = status(migration).get("conditions") or []
            flight = self._flights.get(key_of(migration))
            refused = any(c.get("type") == CONDITION_REJECTED_BY_QUOTA for c in conditions) or (
                flight is not None and flight.has_condition(CONDITION_REJECTED_BY_QUOTA)
            )
            if refused:
                self.queue.add(key_of(migration))

    # Workers ----------------------------------------------------------------------------------

    def start(self) -> None:
        for _ in range(self._sim.config.workers):
            self._tasks.append(
                asyncio.ensure_future(
                    run_reconcile_loop(
                        self.queue,
                        self.reconcile,
                        name="simulated migration controller",
                        log=log,
                        expected=(Requeue, errors.ApiError),
                    )
                )
            )

    async def stop(self) -> None:
        self._stopped = True
        self.queue.shut_down()
        await cancel_and_wait([*self._tasks, *self._writes])
        self._tasks.clear()

    # Reconcile --------------------------------------------------------------------------------

    def _in_scope(self, key: str) -> bool:
        scope = self._sim.config.namespaces
        return scope is None or key.partition("/")[0] in scope

    async def reconcile(self, key: str) -> float | None:
        """One pass over one migration; returns when to look again (None: on the next event)."""
        if not self._in_scope(key):
            return None  # another run's (or a real KubeVirt's) migration: not ours to play
        vmim = self._sim.view.migration(key)
        if vmim is None:
            return await self._gone(key)
        flight = self._flight_for(key, vmim)
        deleting = bool(meta(vmim).get("deletionTimestamp"))
        vmi = self._sim.view.vmi(flight.namespace, flight.vmi_name) or await self._fetch_vmi(flight)
        if vmi is None and not deleting:
            # KubeVirt deletes the migrations of a VMI that is gone, finished or not.
            if flight.phase not in FINAL:
                reason = "vmi does not exist"
                await self._finish(flight, Outcome.FAILED, reason, target_linger=0.0)
            await self._delete_migration(flight)
            return 0.0
        if flight.phase in FINAL:
            return await self._finalize(vmim, flight)
        if not deleting:
            await self._ensure_metadata(vmim)
        if vmi is None or _shut_down(vmi):
            reason = "vmi does not exist" if vmi is None else "vmi shutdown during migration"
            await self._finish(flight, Outcome.FAILED, reason, target_linger=0.0)
            return 0.0
        return await self._advance(vmim, flight, vmi, deleting=deleting)

    async def _fetch_vmi(self, flight: Flight) -> Object | None:
        """The VMI from the API server when the cache has none: a VMI created just before its
        migration may not have reached the cache yet, and a missing VMI deletes the migration."""
        try:
            return await self._sim.client.get(
                VIRTUAL_MACHINE_INSTANCES, flight.vmi_name, flight.namespace
            )
        except errors.NotFound:
            return None

    async def _advance(
        self, vmim: Object, flight: Flight, vmi: Object, *, deleting: bool
    ) -> float | None:
        if deleting:
            return await self._cancel(flight, vmi)
        if flight.phase is Phase.UNSET:
            return await self._accept(flight, vmi)
        if flight.phase is Phase.PENDING:
            return await self._schedule_target(vmim, flight, vmi)
        return await self._walk(flight, vmi)

    def _flight_for(self, key: str, vmim: Object) -> Flight:
        uid = str(meta(vmim).get("uid", ""))
        flight = self._flights.get(key)
        if flight is not None and flight.uid == uid:
            return flight
        record = self._sim.records.by_uid(uid) or self._sim.records.add(
            MigrationRecord(
                namespace=str(meta(vmim).get("namespace", "")),
                name=str(meta(vmim).get("name", "")),
                uid=uid,
                vmi=str((vmim.get("spec") or {}).get("vmiName", "")),
                created=Moment.now(self._sim.clock),
                evacuation_node=(meta(vmim).get("annotations") or {}).get(ANNOTATION_EVACUATION),
            )
        )
        vmim_status = status(vmim)
        phase = Phase.parse(vmim_status.get("phase"))
        new = Flight(
            key=key,
            uid=uid,
            namespace=record.namespace,
            name=record.name,
            vmi_name=record.vmi,
            record=record,
            phase=phase,
            entered=self._sim.clock.monotonic(),
            transitions=list(vmim_status.get("phaseTransitionTimestamps") or []),
            conditions=list(vmim_status.get("conditions") or []),
            state=dict(vmim_status.get("migrationState") or {}),
            cleanups=list(flight.cleanups) if flight is not None else [],
        )
        if phase is not Phase.UNSET and not record.phases:
            record.phases.append((phase, Moment.now(self._sim.clock)))
        targets = self._sim.view.target_pods(uid)
        if targets:
            self._adopt_target(new, targets[0])
        self._flights[key] = new
        return new

    async def _ensure_metadata(self, vmim: Object) -> None:
        """What virt-api and virt-controller add to a new migration: the finalizer, the VMI label
        and the observed-API annotations."""
        metadata = meta(vmim)
        labels = metadata.get("labels") or {}
        annotations = metadata.get("annotations") or {}
        finalizers = list(metadata.get("finalizers") or [])
        vmi_name = (vmim.get("spec") or {}).get("vmiName", "")
        patch: Object = {}
        wanted_label = name_label(LABEL_VMI_NAME, vmi_name)
        if wanted_label and labels.get(LABEL_VMI_NAME) != vmi_name:
            patch["labels"] = wanted_label
        if ANNOTATION_LATEST_API not in annotations:
            patch["annotations"] = {ANNOTATION_LATEST_API: "v1", ANNOTATION_STORAGE_API: "v1"}
        if MIGRATION_FINALIZER not in finalizers:
            patch["finalizers"] = [*finalizers, MIGRATION_FINALIZER]
            patch["resourceVersion"] = metadata.get("resourceVersion")
        if patch:
            await self._sim.client.patch(
                VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
                str(metadata.get("name")),
                {"metadata": patch},
                str(metadata.get("namespace")),
            )

    # Pending ----------------------------------------------------------------------------------

    async def _accept(self, flight: Flight, vmi: Object) -> float | None:
        """Unset -> Pending, or Failed when another migration of the VMI is in progress."""
        other = (status(vmi).get("migrationState") or {}).get("migrationUid")
        if other and other != flight.uid:
            running = self._sim.view.migration_by_uid(str(other))
            if running is not None and Phase.parse(status(running).get("phase")) not in FINAL:
                reason = "another migration job is in progress"
                await self._finish(flight, Outcome.FAILED, reason, target_linger=None)
                return None
        source = self._sim.view.current_pod(vmi)
        flight.record.source_node = status(vmi).get("nodeName")
        if source is not None:
            flight.record.source_pod = str(meta(source).get("name"))
            if self._sim.config.migration_status_details:
                flight.state = {"sourcePod": flight.record.source_pod}
        await self._set_phase(flight, Phase.PENDING)
        return 0.0

    async def _schedule_target(self, vmim: Object, flight: Flight, vmi: Object) -> float | None:
        existing = self._sim.view.target_pods(flight.uid)
        if existing or flight.target_pod:
            if existing and not flight.target_pod:
                self._adopt_target(flight, existing[0])
            await self._set_phase(flight, Phase.SCHEDULING, drop_condition=True)
            return 0.0
        source = self._sim.view.current_pod(vmi)
        if source is None or status(vmi).get("phase") != "Running":
            # Not running (yet), or its pod not in the cache yet, or gone: look again shortly.
            return self._timings.active_pods_retry
        async with self._start_lock:
            wait = self._must_wait(flight, vmi)
            if wait is not None:
                return wait
            target_node = self._choose_target(vmim, vmi)
            if target_node is None:
                raise Requeue(f"no schedulable node for the target pod of {flight.key}")
            await self._create_target(flight, vmi, source, target_node)
        await self._set_phase(flight, Phase.SCHEDULING, drop_condition=True)
        return 0.0

    def _must_wait(self, flight: Flight, vmi: Object) -> float | None:
        vmi_uid = str(meta(vmi).get("uid", ""))
        if self._sim.view.active_pod_count(vmi_uid) > 1 or self._sibling_has_target(flight):
            log.info("%s: waiting, VMI %s still has more than one pod", flight.key, flight.vmi_name)
            return self._timings.active_pods_retry
        reason = limit_reached(
            status(vmi).get("nodeName"),
            self._in_flight(exclude=flight.key),
            self._sim.config.limits,
        )
        if reason is not None:
            flight.record.held_by_limits += 1
            self._sim.records.changed()
            log.info("%s: waiting to schedule the target pod: %s", flight.key, reason)
            return self._timings.limit_retry
        return None

    def _sibling_has_target(self, flight: Flight) -> bool:
        """Another unfinished migration of the same VMI created its target pod (which the pod
        cache may not show yet): KubeVirt waits while the VMI has more than one pod."""
        return any(
            other.key != flight.key
            and other.namespace == flight.namespace
            and other.vmi_name == flight.vmi_name
            and other.phase not in FINAL
            and other.target_pod
            for other in self._flights.values()
        )

    def _in_flight(self, exclude: str) -> list[InFlight]:
        result = []
        for migration in self._sim.view.all_migrations():
            key = key_of(migration)
            if key == exclude or not self._in_scope(key):
                continue
            uid = str(meta(migration).get("uid", ""))
            flight = self._flights.get(key)
            if flight is not None and flight.uid == uid:
                phase, has_target = flight.phase, bool(flight.target_pod)
            else:
                phase, has_target = Phase.parse(status(migration).get("phase")), False
            has_target = has_target or bool(self._sim.view.target_pods(uid))
            vmi = self._sim.view.vmi(
                str(meta(migration).get("namespace", "")),
                str((migration.get("spec") or {}).get("vmiName", "")),
            )
            node = status(vmi).get("nodeName") if vmi is not None else None
            result.append(InFlight(key, phase, has_target, node))
        return result

    def _choose_target(self, vmim: Object, vmi: Object) -> str | None:
        """A Ready, schedulable node other than the ones the VMI's pods are on (KubeVirt's pod
        anti-affinity), the least loaded first, or the one the migration asks for."""
        occupied = {
            (pod.get("spec") or {}).get("nodeName")
            for pod in self._sim.view.pods_of_vmi(str(meta(vmi).get("uid", "")))
        }
        occupied.add(status(vmi).get("nodeName"))
        candidates = [
            node
            for node in self._sim.view.schedulable_nodes(self._sim.config.nodes)
            if node not in occupied
        ]
        wanted = ((vmim.get("spec") or {}).get("addedNodeSelector") or {}).get(HOSTNAME_LABEL)
        if wanted:
            node = self._sim.view.node_by_hostname(str(wanted))
            return node if node in candidates else None
        return candidates[0] if candidates else None

    async def _create_target(
        self, flight: Flight, vmi: Object, source: Object, target_node: str
    ) -> None:
        has_cpu, has_memory = self._sim.view.quota_limits_keys(flight.namespace)
        # virt-controller sizes a VMI without spec.architecture for its own GOARCH, as
        # production assumes: this host's.
        settings = LauncherSettings(
            cluster_arch=host_architecture(),
            kubevirt_version=self._sim.config.version,
            ratio=await self._sim.overhead_ratio(),
            quota_has_limits_cpu=has_cpu,
            quota_has_limits_memory=has_memory,
        )
        pod = render_launcher_pod(
            vmi,
            node=target_node,
            settings=settings,
            migration=MigrationRef(uid=flight.uid, name=flight.name),
        )
        try:
            created = await self._sim.client.create(PODS, pod, flight.namespace)
        except errors.ApiError as error:
            await self._creation_refused(flight, vmi, error)
            raise Requeue(f"failed to create vmi migration target pod: {error.message}") from None
        self._adopt_target(flight, created)
        flight.record.admitted = Moment.now(self._sim.clock)
        flight.record.source_pod = str(meta(source).get("name"))
        self._sim.records.changed()
        log.info(
            "Created migration target pod %s/%s for migration %s",
            flight.namespace,
            flight.target_pod,
            flight.name,
        )
        self._event(
            self._migration_ref(flight),
            NORMAL,
            "SuccessfulCreate",
            f"Created migration target pod {flight.target_pod}",
        )

    def _adopt_target(self, flight: Flight, pod: Object) -> None:
        flight.target_pod = str(meta(pod).get("name"))
        flight.target_pod_uid = str(meta(pod).get("uid", ""))
        flight.record.target_pod = flight.target_pod
        flight.record.target_node = (pod.get("spec") or {}).get("nodeName")

    async def _creation_refused(self, flight: Flight, vmi: Object, error: errors.ApiError) -> None:
        """Records the refusal and, for quota, adds the condition once (KubeVirt v0.59+)."""
        message = error.message
        self._sim.pod_refused_event(vmi, message)
        if EXCEEDED_QUOTA not in message:
            flight.record.failure_reason = message
            self._sim.records.changed()
            return
        flight.record.note_refusal(message, Moment.now(self._sim.clock))
        self._sim.records.changed()
        if self._sim.config.quota_condition:
            await self._add_condition(flight, CONDITION_REJECTED_BY_QUOTA)

    # The walk ---------------------------------------------------------------------------------

    async def _walk(self, flight: Flight, vmi: Object) -> float | None:
        target = self._sim.view.pod(flight.namespace, flight.target_pod or "")
        if target is not None:
            flight.target_seen = True
        if flight.target_seen and (target is None or pod_is_down(target)):
            return await self._target_lost(flight)
        step = next_step(
            flight.phase,
            entered_at=flight.entered,
            now=self._sim.clock.monotonic(),
            timings=self._timings,
            target_pod_ready=pod_is_ready(target),
            migration_duration=self._sim.migration_duration(flight.namespace, flight.vmi_name),
        )
        if isinstance(step, Wait):
            return step.seconds
        if isinstance(step, Blocked):
            return None
        assert isinstance(step, Advance)
        await self._enter(flight, vmi, step.phase, target)
        return 0.0

    async def _target_lost(self, flight: Flight) -> float:
        """The target pod went mid-migration. A deleted VMI takes its pods with it, and the pod
        cache may learn of that before the VMI cache does: the VMI is read from the API server
        first, so its deletion is the reason whenever it is the cause."""
        vmi = await self._fetch_vmi(flight)
        if vmi is None or _shut_down(vmi):
            reason = "vmi does not exist" if vmi is None else "vmi shutdown during migration"
        else:
            reason = "target pod disappeared during migration"
            await self._fail_on_vmi(flight, vmi)
        await self._finish(flight, Outcome.FAILED, reason, target_linger=0.0)
        return 0.0

    async def _enter(
        self, flight: Flight, vmi: Object, phase: Phase, target: Object | None
    ) -> None:
        now = timestamp(self._sim.clock.now())
        if phase is Phase.PREPARING_TARGET:
            await self._hand_off(flight, vmi)
        elif phase is Phase.TARGET_READY:
            address = status(target).get("podIP") if target is not None else None
            flight.state.update(
                targetNodeAddress=address or FAKE_TARGET_ADDRESS,
                targetDirectMigrationNodePorts={"49152": 0, "49153": 49153},
                targetNodeDomainDetected=True,
            )
            await self._write_vmi_state(flight)
        elif phase is Phase.RUNNING:
            flight.state.update(startTimestamp=now, mode="PreCopy")
            await self._write_vmi_state(flight)
            flight.record.started = Moment.now(self._sim.clock)
        elif phase is Phase.SUCCEEDED:
            await self._complete(flight, now)
            return
        await self._set_phase(flight, phase)

    async def _hand_off(self, flight: Flight, vmi: Object) -> None:
        """Scheduled -> PreparingTarget: the VMI learns its target (virt-handler takes over)."""
        target_node = flight.record.target_node or ""
        limits = self._sim.config.limits
        flight.state = {
            **({"sourcePod": flight.record.source_pod} if flight.record.source_pod else {}),
            "migrationUid": flight.uid,
            "sourceNode": status(vmi).get("nodeName"),
            "targetNode": target_node,
            "targetPod": flight.target_pod,
            "migrationConfiguration": {
                "allowAutoConverge": False,
                "allowPostCopy": False,
                "bandwidthPerMigration": "0",
                "completionTimeoutPerGiB": 800,
                "nodeDrainTaintKey": "kubevirt.io/drain",
                "parallelMigrationsPerCluster": limits.per_cluster,
                "parallelOutboundMigrationsPerNode": limits.outbound_per_node,
                "progressTimeout": 150,
                "unsafeMigrationOverride": False,
            },
        }
        await self._write_vmi_state(flight)
        await self._patch_vmi(
            flight, {"metadata": {"labels": {LABEL_MIGRATION_TARGET_NODE: target_node}}}
        )
        if flight.target_pod_uid:
            await self._patch_vmi(
                flight, {"status": {"activePods": {flight.target_pod_uid: target_node}}}, "status"
            )

    async def _complete(self, flight: Flight, now: str) -> None:
        """Running -> Succeeded: the VMI runs on the target; the source pod goes away."""
        target_node = flight.record.target_node or ""
        flight.state.update(completed=True, endTimestamp=now, targetNodeDomainReadyTimestamp=now)
        await self._write_vmi_state(flight)
        await self._patch_vmi(flight, {"status": {"nodeName": target_node}}, "status")
        flight.record.left_source_node = Moment.now(self._sim.clock)
        # KubeVirt leaves kubevirt.io/migrationTargetNodeName in place (see the v1.2.1 seed's VMI).
        await self._patch_vmi(flight, {"metadata": {"labels": {LABEL_NODE_NAME: target_node}}})
        await self._finish(flight, Outcome.SUCCEEDED, "", target_linger=None)
        source = flight.record.source_pod
        if source:
            self._source_pods[f"{flight.namespace}/{source}"] = flight.record
            flight.cleanups.append(
                Cleanup(
                    source,
                    self._sim.clock.monotonic() + self._timings.source_pod_linger,
                    self._timings.source_pod_grace_seconds,
                )
            )
        self._event(
            self._migration_ref(flight),
            NORMAL,
            "SuccessfulMigration",
            "Source node reported migration succeeded",
        )

    # Abort, failure, the end ------------------------------------------------------------------

    async def _add_condition(self, flight: Flight, condition_type: str) -> None:
        """Adds a True condition of ``condition_type`` to the migration's status, as KubeVirt
        writes it (probed now, no transition time), unless it has one of that type already."""
        if flight.has_condition(condition_type):
            return
        condition = {
            "type": condition_type,
            "status": "True",
            "lastProbeTime": timestamp(self._sim.clock.now()),
            "lastTransitionTime": None,
        }
        await self._write_status(flight, conditions=[*flight.conditions, condition])

    async def _cancel(self, flight: Flight, vmi: Object) -> float | None:
        """The migration is being deleted before it finished: abort it."""
        await self._add_condition(flight, CONDITION_ABORT_REQUESTED)
        if flight.phase not in HANDED_OFF:
            reason = "migration canceled before hand-off"
            await self._finish(flight, Outcome.ABORTED, reason, target_linger=0.0)
            return 0.0
        now = self._sim.clock.monotonic()
        if flight.abort_due is None:
            flight.abort_due = now + self._timings.abort_duration
            flight.state["abortRequested"] = True
            await self._write_vmi_state(flight)
        if flight.abort_due > now:
            return flight.abort_due - now
        await self._abort_on_vmi(flight)
        reason = "migration aborted"
        await self._finish(
            flight, Outcome.ABORTED, reason, target_linger=self._timings.failed_target_linger
        )
        return 0.0

    async def _abort_on_vmi(self, flight: Flight) -> None:
        """virt-handler's report of a successful abort: the VMI stays on the source."""
        flight.state.update(
            abortRequested=True,
            abortStatus="Succeeded",
            completed=True,
            failed=True,
            endTimestamp=timestamp(self._sim.clock.now()),
        )
        with contextlib.suppress(errors.NotFound):
            await self._write_vmi_state(flight)

    async def _fail_on_vmi(self, flight: Flight, vmi: Object) -> None:
        """A handed-off migration that failed is marked failed in the VMI's migrationState."""
        if flight.phase not in HANDED_OFF or meta(vmi).get("deletionTimestamp"):
            return
        now = timestamp(self._sim.clock.now())
        flight.state.update(completed=True, failed=True, endTimestamp=now)
        flight.state.setdefault("startTimestamp", now)
        with contextlib.suppress(errors.NotFound):
            await self._write_vmi_state(flight)

    async def _finish(
        self, flight: Flight, outcome: Outcome, reason: str, *, target_linger: float | None
    ) -> None:
        """Moves the migration to Succeeded or Failed, records why, and schedules the target pod's
        deletion after `target_linger` seconds (None: keep it, it is the VM's pod now)."""
        phase = Phase.SUCCEEDED if outcome is Outcome.SUCCEEDED else Phase.FAILED
        try:
            await self._set_phase(flight, phase, final_state=True)
        except errors.NotFound:
            flight.phase = phase
        record = flight.record
        record.outcome = outcome
        record.failure_reason = reason or record.failure_reason
        record.finished = Moment.now(self._sim.clock)
        self._sim.records.changed()
        if target_linger is not None and flight.target_pod:
            due = self._sim.clock.monotonic() + target_linger
            flight.cleanups.append(
                Cleanup(flight.target_pod, due, self._timings.target_pod_grace_seconds)
            )
        if outcome is not Outcome.SUCCEEDED:
            log.info("migration %s ended %s: %s", flight.key, outcome.value, reason)

    async def _finalize(self, vmim: Object, flight: Flight) -> float | None:
        """A finished migration: drop the finalizer, then delete pods whose time has come."""
        finalizers = list(meta(vmim).get("finalizers") or [])
        if MIGRATION_FINALIZER in finalizers:
            await self._sim.client.patch(
                VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
                flight.name,
                {
                    "metadata": {
                        "finalizers": [f for f in finalizers if f != MIGRATION_FINALIZER] or None,
                        "resourceVersion": meta(vmim).get("resourceVersion"),
                    }
                },
                flight.namespace,
            )
        return await self._run_cleanups(flight)

    async def _gone(self, key: str) -> float | None:
        """The migration object is gone. If it went before it finished (someone removed the
        finalizer), the migration is aborted as on a deletion; pending pod deletions still run."""
        flight = self._flights.get(key)
        if flight is None:
            return None
        if flight.phase not in FINAL:
            if flight.phase in HANDED_OFF:
                await self._abort_on_vmi(flight)
            flight.phase = Phase.FAILED
            record = flight.record
            record.outcome, record.failure_reason = Outcome.ABORTED, "migration object deleted"
            record.finished = Moment.now(self._sim.clock)
            self._sim.records.changed()
            if flight.target_pod:
                due = self._sim.clock.monotonic() + self._timings.failed_target_linger
                flight.cleanups.append(
                    Cleanup(flight.target_pod, due, self._timings.target_pod_grace_seconds)
                )
        wait = await self._run_cleanups(flight)
        if wait is None:
            self._flights.pop(key, None)
        return wait

    async def _run_cleanups(self, flight: Flight) -> float | None:
        """Deletes the pods that are due; returns the wait until the next one (None: none left)."""
        now = self._sim.clock.monotonic()
        remaining: list[Cleanup] = []
        for cleanup in flight.cleanups:
            if cleanup.due > now:
                remaining.append(cleanup)
                continue
            await self._delete_pod(flight, cleanup)
        flight.cleanups = remaining
        if not remaining:
            return None
        return min(c.due for c in remaining) - now

    async def _delete_pod(self, flight: Flight, cleanup: Cleanup) -> None:
        try:
            await self._sim.client.delete(
                PODS, cleanup.pod, flight.namespace, grace_period_seconds=cleanup.grace
            )
        except errors.NotFound:
            return
        log.info("deleted pod %s/%s (grace %ss)", flight.namespace, cleanup.pod, cleanup.grace)

    async def _delete_migration(self, flight: Flight) -> None:
        with contextlib.suppress(errors.NotFound):
            await self._sim.client.delete(
                VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, flight.name, flight.namespace
            )

    # Writes -----------------------------------------------------------------------------------

    async def _set_phase(
        self,
        flight: Flight,
        phase: Phase,
        *,
        drop_condition: bool = False,
        final_state: bool = False,
    ) -> None:
        moment = Moment.now(self._sim.clock)
        transitions = [
            *flight.transitions,
            {"phase": phase.value, "phaseTransitionTimestamp": timestamp(moment.at)},
        ]
        conditions = flight.conditions
        if drop_condition:
            conditions = [c for c in conditions if c.get("type") != CONDITION_REJECTED_BY_QUOTA]
        await self._write_status(
            flight,
            phase=phase,
            conditions=conditions,
            transitions=transitions,
            with_state=final_state or phase is Phase.PENDING,
        )
        flight.phase, flight.entered = phase, moment.mono
        flight.record.phases.append((phase, moment))
        self._sim.records.changed()

    async def _write_status(
        self,
        flight: Flight,
        *,
        phase: Phase | None = None,
        conditions: list[Object] | None = None,
        transitions: list[Object] | None = None,
        with_state: bool = False,
    ) -> None:
        """Merge-patches the migration's status; the simulator is its only writer."""
        body: dict[str, Any] = {"phase": (phase or flight.phase).value or None}
        if conditions is not None:
            body["conditions"] = conditions or None
        details = self._sim.config.migration_status_details
        if details and transitions is not None:
            body["phaseTransitionTimestamps"] = transitions
        if details and with_state and flight.state:
            body["migrationState"] = copy.deepcopy(flight.state)
        await self._sim.client.patch(
            VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
            flight.name,
            {"status": body},
            flight.namespace,
            subresource="status",
        )
        if conditions is not None:
            flight.conditions = conditions
        if transitions is not None:
            flight.transitions = transitions

    async def _write_vmi_state(self, flight: Flight) -> None:
        """Replaces the VMI's status.migrationState with the flight's (a JSON patch "add")."""
        await self._sim.client.patch(
            VIRTUAL_MACHINE_INSTANCES,
            flight.vmi_name,
            [{"op": "add", "path": "/status/migrationState", "value": flight.state}],
            flight.namespace,
            patch_type="json",
            subresource="status",
        )

    async def _patch_vmi(self, flight: Flight, body: Object, subresource: str = "") -> None:
        await self._sim.client.patch(
            VIRTUAL_MACHINE_INSTANCES,
            flight.vmi_name,
            body,
            flight.namespace,
            subresource=subresource,
        )

    def _migration_ref(self, flight: Flight) -> Object:
        return {
            "apiVersion": API_VERSION,
            "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": flight.name, "namespace": flight.namespace, "uid": flight.uid},
        }

    def _event(self, obj: Object, event_type: str, reason: str, message: str) -> None:
        if self._sim.events is not None:
            self._sim.events.event(obj, event_type, reason, message)
