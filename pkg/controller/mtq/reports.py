"""MTQ mode's Warning events, each once per change of its text.

NotEnoughResourceToRelease on each migration the budget cannot release;
WaitingForHigherPriorityMigrations on each it holds back for migrations of higher priority
(KubeVirt's order, util/mtq.py `prioritized`); QuotaProtectedByRancher
on the VMMRQ once a migration is held by a quota only Rancher may raise;
MultipleMigrationResourceQuotas on a VMMRQ beside the one used. Not thread-safe: event loop only.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

from ...apis.mtq import Vmmrq
from ...generic.events import WARNING, EventRecorder
from ...generic.logformat import fields
from ...generic.meta import metadata
from ...generic.resource import Object
from ...util.mtq import (
    NOT_ENOUGH_REASON,
    RANCHER_PROTECTED_REASON,
    Lock,
    MtqPlan,
    not_enough_message,
    rancher_held_message,
)

log = logging.getLogger(__name__)

MULTIPLE_REASON: Final = "MultipleMigrationResourceQuotas"
WAITING_REASON: Final = "WaitingForHigherPriorityMigrations"


def waiting_message(vmmrq: str, namespace: str, migration: str, ahead: Sequence[str]) -> str:
    """Why the budget holds `migration` back: it goes after `ahead`, of higher priority."""
    return (
        f"VirtualMachineMigrationResourceQuota {vmmrq} in namespace {namespace} releases "
        f"migration {migration} after the migrations of higher priority it does not fit beside: "
        + ", ".join(ahead)
    )


class MtqWarnings:
    """Warnings on `recorder`, each key's message once until it changes.

    What is remembered is bounded by what exists: a migration's entry goes when the migration
    is no longer listed in its namespace (deleted, as tenants' migrations are by the thousand),
    and a namespace's entries all go when it has no VMMRQ or is deleted (`forget`)."""

    def __init__(self, recorder: EventRecorder) -> None:
        self.recorder = recorder
        self._reported: dict[str, dict[str, str]] = {}
        """Namespace -> key (a migration uid, or a VMMRQ's) -> the message last reported."""

    def __len__(self) -> int:
        """How many messages are remembered, all namespaces together."""
        return sum(len(keys) for keys in self._reported.values())

    def forget(self, namespace: str) -> None:
        """Drops everything remembered of `namespace` (deleted, or without a VMMRQ)."""
        self._reported.pop(namespace, None)

    def not_enough(
        self,
        vmmrq: Vmmrq,
        plan: MtqPlan,
        migrations: Sequence[Object],
        lock: Lock | None,
    ) -> None:
        """A Warning NotEnoughResourceToRelease on each migration the budget cannot release,
        once per change of its text. Not for a migration the active lock is held for: it fitted
        when the lock was taken, and "short" now means its own target pod already counts in the
        quota's usage while the caches have not shown the pod yet (seen on the local cluster)."""
        listed = {str(metadata(migration).get("uid")) for migration in migrations}
        reported = self._reported.get(vmmrq.namespace, {})
        for key in [k for k in reported if "/" not in k and k not in listed]:
            del reported[key]  # a migration that is gone
        for migration in migrations:
            name = str(metadata(migration).get("name"))
            uid = str(metadata(migration).get("uid"))
            short = plan.refused.get(name)
            ahead = plan.waiting.get(name)
            if ahead is not None:  # out of the lock too, if it was in (LockWrites.lock)
                message = waiting_message(vmmrq.name, vmmrq.namespace, name, ahead)
                self.once(uid, migration, WAITING_REASON, message)
                continue
            if lock is not None and lock.admits_target_of(uid):
                continue
            if short is None:
                reported.pop(uid, None)
                continue
            message = not_enough_message(vmmrq.name, vmmrq.namespace, name, short)
            self.once(uid, migration, NOT_ENOUGH_REASON, message)

    def rancher_held(
        self, vmmrq: Vmmrq, obj: Object | None, plan: MtqPlan, refusal: str | None
    ) -> None:
        """One Warning QuotaProtectedByRancher on the VMMRQ (`obj`) once a migration is held by
        a quota only Rancher may raise (per VMMRQ and set of quotas, not per migration)."""
        held = sorted({q for quotas in plan.held.values() for q in quotas})
        if refusal is None or not held or obj is None:
            return
        message = rancher_held_message(vmmrq.name, vmmrq.namespace, held, refusal)
        self.once(f"rancher/{vmmrq.name}", obj, RANCHER_PROTECTED_REASON, message)

    def once(self, key: str, obj: Object, reason: str, message: str) -> None:
        """A Warning on `obj`, unless `key`'s last one in `obj`'s namespace said `message`
        already. A key with a "/" is a VMMRQ's (kept until `forget`); one without is a
        migration's uid (kept while the migration is listed)."""
        namespace = str(metadata(obj).get("namespace") or "")
        reported = self._reported.setdefault(namespace, {})
        if reported.get(key) == message:
            return
        reported[key] = message
        log.warning("%s", message, extra=fields(namespace=namespace or None))
        self.recorder.event(obj, WARNING, reason, message)
