"""KubeVirt's priority of a migration (the migration priority queue, GA in KubeVirt v1.9).

virt-controller sets a VirtualMachineInstanceMigration's `spec.priority` when it creates the
migration: `system-critical` for a node drain's evacuation and a workload update,
`system-maintenance` for an evacuation of lesser urgency, `user-triggered` for a workload update
while a hotplug is in progress; a migration a user creates has none (the default). virt-api's
create admitter refuses the field from anyone but virt-controller's account (v1.7 on, where
the field is served), and the chart's `kubevirt-migration-priority` policy does the same in the
API server itself (virt-api's webhook out of the path, an update virt-api does not check), so a
tenant cannot put its own migration ahead. KubeVirt orders its work by these numbers (pkg/util/migrations QueuePriority*); where room
is scarce we hand it out in the same order: higher first, then the older migration.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Final

from .kubevirtversion import KubeVirtVersion

SYSTEM_CRITICAL: Final = "system-critical"
USER_TRIGGERED: Final = "user-triggered"
SYSTEM_MAINTENANCE: Final = "system-maintenance"

PRIORITIES: Final[Mapping[str, int]] = {
    SYSTEM_CRITICAL: 100,
    USER_TRIGGERED: 50,
    SYSTEM_MAINTENANCE: 20,
}
"""spec.priority -> KubeVirt's queue priority; anything else (unset) is DEFAULT."""
DEFAULT: Final = 0


def migration_priority(migration: Mapping[str, Any] | None) -> int:
    """KubeVirt's queue priority of `migration` (DEFAULT for none, or a value KubeVirt does not
    know: it treats those as the default too)."""
    spec = (migration or {}).get("spec")
    named = spec.get("priority") if isinstance(spec, Mapping) else None
    return PRIORITIES.get(named, DEFAULT) if isinstance(named, str) else DEFAULT


def priority_name(priority: int) -> str:
    """The spec.priority a queue priority comes from ("default" for DEFAULT)."""
    return next((name for name, value in PRIORITIES.items() if value == priority), "default")


def scarce_room_order(priority: int, created: str, name: str) -> tuple[int, str, str]:
    """The sort key handing scarce room out in KubeVirt's order: higher priority first, then the
    migration created first (creationTimestamp, the API server's), then by name."""
    return (-priority, created, name)


PRIORITY_QUEUE_SINCE: Final = (1, 7)
"""KubeVirt v1.7 registers the MigrationPriorityQueue gate (Alpha; Beta in v1.8)."""
PRIORITY_QUEUE_GA: Final = (1, 9)
"""From v1.9 the gate is GA: always on."""
PRIORITY_QUEUE_GATE: Final = "MigrationPriorityQueue"


def evacuation_priority(
    version: KubeVirtVersion, enabled: Collection[str], disabled: Collection[str] = ()
) -> str:
    """The spec.priority KubeVirt's evacuation controller gives a drain's migration:
    system-critical with the priority queue on (GA from v1.9; from v1.7 while the CR's
    featureGates lists it, and in v1.8 not also disabledFeatureGates), else none ("default").
    (A descheduler's eviction gets system-maintenance; a drain is not one.)"""
    if version.at_least(*PRIORITY_QUEUE_GA):
        return SYSTEM_CRITICAL
    listed = version.at_least(*PRIORITY_QUEUE_SINCE) and PRIORITY_QUEUE_GATE in enabled
    return SYSTEM_CRITICAL if listed else "default"
