"""KubeVirt MTQ's e2e cases that test_mtq.py did not cover, with KubeVirt's real virt-controller:
"max parallel migration is being considered" (migrations KubeVirt holds back for its
parallel-migration limits take no lock, so every window is short and all complete) and
"migrations in different namespaces with multiple blocking RQs" (each namespace its own budget,
all released, every quota restored)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from functools import partial

import pytest
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import NAMESPACES, RESOURCE_QUOTAS, Resource
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.sim.kubevirt import Outcome, ParallelLimits, VMSpec
from harvester_quota.testbench.sim.kubevirt.handler import HandlerTimings
from harvester_quota.testbench.sim.kubevirt.simulator import set_overhead_ratio_setting
from harvester_quota.testbench.virtcontroller import VirtControllerDriver
from harvester_quota.util.quantity import Quantity

from tests.helpers import eventually
from tests.integration.kubevirt_by_hand import KubeVirtByHand
from tests.integration.test_controllers_on_kubevirt import (
    MIGRATION_TIMEOUT,
    set_ratio,
    wait_refused,
)
from tests.integration.test_mtq import (
    QUOTA,
    Controllers,
    controllers,
    create_vmmrq,
    restored,
    tenant_quota,
)

pytestmark = pytest.mark.integration
__all__ = ["controllers"]  # the fixture

SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
TIMINGS = HandlerTimings(migration=0.5, source_shutdown=1.0, target_exit=0.5)
LONGEST_WINDOW = 10.0
"""MTQ's own e2e fails a lock older than 10 s while migrations queue behind the limits."""
SLOW_MIGRATION = 6.0
"""Long enough that a lock held for the migrations queued behind the first outlasts
LONGEST_WINDOW (two of them: 12 s and more)."""


async def real_kubevirt(
    api: ApiClient,
    cluster: ClusterInfo,
    namespaces: frozenset[str],
    limits: ParallelLimits,
    timings: HandlerTimings = TIMINGS,
) -> AsyncIterator[VirtControllerDriver]:
    driver = VirtControllerDriver(
        api,
        kubevirt_version=str(cluster.kubevirt_version),
        namespaces=namespaces,
        timings=timings,
        limits=limits,
    )
    async with driver:
        await set_ratio(driver, "1.5")
        yield driver
    await set_overhead_ratio_setting(api, "1.5")


@pytest.fixture
async def one_at_a_time(
    kubevirt_api: ApiClient, kubevirt_cluster: ClusterInfo, kubevirt_namespace: str
) -> AsyncIterator[VirtControllerDriver]:
    """KubeVirt migrating one VM at a time out of a node (parallelOutboundMigrationsPerNode 1),
    each migration taking SLOW_MIGRATION seconds once its target pod runs."""
    async for driver in real_kubevirt(
        kubevirt_api,
        kubevirt_cluster,
        frozenset({kubevirt_namespace}),
        ParallelLimits(8, 1),
        HandlerTimings(migration=SLOW_MIGRATION, source_shutdown=1.0, target_exit=0.5),
    ):
        yield driver


async def used(kv: KubeVirtByHand, key: str, name: str = QUOTA) -> Quantity:
    quota = await kv.api.get(RESOURCE_QUOTAS, name, kv.namespace)
    return Quantity.parse(str(((quota.get("status") or {}).get("used") or {}).get(key, "0")))


async def used_once_counted(kv: KubeVirtByHand, key: str, name: str = QUOTA) -> Quantity | None:
    """What the quota counts on `key`, once it counts something."""
    value = await used(kv, key, name)
    return value if value.sign() > 0 else None


async def test_migrations_held_back_by_kubevirts_limits_take_no_lock(
    kubevirt_api: ApiClient,
    kubevirt_namespace: str,
    one_at_a_time: VirtControllerDriver,
    controllers: Controllers,
) -> None:
    """Three VMs on one node, a quota full to their limits.memory and a budget as large, all
    three migrated at once: KubeVirt creates one target pod at a time, so the others cannot be
    released before; no window is held for them, every window ends when its target pod is
    admitted, and all three complete."""
    kv, kubevirt, key = (
        KubeVirtByHand(kubevirt_api, kubevirt_namespace),
        one_at_a_time,
        "limits.memory",
    )
    await tenant_quota(kv, {key: "1000Gi"})
    vms = ["vm1", "vm2", "vm3"]
    (await kubevirt.create_vm(VMSpec(vms[0], cores=1, memory="1Gi"), node="kwok-node-0")).check()
    one = await eventually(lambda: used_once_counted(kv, key), what="one launcher's usage")
    for vm in vms[1:]:
        (await kubevirt.create_vm(VMSpec(vm, cores=1, memory="1Gi"), node="kwok-node-0")).check()
    full = one * 3

    async def all_counted() -> bool:
        return await used(kv, key) == full

    await eventually(all_counted, what="three launchers counted")
    await kv.api.patch(RESOURCE_QUOTAS, QUOTA, {"spec": {"hard": {key: str(full)}}}, kv.namespace)
    names = [await kubevirt.migrate(vm) for vm in vms]
    await wait_refused(kubevirt, kv.namespace, names[0])
    app = await controllers.start()
    await create_vmmrq(kv, {key: str(full)})
    for name in names:
        record = await kubevirt.wait_migration(name, timeout=MIGRATION_TIMEOUT * 3)
        assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
    await eventually(lambda: restored(kv, {key: str(full)}), what="quota restored, unlocked")
    assert app.mtq is not None
    stats = app.mtq.stats
    print(f"\nMTQ, one at a time: {stats.locks} windows, longest {stats.longest_hold:.2f}s")
    assert stats.longest_hold < LONGEST_WINDOW, stats


@pytest.fixture
async def three_namespaces(kubevirt_api: ApiClient) -> AsyncIterator[list[str]]:
    names = [f"mtq-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    for name in names:
        await kubevirt_api.create(NAMESPACES, {"metadata": {"name": name}})

    async def accounts() -> bool:
        for name in names:
            try:
                await kubevirt_api.get(SERVICE_ACCOUNTS, "default", name)
            except errors.NotFound:
                return False
        return True

    await eventually(accounts, what="default service accounts")
    yield names
    for name in names:
        await kubevirt_api.delete(NAMESPACES, name)


@pytest.fixture
async def kubevirt_in_three(
    kubevirt_api: ApiClient, kubevirt_cluster: ClusterInfo, three_namespaces: list[str]
) -> AsyncIterator[VirtControllerDriver]:
    async for driver in real_kubevirt(
        kubevirt_api, kubevirt_cluster, frozenset(three_namespaces), ParallelLimits(8, 4)
    ):
        yield driver


KEYS = ("requests.ephemeral-storage", "requests.memory", "requests.cpu")
"""MTQ's e2e: three quotas per namespace, one key each."""
ROOMY = {
    "requests.ephemeral-storage": "1000Gi",
    "requests.memory": "1000Gi",
    "requests.cpu": "1000",
}


async def test_migrations_in_three_namespaces_each_with_three_blocking_quotas(
    kubevirt_api: ApiClient,
    three_namespaces: list[str],
    kubevirt_in_three: VirtControllerDriver,
    controllers: Controllers,
) -> None:
    kubevirt = kubevirt_in_three
    full: dict[str, dict[str, str]] = {}
    for namespace in three_namespaces:
        kv = KubeVirtByHand(kubevirt_api, namespace)
        for key in KEYS:
            await kubevirt_api.create(
                RESOURCE_QUOTAS,
                {"metadata": {"name": _quota(key)}, "spec": {"hard": {key: ROOMY[key]}}},
                namespace,
            )
        spec = VMSpec("vm1", cores=1, memory="1Gi")
        (await kubevirt.create_vm(spec, namespace, node="kwok-node-0")).check()
        full[namespace] = {}
        for key in KEYS:
            value = await eventually(
                partial(used_once_counted, kv, key, _quota(key)), what=f"{namespace} {key} used"
            )
            full[namespace][key] = str(value)
            await kubevirt_api.patch(
                RESOURCE_QUOTAS, _quota(key), {"spec": {"hard": {key: str(value)}}}, namespace
            )
    names = {ns: await kubevirt.migrate("vm1", ns) for ns in three_namespaces}
    for namespace, name in names.items():
        await wait_refused(kubevirt, namespace, name)
    await controllers.start()
    for namespace in three_namespaces:
        await create_vmmrq(KubeVirtByHand(kubevirt_api, namespace), full[namespace])
    for namespace, name in names.items():
        # virt-controller's backoff grew while the three were refused one after another: a lock
        # window may end before its next try, and the next window opens 60 s later
        # (windows.RETRY_AFTER_EXPIRY), as in the test above.
        record = await kubevirt.wait_migration(name, namespace, timeout=MIGRATION_TIMEOUT * 3)
        assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
    for namespace in three_namespaces:
        kv = KubeVirtByHand(kubevirt_api, namespace)
        for key in KEYS:
            await eventually(
                partial(restored, kv, {key: full[namespace][key]}, _quota(key)),
                what=f"{namespace} {key} restored",
            )


def _quota(key: str) -> str:
    return "rq-" + key.replace(".", "-")
