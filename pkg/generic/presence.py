"""Following whether an optional kind is served: its reflector runs only while it is.

An optional kind (a CRD that may be installed, or removed, at any time) is asked about every
`period` seconds. While it is served, the reflector runs; while it is not, the reflector is
stopped and the informer told the kind is empty (removing a CRD delivers deletes for what was
cached). A failed look keeps the current state and is retried at the next period: never a hot
loop, never a guess. Event loop only; time comes from the injected clock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from . import errors
from .clock import Clock
from .tasks import cancel_and_wait

log = logging.getLogger(__name__)

Presence = Callable[[], Awaitable[bool]]
"""Asks the API server whether an optional kind is served (see discovery.serves)."""
PRESENCE_RECHECK_PERIOD = 30.0
"""How often an optional kind's presence is asked again: a CRD installed later is listed within
this time; one removed later empties the cache within it."""


@dataclass
class PresenceFollower:
    """Runs `reflect()` while `presence()` says the kind `name` is served, and calls `absent()`
    each time it stops being served (or is found not served at the first look)."""

    name: str
    presence: Presence
    reflect: Callable[[], Coroutine[Any, Any, None]]
    absent: Callable[[], None]
    clock: Clock
    period: float = PRESENCE_RECHECK_PERIOD
    present: bool | None = field(default=None, init=False)
    """Whether the server served the kind at the last look (None: not looked yet, or the look
    failed before any answer)."""
    _reflecting: asyncio.Task[None] | None = field(default=None, init=False)

    async def run(self) -> None:
        """Looks every period until cancelled; the reflector is stopped on the way out."""
        try:
            while True:
                try:
                    present = await self.presence()
                except errors.ApiError as error:
                    log.info(
                        "%s: cannot tell whether it is served (%s); rechecking", self.name, error
                    )
                else:
                    self._apply(present)
                await self.clock.sleep(self.period)
        finally:
            await self._stop_reflecting()

    def _apply(self, present: bool) -> None:
        if present and self._reflecting is None:
            if self.present is False:
                log.info("%s is served now: listing it", self.name)
            self._reflecting = asyncio.ensure_future(self.reflect())
        elif not present and self.present is not False:
            log.info("%s is not available (not served, or not readable): an empty cache", self.name)
            if self._reflecting is not None:
                self._reflecting.cancel()
                self._reflecting = None
            self.absent()
        self.present = present

    async def _stop_reflecting(self) -> None:
        if self._reflecting is not None:
            await cancel_and_wait([self._reflecting])
            self._reflecting = None
