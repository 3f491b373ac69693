"""Ending the tasks a component started, when it stops."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any


async def cancel_and_wait(tasks: Collection[asyncio.Future[Any]]) -> None:
    """Cancels every one of `tasks` (all at once, before waiting) and returns once each has
    ended, however it ended: a task's exception or its cancellation is swallowed, as a stopping
    component has no caller to raise it to. A task already done is left as it was."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
