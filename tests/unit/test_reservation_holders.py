"""A reservation of admitted pods outlives any change of the migrations holding room: a tenant who
creates another migration between two bursts of pods (issue 38 item 5), or also deletes the one
the first burst was admitted under, does not have the second burst decided on the cache alone.
Only its TTL ends it."""

from __future__ import annotations

import dataclasses

import pytest
from harvester_quota.generic.clock import FakeClock
from harvester_quota.webhook.admission import Denied
from harvester_quota.webhook.resources.common import Identities
from harvester_quota.webhook.resources.pod.ledger import AdmissionLedger
from harvester_quota.webhook.resources.pod.validator import PodCheck, admit_locally

from tests.unit.fakes import FakeApi
from tests.unit.test_reservations import check, replica
from tests.unit.test_webhook import FakeLookups, create_pod, room_held, validate_pod


def joined(found: PodCheck) -> PodCheck:
    """`found` as it is decided once the tenant's second migration holds room too."""
    return dataclasses.replace(found, holders=found.holders | {"tenants-second-migration"})


def test_a_migration_joining_voids_no_reservation_of_this_replica() -> None:
    """985m free under the base; p0 (900m) admitted, the cache not showing it yet; the tenant
    creates a second migration. The ledger kept p0 only while the holders were the same, so p1
    (900m) got in on the cache alone: 1800m into 985m. Now p1 is denied."""
    lookups, clock = FakeLookups(), FakeClock()
    room_held(lookups)
    ledger = AdmissionLedger(clock, ttl=30)
    validate_pod(create_pod("p0", "900m"), lookups, Identities(), ledger)
    with pytest.raises(Denied) as denied:
        admit_locally(joined(check(lookups, "p1", "900m")), ledger)
    assert "in use 2915m" in denied.value.message, denied.value.message


async def test_a_migration_joining_voids_no_shared_reservation() -> None:
    """The same through the replicas' shared Lease."""
    api, clock, lookups = FakeApi(), FakeClock(), FakeLookups()
    room_held(lookups)
    shared = replica(api, clock)
    await shared.admit(check(lookups, "p0", "900m"))
    with pytest.raises(Denied) as denied:
        await shared.admit(joined(check(lookups, "p1", "900m")))
    assert "in use 2915m" in denied.value.message, denied.value.message


def replaced(found: PodCheck) -> PodCheck:
    """`found` as it is decided once the tenant has created a second migration and deleted its
    first (whose room the reservation was made under) before that one's target pod existed."""
    return dataclasses.replace(found, holders=frozenset({"tenants-second-migration"}))


def test_a_migration_leaving_voids_no_reservation_of_this_replica() -> None:
    """985m free under the base; p0 (900m) admitted under M1, the cache not showing it yet; the
    tenant creates M2 and deletes M1. p0 uses the quota whichever migration ended: p1 (900m) is
    still decided next to it, and denied."""
    lookups, clock = FakeLookups(), FakeClock()
    room_held(lookups)
    ledger = AdmissionLedger(clock, ttl=30)
    admit_locally(check(lookups, "p0", "900m"), ledger)
    with pytest.raises(Denied) as denied:
        admit_locally(replaced(check(lookups, "p1", "900m")), ledger)
    assert "in use 2915m" in denied.value.message, denied.value.message
    clock.step(30)
    admit_locally(replaced(check(lookups, "p1", "900m")), ledger)  # its TTL ends it, nothing else


async def test_a_migration_leaving_voids_no_shared_reservation() -> None:
    """The same through the replicas' shared Lease, decided by another replica."""
    api, clock, lookups = FakeApi(), FakeClock(), FakeLookups()
    room_held(lookups)
    await replica(api, clock).admit(check(lookups, "p0", "900m"))
    other = replica(api, clock)
    with pytest.raises(Denied) as denied:
        await other.admit(replaced(check(lookups, "p1", "900m")))
    assert "in use 2915m" in denied.value.message, denied.value.message
    clock.step(30)
    await other.admit(replaced(check(lookups, "p1", "900m")))
