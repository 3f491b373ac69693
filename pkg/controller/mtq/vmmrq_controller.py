"""Managed-Tenant-Quota mode: KubeVirt MTQ's VirtualMachineMigrationResourceQuota flow, made safe.

A namespace with a VMMRQ is handled here (the room mode leaves it alone). One level-triggered
reconcile per namespace, on the namespace controller's queue, computes the plan from the caches
(util/resourcequota/mtq.py) and moves the cluster one step at a time, in an order that a crash
at any point leaves recoverable from what is written:

1. lock: the namespace label and annotation, with an absolute deadline (never extended); the
   next steps wait until the lock comes back through the namespace watch;
2. the VMMRQ gets a finalizer, then its status records the budget and the original spec of every
   quota to raise: BEFORE any quota is touched;
3. raise every recorded quota still at its original (and publish status.hard at once);
4. the target pods appear (KubeVirt retries on the quota update): the migrations drop out of the
   plan, the quotas are restored by the restore rule (an administrator's edit stays), the status
   forgets them, the finalizer goes, the namespace is unlocked.

A restarted controller reads the lock and the recorded originals and finishes or undoes the
step it died in. At the deadline the window ends whatever happened: the quotas are restored, the
lock removed, and the migrations it was held for wait for a change of their own, or a backoff,
before another window (no hot loop). A migration the budget cannot release gets one Warning
event NotEnoughResourceToRelease per change of the reason, and is looked at again only when a
quota, the VMMRQ, the migration or its pods change.

A migration KubeVirt's parallel-migration limits hold back (util/migrationlimits.py) gets no target
pod whatever the quota says: it takes no lock (as KubeVirt MTQ's reachedMaxParallelMigrations), and
the namespace is looked at again 5 s later; a lock held for it ends as soon as it is the only one.

Rancher 2.14.6+/2.15.2+ refuses every write of its labelled default quota but its own. Before the
first lock of a namespace whose plan would raise such a quota, the raise is sent as a dry run; if
Rancher refuses it (or a real raise is refused later), the namespace's Rancher quotas are left
out of every plan from then on (mtq.py: protected), with one Warning QuotaProtectedByRancher on
the VMMRQ saying what to do: no lock is taken for a raise that cannot happen, and none again.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ...apis.harvester import RATIO_SETTING, SETTINGS
from ...apis.kubevirt import (
    CONDITION_REJECTED_BY_QUOTA,
    KUBEVIRTS,
    LABEL_MIGRATION_JOB,
    PHASE_PENDING,
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
    VIRTUAL_MACHINE_INSTANCES,
)
from ...apis.mtq import VMMRQS, OriginalQuota, Vmmrq, VmmrqError, VmmrqStatus, decode_vmmrq
from ...config.kubevirt import settings_from
from ...config.management import Management
from ...generic import errors
from ...generic.events import WARNING
from ...generic.meta import labels, metadata, status
from ...generic.ownwrites import OwnWrites
from ...generic.resource import LIMIT_RANGES, NAMESPACES, PODS, RESOURCE_QUOTAS, Object
from ...util.launcher import LauncherSettings, launcher_quota_usage
from ...util.migrationlimits import RECHECK_SECONDS, held_back, migration_limits, takes_slot
from ...util.podusage import strip_pod_to_quota_fields
from ...util.quotascope import launcher_scope_facts
from ...util.resourcequota.conditional import failed_test, publish_patch
from ...util.resourcequota.handover import room_raise_left
from ...util.resourcequota.managed import managed_quota
from ...util.resourcequota.mtq import (
    ANNOTATION_LOCK,
    LABEL_LOCKED,
    NOT_ENOUGH_REASON,
    RANCHER_PROTECTED_REASON,
    Blocked,
    Lock,
    NamespacePlan,
    QuotaView,
    hard_json,
    not_enough_message,
    parse_lock,
    plan_namespace,
    quota_view,
    raise_action,
    rancher_held_message,
    restore_action,
)
from ...util.resources import ResourceList

QuotaAction = Callable[[QuotaView, OriginalQuota, ResourceList], ResourceList | None]
"""raise_action or restore_action: the spec.hard to write to a live quota, or None."""

log = logging.getLogger(__name__)

HANDLER: Final = "mtq-reconcile"
FINALIZER: Final = "mtq.harvester-quota.io/restore"
"""On a VMMRQ while it records originals: deleting it restores the quotas first."""
TARGET_INDEX: Final = "mtq-migration-target"
LOCK_SECONDS: Final = 30.0
"""Default lock window: the longest a namespace stays locked and its quotas raised."""
RETRY_AFTER_EXPIRY: Final = 60.0
"""A migration whose window ended without its target pod waits this long (doubling per expiry,
up to RETRY_CAP) for another, unless it changes first."""
RETRY_CAP: Final = 600.0
MULTIPLE_REASON: Final = "MultipleMigrationResourceQuotas"


def _target_index(pod: Object) -> list[str]:
    uid = labels(pod).get(LABEL_MIGRATION_JOB)
    return [str(uid)] if uid else []


def _namespace_of(obj: Object) -> list[str]:
    namespace = metadata(obj).get("namespace")
    return [str(namespace)] if namespace else []


def _labels_changed(old: Object, new: Object) -> bool:
    """A target pod matters when it appears or goes (or is relabelled), not on status updates."""
    return labels(old) != labels(new)


def _targets_namespace(obj: Object) -> list[str]:
    return _namespace_of(obj) if LABEL_MIGRATION_JOB in labels(obj) else []


@dataclass
class Expired:
    """A migration whose lock window ended without its target pod."""

    version: str
    """Its resourceVersion then: any change of it ends the wait."""
    retry_at: float
    backoff: float


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


class MtqReconciler:
    """Registers the MTQ reconcile on a Management's namespace controller."""

    def __init__(self, management: Management, *, lock_seconds: float = LOCK_SECONDS) -> None:
        self.management = management
        self.lock_seconds = lock_seconds
        factory = management.informers
        self.vmmrqs = factory.informer(VMMRQS, optional=True)
        self.quotas = factory.informer(RESOURCE_QUOTAS)
        self.migrations = factory.informer(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS)
        self.vmis = factory.informer(VIRTUAL_MACHINE_INSTANCES)
        self.pods = factory.informer(PODS, transform=strip_pod_to_quota_fields)
        if not self.pods.store.has_index(TARGET_INDEX):
            self.pods.store.add_indexers({TARGET_INDEX: _target_index})
        self.kubevirts = factory.informer(KUBEVIRTS, optional=True)
        self.limit_ranges = factory.informer(LIMIT_RANGES)
        self.settings = factory.informer(
            SETTINGS, field_selector=f"metadata.name={RATIO_SETTING}", optional=True
        )
        self.namespaces = management.controllers.namespaces()
        self._expired: dict[str, Expired] = {}
        self._reported: dict[str, str] = {}
        """Migration uid -> the last NotEnoughResourceToRelease message (once per change)."""
        self._rancher_protected: dict[str, str] = {}
        """Namespace -> Rancher's refusal of a raise of its default quota: that quota is left
        out of the namespace's plans from then on (per namespace, learned again after a
        restart by one dry run)."""
        self._rancher_writable: set[str] = set()
        """Namespaces whose Rancher quota took a dry-run raise: not asked again."""
        self.stats = MtqStats()
        self._writes = OwnWrites()
        """Our writes (keys ``quota:ns/name``, ``namespace:name``, ``vmmrq:ns/name``) until the
        caches show them: a reconcile right after a write reads what it wrote."""

    def register(self) -> None:
        controller = self.namespaces
        controller.watch_related(self.vmmrqs, _namespace_of, name=f"mtq {self.vmmrqs.name}")
        # Quotas, migrations and target pods matter only where a VMMRQ is: elsewhere their
        # events (virt-controller's status writes, several a second per migration) would queue
        # namespace reconciles that MTQ leaves at once and the room mode does not need.
        for informer in (self.quotas, self.migrations, self.limit_ranges):
            controller.watch_related(
                informer, self._where_managed(_namespace_of), name=f"mtq {informer.name}"
            )
        controller.watch_related(
            self.pods,
            self._where_managed(_targets_namespace),
            name="mtq target pods",
            relevant=_labels_changed,
        )
        controller.on_change(HANDLER, self.reconcile)

    def has_budget(self, namespace: str) -> bool:
        """True if `namespace` has a VMMRQ: it is MTQ mode's once the room mode has given its
        raise back there (handover.py)."""
        return bool(self.vmmrqs.store.index_keys("namespace", namespace))

    def manages(self, namespace: str) -> bool:
        """True if MTQ mode handles `namespace`: it has a VMMRQ and no raise of the room mode
        stands in its managed quota (the room mode gives it back first)."""
        if not self.has_budget(namespace):
            return False
        quota = managed_quota(self.quotas.store.by_index("namespace", namespace))
        return not room_raise_left(quota, None)

    def _where_managed(
        self, resolve: Callable[[Object], list[str]]
    ) -> Callable[[Object], list[str]]:
        """`resolve`, keeping only namespaces with a VMMRQ (a VMMRQ's own events queue its
        namespace when it comes or goes, so a namespace that gains one is reconciled then)."""
        return lambda obj: [ns for ns in resolve(obj) if self.manages(ns)]

    # The reconcile ----------------------------------------------------------------------------

    async def reconcile(self, key: str, namespace: Object | None) -> Object | None:
        """One step towards the plan for namespace `key` (see the module docstring)."""
        if namespace is None:
            return None
        seen = parse_lock(namespace)
        namespace = self._writes.newest(f"namespace:{key}", namespace)
        vmmrq = self._vmmrq(key)
        if vmmrq is None:
            return await self._unlock(namespace)
        now = self.management.clock.now()
        lock = parse_lock(namespace)
        plan = self._plan(vmmrq, key, lock, now)
        if plan.locks and await self._rancher_refuses(key, plan):
            plan = self._plan(vmmrq, key, lock, now)
        self._report(vmmrq, plan, lock if lock is not None and lock.active(now) else None)
        if plan.locks:
            namespace = await self._lock(namespace, vmmrq, plan, lock, now)
            if _covers(seen, plan, now):
                await self._record_and_raise(vmmrq, plan)
        else:
            await self._release(namespace, vmmrq, plan)
            namespace = await self._unlock(namespace)
        self._wake_at_deadline(key, parse_lock(namespace), now)
        return namespace

    def _vmmrq(self, namespace: str) -> Vmmrq | None:
        """The namespace's one VMMRQ (with several: the one recording a raise, else the first by
        name, and a Warning on the others); None without a decodable one."""
        objects = sorted(
            (
                self._writes.newest(f"vmmrq:{namespace}/{_name(o)}", o)
                for o in self.vmmrqs.store.by_index("namespace", namespace)
            ),
            key=_name,
        )
        decoded: list[Vmmrq] = []
        for obj in objects:
            try:
                decoded.append(decode_vmmrq(obj))
            except VmmrqError as error:
                log.warning("%s", error)
        if not decoded:
            return None
        decoded.sort(key=lambda v: not v.status.originals)
        for other in decoded[1:]:
            self._warn_once(
                f"multiple/{namespace}/{other.name}",
                self.vmmrqs.store.get(f"{namespace}/{other.name}") or {},
                MULTIPLE_REASON,
                f"namespace {namespace} has more than one VirtualMachineMigrationResourceQuota; "
                f"only {decoded[0].name} is used",
            )
        return decoded[0]

    def _plan(
        self, vmmrq: Vmmrq, namespace: str, lock: Lock | None, now: datetime.datetime
    ) -> NamespacePlan:
        """The plan, after ending a window whose deadline passed (its migrations wait)."""
        migrations = self.migrations.store.by_index("namespace", namespace)
        if lock is not None and not lock.active(now):
            self._expire(lock, migrations)
        blocked = [b for b in (self._blocked(namespace, m) for m in migrations) if b is not None]
        excluded = frozenset(self._waiting(migrations)) | self._held_back(namespace, blocked)
        quotas = list(self._live_quotas(namespace).values())
        protected = frozenset(
            q.name for q in quotas if q.rancher_default and namespace in self._rancher_protected
        )
        return plan_namespace(vmmrq, blocked, quotas, excluded=excluded, protected=protected)

    def _held_back(self, namespace: str, blocked: Sequence[Blocked]) -> frozenset[str]:
        """Names of the blocked migrations KubeVirt's parallel-migration limits hold back now
        (migrationlimits.py): no raise would get them a target pod, so no lock is taken for
        them; the namespace is looked at again RECHECK_SECONDS later."""
        if not blocked:
            return frozenset()
        kubevirts = self.kubevirts.store.objects()
        limits = migration_limits(kubevirts[0] if kubevirts else None)
        running = self._running_source_nodes()
        held = frozenset(
            b.name
            for b in blocked
            if held_back(self._source_node(namespace, b.vmi), running, limits)
        )
        if held:
            self.namespaces.enqueue_after(None, namespace, RECHECK_SECONDS)
        return held

    def _running_source_nodes(self) -> list[str | None]:
        """The source node of every migration in the cluster that takes a parallel slot."""
        nodes = []
        for migration in self.migrations.store.objects():
            phase = str(status(migration).get("phase") or PHASE_PENDING)
            uid = str(metadata(migration).get("uid"))
            if takes_slot(phase, bool(self.pods.store.by_index(TARGET_INDEX, uid))):
                namespace = str(metadata(migration).get("namespace"))
                vmi = str((migration.get("spec") or {}).get("vmiName"))
                nodes.append(self._source_node(namespace, vmi))
        return nodes

    def _source_node(self, namespace: str, vmi_name: str) -> str | None:
        vmi = self.vmis.store.get(f"{namespace}/{vmi_name}")
        node = status(vmi).get("nodeName") if vmi is not None else None
        return str(node) if node else None

    def _blocked(self, namespace: str, migration: Object) -> Blocked | None:
        """The migration as Blocked if KubeVirt reports its target pod refused by quota and no
        target pod exists, sized as KubeVirt would render it; else None."""
        phase = str(status(migration).get("phase") or PHASE_PENDING)
        conditions = status(migration).get("conditions") or []
        rejected = any(
            isinstance(c, Mapping) and c.get("type") == CONDITION_REJECTED_BY_QUOTA
            for c in conditions
        )
        uid = str(metadata(migration).get("uid"))
        if phase != PHASE_PENDING or not rejected:
            return None
        if self.pods.store.by_index(TARGET_INDEX, uid):
            return None
        vmi_name = str((migration.get("spec") or {}).get("vmiName"))
        vmi = self.vmis.store.get(f"{namespace}/{vmi_name}")
        if vmi is None:
            return None
        try:
            usage = launcher_quota_usage(vmi, self._settings(namespace))
        except ValueError as error:
            log.warning("%s: cannot size the target pod of %s: %s", namespace, vmi_name, error)
            return None
        facts = launcher_scope_facts(vmi, usage)
        return Blocked(str(metadata(migration).get("name")), uid, usage, facts, vmi_name)

    def _settings(self, namespace: str) -> LauncherSettings:
        """The launcher settings in force for `namespace`: as the room mode reads them, with the
        namespace's LimitRange defaults (admission adds them to the target pod)."""
        kubevirts, ratio = self.kubevirts.store.objects(), self.settings.store.objects()
        settings = settings_from(
            kubevirts[0] if kubevirts else None,
            ratio[0] if ratio else None,
            configured_version=self.management.options.kubevirt_version,
        )
        quotas = self.quotas.store.by_index("namespace", namespace)
        return settings.for_namespace(
            quotas,
            self.namespaces.cached(None, namespace),
            self.limit_ranges.store.by_index("namespace", namespace),
        )

    # Windows that ended -------------------------------------------------------------------------

    def _expire(self, lock: Lock, migrations: Sequence[Object]) -> None:
        """Records the lock's migrations as waiting: their window ended without a target pod."""
        now = self.management.clock.monotonic()
        for migration in migrations:
            uid = str(metadata(migration).get("uid"))
            if not lock.admits_target_of(uid) or self.pods.store.by_index(TARGET_INDEX, uid):
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
            )
            self.namespaces.enqueue_after(None, str(metadata(migration).get("namespace")), backoff)

    def _waiting(self, migrations: Sequence[Object]) -> list[str]:
        """Names of migrations still waiting after an expired window (unchanged, not yet due)."""
        now = self.management.clock.monotonic()
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

    # Rancher's protected quota ----------------------------------------------------------------

    async def _rancher_refuses(self, namespace: str, plan: NamespacePlan) -> bool:
        """Whether Rancher refuses a dry run of the plan's raise of its default quota (asked
        before the namespace's first lock in this process, so a quota only Rancher may write
        costs no lock window). Another answer leaves it to the real raise."""
        if namespace in self._rancher_protected or namespace in self._rancher_writable:
            return False
        quotas = self._live_quotas(namespace)
        for original in plan.originals:
            live = quotas.get(original.name)
            if live is None or not live.rancher_default:
                continue
            hard = raise_action(live, original, plan.budget) or live.hard
            try:
                await self._patch_hard(namespace, live, hard, dry_run=True)
            except errors.ApiError as error:
                if errors.denied_by_rancher(error):
                    self._learn_rancher_refusal(namespace, live.name, error)
                    return True
                log.debug("%s/%s: dry-run raise answered %s", namespace, live.name, error)
                return False
            self._rancher_writable.add(namespace)
        return False

    def _learn_rancher_refusal(self, namespace: str, quota: str, error: errors.ApiError) -> None:
        """Rancher refused a raise of `quota`: its quotas are out of the namespace's plans."""
        self.stats.rancher_refusals += 1
        if namespace not in self._rancher_protected:
            log.warning(
                "%s/%s: Rancher refuses our writes (%s); MTQ mode leaves its quota alone",
                namespace,
                quota,
                error,
            )
        self._rancher_protected[namespace] = error.message
        self._rancher_writable.discard(namespace)

    # Holding and releasing --------------------------------------------------------------------

    async def _record_and_raise(self, vmmrq: Vmmrq, plan: NamespacePlan) -> None:
        """Finalizer, originals recorded in status, then the raise: each only if not done yet."""
        await self._ensure_finalizer(vmmrq, present=True)
        restored = await self._restore(vmmrq.namespace, plan.restore, plan.budget)
        await self._write_status(vmmrq, plan, restored)
        await self._bring_each(vmmrq.namespace, plan.originals, plan.budget, raise_action, "raised")

    async def _release(self, namespace: Object, vmmrq: Vmmrq, plan: NamespacePlan) -> None:
        """Restore, forget the originals, drop the finalizer (the unlock follows)."""
        restored = await self._restore(vmmrq.namespace, plan.restore, plan.budget)
        await self._write_status(vmmrq, plan, restored)
        await self._ensure_finalizer(vmmrq, present=False)

    async def _restore(
        self, namespace: str, originals: Sequence[OriginalQuota], budget: ResourceList
    ) -> set[str]:
        """Restores each quota by the restore rule; returns the names now restored (or gone)."""
        await self._bring_each(namespace, originals, budget, restore_action, "restored")
        return {original.name for original in originals}

    async def _bring_each(
        self,
        namespace: str,
        originals: Sequence[OriginalQuota],
        budget: ResourceList,
        action: QuotaAction,
        verb: str,
    ) -> None:
        """Writes each live quota the `action` wants changed (a quota gone is skipped), in order.
        A raise stops at Rancher's refusal (the namespace is planned again without its quota);
        a restore goes on (Rancher's agent resets what it refuses us)."""
        quotas = self._live_quotas(namespace)
        for original in originals:
            live = quotas.get(original.name)
            target = action(live, original, budget) if live is not None else None
            if target is not None and live is not None:
                written = await self._write_hard(namespace, live, target, verb)
                if not written and action is raise_action:
                    return

    def _live_quotas(self, namespace: str) -> dict[str, QuotaView]:
        """The namespace's quotas by name, our unseen writes included."""
        views = {}
        for quota in self.quotas.store.by_index("namespace", namespace):
            newest = self._writes.newest(f"quota:{namespace}/{_name(quota)}", quota)
            views[_name(quota)] = quota_view(newest)
        return views

    # Writes -----------------------------------------------------------------------------------

    async def _lock(
        self,
        namespace: Object,
        vmmrq: Vmmrq,
        plan: NamespacePlan,
        lock: Lock | None,
        now: datetime.datetime,
    ) -> Object:
        """Takes the lock (deadline now + lock_seconds), or adds migrations to the held one under
        its own deadline; nothing if the held lock already admits every planned migration. The
        raise waits for the lock to come back through the watch (`_covers`): the API server's
        webhook selector and the webhook's cache learn of it from the same watch, so a pod
        created after the raise meets the lock (KubeVirt MTQ raised right after creating its
        lock, and squatters slipped through)."""
        if lock is not None and lock.active(now):
            if set(plan.uids) <= set(lock.migrations):
                return namespace
            wanted = Lock(lock.until, vmmrq.name, {**lock.migrations, **plan.uids})
        else:
            until = now + datetime.timedelta(seconds=self.lock_seconds)
            wanted = Lock(until, vmmrq.name, dict(plan.uids))
            self.stats.locks += 1
            self.stats.locked_at[vmmrq.namespace] = self.management.clock.monotonic()
        log.info(
            "%s: locked until %s for %s",
            vmmrq.namespace,
            wanted.until.isoformat(),
            ", ".join(sorted(wanted.migrations.values())),
        )
        return await self._patch_namespace(
            namespace, {LABEL_LOCKED: "true"}, {ANNOTATION_LOCK: wanted.annotation()}
        )

    async def _unlock(self, namespace: Object) -> Object:
        if labels(namespace).get(LABEL_LOCKED) is None:
            return namespace
        name = str(metadata(namespace).get("name"))
        started = self.stats.locked_at.pop(name, None)
        if started is not None:
            held = self.management.clock.monotonic() - started
            self.stats.longest_hold = max(self.stats.longest_hold, held)
            log.info("%s: unlocked after %.3fs", name, held)
        return await self._patch_namespace(namespace, {LABEL_LOCKED: None}, {ANNOTATION_LOCK: None})

    async def _patch_namespace(
        self, namespace: Object, label: dict[str, Any], annotation: dict[str, Any]
    ) -> Object:
        meta = metadata(namespace)
        version = str(meta.get("resourceVersion"))
        patch = {
            "metadata": {"resourceVersion": version, "labels": label, "annotations": annotation}
        }
        written = await self.management.client.patch(NAMESPACES, str(meta["name"]), patch)
        self._writes.wrote(f"namespace:{meta['name']}", version, written)
        return written

    async def _ensure_finalizer(self, vmmrq: Vmmrq, *, present: bool) -> None:
        key = f"vmmrq:{vmmrq.namespace}/{vmmrq.name}"
        cached = self.vmmrqs.store.get(f"{vmmrq.namespace}/{vmmrq.name}")
        if cached is None:
            return
        obj = self._writes.newest(key, cached)
        finalizers = list(metadata(obj).get("finalizers") or [])
        if (FINALIZER in finalizers) == present:
            return
        wanted = [*finalizers, FINALIZER] if present else [f for f in finalizers if f != FINALIZER]
        version = str(metadata(obj).get("resourceVersion"))
        patch = {"metadata": {"resourceVersion": version, "finalizers": wanted}}
        try:
            written = await self.management.client.patch(VMMRQS, vmmrq.name, patch, vmmrq.namespace)
        except errors.NotFound:
            return
        self._writes.wrote(key, version, written)

    async def _write_status(self, vmmrq: Vmmrq, plan: NamespacePlan, restored: set[str]) -> None:
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
        key = f"vmmrq:{vmmrq.namespace}/{vmmrq.name}"
        obj = self.vmmrqs.store.get(f"{vmmrq.namespace}/{vmmrq.name}")
        if obj is None:
            return
        obj = self._writes.newest(key, obj)
        body = {**obj, "status": wanted.to_json()}
        written = await self.management.client.update_status(VMMRQS, body)
        self._writes.wrote(key, vmmrq.resource_version, written)
        self.stats.status_writes += 1

    async def _patch_hard(
        self, namespace: str, quota: QuotaView, hard: ResourceList, *, dry_run: bool = False
    ) -> tuple[str, Object]:
        """Patches spec.hard to `hard` (keys it lacks removed), conditional on the version read;
        returns that version and the answer."""
        key = f"quota:{namespace}/{quota.name}"
        obj = self._writes.newest(key, self.quotas.store.get(f"{namespace}/{quota.name}") or {})
        version = str(metadata(obj).get("resourceVersion"))
        wanted = hard_json(hard)
        current = (obj.get("spec") or {}).get("hard") or {}
        patch_hard: dict[str, Any] = {k: None for k in current if k not in wanted}
        patch_hard.update(wanted)
        written = await self.management.client.patch(
            RESOURCE_QUOTAS,
            quota.name,
            {"metadata": {"resourceVersion": version}, "spec": {"hard": patch_hard}},
            namespace,
            dry_run=dry_run,
        )
        return version, written

    async def _write_hard(
        self, namespace: str, quota: QuotaView, hard: ResourceList, what: str
    ) -> bool:
        """spec.hard := `hard`, conditional on the version read, then status.hard at once (quota
        admission reads status.hard; kube-controller-manager copies it only a moment later),
        conditional on spec.hard being still ours (conditional.publish_patch). False, with the
        namespace queued again, if Rancher refused the write of its quota."""
        key = f"quota:{namespace}/{quota.name}"
        try:
            version, written = await self._patch_hard(namespace, quota, hard)
        except errors.ApiError as error:
            if not (quota.rancher_default and errors.denied_by_rancher(error)):
                raise
            self._learn_rancher_refusal(namespace, quota.name, error)
            self.namespaces.enqueue_after(None, namespace, 0.0)
            return False
        self._writes.wrote(key, version, written)
        self.stats.quota_writes += 1
        wanted = hard_json(hard)
        log.info("%s/%s: spec.hard %s to %s", namespace, quota.name, what, wanted)
        try:
            published = await self.management.client.patch(
                RESOURCE_QUOTAS,
                quota.name,
                publish_patch(written),
                namespace,
                subresource="status",
                patch_type="json",
            )
            self._writes.wrote(key, version, published)
        except errors.ApiError as error:
            refused = isinstance(error, errors.Forbidden | errors.BadRequest)
            if not refused and not failed_test(error):
                raise  # rancher-webhook refuses status writes with 400 "status is immutable"
            log.debug(
                "%s/%s: status.hard left to kube-controller-manager: %s",
                namespace,
                quota.name,
                error,
            )
        return True

    # Events and timers ------------------------------------------------------------------------

    def _report(self, vmmrq: Vmmrq, plan: NamespacePlan, lock: Lock | None) -> None:
        """A Warning NotEnoughResourceToRelease on each migration the budget cannot release,
        once per change of its text. Not for a migration the active lock is held for: it fitted
        when the lock was taken, and "short" now means its own target pod already counts in the
        quota's usage while the caches have not shown the pod yet (seen on the local cluster)."""
        for migration in self.migrations.store.by_index("namespace", vmmrq.namespace):
            name = str(metadata(migration).get("name"))
            uid = str(metadata(migration).get("uid"))
            short = plan.refused.get(name)
            if lock is not None and lock.admits_target_of(uid):
                continue
            if short is None:
                self._reported.pop(uid, None)
                continue
            message = not_enough_message(vmmrq.name, vmmrq.namespace, name, short)
            self._warn_once(uid, migration, NOT_ENOUGH_REASON, message)
        self._report_rancher(vmmrq, plan)

    def _report_rancher(self, vmmrq: Vmmrq, plan: NamespacePlan) -> None:
        """One Warning QuotaProtectedByRancher on the VMMRQ once a migration is held by a quota
        only Rancher may raise (per VMMRQ and set of quotas, not per migration)."""
        refusal = self._rancher_protected.get(vmmrq.namespace)
        held = sorted({q for quotas in plan.held.values() for q in quotas})
        obj = self.vmmrqs.store.get(f"{vmmrq.namespace}/{vmmrq.name}")
        if refusal is None or not held or obj is None:
            return
        message = rancher_held_message(vmmrq.name, vmmrq.namespace, held, refusal)
        self._warn_once(
            f"rancher/{vmmrq.namespace}/{vmmrq.name}", obj, RANCHER_PROTECTED_REASON, message
        )

    def _warn_once(self, key: str, obj: Object, reason: str, message: str) -> None:
        if self._reported.get(key) == message:
            return
        self._reported[key] = message
        log.warning("%s", message)
        self.management.recorder.event(obj, WARNING, reason, message)

    def _wake_at_deadline(self, key: str, lock: Lock | None, now: datetime.datetime) -> None:
        if lock is None:
            return
        remaining = (lock.until - now).total_seconds()
        self.namespaces.enqueue_after(None, key, max(0.0, remaining) + 0.05)


def _covers(lock: Lock | None, plan: NamespacePlan, now: datetime.datetime) -> bool:
    """Whether `lock`, as the watch delivered it, is in force for every planned migration."""
    return lock is not None and lock.active(now) and set(plan.uids) <= set(lock.migrations)


def _name(obj: Object) -> str:
    return str(metadata(obj).get("name"))


def register(management: Management, *, lock_seconds: float = LOCK_SECONDS) -> MtqReconciler:
    """The MTQ reconcile on the namespace controller (shared with the room mode's)."""
    reconciler = MtqReconciler(management, lock_seconds=lock_seconds)
    reconciler.register()
    return reconciler
