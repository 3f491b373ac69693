"""MTQ mode's writes, each one step of its flow and each conditional on what it read.

The VMMRQ's finalizer and status (the budget and the originals, recorded BEFORE any quota is
touched), and the quotas' spec.hard with its copy into status.hard; the namespace lock's writes
are lockwrites.py's. The quota writes go through
the QuotaWriter the room mode uses too (controller/quotawriter.py): a merge patch conditional on
the resourceVersion read, then the copy conditional on spec.hard being still ours, behind the
writer's permission gate. Our writes are kept (keys ``quota:ns/name``, ``vmmrq:ns/name``) until the caches show them: a reconcile right after a write reads what it
wrote. Not thread-safe: event loop only, per namespace from one worker at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from ...apis.mtq import VMMRQS, OriginalQuota, Vmmrq, VmmrqStatus
from ...generic import errors
from ...generic.client import ApiClient
from ...generic.informer import SharedInformer
from ...generic.logformat import fields
from ...generic.meta import metadata
from ...generic.resource import Object
from ...util.mtq import (
    ANNOTATION_RAISED,
    FINALIZER,
    MtqPlan,
    QuotaView,
    hard_json,
    original_hard,
    quota_view,
    raise_action,
    raise_record,
    recorded_raise,
    restore_action,
)
from ...util.resources import ResourceList
from ..quotawriter import QuotaWriter

log = logging.getLogger(__name__)

__all__ = ["FINALIZER", "MtqStats", "MtqWrites", "QuotaAction", "RancherRefusal"]

QuotaAction = Callable[[QuotaView, OriginalQuota, ResourceList], ResourceList | None]
"""raise_action or restore_action: the spec.hard to write to a live quota, or None."""
RancherRefusal = Callable[[str, str, errors.ApiError], None]
"""Told (namespace, quota, error) when Rancher refuses a raise of its quota."""


@dataclass
class MtqStats:
    """What tests and the closing note read: writes by kind and the longest lock hold."""

    quota_writes: int = 0
    status_writes: int = 0
    locks: int = 0
    rancher_refusals: int = 0
    """Raises (dry runs included) Rancher refused."""
    longest_hold: float = 0.0
    locked_at: dict[str, float] = field(default_factory=dict)


@dataclass
class MtqWrites:
    """MTQ mode's writes on `client` (quota changes through `writer`), counted in `stats`, each
    recorded in its kind's pending writes (`SharedInformer.pending`: the namespaces', the
    quotas', the VMMRQs'), through which every read here goes."""

    client: ApiClient
    writer: QuotaWriter
    quotas: SharedInformer
    vmmrqs: SharedInformer
    on_rancher_refusal: RancherRefusal
    stats: MtqStats = field(default_factory=MtqStats, init=False)

    def live_quotas(self, namespace: str) -> dict[str, QuotaView]:
        """The namespace's quotas by name, our unseen writes included."""
        views = {}
        for quota in self.quotas.pending.by_index("namespace", namespace):
            views[str(metadata(quota).get("name"))] = quota_view(quota)
        return views

    # The steps ------------------------------------------------------------------------------

    async def record_and_raise(self, vmmrq: Vmmrq, plan: MtqPlan) -> None:
        """Finalizer, originals recorded in status, then the raise: each only if not done yet."""
        await self.ensure_finalizer(vmmrq, present=True)
        restored = await self._restore(vmmrq, plan)
        await self.write_status(vmmrq, plan, restored)
        await self.bring_each(vmmrq.namespace, plan.originals, plan.budget, raise_action, "raised")

    async def release(self, vmmrq: Vmmrq, plan: MtqPlan) -> None:
        """Restore, forget the originals, drop the finalizer (the unlock follows)."""
        restored = await self._restore(vmmrq, plan)
        await self.write_status(vmmrq, plan, restored)
        await self.ensure_finalizer(vmmrq, present=False)

    async def _restore(self, vmmrq: Vmmrq, plan: MtqPlan) -> set[str]:
        """Restores each quota the plan gives back by the restore rule (from the quota's raise
        record where it carries one), and each other quota with a record the plan does not hold
        raised (its status, a tenant's to write, may leave it out); returns the names now
        restored (or gone)."""
        await self.bring_each(
            vmmrq.namespace, plan.restore, plan.budget, restore_action, "restored"
        )
        await self.restore_recorded(
            vmmrq.namespace, keep={original.name for original in plan.originals}
        )
        return {original.name for original in plan.restore}

    # The VMMRQ --------------------------------------------------------------------------------

    async def ensure_finalizer(self, vmmrq: Vmmrq, *, present: bool) -> None:
        """Adds or removes FINALIZER on the VMMRQ, if it differs (a VMMRQ gone is left)."""
        obj = self.vmmrqs.pending.get(f"{vmmrq.namespace}/{vmmrq.name}")
        if obj is None:
            return
        finalizers = list(metadata(obj).get("finalizers") or [])
        if (FINALIZER in finalizers) == present:
            return
        wanted = [*finalizers, FINALIZER] if present else [f for f in finalizers if f != FINALIZER]
        version = str(metadata(obj).get("resourceVersion"))
        patch = {"metadata": {"resourceVersion": version, "finalizers": wanted}}
        try:
            written = await self.client.patch(VMMRQS, vmmrq.name, patch, vmmrq.namespace)
        except errors.NotFound:
            return
        self.vmmrqs.pending.wrote(written)

    async def write_status(self, vmmrq: Vmmrq, plan: MtqPlan, restored: set[str]) -> None:
        """The status the plan implies: the budget, the releasable migrations and the originals
        (those to restore stay recorded until restored); nothing if it is there already."""
        keep = {o.name for o in plan.originals}
        restoring = [o for o in plan.restore if o.name not in restored]
        wanted = VmmrqStatus(
            additional=hard_json(plan.budget),
            migrations=dict(plan.migrations),
            originals=(*plan.originals, *(o for o in restoring if o.name not in keep)),
        )
        if wanted.to_json() == vmmrq.status.to_json():
            return
        obj = self.vmmrqs.pending.get(f"{vmmrq.namespace}/{vmmrq.name}")
        if obj is None:
            return
        body = {**obj, "status": wanted.to_json()}
        written = await self.client.update_status(VMMRQS, body)
        self.vmmrqs.pending.wrote(written)
        self.stats.status_writes += 1

    # The quotas -------------------------------------------------------------------------------

    async def bring_each(
        self,
        namespace: str,
        originals: Sequence[OriginalQuota],
        budget: ResourceList,
        action: QuotaAction,
        verb: str,
    ) -> None:
        """Writes each live quota the `action` wants changed (a quota gone is skipped), in order.
        A raise writes its record (ANNOTATION_RAISED) with it; a restore removes the record,
        with the restored spec.hard or alone, and restores from the record where the quota
        carries one (the originals and budget given come from the VMMRQ's status, which a
        tenant may write). A raise stops at Rancher's refusal (the namespace is
        planned again without its quota); a restore goes on (Rancher's agent resets what it
        refuses us)."""
        quotas = self.live_quotas(namespace)
        raising = action is raise_action
        for given in originals:
            live = quotas.get(given.name)
            if live is None:
                continue
            original, spent = given, budget
            if not raising:
                original, spent = _recorded_or(namespace, live, given, budget)
            target = action(live, original, spent)
            if target is None and not raising and live.raised_from is not None:
                target = live.hard  # restored already: the record goes
            if target is None:
                continue
            record = raise_record(original_hard(original), budget) if raising else None
            written = await self._write_hard(namespace, live, target, verb, record)
            if not written and raising:
                return

    async def restore_recorded(self, namespace: str, keep: Iterable[str] = ()) -> None:
        """Restores every quota of `namespace` that carries a raise record, but those named in
        `keep` (held raised), from the record alone (the restore rule), and removes the record:
        for a namespace whose VMMRQ, and the originals its status held, are gone, or whose
        status no longer names the quota (a tenant's write). A record that cannot be read is
        logged and left."""
        kept = set(keep)
        for live in self.live_quotas(namespace).values():
            if live.name in kept:
                continue
            try:
                recorded = recorded_raise(live)
            except ValueError as error:
                log.error(
                    "%s: %s; not restored", namespace, error, extra=fields(namespace=namespace)
                )
                continue
            if recorded is not None:
                original, budget = recorded
                target = restore_action(live, original, budget) or live.hard
                await self._write_hard(namespace, live, target, "restored from its record", None)

    async def dry_run_hard(self, namespace: str, quota: QuotaView, hard: ResourceList) -> None:
        """Asks the API server (its admission included) whether spec.hard := `hard` would be
        stored; its refusal propagates."""
        await self.writer.patch_hard_at_version(
            namespace, quota.name, self._read(namespace, quota), hard_json(hard), dry_run=True
        )

    def _read(self, namespace: str, quota: QuotaView) -> Object:
        return self.quotas.pending.get(f"{namespace}/{quota.name}") or {}

    async def _write_hard(
        self, namespace: str, quota: QuotaView, hard: ResourceList, what: str, record: str | None
    ) -> bool:
        """spec.hard := `hard` and the raise record := `record` (None: removed, if there), in one
        write conditional on the version read, then status.hard at once (quota admission reads
        status.hard; kube-controller-manager copies it only a moment later), conditional on
        spec.hard being still ours (QuotaWriter.copy_hard_to_status). False if Rancher refused
        the write of its quota (told to `on_rancher_refusal`)."""
        read = self._read(namespace, quota)
        wanted = hard_json(hard)
        change = {} if record is None and quota.raised_from is None else {ANNOTATION_RAISED: record}
        try:
            written = await self.writer.patch_hard_at_version(
                namespace, quota.name, read, wanted, annotations=change
            )
        except errors.ApiError as error:
            if not (quota.rancher_default and errors.denied_by_rancher(error)):
                raise
            self.on_rancher_refusal(namespace, quota.name, error)
            return False
        self.quotas.pending.wrote(written)
        self.stats.quota_writes += 1
        log.info(
            "%s/%s: spec.hard %s to %s",
            namespace,
            quota.name,
            what,
            wanted,
            extra=fields(namespace=namespace),
        )
        published = await self.writer.copy_hard_to_status(written)
        if published is not written:
            self.quotas.pending.wrote(published)
        return True


def _recorded_or(
    namespace: str, live: QuotaView, given: OriginalQuota, budget: ResourceList
) -> tuple[OriginalQuota, ResourceList]:
    """The original and budget to restore `live` from: its raise record if it carries a readable
    one (only our controller writes it), else `given` and `budget` (the VMMRQ's status)."""
    try:
        recorded = recorded_raise(live)
    except ValueError as error:
        log.error(
            "%s: %s; restoring from the VMMRQ's status",
            namespace,
            error,
            extra=fields(namespace=namespace),
        )
        return given, budget
    return recorded if recorded is not None else (given, budget)
