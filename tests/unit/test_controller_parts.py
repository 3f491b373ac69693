"""The generic controller's collaborators on their own: the shared handler, the callers waiting
for a key's pending runs, and the client and cache bound to one resource (the controller's own
behaviour is in test_controller.py)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import pytest
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.informer import SharedInformer
from harvester_quota.generic.pendingruns import PendingRuns
from harvester_quota.generic.resource import PODS, Object
from harvester_quota.generic.resourcecache import ResourceCache
from harvester_quota.generic.resourceclient import ResourceClient
from harvester_quota.generic.sharedhandler import (
    HandlersRun,
    Ignore,
    RetryAfter,
    SharedHandler,
)
from harvester_quota.generic.store import Store
from harvester_quota.generic.workqueue import Queue
from harvester_quota.testbench.clock import FakeClock, settle

from tests.unit.fakes import pod

LOG = logging.getLogger("test.controller.parts")


# SharedHandler ----------------------------------------------------------------------------------


def returning(seen: list[tuple[str, Any]], name: str, result: Object | None = None) -> Any:
    async def handler(key: str, obj: Object | None) -> Object | None:
        seen.append((name, obj and obj["metadata"].get("resourceVersion")))
        return result

    return handler


def raising(seen: list[tuple[str, Any]], name: str, error: Exception) -> Any:
    async def handler(key: str, obj: Object | None) -> Object | None:
        seen.append((name, None))
        raise error

    return handler


async def test_handlers_run_in_registration_order_and_chain_what_they_wrote() -> None:
    shared = SharedHandler("test", LOG)
    seen: list[tuple[str, Any]] = []
    written = pod("a", "2", uid="u")
    shared.register("first", returning(seen, "first", written))
    shared.register("second", returning(seen, "second", {"metadata": {"name": "no uid"}}))
    shared.register("third", returning(seen, "third"))
    assert [name for name, _ in shared] == ["first", "second", "third"]
    assert await shared.on_change("ns/a", pod("a", "1")) == HandlersRun()
    assert seen == [("first", "1"), ("second", "2"), ("third", "2")], (
        "an object with a uid is passed on; anything else is not"
    )


async def test_a_failure_runs_the_other_handlers_and_the_shortest_retry_wins(
    caplog: pytest.LogCaptureFixture,
) -> None:
    shared = SharedHandler("test", LOG)
    seen: list[tuple[str, Any]] = []
    shared.register("later", raising(seen, "later", RetryAfter(30)))
    shared.register(
        "conflict", raising(seen, "conflict", errors.Conflict("stale", reason="Conflict"))
    )
    shared.register("sooner", raising(seen, "sooner", RetryAfter(5)))
    shared.register("broken", raising(seen, "broken", ValueError("bug")))
    with caplog.at_level(logging.DEBUG, logger=LOG.name):
        run = await shared.on_change("ns/a", None)
    assert run == HandlersRun(failed=True, retry_after=5)
    assert [name for name, _ in seen] == ["later", "conflict", "sooner", "broken"]
    assert [(r.levelno, r.getMessage(), r.exc_info is not None) for r in caplog.records] == [
        (logging.DEBUG, "test: conflict ns/a: conflict, requeuing: 409 Conflict: stale", False),
        (logging.ERROR, "test: handler broken failed for ns/a, requeuing: bug", True),
    ], "a conflict is routine: debug, no traceback; a bug is an error with its traceback"


async def test_ignore_ends_the_run_and_keeps_what_earlier_handlers_asked() -> None:
    shared = SharedHandler("test", LOG)
    seen: list[tuple[str, Any]] = []
    shared.register("retry", raising(seen, "retry", RetryAfter(7)))
    shared.register("skip", raising(seen, "skip", Ignore()))
    shared.register("never", returning(seen, "never"))
    assert await shared.on_change("ns/a", None) == HandlersRun(retry_after=7)
    assert [name for name, _ in seen] == ["retry", "skip"]


async def test_cancellation_propagates_out_of_a_run() -> None:
    shared = SharedHandler("test", LOG)
    shared.register("cancelled", raising([], "cancelled", asyncio.CancelledError()))
    with pytest.raises(asyncio.CancelledError):
        await shared.on_change("ns/a", None)


async def test_a_handler_registered_during_a_run_joins_from_the_next_run() -> None:
    shared = SharedHandler("test", LOG)
    seen: list[tuple[str, Any]] = []

    async def registering(key: str, obj: Object | None) -> Object | None:
        seen.append(("registering", None))
        if len(seen) == 1:
            shared.register("late", returning(seen, "late"))
        return None

    shared.register("registering", registering)
    await shared.on_change("ns/a", None)
    assert [name for name, _ in seen] == ["registering"]
    await shared.on_change("ns/a", None)
    assert [name for name, _ in seen] == ["registering", "registering", "late"]


# PendingRuns ------------------------------------------------------------------------------------


async def test_pending_runs_waits_for_the_runs_pending_at_the_call_only() -> None:
    clock = FakeClock()
    queue: Queue[str] = Queue()
    runs = PendingRuns(queue, clock)
    assert await runs.wait("ns/idle", 5), "nothing pending: at once"

    queue.add("ns/busy")
    assert await queue.get() == ("ns/busy", False)  # held by a worker...
    queue.add("ns/busy")  # ...and queued again: two runs pending
    waiter = asyncio.ensure_future(runs.wait("ns/busy", 5))
    await settle()
    queue.done("ns/busy")
    runs.run_ended("ns/busy")
    await settle()
    assert not waiter.done()
    await queue.get()
    queue.add("ns/busy")  # queued after the call: not waited for
    queue.done("ns/busy")
    runs.run_ended("ns/busy")
    assert await asyncio.wait_for(waiter, 5)
    assert not runs._waiters, "a waiter that ended is forgotten"


async def test_pending_runs_gives_up_after_its_seconds_and_forgets_the_waiter() -> None:
    clock = FakeClock()
    queue: Queue[str] = Queue()
    runs = PendingRuns(queue, clock)
    queue.add("ns/busy")
    waiter = asyncio.ensure_future(runs.wait("ns/busy", 2))
    await settle()
    await clock.advance(2)
    assert await asyncio.wait_for(waiter, 5) is False
    assert not runs._waiters


# ResourceClient and ResourceCache ---------------------------------------------------------------


class RecordingClient:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, verb: str) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Object:
            self.calls.append((verb, args, kwargs))
            return {"metadata": {"name": "stored"}}

        return call


async def test_the_resource_client_binds_every_verb_to_its_resource() -> None:
    recording = RecordingClient()
    client = ResourceClient(cast(ApiClient, recording), PODS)
    obj = pod("a", "1")
    await client.get("ns", "a")
    await client.create(obj)
    await client.update(obj)
    await client.update_status(obj)
    await client.patch("ns", "a", {"spec": {}})
    await client.patch(None, "n", [], "json")
    await client.delete("ns", "a", gracePeriodSeconds=0)
    assert recording.calls == [
        ("get", (PODS, "a", "ns"), {}),
        ("create", (PODS, obj), {}),
        ("update", (PODS, obj), {}),
        ("update_status", (PODS, obj), {}),
        ("patch", (PODS, "a", {"spec": {}}, "ns"), {"patch_type": "merge"}),
        ("patch", (PODS, "n", [], None), {"patch_type": "json"}),
        ("delete", (PODS, "a", "ns"), {"gracePeriodSeconds": 0}),
    ]


class StoreOnly:
    def __init__(self, store: Store) -> None:
        self.store = store


def test_the_resource_cache_reads_the_informers_store() -> None:
    store = Store()
    store.replace([pod("a", "1"), pod("b", "1", namespace="other"), pod("c", "1")])
    cache = ResourceCache(cast(SharedInformer, StoreOnly(store)))
    found = cache.cached("ns", "a")
    assert found is not None and found["metadata"]["name"] == "a"
    assert cache.cached("ns", "missing") is None
    assert sorted(o["metadata"]["name"] for o in cache.by_index("namespace", "ns")) == ["a", "c"]


def test_add_indexer_registers_a_name_once() -> None:
    store = Store()
    store.replace([pod("a", "1"), pod("b", "1")])
    cache = ResourceCache(cast(SharedInformer, StoreOnly(store)))
    cache.add_indexer("name", lambda obj: [obj["metadata"]["name"]])
    cache.add_indexer("name", lambda obj: ["ignored"])  # a second registration is a no-op
    assert [o["metadata"]["name"] for o in cache.by_index("name", "b")] == ["b"]
    assert cache.by_index("name", "ignored") == []
    with pytest.raises(KeyError):
        cache.by_index("unknown", "x")
