"""The room mode's writer of managed ResourceQuotas: one level-triggered reconcile per namespace.

Harvester splits this between a VMIM controller (vmim_controller.go) that edits annotations and a
ResourceQuota controller (resourcequota_controller.go, this file's namesake) that recomputes
spec.hard, coordinated by a resync flag the two toggle. Here one reconcile, keyed by namespace,
reads the whole namespace from the caches (its quota, migrations, VMIs, pods, the overhead ratio
in force), computes the desired quota (plan.py) and writes it once if it differs.
Every input's change re-queues the namespace; nothing is remembered between runs that is not
learned again, so a restart, a lost watch or Rancher resetting spec.hard all converge on the next
run.

The reconcile wires collaborators, one concern each: what the plan reads (inputs.py), the
room-held label (roomlabel.py), the writes into the quota and status.hard (specwrites.py, through
controller/quotawriter.py, the writer MTQ mode shares), the Rancher path (rancherwrites.py,
projects.py), metrics and Events (reports.py), refusal counting (refusals.py), the settled
set-aside (util/resourcequota/settled.py) and the writes of others, told (foreignwrites.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from ...config.management import Management
from ...config.metrics import QuotaMetrics
from ...generic import errors
from ...generic.controller import RetryAfter
from ...generic.informer import ResourceEventHandler
from ...generic.meta import metadata
from ...generic.resource import Object
from ...generic.store import namespace_index
from ...util.quantity import Quantity
from ...util.resourcequota.base import RANCHER
from ...util.resourcequota.managed import managed_quota
from ...util.resourcequota.plan import NamespaceSnapshot, QuotaPlan, patch_for, plan_quota
from ...util.resourcequota.projectqueue import Step, WaitingCache
from ...util.resourcequota.standing import raise_records
from ...util.resourcequota.writers import FieldChange
from ..quotawriter import QuotaWriter
from .foreignwrites import ForeignWriteReports, next_step
from .gather import GATHER_RETRY, ReleaseGathering
from .inputs import PlanInputs
from .projectdemands import ProjectDemands
from .rancherprojects import PROJECT_INDEX, ProjectReader, ProjectRoom
from .rancherwrites import RANCHER_DENIAL_REASON, RancherPath
from .refusals import StandingRefusals
from .reports import NamespaceReports
from .roomlabel import RoomHeldLabel, label_policy
from .specwrites import SpecWrites
from .staleraise import StaleRaiseSweep, left_to_give_back

__all__ = ["RANCHER_DENIAL_REASON", "QuotaReconciler", "register", "requeue"]
"""RANCHER_DENIAL_REASON: explain.py reads it from here."""

log = logging.getLogger(__name__)

UNLABEL_RETRY = "the room-held label's removal may be tried again then"
LABEL_RETRY = "the room-held label may be tried again then"
LABELLED_UNDER_A_RAISE = (
    "namespace %s: labelled room-held for good while our raise stands; Rancher's agent may reset "
    "the raise once, and the next plan raises it again"
)

HANDLER = "resourcequota-reconcile"


@dataclass(frozen=True)
class _Planned:
    """One plan of a namespace and what it was made from."""

    namespace: Object
    quota: Object
    snapshot: NamespaceSnapshot
    plan: QuotaPlan
    labels_room: bool
    """The plan holds room and the namespace may carry LABEL_ROOM_HELD (`_may_label`)."""
    labelled_for_good: bool
    """The namespace carries LABEL_ROOM_HELD whether or not room is held (roomlabel.py)."""
    label_writes_wait: bool
    """No label write now: one would have Rancher's agent reset the raise standing here."""


class QuotaReconciler:
    """Registers the per-namespace reconcile on a Management's factories."""

    def __init__(self, management: Management) -> None:
        self.management = management
        self.namespaces = management.controllers.namespaces()
        self.inputs = PlanInputs(management, self.namespaces.enqueue_key)
        """The informers and views plans read (inputs.py)."""
        self.metrics = QuotaMetrics(management.registry)
        management.registry.register(StandingRefusals(self.inputs.refusals))
        self.writer = QuotaWriter(management.client, management.clock, self.metrics.count_write)
        """Every write of ours and its permission gate (controller/quotawriter.py)."""
        self.metrics.paused.set(1 if management.options.paused else 0)
        self.reports = NamespaceReports(self.metrics, management.recorder, self.inputs.refusals)
        """Metrics and Warning events of each plan (reports.py)."""
        self.spec_writes = SpecWrites(
            self.writer, self.metrics, management.recorder, self.inputs.quotas
        )
        """Plans written into the quota, copies into status.hard (specwrites.py)."""
        self.writes = self.spec_writes.writes
        """Quota writes per namespace (tests and the scenario report read it)."""
        self.publisher = self.spec_writes.publisher
        management.on_stop(self.publisher.stop)
        self.room_label = RoomHeldLabel(
            self.writer,
            management.clock,
            management.options.room_held_linger,
            self.inputs.namespaces,
        )
        """The room-held label and its linger (roomlabel.py)."""
        project_room = ProjectRoom(
            ProjectReader(management.client, management.clock),
            management.recorder,
            lambda project: self.inputs.namespaces.by_index(PROJECT_INDEX, project),
            ProjectDemands(self.namespaces.enqueue_key),
            ProjectSiblingsView(self),
        )
        self.rancher = RancherPath(
            self.writer,
            self.inputs.namespaces,
            metrics=self.metrics,
            recorder=management.recorder,
            project_room=project_room,
            reports=self.reports,
            writes=self.writes,
        )
        """Raises through Rancher's annotation where Rancher protects its quota."""
        self.defer_to: Callable[[str], bool] = lambda _namespace: False
        """True for a namespace another mode handles (MTQ mode, where it has a VMMRQ): its
        quota is left alone here once any raise of ours there is given back (handover.py)."""
        self.stale_raises = StaleRaiseSweep(
            StaleRaiseView(self),
            self.namespaces.enqueue_key,
            clock=management.clock,
            metrics=self.metrics,
            recorder=management.recorder,
            interval=management.options.stale_raise_sweep,
            stale_after=management.options.stale_raise_sweep,
            ready=management.informers.synced,
        )
        """The safety net: a raise standing with no room held is planned again (staleraise.py);
        started with the controllers (ControllerApp.start), stopped with them."""
        management.on_stop(self.stale_raises.stop)
        self.foreign_writes = ForeignWriteReports(
            self.metrics,
            management.recorder,
            management.clock,
            judge=ForeignWriteView(self),
            namespace_of=self.namespaces.informer.store.get,
        )
        """Writes of a managed quota by anyone else, told (foreignwrites.py)."""
        self.gathering = ReleaseGathering(
            management.clock, management.options.release_gather, self.metrics.releases_held.inc
        )
        """Releases held back while a target pod is being created (gather.py)."""

    def register(self) -> None:
        controller, inputs, informers = self.namespaces, self.inputs, self.inputs.informers
        controller.watch_related(informers.quotas, namespace_index, name=informers.quotas.name)
        controller.watch_related(
            informers.limit_ranges, namespace_index, name=informers.limit_ranges.name
        )
        # Migrations and VMIs queue their namespace from their views (inputs.py): only changes
        # the plan reads, not virt-controller's and virt-handler's status writes.
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

    def snapshot(self, namespace: Object, quota: Object, quotas: list[Object]) -> NamespaceSnapshot:
        """What a plan of `namespace` reads now (PlanInputs.snapshot)."""
        return self.inputs.snapshot(namespace, quota, quotas)

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
        handing_over = self.defer_to(key)
        if handing_over and not self._raise_left(key, namespace):
            # MTQ mode locks the namespace its own way: no room-held label stays behind.
            return await self._let_go(key, namespace)
        planned = self._plan(key, namespace, release=handing_over)
        if planned is not None and (planned.labels_room or planned.labelled_for_good):
            planned = await self._label_first(key, planned)
            # The namespace as labelled, also when the quota went meanwhile (let go below).
            namespace = planned.namespace if planned else self.inputs.namespaces.newest(namespace)
        if planned is None:
            return await self._let_go(key, namespace)
        self.reports.warnings(planned.namespace, planned.quota, planned.plan)
        self.reports.export(key, planned.snapshot, planned.plan)
        self.inputs.set_aside_settled(key, planned.snapshot, planned.plan)
        # Not through Rancher's annotation: the plan compares with spec.hard, which lags the
        # annotation until Rancher's agent copies it.
        gathers = planned.plan.gathers and not self.rancher.through(namespace, planned.plan)
        held = self.gathering.hold(key, gathers)
        recheck = None
        if held is None:
            recheck = await self._write_plan(
                planned.namespace, planned.quota, planned.plan, planned.snapshot
            )
        namespace = planned.namespace
        if planned.labelled_for_good:
            relabel = self.room_label.retry_labelling(namespace)
            return requeue(namespace, planned.plan, None, recheck, relabel=relabel, gather=held)
        if planned.label_writes_wait:
            return requeue(namespace, planned.plan, None, recheck, gather=held)
        lingers = unlabel = None
        if not planned.labels_room:
            lingers = self.room_label.lingers(key, namespace, planned.plan.holds_room)
            quota = self.inputs.quotas.newest(planned.quota)
            if lingers is None and raise_down(quota, planned.plan):
                namespace = await self.room_label.set(namespace, False)
                unlabel = self.room_label.retry_removal(namespace)
        return requeue(namespace, planned.plan, lingers, recheck, unlabel=unlabel, gather=held)

    async def _label_first(self, key: str, planned: _Planned) -> _Planned | None:
        """Sets the label before the plan is written; if that took a write, plans again from
        the labelled namespace: in its round trip a burst's other migrations arrive, and the
        raise then covers them instead of waiting for another run."""
        if planned.labels_room:
            self.room_label.held_now(key)
        labelled = await self.room_label.set(planned.namespace, True)
        if labelled is planned.namespace:
            return planned
        if planned.label_writes_wait:
            log.info(LABELLED_UNDER_A_RAISE, key)
        return self._plan(key, labelled)

    async def _let_go(self, key: str, namespace: Object) -> Object:
        """The namespace is no longer ours (no managed quota, or handed over): forgets it and
        removes its label, run again while the removal is refused."""
        self._forget(key)
        namespace = await self.room_label.set(namespace, False)
        retry = self.room_label.retry_removal(namespace)
        if retry is not None:
            raise RetryAfter(retry, UNLABEL_RETRY)
        return namespace

    def _raise_left(self, key: str, namespace: Object) -> bool:
        """Whether a raise of ours still stands in the namespace (as we last wrote it)."""
        quota = managed_quota(self.inputs.quotas.by_index("namespace", key))
        return raise_records(quota, self.inputs.namespaces.newest(namespace))

    def _plan(self, key: str, namespace: Object, *, release: bool = False) -> _Planned | None:
        """The namespace's plan from the caches (and our writes they do not show yet); None
        without a managed quota. With `release`, the plan of a namespace with no migration
        (every room given back: a namespace handed over to MTQ mode). Pure but for reading: no
        write, no Event, no metric."""
        quotas = self.inputs.quotas.by_index("namespace", key)
        quota = managed_quota(quotas)
        if quota is None:
            return None
        namespace = self.inputs.namespaces.newest(namespace)
        snapshot = self.inputs.snapshot(namespace, quota, quotas)
        if release:
            snapshot = dataclasses.replace(snapshot, migrations=[])
        plan = plan_quota(snapshot)
        may_label = self._may_label(namespace, plan)
        label = label_policy(
            managed=plan.managed,
            holds_room=plan.holds_room,
            may_label=may_label,
            raise_stands=not may_label and self._raise_left(key, namespace),
            fail_closed=self.management.options.rancher_direct_fail_closed,
        )
        return _Planned(
            namespace, quota, snapshot, plan, label.labels_room, label.for_good, label.waits
        )

    def _may_label(self, namespace: Object, plan: QuotaPlan) -> bool:
        """Whether a namespace write is safe while room is held. Rancher's agent re-derives the
        quota from its annotation on every namespace event: where our raise is written to
        spec.hard directly, a label write would have Rancher reset the raise (measured: a second
        raise and a refusal per migration). Through Rancher's annotation (its protected quota)
        the raise survives any namespace event, and elsewhere nobody resets."""
        if plan.base is None or plan.base.source != RANCHER:
            return True
        return self.rancher.through(namespace, plan)

    async def _write_plan(
        self, namespace: Object, quota: Object, plan: QuotaPlan, snapshot: NamespaceSnapshot
    ) -> float | None:
        """At most one write bringing the quota (or Rancher's annotation) to the plan. Returns
        the seconds until the plan must be tried again for its Rancher project's room, or None."""
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
            if not self.rancher.refused(error, plan):
                raise
            if "spec" in patch:
                self.rancher.report_denial(namespace, quota, plan, snapshot, error)
            else:
                self.rancher.note_protected(namespace, error)
            return await self.rancher.write(namespace, quota, plan, snapshot)
        return None

    def _forget(self, namespace: str) -> None:
        """The namespace is no longer ours (deleted, without a managed quota, handed over)."""
        self.reports.forget(namespace)
        self.inputs.forget(namespace)
        self.room_label.forget(namespace)
        self.rancher.forget(namespace)
        self.gathering.forget(namespace)


SIBLINGS_SLICE: Final = 0.005
"""Seconds ProjectSiblingsView plans siblings before it lets the event loop run others."""


class ProjectSiblingsView:
    """The reconcile as a Rancher project's judge sees it (rancherprojects.ProjectRoom): the
    rooms the project's other namespaces have not been given yet."""

    def __init__(
        self, reconciler: QuotaReconciler, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.reconciler = reconciler
        self.clock = clock
        """Seconds, monotonic: when planning has held the event loop for SIBLINGS_SLICE."""

    @property
    def ladders(self) -> WaitingCache:
        """Each sibling's steps, laddered again only when its inputs change (the registry's:
        a namespace no longer ours drops its entry with the rest of what it waited for)."""
        return self.reconciler.rancher.project_room.demands.ladders

    async def __call__(self, project: str, besides: str) -> list[Step]:
        """The steps of the namespaces of Rancher project `project` but `besides`, each marked
        whether the project gave its room (projectqueue.project_steps: those not given wait;
        the given ones say when each was given), planned from the caches now, our writes the
        caches do not show yet applied: the judge of a raise on Rancher's protected path counts
        those earlier in KubeVirt's order as taken. Planned: a namespace with migrations cached,
        not Terminating (its rooms will never be given), whose base is Rancher's annotation,
        whether or not Rancher refused a quota write there in this process yet
        (RancherPath.through): a judge runs only where Rancher refused one, and Rancher's
        protection is its webhook's, for every namespace's default quota alike, so each such
        sibling's raise goes through the project too; waiting for its refusal would let the
        namespace reconciled first after a restart take the room ahead of a sibling's earlier
        migration. A sibling whose plan fails is logged and
        skipped (it claims nothing; its own reconcile reports it), never a failed judgment.
        Pure but for reading; called once per write (rancherprojects.Judgment); yields to the
        event loop between siblings once it has held it SIBLINGS_SLICE seconds (/healthz and
        the Lease renewal run on it), so each sibling is read as the caches stand then."""
        steps: list[Step] = []
        since = self.clock()
        members = self.reconciler.inputs.namespaces.by_index(PROJECT_INDEX, project)
        self.ladders.keep(project, {str(metadata(m).get("name", "")) for m in members})
        for cached in members:
            if self.clock() - since > SIBLINGS_SLICE:
                await asyncio.sleep(0)
                since = self.clock()
            name = str(metadata(cached).get("name", ""))
            if name == besides or metadata(cached).get("deletionTimestamp"):
                continue
            try:
                steps += self._waiting(project, name, cached)
            except Exception:  # contained per sibling, logged
                log.exception("project %s: %s's waiting rooms not planned", project, name)
        return steps

    def _waiting(self, project: str, name: str, cached: Object) -> list[Step]:
        """The sibling's rooms not given, [] where it asks nothing of the project."""
        reconciler = self.reconciler
        if reconciler.defer_to(name) or not reconciler.inputs.migration_views.namespace(name):
            return []
        planned = reconciler._plan(name, cached)
        if planned is None or planned.plan.base is None or planned.plan.base.source != RANCHER:
            return []
        return self.ladders.steps(planned.namespace, planned.plan, project)


class StaleRaiseView:
    """The reconcile as the stale-raise sweep sees it (staleraise.Planner): the namespaces with
    a managed quota, and what a plan of each, made now, would still give back."""

    def __init__(self, reconciler: QuotaReconciler) -> None:
        self.reconciler = reconciler

    def candidates(self) -> Iterator[tuple[str, Object, Object]]:
        """The namespaces cached when the call began, each with its managed quota as cached
        when it is reached, and our writes the caches do not show yet."""
        reconciler = self.reconciler
        quotas = reconciler.inputs.informers.quotas.store
        for namespace in reconciler.namespaces.informer.store.iter():
            meta = metadata(namespace)
            key = str(meta.get("name", ""))
            if meta.get("deletionTimestamp"):
                continue
            quota = managed_quota(quotas.by_index("namespace", key))
            if quota is not None:
                yield (
                    key,
                    reconciler.inputs.namespaces.newest(namespace),
                    reconciler.inputs.quotas.newest(quota),
                )

    def left_behind(self, key: str, namespace: Object, quota: Object) -> str | None:
        reconciler = self.reconciler
        handing_over = reconciler.defer_to(key)
        if handing_over and not reconciler._raise_left(key, namespace):
            return None  # MTQ mode's: its budget is its own raise
        planned = reconciler._plan(key, namespace, release=handing_over)
        if planned is None:
            return None
        keeps_label = planned.labelled_for_good or planned.label_writes_wait
        due = reconciler.room_label.due(key, planned.namespace, planned.plan.holds_room)
        return left_to_give_back(
            planned.quota,
            planned.namespace,
            planned.plan,
            through_rancher=reconciler.rancher.through(planned.namespace, planned.plan),
            label_due=due and not keeps_label,
        )


class ForeignWriteView:
    """The reconcile as a foreign write's report sees it (foreignwrites.Judge): what a plan of
    the namespace, made now, does about the changes."""

    def __init__(self, reconciler: QuotaReconciler) -> None:
        self.reconciler = reconciler

    def __call__(self, key: str, changes: Sequence[FieldChange]) -> str:
        reconciler = self.reconciler
        namespace = reconciler.namespaces.informer.store.get(key)
        if namespace is None:
            return "the controller leaves the quota as it is: its namespace is not cached"
        handing_over = reconciler.defer_to(key)
        if handing_over and not reconciler._raise_left(key, namespace):
            return (
                "the controller leaves the quota to MTQ mode (the namespace has a "
                "VirtualMachineMigrationResourceQuota)"
            )
        planned = reconciler._plan(key, namespace, release=handing_over)
        if planned is None:
            return "the controller leaves the quota as it is: it is no longer managed"
        through = reconciler.rancher.through(planned.namespace, planned.plan)
        return next_step(planned.plan, planned.quota, changes, through_rancher=through)


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
    release held back for the namespace's target pods is due, whichever comes first."""
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


def register(management: Management) -> QuotaReconciler:
    """The room mode's reconcile on the namespace controller: Harvester's `Register` of its
    resourcequota controller (register.go), on namespaces instead of quotas."""
    reconciler = QuotaReconciler(management)
    reconciler.register()
    return reconciler
