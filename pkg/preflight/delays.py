"""Which target pods wait for quota although each fits alone (pure).

admission.py judges a target pod alone against the quotas as they are now. In a drain, the
migrations of one namespace charge the same quotas together: every source launcher still counts
while the targets arrive, and keeps counting after its migration succeeded until it has exited
(up to its termination grace period). So targets stack. The i-th target of a namespace (in the
step's order, namespace then name) is admitted at once only if it fits next to the targets
admitted before it, with the rooms in force then:

- ``ours`` holds each migration's room until its source launcher is gone: the rooms of every
  admitted target stack with this one's.
- ``harvester`` gives a migration's room back when it succeeds, while its source launcher still
  counts: only the rooms of the admitted targets of the same wave (migrating together) stack;
  an earlier wave's are gone by the time this one arrives. Keys it gives no room on
  (requests.*, pods) stack with no room at all: the v1.2.1 evacuation's second target.
- ``none``: no room on any key.

A target that does not fit then waits (KubeVirt retries its target pod) until enough source
launchers have exited: a delay, not a block (it moves in the end). With `slots` targets of the
namespace admitted at once, the d-th delayed one waits for ceil(d / slots) rounds, each at most
one migration's copy plus a source launcher's exit. Which VMs wait depends on the order KubeVirt
starts them; how many wait is what this predicts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from ..util import resources
from ..util.resourcequota.calculator import shortfalls
from ..util.resources import ResourceList
from .admission import NamespaceContext, QuotaRoom, Strategy, TargetPod, quota_rooms, readable
from .report import Delay, VmVerdict

LAUNCHER_GRACE_PADDING: Final = 30
"""Seconds KubeVirt's launcher pod adds to the VMI's grace period (virt-controller's template:
the VMI's terminationGracePeriodSeconds plus two paddings of 15 s): the longest a source launcher
can keep counting after its domain is gone."""
DEFAULT_VMI_GRACE: Final = 30
"""KubeVirt's terminationGracePeriodSeconds for a VMI that sets none."""


@dataclass(frozen=True)
class QueuedTarget:
    """One migration of a drain whose target pod fits alone: its verdict, pod and namespace."""

    verdict: VmVerdict
    target: TargetPod
    context: NamespaceContext


@dataclass
class _Charged:
    """What the admitted targets of one namespace add to its quotas: usage, and rooms per wave."""

    used: dict[str, ResourceList] = field(default_factory=dict)
    rooms: dict[tuple[int | None, str], ResourceList] = field(default_factory=dict)
    slots: int = 0


def source_exit_seconds(target: TargetPod) -> int:
    """The longest the VM's source launcher counts after its migration: its grace period."""
    raw = (target.vmi.get("spec") or {}).get("terminationGracePeriodSeconds")
    grace = raw if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0 else None
    return (DEFAULT_VMI_GRACE if grace is None else grace) + LAUNCHER_GRACE_PADDING


def plan_delays(strategy: Strategy, queued: Sequence[QueuedTarget], bandwidth: int) -> None:
    """Sets `verdict.delay` on every queued target that waits for quota (module docstring).

    `queued` is in the step's order; namespaces are independent (quotas are per namespace)."""
    by_namespace: dict[str, list[QueuedTarget]] = {}
    for item in queued:
        by_namespace.setdefault(item.verdict.namespace, []).append(item)
    for group in by_namespace.values():
        _namespace_delays(strategy, group, bandwidth)


def _namespace_delays(strategy: Strategy, group: list[QueuedTarget], bandwidth: int) -> None:
    charged = _Charged()
    waiting: list[tuple[QueuedTarget, str, list[str]]] = []
    for item in group:
        quotas = quota_rooms(strategy, item.context, item.target)
        refusal = _refusal(strategy, item, quotas, charged)
        if refusal is None:
            _admit(strategy, item, quotas, charged)
        else:
            waiting.append((item, *refusal))
    slots = max(charged.slots, 1)
    rounds_seconds = max(
        (_copy_seconds(i.verdict, bandwidth) + source_exit_seconds(i.target) for i in group),
        default=0.0,
    )
    for number, (item, message, names) in enumerate(waiting, start=1):
        rounds = math.ceil(number / slots)
        item.verdict.delay = Delay(
            message=message,
            quotas=names,
            rounds=rounds,
            wait_seconds_at_most=round(rounds * rounds_seconds, 1),
        )


def _copy_seconds(verdict: VmVerdict, bandwidth: int) -> float:
    return verdict.memory_bytes / bandwidth if bandwidth > 0 else 0.0


def _wave_key(strategy: Strategy, verdict: VmVerdict) -> int | None:
    """Whose rooms stack: Harvester's of one wave only, ours across the drain (module doc)."""
    return verdict.wave if strategy == "harvester" else None


def _refusal(
    strategy: Strategy, item: QueuedTarget, quotas: list[QuotaRoom], charged: _Charged
) -> tuple[str, list[str]] | None:
    """Why the target is refused next to the targets admitted before it; None if it fits."""
    stacked = charged.rooms
    wave = _wave_key(strategy, item.verdict)
    parts, names = [], []
    for quota in quotas:
        held = stacked.get((wave, quota.quota), {})
        hard = resources.add(quota.hard, resources.add(held, quota.room))
        hard = {k: v for k, v in hard.items() if k in quota.hard}
        used = resources.add(quota.used, charged.used.get(quota.quota, {}))
        short = shortfalls(item.target.usage, hard, used)
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
        "fits alone, but not next to the target pods of this namespace's migrations before it "
        f"while their source launchers still count ({', '.join(parts)}): refused until a source "
        "launcher exits"
    )
    return message, names


def _admit(
    strategy: Strategy, item: QueuedTarget, quotas: list[QuotaRoom], charged: _Charged
) -> None:
    wave = _wave_key(strategy, item.verdict)
    for quota in quotas:
        charged.used[quota.quota] = resources.add(
            charged.used.get(quota.quota, {}), item.target.usage
        )
        key = (wave, quota.quota)
        charged.rooms[key] = resources.add(charged.rooms.get(key, {}), quota.room)
    charged.slots += 1
