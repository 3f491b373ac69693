"""What a tenant may not stop, with the product deployed as users deploy it (issue 38, gap 3):
the controllers and the webhook run as their service accounts with the chart's RBAC, the webhook
over TLS behind the shipped configuration (test_webhook_deployed.deployed). A tenant with the
edit roles first plants both poisons (its pod deleted with int64's largest grace period, and a
VMI nested 2000 levels deep); fresh replicas of both then sync, and the webhook answers with
what its caches hold (it denies lowering the base below what the namespace uses)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import PODS
from harvester_quota.testbench.localcluster import ClusterInfo

from tests.helpers import eventually
from tests.integration.tenant import Tenant, tenant
from tests.integration.test_deep_json_on_kubevirt_crds import create_raw, vmi_bytes
from tests.integration.test_tenant_availability import HOLD, _delete_with_the_largest_grace_accepted
from tests.integration.test_webhook_deployed import V170_HARD, V170_LIMIT, denial, deployed

DEPTH = 2000


@pytest.fixture
async def the_tenant(api: ApiClient, cluster: ClusterInfo, namespace: str) -> AsyncIterator[Tenant]:
    async with tenant(api, cluster, namespace) as found:
        yield found


async def plant_poisons(the_tenant: Tenant) -> None:
    """The tenant's two poisons, planted with its own identity before the product starts."""
    pod = {
        "metadata": {"name": "held", "finalizers": [HOLD]},
        "spec": {"nodeName": "no-such-node", "containers": [{"name": "c", "image": "busybox"}]},
    }
    await the_tenant.api.create(PODS, pod, the_tenant.namespace)
    await _delete_with_the_largest_grace_accepted(the_tenant, "held")
    assert await create_raw(the_tenant, vmi_bytes("deep", DEPTH)) == 201


async def test_deployed_replicas_sync_and_answer_despite_a_tenants_poisons(
    api: ApiClient, cluster: ClusterInfo, namespace: str, the_tenant: Tenant, tmp_path: Path
) -> None:
    await plant_poisons(the_tenant)
    try:
        async with deployed(api, cluster, namespace, tmp_path) as (admin, kubevirt, app, _):
            await eventually(app.ready, what="the controller's caches synced (readiness)")
            await admin.set_rancher_base(V170_LIMIT)
            await admin.create_quota(V170_HARD)
            await kubevirt.start_vm("vm1")

            async def try_lowering() -> str | None:
                return await denial(
                    admin.set_rancher_base({"limitsCpu": "3000m", "limitsMemory": "4000Mi"})
                )

            message = await eventually(try_lowering, what="the webhook to answer and deny")
            assert "lower than what the namespace uses now" in message
    finally:
        await api.patch(PODS, "held", {"metadata": {"finalizers": None}}, namespace)
