"""KubeVirt's parallel-migration limits (pure).

Before creating a target pod, virt-controller counts the migrations "running": unfinished ones in a
running phase (Scheduling .. Running) plus pending ones whose target pod already exists. It holds
the new one back (and looks again 5 s later) when that count reaches
`parallelMigrationsPerCluster` (default 5), or when the running ones whose VMI sits on the same
source node reach `parallelOutboundMigrationsPerNode` (default 2). A migration refused by quota has
no target pod, so it does not take a slot from the others.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .phases import FINAL, RUNNING_PHASES, Phase

DEFAULT_PARALLEL_MIGRATIONS_PER_CLUSTER = 5
DEFAULT_PARALLEL_OUTBOUND_MIGRATIONS_PER_NODE = 2


@dataclass(frozen=True)
class ParallelLimits:
    """KubeVirt's migration configuration: parallelMigrationsPerCluster and
    parallelOutboundMigrationsPerNode."""

    per_cluster: int = DEFAULT_PARALLEL_MIGRATIONS_PER_CLUSTER
    outbound_per_node: int = DEFAULT_PARALLEL_OUTBOUND_MIGRATIONS_PER_NODE

    def __post_init__(self) -> None:
        if self.per_cluster < 1 or self.outbound_per_node < 1:
            raise ValueError(
                f"parallel migration limits must be >= 1, not {self.per_cluster!r} per cluster "
                f"and {self.outbound_per_node!r} outbound per node"
            )


@dataclass(frozen=True)
class InFlight:
    """What the limits need of one migration: its phase, whether its target pod exists, and the
    node its VMI is on now (None when the VMI is gone)."""

    key: str
    phase: Phase
    has_target_pod: bool
    source_node: str | None

    @property
    def counts(self) -> bool:
        """Whether it takes a slot: running, or pending with a target pod already created."""
        if self.phase in FINAL:
            return False
        return self.phase in RUNNING_PHASES or self.has_target_pod


def limit_reached(
    source_node: str | None, migrations: Iterable[InFlight], limits: ParallelLimits
) -> str | None:
    """Why a new target pod for a VMI on `source_node` must wait, or None when it may go.

    `migrations` are the other unfinished migrations in scope (the one asking is not running yet,
    so including it changes nothing).
    """
    running = [m for m in migrations if m.counts]
    if len(running) >= limits.per_cluster:
        return (
            f"total running parallel migration count [{len(running)}] is currently at the "
            f"global cluster limit [{limits.per_cluster}]"
        )
    outbound = sum(1 for m in running if source_node is not None and m.source_node == source_node)
    if outbound >= limits.outbound_per_node:
        return (
            f"total running parallel outbound migrations on node {source_node} [{outbound}] has "
            f"hit the outbound migrations per node limit [{limits.outbound_per_node}]"
        )
    return None
