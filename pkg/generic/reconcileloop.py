"""The one worker loop of this framework: a queue of keys, each reconciled by one function that
says when to look again.

Both users share it rather than each copying the queue discipline of client-go's
`processNextWorkItem`: `Controller` (controller.py), whose reconcile runs every handler
registered for its resource, and the parts of the test bench that reconcile one kind by a single
function. The discipline: take a key, reconcile it, mark it done; on a failure requeue it rate
limited, on success forget its failures and, if asked, look again after a delay.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from . import errors
from .workqueue import RateLimitingQueue

Reconcile = Callable[[str], Awaitable[float | None]]
"""Reconciles one key; returns the seconds until it should run again, None for its next change."""


class RetryRateLimited(Exception):
    """Raised by a reconcile whose failure is reported already (by its handlers): the loop
    requeues the key rate limited and logs nothing more."""


async def run_reconcile_loop(
    queue: RateLimitingQueue[str],
    reconcile: Reconcile,
    *,
    name: str,
    log: logging.Logger,
    expected: tuple[type[Exception], ...] = (errors.ApiError,),
    ended: Callable[[str], None] | None = None,
) -> None:
    """Reconciles keys from `queue` until it shuts down.

    A key is handed to one worker at a time (the queue's guarantee); run several loops over one
    queue for parallelism. `RetryRateLimited` retries the key rate limited, silently; an
    `expected` error (an API error by default) is logged at info and retried the same way; any
    other exception is logged with its traceback and retried the same way, so a bad key never
    ends the worker nor spins it. `ended(key)`, if given, is called after each run of a key,
    once the queue knows it done, whatever the run's outcome. Cancellation propagates.
    """
    while True:
        key, shutdown = await queue.get()
        if shutdown or key is None:
            return
        try:
            delay = await reconcile(key)
        except asyncio.CancelledError:
            raise
        except RetryRateLimited:
            queue.add_rate_limited(key)
        except expected as error:
            log.info("%s: retrying %s: %s", name, key, error)
            queue.add_rate_limited(key)
        except Exception:
            log.exception("%s: %s failed, retrying", name, key)
            queue.add_rate_limited(key)
        else:
            queue.forget(key)
            if delay is not None:
                queue.add_after(key, delay)
        finally:
            queue.done(key)
            if ended is not None:
                ended(key)
