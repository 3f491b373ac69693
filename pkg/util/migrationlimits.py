"""KubeVirt's parallel-migration limits, as its migration controller applies them before it creates
a target pod (pure; the KubeVirt simulator has its own twin in pkg/sim/kubevirt/limits.py).

virt-controller counts the migrations that take a slot: unfinished ones in a running phase
(Scheduling .. Running) and pending ones whose target pod exists already. It holds a new one back,
and looks again a few seconds later, while that count reaches ``parallelMigrationsPerCluster``
(default 5) or the ones whose VMI is on the same source node reach
``parallelOutboundMigrationsPerNode`` (default 2). A migration held back gets no target pod, so no
raise admits one: KubeVirt MTQ takes no lock for it (its reachedMaxParallelMigrations, looked at
again 5 s later), and neither does MTQ mode here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

DEFAULT_PER_CLUSTER: Final = 5
DEFAULT_OUTBOUND_PER_NODE: Final = 2
RECHECK_SECONDS: Final = 5.0
"""How soon a migration held back is looked at again (as KubeVirt and KubeVirt MTQ do)."""
RUNNING_PHASES: Final = frozenset(
    {"Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running"}
)
"""VirtualMachineInstanceMigration.IsRunning()."""
FINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class MigrationLimits:
    """parallelMigrationsPerCluster and parallelOutboundMigrationsPerNode."""

    per_cluster: int = DEFAULT_PER_CLUSTER
    outbound_per_node: int = DEFAULT_OUTBOUND_PER_NODE


def migration_limits(kubevirt: Mapping[str, Any] | None) -> MigrationLimits:
    """The limits the KubeVirt CR sets (spec.configuration.migrations), KubeVirt's defaults for
    what it leaves out or sets to something that is not a positive integer."""
    spec = (kubevirt or {}).get("spec")
    configuration = spec.get("configuration") if isinstance(spec, Mapping) else None
    migrations = configuration.get("migrations") if isinstance(configuration, Mapping) else None
    migrations = migrations if isinstance(migrations, Mapping) else {}
    return MigrationLimits(
        per_cluster=_positive(migrations.get("parallelMigrationsPerCluster"), DEFAULT_PER_CLUSTER),
        outbound_per_node=_positive(
            migrations.get("parallelOutboundMigrationsPerNode"), DEFAULT_OUTBOUND_PER_NODE
        ),
    )


def _positive(value: Any, default: int) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    return default


def takes_slot(phase: str, has_target_pod: bool) -> bool:
    """Whether a migration in `phase` counts against the limits."""
    if phase in FINAL_PHASES:
        return False
    return phase in RUNNING_PHASES or has_target_pod


def held_back(
    source_node: str | None, running_nodes: Iterable[str | None], limits: MigrationLimits
) -> bool:
    """Whether KubeVirt holds back a target pod for a VMI on `source_node`, given the source
    nodes of the migrations that take a slot now."""
    nodes = list(running_nodes)
    if len(nodes) >= limits.per_cluster:
        return True
    outbound = sum(1 for node in nodes if source_node is not None and node == source_node)
    return outbound >= limits.outbound_per_node
