"""One poisoned object never stops an informer (issue 38): per stage, a poisoned object planted
beside good ones is skipped (or, too deep, cut), named, counted and retried when it changes,
while the others still flow and the list completes (a fresh replica syncs).

Each was run against the old behaviour of its stage, the product part reverted locally (see
the commit that added this paragraph): decode (deepjson.loads as orjson.loads) fails both decode
tests (never synced; ListDecodeError); the intake re-raising every skip (as the reflector used to
get it) fails the transform, encode and both poisoned-view tests (never synced, or the stale
object kept); no cut in Store.prepare fails the encode test (the deep object skipped, not
cached); the unbounded deadline fails the int64 test (skipped at stage view, OverflowError); no
handler-failure report fails the handler test (nothing counted); the listener called bare fails
the listener test (never synced). `test_cut_bytes_counts_brackets_in_strings_as_text` tests a
helper of the cut and has no old behaviour to fail on."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from harvester_quota.generic import deepjson
from harvester_quota.generic.client import ListResult, WatchEvent
from harvester_quota.generic.informer import ResourceEventHandler, SharedInformer
from harvester_quota.generic.intake import SkippedObject
from harvester_quota.generic.reflector import ItemHook
from harvester_quota.generic.resource import Object
from harvester_quota.generic.store import Tombstone
from harvester_quota.generic.watchstream import decode_watch_line
from harvester_quota.testbench.clock import FakeClock, settle
from harvester_quota.testbench.codecs import JsonCodec
from harvester_quota.testbench.decoding import depth_of, split_list
from harvester_quota.util.resourcequota.podindex import PodIndex, pod_view

from tests.unit.fakes import HANG, ScriptedListerWatcher, pod

INT64_MAX = 2**63 - 1
TOO_DEEP = 2000
"""Levels of a tenant's JSON in a field KubeVirt keeps unknown: past orjson's 1024 to decode."""


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


class Skips:
    """The informer's `skips` callback: keeps what it is told."""

    def __init__(self) -> None:
        self.seen: list[SkippedObject] = []

    def __call__(self, skipped: SkippedObject) -> None:
        self.seen.append(skipped)

    def named(self) -> list[tuple[str, str]]:
        return [(s.stage, s.describe()) for s in self.seen]


def informer(lw: Any, clock: FakeClock, skips: Skips, **options: Any) -> SharedInformer:
    return SharedInformer(
        lw, name="pods", clock=clock, rng=random.Random(3), skips=skips, **options
    )


def names(shared: SharedInformer) -> list[str]:
    return sorted(key for key in shared.store.list_keys())


def poisoned(name: str, rv: str) -> Object:
    return pod(name, rv, uid=f"uid-{name}", labels={"poison": "yes"})


def kinded(obj: Object) -> Object:
    return {"kind": "Pod", "apiVersion": "v1", **obj}


async def started(shared: SharedInformer) -> SharedInformer:
    shared.start()
    await settle(100)
    return shared


# Decode ---------------------------------------------------------------------------------------


def deep_vmi(name: str, rv: str, depth: int = TOO_DEEP) -> bytes:
    """A VMI whose preserve-unknown-fields field holds JSON nested `depth` levels, as the API
    server writes it (compact JSON)."""
    head = orjson.dumps(
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv, "uid": name},
        }
    )[:-1]
    return head + b',"spec":{"x":' + b"[" * depth + b"]" * depth + b"}}"


class BytesListerWatcher:
    """Lists and watches from the bytes the API server would send, decoded as the client does."""

    def __init__(self, listed: bytes, lines: list[bytes]) -> None:
        self.listed = listed
        self.lines = lines

    async def list(
        self, *, resource_version: str, page_size: int, each: ItemHook | None = None
    ) -> ListResult:
        list_object, items = split_list(self.listed, each, chunk=97)
        return ListResult(items, list_object["metadata"]["resourceVersion"], False)

    def watch(self, *, resource_version: str, timeout_seconds: int) -> AsyncIterator[WatchEvent]:
        lines, self.lines = self.lines, []
        return self._play(lines)

    async def _play(self, lines: list[bytes]) -> AsyncIterator[WatchEvent]:
        for line in lines:
            yield decode_watch_line(line)
        await asyncio.Future()  # then hang, as a quiet watch does


def watch_line(kind: str, obj: bytes) -> bytes:
    return b'{"type":"' + kind.encode() + b'","object":' + obj + b"}"


async def test_decode_a_vmi_nested_past_orjsons_limit_is_cut_and_cached_beside_the_others(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    listed = (
        b'{"kind":"VirtualMachineInstanceList","metadata":{"resourceVersion":"5"},"items":['
        + deep_vmi("deep", "2")
        + b","
        + orjson.dumps(kinded(pod("good", "3")))
        + b"]}"
    )
    lines = [
        watch_line("MODIFIED", deep_vmi("deep", "6")),
        watch_line("ADDED", deep_vmi("deeper", "7")),
        watch_line("ADDED", orjson.dumps(kinded(pod("after", "8")))),
    ]
    skips = Skips()
    shared = await started(informer(BytesListerWatcher(listed, lines), clock, skips))
    assert shared.has_synced()
    assert names(shared) == ["ns/after", "ns/deep", "ns/deeper", "ns/good"]
    assert shared.reflector.lists == 1, "no relist"
    kept = shared.store.get("ns/deep")
    assert kept is not None and kept["metadata"]["resourceVersion"] == "6"
    assert depth_of(kept) <= deepjson.MAX_DEPTH
    assert "VirtualMachineInstance ns/deep (uid deep)" in caplog.text
    assert "nested deeper than 100 levels cut" in caplog.text
    await shared.stop()


def test_decode_a_one_shot_list_with_a_poisoned_item_completes() -> None:
    """What explain and preflight read (ApiClient.list_all, listdecode) takes the deep VMI."""
    raw = (
        b'{"metadata":{"resourceVersion":"5"},"items":['
        + deep_vmi("deep", "2")
        + b","
        + deep_vmi("shallow", "3", depth=3)
        + b"]}"
    )
    for chunk in (50, 1 << 20):
        list_object, items = split_list(raw, chunk=chunk)
        assert list_object["metadata"]["resourceVersion"] == "5"
        assert [item["metadata"]["name"] for item in items] == ["deep", "shallow"]
        assert items[1]["spec"]["x"] == [[[]]]


def test_cut_bytes_counts_brackets_in_strings_as_text() -> None:
    raw = b'{"a":"[[[{{{","b":[[[1]]],"c":[2]}'
    cut, count = deepjson.cut_bytes(raw, 2)
    assert orjson.loads(cut) == {"a": "[[[{{{", "b": [None], "c": [2]}
    assert count == 1


# Transform ------------------------------------------------------------------------------------


def picky_transform(obj: Object) -> Object:
    if obj["metadata"].get("labels", {}).get("poison"):
        raise RuntimeError("cannot transform this one")
    return obj


async def test_transform_a_poisoned_object_is_skipped_named_counted_and_retried_when_it_changes(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    lw = ScriptedListerWatcher()
    lw.add_list(pod("a", "1"), poisoned("bad", "2"), pod("b", "3"), rv="3")
    lw.add_watch(
        WatchEvent("MODIFIED", poisoned("bad", "4")),  # changed, still poisoned
        WatchEvent("ADDED", pod("c", "5")),
        WatchEvent("MODIFIED", pod("bad", "6", uid="uid-bad")),  # fixed: retried and taken
        HANG,
    )
    skips = Skips()
    seen: list[tuple[str, str]] = []
    shared = informer(lw, clock, skips, transform=picky_transform)
    shared.add_event_handler(
        ResourceEventHandler.of_latest(
            lambda obj: seen.append(("changed", obj["metadata"]["name"]))
        )
    )
    await started(shared)
    assert shared.has_synced(), "the list completed without the poisoned item"
    assert names(shared) == ["ns/a", "ns/b", "ns/bad", "ns/c"]
    assert shared.reflector.lists == 1
    assert skips.named() == [
        ("transform", "object ns/bad (uid uid-bad)"),
        ("transform", "object ns/bad (uid uid-bad)"),
    ]
    assert ("changed", "c") in seen and seen[-1] == ("changed", "bad")
    assert "skipped object ns/bad (uid uid-bad) at stage transform" in caplog.text
    await shared.stop()


# Encode ---------------------------------------------------------------------------------------


async def test_encode_an_object_too_deep_for_the_codec_is_cut_and_one_it_refuses_is_skipped(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    deep: Any = []
    for _ in range(300):  # decodes (under 1024) but orjson will not encode past 254
        deep = [deep]
    refused = pod("refused", "2", uid="uid-refused")
    refused["spec"] = {"value": 2**70}  # orjson encodes no integer past 64 bits
    lw = ScriptedListerWatcher()
    lw.add_list(pod("a", "1", x=deep), refused, pod("b", "3"), rv="3")
    lw.add_watch(
        WatchEvent("ADDED", pod("c", "4")),
        WatchEvent("MODIFIED", pod("refused", "5", uid="uid-refused")),
        HANG,
    )
    skips = Skips()
    shared = await started(informer(lw, clock, skips))
    assert shared.has_synced()
    assert names(shared) == ["ns/a", "ns/b", "ns/c", "ns/refused"]
    cached = shared.store.get("ns/a")
    assert cached is not None and depth_of(cached) == deepjson.MAX_DEPTH
    assert skips.named() == [("encode", "object ns/refused (uid uid-refused)")]
    assert "values nested deeper than 100 levels cut before storing it" in caplog.text
    await shared.stop()


# Store view -----------------------------------------------------------------------------------


def huge_grace_pod(name: str, rv: str) -> Object:
    """Deleted by a tenant with the largest grace period the API server stores."""
    return pod(
        name,
        rv,
        uid=f"uid-{name}",
        deletionTimestamp="2026-01-01T00:00:00Z",
        deletionGracePeriodSeconds=INT64_MAX,
    )


def view_that_raises(obj: Object) -> Any:
    if obj["metadata"].get("labels", {}).get("poison"):
        raise OverflowError("date value out of range")
    return pod_view(obj)


async def test_view_a_poisoned_object_is_kept_out_of_the_views_and_retried_when_it_changes(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    lw = ScriptedListerWatcher()
    lw.add_list(pod("a", "1"), poisoned("bad", "2"), rv="2")
    lw.add_watch(
        WatchEvent("MODIFIED", poisoned("bad", "3")),
        WatchEvent("ADDED", pod("b", "4")),
        WatchEvent("MODIFIED", pod("bad", "5")),
        HANG,
    )
    skips = Skips()
    shared = informer(lw, clock, skips)
    index = PodIndex()
    shared.store.add_view(PodIndex.VIEW, view_that_raises, index.changed)
    await started(shared)
    assert shared.has_synced()
    assert sorted(v.name for v in index.namespace("ns")) == ["a", "b", "bad"]
    assert [stage for stage, _ in skips.named()] == ["view", "view"]
    assert "skipped object ns/bad (uid uid-bad) at stage view" in caplog.text
    await shared.stop()


async def test_view_a_cached_object_whose_new_version_is_poisoned_leaves_cache_and_views(
    clock: FakeClock,
) -> None:
    lw = ScriptedListerWatcher()
    lw.add_list(pod("bad", "1"), pod("a", "2"), rv="2")
    lw.add_watch(WatchEvent("MODIFIED", poisoned("bad", "3")), HANG)
    skips = Skips()
    shared = informer(lw, clock, skips)
    index = PodIndex()
    shared.store.add_view(PodIndex.VIEW, view_that_raises, index.changed)
    deleted: list[Any] = []
    shared.add_event_handler(ResourceEventHandler(on_delete=deleted.append))
    await started(shared)
    assert names(shared) == ["ns/a"]
    assert [v.name for v in index.namespace("ns")] == ["a"]
    assert len(deleted) == 1 and isinstance(deleted[0], Tombstone) and deleted[0].key == "ns/bad"
    await shared.stop()


async def test_view_a_pod_deleted_with_an_int64_grace_period_counts_and_stops_nothing(
    clock: FakeClock,
) -> None:
    """The pods informer with the real pod view: the deadline overflowed Python's datetime."""
    lw = ScriptedListerWatcher()
    lw.add_list(huge_grace_pod("huge", "1"), pod("a", "2"), rv="2")
    lw.add_watch(WatchEvent("ADDED", pod("b", "3")), HANG)
    skips = Skips()
    shared = informer(lw, clock, skips)
    index = PodIndex()
    shared.store.add_view(PodIndex.VIEW, pod_view, index.changed)
    await started(shared)
    assert shared.has_synced() and not skips.seen
    views = {v.name: v for v in index.namespace("ns")}
    assert sorted(views) == ["a", "b", "huge"]
    assert views["huge"].error is None
    assert views["huge"].counts(clock.now()), "far future: it counts while it exists"
    await shared.stop()


# Handler --------------------------------------------------------------------------------------


async def test_handler_a_failure_on_one_object_is_named_and_counted_and_delivery_goes_on(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    lw = ScriptedListerWatcher()
    lw.add_list(pod("a", "1"), poisoned("bad", "2"), rv="2")
    lw.add_watch(
        WatchEvent("ADDED", pod("b", "3")),
        WatchEvent("MODIFIED", pod("bad", "4", uid="uid-bad")),
        HANG,
    )
    skips = Skips()
    seen: list[str] = []

    def changed(obj: Object) -> None:
        if obj["metadata"].get("labels", {}).get("poison"):
            raise ValueError("this handler cannot read it")
        seen.append(obj["metadata"]["name"])

    shared = informer(lw, clock, skips)
    shared.add_event_handler(ResourceEventHandler.of_latest(changed), name="picky")
    await started(shared)
    assert seen == ["a", "b", "bad"]
    assert skips.named() == [("handler", "object ns/bad (uid uid-bad)")]
    assert "add handler failed for ns/bad" in caplog.text
    await shared.stop()


# View listener --------------------------------------------------------------------------------


async def test_listener_one_that_raises_is_isolated_and_reported_and_others_flow(
    clock: FakeClock,
) -> None:
    """Abuse: a view's listener raises on one object. Before, the exception left the store's
    write half-applied and reached the reflector (relist, the same again, never synced)."""
    lw = ScriptedListerWatcher()
    lw.add_list(pod("a", "1"), poisoned("bad", "2"), rv="2")
    lw.add_watch(WatchEvent("ADDED", pod("b", "3")), HANG)
    skips = Skips()
    shared = informer(lw, clock, skips)
    heard: dict[str, Any] = {}

    def listener(key: str, value: Any) -> None:
        if value is not None and value.get("poison"):
            raise RuntimeError("this listener cannot take it")
        heard[key] = value

    shared.store.add_view("labels", lambda o: o["metadata"].get("labels", {}), listener)
    await started(shared)
    assert shared.has_synced() and shared.reflector.lists == 1
    assert names(shared) == ["ns/a", "ns/b", "ns/bad"]
    assert heard == {"ns/a": {}, "ns/bad": None, "ns/b": {}}
    assert skips.named() == [("listener", "object ns/bad (uid ?)")]
    await shared.stop()


def test_intake_tells_handlers_the_transformed_object_beside_a_transformed_old() -> None:
    """Minor 4: `applied` told handlers the raw object as new while old came from the store,
    transformed, so `relevant(old, new)` compared a transformed old with a raw new."""
    from harvester_quota.generic.intake import Intake
    from harvester_quota.generic.store import Store

    def slim(obj: Object) -> Object:
        return {"metadata": obj["metadata"], "kept": obj.get("kept")}

    intake = Intake("pods", Store(codec=JsonCodec()), slim, None)
    raw = {"metadata": {"namespace": "ns", "name": "a"}, "kept": 1, "dropped": "x" * 100}
    added = intake.applied("ADDED", raw)
    assert added is not None and added[0] == "add"
    assert added[2] == {"metadata": {"namespace": "ns", "name": "a"}, "kept": 1}
    updated = intake.applied("MODIFIED", {**raw, "kept": 2})
    assert updated is not None and updated[0] == "update"
    _, stored, new = updated
    old = stored.get()
    assert "dropped" not in new and new["kept"] == 2
    assert set(old) == set(new), (old, new)
