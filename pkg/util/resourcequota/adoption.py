"""Beside Harvester's own controllers: adopting the quotas we manage (docs/design.md, "Beside
Harvester's own controllers").

No Harvester release can turn its migration and resourcequota controllers off, so on a Harvester
both run. Adoption is how we run beside them, chosen by measurement against Harvester v1.8.2's
own code (the closing numbers are in docs/design.md):

- Harvester's resourcequota controller, the one that sets spec.hard (to the Rancher base plus
  the rooms its annotations record), honours its own skip annotation
  (``harvesterhci.io/skipResourceQuotaAutoScaling: "true"``). An adopted quota carries it, with
  our marker ANNOTATION_ADOPTED beside it, from the first plan that manages it: that controller
  never writes an adopted quota again, so nothing raises twice and nothing lowers under a room.
- Harvester's migration controller ignores the skip annotation: while a migration is Pending it
  records the VMI's room under ``migratingUID-<vmi uid>``, and when the migration ends it
  deletes that key and the VM's name key. Its UID key of a migration still running is left
  where it is (stripping it only made it write it again), and it counts in no plan of ours.
- Without the marker the skip annotation is an administrator's opt-out, as before: never adopted.
  Beside Harvester (adoption on) its live UID keys stay there too: the quota is left to the
  administrator, and stripping them only made Harvester's migration controller write again.
- A controller started without adoption gives an adopted quota back once no migration holds
  room in it: both annotations go in the write that brings it to its base, so Harvester's
  resourcequota controller owns it again and finds nothing to add (given back while a room
  stood, that controller would add our room key to its own and raise twice). That is the
  uninstall procedure's first step (docs/operations.md, "On Harvester").
- A namespace whose raising is paused (its opt-out label, or ``run --paused``) keeps its quota
  adopted while adoption is on: its rooms are given back and nobody raises it, neither we nor
  Harvester's resourcequota controller. (Given back to Harvester while we still plan it, its
  raises and our plan's lowering would fight.) Only a controller without adoption hands quotas
  back; paused and without adoption (the uninstall's steps), it does so at once.
- Our marker without the skip annotation (someone removed or changed that) is stale: it goes,
  so that an administrator's later skip annotation is never taken for ours.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ...generic.meta import spec
from ...generic.resource import Object
from ..annotations import (
    ANNOTATION_ADOPTED,
    ANNOTATION_MIGRATING_UID_PREFIX,
    ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING,
    TRUE,
    MigrationAnnotations,
)
from ..launcher import VmiSource, as_view

ADOPTION_ANNOTATIONS = {ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING: TRUE, ANNOTATION_ADOPTED: TRUE}


@dataclass(frozen=True)
class AdoptionChanges:
    """What adoption adds to a plan's annotation changes."""

    wanted: dict[str, str] = field(default_factory=dict)
    """Annotations the quota must carry."""
    keep: frozenset[str] = frozenset()
    """Harvester's keys a plan must leave where they are (its live UID keys)."""
    remove: tuple[str, ...] = ()
    """Annotations to remove (an adopted quota given back)."""


def adoption_changes(
    *,
    adopt: bool,
    holds_room: bool,
    recorded: MigrationAnnotations,
    current: Mapping[str, str],
    migrations: Iterable[Object],
    vmis: Mapping[str, VmiSource],
) -> AdoptionChanges:
    """The annotation changes adoption asks of a managed quota.

    ``adopt``: the controller adopts (its option); ``holds_room``: the plan holds room for a
    migration (never when raising is paused here: its rooms are given back). An administrator's skip annotation
    (`recorded.skip_auto_scaling`) is never adopted."""
    # Paused with adoption on, the first branch keeps it adopted; paused without (the uninstall
    # steps), no room stands, so it is given back.
    keeps_adopted = recorded.adopted and holds_room
    beside_harvester = adopt or keeps_adopted
    keep = harvesters_live_keys(current, migrations, vmis) if beside_harvester else frozenset()
    if (adopt and not recorded.skip_auto_scaling) or keeps_adopted:
        return AdoptionChanges(wanted=dict(ADOPTION_ANNOTATIONS), keep=keep)
    if recorded.adopted:
        return AdoptionChanges(remove=tuple(sorted(ADOPTION_ANNOTATIONS)), keep=keep)
    if ANNOTATION_ADOPTED in current:
        return AdoptionChanges(remove=(ANNOTATION_ADOPTED,), keep=keep)
    return AdoptionChanges(keep=keep)


def harvesters_live_keys(
    current: Mapping[str, str], migrations: Iterable[Object], vmis: Mapping[str, VmiSource]
) -> frozenset[str]:
    """Harvester's ``migratingUID-<uid>`` keys on the quota whose VMI has a migration in
    ``migrations`` (the namespace's unfinished ones, as the plan reads them)."""
    uids = set()
    for migration in migrations:
        vmi = vmis.get(str(spec(migration).get("vmiName", "")))
        uid = as_view(vmi).uid if vmi is not None else None
        if uid:
            uids.add(ANNOTATION_MIGRATING_UID_PREFIX + str(uid))
    return frozenset(key for key in current if key in uids)
