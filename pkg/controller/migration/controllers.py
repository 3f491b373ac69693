"""Harvester's migration bookkeeping on VMIs and VMs, without its quota writes.

Kept from Harvester (pkg/controller/master/migration), because its UI and other controllers read them:
- the VMI annotations ``harvesterhci.io/migrationUID`` and ``harvesterhci.io/migrationState``
  ("Pending migration", "Migrating", "Aborting migration"), cleared when the migration ends;
- a touch of the VM's ``harvesterhci.io/timestamp`` on each change, so the UI refreshes its actions;
- deleting the target pod an aborted migration leaves behind (kubevirt/kubevirt#5373).

Changed: these controllers never write a ResourceQuota (the namespace reconcile is the single
writer), and a finished VMIM clears the VMI's annotations only if they are its own: re-processing
an old Succeeded VMIM (at start-up, say) no longer wipes the state of a newer migration of the
same VM (failure scenario 16).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from ...config.management import Management
from ...generic import errors
from ...generic.resource import PODS, VIRTUAL_MACHINE_INSTANCES, VIRTUAL_MACHINES, Object
from ...util.annotations import (
    ANNOTATION_MIGRATION_STATE,
    ANNOTATION_MIGRATION_UID,
    ANNOTATION_TIMESTAMP,
    MIGRATION_STATE_ABORTING,
    MIGRATION_STATE_MIGRATING,
    MIGRATION_STATE_PENDING,
)
from .rooms import (
    CONDITION_ABORT_REQUESTED,
    FINAL_PHASES,
    LABEL_MIGRATION_JOB,
    PHASE_PENDING,
    has_condition,
    metadata,
    status,
)

log = logging.getLogger(__name__)

ANNOTATION_MIGRATION_TARGET = "harvesterhci.io/migrationTargetNodeName"
MIGRATION_ANNOTATIONS = (
    ANNOTATION_MIGRATION_UID,
    ANNOTATION_MIGRATION_STATE,
    ANNOTATION_MIGRATION_TARGET,
)
ABORT_SUCCEEDED = "Succeeded"


def migration_state(migration: Object) -> str | None:
    """The Harvester state a VMIM's phase maps to (None once it has finished)."""
    phase = str(status(migration).get("phase") or "")
    if phase in FINAL_PHASES:
        return None
    if has_condition(migration, CONDITION_ABORT_REQUESTED):
        return MIGRATION_STATE_ABORTING
    if phase in ("", PHASE_PENDING):
        return MIGRATION_STATE_PENDING
    return MIGRATION_STATE_MIGRATING


class MigrationBookkeeping:
    """The VMIM and VMI handlers, registered on a Management."""

    def __init__(self, management: Management) -> None:
        self.management = management
        self.client = management.client
        self.vmims = management.controllers.virtual_machine_instance_migrations()
        self.vmis = management.controllers.virtual_machine_instances()
        self.pods = management.informers.informer(PODS)

    def register(self) -> None:
        self.vmims.on_change("migration-annotations", self.on_migration_changed)
        self.vmis.on_change("migration-target-cleanup", self.on_vmi_changed)

    async def on_migration_changed(self, key: str, migration: Object | None) -> Object | None:
        if migration is None:
            return None
        namespace = str(metadata(migration).get("namespace"))
        vmi = self.vmis.cached(namespace, str((migration.get("spec") or {}).get("vmiName")))
        if vmi is None:
            return migration  # a leftover VMIM of a deleted VMI
        uid = str(metadata(migration).get("uid"))
        state = migration_state(migration)
        annotations = metadata(vmi).get("annotations") or {}
        if state is not None:
            await self._set_annotations(
                vmi, {ANNOTATION_MIGRATION_UID: uid, ANNOTATION_MIGRATION_STATE: state}
            )
        elif annotations.get(ANNOTATION_MIGRATION_UID) == uid:
            await self._set_annotations(vmi, dict.fromkeys(MIGRATION_ANNOTATIONS))
        return migration

    async def on_vmi_changed(self, key: str, vmi: Object | None) -> Object | None:
        if vmi is None or metadata(vmi).get("deletionTimestamp"):
            return vmi
        state = status(vmi).get("migrationState")
        if not isinstance(state, dict) or not state.get("completed"):
            return vmi
        annotations = metadata(vmi).get("annotations") or {}
        if annotations.get(ANNOTATION_MIGRATION_UID) == state.get("migrationUid"):
            await self._set_annotations(vmi, dict.fromkeys(MIGRATION_ANNOTATIONS))
        if state.get("abortStatus") == ABORT_SUCCEEDED and state.get("migrationUid"):
            await self._delete_leftover_target(vmi, str(state["migrationUid"]))
        return vmi

    async def _set_annotations(self, vmi: Object, changes: dict[str, Any]) -> None:
        """Patches the VMI's annotations if they differ, then touches its VM (Harvester's syncVM)."""
        current = metadata(vmi).get("annotations") or {}
        wanted = {
            k: v
            for k, v in changes.items()
            if current.get(k) != v and not (v is None and k not in current)
        }
        if not wanted:
            return
        name, namespace = str(metadata(vmi).get("name")), str(metadata(vmi).get("namespace"))
        try:
            await self.client.patch(
                VIRTUAL_MACHINE_INSTANCES, name, {"metadata": {"annotations": wanted}}, namespace
            )
        except errors.NotFound:
            return  # the VMI went away since the cache saw it: nothing to annotate
        await self._touch_vm(namespace, name)

    async def _touch_vm(self, namespace: str, name: str) -> None:
        stamp = self.management.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            await self.client.patch(
                VIRTUAL_MACHINES,
                name,
                {"metadata": {"annotations": {ANNOTATION_TIMESTAMP: stamp}}},
                namespace,
            )
        except errors.NotFound:
            return  # a VMI without a VM

    async def _delete_leftover_target(self, vmi: Object, migration_uid: str) -> None:
        namespace = str(metadata(vmi).get("namespace"))
        for pod in self.pods.store.by_index("namespace", namespace):
            if (metadata(pod).get("labels") or {}).get(LABEL_MIGRATION_JOB) != migration_uid:
                continue
            if metadata(pod).get("deletionTimestamp"):
                continue
            log.info(
                "deleting target pod %s/%s left by aborted migration %s",
                namespace,
                metadata(pod).get("name"),
                migration_uid,
            )
            with contextlib.suppress(errors.NotFound):
                await self.client.delete(PODS, str(metadata(pod).get("name")), namespace)
            return


def register(management: Management) -> MigrationBookkeeping:
    bookkeeping = MigrationBookkeeping(management)
    bookkeeping.register()
    return bookkeeping
