"""Migrations KubeVirt reports refused by quota, noted as their objects change.

virt-controller sets `migrationRejectedByResourceQuota` on a pending VMIM when quota admission
refuses its target pod, and clears it once a target pod is admitted. On a busy control plane both
can happen before the namespace's reconcile runs (the workqueue folds the two changes into one
run), so counting refusals from what a reconcile sees misses the short ones, and those are the
ones a raise fixed. The tracker therefore notes each edge when the cache applies it (a store view
listener) and the reconcile reads what was noted since (`settle`): a refusal is counted once,
however briefly it stood, and its blocked time runs from the change that set it to the change
that cleared it.

Not thread-safe: event loop only, like the store listeners that feed it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...apis.kubevirt import CONDITION_REJECTED_BY_QUOTA, PHASE_PENDING
from ...generic.clock import Clock
from ...generic.meta import has_condition, status


def refused_by_quota(migration: Mapping[str, Any] | None) -> bool:
    """Whether `migration` is pending with KubeVirt's quota refusal condition True."""
    if migration is None:
        return False
    phase = str(status(migration).get("phase") or PHASE_PENDING)
    return phase == PHASE_PENDING and has_condition(migration, CONDITION_REJECTED_BY_QUOTA)


@dataclass
class _Refusal:
    since: float
    """Monotonic moment the refusal was first seen."""
    ended: float | None = None
    """Monotonic moment it was seen cleared (or the migration gone); None while it stands."""
    counted: bool = False


@dataclass
class Settled:
    """What `RefusalTracker.settle` found for one namespace."""

    new_refusals: int = 0
    """Refusals seen since the last settle and not counted before."""
    blocked_seconds: list[float] = field(default_factory=list)
    """How long each refusal that ended since stood, in the order they started."""


class RefusalTracker:
    """Refusal edges per migration ("namespace/name" store key), kept until a settle or forget
    of their namespace reads them. Every edge is a change of the plan's migration view, which
    queues the namespace, so each noted refusal is read by that namespace's next reconcile.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._by_namespace: dict[str, dict[str, _Refusal]] = {}

    def seen(self, key: str, migration: Mapping[str, Any] | None) -> None:
        """The store's view of `key` is now `migration` (None: deleted). Notes a refusal that
        starts, or the end of one that stood; anything else changes nothing."""
        namespace, _, name = key.rpartition("/")
        refusals = self._by_namespace.get(namespace, {})
        noted = refusals.get(name)
        if refused_by_quota(migration):
            if noted is None or noted.ended is not None:
                self._start(namespace, name, noted)
        elif noted is not None and noted.ended is None:
            noted.ended = self._clock.monotonic()

    def _start(self, namespace: str, name: str, previous: _Refusal | None) -> None:
        """A new refusal; one that ended and started again before a settle stays counted once
        and keeps its first start (the settle sees one refusal that has not ended)."""
        if previous is not None:
            previous.ended = None
            return
        self._by_namespace.setdefault(namespace, {})[name] = _Refusal(self._clock.monotonic())

    def settle(self, namespace: str) -> Settled:
        """The namespace's refusals not counted before, and the blocked time of those that
        ended; ended ones are dropped, standing ones kept (counted)."""
        result = Settled()
        refusals = self._by_namespace.get(namespace)
        if not refusals:
            return result
        for name, refusal in list(refusals.items()):
            if not refusal.counted:
                refusal.counted = True
                result.new_refusals += 1
            if refusal.ended is not None:
                result.blocked_seconds.append(refusal.ended - refusal.since)
                del refusals[name]
        if not refusals:
            del self._by_namespace[namespace]
        return result

    def forget(self, namespace: str) -> None:
        """Drops the namespace's notes without counting them (it is no longer ours to report)."""
        self._by_namespace.pop(namespace, None)

    def standing(self) -> int:
        """Refusals noted and not yet ended, in all namespaces (for tests and debugging)."""
        return sum(
            1
            for refusals in self._by_namespace.values()
            for r in refusals.values()
            if r.ended is None
        )
