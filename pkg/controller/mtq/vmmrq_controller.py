"""Managed-Tenant-Quota mode: KubeVirt MTQ's VirtualMachineMigrationResourceQuota flow, made safe.

A namespace with a VMMRQ is handled here (the room mode leaves it alone). One level-triggered
reconcile per namespace, on the namespace controller's queue, computes the plan from the caches
(util/mtq.py) and moves the cluster one step at a time, in an order that a crash
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

The reconcile wires collaborators, one concern each: which migrations are blocked and sized
(blocked.py), windows that ended (windows.py), the lock's writes (lockwrites.py), the writes of
the other steps (writes.py, quota changes through controller/quotawriter.py, the writer the room
mode shares), Rancher's protection
(rancher.py) and the Warnings (reports.py).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from typing import Final

from ...apis.kubevirt import LABEL_MIGRATION_JOB
from ...apis.mtq import VMMRQS, Vmmrq, VmmrqError, decode_vmmrq
from ...config.management import Management
from ...generic import errors
from ...generic.meta import labels, metadata
from ...generic.resource import Object
from ...generic.store import namespace_index
from ...util.annotations import opted_out
from ...util.mtq import (
    Lock,
    MtqPlan,
    parse_lock,
    plan_namespace,
)
from ...util.resourcequota.base import managed_quota
from ...util.resourcequota.raises import raise_records
from ..quotawriter import QuotaWriter
from .blocked import BlockedMigrations
from .lockwrites import LockWrites
from .rancher import RancherGuard
from .reports import MULTIPLE_REASON, MtqWarnings
from .windows import ExpiredWindows
from .writes import MtqWrites

log = logging.getLogger(__name__)

HANDLER: Final = "mtq-reconcile"
LOCK_SECONDS: Final = 30.0
"""Default lock window: the longest a namespace stays locked and its quotas raised."""


def _labels_changed(old: Object, new: Object) -> bool:
    """A target pod matters when it appears or goes (or is relabelled), not on status updates."""
    return labels(old) != labels(new)


def _targets_namespace(obj: Object) -> list[str]:
    return namespace_index(obj) if LABEL_MIGRATION_JOB in labels(obj) else []


class MtqReconciler:
    """Registers the MTQ reconcile on a Management's namespace controller."""

    def __init__(
        self,
        management: Management,
        *,
        lock_seconds: float = LOCK_SECONDS,
        writer: QuotaWriter | None = None,
    ) -> None:
        """`writer`: the room mode's, so that both modes share its permission gates (a
        refusal of status copies, RBAC's or rancher-webhook's, holds for every quota); a new
        one when None."""
        self.management = management
        self.lock_seconds = lock_seconds
        self.vmmrqs = management.informers.informer(VMMRQS, optional=True)
        self.blocked = BlockedMigrations(management)
        """The informers a plan reads, and the blocked migrations in them (blocked.py)."""
        self.quotas = self.blocked.informers.quotas
        self.migrations = self.blocked.informers.migrations
        self.namespaces = management.controllers.namespaces()
        self.windows = ExpiredWindows(
            management.clock,
            self.blocked.has_target,
            lambda namespace, seconds: self.namespaces.enqueue_after(None, namespace, seconds),
        )
        """Migrations waiting after a lock window that ended (windows.py)."""
        self.writes = MtqWrites(
            client=management.client,
            writer=writer or QuotaWriter(management.client, management.clock),
            quotas=self.quotas,
            vmmrqs=self.vmmrqs,
            on_rancher_refusal=self._rancher_refused,
        )
        """The VMMRQ's and the quotas' writes (writes.py; quota changes through the QuotaWriter)."""
        self.stats = self.writes.stats
        self.locks = LockWrites(
            management.client, management.clock, self.namespaces.informer, lock_seconds, self.stats
        )
        """The namespace lock's writes (lockwrites.py)."""
        self.rancher = RancherGuard(self.writes, self.stats)
        """Namespaces whose Rancher quota MTQ mode leaves alone (rancher.py)."""
        self.warnings = MtqWarnings(management.recorder)

    def register(self) -> None:
        controller = self.namespaces
        controller.watch_related(self.vmmrqs, namespace_index, name=f"mtq {self.vmmrqs.name}")
        # Quotas, migrations and target pods matter only where a VMMRQ is: elsewhere their
        # events (virt-controller's status writes, several a second per migration) would queue
        # namespace reconciles that MTQ leaves at once and the room mode does not need; their
        # updates where no VMMRQ is are dropped before the old object is decoded (`updates_in`:
        # the cheap half of `manages`, which the resolver then applies whole).
        for informer in (self.quotas, self.migrations, self.blocked.informers.limit_ranges):
            controller.watch_related(
                informer,
                self._where_managed(namespace_index),
                name=f"mtq {informer.name}",
                updates_in=self.has_budget,
            )
        controller.watch_related(
            self.blocked.informers.pods,
            self._where_managed(_targets_namespace),
            name="mtq target pods",
            relevant=_labels_changed,
            updates_in=self.has_budget,
        )
        controller.on_change(HANDLER, self.reconcile)

    def has_budget(self, namespace: str) -> bool:
        """True if `namespace` has a VMMRQ: it is MTQ mode's once the room mode has given its
        raise back there (raises.py)."""
        return bool(self.vmmrqs.store.index_keys("namespace", namespace))

    def manages(self, namespace: str) -> bool:
        """True if MTQ mode handles `namespace`: it has a VMMRQ and no raise of the room mode
        stands in its managed quota or its namespace (the room mode gives it back first; a
        release through Rancher's annotation leaves our records on the namespace until then)."""
        if not self.has_budget(namespace):
            return False
        quota = managed_quota(self.quotas.store.by_index("namespace", namespace))
        return not raise_records(quota, self.namespaces.cached(None, namespace))

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
            self.rancher.forget(key)
            self.warnings.forget(key)
            return None
        seen = parse_lock(namespace)
        namespace = self.namespaces.informer.pending.newest(namespace)
        vmmrq = self._vmmrq(key)
        if vmmrq is None:
            # Gone, its finalizer removed (a tenant's VMMRQ may be): its status's originals
            # with it. The quotas restore from their own records before the unlock.
            await self.writes.restore_recorded(key)
            self.warnings.forget(key)
            return await self.locks.unlock(namespace)
        now = self.management.clock.now()
        lock = parse_lock(namespace)
        plan = self._plan(vmmrq, key, lock, now)
        if plan.locks and await self.rancher.refuses(key, plan):
            plan = self._plan(vmmrq, key, lock, now)
        self._report(vmmrq, plan, lock if lock is not None and lock.active(now) else None)
        if plan.locks:
            namespace = await self.locks.lock(namespace, vmmrq, plan, lock, now)
            if _covers(seen, plan, now):
                await self.writes.record_and_raise(vmmrq, plan)
        else:
            await self.writes.release(vmmrq, plan)
            namespace = await self.locks.unlock(namespace)
        self._wake_at_deadline(key, parse_lock(namespace), now)
        return namespace

    def _vmmrq(self, namespace: str) -> Vmmrq | None:
        """The namespace's one VMMRQ (with several: the one recording a raise, else the first by
        name, and a Warning on the others); None without a decodable one."""
        objects = sorted(self.vmmrqs.pending.by_index("namespace", namespace), key=_name)
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
            self.warnings.once(
                f"multiple/{other.name}",
                self.vmmrqs.store.get(f"{namespace}/{other.name}") or {},
                MULTIPLE_REASON,
                f"namespace {namespace} has more than one VirtualMachineMigrationResourceQuota; "
                f"only {decoded[0].name} is used",
            )
        return decoded[0]

    def _plan(
        self, vmmrq: Vmmrq, namespace: str, lock: Lock | None, now: datetime.datetime
    ) -> MtqPlan:
        """The plan, after ending a window whose deadline passed (its migrations wait)."""
        migrations = self.migrations.store.by_index("namespace", namespace)
        if lock is not None and not lock.active(now):
            self.windows.expire(lock, migrations)
        blocked = self.blocked.blocked(namespace, migrations)
        excluded = frozenset(self.windows.waiting(migrations)) | self.blocked.held_back(
            namespace, blocked
        )
        if self._paused(namespace):
            # The global switch or the namespace's opt-out: no budget is released (none
            # raised, no lock taken); what is recorded is restored and the lock ends.
            excluded |= {migration.name for migration in blocked}
        quotas = list(self.writes.live_quotas(namespace).values())
        protected = frozenset(
            q.name for q in quotas if q.rancher_default and namespace in self.rancher.protected
        )
        return plan_namespace(vmmrq, blocked, quotas, excluded=excluded, protected=protected)

    def _paused(self, namespace: str) -> bool:
        """Whether raising is paused for `namespace`, as in the room mode (plan.pause_of): the
        controllers' global switch, or the namespace's opt-out label."""
        if self.management.options.paused:
            return True
        return opted_out(self.namespaces.cached(None, namespace))

    def _rancher_refused(self, namespace: str, quota: str, error: errors.ApiError) -> None:
        """Rancher refused a raise of `quota`: learned, and the namespace planned again at once
        without its Rancher quotas."""
        self.rancher.learn(namespace, quota, error)
        self.namespaces.enqueue_after(None, namespace, 0.0)

    # Events and timers ------------------------------------------------------------------------

    def _report(self, vmmrq: Vmmrq, plan: MtqPlan, lock: Lock | None) -> None:
        """The plan's Warnings (reports.py): migrations the budget cannot release, quotas only
        Rancher may raise."""
        migrations = self.migrations.store.by_index("namespace", vmmrq.namespace)
        self.warnings.not_enough(vmmrq, plan, migrations, lock)
        self.warnings.rancher_held(
            vmmrq,
            self.vmmrqs.store.get(f"{vmmrq.namespace}/{vmmrq.name}"),
            plan,
            self.rancher.protected.get(vmmrq.namespace),
        )

    def _wake_at_deadline(self, key: str, lock: Lock | None, now: datetime.datetime) -> None:
        if lock is None:
            return
        remaining = (lock.until - now).total_seconds()
        self.namespaces.enqueue_after(None, key, max(0.0, remaining) + 0.05)


def _covers(lock: Lock | None, plan: MtqPlan, now: datetime.datetime) -> bool:
    """Whether `lock`, as the watch delivered it, is in force for every planned migration."""
    return lock is not None and lock.active(now) and set(plan.uids) <= set(lock.migrations)


def _name(obj: Object) -> str:
    return str(metadata(obj).get("name"))


def register(
    management: Management,
    *,
    lock_seconds: float = LOCK_SECONDS,
    writer: QuotaWriter | None = None,
) -> MtqReconciler:
    """The MTQ reconcile on the namespace controller (shared with the room mode's), writing
    quotas through `writer` (the room mode's) if given."""
    reconciler = MtqReconciler(management, lock_seconds=lock_seconds, writer=writer)
    reconciler.register()
    return reconciler
