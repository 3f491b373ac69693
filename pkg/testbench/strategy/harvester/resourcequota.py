"""Harvester v1.9's ResourceQuota controller: spec.hard from the namespace base and annotations.

Ports `pkg/controller/master/resourcequota/resourcequota_controller.go` (OnResourceQuotaChanged,
scaleResourceQuotaOnDemand). It is Harvester's second ResourceQuota writer: on every event of a
quota labelled `resourcequota.management.cattle.io/default-resource-quota=true` it sets

    limits.cpu    = base limitsCpu    + Σ limits.cpu of the migrating keys
    limits.memory = base limitsMemory + Σ limits.memory of the migrating keys + compensation

(each only when the base is non-zero; nothing else in spec.hard is touched), base being the
namespace's `field.cattle.io/resourceQuota`, and turns a resync flag of "true" into "false" in the
same write. It reacts to ResourceQuota events only: a changed namespace annotation is picked up at
the next event of the quota (Rancher's own sync of the quota provides one). With the skip
annotation it does nothing at all, so a quota scaled before the skip stays scaled.
"""

from __future__ import annotations

import copy
import logging
from typing import Final

from ....generic.resource import Object
from ....util.annotations import (
    CATTLE_ANNOTATION_RESOURCE_QUOTA,
    LABEL_DEFAULT_RESOURCE_QUOTA,
    TRUE,
)
from . import rqutils
from .calculator import (
    calculate_new_resource_quota_from_base_delta,
    compensation_from_resource_quota,
    vmim_resources_from_rq_annotation,
)
from .cluster import HarvesterCluster
from .migration import NamespaceNotFound

__all__ = ["ResourceQuotaHandler", "SkipScaling", "scale_resource_quota_on_demand"]

log = logging.getLogger(__name__)

_SKIP: Final = "skip scaling"


class SkipScaling(Exception):
    """`errSkipScaling`: this quota is not scaled now (not an error: no retry)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"{_SKIP}: {reason}")
        self.reason = reason


def scale_resource_quota_on_demand(rq: Object, annotation: str) -> bool:
    """Sets rq's spec.hard from the base and the annotations; True if it changed.

    SkipScaling for: an empty namespace annotation, a quota without limits.cpu and limits.memory,
    an invalid limitsCpu/limitsMemory quantity, an unreadable migrating key or compensation.
    ValueError (retried, forever) for a namespace annotation that is not JSON.
    """
    if annotation == "":
        raise SkipScaling(f"empty {CATTLE_ANNOTATION_RESOURCE_QUOTA} annotation")
    base = rqutils.decode_namespace_resource_quota(annotation)
    if rqutils.is_empty_resource_quota(rq):
        raise SkipScaling("the quota has no limits.cpu or limits.memory")
    try:
        cpu_base, memory_base = rqutils.cpu_memory_limits(base)
    except ValueError as err:
        raise SkipScaling(f"invalid {CATTLE_ANNOTATION_RESOURCE_QUOTA} quantity: {err}") from None
    try:
        cpu_delta, memory_delta, _ = vmim_resources_from_rq_annotation(rq)
    except ValueError as err:
        raise SkipScaling(f"invalid migrating annotation: {err}") from None
    try:
        compensation = compensation_from_resource_quota(rq)
    except ValueError as err:
        raise SkipScaling(f"invalid compensation: {err}") from None
    return calculate_new_resource_quota_from_base_delta(
        rq,
        cpu_base=cpu_base,
        memory_base=memory_base,
        cpu_delta=cpu_delta,
        memory_delta=memory_delta,
        memory_compensation=compensation,
    )


class ResourceQuotaHandler:
    """`resourcequota.Handler`: OnResourceQuotaChanged over a HarvesterCluster."""

    def __init__(self, cluster: HarvesterCluster) -> None:
        self.cluster = cluster

    async def on_resource_quota_changed(  # noqa: PLR0911 - Go's early returns, one by one
        self, _key: str, rq: Object | None
    ) -> Object | None:
        if rq is None:
            return None
        metadata = rq.get("metadata") or {}
        labels = metadata.get("labels")
        if metadata.get("deletionTimestamp") or not labels:
            return rq
        if labels.get(LABEL_DEFAULT_RESOURCE_QUOTA) != TRUE:
            return rq
        if rqutils.is_auto_scaling_disabled(rq):
            return rq
        namespace = str(metadata.get("namespace"))
        found = self.cluster.namespace(namespace)
        if found is None:
            raise NamespaceNotFound(
                f"can't find resourcequota {namespace}/{metadata.get('name')} related namespace"
            )
        annotation = rqutils.annotations_of(found).get(CATTLE_ANNOTATION_RESOURCE_QUOTA, "")
        to_update = copy.deepcopy(rq)
        try:
            changed = scale_resource_quota_on_demand(to_update, annotation)
        except SkipScaling as skipped:
            log.debug("resourcequota %s/%s: %s", namespace, metadata.get("name"), skipped)
            if not rqutils.is_migrating_scaling_resync_needed(to_update):
                return rq
            rqutils.clear_migrating_scaling_resync_needed(to_update)
            return await self.cluster.update_resource_quota(to_update)
        if changed or rqutils.is_migrating_scaling_resync_needed(to_update):
            rqutils.clear_migrating_scaling_resync_needed(to_update)
            return await self.cluster.update_resource_quota(to_update)
        return rq
