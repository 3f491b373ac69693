"""Shared informer: cache first, then per-handler ordered notifications; late handlers; tombstones."""

from __future__ import annotations

import inspect
import random
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from harvester_quota.generic.client import WatchEvent
from harvester_quota.generic.informer import ResourceEventHandler, SharedInformer
from harvester_quota.generic.resource import Object
from harvester_quota.generic.store import Encoded, Store, Tombstone
from harvester_quota.testbench.clock import FakeClock, settle
from harvester_quota.testbench.codecs import BY_NAME, JsonCodec

from tests.unit.fakes import (
    HANG,
    CountingCodec,
    ScriptedListerWatcher,
    error_event,
    event,
    pod,
    upsert,
)


class Recorder:
    """Records notifications as (kind, name, version) tuples."""

    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []

    def handler(self) -> ResourceEventHandler:
        def on_add(obj: Object, initial: bool) -> None:
            self.seen.append(
                ("add", obj["metadata"]["name"], obj["metadata"]["resourceVersion"], initial)
            )

        def on_update(old: Object, new: Object) -> None:
            self.seen.append(
                (
                    "update",
                    new["metadata"]["name"],
                    old["metadata"]["resourceVersion"],
                    new["metadata"]["resourceVersion"],
                )
            )

        def on_delete(obj: Object | Tombstone) -> None:
            if isinstance(obj, Tombstone):
                self.seen.append(("tombstone", obj.key, obj.obj["metadata"]["resourceVersion"]))
            else:
                self.seen.append(
                    ("delete", obj["metadata"]["name"], obj["metadata"]["resourceVersion"])
                )

        return ResourceEventHandler(on_add, on_update, on_delete)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def informer(lw: ScriptedListerWatcher, clock: FakeClock, **options: Any) -> SharedInformer:
    return SharedInformer(lw, name="pods", clock=clock, rng=random.Random(3), **options)


def watching(clock: FakeClock, *events: Any, **options: Any) -> SharedInformer:
    """An informer over an empty list, then a watch of `events` that hangs after them."""
    lw = ScriptedListerWatcher()
    lw.add_list(rv="1")
    lw.add_watch(*events, HANG)
    return informer(lw, clock, **options)


async def test_notifications_follow_the_cache_in_order(clock: FakeClock) -> None:
    lw = ScriptedListerWatcher()
    lw.add_list(pod("a", "1"), rv="1")
    lw.add_watch(
        event("MODIFIED", "a", "2"), event("ADDED", "b", "3"), event("DELETED", "a", "4"), HANG
    )
    shared = informer(lw, clock)
    recorder = Recorder()
    shared.add_event_handler(recorder.handler())
    shared.start()
    await settle(200)
    assert recorder.seen == [
        ("add", "a", "1", True),
        ("update", "a", "1", "2"),
        ("add", "b", "3", False),
        ("delete", "a", "4"),
    ]
    assert shared.store.list_keys() == ["ns/b"]
    assert shared.has_synced()
    await shared.stop()


async def test_a_late_handler_gets_the_cache_as_adds_before_its_registration_returns(
    clock: FakeClock,
) -> None:
    lw = ScriptedListerWatcher()
    lw.add_list(pod("a", "1"), pod("b", "2"), rv="2")
    lw.add_watch(HANG)
    shared = informer(lw, clock)
    shared.start()
    await settle(100)
    late = Recorder()
    registration = shared.add_event_handler(late.handler())
    assert sorted(late.seen) == [("add", "a", "1", True), ("add", "b", "2", True)]
    assert registration.has_synced()
    await shared.stop()


async def test_a_delete_missed_while_disconnected_arrives_as_a_tombstone(clock: FakeClock) -> None:
    lw = ScriptedListerWatcher()
    lw.add_list(pod("a", "1"), pod("b", "2"), pod("c", "3"), rv="3")
    lw.add_watch(error_event(410, "Expired"))
    # While disconnected: b was deleted, c changed, d was created, a is unchanged.
    lw.add_list(pod("a", "1"), pod("c", "5"), pod("d", "6"), rv="6")
    lw.add_watch(HANG)
    shared = informer(lw, clock)
    recorder = Recorder()
    shared.add_event_handler(recorder.handler())
    shared.start()
    await settle(100)
    recorder.seen.clear()
    await clock.advance(2.0)
    await settle(100)
    assert sorted(recorder.seen) == [
        ("add", "d", "6", False),
        ("tombstone", "ns/b", "2"),
        ("update", "c", "3", "5"),
    ], "an unchanged object (a) is not reported after a relist"
    await shared.stop()


async def test_every_handler_is_told_of_a_watch_event_before_the_next_is_taken(
    clock: FakeClock,
) -> None:
    shared = watching(clock)
    shared.start()
    await settle(50)
    told: list[tuple[str, str, str]] = []

    def record(which: str) -> Callable[[Object], None]:
        def on_change(obj: Object) -> None:
            cached = (shared.store.get("ns/a") or {})["metadata"]["resourceVersion"]
            told.append((which, obj["metadata"]["resourceVersion"], cached))

        return on_change

    shared.add_event_handler(ResourceEventHandler.of_latest(record("first")))
    shared.add_event_handler(ResourceEventHandler.of_latest(record("second")))
    shared.on_event("ADDED", pod("a", "2"))  # two events, no turn of the loop between them
    shared.on_event("MODIFIED", pod("a", "3"))
    assert told == [
        ("first", "2", "2"),
        ("second", "2", "2"),
        ("first", "3", "3"),
        ("second", "3", "3"),
    ], "each handler told of each version while the store held it, in the order added"
    await shared.stop()


async def test_a_handler_that_makes_its_informer_notify_again_is_refused_and_reported(
    clock: FakeClock,
) -> None:
    failed: list[str] = []
    shared = watching(clock, skips=lambda s: failed.append(f"{s.stage}: {s.reason}"))
    shared.start()
    await settle(50)
    told: list[str] = []

    def on_add(obj: Object, _initial: bool) -> None:
        told.append(obj["metadata"]["name"])
        if obj["metadata"]["name"] == "a":
            shared.on_event("ADDED", pod("b", "3"))

    shared.add_event_handler(ResourceEventHandler(on_add=on_add))
    second = Recorder()
    shared.add_event_handler(second.handler())
    shared.on_event("ADDED", pod("a", "2"))
    assert told == ["a"], "not re-entered with b while a is being told"
    assert [entry[1] for entry in second.seen] == ["a"], "the others still told of a"
    assert failed == ["handler: RuntimeError: an informer's handler made its informer notify again"]
    assert shared.store.list_keys() == ["ns/a"], "refused before b was stored"
    await shared.stop()


async def test_a_handler_added_from_inside_a_delivery_is_refused_and_nothing_registered(
    clock: FakeClock,
) -> None:
    lw = ScriptedListerWatcher()
    lw.add_list(pod("a", "1"), pod("b", "2"), rv="2")
    lw.add_watch(HANG)
    failed: list[str] = []
    shared = informer(lw, clock, skips=lambda s: failed.append(s.stage))
    late = Recorder()

    def on_add(obj: Object, _initial: bool) -> None:
        if obj["metadata"]["name"] == "a":
            shared.add_event_handler(late.handler())

    shared.add_event_handler(ResourceEventHandler(on_add=on_add))
    shared.start()
    await settle(100)
    assert failed == ["handler"]
    assert late.seen == [], "not told b only, without a: not registered at all"
    assert len(list(shared._listeners)) == 1
    await shared.stop()


async def test_a_handler_removed_by_another_during_a_delivery_is_told_nothing_more(
    clock: FakeClock,
) -> None:
    shared = watching(clock, event("ADDED", "a", "2"), event("ADDED", "b", "3"))
    removing: list[str] = []
    removed = Recorder()
    registrations = []

    def on_add(obj: Object, _initial: bool) -> None:
        removing.append(obj["metadata"]["name"])
        registrations[0].remove()

    shared.add_event_handler(ResourceEventHandler(on_add=on_add))
    registrations.append(shared.add_event_handler(removed.handler()))
    shared.start()
    await settle(100)
    assert removing == ["a", "b"]
    assert removed.seen == [], "removed while the first add was being told, before its turn"
    await shared.stop()


async def test_a_handler_that_returns_a_coroutine_is_reported_failed_the_coroutine_closed(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    failed: list[str] = []
    shared = watching(clock, event("ADDED", "a", "2"), skips=lambda s: failed.append(s.stage))
    made: list[Coroutine[Any, Any, None]] = []

    async def awaits() -> None:
        return None

    def returns_a_coroutine(_obj: Object, _initial: bool) -> Coroutine[Any, Any, None]:
        made.append(awaits())
        return made[-1]

    shared.add_event_handler(ResourceEventHandler(on_add=returns_a_coroutine), name="async")  # type: ignore[arg-type]
    plain = Recorder()
    shared.add_event_handler(plain.handler())
    returns_a_value = ResourceEventHandler(on_add=lambda obj, _i: obj["metadata"].pop("labels", 0))
    shared.add_event_handler(returns_a_value, name="value")  # type: ignore[arg-type]
    shared.start()
    await settle(100)
    assert failed == ["handler"], "the coroutine alone; a returned value is no failure"
    assert [entry[1] for entry in plain.seen] == ["a"]
    assert "nothing awaits it" in caplog.text
    assert inspect.getcoroutinestate(made[0]) == inspect.CORO_CLOSED, "closed, not dropped"
    await shared.stop()


class RefusesPoison(JsonCodec):
    """The JSON codec, failing to decode what holds the word poison (stored bytes gone bad)."""

    def decode(self, stored: Any) -> Object:
        if b"poison" in stored:
            raise ValueError("stored bytes do not decode")
        return super().decode(stored)


async def test_a_listed_object_that_does_not_decode_fails_its_handlers_and_the_list_goes_on(
    clock: FakeClock,
) -> None:
    lw = ScriptedListerWatcher()
    lw.add_list(pod("a", "1"), pod("poison", "2"), pod("c", "3"), rv="3")
    lw.add_watch(HANG)
    failed: list[str] = []
    shared = informer(lw, clock, codec=RefusesPoison(), skips=lambda s: failed.append(s.stage))
    recorder = Recorder()
    shared.add_event_handler(recorder.handler())
    shared.start()
    await settle(100)
    assert [entry[1] for entry in recorder.seen] == ["a", "c"]
    assert failed == ["handler"]
    assert shared.has_synced(), "the list completed: the reflector did not see the failure"
    await shared.stop()


async def test_a_failing_handler_is_logged_and_the_next_notification_still_arrives(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    lw = ScriptedListerWatcher()
    lw.add_list(rv="1")
    lw.add_watch(event("ADDED", "bad", "2"), event("ADDED", "good", "3"), HANG)
    seen: list[str] = []

    def on_add(obj: Object, _initial: bool) -> None:
        if obj["metadata"]["name"] == "bad":
            raise RuntimeError("boom")
        seen.append(obj["metadata"]["name"])

    shared = informer(lw, clock)
    shared.add_event_handler(ResourceEventHandler(on_add=on_add), name="picky")
    shared.start()
    await settle(100)
    assert seen == ["good"]
    assert "add handler failed for ns/bad" in caplog.text
    await shared.stop()


async def test_default_transform_strips_fields_nobody_reads(clock: FakeClock) -> None:
    bulky = pod(
        "a",
        "1",
        managedFields=[{"manager": "kubectl"}],
        annotations={"kubectl.kubernetes.io/last-applied-configuration": "{...}", "keep": "me"},
    )
    lw = ScriptedListerWatcher()
    lw.add_list(bulky, rv="1")
    lw.add_watch(HANG)
    shared = informer(lw, clock)
    shared.start()
    await settle(50)
    cached = shared.store.get("ns/a")
    assert cached is not None
    assert "managedFields" not in cached["metadata"]
    assert cached["metadata"]["annotations"] == {"keep": "me"}
    await shared.stop()


@pytest.mark.parametrize("codec", ["zstd", "dict", "json", "zlib"])
def test_store_indexes_follow_updates_and_deletes(codec: str) -> None:
    def by_vmi(obj: Object) -> list[str]:
        label = obj["metadata"].get("labels", {}).get("kubevirt.io/created-by")
        return [label] if label else []

    store = Store(indexers={"vmi": by_vmi}, codec=BY_NAME[codec]())
    upsert(store, pod("source", "1", labels={"kubevirt.io/created-by": "uid-1"}))
    upsert(store, pod("target", "2", labels={"kubevirt.io/created-by": "uid-1"}))
    upsert(
        store, pod("other", "3", namespace="elsewhere", labels={"kubevirt.io/created-by": "uid-2"})
    )
    assert store.index_keys("vmi", "uid-1") == ["ns/source", "ns/target"]
    assert [p["metadata"]["name"] for p in store.by_index("namespace", "elsewhere")] == ["other"]
    upsert(store, pod("target", "4", labels={"kubevirt.io/created-by": "uid-2"}))
    assert store.index_keys("vmi", "uid-1") == ["ns/source"]
    assert store.index_keys("vmi", "uid-2") == ["elsewhere/other", "ns/target"]
    store.delete("ns/source")
    assert store.index_keys("vmi", "uid-1") == []
    assert "uid-1" not in store.indexed_values("vmi")


def test_json_store_hands_out_copies_that_callers_may_change() -> None:
    store = Store(codec=JsonCodec())
    upsert(store, pod("a", "1"))
    first = store.get("ns/a")
    assert first is not None
    first["metadata"]["name"] = "changed"
    again = store.get("ns/a")
    assert again is not None and again["metadata"]["name"] == "a"


def test_indexers_added_later_index_what_is_cached() -> None:
    store = Store()
    upsert(store, pod("a", "1", labels={"app": "x"}))
    store.add_indexers({"app": lambda o: [o["metadata"]["labels"]["app"]]})
    assert store.index_keys("app", "x") == ["ns/a"]
    with pytest.raises(ValueError, match="exists already"):
        store.add_indexers({"app": lambda o: []})


def test_an_index_added_between_prepare_and_replace_is_still_built() -> None:
    """A relist prepares items while the list arrives; an indexer registered meanwhile must not
    leave those items out of its index."""
    store = Store()
    prepared = [store.prepare(pod("a", "1", labels={"app": "x"}))]
    store.add_indexers({"app": lambda o: [o["metadata"]["labels"]["app"]]})

    store.replace_prepared(prepared)

    assert store.index_keys("app", "x") == ["ns/a"]


@pytest.mark.parametrize("codec", ["zstd", "dict", "json", "zlib"])
def test_replace_reports_only_what_changed(codec: str) -> None:
    store = Store(codec=BY_NAME[codec]())
    store.replace([pod("same", "1"), pod("changed", "2"), pod("gone", "3")])

    changes = {
        c.key: c for c in store.replace([pod("same", "1"), pod("changed", "4"), pod("new", "5")])
    }

    assert changes["ns/same"].unchanged
    assert not changes["ns/changed"].unchanged
    assert changes["ns/new"].old is None
    gone = changes["ns/gone"]
    assert gone.new is None and gone.old is not None
    assert gone.old.get()["metadata"]["resourceVersion"] == "3"
    assert store.list_keys() == ["ns/same", "ns/changed", "ns/new"]


class LiveDecodes(JsonCodec):
    """The JSON codec, its decoded objects counted while they are alive."""

    def __init__(self) -> None:
        self.alive = 0
        self.most_alive = 0

    def decode(self, stored: Any) -> Object:
        decoded = _Tracked(super().decode(stored))
        self.alive += 1
        self.most_alive = max(self.most_alive, self.alive)
        weakref.finalize(decoded, self._gone)
        return decoded

    def _gone(self) -> None:
        self.alive -= 1


class _Tracked(dict[str, Any]):
    """A decoded object that a weak reference can follow."""


async def test_a_lists_handlers_are_told_with_one_decoded_object_alive_at_a_time(
    clock: FakeClock,
) -> None:
    """After a big relist every handler is told of every object: what is alive at once must be
    what the cache costs (the stored bytes) and one object, not a dict each."""
    lw = ScriptedListerWatcher()
    lw.add_list(*(pod(f"p{index}", str(index)) for index in range(50)), rv="50")
    lw.add_watch(HANG)
    codec = LiveDecodes()
    shared = informer(lw, clock, codec=codec)
    recorder = Recorder()
    shared.add_event_handler(recorder.handler())
    shared.start()
    await settle(50)
    assert len(recorder.seen) == 50
    assert recorder.seen[0] == ("add", "p0", "0", True)
    assert codec.most_alive == 1, f"{codec.most_alive} decoded objects alive at once"
    await shared.stop()


async def test_a_late_handler_is_told_the_cache_with_one_decoded_object_alive_at_a_time(
    clock: FakeClock,
) -> None:
    """A handler added to a filled 50k-object cache must not decode all of it at once."""
    lw = ScriptedListerWatcher()
    lw.add_list(*(pod(f"p{index}", str(index)) for index in range(20)), rv="20")
    lw.add_watch(HANG)
    codec = LiveDecodes()
    shared = informer(lw, clock, codec=codec)
    shared.start()
    await settle(50)
    late = Recorder()
    shared.add_event_handler(late.handler())
    assert sorted(late.seen) == sorted(("add", f"p{i}", str(i), True) for i in range(20))
    assert codec.most_alive == 1, f"{codec.most_alive} decoded objects alive at once"
    await shared.stop()


async def test_a_relist_reports_no_update_for_an_object_whose_version_did_not_change(
    clock: FakeClock,
) -> None:
    """A watch object and a list item of one resourceVersion encode differently (kind and
    apiVersion first in one, last in the other): the version says it is the same object."""
    lw = ScriptedListerWatcher()
    lw.add_list(pod("a", "1"), rv="1")
    watched = {"kind": "Pod", "apiVersion": "v1", **pod("a", "4")}
    listed = {**pod("a", "4"), "apiVersion": "v1", "kind": "Pod"}
    lw.add_watch(WatchEvent("MODIFIED", watched), error_event(410, "Expired"))
    lw.add_list(listed, rv="6")
    lw.add_watch(HANG)
    shared = informer(lw, clock)
    recorder = Recorder()
    shared.add_event_handler(recorder.handler())
    shared.start()
    await settle(100)
    await clock.advance(2.0)
    await settle(100)
    assert ("update", "a", "1", "4") in recorder.seen
    assert [s for s in recorder.seen if s[0] == "update"] == [("update", "a", "1", "4")], (
        "the relist of version 4 is not a second update"
    )
    await shared.stop()


def test_of_latest_hands_the_current_object_on_add_and_update_and_deletes_to_deleted() -> None:
    changed: list[Object] = []
    deleted: list[Object | Tombstone] = []
    handler = ResourceEventHandler.of_latest(changed.append, deleted.append)
    assert handler.on_add is not None and handler.on_update_new is not None
    assert handler.on_delete is not None and handler.on_update is None
    handler.on_add(pod("a", "1"), True)
    handler.on_update_new(pod("a", "2"))
    gone = Tombstone("ns/a", pod("a", "2"))
    handler.on_delete(gone)
    assert [p["metadata"]["resourceVersion"] for p in changed] == ["1", "2"]
    assert deleted == [gone]
    assert ResourceEventHandler.of_latest(changed.append).on_delete is None


def watched_update(clock: FakeClock, codec: CountingCodec) -> SharedInformer:
    """An informer whose watch adds pod a at version 1, then updates it to 2."""
    lw = ScriptedListerWatcher()
    lw.add_list(rv="0")
    lw.add_watch(event("ADDED", "a", "1"), event("MODIFIED", "a", "2"), HANG)
    return informer(lw, clock, codec=codec)


async def test_an_update_decodes_no_old_object_for_handlers_that_read_only_the_new_one(
    clock: FakeClock,
) -> None:
    codec = CountingCodec()
    shared = watched_update(clock, codec)
    latest: list[Object] = []
    shared.add_event_handler(ResourceEventHandler.of_latest(latest.append))
    shared.add_event_handler(
        ResourceEventHandler(on_update=lambda *_: latest.append({}), updates_wanted=lambda _: False)
    )
    shared.start()
    await settle(200)
    assert [p["metadata"]["resourceVersion"] for p in latest] == ["1", "2"]
    assert codec.decoded == 0, "nobody read version 1 back from the store"
    await shared.stop()


async def test_handlers_that_read_the_old_object_share_one_decode_of_what_was_stored(
    clock: FakeClock,
) -> None:
    codec = CountingCodec()
    shared = watched_update(clock, codec)
    first, second = Recorder(), Recorder()
    shared.add_event_handler(first.handler())
    shared.add_event_handler(second.handler())
    shared.start()
    await settle(200)
    told = [("add", "a", "1", False), ("update", "a", "1", "2")]
    assert first.seen == second.seen == told
    assert codec.decoded == 1
    await shared.stop()


def test_a_stores_put_returns_the_previous_object_as_stored_and_decodes_it_when_asked() -> None:
    store = Store(codec=CountingCodec())
    assert store.put(store.prepare(pod("a", "1"))) is None
    old = store.put(store.prepare(pod("a", "2")))
    assert isinstance(old, Encoded) and old._object is None
    assert old.get()["metadata"]["resourceVersion"] == "1"
    assert upsert(store, pod("a", "3")) == pod("a", "2")
