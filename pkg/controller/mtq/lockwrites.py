"""MTQ mode's namespace lock: taken, extended and removed, each write conditional on the lock
as read.

The lock is a label (what the API server's webhook selector matches) and an annotation (the
deadline, the VMMRQ and the migrations it is held for), written together in one JSON patch whose
tests are the namespace's uid and the lock as read, not the namespace's resourceVersion. Each
write is recorded in the namespaces' pending writes until the cache shows it. Not thread-safe:
event loop only, per namespace from one worker at a time.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass
from typing import Any

from ...apis.mtq import Vmmrq
from ...generic import errors
from ...generic.client import ApiClient
from ...generic.clock import Clock
from ...generic.informer import SharedInformer
from ...generic.logformat import fields
from ...generic.meta import labels, metadata
from ...generic.resource import NAMESPACES, Object
from ...util.mtq import ANNOTATION_LOCK, LABEL_LOCKED, Lock, MtqPlan
from ...util.resourcequota import conditional
from .writes import MtqStats

log = logging.getLogger(__name__)


@dataclass
class LockWrites:
    """The lock's writes on `client`, recorded in the namespaces' pending writes
    (`SharedInformer.pending`); locks taken and how long they were held counted in `stats`."""

    client: ApiClient
    clock: Clock
    namespaces: SharedInformer
    lock_seconds: float
    stats: MtqStats

    async def lock(
        self,
        namespace: Object,
        vmmrq: Vmmrq,
        plan: MtqPlan,
        lock: Lock | None,
        now: datetime.datetime,
    ) -> Object:
        """Takes the lock (deadline now + lock_seconds), or adds migrations to the held one under
        its own deadline and drops from it those that now wait for migrations of higher priority;
        nothing if the held lock already admits exactly that. The
        raise waits for the lock to come back through the watch: the API server's webhook
        selector and the webhook's cache learn of it from the same watch, so a pod created
        after the raise meets the lock (KubeVirt MTQ raised right after creating its lock, and
        squatters slipped through)."""
        if lock is not None and lock.active(now):
            # One now waiting for a migration of higher priority (its target not made yet)
            # leaves the lock, or its target takes the budget (mtq.prioritized).
            kept = {u: n for u, n in lock.migrations.items() if n not in plan.waiting}
            merged = {**kept, **plan.uids}
            if merged == dict(lock.migrations):
                return namespace
            wanted = Lock(lock.until, vmmrq.name, merged)
        else:
            until = now + datetime.timedelta(seconds=self.lock_seconds)
            wanted = Lock(until, vmmrq.name, dict(plan.uids))
            self.stats.locks += 1
            self.stats.locked_at[vmmrq.namespace] = self.clock.monotonic()
        log.info(
            "%s: locked until %s for %s",
            vmmrq.namespace,
            wanted.until.isoformat(),
            ", ".join(sorted(wanted.migrations.values())),
            extra=fields(namespace=vmmrq.namespace, migrations=sorted(wanted.migrations.values())),
        )
        return await self._patch_namespace(
            namespace, {LABEL_LOCKED: "true"}, {ANNOTATION_LOCK: wanted.annotation()}
        )

    async def unlock(self, namespace: Object) -> Object:
        """Removes the lock, if any, noting how long it was held."""
        if labels(namespace).get(LABEL_LOCKED) is None:
            return namespace
        name = str(metadata(namespace).get("name"))
        started = self.stats.locked_at.pop(name, None)
        if started is not None:
            held = self.clock.monotonic() - started
            self.stats.longest_hold = max(self.stats.longest_hold, held)
            log.info("%s: unlocked after %.3fs", name, held, extra=fields(namespace=name))
        return await self._patch_namespace(namespace, {LABEL_LOCKED: None}, {ANNOTATION_LOCK: None})

    async def _patch_namespace(
        self, namespace: Object, label: dict[str, Any], annotation: dict[str, Any]
    ) -> Object:
        """Sets (value) or removes (None) the lock's `label` and `annotation` in one JSON patch
        whose tests are the namespace's uid and the lock's label and annotation as read
        (conditional.annotation_patch_if), not its resourceVersion: Rancher's agent writes the
        namespaces of its projects on every sync, and a lock conditional on the version lost
        to it, each Conflict a backoff (as the room mode's raise through Rancher's annotation
        did). A failed test raises errors.Conflict; other API errors propagate."""
        meta = metadata(namespace)
        operations = conditional.annotation_patch_if(namespace, annotation, (ANNOTATION_LOCK,))
        operations += conditional.metadata_map_patch_if(namespace, "labels", label)
        try:
            written = await self.client.patch(
                NAMESPACES, str(meta["name"]), operations, patch_type="json"
            )
        except errors.ApiError as error:
            if isinstance(error, errors.Conflict) or not conditional.failed_test(error):
                raise
            raise errors.Conflict(str(error)) from error
        self.namespaces.pending.wrote(written)
        return written
