"""A reservation of admitted pods outlives a migration that joins: a tenant who creates another
migration between two bursts of pods does not have the second burst decided on the cache alone
(issue 38 item 5). One holding a pod admitted without a uid still ends when a migration it was
made under stops holding room; by uid, none leaving ends it (test_reservation_credits.py)."""

from __future__ import annotations

import dataclasses

import pytest
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.util.quantity import Quantity
from harvester_quota.webhook.admission import Denied
from harvester_quota.webhook.resources.common import Identities
from harvester_quota.webhook.resources.pod.ledger import AdmissionLedger, still_holds
from harvester_quota.webhook.resources.pod.validator import PodCheck

from tests.unit.fakes import FakeApi
from tests.unit.test_reservations import check, replica
from tests.unit.test_webhook import FakeLookups, create_pod, room_held, validate_pod


def joined(found: PodCheck) -> PodCheck:
    """`found` as it is decided once the tenant's second migration holds room too."""
    return dataclasses.replace(found, holders=found.holders | {"tenants-second-migration"})


def test_a_reservation_holds_while_its_migrations_do_whoever_joins() -> None:
    assert still_holds(frozenset({"m"}), frozenset({"m", "m2"}))
    assert not still_holds(frozenset({"m", "m2"}), frozenset({"m2"}))


def test_a_migration_joining_voids_no_reservation_of_this_replica() -> None:
    """985m free under the base; p0 (900m) admitted, the cache not showing it yet; the tenant
    creates a second migration. The ledger kept p0 only while the holders were the same, so p1
    (900m) got in on the cache alone: 1800m into 985m. Now p1 is denied."""
    lookups, clock = FakeLookups(), FakeClock()
    room_held(lookups)
    ledger = AdmissionLedger(clock, ttl=30)
    validate_pod(create_pod("p0", "900m"), lookups, Identities(), ledger)
    holders = frozenset(m["metadata"]["uid"] for m in lookups.migration_list)
    cached = {"limits.cpu": Quantity.parse("2015m")}
    in_use = ledger.in_use("ns", cached, holders | {"tenants-second-migration"})
    assert in_use["limits.cpu"] == Quantity.parse("2915m"), "p0 still counts"
    assert ledger.in_use("ns", cached, frozenset({"another"}))["limits.cpu"] == cached["limits.cpu"]


async def test_a_migration_joining_voids_no_shared_reservation() -> None:
    """The same through the replicas' shared Lease."""
    api, clock, lookups = FakeApi(), FakeClock(), FakeLookups()
    room_held(lookups)
    shared = replica(api, clock)
    await shared.admit(check(lookups, "p0", "900m"))
    with pytest.raises(Denied) as denied:
        await shared.admit(joined(check(lookups, "p1", "900m")))
    assert "in use 2915m" in denied.value.message, denied.value.message
