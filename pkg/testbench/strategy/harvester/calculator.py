"""Harvester's quota arithmetic, as Harvester v1.9 has it (pure functions).

Ports `pkg/util/resourcequota/calculator.go`: CalculateScaleResourceQuotaWithVMI,
CalculateCompensationResourceQuotaWithVMI, CalculateNewResourceQuotaFromBaseDelta,
GetVMIMResourcesFromRQAnnotation, GetCompensationFromResourceQuota, and the VM-start check
(getNamespaceResourceQuota, containsEnoughResourceQuotaToStartVM, calculateVMActualOverhead,
convertNamespaceResourceLimitToResourceList); and `pkg/util/setting.go`
GetAdditionalGuestMemoryOverheadRatioWithoutError.

The memory share of a VM is KubeVirt's KVM `GetMemoryOverhead` of the VMI plus its limits.memory:
only the compute container. The guest-console-log sidecar (15m CPU, 60M memory on KubeVirt v1.x)
is not in it, and neither is anything but limits.cpu and limits.memory. Harvester calls the
formula of the KubeVirt it vendors (v1.8.3) with `runtime.GOARCH`; here the formula is
`harvester_quota.util.overhead.memory_overhead` for the KubeVirt version the caller names (the cluster's).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from ....util import resources
from ....util.annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA
from ....util.overhead import HARVESTER_RATIO_DEFAULT, go_parse_float, memory_overhead
from ....util.quantity import Quantity
from ....util.resources import ResourceList
from .rqutils import (
    ADDITIONAL_COMPENSATION_MEMORY,
    LIMITS_CPU,
    LIMITS_MEMORY,
    REQUESTS_STORAGE,
    RancherQuotaLimit,
    annotations_of,
    decode_namespace_resource_quota,
    hard_of,
    is_empty_resource_quota,
    is_memory_limit_empty,
    migrating_compensation,
    migrating_vm_resource_lists,
    quantity_in,
)

__all__ = [
    "GOARCH",
    "InsufficientResourceError",
    "additional_guest_memory_overhead_ratio",
    "calculate_compensation_resource_quota_with_vmi",
    "calculate_new_resource_quota_from_base_delta",
    "calculate_scale_resource_quota_with_vmi",
    "compensation_from_resource_quota",
    "contains_enough_resource_quota_to_start_vm",
    "launcher_memory_overhead",
    "namespace_resource_quota",
    "vmi_limits",
    "vmim_resources_from_rq_annotation",
]

log = logging.getLogger(__name__)

GOARCH: Final = "amd64"
"""Harvester passes `runtime.GOARCH` (its own binary's architecture) to GetMemoryOverhead."""

RATIO_MIN: Final = 1.0
RATIO_MAX: Final = 10.0
"""The setting's allowed range (`pkg/settings/settings_helper.go`): 0, or 1.0 to 10.0."""

_CPU: Final = "cpu"
_MEMORY: Final = "memory"
_CONVERSION: Final = {
    "limitsCpu": LIMITS_CPU,
    "limitsMemory": LIMITS_MEMORY,
    "requestsStorage": REQUESTS_STORAGE,
}
"""calculator.go `resourceQuotaConversion`; every other field keeps its JSON name."""


# --- the overhead ratio --------------------------------------------------------------------------


def additional_guest_memory_overhead_ratio(setting: Mapping[str, Any] | None) -> str:
    """`GetAdditionalGuestMemoryOverheadRatioWithoutError`: the ratio Harvester scales with.

    The setting's value, else its default, else "1.5"; a value that does not parse, lies outside
    1.0..10.0, or is 0 also gives "1.5". So "0", which tells KubeVirt to add no ratio at all, makes
    Harvester scale for a 1.5 ratio (more room than the pod needs). NaN passes Harvester's range
    check; KubeVirt's formula here refuses it (ValueError later) instead of computing garbage.
    """
    if setting is None:
        return HARVESTER_RATIO_DEFAULT
    value = str(setting.get("value") or "")
    if value == "":
        value = str(setting.get("default") or "")
        if value == "":
            return HARVESTER_RATIO_DEFAULT
    try:
        ratio = go_parse_float(value)
    except ValueError:
        return HARVESTER_RATIO_DEFAULT
    if (ratio < RATIO_MIN and ratio != 0) or ratio > RATIO_MAX or ratio == 0.0:
        return HARVESTER_RATIO_DEFAULT
    return value


def launcher_memory_overhead(
    vmi: Mapping[str, Any], ratio: str, kubevirt_version: str, *, arch: str = GOARCH
) -> Quantity:
    """KubeVirt's `GetMemoryOverhead(vmi, arch, &ratio)` as a quantity."""
    return Quantity.from_int(memory_overhead(vmi, ratio, kubevirt_version, cluster_arch=arch))


def vmi_limits(vmi: Mapping[str, Any]) -> ResourceList:
    """vmi.spec.domain.resources.limits."""
    spec = vmi.get("spec") or {}
    domain = spec.get("domain") or {}
    return resources.parse_resource_list((domain.get("resources") or {}).get("limits"))


def _used_of(rq: Mapping[str, Any]) -> Mapping[str, Any] | None:
    used = (rq.get("status") or {}).get("used")
    return used if isinstance(used, Mapping) else None


# --- scale-up, compensation and the quota from base + deltas -------------------------------------


def _resource_quota_and_vmi_usable(rq: Mapping[str, Any], limits: Mapping[str, Quantity]) -> bool:
    """`checkResourceQuotaAndVMI`."""
    if is_empty_resource_quota(rq):
        return False
    return not (quantity_in(limits, _CPU).is_zero() and quantity_in(limits, _MEMORY).is_zero())


def calculate_scale_resource_quota_with_vmi(
    rq: Mapping[str, Any], vmi: Mapping[str, Any], ratio: str, kubevirt_version: str
) -> tuple[bool, ResourceList | None]:
    """`CalculateScaleResourceQuotaWithVMI`: the VM's share, per key the quota already has.

    limits.cpu = the VMI's limits.cpu; limits.memory = the VMI's limits.memory + the compute
    container's overhead. A key is in the share only if the quota's spec.hard has that key (even
    as zero) and the VMI sets it. The share may be empty and is still "needed" (written as `{}`).
    """
    limits = vmi_limits(vmi)
    if not _resource_quota_and_vmi_usable(rq, limits):
        return False, None
    hard = hard_of(rq) or {}
    share: ResourceList = {}
    if not quantity_in(limits, _CPU).is_zero() and LIMITS_CPU in hard:
        share[LIMITS_CPU] = limits[_CPU]
    if not quantity_in(limits, _MEMORY).is_zero() and LIMITS_MEMORY in hard:
        share[LIMITS_MEMORY] = limits[_MEMORY] + launcher_memory_overhead(
            vmi, ratio, kubevirt_version
        )
    return True, share


def calculate_compensation_resource_quota_with_vmi(
    rq: Mapping[str, Any], vmi: Mapping[str, Any], ratio: str | None, kubevirt_version: str
) -> tuple[bool, ResourceList | None]:
    """`CalculateCompensationResourceQuotaWithVMI`: memory only.

    If status.used + the VM's memory share exceeds spec.hard's limits.memory, the compensation is
    the excess + 128Mi. spec.hard already includes the scale-up and any earlier compensation, so a
    second compensation is computed against the first one and replaces it (it is not added).
    """
    if ratio is None:
        return False, None
    limits = vmi_limits(vmi)
    if is_memory_limit_empty(rq) or quantity_in(limits, _MEMORY).is_zero():
        return False, None
    share = limits[_MEMORY] + launcher_memory_overhead(vmi, ratio, kubevirt_version)
    limit = quantity_in(hard_of(rq), LIMITS_MEMORY, "BinarySI")
    needed = quantity_in(_used_of(rq), LIMITS_MEMORY, "BinarySI") + share
    if needed > limit:
        excess = needed - limit + Quantity.from_int(ADDITIONAL_COMPENSATION_MEMORY, "BinarySI")
        return True, {LIMITS_MEMORY: excess}
    return False, None


def calculate_new_resource_quota_from_base_delta(
    rq: dict[str, Any],
    *,
    cpu_base: Quantity,
    memory_base: Quantity,
    cpu_delta: Quantity,
    memory_delta: Quantity,
    memory_compensation: Quantity,
) -> bool:
    """`CalculateNewResourceQuotaFromBaseDelta`: sets spec.hard limits.cpu = base + delta and
    limits.memory = base + delta + compensation, each only if its base is non-zero and the value
    differs; True if spec.hard changed. A key the quota did not have is added (hard is never nil
    here: callers check `is_empty_resource_quota` first)."""
    hard: dict[str, Any] = rq["spec"]["hard"]
    changed = False
    if not cpu_base.is_zero():
        wanted = cpu_base + cpu_delta
        if quantity_in(hard, LIMITS_CPU) != wanted:
            hard[LIMITS_CPU] = str(wanted)
            changed = True
    if not memory_base.is_zero():
        wanted = memory_base + memory_delta + memory_compensation
        if quantity_in(hard, LIMITS_MEMORY, "BinarySI") != wanted:
            hard[LIMITS_MEMORY] = str(wanted)
            changed = True
    return changed


def vmim_resources_from_rq_annotation(
    rq: Mapping[str, Any],
) -> tuple[Quantity, Quantity, Quantity]:
    """`GetVMIMResourcesFromRQAnnotation`: the sums of limits.cpu, limits.memory and
    requests.storage over every UID and name key (ValueError if one does not parse)."""
    cpu, memory, storage = Quantity(), Quantity(), Quantity()
    for room in migrating_vm_resource_lists(rq).values():
        cpu = cpu + quantity_in(room, LIMITS_CPU)
        memory = memory + quantity_in(room, LIMITS_MEMORY, "BinarySI")
        storage = storage + quantity_in(room, REQUESTS_STORAGE, "BinarySI")
    return cpu, memory, storage


def compensation_from_resource_quota(rq: Mapping[str, Any]) -> Quantity:
    """`GetCompensationFromResourceQuota`: limits.memory of the compensation, zero when absent."""
    room = migrating_compensation(rq)
    memory = Quantity(fmt="BinarySI")
    if room is None:
        return memory
    return memory + quantity_in(room, LIMITS_MEMORY, "BinarySI")


# --- the VM-start check (the VM webhook and controller call it; no migration controller does) ----


class InsufficientResourceError(Exception):
    """calculator.go's InsufficientResourceError: "<kind> insufficient resources due to resource
    quota"."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"{kind} insufficient resources due to resource quota")
        self.kind = kind


def namespace_resource_quota(namespace: Mapping[str, Any]) -> RancherQuotaLimit | None:
    """`getNamespaceResourceQuota`: None without the annotation or when limitsCpu, limitsMemory and
    requestsStorage are all empty. A present but empty annotation is not JSON: ValueError, as in Go.
    """
    annotations = annotations_of(namespace)
    if CATTLE_ANNOTATION_RESOURCE_QUOTA not in annotations:
        return None
    limit = decode_namespace_resource_quota(annotations[CATTLE_ANNOTATION_RESOURCE_QUOTA])
    if limit is None:
        # Go: a nil pointer here is dereferenced (a panic); refuse it clearly instead.
        raise ValueError("namespace resource quota annotation is null")
    if not (limit.limits_cpu or limit.limits_memory or limit.requests_storage):
        return None
    return limit


def _namespace_limit_resource_list(limit: RancherQuotaLimit) -> ResourceList:
    """`convertNamespaceResourceLimitToResourceList`: every non-empty field parsed (ValueError on
    any invalid one), limitsCpu/limitsMemory/requestsStorage renamed to their quota keys."""
    result: ResourceList = {}
    for json_field, text in limit.fields.items():
        if text == "":
            continue  # omitempty: json.Marshal leaves the field out
        result[_CONVERSION.get(json_field, json_field)] = Quantity.parse(text)
    return result


def contains_enough_resource_quota_to_start_vm(
    vm: Mapping[str, Any],
    limit: RancherQuotaLimit,
    rq: Mapping[str, Any],
    ratio: str,
    kubevirt_version: str,
) -> None:
    """`containsEnoughResourceQuotaToStartVM`: raises InsufficientResourceError("cpu"/"memory").

    Room = the annotation's base - (status.used - the migrating annotations' sums); the VM needs
    its limits.cpu and limits.memory + overhead (computed on a VMI holding only the VM's limits).
    A VM without limits makes Go dereference a nil overhead (a panic); here it is a ValueError.
    """
    vmims_cpu, vmims_memory, _ = vmim_resources_from_rq_annotation(rq)
    used = _used_of(rq)
    used_cpu = quantity_in(used, LIMITS_CPU) - vmims_cpu
    used_memory = quantity_in(used, LIMITS_MEMORY, "BinarySI") - vmims_memory

    template = (vm.get("spec") or {}).get("template")
    domain = ((template or {}).get("spec") or {}).get("domain") or {}
    raw_limits = (domain.get("resources") or {}).get("limits")
    if template is None or raw_limits is None:
        raise ValueError("the VM has no template limits: Harvester would dereference nil here")
    vm_limits = resources.parse_resource_list(raw_limits)
    as_vmi = {"spec": {"domain": {"resources": {"limits": dict(raw_limits)}}}}
    vm_cpu = quantity_in(vm_limits, _CPU)
    vm_memory = quantity_in(vm_limits, _MEMORY) + launcher_memory_overhead(
        as_vmi, ratio, kubevirt_version
    )

    actual = _namespace_limit_resource_list(limit)
    actual_cpu = quantity_in(actual, LIMITS_CPU)
    actual_memory = quantity_in(actual, LIMITS_MEMORY, "BinarySI")
    log.debug(
        "CPU: used %s vmim %s vm %s actual %s; memory: used %s vmim %s vm %s actual %s",
        used_cpu,
        vmims_cpu,
        vm_cpu,
        actual_cpu,
        used_memory,
        vmims_memory,
        vm_memory,
        actual_memory,
    )
    if not actual_cpu.is_zero() and actual_cpu - used_cpu < vm_cpu:
        raise InsufficientResourceError("cpu")
    if not actual_memory.is_zero() and actual_memory - used_memory < vm_memory:
        raise InsufficientResourceError("memory")
