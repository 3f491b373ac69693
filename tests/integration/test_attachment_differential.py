"""Differential test: the hotplug attachment pods and volume-migration targets the REAL
virt-controller creates against ours.

For each KubeVirt version the bench builds, a VM runs (virt-controller's launcher pod, the
virt-handler stand-in's node side) and gets one or several hotplugged volumes, each a statically
bound PersistentVolume/PersistentVolumeClaim pair (the local kube-controller-manager binds them),
added to the VMI's spec as virt-api's addvolume leaves it. virt-controller's VMI controller then
creates the attachment pod beside the launcher; a migration makes it create the target's own
beside the target launcher pod. Each pod's quota usage must equal, key for key,
`attachment_usage` with the settings read from the KubeVirt CR, under KubeVirt's defaults
and under a CR whose supportContainerResources override the attachment container (type
hotplug-disk); and the room the plan holds for the migration must be made of exactly the target
launcher pod and that attachment pod.

A volume migration (updateVolumesStrategy: Migration, a claim swapped in the VM's template) is
created by virt-controller's workload updater itself; its target pod, mounting the new claim, must
equal our rendering of the VMI and be the room.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from harvester_quota.apis.kubevirt import (
    KUBEVIRTS,
    LABEL_MIGRATION_JOB,
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
    VIRTUAL_MACHINE_INSTANCES,
    VIRTUAL_MACHINES,
)
from harvester_quota.config.kubevirt import settings_from
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import NAMESPACES, NODES, PODS, Object, Resource
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.localcluster.cluster import KUBEVIRT_NAMESPACE
from harvester_quota.testbench.sim.kubevirt import VMSpec
from harvester_quota.testbench.sim.kubevirt.handler import HandlerTimings
from harvester_quota.testbench.virtcontroller import VirtControllerDriver
from harvester_quota.util.kubevirtversion import parse_kubevirt_version
from harvester_quota.util.launcher import (
    LauncherSettings,
    rendered_memory_overhead,
    target_quota_usage,
    vmi_view,
)
from harvester_quota.util.launcher.attachment import attachment_usage
from harvester_quota.util.podusage import pod_quota_usage
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.resourcequota.plan import desired_hard
from harvester_quota.util.resourcequota.rooms import plan_rooms
from harvester_quota.util.resources import total

from tests.helpers import eventually
from tests.integration import real_kubevirt
from tests.objects import pods_of

pytestmark = pytest.mark.integration

kubevirt_cluster = real_kubevirt.kubevirt_cluster

PERSISTENT_VOLUMES = Resource("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False)
PERSISTENT_VOLUME_CLAIMS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
HOTPLUG_SELECTOR = "kubevirt.io=hotplug-disk"
OVERHEAD_ANNOTATION = "kubevirt.io/memory-overhead-bytes"
TIMEOUT = 90.0
MIGRATION_SECONDS = 120.0
"""How long the stand-in would keep the migration Running: the room is looked at meanwhile, then
the test ends the migration (`end_migration_now`) and waits for its outcome."""
OVERRIDE = [
    {
        "type": "hotplug-disk",
        "resources": {"limits": {"cpu": "150m"}, "requests": {"memory": "3M"}},
    }
]


@pytest.fixture
async def api(kubevirt_cluster: ClusterInfo) -> AsyncIterator[ApiClient]:
    async with ApiClient(kubevirt_cluster.admin_config()) as client:
        yield client


@pytest.fixture
async def namespace(api: ApiClient) -> AsyncIterator[str]:
    name = f"hp-{uuid.uuid4().hex[:8]}"
    await api.create(NAMESPACES, {"metadata": {"name": name}})

    async def has_default_account() -> bool:
        accounts = await api.list(Resource("", "v1", "serviceaccounts", "ServiceAccount"), name)
        return any(a["metadata"]["name"] == "default" for a in accounts.get("items", []))

    await eventually(has_default_account, what=f"service account default in {name}")
    yield name
    await api.delete(NAMESPACES, name)


@pytest.fixture
async def kubevirt(
    api: ApiClient, kubevirt_cluster: ClusterInfo, namespace: str
) -> AsyncIterator[VirtControllerDriver]:
    driver = VirtControllerDriver(
        api,
        kubevirt_version=str(kubevirt_cluster.kubevirt_version),
        namespaces=frozenset({namespace}),
        timings=HandlerTimings(migration=0.5, source_shutdown=1.0, target_exit=0.5),
    )
    async with driver:
        yield driver


async def bound_claims(api: ApiClient, namespace: str, count: int) -> list[str]:
    """`count` PVCs, each statically bound to a hostPath PV of its own."""
    names = [f"{namespace}-d{i}" for i in range(count)]
    for name in names:
        await api.create(
            PERSISTENT_VOLUMES,
            {
                "metadata": {"name": name},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": "",
                    "persistentVolumeReclaimPolicy": "Delete",
                    "hostPath": {"path": f"/tmp/{name}"},
                },
            },
        )
        await api.create(
            PERSISTENT_VOLUME_CLAIMS,
            {
                "metadata": {"name": name},
                "spec": {
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": "",
                    "volumeName": name,
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            },
            namespace,
        )

    async def all_bound() -> bool:
        claims = await api.list(PERSISTENT_VOLUME_CLAIMS, namespace)
        phases = {
            c["metadata"]["name"]: (c.get("status") or {}).get("phase") for c in claims["items"]
        }
        return all(phases.get(name) == "Bound" for name in names)

    await eventually(all_bound, what="claims bound by kube-controller-manager", timeout=TIMEOUT)
    return names


def declarative_hotplug(cluster: ClusterInfo) -> bool:
    """KubeVirt v1.9 turns the Beta DeclarativeHotplugVolumes gate on: its VM controller then
    makes a running VMI's hotplugged volumes those of the VM's spec, removing any added to the
    VMI alone, so a volume is hotplugged by adding it to the VM."""
    return parse_kubevirt_version(cluster.kubevirt_version or "").at_least(1, 9)


def _hotplug_entries(claim: str) -> tuple[dict[str, Any], dict[str, Any]]:
    volume = {"name": claim, "persistentVolumeClaim": {"claimName": claim, "hotpluggable": True}}
    return volume, {"name": claim, "disk": {"bus": "scsi"}}


async def hotplug(
    api: ApiClient, namespace: str, vmi_name: str, claims: list[str], *, declarative: bool
) -> Object:
    """The claims hotplugged into the running VMI: added to its VM's spec where KubeVirt syncs
    hotplugged volumes from it (`declarative_hotplug`), else to the VMI's spec as virt-api's
    addvolume adds them (a JSON patch: virt-controller writes the VMI meanwhile). Returns the VMI
    once its spec has them."""
    if declarative:
        return await _hotplug_into_vm(api, namespace, vmi_name, claims)
    vmi = await api.get(VIRTUAL_MACHINE_INSTANCES, vmi_name, namespace)
    patch: list[dict[str, Any]] = []
    if not vmi["spec"].get("volumes"):
        patch.append({"op": "add", "path": "/spec/volumes", "value": []})
    if not vmi["spec"]["domain"]["devices"].get("disks"):
        patch.append({"op": "add", "path": "/spec/domain/devices/disks", "value": []})
    for claim in claims:
        volume, disk = _hotplug_entries(claim)
        patch.append({"op": "add", "path": "/spec/volumes/-", "value": volume})
        patch.append({"op": "add", "path": "/spec/domain/devices/disks/-", "value": disk})
    return await api.patch(VIRTUAL_MACHINE_INSTANCES, vmi_name, patch, namespace, patch_type="json")


async def _hotplug_into_vm(api: ApiClient, namespace: str, name: str, claims: list[str]) -> Object:
    vm = await api.get(VIRTUAL_MACHINES, name, namespace)
    template = vm["spec"]["template"]["spec"]
    volumes = list(template.get("volumes") or [])
    disks = list(template["domain"]["devices"].get("disks") or [])
    for claim in claims:
        volume, disk = _hotplug_entries(claim)
        volumes.append(volume)
        disks.append(disk)
    body = {
        "spec": {
            "template": {"spec": {"volumes": volumes, "domain": {"devices": {"disks": disks}}}}
        }
    }
    await api.patch(VIRTUAL_MACHINES, name, body, namespace)

    async def vmi_has_them() -> Object | None:
        vmi = await api.get(VIRTUAL_MACHINE_INSTANCES, name, namespace)
        names = {v.get("name") for v in vmi["spec"].get("volumes") or []}
        return vmi if set(claims) <= names else None

    return await eventually(vmi_has_them, what="the VM's hotplugged volumes in the VMI")


def assert_reported_overhead_is_ours(
    target: Object, vmi: Object, settings: LauncherSettings, reported: bool
) -> None:
    """The overhead virt-controller reports on the target pod (kubevirt.io/memory-overhead-bytes,
    VmiMemoryOverheadReport: on by default from v1.9, where `reported` asks that it be there)
    equals ours: a room sized from KubeVirt's report would be the room we size."""
    value = (target["metadata"].get("annotations") or {}).get(OVERHEAD_ANNOTATION)
    if value is None:
        assert not reported, "the target pod reports no overhead"
        return
    assert int(value) == rendered_memory_overhead(vmi, settings)


async def attachment_pods(api: ApiClient, namespace: str) -> list[Object]:
    listed = await api.list(PODS, namespace, label_selector=HOTPLUG_SELECTOR)
    return list(listed.get("items", []))


async def settings_now(api: ApiClient) -> LauncherSettings:
    kubevirt = await api.get(KUBEVIRTS, "kubevirt", KUBEVIRT_NAMESPACE)
    return settings_from(kubevirt, None)


def compute_cpu_request(pod: Object) -> Quantity | None:
    for container in pod["spec"]["containers"]:
        if container["name"] == "compute":
            value = ((container.get("resources") or {}).get("requests") or {}).get("cpu")
            return None if value is None else Quantity.parse(str(value))
    return None


async def set_support_containers(
    api: ApiClient, namespace: str, value: list[Any] | None, marker: int
) -> None:
    """The CR's supportContainerResources set to `value`, and cpuAllocationRatio to `marker`;
    returns once virt-controller renders with them (a probe VMI without a cpu request gets
    requests.cpu = 1/marker)."""
    configuration = {
        "supportContainerResources": value,
        "developerConfiguration": {"cpuAllocationRatio": marker},
    }
    await api.patch(
        KUBEVIRTS, "kubevirt", {"spec": {"configuration": configuration}}, KUBEVIRT_NAMESPACE
    )
    await rendered_at_ratio(api, namespace, marker)


async def rendered_at_ratio(api: ApiClient, namespace: str, marker: int) -> None:
    """Returns once virt-controller renders with cpuAllocationRatio `marker` (a probe VMI without
    a cpu request gets requests.cpu = 1/marker): its informer has the CR's latest configuration."""
    spec = real_kubevirt.defaulted_vmi_spec()
    del spec["domain"]["resources"]["requests"]["cpu"], spec["domain"]["resources"]["limits"]
    probe = await api.create(
        VIRTUAL_MACHINE_INSTANCES,
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": f"probe-{marker}"},
            "spec": spec,
        },
        namespace,
    )
    expected = Quantity.parse(f"{1000 // marker}m")
    selector = f"kubevirt.io/created-by={probe['metadata']['uid']}"

    async def rendered_with_marker() -> bool:
        pods = (await api.list(PODS, namespace, label_selector=selector)).get("items", [])
        return any(compute_cpu_request(p) == expected for p in pods)

    await eventually(
        rendered_with_marker, what=f"virt-controller at ratio {marker}", timeout=TIMEOUT
    )
    await api.delete(VIRTUAL_MACHINE_INSTANCES, probe["metadata"]["name"], namespace)


@pytest.mark.parametrize("volumes", [1, 3], ids=["one-volume", "three-volumes"])
@pytest.mark.parametrize("override", [False, True], ids=["defaults", "cr-override"])
async def test_attachment_pods_match_virt_controller_on_every_key(
    api: ApiClient,
    namespace: str,
    kubevirt: VirtControllerDriver,
    volumes: int,
    override: bool,
    *,
    kubevirt_cluster: ClusterInfo,
) -> None:
    await set_support_containers(
        api, namespace, OVERRIDE if override else None, 4 if override else 5
    )
    declarative = declarative_hotplug(kubevirt_cluster)
    await _attachment_case(api, namespace, kubevirt, volumes, declarative=declarative)


async def _attachment_case(
    api: ApiClient,
    namespace: str,
    kubevirt: VirtControllerDriver,
    volumes: int,
    *,
    declarative: bool,
) -> None:
    claims = await bound_claims(api, namespace, volumes)
    (
        await kubevirt.create_vm(
            VMSpec("vm1", cores=1, memory="1Gi", migration_duration=MIGRATION_SECONDS),
            node="kwok-node-0",
        )
    ).check()
    vmi = await hotplug(api, namespace, "vm1", claims, declarative=declarative)

    async def source_attachment() -> bool:
        return len(await attachment_pods(api, namespace)) == 1

    await eventually(source_attachment, what="virt-controller's attachment pod", timeout=TIMEOUT)
    settings = await settings_now(api)
    ours = attachment_usage(vmi_view(vmi), settings)
    (source_pod,) = await attachment_pods(api, namespace)
    assert pod_quota_usage(source_pod) == ours, "the VMI's attachment pod"

    migration = await kubevirt.migrate("vm1")
    mig = await api.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, migration, namespace)
    uid = mig["metadata"]["uid"]

    async def target_attachment() -> list[Object]:
        pods = await attachment_pods(api, namespace)
        return [p for p in pods if p["metadata"].get("labels", {}).get(LABEL_MIGRATION_JOB) == uid]

    (target_attachment_pod,) = await eventually(
        target_attachment, what="the target's attachment pod", timeout=TIMEOUT
    )
    assert pod_quota_usage(target_attachment_pod) == ours, "the target's attachment pod"

    pods = (await api.list(PODS, namespace)).get("items", [])
    vmi_now = await api.get(VIRTUAL_MACHINE_INSTANCES, "vm1", namespace)
    plan = plan_rooms(
        migrations=[await api.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, migration, namespace)],
        vmis={"vm1": vmi_now},
        pods=pods,
        now=datetime.datetime.now(datetime.UTC),
        launcher=settings,
    )
    (room,) = plan.rooms
    target = next(p for p in pods if p["metadata"]["name"] == room.target_pod)
    assert_reported_overhead_is_ours(target, vmi_now, settings, declarative)
    assert pods_of(room, "attachment") == (target_attachment_pod["metadata"]["name"],)
    assert room.room == total([pod_quota_usage(target), pod_quota_usage(target_attachment_pod)])
    kubevirt.end_migration_now("vm1")
    record = await kubevirt.wait_migration(migration, timeout=TIMEOUT)
    assert record.outcome is not None


# ----------------------------------------------------------------------------------------------
# Volume migration: virt-controller creates the migration itself


@contextlib.asynccontextmanager
async def live_migrate_workload_updates(api: ApiClient) -> AsyncIterator[None]:
    """The KubeVirt CR's workloadUpdateStrategy allows LiveMigrate (virt-controller's workload
    updater creates volume migrations only then); restored afterwards."""
    kubevirt_cr = await api.get(KUBEVIRTS, "kubevirt", KUBEVIRT_NAMESPACE)
    strategy = (kubevirt_cr.get("spec") or {}).get("workloadUpdateStrategy")
    body = {"spec": {"workloadUpdateStrategy": {"workloadUpdateMethods": ["LiveMigrate"]}}}
    await api.patch(KUBEVIRTS, "kubevirt", body, KUBEVIRT_NAMESPACE)
    try:
        yield
    finally:
        restore = {"spec": {"workloadUpdateStrategy": strategy}}
        await api.patch(KUBEVIRTS, "kubevirt", restore, KUBEVIRT_NAMESPACE)


async def patch_vm(api: ApiClient, namespace: str, template: Object, **spec: Any) -> None:
    """vm1's template volumes, disks and firmware set to `template`'s (a merge patch:
    virt-controller writes the VM's status meanwhile)."""
    body = {
        "spec": {
            **spec,
            "template": {
                "spec": {
                    "volumes": template["volumes"],
                    "domain": {
                        "devices": {"disks": template["domain"]["devices"]["disks"]},
                        "firmware": template["domain"].get("firmware", {}),
                    },
                }
            },
        }
    }
    await api.patch(VIRTUAL_MACHINES, "vm1", body, namespace)


async def start_vm_with_claim(
    api: ApiClient, namespace: str, kubevirt: VirtControllerDriver, spec: VMSpec, claim: str
) -> Object:
    """vm1 (`spec`) with the disk `data` on `claim` and updateVolumesStrategy Migration, started;
    returns its template spec."""
    await kubevirt.create_vm(spec, running=False, node="kwok-node-0")
    vm = await api.get(VIRTUAL_MACHINES, "vm1", namespace)
    template: Object = vm["spec"]["template"]["spec"]
    template.setdefault("volumes", []).append(
        {"name": "data", "persistentVolumeClaim": {"claimName": claim}}
    )
    template["domain"]["devices"].setdefault("disks", []).append(
        {"name": "data", "disk": {"bus": "virtio"}}
    )
    # virt-controller gives a VM without one a firmware UUID, a template change of its own: made
    # after the start, it read as a non-live-updatable change (RestartRequired) and the VM's
    # observedGeneration stopped for good (seen in CI, on v1.8.4 and v1.6.0). The UUID is set here.
    template["domain"].setdefault("firmware", {}).setdefault("uuid", str(uuid.uuid4()))
    await patch_vm(api, namespace, template, updateVolumesStrategy="Migration")
    (await kubevirt.start_vm("vm1")).check()
    return template


async def swap_claim(api: ApiClient, namespace: str, template: Object, claim: str) -> Object:
    """The disk `data` of vm1 moved to `claim`; returns the migration virt-controller creates."""

    async def vm_settled() -> bool:
        """The VM controller has seen every change so far (a claim swapped while it still
        synced the start was judged a non-live-updatable change by v1.6.0: RestartRequired)."""
        vm = await api.get(VIRTUAL_MACHINES, "vm1", namespace)
        observed = (vm.get("status") or {}).get("observedGeneration")
        return observed == vm["metadata"].get("generation")

    await eventually(vm_settled, what="the VM controller caught up", timeout=TIMEOUT)
    for volume in template["volumes"]:
        if volume["name"] == "data":
            volume["persistentVolumeClaim"]["claimName"] = claim
    await patch_vm(api, namespace, template)

    async def volume_migration() -> Object | None:
        listed = await api.list(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, namespace)
        return next(iter(listed.get("items", [])), None)

    try:
        migration: Object = await eventually(
            volume_migration, what="virt-controller's volume migration", timeout=TIMEOUT
        )
    except AssertionError as timed_out:
        vm_now = await api.get(VIRTUAL_MACHINES, "vm1", namespace)
        vmi_now = await api.get(VIRTUAL_MACHINE_INSTANCES, "vm1", namespace)
        shown = f"VM status {vm_now.get('status')}\nVMI status {vmi_now.get('status')}"
        raise AssertionError(f"{timed_out}\n{shown}") from None
    return migration


async def test_a_volume_migrations_target_matches_virt_controller_on_every_key(
    api: ApiClient,
    namespace: str,
    kubevirt: VirtControllerDriver,
    kubevirt_cluster: ClusterInfo,
) -> None:
    """A VM with updateVolumesStrategy Migration whose claim is swapped for another: virt-
    controller's VM controller records the migrated volumes, its workload updater creates the
    migration (labelled kubevirt.io/volume-update-migration), its migration controller the target
    pod mounting the new claim. The target pod's usage equals our rendering of the VMI, the room
    is that pod, and the migration completes."""
    source_claim, target_claim = await bound_claims(api, namespace, 2)
    spec = VMSpec("vm1", cores=1, memory="1Gi", migration_duration=MIGRATION_SECONDS)
    async with live_migrate_workload_updates(api):
        template = await start_vm_with_claim(api, namespace, kubevirt, spec, source_claim)
        mig = await swap_claim(api, namespace, template, target_claim)
        claims = (source_claim, target_claim)
        reported = declarative_hotplug(kubevirt_cluster)  # v1.9: the overhead report is on too
        await _volume_migration_target(api, namespace, kubevirt, mig, claims, reported=reported)


async def _volume_migration_target(
    api: ApiClient,
    namespace: str,
    kubevirt: VirtControllerDriver,
    mig: Object,
    claims_before_after: tuple[str, str],
    *,
    reported: bool,
) -> None:
    source_claim, target_claim = claims_before_after
    assert "kubevirt.io/volume-update-migration" in (mig["metadata"].get("labels") or {})
    uid = mig["metadata"]["uid"]

    async def target_pod() -> Object | None:
        listed = await api.list(PODS, namespace, label_selector=f"{LABEL_MIGRATION_JOB}={uid}")
        return next(iter(listed.get("items", [])), None)

    target = await eventually(target_pod, what="the volume migration's target pod", timeout=TIMEOUT)
    claims = {
        (v.get("persistentVolumeClaim") or {}).get("claimName") for v in target["spec"]["volumes"]
    }
    assert target_claim in claims and source_claim not in claims, claims
    vmi = await api.get(VIRTUAL_MACHINE_INSTANCES, "vm1", namespace)
    settings = (await settings_now(api)).for_namespace([], await api.get(NAMESPACES, namespace))
    assert pod_quota_usage(target) == target_quota_usage(vmi, settings)
    assert_reported_overhead_is_ours(target, vmi, settings, reported)
    pods = (await api.list(PODS, namespace)).get("items", [])
    plan = plan_rooms(
        migrations=[
            await api.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, mig["metadata"]["name"], namespace)
        ],
        vmis={"vm1": vmi},
        pods=pods,
        now=datetime.datetime.now(datetime.UTC),
        launcher=settings,
    )
    (room,) = plan.rooms
    assert room.target_pod == target["metadata"]["name"] and pods_of(room, "attachment") == ()
    assert room.room == pod_quota_usage(target)
    kubevirt.end_migration_now("vm1")
    record = await kubevirt.wait_migration(mig["metadata"]["name"], timeout=TIMEOUT)
    assert record.outcome is not None


# ----------------------------------------------------------------------------------------------
# vGPU: VGPULiveMigration (alpha, v1.9)

VGPU = "nvidia.com/GRID_T4-1Q"
VGPU_NODES = ("kwok-node-0", "kwok-node-1")


@contextlib.asynccontextmanager
async def vgpu_live_migration(api: ApiClient, namespace: str) -> AsyncIterator[None]:
    """The KubeVirt CR permits the vGPU as a mediated device and turns VGPULiveMigration on (the
    nodes advertise it, as NVIDIA's device plugin would); all restored afterwards."""
    kubevirt_cr = await api.get(KUBEVIRTS, "kubevirt", KUBEVIRT_NAMESPACE)
    saved = copy.deepcopy(kubevirt_cr["spec"].get("configuration") or {})
    configuration = copy.deepcopy(saved)
    developer = configuration.setdefault("developerConfiguration", {})
    developer["featureGates"] = [*developer.get("featureGates", []), "VGPULiveMigration"]
    developer["cpuAllocationRatio"] = 8  # the marker (1000m / 8: exact)
    configuration["permittedHostDevices"] = {
        "mediatedDevices": [{"mdevNameSelector": "GRID T4-1Q", "resourceName": VGPU}]
    }
    await replace_configuration(api, configuration)
    await _advertise(api, "4")
    try:
        await rendered_at_ratio(api, namespace, 8)
        yield
    finally:
        await _advertise(api, None)
        await replace_configuration(api, saved)


CONFLICT_RETRIES = 5


async def replace_configuration(api: ApiClient, configuration: dict[str, Any]) -> None:
    """Replaces the KubeVirt CR's spec.configuration, read again and retried on a Conflict (as
    client-go's RetryOnConflict): another writer of the CR meanwhile must not fail the test."""
    for attempt in range(CONFLICT_RETRIES):
        current = await api.get(KUBEVIRTS, "kubevirt", KUBEVIRT_NAMESPACE)
        current["spec"]["configuration"] = configuration
        try:
            await api.update(KUBEVIRTS, current)
            return
        except errors.Conflict:
            if attempt == CONFLICT_RETRIES - 1:
                raise


async def _advertise(api: ApiClient, count: str | None) -> None:
    body = {"status": {"capacity": {VGPU: count}, "allocatable": {VGPU: count}}}
    for node in VGPU_NODES:
        await api.patch(NODES, node, body, subresource="status")


@pytest.fixture
def vgpu_gate_registered(kubevirt_cluster: ClusterInfo) -> None:
    """Skips before any namespace or driver is set up where the gate does not exist."""
    if not parse_kubevirt_version(kubevirt_cluster.kubevirt_version or "").at_least(1, 9):
        pytest.skip("VGPULiveMigration is registered from KubeVirt v1.9")


@pytest.mark.usefixtures("vgpu_gate_registered")
async def test_a_vgpu_vms_migration_target_asks_its_vgpu_and_the_room_raises_a_quota_on_it(
    api: ApiClient, namespace: str, kubevirt: VirtControllerDriver
) -> None:
    """VGPULiveMigration on (v1.9 registers it): virt-controller renders the target of a VM with
    one vGPU (the launcher flag --vgpu-dedicated-hook shows it read the gate) asking the VMI's own
    vGPU resource, one, as the source does; that pod equals our rendering on every key, and the
    room holds requests.<vGPU>, so a quota limiting it is raised by one."""
    spec = VMSpec("vm1", cores=1, memory="1Gi", migration_duration=MIGRATION_SECONDS, gpus=(VGPU,))
    async with vgpu_live_migration(api, namespace):
        (await kubevirt.create_vm(spec, node="kwok-node-0")).check()
        migration = await kubevirt.migrate("vm1")
        mig = await api.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, migration, namespace)
        selector = f"{LABEL_MIGRATION_JOB}={mig['metadata']['uid']}"

        async def target_pod() -> Object | None:
            listed = await api.list(PODS, namespace, label_selector=selector)
            return next(iter(listed.get("items", [])), None)

        target = await eventually(target_pod, what="the vGPU VM's target pod", timeout=TIMEOUT)
        compute = next(c for c in target["spec"]["containers"] if c["name"] == "compute")
        assert "--vgpu-dedicated-hook" in compute["command"]
        vmi = await api.get(VIRTUAL_MACHINE_INSTANCES, "vm1", namespace)
        settings = (await settings_now(api)).for_namespace([], await api.get(NAMESPACES, namespace))
        real = pod_quota_usage(target)
        assert real[f"requests.{VGPU}"] == Quantity.parse("1")
        assert real == target_quota_usage(vmi, settings)
        pods = (await api.list(PODS, namespace)).get("items", [])
        plan = plan_rooms(
            migrations=[mig],
            vmis={"vm1": vmi},
            pods=pods,
            now=datetime.datetime.now(datetime.UTC),
            launcher=settings,
        )
        (room,) = plan.rooms
        assert room.room == real
        key = f"requests.{VGPU}"
        one = Quantity.parse("1")
        assert desired_hard({key: one}, {key: one}, room.room)[key] == Quantity.parse("2")
        kubevirt.end_migration_now("vm1")
        record = await kubevirt.wait_migration(migration, timeout=TIMEOUT)
        assert record.outcome is not None
