"""How long a reflector waits before it lists or watches again after a failure.

Between relists a jittered backoff grows from 0.8 s to 30 s (client-go's), so an unhealthy server
sees about 0.2 requests a second from a reflector instead of a hot loop. The backoff is for a
server that keeps failing, not for one that restarted: it starts again from 0.8 s when a watch
that had run for LASTING_WATCH seconds ends, and while the server is not there or still starting
(`server_restarting`: cheap answers) the wait is capped at 2-4 s, or the server's own Retry-After
when it asked for longer. Event loop only; time comes from the injected clock.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

from . import errors
from .backoff import Backoff
from .clock import Clock

LASTING_WATCH = 10.0
"""A watch open this long before it ended was a working server (RelistWaits.forget_failures)."""
REFUSED_BACKOFF_CAP = 2.0
"""Longest base delay (before jitter) while connections are refused: a server restarting."""


@dataclass(frozen=True)
class Wait:
    """One wait before a relist or re-watch; `asked`: the server's Retry-After set its length."""

    seconds: float
    asked: bool = False


def server_restarting(error: errors.ApiError) -> bool:
    """What an API server says while it is not (yet) there: connections refused, 503 before its
    paths are installed, 429 while its storage initializes."""
    return isinstance(error, errors.ConnectionRefused | errors.TooManyRequests) or (
        isinstance(error, errors.ServerError) and error.status == 503
    )


class RelistWaits:
    """The waits of one reflector, each recorded in `recent` before it is slept on `clock`."""

    def __init__(self, clock: Clock, rng: random.Random) -> None:
        self._clock = clock
        self._rng = rng
        self._backoff = Backoff(clock, rng=rng)
        self.recent: deque[Wait] = deque(maxlen=64)
        """The most recent waits (for tests and the scale run: how long the cache could lag
        after a failure)."""

    def next_delay(self) -> float:
        """The backoff's next delay (it grows with each call)."""
        return self._backoff.next()

    async def wait(self, seconds: float, *, asked: bool = False) -> None:
        """Records the wait and sleeps it."""
        self.recent.append(Wait(seconds, asked))
        await self._clock.sleep(seconds)

    async def after_failure(self) -> None:
        """Waits the backoff's next delay."""
        await self.wait(self._backoff.next())

    async def after_restart(self, error: errors.ApiError) -> None:
        """Waits the backoff capped for a (re)starting server, or the server's own Retry-After
        when it asked for longer."""
        ours = min(self._backoff.next(), REFUSED_BACKOFF_CAP * (1.0 + self._rng.random()))
        told = error.retry_after or 0.0
        await self.wait(max(ours, told), asked=told > ours)

    def reset(self) -> None:
        """The server answered: the next failure waits the initial delay."""
        self._backoff.reset()

    def forget_failures(self, watch_started: float) -> None:
        """A watch that ran for LASTING_WATCH before it ended was a working server: the failures
        before it say nothing about the one now (an API server that restarted)."""
        if self._clock.monotonic() - watch_started >= LASTING_WATCH:
            self._backoff.reset()
