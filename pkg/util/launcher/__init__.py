"""The pods KubeVirt renders for a VMI, as far as a ResourceQuota sees them.

- `settings.LauncherSettings`: every cluster and namespace setting that shapes the pods.
- `compute`: the compute container (requests, limits, overhead, devices).
- `render`: the whole launcher pod (`launcher_pod_resources`) and its quota usage
  (`launcher_quota_usage`; `target_quota_usage` for a migration's target pod).
- `featuregates`: the KubeVirt feature gates that change the pod, per KubeVirt version.
- `attachment`: the hotplug attachment pod beside it (`attachment_pod_resources`,
  `attachment.attachment_usage`), for a VMI with hotplugged volumes.
- `vmiview`: `VmiView`, a VMI as the room model and the part renderers read it, and its one
  adapter from a full object (`vmi_view`, `as_view`); its `spec` (util/vmispecview.py
  `SpecView`) is every field the launcher renderer reads (`spec_of`).
- `parts`: the registry of every pod a migration's target side charges (`TARGET_PARTS`,
  `target_parts`), which the room model, MTQ mode, the VM validator and explain read.
"""

from .attachment import attachment_pod_resources
from .render import (
    launcher_pod_resources,
    launcher_quota_usage,
    rendered_memory_overhead,
    target_quota_usage,
)
from .settings import DEFAULT_LAUNCHER_SETTINGS, LauncherSettings
from .vmiview import VmiSource, VmiView, as_view, has_hotplug_volumes, spec_of, vmi_view

__all__ = [
    "DEFAULT_LAUNCHER_SETTINGS",
    "LauncherSettings",
    "VmiSource",
    "VmiView",
    "as_view",
    "attachment_pod_resources",
    "has_hotplug_volumes",
    "launcher_pod_resources",
    "launcher_quota_usage",
    "rendered_memory_overhead",
    "spec_of",
    "target_quota_usage",
    "vmi_view",
]
