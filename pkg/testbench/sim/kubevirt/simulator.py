"""The KubeVirt simulator: VMs and their launcher pods, live migrations, node drains.

`KubeVirtSimulator` plays virt-controller (and virt-handler's visible part) against a real API
server, in one namespace or cluster-wide:

    async with KubeVirtSimulator(api, namespace="quota-test") as kubevirt:
        started = await kubevirt.create_vm(VMSpec("vm1", cores=2, memory="4Gi"))
        name = await kubevirt.migrate("vm1")
        await kubevirt.records.wait_all_finished(timeout=60)

VM starts are direct calls (the VM, its VMI, its launcher pod bound to a node, then the VMI's
Running status); migrations are informer-driven (see `migration.MigrationController`), so a
migration created by anyone (kubectl, Harvester, a drain) is handled the same way. Timing uses the
injected clock (real in integration tests).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from typing import Any

from ....apis.harvester import SETTINGS
from ....apis.kubevirt import (
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
    VIRTUAL_MACHINE_INSTANCES,
    VIRTUAL_MACHINES,
)
from ....config.kubevirt import host_architecture
from ....generic import errors
from ....generic.client import ApiClient
from ....generic.clock import REAL_CLOCK, Clock
from ....generic.events import WARNING, EventRecorder
from ....generic.resource import NODES, PODS, Object
from ....util.kubevirtversion import KubeVirtVersion
from ....util.launcher import LauncherSettings
from ....util.overhead import HARVESTER_RATIO_DEFAULT, kubevirt_ratio_from_harvester_setting
from .config import KubeVirtConfig, VMStart
from .driver import KubeVirtDriver
from .migration import FINAL_VMI_PHASES, MigrationController
from .objects import (
    API_VERSION,
    LABEL_CREATED_BY,
    LABEL_NODE_NAME,
    LIVE_MIGRATE,
    MIGRATION_FINALIZER,
    POD_CREATE_FAILED,
    SETTING_OVERHEAD_RATIO,
    VMSpec,
    launcher_image,
    meta,
    parse_version,
    ratio_supported,
    render_launcher_pod,
    render_migration,
    render_vm,
    render_vmi,
    status,
    timestamp,
    vm_resources,
)
from .phases import FINAL, Phase
from .view import ClusterView

log = logging.getLogger(__name__)

POD_GONE_POLL = 0.25
"""Seconds between looks at a stopping VM's pods (restart waits until they are gone)."""
POD_GONE_SLACK = 30.0
"""Seconds a restart waits beyond the pods' grace period before giving up."""
DEFAULT_POD_GRACE_SECONDS = 30
"""Kubernetes' terminationGracePeriodSeconds when a pod leaves it unset."""


def pod_grace_seconds(pod: Object) -> int:
    """The pod's terminationGracePeriodSeconds (0 is a valid grace: delete at once)."""
    grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return DEFAULT_POD_GRACE_SECONDS if grace is None else int(grace)


class KubeVirtSimulator(KubeVirtDriver):
    """Simulated virt-controller for one namespace (`namespace`) or the whole cluster (None).

    An aborted migration (`abort` deletes it) loses its target pod at once before hand-off; after
    hand-off the VMI reports abortStatus Succeeded, the migration ends Failed and the target pod
    is deleted after `timings.failed_target_linger`.
    """

    def __init__(
        self,
        client: ApiClient,
        *,
        namespace: str | None = None,
        config: KubeVirtConfig | None = None,
        clock: Clock = REAL_CLOCK,
    ) -> None:
        super().__init__(client, clock)
        self.namespace = namespace
        self.config = config or KubeVirtConfig()
        self.view = ClusterView(client, namespace=namespace, clock=clock)
        self.events = (
            EventRecorder(client, "virt-controller", clock=clock)
            if self.config.record_events
            else None
        )
        """Writes the Kubernetes Events virt-controller writes; None without `record_events`."""
        self.migrations = MigrationController(self)
        self._last_ratio: str | None = HARVESTER_RATIO_DEFAULT
        self._round_robin = itertools.count()
        self._running = False

    # Lifecycle ----------------------------------------------------------------------------------

    async def start(self, *, sync_timeout: float | None = 30.0) -> None:
        """Starts the informers, waits for their caches, then starts the migration workers."""
        if self._running:
            return
        if not await self.view.start(sync_timeout):
            await self.view.stop()
            raise TimeoutError(f"the simulator's caches did not sync within {sync_timeout}s")
        self.migrations.start()
        self._running = True

    async def stop(self, *, release_finalizers: bool = True) -> None:
        """Stops the workers and informers. With `release_finalizers`, migrations keep no
        `kubevirt.io/migrationJobFinalize` (as if KubeVirt were uninstalled), so that their
        namespace can be deleted without the simulator."""
        if not self._running:
            return
        self._running = False
        await self.migrations.stop()
        if release_finalizers:
            await self._release_finalizers()
        if self.events is not None:
            await self.events.close()
        await self.view.stop()

    async def _release_finalizers(self) -> None:
        for migration in self.view.all_migrations():
            finalizers = list(meta(migration).get("finalizers") or [])
            if MIGRATION_FINALIZER not in finalizers:
                continue
            remaining = [f for f in finalizers if f != MIGRATION_FINALIZER] or None
            try:
                await self.client.patch(
                    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
                    str(meta(migration).get("name")),
                    {"metadata": {"finalizers": remaining}},
                    str(meta(migration).get("namespace")),
                )
            except errors.ApiError as error:
                log.warning("could not release the finalizer of a migration: %s", error)

    # Settings -----------------------------------------------------------------------------------

    async def overhead_ratio(self, version: KubeVirtVersion | None = None) -> str | None:
        """The overhead ratio KubeVirt uses now: None for versions without one; else the Harvester
        setting's value (its default when empty, "1.5" when the setting does not exist), or
        `config.ratio` when the simulator does not read the setting. An invalid setting value is
        refused as Harvester refuses it: the last good ratio stays in force."""
        if not ratio_supported(version or self.config.version):
            return None
        if not self.config.ratio_from_setting:
            return self.config.ratio
        try:
            setting = await self.client.get(SETTINGS, SETTING_OVERHEAD_RATIO)
        except errors.NotFound:
            return HARVESTER_RATIO_DEFAULT
        value = setting.get("value")
        default = setting.get("default") or HARVESTER_RATIO_DEFAULT
        try:
            ratio = kubevirt_ratio_from_harvester_setting(
                value if isinstance(value, str) else None, str(default)
            )
        except ValueError as error:
            log.warning("%s; keeping ratio %s", error, self._last_ratio)
            return self._last_ratio
        self._last_ratio = ratio
        return ratio

    def _launcher_version(self, namespace: str, name: str) -> KubeVirtVersion:
        spec = self._spec(namespace, name)
        if spec is not None and spec.kubevirt_version:
            return parse_version(spec.kubevirt_version)
        return self.config.version

    def _ns(self, namespace: str | None) -> str:
        chosen = namespace or self.namespace
        if not chosen:
            raise ValueError("no namespace given, and the simulator is not bound to one")
        return chosen

    # VMs ----------------------------------------------------------------------------------------

    async def create_vm(
        self,
        spec: VMSpec,
        namespace: str | None = None,
        *,
        running: bool = True,
        node: str | None = None,
    ) -> VMStart:
        """Creates the VM as Harvester would (mutator-derived requests and guest memory) and, if
        `running`, starts it (see `start_vm`)."""
        ns = self._ns(namespace)
        version = parse_version(spec.kubevirt_version or self.config.kubevirt_version)
        resources = vm_resources(spec, version, await self.overhead_ratio(version))
        vm = await self.client.create(
            VIRTUAL_MACHINES, render_vm(spec, ns, resources, running=running), ns
        )
        self._remember(ns, spec)
        if not running:
            await self._vm_status(ns, spec.name, printable="Stopped", ready=False, created=False)
            return VMStart(ns, spec.name, "", None, None)
        return await self._start(vm, node)

    async def start_vm(
        self, name: str, namespace: str | None = None, *, node: str | None = None
    ) -> VMStart:
        """Starts a VM: its VMI (unless one exists), then the launcher pod on `node` (default: the
        least loaded schedulable node), rendered for the ratio in force now. A pod refused by the
        API server (quota) is not an error: the VMI stays Pending with a Synchronized=False
        condition carrying the message, a FailedCreate event is written, and the result's
        `refusal` holds the message; calling start_vm again retries."""
        ns = self._ns(namespace)
        vm = await self.client.get(VIRTUAL_MACHINES, name, ns)
        if (vm.get("spec") or {}).get("runStrategy") == "Halted":
            vm = await self.client.patch(
                VIRTUAL_MACHINES, name, {"spec": {"runStrategy": "RerunOnFailure"}}, ns
            )
        return await self._start(vm, node)

    async def _start(self, vm: Object, node: str | None) -> VMStart:
        ns, name = str(meta(vm).get("namespace")), str(meta(vm).get("name"))
        vmi = await self._read_vmi(ns, name)
        if vmi is None:
            vmi = await self.client.create(VIRTUAL_MACHINE_INSTANCES, render_vmi(vm), ns)
            vmi = await self._patch_vmi_status(
                vmi,
                {"phase": "Pending", "phaseTransitionTimestamps": [self._transition("Pending")]},
            )
        if status(vmi).get("phase") == "Running":
            uid = str(meta(vmi).get("uid"))
            node_name = status(vmi).get("nodeName")
            running = [
                str(meta(pod).get("name"))
                for pod in await self._pods_of(ns, uid)
                if not meta(pod).get("deletionTimestamp")
                and (pod.get("spec") or {}).get("nodeName") == node_name
            ]
            return VMStart(ns, name, uid, running[0] if running else None, node_name)
        return await self._start_pod(vmi, node)

    async def _start_pod(self, vmi: Object, node: str | None) -> VMStart:
        ns, name = str(meta(vmi).get("namespace")), str(meta(vmi).get("name"))
        uid = str(meta(vmi).get("uid"))
        version = self._launcher_version(ns, name)
        node = node or self._pick_node()
        if node is None:
            raise RuntimeError(f"no Ready, schedulable node to start VM {ns}/{name} on")
        has_cpu, has_memory = self.view.quota_limits_keys(ns)
        # virt-controller sizes a VMI without spec.architecture for its own GOARCH, as
        # production assumes: this host's.
        settings = LauncherSettings(
            cluster_arch=host_architecture(),
            kubevirt_version=version,
            ratio=await self.overhead_ratio(version),
            quota_has_limits_cpu=has_cpu,
            quota_has_limits_memory=has_memory,
        )
        pod = render_launcher_pod(vmi, node=node, settings=settings)
        try:
            created = await self.client.create(PODS, pod, ns)
        except errors.Forbidden as error:
            await self._start_refused(vmi, error.message)
            return VMStart(ns, name, uid, None, None, refusal=error.message)
        await self._vmi_running(vmi, created, node, version)
        await self._vm_status(ns, name, printable="Running", ready=True, created=True)
        log.info("started VM %s/%s on %s (pod %s)", ns, name, node, meta(created).get("name"))
        return VMStart(ns, name, uid, str(meta(created).get("name")), node)

    def _pick_node(self) -> str | None:
        nodes = self.view.schedulable_nodes(self.config.nodes)
        if not nodes:
            return None
        counts = self.view.launcher_count_by_node()
        least = min(counts.get(node, 0) for node in nodes)
        candidates = [node for node in nodes if counts.get(node, 0) == least]
        return candidates[next(self._round_robin) % len(candidates)]

    def _transition(self, phase: str) -> Object:
        return {"phase": phase, "phaseTransitionTimestamp": timestamp(self.clock.now())}

    async def _vmi_running(
        self, vmi: Object, pod: Object, node: str, version: KubeVirtVersion
    ) -> None:
        now = timestamp(self.clock.now())
        transitions = list(status(vmi).get("phaseTransitionTimestamps") or [])
        transitions += [self._transition(p) for p in ("Scheduling", "Scheduled", "Running")]
        await self._patch_vmi_status(
            vmi,
            {
                "phase": "Running",
                "nodeName": node,
                "activePods": {str(meta(pod).get("uid")): node},
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "lastProbeTime": None,
                        "lastTransitionTime": now,
                    },
                    {
                        "type": "LiveMigratable",
                        "status": "True",
                        "lastProbeTime": None,
                        "lastTransitionTime": None,
                    },
                ],
                "phaseTransitionTimestamps": transitions,
                "qosClass": "Burstable",
                "guestOSInfo": {},
                "launcherContainerImageVersion": launcher_image(version),
                "migrationMethod": "LiveMigration",
                "migrationTransport": "Unix",
            },
        )
        await self.client.patch(
            VIRTUAL_MACHINE_INSTANCES,
            str(meta(vmi).get("name")),
            {"metadata": {"labels": {LABEL_NODE_NAME: node}}},
            str(meta(vmi).get("namespace")),
        )

    async def _start_refused(self, vmi: Object, message: str) -> None:
        ns, name = str(meta(vmi).get("namespace")), str(meta(vmi).get("name"))
        text = f"failed to create virtual machine pod: {message}"
        condition = {
            "type": "Synchronized",
            "status": "False",
            "reason": "FailedCreate",
            "message": text,
            "lastProbeTime": None,
            "lastTransitionTime": timestamp(self.clock.now()),
        }
        await self._patch_vmi_status(vmi, {"phase": "Pending", "conditions": [condition]})
        await self._vm_status(
            ns,
            name,
            printable="Starting",
            ready=False,
            created=True,
            conditions=[{**condition, "type": "Failure", "status": "True"}],
        )
        self.pod_refused_event(vmi, message)
        log.info("VM %s/%s could not start: %s", ns, name, message)

    def pod_refused_event(self, vmi: Object, message: str) -> None:
        """Queues virt-controller's Warning Event on ``vmi`` for a pod of it the API server
        refused with ``message`` (a launcher or a migration target pod): reason FailedCreate,
        POD_CREATE_FAILED before the message. None without `config.record_events`."""
        if self.events is not None:
            self.events.event(
                {**vmi, "apiVersion": API_VERSION, "kind": "VirtualMachineInstance"},
                WARNING,
                "FailedCreate",
                f"{POD_CREATE_FAILED}{message}",
            )

    async def _patch_vmi_status(self, vmi: Object, body: Object) -> Object:
        return await self.client.patch(
            VIRTUAL_MACHINE_INSTANCES,
            str(meta(vmi).get("name")),
            {"status": body},
            str(meta(vmi).get("namespace")),
            subresource="status",
        )

    async def _vm_status(
        self,
        namespace: str,
        name: str,
        *,
        printable: str,
        ready: bool,
        created: bool,
        conditions: list[Object] | None = None,
    ) -> None:
        body: dict[str, Any] = {"printableStatus": printable, "ready": ready, "created": created}
        now = timestamp(self.clock.now())
        ready_condition = {
            "type": "Ready",
            "status": "True" if ready else "False",
            "lastProbeTime": None,
            "lastTransitionTime": now,
        }
        body["conditions"] = [ready_condition, *(conditions or [])]
        with contextlib.suppress(errors.NotFound):
            await self.client.patch(
                VIRTUAL_MACHINES, name, {"status": body}, namespace, subresource="status"
            )

    async def stop_vm(
        self, name: str, namespace: str | None = None, *, grace_seconds: int | None = None
    ) -> None:
        """Stops a VM (runStrategy Halted): its VMI ends and its launcher pods are deleted with
        `grace_seconds` (default: each pod's own grace period); a migration in flight fails."""
        ns = self._ns(namespace)
        await self.client.patch(VIRTUAL_MACHINES, name, {"spec": {"runStrategy": "Halted"}}, ns)
        await self._shutdown_vmi(ns, name, grace_seconds)
        await self._vm_status(ns, name, printable="Stopped", ready=False, created=False)

    async def delete_vmi(
        self, name: str, namespace: str | None = None, *, grace_seconds: int | None = None
    ) -> None:
        """Deletes the VMI (e.g. mid-migration): it shuts down, its pods are deleted with
        `grace_seconds`, its migrations fail and are deleted."""
        await self._shutdown_vmi(self._ns(namespace), name, grace_seconds)

    async def restart_vm(
        self,
        name: str,
        namespace: str | None = None,
        *,
        grace_seconds: int | None = None,
        node: str | None = None,
        timeout: float | None = None,
    ) -> VMStart:
        """Restarts a VM: the VMI shuts down, and once its pods are gone a new VMI (new UID)
        starts. `timeout` bounds the wait for the old pods (default: their grace + 30 s)."""
        ns = self._ns(namespace)
        old_uid = await self._shutdown_vmi(ns, name, grace_seconds)
        if old_uid is not None:
            await self._wait_pods_gone(ns, old_uid, grace_seconds, timeout)
        vm = await self.client.get(VIRTUAL_MACHINES, name, ns)
        return await self._start(vm, node)

    async def _shutdown_vmi(self, namespace: str, name: str, grace: int | None) -> str | None:
        """Graceful shutdown: VMI Succeeded, its pods deleted, the VMI deleted; returns its UID."""
        vmi = await self._read_vmi(namespace, name)
        if vmi is None:
            return None
        uid = str(meta(vmi).get("uid"))
        pods = await self._pods_of(namespace, uid)
        if status(vmi).get("phase") not in FINAL_VMI_PHASES:
            transitions = list(status(vmi).get("phaseTransitionTimestamps") or [])
            await self._patch_vmi_status(
                vmi,
                {
                    "phase": "Succeeded",
                    "conditions": [{"type": "Ready", "status": "False", "lastProbeTime": None}],
                    "phaseTransitionTimestamps": [*transitions, self._transition("Succeeded")],
                },
            )
        for pod in pods:
            seconds = grace if grace is not None else pod_grace_seconds(pod)
            with contextlib.suppress(errors.NotFound):
                await self.client.delete(
                    PODS, str(meta(pod).get("name")), namespace, grace_period_seconds=seconds
                )
        with contextlib.suppress(errors.NotFound):
            await self.client.delete(VIRTUAL_MACHINE_INSTANCES, name, namespace)
        log.info("VMI %s/%s shut down (%d pods deleted)", namespace, name, len(pods))
        return uid

    async def _pods_of(self, namespace: str, vmi_uid: str) -> list[Object]:
        listed = await self.client.list_all(
            PODS, namespace, label_selector=f"{LABEL_CREATED_BY}={vmi_uid}"
        )
        return listed.items

    async def _wait_pods_gone(
        self, namespace: str, vmi_uid: str, grace: int | None, timeout: float | None
    ) -> None:
        pods = await self._pods_of(namespace, vmi_uid)
        if timeout is None:
            longest = max((pod_grace_seconds(p) for p in pods), default=0)
            timeout = (grace if grace is not None else longest) + POD_GONE_SLACK
        deadline = self.clock.monotonic() + timeout
        while pods:
            if self.clock.monotonic() > deadline:
                names = [meta(p).get("name") for p in pods]
                raise TimeoutError(f"pods {names} of VMI {vmi_uid} still exist after {timeout}s")
            await self.clock.sleep(POD_GONE_POLL)
            pods = await self._pods_of(namespace, vmi_uid)

    # Migrations ---------------------------------------------------------------------------------

    async def drain(self, node: str, *, cordon: bool = True) -> list[str]:
        """What a node drain makes the evacuation controller do: cordon the node (optional) and
        create one migration (generateName `kubevirt-evacuation-`, annotation
        `kubevirt.io/evacuationMigration: <node>`) for every running VMI on it with
        evictionStrategy LiveMigrate and no unfinished migration. The parallel limits hold the
        excess Pending. Returns the migrations' `namespace/name` keys."""
        if cordon:
            await self.client.patch(NODES, node, {"spec": {"unschedulable": True}})
        vmis = (await self.client.list_all(VIRTUAL_MACHINE_INSTANCES, self.namespace)).items
        migrations = (
            await self.client.list_all(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, self.namespace)
        ).items
        busy = {
            (str(meta(m).get("namespace")), str((m.get("spec") or {}).get("vmiName")))
            for m in migrations
            if Phase.parse(status(m).get("phase")) not in FINAL
        }
        keys = []
        scope = self.config.namespaces
        for vmi in sorted(vmis, key=lambda v: str(meta(v).get("name"))):
            ns, name = str(meta(vmi).get("namespace")), str(meta(vmi).get("name"))
            if scope is not None and ns not in scope:
                continue
            if status(vmi).get("nodeName") != node or status(vmi).get("phase") != "Running":
                continue
            if (vmi.get("spec") or {}).get("evictionStrategy") != LIVE_MIGRATE or (
                ns,
                name,
            ) in busy:
                continue
            try:
                created = await self.client.create(
                    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
                    render_migration(ns, name, evacuation_node=node),
                    ns,
                )
            except errors.ApiError as error:
                # The evacuation controller retries a VMI it could not migrate; one refusal must
                # not stop the drain of the others.
                log.warning("drain of %s: cannot migrate %s/%s: %s", node, ns, name, error)
                continue
            keys.append(f"{ns}/{meta(created).get('name')}")
        log.info("drain of %s: %d evacuation migrations", node, len(keys))
        return keys

    async def uncordon(self, node: str) -> None:
        await self.client.patch(NODES, node, {"spec": {"unschedulable": None}})


async def set_overhead_ratio_setting(client: ApiClient, value: str) -> Object:
    """Creates or updates Harvester's `additional-guest-memory-overhead-ratio` setting (what a user
    does in the Harvester UI); the simulator reads it at each VM start and target pod."""
    try:
        setting = await client.get(SETTINGS, SETTING_OVERHEAD_RATIO)
    except errors.NotFound:
        return await client.create(
            SETTINGS,
            {
                "apiVersion": f"{SETTINGS.group}/{SETTINGS.version}",
                "kind": SETTINGS.kind,
                "metadata": {"name": SETTING_OVERHEAD_RATIO},
                "default": HARVESTER_RATIO_DEFAULT,
                "value": value,
            },
        )
    setting["value"] = value
    return await client.update(SETTINGS, setting)
