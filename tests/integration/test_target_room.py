"""KubeVirt's target pods are never refused by quota, also when they arrive before the raise.

KubeVirt's real virt-controller creates the target pod the moment it sees the migration, racing
our controller's raise; quota admission runs after the webhooks, so our deployed webhook (its
service account, deploy/'s RBAC and rules, called by the API server over TLS) holds the target
pod's admission until the raise is in the quota's status (pod/targets.py). Refusals are counted
from what KubeVirt reports (FailedCreate events on the VMI, the migrationRejectedByResourceQuota
condition on the migration, seen by a watch of our own), not from our bookkeeping.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Self

import pytest
from harvester_quota.apis.kubevirt import (
    CONDITION_REJECTED_BY_QUOTA,
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
)
from harvester_quota.app import ControllerApp
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import EVENTS, RESOURCE_QUOTAS, Object, Resource
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.sim.kubevirt import Outcome, VMSpec
from harvester_quota.testbench.virtcontroller import EXCEEDED_QUOTA, VirtControllerDriver
from harvester_quota.util.quantity import Quantity
from harvester_quota.webhook.server import WebhookServer

from tests.helpers import caught_up, cpu_burners, eventually
from tests.integration import deployment
from tests.integration.kubevirt_by_hand import KubeVirtByHand
from tests.integration.test_attachment_differential import (
    attachment_pods,
    bound_claims,
    hotplug,
    live_migrate_workload_updates,
    start_vm_with_claim,
    swap_claim,
)
from tests.integration.test_controllers_on_kubevirt import (
    MIGRATION_TIMEOUT,
    SpecHistory,
    as_quantities,
    back_to_the_base,
    hard_equals,
    kubevirt,
    kv,
    quota_used_by_pods,
    refusals,
    v170_namespace,
)

pytestmark = pytest.mark.integration
__all__ = ["kubevirt", "kv"]  # fixtures: the real virt-controller and the quota helpers


@pytest.fixture
async def webhook(
    kubevirt_api: ApiClient, kubevirt_cluster: ClusterInfo, kubevirt_namespace: str, tmp_path: Path
) -> AsyncIterator[WebhookServer]:
    async with deployment.webhook_for_virt_controller(
        kubevirt_api, kubevirt_cluster, kubevirt_namespace, tmp_path
    ) as server:
        yield server


@pytest.fixture
async def deployed_controllers(
    kubevirt_api: ApiClient, kubevirt_cluster: ClusterInfo
) -> AsyncIterator[ControllerApp]:
    """The controllers as their service account with deploy/'s RBAC, not yet started."""
    await deployment.apply_rbac(kubevirt_api)
    async with deployment.controllers_as_account(
        kubevirt_api, kubevirt_cluster, start=False
    ) as app:
        yield app


class NamespaceWatch:
    """A watch of our own of one resource in one namespace, from the API server's cache
    (resourceVersion 0), each ADDED or MODIFIED object handed to `on_object`, in the order of
    the watch, while the block runs.
    A watch that died is a broken test: leaving the block raises its error."""

    resource: Resource

    def __init__(self, api: ApiClient, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self._task: asyncio.Task[None] | None = None

    def on_object(self, obj: Object) -> None:
        raise NotImplementedError

    async def _watch(self) -> None:
        async for event in self.api.watch(self.resource, self.namespace, resource_version="0"):
            if event.type in ("ADDED", "MODIFIED"):  # bookmarks carry no object
                self.on_object(event.object)

    async def __aenter__(self) -> Self:
        self._task = asyncio.ensure_future(self._watch())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        if self._task.done():
            self._task.result()  # a watch that died is a broken test, not "never seen"
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


class RejectionWatch(NamespaceWatch):
    """Names of the namespace's migrations that ever carried KubeVirt's
    migrationRejectedByResourceQuota condition."""

    resource = VIRTUAL_MACHINE_INSTANCE_MIGRATIONS

    def __init__(self, api: ApiClient, namespace: str) -> None:
        super().__init__(api, namespace)
        self.rejected: set[str] = set()
        self.seen: set[str] = set()

    def on_object(self, obj: Object) -> None:
        name = obj["metadata"]["name"]
        self.seen.add(name)
        conditions = (obj.get("status") or {}).get("conditions") or []
        if any(c.get("type") == CONDITION_REJECTED_BY_QUOTA for c in conditions):
            self.rejected.add(name)


def outcomes(server: WebhookServer) -> dict[str, float]:
    """The webhook's target pod counts by outcome, and the seconds they waited in all (its
    metrics)."""
    counts = {
        sample.labels["outcome"]: sample.value
        for metric in server.metrics.target_pods.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    }
    waited = {
        sample.name.rsplit("_", 1)[-1]: round(sample.value, 2)
        for metric in server.metrics.target_wait.collect()
        for sample in metric.samples
        if sample.name.endswith(("_sum", "_count"))
    }
    return {**counts, "seconds waited": waited.get("sum", 0.0)}


async def test_a_target_pod_created_before_the_raise_waits_for_it_and_is_never_refused(
    webhook: WebhookServer,
    deployed_controllers: ControllerApp,
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
) -> None:
    """The worst case of the race, made certain: the controllers start only once virt-controller's
    target pod is waiting in our webhook. Without the wait quota admission refuses it at once
    (test_controllers_on_kubevirt's first test shows that refusal)."""
    await v170_namespace(kv, kubevirt)
    async with RejectionWatch(kv.api, kv.namespace) as watch:
        name = await kubevirt.migrate("vm1")
        await eventually(
            lambda: webhook.quota_changes.waiting() == 1, what="the target pod waiting for room"
        )
        await deployed_controllers.start()
        record = await kubevirt.wait_migration(name, timeout=MIGRATION_TIMEOUT)
        assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
        await back_to_the_base(kv, deployed_controllers)
        await assert_never_refused(kubevirt, kv, watch, [name])
    assert outcomes(webhook)["fitted-after-wait"] == 1, outcomes(webhook)


async def test_migrations_on_a_loaded_machine_are_never_refused(
    webhook: WebhookServer,
    deployed_controllers: ControllerApp,
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
) -> None:
    """Two CPU burners beside the cluster: three migrations of the v1.7.0 seed's VM one after
    another (the quota raised and given back each time). KubeVirt reports no refusal."""
    await deployed_controllers.start()
    names: list[str] = []
    async with RejectionWatch(kv.api, kv.namespace) as watch:
        with cpu_burners(2):
            await v170_namespace(kv, kubevirt)
            for _ in range(3):
                names.append(await kubevirt.migrate("vm1"))
                record = await kubevirt.wait_migration(names[-1], timeout=MIGRATION_TIMEOUT)
                assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
                await back_to_the_base(kv, deployed_controllers)
        print(f"webhook target pods by outcome: {outcomes(webhook)}")
        await assert_never_refused(kubevirt, kv, watch, names)


async def test_four_migrations_at_once_on_a_loaded_machine_are_never_refused(
    webhook: WebhookServer,
    deployed_controllers: ControllerApp,
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
) -> None:
    """Two CPU burners beside the cluster: the v1.2.1 seed's shape, four VMs filling their quota
    exactly, all four migrating at once. KubeVirt reports no refusal."""
    vms = [f"vm{i}" for i in range(1, 5)]
    for vm in vms:
        (await kubevirt.create_vm(VMSpec(vm, cores=1, memory="2Gi"), node="kwok-node-0")).check()
    used = await quota_used_by_pods(kv)
    await kv.create_quota(used)
    await deployed_controllers.start()
    async with RejectionWatch(kv.api, kv.namespace) as watch:
        with cpu_burners(2):
            names = [await kubevirt.migrate(vm) for vm in vms]
            records = [await kubevirt.wait_migration(n, timeout=MIGRATION_TIMEOUT) for n in names]
        outcome = [r.outcome for r in records]
        assert outcome == [Outcome.SUCCEEDED] * 4, [r.as_dict() for r in records]
        print(f"webhook target pods by outcome: {outcomes(webhook)}")
        await assert_never_refused(kubevirt, kv, watch, names)


async def assert_never_refused(
    kubevirt: VirtControllerDriver, kv: KubeVirtByHand, watch: RejectionWatch, names: list[str]
) -> None:
    """No quota refusal KubeVirt reported: no "exceeded quota" FailedCreate event in the
    namespace (listed now, and as the driver's records counted them per migration), and no
    migration that ever carried the rejected condition."""
    await eventually(lambda: watch.seen >= set(names), what="the watch has every migration")
    listed = await kv.api.list(EVENTS, kv.namespace, field_selector="reason=FailedCreate")
    refused = [e["message"] for e in listed["items"] if EXCEEDED_QUOTA in e.get("message", "")]
    counted = {name: refusals(kubevirt, kv.namespace, name) for name in names}
    assert watch.rejected == set(), (watch.rejected, refused)
    assert sum(counted.values()) == 0, (counted, refused)
    assert refused == [], refused


# ----------------------------------------------------------------------------------------------
# Every pod a migration makes, every kind of migration (issue 29)

KEYS = ("pods", "limits.cpu", "limits.memory", "requests.cpu", "requests.memory")


async def no_slack(kv: KubeVirtByHand, app: ControllerApp, pods: int) -> dict[str, str]:
    """The quota's hard set to exactly what the namespace's `pods` pods use, on KEYS; returns
    it once the controller has recorded it as the base."""

    async def used_by_all() -> dict[str, str] | None:
        used = ((await kv.quota()).get("status") or {}).get("used") or {}
        return {k: str(used[k]) for k in KEYS} if used.get("pods") == str(pods) else None

    base: dict[str, str] = await eventually(used_by_all, what=f"{pods} pods charged")
    await kv.api.patch(RESOURCE_QUOTAS, "default-quota", {"spec": {"hard": base}}, kv.namespace)
    await eventually(lambda: hard_equals(kv, base), what="the base set")
    await eventually(lambda: caught_up(app, kv.namespace), what="the base recorded")
    return base


async def completes_and_gives_back(
    kubevirt: VirtControllerDriver,
    kv: KubeVirtByHand,
    app: ControllerApp,
    watch: RejectionWatch,
    *,
    name: str,
    base: dict[str, str],
) -> None:
    """Migration `name` succeeds, the quota's hard is back at `base` with the controller caught
    up, and KubeVirt never reported a refusal (`assert_never_refused`)."""
    record = await kubevirt.wait_migration(name, timeout=MIGRATION_TIMEOUT)
    assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
    await eventually(lambda: hard_equals(kv, base), what="hard back to the base")
    await eventually(lambda: caught_up(app, kv.namespace), what="caught up")
    await assert_never_refused(kubevirt, kv, watch, [name])


async def test_a_vm_with_a_hotplugged_volume_migrates_in_a_namespace_without_slack(
    webhook: WebhookServer,
    deployed_controllers: ControllerApp,
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
) -> None:
    """A VM with a hotplugged volume (a statically bound PV/PVC pair) runs beside
    virt-controller's attachment pod, in a namespace whose quota is exactly what the two use,
    pods included. The migration's target side is two pods: the target launcher and, once it is
    ready, virt-controller's attachment pod beside it; the room covers both (sized without the
    attachment pod, the raise left pods and limits.cpu short and the attachment pod was refused
    for good: the migration never finished). KubeVirt reports no refusal, hard returns to the
    base, the quota is written twice."""
    app = deployed_controllers
    await app.start()
    (claim,) = await bound_claims(kv.api, kv.namespace, 1)
    # Before the pods, so quota admission charges each as it is created: kube-controller-
    # manager's first count of a new quota may miss a pod created just before it, and
    # counts again only at its resync (minutes).
    await kv.create_quota({k: "1000Gi" if "memory" in k else "1000" for k in KEYS})
    (await kubevirt.create_vm(VMSpec("vm1", cores=2, memory="4Gi"), node="kwok-node-0")).check()
    await hotplug(kv.api, kv.namespace, "vm1", [claim], declarative=False)
    await eventually(
        lambda: attachment_pods(kv.api, kv.namespace), what="the VMI's attachment pod", timeout=90
    )
    base = await no_slack(kv, app, 2)
    before = app.reconciler.writes[kv.namespace]
    async with (
        RejectionWatch(kv.api, kv.namespace) as watch,
        SpecHistory(kv.api, kv.namespace) as history,
    ):
        name = await kubevirt.migrate("vm1")
        await completes_and_gives_back(kubevirt, kv, app, watch, name=name, base=base)
    assert app.reconciler.writes[kv.namespace] - before == 2
    raised = as_quantities(history.hards[1])
    assert raised["pods"] == Quantity.parse("4"), f"launcher and attachment pod: {history.hards}"


async def test_a_volume_migration_completes_in_a_namespace_without_slack(
    webhook: WebhookServer,
    deployed_controllers: ControllerApp,
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
) -> None:
    """A VM with updateVolumesStrategy Migration in a namespace whose quota is exactly what its
    launcher pod uses; its claim is swapped, and virt-controller's workload updater creates the
    migration itself. The room is the target pod mounting the new claim: KubeVirt reports no
    refusal, hard returns to the base, the quota is written twice."""
    app = deployed_controllers
    await app.start()
    source_claim, target_claim = await bound_claims(kv.api, kv.namespace, 2)
    await kv.create_quota({k: "1000Gi" if "memory" in k else "1000" for k in KEYS})
    async with live_migrate_workload_updates(kv.api):
        spec = VMSpec("vm1", cores=2, memory="4Gi")
        template = await start_vm_with_claim(kv.api, kv.namespace, kubevirt, spec, source_claim)
        base = await no_slack(kv, app, 1)
        before = app.reconciler.writes[kv.namespace]
        async with (
            RejectionWatch(kv.api, kv.namespace) as watch,
            SpecHistory(kv.api, kv.namespace) as history,
        ):
            migration = await swap_claim(kv.api, kv.namespace, template, target_claim)
            name = migration["metadata"]["name"]
            await completes_and_gives_back(kubevirt, kv, app, watch, name=name, base=base)
    assert app.reconciler.writes[kv.namespace] - before == 2
    assert as_quantities(history.hards[1])["pods"] == Quantity.parse("2"), history.hards
