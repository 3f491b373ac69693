"""Webhook replicas share what they admitted while room is held, through a Lease per tenant
namespace (pkg/webhook/resources/pod/reservations.py), on an in-memory API and a fake clock."""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from harvester_quota.generic import errors
from harvester_quota.generic.resource import LEASES, Object
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.util.quantity import Quantity
from harvester_quota.webhook.admission import Denied
from harvester_quota.webhook.resources.common import Identities
from harvester_quota.webhook.resources.pod.ledger import AdmissionLedger, Tally
from harvester_quota.webhook.resources.pod.reservations import (
    ANNOTATION_RESERVATION,
    LeaseReservations,
    Reservation,
    lease_name,
)
from harvester_quota.webhook.resources.pod.validator import PodCheck
from harvester_quota.webhook.server import WebhookServer
from harvester_quota.webhook.serving import RoomSharing
from prometheus_client import CollectorRegistry

from tests.unit.fakes import FakeApi, pod_check
from tests.unit.test_webhook import FakeLookups, create_pod, room_held
from tests.unit.test_webhook import review as webhook_review

SYSTEM = "harvester-system"


def replica(api: FakeApi, clock: FakeClock, ttl: float = 30) -> LeaseReservations:
    """One webhook replica: its own ledger, the shared API."""
    return LeaseReservations(api, SYSTEM, clock, AdmissionLedger(clock, ttl=ttl))  # type: ignore[arg-type]


def check(lookups: FakeLookups, name: str, cpu: str) -> PodCheck:
    found = pod_check(create_pod(name, cpu), lookups, Identities())
    assert found is not None, "room is held: the pod is checked"
    return found


async def test_two_replicas_deciding_on_the_same_cache_do_not_share_the_free_room() -> None:
    """985m free under the base, the caches of both replicas never learn of admitted pods: the
    replicas take turns and together admit 9 pods of 100m, never more."""
    api, clock, lookups = FakeApi(), FakeClock(), FakeLookups()
    room_held(lookups)
    replicas = [replica(api, clock), replica(api, clock)]
    admitted = 0
    for index in range(12):
        try:
            await replicas[index % 2].admit(check(lookups, f"p{index}", "100m"))
            admitted += 1
        except Denied as denied:
            assert "in use 2915m" in denied.message, denied.message
    assert admitted == 9
    lease = await api.get(LEASES, lease_name("ns"), SYSTEM)
    stored = Reservation.loads(lease["metadata"]["annotations"][ANNOTATION_RESERVATION])
    assert str(stored.used["limits.cpu"]) == "2915m"


class RacingApi(FakeApi):
    """Runs `race` (another replica's admission) just before the next update of a Lease."""

    race: Callable[[], Awaitable[None]] | None = None

    async def update(self, resource: Any, obj: Object, *, subresource: str = "") -> Object:
        race, self.race = self.race, None
        if race is not None:
            await race()
        return await super().update(resource, obj, subresource=subresource)


async def test_a_lost_race_is_decided_again_on_the_winners_reservation() -> None:
    """Replica two reads the reservation, replica one writes meanwhile: two's write conflicts,
    and it decides again counting one's pod, so 885m free take one 800m pod, not two."""
    api, clock, lookups = RacingApi(), FakeClock(), FakeLookups()
    room_held(lookups)
    one, two = replica(api, clock), replica(api, clock)
    await one.admit(check(lookups, "p0", "100m"))  # the Lease exists: the next writes update
    api.race = lambda: one.admit(check(lookups, "p1", "800m"))
    with pytest.raises(Denied) as denied:
        await two.admit(check(lookups, "p2", "800m"))
    assert "in use 2915m" in denied.value.message
    lease = await api.get(LEASES, lease_name("ns"), SYSTEM)
    stored = Reservation.loads(lease["metadata"]["annotations"][ANNOTATION_RESERVATION])
    assert str(stored.used["limits.cpu"]) == "2915m", "p0 and p1, each once"


class SlowWritingApi(RacingApi):
    """Lease writes take a turn of the event loop, as a round trip to the API server does."""

    async def create(self, resource: Any, obj: Object, namespace: str | None = None) -> Object:
        await asyncio.sleep(0)
        return await super().create(resource, obj, namespace)

    async def update(self, resource: Any, obj: Object, *, subresource: str = "") -> Object:
        await asyncio.sleep(0)
        return await super().update(resource, obj, subresource=subresource)


async def admit_all(shared: LeaseReservations, checks: list[PodCheck]) -> list[bool]:
    """Admits the checks at once; whether each was admitted (a denial names the usage)."""
    outcomes = await asyncio.gather(*(shared.admit(c) for c in checks), return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException) and not isinstance(outcome, Denied):
            raise outcome
    return [outcome is None for outcome in outcomes]


async def stored_cpu(api: FakeApi) -> str:
    lease = await api.get(LEASES, lease_name("ns"), SYSTEM)
    stored = Reservation.loads(lease["metadata"]["annotations"][ANNOTATION_RESERVATION])
    return str(stored.used["limits.cpu"])


async def test_pods_queued_behind_a_write_are_decided_in_order_and_written_in_one() -> None:
    """12 pods of 100m at once, 985m free: the first is written alone, the 11 that queued
    meanwhile in one write, and as one at a time would: the first 9 admitted, 3 refused."""
    api, clock, lookups = SlowWritingApi(), FakeClock(), FakeLookups()
    room_held(lookups)
    shared = replica(api, clock)
    admitted = await admit_all(shared, [check(lookups, f"p{i}", "100m") for i in range(12)])
    assert admitted == [True] * 9 + [False] * 3
    assert [verb for verb, _, _ in api.calls] == ["get", "create", "update"]
    assert await stored_cpu(api) == "2915m"


async def test_a_pod_whose_admission_was_cancelled_in_the_queue_reserves_nothing() -> None:
    api, clock, lookups = SlowWritingApi(), FakeClock(), FakeLookups()
    room_held(lookups)
    shared = replica(api, clock)
    first, gone, last = (
        asyncio.ensure_future(shared.admit(check(lookups, name, "100m")))
        for name in ("p0", "gone", "p1")
    )
    await asyncio.sleep(0)  # p0 is writing, the other two wait for the lock
    gone.cancel()
    await asyncio.gather(first, last)
    assert gone.cancelled()
    assert await stored_cpu(api) == "2215m", "p0 and p1 only"


async def test_a_batch_that_lost_a_race_is_decided_again_whole() -> None:
    """Five 100m pods at once, 985m free: the first creates the Lease, and while the other four
    are written as one batch another replica takes 500m. The batch's write conflicts, and on the
    winner's reservation only three of the four fit (385m free)."""
    api, clock, lookups = SlowWritingApi(), FakeClock(), FakeLookups()
    room_held(lookups)
    one, two = replica(api, clock), replica(api, clock)
    api.race = lambda: two.admit(check(lookups, "other", "500m"))  # on the first update
    admitted = await admit_all(one, [check(lookups, f"p{i}", "100m") for i in range(5)])
    assert admitted == [True, True, True, True, False]
    assert await stored_cpu(api) == "2915m", "p0, the other replica's 500m and p1-p3, each once"


async def test_an_expired_or_other_migrations_reservation_counts_for_nothing() -> None:
    api, clock, lookups = FakeApi(), FakeClock(), FakeLookups()
    room_held(lookups)
    shared = replica(api, clock, ttl=30)
    await shared.admit(check(lookups, "p0", "900m"))
    with pytest.raises(Denied):
        await shared.admit(check(lookups, "p1", "900m"))
    clock.step(30)
    await shared.admit(check(lookups, "p1", "900m"))  # p0 was deleted: the cache says so
    lookups.migration_list[0]["metadata"]["uid"] = "another-migration"
    await replica(api, clock).admit(check(lookups, "p2", "900m"))


async def test_without_the_lease_a_replica_decides_on_its_own_ledger_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api, clock, lookups = FakeApi(), FakeClock(), FakeLookups()
    room_held(lookups)
    alone = replica(api, clock)
    api.fail_next = [errors.Forbidden("leases is forbidden", reason="Forbidden")]
    with caplog.at_level(logging.WARNING):
        await alone.admit(check(lookups, "p0", "900m"))
    assert "cannot share admissions through Leases in harvester-system" in caplog.text
    api.fail_next = [errors.Forbidden("leases is forbidden", reason="Forbidden")]
    with pytest.raises(Denied):
        await alone.admit(check(lookups, "p1", "900m"))  # its ledger still counts p0


async def test_expired_reservation_leases_are_collected_and_fresh_ones_kept() -> None:
    api, clock, lookups = FakeApi(), FakeClock(), FakeLookups()
    room_held(lookups)
    shared = replica(api, clock, ttl=30)
    await shared.admit(check(lookups, "p0", "100m"))
    assert await shared.collect() == 0
    clock.step(30 + 59)
    assert await shared.collect() == 0, "kept for a minute past its expiry"
    clock.step(1)
    assert await shared.collect() == 1
    assert (await api.list(LEASES, SYSTEM))["items"] == []


def test_a_reservation_round_trips_and_garbage_is_refused() -> None:
    reservation = Reservation(
        Tally(
            {"limits.cpu": Quantity.parse("2015m")},
            {"uid-p0": {"limits.cpu": Quantity.parse("900m")}},
        ),
        datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
        frozenset({"b", "a"}),
    )
    assert Reservation.loads(reservation.dumps()) == reservation
    assert json.loads(reservation.dumps())["used"] == {"limits.cpu": "2915m"}, "for older replicas"
    before_pods = '{"used": {"cpu": "1"}, "expires": "2026-01-01T00:00:00+00:00", "holders": []}'
    assert Reservation.loads(before_pods).tally == Tally({"cpu": Quantity.parse("1")})
    for garbage in (
        "{",
        "[]",
        '{"used": {}}',
        '{"used": {"cpu": "x"}, "expires": "2026-01-01T00:00:00+00:00", "holders": []}',
        '{"used": [], "expires": "2026-01-01T00:00:00+00:00", "holders": []}',
        '{"used": {}, "expires": "2026-01-01T00:00:00", "holders": []}',  # no time zone
    ):
        with pytest.raises(ValueError):
            Reservation.loads(garbage)


async def test_a_lease_edited_by_hand_counts_for_nothing_and_is_written_over() -> None:
    api, clock, lookups = FakeApi(), FakeClock(), FakeLookups()
    room_held(lookups)
    await api.create(
        LEASES,
        {"metadata": {"name": lease_name("ns"), "annotations": {ANNOTATION_RESERVATION: "{"}}},
        SYSTEM,
    )
    await replica(api, clock).admit(check(lookups, "p0", "900m"))
    lease = await api.get(LEASES, lease_name("ns"), SYSTEM)
    stored = Reservation.loads(lease["metadata"]["annotations"][ANNOTATION_RESERVATION])
    assert str(stored.used["limits.cpu"]) == "2915m"


async def test_a_replica_reads_the_lease_only_when_it_lost_a_race() -> None:
    """One request per decision: each write starts from the Lease the last write returned."""
    api, clock, lookups = FakeApi(), FakeClock(), FakeLookups()
    room_held(lookups)
    shared = replica(api, clock)
    for index in range(3):
        await shared.admit(check(lookups, f"p{index}", "100m"))
    assert [verb for verb, _, _ in api.calls] == ["get", "create", "update", "update"]


class AlwaysLosingApi(FakeApi):
    """Another replica writes the Lease before each of ours, one second apart."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock

    async def update(self, resource: Any, obj: Object, *, subresource: str = "") -> Object:
        current = await self.get(LEASES, obj["metadata"]["name"], SYSTEM)
        current["metadata"]["namespace"] = SYSTEM
        await super().update(LEASES, current)  # the other replica's write: a new version
        self.clock.step(1.0)
        return await super().update(resource, obj, subresource=subresource)


async def test_a_pod_that_keeps_losing_races_is_refused_for_a_retry_never_let_through() -> None:
    clock = FakeClock()
    api, lookups = AlwaysLosingApi(clock), FakeLookups()
    room_held(lookups)
    shared = replica(api, clock)
    await shared.admit(check(lookups, "p0", "100m"))  # created: no race yet
    with pytest.raises(Denied) as denied:
        await shared.admit(check(lookups, "p1", "100m"))
    assert denied.value.code == 429 and "retry" in denied.value.message
    lease = await api.get(LEASES, lease_name("ns"), SYSTEM)
    stored = Reservation.loads(lease["metadata"]["annotations"][ANNOTATION_RESERVATION])
    assert str(stored.used["limits.cpu"]) == "2115m", "p1 was not recorded anywhere"


async def test_a_dry_run_is_decided_but_reserves_nothing_anywhere() -> None:
    """The pods rules declare sideEffects NoneOnDryRun: a dry run neither writes the Lease nor
    enters the ledger, so it takes no room from the pods that will really be created."""
    api, clock, lookups = FakeApi(), FakeClock(), FakeLookups()
    room_held(lookups)
    ledger = AdmissionLedger(clock, ttl=30)
    server = WebhookServer(
        lookups,
        clock=clock,
        registry=CollectorRegistry(),
        sharing=RoomSharing(
            ledger=ledger,
            reservations=LeaseReservations(api, SYSTEM, clock, ledger),  # type: ignore[arg-type]
        ),
    )

    def review(name: str, cpu: str, *, dry_run: bool) -> bytes:
        body = json.loads(webhook_review("Pod", create_pod(name, cpu).obj))
        body["request"]["dryRun"] = dry_run
        return json.dumps(body).encode()

    async def allowed(name: str, cpu: str, *, dry_run: bool) -> bool:
        answer = await server.review("pods", review(name, cpu, dry_run=dry_run))
        return bool(json.loads(answer.body)["response"]["allowed"])  # type: ignore[arg-type]

    assert await allowed("dry", "900m", dry_run=True)
    assert await allowed("dry-again", "900m", dry_run=True), "the first dry run reserved nothing"
    assert api.calls == [], "no Lease read or written for a dry run"
    assert await allowed("real", "900m", dry_run=False)
    assert not await allowed("dry-after", "900m", dry_run=True), "decided on what is reserved"
