"""The informers both quota modes read, and the launcher settings in force from them.

The room mode (controller/resourcequota/planner.py) and MTQ mode (controller/mtq/blocked.py) read
the same kinds; the factory shares one informer per kind, so asking twice costs nothing, and this
asks in one place. Reads the caches only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ..apis.harvester import RATIO_SETTING, SETTINGS
from ..apis.kubevirt import (
    KUBEVIRTS,
    LABEL_MIGRATION_JOB,
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
    VIRTUAL_MACHINE_INSTANCES,
)
from ..config.kubevirt import settings_from
from ..config.management import Management
from ..generic.informer import SharedInformer
from ..generic.meta import labels
from ..generic.resource import LIMIT_RANGES, PODS, RESOURCE_QUOTAS, Object
from ..util.launcher import LauncherSettings
from ..util.podusage import strip_pod_to_quota_fields
from ..util.resourcequota.conditional import keep_writers
from ..util.vmispec import strip_vmi_unread

TARGET_INDEX: Final = "mtq-migration-target"
"""The pod store's index of migration target pods by their migration's uid (MTQ mode's blocked
migrations ask whether a migration's target pod exists)."""


def target_index(pod: Object) -> list[str]:
    """TARGET_INDEX's function: the uid of the migration whose target pod `pod` is, if any."""
    uid = labels(pod).get(LABEL_MIGRATION_JOB)
    return [str(uid)] if uid else []


@dataclass(frozen=True)
class QuotaInformers:
    """Quotas (their managedFields reduced to the writers of spec.hard:
    writers.keep_writers), migrations, VMIs (without managedFields, kubectl's last-applied copy
    and the unknown fields no rule reads: vmispec.strip_vmi_unread) and pods (stripped to what
    quota usage reads), and what sizes a room besides the VMI: Harvester's overhead-ratio
    setting and the KubeVirt CR (both optional kinds), and the LimitRanges, whose defaults fill
    what a launcher container leaves unset, as admission does (util/launcher/limitrange.py)."""

    quotas: SharedInformer
    migrations: SharedInformer
    vmis: SharedInformer
    pods: SharedInformer
    settings: SharedInformer
    kubevirts: SharedInformer
    limit_ranges: SharedInformer
    configured_version: str | None
    """--kubevirt-version: None reads the KubeVirt CR's."""

    @classmethod
    def of(cls, management: Management) -> QuotaInformers:
        """The informers on `management`'s factory."""
        factory = management.informers
        return cls(
            quotas=factory.informer(RESOURCE_QUOTAS, transform=keep_writers),
            migrations=factory.informer(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS),
            vmis=factory.informer(VIRTUAL_MACHINE_INSTANCES, transform=strip_vmi_unread),
            pods=factory.informer(PODS, transform=strip_pod_to_quota_fields),
            settings=factory.informer(
                SETTINGS, field_selector=f"metadata.name={RATIO_SETTING}", optional=True
            ),
            kubevirts=factory.informer(KUBEVIRTS, optional=True),
            limit_ranges=factory.informer(LIMIT_RANGES),
            configured_version=management.options.kubevirt_version,
        )

    def kubevirt_settings(self) -> LauncherSettings:
        """The cluster-wide launcher settings in force now, from the caches."""
        kubevirts = self.kubevirts.store.objects()
        settings = self.settings.store.objects()
        return settings_from(
            kubevirts[0] if kubevirts else None,
            settings[0] if settings else None,
            configured_version=self.configured_version,
        )
