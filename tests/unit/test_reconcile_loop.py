"""The shared worker loop of keys whose reconcile says when to look again."""

from __future__ import annotations

import asyncio
import logging

import pytest
from harvester_quota.generic import errors
from harvester_quota.generic.reconcileloop import run_reconcile_loop
from harvester_quota.generic.workqueue import RateLimitingQueue, default_controller_rate_limiter
from harvester_quota.testbench.clock import FakeClock

log = logging.getLogger(__name__)


class Script:
    """A reconcile that answers from a list per key and records each call."""

    def __init__(self, answers: dict[str, list[float | Exception | None]]) -> None:
        self.answers = answers
        self.calls: list[str] = []
        self.called = asyncio.Event()

    async def __call__(self, key: str) -> float | None:
        self.calls.append(key)
        self.called.set()
        answer = self.answers[key].pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def _queue(clock: FakeClock) -> RateLimitingQueue[str]:
    return RateLimitingQueue(default_controller_rate_limiter(clock=clock), clock=clock)


async def test_a_failed_key_is_requeued_rate_limited_and_forgotten_once_it_succeeds(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    queue = _queue(clock)
    script = Script({"ns/a": [errors.Conflict("busy", status=409), RuntimeError("bug"), None]})
    worker = asyncio.ensure_future(run_reconcile_loop(queue, script, name="t", log=log))
    queue.add("ns/a")
    await _settle()
    assert script.calls == ["ns/a"]
    await clock.advance(0.004)  # client-go's limiter: 5 ms after the first failure, then 10 ms
    await _settle()
    assert script.calls == ["ns/a"], "not before its backoff"
    await clock.advance(0.001)
    await _settle()
    assert script.calls == ["ns/a", "ns/a"]
    assert "t: ns/a failed, retrying" in caplog.text, "an unexpected error is logged in full"
    await clock.advance(0.010)
    await _settle()
    assert script.calls == ["ns/a"] * 3
    assert queue._rate_limiter.when("ns/a") == 0.005, "forgotten: the next failure waits 5 ms"
    queue.shut_down()
    await asyncio.wait_for(worker, 1.0)


async def test_a_reconcile_that_asks_to_look_again_runs_after_that_delay_and_not_before(
    clock: FakeClock,
) -> None:
    queue = _queue(clock)
    script = Script({"ns/a": [30.0, None]})
    worker = asyncio.ensure_future(run_reconcile_loop(queue, script, name="t", log=log))
    queue.add("ns/a")
    await _settle()
    await clock.advance(29.0)
    await _settle()
    assert script.calls == ["ns/a"]
    await clock.advance(1.0)
    await _settle()
    assert script.calls == ["ns/a", "ns/a"]
    queue.shut_down()
    await asyncio.wait_for(worker, 1.0)


async def test_the_loop_ends_when_the_queue_shuts_down(clock: FakeClock) -> None:
    queue = _queue(clock)
    worker = asyncio.ensure_future(run_reconcile_loop(queue, Script({}), name="t", log=log))
    await _settle()
    assert not worker.done()
    queue.shut_down()
    await asyncio.wait_for(worker, 1.0)
