"""The room mode's writer of managed ResourceQuotas: one level-triggered reconcile per namespace.

Harvester splits this between a VMIM controller (vmim_controller.go) that edits annotations and a
ResourceQuota controller (resourcequota_controller.go, this file's namesake) that recomputes
spec.hard, coordinated by a resync flag the two toggle. Here one reconcile, keyed by namespace,
reads the whole namespace from the caches (its quota, migrations, VMIs, pods, the overhead ratio
in force), computes the desired quota (plan.py) and writes it once if it differs.
Every change of an input it reads re-queues the namespace (its migrations', VMIs' and pods'
only while it has a managed quota, without which it has no plan, or is MTQ mode's); nothing is
remembered between runs that is not learned again, so a restart, a lost watch or Rancher
resetting spec.hard all converge on the next run.

The reconcile wires collaborators, one concern each: what the plan reads (planner.py), how our
writes are made (writes.py: the quota and status.hard through controller/quotawriter.py, the
writer MTQ mode shares; the room-held label; a release's gathering and confirmation), the
Rancher path (rancher.py, projectdemands.py), metrics, Events and refusal counts, and the writes
of others, told (reports.py), the settled set-aside (util/resourcequota/planviews.py), and the
safety net that plans a stale raise again (staleraise.py).
"""

from __future__ import annotations

import logging
from functools import partial

from ...config.management import Management
from ...config.metrics import QuotaMetrics
from ...generic import errors
from ...generic.controller import Controller, RetryAfter
from ...generic.informer import ResourceEventHandler
from ...generic.meta import metadata
from ...generic.resource import Object
from ...generic.store import namespace_index
from ...util.quantity import Quantity
from ...util.resourcequota.plan import QuotaPlan, patch_for
from ..quotawriter import QuotaWriter
from .planner import NamespacePlanner, PlanInputs
from .planqueue import quota_may_wait, soon_window
from .projectdemands import ProjectDemands, siblings_waiting
from .rancher import (
    PROJECT_INDEX,
    ProjectReader,
    ProjectRoom,
    RancherPath,
    project_index,
)
from .reports import ForeignWriteReports, NamespaceReports
from .staleraise import left_behind, stale_raise_sweep
from .writes import (
    GATHER_RETRY,
    RELEASE_RETRY,
    RELEASE_RETRY_AFTER,
    UNLABEL_RETRY,
    ReleaseCheck,
    ReleaseGathering,
    RoomHeldLabel,
    SpecWrites,
    list_page,
    write_lowers,
)

__all__ = ["QuotaReconciler", "register", "requeue"]

log = logging.getLogger(__name__)

LABEL_RETRY = "the room-held label may be tried again then"
LABELLED_UNDER_A_RAISE = (
    "namespace %s: labelled room-held for good while our raise stands; Rancher's agent may reset "
    "the raise once, and the next plan raises it again"
)

HANDLER = "resourcequota-reconcile"


class QuotaReconciler:
    """Registers the per-namespace reconcile on a Management's factories."""

    def __init__(self, management: Management) -> None:
        self.management = management
        self.namespaces = namespaces = management.controllers.namespaces()
        self.inputs = PlanInputs(management, namespaces.enqueue_key, namespaces.enqueue_soon)
        """The informers and views plans read, the planner's source (planner.py)."""
        self.metrics = QuotaMetrics(management.registry)
        self.writer = QuotaWriter(management.client, management.clock, self.metrics.count_write)
        """Every write of ours and its permission gate (controller/quotawriter.py)."""
        self.metrics.paused.set(1 if management.options.paused else 0)
        self.reports = NamespaceReports(self.metrics, management.recorder, self.inputs.refusals)
        """Metrics and Warning events of each plan (reports.py)."""
        self.spec_writes = SpecWrites(
            self.writer, self.metrics, management.recorder, self.inputs.quotas
        )
        """Plans written into the quota, copies into status.hard (writes.py)."""
        self.writes = self.spec_writes.writes
        """Quota writes per namespace (tests and the scenario report read it)."""
        self.publisher = self.spec_writes.publisher
        management.on_stop(self.publisher.stop)
        options = management.options
        self.room_label = RoomHeldLabel(
            self.writer, management.clock, options.room_held_linger, self.inputs.namespaces
        )
        """The room-held label and its linger (writes.py)."""
        self.release_check = ReleaseCheck(list_page(management.client), management.clock)
        """The namespace's migrations from the API server, read before a release (writes.py)."""
        self.planner = NamespacePlanner(
            self.inputs, fail_closed=management.options.rancher_direct_fail_closed
        )
        """Plans one namespace from the caches and our writes they do not show yet: what the
        reconcile, the stale-raise sweep and a Rancher project's sibling judgment each read.
        Its `defer_to` is MTQ mode's, where that mode runs (app.py): a namespace with a VMMRQ
        is left alone here once any raise of ours there is given back (handover.py)."""
        self.rancher = RancherPath(
            self.writer,
            self.inputs.namespaces,
            metrics=self.metrics,
            recorder=management.recorder,
            project_room=_project_room(management, self.namespaces, self.planner, self.inputs),
            reports=self.reports,
            writes=self.writes,
        )
        """Raises through Rancher's annotation where Rancher protects its quota."""
        self.planner.through = self.rancher.through
        self.stale_raises = stale_raise_sweep(
            management,
            self.inputs.candidates,
            partial(left_behind, self.planner, self.room_label.due),
            self.namespaces.enqueue_key,
            self.metrics,
        )
        """The safety net: a raise standing with no room held is planned again (staleraise.py)."""
        self.foreign_writes = ForeignWriteReports(
            self.metrics,
            management.recorder,
            management.clock,
            namespace_of=self.namespaces.informer.store.get,
        )
        """Writes of a managed quota's spec.hard by anyone else, told (reports.py)."""
        self.gathering = ReleaseGathering(
            management.clock, management.options.release_gather, self.metrics.releases_held.inc
        )
        """Releases held back while other rooms of the namespace stand (writes.py)."""

    def register(self) -> None:
        controller, inputs, informers = self.namespaces, self.inputs, self.inputs.informers
        controller.set_soon_window(soon_window(inputs.namespaces.store))
        quotas, may_wait = informers.quotas, quota_may_wait(inputs.quotas)
        controller.watch_related(quotas, namespace_index, name=quotas.name, may_wait=may_wait)
        limits = informers.limit_ranges
        controller.watch_related(limits, namespace_index, name=limits.name)
        # Migrations, VMIs and pods queue their namespace from their views (planqueue.py): only
        # changes the plan reads, not virt-controller's and virt-handler's status writes.
        for informer in (informers.settings, informers.kubevirts):
            controller.watch_related(informer, inputs.managed_namespaces, name=informer.name)
        controller.on_change(HANDLER, self.reconcile)
        handler = ResourceEventHandler(on_update=self.foreign_writes.on_update)
        informers.quotas.add_event_handler(handler, name="foreign writes")

    async def settled(self, namespace: str, seconds: float) -> bool:
        """Waits until the reconciles of `namespace` queued or running at the call have ended, at
        most `seconds`: for writes that may wait behind a raise (Controller.wait_pending_runs).
        True if they ended."""
        return await self.namespaces.wait_pending_runs(namespace, seconds)

    # The reconcile ------------------------------------------------------------------------------

    async def reconcile(self, key: str, namespace: Object | None) -> Object | None:
        """Brings the namespace's managed quota to its plan (one conditional write at most):
        Harvester's `scaleResourceQuota` and `OnResourceQuotaChanged` in one, keyed by namespace.
        Called by the namespace controller's workers, never twice at once for one namespace."""
        started = self.management.clock.monotonic()
        try:
            return await self._reconcile(key, namespace)
        finally:
            self.metrics.reconcile_seconds.observe(self.management.clock.monotonic() - started)

    async def _reconcile(self, key: str, namespace: Object | None) -> Object | None:
        if namespace is None or metadata(namespace).get("deletionTimestamp"):
            self._forget(key)
            return namespace
        plan = self.planner.plan(namespace)
        if plan is not None and (plan.labels_room or plan.labelled_for_good):
            plan = await self._label_first(key, plan)
            # The namespace as labelled, also when the quota went meanwhile (let go below).
            namespace = (
                plan.snapshot.namespace if plan else self.inputs.namespaces.newest(namespace)
            )
        if plan is None:
            # No longer ours (no managed quota, or handed over): forgotten, its label removed.
            self._forget(key)
            return await self.room_label.remove(namespace)
        snapshot = plan.snapshot
        self.reports.warnings(snapshot.namespace, snapshot.quota, plan)
        self.reports.export(key, snapshot, plan)
        self.inputs.set_aside_settled(key, snapshot, plan)
        # Not on Rancher's annotation path: spec.hard lags it until Rancher's agent copies it.
        gathers = plan.gathers and not self.rancher.through(namespace, plan)
        held = self.gathering.hold(key, gathers)
        recheck = None
        if held is None:
            await self._confirm_release(key, plan)
            recheck = await self._write_plan(plan)
            self.gathering.written(key)
        namespace = snapshot.namespace
        if plan.labelled_for_good:
            relabel = self.room_label.retry_labelling(namespace)
            return requeue(namespace, plan, None, recheck, relabel=relabel, gather=held)
        if plan.label_writes_wait:
            return requeue(namespace, plan, None, recheck, gather=held)
        lingers = unlabel = None
        if not plan.labels_room:
            lingers = self.room_label.lingers(key, namespace, plan.holds_room)
            quota = self.inputs.quotas.newest(snapshot.quota)
            if lingers is None and raise_down(quota, plan):
                namespace = await self.room_label.set(namespace, False)
                unlabel = self.room_label.retry_removal(namespace)
        return requeue(namespace, plan, lingers, recheck, unlabel=unlabel, gather=held)

    async def _confirm_release(self, key: str, plan: QuotaPlan) -> None:
        """Raises RetryAfter, writing nothing, while a plan whose write lowers something (what
        `_write_plan` writes: Rancher's annotation where the plan goes through it, else
        spec.hard) was made without a migration the API server already has (writes.py).
        Not for a plan that gives every room back whatever migrations exist (skipped, paused,
        handed over)."""
        snapshot = plan.snapshot
        through = self.rancher.through(snapshot.namespace, plan)
        rancher = self.rancher.pending.newest(snapshot.namespace) if through else None
        if not write_lowers(snapshot.quota, rancher, plan) or plan.skipped:
            return
        if self.planner.defer_to(key):
            return
        known = [*snapshot.migrations, *snapshot.settled]
        waiting = await self.release_check.waits(key, known)
        if waiting:
            log.info("%s: release held until the cache shows migrations %s", key, waiting)
            raise RetryAfter(RELEASE_RETRY_AFTER, RELEASE_RETRY)

    async def _label_first(self, key: str, plan: QuotaPlan) -> QuotaPlan | None:
        """Sets the label before the plan is written; if that took a write, plans again from
        the labelled namespace: in its round trip a burst's other migrations arrive, and the
        raise then covers them instead of waiting for another run."""
        if plan.labels_room:
            self.room_label.held_now(key)
        labelled = await self.room_label.set(plan.snapshot.namespace, True)
        if labelled is plan.snapshot.namespace:
            return plan
        if plan.label_writes_wait:
            log.info(LABELLED_UNDER_A_RAISE, key)
        return self.planner.plan(labelled)

    async def _write_plan(self, plan: QuotaPlan) -> float | None:
        """At most one write bringing the snapshot's quota (or Rancher's annotation) to the
        plan. Returns the seconds until it must be tried again for its project's room, or None."""
        snapshot = plan.snapshot
        namespace, quota = snapshot.namespace, snapshot.quota
        if self.rancher.through(namespace, plan):
            return await self.rancher.write(namespace, quota, plan, snapshot)
        self.rancher.asks_nothing(str(metadata(namespace).get("name")))
        patch = patch_for(quota, plan)
        if patch is None:
            self.reports.explain_blocked(snapshot, quota, plan)
            return None
        try:
            await self.spec_writes.write(quota, patch, plan)
        except (errors.Forbidden, errors.BadRequest) as error:
            spec = "spec" in patch
            return await self.rancher.take_over(error, namespace, quota, plan, snapshot, spec=spec)
        return None

    def _forget(self, namespace: str) -> None:
        """The namespace is no longer ours (deleted, without a managed quota, handed over)."""
        self.reports.forget(namespace)
        self.inputs.forget(namespace)
        self.room_label.forget(namespace)
        self.rancher.forget(namespace)
        self.gathering.forget(namespace)


def raise_down(quota: Object, plan: QuotaPlan) -> bool:
    """Whether the quota's spec.hard and status.hard (what quota admission checks) stand at or
    below the plan on every key it sets: only then does the room-held label go. A release
    through Rancher's annotation lowers neither until Rancher's agent copies it and
    kube-controller-manager publishes it, and a release written directly lowers status.hard a
    moment after spec.hard; until both are down, a pod the label's rule would refuse could take
    what is still raised. The quota's next events queue the namespace again. A value
    that cannot be read counts as not down (the label stays: the side that fails closed)."""
    spec = (quota.get("spec") or {}).get("hard") or {}
    status = (quota.get("status") or {}).get("hard") or {}
    try:
        for key, text in plan.hard.items():
            wanted = Quantity.parse(text)
            for current in (spec.get(key), status.get(key)):
                if current is not None and Quantity.parse(str(current)) > wanted:
                    return False
    except ValueError:
        return False
    return True


def requeue(
    namespace: Object,
    plan: QuotaPlan,
    label_lingers: float | None,
    project_recheck: float | None = None,
    *,
    unlabel: float | None = None,
    relabel: float | None = None,
    gather: float | None = None,
) -> Object:
    """Returns `namespace`, or raises RetryAfter to run it again when a terminating pod stops
    counting, the room-held label's linger ends, a refused removal of it or a refused label may
    be tried again, a raise held back for its Rancher project's room is checked again, or a
    release held back while other rooms stand is due, whichever comes first."""
    waits = []
    if gather is not None:
        waits.append((gather, GATHER_RETRY))
    if project_recheck is not None:
        waits.append((project_recheck, "the Rancher project's room is checked again then"))
    if plan.requeue_after is not None:
        waits.append((plan.requeue_after + 0.5, "a terminating pod stops counting then"))
    if label_lingers is not None:
        waits.append((label_lingers, "the room-held label's linger ends then"))
    if unlabel is not None:
        waits.append((unlabel, UNLABEL_RETRY))
    if relabel is not None:
        waits.append((relabel, LABEL_RETRY))
    if waits:
        raise RetryAfter(*min(waits))
    return namespace


def _project_room(
    management: Management, namespaces: Controller, planner: NamespacePlanner, inputs: PlanInputs
) -> ProjectRoom:
    """Rancher projects' room (rancher.py), its judge counting the siblings' rooms
    `planner` plans (projectdemands.siblings_waiting) over the namespaces of each project
    (the namespace cache's project index, added here), our writes the cache does not show yet
    applied."""
    cache = inputs.namespaces.store
    if not cache.has_index(PROJECT_INDEX):
        cache.add_indexers({PROJECT_INDEX: project_index})
    members = partial(inputs.namespaces.by_index, PROJECT_INDEX)
    reader = ProjectReader(management.client, management.clock)
    demands = ProjectDemands(namespaces.enqueue_key)
    room = ProjectRoom(reader, management.recorder, members, demands)
    room.siblings_waiting = partial(
        siblings_waiting,
        planner=planner,
        members=members,
        ladders=demands.ladders,
        migrations=inputs.migration_views.namespace,
    )
    return room


def register(management: Management) -> QuotaReconciler:
    """The room mode's reconcile on the namespace controller: Harvester's `Register` of its
    resourcequota controller (register.go), on namespaces instead of quotas."""
    reconciler = QuotaReconciler(management)
    reconciler.register()
    return reconciler
