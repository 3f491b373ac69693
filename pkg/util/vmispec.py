"""Reading a KubeVirt object's fields as Go would: what is missing is "not set", what has the wrong
type is bad input (ValueError naming the field). Shared by the overhead formula, the launcher
renderer, pod usage and the Harvester port, which read the same VMI and pod fields.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ..generic.store import strip_unread_fields
from .quantity import Quantity


def mapping_at(parent: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}.{key} must be an object, not {type(value).__name__}")
    return value


def sequence_at(parent: Mapping[str, Any], key: str, where: str) -> Sequence[Any]:
    value = parent.get(key)
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(f"{where}.{key} must be a list, not {type(value).__name__}")
    return value


COUNT_MAX = 2**32 - 1
"""The largest count KubeVirt's Go types hold: CPU sockets, cores, threads, maxSockets and the
I/O thread pool's count are uint32 there."""


def int_at(parent: Mapping[str, Any], key: str, where: str) -> int:
    """A KubeVirt count (0 when unset); ValueError for a value that is no integer or is outside
    0..COUNT_MAX.

    Bounded: the API server stores any integer a tenant writes there, while
    virt-controller cannot decode one outside uint32 and renders no launcher for it; unbounded,
    the product multiplied the factors and overflowed a float (sockets x cores x threads). A
    ValueError is an estimate error (rooms.py): that migration gets no room, the side that never
    gives a tenant more room, and the rest of the namespace is planned."""
    value = parent.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where}.{key} must be an integer, not {value!r}")
    if not 0 <= value <= COUNT_MAX:
        raise ValueError(f"{where}.{key} must be within 0..{COUNT_MAX} (uint32), not {value}")
    return value


def bool_at(parent: Mapping[str, Any], key: str, where: str) -> bool | None:
    value = parent.get(key)
    if value is None or isinstance(value, bool):
        return value
    raise ValueError(f"{where}.{key} must be true or false, not {value!r}")


def quantity_of(value: Any, where: str) -> Quantity:
    """A quantity field: a string as the API returns it (JSON numbers are accepted, as Go does)."""
    if isinstance(value, Quantity):
        return value
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{where} must be a quantity string, not {value!r}")
    try:
        return Quantity.parse(value if isinstance(value, str) else str(value))
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None


def resource_list_at(raw: Any, where: str) -> dict[str, Quantity]:
    """A requests/limits object found at `where` (a pod's or a VMI's); ValueError naming
    `where` if malformed."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be an object, not {type(raw).__name__}")
    return {str(name): quantity_of(value, f"{where}.{name}") for name, value in raw.items()}


def vmi_spec(vmi: Mapping[str, Any]) -> Mapping[str, Any]:
    if not isinstance(vmi, Mapping):
        raise ValueError(f"a VMI must be an object, not {type(vmi).__name__}")
    return mapping_at(vmi, "spec", "vmi")


def vmi_domain(vmi: Mapping[str, Any]) -> Mapping[str, Any]:
    return mapping_at(vmi_spec(vmi), "domain", "spec")


def vmi_devices(vmi: Mapping[str, Any]) -> Mapping[str, Any]:
    return mapping_at(vmi_domain(vmi), "devices", "spec.domain")


def vmi_interfaces(vmi: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    result = []
    for index, iface in enumerate(
        sequence_at(vmi_devices(vmi), "interfaces", "spec.domain.devices")
    ):
        if not isinstance(iface, Mapping):
            raise ValueError(f"spec.domain.devices.interfaces[{index}] must be an object")
        result.append(iface)
    return result


FAR_FUTURE = datetime.datetime.max.replace(tzinfo=datetime.UTC)
"""The deadline of a pod whose grace period ends beyond what a datetime holds (year 9999)."""


def deletion_deadline(deletion: Any, grace: Any) -> datetime.datetime | None:
    """When a pod being deleted stops counting for quota: its deletionTimestamp plus its
    deletionGracePeriodSeconds (None unless both are set). ValueError for a field of the wrong
    type or form.

    Bounded: a tenant with ``edit`` may delete its pod with any grace period up to Go's int64
    (the API server stores it, its own arithmetic wrapping silently), and the sum overflowed
    Python's datetime (OverflowError). A deadline beyond year 9999 (or before year 1)
    is `FAR_FUTURE`: the pod counts as long as it exists, as it does while any deletion is under
    way. Counting it is the side that never gives a tenant more room: a pod still running is
    charged; Kubernetes' own evaluator, whose arithmetic wraps, may charge it less."""
    if deletion is None or grace is None:
        return None
    if isinstance(grace, bool) or not isinstance(grace, int):
        raise ValueError(f"metadata.deletionGracePeriodSeconds must be an integer: {grace!r}")
    moment = parse_time(deletion, "metadata.deletionTimestamp")
    try:
        return moment + datetime.timedelta(seconds=grace)
    except OverflowError:
        return FAR_FUTURE


def parse_time(value: Any, where: str) -> datetime.datetime:
    """An RFC 3339 timestamp with its time zone, as the API server writes them; ValueError that
    names `where` for anything else."""
    if not isinstance(value, str):
        raise ValueError(f"{where} must be an RFC 3339 timestamp, not {value!r}")
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{where} is not an RFC 3339 timestamp: {value!r}") from None
    if parsed.tzinfo is None:
        raise ValueError(f"{where} has no time zone: {value!r}")
    return parsed


UNREAD_UNKNOWN_FIELDS: Final = (("spec", "domain", "clock"),)
"""The fields of a VMI that KubeVirt's schema keeps unknown (x-kubernetes-preserve-unknown-fields
in the CRDs of KubeVirt v1.6 and v1.8: spec.domain.clock only) and no rule of the product reads
(the launcher pod's resources, the rooms, the hot-plug check and the preflight never look at the
guest's clock).

VirtualMachines need no such transform: no cache of the product holds VMs (nothing in the
controller or the webhook informs on VMs); the webhook sees a VM only
in an AdmissionReview, decoded with deepjson's depth cut (admission.parse_review) and not kept.
The VM CRD keeps unknown spec.template.spec.domain.clock and the metadata of spec.template and of
spec.dataVolumeTemplates (KubeVirt v1.6 and v1.8): a cache that came to hold VMs would drop the
clock as this does for VMIs (the VM rule reads the template's metadata, so that stays)."""


def strip_vmi_unread(vmi: Mapping[str, Any]) -> dict[str, Any]:
    """The VMI without UNREAD_UNKNOWN_FIELDS and without what every cache drops
    (generic/store.py `strip_unread_fields`: managedFields and kubectl's last-applied copy, of
    which no rule reads a VMI's; the launcher rendering reads two other annotations,
    util/vmispecview.py `spec_view`): the VMI caches' transform (controller and webhook), so
    that none of these, however deep or large, is encoded and kept. Everything else is kept as
    it is: the launcher rendering reads most of the spec, the metadata and the status. The VMI
    given is not changed (the dicts on the path to a dropped field are copied)."""
    result = dict(vmi)
    for path in UNREAD_UNKNOWN_FIELDS:
        _drop(result, path)
    _copied(result, ("metadata", "annotations"))  # what strip_unread_fields changes in place
    return strip_unread_fields(result)


def _drop(parent: dict[str, Any], path: tuple[str, ...]) -> None:
    """Removes `path` below `parent`, copying each dict on the way (nothing if it is absent)."""
    holder = _copied(parent, path[:-1])
    if holder is not None:
        holder.pop(path[-1], None)


def _copied(parent: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    """The dict at `path` below `parent`, each mapping on the way (that one included) replaced
    by a copy of its own; None where the path stops at something that is not a mapping."""
    holder = parent
    for key in path:
        child = holder.get(key)
        if not isinstance(child, Mapping):
            return None
        holder[key] = dict(child)
        holder = holder[key]
    return holder
