"""A reservation of admitted pods outlives a migration that leaves, and gives back the pods seen
going: a tenant who waits for a migration to leave has its next pods counted next to the ones
admitted a moment ago (the cache not showing them yet), and an honest tenant who deleted the pods
of a burst may create others at once (tests/integration/test_room_race.py's rounds).

985m of limits.cpu is free under the base in `room_held`'s namespace (2015m of 3000m used)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
from harvester_quota.generic import errors
from harvester_quota.generic.client import WatchEvent
from harvester_quota.generic.resource import LEASES, Object
from harvester_quota.testbench.clock import FakeClock, settle
from harvester_quota.util.quantity import Quantity
from harvester_quota.webhook.admission import Denied
from harvester_quota.webhook.resources.common import Identities
from harvester_quota.webhook.resources.pod.ledger import (
    MAX_PODS,
    MAX_RELEASES,
    RELEASES_KEPT,
    AdmissionLedger,
    Releases,
    Tally,
)
from harvester_quota.webhook.resources.pod.reservations import (
    ANNOTATION_RESERVATION,
    LeaseReservations,
    PodReleaseWatch,
    Reservation,
    lease_name,
)
from harvester_quota.webhook.resources.pod.validator import PodCheck, admit_locally

from tests.unit.fakes import FakeApi, pod_check
from tests.unit.test_reservations import SYSTEM, check
from tests.unit.test_webhook import FakeLookups, create_pod, room_held


def followed(watch: PodReleaseWatch) -> int:
    """Namespaces `watch` is watching now."""
    return sum(1 for task in watch._tasks.values() if not task.done())


def after_leaving(found: PodCheck) -> PodCheck:
    """`found` as decided once the migration the reservation was made under left (completed, or
    deleted by the tenant) and the tenant's next migration holds room instead."""
    return dataclasses.replace(found, holders=frozenset({"tenants-next-migration"}))


def admit(ledger: AdmissionLedger, found: PodCheck, uid: str) -> None:
    """What the pod rule does with this process's ledger, for a pod with `uid`."""
    in_use = ledger.in_use(found.namespace, found.cached_in_use(), found.holders)
    found.decide(in_use)
    ledger.admitted(found.namespace, in_use, found.needed, found.holders, uid)


def replica(api: FakeApi, clock: FakeClock) -> tuple[LeaseReservations, Releases]:
    """One webhook replica and the record of the pods it saw go (the tests tell it what went:
    `no_watch`)."""
    ledger = AdmissionLedger(clock, ttl=30)
    return LeaseReservations(api, SYSTEM, clock, ledger), ledger.releases  # type: ignore[arg-type]


@pytest.fixture
def no_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The replicas here are told what went; PodReleaseWatch has its own tests below."""
    monkeypatch.setattr(PodReleaseWatch, "follow", lambda *_args: None)


# The attack: a migration leaving voided the reservation.


def test_a_migration_leaving_voids_no_reservation_of_this_replica() -> None:
    """p0 (900m) admitted under M; M leaves before the cache shows p0. The ledger dropped the
    reservation, so p1 (900m) got in on the cache alone: 1800m into 985m. Now p1 is denied, and
    it is still denied after the TTL of nothing else: only p0 going frees its room."""
    lookups, clock = FakeLookups(), FakeClock()
    room_held(lookups)
    ledger = AdmissionLedger(clock, ttl=30)
    admit(ledger, check(lookups, "p0", "900m"), "uid-p0")
    clock.step(29)
    with pytest.raises(Denied) as denied:
        admit(ledger, after_leaving(check(lookups, "p1", "900m")), "uid-p1")
    assert "in use 2915m" in denied.value.message, denied.value.message


@pytest.mark.usefixtures("no_watch")
async def test_a_migration_leaving_voids_no_shared_reservation() -> None:
    """The same through the replicas' shared Lease, the next pod decided by the other replica."""
    api, clock, lookups = FakeApi(), FakeClock(), FakeLookups()
    room_held(lookups)
    one, _ = replica(api, clock)
    two, _ = replica(api, clock)
    await one.admit(check(lookups, "p0", "900m"), "uid-p0")
    with pytest.raises(Denied) as denied:
        await two.admit(after_leaving(check(lookups, "p1", "900m")), "uid-p1")
    assert "in use 2915m" in denied.value.message, denied.value.message


def test_a_pod_seen_going_that_was_never_admitted_here_credits_nothing() -> None:
    """The credit is by uid: another pod of the namespace going (the tenant's own, older, already
    in the cache's figure) frees nothing the reservation counts twice."""
    lookups, clock = FakeLookups(), FakeClock()
    room_held(lookups)
    ledger = AdmissionLedger(clock, ttl=30)
    admit(ledger, check(lookups, "p0", "900m"), "uid-p0")
    ledger.releases.released("ns", "uid-an-older-pod")
    ledger.releases.released("other-namespace", "uid-p0")
    with pytest.raises(Denied):
        admit(ledger, after_leaving(check(lookups, "p1", "900m")), "uid-p1")


# The honest burst: pods deleted since the reservation was made.


def test_pods_deleted_since_make_room_for_the_next_burst_on_this_replica() -> None:
    """test_room_race's rounds: nine 100m pods fill the free room under M, the cache not showing
    them; M completes, the tenant deletes the nine and migrates again. Keeping the reservation
    whole denied the next round for its TTL; voiding it let anything in. Now the next nine get
    in and the tenth is denied."""
    lookups, clock = FakeLookups(), FakeClock()
    room_held(lookups)
    ledger = AdmissionLedger(clock, ttl=30)
    for index in range(9):
        admit(ledger, check(lookups, f"r0-{index}", "100m"), f"uid-r0-{index}")
    with pytest.raises(Denied):
        admit(ledger, check(lookups, "r0-9", "100m"), "uid-r0-9")
    for index in range(9):
        ledger.releases.released("ns", f"uid-r0-{index}")
    for index in range(9):
        admit(ledger, after_leaving(check(lookups, f"r1-{index}", "100m")), f"uid-r1-{index}")
    with pytest.raises(Denied) as denied:
        admit(ledger, after_leaving(check(lookups, "r1-9", "100m")), "uid-r1-9")
    assert "in use 2915m" in denied.value.message, denied.value.message


def test_a_pod_deleted_in_the_same_migrations_window_makes_room_at_once() -> None:
    """Before, a pod deleted in the meantime counted for the reservation's TTL."""
    lookups, clock = FakeLookups(), FakeClock()
    room_held(lookups)
    ledger = AdmissionLedger(clock, ttl=30)
    admit(ledger, check(lookups, "p0", "900m"), "uid-p0")
    ledger.releases.released("ns", "uid-p0")
    admit(ledger, check(lookups, "p1", "900m"), "uid-p1")


@pytest.mark.usefixtures("no_watch")
async def test_pods_deleted_since_make_room_through_the_shared_lease() -> None:
    """Replica one saw the nine go; replica two did not (it counts them: the safe side) until
    one's next write leaves them out of the Lease."""
    api, clock, lookups = FakeApi(), FakeClock(), FakeLookups()
    room_held(lookups)
    (one, one_saw), (two, _) = replica(api, clock), replica(api, clock)
    for index in range(9):
        await (one, two)[index % 2].admit(check(lookups, f"r0-{index}", "100m"), f"uid-r0-{index}")
    for index in range(9):
        one_saw.released("ns", f"uid-r0-{index}")
    with pytest.raises(Denied):
        await two.admit(after_leaving(check(lookups, "r1-0", "100m")), "uid-r1-0")
    await one.admit(after_leaving(check(lookups, "r1-1", "100m")), "uid-r1-1")
    stored = await lease_reservation(api)
    assert list(stored.tally.pods) == ["uid-r1-1"]
    assert stored.used["limits.cpu"] == Quantity.parse("2115m")
    for index in range(2, 10):
        await two.admit(after_leaving(check(lookups, f"r1-{index}", "100m")), f"uid-r1-{index}")
    with pytest.raises(Denied):
        await one.admit(after_leaving(check(lookups, "r1-10", "100m")), "uid-r1-10")


async def lease_reservation(api: FakeApi) -> Reservation:
    lease = await api.get(LEASES, lease_name("ns"), SYSTEM)
    return Reservation.loads(lease["metadata"]["annotations"][ANNOTATION_RESERVATION])


# What is counted: never below the cache, each pod once, bounded.


def test_the_tally_never_counts_below_the_cache_and_starts_again_from_it_once_overtaken() -> None:
    cpu = "limits.cpu"
    tally = Tally({cpu: Quantity.parse("2")}, {"a": {cpu: Quantity.parse("1")}})
    assert tally.in_use({cpu: Quantity.parse("5")})[cpu] == Quantity.parse("5")
    kept = tally.admit(tally.in_use({cpu: Quantity.parse("2")}), "b", {cpu: Quantity.parse("1")})
    assert kept == Tally(
        {cpu: Quantity.parse("2")},
        {"a": {cpu: Quantity.parse("1")}, "b": {cpu: Quantity.parse("1")}},
    )
    overtaken = tally.admit({cpu: Quantity.parse("5")}, "b", {cpu: Quantity.parse("1")})
    assert overtaken == Tally({cpu: Quantity.parse("5")}, {"b": {cpu: Quantity.parse("1")}}), (
        "a is in the cache's 5 now: going, it may not be credited again"
    )
    assert tally.admit(tally.total(), "", {cpu: Quantity.parse("1")}).pods == tally.pods
    assert tally.admit(tally.total(), "", {cpu: Quantity.parse("1")}).total()[
        cpu
    ] == Quantity.parse("4")


def test_a_tally_keeps_at_most_max_pods_folding_the_oldest_into_its_base() -> None:
    one = {"cpu": Quantity.parse("1")}
    tally = Tally({"cpu": Quantity.parse("0")})
    for index in range(MAX_PODS + 2):
        tally = tally.admit(tally.total(), f"uid-{index}", one)
    assert len(tally.pods) == MAX_PODS
    assert "uid-0" not in tally.pods and "uid-1" not in tally.pods
    assert tally.base["cpu"] == Quantity.parse("2")
    assert tally.total()["cpu"] == Quantity.parse(str(MAX_PODS + 2))


def test_pods_seen_going_are_remembered_for_a_while_and_at_most_so_many() -> None:
    clock = FakeClock()
    releases = Releases(clock)
    for index in range(MAX_RELEASES + 1):
        releases.released("ns", f"uid-{index}")
    gone = releases.gone("ns")
    assert not gone("uid-0") and gone("uid-1") and gone(f"uid-{MAX_RELEASES}")
    clock.step(RELEASES_KEPT)
    assert not releases.gone("ns")("uid-1")
    assert releases.namespaces() == 0


def test_a_pod_without_a_uid_is_counted_as_before() -> None:
    """A caller with no uid to give: into the base, and void once its migration left."""
    lookups, clock = FakeLookups(), FakeClock()
    room_held(lookups)
    ledger = AdmissionLedger(clock, ttl=30)
    admit(ledger, check(lookups, "p0", "900m"), "")
    with pytest.raises(Denied):
        admit(ledger, check(lookups, "p1", "900m"), "")
    admit(ledger, after_leaving(check(lookups, "p1", "900m")), "")


# The watch that tells what went.


def pod_event(kind: str, uid: str, rv: str, phase: str = "Running") -> WatchEvent:
    return WatchEvent(
        kind,
        {"metadata": {"name": uid, "uid": uid, "resourceVersion": rv}, "status": {"phase": phase}},
    )


class WatchingApi(FakeApi):
    """Pod lists and watches as scripted: each watch plays the next script (an exception in it
    is raised), then waits for the test to end it."""

    def __init__(self, *scripts: list[Any]) -> None:
        super().__init__()
        self.scripts = list(scripts)
        self.watched_from: list[str | None] = []
        self.listed = 0

    async def list(self, resource: Any, namespace: str | None = None, **_: Any) -> Object:
        self.listed += 1
        return {"items": [], "metadata": {"resourceVersion": f"list-{self.listed}"}}

    async def watch(
        self, resource: Any, namespace: str | None = None, **options: Any
    ) -> AsyncIterator[WatchEvent]:
        self.watched_from.append(options.get("resource_version"))
        for step in self.scripts.pop(0) if self.scripts else []:
            if isinstance(step, Exception):
                raise step
            yield step


async def test_the_watch_tells_of_pods_deleted_or_ended_and_renews_itself() -> None:
    api = WatchingApi(
        [
            pod_event("ADDED", "uid-new", "11"),
            pod_event("DELETED", "uid-deleted", "12"),
            pod_event("MODIFIED", "uid-done", "13", phase="Succeeded"),
            pod_event("MODIFIED", "uid-running", "14"),
        ],
        [errors.Gone("too old")],
        [pod_event("MODIFIED", "uid-failed", "20", phase="Failed")],
    )
    clock = FakeClock()
    releases = Releases(clock)
    watch = PodReleaseWatch(api, clock, releases)  # type: ignore[arg-type]
    watch.follow("ns", 10)
    for _ in range(3):
        await settle()
        await clock.advance(1)
    gone = releases.gone("ns")
    assert [gone(u) for u in ("uid-new", "uid-deleted", "uid-done", "uid-running")] == [
        False,
        True,
        True,
        False,
    ]
    assert gone("uid-failed")
    assert api.watched_from[:3] == ["list-1", "14", "list-2"], "renewed, then relisted on 410"
    await watch.stop()


async def test_a_namespace_is_watched_until_the_time_asked_last() -> None:
    api = WatchingApi()
    clock = FakeClock()
    watch = PodReleaseWatch(api, clock, Releases(clock))  # type: ignore[arg-type]
    watch.follow("ns", 10)
    await settle()
    watch.follow("ns", 20)
    assert followed(watch) == 1
    clock.step(15)
    await settle()
    assert followed(watch) == 1
    clock.step(6)
    await settle()
    assert followed(watch) == 0
    await watch.stop()


async def test_a_failing_watch_is_retried_after_a_pause_never_in_a_hot_loop() -> None:
    api = WatchingApi(*([errors.ServerError("down")] for _ in range(100)))
    clock = FakeClock()
    watch = PodReleaseWatch(api, clock, Releases(clock))  # type: ignore[arg-type]
    watch.follow("ns", 10)
    await settle()
    assert len(api.watched_from) == 1
    await clock.advance(1)
    await settle()
    assert len(api.watched_from) == 2
    await watch.stop()


async def test_a_replica_watches_where_it_decides_and_credits_what_its_watch_saw_go() -> None:
    """No test double for the credit: the replica's own watch, started by its first decision in
    the namespace, sees p0 deleted, and p1 gets p0's room."""
    api, clock, lookups = (
        WatchingApi([pod_event("DELETED", "uid-p0", "12")]),
        FakeClock(),
        FakeLookups(),
    )
    room_held(lookups)
    shared = LeaseReservations(api, SYSTEM, clock, AdmissionLedger(clock, ttl=30))  # type: ignore[arg-type]
    await shared.admit(check(lookups, "p0", "900m"), "uid-p0")
    assert followed(shared.watch) == 1
    await settle()
    await shared.admit(after_leaving(check(lookups, "p1", "900m")), "uid-p1")
    assert list((await lease_reservation(api)).tally.pods) == ["uid-p1"]
    await shared.watch.stop()


def test_the_pod_rule_gives_the_reservation_the_pods_uid() -> None:
    """The API server sets metadata.uid before validating admission: the check carries it, and
    the pod's going is credited."""
    lookups, clock = FakeLookups(), FakeClock()
    room_held(lookups)
    ledger = AdmissionLedger(clock, ttl=30)
    request = create_pod("p0", "900m")
    assert request.obj is not None
    request.obj["metadata"]["uid"] = "uid-p0"
    found = pod_check(request, lookups, Identities())
    assert found is not None and found.uid == "uid-p0"
    admit_locally(found, ledger)
    with pytest.raises(Denied):
        admit_locally(after_leaving(check(lookups, "p1", "900m")), ledger)
    ledger.releases.released("ns", "uid-p0")
    admit_locally(after_leaving(check(lookups, "p1", "900m")), ledger)
