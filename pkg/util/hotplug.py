"""CPU and memory hot-plug: the VMI KubeVirt's LiveUpdate rollout makes of a running VM's edit.

When a running VM's template asks for other CPU sockets or guest memory than its VMI has, within
the maximum the VMI was started with (``maxSockets``, ``maxGuest``: KubeVirt sets them when the
rollout strategy is LiveUpdate, the default in KubeVirt v1.8), KubeVirt's VM controller patches the VMI
(sockets or guest memory, and the resource requests and limits that are set move with them) and
then migrates it itself: the migration's target pod is rendered from the patched VMI, so the VM
comes out of the migration larger than it went in. Outside those bounds KubeVirt asks for a
restart instead (``RestartRequired``), and the larger pod meets quota admission when it is made.
Under the ``Stage`` rollout strategy KubeVirt never hot-plugs; the caller checks that
(`LauncherSettings.vm_rollout_live_update`).

`hot_plugged` mirrors KubeVirt v1.8's VM controller (``handleCPUChangeRequest``,
``VMICPUsPatch``, ``handleMemoryHotplugRequest``, ``memory.ValidateLiveUpdateMemory``) on the
VM's own template: it does not expand ``spec.instancetype`` or ``spec.preference`` (KubeVirt's
``ApplyToVM``), so the caller must keep those from changing under a running VM. Pure, no cluster
reads; a malformed field is a ``ValueError`` naming it.

Where KubeVirt reads the VMI's status (``status.memory.guestCurrent``, ``guestAtBoot``) this does
too, as it is at the time of the call: KubeVirt computes the hot-plug from the same value when it
syncs the VM, which is moments later.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

from .quantity import Format, Quantity
from .vmispec import int_at, mapping_at, quantity_of

HOTPLUG_BLOCK_BYTES: Final = 2 * 1024**2
"""KubeVirt's memory hot-plug block: guest memory and maxGuest must be multiples of it."""
HOTPLUG_1GI_HUGEPAGES_BLOCK_BYTES: Final = 1024**3
"""The block with 1Gi huge pages."""
MIN_HOTPLUG_GUEST_BYTES: Final = 1024**3
"""KubeVirt hot-plugs memory only into a guest of at least 1Gi."""


def hot_plug_inputs(vm: Mapping[str, Any] | None) -> tuple[Any, ...]:
    """Every field of a VM that `hot_plugged` or KubeVirt's hot-plug reads from the VM (the
    template's CPU, memory, resources, architecture and launch security; the instancetype and
    preference), so that an edit leaving them all equal cannot start a hot-plug."""
    vm_spec = mapping_at(vm or {}, "spec", "VM")
    template = mapping_at(mapping_at(vm_spec, "template", "spec"), "spec", "spec.template")
    domain = mapping_at(template, "domain", "spec.template.spec")
    return (
        domain.get("cpu"),
        domain.get("memory"),
        domain.get("resources"),
        domain.get("launchSecurity"),
        template.get("architecture"),
        vm_spec.get("instancetype"),
        vm_spec.get("preference"),
    )


def hot_plugged(
    template: Mapping[str, Any], vmi: Mapping[str, Any], cpu_allocation_ratio: int = 10
) -> dict[str, Any] | None:
    """The VMI as KubeVirt will patch it to hot-plug what `template` (the VM's
    spec.template.spec) changes in the running `vmi`, or None when nothing is hot-plugged (no
    change, or one KubeVirt applies only at a restart). The VMI given is not changed."""
    if not _live_migratable(vmi):
        return None  # KubeVirt: hot-plug only for migratable VMs, a restart otherwise
    patched = copy.deepcopy(dict(vmi))
    spec = patched.setdefault("spec", {})
    status = mapping_at(vmi, "status", "VMI")
    grew = _plug_cpu(template, spec, cpu_allocation_ratio)
    grew = _plug_memory(template, spec, mapping_at(status, "memory", "status")) or grew
    return patched if grew else None


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


def _set(spec: dict[str, Any], kind: str, key: str, value: Quantity) -> None:
    _resources(spec).setdefault(kind, {})[key] = str(value)


def _current(spec: dict[str, Any], kind: str, key: str) -> Quantity:
    """The VMI's resources.<kind>.<key>, 0 when unset (as KubeVirt's Memory() and Cpu())."""
    values = mapping_at(_resources(spec), kind, "spec.domain.resources")
    found = _optional_quantity(values, key, f"spec.domain.resources.{kind}")
    return found if found is not None else Quantity.from_int(0)


def _asked(template: Mapping[str, Any], kind: str, key: str) -> bool:
    """The template sets a non-zero resources.<kind>.<key> (KubeVirt: !IsZero())."""
    resources = mapping_at(_domain(template, "template"), "resources", "template.domain")
    values = mapping_at(resources, kind, "template.domain.resources")
    return bool(_optional_quantity(values, key, f"template.domain.resources.{kind}"))


def _plug_cpu(template: Mapping[str, Any], spec: dict[str, Any], ratio: int) -> bool:
    """KubeVirt's handleCPUChangeRequest and VMICPUsPatch: more sockets, up to maxSockets, cores
    and threads as the VMI started with (else a restart, `_surely_changed`), not on ARM; requests and limits the template sets grow
    by 1000m / cpuAllocationRatio per added vCPU."""
    wanted_cpu = mapping_at(_domain(template, "template"), "cpu", "template.domain")
    cpu = mapping_at(_domain(spec, "spec"), "cpu", "spec.domain")
    sockets = int_at(cpu, "sockets", "spec.domain.cpu") or 1
    wanted = int_at(wanted_cpu, "sockets", "template.domain.cpu") or 1
    most = int_at(cpu, "maxSockets", "spec.domain.cpu")
    if wanted <= sockets or most == 0 or wanted > most or template.get("architecture") == "arm64":
        return False
    if any(_surely_changed(wanted_cpu, cpu, field) for field in ("cores", "threads")):
        return False  # KubeVirt restarts a VM whose cores or threads differ from its start
    delta_vcpus = _vcpus(wanted_cpu, "template.domain.cpu") - _vcpus(cpu, "spec.domain.cpu")
    spec.setdefault("domain", {})["cpu"] = {**cpu, "sockets": wanted}
    delta = Quantity.parse(f"{max(delta_vcpus, 0) * (1000 // ratio)}m")
    for kind in ("requests", "limits"):
        if _asked(template, kind, "cpu"):
            _set(spec, kind, "cpu", _current(spec, kind, "cpu") + delta)
    return True


def _surely_changed(wanted_cpu: Mapping[str, Any], cpu: Mapping[str, Any], field: str) -> bool:
    """Whether the template's `field` (cores or threads) certainly differs from the template
    the VMI was started from.

    KubeVirt does not compare the template with the VMI: it compares it with the VM spec it
    recorded when the VMI started (its last-seen ControllerRevision, syncRestartRequired), unset
    fields as unset, and asks for a restart only when a field it cannot live-update differs. The
    VMI shows that start template after defaulting: an unset cores or threads became 1. So a
    template value equal to the VMI's, or unset (0) where the VMI has 1, may be the start value
    and is not taken for a restart: a VM whose template never set cores or threads hot-plugs
    its sockets. Erring this way only ever checks an edit KubeVirt restarts for (the check
    denies at worst); the other way let a tenant through with a hot-plug."""
    wanted = int_at(wanted_cpu, field, "template.domain.cpu")
    running = int_at(cpu, field, "spec.domain.cpu")
    return wanted != running and not (wanted == 0 and running == 1)


def _plug_memory(
    template: Mapping[str, Any], spec: dict[str, Any], status_memory: Mapping[str, Any]
) -> bool:
    """KubeVirt's handleMemoryHotplugRequest: a template guest other than the VMI's, within
    maxGuest and not below the guest the VMI booted with, on a VMI whose status reports its
    current guest memory and a template ValidateLiveUpdateMemory accepts. The delta is taken from
    status.memory.guestCurrent; a memory request grows by it but is at least the new guest (the
    delta for the limit is then what the request fell short of: 0), a limit the template sets
    grows by it."""
    wanted = _optional_quantity(
        mapping_at(_domain(template, "template"), "memory", "template.domain"),
        "guest",
        "template.domain.memory",
    )
    memory = mapping_at(_domain(spec, "spec"), "memory", "spec.domain")
    guest = _optional_quantity(memory, "guest", "spec.domain.memory")
    current = _optional_quantity(status_memory, "guestCurrent", "status.memory")
    if wanted is None or guest is None or current is None or wanted == guest:
        return False
    most = _optional_quantity(memory, "maxGuest", "spec.domain.memory")
    at_boot = _optional_quantity(status_memory, "guestAtBoot", "status.memory")
    if most is None or not _live_update_memory_ok(template, wanted, most):
        return False
    if (at_boot is not None and wanted < at_boot) or wanted > most:
        return False
    delta = Quantity.from_int(wanted.value() - current.value(), Format.BINARY_SI)
    spec.setdefault("domain", {})["memory"] = {**memory, "guest": str(wanted)}
    request = _current(spec, "requests", "memory")
    if request:
        grown = request + delta
        if grown < wanted:  # as KubeVirt: the request is at least the guest memory
            grown = wanted
            delta = Quantity.from_int(wanted.value() - grown.value(), Format.BINARY_SI)
        _set(spec, "requests", "memory", grown)
    if _asked(template, "limits", "memory"):
        _set(spec, "limits", "memory", _current(spec, "limits", "memory") + delta)
    return True


def _live_update_memory_ok(template: Mapping[str, Any], guest: Quantity, most: Quantity) -> bool:
    """KubeVirt's ValidateLiveUpdateMemory on the template: no realtime CPU, no NUMA guest
    mapping passthrough, no launch security, guest memory and maxGuest aligned to the hot-plug
    block (1Gi with 1Gi huge pages, else 2Mi), an x86_64 VM (an unset architecture counts as
    one: virt-api's VM mutator sets it on every VM, so only a cluster without it leaves it unset,
    and checking errs toward denying), at least 1Gi of guest memory."""
    domain = _domain(template, "template")
    cpu = mapping_at(domain, "cpu", "template.domain")
    numa = mapping_at(cpu, "numa", "template.domain.cpu")
    if (
        cpu.get("realtime") is not None
        or numa.get("guestMappingPassthrough") is not None
        or domain.get("launchSecurity") is not None
    ):
        return False
    hugepages = mapping_at(
        mapping_at(domain, "memory", "template.domain"), "hugepages", "template.domain.memory"
    )
    huge = hugepages.get("pageSize") == "1Gi"
    block = HOTPLUG_1GI_HUGEPAGES_BLOCK_BYTES if huge else HOTPLUG_BLOCK_BYTES
    if guest.value() % block or most.value() % block:
        return False
    if template.get("architecture") not in (None, "", "amd64"):
        return False
    return guest.value() >= MIN_HOTPLUG_GUEST_BYTES
