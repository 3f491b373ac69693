"""One worker loop for a queue of keys whose reconcile says when to look again.

`Controller` (controller.py) runs handlers registered per resource; some parts of the test bench
reconcile one kind by a single function that returns the seconds until its next look instead.
They share this loop rather than each copying the queue discipline of client-go's
`processNextWorkItem`: take a key, reconcile it, mark it done; on a failure requeue it rate
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


async def run_reconcile_loop(
    queue: RateLimitingQueue[str],
    reconcile: Reconcile,
    *,
    name: str,
    log: logging.Logger,
    expected: tuple[type[Exception], ...] = (errors.ApiError,),
) -> None:
    """Reconciles keys from `queue` until it shuts down.

    A key is handed to one worker at a time (the queue's guarantee); run several loops over one
    queue for parallelism. An `expected` error (an API error by default) is logged at info and
    retried rate limited; any other exception is logged with its traceback and retried the same
    way, so a bad key never ends the worker nor spins it. Cancellation propagates.
    """
    while True:
        key, shutdown = await queue.get()
        if shutdown or key is None:
            return
        try:
            delay = await reconcile(key)
        except asyncio.CancelledError:
            raise
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
