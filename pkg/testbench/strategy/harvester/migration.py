"""Harvester v1.9's migration controllers: the VMIM handler that scales quotas, the VMI handler.

Ports `pkg/controller/master/migration/vmim_controller.go` (OnVmimChanged and everything it calls)
and `vmi_controller.go` (OnVmiChanged, resetHarvesterMigrationStateInVMI). The VMIM handler is the
first of Harvester's two ResourceQuota writers: it only edits annotations (the VM's UID key, the
compensation, the resync flag); the ResourceQuota handler (`resourcequota.py`) turns them into
spec.hard.

By VMIM phase:

- "" (unset): VMI annotations migrationUID/migrationState = "Pending migration" (or "Aborting
  migration"). No scaling yet.
- Pending: the same annotation, then `scale_resource_quota` (add the VM's UID key once, with the
  share computed now, and the resync flag), then `compensate_pending_migration` (only when KubeVirt
  flagged the VMIM migrationRejectedByResourceQuota=True: wait, by re-queueing the VMIM after 1 s,
  until the key is in the cached quota and the flag is back to "false", then write a memory
  compensation).
- Scheduling .. Running: the annotation says "Migrating" (or "Aborting migration").
- Succeeded or Failed: `restore_resource_quota` (remove the VM's keys and any compensation, set
  the flag), then clear the VMI's migration annotations and touch the VM, every time the finished
  VMIM is processed. The room goes at once, while the source pod (or a failed migration's target
  pod) may still count against the quota for many seconds.
- Any other phase: nothing.

A VMIM whose VMI is gone is ignored (early return), so whatever key it added stays forever.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

from ....generic import errors
from ....generic.meta import metadata, status
from ....generic.resource import Object
from ....util.annotations import (
    ANNOTATION_MIGRATION_STATE,
    ANNOTATION_MIGRATION_UID,
    ANNOTATION_TIMESTAMP,
    CATTLE_ANNOTATION_RESOURCE_QUOTA,
    LABEL_DEFAULT_RESOURCE_QUOTA,
    MIGRATION_STATE_ABORTING,
    MIGRATION_STATE_MIGRATING,
    MIGRATION_STATE_PENDING,
    TRUE,
)
from ....util.quantity import Quantity
from . import rqutils
from .calculator import (
    additional_guest_memory_overhead_ratio,
    calculate_compensation_resource_quota_with_vmi,
    calculate_scale_resource_quota_with_vmi,
    vmi_limits,
)
from .cluster import RATIO_SETTING, HarvesterCluster

__all__ = [
    "ANNOTATION_MIGRATION_TARGET",
    "COMPENSATION_RETRY_SECONDS",
    "MigrationHandler",
    "NamespaceNotFound",
    "default_resource_quotas",
    "is_abort_request",
    "migration_phase",
]

log = logging.getLogger(__name__)

ANNOTATION_MIGRATION_TARGET: Final = "harvesterhci.io/migrationTargetNodeName"

PHASE_UNSET: Final = ""
PHASE_PENDING: Final = "Pending"
PHASES_MIGRATING: Final = frozenset(
    {"Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running"}
)
PHASE_SUCCEEDED: Final = "Succeeded"
PHASE_FAILED: Final = "Failed"
PHASES_FINISHED: Final = frozenset({PHASE_SUCCEEDED, PHASE_FAILED})

CONDITION_ABORT_REQUESTED: Final = "migrationAbortRequested"
CONDITION_REJECTED_BY_QUOTA: Final = "migrationRejectedByResourceQuota"
LABEL_MIGRATION_JOB: Final = "kubevirt.io/migrationJobUID"
ABORT_SUCCEEDED: Final = "Succeeded"

COMPENSATION_RETRY_SECONDS: Final = 1.0
"""`EnqueueAfter(..., 1*time.Second)` while waiting for the scale-up before compensating."""


class NamespaceNotFound(LookupError):
    """The namespace cache has no such namespace (Harvester returns the cache's NotFound error,
    so the key is retried with backoff)."""


# --- small readers -------------------------------------------------------------------------------


def _name(obj: Mapping[str, Any]) -> str:
    return str(metadata(obj).get("name") or "")


def _namespace(obj: Mapping[str, Any]) -> str:
    return str(metadata(obj).get("namespace") or "")


def _uid(obj: Mapping[str, Any]) -> str:
    return str(metadata(obj).get("uid") or "")


def migration_phase(vmim: Mapping[str, Any]) -> str:
    return str(status(vmim).get("phase") or PHASE_UNSET)


def is_abort_request(vmim: Mapping[str, Any]) -> bool:
    """`isAbortRequest`: any condition migrationAbortRequested with status "True"."""
    return any(
        isinstance(c, Mapping)
        and c.get("type") == CONDITION_ABORT_REQUESTED
        and c.get("status") == "True"
        for c in status(vmim).get("conditions") or []
    )


def default_resource_quotas(quotas: list[Object]) -> list[Object]:
    """`rqCache.List(ns, default-resource-quota=true)`; Harvester then uses the first one."""
    return [
        q
        for q in quotas
        if (metadata(q).get("labels") or {}).get(LABEL_DEFAULT_RESOURCE_QUOTA) == TRUE
    ]


def rfc3339(moment: datetime.datetime) -> str:
    """Go's `time.Now().Format(time.RFC3339)` for a UTC clock: seconds, "Z"."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class MigrationHandler:
    """`migration.Handler`: OnVmimChanged and OnVmiChanged over a HarvesterCluster."""

    def __init__(self, cluster: HarvesterCluster, *, compensation: bool = True) -> None:
        self.cluster = cluster
        self.compensation = compensation

    # OnVmimChanged --------------------------------------------------------------------------------

    async def on_vmim_changed(self, _key: str, vmim: Object | None) -> Object | None:
        if vmim is None:
            return None
        vmi = self.cluster.vmi(_namespace(vmim), str((vmim.get("spec") or {}).get("vmiName")))
        if vmi is None:
            # "the vmim might be a leftover object when its parent vmi object was deleted": the
            # key this migration added (if any) is never removed.
            return vmim
        abort = is_abort_request(vmim)
        phase = migration_phase(vmim)
        uid = _uid(vmim)
        log.debug(
            "syncing vmim %s/%s phase %r abort %s", _namespace(vmim), _name(vmim), phase, abort
        )
        if phase == PHASE_UNSET:
            state = MIGRATION_STATE_ABORTING if abort else MIGRATION_STATE_PENDING
            await self.set_vmi_migration_uid_annotation(vmi, uid, state)
        elif phase == PHASE_PENDING:
            if abort:
                await self.set_vmi_migration_uid_annotation(vmi, uid, MIGRATION_STATE_ABORTING)
            else:
                await self.handle_pending_migration(vmi, vmim)
        elif phase in PHASES_MIGRATING:
            state = MIGRATION_STATE_ABORTING if abort else MIGRATION_STATE_MIGRATING
            await self.set_vmi_migration_uid_annotation(vmi, uid, state)
        elif phase in PHASES_FINISHED:
            await self.handle_finished_migration(vmi, vmim)
        return vmim

    async def handle_pending_migration(self, vmi: Object, vmim: Object) -> None:
        await self.set_vmi_migration_uid_annotation(vmi, _uid(vmim), MIGRATION_STATE_PENDING)
        await self.scale_resource_quota(vmi)
        if self.compensation:
            await self.compensate_pending_migration(vmim, vmi)

    async def handle_finished_migration(self, vmi: Object, vmim: Object) -> None:
        await self.restore_resource_quota(vmim, vmi)
        await self.reset_migration_state_and_sync_vm(vmi)

    async def set_vmi_migration_uid_annotation(self, vmi: Object, uid: str, state: str) -> None:
        """Writes the VMI's migrationUID/migrationState (a full update) and touches the VM, unless
        both already hold these values."""
        annotations = rqutils.annotations_of(vmi)
        if (
            annotations.get(ANNOTATION_MIGRATION_UID, "") == uid
            and annotations.get(ANNOTATION_MIGRATION_STATE, "") == state
        ):
            return
        to_update = copy.deepcopy(vmi)
        written = to_update.setdefault("metadata", {}).get("annotations")
        if not isinstance(written, dict):
            written = to_update["metadata"]["annotations"] = {}
        if uid:
            written[ANNOTATION_MIGRATION_UID] = uid
            written[ANNOTATION_MIGRATION_STATE] = state
        else:
            written.pop(ANNOTATION_MIGRATION_UID, None)
            written.pop(ANNOTATION_MIGRATION_STATE, None)
        await self.cluster.update_vmi(to_update)
        await self.sync_vm(vmi)

    async def sync_vm(self, vmi: Object) -> None:
        """`syncVM`: a new harvesterhci.io/timestamp on the VM (a full update), so Harvester's UI
        refreshes the VM's actions; nothing for a VMI without a VM."""
        vm = self.cluster.vm(_namespace(vmi), _name(vmi))
        if vm is None:
            return
        to_update = copy.deepcopy(vm)
        annotations = to_update.setdefault("metadata", {}).get("annotations")
        if not isinstance(annotations, dict):
            annotations = to_update["metadata"]["annotations"] = {}
        annotations[ANNOTATION_TIMESTAMP] = rfc3339(self.cluster.now())
        await self.cluster.update_vm(to_update)

    # Scaling up -----------------------------------------------------------------------------------

    def namespace_managed_by_resource_quota(self, namespace: str) -> bool:
        """`isNamespaceManagedByResourceQuota`. Go asks `Spec.Hard.Cpu() != nil ||
        Spec.Hard.Memory() != nil`, but those accessors never return nil: any ResourceQuota in
        the namespace, whatever it limits, makes it "managed"."""
        return bool(self.cluster.resource_quotas(namespace))

    def _ratio(self) -> str:
        return additional_guest_memory_overhead_ratio(self.cluster.setting(RATIO_SETTING))

    def _namespace_annotation(self, namespace: str, caller: str) -> str:
        found = self.cluster.namespace(namespace)
        if found is None:
            raise NamespaceNotFound(f"{caller}: failed to get vmi's namespace object {namespace}")
        return rqutils.annotations_of(found).get(CATTLE_ANNOTATION_RESOURCE_QUOTA, "")

    def _first_default_quota(self, namespace: str) -> Object | None:
        """The namespace's first default ResourceQuota (Go's ``rqs[0]``), or None."""
        quotas = default_resource_quotas(self.cluster.resource_quotas(namespace))
        return quotas[0] if quotas else None

    def _managed_quota(
        self, namespace: str, caller: str, managed: Callable[[Object, str], bool]
    ) -> Object | None:
        """The namespace's first default ResourceQuota if auto-scaling is on for it and
        ``managed(rq, the namespace's resource-quota annotation)`` holds, else None; in Go's
        order, so a namespace that is gone raises NamespaceNotFound (naming ``caller``) only when
        there is such a quota."""
        rq = self._first_default_quota(namespace)
        if rq is None or rqutils.is_auto_scaling_disabled(rq):
            return None
        return rq if managed(rq, self._namespace_annotation(namespace, caller)) else None

    async def scale_resource_quota(self, vmi: Object) -> None:
        if not self.namespace_managed_by_resource_quota(_namespace(vmi)):
            return
        await self.scale_resource_quota_with_vmi(vmi)

    async def scale_resource_quota_with_vmi(self, vmi: Object) -> None:
        """Adds the VM's UID key (its share now) and the resync flag to the first default quota,
        once: a quota that already has a key of this VM is left alone."""
        namespace = _namespace(vmi)
        limits = vmi_limits(vmi)
        if _is_zero(limits, "memory") and _is_zero(limits, "cpu"):
            log.warning(
                "scaleResourceQuotaWithVMI: no cpu or memory limits on vmi %s/%s",
                namespace,
                _name(vmi),
            )
            return
        rq = self._managed_quota(
            namespace,
            "scaleResourceQuotaWithVMI",
            rqutils.is_resource_quota_managed_by_namespace_annotation,
        )
        if rq is None:
            return
        to_update = copy.deepcopy(rq)
        if rqutils.contains_migrating_vm(to_update, _name(vmi), _uid(vmi)):
            return
        needed, share = calculate_scale_resource_quota_with_vmi(
            to_update, vmi, self._ratio(), self.cluster.kubevirt_version()
        )
        if not needed or share is None:
            return
        rqutils.add_migrating_vm(to_update, _name(vmi), _uid(vmi), share)
        rqutils.set_migrating_scaling_resync_needed(to_update)
        await self.cluster.update_resource_quota(to_update)

    # Compensation ---------------------------------------------------------------------------------

    async def compensate_pending_migration(self, vmim: Object, vmi: Object) -> None:
        """Acts on the first migrationRejectedByResourceQuota condition only, and only if True."""
        for condition in status(vmim).get("conditions") or []:
            if not isinstance(condition, Mapping):
                continue
            if condition.get("type") != CONDITION_REJECTED_BY_QUOTA:
                continue
            if condition.get("status") != "True":
                return
            await self.compensate_resource_quota_base(vmim, vmi)
            return

    async def compensate_resource_quota_base(self, vmim: Object, vmi: Object) -> None:
        namespace = _namespace(vmi)
        if _is_zero(vmi_limits(vmi), "memory"):
            log.warning(
                "compensateResourceQuotaBase: vmim %s/%s is blocked by quota, but vmi %s has no "
                "memory limits (CPU, maybe)",
                _namespace(vmim),
                _name(vmim),
                _name(vmi),
            )
            return
        rq = self._managed_quota(
            namespace,
            "compensateResourceQuotaBase",
            rqutils.is_resource_quota_managed_by_namespace_annotation_with_memory_limits,
        )
        if rq is None:
            return
        if not rqutils.contains_migrating_vm(rq, _name(vmi), _uid(vmi)):
            # Wait for the scale-up to reach the cache.
            self.cluster.enqueue_migration_after(
                _namespace(vmim), _name(vmim), COMPENSATION_RETRY_SECONDS
            )
            return
        if rqutils.is_migrating_scaling_resync_needed(rq):
            # Wait for the ResourceQuota handler to apply it to spec.hard (the ping-pong flag).
            self.cluster.enqueue_migration_after(
                _namespace(vmim), _name(vmim), COMPENSATION_RETRY_SECONDS
            )
            return
        to_update = copy.deepcopy(rq)
        needed, compensation = calculate_compensation_resource_quota_with_vmi(
            to_update, vmi, self._ratio(), self.cluster.kubevirt_version()
        )
        if not needed or compensation is None:
            return
        log.info(
            "compensateResourceQuotaBase: compensate resource quota %s in namespace %s for vm %s: %s",
            _name(rq),
            namespace,
            _name(vmi),
            {k: str(v) for k, v in compensation.items()},
        )
        rqutils.add_migrating_compensation(to_update, compensation)
        rqutils.set_migrating_scaling_resync_needed(to_update)
        await self.cluster.update_resource_quota(to_update)

    # Restoring ------------------------------------------------------------------------------------

    async def restore_resource_quota(self, vmim: Object, vmi: Object) -> None:
        if migration_phase(vmim) not in PHASES_FINISHED:
            return
        if not self.namespace_managed_by_resource_quota(_namespace(vmi)):
            return
        await self.restore_resource_quota_with_vmi(vmi)

    async def restore_resource_quota_with_vmi(self, vmi: Object) -> None:
        """Removes the VM's keys from the first default quota and, if there was one, also the
        compensation ("no matter for which vmim") and sets the resync flag. The skip annotation is
        not consulted here, so that scaling added before it was set is still removed."""
        rq = self._first_default_quota(_namespace(vmi))
        if rq is None:
            return
        to_update = copy.deepcopy(rq)
        if rqutils.delete_migrating_vm(to_update, _name(vmi), _uid(vmi)):
            rqutils.delete_migrating_compensation(to_update)
            rqutils.set_migrating_scaling_resync_needed(to_update)
            await self.cluster.update_resource_quota(to_update)

    async def reset_migration_state_and_sync_vm(self, vmi: Object) -> None:
        """`resetHarvesterMigrationStateInVmiAndSyncVM`: the VM is touched even when the VMI had
        nothing to reset."""
        await self.reset_migration_state_in_vmi(vmi)
        await self.sync_vm(vmi)

    async def reset_migration_state_in_vmi(self, vmi: Object) -> None:
        """Drops migrationUID, migrationState and migrationTargetNodeName; no write if none was
        there."""
        to_update = copy.deepcopy(vmi)
        annotations = (to_update.get("metadata") or {}).get("annotations")
        if not isinstance(annotations, dict):
            return
        before = len(annotations)
        for key in (
            ANNOTATION_MIGRATION_UID,
            ANNOTATION_MIGRATION_STATE,
            ANNOTATION_MIGRATION_TARGET,
        ):
            annotations.pop(key, None)
        if len(annotations) == before:
            return
        await self.cluster.update_vmi(to_update)

    # OnVmiChanged ---------------------------------------------------------------------------------

    async def on_vmi_changed(self, _key: str, vmi: Object | None) -> Object | None:
        """Resets the VMI's migration annotations once KubeVirt reports its migration completed,
        and deletes the first pod labelled with the migration's UID after a successful abort
        (kubevirt/kubevirt#5373: the target pod of an aborted migration lingers)."""
        if vmi is None or metadata(vmi).get("deletionTimestamp"):
            return vmi
        annotations = metadata(vmi).get("annotations")
        state = status(vmi).get("migrationState")
        if annotations is None or not isinstance(state, Mapping):
            return vmi
        migration_uid = str(state.get("migrationUid") or "")
        completed = state.get("completed") is True
        if completed and rqutils.annotations_of(vmi).get(ANNOTATION_MIGRATION_UID, "") == (
            migration_uid
        ):
            await self.reset_migration_state_and_sync_vm(vmi)
        if completed and state.get("abortStatus") == ABORT_SUCCEEDED:
            for pod in self.cluster.pods(_namespace(vmi)):
                labels = metadata(pod).get("labels") or {}
                if LABEL_MIGRATION_JOB in labels and labels[LABEL_MIGRATION_JOB] == migration_uid:
                    with contextlib.suppress(errors.NotFound):
                        await self.cluster.delete_pod(_namespace(vmi), _name(pod))
                    break
        return vmi


def _is_zero(values: Mapping[str, Quantity], name: str) -> bool:
    value = values.get(name)
    return value is None or value.is_zero()
