"""Retries the API server asks for (429/5xx with Retry-After), and nothing else, on a FakeClock."""

from __future__ import annotations

import asyncio

import pytest
from harvester_quota.generic import errors
from harvester_quota.generic.retry import (
    JITTER,
    MAX_RETRY_AFTER,
    MAX_SERVER_RETRIES,
    call_with_server_retries,
    server_asked_to_retry,
)
from harvester_quota.testbench.clock import FakeClock


class Script:
    """A call that raises the scripted errors in order, then returns "done"."""

    def __init__(self, *failures: Exception) -> None:
        self.failures = list(failures)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "done"


def busy(seconds: float = 2.0) -> errors.ApiError:
    return errors.TooManyRequests("slow down", status=429, retry_after=seconds)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (errors.TooManyRequests("x", status=429, retry_after=1.0), True),
        (errors.ServerError("x", status=503, retry_after=1.0), True),
        (errors.TooManyRequests("x", status=429), False),  # no Retry-After: not a promise
        (errors.Conflict("x", status=409, retry_after=1.0), False),
        (errors.ServerError("x", status=500), False),
        (ValueError("x"), False),
    ],
)
def test_which_errors_are_retried(error: BaseException, expected: bool) -> None:
    assert server_asked_to_retry(error) is expected


async def test_retries_after_the_time_the_server_named() -> None:
    clock = FakeClock()
    call = Script(busy(2.0), busy(2.0))
    task = asyncio.ensure_future(call_with_server_retries(call, clock=clock))
    await clock.advance(1.9)
    assert call.calls == 1  # still waiting out the first Retry-After
    await clock.advance(2 * 2.0 * (1 + JITTER))
    assert await task == "done"
    assert call.calls == 3


async def test_other_errors_are_raised_at_once() -> None:
    clock = FakeClock()
    call = Script(errors.Conflict("stale", status=409))
    with pytest.raises(errors.Conflict):
        await call_with_server_retries(call, clock=clock)
    assert call.calls == 1


async def test_gives_up_after_the_bounded_number_of_retries() -> None:
    clock = FakeClock()
    call = Script(*[busy(1.0) for _ in range(MAX_SERVER_RETRIES + 5)])
    task = asyncio.ensure_future(call_with_server_retries(call, clock=clock))
    await clock.advance((MAX_SERVER_RETRIES + 1) * 1.0 * (1 + JITTER))
    with pytest.raises(errors.TooManyRequests):
        await task
    assert call.calls == MAX_SERVER_RETRIES + 1


async def test_a_huge_retry_after_is_capped() -> None:
    clock = FakeClock()
    call = Script(busy(3600.0))
    task = asyncio.ensure_future(call_with_server_retries(call, clock=clock))
    await clock.advance(MAX_RETRY_AFTER * (1 + JITTER))
    assert await task == "done"
