"""A drain step over time (pure): the waves KubeVirt's parallel limits cut its migrations into,
how long they take, and which target pods wait for quota although each fits alone.

Waves: virt-controller runs at most parallelMigrationsPerCluster migrations at once, at most
parallelOutboundMigrationsPerNode of them from one source node, each throttled to
bandwidthPerMigration. The waves here fill each slot in the step's order, a wave ending when
its slowest migration does: a coarse model (real migrations start as slots free, dirty pages are
sent again, the bandwidth may be shared), so the duration is an estimate, labelled as such.

Delays: admission.py judges a target pod alone against the quotas as they are now. In a drain, the
migrations of one namespace charge the same quotas together: a migration's target counts from
its admission, and its source launcher keeps counting after the migration succeeded until it has
exited (the VMI's terminationGracePeriodSeconds: how long KubeVirt's launcher takes to go, and
what the v1.2.1 incident showed, about 31 s). So targets stack. The targets of a namespace are
taken in the step's order (namespace then name) at the start of their wave (`plan_waves`, each
wave as long as its longest copy); each is charged next to the earlier targets still counted then:
those of its own wave, and those of earlier waves whose source launcher has not exited yet
(their wave's start + their copy + their grace is later than this wave's start plus
HANDOVER_SECONDS). The rooms in
force then:

- ``ours`` holds each migration's room until its source launcher is gone: the room of every
  target still counted stacks with this one's.
- ``harvester`` gives a migration's room back when it succeeds, while its source launcher still
  counts: only the rooms of the admitted targets of the same wave stack. Keys it gives no room
  on (requests.*, pods) stack with no room at all: the v1.2.1 evacuation's second target.
- ``none``: no room on any key.

A target that does not fit then waits (KubeVirt retries its target pod) until enough source
launchers have exited: a delay, not a block (it moves in the end). With `slots` targets of the
namespace admitted at once, the d-th delayed one waits for ceil(d / slots) rounds, each at most
one migration's copy plus a source launcher's whole grace period (the VMI's and KubeVirt's
padding). Which VMs wait depends on the order KubeVirt starts them, which is not the plan's; how
many wait is what this predicts, and only as well as the copy estimate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ..generic.meta import name
from ..util import resources
from ..util.migrationlimits import MigrationLimits
from ..util.mtq import quota_view
from ..util.quantity import Quantity
from ..util.resourcequota.base import shortfalls
from ..util.resources import ResourceList
from .admission import NamespaceContext, Strategy, TargetPod, readable, strategy_raise
from .report import Delay, VmVerdict

DEFAULT_BANDWIDTH: Final = 64 << 20
"""Bytes per second: KubeVirt's default bandwidthPerMigration (64Mi)."""
LAUNCHER_GRACE_PADDING: Final = 30
"""Seconds KubeVirt's launcher pod adds to the VMI's grace period (virt-controller's template:
the VMI's terminationGracePeriodSeconds plus two paddings of 15 s): the longest a source launcher
can keep counting after its domain is gone."""
DEFAULT_VMI_GRACE: Final = 30
"""KubeVirt's terminationGracePeriodSeconds for a VMI that sets none."""
HANDOVER_SECONDS: Final = 1.0
"""From one migration's end to the next target pod of its freed slot: on Harvester's own code
beside virt-controller v1.6.0 (drain-20-vms-5-namespaces, 2026-11-26) 0.9-2.8 s; the least is
taken, so a source launcher that exits within a second (grace 1) no longer counts for the next
wave, and one with the v1.2.1 incident's 31 s does."""


@dataclass(frozen=True)
class _QuotaRoom:
    """One quota a target pod is charged against, as it is now, and the room the strategy adds
    to its spec.hard for that one migration (raised minus hard, key by key, never below 0)."""

    quota: str
    hard: ResourceList
    used: ResourceList
    room: ResourceList
    charge: ResourceList
    """What the target side charges this quota: its pods the quota's scope matches."""


def _quota_rooms(
    strategy: Strategy, context: NamespaceContext, target: TargetPod
) -> list[_QuotaRoom]:
    """The quotas of the namespace (`context`) charging `target`, by name, with the strategy's
    room for its migration alone."""
    raised_by_quota = strategy_raise(strategy, context, target)
    out = []
    for quota in sorted(context.quotas, key=name):
        view = quota_view(quota)
        charge = target.charged(view.scope)
        if charge is None:
            continue
        raised = raised_by_quota.get(view.name, {})
        room = {
            key: raised[key] - value
            for key, value in view.hard.items()
            if key in raised and raised[key] > value
        }
        out.append(_QuotaRoom(view.name, view.hard, view.used, room, charge))
    return out


@dataclass(frozen=True)
class _Admitted:
    """A target admitted at its wave's start: what it charges, until when, with which rooms."""

    wave: int | None
    counts_until: float
    """Seconds into the step its source launcher exits (its wave's start + copy + grace)."""
    rooms: dict[str, ResourceList]
    used: dict[str, ResourceList]
    """What it charges each quota, by name (each quota's scope charges its own pods)."""


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


def plan_waves(movers: Sequence[VmVerdict], limits: MigrationLimits) -> list[list[VmVerdict]]:
    """Waves in list order: each takes the first migrations (from their `node`) that fit the
    cluster and per-node slots."""
    waves: list[list[VmVerdict]] = []
    left = list(movers)
    while left:
        wave: list[VmVerdict] = []
        per_node: dict[str, int] = {}
        rest: list[VmVerdict] = []
        for mover in left:
            full = len(wave) >= limits.per_cluster
            if full or per_node.get(mover.node, 0) >= limits.outbound_per_node:
                rest.append(mover)
                continue
            wave.append(mover)
            per_node[mover.node] = per_node.get(mover.node, 0) + 1
        left = rest
        waves.append(wave)
    return waves


def estimate_seconds(waves: Sequence[Sequence[VmVerdict]], bandwidth: int) -> float:
    """The sum over waves of the slowest memory copy at `bandwidth` bytes per second."""
    return sum(max(m.memory_bytes for m in wave) / bandwidth for wave in waves if wave)


def vmi_grace_seconds(target: TargetPod) -> int:
    """The VMI's terminationGracePeriodSeconds (KubeVirt's default for none)."""
    return grace_seconds(target.vmi)


def grace_seconds(vmi: Mapping[str, Any]) -> int:
    """`vmi`'s terminationGracePeriodSeconds (KubeVirt's default for none or a bad value)."""
    raw = (vmi.get("spec") or {}).get("terminationGracePeriodSeconds")
    grace = raw if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0 else None
    return DEFAULT_VMI_GRACE if grace is None else grace


def source_exit_seconds(target: TargetPod) -> int:
    """The longest the VM's source launcher counts after its migration: its grace period."""
    return vmi_grace_seconds(target) + LAUNCHER_GRACE_PADDING


def wave_starts(waves: Sequence[Sequence[float]]) -> list[float]:
    """Seconds into the step each wave starts, from the copy seconds of its migrations."""
    starts, at = [], 0.0
    for copies in waves:
        starts.append(at)
        at += max(copies, default=0.0)
    return starts


def plan_delays(
    strategy: Strategy,
    queued: Sequence[tuple[VmVerdict, TargetPod]],
    contexts: Mapping[str, NamespaceContext],
    bandwidth: int,
    starts: Sequence[float],
) -> None:
    """Sets `verdict.delay` on every queued target that waits for quota (module docstring).

    `queued`: the step's migrations whose target pod fits alone, each verdict with its target
    pod, in the step's order; `contexts`: each of their namespaces' (admission.py), by name.
    Namespaces are independent (quotas are per namespace); `starts` are the waves' start
    seconds (wave_starts), wave 1 first."""
    by_namespace: dict[str, list[tuple[VmVerdict, TargetPod]]] = {}
    for verdict, target in queued:
        by_namespace.setdefault(verdict.namespace, []).append((verdict, target))
    for namespace, group in by_namespace.items():
        _namespace_delays(strategy, contexts[namespace], group, bandwidth, starts)


def _start(verdict: VmVerdict, starts: Sequence[float]) -> float:
    wave = verdict.wave
    return starts[wave - 1] if wave is not None and 0 < wave <= len(starts) else 0.0


def _namespace_delays(
    strategy: Strategy,
    context: NamespaceContext,
    group: list[tuple[VmVerdict, TargetPod]],
    bandwidth: int,
    starts: Sequence[float],
) -> None:
    admitted: list[_Admitted] = []
    waiting: list[tuple[VmVerdict, str, list[str]]] = []
    # In the order the targets start: by wave, then by name (waves skip a mover whose node is
    # full, so a later name may start in an earlier wave).
    for verdict, target in sorted(group, key=lambda pair: (_start(pair[0], starts), pair[0].key)):
        quotas = _quota_rooms(strategy, context, target)
        at = _start(verdict, starts)
        charged = _charged(strategy, verdict.wave, at, admitted)
        refusal = _refusal(quotas, charged)
        if refusal is None:
            until = at + _copy_seconds(verdict, bandwidth) + vmi_grace_seconds(target)
            rooms = {q.quota: q.room for q in quotas}
            used = {q.quota: q.charge for q in quotas}
            admitted.append(_Admitted(verdict.wave, until, rooms, used))
        else:
            waiting.append((verdict, *refusal))
    slots = max(len(admitted), 1)
    rounds_seconds = max(
        (_copy_seconds(v, bandwidth) + source_exit_seconds(t) for v, t in group),
        default=0.0,
    )
    for number, (verdict, message, names) in enumerate(waiting, start=1):
        rounds = math.ceil(number / slots)
        verdict.delay = Delay(
            message=message,
            quotas=names,
            rounds=rounds,
            wait_seconds_at_most=round(rounds * rounds_seconds, 1),
        )


def _copy_seconds(verdict: VmVerdict, bandwidth: int) -> float:
    return verdict.memory_bytes / bandwidth if bandwidth > 0 else 0.0


@dataclass
class _Charged:
    """What the earlier targets still counted add, by quota: their usage, and the rooms held."""

    used: dict[str, ResourceList] = field(default_factory=dict)
    rooms: dict[str, ResourceList] = field(default_factory=dict)


def _charged(
    strategy: Strategy, wave: int | None, at: float, admitted: Sequence[_Admitted]
) -> _Charged:
    """The earlier targets still counted at `at` (same wave, or source not exited yet), and
    their rooms still held: all of them for ours, the same wave's for Harvester, none for none."""
    charged = _Charged()
    for earlier in admitted:
        if earlier.wave != wave and earlier.counts_until <= at + HANDOVER_SECONDS:
            continue
        for quota, usage in earlier.used.items():
            charged.used[quota] = resources.add(charged.used.get(quota, {}), usage)
        if strategy == "ours" or (strategy == "harvester" and earlier.wave == wave):
            for quota, room in earlier.rooms.items():
                charged.rooms[quota] = resources.add(charged.rooms.get(quota, {}), room)
    return charged


def _refusal(quotas: list[_QuotaRoom], charged: _Charged) -> tuple[str, list[str]] | None:
    """Why the target is refused next to the earlier targets still counted; None if it fits."""
    parts, names = [], []
    for quota in quotas:
        held = charged.rooms.get(quota.quota, {})
        hard = resources.add(quota.hard, resources.add(held, quota.room))
        hard = {k: v for k, v in hard.items() if k in quota.hard}
        used = resources.add(quota.used, charged.used.get(quota.quota, {}))
        short = shortfalls(quota.charge, hard, used)
        if short:
            names.append(quota.quota)
            parts.append(
                f"quota {quota.quota}: "
                + "; ".join(
                    f"{s.key}: {readable(s.key, str(s.in_use))} used with the targets before it, "
                    f"it needs {readable(s.key, str(s.needed))} of "
                    f"{readable(s.key, str(s.limit))}"
                    for s in short
                )
            )
    if not parts:
        return None
    message = (
        "fits alone, but not next to the target pods of this namespace's earlier migrations "
        f"while their source launchers still count ({', '.join(parts)}): refused until a source "
        "launcher exits"
    )
    return message, names
