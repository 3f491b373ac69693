"""What a plan of a namespace reads, and planning one namespace: what its managed quota should be
now, and what the room-held label does.

Harvester sizes one VMI's raise with `CalculateScaleResourceQuotaWithVMI` (calculator.go) and
adds it to the quota in its vmim controller's scaling (`scaleResourceQuotaWithVMI`); here one
plan of the whole namespace does both (`plan_quota`, util/resourcequota/plan.py). A
`NamespacePlanner` makes that plan from a plan source (`_PlanSource`): the controller's caches
with our writes they do not show yet (`PlanInputs`), or objects listed from the API server
(a `NamespaceSnapshot` of them, its own source: `explain`, `preflight`). The reconcile, the stale-raise sweep and a Rancher project's sibling
judgment hold the same planner, so each reads a namespace as the others do.

The caches' migrations, VMIs and pods are read through views the stores derive once per change
(util/resourcequota/planviews.py, podindex.py); a change of a view (not every status write of
virt-controller, virt-handler or the kubelet, nor a migration's step before a final phase:
planviews.plan_acted_on) queues its namespace, at once or soon by what it can change, if it
has a managed quota or is MTQ mode's (planqueue.py). The listeners run inside the store's
write, so the reconcile they queue reads the views with the change in them. Quota refusals are
noted as the migrations change (reports.py), not when a reconcile happens to run, and counted
and exported only where a managed quota is and no MTQ budget. Finished migrations that settled
are set aside from the views (util/resourcequota/planviews.py): a namespace keeps thousands of
them. Planning is pure but for reading; event loop only.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from functools import partial
from typing import Protocol, TypedDict

from ...config.management import Management
from ...generic.meta import is_deleting, metadata, name
from ...generic.resource import NAMESPACES, Object
from ...generic.store import Store, namespace_index
from ...generic.views import NamespaceViews
from ...util.launcher import LauncherSettings, VmiView
from ...util.resourcequota.base import RANCHER, is_managed_quota, managed_quota
from ...util.resourcequota.plan import NamespaceSnapshot, QuotaPlan, plan_quota
from ...util.resourcequota.planviews import (
    RenderedUsages,
    SettledMigrations,
    migration_plan_view,
    plan_acted_on,
    vmi_facts,
)
from ...util.resourcequota.podindex import PodIndex, PodView, pod_view
from ...util.resourcequota.raises import raise_records
from ..informers import QuotaInformers
from .planqueue import PlanQueue
from .reports import RefusalTracker

__all__ = [
    "NamespacePlanner",
    "PlanInputs",
    "label_policy",
]

log = logging.getLogger(__name__)

PLAN_VIEW = "quota-plan"
"""The migration and VMI store views the room mode keeps (planviews.py)."""
MANAGED_QUOTA_INDEX = "managed-quota"
"""The quota cache's index of managed quotas (`managed_quota` could pick) by namespace."""


def managed_quota_index(quota: Object) -> list[str]:
    """The quota's namespace if it is a managed quota not being deleted, else none."""
    if not is_managed_quota(quota) or is_deleting(quota):
        return []
    return namespace_index(quota)


def has_managed_quota(quotas: Store, namespace: str) -> bool:
    """Whether the quota cache `quotas` (with MANAGED_QUOTA_INDEX) holds a managed quota of
    `namespace` (the plan's `quotas_of` finds one), by its index: nothing is decoded. Read from
    the cache as it stands: what makes a quota managed (its label, not deleting) is never
    written by us."""
    return bool(quotas.index_keys(MANAGED_QUOTA_INDEX, namespace))


class _PlanSource(Protocol):
    """What a plan of one namespace reads."""

    def quotas_of(self, key: str) -> tuple[Object | None, list[Object]]:
        """Namespace `key`'s managed quota as we last know it (None without one) and all its
        quotas."""
        ...

    def newest(self, namespace: Object) -> Object:
        """`namespace` with our writes the source does not show yet."""
        ...

    def snapshot(self, namespace: Object, quota: Object, quotas: list[Object]) -> NamespaceSnapshot:
        """What a plan of `namespace` reads now, with `quota` its managed quota of `quotas`."""
        ...


class _LabelFlags(TypedDict):
    """The room-held label's three QuotaPlan flags, by their field names."""

    labels_room: bool
    labelled_for_good: bool
    label_writes_wait: bool


def label_policy(
    *, managed: bool, holds_room: bool, may_label: bool, raise_stands: bool, fail_closed: bool
) -> _LabelFlags:
    """The label's policy for a plan: its QuotaPlan flags by field name (`labels_room`,
    `labelled_for_good`, `label_writes_wait`), for `dataclasses.replace`. Where a namespace write is safe during a room (`may_label`), the label
    is set for the room and lingers after it. Where it is not (a Rancher quota raised
    directly), a label per room could never be written, which left those rooms on the pods
    rule that fails open; with `fail_closed` the label is kept there for good instead. It is
    written once, normally when the namespace is first planned, before any raise; found
    missing while a raise stands (an upgrade from a version that did not keep it, the write
    refused until then), it is written all the same: Rancher's agent may then reset the raise
    once, which the next plan raises again, where leaving the room on the fail-open rule would
    let pods in for as long as it lasts. A label not kept for good there is only removed while
    no raise of ours `raise_stands`."""
    return _LabelFlags(
        labels_room=managed and holds_room and may_label,
        labelled_for_good=managed and not may_label and fail_closed,
        label_writes_wait=not may_label and (holds_room or raise_stands),
    )


def rancher_base(plan: QuotaPlan) -> bool:
    """Whether the plan's base is Rancher's annotation."""
    return plan.base is not None and plan.base.source == RANCHER


def never(_key: str) -> bool:
    """No namespace is another mode's (the default `defer_to`)."""
    return False


class NamespacePlanner:
    """Plans one namespace from `source`: Harvester's `scaleResourceQuotaWithVMI`, each VMI's
    raise sized as its `CalculateScaleResourceQuotaWithVMI` sizes it, for every migration of the
    namespace at once. Pure but for reading: no write, no Event, no metric.

    `through(namespace, plan)`: whether the plan's raise goes through Rancher's annotation
    (RancherPath.through; by default wherever the base is Rancher's). `defer_to(key)`: whether
    another mode handles the namespace (MTQ mode, where it has a VMMRQ): its plan then gives
    every room back, and once no raise of ours stands there it is not planned at all.
    `fail_closed`: a Rancher namespace raised directly keeps the room-held label for good.
    Event loop only."""

    def __init__(
        self,
        source: _PlanSource,
        *,
        through: Callable[[Object, QuotaPlan], bool] = lambda _ns, plan: rancher_base(plan),
        defer_to: Callable[[str], bool] = never,
        fail_closed: bool = False,
    ) -> None:
        self.source = source
        self.through = through
        self.defer_to = defer_to
        self.fail_closed = fail_closed

    def plan(self, namespace: Object) -> QuotaPlan | None:
        """The namespace's plan now (what it was made from in its `snapshot`, the room-held
        label's flags set by `label_policy`); None without a managed quota, or where another mode
        handles the namespace and no raise of ours stands there any more (`defer_to`)."""
        key = name(namespace)
        handing_over = self.defer_to(key)
        if handing_over and not self.raise_left(namespace):
            return None
        return self._plan(key, namespace, release=handing_over)

    def raise_left(self, namespace: Object) -> bool:
        """Whether a raise of ours still stands in the namespace (as we last wrote it)."""
        key = name(namespace)
        quota, _quotas = self.source.quotas_of(key)
        return raise_records(quota, self.source.newest(namespace))

    def _plan(self, key: str, namespace: Object, *, release: bool) -> QuotaPlan | None:
        """With `release`, the plan of the namespace with no migration (every room given
        back: a namespace handed over to MTQ mode)."""
        quota, quotas = self.source.quotas_of(key)
        if quota is None:
            return None
        namespace = self.source.newest(namespace)
        snapshot = self.source.snapshot(namespace, quota, quotas)
        if release:
            snapshot = dataclasses.replace(snapshot, migrations=[])
        plan = plan_quota(snapshot)
        may_label = self._may_label(namespace, plan)
        policy = label_policy(
            managed=plan.managed,
            holds_room=plan.holds_room,
            may_label=may_label,
            raise_stands=not may_label and raise_records(quota, namespace),
            fail_closed=self.fail_closed,
        )
        return dataclasses.replace(plan, **policy)

    def _may_label(self, namespace: Object, plan: QuotaPlan) -> bool:
        """Whether a namespace write is safe while room is held. Rancher's agent re-derives the
        quota from its annotation on every namespace event: where our raise is written to
        spec.hard directly, a label write would have Rancher reset the raise (measured: a second
        raise and a refusal per migration). Through Rancher's annotation (its protected quota)
        the raise survives any namespace event, and elsewhere nobody resets."""
        if not rancher_base(plan):
            return True
        return self.through(namespace, plan)


class PlanInputs:
    """The informers and views a plan reads; `changed(namespace)` (at once) or `soon(namespace)`
    is called when they change (planqueue.py: which is which).
    The reconcile's `_PlanSource`: the caches read through our namespace and quota writes they
    do not show yet (`namespaces`, `quotas`: generic/pendingwrites.py)."""

    def __init__(
        self,
        management: Management,
        changed: Callable[[str], None],
        soon: Callable[[str], None] | None = None,
    ) -> None:
        self.management = management
        self.informers = QuotaInformers.of(management)
        informers = self.informers
        self.namespaces = management.informers.informer(NAMESPACES).pending
        self.quotas = informers.quotas.pending
        """Our namespace and quota writes the caches do not show yet: every writer of the room
        mode records into them, and plans read the two kinds through them
        (generic/pendingwrites.py)."""
        quotas = informers.quotas.store
        if not quotas.has_index(MANAGED_QUOTA_INDEX):
            quotas.add_indexers({MANAGED_QUOTA_INDEX: managed_quota_index})
        self.pod_index = PodIndex()
        """Every namespace's pods as the plan reads them, kept as pods change (podindex.py)."""
        features = management.options.quota_features
        informers.pods.store.add_view(
            PodIndex.VIEW, partial(pod_view, features=features), self._pod_changed
        )
        self.migration_views: NamespaceViews[Object] = NamespaceViews(
            acted_on=plan_acted_on, on_change_of=self._migration_listed
        )
        """Every namespace's migrations as the plan reads them (planviews.migration_plan_view);
        KubeVirt's steps before a final phase queue nothing (plan_acted_on)."""
        self.also_queued: Callable[[str], bool] = _none
        """Namespaces whose workloads' changes queue them though they have no managed quota:
        MTQ mode's where it runs (app.py), whose handler runs on the same namespaces controller
        and sizes a blocked migration's target pod from the VMI, which it does not watch."""
        self.queue = PlanQueue(
            changed, soon or changed, self.migration_views, queues=self.queues_namespace
        )
        """Queues a namespace's plan at once or soon by what changed (planqueue.py)."""
        self.refusals = RefusalTracker(
            management.clock,
            counted=lambda ns: has_managed_quota(quotas, ns) and not self.also_queued(ns),
        )
        """Quota refusals as the migrations' changes showed them (reports.py), exported at each
        scrape of `management`'s registry; counted and exported where the room mode plans (a
        managed quota, not MTQ mode's)."""
        management.registry.register(self.refusals)
        informers.migrations.store.add_view(PLAN_VIEW, migration_plan_view, self._migration_changed)
        self.vmi_facts: NamespaceViews[VmiView] = NamespaceViews(on_change_of=self._vmi_listed)
        """Every namespace's VMIs as the plan reads them (launcher.VmiView, narrow)."""
        informers.vmis.store.add_view(PLAN_VIEW, vmi_facts, self.vmi_facts.changed)
        self.usages = RenderedUsages(informers.vmis.store.get)
        """Room estimates, rendered once per VM shape and settings."""
        self._cluster_settings: LauncherSettings | None = None
        """The cluster-wide launcher settings, derived again only after the KubeVirt CR or
        Harvester's setting changed (`cluster_settings`)."""
        for informer in (informers.kubevirts, informers.settings):
            informer.store.add_view(PLAN_VIEW, _nothing, self._cluster_settings_changed)
        self.settled_migrations = SettledMigrations()
        """Finished migrations planned without room, set aside from plans after a grace
        (planviews.SettledMigrations)."""

    # The _PlanSource of the reconcile: the caches, our writes they do not show yet applied --------

    def quotas_of(self, key: str) -> tuple[Object | None, list[Object]]:
        quotas = self.quotas.by_index("namespace", key)
        return managed_quota(quotas), quotas

    def newest(self, namespace: Object) -> Object:
        return self.namespaces.newest(namespace)

    def queues_namespace(self, key: str) -> bool:
        """Whether changes of namespace `key`'s migrations, VMIs and pods queue it (planqueue.py):
        it has a managed quota, or `also_queued` names it."""
        return has_managed_quota(self.informers.quotas.store, key) or self.also_queued(key)

    def candidates(self) -> Iterable[tuple[str, Object, Object]]:
        """(key, namespace, managed quota) of every namespace cached when the call began and not
        Terminating, each with its quota as cached when it is reached, our writes the caches do
        not show yet applied; lazily."""
        for namespace in self.namespaces.store.iter():
            key = name(namespace)
            if metadata(namespace).get("deletionTimestamp"):
                continue
            quota, _quotas = self.quotas_of(key)
            if quota is not None:
                yield key, self.newest(namespace), quota

    def _cluster_settings_changed(self, _key: str, _view: None) -> None:
        """The KubeVirt CR or Harvester's setting was stored or removed (inside the store's
        write, so before any reconcile it queues): the settings are derived again."""
        self._cluster_settings = None

    def cluster_settings(self) -> LauncherSettings:
        """QuotaInformers.kubevirt_settings, kept until either of its objects changes, so
        that a reconcile neither decodes the KubeVirt CR nor derives the settings from it (a
        profiled cost of every reconcile), though they change only with those objects."""
        if self._cluster_settings is None:
            self._cluster_settings = self.informers.kubevirt_settings()
        return self._cluster_settings

    def _pod_changed(self, key: str, view: PodView | None) -> None:
        """The pod store's view listener: the namespace is reconciled when its pods changed as
        the plan sees them, not on every pod update (kwok's and the kubelet's status writes
        leave most views equal)."""
        namespace, name = key.split("/", 1)
        old = self.pod_index.namespace(namespace).get(name)
        if self.pod_index.changed(key, view):
            self.queue.pod(namespace, old, view)

    def _migration_changed(self, key: str, view: Object | None) -> None:
        """The migration store's view listener: notes a quota refusal's start or end as it
        happens (a reconcile may come only after both), then lists the view for the plan. The
        quota side of Harvester's `OnVmimChanged`: a migration's change that the plan acts on
        queues its namespace."""
        self.refusals.seen(key, view)
        self.migration_views.changed(key, view)

    def _migration_listed(self, namespace: str, old: Object | None, new: Object | None) -> None:
        self.queue.migration(namespace, old, new)

    def _vmi_listed(self, namespace: str, old: VmiView | None, new: VmiView | None) -> None:
        changed = new or old
        if changed is not None:
            self.queue.vmi(namespace, changed.name)

    def managed_namespaces(self, _changed: Object) -> list[str]:
        """A cluster-wide setting changed: every namespace with a managed quota is affected (by
        the quota cache's index: no quota is decoded)."""
        return sorted(self.informers.quotas.store.indexed_values(MANAGED_QUOTA_INDEX))

    def synced(self) -> bool:
        """Whether the caches a room depends on (migrations, VMIs, pods) have synced."""
        informers = self.informers
        return all(i.has_synced() for i in (informers.migrations, informers.vmis, informers.pods))

    def set_aside_settled(self, key: str, snapshot: NamespaceSnapshot, plan: QuotaPlan) -> None:
        """Takes the namespace's settled finished migrations out of what its plans read, once
        the caches a room depends on have synced: a plan made before that (the process goes
        on after CACHE_SYNC_TIMEOUT) may miss the pod a finished migration still waits for,
        and a migration set aside is not judged again until it changes."""
        if not self.synced():
            return
        settled = self.settled_migrations.settled(
            key, snapshot.migrations, plan.rooms, self.management.clock.monotonic(), snapshot.now
        )
        for migration in settled:
            self.migration_views.set_aside(key, migration)
        if settled:
            log.debug("%s: %d finished migrations settled", key, len(settled))

    def forget(self, namespace: str) -> None:
        """The namespace is no longer ours: its settled migrations are forgotten."""
        self.settled_migrations.forget(namespace)

    def snapshot(self, namespace: Object, quota: Object, quotas: list[Object]) -> NamespaceSnapshot:
        """What a plan of `namespace` reads now, with `quota` its managed quota of `quotas`."""
        key = str(metadata(namespace).get("name"))
        return NamespaceSnapshot(
            namespace=namespace,
            quota=quota,
            migrations=self.migration_views.namespace(key),
            vmis=self.vmi_facts.by_name(key),
            pods=self.pod_index.namespace(key),
            now=self.management.clock.now(),
            launcher=self.cluster_settings().for_namespace(
                quotas, namespace, self.informers.limit_ranges.store.by_index("namespace", key)
            ),
            mode=self.management.options.mode,
            usage=self.usages.usage,
            settled=self.migration_views.set_aside_views(key),
            paused=self.management.options.paused,
            adopt_harvester=self.management.options.adopt_harvester_quotas,
        )


def _none(_key: str) -> bool:
    """No namespace (the default `also_queued`)."""
    return False


def _nothing(_obj: Object) -> None:
    """The view of the KubeVirt CR and Harvester's setting: only that they changed matters."""
