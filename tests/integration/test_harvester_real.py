"""Harvester v1.8.2's own migration and resourcequota controllers, built from its Go module
(`harvester-quota-bench cluster build --harvester v1.8.2`), on a cluster of their own: they act on
every namespace, so they must not share the session's cluster.

`make test` builds the binary first (its `make cluster-bin` runs `cluster build --harvester all`).
Skipped when it is missing all the same: pytest run without that build, e.g. with a prebuilt
HARVESTER_QUOTA_CLUSTER_BIN that has no harvester-v1.8.2/harvester-controllers.
Run alone with your own state directory, e.g.
HARVESTER_QUOTA_TEST_STATE_DIR=/tmp/hq-pytest-harvester pytest tests/integration/test_harvester_real.py
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from harvester_quota.apis.kubevirt import VIRTUAL_MACHINES
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import RESOURCE_QUOTAS, Object
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.scale.harvester import HarvesterRealProduct
from harvester_quota.testbench.scale.product import Metrics
from harvester_quota.util.quantity import Quantity

from tests.helpers import eventually
from tests.integration.conftest import fresh_namespace_async
from tests.integration.kubevirt_by_hand import KubeVirtByHand

pytestmark = pytest.mark.integration

UID_KEY_PREFIX = "harvesterhci.io/migratingUID-"


@pytest.fixture
async def harvester_api(harvester_cluster: ClusterInfo) -> AsyncIterator[ApiClient]:
    async with ApiClient(harvester_cluster.admin_config()) as client:
        yield client


async def create_vm(api: ApiClient, vmi: Object) -> Object:
    """The VirtualMachine of a VMI made by hand: Harvester's migration controller updates it."""
    meta = vmi["metadata"]
    vm = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "spec": {"runStrategy": "Always", "template": {"spec": vmi["spec"]}},
    }
    return await api.create(VIRTUAL_MACHINES, vm, meta["namespace"])


async def test_harvester_raises_the_quota_for_a_pending_migration_and_guards_rancher_base(
    harvester_api: ApiClient,
) -> None:
    async with fresh_namespace_async(harvester_api, "harv") as namespace:
        kv = KubeVirtByHand(harvester_api, namespace)
        await kv.set_rancher_base({"limitsCpu": "3000m", "limitsMemory": "5000Mi"})
        await kv.create_quota({"limits.cpu": "3", "limits.memory": "5000Mi"})
        vmi, _source = await kv.start_vm("vm1")
        await create_vm(harvester_api, vmi)
        await kv.migrate(vmi)

        async def raised() -> Object | None:
            quota = await harvester_api.get(RESOURCE_QUOTAS, "default-quota", namespace)
            hard = quota["spec"]["hard"]
            return quota if Quantity.parse(hard["limits.cpu"]) > Quantity.parse("3") else None

        quota = await eventually(raised, timeout=60, what="Harvester's raise of default-quota")

        # Harvester's namespace validator refuses Rancher's annotation while a migration is on.
        with pytest.raises(errors.ApiError) as refused:
            await kv.set_rancher_base({"limitsCpu": "4000m", "limitsMemory": "5000Mi"})
        assert "has migrating VMs, can't change resource quotas" in str(refused.value)

    annotations = quota["metadata"].get("annotations") or {}
    keys = [key for key in annotations if key.startswith(UID_KEY_PREFIX)]
    assert keys == [UID_KEY_PREFIX + vmi["metadata"]["uid"]], annotations
    room = json.loads(annotations[keys[0]])
    hard = quota["spec"]["hard"]
    # base + one room: the VM's CPU limit, and its memory limit plus KubeVirt's overhead
    assert Quantity.parse(hard["limits.cpu"]) == Quantity.parse("5")
    assert room["limits.cpu"] == "2"
    expected_memory = Quantity.parse("5000Mi") + Quantity.parse(room["limits.memory"])
    assert Quantity.parse(hard["limits.memory"]) == expected_memory
    assert Quantity.parse(room["limits.memory"]) > Quantity.parse("4Gi")


async def test_the_scale_run_counts_harvester_s_quota_vmi_and_vm_writes_from_the_audit_log(
    harvester_cluster: ClusterInfo, harvester_api: ApiClient
) -> None:
    """`scale --strategy harvester`'s product: it runs nothing, waits for Harvester's Lease, and
    counts the writes Harvester's controllers make for one pending migration (its UID key and
    its raise of the quota, the VMI's migration annotations, the VM's touch) from the real audit
    log, by kind, with its process's CPU."""
    product = HarvesterRealProduct(harvester_cluster)
    await product.start()
    before = await product.metrics()
    async with fresh_namespace_async(harvester_api, "harvcount") as namespace:
        kv = KubeVirtByHand(harvester_api, namespace)
        await kv.set_rancher_base({"limitsCpu": "3000m", "limitsMemory": "5000Mi"})
        await kv.create_quota({"limits.cpu": "3", "limits.memory": "5000Mi"})
        vmi, _source = await kv.start_vm("vm1")
        await create_vm(harvester_api, vmi)
        await kv.migrate(vmi)

        async def counted() -> Metrics | None:
            step = (await product.metrics()).minus(before)
            done = step.writes.get("spec", 0) >= 2 and step.writes.get("vm", 0) >= 1
            return step if done else None

        step = await eventually(counted, timeout=60, what="Harvester's writes in the audit log")
    # Its migration controller records the UID key, its resourcequota controller raises: two
    # accepted quota updates; the VMI's annotations (written as KubeVirt's account) are its own.
    assert step.quota_writes.get("written", 0) >= 2, step
    assert step.writes.get("vmi", 0) >= 1, step
    assert step.requests.get(("update", "resourcequotas"), 0) >= 2, step
    assert step.writes.get("status", 0) == 0, "kube-controller-manager's status writes are not its"
    # Its CPU is its process's (harvester-controllers), read from /proc.
    assert set(product.pids) == {"controller"}
    assert (await product.metrics()).cpu_seconds > 0
