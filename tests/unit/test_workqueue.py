"""Behaviour of Queue, DelayingQueue and RateLimitingQueue (client-go's workqueue semantics).

Time only moves when a test moves the FakeClock; nothing sleeps for real.
"""

from __future__ import annotations

import asyncio

import pytest
from harvester_quota.generic.workqueue import (
    MAX_WAIT,
    DelayingQueue,
    ItemExponentialFailureRateLimiter,
    Queue,
    RateLimitingQueue,
)
from harvester_quota.testbench.clock import FakeClock, settle
from hypothesis import given, settings
from hypothesis import strategies as st


def background_tasks() -> set[asyncio.Task[object]]:
    """Tasks other than the test's own (a queue's refresher or waiting loop, workers)."""
    return {task for task in asyncio.all_tasks() if task is not asyncio.current_task()}


async def get_item(queue: Queue[str]) -> str:
    item, shutdown = await queue.get()
    assert not shutdown
    assert item is not None
    return item


# Queue


async def test_repeated_adds_collapse_into_one_item() -> None:
    queue: Queue[str] = Queue()
    for _ in range(5):
        queue.add("ns/a")
    assert queue.len() == 1
    assert await get_item(queue) == "ns/a"
    assert queue.len() == 0


async def test_items_come_out_in_fifo_order() -> None:
    queue: Queue[str] = Queue()
    for key in ["ns/c", "ns/a", "ns/b", "ns/a"]:
        queue.add(key)
    assert [await get_item(queue) for _ in range(3)] == ["ns/c", "ns/a", "ns/b"]


async def test_add_while_processing_is_queued_again_on_done() -> None:
    queue: Queue[str] = Queue()
    queue.add("ns/a")
    item = await get_item(queue)
    queue.add("ns/a")
    queue.add("ns/a")
    assert queue.len() == 0, "an item being processed must not be queued (nor handed out) again"
    queue.done(item)
    assert queue.len() == 1
    assert await get_item(queue) == "ns/a"


async def test_queued_tells_a_worker_whether_its_item_will_be_handed_out_again() -> None:
    queue: Queue[str] = Queue()
    assert not queue.queued("ns/a")
    queue.add("ns/a")
    assert queue.queued("ns/a")
    item = await get_item(queue)
    assert not queue.queued(item), "held by a worker, not added since"
    queue.add("ns/a")
    assert queue.queued(item)
    queue.done(item)
    assert queue.queued(item)


async def test_done_without_a_re_add_does_not_queue_again() -> None:
    queue: Queue[str] = Queue()
    queue.add("ns/a")
    queue.done(await get_item(queue))
    assert queue.len() == 0
    queue.add("ns/a")
    assert queue.len() == 1, "after done, the item is an ordinary new item again"


async def test_done_for_an_item_nobody_holds_is_ignored() -> None:
    queue: Queue[str] = Queue()
    queue.add("ns/a")
    queue.done("ns/a")  # dirty but not processing: client-go would queue a duplicate
    queue.done("ns/never-added")
    assert queue.len() == 1
    assert await get_item(queue) == "ns/a"
    assert queue.len() == 0


async def test_get_waits_for_an_add() -> None:
    queue: Queue[str] = Queue()
    getter = asyncio.create_task(queue.get())
    await settle()
    assert not getter.done()
    queue.add("ns/a")
    await settle()
    assert getter.result() == ("ns/a", False)


async def test_a_cancelled_getter_does_not_swallow_an_item() -> None:
    queue: Queue[str] = Queue()
    first = asyncio.create_task(queue.get())
    second = asyncio.create_task(queue.get())
    await settle()
    queue.add("ns/a")  # wakes `first`...
    first.cancel()  # ...which leaves before it runs: the wake-up must pass to `second`
    await settle()
    assert first.cancelled()
    assert second.result() == ("ns/a", False)


async def test_none_is_not_a_valid_item() -> None:
    queue: Queue[str | None] = Queue()
    with pytest.raises(TypeError, match="None"):
        queue.add(None)


async def test_several_workers_never_hold_the_same_item_and_lose_no_event() -> None:
    clock = FakeClock()
    queue: Queue[str] = Queue(clock=clock)
    in_flight: set[str] = set()
    starts: list[tuple[str, float]] = []

    async def worker(speed: int) -> None:
        while True:
            key, _ = await queue.get()
            if key is None:
                return
            assert key not in in_flight, f"{key} handed to two workers at once"
            in_flight.add(key)
            starts.append((key, clock.monotonic()))
            await clock.sleep(0.01 * speed)
            in_flight.discard(key)
            queue.done(key)

    workers = [asyncio.create_task(worker(speed)) for speed in (1, 2, 3, 5)]
    keys = ["ns/a", "ns/b", "ns/c"]
    last_add: dict[str, float] = {}
    for _ in range(40):
        for key in keys:
            queue.add(key)
            last_add[key] = clock.monotonic()
        await clock.advance(0.004)
    await clock.advance(1.0)
    queue.shut_down()
    await asyncio.gather(*workers)

    for key in keys:
        key_starts = [at for started, at in starts if started == key]
        assert any(at >= last_add[key] for at in key_starts), f"the last add of {key} was lost"
        assert len(key_starts) < 40, f"adds of {key} should have collapsed"
    assert not in_flight


async def test_shut_down_hands_out_what_is_queued_then_reports_shutdown() -> None:
    queue: Queue[str] = Queue()
    queue.add("ns/a")
    queue.add("ns/b")
    queue.shut_down()
    queue.add("ns/c")  # ignored
    assert await get_item(queue) == "ns/a"
    assert await get_item(queue) == "ns/b"
    assert await queue.get() == (None, True)
    assert await queue.get() == (None, True)


async def test_shut_down_wakes_every_blocked_getter() -> None:
    queue: Queue[str] = Queue()
    getters = [asyncio.create_task(queue.get()) for _ in range(3)]
    await settle()
    assert not any(getter.done() for getter in getters)
    queue.shut_down()
    await settle()
    assert [getter.result() for getter in getters] == [(None, True)] * 3


async def test_shut_down_does_not_wait_for_items_in_progress() -> None:
    queue: Queue[str] = Queue()
    queue.add("ns/a")
    await get_item(queue)
    queue.shut_down()  # returns at once although ns/a is not done
    assert await queue.get() == (None, True)


async def test_a_dirty_item_in_progress_is_queued_again_after_shutdown() -> None:
    queue: Queue[str] = Queue()
    queue.add("ns/a")
    item = await get_item(queue)
    queue.add("ns/a")
    queue.shut_down()
    queue.done(item)
    assert await get_item(queue) == "ns/a", "marked dirty before shutdown: still processed"


async def test_an_unnamed_queue_starts_no_task() -> None:
    queue: Queue[str] = Queue()
    queue.add("ns/a")
    queue.done(await get_item(queue))
    assert not background_tasks()


# DelayingQueue


async def test_add_after_is_not_ready_before_its_time_and_ready_after() -> None:
    clock = FakeClock()
    queue: DelayingQueue[str] = DelayingQueue(clock=clock)
    queue.add_after("ns/a", 0.05)
    await clock.advance(0.049)
    assert queue.len() == 0
    assert queue.waiting() == 1
    await clock.advance(0.001)
    assert queue.len() == 1
    assert queue.waiting() == 0
    assert await get_item(queue) == "ns/a"


async def test_add_after_without_delay_adds_at_once() -> None:
    queue: DelayingQueue[str] = DelayingQueue(clock=FakeClock())
    queue.add_after("ns/a", 0)
    queue.add_after("ns/b", -1)
    assert queue.len() == 2
    assert not background_tasks(), "nothing parked, no waiting loop"


async def test_parked_items_come_out_by_ready_time() -> None:
    clock = FakeClock()
    queue: DelayingQueue[str] = DelayingQueue(clock=clock)
    queue.add_after("ns/first", 1.0)
    queue.add_after("ns/second", 0.5)
    queue.add_after("ns/third", 0.25)
    await settle()
    clock.step(2.0)  # one jump past all three
    await settle()
    assert [await get_item(queue) for _ in range(3)] == ["ns/third", "ns/second", "ns/first"]


async def test_a_parked_duplicate_keeps_the_earlier_ready_time() -> None:
    clock = FakeClock()
    queue: DelayingQueue[str] = DelayingQueue(clock=clock)
    queue.add_after("ns/sooner-later", 1.0)
    queue.add_after("ns/sooner-later", 0.5)  # earlier: wins
    queue.add_after("ns/later-ignored", 0.5)
    queue.add_after("ns/later-ignored", 1.0)  # later: ignored
    assert queue.waiting() == 2
    await clock.advance(0.5)
    assert queue.len() == 2
    assert queue.waiting() == 0
    queue.done(await get_item(queue))
    queue.done(await get_item(queue))
    await clock.advance(1.0)
    assert queue.len() == 0, "the superseded ready times must not add the items again"


async def test_an_earlier_item_added_while_the_loop_sleeps_is_not_held_back() -> None:
    clock = FakeClock()
    queue: DelayingQueue[str] = DelayingQueue(clock=clock)
    queue.add_after("ns/first", 1.0)
    queue.add_after("ns/second", 0.05)
    await clock.advance(0.06)
    assert await get_item(queue) == "ns/second"
    queue.add_after("ns/third", 2.0)
    await clock.advance(1.0)
    assert await get_item(queue) == "ns/first"
    await clock.advance(2.0)
    assert await get_item(queue) == "ns/third"


async def test_the_waiting_loop_sleeps_at_most_max_wait() -> None:
    clock = FakeClock()
    queue: DelayingQueue[str] = DelayingQueue(clock=clock)
    queue.add_after("ns/a", 100.0)
    await settle()
    assert clock.next_deadline() == clock.monotonic() + MAX_WAIT
    await clock.advance(99.0)
    assert queue.len() == 0
    await clock.advance(1.0)
    assert queue.len() == 1


async def test_the_waiting_loop_ends_when_nothing_is_parked() -> None:
    clock = FakeClock()
    queue: DelayingQueue[str] = DelayingQueue(clock=clock)
    queue.add_after("ns/a", 1.0)
    await settle()
    assert len(background_tasks()) == 1
    await clock.advance(1.0)
    assert not background_tasks()
    assert clock.sleepers == 0
    queue.add_after("ns/b", 1.0)  # and starts again when needed
    await clock.advance(1.0)
    assert queue.len() == 2


async def test_shut_down_drops_parked_items_and_stops_the_loop() -> None:
    clock = FakeClock()
    queue: DelayingQueue[str] = DelayingQueue(clock=clock)
    queue.add_after("ns/a", 1.0)
    await settle()
    queue.shut_down()
    queue.add_after("ns/b", 1.0)
    queue.add_after("ns/c", 0)
    await clock.advance(2.0)
    assert queue.len() == 0
    assert queue.waiting() == 0
    assert not background_tasks()
    assert await queue.get() == (None, True)


async def test_later_items_do_not_restart_the_waiting_loop() -> None:
    clock = FakeClock()
    queue: DelayingQueue[str] = DelayingQueue(clock=clock)
    queue.add_after("ns/a", 0.005)
    await settle()
    first_loop = background_tasks()
    for n in range(100):  # retries keep coming, each due after the one the loop sleeps for
        queue.add_after(f"ns/b-{n}", 0.005 + n * 0.001)
    await settle()
    assert background_tasks() == first_loop
    await clock.advance(0.2)
    assert queue.len() == 101


def test_add_after_outside_the_event_loop_fails_before_parking() -> None:
    queue: DelayingQueue[str] = DelayingQueue(clock=FakeClock())
    with pytest.raises(RuntimeError, match="event loop"):
        queue.add_after("ns/a", 1.0)
    assert queue.waiting() == 0
    queue.add_after("ns/a", 0)  # no delay needs no loop
    assert queue.len() == 1


async def test_a_nan_delay_is_refused() -> None:
    queue: DelayingQueue[str] = DelayingQueue(clock=FakeClock())
    with pytest.raises(ValueError, match="nan"):
        queue.add_after("ns/a", float("nan"))


async def test_many_earlier_re_parks_keep_the_heap_small() -> None:
    clock = FakeClock()
    queue: DelayingQueue[str] = DelayingQueue(clock=clock)
    for step in range(1000):
        queue.add_after("ns/a", 2000.0 - step)
    queue.add_after("ns/b", 5000.0)
    assert queue.waiting() == 2
    assert len(queue._waiting) < 200  # superseded entries were compacted away
    await clock.advance(1001.0)
    assert await get_item(queue) == "ns/a"
    assert queue.len() == 0


# RateLimitingQueue


async def test_add_rate_limited_waits_as_the_limiter_says_and_forget_resets() -> None:
    clock = FakeClock()
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.1, 10.0)
    queue: RateLimitingQueue[str] = RateLimitingQueue(limiter, clock=clock)
    queue.add_rate_limited("ns/a")
    await clock.advance(0.099)
    assert queue.len() == 0
    await clock.advance(0.001)
    queue.done(await get_item(queue))

    queue.add_rate_limited("ns/a")  # second failure: 0.2 s
    await clock.advance(0.199)
    assert queue.len() == 0
    await clock.advance(0.001)
    item = await get_item(queue)
    queue.forget(item)
    queue.done(item)

    queue.add_rate_limited("ns/a")  # forgotten: back to 0.1 s
    await clock.advance(0.1)
    assert queue.len() == 1


async def test_the_default_limiter_starts_at_five_milliseconds() -> None:
    clock = FakeClock()
    queue: RateLimitingQueue[str] = RateLimitingQueue(clock=clock)
    queue.add_rate_limited("ns/a")
    await clock.advance(0.004)
    assert queue.len() == 0
    await clock.advance(0.001)
    assert queue.len() == 1


# Property: random operation sequences never break the invariants.

_KEYS = ["ns/a", "ns/b", "ns/c", "ns/d"]
_OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from(_KEYS)),
        st.tuples(st.just("get"), st.just("")),
        st.tuples(st.just("done"), st.sampled_from(_KEYS)),
        st.tuples(st.just("shut_down"), st.just("")),
    ),
    max_size=60,
)


class _ModelQueue:
    """client-go's queue restated naively (lists, linear scans) to compare against."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.dirty: list[str] = []
        self.processing: list[str] = []
        self.shutting_down = False

    def add(self, key: str) -> None:
        if self.shutting_down or key in self.dirty:
            return
        self.dirty.append(key)
        if key not in self.processing:
            self.order.append(key)

    def get(self) -> str | None:
        if not self.order:
            return None
        key = self.order.pop(0)
        self.dirty.remove(key)
        self.processing.append(key)
        return key

    def done(self, key: str) -> None:
        if key not in self.processing:
            return
        self.processing.remove(key)
        if key in self.dirty:
            self.order.append(key)


@settings(max_examples=300, deadline=None)
@given(_OPERATIONS)
def test_random_operations_match_the_model_and_keep_invariants(
    operations: list[tuple[str, str]],
) -> None:
    async def scenario() -> None:
        queue: Queue[str] = Queue()
        model = _ModelQueue()
        held: set[str] = set()
        for operation, key in operations:
            if operation == "add":
                queue.add(key)
                model.add(key)
            elif operation == "done":
                queue.done(key)
                model.done(key)
                held.discard(key)
            elif operation == "shut_down":
                queue.shut_down()
                model.shutting_down = True
            elif model.order or model.shutting_down:  # a get that would not block
                item, shutdown = await queue.get()
                assert item == model.get()
                assert shutdown == (item is None)
                if item is not None:
                    assert item not in held, "an item was handed out twice at once"
                    held.add(item)
            assert queue.len() == len(model.order)
            assert len(set(model.order)) == len(model.order), "an item is queued twice"
            assert held == set(model.processing)

    asyncio.run(scenario())


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(_KEYS), st.integers(0, 30)), max_size=20),
    st.lists(st.integers(1, 15), min_size=1, max_size=6),
)
def test_parked_items_arrive_at_their_earliest_ready_time_never_before(
    parks: list[tuple[str, int]], steps_ms: list[int]
) -> None:
    async def scenario() -> None:
        clock = FakeClock()
        queue: DelayingQueue[str] = DelayingQueue(clock=clock)
        added_at_once: set[str] = set()  # a zero delay is a plain add; it does not park
        earliest: dict[str, int] = {}
        for key, delay_ms in parks:
            queue.add_after(key, delay_ms / 1000)
            if delay_ms == 0:
                added_at_once.add(key)
            else:
                earliest[key] = min(delay_ms, earliest.get(key, delay_ms))
        elapsed_ms = 0
        for step_ms in steps_ms:
            await clock.advance(step_ms / 1000)
            elapsed_ms += step_ms
            due = {key for key, ready_ms in earliest.items() if ready_ms <= elapsed_ms}
            assert queue.len() == len(due | added_at_once)
            assert queue.waiting() == len(earliest) - len(due)
        queue.shut_down()
        await settle()
        assert not background_tasks()

    asyncio.run(scenario())
