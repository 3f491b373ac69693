"""The webhook's periodic work beside its requests, each a task on the event loop.

Every CERT_RELOAD_INTERVAL seconds the serving certificate and key files are read again if they
changed on disk (a rotated Secret mounted in the pod); every COLLECT_AFTER seconds the reservation
Leases expired that long are deleted (a failure is logged and retried at the next period). Both
sleep on the injected clock; `stop` cancels them and waits for them to end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from ..generic import errors
from ..generic.clock import Clock
from .resources.pod.reservations import COLLECT_AFTER, LeaseReservations
from .tls import CERT_RELOAD_INTERVAL, ReloadingTLS

log = logging.getLogger(__name__)


class Housekeeping:
    """Reloads `tls` (if any) and collects `reservations` (if any) until stopped."""

    def __init__(
        self, clock: Clock, tls: ReloadingTLS | None, reservations: LeaseReservations | None
    ) -> None:
        self._clock = clock
        self._tls = tls
        self._reservations = reservations
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        """Starts the loops there is work for."""
        if self._reservations is not None:
            self._tasks.append(asyncio.ensure_future(self._collect_loop(self._reservations)))
        if self._tls is not None:
            self._tasks.append(asyncio.ensure_future(self._reload_loop(self._tls)))

    async def stop(self) -> None:
        """Cancels the loops, one after another, and waits for each to end. Idempotent."""
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    async def _reload_loop(self, tls: ReloadingTLS) -> None:
        while True:
            await self._clock.sleep(CERT_RELOAD_INTERVAL)
            tls.reload()

    async def _collect_loop(self, reservations: LeaseReservations) -> None:
        """Deletes expired reservation Leases now and then; a failure is logged and retried."""
        while True:
            await self._clock.sleep(COLLECT_AFTER)
            try:
                await reservations.collect()
            except errors.ApiError as error:
                log.warning("could not delete expired reservation Leases: %s", error)
