"""The target-pod retry: a migration whose target pod create failed for a reason other than quota
is requeued in virt-controller at once, not left to its rate limiter (whose backoff
can hold a migration for minutes).

What a failure is, when a migration is retried and why that write works is in
createfailures.py. Here: a watch of virt-controller's FailedCreate Events on VMIs (a field
selector; the store keeps a few fields of each, indexed by the VMI's uid) queues the migrations
of the named VMI on the shared migration controller, whose handler decides (createfailures.decide)
and, for a retry, patches our annotation ANNOTATION_RETRIES (the count) onto the migration with
its uid as a precondition, logs it, counts it (harvester_quota_target_pod_retries_total) and
records a Normal Event TargetPodCreateRetried on the migration naming the failure it answers.
With the retries spent, a Warning TargetPodRetriesExhausted says the migration is left to
virt-controller.

Without the RBAC it needs (list and watch on events, patch on migrations: an older deploy/) the
feature is off and nothing else is: the Events cache stays synced and empty while this process
may not list Events (asked every 30 s, access.readable), and a refused patch closes a gate
(permission.Permission: logged at the first refusal, tried again after a backoff up to 5
minutes), so neither readiness nor any other controller waits on it.

Handlers run on the leader only, one migration at a time (the controller's queue); state is in
memory per migration (dropped when it ends or goes), with the annotation as a floor for the next
leader. Event loop only.
"""

from __future__ import annotations

import logging
from typing import Final

from ...apis.kubevirt import (
    FINAL_PHASES,
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
)
from ...config.management import Management
from ...config.metrics import QuotaMetrics
from ...generic import errors
from ...generic.access import readable
from ...generic.events import NORMAL, WARNING
from ...generic.logformat import migration_fields
from ...generic.meta import is_deleting, metadata, name, namespace, spec, status
from ...generic.permission import Permission
from ...generic.resource import EVENTS, Object
from ..informers import TARGET_INDEX, QuotaInformers, target_index
from .createfailures import (
    ANNOTATION_RETRIES,
    EVENT_SELECTOR,
    FAILURE_INDEX,
    MAX_RETRIES,
    CreateFailure,
    Decision,
    Exhausted,
    Retry,
    RetryState,
    Wait,
    decide,
    failure_index,
    failure_key,
    failure_of,
    newest,
    strip_event,
)

log = logging.getLogger(__name__)

HANDLER: Final = "target-pod-retry"
MIGRATIONS_BY_VMI: Final = "migrations-by-vmi"
"""The migration store's index of unfinished migrations by ``namespace/vmiName``."""
REASON_RETRIED: Final = "TargetPodCreateRetried"
REASON_EXHAUSTED: Final = "TargetPodRetriesExhausted"
SHOWN_MESSAGE: Final = 400
"""Characters of virt-controller's error quoted in our Event."""


def migrations_by_vmi(migration: Object) -> list[str]:
    """MIGRATIONS_BY_VMI's function (finished migrations are left out: thousands may remain)."""
    if str(status(migration).get("phase") or "") in FINAL_PHASES:
        return []
    return [f"{namespace(migration)}/{spec(migration).get('vmiName')}"]


class TargetPodRetry:
    """Registered on a Management's migration controller; see the module docstring."""

    def __init__(self, management: Management, metrics: QuotaMetrics) -> None:
        self.management = management
        self.metrics = metrics
        self.clock = management.clock
        self.migrations = management.kubevirt.virtual_machine_instance_migrations()
        informers = QuotaInformers.of(management)
        self.vmis, self.pods = informers.vmis, informers.pods
        self.events = management.informers.informer(
            EVENTS,
            field_selector=EVENT_SELECTOR,
            transform=strip_event,
            indexers={FAILURE_INDEX: failure_index},
            presence=readable(management.client, EVENTS),
        )
        self.namespaces = management.controllers.namespaces().informer.store
        self.migrations.add_indexer(MIGRATIONS_BY_VMI, migrations_by_vmi)
        if not self.pods.store.has_index(TARGET_INDEX):
            self.pods.store.add_indexers({TARGET_INDEX: target_index})
        self.permission = Permission(
            "patch migrations (the target-pod retry)",
            "grant patch on kubevirt.io virtualmachineinstancemigrations (deploy/'s RBAC)",
            management.clock,
        )
        self.states: dict[str, RetryState] = {}
        """By migration key; created at a migration's first failure, dropped when it ends."""

    def register(self) -> None:
        self.migrations.watch_related(self.events, self.migrations_of, name="failed creates")
        self.migrations.on_change(HANDLER, self.on_changed)

    def migrations_of(self, event: Object) -> list[str]:
        """The keys of the unfinished migrations of the VMI an Event names (its own namespace)."""
        if not failure_index(event):
            return []
        involved = event.get("involvedObject") or {}
        vmi_key = f"{involved.get('namespace')}/{involved.get('name')}"
        return [
            f"{namespace(m)}/{name(m)}"
            for m in self.migrations.by_index(MIGRATIONS_BY_VMI, vmi_key)
        ]

    def failures_for(self, migration: Object) -> list[CreateFailure]:
        """The failures reported on the migration's VMI as the cache has it now (none if the
        VMI is not cached: an Event naming a uid no VMI has counts for nothing)."""
        vmi = self.vmis.store.get(f"{namespace(migration)}/{spec(migration).get('vmiName')}")
        uid = metadata(vmi).get("uid") if vmi else None
        if not uid:
            return []
        key = failure_key(namespace(migration), str(uid))
        found = (failure_of(e) for e in self.events.store.by_index(FAILURE_INDEX, key))
        return newest(f for f in found if f is not None)

    async def on_changed(self, key: str, migration: Object | None) -> Object | None:
        """Decides for one migration and acts; returns it unchanged for the next handler."""
        if migration is None or str(status(migration).get("phase") or "") in FINAL_PHASES:
            self.states.pop(key, None)
            return migration
        if is_deleting(self.namespaces.get(namespace(migration))):
            # Nothing is created there again, not even our Event (seen in a full run).
            self.states.pop(key, None)
            return migration
        failures = self.failures_for(migration)
        state = self._state(key, migration, bool(failures))
        if state is None:
            return migration
        now = self.clock.monotonic()
        state.forget_gone(failures)
        state.observe(failures, now)
        uid = str(metadata(migration).get("uid"))
        has_target = bool(self.pods.store.by_index(TARGET_INDEX, uid))
        decision = decide(migration, failures, has_target=has_target, state=state, now=now)
        await self._act(migration, decision, state, failures)
        return migration

    async def _act(
        self,
        migration: Object,
        decision: Decision,
        state: RetryState,
        failures: list[CreateFailure],
    ) -> None:
        if isinstance(decision, Wait):
            self.migrations.enqueue_after(namespace(migration), name(migration), decision.seconds)
        elif isinstance(decision, Exhausted):
            state.answer(failures)
            if not state.exhausted:
                state.exhausted = True
                self._tell_exhausted(migration, decision.failure)
        elif isinstance(decision, Retry) and await self._retry(migration, decision):
            state.retries = decision.number
            state.answer(failures)

    def _state(self, key: str, migration: Object, failed: bool) -> RetryState | None:
        """The migration's state; a new one only once a failure is reported on its VMI."""
        uid = str(metadata(migration).get("uid"))
        state = self.states.get(key)
        if state is not None and state.uid == uid:
            return state
        if not failed:
            self.states.pop(key, None)
            return None
        state = self.states[key] = RetryState(uid)
        return state

    async def _retry(self, migration: Object, retry: Retry) -> bool:
        """Patches the count onto the migration (the requeue); True if it was written."""
        if not self.permission.allowed():
            self.migrations.enqueue_after(
                namespace(migration), name(migration), self.permission.retry_in()
            )
            return False
        body = {
            "metadata": {
                "uid": metadata(migration).get("uid"),
                "annotations": {ANNOTATION_RETRIES: str(retry.number)},
            }
        }
        try:
            await self.management.client.patch(
                VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, name(migration), body, namespace(migration)
            )
        except errors.Forbidden as refused:
            self.permission.refused(refused)
            self.metrics.target_pod_retries.labels("refused").inc()
            return False
        except (errors.NotFound, errors.Conflict, errors.Invalid):
            return False  # gone, or replaced under its name: the new one's changes bring it back
        self.permission.granted()
        self._tell_retried(migration, retry)
        return True

    def _tell_retried(self, migration: Object, retry: Retry) -> None:
        shown = retry.failure.message[:SHOWN_MESSAGE]
        log.info(
            "requeued migration %s/%s after a failed target pod create (retry %d of %d): %s",
            namespace(migration),
            name(migration),
            retry.number,
            MAX_RETRIES,
            shown,
            extra=migration_fields(namespace(migration), spec(migration).get("vmiName")),
        )
        self.metrics.target_pod_retries.labels("retried").inc()
        self.management.recorder.event(
            migration,
            NORMAL,
            REASON_RETRIED,
            f"virt-controller's target pod create failed ({shown}); requeued now instead of "
            f"after its rate limiter's backoff (retry {retry.number} of {MAX_RETRIES})",
        )

    def _tell_exhausted(self, migration: Object, failure: CreateFailure) -> None:
        shown = failure.message[:SHOWN_MESSAGE]
        log.warning(
            "migration %s/%s: target pod create failed again after %d retries, left to "
            "virt-controller: %s",
            namespace(migration),
            name(migration),
            MAX_RETRIES,
            shown,
            extra=migration_fields(namespace(migration), spec(migration).get("vmiName")),
        )
        self.metrics.target_pod_retries.labels("exhausted").inc()
        self.management.recorder.event(
            migration,
            WARNING,
            REASON_EXHAUSTED,
            f"virt-controller's target pod create failed again ({shown}) after {MAX_RETRIES} "
            "requeues; it is left to virt-controller's own retries",
        )


def register(management: Management, metrics: QuotaMetrics) -> TargetPodRetry:
    """Registers the retry on the shared migration controller; `metrics` are the process's."""
    retry = TargetPodRetry(management, metrics)
    retry.register()
    return retry
