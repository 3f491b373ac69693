"""What the room mode's plan reads: the informers, the views kept of them, the snapshot.

Migrations, VMIs and pods are read through views the stores derive once per change
(util/resourcequota/planviews.py, podindex.py); a change of a view (not every status write of
virt-controller, virt-handler or the kubelet, nor a migration's step between Pending and a final
phase: planviews.plan_acted_on) queues its namespace. The listeners run inside the
store's write, so the reconcile they queue reads the views with the change in them. Quota
refusals are noted as the migrations change (refusals.py), not when a reconcile happens to run.
Finished migrations that settled are set aside from the views (util/resourcequota/planviews.py): a
namespace keeps thousands of them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

from ...config.management import Management
from ...generic.meta import metadata
from ...generic.resource import NAMESPACES, Object
from ...generic.store import namespace_index
from ...generic.views import NamespaceViews
from ...util.launcher import LauncherSettings, VmiView
from ...util.resourcequota.base import is_managed_quota
from ...util.resourcequota.plan import NamespaceSnapshot, QuotaPlan
from ...util.resourcequota.planviews import (
    NamespaceVmis,
    RenderedUsages,
    SettledMigrations,
    migration_plan_view,
    plan_acted_on,
    vmi_facts,
)
from ...util.resourcequota.podindex import PodIndex, PodView, pod_view
from ..informers import QuotaInformers
from .refusals import RefusalTracker

log = logging.getLogger(__name__)

PLAN_VIEW = "quota-plan"
"""The migration and VMI store views the room mode keeps (planviews.py)."""


class PlanInputs:
    """The informers and views a plan reads; `changed(namespace)` is called when they change."""

    def __init__(self, management: Management, changed: Callable[[str], None]) -> None:
        self.management = management
        self.changed = changed
        self.informers = QuotaInformers.of(management)
        informers = self.informers
        self.namespaces = management.informers.informer(NAMESPACES).pending
        self.quotas = informers.quotas.pending
        """Our namespace and quota writes the caches do not show yet: every writer of the room
        mode records into them, and plans read the two kinds through them
        (generic/pendingwrites.py)."""
        self.pod_index = PodIndex()
        """Every namespace's pods as the plan reads them, kept as pods change (podindex.py)."""
        features = management.options.quota_features
        informers.pods.store.add_view(
            PodIndex.VIEW, partial(pod_view, features=features), self._pod_changed
        )
        self.migration_views: NamespaceViews[Object] = NamespaceViews(
            changed, acted_on=plan_acted_on
        )
        """Every namespace's migrations as the plan reads them (planviews.migration_plan_view);
        KubeVirt's steps between Pending and a final phase queue nothing (plan_acted_on)."""
        self.refusals = RefusalTracker(management.clock)
        """Quota refusals as the migrations' changes showed them (refusals.py)."""
        informers.migrations.store.add_view(PLAN_VIEW, migration_plan_view, self._migration_changed)
        self.vmi_facts: NamespaceViews[VmiView] = NamespaceViews(changed)
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
        if self.pod_index.changed(key, view):
            self.changed(key.split("/", 1)[0])

    def _migration_changed(self, key: str, view: Object | None) -> None:
        """The migration store's view listener: notes a quota refusal's start or end as it
        happens (a reconcile may come only after both), then lists the view for the plan. The
        quota side of Harvester's `OnVmimChanged`: a migration's change that the plan acts on
        queues its namespace."""
        self.refusals.seen(key, view)
        self.migration_views.changed(key, view)

    def managed_namespaces(self, _changed: Object) -> list[str]:
        """A cluster-wide setting changed: every namespace with a managed quota is affected."""
        return sorted(
            {
                ns
                for q in self.informers.quotas.store.objects()
                if is_managed_quota(q)
                for ns in namespace_index(q)
            }
        )

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
        for name in settled:
            self.migration_views.set_aside(key, name)
        if settled:
            log.debug("%s: %d finished migrations settled", key, len(settled))

    def forget(self, namespace: str) -> None:
        """The namespace is no longer ours: its settled migrations are forgotten."""
        self.settled_migrations.forget(namespace)

    def snapshot(self, namespace: Object, quota: Object, quotas: list[Object]) -> NamespaceSnapshot:
        """What a plan of `namespace` reads now, with `quota` its managed quota of `quotas`."""
        name = str(metadata(namespace).get("name"))
        return NamespaceSnapshot(
            namespace=namespace,
            quota=quota,
            migrations=self.migration_views.namespace(name),
            vmis=NamespaceVmis(self.vmi_facts, name),
            pods=self.pod_index.namespace(name),
            now=self.management.clock.now(),
            launcher=self.cluster_settings().for_namespace(
                quotas, namespace, self.informers.limit_ranges.store.by_index("namespace", name)
            ),
            mode=self.management.options.mode,
            usage=self.usages.usage,
            settled=self.migration_views.set_aside_views(name),
            paused=self.management.options.paused,
            adopt_harvester=self.management.options.adopt_harvester_quotas,
        )


def _nothing(_obj: Object) -> None:
    """The view of the KubeVirt CR and Harvester's setting: only that they changed matters."""
