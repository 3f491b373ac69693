"""KubeVirt's kinds (kubevirt.io/v1) and the labels, conditions and phases the quota model reads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ..generic.controller import Controller, ControllerFactory
from ..generic.meta import status
from ..generic.resource import Resource

GROUP: Final = "kubevirt.io"

VIRTUAL_MACHINES: Final = Resource(GROUP, "v1", "virtualmachines", "VirtualMachine")
VIRTUAL_MACHINE_INSTANCES: Final = Resource(
    GROUP, "v1", "virtualmachineinstances", "VirtualMachineInstance"
)
VIRTUAL_MACHINE_INSTANCE_MIGRATIONS: Final = Resource(
    GROUP, "v1", "virtualmachineinstancemigrations", "VirtualMachineInstanceMigration"
)
KUBEVIRTS: Final = Resource(GROUP, "v1", "kubevirts", "KubeVirt")

LABEL_KUBEVIRT: Final = "kubevirt.io"
"""On launcher pods: ``virt-launcher``."""
LAUNCHER: Final = "virt-launcher"
HOTPLUG_DISK: Final = "hotplug-disk"
"""On hotplug attachment pods (virt-controller's, controlled by a launcher pod)."""
LABEL_CREATED_BY: Final = "kubevirt.io/created-by"
"""On launcher pods: the uid of the VMI they run."""
LABEL_MIGRATION_JOB: Final = "kubevirt.io/migrationJobUID"
"""On a migration's target pod: the uid of the VMIM that created it."""
LABEL_VM_NAME: Final = "vm.kubevirt.io/name"

CONDITION_REJECTED_BY_QUOTA: Final = "migrationRejectedByResourceQuota"
"""On a Pending VMIM whose target pod quota admission refused (kubevirt/kubevirt#9738)."""
CONDITION_ABORT_REQUESTED: Final = "migrationAbortRequested"

PHASE_SUCCEEDED: Final = "Succeeded"
PHASE_FAILED: Final = "Failed"
PHASE_PENDING: Final = "Pending"
PHASE_WAITING_FOR_SYNC: Final = "WaitingForSync"
"""A decentralized migration's side waiting for its peer (KubeVirt v1.6+)."""
FINAL_PHASES: Final = frozenset({PHASE_SUCCEEDED, PHASE_FAILED})


def is_finished(migration: Mapping[str, Any]) -> bool:
    """Whether a migration's status.phase (virt-controller's) is final. A phase that is not a
    string (a tenant may write a VMIM's status) is not final."""
    phase = status(migration).get("phase")
    return isinstance(phase, str) and phase in FINAL_PHASES


class KubeVirtControllers:
    """Typed access to KubeVirt's kinds on a controller factory (wrangler's generated style).

    Each call returns the factory's one shared controller for the kind: calling twice gives the
    same object, so handlers registered by different components share one queue and one cache.
    """

    def __init__(self, factory: ControllerFactory) -> None:
        self._factory = factory

    def virtual_machine_instances(self) -> Controller:
        """The one shared controller of virtual machine instances."""
        return self._factory.for_resource(VIRTUAL_MACHINE_INSTANCES)

    def virtual_machine_instance_migrations(self) -> Controller:
        """The one shared controller of virtual machine instance migrations."""
        return self._factory.for_resource(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS)

    def kubevirts(self) -> Controller:
        """The one shared controller of kubevirts."""
        return self._factory.for_resource(KUBEVIRTS)


LIVE_MIGRATABLE: Final = "LiveMigratable"
"""The VMI condition KubeVirt sets to False (with a reason) when a VMI cannot live-migrate."""
