"""The /validate/pods endpoint's choice: which rule a pod meets, and a target pod's wait.

A pod MTQ mode's active lock admits is left alone (its quota was raised for it); a migration
target pod that replaces a launcher pod here may wait for its room (resources/pod/targets.py) and
is never denied; any other pod, a decentralized migration's target pod included,
while room is held is decided on the reservation every replica shares (resources/pod/
reservations.py), or on this process's ledger without one, or for a dry run (which reserves
nothing, anywhere). How many admissions are decided at once, and fairly among namespaces, is the
server's admission limiter's (limiter.py). Runs on the event loop: a pod's rooms are worked out
and the pod decided on them without awaiting in between, so decisions are serialized there.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from ..apis.kubevirt import LABEL_MIGRATION_JOB, LABEL_VM_NAME
from ..generic.clock import Clock
from ..generic.logformat import migration_fields
from ..generic.meta import labels
from .admission import Request
from .metrics import WebhookMetrics
from .resources.common import Identities, Lookups
from .resources.mtq.validator import active_lock, is_lock_target
from .resources.pod.ledger import AdmissionLedger
from .resources.pod.reservations import LeaseReservations
from .resources.pod.targets import GaveUp, LiveQuotas, QuotaChanges, admit_target
from .resources.pod.validator import (
    PodCheck,
    admit_locally,
    check_rooms,
    is_room_target,
    rooms_question,
)

log = logging.getLogger(__name__)


@dataclass
class PodAdmissions:
    """Decides pods; target pods wait up to `target_room_wait` seconds, woken by
    `quota_changes`, judged once more on `live` quotas when given."""

    lookups: Lookups
    identities: Identities
    metrics: WebhookMetrics
    clock: Clock
    quota_changes: QuotaChanges
    target_room_wait: float
    ledger: AdmissionLedger
    """Pods admitted while room is held, until the caches show them (pod/ledger.py)."""
    reservations: LeaseReservations | None
    live: LiveQuotas | None
    _gave_up: GaveUp = field(init=False)

    def __post_init__(self) -> None:
        self._gave_up = GaveUp(self.clock)

    def validate(self, request: Request) -> Awaitable[None] | None:
        """Room targets may wait for their room (never denied); the others are decided at once."""
        lock = active_lock(self.lookups, request.namespace)
        if lock is not None and is_lock_target(request, self.identities, lock):
            return None  # MTQ raised the quota for it: nothing to wait for, nothing to check
        if is_room_target(request, self.lookups, self.identities):
            return self._admit_target(request)
        question = rooms_question(request, self.lookups, self.identities)
        if question is None:
            return None  # nothing held or raised here: no rooms to work out
        return self._decide(request, check_rooms(request, self.lookups, question))

    def _decide(self, request: Request, check: PodCheck | None) -> Awaitable[None] | None:
        if check is None:
            return None
        if self.reservations is None or request.dry_run:
            # A dry run is decided as this replica sees it and reserves nothing, anywhere.
            admit_locally(check, self.ledger, dry_run=request.dry_run)
            return None
        return self.reservations.admit(check, check.uid)

    async def _admit_target(self, request: Request) -> None:
        admission = await admit_target(
            request,
            self.lookups,
            self.quota_changes,
            self.clock,
            wait=self.target_room_wait,
            gave_up=self._gave_up,
            live=self.live,
        )
        self.metrics.target_pods.labels(admission.outcome).inc()
        self.metrics.target_wait.observe(admission.waited)
        subject = f"{request.namespace}/{request.name or '(generated name)'}"
        about = _target_fields(request)
        if admission.short:
            missing = "; ".join(
                f"{s.key} needs {s.needed}, {s.free} left of {s.limit}" for s in admission.short
            )
            log.warning(
                "migration target pod %s let through after %.2fs without room (%s): %s; "
                "quota admission decides",
                subject,
                admission.waited,
                admission.outcome,
                missing,
                extra=about,
            )
        elif admission.waited > 0:
            log.info(
                "migration target pod %s fitted after %.2fs", subject, admission.waited, extra=about
            )


def _target_fields(request: Request) -> dict[str, Any]:
    """The log fields of a migration target pod's admission: its namespace, its VM (KubeVirt's
    vm.kubevirt.io/name label on a launcher pod) and its migration's uid, as the pod gives them."""
    pod_labels = labels(request.obj or {})
    return migration_fields(
        request.namespace,
        pod_labels.get(LABEL_VM_NAME),
        migration_uid=pod_labels.get(LABEL_MIGRATION_JOB),
    )
