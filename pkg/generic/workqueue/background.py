"""The tasks a work queue runs beside its callers, and their end at shutdown.

client-go starts them as goroutines tied to the queue's stop channel (the unfinished-work loop,
the delaying queue's waiting loop); here they are asyncio tasks, tracked so that shutdown can
cancel them and a failure is logged with the queue's name.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any


class BackgroundTasks:
    """One queue's background tasks: started by `spawn`, cancelled by `cancel_all`.

    A task that fails is logged (with the queue's name and the task's) on `log` and forgotten; it
    never raises to a caller of the queue. A task that ends, however it ends, is forgotten, so
    the set holds only tasks still running. Event loop only, no lock.
    """

    __slots__ = ("_log", "_name", "_tasks")

    def __init__(self, name: str, log: logging.Logger) -> None:
        self._name = name
        self._log = log
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(
        self, loop: asyncio.AbstractEventLoop, work: Coroutine[Any, Any, None], what: str
    ) -> asyncio.Task[None]:
        """Runs `work` as a task named ``workqueue <queue>: <what>`` and tracks it."""
        task = loop.create_task(work, name=f"workqueue {self._name}: {what}")
        self._tasks.add(task)
        task.add_done_callback(self._forget)
        return task

    def cancel_all(self) -> None:
        """Cancels every task still running (they end at their next await)."""
        for task in self._tasks:
            task.cancel()

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._log.error(
                "work queue %r: background task %s failed",
                self._name,
                task.get_name(),
                exc_info=task.exception(),
            )
