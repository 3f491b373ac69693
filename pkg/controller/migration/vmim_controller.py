"""The VMIM controller (Harvester's vmim_controller.go): mirrors a migration's state onto its VMI.

While a VirtualMachineInstanceMigration is pending, running or aborting, its VMI carries
``harvesterhci.io/migrationUID`` and ``harvesterhci.io/migrationState``; when it finishes, the
annotations are removed, but only if they are its own: re-processing an old Succeeded VMIM (at
start-up, say) never wipes the state of a newer migration of the same VM (failure scenario 16).

Unlike Harvester's, this controller writes no ResourceQuota: the room a migration needs is the
namespace reconcile's business (controller/resourcequota).
"""

from __future__ import annotations

from ...apis.kubevirt import (
    CONDITION_ABORT_REQUESTED,
    FINAL_PHASES,
    PHASE_PENDING,
    PHASE_WAITING_FOR_SYNC,
)
from ...config.management import Management
from ...generic.meta import annotations_of, has_condition, metadata, namespace, spec, status
from ...generic.resource import Object
from ...util.annotations import (
    ANNOTATION_MIGRATION_STATE,
    ANNOTATION_MIGRATION_UID,
    MIGRATION_STATE_ABORTING,
    MIGRATION_STATE_MIGRATING,
    MIGRATION_STATE_PENDING,
)
from .common import MIGRATION_ANNOTATIONS, VmiAnnotator

HANDLER = "migration-annotations"


WAITING_PHASES = frozenset({"", PHASE_PENDING, PHASE_WAITING_FOR_SYNC})
"""Phases in which nothing of the migration has started: Harvester's "Pending migration".

Harvester maps unset and Pending there, and Scheduling to Running to "Migrating"; it knows
neither phase of a decentralized migration (KubeVirt v1.6+) and leaves the annotations as they
were. We give them the state of the same meaning, so Harvester's UI shows such a migration too:
`WaitingForSync` (this side waits for its peer's migration object; no pod exists yet) is
pending, `Synchronizing` (the two sides exchange the migration's state) is migrating."""


def migration_state(migration: Object) -> str | None:
    """The Harvester state a VMIM's phase maps to (None once it has finished): aborting while
    an abort is requested (Harvester's `isAbortRequest`), pending in WAITING_PHASES, migrating
    in any other phase."""
    phase = str(status(migration).get("phase") or "")
    if phase in FINAL_PHASES:
        return None
    if has_condition(migration, CONDITION_ABORT_REQUESTED):
        return MIGRATION_STATE_ABORTING
    if phase in WAITING_PHASES:
        return MIGRATION_STATE_PENDING
    return MIGRATION_STATE_MIGRATING


def completed_on(vmi: Object, migration_uid: str) -> bool:
    """Whether the VMI reports this migration completed (its migrationState, which the VMI
    controller acts on). The VMIM cache can lag behind the VMI cache: a late "Running" event of
    a migration the VMI already shows completed must not put back the annotations the VMI
    controller has just removed (measured: 7.5 VMI patches per migration, in a ping-pong
    between the two controllers, instead of 3)."""
    state = status(vmi).get("migrationState")
    return (
        isinstance(state, dict)
        and state.get("migrationUid") == migration_uid
        and bool(state.get("completed"))
    )


class VmimController:
    """OnChange of VirtualMachineInstanceMigrations, registered on a Management."""

    def __init__(self, management: Management, annotator: VmiAnnotator | None = None) -> None:
        self.management = management
        self.annotator = annotator or VmiAnnotator(management)
        self.vmims = management.kubevirt.virtual_machine_instance_migrations()
        self.vmis = management.kubevirt.virtual_machine_instances()

    def register(self) -> None:
        self.vmims.on_change(HANDLER, self.on_changed)

    async def on_changed(self, key: str, migration: Object | None) -> Object | None:
        """Sets or clears the VMI's migration annotations for this VMIM (idempotent): Harvester's
        `OnVmimChanged` without its quota writes, which a VMIM's change queues for the namespace's
        reconcile instead (PlanInputs._migration_changed)."""
        if migration is None:
            return None
        vmi = self.vmis.cached(namespace(migration), str(spec(migration).get("vmiName")))
        if vmi is None:
            return migration  # a leftover VMIM of a deleted VMI
        uid = str(metadata(migration).get("uid"))
        state = None if completed_on(vmi, uid) else migration_state(migration)
        if state is not None:
            await self.annotator.set(
                vmi,
                {ANNOTATION_MIGRATION_UID: uid, ANNOTATION_MIGRATION_STATE: state},
            )
        elif annotations_of(vmi).get(ANNOTATION_MIGRATION_UID) == uid:
            await self.annotator.set(vmi, dict.fromkeys(MIGRATION_ANNOTATIONS))
        return migration


def register(management: Management, annotator: VmiAnnotator | None = None) -> VmimController:
    """Registers the controller (Harvester's `Register` in its migration register.go); `annotator`
    is shared with the other controller writing VMIs."""
    controller = VmimController(management, annotator)
    controller.register()
    return controller
