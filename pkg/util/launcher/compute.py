"""The compute container of the virt-launcher pod: KubeVirt's ResourceRenderer, by version.

Requests and limits as KubeVirt's renderresources.go computes them: ephemeral storage, the
virtualization devices, memory with its overhead (or hugepages), CPU from the topology and the
allocation ratio (or pinned), automatic limits, and the device-plugin resources the VMI asks for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Final

from ..kubevirtversion import KubeVirtVersion
from ..overhead import dedicated_cpu, go_parse_float, is_sev
from ..podusage import ResourceList
from ..quantity import Quantity
from ..vmispecview import SpecView
from .featuregates import EXTERNAL_NET_RESOURCE_INJECTION
from .settings import (
    KVM_DEVICE,
    PR_HELPER_DEVICE,
    SEV_DEVICE,
    TUN_DEVICE,
    VHOST_NET_DEVICE,
    VHOST_VSOCK_DEVICE,
    LauncherSettings,
)

EPHEMERAL_STORAGE_OVERHEAD: Final = "50M"
"""KubeVirt adds 50M of ephemeral storage to the compute container's request (and limit, if set)."""

DEFAULT_MEMORY_LIMITS_RATIO: Final = 2.0
"""Auto memory limits: limit = request x the namespace label alpha.kubevirt.io/auto-memory-limits-ratio
(KubeVirt's default when the label is absent or invalid)."""

HUGEPAGES_PREFIX: Final = "hugepages-"


def one() -> Quantity:
    """A fresh Quantity of 1 (quantities are values; callers may add to it)."""
    return Quantity.from_int(1)


def zero() -> Quantity:
    """A fresh Quantity of 0."""
    return Quantity.from_int(0)


@dataclass
class Renderer:
    """KubeVirt's ResourceRenderer: the VMI's own values win over calculated ones at the end."""

    vm_limits: ResourceList
    vm_requests: ResourceList
    calc_limits: ResourceList = field(default_factory=dict)
    calc_requests: ResourceList = field(default_factory=dict)

    def limits(self) -> ResourceList:
        return {**self.calc_limits, **self.vm_limits}

    def requests(self) -> ResourceList:
        return {**self.calc_requests, **self.vm_requests}

    def request_device(self, name: str) -> None:
        """requestResource: one more of `name` on both lists (merged view copied to calculated)."""
        for merged, calculated in (
            (self.limits(), self.calc_limits),
            (self.requests(), self.calc_requests),
        ):
            merged[name] = merged[name] + one() if name in merged else one()
            calculated.update(merged)


def _cpu_request_for(total_cpus: int, allocation_ratio: int) -> Quantity:
    """KubeVirt formats vCPUs / cpuAllocationRatio with Go's %g (in milli below 1) and parses it."""
    value = float(total_cpus) / float(allocation_ratio)
    suffix = ""
    if value < 1:
        value *= 1000
        suffix = "m"
    # repr() gives the shortest digits that round-trip, the digits Go's %g prints.
    digits = format(Decimal(repr(value)).normalize(), "f")
    return Quantity.parse(digits + suffix)


def _add_ephemeral_storage(requests: ResourceList, limits: ResourceList) -> None:
    overhead = Quantity.parse(EPHEMERAL_STORAGE_OVERHEAD)
    requests["ephemeral-storage"] = requests.get("ephemeral-storage", zero()) + overhead
    if "ephemeral-storage" in limits:
        limits["ephemeral-storage"] = limits["ephemeral-storage"] + overhead


def _virtualization_devices(vmi: SpecView, s: LauncherSettings) -> ResourceList:
    """getRequiredResources: tun, vhost-net, kvm and vhost-vsock, set as limits (count 1)."""
    devices = vmi.devices
    interfaces = devices.interfaces
    result: ResourceList = {}
    autoattach_pod = devices.autoattach_pod_interface
    if interfaces or autoattach_pod is None or autoattach_pod:
        result[TUN_DEVICE] = one()
    virtio = any(iface.virtio for iface in interfaces)
    if virtio and not s.allow_emulation:
        result[VHOST_NET_DEVICE] = one()
    if not s.allow_emulation:
        result[KVM_DEVICE] = one()
    if s.version.at_least(0, 59) and devices.autoattach_vsock:
        result[VHOST_VSOCK_DEVICE] = one()
    return result


def _with_memory_requests(vmi: SpecView, r: Renderer, overcommit: int) -> None:
    """v1.7+: a VMI without a memory request gets its limit, else guest (or the hugepage size)
    scaled by the cluster's memoryOvercommit percentage."""
    limit, request = r.vm_limits.get("memory"), r.vm_requests.get("memory")
    if limit is not None and not limit.is_zero() and (request is None or request.is_zero()):
        r.vm_requests["memory"] = limit
    if "memory" in r.vm_requests:
        return
    memory = vmi.memory.guest
    if memory is None:
        page_size = vmi.memory.hugepage_size
        if page_size is not None:
            try:
                memory = Quantity.parse(page_size)
            except ValueError:
                memory = None
    if memory is not None and memory.value() > 0:
        if overcommit == 100:
            r.vm_requests["memory"] = memory
        else:
            r.vm_requests["memory"] = Quantity.from_int(
                memory.value() * 100 // overcommit, memory.format
            )


def _with_hugepages(
    vmi: SpecView,
    *,
    requests: ResourceList,
    limits: ResourceList,
    hugepage_requests: ResourceList,
    hugepage_limits: ResourceList,
    overhead: Quantity,
) -> None:
    """Hugepages back the guest; the memory request/limit keep only overhead + (request - guest)."""
    page_size = vmi.memory.hugepage_size or ""
    name = HUGEPAGES_PREFIX + page_size
    guest = vmi.memory.guest
    request = requests.get("memory", zero())
    limit = limits.get("memory", zero())
    hugepages = request
    if guest is not None and request.value() > guest.value():
        hugepages = guest
    hugepage_requests[name] = hugepages
    hugepage_limits[name] = hugepages
    request_extra = Quantity.from_scaled(0, 3)
    limit_extra = Quantity.from_scaled(0, 3)
    if guest is not None:
        if request.value() > guest.value():
            request_extra = request_extra + request - guest
        if limit.value() > guest.value():
            limit_extra = limit_extra + limit - guest
    requests["memory"] = request_extra + overhead
    if "memory" in limits:
        limits["memory"] = limit_extra + overhead


def _with_memory_overhead(
    vmi: SpecView, requests: ResourceList, limits: ResourceList, overhead: Quantity
) -> None:
    overcommit_guest = vmi.resources.overcommit_guest_overhead
    request = requests.get("memory", zero())
    requests["memory"] = request if overcommit_guest else request + overhead
    if "memory" in limits:
        limits["memory"] = limits["memory"] + overhead


def _io_threads(vmi: SpecView) -> tuple[int, int]:
    """(supplementalPoolThreadCount, the same count only when ioThreadsPolicy is supplementalPool)."""
    count = vmi.io_thread_count
    return count, count if vmi.supplemental_pool else 0


def _with_cpu_pinning(vmi: SpecView, r: Renderer, version: KubeVirtVersion) -> None:
    """Dedicated CPUs, as each generation of KubeVirt's WithCPUPinning renders them.

    Up to v1.5.1 the vCPU count is a calculated limit (the VMI's own limit wins) and the memory
    limit becomes the memory request; v1.5.2 pins limits and requests to vCPUs + IOThreads.
    """
    cpu = vmi.cpu
    vcpus = 0 if cpu is None else cpu.vcpus
    modern = version.at_least(1, 5, 2)
    if modern:
        _pin_cpus_modern(vmi, r, vcpus)
    elif vcpus != 0:
        r.calc_limits["cpu"] = Quantity.from_int(vcpus, "BinarySI")
    elif "cpu" in r.vm_limits:
        r.vm_requests["cpu"] = r.vm_limits["cpu"]
    elif "cpu" in r.vm_requests:
        r.vm_limits["cpu"] = r.vm_requests["cpu"]

    if cpu is not None and cpu.isolate_emulator_thread:
        _isolate_emulator_thread(vmi, r, version)

    if not modern:
        r.vm_limits["memory"] = r.vm_requests.get("memory", zero())
    elif "memory" in r.vm_requests:
        r.vm_limits["memory"] = r.vm_requests["memory"]


def _pin_cpus_modern(vmi: SpecView, r: Renderer, vcpus: int) -> None:
    io_count = _io_threads(vmi)[0]
    if vcpus != 0:
        total = Quantity.from_int(vcpus + io_count, "BinarySI")
        r.vm_limits["cpu"] = total
        r.vm_requests["cpu"] = total
        return
    extra = Quantity.from_int(io_count, "BinarySI")
    for values in (r.vm_limits, r.vm_requests):
        if "cpu" in values:
            values["cpu"] = values["cpu"] + extra


def _isolate_emulator_thread(vmi: SpecView, r: Renderer, version: KubeVirtVersion) -> None:
    """One more pCPU for the emulator thread (two to reach an even count, when annotated, v1.2+)."""
    modern = version.at_least(1, 5, 2)
    base = (r.vm_limits if modern else r.calc_limits).get("cpu", zero())
    additional = _io_threads(vmi)[1] if version.at_least(1, 5) else 0
    even_parity = version.at_least(1, 2) and vmi.even_parity
    threads = Quantity.from_int(
        2 if even_parity and (base.value() + additional) % 2 == 0 else 1, "BinarySI"
    )
    # v0.56 to v0.59 raised the calculated limit; v1.0 on overwrite the VMI's own limit.
    (r.vm_limits if version.at_least(1, 0) else r.calc_limits)["cpu"] = base + threads
    if "cpu" in r.vm_requests:
        r.vm_requests["cpu"] = r.vm_requests["cpu"] + threads


def _auto_cpu_limits(vmi: SpecView, s: LauncherSettings) -> bool:
    """Whether KubeVirt sets limits.cpu = vCPUs for a VMI without one (v1.0+)."""
    if "cpu" in vmi.resources.limits:
        return False
    if s.version.at_least(1, 5):
        by_quota = s.quota_has_limits_cpu
    elif s.version.at_least(1, 1):
        by_quota = s.quota_has_limits_cpu and s.auto_resource_limits_gate
    else:
        by_quota = False
    return s.version.at_least(1, 0) and (by_quota or s.auto_cpu_limit_namespace_match)


def _auto_memory_limits(vmi: SpecView, s: LauncherSettings) -> bool:
    """Whether KubeVirt sets limits.memory = request x ratio for a VMI without one (v1.1+)."""
    if "memory" in vmi.resources.limits:
        return False
    if s.version.at_least(1, 5):
        return s.quota_has_limits_memory
    return s.version.at_least(1, 1) and s.quota_has_limits_memory and s.auto_resource_limits_gate


def _memory_limits_ratio(value: str | float | None) -> float:
    """The namespace label's ratio; KubeVirt falls back to 2.0 when it is absent, unparsable or < 1."""
    if value is None:
        return DEFAULT_MEMORY_LIMITS_RATIO
    try:
        ratio = go_parse_float(value) if isinstance(value, str) else float(value)
    except ValueError:
        return DEFAULT_MEMORY_LIMITS_RATIO
    if not ratio >= 1.0:  # also NaN
        return DEFAULT_MEMORY_LIMITS_RATIO
    return ratio


def _requested_devices(vmi: SpecView, s: LauncherSettings) -> list[str]:
    """Device-plugin resources requested once per use, in KubeVirt's order: SR-IOV (and other
    device-plugin) networks (unless ExternalNetResourceInjection leaves them to an external
    injector), GPUs, host devices, SEV, persistent reservation (v1.0+).

    A migration target asks the same names as the source: with VGPULiveMigration (alpha, v1.9)
    a VMI with one mediated GPU may migrate, and v1.9.0's target still requests its spec's
    deviceName (the gate only adds a launcher flag), so no gate is read here."""
    names: list[str] = []
    if not s.gate(EXTERNAL_NET_RESOURCE_INJECTION):
        names = [name for name in (s.network_resources or {}).values() if name]
    names.extend(vmi.devices.gpu_plugins)
    names.extend(vmi.devices.host_device_plugins)
    if is_sev(vmi, s.version):
        names.append(SEV_DEVICE)
    if s.version.at_least(1, 0) and vmi.devices.lun_reservation:
        names.append(PR_HELPER_DEVICE)
    return names


def _bump(values: ResourceList, name: str) -> None:
    values[name] = values[name] + one() if name in values else one()


def _without_dedicated_cpu(vmi: SpecView, r: Renderer, s: LauncherSettings) -> None:
    """requests.cpu = (vCPUs + IOThreads from v1.5.2) / cpuAllocationRatio, and automatic limits."""
    cpu = vmi.cpu
    vcpus = 1 if cpu is None else cpu.vcpus
    if s.version.at_least(1, 5, 2):
        vcpus += _io_threads(vmi)[0]
    if vcpus != 0:
        r.calc_requests["cpu"] = _cpu_request_for(vcpus, s.cpu_allocation_ratio)
        if _auto_cpu_limits(vmi, s):
            r.calc_limits["cpu"] = Quantity.parse(str(vcpus))


def compute_resources(
    vmi: SpecView, s: LauncherSettings, overhead: Quantity
) -> tuple[ResourceList, ResourceList]:
    """The compute container's (limits, requests); the view is not changed."""
    vm_limits = dict(vmi.resources.limits)
    vm_requests = dict(vmi.resources.requests)
    if not s.version.at_least(0, 56):
        return _compute_resources_v054(vmi, s, overhead, vm_limits, vm_requests)

    r = Renderer(vm_limits, vm_requests)
    _add_ephemeral_storage(r.vm_requests, r.vm_limits)
    r.vm_limits.update(_virtualization_devices(vmi, s))
    if s.version.at_least(1, 7) and r.vm_requests.get("memory", zero()).is_zero():
        _with_memory_requests(vmi, r, s.memory_overcommit)
    if dedicated_cpu(vmi):
        _with_cpu_pinning(vmi, r, s.version)
    else:
        _without_dedicated_cpu(vmi, r, s)
    if vmi.memory.hugepage_size is not None:
        _with_hugepages(
            vmi,
            requests=r.vm_requests,
            limits=r.vm_limits,
            hugepage_requests=r.calc_requests,
            hugepage_limits=r.calc_limits,
            overhead=overhead,
        )
    else:
        _with_memory_overhead(vmi, r.vm_requests, r.vm_limits, overhead)
    if _auto_memory_limits(vmi, s):
        request = r.vm_requests.get("memory", zero())
        scaled = float(request.value()) * _memory_limits_ratio(s.auto_memory_limits_ratio)
        r.calc_limits["memory"] = Quantity.from_int(int(scaled), request.format)
    for name in _requested_devices(vmi, s):
        r.request_device(name)
    if s.version.between((1, 5, 0), (1, 5, 2)):
        pool = _io_threads(vmi)[1]
        if pool > 0:
            extra = Quantity.from_int(pool, "BinarySI")
            r.vm_limits["cpu"] = r.vm_limits["cpu"] + extra if "cpu" in r.vm_limits else extra
    return r.limits(), r.requests()


def _compute_resources_v054(
    vmi: SpecView,
    s: LauncherSettings,
    overhead: Quantity,
    vm_limits: ResourceList,
    vm_requests: ResourceList,
) -> tuple[ResourceList, ResourceList]:
    """v0.54 and v0.55 rendered the compute resources inline, in a slightly different order."""
    requests: ResourceList = {}
    dedicated = dedicated_cpu(vmi)
    cpu = vmi.cpu
    if not dedicated:
        vcpus = 1 if cpu is None else cpu.vcpus
        if vcpus != 0:
            requests["cpu"] = _cpu_request_for(vcpus, s.cpu_allocation_ratio)
    requests.update(vm_requests)
    limits = dict(vm_limits)
    _add_ephemeral_storage(requests, limits)
    if vmi.memory.hugepage_size is not None:
        _with_hugepages(
            vmi,
            requests=requests,
            limits=limits,
            hugepage_requests=requests,
            hugepage_limits=limits,
            overhead=overhead,
        )
    else:
        _with_memory_overhead(vmi, requests, limits, overhead)
    if dedicated:
        pinned = 0 if cpu is None else cpu.vcpus
        if pinned != 0:
            limits["cpu"] = Quantity.from_int(pinned, "BinarySI")
        elif "cpu" in limits:
            requests["cpu"] = limits["cpu"]
        elif "cpu" in requests:
            limits["cpu"] = requests["cpu"]
        if cpu is not None and cpu.isolate_emulator_thread:
            thread = Quantity.from_int(1, "BinarySI")
            limits["cpu"] = limits.get("cpu", zero()) + thread
            if "cpu" in requests:
                requests["cpu"] = requests["cpu"] + thread
        limits["memory"] = requests.get("memory", zero())
    limits.update(_virtualization_devices(vmi, s))
    for name in _requested_devices(vmi, s):
        _bump(limits, name)
        _bump(requests, name)
    return limits, requests
