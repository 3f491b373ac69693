"""What this webhook process admitted that its caches may not show yet.

The pod rule decides from the managed quota's `status.used` as the informer cache holds it. Quota
admission adds an admitted pod to `status.used` on the API server, and the cache learns of it a
watch event later: milliseconds when idle, seconds on a busy control plane. Forty pods created at
once all met the same cached figure, each fitted into the same free room, and together they took
the room a migration was holding (39 admitted where 19 fitted, measured on the local cluster).

The ledger closes that window for the decisions of one process. Validators run on the event loop
without awaiting, so decisions are already serialized; what was missing is memory between them.
Per namespace it keeps a reservation: after each pod it admits, the larger (per key) of what the
cache showed and the reservation so far, plus the pod's usage. A decision counts the larger of the
cache and the reservation, so a pod admitted a moment ago counts whether or not the cache has it,
and never twice. The reservation is dropped `ttl` seconds after the namespace's last admission (by
then the cache shows every pod quota admission let in), and by nothing else: a change in the
migrations holding room (one joining, or one leaving, even the one the reservation was made under)
changes the limit each decision is checked against (the base, recomputed every time), never what
the pods admitted a moment ago use. Voiding it when a migration left let a tenant who created a
second migration and deleted its first (before that one's target pod existed) have the next burst
decided on the lagging cache alone. Until then a pod deleted in the meantime still counts: a pod
that would fit may be denied for up to `ttl` seconds after a burst.

One process's memory only: reservations.py shares the same reservation between webhook replicas
through the API server and falls back to this ledger when it cannot (docs/design.md, "Pods while
room is held").
"""

from __future__ import annotations

from dataclasses import dataclass

from ....generic.clock import Clock
from ....util import resources
from ....util.resources import ResourceList

LEDGER_TTL = 10.0
"""Seconds a reservation outlives its namespace's last admission: well beyond the watch delay of
a busy control plane (under a second with two CPU burners beside the local cluster), and short
enough that deleted pods are credited again soon."""


@dataclass
class _Reservation:
    used: ResourceList
    expires: float
    holders: frozenset[str]
    """The migrations holding room when it was made (their uids): a record only, a change of
    holders voids nothing (module docstring)."""


class AdmissionLedger:
    """Per-namespace reservations of admitted usage. Not thread-safe: call from the event loop."""

    def __init__(self, clock: Clock, ttl: float = LEDGER_TTL) -> None:
        self._clock = clock
        self._ttl = ttl
        self._reservations: dict[str, _Reservation] = {}

    @property
    def ttl(self) -> float:
        """Seconds a reservation lasts after the namespace's last admission."""
        return self._ttl

    def in_use(self, namespace: str, cached: ResourceList) -> ResourceList:
        """What the namespace uses as far as this process knows: the cached figure, raised per
        key to what this process has admitted on top of earlier figures in the last `ttl`
        seconds, whichever migrations hold room now."""
        reservation = self._live(namespace)
        if reservation is None:
            return dict(cached)
        return resources.maximum(cached, reservation.used)

    def admitted(
        self, namespace: str, in_use: ResourceList, usage: ResourceList, holders: frozenset[str]
    ) -> None:
        """Records a pod just admitted with `usage`, decided on `in_use` (what `in_use()` said)
        while `holders` held room. Expired reservations of other namespaces go at the same time,
        so the ledger never outgrows the namespaces of the last `ttl` seconds."""
        now = self._clock.monotonic()
        self._reservations = {
            key: kept for key, kept in self._reservations.items() if kept.expires > now
        }
        self._reservations[namespace] = _Reservation(
            resources.add(in_use, usage), now + self._ttl, holders
        )

    def _live(self, namespace: str) -> _Reservation | None:
        reservation = self._reservations.get(namespace)
        if reservation is None:
            return None
        if reservation.expires <= self._clock.monotonic():
            del self._reservations[namespace]
            return None
        return reservation

    def reserved_namespaces(self) -> int:
        """Namespaces with a live reservation."""
        now = self._clock.monotonic()
        return sum(1 for kept in self._reservations.values() if kept.expires > now)
