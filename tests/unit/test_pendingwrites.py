"""PendingWrites: a write is read in place of an older cache, only of an older one, for a time."""

from __future__ import annotations

from harvester_quota.config.management import Management, Options
from harvester_quota.controller.mtq.vmmrq_controller import MtqReconciler
from harvester_quota.controller.resourcequota.resourcequota_controller import QuotaReconciler
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.config import ClientConfig
from harvester_quota.generic.pendingwrites import PendingWrites
from harvester_quota.generic.resource import NAMESPACES, RESOURCE_QUOTAS, Object
from harvester_quota.generic.store import Store
from harvester_quota.testbench.clock import FakeClock
from prometheus_client import CollectorRegistry

from tests.unit.fakes import upsert


def obj(version: str, uid: str = "u1", value: str = "", name: str = "ns") -> Object:
    return {
        "metadata": {"name": name, "uid": uid, "resourceVersion": version, "labels": {"p": "a"}},
        "value": value,
    }


def pending(*cached: Object) -> tuple[PendingWrites, FakeClock]:
    store, clock = Store(indexers={"p": lambda o: [o["metadata"]["labels"]["p"]]}), FakeClock()
    for each in cached:
        upsert(store, each)
    return PendingWrites(store, clock, ttl=60.0), clock


def test_the_write_is_read_until_the_cache_reaches_it_then_is_forgotten() -> None:
    writes, _ = pending(obj("10", value="cached"))
    writes.wrote(obj("12", value="ours"))
    assert writes.newest(obj("10"))["value"] == "ours"
    assert writes.newest(obj("11"))["value"] == "ours"
    assert writes.newest(obj("12", value="cached"))["value"] == "cached"
    assert writes.newest(obj("10", value="cached"))["value"] == "cached", "forgotten"


def test_every_read_goes_through_the_write_get_and_index_lookups_alike() -> None:
    writes, _ = pending(obj("10", value="cached"), obj("3", uid="u2", name="other"))
    writes.wrote(obj("12", value="ours"))
    assert (writes.get("ns") or {})["value"] == "ours"
    assert [o["value"] for o in writes.by_index("p", "a")] == ["ours", ""]
    assert writes.get("gone") is None


def test_two_writers_of_one_object_are_read_as_the_newest_of_their_writes() -> None:
    writes, _ = pending(obj("10"))
    writes.wrote(obj("12", value="the annotation"))
    writes.wrote(obj("11", value="the label, answered late"))
    assert writes.newest(obj("10"))["value"] == "the annotation"


def test_a_write_the_cache_never_shows_is_dropped_after_its_time() -> None:
    writes, clock = pending(obj("10"))
    writes.wrote(obj("12", value="ours"))
    clock.step(59.0)
    assert writes.newest(obj("10"))["value"] == "ours"
    clock.step(1.0)
    assert writes.newest(obj("10", value="cached"))["value"] == "cached"


def test_expired_writes_of_other_keys_are_dropped_as_new_ones_come() -> None:
    writes, clock = pending()
    writes.wrote(obj("12", name="a"))
    clock.step(61.0)
    writes.wrote(obj("12", name="b"))
    assert list(writes._written) == ["b"]


def test_an_object_created_again_is_never_taken_for_ours() -> None:
    writes, _ = pending()
    writes.wrote(obj("12", value="ours"))
    assert writes.newest(obj("5", uid="u2", value="new"))["value"] == "new"


def test_versions_that_are_no_integers_leave_the_cache_in_charge() -> None:
    writes, _ = pending()
    writes.wrote(obj("def", value="ours"))
    assert writes.newest(obj("abc", value="cached"))["value"] == "cached"


def test_a_forgotten_write_leaves_the_cache_in_charge() -> None:
    writes, _ = pending()
    writes.wrote(obj("12", value="ours"))
    writes.forget("ns")
    assert writes.newest(obj("10", value="cached"))["value"] == "cached"


async def test_every_writer_and_reader_of_a_kind_shares_its_informers_overlay() -> None:
    """One overlay per kind: the room mode's label, Rancher annotation and plans, and MTQ mode's
    lock, all on the namespaces' informer's; both modes' quota writes and plans on the quotas'."""
    client = ApiClient(ClientConfig(host="https://127.0.0.1:1", ssl_context=False))
    management = Management(
        client=client, options=Options(), clock=FakeClock(), registry=CollectorRegistry()
    )
    room, mtq = QuotaReconciler(management), MtqReconciler(management, writer=None)
    namespaces = management.informers.informer(NAMESPACES).pending
    assert room.inputs.namespaces is namespaces
    assert room.room_label.pending is namespaces and room.rancher.pending is namespaces
    assert mtq.locks.namespaces.pending is namespaces
    quotas = management.informers.informer(RESOURCE_QUOTAS).pending
    assert room.inputs.quotas is quotas and room.spec_writes.pending is quotas
    assert mtq.writes.quotas.pending is quotas
    await management.client.close()
