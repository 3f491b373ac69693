"""What this webhook process admitted that its caches may not show yet.

The pod rule decides from the managed quota's `status.used` as the informer cache holds it. Quota
admission adds an admitted pod to `status.used` on the API server, and the cache learns of it a
watch event later: milliseconds when idle, seconds on a busy control plane. Forty pods created at
once all met the same cached figure, each fitted into the same free room, and together they took
the room a migration was holding (39 admitted where 19 fitted, measured on the local cluster).

The ledger closes that window for the decisions of one process. Validators run on the event loop
without awaiting, so decisions are already serialized; what was missing is memory between them.
Per namespace it keeps a reservation, a `Tally`: a base (what the cache showed when the tally was
started, or last overtook it) plus each pod admitted since, by uid. A decision counts the larger
(per key) of the cache and the tally, so a pod admitted a moment ago counts whether or not the
cache has it, and never twice. A pod admitted since that is gone (deleted, or ended: quota charges
neither) is dropped from the tally once this process has seen it go (`Releases`, fed by a watch of
the namespace's pods, reservations.py), so a tenant that deletes the pods of a burst may create
others at once; a pod not seen going keeps counting (the safe side) until the reservation ends,
`ttl` seconds after the namespace's last admission (by then the cache shows every pod quota
admission let in).

No change of the migrations holding room voids a tally: the pods admitted a moment ago use the
quota whichever migration joined or left, and a tenant who waited for a migration to leave had
its next pods decided on the cache alone. Only a pod admitted without a uid (a caller that has
none to give) is counted the old way: into the base, for good, and its reservation is void as
soon as a migration it was made under stops holding room (`still_holds`), since nothing could
credit its deletion.

One process's memory only: reservations.py shares the same reservation between webhook replicas
through the API server and falls back to this ledger when it cannot (docs/design.md, "Pods while
room is held").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ....generic.clock import Clock
from ....util import resources
from ....util.resources import ResourceList

LEDGER_TTL = 10.0
"""Seconds a reservation outlives its namespace's last admission: well beyond the watch delay of
a busy control plane (under a second with two CPU burners beside the local cluster), and short
enough that a pod whose going was not seen stops counting soon."""
MAX_PODS = 256
"""Admitted pods a tally keeps by uid; beyond, the oldest is folded into its base (it counts until
the reservation ends, its going no longer credited). Bounds a reservation Lease's annotation to
~40 KiB and the ledger to that per namespace."""
RELEASES_KEPT = 120.0
"""Seconds a pod seen going is remembered: twice the longest a watch of its namespace outlives the
last decision there (reservations.py). A tally still listing it after that counts it (the safe
side)."""
MAX_RELEASES = 4 * MAX_PODS
"""Pods seen going that are remembered per namespace; the oldest are forgotten first."""


def still_holds(made_under: frozenset[str], holding: frozenset[str]) -> bool:
    """Whether a reservation made while the migrations `made_under` held room still counts now
    that `holding` do: every one of them still holds room (others may have joined). Only a
    reservation with a pod admitted without a uid has any (`Tally.admit`)."""
    return made_under <= holding


@dataclass(frozen=True)
class Tally:
    """What a namespace uses as far as admissions go: `base` plus every pod of `pods` (uid ->
    what its admission added). Every pod of `pods` was admitted after `base` was taken, so none
    of them is in it: dropping one that is gone never credits it twice."""

    base: ResourceList = field(default_factory=dict)
    pods: Mapping[str, ResourceList] = field(default_factory=dict)

    def total(self) -> ResourceList:
        """The base plus every pod."""
        return resources.add(self.base, resources.total(self.pods.values()))

    def without(self, gone: Callable[[str], bool]) -> Tally:
        """The tally without the pods `gone` says are gone (the same tally if none is)."""
        kept = {uid: usage for uid, usage in self.pods.items() if not gone(uid)}
        return self if len(kept) == len(self.pods) else Tally(self.base, kept)

    def in_use(self, cached: ResourceList) -> ResourceList:
        """The larger, per key, of the cache's figure and the total."""
        return resources.maximum(cached, self.total())

    def admit(self, in_use: ResourceList, uid: str, usage: ResourceList) -> Tally:
        """The tally once a pod (`uid`, "" for none known) adding `usage` was admitted, decided
        on `in_use` (what `in_use()` said). Where the cache showed more than the total on some
        key, the tally starts again from `in_use`, its pods in the new base for good: the cache
        is taken to hold them (as the larger figure always was), so none may be credited again.
        A pod without a uid goes into the base; past MAX_PODS the oldest pod does."""
        overtaken = _exceeds(in_use, self.total())
        base, pods = (dict(in_use), {}) if overtaken else (dict(self.base), dict(self.pods))
        if not uid:
            return Tally(resources.add(base, usage), pods)
        pods[uid] = resources.add(pods.get(uid, {}), usage)  # a resize adds to its create
        while len(pods) > MAX_PODS:
            oldest = next(iter(pods))
            base = resources.add(base, pods.pop(oldest))
        return Tally(base, pods)


def _exceeds(a: ResourceList, b: ResourceList) -> bool:
    """Whether `a` has a key `b` lacks, or a larger value on one."""
    return any(key not in b or value > b[key] for key, value in a.items())


class Releases:
    """Pods seen going (deleted, or ended), by namespace and uid, for `RELEASES_KEPT` seconds and
    at most MAX_RELEASES per namespace. Told only by a watch of the API server's pods, never by a
    request: a tenant can end its own pods, not claim to have."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._seen: dict[str, dict[str, float]] = {}
        """Namespace -> uid -> when it was seen going (monotonic), oldest first."""

    def released(self, namespace: str, uid: str) -> None:
        """Records that the pod `uid` of `namespace` no longer uses the quota."""
        seen = self._seen.setdefault(namespace, {})
        seen.pop(uid, None)
        seen[uid] = self._clock.monotonic()
        self._forget_old(namespace)

    def gone(self, namespace: str) -> Callable[[str], bool]:
        """Whether a pod of `namespace`, by uid, was seen going (and is still remembered)."""
        self._forget_old(namespace)
        seen = self._seen.get(namespace, {})
        return lambda uid: uid in seen

    def _forget_old(self, namespace: str) -> None:
        seen = self._seen.get(namespace)
        if seen is None:
            return
        cutoff = self._clock.monotonic() - RELEASES_KEPT
        while seen and (len(seen) > MAX_RELEASES or next(iter(seen.values())) <= cutoff):
            del seen[next(iter(seen))]
        if not seen:
            del self._seen[namespace]

    def namespaces(self) -> int:
        """Namespaces with a pod remembered as gone."""
        return len(self._seen)


@dataclass
class _Reservation:
    tally: Tally
    expires: float
    holders: frozenset[str]
    """The migrations holding room when a pod without a uid was admitted (none: empty)."""


class AdmissionLedger:
    """Per-namespace reservations of admitted usage. Not thread-safe: call from the event loop."""

    def __init__(
        self, clock: Clock, ttl: float = LEDGER_TTL, releases: Releases | None = None
    ) -> None:
        """`releases`: the pods seen going, shared with whatever watches them (a new, empty
        record by default: nothing is credited until something is told)."""
        self._clock = clock
        self._ttl = ttl
        self._reservations: dict[str, _Reservation] = {}
        self.releases = releases or Releases(clock)

    @property
    def ttl(self) -> float:
        """Seconds a reservation lasts after the namespace's last admission."""
        return self._ttl

    def in_use(self, namespace: str, cached: ResourceList, holders: frozenset[str]) -> ResourceList:
        """What the namespace uses as far as this process knows while the migrations `holders`
        hold room: the cached figure, raised per key to the reservation's tally without the pods
        seen going."""
        reservation = self._live(namespace, holders)
        if reservation is None:
            return dict(cached)
        return reservation.tally.in_use(cached)

    def admitted(
        self,
        namespace: str,
        in_use: ResourceList,
        usage: ResourceList,
        holders: frozenset[str],
        uid: str = "",
    ) -> None:
        """Records the pod `uid` ("" if unknown) just admitted with `usage`, decided on `in_use`
        (what `in_use()` said) while `holders` held room. Expired reservations of other
        namespaces go at the same time, so the ledger never outgrows the namespaces of the last
        `ttl` seconds."""
        now = self._clock.monotonic()
        reservation = self._live(namespace, holders)
        self._reservations = {
            key: kept for key, kept in self._reservations.items() if kept.expires > now
        }
        tally = Tally() if reservation is None else reservation.tally
        made_under = frozenset() if reservation is None else reservation.holders
        self._reservations[namespace] = _Reservation(
            tally.admit(in_use, uid, usage), now + self._ttl, made_under if uid else holders
        )

    def _live(self, namespace: str, holders: frozenset[str]) -> _Reservation | None:
        """The namespace's reservation without the pods seen going, or None (none, expired, or
        void: made under a migration that no longer holds room, for a pod without a uid)."""
        reservation = self._reservations.get(namespace)
        if reservation is None:
            return None
        expired = reservation.expires <= self._clock.monotonic()
        if expired or not still_holds(reservation.holders, holders):
            del self._reservations[namespace]
            return None
        reservation.tally = reservation.tally.without(self.releases.gone(namespace))
        return reservation
