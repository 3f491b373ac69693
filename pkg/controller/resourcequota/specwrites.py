"""The room mode's writes of a plan into the quota itself, and the copies into status.hard.

The write is the QuotaWriter's conditional JSON patch (controller/quotawriter.py): if anyone (a
user, Rancher) changed what the plan read since, it is a Conflict, nothing of theirs is
overwritten, and the namespace is planned again. Here each write is counted (metrics, `writes`),
logged and told in an Event on the quota, recorded in the quotas' pending writes
(generic/pendingwrites.py), and a new spec.hard that raises a key handed to `publisher`, which
copies it into status.hard beside the namespace's reconciles (a release while rooms are still held is left to kube-controller-manager:
`raise_waits_on_status`; the last one, which takes our records off, is copied).
Not thread-safe: event loop only, per namespace from one worker at a time.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from typing import Any

from ...config.metrics import QuotaMetrics
from ...generic import errors
from ...generic.events import NORMAL, EventRecorder
from ...generic.logformat import fields
from ...generic.meta import metadata
from ...generic.newest import NewestPerKey
from ...generic.pendingwrites import PendingWrites
from ...generic.resource import Object, key_of
from ...util.quantity import Quantity
from ...util.resourcequota.plan import QuotaPlan
from ..quotawriter import QuotaWriter

log = logging.getLogger(__name__)


def raise_waits_on_status(written: Object) -> bool:
    """Whether a pod waits on the copy of `written`'s spec.hard into status.hard: some key of
    spec.hard stands above status.hard (or status.hard lacks it), so quota admission would
    refuse what the raise makes room for until kube-controller-manager copies it.

    A release alone (every key at or below status.hard) waits on nothing: while status.hard
    stands above spec.hard the webhook holds the namespace's pods to the base
    (resourcequota/raises.py `raise_enforced`) and the room-held label stays (`raise_down`), and
    kube-controller-manager lowers status.hard a moment later. Not copying it saves a quota
    write at the moment a migration's end makes KubeVirt create the next target pod, whose
    quota admission (an update of status.used) our write would make conflict. A value that
    cannot be read counts as waiting (the copy is made: it only publishes what spec.hard says)."""
    spec = (written.get("spec") or {}).get("hard") or {}
    status = (written.get("status") or {}).get("hard") or {}
    try:
        return any(
            key not in status or Quantity.parse(str(value)) > Quantity.parse(str(status[key]))
            for key, value in spec.items()
        )
    except ValueError:
        return True


class SpecWrites:
    """Writes plans into quotas through `writer`, each recorded in `pending` (the quotas' pending
    writes); `publisher` copies each new spec.hard."""

    def __init__(
        self,
        writer: QuotaWriter,
        metrics: QuotaMetrics,
        recorder: EventRecorder,
        pending: PendingWrites,
    ) -> None:
        self.writer = writer
        self.pending = pending
        self.metrics = metrics
        self.recorder = recorder
        self.writes: Counter[str] = Counter()
        """Quota writes per namespace (tests and the scenario report read it)."""
        self.publisher: NewestPerKey[Object] = NewestPerKey(
            "copying spec.hard into status.hard", writer.copy_hard_to_status
        )
        """Copies each spec.hard we write that raises a key into status.hard beside the
        namespace's reconciles (`raise_waits_on_status`), so the next raise of a burst does not
        wait for it; and the release that leaves no room held, so that the room-held label and
        the webhook's hold on the namespace's pods, which last while status.hard stands above
        spec.hard (util/resourcequota/raises.py), end at once (traced: 100-170 ms a raise on
        a 3,000-VM namespace, bench/SCALE.md). One copy of a namespace's at a time, the newest
        written after it; each tests its own spec.hard, so an older one never lands over a newer
        spec. API errors other than a refusal are logged and dropped: kube-controller-manager's
        copy follows anyway."""

    async def write(self, quota: Object, patch: Mapping[str, Any], plan: QuotaPlan) -> None:
        """Applies `patch` to the quota only if it is still as the plan read it.

        The patch goes as a JSON patch whose tests carry the condition: the quota's uid, spec,
        labels and the annotations the plan read (QuotaWriter.patch_as_planned). Status writes
        (kube-controller-manager's, after every spec change and pod admission) do not make it
        fail: the plan never reads the status. A failed condition raises errors.Conflict, which
        re-queues the namespace to plan again from what is there.
        """
        meta = metadata(quota)
        namespace = str(meta["namespace"])
        try:
            written = await self.writer.patch_as_planned(quota, patch)
        except errors.Conflict:
            self.metrics.quota_writes.labels("conflict").inc()
            self.pending.forget(key_of(quota))
            log.info(
                "%s/%s changed since it was read; planning again",
                namespace,
                meta["name"],
                extra=fields(namespace=namespace),
            )
            raise
        except errors.ApiError:
            self.metrics.quota_writes.labels("error").inc()
            raise
        self.metrics.quota_writes.labels("written").inc()
        if "spec" in patch and (raise_waits_on_status(written) or not plan.holds_room):
            self.publisher.submit(namespace, written)
        self.pending.wrote(written)
        self.writes[namespace] += 1
        self._tell(quota, patch, plan)

    def _tell(self, quota: Object, patch: Mapping[str, Any], plan: QuotaPlan) -> None:
        """The write in the log and, when spec.hard changed, in an Event on the quota."""
        meta = metadata(quota)
        changes = ", ".join(
            f"{k} {(quota.get('spec') or {}).get('hard', {}).get(k, '-')} -> {v if v is not None else '-'}"
            for k, v in sorted((patch.get("spec") or {}).get("hard", {}).items())
        )
        holders = ", ".join(f"{r.vm_name} ({r.reason})" for r in plan.rooms.rooms) or "none"
        log.info(
            "%s/%s: %s; migrations holding room: %s",
            meta["namespace"],
            meta["name"],
            changes or "annotations only",
            holders,
            extra=fields(
                namespace=meta["namespace"], migrations=[r.vm_name for r in plan.rooms.rooms]
            ),
        )
        if changes:
            reason = "MigrationRoomReserved" if plan.holds_room else "MigrationRoomReleased"
            self.recorder.event(
                quota, NORMAL, reason, f"spec.hard {changes}; migrations holding room: {holders}"
            )
