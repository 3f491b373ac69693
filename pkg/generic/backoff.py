"""Exponential backoff: the wait before the next try grows with each failure in a row.

The reflector waits with client-go's backoff manager between relists (jittered, and back to the
start once the server has been quiet for a while); a permission gate (permission.py) waits with the
same doubling, unjittered, until a write goes through.
"""

from __future__ import annotations

import random

from .clock import Clock


class Backoff:
    """Delays that start at `initial` and grow by `factor` per call up to `cap`, each plus up to
    `jitter` times itself at random; back to `initial` on `reset()`, or when `reset_after` seconds
    have passed since the last delay began.

    The defaults are client-go's exponential backoff manager: 0.8 s doubling to 30 s, jitter 1.0
    (each delay lies in [d, 2d)), back to 0.8 s after two minutes. With jitter 0 the delays are
    exact; with reset_after inf only `reset()` starts over.
    """

    def __init__(
        self,
        clock: Clock,
        *,
        initial: float = 0.8,
        cap: float = 30.0,
        factor: float = 2.0,
        jitter: float = 1.0,
        reset_after: float = 120.0,
        rng: random.Random | None = None,
    ) -> None:
        self._clock = clock
        self.initial, self.cap, self.factor, self.jitter = initial, cap, factor, jitter
        self.reset_after = reset_after
        self._rng = rng or random.Random()
        self._duration = initial
        self._last_start: float | None = None

    def reset(self) -> None:
        """Back to the initial delay: the last try went well."""
        self._duration = self.initial
        self._last_start = None

    def next(self) -> float:
        """The next delay (and the one after doubles, up to the cap)."""
        now = self._clock.monotonic()
        if self._last_start is None or now - self._last_start > self.reset_after:
            self._duration = self.initial
        self._last_start = now
        delay = self._duration
        self._duration = min(self._duration * self.factor, self.cap)
        return delay + self._rng.random() * self.jitter * delay
