"""The driver of KubeVirt's real virt-controller: VMs, migrations and drains, and what happened to
each.

`VirtControllerDriver` offers what `KubeVirtSimulator` offers (both are `KubeVirtDriver`s: create,
start, stop and restart VMs, migrate, abort, drain, wait, `records`) on a cluster whose
``cluster up --virt-controller`` runs KubeVirt's own virt-controller. Nothing of virt-controller is played here: VMs become VMIs through its VM
controller, launcher and target pods are rendered and created by it, migrations are walked,
throttled, refused and retried by it, evacuations are started by its evacuation controller. What
is not virt-controller is done by others:

- the node side by `sim.kubevirt.handler.VirtHandler` (VMI Running, each migration step, launchers exiting);
- virt-api's defaulting of VMIs (CPU model) by `create_vm`, its migration finalizer by the
  handler;
- Harvester's copy of its overhead-ratio setting into the KubeVirt CR by `set_ratio`;
- ``kubectl drain`` by `drain`: cordon plus KubeVirt's drain taint (``kubevirt.io/drain``), which
  its evacuation controller acts on as it does on evicted launcher pods.

`records` is built by watching, not by being told: a migration's record is created when its
VirtualMachineInstanceMigration is seen, *admitted* when its target pod appears, *refused* for each
``FailedCreate`` event ("exceeded quota") virt-controller writes on the VMI while the migration
waits for its target pod, *finished* on its final phase, and its source pod *gone* once that pod
has exited or been deleted. Times are observation times on the injected clock.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Mapping
from typing import Any, Final

from ..apis.kubevirt import (
    KUBEVIRTS,
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
    VIRTUAL_MACHINE_INSTANCES,
    VIRTUAL_MACHINES,
)
from ..generic import errors
from ..generic.client import ApiClient
from ..generic.clock import REAL_CLOCK, Clock
from ..generic.events import AGGREGATE_PREFIX
from ..generic.informer import ResourceEventHandler, SharedInformerFactory
from ..generic.resource import EVENTS, NODES, PODS, Object
from ..generic.store import Tombstone
from ..util.kubevirtversion import parse_kubevirt_version
from .sim.kubevirt.config import VMStart
from .sim.kubevirt.driver import KubeVirtDriver
from .sim.kubevirt.handler import HandlerTimings, VirtHandler
from .sim.kubevirt.limits import ParallelLimits
from .sim.kubevirt.objects import (
    ANNOTATION_EVACUATION,
    HOSTNAME_LABEL,
    LABEL_APP,
    LABEL_CREATED_BY,
    LABEL_MIGRATION_JOB_UID,
    LAUNCHER,
    POD_CREATE_FAILED,
    VMSpec,
    meta,
    render_vm,
    status,
    vm_resources,
)
from .sim.kubevirt.phases import FINAL, RUNNING_PHASES, Phase
from .sim.kubevirt.record import MigrationRecord, Moment, Outcome

log = logging.getLogger(__name__)

KUBEVIRT_NAMESPACE: Final = "kubevirt"
KUBEVIRT_NAME: Final = "kubevirt"
DRAIN_TAINT_KEY: Final = "kubevirt.io/drain"
"""KubeVirt's default migrations.nodeDrainTaintKey: the evacuation controller migrates every
LiveMigrate VMI off a node with this NoSchedule taint."""
EXCEEDED_QUOTA: Final = "exceeded quota"
START_TIMEOUT: Final = 60.0
"""Seconds a VM start may take on a loaded 2-core machine (pod created, bound, Running)."""
POLL: Final = 0.1


class VirtControllerDriver(KubeVirtDriver):
    """The real virt-controller plus the stand-ins, for the VMs of `namespaces` (None: all).

    `start` configures the KubeVirt CR (parallel limits; the original configuration is restored by
    `stop`), then starts the handler and the watches. One event loop; not thread-safe.
    """

    def __init__(
        self,
        client: ApiClient,
        *,
        kubevirt_version: str,
        namespaces: frozenset[str] | None = None,
        timings: HandlerTimings | None = None,
        limits: ParallelLimits | None = None,
        handler_workers: int = 4,
        clock: Clock = REAL_CLOCK,
    ) -> None:
        super().__init__(client, clock)
        self.kubevirt_version = kubevirt_version
        self.namespaces = namespaces
        self.limits = limits
        self.handler = VirtHandler(
            client,
            timings=timings,
            namespaces=namespaces,
            migration_duration=self.migration_duration,
            workers=handler_workers,
            clock=clock,
        )
        self._factory = SharedInformerFactory(client, clock=clock)
        self._migrations = self._factory.informer(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS)
        self._pods = self._factory.informer(PODS, label_selector=f"{LABEL_APP}={LAUNCHER}")
        self._events = self._factory.informer(EVENTS, field_selector="reason=FailedCreate")
        self._vmis = self._factory.informer(VIRTUAL_MACHINE_INSTANCES)
        self._event_counts: dict[str, int] = {}
        self._original_configuration: Object | None = None
        self._drained: set[str] = set()
        self._register()

    # Lifecycle ----------------------------------------------------------------------------------

    async def start(self, *, sync_timeout: float = 30.0) -> None:
        await self._configure()
        self._factory.start()
        if not await self._factory.wait_for_cache_sync(sync_timeout):
            await self._factory.stop()
            raise TimeoutError(f"the KubeVirt watches did not sync within {sync_timeout}s")
        await self.handler.start(sync_timeout)

    async def stop(self) -> None:
        await self.handler.stop()
        await self._factory.stop()
        for node in list(self._drained):
            with contextlib.suppress(errors.ApiError):
                await self.uncordon(node)
        if self._original_configuration is not None:
            with contextlib.suppress(errors.ApiError):
                await self._patch_configuration(self._original_configuration, replace=True)

    def _in_scope(self, obj: Object) -> bool:
        return self.namespaces is None or meta(obj).get("namespace") in self.namespaces

    # The KubeVirt CR ----------------------------------------------------------------------------

    async def _kubevirt(self) -> Object:
        return await self.client.get(KUBEVIRTS, KUBEVIRT_NAME, KUBEVIRT_NAMESPACE)

    async def _configure(self) -> None:
        current = await self._kubevirt()
        self._original_configuration = copy.deepcopy(
            (current.get("spec") or {}).get("configuration") or {}
        )
        if self.limits is not None:
            migrations = {
                "parallelMigrationsPerCluster": self.limits.per_cluster,
                "parallelOutboundMigrationsPerNode": self.limits.outbound_per_node,
            }
            await self._patch_configuration({"migrations": migrations})

    async def _patch_configuration(
        self, configuration: Mapping[str, Any], *, replace: bool = False
    ) -> None:
        if replace:
            kubevirt = await self._kubevirt()
            kubevirt.setdefault("spec", {})["configuration"] = dict(configuration)
            await self.client.update(KUBEVIRTS, kubevirt)
            return
        body = {"spec": {"configuration": dict(configuration)}}
        await self.client.patch(KUBEVIRTS, KUBEVIRT_NAME, body, KUBEVIRT_NAMESPACE)

    async def set_ratio(self, ratio: str | None) -> None:
        """What Harvester's setting controller does with additional-guest-memory-overhead-ratio:
        writes it into the KubeVirt CR (None removes it: KubeVirt's default)."""
        await self._patch_configuration({"additionalGuestMemoryOverheadRatio": ratio})

    async def overhead_ratio(self) -> str | None:
        """The ratio in the KubeVirt CR now (None: unset)."""
        configuration = ((await self._kubevirt()).get("spec") or {}).get("configuration") or {}
        value = configuration.get("additionalGuestMemoryOverheadRatio")
        return None if value in (None, "") else str(value)

    # VMs ----------------------------------------------------------------------------------------

    def _ns(self, namespace: str | None) -> str:
        if namespace:
            return namespace
        if self.namespaces is not None and len(self.namespaces) == 1:
            return next(iter(self.namespaces))
        raise ValueError("no namespace given, and the driver is not bound to one")

    async def create_vm(
        self,
        spec: VMSpec,
        namespace: str | None = None,
        *,
        running: bool = True,
        node: str | None = None,
        wait: bool = True,
    ) -> VMStart:
        """Creates the VM as Harvester would (its mutator's requests and guest memory), defaulted
        as virt-api would; if `running` and `wait`, waits until it runs or virt-controller reports
        its launcher pod refused (see `start_vm`; without `wait`, `running_vmis` tells). `node` is
        a preferred node, as a user's affinity: a migration target is never bound to it."""
        ns = self._ns(namespace)
        version = parse_kubevirt_version(self.kubevirt_version)
        ratio = await self.overhead_ratio()
        vm = render_vm(spec, ns, vm_resources(spec, version, ratio), running=running)
        vmi_spec = vm["spec"]["template"]["spec"]
        vmi_spec["domain"]["cpu"]["model"] = "host-model"  # virt-api's defaulting
        if node is not None:
            vmi_spec["affinity"] = _preferred_node(node)
        self._remember(ns, spec)
        await self.client.create(VIRTUAL_MACHINES, vm, ns)
        if not running or not wait:
            return VMStart(ns, spec.name, "", None, None)
        return await self._wait_started(ns, spec.name, old_uid=None)

    def running_vmis(self) -> int:
        """VMIs in scope that run now (from the watch cache: no request)."""
        return sum(
            1
            for vmi in self._vmis.store.iter()
            if self._in_scope(vmi) and status(vmi).get("phase") == "Running"
        )

    def vmi_uid(self, namespace: str, name: str) -> str | None:
        """The uid of VMI `namespace`/`name` as the watch cache holds it (no request); None if
        it holds none."""
        vmi = self._vmis.store.get(f"{namespace}/{name}")
        return None if vmi is None else str(meta(vmi).get("uid"))

    async def start_vm(
        self, name: str, namespace: str | None = None, *, node: str | None = None
    ) -> VMStart:
        """Starts a halted VM (runStrategy back to RerunOnFailure) and waits until its VMI runs,
        or until virt-controller reports its launcher pod refused (``FailedCreate``): then the
        result's `refusal` holds the API server's message and virt-controller keeps retrying."""
        ns = self._ns(namespace)
        del node  # placement of a restart is the scheduler's
        await self.client.patch(
            VIRTUAL_MACHINES, name, {"spec": {"runStrategy": "RerunOnFailure"}}, ns
        )
        return await self._wait_started(ns, name, old_uid=None)

    async def stop_vm(self, name: str, namespace: str | None = None) -> None:
        """Halts the VM: virt-controller deletes its VMI and launcher pods."""
        ns = self._ns(namespace)
        await self.client.patch(VIRTUAL_MACHINES, name, {"spec": {"runStrategy": "Halted"}}, ns)

    async def delete_vmi(self, name: str, namespace: str | None = None) -> None:
        """Deletes the VMI (mid-migration, say): virt-controller deletes its pods and fails its
        migrations; a RerunOnFailure VM is not restarted."""
        with contextlib.suppress(errors.NotFound):
            await self.client.delete(VIRTUAL_MACHINE_INSTANCES, name, self._ns(namespace))

    async def restart_vm(
        self, name: str, namespace: str | None = None, *, node: str | None = None
    ) -> VMStart:
        """What ``virtctl restart`` makes happen: the VMI is deleted, and once it is gone the VM
        controller creates a new one (new UID)."""
        ns = self._ns(namespace)
        del node
        old_uid = await self._vmi_uid(ns, name)
        await self.stop_vm(name, ns)
        deadline = self.clock.monotonic() + START_TIMEOUT
        while await self._vmi_uid(ns, name) == old_uid and old_uid is not None:
            if self.clock.monotonic() > deadline:
                raise TimeoutError(f"VMI {ns}/{name} was not removed within {START_TIMEOUT}s")
            await self.clock.sleep(POLL)
        return await self.start_vm(name, ns)

    async def _vmi_uid(self, namespace: str, name: str) -> str | None:
        vmi = await self._read_vmi(namespace, name)
        return None if vmi is None else str(meta(vmi).get("uid"))

    async def _wait_started(self, namespace: str, name: str, *, old_uid: str | None) -> VMStart:
        deadline = self.clock.monotonic() + START_TIMEOUT
        while self.clock.monotonic() < deadline:
            started = await self._started(namespace, name, old_uid)
            if started is not None:
                return started
            await self.clock.sleep(POLL)
        raise TimeoutError(f"VM {namespace}/{name} neither ran nor was refused in {START_TIMEOUT}s")

    async def _started(self, namespace: str, name: str, old_uid: str | None) -> VMStart | None:
        vmi = await self._read_vmi(namespace, name)
        if vmi is None:
            return None
        uid = str(meta(vmi).get("uid"))
        if uid == old_uid:
            return None
        node = status(vmi).get("nodeName")
        if status(vmi).get("phase") == "Running" and node:
            pods = await self.client.list_all(
                PODS, namespace, label_selector=f"{LABEL_CREATED_BY}={uid}"
            )
            names = [
                str(meta(p).get("name"))
                for p in pods.items
                if (p.get("spec") or {}).get("nodeName") == node
                and not meta(p).get("deletionTimestamp")
            ]
            return VMStart(namespace, name, uid, names[0] if names else None, str(node))
        refusal = await self._start_refusal(namespace, uid)
        return None if refusal is None else VMStart(namespace, name, uid, None, None, refusal)

    async def _start_refusal(self, namespace: str, vmi_uid: str) -> str | None:
        events = await self.client.list_all(
            EVENTS,
            namespace,
            field_selector=f"involvedObject.uid={vmi_uid},reason=FailedCreate",
        )
        for event in events.items:
            message = str(event.get("message") or "")
            if EXCEEDED_QUOTA in message or "forbidden" in message:
                return message.removeprefix(POD_CREATE_FAILED)
        return None

    # Migrations ---------------------------------------------------------------------------------

    def fail_next_migration(self, vmi_name: str, namespace: str | None = None) -> None:
        self.handler.fail_next_migration(self._ns(namespace), vmi_name)

    def end_migration_now(self, vmi_name: str, namespace: str | None = None) -> None:
        """The VM's migration completes now instead of after its duration
        (`VirtHandler.end_migration_now`): a test holds it running while it looks, then ends it."""
        self.handler.end_migration_now(self._ns(namespace), vmi_name)

    async def drain(self, node: str, *, cordon: bool = True) -> list[str]:
        """``kubectl drain`` as KubeVirt sees it: the node cordoned (optional) and tainted with
        KubeVirt's drain taint; virt-controller's evacuation controller then creates the
        migrations, within its parallel limits. Returns no keys: the migrations are created
        over time (see `evacuating`)."""
        taints = await self._taints_but_drain(node)
        taints.append({"key": DRAIN_TAINT_KEY, "effect": "NoSchedule", "value": "draining"})
        body: Object = {"spec": {"taints": taints}}
        if cordon:
            body["spec"]["unschedulable"] = True
        await self.client.patch(NODES, node, body)
        self._drained.add(node)
        return []

    async def uncordon(self, node: str) -> None:
        """Undoes `drain`: schedulable again, without the drain taint."""
        taints = await self._taints_but_drain(node)
        await self.client.patch(
            NODES, node, {"spec": {"unschedulable": None, "taints": taints or None}}
        )
        self._drained.discard(node)

    async def _taints_but_drain(self, node: str) -> list[Object]:
        """`node`'s taints as the API server has them now (one GET), KubeVirt's drain taint left
        out."""
        node_obj = await self.client.get(NODES, node)
        return [
            t
            for t in (node_obj.get("spec") or {}).get("taints") or []
            if t.get("key") != DRAIN_TAINT_KEY
        ]

    async def evacuating(self) -> list[str]:
        """Running LiveMigrate VMIs (in scope) still on a drained node: migrations the
        evacuation controller has still to create or finish."""
        if not self._drained:
            return []
        listed = await self.client.list_all(VIRTUAL_MACHINE_INSTANCES)
        return [
            f"{meta(v).get('namespace')}/{meta(v).get('name')}"
            for v in listed.items
            if self._in_scope(v)
            and status(v).get("nodeName") in self._drained
            and status(v).get("phase") == "Running"
            and (v.get("spec") or {}).get("evictionStrategy") == "LiveMigrate"
        ]

    # Watching -----------------------------------------------------------------------------------

    def _register(self) -> None:
        self._migrations.add_event_handler(
            ResourceEventHandler.of_latest(self._migration_seen, self._migration_deleted),
            name="real kubevirt records: migrations",
        )
        self._pods.add_event_handler(
            ResourceEventHandler.of_latest(self._pod_seen, self._pod_deleted),
            name="real kubevirt records: pods",
        )
        self._vmis.add_event_handler(
            ResourceEventHandler.of_latest(self._vmi_seen),
            name="real kubevirt records: vmis",
        )
        self._events.add_event_handler(
            ResourceEventHandler.of_latest(self._event_seen),
            name="real kubevirt records: events",
        )

    def _record(self, migration: Object) -> MigrationRecord:
        uid = str(meta(migration).get("uid"))
        existing = self.records.by_uid(uid)
        if existing is not None:
            return existing
        annotations = meta(migration).get("annotations") or {}
        return self.records.add(
            MigrationRecord(
                namespace=str(meta(migration).get("namespace")),
                name=str(meta(migration).get("name")),
                uid=uid,
                vmi=str((migration.get("spec") or {}).get("vmiName")),
                created=Moment.now(self.clock),
                evacuation_node=annotations.get(ANNOTATION_EVACUATION),
            )
        )

    def _migration_seen(self, migration: Object) -> None:
        if not self._in_scope(migration):
            return
        record = self._record(migration)
        now = Moment.now(self.clock)
        phase = Phase.parse(status(migration).get("phase"))
        if phase is not record.phase and phase is not Phase.UNSET:
            record.phases.append((phase, now))
        state = status(migration).get("migrationState") or {}
        self._note_nodes_and_pods(record, state)
        if phase in RUNNING_PHASES and record.admitted is None:
            record.admitted = now
        if phase is Phase.RUNNING and record.started is None:
            record.started = now
        if (
            any(
                c.get("type") == "migrationRejectedByResourceQuota"
                for c in status(migration).get("conditions") or []
            )
            and record.first_refused is None
        ):
            record.first_refused = now
        if phase in FINAL and not record.done:
            self._finish(record, migration, state, now)
        self._check_source_pod(record)
        self.records.changed()

    @staticmethod
    def _note_nodes_and_pods(record: MigrationRecord, state: Mapping[str, Any]) -> None:
        record.source_node = state.get("sourceNode") or record.source_node
        record.target_node = state.get("targetNode") or record.target_node
        record.source_pod = state.get("sourcePod") or record.source_pod
        record.target_pod = state.get("targetPod") or record.target_pod

    def _vmi_seen(self, vmi: Object) -> None:
        """The VMI's migrationState names the nodes and pods (the VMIM carries a copy only from
        KubeVirt v1.7 on)."""
        state = status(vmi).get("migrationState")
        if not isinstance(state, Mapping) or not self._in_scope(vmi):
            return
        record = self.records.by_uid(str(state.get("migrationUid")))
        if record is None:
            return
        self._note_nodes_and_pods(record, state)
        self._check_source_pod(record)
        self.records.changed()

    def _finish(
        self, record: MigrationRecord, migration: Object, state: Mapping[str, Any], now: Moment
    ) -> None:
        record.finished = now
        if Phase.parse(status(migration).get("phase")) is Phase.SUCCEEDED:
            record.outcome = Outcome.SUCCEEDED
        elif state.get("abortStatus") == "Succeeded" or meta(migration).get("deletionTimestamp"):
            record.outcome = Outcome.ABORTED
        else:
            record.outcome = Outcome.FAILED
        record.failure_reason = str(state.get("failureReason") or "")

    def _migration_deleted(self, obj: Object | Tombstone) -> None:
        migration = obj.obj if isinstance(obj, Tombstone) else obj
        record = self.records.by_uid(str(meta(migration).get("uid")))
        if record is None or record.done:
            return
        record.finished = Moment.now(self.clock)
        record.outcome = Outcome.ABORTED
        self.records.changed()

    def _pod_seen(self, pod: Object) -> None:
        if not self._in_scope(pod):
            return
        uid = (meta(pod).get("labels") or {}).get(LABEL_MIGRATION_JOB_UID)
        record = self.records.by_uid(str(uid)) if uid else None
        if record is not None and record.admitted is None:
            record.admitted = Moment.now(self.clock)
            record.target_pod = str(meta(pod).get("name"))
            self.records.changed()
        for candidate in self._records_of_source(pod):
            self._check_source_pod(candidate, pod)

    def _records_of_source(self, pod: Object) -> list[MigrationRecord]:
        """Succeeded migrations whose source pod is `pod` and not yet gone."""
        return [
            record
            for record in self.records.all()
            if record.outcome is Outcome.SUCCEEDED
            and record.source_pod_gone is None
            and record.namespace == meta(pod).get("namespace")
            and record.source_pod == meta(pod).get("name")
        ]

    def _pod_deleted(self, obj: Object | Tombstone) -> None:
        pod = obj.obj if isinstance(obj, Tombstone) else obj
        for record in self._records_of_source(pod):
            record.source_pod_gone = Moment.now(self.clock)
            self.records.changed()

    def _check_source_pod(self, record: MigrationRecord, pod: Object | None = None) -> None:
        """A succeeded migration's source pod is gone once it exited or was deleted."""
        if record.outcome is not Outcome.SUCCEEDED or record.source_pod_gone is not None:
            return
        if not record.source_pod:
            return
        if pod is None:
            pod = self._pods.store.get(f"{record.namespace}/{record.source_pod}")
        if pod is None or status(pod).get("phase") in ("Succeeded", "Failed"):
            record.source_pod_gone = Moment.now(self.clock)
            self.records.changed()

    def _event_seen(self, event: Object) -> None:
        """Each new failed pod create virt-controller reports on a VMI counts against the
        migration of that VMI that waits for its target pod: a quota refusal (`note_refusal`) or
        a create that failed otherwise (`note_failed_create`), such as quota admission's
        Conflict (`note_create_failures`)."""
        involved = event.get("involvedObject") or {}
        message = str(event.get("message") or "")
        if involved.get("kind") != "VirtualMachineInstance":
            return
        if not self._in_scope(event):
            return
        key = str(meta(event).get("uid"))
        count = int(event.get("count") or 1)
        new = count - self._event_counts.get(key, 0)
        self._event_counts[key] = count
        waiting = [
            r
            for r in self.records.all()
            if r.namespace == involved.get("namespace")
            and r.vmi == involved.get("name")
            and r.admitted is None
            and not r.done
        ]
        if not waiting or new <= 0:
            return
        note_create_failures(waiting[-1], message, new, Moment.now(self.clock))
        self.records.changed()


def note_create_failures(record: MigrationRecord, message: str, times: int, now: Moment) -> None:
    """Notes on `record` `times` failed creates of its target pod, reported by virt-controller
    with `message` (a FailedCreate Event's on the VMI, perhaps folded into one "combined from
    similar events"): a quota refusal (`EXCEEDED_QUOTA`) or a pod create that failed otherwise
    (``Error creating pod: ...``, such as quota admission's Conflict). The Event's other uses of
    that reason (a migration, an attachment pod or a disruption budget the VMI's controllers
    could not create, quota refusing them included) are not the target's, and are ignored."""
    latest = message.removeprefix(AGGREGATE_PREFIX)
    if not latest.startswith(POD_CREATE_FAILED):
        return
    cause = latest.removeprefix(POD_CREATE_FAILED)
    note = record.note_refusal if EXCEEDED_QUOTA in cause else record.note_failed_create
    for _ in range(times):
        note(cause, now)


def _preferred_node(node: str) -> Object:
    """A preferred (not required) affinity for one node: the VM starts there; its migration
    target, which inherits the affinity, can still go anywhere else."""
    return {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "preference": {
                        "matchExpressions": [
                            {"key": HOSTNAME_LABEL, "operator": "In", "values": [node]}
                        ]
                    },
                }
            ]
        }
    }
