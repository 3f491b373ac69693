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
then the cache shows every pod quota admission let in), and as soon as a migration it was made
under no longer holds room (a release: the room shrinks and the cache is the figure to start from
again). A migration that joins does not void it: the pods admitted a moment ago still use the
quota whatever else is migrating, and a tenant who created a migration between two bursts of pods
had the second burst decided on the cache alone (`still_holds`). Until then a pod deleted in the meantime still
counts: a pod that would fit may be denied for up to `ttl` seconds after a burst in the same
migration's window.

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


def still_holds(made_under: frozenset[str], holding: frozenset[str]) -> bool:
    """Whether a reservation made while the migrations `made_under` held room still counts now
    that `holding` do: every one of them still holds room (others may have joined)."""
    return made_under <= holding


@dataclass
class _Reservation:
    used: ResourceList
    expires: float
    holders: frozenset[str]
    """The migrations holding room when it was made (their uids)."""


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

    def in_use(self, namespace: str, cached: ResourceList, holders: frozenset[str]) -> ResourceList:
        """What the namespace uses as far as this process knows while the migrations `holders`
        hold room: the cached figure, raised per key to what this process has admitted on top of
        earlier figures during their room."""
        reservation = self._live(namespace, holders)
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

    def _live(self, namespace: str, holders: frozenset[str] | None = None) -> _Reservation | None:
        reservation = self._reservations.get(namespace)
        if reservation is None:
            return None
        expired = reservation.expires <= self._clock.monotonic()
        if expired or (holders is not None and not still_holds(reservation.holders, holders)):
            del self._reservations[namespace]
            return None
        return reservation

    def reserved_namespaces(self) -> int:
        """Namespaces with a live reservation."""
        now = self._clock.monotonic()
        return sum(1 for kept in self._reservations.values() if kept.expires > now)
