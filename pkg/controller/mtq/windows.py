"""Lock windows that ended without their target pod, and the wait before another.

At a lock's deadline the window ends whatever happened: the migrations it was held for wait for
a change of their own, or a backoff (RETRY_AFTER_EXPIRY, doubling per expiry up to RETRY_CAP),
before another window, so a migration that cannot get its target pod causes no hot loop. Kept
per migration uid in this process only: a restarted controller gives each one window more. Not
thread-safe: event loop only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from ...generic.clock import Clock
from ...generic.logformat import migration_fields
from ...generic.meta import metadata
from ...generic.resource import Object
from ...util.mtq import Lock

log = logging.getLogger(__name__)

RETRY_AFTER_EXPIRY: Final = 60.0
"""A migration whose window ended without its target pod waits this long (doubling per expiry,
up to RETRY_CAP) for another, unless it changes first."""
RETRY_CAP: Final = 600.0


@dataclass
class Expired:
    """A migration whose lock window ended without its target pod."""

    version: str
    """Its resourceVersion then: any change of it ends the wait."""
    retry_at: float
    backoff: float


class ExpiredWindows:
    """Migrations waiting after a window that ended; `enqueue_after(namespace, seconds)` runs a
    namespace again when a wait is over."""

    def __init__(
        self,
        clock: Clock,
        has_target: Callable[[str], bool],
        enqueue_after: Callable[[str, float], None],
    ) -> None:
        self.clock = clock
        self.has_target = has_target
        self.enqueue_after = enqueue_after
        self._expired: dict[str, Expired] = {}

    def expire(self, lock: Lock, migrations: Sequence[Object]) -> None:
        """Records the lock's migrations as waiting: their window ended without a target pod."""
        now = self.clock.monotonic()
        for migration in migrations:
            uid = str(metadata(migration).get("uid"))
            if not lock.admits_target_of(uid) or self.has_target(uid):
                continue
            previous = self._expired.get(uid)
            version = str(metadata(migration).get("resourceVersion"))
            if previous and previous.version == version and now < previous.retry_at:
                continue  # this window's end is recorded already (a retried reconcile)
            backoff = min(RETRY_CAP, previous.backoff * 2) if previous else RETRY_AFTER_EXPIRY
            self._expired[uid] = Expired(version, now + backoff, backoff)
            log.warning(
                "%s/%s: lock window ended without a target pod; next try in %.0fs or on change",
                metadata(migration).get("namespace"),
                metadata(migration).get("name"),
                backoff,
                extra=migration_fields(
                    metadata(migration).get("namespace"),
                    (migration.get("spec") or {}).get("vmiName"),
                    migration=metadata(migration).get("name"),
                ),
            )
            self.enqueue_after(str(metadata(migration).get("namespace")), backoff)

    def waiting(self, migrations: Sequence[Object]) -> list[str]:
        """Names of migrations still waiting after an expired window (unchanged, not yet due)."""
        now = self.clock.monotonic()
        waiting = []
        for migration in migrations:
            uid = str(metadata(migration).get("uid"))
            expired = self._expired.get(uid)
            if expired is None:
                continue
            unchanged = expired.version == str(metadata(migration).get("resourceVersion"))
            if unchanged and now < expired.retry_at:
                waiting.append(str(metadata(migration).get("name")))
        return waiting
