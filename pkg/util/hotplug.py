"""CPU and memory hot-plug: the VMI KubeVirt's LiveUpdate rollout makes of a running VM's edit.

When a running VM's template asks for more CPU sockets or guest memory than its VMI has, within
the maximum the VMI was started with (``maxSockets``, ``maxGuest``: KubeVirt sets them when the
rollout strategy is LiveUpdate, the default in KubeVirt v1.8), KubeVirt's VM controller patches the VMI
(sockets or guest memory, and the resource requests and limits that are set grow with them) and
then migrates it itself: the migration's target pod is rendered from the patched VMI, so the VM
comes out of the migration larger than it went in. Outside those bounds KubeVirt asks for a
restart instead (``RestartRequired``), and the larger pod meets quota admission when it is made.

`hot_plugged` mirrors KubeVirt v1.8's VM controller (``VMICPUsPatch``,
``handleMemoryHotplugRequest``): pure, no cluster reads; a malformed field is a ``ValueError``
naming it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from .quantity import Quantity
from .vmispec import int_at, mapping_at, quantity_of


def _domain(spec: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    return mapping_at(spec, "domain", where)


def _vcpus(cpu: Mapping[str, Any], where: str) -> int:
    """sockets x cores x threads, each 1 when unset (KubeVirt's GetNumberOfVCPUs)."""
    total = 1
    for field in ("sockets", "cores", "threads"):
        total *= int_at(cpu, field, where) or 1
    return total


def _optional_quantity(parent: Mapping[str, Any], key: str, where: str) -> Quantity | None:
    value = parent.get(key)
    return None if value is None else quantity_of(value, f"{where}.{key}")


def hot_plugged(
    template: Mapping[str, Any], vmi: Mapping[str, Any], cpu_allocation_ratio: int = 10
) -> dict[str, Any] | None:
    """The VMI as KubeVirt will patch it to hot-plug what `template` (the VM's
    spec.template.spec) adds to the running `vmi`, or None when nothing is hot-plugged (no
    growth, or growth KubeVirt applies only at a restart)."""
    if not _live_migratable(vmi):
        return None  # KubeVirt: hot-plug only for migratable VMs, a restart otherwise
    patched = copy.deepcopy(dict(vmi))
    spec = patched.setdefault("spec", {})
    grew = _plug_cpu(template, spec, cpu_allocation_ratio)
    grew = _plug_memory(template, spec) or grew
    return patched if grew else None


def _live_migratable(vmi: Mapping[str, Any]) -> bool:
    """False only when KubeVirt reports the VMI's LiveMigratable condition False."""
    conditions = (vmi.get("status") or {}).get("conditions") or []
    return not any(
        isinstance(c, Mapping) and c.get("type") == "LiveMigratable" and c.get("status") == "False"
        for c in conditions
    )


def _resources(spec: dict[str, Any]) -> dict[str, Any]:
    domain: dict[str, Any] = spec.setdefault("domain", {})
    resources: dict[str, Any] = domain.setdefault("resources", {})
    return resources


def _grow(spec: dict[str, Any], kind: str, key: str, delta: Quantity) -> None:
    """Adds `delta` to the VMI's resources.<kind>.<key> (treated as 0 when unset)."""
    values = _resources(spec).setdefault(kind, {})
    current = _optional_quantity(values, key, f"spec.domain.resources.{kind}")
    values[key] = str((current if current is not None else delta * 0) + delta)


def _plug_cpu(template: Mapping[str, Any], spec: dict[str, Any], ratio: int) -> bool:
    wanted_cpu = mapping_at(_domain(template, "template"), "cpu", "template.domain")
    cpu = mapping_at(_domain(spec, "spec"), "cpu", "spec.domain")
    sockets = int_at(cpu, "sockets", "spec.domain.cpu") or 1
    wanted = int_at(wanted_cpu, "sockets", "template.domain.cpu") or 1
    most = int_at(cpu, "maxSockets", "spec.domain.cpu")
    if wanted <= sockets or most == 0 or wanted > most:
        return False
    for field in ("cores", "threads"):  # KubeVirt restarts a VM whose cores or threads change
        if int_at(wanted_cpu, field, "template.domain.cpu") != int_at(
            cpu, field, "spec.domain.cpu"
        ):
            return False
    delta_vcpus = _vcpus(wanted_cpu, "template.domain.cpu") - _vcpus(cpu, "spec.domain.cpu")
    spec.setdefault("domain", {})["cpu"] = {**cpu, "sockets": wanted}
    delta = Quantity.parse(f"{max(delta_vcpus, 0) * (1000 // ratio)}m")
    wanted_resources = mapping_at(_domain(template, "template"), "resources", "template.domain")
    for kind in ("requests", "limits"):
        asked = mapping_at(wanted_resources, kind, "template.domain.resources")
        if _optional_quantity(asked, "cpu", f"template.domain.resources.{kind}"):
            _grow(spec, kind, "cpu", delta)
    return True


def _plug_memory(template: Mapping[str, Any], spec: dict[str, Any]) -> bool:
    wanted_memory = mapping_at(_domain(template, "template"), "memory", "template.domain")
    memory = mapping_at(_domain(spec, "spec"), "memory", "spec.domain")
    wanted = _optional_quantity(wanted_memory, "guest", "template.domain.memory")
    guest = _optional_quantity(memory, "guest", "spec.domain.memory")
    most = _optional_quantity(memory, "maxGuest", "spec.domain.memory")
    if wanted is None or guest is None or most is None or not guest < wanted <= most:
        return False
    delta = wanted - guest
    spec.setdefault("domain", {})["memory"] = {**memory, "guest": str(wanted)}
    requests = mapping_at(_resources(spec), "requests", "spec.domain.resources")
    if _optional_quantity(requests, "memory", "spec.domain.resources.requests"):
        _grow(spec, "requests", "memory", delta)
        grown = quantity_of(_resources(spec)["requests"]["memory"], "requests.memory")
        if grown < wanted:  # as KubeVirt: the request is at least the guest memory
            _resources(spec)["requests"]["memory"] = str(wanted)
    wanted_resources = mapping_at(_domain(template, "template"), "resources", "template.domain")
    limits = mapping_at(wanted_resources, "limits", "template.domain.resources")
    if _optional_quantity(limits, "memory", "template.domain.resources.limits"):
        _grow(spec, "limits", "memory", delta)
    return True
