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

The reservation is ledger.py's `Tally` (a base, and each pod admitted since by uid) and expires
the ledger's `ttl` seconds after its last admission, as in ledger.py; the times are wall-clock
(the replicas share no monotonic clock). No migration leaving voids it (only one with a pod
admitted without a uid, as in ledger.py). A pod of the tally that is gone is dropped from it by
a replica that saw it go: each replica watches the pods of a namespace from its first decision
there until WATCH_AFTER seconds past its last (`PodReleaseWatch`), and the next admission it
writes leaves the pod out for every replica. A replica that did not see a pod go counts it, the
safe side: its decisions may deny what fits until the other's next write, or the reservation
ends. Expired Leases are deleted by `collect`, which every replica runs now and then.
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
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from ....generic import errors
from ....generic.client import ApiClient, WatchEvent, status_error
from ....generic.clock import Clock
from ....generic.resource import LEASES, PODS, Object
from ....generic.tasks import cancel_and_wait
from ....util.quantity import Quantity
from ....util.resources import ResourceList
from ...admission import Denied
from .ledger import AdmissionLedger, Releases, Tally, still_holds
from .validator import PodCheck, admit_locally

log = logging.getLogger(__name__)

LABEL_RESERVATION = "harvester-quota.io/room-reservation"
"""On each reservation Lease ("true"); `collect` lists by it."""
ANNOTATION_RESERVATION = "harvester-quota.io/reservation"
"""The reservation as JSON: {"base" (quantities by key), "pods" (uid -> quantities by key: each pod
admitted since the base was taken), "used" (base plus pods, what a replica before "pods" reads),
"expires" (RFC 3339), "holders" (the uids of the migrations holding room when a pod without a
uid was admitted; empty if none was)}; the namespace is in the Lease's name. Without "pods" (a
Lease from before them), "used" is the base."""
DECIDE_WITHIN = 3.0
"""Seconds one pod's decision may take while it keeps losing races for the Lease, before it is
refused with 429 (the pods rules give the webhook 5 s). Each lost race is another replica's
admission, and admissions end when the free room does, so this only bites under a flood."""
COLLECT_AFTER = 60.0
"""Seconds past its expiry before an unused reservation Lease is deleted."""
WATCH_AFTER = 60.0
"""Seconds a replica keeps watching a namespace's pods beyond the ledger's `ttl` after its last
decision there: the other replica may keep the reservation alive meanwhile, and a pod this one
did not see go counts for it. One idle watch per such namespace is all it costs."""
WATCH_TIMEOUT = 30
"""Seconds the API server keeps one watch of a namespace's pods open before it is renewed."""
WATCH_RETRY = 1.0
"""Seconds before a failed watch is started again (its gap's pods count until their reservation
ends)."""
_ENDED = frozenset({"Succeeded", "Failed"})


@dataclass(eq=False)
class Waiting:
    """A pod check queued for its namespace's lock, and its decision once made."""

    check: PodCheck
    decided: asyncio.Future[None]
    """Done when decided: None for admitted, Denied for refused."""
    uid: str = ""
    """The pod's uid ("" if the caller has none)."""

    def settle(self, denied: Denied | None) -> None:
        if self.decided.done():
            return
        if denied is None:
            self.decided.set_result(None)
        else:
            self.decided.set_exception(denied)


@dataclass(frozen=True)
class Reservation:
    tally: Tally
    expires: datetime.datetime
    holders: frozenset[str] = field(default_factory=frozenset)

    @property
    def used(self) -> ResourceList:
        """The tally's total."""
        return self.tally.total()

    def dumps(self) -> str:
        return json.dumps(
            {
                "base": _quantities(self.tally.base),
                "pods": {uid: _quantities(usage) for uid, usage in self.tally.pods.items()},
                "used": _quantities(self.used),
                "expires": self.expires.isoformat(),
                "holders": sorted(self.holders),
            }
        )

    @classmethod
    def loads(cls, text: str) -> Reservation:
        """Raises ValueError for anything but what `dumps` writes, or wrote before "pods" (a
        Lease edited by hand)."""
        try:
            data = json.loads(text)
            expires = datetime.datetime.fromisoformat(str(data["expires"]))
            tally = _tally_of(data)
            holders = frozenset(str(h) for h in data["holders"])
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as error:
            raise ValueError(f"not a reservation: {error}") from error
        if expires.tzinfo is None:
            raise ValueError(f"not a reservation: expires has no time zone: {data['expires']!r}")
        return cls(tally, expires, holders)


def _quantities(usage: ResourceList) -> dict[str, str]:
    return {key: str(value) for key, value in sorted(usage.items())}


def _parsed(data: Any) -> ResourceList:
    return {str(key): Quantity.parse(str(value)) for key, value in data.items()}


def _tally_of(data: Any) -> Tally:
    """The tally a reservation's JSON holds; from before "pods", its "used" as the base."""
    if "pods" not in data:
        return Tally(_parsed(data["used"]))
    pods = {str(uid): _parsed(usage) for uid, usage in data["pods"].items()}
    return Tally(_parsed(data["base"]), pods)


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
        lasts as long as the ledger's (its `ttl`), whichever of the two holds it, and both credit
        the pods its `releases` were told went (by `watch`)."""
        self._client = client
        self._namespace = namespace
        self._clock = clock
        self._fallback = fallback
        self.watch = PodReleaseWatch(client, clock, fallback.releases)
        """The pods of the namespaces decided lately, watched for the ones that go."""
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._users: Counter[str] = Counter()
        """Decisions under way or waiting, per namespace: its lock goes when none is left."""
        self._queued: dict[str, list[Waiting]] = {}
        """Checks waiting for their namespace's lock and not yet taken into a batch."""
        self._leases = ReservationLeases(client, namespace, clock)
        self._warned = False

    async def admit(self, check: PodCheck, uid: str = "") -> None:
        """Raises Denied unless the pod fits next to the shared reservation; records it if so,
        by `uid` ("" if unknown: then as ledger.py counts a pod without one), and from then on
        watches the namespace's pods for those that go."""
        namespace = check.namespace
        if uid:
            self.watch.follow(namespace, self._fallback.ttl + WATCH_AFTER)
        waiting = Waiting(check, asyncio.get_running_loop().create_future(), uid)
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
                    self._admit_locally(waiting)
                except Denied as denied:
                    waiting.settle(denied)
                else:
                    waiting.settle(None)

    def _admit_locally(self, waiting: Waiting) -> None:
        """admit_locally, recording the pod by its uid."""
        check = waiting.check
        if not waiting.uid:
            admit_locally(check, self._fallback)
            return
        in_use = self._fallback.in_use(check.namespace, check.cached_in_use(), check.holders)
        check.decide(in_use)
        self._fallback.admitted(check.namespace, in_use, check.needed, check.holders, waiting.uid)

    async def _decide_shared(self, namespace: str, batch: list[Waiting]) -> None:
        """Decides the checks one after another, each on the reservation the ones before it
        left, and settles them once the Lease holds what they admitted (none admitted: nothing
        is written); a lost race decides them all again, until DECIDE_WITHIN has passed."""
        deadline = self._clock.monotonic() + DECIDE_WITHIN
        while self._clock.monotonic() < deadline:
            lease = await self._leases.latest(namespace)
            reservation = _reservation_of(lease)
            decisions: list[tuple[Waiting, ResourceList | Denied]] = []
            for waiting in batch:
                reservation = self._live(waiting.check, reservation)
                in_use = waiting.check.cached_in_use()
                if reservation is not None:
                    in_use = reservation.tally.in_use(in_use)
                try:
                    waiting.check.decide(in_use)
                except Denied as denied:
                    decisions.append((waiting, denied))
                    continue
                decisions.append((waiting, in_use))
                reservation = self._admitted(reservation, waiting, in_use)
            if any(not isinstance(decided, Denied) for _, decided in decisions):
                assert reservation is not None
                try:
                    await self._leases.write(namespace, lease, reservation)
                except (errors.Conflict, errors.AlreadyExists, errors.NotFound):
                    continue  # another replica wrote (or collected) it meanwhile: decide again
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
            self._fallback.admitted(
                check.namespace, decided, check.needed, check.holders, waiting.uid
            )
            waiting.settle(None)

    def _live(self, check: PodCheck, reservation: Reservation | None) -> Reservation | None:
        """`reservation` without the pods seen going, or None if it counts for nothing now:
        expired, or void (a pod without a uid admitted under a migration no longer holding
        room)."""
        if reservation is None or not still_holds(reservation.holders, check.holders):
            return None
        if reservation.expires <= self._clock.now():
            return None
        tally = reservation.tally.without(self._fallback.releases.gone(check.namespace))
        return Reservation(tally, reservation.expires, reservation.holders)

    def _admitted(
        self, live: Reservation | None, waiting: Waiting, in_use: ResourceList
    ) -> Reservation:
        """The reservation once `waiting`'s pod is admitted on `in_use`, for another `ttl`."""
        tally = Tally() if live is None else live.tally
        holders: frozenset[str] = frozenset() if live is None else live.holders
        return Reservation(
            tally.admit(in_use, waiting.uid, waiting.check.needed),
            self._clock.now() + datetime.timedelta(seconds=self._fallback.ttl),
            holders if waiting.uid else waiting.check.holders,
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
        """Deletes reservation Leases expired for COLLECT_AFTER seconds (ReservationLeases.collect);
        returns how many went."""
        return await self._leases.collect()


class ReservationLeases:
    """The reservation Leases in the webhook's `namespace`, one per tenant namespace (`lease_name`):
    read, written conditional on the version read (or created), deleted once expired.

    The Lease a write returned is kept: the next decision in that tenant namespace starts from it
    instead of a GET (if another replica wrote since, the conditional write fails and the Lease is
    read). Event loop only; the callers serialize the decisions of one tenant namespace.
    """

    def __init__(self, client: ApiClient, namespace: str, clock: Clock) -> None:
        self._client = client
        self._namespace = namespace
        self._clock = clock
        self._written: dict[str, Object] = {}
        """Tenant namespace -> its Lease as our last write returned it."""

    async def latest(self, tenant: str) -> Object | None:
        """The tenant namespace's Lease as our last write returned it (once: a write that fails
        reads it next time), else as read now; None if there is none."""
        return self._written.pop(tenant, None) or await self._read(lease_name(tenant))

    async def write(self, tenant: str, lease: Object | None, reservation: Reservation) -> None:
        """Writes `reservation` into `lease` (None: creates it), conditional on its version;
        Conflict, AlreadyExists or NotFound when another replica wrote or collected it."""
        self._written[tenant] = await self._write(lease_name(tenant), lease, reservation)

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

    async def collect(self) -> int:
        """Deletes reservation Leases expired for COLLECT_AFTER seconds (each only as read, so a
        fresh admission is never lost), and forgets our writes of them; returns how many went."""
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


class PodReleaseWatch:
    """Watches the pods of the namespaces it is asked to follow and tells `releases` of each one
    that goes: deleted, or ended (Succeeded or Failed, which quota no longer charges; only the
    kubelet writes a pod's status). A namespace is followed until the time asked last; a watch
    the API server ends is renewed from its last version, and one that fails is started again
    from now, after WATCH_RETRY seconds (what went in between is not told: it keeps counting)."""

    def __init__(self, client: ApiClient, clock: Clock, releases: Releases) -> None:
        self._client = client
        self._clock = clock
        self._releases = releases
        self._until: dict[str, float] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def follow(self, namespace: str, seconds: float) -> None:
        """Watches `namespace`'s pods for at least `seconds` more."""
        until = self._clock.monotonic() + seconds
        self._until[namespace] = max(until, self._until.get(namespace, until))
        running = self._tasks.get(namespace)
        if running is None or running.done():
            task = asyncio.ensure_future(self._watch(namespace))
            self._tasks[namespace] = task
            task.add_done_callback(lambda done: self._ended(namespace, done))

    async def stop(self) -> None:
        """Ends every watch."""
        await cancel_and_wait(list(self._tasks.values()))

    def _ended(self, namespace: str, task: asyncio.Task[None]) -> None:
        if self._tasks.get(namespace) is task:
            del self._tasks[namespace]
            self._until.pop(namespace, None)

    def _remaining(self, namespace: str) -> float:
        return self._until.get(namespace, 0.0) - self._clock.monotonic()

    async def _watch(self, namespace: str) -> None:
        version: str | None = None
        while self._remaining(namespace) > 0:
            started = self._clock.monotonic()
            version = await self._watch_once(namespace, version)
            if self._clock.monotonic() - started < WATCH_RETRY:
                await self._clock.sleep(WATCH_RETRY)  # ended at once: never a hot loop

    async def _watch_once(self, namespace: str, version: str | None) -> str | None:
        """One watch, from `version` (None: from now); the version to go on from (None: start
        again from now, what went in between not told)."""
        try:
            return await self._follow_events(
                namespace, version or await self._version_now(namespace)
            )
        except errors.Gone:
            return None
        except errors.ApiError as error:
            log.debug("watch of the pods of %s failed, started again: %s", namespace, error)
            return None

    async def _version_now(self, namespace: str) -> str:
        """A version to watch the namespace's pods from: the present (one pod listed at most)."""
        listed = await self._client.list(PODS, namespace, limit=1)
        return str((listed.get("metadata") or {}).get("resourceVersion") or "")

    async def _follow_events(self, namespace: str, version: str) -> str:
        """Follows one watch until the API server ends it; the last version it told of."""
        seconds = max(1, min(WATCH_TIMEOUT, math.ceil(self._remaining(namespace))))
        async for event in self._client.watch(
            PODS,
            namespace,
            resource_version=version or None,
            timeout_seconds=seconds,
            read_timeout=seconds + WATCH_RETRY * 10,
        ):
            if event.type == "ERROR":
                raise status_error(event.object)
            metadata = event.object.get("metadata") or {}
            version = str(metadata.get("resourceVersion") or version)
            if _gone(event) and metadata.get("uid"):
                self._releases.released(namespace, str(metadata["uid"]))
        return version


def _gone(event: WatchEvent) -> bool:
    """Whether the event tells of a pod that quota no longer charges."""
    if event.type == "DELETED":
        return True
    phase = (event.object.get("status") or {}).get("phase")
    return event.type in ("ADDED", "MODIFIED") and phase in _ENDED
