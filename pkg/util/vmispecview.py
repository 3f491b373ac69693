"""A VMI's spec as the launcher renderer and KubeVirt's overhead formula read it: typed, declared.

`SpecView` declares every field of a VMI that the launcher renderer (launcher/render.py,
launcher/compute.py) and the overhead formula (overhead.py) read, grouped in small sub-views
(CPU, resources, memory, devices and their interfaces, volumes). `spec_view` is its one adapter
from a full VMI object; it reads every field once, as Go would decode it (vmispec.py: what is
missing is "not set", what has the wrong type is a ValueError naming the field). A renderer that
starts reading a field the view does not declare fails to type-check (mypy strict): declare it
here and fill it in `spec_view`.

Errors are found when the view is built, not when a field is read: a VMI with a malformed field
is refused by every KubeVirt version, where the dict readers refused it only for the versions
that read that field. virt-api refuses such a VMI on every version (its OpenAPI schema), so no
VMI the API server stores renders differently.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from .quantity import Quantity
from .vmispec import (
    bool_at,
    int_at,
    mapping_at,
    quantity_of,
    resource_list_at,
    sequence_at,
    vmi_domain,
    vmi_interfaces,
    vmi_spec,
)

HOOK_SIDECARS_ANNOTATION: Final = "hooks.kubevirt.io/hookSidecars"
EVEN_PARITY_ANNOTATION: Final = "alpha.kubevirt.io/EmulatorThreadCompleteToEvenParity"

Quantities = Mapping[str, Quantity]
"""A read-only resource list (the renderer copies it before it changes a value)."""


@dataclass(frozen=True, slots=True)
class CpuView:
    """spec.domain.cpu (present, even when empty: Go's non-nil pointer)."""

    vcpus: int
    """KubeVirt's GetNumberOfVCPUs: sockets x cores x threads, a zero factor skipped."""
    dedicated: bool
    """dedicatedCpuPlacement."""
    isolate_emulator_thread: bool


@dataclass(frozen=True, slots=True)
class ResourcesView:
    """spec.domain.resources."""

    limits: Quantities
    requests: Quantities
    overcommit_guest_overhead: bool


@dataclass(frozen=True, slots=True)
class MemoryView:
    """spec.domain.memory."""

    guest: Quantity | None
    hugepage_size: str | None
    """hugepages.pageSize ("" when hugepages has none), None without hugepages."""
    added_overhead: Quantity | None
    """reservedOverhead.addedOverhead (read from v1.8)."""


@dataclass(frozen=True, slots=True)
class InterfaceView:
    """One entry of spec.domain.devices.interfaces."""

    virtio: bool
    """model is unset, "" or "virtio"."""
    sriov: bool
    passt: bool
    """The (pre-v1.3) passt binding method is set."""
    all_ports: bool
    """No ports listed (passt forwards all ports)."""
    passt_binding: bool
    """The v1.8 passtBinding is set."""
    has_binding: bool
    """binding is an object (a network binding plugin)."""
    binding: str | None
    """binding.name, when it is a string."""


@dataclass(frozen=True, slots=True)
class DevicesView:
    """spec.domain.devices."""

    autoattach_serial_console: bool | None
    log_serial_console: bool | None
    autoattach_pod_interface: bool | None
    autoattach_vsock: bool | None
    autoattach_graphics: bool | None
    interfaces: tuple[InterfaceView, ...]
    filesystems: frozenset[str | None]
    """The filesystems' names (as `VolumeView.name`)."""
    gpus: int
    host_devices: int
    gpu_plugins: tuple[str, ...]
    """deviceName of each GPU a device plugin serves (no claimRequest), in order."""
    host_device_plugins: tuple[str, ...]
    lun_reservation: bool
    """A LUN disk asks for persistent reservation."""
    tpm: bool
    tpm_enabled: bool | None


@dataclass(frozen=True, slots=True)
class VolumeView:
    """One object of spec.volumes."""

    name: str | None
    """Its name as KubeVirt prints it into container names (None when unset)."""
    container_disk: bool
    container_path: bool
    downward_metrics: bool


@dataclass(frozen=True, slots=True)
class SpecView:
    """What the launcher renderer and the overhead formula read of one VMI."""

    hook_sidecars: str | None
    """The annotation hooks.kubevirt.io/hookSidecars (parsed by the renderer, as KubeVirt does)."""
    even_parity: bool
    """The annotation alpha.kubevirt.io/EmulatorThreadCompleteToEvenParity is present."""
    cpu: CpuView | None
    resources: ResourcesView
    memory: MemoryView
    devices: DevicesView
    volumes: tuple[VolumeView, ...]
    """The volumes that are objects, in order."""
    kernel_boot_container: bool
    """spec.domain.firmware.kernelBoot.container is set."""
    io_thread_count: int
    """ioThreads.supplementalPoolThreadCount."""
    supplemental_pool: bool
    """ioThreadsPolicy is supplementalPool."""
    sev: bool
    snp: bool
    architecture: str
    """spec.architecture ("" when unset)."""
    liveness_exec: bool
    readiness_exec: bool


def spec_view(vmi: Mapping[str, Any]) -> SpecView:
    """The view of a full VMI object; ValueError naming the first malformed field."""
    spec = vmi_spec(vmi)
    domain = vmi_domain(vmi)
    annotations = mapping_at(mapping_at(vmi, "metadata", "vmi"), "annotations", "metadata")
    ioth = mapping_at(domain, "ioThreads", "spec.domain")
    security = mapping_at(domain, "launchSecurity", "spec.domain")
    firmware = mapping_at(domain, "firmware", "spec.domain")
    return SpecView(
        hook_sidecars=_annotation(annotations.get(HOOK_SIDECARS_ANNOTATION)),
        even_parity=EVEN_PARITY_ANNOTATION in annotations,
        cpu=_cpu(domain),
        resources=_resources(mapping_at(domain, "resources", "spec.domain")),
        memory=_memory(mapping_at(domain, "memory", "spec.domain")),
        devices=_devices(vmi, mapping_at(domain, "devices", "spec.domain")),
        volumes=tuple(
            _volume(v) for v in sequence_at(spec, "volumes", "spec") if isinstance(v, Mapping)
        ),
        kernel_boot_container=mapping_at(firmware, "kernelBoot", "firmware").get("container")
        is not None,
        io_thread_count=int_at(ioth, "supplementalPoolThreadCount", "ioThreads"),
        supplemental_pool=domain.get("ioThreadsPolicy") == "supplementalPool",
        sev=security.get("sev") is not None,
        snp=security.get("snp") is not None,
        architecture=_architecture(spec.get("architecture")),
        liveness_exec=mapping_at(spec, "livenessProbe", "spec").get("exec") is not None,
        readiness_exec=mapping_at(spec, "readinessProbe", "spec").get("exec") is not None,
    )


def topology_vcpus(cpu: Mapping[str, Any]) -> int:
    """KubeVirt's GetNumberOfVCPUs: sockets x cores x threads, where a zero factor is skipped."""
    where = "spec.domain.cpu"
    total = int_at(cpu, "cores", where)
    for factor in (int_at(cpu, "sockets", where), int_at(cpu, "threads", where)):
        if factor != 0:
            total = factor if total == 0 else total * factor
    return total


def _cpu(domain: Mapping[str, Any]) -> CpuView | None:
    if domain.get("cpu") is None:
        return None
    cpu = mapping_at(domain, "cpu", "spec.domain")
    where = "spec.domain.cpu"
    return CpuView(
        vcpus=topology_vcpus(cpu),
        dedicated=bool(bool_at(cpu, "dedicatedCpuPlacement", where)),
        isolate_emulator_thread=bool(bool_at(cpu, "isolateEmulatorThread", where)),
    )


def _resources(resources: Mapping[str, Any]) -> ResourcesView:
    where = "spec.domain.resources"
    return ResourcesView(
        limits=resource_list_at(resources.get("limits"), f"{where}.limits"),
        requests=resource_list_at(resources.get("requests"), f"{where}.requests"),
        overcommit_guest_overhead=bool(bool_at(resources, "overcommitGuestOverhead", "resources")),
    )


def _memory(memory: Mapping[str, Any]) -> MemoryView:
    guest = memory.get("guest")
    added = mapping_at(memory, "reservedOverhead", "memory").get("addedOverhead")
    return MemoryView(
        guest=None if guest is None else quantity_of(guest, "spec.domain.memory.guest"),
        hugepage_size=_hugepage_size(memory),
        added_overhead=None
        if added is None
        else quantity_of(added, "reservedOverhead.addedOverhead"),
    )


def _hugepage_size(memory: Mapping[str, Any]) -> str | None:
    if memory.get("hugepages") is None:
        return None
    page_size = mapping_at(memory, "hugepages", "spec.domain.memory").get("pageSize", "")
    if not isinstance(page_size, str):
        raise ValueError(f"spec.domain.memory.hugepages.pageSize must be a string: {page_size!r}")
    return page_size


def _devices(vmi: Mapping[str, Any], devices: Mapping[str, Any]) -> DevicesView:
    where = "spec.domain.devices"
    gpus = sequence_at(devices, "gpus", where)
    host_devices = sequence_at(devices, "hostDevices", where)
    return DevicesView(
        autoattach_serial_console=bool_at(devices, "autoattachSerialConsole", where),
        log_serial_console=bool_at(devices, "logSerialConsole", where),
        autoattach_pod_interface=bool_at(devices, "autoattachPodInterface", where),
        autoattach_vsock=bool_at(devices, "autoattachVSOCK", "devices"),
        autoattach_graphics=bool_at(devices, "autoattachGraphicsDevice", "devices"),
        interfaces=tuple(_interface(i) for i in vmi_interfaces(vmi)),
        filesystems=frozenset(
            _name(f.get("name"))
            for f in sequence_at(devices, "filesystems", where)
            if isinstance(f, Mapping)
        ),
        gpus=len(gpus),
        host_devices=len(host_devices),
        gpu_plugins=_plugin_names(gpus),
        host_device_plugins=_plugin_names(host_devices),
        lun_reservation=_lun_reservation(sequence_at(devices, "disks", where)),
        tpm=devices.get("tpm") is not None,
        tpm_enabled=bool_at(mapping_at(devices, "tpm", where), "enabled", "tpm"),
    )


def _interface(iface: Mapping[str, Any]) -> InterfaceView:
    binding = iface.get("binding")
    name = binding.get("name") if isinstance(binding, Mapping) else None
    return InterfaceView(
        virtio=iface.get("model", "") in ("", "virtio"),
        sriov=iface.get("sriov") is not None,
        passt=iface.get("passt") is not None,
        all_ports=not iface.get("ports"),
        passt_binding=iface.get("passtBinding") is not None,
        has_binding=isinstance(binding, Mapping),
        binding=name if isinstance(name, str) else None,
    )


def _plugin_names(entries: Sequence[Any]) -> tuple[str, ...]:
    names = []
    for entry in entries:
        if isinstance(entry, Mapping):
            name = entry.get("deviceName")
            if isinstance(name, str) and name and entry.get("claimRequest") is None:
                names.append(name)
    return tuple(names)


def _lun_reservation(disks: Sequence[Any]) -> bool:
    for disk in disks:
        lun = disk.get("lun") if isinstance(disk, Mapping) else None
        if isinstance(lun, Mapping) and lun.get("reservation"):
            return True
    return False


def _volume(volume: Mapping[str, Any]) -> VolumeView:
    return VolumeView(
        name=_name(volume.get("name")),
        container_disk=volume.get("containerDisk") is not None,
        container_path=volume.get("containerPath") is not None,
        downward_metrics=volume.get("downwardMetrics") is not None,
    )


def _name(value: object) -> str | None:
    return None if value is None else str(value)


def _annotation(value: object) -> str | None:
    return None if value is None else str(value)


def _architecture(arch: object) -> str:
    if not arch:
        return ""
    if not isinstance(arch, str):
        raise ValueError(f"spec.architecture must be a string, not {arch!r}")
    return arch
