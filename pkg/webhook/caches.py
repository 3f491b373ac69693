"""The webhook's informer caches: what its validators read (resources.common.Lookups), with no
API call per request."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping, Sequence
from functools import partial

from prometheus_client import CollectorRegistry

from ..apis.harvester import RATIO_SETTING, SETTINGS
from ..apis.kubevirt import (
    KUBEVIRTS,
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
    VIRTUAL_MACHINE_INSTANCES,
)
from ..apis.mtq import VMMRQS
from ..config.kubevirt import settings_from
from ..generic.client import ApiClient
from ..generic.clock import REAL_CLOCK, Clock
from ..generic.frameworkmetrics import SkipMetrics
from ..generic.informer import SharedInformerFactory
from ..generic.intake import SkipReporter
from ..generic.meta import metadata
from ..generic.resource import LIMIT_RANGES, NAMESPACES, PODS, RESOURCE_QUOTAS, Object
from ..generic.store import NamespaceObjects
from ..util.annotations import LABEL_DEFAULT_RESOURCE_QUOTA
from ..util.launcher import LauncherSettings, VmiSource
from ..util.podusage import KUBERNETES_1_36, QuotaFeatures, strip_pod_to_quota_fields
from ..util.resourcequota.base import Mode, managed_quota
from ..util.resourcequota.podindex import NamespacePods, PodIndex, pod_view
from ..util.resourcequota.raises import raise_stands
from ..util.resources import ResourceList
from ..util.vmispec import strip_vmi_unread
from .renders import LauncherRenders
from .resources.common import rancher_base_of
from .resources.pod.targets import COPY_VIEW, QuotaChanges, quota_copy
from .underway import VIEW as UNDER_WAY_VIEW
from .underway import MigrationsUnderWay, under_way

log = logging.getLogger(__name__)


SETTINGS_VIEW = "launcher-settings"
"""The view of the KubeVirt CR and Harvester's setting: only that they changed matters."""

MIGRATION_UID_INDEX = "uid"
"""The migration store's index by metadata.uid (a target pod names its migration by uid)."""


def _nothing(_obj: Object) -> None:
    return None


def _uid_of(migration: Object) -> list[str]:
    uid = metadata(migration).get("uid")
    return [str(uid)] if uid else []


def counted_skips(registry: CollectorRegistry) -> SkipReporter:
    """The webhook's `skips` reporter: each object its caches skip is counted in
    `harvester_quota_informer_objects_skipped_total{resource, stage}` (SkipMetrics on
    `registry`); the informer has logged it already, naming it. No Warning Event: the webhook
    keeps no Event recorder (the controller's informers record one on the same objects)."""
    metrics = SkipMetrics(registry)
    return lambda skipped: metrics.object_skipped(skipped.resource, skipped.stage)


class WebhookCaches:
    """The informer caches the validators read (implements resources.common.Lookups)."""

    def __init__(
        self,
        client: ApiClient,
        *,
        clock: Clock = REAL_CLOCK,
        kubevirt_version: str | None = None,
        mtq: bool = True,
        mode: Mode = "auto",
        quota_features: QuotaFeatures = KUBERNETES_1_36,
        skips: SkipReporter | None = None,
    ) -> None:
        """`mtq`: namespaces with a VirtualMachineMigrationResourceQuota are MTQ mode's, and
        their quotas are no managed quota here (no room rules, no target wait), as the
        controller's --no-mtq decides. `mode`: the controller's --mode (base_mode).
        `quota_features`: the controller's --quota-feature-gates (quota_features). `skips`: told
        of every object the caches skip (informer.py; None: logged only)."""
        self._mode: Mode = mode
        self._quota_features = quota_features
        self._clock = clock
        self._kubevirt_version = kubevirt_version
        self.factory = SharedInformerFactory(client, clock=clock, skips=skips)
        self.quotas = self.factory.informer(
            RESOURCE_QUOTAS, label_selector=f"{LABEL_DEFAULT_RESOURCE_QUOTA}=true"
        )
        self.namespaces = self.factory.informer(NAMESPACES)
        self._migrations = self.factory.informer(
            VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, indexers={MIGRATION_UID_INDEX: _uid_of}
        )
        self.under_way = MigrationsUnderWay()
        """Namespaces with a migration under way (underway.py), kept as migrations change."""
        self._migrations.store.add_view(UNDER_WAY_VIEW, under_way, self.under_way.changed)
        self._vmis = self.factory.informer(VIRTUAL_MACHINE_INSTANCES, transform=strip_vmi_unread)
        """Without managedFields, kubectl's last-applied copy and the unknown fields no rule
        reads (vmispec.strip_vmi_unread)."""
        self.renders = LauncherRenders()
        """Launcher usages rendered once per VMI version and settings (renders.py)."""
        self.pods = self.factory.informer(
            PODS, label_selector="kubevirt.io=virt-launcher", transform=strip_pod_to_quota_fields
        )
        self.pod_index = PodIndex()
        """The launcher pods as the room plan reads them, kept as they change (podindex.py)."""
        self.pods.store.add_view(
            PodIndex.VIEW, partial(pod_view, features=quota_features), self.pod_index.changed
        )
        self.settings = self.factory.informer(
            SETTINGS, field_selector=f"metadata.name={RATIO_SETTING}", optional=True
        )
        self.kubevirts = self.factory.informer(KUBEVIRTS, optional=True)
        self._cluster_settings: LauncherSettings | None = None
        for informer in (self.kubevirts, self.settings):
            informer.store.add_view(SETTINGS_VIEW, _nothing, self._cluster_settings_changed)
        self._limit_ranges = self.factory.informer(LIMIT_RANGES)
        self.vmmrqs = self.factory.informer(VMMRQS, optional=True) if mtq else None
        self.quota_changes = QuotaChanges(clock)
        """Wakes target pods waiting for their room, and keeps the quotas' recent copies
        (pod/targets.py)."""
        self.quotas.store.add_view(COPY_VIEW, quota_copy, self.quota_changes.stored)

    def managed_quota(self, namespace: str) -> Object | None:
        quota = managed_quota(self.quotas.store.by_index("namespace", namespace))
        if (
            self.vmmrqs is not None
            and self.vmmrqs.store.by_index("namespace", namespace)
            and not raise_stands(quota, self.namespace(namespace), rancher_base_of(self, namespace))
        ):
            return None  # MTQ mode's: no raise of the room mode is left to guard (raises.py)
        return quota

    def namespace(self, name: str) -> Object | None:
        return self.namespaces.store.get(name)

    def migrations(self, namespace: str) -> Sequence[Object]:
        return self._migrations.store.by_index("namespace", namespace)

    def migration(self, namespace: str, uid: str) -> Object | None:
        found = self._migrations.store.by_index(MIGRATION_UID_INDEX, uid)
        return next((m for m in found if metadata(m).get("namespace") == namespace), None)

    def vmis(self, namespace: str) -> Mapping[str, Object]:
        return NamespaceObjects(self._vmis.store, namespace)

    def launcher_pods(self, namespace: str) -> NamespacePods:
        return self.pod_index.namespace(namespace)

    def base_mode(self) -> Mode:
        return self._mode

    def quota_features(self) -> QuotaFeatures:
        return self._quota_features

    def kubevirt_settings(self) -> LauncherSettings:
        """The cluster-wide launcher settings, derived again only once the KubeVirt CR or
        Harvester's setting changed: decoding the CR on every admission cost each one, and one
        settings object for all lets the render cache key them by identity first."""
        if self._cluster_settings is None:
            kubevirts, settings = self.kubevirts.store.objects(), self.settings.store.objects()
            self._cluster_settings = settings_from(
                kubevirts[0] if kubevirts else None,
                settings[0] if settings else None,
                configured_version=self._kubevirt_version,
            )
        return self._cluster_settings

    def _cluster_settings_changed(self, _key: str, _view: None) -> None:
        """Inside the store's write of the KubeVirt CR or Harvester's setting: derive again."""
        self._cluster_settings = None

    def launcher_usage(self, vmi: VmiSource, settings: LauncherSettings) -> ResourceList:
        return self.renders.usage(vmi, settings)

    def migrations_under_way(self, namespace: str) -> bool:
        return self.under_way.any_in(namespace)

    def limit_ranges(self, namespace: str) -> Sequence[Object]:
        return self._limit_ranges.store.by_index("namespace", namespace)

    def now(self) -> datetime.datetime:
        return self._clock.now()
