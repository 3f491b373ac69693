"""The KubeVirt objects the simulator writes: VMs, VMIs and virt-launcher pods, as Harvester and
KubeVirt would shape them (pure functions, no I/O).

A VM is described by a short `VMSpec` (cores, memory, eviction strategy, grace period, ...). Its
resources come from Harvester's VM mutator (`harvester_vm_requests`, `harvester_guest_memory`) and
its launcher pod's resources from `launcher_pod_resources`, so the quota usage is the one the seeds
report: 2015m / 4797464313 for a 2-core 4Gi VM on KubeVirt v1.6 at ratio 1.5, 2 / 4531245057 on
KubeVirt v0.54.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ....generic.resource import Object
from ....util.kubevirtversion import KubeVirtVersion, parse_kubevirt_version
from ....util.launcher import LauncherSettings, launcher_pod_resources
from ....util.quantity import Quantity
from ...harvestervm import (
    HARVESTER_DEFAULT_OVERCOMMIT,
    HARVESTER_V121_OVERCOMMIT,
    harvester_guest_memory,
    harvester_vm_requests,
)

# Labels, annotations, finalizers and condition types, as KubeVirt and Harvester spell them.
LABEL_APP: Final = "kubevirt.io"
LAUNCHER: Final = "virt-launcher"
LABEL_CREATED_BY: Final = "kubevirt.io/created-by"
LABEL_MIGRATION_JOB_UID: Final = "kubevirt.io/migrationJobUID"
ANNOTATION_MIGRATION_JOB_NAME: Final = "kubevirt.io/migrationJobName"
LABEL_VM_NAME: Final = "vm.kubevirt.io/name"
LABEL_HARVESTER_VM_NAME: Final = "harvesterhci.io/vmName"
LABEL_HARVESTER_CREATOR: Final = "harvesterhci.io/creator"
LABEL_NODE_NAME: Final = "kubevirt.io/nodeName"
LABEL_MIGRATION_TARGET_NODE: Final = "kubevirt.io/migrationTargetNodeName"
LABEL_OUTDATED_LAUNCHER_IMAGE: Final = "kubevirt.io/outdatedLauncherImage"
"""virt-controller's mark on a VMI whose launcher image is not the one it renders now."""
LABEL_VMI_NAME: Final = "kubevirt.io/vmi-name"
ANNOTATION_EVACUATION: Final = "kubevirt.io/evacuationMigration"
ANNOTATION_EVICTION_SOURCE: Final = "kubevirt.io/eviction-source"
"""virt-api's mark on a VMI a descheduler's eviction asked to migrate; gone once migrated."""
ANNOTATION_DOMAIN: Final = "kubevirt.io/domain"
ANNOTATION_LATEST_API: Final = "kubevirt.io/latest-observed-api-version"
ANNOTATION_STORAGE_API: Final = "kubevirt.io/storage-observed-api-version"
ANNOTATION_RESERVED_MEMORY: Final = "harvesterhci.io/reservedMemory"
MIGRATION_FINALIZER: Final = "kubevirt.io/migrationJobFinalize"
CONDITION_REJECTED_BY_QUOTA: Final = "migrationRejectedByResourceQuota"
CONDITION_ABORT_REQUESTED: Final = "migrationAbortRequested"
EVACUATION_GENERATE_NAME: Final = "kubevirt-evacuation-"
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
POD_CREATE_FAILED: Final = "Error creating pod: "
"""How virt-controller's FailedCreate Event on a VMI begins when a pod create failed."""

SETTING_OVERHEAD_RATIO: Final = "additional-guest-memory-overhead-ratio"
"""The Harvester setting Harvester copies into the KubeVirt CR's additionalGuestMemoryOverheadRatio."""

LAUNCHER_GRACE_EXTRA_SECONDS: Final = 15
"""KubeVirt gives the launcher pod the VMI's grace period plus 15 s to kill QEMU after a timeout."""

LIVE_MIGRATE: Final = "LiveMigrate"
API_VERSION: Final = "kubevirt.io/v1"


def launcher_image(version: KubeVirtVersion) -> str:
    """A plausible virt-launcher image for the version (only shown in status, never pulled)."""
    return f"registry.suse.com/suse/sles/15.6/virt-launcher:{str(version).lstrip('v')}"


def default_overcommit(version: KubeVirtVersion) -> Mapping[str, int]:
    """Harvester's `overcommit-config` default for the Harvester release that ships `version`:
    v1.2.1 (KubeVirt v0.54) had cpu 1600 %, later releases 1000 %."""
    return HARVESTER_V121_OVERCOMMIT if not version.at_least(1, 0) else HARVESTER_DEFAULT_OVERCOMMIT


def ratio_supported(version: KubeVirtVersion) -> bool:
    """Whether KubeVirt reads additionalGuestMemoryOverheadRatio (v1.0 and later; Harvester v1.2.1
    ships v0.54, which has no ratio and no Harvester setting for it)."""
    return version.at_least(1, 0)


@dataclass(frozen=True)
class VMSpec:
    """A VM as a test describes it; everything else is what Harvester and KubeVirt would fill in.

    `requests` overrides what Harvester's mutator derives from the limits ("cpu", "memory").
    `kubevirt_version` is the virt-launcher the VM starts with (None: the simulator's); a migration
    target is always rendered for the simulator's version, as after a KubeVirt upgrade.
    `overcommit` is Harvester's overcommit-config (None: the default of that Harvester release).
    `migration_duration` overrides the simulator's Running-phase duration for this VM (seconds).
    `gpus` are the device-plugin resource names of its GPUs (spec.domain.devices.gpus, one each).
    """

    name: str
    cores: int = 2
    memory: str = "4Gi"
    requests: Mapping[str, str] | None = None
    eviction_strategy: str | None = LIVE_MIGRATE
    termination_grace_period_seconds: int = 120
    kubevirt_version: str | None = None
    overcommit: Mapping[str, int] | None = None
    reserved_memory: str | None = None
    migration_duration: float | None = None
    labels: Mapping[str, str] | None = None
    gpus: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a VM needs a name")
        if self.cores < 1:
            raise ValueError(f"VM {self.name}: cores must be >= 1, not {self.cores!r}")
        Quantity.parse(self.memory)  # ValueError naming the text
        if self.termination_grace_period_seconds < 0:
            raise ValueError(f"VM {self.name}: terminationGracePeriodSeconds must be >= 0")
        if self.migration_duration is not None and self.migration_duration < 0:
            raise ValueError(f"VM {self.name}: migration_duration must be >= 0")


@dataclass(frozen=True)
class VMResources:
    """What Harvester's VM mutator writes into the VM template: limits, requests and guest memory."""

    limits: dict[str, str]
    requests: dict[str, str]
    guest: str


def vm_resources(spec: VMSpec, version: KubeVirtVersion, ratio: str | None) -> VMResources:
    """Harvester's mutator: requests from the limits and overcommit, guest = limits (- 100Mi when no
    overhead ratio is configured, as on Harvester v1.2.1)."""
    limits = {"cpu": str(spec.cores), "memory": spec.memory}
    if spec.requests is not None:
        requests = dict(spec.requests)
    else:
        overcommit = spec.overcommit or default_overcommit(version)
        derived = harvester_vm_requests(limits["cpu"], limits["memory"], overcommit)
        requests = {name: str(value) for name, value in derived.items()}
    guest = harvester_guest_memory(
        spec.memory, reserved_memory=spec.reserved_memory, overhead_ratio_set=ratio is not None
    )
    return VMResources(limits=limits, requests=requests, guest=str(guest))


def vmi_domain(spec: VMSpec, resources: VMResources) -> Object:
    domain = _domain(spec, resources)
    if spec.gpus:
        domain["devices"]["gpus"] = [
            {"name": f"gpu{i}", "deviceName": name} for i, name in enumerate(spec.gpus)
        ]
    return domain


def _domain(spec: VMSpec, resources: VMResources) -> Object:
    return {
        "cpu": {"cores": spec.cores, "sockets": 1, "threads": 1},
        "devices": {
            "inputs": [{"bus": "usb", "name": "tablet", "type": "tablet"}],
            "interfaces": [{"masquerade": {}, "model": "virtio", "name": "default"}],
        },
        "features": {"acpi": {"enabled": True}},
        "machine": {"type": "q35"},
        "memory": {"guest": resources.guest},
        "resources": {"limits": dict(resources.limits), "requests": dict(resources.requests)},
    }


def _vmi_spec(spec: VMSpec, resources: VMResources) -> Object:
    body: Object = {
        "affinity": {},
        "domain": vmi_domain(spec, resources),
        "hostname": hostname(spec.name),
        "networks": [{"name": "default", "pod": {}}],
        "terminationGracePeriodSeconds": spec.termination_grace_period_seconds,
    }
    if spec.eviction_strategy:
        body["evictionStrategy"] = spec.eviction_strategy
    return body


def _annotations(spec: VMSpec) -> dict[str, str]:
    annotations = {"harvesterhci.io/sshNames": "[]"}
    if spec.reserved_memory is not None:
        annotations[ANNOTATION_RESERVED_MEMORY] = spec.reserved_memory
    return annotations


MAX_LABEL_VALUE = 63
MAX_HOSTNAME = 63
"""A DNS-1123 label: the pod's spec.hostname (KubeVirt refuses nothing longer; the API server
refuses the launcher pod)."""


def hostname(vm_name: str) -> str:
    """The guest hostname Harvester gives a VM: its name, cut as KubeVirt cuts a name without a
    hostname (first 63 characters of the part before any dot) so the launcher pod is valid."""
    return vm_name.split(".", maxsplit=1)[0][:MAX_HOSTNAME].rstrip("-")


def name_label(key: str, name: str) -> dict[str, str]:
    """A label carrying a name, left out when the name is longer than a label value may be:
    VM names may be up to 253 characters (harvester/harvester#7464 had one of 75)."""
    return {key: name} if len(name) <= MAX_LABEL_VALUE else {}


def render_vm(spec: VMSpec, namespace: str, resources: VMResources, *, running: bool) -> Object:
    """The VirtualMachine object (runStrategy RerunOnFailure when running, Halted when not)."""
    template_labels = {**name_label(LABEL_HARVESTER_VM_NAME, spec.name), **(spec.labels or {})}
    return {
        "apiVersion": API_VERSION,
        "kind": "VirtualMachine",
        "metadata": {
            "name": spec.name,
            "namespace": namespace,
            "labels": {LABEL_HARVESTER_CREATOR: "harvester"},
            "annotations": {"harvesterhci.io/vmRunStrategy": "RerunOnFailure"},
        },
        "spec": {
            "runStrategy": "RerunOnFailure" if running else "Halted",
            "template": {
                "metadata": {"labels": template_labels, "annotations": _annotations(spec)},
                "spec": _vmi_spec(spec, resources),
            },
        },
    }


def render_vmi(vm: Object) -> Object:
    """The VirtualMachineInstance a running VM gets: the VM's template, the CPU model KubeVirt
    defaults to (host-model), owned by the VM (status comes later)."""
    vm_meta = meta(vm)
    name = str(vm_meta.get("name", ""))
    template = copy.deepcopy((vm.get("spec") or {}).get("template") or {})
    template_meta = template.get("metadata") or {}
    spec = template.get("spec") or {}
    spec.setdefault("domain", {}).setdefault("cpu", {})["model"] = "host-model"
    return {
        "apiVersion": API_VERSION,
        "kind": "VirtualMachineInstance",
        "metadata": {
            "name": name,
            "namespace": vm_meta.get("namespace"),
            "labels": dict(template_meta.get("labels") or {}),
            "annotations": {
                **(template_meta.get("annotations") or {}),
                ANNOTATION_LATEST_API: "v1",
                ANNOTATION_STORAGE_API: "v1",
            },
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": "VirtualMachine",
                    "name": name,
                    "uid": vm_meta.get("uid", ""),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


@dataclass(frozen=True)
class MigrationRef:
    """The migration a target pod belongs to."""

    uid: str
    name: str


def _containers(rendered: Object, key: str, image: str) -> list[Object]:
    result = []
    for container in (rendered.get("spec") or {}).get(key) or []:
        result.append({**container, "image": image})
    return result


def render_launcher_pod(
    vmi: Object,
    *,
    node: str,
    settings: LauncherSettings,
    migration: MigrationRef | None = None,
) -> Object:
    """The virt-launcher pod for `vmi` bound to `node`: resources as KubeVirt renders them for the
    settings, labels and owner reference as KubeVirt sets them, the migration label on a target."""
    metadata = vmi.get("metadata") or {}
    name = str(metadata.get("name", ""))
    version = settings.version
    if not ratio_supported(version):
        settings = dataclasses.replace(settings, ratio=None)
    rendered = launcher_pod_resources(vmi, settings, migration_target=migration is not None)
    image = launcher_image(version)
    labels = {
        **(metadata.get("labels") or {}),
        LABEL_APP: LAUNCHER,
        LABEL_CREATED_BY: str(metadata.get("uid", "")),
        **name_label(LABEL_VM_NAME, name),
    }
    labels.pop(LABEL_NODE_NAME, None)
    labels.pop(LABEL_MIGRATION_TARGET_NODE, None)
    annotations = {ANNOTATION_DOMAIN: name, "kubevirt.io/launcher-version": str(version)}
    spec: Object = {
        "nodeName": node,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": int(
            (vmi.get("spec") or {}).get("terminationGracePeriodSeconds") or 0
        )
        + LAUNCHER_GRACE_EXTRA_SECONDS,
        "containers": _containers(rendered, "containers", image),
    }
    init_containers = _containers(rendered, "initContainers", image)
    if init_containers:
        spec["initContainers"] = init_containers
    if migration is not None:
        labels[LABEL_MIGRATION_JOB_UID] = migration.uid
        annotations[ANNOTATION_MIGRATION_JOB_NAME] = migration.name
        spec["affinity"] = _anti_affinity(str(metadata.get("uid", "")))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{LAUNCHER}-{name}-",
            "namespace": metadata.get("namespace"),
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": "VirtualMachineInstance",
                    "name": name,
                    "uid": metadata.get("uid", ""),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def _anti_affinity(vmi_uid: str) -> Object:
    """KubeVirt keeps a target pod off the nodes where a pod of the same VMI runs."""
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {LABEL_CREATED_BY: vmi_uid}},
                    "topologyKey": HOSTNAME_LABEL,
                }
            ]
        }
    }


def render_migration(
    namespace: str,
    vmi_name: str,
    *,
    name: str | None = None,
    evacuation_node: str | None = None,
    target_node: str | None = None,
) -> Object:
    """A VirtualMachineInstanceMigration as virtctl, Harvester or the evacuation controller writes
    it: generateName `<vmi>-` (or `kubevirt-evacuation-` with the evacuation annotation)."""
    metadata: Object = {
        "namespace": namespace,
        "labels": name_label(LABEL_VMI_NAME, vmi_name),
        "annotations": {},
        "finalizers": [MIGRATION_FINALIZER],
    }
    if name:
        metadata["name"] = name
    elif evacuation_node:
        metadata["generateName"] = EVACUATION_GENERATE_NAME
    else:
        metadata["generateName"] = f"{vmi_name}-"
    if evacuation_node:
        metadata["annotations"][ANNOTATION_EVACUATION] = evacuation_node
    spec: Object = {"vmiName": vmi_name}
    if target_node:
        spec["addedNodeSelector"] = {HOSTNAME_LABEL: target_node}
    return {
        "apiVersion": API_VERSION,
        "kind": "VirtualMachineInstanceMigration",
        "metadata": metadata,
        "spec": spec,
    }


def timestamp(moment: datetime.datetime) -> str:
    """RFC 3339 with second resolution, as metav1.Time serialises."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_version(version: str | KubeVirtVersion) -> KubeVirtVersion:
    """`parse_kubevirt_version`, re-exported for the simulator's configuration."""
    return parse_kubevirt_version(version)


def meta(obj: Object | None) -> Mapping[str, Any]:
    """`metadata` of an object (empty when absent)."""
    return (obj or {}).get("metadata") or {}


def status(obj: Object | None) -> Mapping[str, Any]:
    """`status` of an object (empty when absent)."""
    return (obj or {}).get("status") or {}
