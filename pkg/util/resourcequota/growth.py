"""Why a migration's room is bigger than the pod it replaces (harvester/harvester#9753).

A source launcher pod keeps the resources KubeVirt rendered when it was created; its target is
rendered now, with the overhead ratio in force now and the running KubeVirt's formula. Raise the
ratio (Harvester's `additional-guest-memory-overhead-ratio`) or upgrade KubeVirt, and every
migration's target asks for more than its source, which a quota sized for the running VMs
refuses. `explain` says so, with the numbers.

Only what the API server and KubeVirt vouch for is read: the source is a launcher pod of the VMI
(the guarded `kubevirt.io=virt-launcher` and `kubevirt.io/created-by` labels) that is not a target
of this migration, its usage is its spec as created; the overhead named is our rendering, never
the pod annotation `kubevirt.io/memory-overhead-bytes`, which a tenant may edit
(docs/security.md).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Final

from ..kubevirtversion import KubeVirtVersion
from ..launcher import LauncherSettings, rendered_memory_overhead
from ..overhead import SpecSource
from ..quantity import Quantity
from ..resources import ResourceList
from .podindex import NamespacePods, PodView

MEMORY_KEYS: Final = ("requests.memory", "limits.memory", "memory")


@dataclass(frozen=True)
class TargetGrowth:
    """How much a room asks beyond its source pod, and the overhead the target is rendered with."""

    source_pod: str
    grown: ResourceList
    """The keys the room asks more of than the source pod charges, by how much."""
    overhead_now: int
    """The memory overhead KubeVirt adds to the target's compute container now (bytes)."""
    ratio: str | None
    version: KubeVirtVersion

    def sentence(self) -> str:
        """One line for `explain`: what grew, and the overhead in force when memory did."""
        grown = ", ".join(f"{key} +{value}" for key, value in self.grown.items())
        line = f"bigger than its source pod {self.source_pod}: {grown}"
        if any(key in self.grown for key in MEMORY_KEYS):
            ratio = self.ratio if self.ratio is not None else "unset"
            line += (
                f"; the target is rendered with {Quantity.from_scaled(self.overhead_now, 0)} of"
                f" memory overhead (overhead ratio {ratio}, KubeVirt {self.version}): a source"
                " created under a lower ratio or an older KubeVirt carries less, or the VMI grew"
            )
        return line


def source_pod(
    pods: NamespacePods, vmi_uid: str, migration_uid: str, now: datetime.datetime
) -> PodView | None:
    """The VMI's oldest launcher pod that still counts and is no target of this migration."""
    candidates = [
        view
        for view in pods.launchers_of(vmi_uid)
        if view.launcher and view.migration_uid != migration_uid and view.counts(now)
    ]
    return min(candidates, key=lambda view: (view.created, view.name), default=None)


def target_growth(
    room: ResourceList,
    vmi: SpecSource,
    source: PodView,
    settings: LauncherSettings,
) -> TargetGrowth | None:
    """How `room` exceeds what `source` charges, or None when it does not (nothing grew)."""
    grown: ResourceList = {}
    for key, needed in room.items():
        had = source.usage.get(key)
        if had is None or needed > had:
            grown[key] = needed - had if had is not None else needed
    if not grown:
        return None
    return TargetGrowth(
        source_pod=source.name,
        grown=dict(sorted(grown.items())),
        overhead_now=rendered_memory_overhead(vmi, settings),
        ratio=None if settings.ratio is None else str(settings.ratio),
        version=settings.version,
    )
