"""Reports KubeVirt MTQ's namespace locks left behind (util/mtqlock.py): a Warning LeftoverMtqLock
on the Namespace, saying what to delete.

A label-selected watch of ValidatingWebhookConfigurations (only MTQ's, a handful at most) queues
the namespaces they lock on the shared namespace controller; its handler here reports each lock
once it is older than `leftover_after` (mtqlock.LEFTOVER_AFTER; a younger one is looked at again then), once per lock and
process. It reads and reports; it never deletes a configuration (one KubeVirt MTQ still running
may be mid-window, and deleting admission configuration is the operator's call).
"""

from __future__ import annotations

import logging
from typing import Final

from ...apis.mtq import LOCK_LABEL
from ...config.management import Management
from ...generic.events import WARNING
from ...generic.resource import VALIDATING_WEBHOOK_CONFIGURATIONS, Object
from ...util.mtqlock import LEFTOVER_AFTER, REASON, locked_namespaces, locks_of

log = logging.getLogger(__name__)

HANDLER: Final = "mtq-leftover-lock"
INDEX: Final = "mtq-locked-namespace"


class LeftoverLockReporter:
    """Registers the report on a Management's namespace controller."""

    def __init__(self, management: Management, *, leftover_after: float = LEFTOVER_AFTER) -> None:
        self.management = management
        self.leftover_after = leftover_after
        """Seconds a lock must have existed before it is reported (mtqlock.LEFTOVER_AFTER)."""
        self.configurations = management.informers.informer(
            VALIDATING_WEBHOOK_CONFIGURATIONS, label_selector=LOCK_LABEL
        )
        if not self.configurations.store.has_index(INDEX):
            self.configurations.store.add_indexers({INDEX: locked_namespaces})
        self.namespaces = management.controllers.namespaces()
        self._reported: set[tuple[str, str]] = set()
        """(configuration, namespace) already reported by this process."""

    def register(self) -> None:
        self.namespaces.watch_related(
            self.configurations, locked_namespaces, name="mtq leftover locks"
        )
        self.namespaces.on_change(HANDLER, self.reconcile)

    async def reconcile(self, key: str, namespace: Object | None) -> Object | None:
        """Reports the namespace's leftover locks not reported yet; never raises."""
        if namespace is None:
            return None
        now = self.management.clock.now()
        for lock in locks_of(key, self.configurations.store.by_index(INDEX, key)):
            if (lock.configuration, key) in self._reported:
                continue
            if not lock.is_leftover(now, self.leftover_after):
                wait = self.leftover_after - (lock.age(now) or 0.0)
                self.namespaces.enqueue_after(None, key, max(0.0, wait) + 0.05)
                continue
            self._reported.add((lock.configuration, key))
            message = lock.message()
            log.warning("%s", message)
            self.management.recorder.event(namespace, WARNING, REASON, message)
        return namespace


def register(management: Management) -> LeftoverLockReporter:
    """The report on the namespace controller (shared with the room and MTQ modes)."""
    reporter = LeftoverLockReporter(management)
    reporter.register()
    return reporter
