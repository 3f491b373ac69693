"""Leader election on a coordination.k8s.io Lease, as client-go's leaderelection does it.

Only one replica of the controllers may write quotas at a time (one planner per namespace,
conditional writers, in one process). The Lease records a holder and a renew time; a candidate
takes it over once the holder has not renewed for ``lease_duration``. Expiry is judged by *local*
observation time (when this process last saw the record change), never by comparing the holder's
timestamps with our clock, so clock skew between machines cannot make two leaders. Defaults are
controller-runtime's: 15 s lease, 10 s renew deadline, 2 s retry. On shutdown the leader releases
the lease (holder cleared, 1 s duration) so a successor takes over at once instead of waiting out the lease.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from . import errors
from .client import ApiClient
from .clock import REAL_CLOCK, Clock, wait_at_most
from .resource import LEASES, Object
from .tasks import cancel_and_wait

log = logging.getLogger(__name__)

JITTER_FACTOR = 1.2


def format_micro_time(moment: datetime.datetime) -> str:
    """Kubernetes MicroTime: RFC 3339 with microseconds, UTC, 'Z'."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LeaderElectionConfig:
    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    release_on_cancel: bool = True
    annotations: Mapping[str, str | None] = field(default_factory=dict)
    """Annotations the holder keeps on the Lease at each write (None: removed), so that a
    reader sees how the leader runs; others' annotations are left as they are."""

    def __post_init__(self) -> None:
        if not self.lease_duration > self.renew_deadline > JITTER_FACTOR * self.retry_period > 0:
            raise ValueError(
                "leader election needs lease_duration > renew_deadline > 1.2 * retry_period > 0"
            )


def lease_metadata(previous: Object, wanted: Mapping[str, str | None]) -> Object:
    """`previous` Lease metadata with the `wanted` annotations set (None: removed); others'
    annotations kept, no empty annotations map left behind."""
    annotations = dict(previous.get("annotations") or {})
    for key, value in wanted.items():
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
    out = {**previous, "annotations": annotations}
    if not annotations:
        del out["annotations"]
    return out


def holder_spec(
    config: LeaderElectionConfig,
    now_wall: datetime.datetime,
    *,
    acquire_time: datetime.datetime | None,
    transitions: int,
    previous: Object | None = None,
) -> Object:
    """The Lease spec of `config.identity` holding it, renewed at `now_wall` (acquired at
    `acquire_time` if given; else `previous`'s acquireTime stays), other fields of `previous` kept."""
    spec = dict(previous or {})
    spec.update(
        {
            "holderIdentity": config.identity,
            "leaseDurationSeconds": int(config.lease_duration),
            "renewTime": format_micro_time(now_wall),
            "leaseTransitions": transitions,
        }
    )
    if acquire_time is not None:
        spec["acquireTime"] = format_micro_time(acquire_time)
    return spec


def _record(spec: Object) -> tuple[object, object, object]:
    """What identifies one write of the Lease record: holder, renew time and transitions."""
    return (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseTransitions"))


class LeaseObservation:
    """What this replica has seen of the Lease, timed on its own monotonic clock: the last lease
    read or written, when its record last changed (expiry is judged from that, never from the
    holder's timestamps, so clock skew cannot make two leaders), its holder, and when the API
    server last answered. `on_new_leader(holder)` is told each time a new non-empty holder is
    seen. Event loop only."""

    def __init__(self, clock: Clock, on_new_leader: Callable[[str], None]) -> None:
        self._clock = clock
        self._on_new_leader = on_new_leader
        self.lease: Object | None = None
        self.holder = ""
        self.changed_at = 0.0
        self._last_contact: float | None = None

    def contacted_within(self, seconds: float) -> bool:
        """Whether the Lease was read or written within the last `seconds`."""
        return (
            self._last_contact is not None
            and self._clock.monotonic() - self._last_contact < seconds
        )

    def observe(self, lease: Object) -> None:
        """Remembers `lease`, read or written now; its record's change time moves only if the
        record differs from the one seen before (a first one always does)."""
        self._last_contact = self._clock.monotonic()
        spec = lease.get("spec") or {}
        previous = (self.lease or {}).get("spec")
        if _record(spec) != (_record(previous) if previous else None):
            self.changed_at = self._clock.monotonic()
        holder = spec.get("holderIdentity") or ""
        if holder != self.holder:
            self.holder = holder
            if holder:
                self._on_new_leader(holder)
        self.lease = lease


class LeaderElector:
    """Campaigns for the Lease, calls ``on_started_leading`` once won, renews until lost."""

    def __init__(
        self,
        client: ApiClient,
        config: LeaderElectionConfig,
        *,
        on_started_leading: Callable[[], Awaitable[None]],
        on_stopped_leading: Callable[[], None] = lambda: None,
        on_new_leader: Callable[[str], None] = lambda identity: None,
        clock: Clock = REAL_CLOCK,
        rng: random.Random | None = None,
    ) -> None:
        self._client = client
        self.config = config
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._clock = clock
        self._rng = rng or random.Random()
        self._seen = LeaseObservation(clock, on_new_leader)
        self.leading = False

    def healthy(self) -> bool:
        """True while this replica has read or written the Lease within the lease duration: a
        standby that can reach the API server is ready to take over; one that cannot is not."""
        return self._seen.contacted_within(self.config.lease_duration)

    async def run(self) -> None:
        """Acquires, leads (running on_started_leading beside the renew loop), and on losing
        the lease or being cancelled stops leading; releases the lease if configured."""
        await self._acquire()
        work = asyncio.ensure_future(self._on_started())
        renew = asyncio.ensure_future(self._renew_loop())
        try:
            await asyncio.wait({work, renew}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            await cancel_and_wait((work, renew))
            self.leading = False
            self._on_stopped()
            if self.config.release_on_cancel:
                await asyncio.shield(self._release())

    async def _acquire(self) -> None:
        while not await self._try_acquire_or_renew():
            await self._clock.sleep(
                self.config.retry_period * (1 + self._rng.random() * (JITTER_FACTOR - 1))
            )
        self.leading = True
        log.info(
            "%s became leader of lease %s/%s",
            self.config.identity,
            self.config.namespace,
            self.config.name,
        )

    async def _renew_loop(self) -> None:
        """Renews every retry period; returns (so the leader stops acting) once a renewal has
        not succeeded within the renew deadline.

        Every attempt, however slow the API server, is cut off at the deadline (client-go bounds
        the whole renewal by a context with that timeout): a request hanging on a frozen server
        must not keep a leader acting past the point where another replica may take the Lease
        (the deadline is shorter than the lease duration the others wait out).
        """
        while True:
            deadline = self._clock.monotonic() + self.config.renew_deadline
            while True:
                if await self._attempt_before(deadline):
                    break
                if self._clock.monotonic() >= deadline:
                    log.error(
                        "%s could not renew the lease within %.0fs: stopping leading",
                        self.config.identity,
                        self.config.renew_deadline,
                    )
                    return
                await self._clock.sleep(
                    min(self.config.retry_period, max(deadline - self._clock.monotonic(), 0.0))
                )
            await self._clock.sleep(self.config.retry_period)

    async def _attempt_before(self, deadline: float) -> bool:
        """One acquire-or-renew attempt, cancelled if it is still running at `deadline` (then
        False: not renewed). Timed on the elector's clock."""
        remaining = deadline - self._clock.monotonic()
        if remaining <= 0:
            return False
        attempt = asyncio.ensure_future(self._try_acquire_or_renew())
        try:
            await wait_at_most(self._clock, attempt, remaining)
        finally:
            if not attempt.done():
                attempt.cancel()
                log.warning(
                    "%s: renewing lease %s took longer than the renew deadline; cancelled",
                    self.config.identity,
                    self.config.name,
                )
            await asyncio.gather(attempt, return_exceptions=True)
        return attempt.done() and not attempt.cancelled() and attempt.result() is True

    # One attempt ----------------------------------------------------------------------------------

    async def _try_acquire_or_renew(self) -> bool:
        now_wall = self._clock.now()
        try:
            lease = await self._client.get(LEASES, self.config.name, self.config.namespace)
        except errors.NotFound:
            return await self._create(now_wall)
        except errors.ApiError as error:
            log.warning("getting lease %s failed: %s", self.config.name, error)
            return False
        self._seen.observe(lease)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        held_by_other = holder and holder != self.config.identity
        duration = float(spec.get("leaseDurationSeconds") or self.config.lease_duration)
        if held_by_other and self._seen.changed_at + duration > self._clock.monotonic():
            return False
        return await self._update(lease, now_wall, took_over=holder != self.config.identity)

    async def _create(self, now_wall: datetime.datetime) -> bool:
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": lease_metadata(
                {"name": self.config.name, "namespace": self.config.namespace},
                self.config.annotations,
            ),
            "spec": holder_spec(self.config, now_wall, acquire_time=now_wall, transitions=0),
        }
        return await self._write("creating", self._client.create(LEASES, lease))

    async def _update(self, lease: Object, now_wall: datetime.datetime, *, took_over: bool) -> bool:
        spec = lease.get("spec") or {}
        transitions = int(spec.get("leaseTransitions") or 0) + (1 if took_over else 0)
        acquire = now_wall if took_over else None
        lease = {
            **lease,
            "metadata": lease_metadata(lease.get("metadata") or {}, self.config.annotations),
            "spec": holder_spec(
                self.config, now_wall, acquire_time=acquire, transitions=transitions, previous=spec
            ),
        }
        return await self._write("updating", self._client.update(LEASES, lease))

    async def _write(self, verb: str, write: Awaitable[Object]) -> bool:
        """Awaits ``write`` of the lease: True with the written lease observed, or False (logged
        as ``verb`` the lease failed) when the API server refused it or could not be reached."""
        try:
            written = await write
        except errors.ApiError as error:
            log.info("%s lease %s failed: %s", verb, self.config.name, error)
            return False
        self._seen.observe(written)
        return True

    async def _release(self) -> None:
        """Gives the lease up so that a successor does not wait out the lease duration.

        A renew cancelled at its deadline may still have been written: the lease then moved past
        the one observed and the release meets a Conflict. It reads the lease once more and, if
        it is still ours, releases that (once: a successor's lease is never touched)."""
        lease = self._seen.lease
        for attempt in range(2):
            spec = (lease or {}).get("spec") or {}
            if lease is None or spec.get("holderIdentity") != self.config.identity:
                return
            now = format_micro_time(self._clock.now())
            try:
                await self._client.update(LEASES, released_lease(lease, now))
            except errors.Conflict as error:
                if attempt:
                    log.warning("releasing lease %s failed: %s", self.config.name, error)
                    return
                lease = await read_lease(self._client, self.config)
                continue
            except errors.ApiError as error:
                log.warning("releasing lease %s failed: %s", self.config.name, error)
                return
            log.info("%s released lease %s", self.config.identity, self.config.name)
            return


def released_lease(lease: Object, now: str) -> Object:
    """`lease` given up at `now` (a MicroTime): no holder, a 1 s duration (client-go's release)."""
    spec = {
        **(lease.get("spec") or {}),
        "holderIdentity": "",
        "leaseDurationSeconds": 1,
        "renewTime": now,
        "acquireTime": now,
    }
    return {**lease, "spec": spec}


async def read_lease(client: ApiClient, config: LeaderElectionConfig) -> Object | None:
    """The lease as it is now, or None if it cannot be read (logged)."""
    try:
        return await client.get(LEASES, config.name, config.namespace)
    except errors.ApiError as error:
        log.warning("releasing lease %s: cannot read it: %s", config.name, error)
        return None
