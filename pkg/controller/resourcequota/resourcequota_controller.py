"""The single writer of managed ResourceQuotas: one level-triggered reconcile per namespace.

Harvester splits this between a VMIM controller that edits annotations and a ResourceQuota controller
that recomputes spec.hard, coordinated by a resync flag the two toggle. Here one reconcile, keyed
by namespace, reads the whole namespace from the caches (its quota, migrations, VMIs, pods, the
overhead ratio in force), computes the desired quota (plan.py) and writes it once if it differs.
Every input's change re-queues the namespace; nothing is remembered between runs, so a restart,
a lost watch or Rancher resetting spec.hard all converge on the next run.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...apis.harvester import RATIO_SETTING, SETTINGS
from ...apis.kubevirt import (
    KUBEVIRTS,
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
    VIRTUAL_MACHINE_INSTANCES,
)
from ...config.kubevirt import settings_from
from ...config.management import Management
from ...config.metrics import QuotaMetrics
from ...generic import errors
from ...generic.controller import RetryAfter
from ...generic.events import NORMAL, WARNING
from ...generic.informer import SharedInformer, SharedInformerFactory
from ...generic.meta import annotations_of, labels, metadata
from ...generic.newest import NewestPerKey
from ...generic.ownwrites import OwnWrites
from ...generic.permission import Permission
from ...generic.resource import LIMIT_RANGES, NAMESPACES, PODS, RESOURCE_QUOTAS, Object
from ...generic.views import NamespaceViews
from ...util.annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA, LABEL_ROOM_HELD
from ...util.launcher import LauncherSettings
from ...util.podusage import strip_pod_to_quota_fields
from ...util.quantity import Quantity
from ...util.resourcequota.base import ANNOTATION_RANCHER_BASE, RANCHER
from ...util.resourcequota.conditional import (
    conditional_patch,
    copy_hard_to_status,
    failed_test,
)
from ...util.resourcequota.handover import room_raise_left
from ...util.resourcequota.managed import is_managed_quota, managed_quota
from ...util.resourcequota.plan import NamespaceSnapshot, QuotaPlan, patch_for, plan_quota
from ...util.resourcequota.planviews import (
    NamespaceVmis,
    RenderedUsages,
    VmiFacts,
    migration_plan_view,
    vmi_facts,
)
from ...util.resourcequota.podindex import PodIndex, PodView, pod_view
from ...util.resourcequota.projectroom import NoRoom, raise_verdict, refusal_verdict
from ...util.resourcequota.rancherpath import annotation_patch
from ...util.resourcequota.settled import SettledMigrations
from ...util.resources import parse_resource_list_leniently
from .projects import ProjectReader
from .refusals import RefusalTracker, refused_by_quota

log = logging.getLogger(__name__)

UNLABEL_RETRY = "the room-held label's removal may be tried again then"

HANDLER = "resourcequota-reconcile"
RANCHER_DENIAL_REASON = "QuotaWriteDeniedByRancher"
"""Warning event reason when Rancher's webhook refuses a write of its default quota."""
PROJECT_NO_ROOM_REASON = "ProjectHasNoRoom"
"""Warning event reason when a raise through Rancher's annotation does not fit its project."""
PROJECT_RECHECK = 30.0
"""Seconds until a raise held back for its project's room is checked again (the project's limit
may be raised meanwhile; nothing else queues the namespace then)."""
USAGE_ABOVE_BASE_REASON = "UsageAboveBase"
"""Warning event reason when a namespace's pods use more than its base (targets excluded)."""
PLAN_VIEW = "quota-plan"
"""The migration and VMI store views this reconciler keeps (planviews.py)."""


def _namespace_of(obj: Object) -> list[str]:
    namespace = metadata(obj).get("namespace")
    return [str(namespace)] if namespace else []


@dataclass(frozen=True)
class _Planned:
    """One plan of a namespace and what it was made from."""

    namespace: Object
    quota: Object
    snapshot: NamespaceSnapshot
    plan: QuotaPlan
    labels_room: bool
    """The plan holds room and the namespace may carry LABEL_ROOM_HELD (`_may_label`)."""


def _launcher_informers(
    factory: SharedInformerFactory,
) -> tuple[SharedInformer, SharedInformer, SharedInformer]:
    """What sizes a room besides the VMI: Harvester's overhead-ratio setting and the KubeVirt CR
    (both optional kinds), and the LimitRanges, whose defaults fill what a launcher container
    leaves unset, as admission does (util/launcher/limitrange.py)."""
    return (
        factory.informer(SETTINGS, field_selector=f"metadata.name={RATIO_SETTING}", optional=True),
        factory.informer(KUBEVIRTS, optional=True),
        factory.informer(LIMIT_RANGES),
    )


class QuotaReconciler:
    """Registers the per-namespace reconcile on a Management's factories."""

    def __init__(self, management: Management) -> None:
        self.management = management
        factory = management.informers
        self.quotas = factory.informer(RESOURCE_QUOTAS)
        self.migrations = factory.informer(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS)
        self.vmis = factory.informer(VIRTUAL_MACHINE_INSTANCES)
        self.pods = factory.informer(PODS, transform=strip_pod_to_quota_fields)
        self.pod_index = PodIndex()
        """Every namespace's pods as the plan reads them, kept as pods change (podindex.py)."""
        self.pods.store.add_view(PodIndex.VIEW, pod_view, self._pod_changed)
        self.migration_views: NamespaceViews[Object] = NamespaceViews(self._views_changed)
        """Every namespace's migrations as the plan reads them (planviews.migration_plan_view)."""
        self.refusals = RefusalTracker(management.clock)
        """Quota refusals as the migrations' changes showed them (refusals.py)."""
        self.migrations.store.add_view(PLAN_VIEW, migration_plan_view, self._migration_changed)
        self.vmi_facts: NamespaceViews[VmiFacts] = NamespaceViews(self._views_changed)
        """Every namespace's VMIs as the plan reads them (planviews.VmiFacts)."""
        self.vmis.store.add_view(PLAN_VIEW, vmi_facts, self.vmi_facts.changed)
        self.usages = RenderedUsages(self.vmi_facts, self.vmis.store.get)
        """Room estimates, rendered once per VM shape and settings."""
        self.settings, self.kubevirts, self.limit_ranges = _launcher_informers(factory)
        self.namespaces = management.controllers.namespaces()
        self._quota_writes = OwnWrites()
        """Our quota writes by namespace, until the cache has them (one write per change)."""
        self._namespace_writes = OwnWrites()
        """Our room-held label writes by namespace, likewise."""
        self._label_permission = Permission(
            "label namespaces",
            "with the webhook down, pods are not refused while room is held; grant patch on "
            "namespaces",
            management.clock,
        )
        """Whether room-held label writes are tried (permission.py: closed for a backoff after
        a refusal, as right after an API server restart or without RBAC for it)."""
        self.settled_migrations = SettledMigrations()
        """Finished migrations planned without room, set aside from plans after a grace
        (settled.py): a namespace keeps thousands of them."""
        self._room_last_held: dict[str, float] = {}
        """Namespace -> the monotonic moment a plan of it last held room, while its room-held
        label lingers (`_label_lingers`)."""
        self.metrics = QuotaMetrics(management.registry)
        self._above_base: dict[str, str] = {}
        """Namespace -> the excess last reported (a Warning event once per change)."""
        self.projects = ProjectReader(management.client, management.clock)
        """Rancher projects, read before a raise through Rancher's annotation (projects.py)."""
        self._no_room: dict[str, str] = {}
        """Namespace -> the project's lack of room last reported (a Warning once per change)."""
        self._rancher_protected: set[str] = set()
        """Namespaces where Rancher refused a write of its default quota: raises there go
        through its annotation from then on (rancherpath.py). Per namespace, and only on
        Rancher's own refusal (errors.denied_by_rancher): another policy's denial in one
        namespace changes nothing elsewhere."""
        self._status_permission = Permission(
            "write resourcequotas/status",
            "quota admission sees a raise only once kube-controller-manager copies it; grant "
            "patch on resourcequotas/status",
            management.clock,
        )
        """Whether copies into status.hard are tried (permission.py)."""
        self.publisher: NewestPerKey[Object] = NewestPerKey(
            "copying spec.hard into status.hard", self._publish_hard
        )
        """Copies each spec.hard we write into status.hard beside the namespace's reconciles
        (`_publish_hard`), so the next raise of a burst does not wait for it."""
        management.on_stop(self.publisher.stop)
        self.writes: Counter[str] = Counter()
        """Quota writes per namespace (tests and the scenario report read it)."""
        self.defer_to: Callable[[str], bool] = lambda _namespace: False
        """True for a namespace another mode handles (MTQ mode, where it has a VMMRQ): its
        quota is left alone here once any raise of ours there is given back (handover.py)."""

    def register(self) -> None:
        controller = self.namespaces
        controller.watch_related(self.quotas, _namespace_of, name=self.quotas.name)
        controller.watch_related(self.limit_ranges, _namespace_of, name=self.limit_ranges.name)
        # Migrations and VMIs queue their namespace from their views (_views_changed): only
        # changes the plan reads, not virt-controller's and virt-handler's status writes.
        for informer in (self.settings, self.kubevirts):
            controller.watch_related(informer, self._managed_namespaces, name=informer.name)
        controller.on_change(HANDLER, self.reconcile)

    async def settled(self, namespace: str, seconds: float) -> bool:
        """Waits until the reconciles of `namespace` queued or running at the call have ended, at
        most `seconds`: for writes that may wait behind a raise (Controller.wait_pending_runs).
        True if they ended."""
        return await self.namespaces.wait_pending_runs(namespace, seconds)

    def _pod_changed(self, key: str, view: PodView | None) -> None:
        """The pod store's view listener: the namespace is reconciled when its pods changed as
        the plan sees them, not on every pod update (kwok's and the kubelet's status writes
        leave most views equal). Runs inside the store's write, so the reconcile it queues
        reads the index with this pod in it."""
        if self.pod_index.changed(key, view):
            self.namespaces.enqueue_key(key.split("/", 1)[0])

    def _migration_changed(self, key: str, view: Object | None) -> None:
        """The migration store's view listener: notes a quota refusal's start or end as it
        happens (a reconcile may come only after both), then lists the view for the plan."""
        self.refusals.seen(key, view)
        self.migration_views.changed(key, view)

    def _views_changed(self, namespace: str) -> None:
        """A migration or VMI changed as the plan sees it (a view listener: runs inside the
        store's write, so the reconcile it queues reads the views with the change in them)."""
        self.namespaces.enqueue_key(namespace)

    def _managed_namespaces(self, _changed: Object) -> list[str]:
        """A cluster-wide setting changed: every namespace with a managed quota is affected."""
        return sorted(
            {
                ns
                for q in self.quotas.store.objects()
                if is_managed_quota(q)
                for ns in _namespace_of(q)
            }
        )

    # The reconcile ------------------------------------------------------------------------------

    def kubevirt_settings(self) -> LauncherSettings:
        """The cluster-wide launcher settings in force now, from the caches."""
        kubevirts = self.kubevirts.store.objects()
        settings = self.settings.store.objects()
        return settings_from(
            kubevirts[0] if kubevirts else None,
            settings[0] if settings else None,
            configured_version=self.management.options.kubevirt_version,
        )

    def snapshot(self, namespace: Object, quota: Object, quotas: list[Object]) -> NamespaceSnapshot:
        name = str(metadata(namespace).get("name"))

        return NamespaceSnapshot(
            namespace=namespace,
            quota=quota,
            migrations=self.migration_views.namespace(name),
            vmis=NamespaceVmis(self.vmi_facts, name),
            pods=self.pod_index.namespace(name),
            now=self.management.clock.now(),
            launcher=self.kubevirt_settings().for_namespace(
                quotas, namespace, self.limit_ranges.store.by_index("namespace", name)
            ),
            mode=self.management.options.mode,
            usage=self.usages.usage,
        )

    async def reconcile(self, key: str, namespace: Object | None) -> Object | None:
        """Brings the namespace's managed quota to its plan (one conditional write at most).

        Called by the namespace controller's workers, never twice at once for one namespace.
        """
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
            self._forget(key)
            return namespace
        planned = self._plan(key, namespace, release=handing_over)
        if planned is not None and planned.labels_room:
            self._room_last_held[key] = self.management.clock.monotonic()
            labelled = await self._label_room_held(planned.namespace, True)
            if labelled is not planned.namespace:
                # The label took a round trip, in which a burst's other migrations arrive: plan
                # again, so that the raise covers them too instead of waiting for another run.
                planned = self._plan(key, labelled)
                namespace = labelled
        if planned is None:
            self._forget(key)
            namespace = await self._label_room_held(namespace, False)
            retry = self._unlabel_retry(namespace)
            if retry is not None:
                raise RetryAfter(retry, UNLABEL_RETRY)
            return namespace
        self._report_warnings(planned.namespace, planned.quota, planned.plan)
        self._export(key, planned.snapshot, planned.plan)
        self._set_aside_settled(key, planned)
        recheck = await self._write_plan(
            planned.namespace, planned.quota, planned.plan, planned.snapshot
        )
        namespace = planned.namespace
        lingers = unlabel = None
        if not planned.labels_room:
            lingers = self._label_lingers(key, namespace, planned.plan)
            if lingers is None:
                namespace = await self._label_room_held(namespace, False)
                unlabel = self._unlabel_retry(namespace)
        return self._requeue(namespace, planned.plan, lingers, unlabel, recheck)

    def _raise_left(self, key: str, namespace: Object) -> bool:
        """Whether a raise of ours still stands in the namespace (as we last wrote it)."""
        quota = managed_quota(self.quotas.store.by_index("namespace", key))
        if quota is not None:
            quota = self._quota_writes.newest(key, quota)
        return room_raise_left(quota, self._namespace_writes.newest(key, namespace))

    def _plan(self, key: str, namespace: Object, *, release: bool = False) -> _Planned | None:
        """The namespace's plan from the caches (and our writes they do not show yet); None
        without a managed quota. With `release`, the plan of a namespace with no migration
        (every room given back: a namespace handed over to MTQ mode). Pure but for reading: no
        write, no Event, no metric."""
        quotas = self.quotas.store.by_index("namespace", key)
        quota = managed_quota(quotas)
        if quota is None:
            return None
        quota = self._quota_writes.newest(key, quota)
        namespace = self._namespace_writes.newest(key, namespace)
        snapshot = self.snapshot(namespace, quota, quotas)
        if release:
            snapshot = dataclasses.replace(snapshot, migrations=[])
        plan = plan_quota(snapshot)
        labels_room = plan.managed and plan.holds_room and self._may_label(namespace, plan)
        return _Planned(namespace, quota, snapshot, plan, labels_room)

    def _set_aside_settled(self, key: str, planned: _Planned) -> None:
        """Takes the namespace's settled finished migrations out of what its plans read, once
        the caches a room depends on have synced: a plan made before that (the process goes
        on after CACHE_SYNC_TIMEOUT) may miss the pod a finished migration still waits for,
        and a migration set aside is not judged again until it changes."""
        if not all(i.has_synced() for i in (self.migrations, self.vmis, self.pods)):
            return
        settled = self.settled_migrations.settled(
            key,
            planned.snapshot.migrations,
            planned.plan.rooms,
            self.management.clock.monotonic(),
            planned.snapshot.now,
        )
        for name in settled:
            self.migration_views.set_aside(key, name)
        if settled:
            log.debug("%s: %d finished migrations settled", key, len(settled))

    def _may_label(self, namespace: Object, plan: QuotaPlan) -> bool:
        """Whether a namespace write is safe while room is held. Rancher's agent re-derives the
        quota from its annotation on every namespace event: where our raise is written to
        spec.hard directly, a label write would have Rancher reset the raise (measured: a second
        raise and a refusal per migration). Through Rancher's annotation (its protected quota)
        the raise survives any namespace event, and elsewhere nobody resets."""
        if plan.base is None or plan.base.source != RANCHER:
            return True
        return self._through_rancher(namespace, plan)

    def _label_lingers(self, key: str, namespace: Object, plan: QuotaPlan) -> float | None:
        """Seconds the room-held label stays on a namespace whose room was given back, or None
        when it goes now. It stays `room_held_linger` seconds after a plan last held room
        (counted from now for a label this process did not set), so that a drain's next wave
        is raised without the label's round trip on its path; a plan that holds room where the
        label may not be (`_may_label`) removes it at once. The moment is forgotten only once the
        label is seen gone, so a removal that failed is tried again at once, not after another
        linger."""
        if plan.holds_room or labels(namespace).get(LABEL_ROOM_HELD) != "true":
            self._room_last_held.pop(key, None)
            return None
        now = self.management.clock.monotonic()
        held_at = self._room_last_held.setdefault(key, now)
        left = held_at + self.management.options.room_held_linger - now
        return left if left > 0 else None

    def _unlabel_retry(self, namespace: Object) -> float | None:
        """After a removal of the room-held label: None if it is gone; else the seconds until
        label writes may be tried again (at least 1 s), since a label left on would keep the
        fail-closed pods rule on the namespace and nothing else runs it again."""
        if labels(namespace).get(LABEL_ROOM_HELD) != "true":
            return None
        return max(self._label_permission.retry_in(), 1.0)

    async def _label_room_held(self, namespace: Object, held: bool) -> Object:
        """Sets or removes LABEL_ROOM_HELD on the namespace, if it differs: set before a raise is
        written, removed after the room is given back and the linger is over, so the
        fail-closed pods rule covers the whole time a raised quota could admit a pod."""
        if (labels(namespace).get(LABEL_ROOM_HELD) == "true") == held:
            return namespace
        if not self._label_permission.allowed():
            return namespace
        meta = metadata(namespace)
        patch = {"metadata": {"labels": {LABEL_ROOM_HELD: "true" if held else None}}}
        try:
            written = await self.management.client.patch(NAMESPACES, str(meta["name"]), patch)
        except errors.Forbidden as error:
            # The label guards the room; it must never stand between a migration and its raise.
            self._label_permission.refused(error)
            return namespace
        self._label_permission.granted()
        self._namespace_writes.wrote(
            str(meta["name"]), str(meta.get("resourceVersion", "")), written
        )
        return written

    async def _write_plan(
        self, namespace: Object, quota: Object, plan: QuotaPlan, snapshot: NamespaceSnapshot
    ) -> float | None:
        """At most one write bringing the quota (or Rancher's annotation) to the plan. Returns
        the seconds until the plan must be tried again for its Rancher project's room, or None."""
        if self._through_rancher(namespace, plan):
            return await self._write_rancher_annotation(namespace, quota, plan, snapshot)
        patch = patch_for(quota, plan)
        if patch is not None:
            try:
                await self._write(quota, patch, plan)
            except (errors.Forbidden, errors.BadRequest) as error:
                if not self._rancher_refused(error, plan):
                    raise
                self._report_rancher_denial(namespace, quota, plan, snapshot, error)
                return await self._write_rancher_annotation(namespace, quota, plan, snapshot)
        else:
            self._explain_blocked(snapshot, quota, plan)
        return None

    def _requeue(
        self,
        namespace: Object,
        plan: QuotaPlan,
        label_lingers: float | None,
        unlabel: float | None = None,
        project_recheck: float | None = None,
    ) -> Object:
        """Runs the namespace again when a terminating pod stops counting, the room-held
        label's linger ends, a refused removal of it may be tried again, or a raise held back
        for its Rancher project's room is checked again, whichever comes first."""
        waits = []
        if project_recheck is not None:
            waits.append((project_recheck, "the Rancher project's room is checked again then"))
        if plan.requeue_after is not None:
            waits.append((plan.requeue_after + 0.5, "a terminating pod stops counting then"))
        if label_lingers is not None:
            waits.append((label_lingers, "the room-held label's linger ends then"))
        if unlabel is not None:
            waits.append((unlabel, UNLABEL_RETRY))
        if waits:
            raise RetryAfter(*min(waits))
        return namespace

    # Rancher's protected quota --------------------------------------------------------------------

    def _through_rancher(self, namespace: Object, plan: QuotaPlan) -> bool:
        """Whether this namespace's plan goes through Rancher's annotation: the base is Rancher's
        and Rancher refused a quota write in this process, or a raise through it is under way
        (recorded on the namespace, so a restarted controller finishes it)."""
        if plan.base is None or plan.base.source != RANCHER:
            return False
        return metadata(namespace).get(
            "name"
        ) in self._rancher_protected or ANNOTATION_RANCHER_BASE in annotations_of(namespace)

    def _rancher_refused(self, error: errors.ApiError, plan: QuotaPlan) -> bool:
        if not errors.denied_by_rancher(error) or plan.base is None:
            return False
        return plan.base.source == RANCHER

    def _report_rancher_denial(
        self,
        namespace: Object,
        quota: Object,
        plan: QuotaPlan,
        snapshot: NamespaceSnapshot,
        error: errors.ApiError,
    ) -> None:
        """Says where someone will look (the quota, the namespace and every migration holding
        room) that Rancher refused the write, and what happens instead."""
        name = str(metadata(namespace).get("name"))
        self._rancher_protected.add(name)
        self.metrics.rancher_denials.labels(name).inc()
        message = (
            f"Rancher refused the quota write ({error.message}); raising through the namespace's "
            "field.cattle.io/resourceQuota instead, which Rancher copies to the quota within the "
            "project's limits"
        )
        log.warning("%s: %s", name, message)
        holders = {r.migration for r in plan.rooms.rooms}
        targets = [
            quota,
            namespace,
            *(m for m in snapshot.migrations if metadata(m).get("name") in holders),
        ]
        for target in targets:
            self.management.recorder.event(target, WARNING, RANCHER_DENIAL_REASON, message)

    async def _write_rancher_annotation(
        self, namespace: Object, quota: Object, plan: QuotaPlan, snapshot: NamespaceSnapshot
    ) -> float | None:
        """Writes the plan into Rancher's annotation (conditional on the namespace's version),
        unless it is a raise the Rancher project has no room for. Returns the seconds until the
        project's room is checked again while it has none, else None."""
        changes = annotation_patch(namespace, plan)
        no_room = await self._project_room(namespace, plan, changes)
        self._report_no_room(namespace, quota, plan, snapshot, no_room)
        if no_room is not None:  # the raise is held back (or stands, refused by Rancher)
            self._explain_blocked(snapshot, quota, plan, cause=no_room.message)
            return PROJECT_RECHECK
        if changes is None:
            self._explain_blocked(snapshot, quota, plan)
            return None
        await self._patch_rancher_annotation(namespace, quota, plan, changes)
        return None

    async def _project_room(
        self, namespace: Object, plan: QuotaPlan, changes: Mapping[str, Any] | None
    ) -> NoRoom | None:
        """Whether the Rancher project lacks room for the raise: before writing one (when the
        project can be read), or, with our raise standing, as Rancher's condition says."""
        if not plan.holds_room:
            return None
        members = self.namespaces.informer.store.objects()
        raised = (changes or {}).get(CATTLE_ANNOTATION_RESOURCE_QUOTA)
        if raised is not None:
            project = await self.projects.project_of(namespace)
            return raise_verdict(namespace, raised, project, members)
        if changes is not None or ANNOTATION_RANCHER_BASE not in annotations_of(namespace):
            return None  # no raise of ours standing (or records to drop first)
        verdict = refusal_verdict(namespace, None, members)
        if verdict is None:
            return None  # Rancher has not marked it: nothing to read the project for
        project = await self.projects.project_of(namespace)
        return refusal_verdict(namespace, project, members) if project else verdict

    def _report_no_room(
        self,
        namespace: Object,
        quota: Object,
        plan: QuotaPlan,
        snapshot: NamespaceSnapshot,
        no_room: NoRoom | None,
    ) -> None:
        """A Warning on the quota, the namespace and every migration holding room, once per
        change, while the Rancher project lacks room for the raise."""
        name = str(metadata(namespace).get("name"))
        if no_room is None:
            self._no_room.pop(name, None)
            return
        if self._no_room.get(name) == no_room.message:
            return
        self._no_room[name] = no_room.message
        log.warning("%s: %s", name, no_room.message)
        holders = {r.migration for r in plan.rooms.rooms}
        targets = [
            quota,
            namespace,
            *(m for m in snapshot.migrations if metadata(m).get("name") in holders),
        ]
        for target in targets:
            self.management.recorder.event(target, WARNING, PROJECT_NO_ROOM_REASON, no_room.message)

    async def _patch_rancher_annotation(
        self, namespace: Object, quota: Object, plan: QuotaPlan, changes: Mapping[str, Any]
    ) -> None:
        """The annotation write itself, conditional on the namespace's resourceVersion."""
        name = str(metadata(namespace).get("name"))
        try:
            await self.management.client.patch(
                NAMESPACES,
                name,
                {
                    "metadata": {
                        "resourceVersion": metadata(namespace).get("resourceVersion"),
                        "annotations": changes,
                    }
                },
            )
        except errors.Conflict:
            self.metrics.quota_writes.labels("conflict").inc()
            raise
        except errors.ApiError:
            self.metrics.quota_writes.labels("error").inc()
            raise
        self.metrics.quota_writes.labels("written").inc()
        self.writes[name] += 1
        raised = changes.get(CATTLE_ANNOTATION_RESOURCE_QUOTA)
        log.info("%s: %s set to %s through Rancher", name, CATTLE_ANNOTATION_RESOURCE_QUOTA, raised)
        reason = "MigrationRoomReserved" if plan.holds_room else "MigrationRoomReleased"
        self.management.recorder.event(
            quota,
            NORMAL,
            reason,
            f"{CATTLE_ANNOTATION_RESOURCE_QUOTA} set to {raised} (Rancher copies it)",
        )

    async def _write(self, quota: Object, patch: dict[str, Any], plan: QuotaPlan) -> None:
        """Applies `patch` to the quota only if it is still as the plan read it.

        The patch goes as a JSON patch whose tests carry the condition (conditional.py): the
        quota's uid, spec, labels and the annotations the plan read. If anyone (a user,
        Rancher) changed those since, the API server refuses it, nothing of theirs is
        overwritten, and the refusal (a Conflict) re-queues the namespace to plan again from
        what they wrote. Status writes (kube-controller-manager's, after every spec change and
        pod admission) do not make it fail: the plan never reads the status.
        """
        meta = metadata(quota)
        namespace = str(meta["namespace"])
        try:
            written = await self.management.client.patch(
                RESOURCE_QUOTAS,
                str(meta["name"]),
                conditional_patch(quota, patch),
                namespace,
                patch_type="json",
            )
        except errors.ApiError as error:
            if not isinstance(error, errors.Conflict) and not failed_test(error):
                self.metrics.quota_writes.labels("error").inc()
                raise
            self.metrics.quota_writes.labels("conflict").inc()
            self._quota_writes.forget(namespace)
            log.info("%s/%s changed since it was read; planning again", namespace, meta["name"])
            raise errors.Conflict(str(error)) from error
        self.metrics.quota_writes.labels("written").inc()
        if "spec" in patch:
            self.publisher.submit(namespace, written)
        self._quota_writes.wrote(
            str(meta["namespace"]), str(meta.get("resourceVersion", "")), written
        )
        self.writes[str(meta["namespace"])] += 1
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
        )
        if changes:
            reason = "MigrationRoomReserved" if plan.holds_room else "MigrationRoomReleased"
            self.management.recorder.event(
                quota, NORMAL, reason, f"spec.hard {changes}; migrations holding room: {holders}"
            )

    async def _publish_hard(self, written: Object) -> Object:
        """Copies the new spec.hard into status.hard at once; returns the quota as stored after
        (or `written`, when nothing was copied).

        Quota admission checks status.hard, which kube-controller-manager copies from spec.hard
        only a moment later: a target pod arriving in between would be refused once although the
        room is there. The copy is one JSON patch whose test is that spec.hard is still the one
        written (conditional.publish_patch): kube-controller-manager's own status write right
        after our spec write does not make it fail (conditional on the resourceVersion, it did
        in most bursts, and cost a GET and another try); if spec.hard changed, the new writer's
        value is theirs to publish. Without permission on resourcequotas/status (an older
        deploy/, or an API server just restarted), kube-controller-manager's copy is what counts
        until the copy may be tried again (permission.py).

        Run by `publisher`, beside the namespace's reconciles: in a burst, waiting for this
        request held the next raise by 100-170 ms (traced on a 3,000-VM namespace, bench/SCALE.md).
        One copy of a namespace's at a time, the newest written after it; each tests its own
        spec.hard, so an older one never lands over a newer spec. A quota deleted since is
        nothing to copy into. Other API errors propagate, and the publisher logs and drops
        them: kube-controller-manager's copy follows anyway.
        """
        if not self._status_permission.allowed():
            return written
        try:
            published = await copy_hard_to_status(self.management.client, written)
        except (errors.Forbidden, errors.BadRequest) as error:
            # RBAC's 403, or an admission webhook's refusal: rancher-webhook answers every status
            # write but kube-controller-manager's with 400 "status is immutable". Either way the
            # copy is left to kube-controller-manager, tried again after a backoff, logged once.
            self._status_permission.refused(error)
            return written
        self._status_permission.granted()
        return published

    # Metrics ------------------------------------------------------------------------------------

    def _export(self, namespace: str, snapshot: NamespaceSnapshot, plan: QuotaPlan) -> None:
        """Room, usage above the base and refusals of the namespace as they are now."""
        holding = plan.rooms.rooms if plan.holds_room else []
        self.metrics.set_room(namespace, plan.rooms.total() if holding else {}, len(holding))
        base = plan.base.hard if plan.base is not None else {}
        excess = {k: plan.used[k] - v for k, v in base.items() if k in plan.used}
        self.metrics.set_above_base(namespace, excess)
        self._report_above_base(namespace, snapshot.quota, base, plan.used, excess)
        self._count_refusals(namespace)

    def _report_above_base(
        self,
        namespace: str,
        quota: Object,
        base: Mapping[str, Quantity],
        used: Mapping[str, Quantity],
        excess: Mapping[str, Quantity],
    ) -> None:
        """A Warning on the quota, once per change, while the namespace's pods (migration targets
        excluded) use more than its base: how a tenant got past the room guard (pods admitted
        before a room-held label, the label removed by hand) or a VM grew with the overhead ratio.
        The next migration's raise starts from that usage, so an operator should look."""
        positive = {k: v for k, v in sorted(excess.items()) if v.sign() > 0}
        text = ", ".join(f"{k} {used[k]} used of {base[k]} (+{v})" for k, v in positive.items())
        if text == self._above_base.get(namespace, ""):
            return
        if text:
            self._above_base[namespace] = text
            message = f"namespace {namespace} uses more than its base: {text}"
            log.warning("%s", message)
            self.management.recorder.event(quota, WARNING, USAGE_ABOVE_BASE_REASON, message)
        else:
            self._above_base.pop(namespace, None)

    def _count_refusals(self, namespace: str) -> None:
        """Counts each migration KubeVirt reported refused by quota once, however briefly, and
        observes how long each refusal that ended since stood (refusals.py)."""
        settled = self.refusals.settle(namespace)
        if settled.new_refusals:
            self.metrics.target_pods_refused.labels(namespace).inc(settled.new_refusals)
        for seconds in settled.blocked_seconds:
            self.metrics.blocked_seconds.observe(seconds)

    def _forget(self, namespace: str) -> None:
        self.metrics.forget(namespace)
        self.settled_migrations.forget(namespace)
        self._room_last_held.pop(namespace, None)
        self._above_base.pop(namespace, None)
        self.refusals.forget(namespace)
        self._rancher_protected.discard(namespace)
        self._no_room.pop(namespace, None)

    def _report_warnings(self, namespace: Object, quota: Object, plan: QuotaPlan) -> None:
        for warning in plan.warnings:
            log.warning("%s: %s", metadata(namespace).get("name"), warning)
            self.management.recorder.event(quota, WARNING, "QuotaNotScaled", warning)

    def _explain_blocked(
        self,
        snapshot: NamespaceSnapshot,
        quota: Object,
        plan: QuotaPlan,
        *,
        cause: str | None = None,
    ) -> None:
        """A Warning on every migration KubeVirt reports refused by quota that our arithmetic
        cannot admit either, saying which key and by how much (the quota as written is final),
        and why (`cause`, when the caller knows it: a Rancher project without room)."""
        hard = parse_resource_list_leniently((quota.get("spec") or {}).get("hard"))
        used = parse_resource_list_leniently((quota.get("status") or {}).get("used"))
        for migration in snapshot.migrations:
            if not refused_by_quota(migration):
                continue
            vmi = snapshot.vmis.get(str((migration.get("spec") or {}).get("vmiName")))
            if vmi is None:
                continue
            try:
                needed = snapshot.usage(vmi, snapshot.launcher)
            except ValueError:
                continue  # reported already as a QuotaNotScaled warning ("cannot size the room")
            short = [
                f"{key}: needs {needed[key]}, used {used.get(key, Quantity.from_int(0))}, hard {limit}"
                for key, limit in sorted(hard.items())
                if key in needed and used.get(key, needed[key] * 0) + needed[key] > limit
            ]
            if not short:
                continue
            why = cause or (
                "auto-scaling is disabled by harvesterhci.io/skipResourceQuotaAutoScaling"
                if plan.skipped
                else "these keys are not part of the base this controller scales"
                if plan.managed
                else "the quota's base cannot be determined (see the quota's events)"
            )
            self.management.recorder.event(
                migration,
                WARNING,
                "MigrationBlockedByQuota",
                f"target pod does not fit quota {metadata(quota).get('name')} ({why}): "
                + "; ".join(short),
            )


def register(management: Management) -> QuotaReconciler:
    reconciler = QuotaReconciler(management)
    reconciler.register()
    return reconciler
