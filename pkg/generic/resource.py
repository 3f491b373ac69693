"""Resource declarations: which group/version/plural an API call or an informer is about.

One small frozen dataclass per kind instead of generated classes: the controllers treat objects as
plain dicts, so all a kind needs is where it lives in the API.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

Object = dict[str, Any]
"""An API object as the server sends it: parsed JSON, never a generated model class."""


@dataclass(frozen=True)
class Resource:
    """A kind's location in the API (``group`` is "" for the core group)."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def name(self) -> str:
        """``plural.group`` as Kubernetes names resources (``pods`` for the core group)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(self, namespace: str | None = None, name: str | None = None, sub: str = "") -> str:
        """The request path: collection (all or one namespace), one object, or a subresource."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
            if sub:
                base += f"/{sub}"
        return base


def key_of(obj: Object) -> str:
    """The cache key: ``namespace/name``, or ``name`` for cluster-scoped objects."""
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    name = metadata.get("name", "")
    return f"{namespace}/{name}" if namespace else str(name)


# Kubernetes' own kinds the framework and the controllers use. Other API groups are declared
# above the framework (harvester_quota.apis), which knows no KubeVirt or Harvester kind.
PODS = Resource("", "v1", "pods", "Pod")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
RESOURCE_QUOTAS = Resource("", "v1", "resourcequotas", "ResourceQuota")
EVENTS = Resource("", "v1", "events", "Event")
CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap")
SECRETS = Resource("", "v1", "secrets", "Secret")
LIMIT_RANGES = Resource("", "v1", "limitranges", "LimitRange")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
VALIDATING_WEBHOOK_CONFIGURATIONS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    namespaced=False,
)
CRDS = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False
)
