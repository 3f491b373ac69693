"""Whether this process may make one kind of optional write, as the API server last answered.

Some writes help but are not required: the room-held label, the copy of spec.hard into
status.hard. Without RBAC for one (an older deploy/), trying it on every reconcile or admission
would cost a refused request each time, so a refusal closes the gate for a while. It must not
close it for good: right after an API server restart its authorizer refuses everything for a
moment ("clusterrole ... not found" until its caches fill), and an operator may grant the
permission later. So the gate opens again after a backoff that starts at `first_retry` and
doubles per refusal in a row up to `max_retry`; a write that goes through resets it.

Logging: a Warning at the first refusal of a streak and at each refusal once the backoff is at
its cap (one line per `max_retry` at most), an Info line when the write is allowed again.

Not thread-safe: event loop only. Time comes from the injected clock.
"""

from __future__ import annotations

import logging
import math

from .backoff import Backoff
from .clock import Clock

log = logging.getLogger(__name__)

FIRST_RETRY = 1.0
"""Seconds until the first retry after a refusal: an API server restart's refusals end by then
or soon after."""
MAX_RETRY = 300.0
"""Seconds between retries once the backoff has grown: one refused request per five minutes
where the RBAC is really missing."""


class Permission:
    """One kind of optional write: `allowed()` before trying it, `refused(error)` when the API
    server said Forbidden, `granted()` when it went through."""

    def __init__(
        self,
        what: str,
        advice: str,
        clock: Clock,
        *,
        first_retry: float = FIRST_RETRY,
        max_retry: float = MAX_RETRY,
    ) -> None:
        self.what = what
        """What the write does, for the log ("label namespaces")."""
        self._advice = advice
        self._clock = clock
        self._backoff = Backoff(
            clock, initial=first_retry, cap=max_retry, jitter=0.0, reset_after=math.inf
        )
        """Only `granted()` ends a streak of refusals, however long it lasted."""
        self._refusals = 0
        """Refusals in a row since the write last went through."""
        self._retry_at = float("-inf")

    def allowed(self) -> bool:
        """True unless a refusal's backoff is still running."""
        return self._clock.monotonic() >= self._retry_at

    def retry_in(self) -> float:
        """Seconds until `allowed()` turns True (0 if it is)."""
        return max(0.0, self._retry_at - self._clock.monotonic())

    def refused(self, error: Exception) -> None:
        """The API server refused the write: closed for the next backoff step."""
        delay = self._backoff.next()
        self._refusals += 1
        self._retry_at = self._clock.monotonic() + delay
        if self._refusals == 1 or delay >= self._backoff.cap:
            log.warning(
                "cannot %s (%s): %s; trying again in %.0f s",
                self.what,
                error,
                self._advice,
                delay,
            )
        else:
            log.debug("cannot %s (%s), %d refusals in a row", self.what, error, self._refusals)

    def granted(self) -> None:
        """The write went through: open, with the backoff reset."""
        if self._refusals:
            log.info("may %s again after %d refusals", self.what, self._refusals)
        self._refusals = 0
        self._backoff.reset()
        self._retry_at = float("-inf")
