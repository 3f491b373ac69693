"""KubeVirt's parallel-migration limits turned into waves, and a duration estimate (pure).

virt-controller runs at most parallelMigrationsPerCluster migrations at once, at most
parallelOutboundMigrationsPerNode of them from one source node, each throttled to
bandwidthPerMigration. The waves here fill each slot in order of the list, a wave ending when
its slowest migration does: a coarse model (real migrations start as slots free, dirty pages are
sent again, the bandwidth may be shared), so the duration is an estimate, labelled as such.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..util.migrationlimits import MigrationLimits
from ..util.quantity import Quantity

DEFAULT_BANDWIDTH: Final = 64 << 20
"""Bytes per second: KubeVirt's default bandwidthPerMigration (64Mi)."""


@dataclass(frozen=True)
class Mover:
    """One migration to schedule: its key, source node and the memory it copies."""

    key: str
    node: str
    memory_bytes: int


def bandwidth_per_migration(kubevirt: Mapping[str, Any] | None) -> int:
    """spec.configuration.migrations.bandwidthPerMigration in bytes per second; KubeVirt's
    default for none, zero or an unreadable value."""
    migrations = (((kubevirt or {}).get("spec") or {}).get("configuration") or {}).get("migrations")
    raw = migrations.get("bandwidthPerMigration") if isinstance(migrations, Mapping) else None
    if raw is None:
        return DEFAULT_BANDWIDTH
    try:
        value = Quantity.parse(str(raw)).value()
    except ValueError:
        return DEFAULT_BANDWIDTH
    return value if value > 0 else DEFAULT_BANDWIDTH


def plan_waves(movers: Sequence[Mover], limits: MigrationLimits) -> list[list[Mover]]:
    """Waves in list order: each takes the first movers that fit the cluster and per-node slots."""
    waves: list[list[Mover]] = []
    left = list(movers)
    while left:
        wave: list[Mover] = []
        per_node: dict[str, int] = {}
        for mover in list(left):
            if len(wave) >= limits.per_cluster:
                break
            if per_node.get(mover.node, 0) >= limits.outbound_per_node:
                continue
            wave.append(mover)
            per_node[mover.node] = per_node.get(mover.node, 0) + 1
            left.remove(mover)
        waves.append(wave)
    return waves


def estimate_seconds(waves: Sequence[Sequence[Mover]], bandwidth: int) -> float:
    """The sum over waves of the slowest memory copy at `bandwidth` bytes per second."""
    return sum(max(m.memory_bytes for m in wave) / bandwidth for wave in waves if wave)
