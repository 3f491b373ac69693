"""What a pod costs a ResourceQuota, and what a virt-launcher pod for a VMI will cost.

Two halves:

* `pod_quota_usage` is Kubernetes v1.36's quota pod evaluator (pkg/quota/v1/evaluator/core/pods.go
  with k8s.io/component-helpers/resource): container requests and limits summed the way the scheduler
  and quota do it (sidecars add up, plain init containers only raise the maximum), pod overhead,
  pod-level resources, in-place-resize status, terminal and long-terminating pods.
* `launcher_pod_resources` renders the resources of the virt-launcher pod KubeVirt would create for
  a VMI (the compute container with the memory overhead, the guest-console-log sidecar, container
  disks, virtiofs, hook sidecars and their init containers), per KubeVirt version, and
  `launcher_quota_usage` is the quota usage of that pod: the room one migration target needs.

Everything is a pure function of its arguments. The cluster settings that change the launcher pod
are parameters (see `launcher_pod_resources`); nothing is read from the cluster here.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final, TypedDict, Unpack

from .overhead import (
    KubeVirtVersion,
    _bool_field,
    _cpu_spec,
    _devices,
    _domain,
    _go_parse_float,
    _int_field,
    _interfaces,
    _is_sev,
    _mapping,
    _quantity,
    _sequence,
    _spec,
    dedicated_cpu,
    memory_overhead,
    parse_kubevirt_version,
    topology_vcpus,
    wants_guaranteed_qos,
)
from .quantity import Quantity

__all__ = [
    "HARVESTER_DEFAULT_OVERCOMMIT",
    "HARVESTER_V121_OVERCOMMIT",
    "LauncherOptions",
    "ResourceList",
    "harvester_guest_memory",
    "harvester_vm_requests",
    "launcher_pod_resources",
    "launcher_quota_usage",
    "pod_counts_against_quota",
    "pod_limits",
    "pod_quota_usage",
    "pod_requests",
    "quota_constraint_violations",
    "quota_usage_for",
]

ResourceList = dict[str, Quantity]

# ----------------------------------------------------------------------------------------------
# Kubernetes: what the quota pod evaluator charges

_RESTARTABLE: Final = "Always"
_HUGEPAGES_PREFIX: Final = "hugepages-"
_REQUESTS_PREFIX: Final = "requests."
_DEVICE_CLASS_PREFIX: Final = "deviceclass.resource.kubernetes.io/"
_NATIVE_NAMESPACE: Final = "kubernetes.io/"
_POD_LEVEL_RESOURCES: Final = frozenset({"cpu", "memory"})
_TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})

_DNS1123_LABEL: Final = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_RE: Final = re.compile(rf"{_DNS1123_LABEL}(?:\.{_DNS1123_LABEL})*")
_QUALIFIED_NAME_RE: Final = re.compile(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def _one() -> Quantity:
    return Quantity.from_int(1)


def _zero() -> Quantity:
    return Quantity.from_int(0)


def _is_native(name: str) -> bool:
    """Unprefixed names and names in the kubernetes.io/ namespace (helper.IsNativeResource)."""
    return "/" not in name or _NATIVE_NAMESPACE in name


def _is_qualified_name(value: str) -> bool:
    """apimachinery's IsQualifiedName: an optional DNS-subdomain prefix and a 63-character name."""
    parts = value.split("/")
    if len(parts) > 2:
        return False
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN_RE.fullmatch(prefix):
            return False
    name = parts[-1]
    return 0 < len(name) <= 63 and _QUALIFIED_NAME_RE.fullmatch(name) is not None


def _is_extended_resource(name: str) -> bool:
    """IsDRAExtendedResourceName: a device-plugin style extended resource, or a DRA device class."""
    if name.startswith(_DEVICE_CLASS_PREFIX):
        return True
    if _is_native(name) or name.startswith(_REQUESTS_PREFIX):
        return False
    return _is_qualified_name(_REQUESTS_PREFIX + name)


def _is_pod_level_resource(name: str) -> bool:
    return name in _POD_LEVEL_RESOURCES or name.startswith(_HUGEPAGES_PREFIX)


def _resource_list(raw: Any, where: str) -> ResourceList:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be an object, not {type(raw).__name__}")
    return {str(name): _quantity(value, f"{where}.{name}") for name, value in raw.items()}


def _add_into(target: ResourceList, other: Mapping[str, Quantity]) -> None:
    """component-helpers addResourceList."""
    for name, quantity in other.items():
        target[name] = target[name] + quantity if name in target else quantity


def _max_into(target: ResourceList, other: Mapping[str, Quantity]) -> None:
    """component-helpers maxResourceList."""
    for name, quantity in other.items():
        if name not in target or quantity > target[name]:
            target[name] = quantity


def _max_of(*lists: Mapping[str, Quantity]) -> ResourceList:
    result: ResourceList = {}
    for other in lists:
        _max_into(result, other)
    return result


@dataclass(frozen=True)
class _Container:
    name: str
    requests: ResourceList
    limits: ResourceList
    restartable: bool


@dataclass(frozen=True)
class _ContainerStatus:
    requests: ResourceList
    limits: ResourceList
    allocated: ResourceList


@dataclass(frozen=True)
class _PodView:
    """The parts of a pod the quota evaluator reads, parsed and defaulted like the API server does."""

    containers: tuple[_Container, ...]
    init_containers: tuple[_Container, ...]
    statuses: Mapping[str, _ContainerStatus]
    resize_infeasible: bool
    pod_requests: ResourceList | None
    pod_limits: ResourceList | None
    overhead: ResourceList = field(default_factory=dict)


def _parse_container(raw: Any, where: str) -> _Container:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be an object")
    resources = _mapping(raw, "resources", where)
    requests = _resource_list(resources.get("requests"), f"{where}.resources.requests")
    limits_raw = resources.get("limits")
    limits = _resource_list(limits_raw, f"{where}.resources.limits")
    if limits_raw is not None:
        # SetDefaults_Pod: a limit without a request defaults the request (a no-op for stored pods).
        requests = {**limits, **requests}
    return _Container(
        name=str(raw.get("name", "")),
        requests=requests,
        limits=limits,
        restartable=raw.get("restartPolicy") == _RESTARTABLE,
    )


def _parse_pod(pod: Mapping[str, Any]) -> _PodView:
    if not isinstance(pod, Mapping):
        raise ValueError(f"a pod must be an object, not {type(pod).__name__}")
    spec = _mapping(pod, "spec", "pod")
    status = _mapping(pod, "status", "pod")
    containers = tuple(
        _parse_container(c, f"spec.containers[{i}]")
        for i, c in enumerate(_sequence(spec, "containers", "spec"))
    )
    init_containers = tuple(
        _parse_container(c, f"spec.initContainers[{i}]")
        for i, c in enumerate(_sequence(spec, "initContainers", "spec"))
    )
    statuses: dict[str, _ContainerStatus] = {}
    for key in ("containerStatuses", "initContainerStatuses"):
        for i, raw in enumerate(_sequence(status, key, "status")):
            if not isinstance(raw, Mapping) or raw.get("resources") is None:
                continue
            where = f"status.{key}[{i}]"
            actual = _mapping(raw, "resources", where)
            statuses[str(raw.get("name", ""))] = _ContainerStatus(
                requests=_resource_list(actual.get("requests"), f"{where}.resources.requests"),
                limits=_resource_list(actual.get("limits"), f"{where}.resources.limits"),
                allocated=_resource_list(raw.get("allocatedResources"), f"{where}.allocated"),
            )
    resize_infeasible = False
    for condition in _sequence(status, "conditions", "status"):
        if isinstance(condition, Mapping) and condition.get("type") == "PodResizePending":
            resize_infeasible = condition.get("reason") == "Infeasible"
            break
    pod_requests: ResourceList | None = None
    pod_limits: ResourceList | None = None
    if spec.get("resources") is not None:
        pod_resources = _mapping(spec, "resources", "spec")
        pod_requests = _resource_list(pod_resources.get("requests"), "spec.resources.requests")
        pod_limits = _resource_list(pod_resources.get("limits"), "spec.resources.limits")
    view = _PodView(
        containers=containers,
        init_containers=init_containers,
        statuses=statuses,
        resize_infeasible=resize_infeasible,
        pod_requests=pod_requests,
        pod_limits=pod_limits,
        overhead=_resource_list(spec.get("overhead"), "spec.overhead"),
    )
    return _default_pod_level_resources(view)


def _default_pod_level_resources(view: _PodView) -> _PodView:
    """SetDefaults_Pod for pod-level resources (PodLevelResources, on by default since v1.34).

    Only when spec.resources is partly set: hugepage limits default to the containers' sum, then
    cpu/memory requests to the containers' effective requests, else to the pod-level limits.
    """
    if view.pod_requests is None or view.pod_limits is None:
        return view
    requests, limits = dict(view.pod_requests), dict(view.pod_limits)
    if requests or limits:
        container_limits = _aggregate(view, use_status=False, kind="limits")
        for name, quantity in container_limits.items():
            if name.startswith(_HUGEPAGES_PREFIX) and name not in requests:
                limits.setdefault(name, quantity)
    if limits:
        container_requests = _aggregate(view, use_status=False, kind="requests")
        for name, quantity in container_requests.items():
            if name in _POD_LEVEL_RESOURCES:  # overcommittable pod-level resources
                requests.setdefault(name, quantity)
        for name, quantity in limits.items():
            if _is_pod_level_resource(name):
                requests.setdefault(name, quantity)
    return dataclasses.replace(view, pod_requests=requests, pod_limits=limits)


def _effective(view: _PodView, container: _Container, kind: str, use_status: bool) -> ResourceList:
    """A container's requests or limits, raised by its in-place resize status (v1.35 GA)."""
    spec_values = container.requests if kind == "requests" else container.limits
    status = view.statuses.get(container.name) if use_status else None
    if status is None:
        return spec_values
    if kind == "requests":
        if view.resize_infeasible:
            return _max_of(status.requests, status.allocated)
        return _max_of(spec_values, status.requests, status.allocated)
    if view.resize_infeasible:
        return dict(status.limits)
    return _max_of(spec_values, status.limits)


def _aggregate(view: _PodView, *, use_status: bool, kind: str) -> ResourceList:
    """AggregateContainerRequests / AggregateContainerLimits (the sidecar KEP formula)."""
    total: ResourceList = {}
    for container in view.containers:
        _add_into(total, _effective(view, container, kind, use_status))
    sidecars: ResourceList = {}
    init_peak: ResourceList = {}
    for container in view.init_containers:
        if container.restartable:
            values = _effective(view, container, kind, use_status)
            _add_into(total, values)
            _add_into(sidecars, values)
            _max_into(init_peak, sidecars)
        else:
            running = dict(container.requests if kind == "requests" else container.limits)
            _add_into(running, sidecars)
            _max_into(init_peak, running)
    _max_into(total, init_peak)
    return total


def _pod_requests(view: _PodView) -> ResourceList:
    requests = _aggregate(view, use_status=True, kind="requests")
    pod_level = view.pod_requests or {}
    if any(_is_pod_level_resource(name) for name in pod_level):
        for name, quantity in pod_level.items():
            if _is_pod_level_resource(name):
                requests[name] = quantity
    _add_into(requests, view.overhead)
    return requests


def _pod_limits(view: _PodView) -> ResourceList:
    limits = _aggregate(view, use_status=True, kind="limits")
    pod_level = {**(view.pod_requests or {}), **(view.pod_limits or {})}
    if any(_is_pod_level_resource(name) for name in pod_level):
        for name, quantity in (view.pod_limits or {}).items():
            if _is_pod_level_resource(name):
                limits[name] = quantity
    for name, quantity in view.overhead.items():
        if name in limits and not limits[name].is_zero():
            limits[name] = limits[name] + quantity
    return limits


def pod_requests(pod: Mapping[str, Any]) -> ResourceList:
    """resourcehelper.PodRequests as the quota evaluator calls it (status resources, pod-level
    resources and pod overhead included)."""
    return _pod_requests(_parse_pod(pod))


def pod_limits(pod: Mapping[str, Any]) -> ResourceList:
    """resourcehelper.PodLimits as the quota evaluator calls it."""
    return _pod_limits(_parse_pod(pod))


def _parse_time(value: Any, where: str) -> datetime.datetime:
    if not isinstance(value, str):
        raise ValueError(f"{where} must be an RFC 3339 timestamp, not {value!r}")
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{where} is not an RFC 3339 timestamp: {value!r}") from None
    if parsed.tzinfo is None:
        raise ValueError(f"{where} has no time zone: {value!r}")
    return parsed


def pod_counts_against_quota(pod: Mapping[str, Any], now: datetime.datetime | None) -> bool:
    """QuotaV1Pod: whether quota charges this pod's compute resources.

    A pod in phase Succeeded or Failed does not count. A pod being deleted counts until its
    deletionTimestamp + deletionGracePeriodSeconds has passed (strictly), so that a pod stuck
    terminating on a lost node stops blocking new pods. `now` must be timezone-aware; None skips the
    grace-period test (only the phase is looked at).
    """
    if not isinstance(pod, Mapping):
        raise ValueError(f"a pod must be an object, not {type(pod).__name__}")
    if _mapping(pod, "status", "pod").get("phase") in _TERMINAL_PHASES:
        return False
    metadata = _mapping(pod, "metadata", "pod")
    deletion = metadata.get("deletionTimestamp")
    grace = metadata.get("deletionGracePeriodSeconds")
    if now is None or deletion is None or grace is None:
        return True
    if now.tzinfo is None:
        raise ValueError("now must be a timezone-aware datetime")
    if isinstance(grace, bool) or not isinstance(grace, int):
        raise ValueError(f"metadata.deletionGracePeriodSeconds must be an integer: {grace!r}")
    deadline = _parse_time(deletion, "metadata.deletionTimestamp") + datetime.timedelta(
        seconds=grace
    )
    return not now > deadline


def _compute_usage(requests: ResourceList, limits: ResourceList) -> ResourceList:
    """podComputeUsageHelper: the quota keys one pod's requests and limits map to."""
    usage: ResourceList = {"pods": _one()}
    for name in ("cpu", "memory", "ephemeral-storage"):
        if name in requests:
            usage[name] = requests[name]
            usage[_REQUESTS_PREFIX + name] = requests[name]
        if name in limits:
            usage["limits." + name] = limits[name]
    for name, quantity in requests.items():
        if name.startswith(_HUGEPAGES_PREFIX):
            usage[name] = quantity
            usage[_REQUESTS_PREFIX + name] = quantity
        if _is_extended_resource(name):
            usage[_REQUESTS_PREFIX + name] = quantity
    return usage


def pod_quota_usage(
    pod: Mapping[str, Any], *, now: datetime.datetime | None = None
) -> ResourceList:
    """Exactly what Kubernetes v1.36's quota pod evaluator charges for `pod`.

    `count/pods` always; for a pod that counts (see pod_counts_against_quota) also `pods`, `cpu`,
    `memory`, `ephemeral-storage` (= the requests), `requests.*` and `limits.*` of those three,
    `hugepages-<size>` and `requests.hugepages-<size>`, and `requests.<name>` for each extended
    resource. Containers whose limits lack a request get the limit as request, as the API server
    defaults them on create (a no-op for pods read from the API).
    """
    usage: ResourceList = {"count/pods": _one()}
    if not pod_counts_against_quota(pod, now):
        return usage
    view = _parse_pod(pod)
    _add_into(usage, _compute_usage(_pod_requests(view), _pod_limits(view)))
    return usage


def quota_usage_for(
    pod: Mapping[str, Any],
    quota_hard_keys: Iterable[str],
    *,
    now: datetime.datetime | None = None,
) -> ResourceList:
    """The pod's usage restricted to the resources a quota limits (the keys of its spec.hard)."""
    usage = pod_quota_usage(pod, now=now)
    return {name: usage[name] for name in quota_hard_keys if name in usage}


_CONSTRAINED: Final = frozenset(
    {"cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"}
)


def quota_constraint_violations(
    pod: Mapping[str, Any], quota_hard_keys: Iterable[str]
) -> dict[str, list[str]]:
    """The pod evaluator's Constraints check: resource -> containers that do not specify it.

    When a quota limits cpu or memory (requests.* or limits.*), every container and init container
    must set that request or limit, or the pod is rejected ("must specify limits.cpu for:
    compute"), whatever the totals. Not checked when pod-level resources are set. An empty result
    means the pod passes.
    """
    view = _parse_pod(pod)
    required = _CONSTRAINED.intersection(quota_hard_keys)
    pod_level = {**(view.pod_requests or {}), **(view.pod_limits or {})}
    if not required or any(_is_pod_level_resource(name) for name in pod_level):
        return {}
    missing: dict[str, list[str]] = {}
    for container in (*view.containers, *view.init_containers):
        present = _compute_usage(container.requests, container.limits)
        for name in sorted(required.difference(present)):
            missing.setdefault(name, []).append(container.name)
    return missing


# ----------------------------------------------------------------------------------------------
# KubeVirt: the resources of the virt-launcher pod

KVM_DEVICE: Final = "devices.kubevirt.io/kvm"
TUN_DEVICE: Final = "devices.kubevirt.io/tun"
VHOST_NET_DEVICE: Final = "devices.kubevirt.io/vhost-net"
VHOST_VSOCK_DEVICE: Final = "devices.kubevirt.io/vhost-vsock"
SEV_DEVICE: Final = "devices.kubevirt.io/sev"
PR_HELPER_DEVICE: Final = "devices.kubevirt.io/pr-helper"

EPHEMERAL_STORAGE_OVERHEAD: Final = "50M"
"""KubeVirt adds 50M of ephemeral storage to the compute container's request (and limit, if set)."""

DEFAULT_MEMORY_LIMITS_RATIO: Final = 2.0
"""Auto memory limits: limit = request x the namespace label alpha.kubevirt.io/auto-memory-limits-ratio
(KubeVirt's default when the label is absent or invalid)."""

HOOK_SIDECARS_ANNOTATION: Final = "hooks.kubevirt.io/hookSidecars"
EVEN_PARITY_ANNOTATION: Final = "alpha.kubevirt.io/EmulatorThreadCompleteToEvenParity"
_KERNEL_BOOT_VOLUME: Final = "kernel-boot-volume"


class LauncherOptions(TypedDict, total=False):
    """The cluster settings that shape the launcher pod (keyword arguments of the functions below)."""

    ratio: str | float | None
    kubevirt_version: str | KubeVirtVersion
    cluster_arch: str
    memory_overcommit: int
    cpu_allocation_ratio: int
    serial_console_log_disabled: bool
    quota_has_limits_cpu: bool
    quota_has_limits_memory: bool
    auto_cpu_limit_namespace_match: bool
    auto_resource_limits_gate: bool
    auto_memory_limits_ratio: str | float | None
    allow_emulation: bool
    support_container_resources: Sequence[Mapping[str, Any]]
    network_bindings: Mapping[str, Any] | None
    network_resources: Mapping[str, str] | None


@dataclass(frozen=True)
class _Settings:
    version: KubeVirtVersion
    ratio: str | float | None
    cluster_arch: str
    memory_overcommit: int
    cpu_allocation_ratio: int
    serial_console_log_disabled: bool
    quota_has_limits_cpu: bool
    quota_has_limits_memory: bool
    auto_cpu_limit_namespace_match: bool
    auto_resource_limits_gate: bool
    auto_memory_limits_ratio: str | float | None
    allow_emulation: bool
    support_container_resources: Sequence[Mapping[str, Any]]
    network_bindings: Mapping[str, Any] | None
    network_resources: Mapping[str, str] | None

    def support_value(self, container_type: str, kind: str, name: str) -> Quantity | None:
        """GetSupportContainerRequest/Limit: the first non-zero override for that container type
        (supportContainerResources exists from KubeVirt v1.0)."""
        if not self.version.at_least(1, 0):
            return None
        for index, entry in enumerate(self.support_container_resources):
            if not isinstance(entry, Mapping) or entry.get("type") != container_type:
                continue
            where = f"supportContainerResources[{index}]"
            resources = _mapping(entry, "resources", where)
            raw = _mapping(resources, kind, f"{where}.resources").get(name)
            if raw is not None:
                quantity = _quantity(raw, f"{where}.resources.{kind}.{name}")
                if not quantity.is_zero():
                    return quantity
        return None


@dataclass
class _Renderer:
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
            merged[name] = merged[name] + _one() if name in merged else _one()
            calculated.update(merged)


def _int_setting(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, not {value!r}")
    return value


def _settings(options: LauncherOptions) -> _Settings:
    return _Settings(
        version=parse_kubevirt_version(options.get("kubevirt_version", "1.6")),
        ratio=options.get("ratio"),
        cluster_arch=options.get("cluster_arch", "amd64"),
        memory_overcommit=_int_setting(
            options.get("memory_overcommit", 100), "memory_overcommit", 1
        ),
        cpu_allocation_ratio=_int_setting(
            options.get("cpu_allocation_ratio", 10), "cpu_allocation_ratio", 1
        ),
        serial_console_log_disabled=options.get("serial_console_log_disabled", False),
        quota_has_limits_cpu=options.get("quota_has_limits_cpu", False),
        quota_has_limits_memory=options.get("quota_has_limits_memory", False),
        auto_cpu_limit_namespace_match=options.get("auto_cpu_limit_namespace_match", False),
        auto_resource_limits_gate=options.get("auto_resource_limits_gate", False),
        auto_memory_limits_ratio=options.get("auto_memory_limits_ratio"),
        allow_emulation=options.get("allow_emulation", False),
        support_container_resources=options.get("support_container_resources", ()),
        network_bindings=options.get("network_bindings"),
        network_resources=options.get("network_resources"),
    )


# ---- compute container pieces


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
    requests["ephemeral-storage"] = requests.get("ephemeral-storage", _zero()) + overhead
    if "ephemeral-storage" in limits:
        limits["ephemeral-storage"] = limits["ephemeral-storage"] + overhead


def _virtualization_devices(vmi: Mapping[str, Any], s: _Settings) -> ResourceList:
    """getRequiredResources: tun, vhost-net, kvm and vhost-vsock, set as limits (count 1)."""
    devices = _devices(vmi)
    interfaces = _interfaces(vmi)
    result: ResourceList = {}
    autoattach_pod = _bool_field(devices, "autoattachPodInterface", "spec.domain.devices")
    if interfaces or autoattach_pod is None or autoattach_pod:
        result[TUN_DEVICE] = _one()
    virtio = any(iface.get("model", "") in ("", "virtio") for iface in interfaces)
    if virtio and not s.allow_emulation:
        result[VHOST_NET_DEVICE] = _one()
    if not s.allow_emulation:
        result[KVM_DEVICE] = _one()
    if s.version.at_least(0, 59) and _bool_field(devices, "autoattachVSOCK", "devices"):
        result[VHOST_VSOCK_DEVICE] = _one()
    return result


def _memory_spec(vmi: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(_domain(vmi), "memory", "spec.domain")


def _guest_memory(vmi: Mapping[str, Any]) -> Quantity | None:
    raw = _memory_spec(vmi).get("guest")
    return None if raw is None else _quantity(raw, "spec.domain.memory.guest")


def _hugepage_size(vmi: Mapping[str, Any]) -> str | None:
    memory = _memory_spec(vmi)
    if memory.get("hugepages") is None:
        return None
    page_size = _mapping(memory, "hugepages", "spec.domain.memory").get("pageSize", "")
    if not isinstance(page_size, str):
        raise ValueError(f"spec.domain.memory.hugepages.pageSize must be a string: {page_size!r}")
    return page_size


def _with_memory_requests(vmi: Mapping[str, Any], r: _Renderer, overcommit: int) -> None:
    """v1.7+: a VMI without a memory request gets its limit, else guest (or the hugepage size)
    scaled by the cluster's memoryOvercommit percentage."""
    limit, request = r.vm_limits.get("memory"), r.vm_requests.get("memory")
    if limit is not None and not limit.is_zero() and (request is None or request.is_zero()):
        r.vm_requests["memory"] = limit
    if "memory" in r.vm_requests:
        return
    memory = _guest_memory(vmi)
    if memory is None:
        page_size = _hugepage_size(vmi)
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
    vmi: Mapping[str, Any],
    *,
    requests: ResourceList,
    limits: ResourceList,
    hugepage_requests: ResourceList,
    hugepage_limits: ResourceList,
    overhead: Quantity,
) -> None:
    """Hugepages back the guest; the memory request/limit keep only overhead + (request - guest)."""
    page_size = _hugepage_size(vmi) or ""
    name = _HUGEPAGES_PREFIX + page_size
    guest = _guest_memory(vmi)
    request = requests.get("memory", _zero())
    limit = limits.get("memory", _zero())
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
    vmi: Mapping[str, Any], requests: ResourceList, limits: ResourceList, overhead: Quantity
) -> None:
    resources = _mapping(_domain(vmi), "resources", "spec.domain")
    overcommit_guest = _bool_field(resources, "overcommitGuestOverhead", "resources")
    request = requests.get("memory", _zero())
    requests["memory"] = request if overcommit_guest else request + overhead
    if "memory" in limits:
        limits["memory"] = limits["memory"] + overhead


def _io_threads(vmi: Mapping[str, Any]) -> tuple[int, int]:
    """(supplementalPoolThreadCount, the same count only when ioThreadsPolicy is supplementalPool)."""
    domain = _domain(vmi)
    count = _int_field(
        _mapping(domain, "ioThreads", "spec.domain"), "supplementalPoolThreadCount", "ioThreads"
    )
    pool = count if domain.get("ioThreadsPolicy") == "supplementalPool" else 0
    return count, pool


def _even_parity_requested(vmi: Mapping[str, Any]) -> bool:
    annotations = _mapping(_mapping(vmi, "metadata", "vmi"), "annotations", "metadata")
    return EVEN_PARITY_ANNOTATION in annotations


def _with_cpu_pinning(vmi: Mapping[str, Any], r: _Renderer, version: KubeVirtVersion) -> None:
    """Dedicated CPUs, as each generation of KubeVirt's WithCPUPinning renders them.

    Up to v1.5.1 the vCPU count is a calculated limit (the VMI's own limit wins) and the memory
    limit becomes the memory request; v1.5.2 pins limits and requests to vCPUs + IOThreads.
    """
    cpu = _cpu_spec(vmi) or {}
    vcpus = topology_vcpus(cpu)
    modern = version.at_least(1, 5, 2)
    if modern:
        _pin_cpus_modern(vmi, r, vcpus)
    elif vcpus != 0:
        r.calc_limits["cpu"] = Quantity.from_int(vcpus, "BinarySI")
    elif "cpu" in r.vm_limits:
        r.vm_requests["cpu"] = r.vm_limits["cpu"]
    elif "cpu" in r.vm_requests:
        r.vm_limits["cpu"] = r.vm_requests["cpu"]

    if _bool_field(cpu, "isolateEmulatorThread", "spec.domain.cpu"):
        _isolate_emulator_thread(vmi, r, version)

    if not modern:
        r.vm_limits["memory"] = r.vm_requests.get("memory", _zero())
    elif "memory" in r.vm_requests:
        r.vm_limits["memory"] = r.vm_requests["memory"]


def _pin_cpus_modern(vmi: Mapping[str, Any], r: _Renderer, vcpus: int) -> None:
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


def _isolate_emulator_thread(
    vmi: Mapping[str, Any], r: _Renderer, version: KubeVirtVersion
) -> None:
    """One more pCPU for the emulator thread (two to reach an even count, when annotated, v1.2+)."""
    modern = version.at_least(1, 5, 2)
    base = (r.vm_limits if modern else r.calc_limits).get("cpu", _zero())
    additional = _io_threads(vmi)[1] if version.at_least(1, 5) else 0
    even_parity = version.at_least(1, 2) and _even_parity_requested(vmi)
    threads = Quantity.from_int(
        2 if even_parity and (base.value() + additional) % 2 == 0 else 1, "BinarySI"
    )
    # v0.56 to v0.59 raised the calculated limit; v1.0 on overwrite the VMI's own limit.
    (r.vm_limits if version.at_least(1, 0) else r.calc_limits)["cpu"] = base + threads
    if "cpu" in r.vm_requests:
        r.vm_requests["cpu"] = r.vm_requests["cpu"] + threads


def _auto_cpu_limits(vmi: Mapping[str, Any], s: _Settings) -> bool:
    """Whether KubeVirt sets limits.cpu = vCPUs for a VMI without one (v1.0+)."""
    if "cpu" in _mapping(_mapping(_domain(vmi), "resources", "spec.domain"), "limits", "resources"):
        return False
    if s.version.at_least(1, 5):
        by_quota = s.quota_has_limits_cpu
    elif s.version.at_least(1, 1):
        by_quota = s.quota_has_limits_cpu and s.auto_resource_limits_gate
    else:
        by_quota = False
    return s.version.at_least(1, 0) and (by_quota or s.auto_cpu_limit_namespace_match)


def _auto_memory_limits(vmi: Mapping[str, Any], s: _Settings) -> bool:
    """Whether KubeVirt sets limits.memory = request x ratio for a VMI without one (v1.1+)."""
    if "memory" in _mapping(
        _mapping(_domain(vmi), "resources", "spec.domain"), "limits", "resources"
    ):
        return False
    if s.version.at_least(1, 5):
        return s.quota_has_limits_memory
    return s.version.at_least(1, 1) and s.quota_has_limits_memory and s.auto_resource_limits_gate


def _memory_limits_ratio(value: str | float | None) -> float:
    """The namespace label's ratio; KubeVirt falls back to 2.0 when it is absent, unparsable or < 1."""
    if value is None:
        return DEFAULT_MEMORY_LIMITS_RATIO
    try:
        ratio = _go_parse_float(value) if isinstance(value, str) else float(value)
    except ValueError:
        return DEFAULT_MEMORY_LIMITS_RATIO
    if not ratio >= 1.0:  # also NaN
        return DEFAULT_MEMORY_LIMITS_RATIO
    return ratio


def _device_plugin_names(vmi: Mapping[str, Any], key: str) -> list[str]:
    names = []
    for entry in _sequence(_devices(vmi), key, "spec.domain.devices"):
        if isinstance(entry, Mapping):
            name = entry.get("deviceName")
            if isinstance(name, str) and name and entry.get("claimRequest") is None:
                names.append(name)
    return names


def _has_persistent_reservation(vmi: Mapping[str, Any]) -> bool:
    for disk in _sequence(_devices(vmi), "disks", "spec.domain.devices"):
        lun = disk.get("lun") if isinstance(disk, Mapping) else None
        if isinstance(lun, Mapping) and lun.get("reservation"):
            return True
    return False


def _requested_devices(vmi: Mapping[str, Any], s: _Settings) -> list[str]:
    """Device-plugin resources requested once per use, in KubeVirt's order: SR-IOV (and other
    device-plugin) networks, GPUs, host devices, SEV, persistent reservation (v1.0+)."""
    names = [name for name in (s.network_resources or {}).values() if name]
    names.extend(_device_plugin_names(vmi, "gpus"))
    names.extend(_device_plugin_names(vmi, "hostDevices"))
    if _is_sev(vmi, s.version):
        names.append(SEV_DEVICE)
    if s.version.at_least(1, 0) and _has_persistent_reservation(vmi):
        names.append(PR_HELPER_DEVICE)
    return names


def _bump(values: ResourceList, name: str) -> None:
    values[name] = values[name] + _one() if name in values else _one()


def _without_dedicated_cpu(vmi: Mapping[str, Any], r: _Renderer, s: _Settings) -> None:
    """requests.cpu = (vCPUs + IOThreads from v1.5.2) / cpuAllocationRatio, and automatic limits."""
    cpu = _cpu_spec(vmi)
    vcpus = 1 if cpu is None else topology_vcpus(cpu)
    if s.version.at_least(1, 5, 2):
        vcpus += _io_threads(vmi)[0]
    if vcpus != 0:
        r.calc_requests["cpu"] = _cpu_request_for(vcpus, s.cpu_allocation_ratio)
        if _auto_cpu_limits(vmi, s):
            r.calc_limits["cpu"] = Quantity.parse(str(vcpus))


def _compute_resources(
    vmi: Mapping[str, Any], s: _Settings, overhead: Quantity
) -> tuple[ResourceList, ResourceList]:
    """The compute container's (limits, requests)."""
    resources = _mapping(_domain(vmi), "resources", "spec.domain")
    vm_limits = _resource_list(resources.get("limits"), "spec.domain.resources.limits")
    vm_requests = _resource_list(resources.get("requests"), "spec.domain.resources.requests")
    if not s.version.at_least(0, 56):
        return _compute_resources_v054(vmi, s, overhead, vm_limits, vm_requests)

    r = _Renderer(vm_limits, vm_requests)
    _add_ephemeral_storage(r.vm_requests, r.vm_limits)
    r.vm_limits.update(_virtualization_devices(vmi, s))
    if s.version.at_least(1, 7) and r.vm_requests.get("memory", _zero()).is_zero():
        _with_memory_requests(vmi, r, s.memory_overcommit)
    if dedicated_cpu(vmi):
        _with_cpu_pinning(vmi, r, s.version)
    else:
        _without_dedicated_cpu(vmi, r, s)
    if _hugepage_size(vmi) is not None:
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
        request = r.vm_requests.get("memory", _zero())
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
    vmi: Mapping[str, Any],
    s: _Settings,
    overhead: Quantity,
    vm_limits: ResourceList,
    vm_requests: ResourceList,
) -> tuple[ResourceList, ResourceList]:
    """v0.54 and v0.55 rendered the compute resources inline, in a slightly different order."""
    requests: ResourceList = {}
    dedicated = dedicated_cpu(vmi)
    cpu = _cpu_spec(vmi)
    if not dedicated:
        vcpus = 1 if cpu is None else topology_vcpus(cpu)
        if vcpus != 0:
            requests["cpu"] = _cpu_request_for(vcpus, s.cpu_allocation_ratio)
    requests.update(vm_requests)
    limits = dict(vm_limits)
    _add_ephemeral_storage(requests, limits)
    if _hugepage_size(vmi) is not None:
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
        pinned = topology_vcpus(cpu or {})
        if pinned != 0:
            limits["cpu"] = Quantity.from_int(pinned, "BinarySI")
        elif "cpu" in limits:
            requests["cpu"] = limits["cpu"]
        elif "cpu" in requests:
            limits["cpu"] = requests["cpu"]
        if _bool_field(cpu or {}, "isolateEmulatorThread", "spec.domain.cpu"):
            thread = Quantity.from_int(1, "BinarySI")
            limits["cpu"] = limits.get("cpu", _zero()) + thread
            if "cpu" in requests:
                requests["cpu"] = requests["cpu"] + thread
        limits["memory"] = requests.get("memory", _zero())
    limits.update(_virtualization_devices(vmi, s))
    for name in _requested_devices(vmi, s):
        _bump(limits, name)
        _bump(requests, name)
    return limits, requests


# ---- other containers


def _resources_dict(limits: ResourceList, requests: ResourceList) -> dict[str, Any]:
    result: dict[str, Any] = {}
    if limits:
        result["limits"] = {name: str(q) for name, q in limits.items()}
    if requests:
        result["requests"] = {name: str(q) for name, q in requests.items()}
    return result


def _container(
    name: str, limits: ResourceList, requests: ResourceList, *, restartable: bool = False
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "resources": _resources_dict(limits, requests)}
    if restartable:
        container["restartPolicy"] = _RESTARTABLE
    return container


def _support_resources(
    s: _Settings,
    container_type: str,
    limits: Mapping[str, str],
    requests: Mapping[str, str],
) -> tuple[ResourceList, ResourceList]:
    """Defaults for a support container, each overridable by supportContainerResources."""

    def resolve(kind: str, defaults: Mapping[str, str]) -> ResourceList:
        values: ResourceList = {}
        for name, default in defaults.items():
            override = (
                s.support_value(container_type, kind, name) if name != "ephemeral-storage" else None
            )
            values[name] = override if override is not None else Quantity.parse(default)
        return values

    return resolve("limits", limits), resolve("requests", requests)


def _serial_console_log_enabled(vmi: Mapping[str, Any], s: _Settings) -> bool:
    if not s.version.at_least(1, 1):
        return False
    devices = _devices(vmi)
    if _bool_field(devices, "autoattachSerialConsole", "spec.domain.devices") is False:
        return False
    log_serial = _bool_field(devices, "logSerialConsole", "spec.domain.devices")
    if log_serial is not None:
        return log_serial
    return not s.serial_console_log_disabled


def _guest_console_log(s: _Settings, wants_dedicated: bool) -> tuple[ResourceList, ResourceList]:
    limits, requests = _support_resources(
        s, "guest-console-log", {"cpu": "15m", "memory": "60M"}, {"cpu": "5m", "memory": "35M"}
    )
    if wants_dedicated:
        requests = {"cpu": limits["cpu"], "memory": limits["memory"]}
    return limits, requests


def _container_disk_resources(
    s: _Settings, wants_dedicated: bool
) -> tuple[ResourceList, ResourceList]:
    """The container-disk containers (one per containerDisk volume, plus kernel boot)."""
    eph = Quantity.parse(EPHEMERAL_STORAGE_OVERHEAD)
    if not s.version.at_least(1, 0):
        if wants_dedicated:
            return (
                {"memory": Quantity.parse("40M"), "cpu": Quantity.parse("10m")},
                {
                    "cpu": Quantity.parse("10m"),
                    "ephemeral-storage": eph,
                    "memory": Quantity.parse("40M"),
                },
            )
        return (
            {"memory": Quantity.parse("40M"), "cpu": Quantity.parse("100m")},
            {
                "cpu": Quantity.parse("10m"),
                "ephemeral-storage": eph,
                "memory": Quantity.parse("1M"),
            },
        )
    limits, requests = _support_resources(
        s, "container-disk", {"cpu": "10m", "memory": "40M"}, {"cpu": "1m", "memory": "1M"}
    )
    requests["ephemeral-storage"] = eph
    if wants_dedicated:
        requests["cpu"], requests["memory"] = limits["cpu"], limits["memory"]
    return limits, requests


def _container_disk_binary_resources(
    s: _Settings, wants_dedicated: bool
) -> tuple[ResourceList, ResourceList]:
    """The `container-disk-binary` init container (initContainerResourceRequirementsForVMI)."""
    if wants_dedicated:
        limits, _ = _support_resources(s, "container-disk", {"cpu": "10m", "memory": "40M"}, {})
        return limits, dict(limits)
    return _support_resources(
        s, "container-disk", {"cpu": "100m", "memory": "40M"}, {"cpu": "10m", "memory": "1M"}
    )


def _virtiofs_resources(
    s: _Settings, dedicated: bool, guaranteed: bool
) -> tuple[ResourceList, ResourceList]:
    """A virtiofsd container per shared filesystem (v0.58+; before, virtiofsd ran in compute).

    v0.58 to v1.0 always used the non-dedicated values (v0.5x with a 40M memory limit); v1.1 on
    raise the requests to the limits for dedicated CPUs / guaranteed QoS.
    """
    memory_limit = "80M" if s.version.at_least(1, 0) else "40M"
    if not s.version.at_least(1, 1):
        dedicated = guaranteed = False
    limits, requests = _support_resources(
        s, "virtiofs", {"memory": memory_limit, "cpu": "100m"}, {"cpu": "10m", "memory": "1M"}
    )
    if dedicated or guaranteed:
        requests["cpu"] = limits["cpu"]
    if guaranteed:
        requests["memory"] = limits["memory"]
    return limits, requests


def _sidecar_resources(s: _Settings, wants_dedicated: bool) -> tuple[ResourceList, ResourceList]:
    """Hook sidecars: nothing by default, 200m/64M (requests = limits) for dedicated/guaranteed."""
    requests: ResourceList = {}
    limits: ResourceList = {}
    for name in ("cpu", "memory"):
        request = s.support_value("sidecar", "requests", name)
        if request is not None:
            requests[name] = request
    if wants_dedicated:
        for name, default in (("cpu", "200m"), ("memory", "64M")):
            limit = s.support_value("sidecar", "limits", name)
            limits[name] = limit if limit is not None else Quantity.parse(default)
            requests[name] = limits[name]
    else:
        for name in ("cpu", "memory"):
            limit = s.support_value("sidecar", "limits", name)
            if limit is not None:
                limits[name] = limit
    return limits, requests


def _hook_sidecar_count(vmi: Mapping[str, Any], s: _Settings) -> int:
    """Sidecars from the hooks annotation, plus one per network binding plugin with an image."""
    annotations = _mapping(_mapping(vmi, "metadata", "vmi"), "annotations", "metadata")
    count = 0
    raw = annotations.get(HOOK_SIDECARS_ANNOTATION)
    if raw:
        try:
            sidecars = json.loads(raw)
        except (TypeError, ValueError):
            raise ValueError(f"annotation {HOOK_SIDECARS_ANNOTATION} is not valid JSON") from None
        if not isinstance(sidecars, list):
            raise ValueError(f"annotation {HOOK_SIDECARS_ANNOTATION} must be a JSON list")
        count += len(sidecars)
    if s.version.at_least(1, 1) and s.network_bindings is not None:
        plugins: set[str] = set()
        for iface in _interfaces(vmi):
            binding = iface.get("binding")
            if not isinstance(binding, Mapping):
                continue
            name = binding.get("name")
            plugin = s.network_bindings.get(name) if isinstance(name, str) else None
            if not isinstance(plugin, Mapping):
                raise ValueError(f"couldn't find configuration for network binding: {name}")
            if plugin.get("sidecarImage"):
                plugins.add(str(name))
        count += len(plugins)
    return count


def _volumes(vmi: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [v for v in _sequence(_spec(vmi), "volumes", "spec") if isinstance(v, Mapping)]


def launcher_pod_resources(
    vmi: Mapping[str, Any],
    *,
    ratio: str | float | None = None,
    kubevirt_version: str | KubeVirtVersion = "1.6",
    cluster_arch: str = "amd64",
    memory_overcommit: int = 100,
    cpu_allocation_ratio: int = 10,
    serial_console_log_disabled: bool = False,
    quota_has_limits_cpu: bool = False,
    quota_has_limits_memory: bool = False,
    auto_cpu_limit_namespace_match: bool = False,
    auto_resource_limits_gate: bool = False,
    auto_memory_limits_ratio: str | float | None = None,
    allow_emulation: bool = False,
    support_container_resources: Sequence[Mapping[str, Any]] = (),
    network_bindings: Mapping[str, Any] | None = None,
    network_resources: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The virt-launcher pod KubeVirt renders for `vmi`, reduced to what quota looks at.

    Returns `{"spec": {"containers": [...], "initContainers": [...]}}`, each container with its
    `name`, `resources` (quantity strings) and, for native sidecars, `restartPolicy: Always`; feed
    it to `pod_quota_usage`. Requests are as KubeVirt writes them (the API server's defaulting of
    requests from limits is applied by `pod_quota_usage`).

    Cluster settings (all keyword arguments; the defaults are KubeVirt's):

    - `ratio`: KubeVirt CR spec.configuration.additionalGuestMemoryOverheadRatio (str as stored).
    - `kubevirt_version`: "0.54".."1.9", "v1.6.3", "main"; selects every rule below.
    - `cluster_arch`: the cluster's default architecture (arm64 adds 128Mi of overhead).
    - `memory_overcommit`: developerConfiguration.memoryOvercommit, a percentage (v1.7+ uses it for
      VMIs without a memory request).
    - `cpu_allocation_ratio`: developerConfiguration.cpuAllocationRatio (requests.cpu = vCPUs / it
      for VMIs without a cpu request).
    - `serial_console_log_disabled`: virtualMachineOptions.disableSerialConsoleLog is set (no
      guest-console-log container unless the VMI asks for one).
    - `quota_has_limits_cpu` / `quota_has_limits_memory`: some ResourceQuota in the VMI's namespace
      has limits.cpu / limits.memory in spec.hard (KubeVirt then sets automatic limits).
    - `auto_cpu_limit_namespace_match`: the namespace matches autoCPULimitNamespaceLabelSelector.
    - `auto_resource_limits_gate`: the AutoResourceLimitsGate feature gate (needed on v1.1 to v1.4).
    - `auto_memory_limits_ratio`: the namespace label alpha.kubevirt.io/auto-memory-limits-ratio.
    - `allow_emulation`: developerConfiguration.useEmulation (no kvm/vhost-net devices).
    - `support_container_resources`: spec.configuration.supportContainerResources (v1.0+).
    - `network_bindings`: spec.configuration.network.binding (plugin memory and sidecars).
    - `network_resources`: network name -> device-plugin resource name of its
      NetworkAttachmentDefinition (k8s.v1.cni.cncf.io/resourceName), e.g. for SR-IOV.

    Not modelled: the ImageVolume feature gate (container disks as image volumes), DRA claims, and
    on main the TDX and IOMMUFD devices.
    """
    s = _settings(
        LauncherOptions(
            ratio=ratio,
            kubevirt_version=kubevirt_version,
            cluster_arch=cluster_arch,
            memory_overcommit=memory_overcommit,
            cpu_allocation_ratio=cpu_allocation_ratio,
            serial_console_log_disabled=serial_console_log_disabled,
            quota_has_limits_cpu=quota_has_limits_cpu,
            quota_has_limits_memory=quota_has_limits_memory,
            auto_cpu_limit_namespace_match=auto_cpu_limit_namespace_match,
            auto_resource_limits_gate=auto_resource_limits_gate,
            auto_memory_limits_ratio=auto_memory_limits_ratio,
            allow_emulation=allow_emulation,
            support_container_resources=support_container_resources,
            network_bindings=network_bindings,
            network_resources=network_resources,
        )
    )
    overhead = Quantity.from_scaled(
        memory_overhead(
            vmi,
            s.ratio,
            s.version,
            cluster_arch=s.cluster_arch,
            network_bindings=s.network_bindings,
        ),
        0,
    )
    dedicated = dedicated_cpu(vmi)
    wants_dedicated = dedicated or wants_guaranteed_qos(vmi, s.version)

    limits, requests = _compute_resources(vmi, s, overhead)
    containers = [_container("compute", limits, requests)]
    init_containers: list[dict[str, Any]] = []

    volumes = _volumes(vmi)
    disk_volumes = [
        v
        for v in volumes
        if v.get("containerDisk") is not None and v.get("name") != _KERNEL_BOOT_VOLUME
    ]
    firmware = _mapping(_domain(vmi), "firmware", "spec.domain")
    kernel_boot = _mapping(firmware, "kernelBoot", "firmware").get("container") is not None
    disk_limits, disk_requests = _container_disk_resources(s, wants_dedicated)
    for volume in disk_volumes:
        containers.append(_container(f"volume{volume.get('name')}", disk_limits, disk_requests))
    if kernel_boot:
        containers.append(_container("kernel-boot", disk_limits, disk_requests))

    console_log = _serial_console_log_enabled(vmi, s)
    if console_log and not s.version.at_least(1, 6):
        log_limits, log_requests = _guest_console_log(s, wants_dedicated)
        containers.append(_container("guest-console-log", log_limits, log_requests))

    if s.version.at_least(0, 58):
        filesystems = {
            f.get("name")
            for f in _sequence(_devices(vmi), "filesystems", "spec.domain.devices")
            if isinstance(f, Mapping)
        }
        fs_limits, fs_requests = _virtiofs_resources(s, dedicated, wants_dedicated)
        for volume in volumes:
            if volume.get("name") in filesystems and volume.get("containerPath") is None:
                containers.append(
                    _container(f"virtiofs-{volume.get('name')}", fs_limits, fs_requests)
                )

    sidecar_limits, sidecar_requests = _sidecar_resources(s, wants_dedicated)
    for index in range(_hook_sidecar_count(vmi, s)):
        containers.append(_container(f"hook-sidecar-{index}", sidecar_limits, sidecar_requests))

    if console_log and s.version.at_least(1, 6):
        log_limits, log_requests = _guest_console_log(s, wants_dedicated)
        init_containers.append(
            _container("guest-console-log", log_limits, log_requests, restartable=True)
        )
    if disk_volumes or kernel_boot:
        binary_limits, binary_requests = _container_disk_binary_resources(s, wants_dedicated)
        init_containers.append(_container("container-disk-binary", binary_limits, binary_requests))
        for volume in disk_volumes:
            init_containers.append(
                _container(f"volume{volume.get('name')}-init", disk_limits, disk_requests)
            )
        if kernel_boot:
            init_containers.append(_container("kernel-boot-init", disk_limits, disk_requests))

    spec: dict[str, Any] = {"containers": containers}
    if init_containers:
        spec["initContainers"] = init_containers
    return {"spec": spec}


def launcher_quota_usage(
    vmi: Mapping[str, Any], **options: Unpack[LauncherOptions]
) -> ResourceList:
    """The quota usage of the launcher pod KubeVirt would render for `vmi` now: the room one
    migration target needs. Takes the keyword arguments of `launcher_pod_resources`."""
    return pod_quota_usage(launcher_pod_resources(vmi, **options))


# ----------------------------------------------------------------------------------------------
# Harvester: the requests its VM mutating webhook writes

HARVESTER_DEFAULT_OVERCOMMIT: Final[Mapping[str, int]] = {
    "cpu": 1000,
    "memory": 150,
    "storage": 100,
}
"""Harvester's `overcommit-config` default today (percentages)."""

HARVESTER_V121_OVERCOMMIT: Final[Mapping[str, int]] = {"cpu": 1600, "memory": 150, "storage": 200}
"""Harvester v1.2.1's `overcommit-config` default (requests.cpu 125m for 2 cores)."""

HARVESTER_RESERVED_MEMORY: Final = 100 * 1024 * 1024
"""Harvester's legacy guest-memory reservation for QEMU (limits - 100Mi), used when no overhead
ratio is set and the VM has no harvesterhci.io/reservedMemory annotation."""

_MIB: Final = 1024 * 1024


def _overcommit_percent(overcommit: Mapping[str, int], name: str) -> int:
    value = overcommit.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"overcommit {name} must be a positive integer percentage, not {value!r}")
    return value


def harvester_guest_memory(
    limits_memory: str | Quantity,
    *,
    reserved_memory: str | Quantity | None = None,
    overhead_ratio_set: bool = True,
) -> Quantity:
    """The guest memory Harvester's VM mutator writes: limits minus the reserved memory.

    The reservation is the VM's harvesterhci.io/reservedMemory annotation when present; otherwise
    100Mi, unless the additional-guest-memory-overhead-ratio setting is set (Harvester v1.4+ default
    "1.5"), in which case nothing is reserved. Harvester v1.2.1 gives 3996Mi for a 4Gi VM.
    """
    limit = _quantity(limits_memory, "limits.memory")
    if reserved_memory is not None:
        reserved = _quantity(reserved_memory, "reservedMemory")
        if reserved.value() >= limit.value():
            raise ValueError(
                f"reserved memory {reserved} must be smaller than limits.memory {limit}"
            )
    elif overhead_ratio_set:
        return limit
    else:
        reserved = Quantity.from_int(HARVESTER_RESERVED_MEMORY, "BinarySI")
    return limit - reserved


def harvester_vm_requests(
    limits_cpu: str | Quantity | None,
    limits_memory: str | Quantity | None,
    overcommit: Mapping[str, int] | None = None,
    *,
    dedicated_cpu: bool = False,
) -> ResourceList:
    """requests.cpu / requests.memory as Harvester's VM mutator derives them from the limits.

    cpu: milli(limits) x 100 / overcommit["cpu"], integer division, in milli-CPU (125m for 2 CPUs at
    Harvester v1.2.1's 1600, 200m at today's 1000). memory: limits x 100 / overcommit["memory"],
    truncated to whole MiB (2730Mi for 4Gi at 150). With dedicated CPUs the requests equal the
    limits (guaranteed QoS). `overcommit` is the `overcommit-config` setting, by default today's
    {"cpu": 1000, "memory": 150}. Zero or missing limits give no request. (For VMs with GPUs or host
    devices Harvester uses the guest memory as request; see harvester_guest_memory.)
    """
    values = HARVESTER_DEFAULT_OVERCOMMIT if overcommit is None else overcommit
    requests: ResourceList = {}
    if limits_cpu is not None:
        cpu = _quantity(limits_cpu, "limits.cpu")
        if not cpu.is_zero():
            milli = cpu.milli_value()
            if not dedicated_cpu:
                milli = milli * 100 // _overcommit_percent(values, "cpu")
            requests["cpu"] = Quantity.from_milli(milli, cpu.format)
    if limits_memory is not None:
        memory = _quantity(limits_memory, "limits.memory")
        if not memory.is_zero():
            if dedicated_cpu:
                requests["memory"] = memory
            else:
                scaled = memory.value() * 100 // _overcommit_percent(values, "memory")
                requests["memory"] = Quantity.from_int(scaled // _MIB * _MIB, memory.format)
    return requests
