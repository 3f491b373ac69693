"""The VMI controller (Harvester's vmi_controller.go): cleans up after a finished migration.

When a VMI's ``status.migrationState`` says its migration completed, the migration annotations
it still carries for that migration are removed (only with `run --harvester-annotations`: they
are ours to clear only if we wrote them); when the migration was aborted, the target pod it
left behind is deleted (kubevirt/kubevirt#5373), once: an expectations cache remembers the deletes
this process issued until the pod informer shows them, so a resync or a second VMI update in
between issues no second DELETE.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Final

from cachetools import TTLCache

from ...apis.kubevirt import LABEL_MIGRATION_JOB, LABEL_VM_NAME
from ...config.management import Management
from ...generic import errors
from ...generic.logformat import migration_fields
from ...generic.meta import annotations_of, is_deleting, labels, name, namespace, status
from ...generic.resource import PODS, Object
from ...util.annotations import ANNOTATION_MIGRATION_UID
from ...util.podusage import strip_pod_to_quota_fields
from .common import MIGRATION_ANNOTATIONS, VmiAnnotator

log = logging.getLogger(__name__)

HANDLER = "migration-target-cleanup"
ABORT_SUCCEEDED: Final = "Succeeded"
DELETE_EXPECTATION_TTL: Final = 300.0
"""How long a delete we issued is trusted to be under way (client-go's ExpectationsTimeout is
5 minutes): after it, a pod still listed is deleted again."""
DELETE_EXPECTATIONS_MAX: Final = 10_000


class VmiController:
    """OnChange of VirtualMachineInstances, registered on a Management.

    `pending_deletes` is read and written only from the event loop's controller workers; it is
    keyed by pod uid, so a pod re-created under the same name is a new expectation.
    """

    def __init__(self, management: Management, annotator: VmiAnnotator | None = None) -> None:
        """`annotator`: clears Harvester's migration annotations a finished migration left
        (None: the annotations are not ours to clear, run --harvester-annotations is off)."""
        self.management = management
        self.annotator = annotator
        self.vmis = management.kubevirt.virtual_machine_instances()
        # Shared with the quota reconcile, which asks first: the same transform either way.
        self.pods = management.informers.informer(PODS, transform=strip_pod_to_quota_fields)
        self.pending_deletes: TTLCache[str, bool] = TTLCache(
            maxsize=DELETE_EXPECTATIONS_MAX,
            ttl=DELETE_EXPECTATION_TTL,
            timer=management.clock.monotonic,
        )

    def register(self) -> None:
        """Runs `on_changed` on the VMIs' changes; an update of a VMI whose migration state is
        not completed queues nothing (most of a migration's VMI updates)."""
        self.vmis.on_change(
            HANDLER, self.on_changed, updates_wanted=lambda vmi: completed_state(vmi) is not None
        )

    async def on_changed(self, key: str, vmi: Object | None) -> Object | None:
        """Clears a completed migration's annotations and deletes an aborted one's target pod:
        Harvester's `OnVmiChanged`."""
        if vmi is None or is_deleting(vmi):
            return vmi
        state = completed_state(vmi)
        if state is None:
            return vmi
        if self.annotator is not None and annotations_of(vmi).get(
            ANNOTATION_MIGRATION_UID
        ) == state.get("migrationUid"):
            await self.annotator.set(vmi, dict.fromkeys(MIGRATION_ANNOTATIONS))
        if state.get("abortStatus") == ABORT_SUCCEEDED and state.get("migrationUid"):
            await self.delete_leftover_target(
                namespace(vmi), str(state["migrationUid"]), vm=name(vmi)
            )
        return vmi

    def leftover_targets(self, pod_namespace: str, migration_uid: str) -> list[Object]:
        """The aborted migration's target pods that still need a DELETE from us."""
        return [
            pod
            for pod in self.pods.store.by_index("namespace", pod_namespace)
            if labels(pod).get(LABEL_MIGRATION_JOB) == migration_uid
            and not is_deleting(pod)
            and str((pod.get("metadata") or {}).get("uid")) not in self.pending_deletes
        ]

    async def delete_leftover_target(
        self, pod_namespace: str, migration_uid: str, *, vm: str | None = None
    ) -> None:
        """Deletes the target pods the aborted migration `migration_uid` left in
        `pod_namespace`; each deletion is logged with the namespace, the VM (`vm`, else the
        pod's vm.kubevirt.io/name label) and the migration's uid."""
        for pod in self.leftover_targets(pod_namespace, migration_uid):
            pod_name = name(pod)
            log.info(
                "deleting target pod %s/%s left by aborted migration %s",
                pod_namespace,
                pod_name,
                migration_uid,
                extra=migration_fields(
                    pod_namespace,
                    vm or labels(pod).get(LABEL_VM_NAME),
                    migration_uid=migration_uid,
                ),
            )
            with contextlib.suppress(errors.NotFound):
                await self.management.client.delete(PODS, pod_name, pod_namespace)
            self.pending_deletes[str((pod.get("metadata") or {}).get("uid"))] = True


def completed_state(vmi: Object) -> dict[str, Any] | None:
    """The VMI's status.migrationState when it says its migration completed, else None (also
    for a missing or malformed one)."""
    state = status(vmi).get("migrationState")
    if not isinstance(state, dict) or not state.get("completed"):
        return None
    return state


def register(management: Management, annotator: VmiAnnotator | None = None) -> VmiController:
    """Registers the controller (Harvester's `Register` in its migration register.go); `annotator`
    is shared with the other controller writing VMIs."""
    controller = VmiController(management, annotator)
    controller.register()
    return controller
