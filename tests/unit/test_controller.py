"""The generic controller: chaining, retries through the rate limiter, finalizers, workers."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable
from typing import Any, cast

import pytest
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient, WatchEvent
from harvester_quota.generic.controller import Controller, Ignore, RetryAfter
from harvester_quota.generic.informer import SharedInformer
from harvester_quota.generic.resource import PODS, Object
from harvester_quota.testbench.clock import FakeClock, settle

from tests.unit.fakes import HANG, CountingCodec, FakeApi, ScriptedListerWatcher, event, pod


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def started(
    clock: FakeClock, *objects: Object, api: FakeApi | None = None, workers: int = 2
) -> tuple[Controller, ScriptedListerWatcher, SharedInformer]:
    lw = ScriptedListerWatcher()
    lw.add_list(*objects, rv="1")
    lw.add_watch(HANG)
    informer = SharedInformer(lw, name="pods", clock=clock, rng=random.Random(1))
    controller = Controller(
        cast(ApiClient, api or FakeApi()), informer, PODS, name="test", workers=workers, clock=clock
    )
    return controller, lw, informer


async def run(controller: Controller, informer: SharedInformer) -> None:
    informer.start()
    await informer.wait_for_sync(1)
    controller.start()
    await settle(200)


async def test_handlers_chain_and_see_none_after_delete(clock: FakeClock) -> None:
    controller, _, informer = await started(clock, pod("a", "1"))
    seen: list[tuple[str, str, Any]] = []

    async def first(key: str, obj: Object | None) -> Object | None:
        seen.append(("first", key, obj and obj["metadata"]["resourceVersion"]))
        if obj is None:
            return None
        return {**obj, "metadata": {**obj["metadata"], "resourceVersion": "changed", "uid": "u"}}

    async def second(key: str, obj: Object | None) -> Object | None:
        seen.append(("second", key, obj and obj["metadata"]["resourceVersion"]))
        return obj

    controller.on_change("first", first)
    controller.on_change("second", second)
    await run(controller, informer)
    assert seen == [("first", "ns/a", "1"), ("second", "ns/a", "changed")]
    seen.clear()
    informer.on_event("DELETED", pod("a", "2"))
    await settle(200)
    assert seen == [("first", "ns/a", None), ("second", "ns/a", None)]
    await controller.stop()
    await informer.stop()


async def test_errors_retry_with_growing_backoff_and_success_forgets(clock: FakeClock) -> None:
    controller, _, informer = await started(clock, pod("a", "1"))
    attempts: list[float] = []

    async def flaky(key: str, obj: Object | None) -> None:
        attempts.append(clock.monotonic())
        if len(attempts) < 4:
            raise RuntimeError("transient")

    controller.on_change("flaky", flaky)
    await run(controller, informer)
    assert len(attempts) == 1
    await clock.advance(1.0)
    assert len(attempts) == 4
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(attempts)]
    assert gaps == [0.005, 0.01, 0.02], "client-go's per-item exponential backoff from 5 ms"
    assert controller.queue._rate_limiter.when("ns/a") == 0.005, "forgotten once it succeeded"
    await controller.stop()
    await informer.stop()


async def test_a_conflict_is_retried_quietly(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    controller, _, informer = await started(clock, pod("a", "1"))
    calls = 0

    async def racing(key: str, obj: Object | None) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise errors.Conflict("the object has been modified", reason="Conflict")

    caplog.set_level("DEBUG", logger="harvester_quota.generic.controller")
    controller.on_change("racing", racing)
    await run(controller, informer)
    await clock.advance(0.1)
    assert calls == 2
    about_conflict = [r for r in caplog.records if "conflict" in r.getMessage().lower()]
    assert about_conflict, "the conflict is logged"
    assert all(record.levelname == "DEBUG" for record in about_conflict), "but only at debug"
    await controller.stop()
    await informer.stop()


async def test_an_exception_is_logged_with_its_key_and_the_worker_survives(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    controller, _, informer = await started(clock, pod("a", "1"), pod("b", "2"), workers=1)
    handled: list[str] = []

    async def picky(key: str, obj: Object | None) -> None:
        if key == "ns/a":
            raise KeyError("spec")
        handled.append(key)

    controller.on_change("picky", picky)
    await run(controller, informer)
    assert handled == ["ns/b"]
    assert "handler picky failed for ns/a" in caplog.text
    await controller.stop()
    await informer.stop()


async def test_a_cache_that_cannot_be_read_is_retried_and_the_worker_survives(
    clock: FakeClock, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    controller, _, informer = await started(clock, pod("a", "1"), pod("b", "2"), workers=1)
    handled: list[str] = []

    async def record(key: str, obj: Object | None) -> None:
        handled.append(key)

    controller.on_change("record", record)
    real_get = informer.store.get

    def broken_for_a(key: str) -> Object | None:
        if key == "ns/a":
            raise ValueError("undecodable stored object")
        return real_get(key)

    monkeypatch.setattr(informer.store, "get", broken_for_a)
    await run(controller, informer)
    assert handled == ["ns/b"], "the one worker lived on to handle the next key"
    assert "ns/a failed, retrying" in caplog.text
    monkeypatch.setattr(informer.store, "get", real_get)
    await clock.advance(1.0)
    await settle(200)
    assert handled.count("ns/a") == 1, "retried once the cache reads again"
    await controller.stop()
    await informer.stop()


async def test_retry_after_and_ignore(clock: FakeClock) -> None:
    controller, _, informer = await started(clock, pod("a", "1"))
    runs: list[float] = []
    after: list[str] = []

    async def waiting(key: str, obj: Object | None) -> None:
        runs.append(clock.monotonic())
        if len(runs) == 1:
            raise RetryAfter(30)
        raise Ignore()

    async def never_after_ignore(key: str, obj: Object | None) -> None:
        after.append(key)

    controller.on_change("waiting", waiting)
    controller.on_change("after", never_after_ignore)
    await run(controller, informer)
    await clock.advance(29)
    assert len(runs) == 1
    await clock.advance(2)
    assert len(runs) == 2
    assert runs[1] - runs[0] == pytest.approx(30)
    assert after == ["ns/a"], "RetryAfter does not skip later handlers, Ignore does"
    assert controller.queue._rate_limiter.when("ns/a") == 0.005, "no failure counted"
    await controller.stop()
    await informer.stop()


async def test_enqueue_is_a_plain_add(clock: FakeClock) -> None:
    controller, _, informer = await started(clock)
    runs: list[str] = []

    async def record(key: str, obj: Object | None) -> None:
        runs.append(key)

    controller.on_change("record", record)
    await run(controller, informer)
    for _ in range(5):
        controller.enqueue("ns", "x")
        await settle(50)
    assert runs == ["ns/x"] * 5
    assert controller.queue._rate_limiter.when("ns/x") == 0.005, "no failure counted"
    controller.enqueue_after("ns", "y", 10)
    await clock.advance(9)
    assert "ns/y" not in runs
    await clock.advance(2)
    assert runs[-1] == "ns/y"
    await controller.stop()
    await informer.stop()


async def test_a_key_is_never_handled_by_two_workers_at_once(clock: FakeClock) -> None:
    controller, _lw, informer = await started(clock, workers=4)
    running: set[str] = set()
    overlaps = 0
    gate = clock

    async def slow(key: str, obj: Object | None) -> None:
        nonlocal overlaps
        if key in running:
            overlaps += 1
        running.add(key)
        await gate.sleep(1)
        running.discard(key)

    controller.on_change("slow", slow)
    await run(controller, informer)
    added_while_running = 0
    for _ in range(10):
        added_while_running += "ns/same" in running
        controller.enqueue("ns", "same")
        controller.enqueue("ns", "other")
        await clock.advance(0.3)
    await clock.advance(5)
    assert added_while_running > 0, "the key was re-added while a worker held it"
    assert overlaps == 0
    await controller.stop()
    await informer.stop()


async def test_wait_pending_runs_waits_for_the_held_run_and_its_queued_rerun_only(
    clock: FakeClock,
) -> None:
    controller, _lw, informer = await started(clock)
    runs: list[float] = []

    async def slow(key: str, obj: Object | None) -> None:
        await clock.sleep(1)
        runs.append(clock.monotonic())

    controller.on_change("slow", slow)
    await run(controller, informer)
    assert await controller.wait_pending_runs("ns/idle", 5), "an idle key does not wait"
    controller.enqueue("ns", "busy")
    await settle()
    controller.enqueue("ns", "busy")  # queued again while a worker holds it
    waiter = asyncio.ensure_future(controller.wait_pending_runs("ns/busy", 5))
    await settle()
    await clock.advance(1)
    controller.enqueue("ns", "busy")  # queued after the call: not waited for
    await settle()
    assert not waiter.done(), "the rerun queued before the call is still to come"
    await clock.advance(1)
    await settle()
    assert waiter.result() is True
    assert len(runs) == 2
    await clock.advance(1)
    await settle()
    assert len(runs) == 3
    await controller.stop()
    await informer.stop()


async def test_wait_pending_runs_gives_up_after_its_seconds(clock: FakeClock) -> None:
    controller, _lw, informer = await started(clock)

    async def endless(key: str, obj: Object | None) -> None:
        await clock.sleep(10)

    controller.on_change("endless", endless)
    await run(controller, informer)
    controller.enqueue("ns", "busy")
    await settle()
    waiter = asyncio.ensure_future(controller.wait_pending_runs("ns/busy", 2))
    await settle()
    await clock.advance(1.9)
    assert not waiter.done()
    await clock.advance(0.2)
    await settle()
    assert waiter.result() is False
    await controller.stop()
    await informer.stop()


async def test_a_held_controller_queues_nothing_then_every_cached_key_once_started(
    clock: FakeClock,
) -> None:
    """A warm standby's controller: its informer fills the cache and reports changes, a pod
    deleted meanwhile leaves no key behind, and starting queues exactly the cached keys."""
    controller, _, informer = await started(clock, pod("a", "1"), pod("b", "1"))
    runs: list[str] = []

    async def record(key: str, obj: Object | None) -> None:
        runs.append(key)

    controller.on_change("record", record)
    controller.hold()
    informer.start()
    await informer.wait_for_sync(1)
    informer.on_event("ADDED", pod("c", "2"))
    informer.on_event("DELETED", pod("b", "3"))
    controller.enqueue("ns", "asked-for")
    await settle(200)
    assert controller.queue.len() == 0 and runs == []
    controller.start()
    await settle(200)
    assert sorted(runs) == ["ns/a", "ns/c"]
    await controller.stop()
    await informer.stop()


async def test_related_updates_outside_the_namespaces_asked_for_queue_nothing_and_decode_nothing(
    clock: FakeClock,
) -> None:
    controller, _, informer = await started(clock)
    lw = ScriptedListerWatcher()
    lw.add_list(pod("a", "1"), pod("b", "2", namespace="other"), rv="2")
    lw.add_watch(
        event("MODIFIED", "a", "3"), WatchEvent("MODIFIED", pod("b", "4", namespace="other")), HANG
    )
    codec = CountingCodec()
    related = SharedInformer(lw, name="related", clock=clock, codec=codec)
    runs: list[str] = []

    async def record(key: str, obj: Object | None) -> None:
        runs.append(key)

    def by_version(obj: Object) -> list[str]:
        return [f"{obj['metadata']['namespace']}/{obj['metadata']['resourceVersion']}"]

    controller.watch_related(related, by_version, updates_in=lambda ns: ns == "ns")
    controller.on_change("record", record)
    related.start()
    await run(controller, informer)
    assert sorted(runs) == ["ns/1", "ns/3", "other/2"], "adds anywhere, updates in ns only"
    assert codec.decoded == 3, "the two listed adds, and the old object of the update in ns"
    await controller.stop()
    await informer.stop()
    await related.stop()


async def test_an_update_no_handler_wants_queues_no_run_and_one_any_handler_wants_runs_all(
    clock: FakeClock,
) -> None:
    controller, _, informer = await started(clock, pod("a", "1"))
    runs: list[tuple[str, str]] = []

    def recorder(name: str) -> Any:
        async def record(key: str, obj: Object | None) -> None:
            runs.append((name, obj["metadata"]["resourceVersion"] if obj else "gone"))

        return record

    def flagged(obj: Object) -> bool:
        return bool(obj["metadata"].get("flag"))

    controller.on_change("first", recorder("first"), updates_wanted=flagged)
    controller.on_change("second", recorder("second"), updates_wanted=lambda _o: False)
    await run(controller, informer)
    assert runs == [("first", "1"), ("second", "1")], "an add queues whatever the filters say"
    runs.clear()
    informer.on_event("MODIFIED", pod("a", "2"))
    await settle(200)
    assert runs == [], "an update neither filter wants queues no run"
    informer.on_event("MODIFIED", pod("a", "3", flag=True))
    await settle(200)
    assert runs == [("first", "3"), ("second", "3")], "one filter wants it: every handler runs"
    runs.clear()
    informer.on_event("DELETED", pod("a", "4"))
    await settle(200)
    assert runs == [("first", "gone"), ("second", "gone")], "a delete queues whatever they say"
    await controller.stop()
    await informer.stop()


async def versions_run_after_an_update(
    clock: FakeClock, filters: list[Callable[[Object], bool] | None]
) -> list[str]:
    """The resourceVersions the handlers read after one update of a started controller with
    one recording handler per filter in `filters` (None: registered without one)."""
    controller, _, informer = await started(clock, pod("a", "1"))
    runs: list[str] = []

    async def record(key: str, obj: Object | None) -> None:
        runs.append(obj["metadata"]["resourceVersion"] if obj else "gone")

    for index, accepts in enumerate(filters):
        controller.on_change(f"handler-{index}", record, updates_wanted=accepts)
    await run(controller, informer)
    runs.clear()
    informer.on_event("MODIFIED", pod("a", "2"))
    await settle(200)
    await controller.stop()
    await informer.stop()
    return runs


async def test_a_handler_registered_without_an_update_filter_runs_on_every_update(
    clock: FakeClock,
) -> None:
    runs = await versions_run_after_an_update(clock, [lambda _o: False, None])
    assert runs == ["2", "2"], "the unfiltered handler's update runs both"


async def test_an_update_filter_that_raises_queues_the_update_instead_of_losing_it(
    clock: FakeClock,
) -> None:
    def unreadable(obj: Object) -> bool:
        return bool(obj["status"]["nested"])  # KeyError on every test pod

    runs = await versions_run_after_an_update(clock, [unreadable])
    assert runs == ["2"], "an object the filter cannot read is run, not dropped"
