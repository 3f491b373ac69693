"""Rate limiter arithmetic, checked against the numbers client-go's limiters produce."""

from __future__ import annotations

import itertools
import math

import pytest
from harvester_quota.generic.workqueue import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    default_controller_rate_limiter,
)
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.testbench.strategy.harvester.strategy import ItemFastSlowRateLimiter

# 5 ms * 2**n for n = 0..17 (5 ms ... 655.36 s), then the 1000 s cap from the 19th failure on.
EXPONENTIAL_5MS_TO_1000S = [5 * 2**n / 1000 for n in range(18)] + [1000.0] * 3


def test_exponential_doubles_from_5ms_and_caps_at_1000s() -> None:
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(
        0.005, 1000.0
    )
    delays = [limiter.when("ns/a") for _ in EXPONENTIAL_5MS_TO_1000S]
    assert delays == EXPONENTIAL_5MS_TO_1000S
    assert delays[:4] == [0.005, 0.01, 0.02, 0.04]
    assert delays[17] == 655.36


def test_exponential_counts_each_item_separately_and_forget_resets() -> None:
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.001, 1.0)
    assert [limiter.when("ns/a") for _ in range(3)] == [0.001, 0.002, 0.004]
    assert limiter.when("ns/b") == 0.001
    limiter.forget("ns/a")
    assert limiter.when("ns/a") == 0.001
    assert limiter.when("ns/b") == 0.002, "ns/b's count is its own"
    limiter.forget("ns/never")  # forgetting an unknown item is fine


def test_exponential_never_overflows() -> None:
    # 1 ns * 2**63 is exactly Go's int64 limit, and 2.0**1024 overflows a float: both give the cap.
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(
        1e-9, 1000.0
    )
    delays = [limiter.when("ns/a") for _ in range(1100)]
    assert delays[0] == 1e-9
    assert delays[30] == 2**30 / 1e9
    assert delays[63] == 1000.0
    assert delays[1099] == 1000.0
    assert all(0 < delay <= 1000.0 for delay in delays)


@pytest.mark.parametrize(("base", "cap"), [(-0.001, 1.0), (0.001, -1.0), (math.nan, 1.0)])
def test_exponential_rejects_bad_durations(base: float, cap: float) -> None:
    with pytest.raises(ValueError, match="must be a duration"):
        ItemExponentialFailureRateLimiter[str](base, cap)


def test_fast_slow_switches_after_the_fast_attempts() -> None:
    limiter: ItemFastSlowRateLimiter[str] = ItemFastSlowRateLimiter(0.005, 10.0, 3)
    assert [limiter.when("ns/a") for _ in range(5)] == [0.005, 0.005, 0.005, 10.0, 10.0]
    assert limiter.when("ns/b") == 0.005
    limiter.forget("ns/a")
    assert limiter.when("ns/a") == 0.005


def test_bucket_lets_the_burst_through_then_spaces_by_one_over_qps() -> None:
    clock = FakeClock()
    limiter: BucketRateLimiter[str] = BucketRateLimiter(10.0, 100, clock=clock)
    burst = [limiter.when(f"ns/item-{n}") for n in range(100)]
    assert burst == [0.0] * 100
    # The same instant: each further item books the next token, 100 ms after the previous one.
    assert [limiter.when(f"ns/late-{n}") for n in range(3)] == [0.1, 0.2, 0.3]


def test_bucket_refills_at_qps_up_to_the_burst() -> None:
    clock = FakeClock()
    limiter: BucketRateLimiter[str] = BucketRateLimiter(10.0, 100, clock=clock)
    for _ in range(100):
        limiter.when("ns/a")
    clock.step(0.1)  # one token back
    assert limiter.when("ns/a") == 0.0
    assert limiter.when("ns/a") == 0.1
    clock.step(0.1)  # pays for the booked token only
    assert limiter.when("ns/a") == 0.1
    clock.step(3600.0)  # a long quiet spell refills to the burst, not beyond
    assert [limiter.when("ns/a") for _ in range(101)] == [0.0] * 100 + [0.1]


def test_bucket_ready_times_are_100ms_apart_while_callers_keep_coming() -> None:
    clock = FakeClock()
    limiter: BucketRateLimiter[str] = BucketRateLimiter(10.0, 100, clock=clock)
    for _ in range(100):
        limiter.when("ns/a")
    ready_at = []
    for _ in range(5):
        ready_at.append(clock.monotonic() + limiter.when("ns/a"))
        clock.step(0.05)  # callers arrive faster than the bucket refills
    gaps = [round(later - earlier, 9) for earlier, later in itertools.pairwise(ready_at)]
    assert gaps == [0.1] * 4


def test_bucket_tracks_no_item() -> None:
    limiter: BucketRateLimiter[str] = BucketRateLimiter(10.0, 1, clock=FakeClock())
    limiter.when("ns/a")
    limiter.forget("ns/a")
    assert limiter.when("ns/a") == 0.1, "forget does not give a token back"


def test_bucket_with_infinite_qps_never_waits() -> None:
    limiter: BucketRateLimiter[str] = BucketRateLimiter(math.inf, 0, clock=FakeClock())
    assert [limiter.when("ns/a") for _ in range(1000)] == [0.0] * 1000


@pytest.mark.parametrize(("qps", "burst", "message"), [(0.0, 1, "qps"), (1.0, 0, "burst")])
def test_bucket_rejects_settings_that_would_never_let_anything_through(
    qps: float, burst: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        BucketRateLimiter[str](qps, burst)


def test_max_of_takes_the_longest_delay_and_every_limiter_counts() -> None:
    fast_slow: ItemFastSlowRateLimiter[str] = ItemFastSlowRateLimiter(0.005, 3.0, 3)
    exponential: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(
        0.001, 1.0
    )
    limiter: MaxOfRateLimiter[str] = MaxOfRateLimiter(fast_slow, exponential)
    assert [limiter.when("ns/a") for _ in range(5)] == [0.005, 0.005, 0.005, 3.0, 3.0]
    assert exponential.when("ns/b") == 0.001
    assert exponential.when("ns/a") == 0.032, "every limiter counted the five failures"
    limiter.forget("ns/a")
    assert exponential.when("ns/a") == 0.001, "forget forgets on all"
    assert limiter.when("ns/a") == 0.005


def test_max_of_nothing_never_waits() -> None:
    limiter: MaxOfRateLimiter[str] = MaxOfRateLimiter()
    assert limiter.when("ns/a") == 0.0


def test_default_controller_limiter_per_item_backoff() -> None:
    clock = FakeClock()
    limiter: RateLimiter[str] = default_controller_rate_limiter(clock=clock)
    delays = []
    for _ in EXPONENTIAL_5MS_TO_1000S:
        delays.append(limiter.when("ns/a"))
        clock.step(1000.0)  # keep the bucket full: only the per-item backoff shows
    assert delays == EXPONENTIAL_5MS_TO_1000S
    limiter.forget("ns/a")
    assert limiter.when("ns/a") == 0.005


def test_default_controller_limiter_overall_bucket() -> None:
    limiter: RateLimiter[str] = default_controller_rate_limiter(clock=FakeClock())
    first_failures = [limiter.when(f"ns/item-{n}") for n in range(100)]
    assert first_failures == [0.005] * 100
    # 100 items failed at once: the shared 10 qps bucket now outweighs the 5 ms backoff.
    assert [limiter.when(f"ns/other-{n}") for n in range(3)] == [0.1, 0.2, 0.3]
