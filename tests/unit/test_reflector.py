"""The reflector follows client-go's list/watch rules; time is stepped, never slept."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from harvester_quota.generic import errors
from harvester_quota.generic.backoff import Backoff
from harvester_quota.generic.reflector import Reflector, page_size
from harvester_quota.generic.relistwaits import REFUSED_BACKOFF_CAP
from harvester_quota.testbench.clock import FakeClock, settle

from tests.unit.fakes import HANG, RecordingSink, ScriptedListerWatcher, error_event, event, pod


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def lw() -> ScriptedListerWatcher:
    return ScriptedListerWatcher()


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


async def start(
    lw: ScriptedListerWatcher, sink: RecordingSink, clock: FakeClock
) -> tuple[Reflector, asyncio.Task[None]]:
    reflector = Reflector("pods", lw, sink, clock=clock, rng=random.Random(7))
    task = asyncio.ensure_future(reflector.run())
    await settle()
    return reflector, task


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_first_list_at_zero_then_watch_from_the_list_version(
    lw: ScriptedListerWatcher, sink: RecordingSink, clock: FakeClock
) -> None:
    lw.add_list(pod("a", "10"), rv="10")
    lw.add_watch(event("ADDED", "b", "11"), event("MODIFIED", "a", "12"), HANG)
    reflector, task = await start(lw, sink, clock)
    assert lw.list_calls == [("0", 500)]
    assert lw.watch_calls[0][0] == "10"
    assert 300 <= lw.watch_calls[0][1] <= 600
    assert sink.lists[0][1] == "10"
    assert sink.events == [("ADDED", "b", "11"), ("MODIFIED", "a", "12")]
    assert reflector.last_sync_resource_version == "12"
    await stop(task)


async def test_normal_watch_end_rewatches_without_relisting(
    lw: ScriptedListerWatcher, sink: RecordingSink, clock: FakeClock
) -> None:
    lw.add_list(rv="10")
    lw.add_watch(event("ADDED", "a", "11"))  # the server ends the watch (its timeout)
    lw.add_watch(event("ADDED", "b", "12"), HANG)
    _, task = await start(lw, sink, clock)
    assert len(lw.list_calls) == 1
    assert [call[0] for call in lw.watch_calls] == ["10", "11"]
    await stop(task)


async def test_bookmark_advances_the_version_without_an_event(
    lw: ScriptedListerWatcher, sink: RecordingSink, clock: FakeClock
) -> None:
    lw.add_list(rv="10")
    lw.add_watch(event("BOOKMARK", "", "50"))
    lw.add_watch(HANG)
    reflector, task = await start(lw, sink, clock)
    assert sink.events == []
    assert reflector.last_sync_resource_version == "50"
    assert lw.watch_calls[1][0] == "50"
    await stop(task)


async def test_expired_watch_relists_from_the_last_version_not_from_etcd(
    lw: ScriptedListerWatcher, sink: RecordingSink, clock: FakeClock
) -> None:
    lw.add_list(rv="10")
    lw.add_watch(event("ADDED", "a", "15"), error_event(410, "Expired", "too old resource version"))
    lw.add_list(pod("a", "15"), rv="20")
    lw.add_watch(HANG)
    _, task = await start(lw, sink, clock)
    assert len(lw.list_calls) == 1
    await clock.advance(2.0)  # the backoff before a relist: 0.8 s with jitter up to 1.6 s
    # A list at "15" returns data at least as fresh as 15, and is served from the watch cache,
    # unpaginated; only if that too is expired does the reflector go to etcd with "".
    assert lw.list_calls == [("0", 500), ("15", 0)]
    assert lw.watch_calls[-1][0] == "20"
    await stop(task)


async def test_expired_list_falls_back_to_a_consistent_list_then_back_to_versions(
    lw: ScriptedListerWatcher, sink: RecordingSink, clock: FakeClock
) -> None:
    lw.add_list(rv="10")
    lw.add_watch(error_event(410, "Gone"))
    lw.add_list_error(errors.Gone("too old", reason="Expired"))
    lw.add_list(rv="30")
    lw.add_watch(error_event(410, "Expired"))
    lw.add_list(rv="40")
    lw.add_watch(HANG)
    _, task = await start(lw, sink, clock)
    await clock.advance(2.0)
    assert lw.list_calls == [("0", 500), ("10", 0), ("", 500)]
    await clock.advance(4.0)
    # The flag is cleared by the successful list: the next relist asks for "30" again.
    assert lw.list_calls[-1] == ("30", 0)
    await stop(task)


async def test_too_large_resource_version_lists_from_etcd(
    lw: ScriptedListerWatcher, sink: RecordingSink, clock: FakeClock
) -> None:
    too_large = errors.ServerTimeout(
        "Too large resource version",
        reason="Timeout",
        details={
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ]
        },
    )
    lw.add_list(rv="10")
    lw.add_watch(error_event(410, "Expired"))
    lw.add_list_error(too_large)
    lw.add_list(rv="11")
    lw.add_watch(HANG)
    _, task = await start(lw, sink, clock)
    await clock.advance(2.0)
    assert [call[0] for call in lw.list_calls] == ["0", "10", ""]
    await stop(task)


async def test_too_many_requests_backs_off_and_rewatches_without_relisting(
    lw: ScriptedListerWatcher, sink: RecordingSink, clock: FakeClock
) -> None:
    lw.add_list(rv="10")
    lw.add_watch(errors.TooManyRequests("slow down", retry_after=5.0))
    lw.add_watch(HANG)
    _, task = await start(lw, sink, clock)
    assert len(lw.watch_calls) == 1
    await clock.advance(4.9)
    assert len(lw.watch_calls) == 1, "Retry-After must be honoured"
    await clock.advance(0.2)
    assert len(lw.watch_calls) == 2
    assert lw.watch_calls[1][0] == "10"
    assert len(lw.list_calls) == 1
    await stop(task)


async def test_connection_refused_rewatches_without_relisting(
    lw: ScriptedListerWatcher, sink: RecordingSink, clock: FakeClock
) -> None:
    lw.add_list(rv="10")
    lw.add_watch(errors.ConnectionRefused("connection refused"))
    lw.add_watch(errors.ConnectionRefused("connection refused"))
    lw.add_watch(HANG)
    _, task = await start(lw, sink, clock)
    await clock.advance(10.0)
    assert len(lw.watch_calls) == 3
    assert len(lw.list_calls) == 1
    await stop(task)


async def test_silent_watch_is_abandoned_after_the_inactivity_timeout(
    lw: ScriptedListerWatcher, sink: RecordingSink, clock: FakeClock
) -> None:
    lw.add_list(rv="10")
    lw.add_watch(event("ADDED", "a", "11"), HANG)
    lw.add_watch(HANG)
    reflector, task = await start(lw, sink, clock)
    await clock.advance(reflector.inactivity_timeout - 1)
    assert len(lw.watch_calls) == 1
    await clock.advance(1.5)
    assert len(lw.watch_calls) == 2
    assert lw.watch_calls[1][0] == "11"
    assert lw.active_watches == 1, "the silent stream must be closed, not leaked"
    assert len(lw.list_calls) == 1
    await stop(task)


@pytest.mark.parametrize(
    "garbage",
    [
        errors.DecodeError('watch event is not valid JSON: b\'{"type":"ADDED","obj\''),
        errors.DecodeError("unknown watch event type 'EXPLODED'"),
        errors.DecodeError("ADDED event carries a Status, not an object"),
    ],
    ids=["truncated-json", "unknown-type", "status-as-object"],
)
async def test_undecodable_stream_relists(
    lw: ScriptedListerWatcher, sink: RecordingSink, clock: FakeClock, garbage: Exception
) -> None:
    lw.add_list(rv="10")
    lw.add_watch(event("ADDED", "a", "11"), garbage)
    lw.add_list(pod("a", "11"), rv="12")
    lw.add_watch(HANG)
    _, task = await start(lw, sink, clock)
    await clock.advance(2.0)
    assert [call[0] for call in lw.list_calls] == ["0", "11"]
    assert len(sink.lists) == 2
    await stop(task)


async def test_failures_never_hot_loop(
    lw: ScriptedListerWatcher, sink: RecordingSink, clock: FakeClock
) -> None:
    """Lists that keep failing are spaced by a doubling backoff capped at 30 s (up to 60 s
    with jitter): about 0.02 to 0.04 requests per second once it has grown, not a loop."""
    _, task = await start(lw, sink, clock)  # no scripted list: every list fails
    await settle(rounds=5000)
    assert len(lw.list_calls) == 1
    await clock.advance(600.0)
    assert 10 <= len(lw.list_calls) <= 30
    await stop(task)


@pytest.mark.parametrize(
    "first_step",
    [None, errors.ConnectionFailed("connection reset by peer")],
    ids=["closed-with-nothing", "broken-before-any-event"],
)
async def test_watch_closed_at_once_counts_as_a_failure(
    lw: ScriptedListerWatcher, sink: RecordingSink, clock: FakeClock, first_step: Any
) -> None:
    """A watch that ends or breaks before delivering anything is not a working watch: relist
    after a backoff, and never in a loop."""
    lw.add_list(rv="10")
    for _ in range(50):
        lw.add_watch(*([first_step] if first_step is not None else []))
        lw.add_list(rv="10")
    _, task = await start(lw, sink, clock)
    # A hot loop needs no clock time, only scheduling rounds: give it plenty before checking.
    await settle(rounds=5000)
    assert len(lw.watch_calls) <= 2
    assert len(lw.list_calls) <= 2
    await clock.advance(60.0)
    await settle(rounds=5000)
    assert len(lw.watch_calls) < 15
    assert 2 <= len(lw.list_calls) < 15, "each failed watch is followed by a relist"
    await stop(task)


def test_backoff_doubles_with_jitter_to_the_cap_and_resets_after_two_minutes(
    clock: FakeClock,
) -> None:
    backoff = Backoff(clock, rng=random.Random(1))
    delays = [backoff.next() for _ in range(8)]
    for delay, base in zip(delays, [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0], strict=True):
        assert base <= delay < 2 * base
    clock.step(121.0)
    assert 0.8 <= backoff.next() < 1.6


def test_paginated_initial_list_keeps_paginating(
    lw: ScriptedListerWatcher, sink: RecordingSink, clock: FakeClock
) -> None:
    reflector = Reflector("pods", lw, sink, clock=clock)
    reflector.last_sync_resource_version = "99"
    assert page_size(reflector.relist_resource_version(), paginated=False) == 0
    assert page_size(reflector.relist_resource_version(), paginated=True) == 500


async def test_a_stream_broken_after_events_rewatches_from_the_last_version(
    lw: ScriptedListerWatcher, sink: RecordingSink, clock: FakeClock
) -> None:
    """client-go's rule: a working watch that loses its connection resumes where it was; a
    50k-pod cache must not be relisted for a network blip."""
    lw.add_list(rv="10")
    lw.add_watch(event("ADDED", "a", "11"), errors.ConnectionFailed("connection reset by peer"))
    lw.add_watch(event("ADDED", "b", "12"), HANG)
    _, task = await start(lw, sink, clock)
    await clock.advance(2.0)
    assert [call[0] for call in lw.watch_calls] == ["10", "11"]
    assert len(lw.list_calls) == 1
    assert sink.events == [("ADDED", "a", "11"), ("ADDED", "b", "12")]
    await stop(task)


async def test_broken_streams_rewatch_with_backoff_not_in_a_loop(
    lw: ScriptedListerWatcher, sink: RecordingSink, clock: FakeClock
) -> None:
    lw.add_list(rv="10")
    for n in range(50):
        lw.add_watch(event("MODIFIED", "a", str(11 + n)), errors.ConnectionFailed("reset"))
    _, task = await start(lw, sink, clock)
    await settle(rounds=5000)
    assert len(lw.watch_calls) <= 2
    await clock.advance(60.0)
    await settle(rounds=5000)
    assert len(lw.watch_calls) < 15
    assert len(lw.list_calls) == 1
    await stop(task)


class RestartingServer:
    """A watch script on the clock: ("open", s) works for s seconds then breaks; "refused" is a
    server process that is not there; "hang" works for good. Records when each watch began."""

    def __init__(self, clock: FakeClock, script: list[Any]) -> None:
        self.clock, self.script, self.started_at = clock, list(script), []

    async def list(self, *, resource_version: str, page_size: int, each: Any = None) -> Any:
        from harvester_quota.generic.client import ListResult

        return ListResult([], "10", False)

    def watch(self, *, resource_version: str, timeout_seconds: int) -> Any:
        self.started_at.append(self.clock.monotonic())
        step = self.script.pop(0) if self.script else "hang"
        return self._play(step)

    async def _play(self, step: Any) -> Any:
        if step == "refused":
            raise errors.ConnectionRefused("connection refused")
        if step == "hang":
            await asyncio.Future()
        await self.clock.sleep(step[1])
        yield event("BOOKMARK", "x", "11")
        raise errors.ConnectionFailed("connection reset by peer")


async def test_a_restarted_api_server_is_watched_again_within_seconds_every_time(
    sink: RecordingSink, clock: FakeClock
) -> None:
    """Two restarts 30 s apart, each refusing connections for a few seconds: the backoff that
    grew during the first outage must not delay noticing the second server (it used to wait
    20-50 s)."""
    outage = ["refused"] * 4
    server = RestartingServer(clock, [("open", 60.0), *outage, ("open", 30.0), *outage])
    reflector = Reflector("pods", server, sink, clock=clock, rng=random.Random(7))
    task = asyncio.ensure_future(reflector.run())
    await clock.advance(200.0)
    gaps = [b - a for a, b in zip(server.started_at, server.started_at[1:], strict=False)]
    after_refusals = [gaps[i] for i in (1, 2, 3, 4, 6, 7, 8, 9)]
    assert all(gap <= 2 * REFUSED_BACKOFF_CAP for gap in after_refusals), gaps
    assert gaps[5] <= 30.0 + 2 * 0.8 + 1e-6, "after a lasting watch the backoff starts over"
    await stop(task)


async def test_a_burst_of_buffered_events_gives_the_loop_a_turn_after_each(
    lw: ScriptedListerWatcher, sink: RecordingSink, clock: FakeClock
) -> None:
    """A stream that never suspends (its events all buffered) must not hold the event loop for
    the whole burst: another task runs between any two events."""
    lw.add_list(rv="10")
    burst = [event("ADDED", f"p{i}", str(11 + i)) for i in range(20)]
    lw.add_watch(*burst, HANG)
    seen: list[int] = []

    async def watch_the_loop() -> None:
        while len(sink.events) < len(burst):
            seen.append(len(sink.events))
            await asyncio.sleep(0)

    watcher = asyncio.ensure_future(watch_the_loop())
    _, task = await start(lw, sink, clock)
    await asyncio.wait_for(watcher, 5)
    assert len(sink.events) == len(burst)
    between = sorted({count for count in seen if 0 < count < len(burst)})
    assert len(between) >= len(burst) - 2, f"the loop only got turns at {sorted(set(seen))}"
    await stop(task)
