"""Bounded, jittered retries of one API call when the server itself asks for it.

client-go's REST client retries a request up to 10 times when the API server answers 429 (or a
5xx) with a ``Retry-After`` header: priority-and-fairness rejections, an apiserver shedding load,
a webhook timing out behind it. Those are the server saying "same request, a little later"; every
other error goes back to the caller at once (a controller's workqueue then backs off per key,
which is the right place for errors the server did not promise to recover from).

Built on tenacity, with the process clock's ``sleep`` so tests step time instead of sleeping.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from . import errors
from .clock import Clock

T = TypeVar("T")

MAX_SERVER_RETRIES: Final = 10
"""client-go's rest.Request default maxRetries."""
MAX_RETRY_AFTER: Final = 10.0
"""The longest wait honoured per attempt; a server asking for more is asked again sooner."""
JITTER: Final = 0.2
"""Up to +20 % on each wait, so replicas told the same Retry-After do not come back together."""


def server_asked_to_retry(error: BaseException) -> bool:
    """A 429 or 5xx that carries a Retry-After header."""
    return (
        isinstance(error, errors.ApiError)
        and error.retry_after is not None
        and (error.status == 429 or error.status >= 500)
    )


def _wait_as_told(state: RetryCallState) -> float:
    error = state.outcome.exception() if state.outcome is not None else None
    told = error.retry_after if isinstance(error, errors.ApiError) else None
    base = min(max(told or 1.0, 0.0), MAX_RETRY_AFTER)
    return base * (1.0 + random.uniform(0.0, JITTER))


async def call_with_server_retries(
    call: Callable[[], Awaitable[T]], *, clock: Clock, max_retries: int = MAX_SERVER_RETRIES
) -> T:
    """Runs ``call`` and re-runs it while the server answers "retry after"; at most
    ``max_retries`` re-runs, then the last error is raised as it came. ``call`` must be safe to
    repeat (the server did not act on a request it refused with 429 or 503)."""
    retrying = AsyncRetrying(
        retry=retry_if_exception(server_asked_to_retry),
        stop=stop_after_attempt(max_retries + 1),
        wait=_wait_as_told,
        sleep=clock.sleep,
        reraise=True,
    )
    return await retrying(call)
