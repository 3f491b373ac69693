"""The virt-launcher pod KubeVirt renders for a VMI, as far as a ResourceQuota sees it.

- `settings.LauncherSettings`: every cluster and namespace setting that shapes the pod.
- `compute`: the compute container (requests, limits, overhead, devices).
- `render`: the whole pod (`launcher_pod_resources`) and its quota usage (`launcher_quota_usage`).
"""

from .render import launcher_pod_resources, launcher_quota_usage
from .settings import DEFAULT_LAUNCHER_SETTINGS, LauncherSettings

__all__ = [
    "DEFAULT_LAUNCHER_SETTINGS",
    "LauncherSettings",
    "launcher_pod_resources",
    "launcher_quota_usage",
]
