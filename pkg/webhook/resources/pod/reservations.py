"""The admission ledger shared by every webhook replica, through one Lease per tenant namespace.

ledger.py closes the window between admitting a pod and the caches showing it, for one process.
The chart runs two webhook replicas behind one Service, and the API server spreads a burst of pod
creates over both: each replica saw only its own admissions, so together they could admit up to
twice the free room. Here the reservation (the larger, per key, of the cached usage and what was
admitted on top of it, plus each pod admitted) lives in a Lease of the webhook's namespace, named
after the tenant namespace, where tenants cannot touch it. Each decision reads the Lease, decides,
and writes it back conditional on the version it read (or creates it): of two replicas deciding
at once, one write wins and the other decides again on the new reservation. So decisions are
serialized across replicas through etcd, at the cost of one API request per write while room is
held in a namespace (nowhere else): each replica starts from the Lease its own last write
returned, and reads it only after losing a race. Within one process the decisions of a namespace
are serialized by a lock, so conflicts come only from other replicas; the pods that queued for the
lock while a write was under way are decided together, one after another as if each had written
alone, and written in one (a namespace admitted only one pod per round trip before). No pod is
answered before the write that records it succeeded; a lost race decides the whole batch again.

The reservation expires the ledger's `ttl` seconds after its last admission and is void as soon
as a migration it was made under no longer holds room (one joining does not void it), as in
ledger.py; the times are wall-clock (the replicas share no
monotonic clock). Expired Leases are deleted by `collect`, which every replica runs now and then.
If the Lease cannot be read or written (an API error other than a conflict, including no RBAC for
it in an older deploy/), the decision falls back to this process's ledger and a warning is
logged: the pod is still checked, against what this replica knows. Lost races never fall back:
a pod that keeps losing for DECIDE_WITHIN seconds is refused with 429 and a message to retry
(never admitted unchecked).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

from ....generic import errors
from ....generic.client import ApiClient
from ....generic.clock import Clock
from ....generic.resource import LEASES, Object
from ....util import resources
from ....util.quantity import Quantity
from ....util.resources import ResourceList
from ...admission import Denied
from .ledger import AdmissionLedger, still_holds
from .validator import PodCheck, admit_locally

log = logging.getLogger(__name__)

LABEL_RESERVATION = "harvester-quota.io/room-reservation"
"""On each reservation Lease ("true"); `collect` lists by it."""
ANNOTATION_RESERVATION = "harvester-quota.io/reservation"
"""The reservation as JSON: {"used" (quantities by key), "expires" (RFC 3339), "holders" (the
uids of the migrations holding room when it was made)}; the namespace is in the Lease's name."""
DECIDE_WITHIN = 3.0
"""Seconds one pod's decision may take while it keeps losing races for the Lease, before it is
refused with 429 (the pods rules give the webhook 5 s). Each lost race is another replica's
admission, and admissions end when the free room does, so this only bites under a flood."""
COLLECT_AFTER = 60.0
"""Seconds past its expiry before an unused reservation Lease is deleted."""


@dataclass(eq=False)
class Waiting:
    """A pod check queued for its namespace's lock, and its decision once made."""

    check: PodCheck
    decided: asyncio.Future[None]
    """Done when decided: None for admitted, Denied for refused."""

    def settle(self, denied: Denied | None) -> None:
        if self.decided.done():
            return
        if denied is None:
            self.decided.set_result(None)
        else:
            self.decided.set_exception(denied)


@dataclass(frozen=True)
class Reservation:
    used: ResourceList
    expires: datetime.datetime
    holders: frozenset[str]

    def dumps(self) -> str:
        return json.dumps(
            {
                "used": {key: str(value) for key, value in sorted(self.used.items())},
                "expires": self.expires.isoformat(),
                "holders": sorted(self.holders),
            }
        )

    @classmethod
    def loads(cls, text: str) -> Reservation:
        """Raises ValueError for anything but what `dumps` writes (a Lease edited by hand)."""
        try:
            data = json.loads(text)
            expires = datetime.datetime.fromisoformat(str(data["expires"]))
            used = {str(key): Quantity.parse(str(value)) for key, value in data["used"].items()}
            holders = frozenset(str(h) for h in data["holders"])
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as error:
            raise ValueError(f"not a reservation: {error}") from error
        if expires.tzinfo is None:
            raise ValueError(f"not a reservation: expires has no time zone: {data['expires']!r}")
        return cls(used, expires, holders)


def lease_name(namespace: str) -> str:
    """Namespace names are DNS labels (63 characters), so the prefix keeps it a valid name."""
    return f"room-reservation-{namespace}"


class LeaseReservations:
    """Decides pod checks on the reservation all replicas share (see module docstring).

    `admit` may be called concurrently; per tenant namespace it runs one batch at a time: the
    checks queued when the lock is taken, in order of arrival.
    """

    def __init__(
        self,
        client: ApiClient,
        namespace: str,
        clock: Clock,
        fallback: AdmissionLedger,
    ) -> None:
        """`fallback`: this process's ledger, for decisions the Lease cannot take; a reservation
        lasts as long as the ledger's (its `ttl`), whichever of the two holds it."""
        self._client = client
        self._namespace = namespace
        self._clock = clock
        self._fallback = fallback
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._users: Counter[str] = Counter()
        """Decisions under way or waiting, per namespace: its lock goes when none is left."""
        self._queued: dict[str, list[Waiting]] = {}
        """Checks waiting for their namespace's lock and not yet taken into a batch."""
        self._written: dict[str, Object] = {}
        """Tenant namespace -> its Lease as our last write returned it: the next decision there
        starts from it instead of a GET (if another replica wrote since, the conditional write
        fails and the Lease is read)."""
        self._warned = False

    async def admit(self, check: PodCheck) -> None:
        """Raises Denied unless the pod fits next to the shared reservation; records it if so."""
        namespace = check.namespace
        waiting = Waiting(check, asyncio.get_running_loop().create_future())
        self._queued.setdefault(namespace, []).append(waiting)
        self._users[namespace] += 1
        try:
            async with self._locks[namespace]:
                if not waiting.decided.done():  # else an earlier batch decided it
                    batch = self._queued.pop(namespace, [])
                    if waiting not in batch:  # taken by a holder cancelled before it decided
                        batch.append(waiting)
                    await self._decide(namespace, batch)
        finally:
            self._unqueue(waiting)
            self._users[namespace] -= 1
            if self._users[namespace] == 0:
                del self._users[namespace], self._locks[namespace]
        waiting.decided.result()

    def _unqueue(self, waiting: Waiting) -> None:
        """Drops a check cancelled before a batch took it (so none decides it for nothing)."""
        namespace = waiting.check.namespace
        queued = self._queued.get(namespace)
        if queued is not None and waiting in queued:
            queued.remove(waiting)
        if not queued:
            self._queued.pop(namespace, None)

    async def _decide(self, namespace: str, batch: list[Waiting]) -> None:
        """Settles every check of `batch` on the shared reservation, or on this process's
        ledger if the Lease cannot be read or written."""
        try:
            await self._decide_shared(namespace, batch)
        except errors.ApiError as error:
            self._fall_back(namespace, error)
            for waiting in batch:
                try:
                    admit_locally(waiting.check, self._fallback)
                except Denied as denied:
                    waiting.settle(denied)
                else:
                    waiting.settle(None)

    async def _decide_shared(self, namespace: str, batch: list[Waiting]) -> None:
        """Decides the checks one after another, each on the reservation the ones before it
        left, and settles them once the Lease holds what they admitted (none admitted: nothing
        is written); a lost race decides them all again, until DECIDE_WITHIN has passed."""
        name = lease_name(namespace)
        deadline = self._clock.monotonic() + DECIDE_WITHIN
        while self._clock.monotonic() < deadline:
            lease = self._written.pop(namespace, None) or await self._read(name)
            reservation = _reservation_of(lease)
            decisions: list[tuple[Waiting, ResourceList | Denied]] = []
            for waiting in batch:
                in_use = self._in_use(waiting.check, reservation)
                try:
                    waiting.check.decide(in_use)
                except Denied as denied:
                    decisions.append((waiting, denied))
                    continue
                decisions.append((waiting, in_use))
                reservation = Reservation(
                    resources.add(in_use, waiting.check.needed),
                    self._clock.now() + datetime.timedelta(seconds=self._fallback.ttl),
                    waiting.check.holders,
                )
            if any(not isinstance(decided, Denied) for _, decided in decisions):
                assert reservation is not None
                try:
                    written = await self._write(name, lease, reservation)
                except (errors.Conflict, errors.AlreadyExists, errors.NotFound):
                    continue  # another replica wrote (or collected) it meanwhile: decide again
                self._written[namespace] = written
            self._settle(decisions)
            return
        for waiting in batch:
            waiting.settle(
                Denied(
                    f"{waiting.check.subject}: too many pods are being created at once in this "
                    "namespace while a migration holds room; retry",
                    code=429,
                )
            )

    def _settle(self, decisions: list[tuple[Waiting, ResourceList | Denied]]) -> None:
        for waiting, decided in decisions:
            if isinstance(decided, Denied):
                waiting.settle(decided)
                continue
            check = waiting.check
            self._fallback.admitted(check.namespace, decided, check.needed, check.holders)
            waiting.settle(None)

    def _in_use(self, check: PodCheck, reservation: Reservation | None) -> ResourceList:
        cached = check.cached_in_use()
        if reservation is None or not still_holds(reservation.holders, check.holders):
            return cached
        if reservation.expires <= self._clock.now():
            return cached
        return resources.maximum(cached, reservation.used)

    async def _read(self, name: str) -> Object | None:
        try:
            return await self._client.get(LEASES, name, self._namespace)
        except errors.NotFound:
            return None

    async def _write(self, name: str, lease: Object | None, reservation: Reservation) -> Object:
        metadata: dict[str, Any] = {
            "name": name,
            "labels": {LABEL_RESERVATION: "true"},
            "annotations": {ANNOTATION_RESERVATION: reservation.dumps()},
        }
        if lease is None:
            return await self._client.create(
                LEASES, {"metadata": metadata, "spec": {}}, self._namespace
            )
        metadata["namespace"] = self._namespace
        metadata["resourceVersion"] = lease["metadata"]["resourceVersion"]
        return await self._client.update(
            LEASES, {**lease, "metadata": {**lease["metadata"], **metadata}}
        )

    def _fall_back(self, namespace: str, error: errors.ApiError) -> None:
        if not self._warned:
            log.warning(
                "cannot share admissions through Leases in %s (%s): deciding pods in %s (and "
                "wherever this recurs) on this replica's ledger only; if it is permissions, "
                "grant get, list, create, update and delete on leases there",
                self._namespace,
                error,
                namespace,
            )
            self._warned = True

    async def collect(self) -> int:
        """Deletes reservation Leases expired for COLLECT_AFTER seconds (each only as read, so a
        fresh admission is never lost); returns how many went."""
        listed = await self._client.list(
            LEASES, self._namespace, label_selector=f"{LABEL_RESERVATION}=true"
        )
        cutoff = self._clock.now() - datetime.timedelta(seconds=COLLECT_AFTER)
        self._written = {
            namespace: lease
            for namespace, lease in self._written.items()
            if (kept := _reservation_of(lease)) is not None and kept.expires > cutoff
        }
        deleted = 0
        for lease in listed.get("items") or []:
            reservation = _reservation_of(lease)
            if reservation is not None and reservation.expires > cutoff:
                continue
            meta = lease["metadata"]
            try:
                await self._client.delete(
                    LEASES,
                    meta["name"],
                    self._namespace,
                    preconditions={"resourceVersion": meta["resourceVersion"]},
                )
            except (errors.NotFound, errors.Conflict):
                continue
            deleted += 1
        return deleted


def _reservation_of(lease: Object | None) -> Reservation | None:
    if lease is None:
        return None
    text = ((lease.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_RESERVATION)
    if not text:
        return None
    try:
        return Reservation.loads(text)
    except ValueError as error:
        # Counts as none (the cache still holds what is used); the next admission writes over it.
        name = (lease.get("metadata") or {}).get("name")
        log.warning("reservation Lease %s is damaged, ignoring it: %s", name, error)
        return None
