"""Work queue metrics: client-go's names and bookkeeping, driven by a stepped FakeClock."""

from __future__ import annotations

import asyncio

import pytest
from harvester_quota.generic.workqueue import (
    UNFINISHED_WORK_UPDATE_PERIOD,
    DelayingQueue,
    ItemExponentialFailureRateLimiter,
    Queue,
    RateLimitingQueue,
)
from harvester_quota.testbench.clock import FakeClock, settle
from prometheus_client import REGISTRY, CollectorRegistry, Gauge, generate_latest


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def sample(registry: CollectorRegistry, metric: str, name: str = "test") -> float | None:
    return registry.get_sample_value(metric, {"name": name})


def background_tasks() -> set[asyncio.Task[object]]:
    return {task for task in asyncio.all_tasks() if task is not asyncio.current_task()}


async def get_item(queue: Queue[str]) -> str:
    item, _ = await queue.get()
    assert item is not None
    return item


async def test_a_scripted_sequence_records_clientgo_values(registry: CollectorRegistry) -> None:
    clock = FakeClock()
    queue: Queue[str] = Queue(name="test", clock=clock, registry=registry)

    queue.add("ns/a")
    assert sample(registry, "workqueue_adds_total") == 1
    assert sample(registry, "workqueue_depth") == 1
    await settle()  # the refresher, started by the first add, waits: nothing is in progress

    clock.step(50e-6)
    item = await get_item(queue)
    assert sample(registry, "workqueue_depth") == 0
    assert sample(registry, "workqueue_queue_duration_seconds_count") == 1
    assert sample(registry, "workqueue_queue_duration_seconds_sum") == pytest.approx(50e-6)

    for _ in range(5):  # re-added while processing: one add, counted in depth, not in len()
        queue.add(item)
    assert sample(registry, "workqueue_adds_total") == 2
    assert sample(registry, "workqueue_depth") == 1
    assert queue.len() == 0

    clock.step(25e-6)
    queue.done(item)
    assert sample(registry, "workqueue_work_duration_seconds_count") == 1
    assert sample(registry, "workqueue_work_duration_seconds_sum") == pytest.approx(25e-6)
    assert sample(registry, "workqueue_depth") == 1

    item = await get_item(queue)
    # Its wait counts from the re-add, including the time it waited for the first pass to finish.
    assert sample(registry, "workqueue_queue_duration_seconds_count") == 2
    assert sample(registry, "workqueue_queue_duration_seconds_sum") == pytest.approx(75e-6)
    assert sample(registry, "workqueue_depth") == 0

    # The refresher resumed with the first get and begins its period when it next runs: now.
    await clock.advance(UNFINISHED_WORK_UPDATE_PERIOD)
    in_progress = UNFINISHED_WORK_UPDATE_PERIOD
    assert sample(registry, "workqueue_unfinished_work_seconds") == pytest.approx(in_progress)
    assert sample(registry, "workqueue_longest_running_processor_seconds") == pytest.approx(
        in_progress
    )

    queue.done(item)
    assert sample(registry, "workqueue_work_duration_seconds_count") == 2
    await clock.advance(UNFINISHED_WORK_UPDATE_PERIOD)
    assert sample(registry, "workqueue_unfinished_work_seconds") == 0
    assert sample(registry, "workqueue_longest_running_processor_seconds") == 0
    assert sample(registry, "workqueue_retries_total") is None, "a plain Queue has no retries"

    queue.shut_down()
    await settle()
    assert not background_tasks()


async def test_durations_land_in_the_right_buckets(registry: CollectorRegistry) -> None:
    clock = FakeClock()
    queue: Queue[str] = Queue(name="test", clock=clock, registry=registry)
    queue.add("ns/a")
    clock.step(0.002)  # waits 2 ms
    item = await get_item(queue)
    clock.step(30.0)  # works 30 s
    queue.done(item)

    def bucket(metric: str, le: str) -> float | None:
        return registry.get_sample_value(f"{metric}_bucket", {"name": "test", "le": le})

    assert bucket("workqueue_queue_duration_seconds", "0.001") == 0
    assert bucket("workqueue_queue_duration_seconds", "0.01") == 1
    assert bucket("workqueue_work_duration_seconds", "10.0") == 0
    assert bucket("workqueue_work_duration_seconds", "100.0") == 1
    queue.shut_down()


async def test_several_items_in_progress_sum_and_max(registry: CollectorRegistry) -> None:
    clock = FakeClock()
    queue: Queue[str] = Queue(name="test", clock=clock, registry=registry)
    queue.add("ns/a")  # the first use starts the refresher
    queue.add("ns/b")
    await get_item(queue)
    await settle()  # work is in progress: the refresher begins its period
    clock.step(0.1)
    await get_item(queue)
    await clock.advance(0.4)  # ns/a for 0.5 s, ns/b for 0.4 s at the first refresh
    assert sample(registry, "workqueue_unfinished_work_seconds") == pytest.approx(0.9)
    assert sample(registry, "workqueue_longest_running_processor_seconds") == pytest.approx(0.5)
    queue.shut_down()
    await settle()
    assert not background_tasks()


async def test_every_add_after_counts_as_a_retry(registry: CollectorRegistry) -> None:
    clock = FakeClock()
    queue: DelayingQueue[str] = DelayingQueue(name="test", clock=clock, registry=registry)
    queue.add_after("ns/a", 0)  # no delay: still a retry
    queue.add_after("ns/b", 1.0)
    queue.add_after("ns/b", 2.0)  # a later duplicate, ignored by the heap: still a retry
    assert sample(registry, "workqueue_retries_total") == 3
    assert sample(registry, "workqueue_adds_total") == 1
    assert sample(registry, "workqueue_depth") == 1

    await clock.advance(1.0)
    assert sample(registry, "workqueue_adds_total") == 2
    assert sample(registry, "workqueue_depth") == 2

    queue.shut_down()
    queue.add_after("ns/c", 1.0)
    assert sample(registry, "workqueue_retries_total") == 3, "not counted after shutdown"
    await settle()
    assert not background_tasks()


async def test_add_rate_limited_counts_a_retry_and_queue_wait_starts_when_added(
    registry: CollectorRegistry,
) -> None:
    clock = FakeClock()
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(1.0, 10.0)
    queue: RateLimitingQueue[str] = RateLimitingQueue(
        limiter, name="test", clock=clock, registry=registry
    )
    queue.add_rate_limited("ns/a")
    assert sample(registry, "workqueue_retries_total") == 1
    assert sample(registry, "workqueue_adds_total") == 0, "not added before its delay"
    await clock.advance(1.0)
    clock.step(0.25)
    await get_item(queue)
    # The backoff is not queue time: the wait counts from when the item was really added.
    assert sample(registry, "workqueue_queue_duration_seconds_sum") == pytest.approx(0.25)
    queue.shut_down()


async def test_an_unnamed_queue_records_nothing(registry: CollectorRegistry) -> None:
    clock = FakeClock()
    queue: RateLimitingQueue[str] = RateLimitingQueue(clock=clock, registry=registry)
    queue.add("ns/a")
    queue.add_rate_limited("ns/b")
    queue.done(await get_item(queue))
    assert list(registry.collect()) == [], "no family is even registered"
    queue.shut_down()


async def test_queues_sharing_a_name_and_registry_share_their_series(
    registry: CollectorRegistry,
) -> None:
    clock = FakeClock()
    first: Queue[str] = Queue(name="test", clock=clock, registry=registry)
    second: DelayingQueue[str] = DelayingQueue(name="test", clock=clock, registry=registry)
    other: Queue[str] = Queue(name="other", clock=clock, registry=registry)
    first.add("ns/a")
    second.add("ns/a")
    other.add("ns/a")
    assert sample(registry, "workqueue_adds_total") == 2
    assert sample(registry, "workqueue_adds_total", name="other") == 1
    for queue in (first, second, other):
        queue.shut_down()


async def test_the_default_registry_takes_named_queues_without_clashing() -> None:
    clock = FakeClock()
    queues: list[Queue[str]] = [
        RateLimitingQueue(name="test-default-registry", clock=clock) for _ in range(2)
    ]
    before = REGISTRY.get_sample_value("workqueue_adds_total", {"name": "test-default-registry"})
    for queue in queues:
        queue.add("ns/a")
    after = REGISTRY.get_sample_value("workqueue_adds_total", {"name": "test-default-registry"})
    assert after == (before or 0) + 2
    for queue in queues:
        queue.shut_down()


async def test_the_refresher_starts_on_first_use_and_stops_on_shutdown(
    registry: CollectorRegistry,
) -> None:
    clock = FakeClock()
    queue: Queue[str] = Queue(name="test", clock=clock, registry=registry)
    await settle()
    assert not background_tasks(), "nothing starts before the queue is used"
    queue.add("ns/a")
    await settle()
    assert len(background_tasks()) == 1
    assert clock.sleepers == 0, "nothing in progress: no timer"
    item = await get_item(queue)
    await settle()
    assert clock.sleepers == 1, "work in progress: refreshing every period"
    queue.shut_down()
    await settle()
    assert not background_tasks()
    assert clock.sleepers == 0
    await clock.advance(5.0)
    assert sample(registry, "workqueue_unfinished_work_seconds") == 0, "no refresh after shutdown"
    queue.done(item)


def test_a_named_queue_used_before_the_loop_runs_starts_its_refresher_later(
    registry: CollectorRegistry,
) -> None:
    clock = FakeClock()
    queue: Queue[str] = Queue(name="test", clock=clock, registry=registry)
    queue.add("ns/a")  # no running loop yet: nothing to start a task on

    async def scenario() -> None:
        item = await get_item(queue)  # the first use inside the loop starts it
        assert len(background_tasks()) == 1
        await clock.advance(UNFINISHED_WORK_UPDATE_PERIOD)
        assert sample(registry, "workqueue_unfinished_work_seconds") == pytest.approx(0.5)
        queue.done(item)
        queue.shut_down()
        await settle()
        assert not background_tasks()

    asyncio.run(scenario())


async def test_the_exposition_uses_clientgo_names_and_types(registry: CollectorRegistry) -> None:
    clock = FakeClock()
    queue: DelayingQueue[str] = DelayingQueue(name="vmim", clock=clock, registry=registry)
    queue.add("ns/a")
    queue.add_after("ns/b", 0)
    clock.step(0.003)
    queue.done(await get_item(queue))
    text = generate_latest(registry).decode()
    for line in [
        "# TYPE workqueue_depth gauge",
        'workqueue_depth{name="vmim"} 1.0',
        "# TYPE workqueue_adds_total counter",
        'workqueue_adds_total{name="vmim"} 2.0',
        "# TYPE workqueue_queue_duration_seconds histogram",
        'workqueue_queue_duration_seconds_bucket{le="0.001",name="vmim"} 0.0',
        'workqueue_queue_duration_seconds_bucket{le="0.01",name="vmim"} 1.0',
        'workqueue_queue_duration_seconds_bucket{le="+Inf",name="vmim"} 1.0',
        'workqueue_queue_duration_seconds_count{name="vmim"} 1.0',
        "# TYPE workqueue_work_duration_seconds histogram",
        'workqueue_work_duration_seconds_count{name="vmim"} 1.0',
        'workqueue_unfinished_work_seconds{name="vmim"} 0.0',
        'workqueue_longest_running_processor_seconds{name="vmim"} 0.0',
        'workqueue_retries_total{name="vmim"} 1.0',
    ]:
        assert line in text.splitlines(), line
    queue.shut_down()


async def test_a_clashing_metric_in_the_same_registry_is_refused(
    registry: CollectorRegistry,
) -> None:
    Queue[str](name="test", registry=registry)
    with pytest.raises(ValueError, match="workqueue_depth"):
        Gauge("workqueue_depth", "someone else's", registry=registry)


async def test_the_refresher_idles_again_when_work_is_done(registry: CollectorRegistry) -> None:
    clock = FakeClock()
    queue: Queue[str] = Queue(name="test", clock=clock, registry=registry)
    queue.add("ns/a")
    item = await get_item(queue)
    await clock.advance(1.0)
    assert sample(registry, "workqueue_longest_running_processor_seconds") == 1.0
    queue.done(item)
    await clock.advance(UNFINISHED_WORK_UPDATE_PERIOD)
    assert sample(registry, "workqueue_longest_running_processor_seconds") == 0
    assert clock.sleepers == 0
    queue.add("ns/a")
    item = await get_item(queue)
    await clock.advance(UNFINISHED_WORK_UPDATE_PERIOD)
    assert sample(registry, "workqueue_longest_running_processor_seconds") == 0.5
    queue.shut_down()
