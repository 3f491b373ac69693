"""The requests and guest memory Harvester's VM mutating webhook writes into a VM from its limits.

Scenario VMs are built the way Harvester builds them, so the launcher pods (and the quota usage)
are the ones the seeds report.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from ..util.podusage import ResourceList
from ..util.quantity import Quantity
from ..util.vmispec import quantity_of

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
    limit = quantity_of(limits_memory, "limits.memory")
    if reserved_memory is not None:
        reserved = quantity_of(reserved_memory, "reservedMemory")
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
        cpu = quantity_of(limits_cpu, "limits.cpu")
        if not cpu.is_zero():
            milli = cpu.milli_value()
            if not dedicated_cpu:
                milli = milli * 100 // _overcommit_percent(values, "cpu")
            requests["cpu"] = Quantity(nanos=milli * 1_000_000, fmt=cpu.format)  # NewMilliQuantity
    if limits_memory is not None:
        memory = quantity_of(limits_memory, "limits.memory")
        if not memory.is_zero():
            if dedicated_cpu:
                requests["memory"] = memory
            else:
                scaled = memory.value() * 100 // _overcommit_percent(values, "memory")
                requests["memory"] = Quantity.from_int(scaled // _MIB * _MIB, memory.format)
    return requests
