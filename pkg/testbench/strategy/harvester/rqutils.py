"""Harvester's ResourceQuota annotation helpers, as Harvester v1.9 has them.

Ports `pkg/util/resourcequota/utils.go` (AddMigratingVM, DeleteMigratingVM, ContainsMigratingVM,
getResourceListFromMigratingVMs, the compensation and resync-flag helpers,
IsResourceQuotaAutoScalingDisabled, IsResourceQuotaManagedByNamespaceAnnotation[WithMemoryLimits])
and the Rancher annotation decoding Harvester does with `json.Unmarshal` into its vendored
`v3.NamespaceResourceQuota`.

Every function works on a ResourceQuota dict as the API returns it and, like the Go code, mutates
the object it is given (callers pass a deep copy of the cached object, as Harvester does).
Semantics kept on purpose, even where they look odd:

- flags compare to exactly "true"; "clearing" the resync flag writes "false", and only if it was
  "true" (an absent flag stays absent);
- an empty compensation value counts as absent;
- a VM's keys are its name key (legacy, may be an invalid key for long names) and its VMI UID key;
  both are checked and deleted, only the UID key is written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn

from ....generic.resource import Object
from ....util import resources
from ....util.annotations import (
    ANNOTATION_MIGRATING_COMPENSATION,
    ANNOTATION_MIGRATING_NAME_PREFIX,
    ANNOTATION_MIGRATING_SCALING_RESYNC_NEEDED,
    ANNOTATION_MIGRATING_UID_PREFIX,
    ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING,
    FALSE,
    TRUE,
    legacy_migrating_vm_annotation_key,
    migrating_uid_annotation_key,
)
from ....util.quantity import Quantity
from ....util.rancher.annotation import LIMIT_FIELDS, go_fold
from ....util.resources import ResourceList

__all__ = [
    "ADDITIONAL_COMPENSATION_MEMORY",
    "LIMITS_CPU",
    "LIMITS_MEMORY",
    "REQUESTS_STORAGE",
    "RancherQuotaLimit",
    "add_migrating_compensation",
    "add_migrating_vm",
    "annotations_of",
    "clear_migrating_scaling_resync_needed",
    "contains_migrating_vm",
    "cpu_memory_limits",
    "decode_namespace_resource_quota",
    "delete_migrating_compensation",
    "delete_migrating_vm",
    "hard_of",
    "has_migrating_compensation",
    "has_migrating_vm",
    "is_auto_scaling_disabled",
    "is_empty_resource_quota",
    "is_memory_limit_empty",
    "is_migrating_scaling_resync_needed",
    "is_resource_quota_managed_by_namespace_annotation",
    "is_resource_quota_managed_by_namespace_annotation_with_memory_limits",
    "memory_limits",
    "migrating_compensation",
    "migrating_vm_resource_lists",
    "quantity_in",
    "set_migrating_scaling_resync_needed",
]

LIMITS_CPU: Final = "limits.cpu"
LIMITS_MEMORY: Final = "limits.memory"
REQUESTS_STORAGE: Final = "requests.storage"

ADDITIONAL_COMPENSATION_MEMORY: Final = 128 << 20
"""Harvester's margin on top of a compensation (128Mi): KubeVirt's own overhead estimate is not
exact, so the target pod gets a little more than the arithmetic says it needs."""


# --- plain metadata access ------------------------------------------------------------------------


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    """The object's annotations, or an empty mapping (Go reads a nil map as empty)."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return {}
    value = metadata.get("annotations")
    return value if isinstance(value, Mapping) else {}


def _writable_annotations(obj: Object) -> dict[str, str]:
    """The object's annotation dict, created if absent (Go's `make(map[string]string)`)."""
    metadata = obj.setdefault("metadata", {})
    annotations = metadata.get("annotations")
    if not isinstance(annotations, dict):
        annotations = {}
        metadata["annotations"] = annotations
    return annotations


def _existing_annotations(obj: Object) -> dict[str, str] | None:
    """The object's annotation dict if it has one (deleting from a nil map is a no-op in Go)."""
    annotations = (obj.get("metadata") or {}).get("annotations")
    return annotations if isinstance(annotations, dict) else None


def hard_of(rq: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """spec.hard as stored (None when absent, Go's nil map)."""
    spec = rq.get("spec")
    hard = spec.get("hard") if isinstance(spec, Mapping) else None
    return hard if isinstance(hard, Mapping) else None


def quantity_in(values: Mapping[str, Any] | None, name: str, fmt: str = "DecimalSI") -> Quantity:
    """`ResourceList.Name(name, format)`: the quantity, or a zero one in `fmt` when absent."""
    if values is None or values.get(name) is None:
        return Quantity(fmt=fmt)
    return resources.parse_quantity_value(name, values[name])


def is_empty_resource_quota(rq: Mapping[str, Any] | None) -> bool:
    """calculator.go `isEmpty` / `IsEmptyResourceQuota`: no hard, or limits.cpu and limits.memory
    both zero (or absent)."""
    if rq is None:
        return True
    hard = hard_of(rq)
    return hard is None or (
        quantity_in(hard, LIMITS_CPU).is_zero()
        and quantity_in(hard, LIMITS_MEMORY, "BinarySI").is_zero()
    )


def is_memory_limit_empty(rq: Mapping[str, Any] | None) -> bool:
    """calculator.go `isMemoryLimitEmpty`: no hard, or limits.memory zero (or absent)."""
    if rq is None:
        return True
    hard = hard_of(rq)
    return hard is None or quantity_in(hard, LIMITS_MEMORY, "BinarySI").is_zero()


# --- per-VM keys ---------------------------------------------------------------------------------


def has_migrating_vm(rq: Mapping[str, Any]) -> bool:
    """`HasMigratingVM`: any UID or name key, whatever its value."""
    return any(
        key.startswith((ANNOTATION_MIGRATING_UID_PREFIX, ANNOTATION_MIGRATING_NAME_PREFIX))
        for key in annotations_of(rq)
    )


def add_migrating_vm(rq: Object, vm_name: str, vm_uid: str, room: Mapping[str, Quantity]) -> None:
    """`AddMigratingVM`: drops the VM's name key and writes its UID key with `room` as JSON."""
    annotations = _writable_annotations(rq)
    annotations.pop(legacy_migrating_vm_annotation_key(vm_name), None)
    annotations[migrating_uid_annotation_key(vm_uid)] = resources.dumps(room)


def delete_migrating_vm(rq: Object, vm_name: str, vm_uid: str) -> bool:
    """`DeleteMigratingVM`: drops both keys of the VM; True if either was there."""
    annotations = _existing_annotations(rq)
    if annotations is None:
        return False
    before = len(annotations)
    annotations.pop(legacy_migrating_vm_annotation_key(vm_name), None)
    annotations.pop(migrating_uid_annotation_key(vm_uid), None)
    return len(annotations) != before


def contains_migrating_vm(rq: Mapping[str, Any], vm_name: str, vm_uid: str) -> bool:
    """`ContainsMigratingVM`: the VM's name key or its UID key is present."""
    annotations = annotations_of(rq)
    return (
        legacy_migrating_vm_annotation_key(vm_name) in annotations
        or migrating_uid_annotation_key(vm_uid) in annotations
    )


def migrating_vm_resource_lists(rq: Mapping[str, Any]) -> dict[str, ResourceList]:
    """`getResourceListFromMigratingVMs`: key suffix (UID or VM name) -> its ResourceList.

    One unreadable value fails the whole read (ValueError naming the key), as in Go.
    """
    found: dict[str, ResourceList] = {}
    for key, value in annotations_of(rq).items():
        for prefix in (ANNOTATION_MIGRATING_UID_PREFIX, ANNOTATION_MIGRATING_NAME_PREFIX):
            if key.startswith(prefix):
                found[key.removeprefix(prefix)] = _resource_list(key, value)
                break
    return found


def _resource_list(key: str, value: object) -> ResourceList:
    if not isinstance(value, str):
        raise ValueError(f"failed to unmarshal {key} quantity {value!r}: not a string")
    try:
        return resources.loads(value)
    except ValueError as err:
        raise ValueError(f"failed to unmarshal {key} quantity {value!r}: {err}") from None


# --- compensation --------------------------------------------------------------------------------


def has_migrating_compensation(rq: Mapping[str, Any]) -> bool:
    """`HasMigratingCompensation`: the compensation annotation is present and not empty."""
    return annotations_of(rq).get(ANNOTATION_MIGRATING_COMPENSATION, "") != ""


def add_migrating_compensation(rq: Object, room: Mapping[str, Quantity]) -> None:
    """`AddMigratingCompensation`: writes (replaces) the compensation."""
    _writable_annotations(rq)[ANNOTATION_MIGRATING_COMPENSATION] = resources.dumps(room)


def delete_migrating_compensation(rq: Object) -> bool:
    """`DeleteMigratingCompensation`: True if the annotation was there (even if empty)."""
    annotations = _existing_annotations(rq)
    if annotations is None or ANNOTATION_MIGRATING_COMPENSATION not in annotations:
        return False
    del annotations[ANNOTATION_MIGRATING_COMPENSATION]
    return True


def migrating_compensation(rq: Mapping[str, Any]) -> ResourceList | None:
    """`getResourceListOfMigratingCompensation`: None when absent or empty, else the ResourceList
    (ValueError if it does not parse)."""
    value = annotations_of(rq).get(ANNOTATION_MIGRATING_COMPENSATION, "")
    if value == "":
        return None
    return _resource_list(ANNOTATION_MIGRATING_COMPENSATION, value)


# --- flags ---------------------------------------------------------------------------------------


def set_migrating_scaling_resync_needed(rq: Object) -> None:
    """`SetAnnotationMigratingScalingResyncNeeded`: "true"."""
    _writable_annotations(rq)[ANNOTATION_MIGRATING_SCALING_RESYNC_NEEDED] = TRUE


def clear_migrating_scaling_resync_needed(rq: Object) -> None:
    """`ClearAnnotationMigratingScalingResyncNeeded`: "true" becomes "false"; anything else (absent
    included) is left as it is."""
    annotations = _existing_annotations(rq)
    if annotations is None or annotations.get(ANNOTATION_MIGRATING_SCALING_RESYNC_NEEDED) != TRUE:
        return
    annotations[ANNOTATION_MIGRATING_SCALING_RESYNC_NEEDED] = FALSE


def is_migrating_scaling_resync_needed(rq: Mapping[str, Any]) -> bool:
    return annotations_of(rq).get(ANNOTATION_MIGRATING_SCALING_RESYNC_NEEDED) == TRUE


def is_auto_scaling_disabled(rq: Mapping[str, Any]) -> bool:
    """`IsResourceQuotaAutoScalingDisabled`: the skip annotation is exactly "true"."""
    return annotations_of(rq).get(ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING) == TRUE


# --- Rancher's namespace annotation, read the way Harvester's Go reads it --------------------------

_FIELD_NAMES: Final = tuple(json_field for json_field, _ in LIMIT_FIELDS)


_FIELD_BY_FOLD: Final = {go_fold(name): name for name in _FIELD_NAMES}
_FOLDED_LIMIT: Final = go_fold("limit")


@dataclass(frozen=True)
class RancherQuotaLimit:
    """`v3.NamespaceResourceQuota` as Harvester's vendored Rancher API decodes it: the `limit`
    fields as the raw strings they are ("" when absent). Quantities are parsed only where Harvester
    parses them (GetCPUMemoryLimitsFromRancherNamespaceResourceQuota parses limitsCpu and
    limitsMemory and nothing else), so an invalid `requestsStorage` does not stop scaling.
    `extended` (Rancher v2.14+) is not a field of that struct and is ignored whatever it holds."""

    fields: Mapping[str, str] = field(default_factory=dict)

    def get(self, json_field: str) -> str:
        return self.fields.get(json_field, "")

    @property
    def limits_cpu(self) -> str:
        return self.get("limitsCpu")

    @property
    def limits_memory(self) -> str:
        return self.get("limitsMemory")

    @property
    def requests_storage(self) -> str:
        return self.get("requestsStorage")


class _Pairs(list[tuple[str, object]]):
    """A JSON object kept as its pairs, so duplicates decode as Go decodes them (last one wins)."""


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


def _type_error(text: str, reason: str) -> NoReturn:
    raise ValueError(f"invalid namespace resource quota annotation {text!r}: {reason}")


def decode_namespace_resource_quota(text: str) -> RancherQuotaLimit | None:
    """`json.Unmarshal(text, &*v3.NamespaceResourceQuota)`: None for JSON null (a nil pointer),
    ValueError for text that is not JSON or a type mismatch on a known field (Go's
    UnmarshalTypeError). Unknown fields are skipped; JSON null on a field changes nothing."""
    try:
        decoded: object = json.loads(
            text, object_pairs_hook=_Pairs, parse_constant=_reject_constant
        )
    except ValueError as err:
        raise ValueError(
            f"invalid namespace resource quota annotation {text!r}: not valid JSON: {err}"
        ) from None
    if decoded is None:
        return None
    if not isinstance(decoded, _Pairs):
        _type_error(text, "not a JSON object")
    fields: dict[str, str] = {}
    for key, value in decoded:
        if go_fold(key) != _FOLDED_LIMIT or value is None:
            continue
        if not isinstance(value, _Pairs):
            _type_error(text, "field limit is not a JSON object")
        for inner_key, inner_value in value:
            json_field = _FIELD_BY_FOLD.get(go_fold(inner_key))
            if json_field is None or inner_value is None:
                continue
            if not isinstance(inner_value, str):
                _type_error(text, f"field limit.{json_field} is not a string: {inner_value!r}")
            fields[json_field] = inner_value
    return RancherQuotaLimit(fields)


def cpu_memory_limits(limit: RancherQuotaLimit | None) -> tuple[Quantity, Quantity]:
    """`GetCPUMemoryLimitsFromRancherNamespaceResourceQuota`: limitsCpu and limitsMemory, zero
    when empty; ValueError for a value Go's ParseQuantity refuses (no trimming, as in Go)."""
    if limit is None:
        return Quantity(), Quantity(fmt="BinarySI")
    cpu = Quantity.parse(limit.limits_cpu) if limit.limits_cpu else Quantity()
    memory = (
        Quantity.parse(limit.limits_memory) if limit.limits_memory else Quantity(fmt="BinarySI")
    )
    return cpu, memory


def memory_limits(limit: RancherQuotaLimit | None) -> Quantity:
    """`GetMemoryLimitsFromRancherNamespaceResourceQuota`."""
    if limit is None or not limit.limits_memory:
        return Quantity(fmt="BinarySI")
    return Quantity.parse(limit.limits_memory)


def _decode_struct(text: str) -> RancherQuotaLimit:
    """Unmarshal into a struct value (not a pointer): JSON null leaves it empty."""
    return decode_namespace_resource_quota(text) or RancherQuotaLimit()


def is_resource_quota_managed_by_namespace_annotation(rq: Mapping[str, Any], text: str) -> bool:
    """`IsResourceQuotaManagedByNamespaceAnnotation`: the annotation is set, the quota limits
    limits.cpu or limits.memory, and the annotation has a non-zero limitsCpu or limitsMemory.
    ValueError when the annotation is not JSON or one of those two quantities does not parse."""
    if text == "" or is_empty_resource_quota(rq):
        return False
    cpu, memory = cpu_memory_limits(_decode_struct(text))
    return not cpu.is_zero() or not memory.is_zero()


def is_resource_quota_managed_by_namespace_annotation_with_memory_limits(
    rq: Mapping[str, Any], text: str
) -> bool:
    """`IsResourceQuotaManagedByNamespaceAnnotationWithMemoryLimits`: the same, on memory only."""
    if text == "" or is_memory_limit_empty(rq):
        return False
    return not memory_limits(_decode_struct(text)).is_zero()
