"""What a tenant may not stop (issue 38, docs/security.md "Availability"), on the real API server:
the tenant is a real identity with the edit roles, the pods informer is the product's own
(SharedInformerFactory with the pod view the webhook and the controller keep)."""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator

import pytest
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.informer import SharedInformerFactory
from harvester_quota.generic.intake import SkippedObject
from harvester_quota.generic.resource import PODS
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.util.podusage import strip_pod_to_quota_fields
from harvester_quota.util.resourcequota.podindex import PodIndex, pod_view

from tests.helpers import eventually
from tests.integration.tenant import Tenant, tenant

INT64_MAX = 2**63 - 1
HOLD = "example.com/hold"
"""A finalizer of the tenant's own, so that the deleted pod stays with its deletion fields."""


@pytest.fixture
async def the_tenant(api: ApiClient, cluster: ClusterInfo, namespace: str) -> AsyncIterator[Tenant]:
    async with tenant(api, cluster, namespace, cluster_roles=("edit",)) as found:
        yield found


async def _delete_with_the_largest_grace_accepted(the_tenant: Tenant, name: str) -> int:
    """Deletes the pod with the largest grace period the API server accepts, trying int64's
    maximum first; returns the one it took."""
    for grace in (INT64_MAX, 2**62, 10**12):
        try:
            await the_tenant.api.delete(
                PODS, name, the_tenant.namespace, grace_period_seconds=grace
            )
        except errors.ApiError:
            continue
        return grace
    raise AssertionError("the API server accepted no large grace period")


async def test_a_pod_deleted_with_an_int64_grace_period_stops_no_pods_cache(
    api: ApiClient, namespace: str, the_tenant: Tenant
) -> None:
    """The API server stores the grace period as given (its own deadline arithmetic wraps); the
    product's pods cache syncs with the pod in it, counting, and keeps taking other pods."""
    pod = {
        "metadata": {"name": "held", "finalizers": [HOLD]},
        "spec": {
            "nodeName": "no-such-node",  # bound: a graceful delete keeps its grace period
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }
    await the_tenant.api.create(PODS, pod, namespace)
    grace = await _delete_with_the_largest_grace_accepted(the_tenant, "held")
    stored = await api.get(PODS, "held", namespace)
    skips: list[SkippedObject] = []
    factory = SharedInformerFactory(api, namespace=namespace, skips=skips.append)
    informer = factory.informer(PODS, transform=strip_pod_to_quota_fields)
    index = PodIndex()
    informer.store.add_view(PodIndex.VIEW, pod_view, index.changed)
    factory.start()
    try:
        assert await factory.wait_for_cache_sync(60), "a fresh replica syncs"
        views = {v.name: v for v in index.namespace(namespace)}
        assert "held" in views, (grace, stored["metadata"])
        view = views["held"]
        assert view.error is None and view.deadline is not None
        assert view.counts(datetime.datetime.now(datetime.UTC)), "it counts while it exists"
        await the_tenant.create_pod("after", cpu="10m", memory="10Mi")
        await eventually(
            lambda: "after" in {v.name for v in index.namespace(namespace)},
            what="a pod created afterwards in the cache",
        )
        assert not skips
    finally:
        await factory.stop()
        await api.patch(PODS, "held", {"metadata": {"finalizers": None}}, namespace)
