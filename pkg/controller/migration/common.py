"""What the VMIM and VMI controllers share: Harvester's migration annotations on a VMI, and the
touch of its VM that makes Harvester's UI refresh.

Kept from Harvester (pkg/controller/master/migration), because its UI and other controllers read
them: the VMI annotations ``harvesterhci.io/migrationUID`` and ``harvesterhci.io/migrationState``
("Pending migration", "Migrating", "Aborting migration"), cleared when the migration ends, and the
VM's ``harvesterhci.io/timestamp``. Changed: these controllers never write a ResourceQuota (the
namespace reconcile in controller/resourcequota is the single writer).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...apis.kubevirt import VIRTUAL_MACHINE_INSTANCES, VIRTUAL_MACHINES
from ...config.management import Management
from ...generic import errors
from ...generic.meta import annotations_of, name, namespace
from ...generic.resource import Object
from ...util.annotations import (
    ANNOTATION_MIGRATION_STATE,
    ANNOTATION_MIGRATION_UID,
    ANNOTATION_TIMESTAMP,
)

ANNOTATION_MIGRATION_TARGET = "harvesterhci.io/migrationTargetNodeName"
MIGRATION_ANNOTATIONS = (
    ANNOTATION_MIGRATION_UID,
    ANNOTATION_MIGRATION_STATE,
    ANNOTATION_MIGRATION_TARGET,
)
"""Every annotation a migration leaves on its VMI; all are removed together when it ends."""


def annotation_changes(current: Mapping[str, str], wanted: Mapping[str, Any]) -> dict[str, Any]:
    """The part of `wanted` (None = remove) that differs from `current`: a no-op patch is never
    sent, so re-processing a VMIM costs no write."""
    return {
        key: value
        for key, value in wanted.items()
        if current.get(key) != value and not (value is None and key not in current)
    }


async def set_vmi_annotations(management: Management, vmi: Object, changes: dict[str, Any]) -> None:
    """Patches the VMI's annotations if they differ, then touches its VM (Harvester's syncVM).

    A VMI or VM that went away since the cache saw it is not an error: there is nothing left to
    annotate. Other API errors propagate, so the controller re-queues the key with backoff.
    """
    wanted = annotation_changes(annotations_of(vmi), changes)
    if not wanted:
        return
    vmi_name, vmi_namespace = name(vmi), namespace(vmi)
    try:
        await management.client.patch(
            VIRTUAL_MACHINE_INSTANCES,
            vmi_name,
            {"metadata": {"annotations": wanted}},
            vmi_namespace,
        )
    except errors.NotFound:
        return
    await touch_vm(management, vmi_namespace, vmi_name)


async def touch_vm(management: Management, vm_namespace: str, vm_name: str) -> None:
    """Sets the VM's ``harvesterhci.io/timestamp`` to now (a VMI without a VM is skipped)."""
    stamp = management.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        await management.client.patch(
            VIRTUAL_MACHINES,
            vm_name,
            {"metadata": {"annotations": {ANNOTATION_TIMESTAMP: stamp}}},
            vm_namespace,
        )
    except errors.NotFound:
        return
