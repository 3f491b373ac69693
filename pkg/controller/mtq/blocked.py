"""Which migrations of a namespace MTQ mode may raise for: blocked by quota, sized, not held back.

A migration is blocked when KubeVirt reports its target pod refused by quota and no target pod
exists, and it is not one side of a decentralized migration (the receiving side's target pod is
the VM arriving for good, charged to the quota like a VM that starts: util/resourcequota/rooms.py).
It is sized as KubeVirt would render its target pod now (util/launcher/), with the
namespace's LimitRange defaults admission adds, and the attachment pod virt-controller makes beside
it for hotplugged volumes. One that KubeVirt's parallel-migration limits
hold back (util/migrationlimits.py) gets no target pod whatever the quota says: it takes no
lock, and the namespace is looked at again RECHECK_SECONDS later. Reads the caches only.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Final

from ...apis.kubevirt import (
    CONDITION_REJECTED_BY_QUOTA,
    PHASE_PENDING,
)
from ...config.management import Management
from ...generic.logformat import migration_fields
from ...generic.meta import metadata, status
from ...generic.resource import Object
from ...util.launcher import LauncherSettings
from ...util.launcher.parts import target_parts
from ...util.migrationlimits import (
    FINAL_PHASES,
    RECHECK_SECONDS,
    held_back,
    migration_limits,
    takes_slot,
)
from ...util.migrationpriority import migration_priority
from ...util.mtq import Blocked
from ...util.resourcequota.rooms import decentralized_side
from ...util.resources import total
from ..informers import TARGET_INDEX, QuotaInformers, target_index

log = logging.getLogger(__name__)

UNFINISHED_INDEX: Final = "mtq-unfinished-migration"
"""The migration store's index of the migrations not in a final phase, under UNFINISHED: those
that may take a parallel-migration slot (a namespace keeps thousands of finished ones)."""
UNFINISHED: Final = "unfinished"


def unfinished_index(migration: Object) -> list[str]:
    """UNFINISHED for a migration whose phase (virt-controller's, in its status) is not final."""
    phase = str(status(migration).get("phase") or PHASE_PENDING)
    return [] if phase in FINAL_PHASES else [UNFINISHED]


class BlockedMigrations:
    """The informers a plan of MTQ mode reads, and the blocked migrations found in them."""

    def __init__(self, management: Management) -> None:
        self.management = management
        self.informers = QuotaInformers.of(management)
        pods = self.informers.pods
        if not pods.store.has_index(TARGET_INDEX):
            pods.store.add_indexers({TARGET_INDEX: target_index})
        migrations = self.informers.migrations
        if not migrations.store.has_index(UNFINISHED_INDEX):
            migrations.store.add_indexers({UNFINISHED_INDEX: unfinished_index})
        self.namespaces = management.controllers.namespaces()

    def has_target(self, uid: str) -> bool:
        """Whether a target pod of the migration with `uid` exists (in the cache)."""
        return bool(self.informers.pods.store.by_index(TARGET_INDEX, uid))

    def blocked(self, namespace: str, migrations: Sequence[Object]) -> list[Blocked]:
        """The namespace's blocked migrations among `migrations`, sized."""
        found = (self._blocked(namespace, m) for m in migrations)
        return [b for b in found if b is not None]

    def held_back(self, namespace: str, blocked: Sequence[Blocked]) -> frozenset[str]:
        """Names of the blocked migrations KubeVirt's parallel-migration limits hold back now
        (migrationlimits.py): no raise would get them a target pod, so no lock is taken for
        them; the namespace is looked at again RECHECK_SECONDS later."""
        if not blocked:
            return frozenset()
        kubevirts = self.informers.kubevirts.store.objects()
        limits = migration_limits(kubevirts[0] if kubevirts else None)
        running = self._running_source_nodes()
        held = frozenset(
            b.name
            for b in blocked
            if held_back(self._source_node(namespace, b.vmi), running, limits)
        )
        if held:
            self.namespaces.enqueue_after(None, namespace, RECHECK_SECONDS)
        return held

    def _running_source_nodes(self) -> list[str | None]:
        """The source node of every migration in the cluster that takes a parallel slot (read
        from the unfinished ones alone: a finished one takes none)."""
        nodes = []
        for migration in self.informers.migrations.store.by_index(UNFINISHED_INDEX, UNFINISHED):
            phase = str(status(migration).get("phase") or PHASE_PENDING)
            uid = str(metadata(migration).get("uid"))
            if takes_slot(phase, self.has_target(uid)):
                namespace = str(metadata(migration).get("namespace"))
                vmi = str((migration.get("spec") or {}).get("vmiName"))
                nodes.append(self._source_node(namespace, vmi))
        return nodes

    def _source_node(self, namespace: str, vmi_name: str) -> str | None:
        vmi = self.informers.vmis.store.get(f"{namespace}/{vmi_name}")
        node = status(vmi).get("nodeName") if vmi is not None else None
        return str(node) if node else None

    def _blocked(self, namespace: str, migration: Object) -> Blocked | None:
        """The migration as Blocked if KubeVirt reports its target pod refused by quota and no
        target pod exists, sized as KubeVirt would render it; else None."""
        phase = str(status(migration).get("phase") or PHASE_PENDING)
        conditions = status(migration).get("conditions") or []
        rejected = any(
            isinstance(c, Mapping) and c.get("type") == CONDITION_REJECTED_BY_QUOTA
            for c in conditions
        )
        uid = str(metadata(migration).get("uid"))
        if phase != PHASE_PENDING or not rejected or decentralized_side(migration) is not None:
            return None  # a decentralized receive is the VM arriving: no budget (rooms.py)
        if self.has_target(uid):
            return None
        vmi_name = str((migration.get("spec") or {}).get("vmiName"))
        vmi = self.informers.vmis.store.get(f"{namespace}/{vmi_name}")
        if vmi is None:
            return None
        try:
            # Every pod of the target side needs the budget (the attachment pod virt-controller
            # makes beside a target with hotplugged volumes too, or it is refused once the
            # launcher is in), judged by the launcher's scope facts.
            parts = target_parts(vmi, self.launcher_settings(namespace))
        except ValueError as error:
            log.warning(
                "%s: cannot size the target pod of %s: %s",
                namespace,
                vmi_name,
                error,
                extra=migration_fields(
                    namespace, vmi_name, migration=metadata(migration).get("name")
                ),
            )
            return None
        return Blocked(
            str(metadata(migration).get("name")),
            uid,
            total(part.usage for part in parts),
            parts[0].facts,
            vmi_name,
            priority=migration_priority(migration),
            created=str(metadata(migration).get("creationTimestamp") or ""),
        )

    def launcher_settings(self, namespace: str) -> LauncherSettings:
        """The launcher settings in force for `namespace`: as the room mode reads them, with the
        namespace's LimitRange defaults (admission adds them to the target pod)."""
        settings = self.informers.kubevirt_settings()
        quotas = self.informers.quotas.store.by_index("namespace", namespace)
        return settings.for_namespace(
            quotas,
            self.namespaces.cached(None, namespace),
            self.informers.limit_ranges.store.by_index("namespace", namespace),
        )
