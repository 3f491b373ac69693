"""Work queues for controllers, with client-go's ``util/workqueue`` semantics on asyncio.

* ``Queue``: FIFO of keys; repeated adds collapse, a key is never processed by two workers at once,
  and a key added while processed is queued again on ``done``.
* ``DelayingQueue``: adds ``add_after(item, delay)``; a key parked twice keeps the earlier time.
* ``RateLimitingQueue``: adds ``add_rate_limited`` and ``forget`` over a
  ``RateLimiter`` (default: ``default_controller_rate_limiter()``, as client-go's).

A typical worker::

    while True:
        key, shutdown = await queue.get()
        if key is None:  # equivalently: if shutdown
            return
        try:
            await reconcile(key)
        except Exception:
            queue.add_rate_limited(key)
        else:
            queue.forget(key)
        finally:
            queue.done(key)

Named queues export client-go's ``workqueue_*`` Prometheus metrics (``metrics`` module).
"""

from .delaying_queue import MAX_WAIT, DelayingQueue
from .queue import Queue
from .rate_limiters import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    default_controller_rate_limiter,
)
from .rate_limiting_queue import RateLimitingQueue
from .unfinished_work import UNFINISHED_WORK_UPDATE_PERIOD

__all__ = [
    "MAX_WAIT",
    "UNFINISHED_WORK_UPDATE_PERIOD",
    "BucketRateLimiter",
    "DelayingQueue",
    "ItemExponentialFailureRateLimiter",
    "MaxOfRateLimiter",
    "Queue",
    "RateLimiter",
    "RateLimitingQueue",
    "default_controller_rate_limiter",
]
