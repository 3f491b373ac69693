"""Rate limiters that decide how long a failed item waits before its retry, as client-go's.

Delays are float seconds at the API, like the clock. Inside, the exponential limiter and the token
bucket count in integer nanoseconds and truncate as Go's ``time.Duration`` conversions do, so the
numbers match client-go's exactly (5 ms, 10 ms, ... 655.36 s, then the 1000 s cap; 100 ms per token
at 10 qps) instead of drifting by float noise.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

from ..clock import REAL_CLOCK, Clock

T = TypeVar("T", bound=Hashable)
T_contra = TypeVar("T_contra", bound=Hashable, contravariant=True)

_NANOSECONDS = 1_000_000_000
_DURATION_LIMIT = 2.0**63
"""Go durations are int64 nanoseconds: a product at or above 2**63 ns (about 292 years) overflows."""

DEFAULT_BASE_DELAY = 0.005
"""Seconds before the first retry of client-go's default controller limiter: fast enough that a
transient conflict is retried at once, while 2**n growth quiets a persistent failure quickly."""
DEFAULT_MAX_DELAY = 1000.0
"""Cap of client-go's per-item backoff, seconds (reached after 18 failures: 5 ms * 2**18 > 1000 s)."""
DEFAULT_QPS = 10.0
"""Overall retry rate of client-go's default limiter (all items together), per second."""
DEFAULT_BURST = 100
"""Retries client-go's default limiter lets through at once before the qps applies."""


class RateLimiter(Protocol[T_contra]):
    """Decides per item how long it waits before a retry, and tracks its failures."""

    def when(self, item: T_contra) -> float:
        """Seconds ``item`` should wait now; counts as one more failure of it."""
        ...

    def forget(self, item: T_contra) -> None:
        """Stops tracking ``item`` (it succeeded, or it is given up on)."""
        ...


def _to_nanoseconds(seconds: float, what: str) -> int:
    if not 0 <= seconds < _DURATION_LIMIT / _NANOSECONDS:
        raise ValueError(f"{what} must be a duration in seconds >= 0, got {seconds!r}")
    return round(seconds * _NANOSECONDS)


def _seconds_truncated_to_nanoseconds(seconds: float) -> float:
    """``seconds`` rounded down to whole nanoseconds, as a Go ``time.Duration`` conversion does."""
    nanoseconds = seconds * _NANOSECONDS
    if nanoseconds >= _DURATION_LIMIT:
        return seconds
    return int(nanoseconds) / _NANOSECONDS


class ItemExponentialFailureRateLimiter(Generic[T]):
    """Per item: ``base_delay * 2**failures`` seconds, capped at ``max_delay``."""

    __slots__ = ("_base_ns", "_failures", "_max_ns")

    def __init__(self, base_delay: float, max_delay: float) -> None:
        self._base_ns = _to_nanoseconds(base_delay, "base_delay")
        self._max_ns = _to_nanoseconds(max_delay, "max_delay")
        self._failures: dict[T, int] = {}

    def when(self, item: T) -> float:
        exponent = self._failures.get(item, 0)
        self._failures[item] = exponent + 1
        return self._backoff_ns(exponent) / _NANOSECONDS

    def _backoff_ns(self, exponent: int) -> int:
        # client-go computes in float64 and caps before converting, so the product never overflows.
        try:
            backoff = float(self._base_ns) * 2.0**exponent
        except OverflowError:  # 2.0**1024 and up; Go's math.Pow returns +Inf, caught below
            return self._max_ns
        if backoff >= _DURATION_LIMIT:
            return self._max_ns
        return min(int(backoff), self._max_ns)

    def forget(self, item: T) -> None:
        self._failures.pop(item, None)


class BucketRateLimiter(Generic[T]):
    """One token bucket for all items: ``burst`` retries at once, then ``qps`` per second.

    ``when`` reserves a token and returns how long until it is available, like
    ``rate.Limiter.Reserve().Delay()`` in golang.org/x/time/rate: the bucket starts full, refills at
    ``qps`` tokens per second up to ``burst``, and goes negative to book future tokens, so each
    caller beyond the burst waits one more ``1/qps``. Time comes from the injected clock (client-go's
    bucket reads the wall clock directly). ``qps`` may be ``math.inf`` (never waits).
    """

    __slots__ = ("_burst", "_clock", "_last_ns", "_qps", "_tokens")

    def __init__(self, qps: float, burst: int, *, clock: Clock = REAL_CLOCK) -> None:
        if not qps > 0:
            raise ValueError(f"qps must be > 0 (math.inf for no limit), got {qps!r}")
        if burst < 1 and qps != math.inf:
            # x/time/rate would refuse every reservation and return an infinite delay.
            raise ValueError(f"burst must be >= 1, got {burst!r}")
        self._qps = qps
        self._burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last_ns: int | None = None

    def when(self, item: T) -> float:
        if self._qps == math.inf:
            return 0.0
        now_ns = round(self._clock.monotonic() * _NANOSECONDS)
        tokens = self._tokens_at(now_ns) - 1.0
        self._tokens = tokens
        self._last_ns = now_ns
        if tokens >= 0:
            return 0.0
        return _seconds_truncated_to_nanoseconds(-tokens / self._qps)

    def _tokens_at(self, now_ns: int) -> float:
        last_ns = self._last_ns
        if last_ns is None:
            return float(self._burst)  # never used: full
        elapsed_ns = max(0, now_ns - last_ns)
        tokens = self._tokens + elapsed_ns / _NANOSECONDS * self._qps
        return min(tokens, float(self._burst))

    def forget(self, item: T) -> None:
        return None


class MaxOfRateLimiter(Generic[T]):
    """The worst case of several limiters: the longest delay.

    Every limiter's ``when`` is called (each counts the failure); ``forget`` forgets on all. With a
    token bucket inside, the burst can seem exceeded when some items were delayed longer by another
    limiter, as client-go notes.
    """

    __slots__ = ("_limiters",)

    def __init__(self, *limiters: RateLimiter[T]) -> None:
        self._limiters = limiters

    def when(self, item: T) -> float:
        longest = 0.0
        for limiter in self._limiters:
            longest = max(longest, limiter.when(item))
        return longest

    def forget(self, item: T) -> None:
        for limiter in self._limiters:
            limiter.forget(item)


def default_controller_rate_limiter(*, clock: Clock = REAL_CLOCK) -> MaxOfRateLimiter[T]:
    """client-go's ``DefaultTypedControllerRateLimiter``: per-item 5 ms * 2**n capped at 1000 s, and
    an overall bucket of 10 retries per second with a burst of 100, whichever waits longer."""
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter[T](DEFAULT_BASE_DELAY, DEFAULT_MAX_DELAY),
        BucketRateLimiter[T](DEFAULT_QPS, DEFAULT_BURST, clock=clock),
    )
