"""Which ResourceQuota of a namespace is managed: the one Rancher creates and Harvester scales."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from ...generic.meta import is_deleting, labels, name
from ..annotations import LABEL_DEFAULT_RESOURCE_QUOTA

Quota = TypeVar("Quota", bound=Mapping[str, Any])


def is_managed_quota(quota: Mapping[str, Any]) -> bool:
    """Labelled resourcequota.management.cattle.io/default-resource-quota=true (never selected by
    cattle.io/creator, which Rancher also sets on quotas it does not scale). With `resolve_base`,
    Harvester's `IsResourceQuotaManagedByNamespaceAnnotation`: a labelled quota with a base."""
    return labels(quota).get(LABEL_DEFAULT_RESOURCE_QUOTA) == "true"


def managed_quota(quotas: Iterable[Quota]) -> Quota | None:
    """The namespace's managed quota: the first labelled, not deleting one by name, as Rancher
    picks it. Deterministic whatever order the cache lists them in. Harvester's
    `getResourceQuota` picks the first labelled one too; its `isNamespaceManagedByResourceQuota`
    holds for any quota of the namespace, labelled or not."""
    candidates = sorted(
        (q for q in quotas if is_managed_quota(q) and not is_deleting(q)),
        key=name,
    )
    return candidates[0] if candidates else None
