"""A delaying queue whose retries are spaced by a rate limiter, as client-go's rate-limiting queue.

The usual controller loop: on error ``add_rate_limited(key)`` (the limiter decides how long the key
waits, growing with its failures), on success ``forget(key)`` (the failure count starts over), and
``done(key)`` in both cases. Use plain ``add`` for events: ``add_rate_limited`` for every event
counts each one as a failure and inflates the backoff (kubernetes/kubernetes#75577, rancher/lasso#5).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar, Unpack

from .delaying_queue import DelayingQueue
from .queue import QueueOptions
from .rate_limiters import RateLimiter, default_controller_rate_limiter

T = TypeVar("T", bound=Hashable)


class RateLimitingQueue(DelayingQueue[T]):
    """A ``DelayingQueue`` with ``add_rate_limited`` and ``forget``.

    Without a ``rate_limiter``, the queue uses ``default_controller_rate_limiter`` on its own clock.
    """

    __slots__ = ("_rate_limiter",)

    def __init__(
        self, rate_limiter: RateLimiter[T] | None = None, **options: Unpack[QueueOptions]
    ) -> None:
        super().__init__(**options)
        if rate_limiter is None:
            rate_limiter = default_controller_rate_limiter(clock=self._clock)
        self._rate_limiter = rate_limiter

    def add_rate_limited(self, item: T) -> None:
        """Adds ``item`` after the delay the rate limiter gives it (and counts one failure)."""
        self.add_after(item, self._rate_limiter.when(item))

    def forget(self, item: T) -> None:
        """Stops tracking ``item``'s failures (after a success or a final give-up); still call
        ``done``."""
        self._rate_limiter.forget(item)
