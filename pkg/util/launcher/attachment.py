"""The hotplug attachment pod virt-controller creates beside a launcher pod, as quota sees it.

A VMI with hotplugged volumes gets, next to its launcher pod, one attachment pod (generateName
`hp-volume-`, label `kubevirt.io=hotplug-disk`, controlled by the launcher pod) that mounts the
hotplugged claims on the launcher's node. A migration's target gets one too: virt-controller's
migration controller creates it once the target launcher pod is ready, labelled with the
migration's uid (`kubevirt.io/migrationJobUID`) and owned by the target launcher pod
(pkg/virt-controller/watch/migration, createAttachmentPod, v1.6.0, v1.7.0 and v1.8.4 alike).

Its one container, `hotplug-disk`, has the same resources whatever the volumes: requests 10m CPU
and 2M memory, limits 100m CPU and 80M memory, each overridable by the KubeVirt CR's
supportContainerResources of type `hotplug-disk` (KubeVirt's HotplugAttachment) (renderresources.go,
hotplugContainerRequests/Limits, identical in v1.6.0, v1.7.0 and v1.8.4); the namespace's LimitRange
defaults are added by admission as for any pod. Whether there is one is virt-controller's
VMIHasHotplugVolumes: a volume of the VMI's spec with a hotpluggable persistentVolumeClaim or
dataVolume, or a volumeStatus entry with hotplugVolume set.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ...apis.kubevirt import HOTPLUG_DISK
from ..podusage import ResourceList, pod_quota_usage
from .limitrange import apply_defaults
from .settings import DEFAULT_LAUNCHER_SETTINGS, LauncherSettings
from .vmiview import VmiView

HOTPLUG_ATTACHMENT: Final = "hotplug-disk"
"""supportContainerResources type of the attachment pod's container."""

_LIMITS: Final = {"cpu": "100m", "memory": "80M"}
_REQUESTS: Final = {"cpu": "10m", "memory": "2M"}


def _resolved(settings: LauncherSettings, kind: str, defaults: Mapping[str, str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for name, default in defaults.items():
        override = settings.support_value(HOTPLUG_ATTACHMENT, kind, name)
        values[name] = str(override) if override is not None else default
    return values


def attachment_pod_resources(
    settings: LauncherSettings = DEFAULT_LAUNCHER_SETTINGS,
) -> dict[str, Any]:
    """The attachment pod virt-controller renders, reduced to what quota looks at:
    `{"spec": {"containers": [{"name": "hotplug-disk", "resources": ...}]}}` with the
    namespace's LimitRange defaults (`settings.container_defaults`) applied. Raises ValueError
    for a supportContainerResources entry that does not parse."""
    container = {
        "name": HOTPLUG_DISK,
        "resources": {
            "limits": _resolved(settings, "limits", _LIMITS),
            "requests": _resolved(settings, "requests", _REQUESTS),
        },
    }
    return apply_defaults({"spec": {"containers": [container]}}, settings.container_defaults)


def attachment_usage(vmi: VmiView, settings: LauncherSettings) -> ResourceList:
    """The quota usage of the attachment pod virt-controller creates for `vmi` on a migration's
    target side, or {} when the VMI has no hotplugged volume (no attachment pod): the attachment
    part's renderer (parts.py)."""
    if not vmi.hotplug:
        return {}
    return pod_quota_usage(attachment_pod_resources(settings))
