"""Managed-Tenant-Quota mode on the local cluster with KubeVirt's real virt-controller: a VMMRQ
created as MTQ documents it unblocks a refused migration, the quotas come back exactly, the lock
refuses squatters and edits until its deadline, the controller killed at every step ends with the
original quotas and no lock, a budget too small is said once, and a shared budget serves several
migrations. The controllers and the webhook run as their service accounts under deploy/'s RBAC
and rules; real quota admission decides every pod.

The seeds' numbers (Harvester v1.7.0): a quota of 3 CPU / 5000Mi limits, a 2-core/4Gi VM whose
launcher uses 2015m / 4797464313 at ratio 1.5, so its migration target cannot fit.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Final

import pytest
from harvester_quota.apis.kubevirt import VIRTUAL_MACHINE_INSTANCE_MIGRATIONS
from harvester_quota.apis.mtq import VMMRQS
from harvester_quota.app import ControllerApp
from harvester_quota.config.management import Options
from harvester_quota.controller.mtq.writes import FINALIZER
from harvester_quota.explain import explain
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.leader import LeaderElectionConfig, LeaderElector
from harvester_quota.generic.resource import (
    EVENTS,
    LIMIT_RANGES,
    NAMESPACES,
    PODS,
    RESOURCE_QUOTAS,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
    Object,
)
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.sim.kubevirt import Outcome, VMSpec
from harvester_quota.testbench.sim.rancher.twin import RancherWebhookTwin
from harvester_quota.testbench.virtcontroller import EXCEEDED_QUOTA, VirtControllerDriver
from harvester_quota.util import resources
from harvester_quota.util.mtq import (
    ANNOTATION_LOCK,
    LABEL_LOCKED,
    NOT_ENOUGH_REASON,
    RANCHER_PROTECTED_REASON,
    Lock,
    parse_lock,
)
from harvester_quota.util.mtqlock import REASON as LEFTOVER_REASON
from harvester_quota.util.podusage import pod_quota_usage
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.resources import parse_resource_list_leniently
from harvester_quota.webhook.server import WebhookServer
from prometheus_client import CollectorRegistry

from tests.helpers import eventually
from tests.integration import deployment
from tests.integration.kubevirt_by_hand import KubeVirtByHand
from tests.integration.tenant import Tenant, grant, tenant
from tests.integration.test_controllers_on_kubevirt import (
    MIGRATION_TIMEOUT,
    V170_HARD,
    V170_LIMIT,
    V170_ROOM,
    kubevirt,
    kv,
    wait_refused,
)
from tests.objects import kubevirt_mtq_lock

pytestmark = pytest.mark.integration
__all__ = ["kubevirt", "kv"]  # fixtures: the real virt-controller and the quota helpers

QUOTA = "tenant-quota"
"""A plain ResourceQuota, as a tenant administrator writes it (not Rancher's labelled one)."""


@pytest.fixture
async def webhook(
    kubevirt_api: ApiClient, kubevirt_cluster: ClusterInfo, kubevirt_namespace: str, tmp_path: Path
) -> AsyncIterator[WebhookServer]:
    async with deployment.webhook_for_virt_controller(
        kubevirt_api, kubevirt_cluster, kubevirt_namespace, tmp_path
    ) as server:
        yield server


class Controllers:
    """Starts controller processes (as harvester-quota, deploy/'s RBAC) one after the other."""

    def __init__(self, api: ApiClient, cluster: ClusterInfo) -> None:
        self.api, self.cluster = api, cluster
        self.apps: list[tuple[ControllerApp, ApiClient]] = []
        self.tasks: list[asyncio.Task[None]] = []

    async def start(
        self,
        *,
        lock_seconds: float = 30.0,
        writes: int | None = None,
        namespace: str = "",
        leftover_after: float | None = None,
    ) -> ControllerApp:
        """A new controller process; with `writes`, it dies (writes nothing more) after that
        many writes of `namespace`, its quotas and its VMMRQ; with `leftover_after`, it reports
        KubeVirt MTQ's locks that much younger than it would."""
        client = await deployment.client_as(self.api, self.cluster, "harvester-quota")
        if writes is not None:
            kill_after(client, writes, namespace)
        options = Options(
            leader_elect=False,
            kubevirt_version=str(self.cluster.kubevirt_version),
            harvester_compat=False,
            mtq_lock_seconds=lock_seconds,
        )
        app = ControllerApp(client, options, registry=CollectorRegistry())
        if leftover_after is not None:
            app.leftover_locks.leftover_after = leftover_after
        self.apps.append((app, client))
        await app.start()
        return app

    async def candidate(
        self, lease: str, identity: str, *, writes: int | None = None, namespace: str = ""
    ) -> tuple[ControllerApp, LeaderElector, asyncio.Task[None]]:
        """A replica campaigning for `lease` (in our namespace, as deployed): its controllers
        run only while it leads; with `writes`, as `start`."""
        client = await deployment.client_as(self.api, self.cluster, "harvester-quota")
        if writes is not None:
            kill_after(client, writes, namespace)
        options = Options(
            kubevirt_version=str(self.cluster.kubevirt_version), harvester_compat=False
        )
        app = ControllerApp(client, options, registry=CollectorRegistry())
        elector = LeaderElector(
            client,
            LeaderElectionConfig(
                deployment.SYSTEM_NAMESPACE,
                lease,
                identity,
                lease_duration=6,
                renew_deadline=4,
                retry_period=1,
            ),
            on_started_leading=app.lead,
        )
        self.apps.append((app, client))
        task = asyncio.ensure_future(elector.run())
        self.tasks.append(task)
        return app, elector, task

    async def stop_all(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks.clear()
        for app, client in self.apps:
            await app.stop()
            await client.close()
        self.apps.clear()


def kill_after(client: ApiClient, writes: int, namespace: str) -> None:
    """Fault injection in this process: after `writes` writes of what MTQ writes in
    `namespace` (the namespace, its quotas, its VMMRQ), every such write fails as if the process
    were gone (nothing reaches the API server)."""
    counted = {NAMESPACES, RESOURCE_QUOTAS, VMMRQS}
    left = [writes]
    original_patch, original_status = client.patch, client.update_status

    def spend(resource: Any, where: str | None) -> None:
        if resource in counted and where == namespace:
            if left[0] <= 0:
                raise errors.ConnectionFailed("controller killed (test)")
            left[0] -= 1

    async def patch(
        resource: Any, name: str, body: Any, ns: str | None = None, **kwargs: Any
    ) -> Object:
        spend(resource, name if resource == NAMESPACES else ns)
        return await original_patch(resource, name, body, ns, **kwargs)

    async def update_status(resource: Any, obj: Object) -> Object:
        spend(resource, obj["metadata"].get("namespace"))
        return await original_status(resource, obj)

    client.patch = patch  # type: ignore[method-assign]
    client.update_status = update_status  # type: ignore[method-assign]
    client.killed = left  # type: ignore[attr-defined]


@pytest.fixture
async def controllers(
    kubevirt_api: ApiClient, kubevirt_cluster: ClusterInfo
) -> AsyncIterator[Controllers]:
    await deployment.apply_rbac(kubevirt_api)
    started = Controllers(kubevirt_api, kubevirt_cluster)
    try:
        yield started
    finally:
        await started.stop_all()


async def tenant_quota(kv: KubeVirtByHand, hard: dict[str, str]) -> None:
    """A plain quota; returns once its status is filled (admission waits for it)."""
    await kv.api.create(
        RESOURCE_QUOTAS, {"metadata": {"name": QUOTA}, "spec": {"hard": hard}}, kv.namespace
    )

    async def filled() -> bool:
        quota = await kv.api.get(RESOURCE_QUOTAS, QUOTA, kv.namespace)
        return bool((quota.get("status") or {}).get("hard"))

    await eventually(filled, what="quota status")


async def create_vmmrq(
    kv: KubeVirtByHand, additional: dict[str, str], api: ApiClient | None = None
) -> Object:
    """A VMMRQ exactly as MTQ's example manifest has it, created through `api` (the admin's
    if None)."""
    return await (api or kv.api).create(
        VMMRQS,
        {
            "apiVersion": "mtq.kubevirt.io/v1alpha1",
            "kind": "VirtualMachineMigrationResourceQuota",
            "metadata": {"name": "budget"},
            "spec": {"additionalMigrationResources": additional},
        },
        kv.namespace,
    )


def same(a: dict[str, str], b: dict[str, str]) -> bool:
    return set(a) == set(b) and all(Quantity.parse(str(a[k])) == Quantity.parse(b[k]) for k in a)


async def restored(kv: KubeVirtByHand, original: dict[str, str], name: str = QUOTA) -> bool:
    """The quota is exactly `original`, the namespace unlocked, nothing recorded on the VMMRQ."""
    quota = await kv.api.get(RESOURCE_QUOTAS, name, kv.namespace)
    namespace = await kv.api.get(NAMESPACES, kv.namespace)
    if not same(quota["spec"]["hard"], original):
        return False
    if LABEL_LOCKED in (namespace["metadata"].get("labels") or {}):
        return False
    try:
        budget = await kv.api.get(VMMRQS, "budget", kv.namespace)
    except errors.NotFound:
        return True
    recorded = (budget.get("status") or {}).get("originalBlockingResourceQuotas")
    return not recorded and FINALIZER not in (budget["metadata"].get("finalizers") or [])


async def refused_migration(
    kv: KubeVirtByHand, kubevirt: VirtControllerDriver, vm: str = "vm1"
) -> str:
    """`vm` (2 cores, 4Gi) running, its migration refused by quota at least once."""
    (await kubevirt.create_vm(VMSpec(vm, cores=2, memory="4Gi"), node="kwok-node-0")).check()
    name = await kubevirt.migrate(vm)
    await wait_refused(kubevirt, kv.namespace, name)
    return name


async def test_a_vmmrq_unblocks_a_refused_migration_and_the_quota_comes_back_exactly(
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
    webhook: WebhookServer,
    controllers: Controllers,
) -> None:
    await tenant_quota(kv, V170_HARD)
    name = await refused_migration(kv, kubevirt)
    app = await controllers.start()
    await create_vmmrq(kv, V170_ROOM)
    record = await kubevirt.wait_migration(name, timeout=MIGRATION_TIMEOUT)
    assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
    await eventually(lambda: restored(kv, V170_HARD), what="quota restored, namespace unlocked")
    assert app.mtq is not None
    stats = app.mtq.stats
    assert stats.locks == 1 and stats.quota_writes == 2, stats
    print(
        f"\nMTQ single migration: lock held {stats.longest_hold:.3f}s, "
        f"{stats.quota_writes} quota spec writes, {stats.status_writes} VMMRQ status writes"
    )


async def full_quota_on_one_key_is_released_by_a_budget(
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
    controllers: Controllers,
    key: str,
    *,
    what: str,
) -> None:
    """vm1 runs under a quota on `key` alone, which is then closed to exactly what vm1 uses
    (`what`: where that use comes from); its migration is refused while no controller runs, and
    a VMMRQ budget of that much (controllers started) lets it succeed and the quota come back
    as it was, unlocked."""
    roomy = "1000Gi" if "memory" in key or "storage" in key else "1000"
    await tenant_quota(kv, {key: roomy})
    (await kubevirt.create_vm(VMSpec("vm1", cores=2, memory="4Gi"), node="kwok-node-0")).check()

    async def used() -> str | None:
        quota = await kv.api.get(RESOURCE_QUOTAS, QUOTA, kv.namespace)
        value = ((quota.get("status") or {}).get("used") or {}).get(key)
        return str(value) if value and Quantity.parse(str(value)).sign() > 0 else None

    in_use = await eventually(used, what=what)
    await kv.api.patch(RESOURCE_QUOTAS, QUOTA, {"spec": {"hard": {key: in_use}}}, kv.namespace)
    name = await kubevirt.migrate("vm1")
    await wait_refused(kubevirt, kv.namespace, name)
    await controllers.start()
    await create_vmmrq(kv, {key: in_use})
    record = await kubevirt.wait_migration(name, timeout=MIGRATION_TIMEOUT)
    assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
    await eventually(lambda: restored(kv, {key: in_use}), what="quota restored, unlocked")


KEY_KINDS = [
    "memory",
    "requests.memory",
    "limits.memory",
    "cpu",
    "requests.cpu",
    "limits.cpu",
    "ephemeral-storage",
    "requests.ephemeral-storage",
    "pods",
]
"""MTQ's table of quota keys (its e2e "all types of resources requests and limits")."""


@pytest.mark.parametrize("key", KEY_KINDS)
async def test_every_quota_key_kind_is_raised_and_restored(
    key: str,
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
    webhook: WebhookServer,
    controllers: Controllers,
) -> None:
    """A quota on one key, full to exactly what the running VM uses; a budget of that much."""
    await full_quota_on_one_key_is_released_by_a_budget(
        kv, kubevirt, controllers, key, what=f"{key} used"
    )


async def test_a_limit_range_default_is_charged_to_the_target_and_released(
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
    webhook: WebhookServer,
    controllers: Controllers,
) -> None:
    """MTQ's e2e "should work with LimitRange": the namespace's LimitRange gives every launcher
    container a default ephemeral-storage limit KubeVirt never sets, and a quota on that key is
    full. Only a target pod sized with the default is blocked there, and the budget releases it."""
    default = {"type": "Container", "default": {"ephemeral-storage": "1Gi"}}
    await kv.api.create(
        LIMIT_RANGES,
        {"metadata": {"name": "defaults"}, "spec": {"limits": [default]}},
        kv.namespace,
    )
    key = "limits.ephemeral-storage"
    await full_quota_on_one_key_is_released_by_a_budget(
        kv, kubevirt, controllers, key, what=f"{key} used, from the LimitRange alone"
    )


async def test_a_budget_too_small_is_said_once_and_a_bigger_one_releases(
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
    webhook: WebhookServer,
    controllers: Controllers,
) -> None:
    await tenant_quota(kv, V170_HARD)
    name = await refused_migration(kv, kubevirt)
    await controllers.start()
    # The target needs 2 x 4797464313 - 5000Mi more than the quota's limits.memory; 1Mi less:
    short = {**V170_ROOM, "limits.memory": str(2 * 4797464313 - 5242880000 - 1048576)}
    await create_vmmrq(kv, short)

    async def warnings() -> list[Object]:
        listed = await kv.api.list(EVENTS, kv.namespace)
        return [e for e in listed["items"] if e.get("reason") == NOT_ENOUGH_REASON]

    (event,) = await eventually(warnings, what="NotEnoughResourceToRelease")
    assert event["involvedObject"]["name"] == name
    assert "limits.memory" in event["message"] and "short by 1048576" in event["message"]
    quota = await kv.api.get(RESOURCE_QUOTAS, QUOTA, kv.namespace)
    assert same(quota["spec"]["hard"], V170_HARD), "the quota is not touched"
    await kv.api.patch(
        VMMRQS, "budget", {"spec": {"additionalMigrationResources": V170_ROOM}}, kv.namespace
    )
    record = await kubevirt.wait_migration(name, timeout=MIGRATION_TIMEOUT)
    assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
    await eventually(lambda: restored(kv, V170_HARD), what="quota restored")
    assert len(await warnings()) == 1, "once per change, not once per look"


async def test_several_migrations_share_one_raise(
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
    webhook: WebhookServer,
    controllers: Controllers,
) -> None:
    hard = {"limits.cpu": "4030m", "limits.memory": str(2 * 4797464313)}  # two launchers
    await tenant_quota(kv, hard)
    for vm in ("vm1", "vm2"):
        spec = VMSpec(vm, cores=2, memory="4Gi")
        (await kubevirt.create_vm(spec, node="kwok-node-0")).check()
    names = [await kubevirt.migrate(vm) for vm in ("vm1", "vm2")]
    for name in names:
        await wait_refused(kubevirt, kv.namespace, name)
    app = await controllers.start()
    budget = {"limits.cpu": "4030m", "limits.memory": str(2 * 4797464313)}
    await create_vmmrq(kv, budget)
    for name in names:
        record = await kubevirt.wait_migration(name, timeout=MIGRATION_TIMEOUT)
        assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
    await eventually(lambda: restored(kv, hard), what="quota restored")
    assert app.mtq is not None
    stats = app.mtq.stats
    print(
        f"\nMTQ two migrations: {stats.locks} lock(s), longest held {stats.longest_hold:.3f}s, "
        f"{stats.quota_writes} quota spec writes"
    )
    assert stats.quota_writes <= 2 * stats.locks


async def test_the_room_mode_leaves_a_namespace_with_a_vmmrq_to_mtq(
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
    webhook: WebhookServer,
    controllers: Controllers,
) -> None:
    """Rancher's labelled quota and a VMMRQ in one namespace: MTQ raises and restores it, the
    room mode writes nothing there (no room annotation, no room-held label)."""
    await kv.set_rancher_base(V170_LIMIT)
    await kv.create_quota(V170_HARD)
    await create_vmmrq(kv, V170_ROOM)
    name = await refused_migration(kv, kubevirt)
    app = await controllers.start()
    record = await kubevirt.wait_migration(name, timeout=MIGRATION_TIMEOUT)
    assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
    await eventually(lambda: restored(kv, V170_HARD, "default-quota"), what="quota restored")
    assert app.reconciler.writes[kv.namespace] == 0
    assert app.mtq is not None and app.mtq.stats.quota_writes == 2
    quota = await kv.quota()
    assert not [k for k in quota["metadata"].get("annotations") or {} if "migrating" in k]


def lock_annotation(seconds: float, migrations: dict[str, str] | None = None) -> str:
    until = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds)
    return Lock(until, "budget", migrations or {}).annotation()


async def lock_by_hand(kv: KubeVirtByHand, seconds: float) -> None:
    await kv.api.patch(
        NAMESPACES,
        kv.namespace,
        {
            "metadata": {
                "labels": {LABEL_LOCKED: "true"},
                "annotations": {ANNOTATION_LOCK: lock_annotation(seconds)},
            }
        },
    )


async def refused(attempt: Callable[[], Any]) -> str | None:
    """The lock's denial message if `attempt` is refused by it, else None."""
    try:
        await attempt()
    except errors.ApiError as error:
        return error.message if "locked by the Managed-Tenant-Quota mode" in error.message else None
    return None


def squatter_pod(*, cpu: str, memory: str) -> Object:
    """A tenant's small pod that only a raised quota could admit."""
    limits = {"cpu": cpu, "memory": memory}
    container = {"name": "c", "image": "busybox", "resources": {"limits": limits}}
    return {"metadata": {"generateName": "squatter-"}, "spec": {"containers": [container]}}


async def test_the_lock_refuses_squatters_edits_and_vmmrq_changes_past_its_deadline_until_removed(
    kv: KubeVirtByHand, webhook: WebhookServer
) -> None:
    """A lock set by hand (no controller runs): squatters, quota edits and VMMRQ deletes are
    refused within its window and still past its deadline (issue 38 item 4: the lock holds
    until the controller, which restores first, removes it); once it is removed, pods pass."""
    await tenant_quota(kv, V170_HARD)
    budget = await create_vmmrq(kv, V170_ROOM)
    await lock_by_hand(kv, seconds=8)
    squatter = squatter_pod(cpu="100m", memory="64Mi")
    message = await eventually(
        lambda: refused(lambda: kv.api.create(PODS, squatter, kv.namespace)),
        what="squatter refused",
    )
    assert "only the migration target pods are created" in message and "until" in message
    edit = {"spec": {"hard": {"limits.cpu": "30"}}}
    assert await refused(lambda: kv.api.patch(RESOURCE_QUOTAS, QUOTA, edit, kv.namespace))
    assert await refused(lambda: kv.api.delete(VMMRQS, "budget", kv.namespace))
    assert budget["metadata"]["name"] == "budget"
    await eventually(lambda: lock_window_over(kv), timeout=40, what="the lock's deadline passed")
    late = await refused(lambda: kv.api.create(PODS, squatter, kv.namespace))
    assert late is not None, "past its deadline the lock let a pod in before any restore"
    assert "until the quotas are restored" in late, late
    unlock = {"metadata": {"labels": {LABEL_LOCKED: None}, "annotations": {ANNOTATION_LOCK: None}}}
    await kv.api.patch(NAMESPACES, kv.namespace, unlock)

    async def admitted() -> bool:
        try:
            await kv.api.create(PODS, squatter, kv.namespace)
        except errors.ApiError:
            return False
        return True

    await eventually(admitted, what="the webhook lets pods pass once the lock is removed")


async def lock_window_over(kv: KubeVirtByHand) -> Lock | None:
    """The namespace's lock once its deadline has passed (None before, or without a lock)."""
    lock = parse_lock(await kv.api.get(NAMESPACES, kv.namespace))
    if lock is None or lock.active(datetime.datetime.now(datetime.UTC)):
        return None
    return lock


async def raised(kv: KubeVirtByHand) -> bool:
    quota = await kv.api.get(RESOURCE_QUOTAS, QUOTA, kv.namespace)
    return not same(quota["spec"]["hard"], V170_HARD)


KILL_POINTS = {
    "before-lock": 0,
    "after-lock": 1,
    "after-record": 3,
    "after-raise": 4,
    "after-publish": 5,
    "during-restore": 6,
    "before-unlock": 9,
}
"""Writes a controller makes before it dies: lock, finalizer, record, raise, publish | (target
pod) | restore, publish, forget, finalizer, unlock."""


@pytest.mark.parametrize("killed_after", list(KILL_POINTS.values()), ids=list(KILL_POINTS))
async def test_killed_at_each_step_ends_with_the_original_quota_and_no_lock(
    killed_after: int,
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
    webhook: WebhookServer,
    controllers: Controllers,
) -> None:
    await tenant_quota(kv, V170_HARD)
    name = await refused_migration(kv, kubevirt)
    first = await controllers.start(writes=killed_after, namespace=kv.namespace)
    await create_vmmrq(kv, V170_ROOM)

    async def dead() -> bool:
        return first.client.killed[0] <= 0  # type: ignore[attr-defined, no-any-return]

    await eventually(dead, timeout=60, what=f"the controller's {killed_after} writes")
    await controllers.stop_all()
    await controllers.start()
    record = await kubevirt.wait_migration(name, timeout=MIGRATION_TIMEOUT)
    assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
    await eventually(lambda: restored(kv, V170_HARD), what="quota restored, unlocked")
    migration = await kv.api.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, name, kv.namespace)
    assert migration["status"]["phase"] == "Succeeded"


async def test_the_room_and_mtq_modes_side_by_side_on_the_v170_seed(
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
    webhook: WebhookServer,
    controllers: Controllers,
) -> None:
    """One namespace, the v1.7.0 seed's quota and VM, migrated twice with the controllers running:
    first in the room mode (Rancher's labelled quota, no VMMRQ), then in MTQ mode (a VMMRQ of
    the launcher's usage). Both complete and end at the base; the table is printed for bench/SCENARIOS.md."""
    await kv.set_rancher_base(V170_LIMIT)
    await kv.create_quota(V170_HARD)
    (await kubevirt.create_vm(VMSpec("vm1", cores=2, memory="4Gi"), node="kwok-node-0")).check()
    app = await controllers.start()
    rows = []
    for mode in ("room", "mtq"):
        if mode == "mtq":
            await create_vmmrq(kv, V170_ROOM)
            await eventually(lambda: app.mtq is not None and app.mtq.manages(kv.namespace))
        writes_before = app.reconciler.writes[kv.namespace]
        name = await kubevirt.migrate("vm1")
        record = await kubevirt.wait_migration(name, timeout=MIGRATION_TIMEOUT)
        assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
        await eventually(lambda: restored(kv, V170_HARD, "default-quota"), what="at the base")
        assert app.mtq is not None
        admitted = record.admitted.mono - record.created.mono if record.admitted else -1.0
        rows.append(
            (
                mode,
                record.refusals,
                admitted,
                app.reconciler.writes[kv.namespace] - writes_before
                if mode == "room"
                else app.mtq.stats.quota_writes,
                app.mtq.stats.longest_hold if mode == "mtq" else 0.0,
            )
        )
    print("\nmode  refusals  created->admitted(s)  quota spec writes  lock held(s)")
    for mode, refusals_, admitted, writes, held in rows:
        print(f"{mode:5} {refusals_:8} {admitted:21.2f} {writes:18} {held:13.3f}")
    assert rows[0][3] == 2 and rows[1][3] == 2


async def test_a_leader_change_mid_window_is_finished_by_the_new_leader(
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
    webhook: WebhookServer,
    controllers: Controllers,
) -> None:
    """Two replicas on one Lease; the leader dies right after the raise (before publishing it);
    the standby takes the Lease and ends the window: migration done, quota exact, no lock."""
    await tenant_quota(kv, V170_HARD)
    name = await refused_migration(kv, kubevirt)
    lease = f"mtq-test-{uuid.uuid4().hex[:6]}"
    _, leader, leading = await controllers.candidate(
        lease, "first", writes=4, namespace=kv.namespace
    )
    await eventually(lambda: leader.leading, what="the first replica leads")
    _, standby, _ = await controllers.candidate(lease, "second")
    await create_vmmrq(kv, V170_ROOM)
    await eventually(lambda: raised(kv), what="the first leader's raise")
    leading.cancel()  # the leader is gone; its Lease is released
    await eventually(lambda: standby.leading, timeout=30, what="the standby takes over")
    record = await kubevirt.wait_migration(name, timeout=MIGRATION_TIMEOUT)
    assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
    await eventually(lambda: restored(kv, V170_HARD), what="quota restored, unlocked")


async def test_squatters_racing_every_window_never_take_the_raise(
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
    webhook: WebhookServer,
    controllers: Controllers,
) -> None:
    """MTQ's "system abuse" scenario: the quota is exactly what the VM uses, so only the raise
    could admit another pod; a tenant keeps creating small pods while the VM migrates three
    times in a row. Every migration completes and no squatter ever gets in."""
    await tenant_quota(kv, V170_ROOM)
    (await kubevirt.create_vm(VMSpec("vm1", cores=2, memory="4Gi"), node="kwok-node-0")).check()
    await controllers.start()
    await create_vmmrq(kv, V170_ROOM)
    squatter = squatter_pod(cpu="10m", memory="16Mi")
    admitted: list[str] = []
    attempts = [0]

    async def squat() -> None:
        while True:
            attempts[0] += 1
            try:
                created = await kv.api.create(PODS, squatter, kv.namespace)
            except errors.ApiError:
                await asyncio.sleep(0.02)  # a tenant's retry pace, not a wait for a state
                continue
            admitted.append(created["metadata"]["name"])

    task = asyncio.ensure_future(squat())
    try:
        for _ in range(3):
            record = await kubevirt.wait_migration(
                await kubevirt.migrate("vm1"), timeout=MIGRATION_TIMEOUT
            )
            assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
            await eventually(lambda: restored(kv, V170_ROOM), what="quota restored, unlocked")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    print(f"\nMTQ squatters: {attempts[0]} attempts, {len(admitted)} admitted")
    assert attempts[0] > 10 and admitted == []


async def test_a_quota_only_rancher_may_write_is_left_alone_without_a_lock(
    kubevirt_api: ApiClient,
    kubevirt_cluster: ClusterInfo,
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
    controllers: Controllers,
) -> None:
    """Rancher 2.14.6+ protects its labelled quota (the test bench's twin of rancher-webhook
    answers as it does: 400, its words): MTQ mode asks once by a dry run, takes no lock, writes no
    quota, says so once on the VMMRQ, and stays so when the budget changes."""
    await kv.create_quota(V170_HARD)
    name = await refused_migration(kv, kubevirt)
    await create_vmmrq(kv, V170_ROOM)
    protection = await RancherWebhookTwin.install(
        kubevirt_api, kubevirt_cluster, [kv.namespace], name=f"mtq-{kv.namespace[-8:]}"
    )
    try:
        app = await controllers.start()

        async def rancher_warnings() -> list[Object]:
            listed = await kv.api.list(EVENTS, kv.namespace)
            return [e for e in listed["items"] if e.get("reason") == RANCHER_PROTECTED_REASON]

        (event,) = await eventually(rancher_warnings, what="QuotaProtectedByRancher")
        assert event["involvedObject"]["name"] == "budget"
        assert "managed by Rancher" in event["message"] and "delete budget" in event["message"]
        bigger = {k: str(Quantity.parse(v) * 2) for k, v in V170_ROOM.items()}
        await kv.api.patch(
            VMMRQS, "budget", {"spec": {"additionalMigrationResources": bigger}}, kv.namespace
        )

        async def budget_copied() -> bool:
            budget = await kv.api.get(VMMRQS, "budget", kv.namespace)
            copied = (budget.get("status") or {}).get("additionalMigrationResources") or {}
            return same(copied, bigger)

        await eventually(budget_copied, what="the new budget reconciled")
        assert app.mtq is not None
        stats = app.mtq.stats
        assert stats.locks == 0 and stats.quota_writes == 0, stats
        assert stats.rancher_refusals == 1, "one dry run, never a real write"
        namespace = await kv.api.get(NAMESPACES, kv.namespace)
        assert LABEL_LOCKED not in (namespace["metadata"].get("labels") or {})
        assert same((await kv.quota())["spec"]["hard"], V170_HARD)
        assert len(await rancher_warnings()) == 1
        migration = await kv.api.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, name, kv.namespace)
        assert migration["status"].get("phase", "Pending") == "Pending", "held, as Rancher has it"
    finally:
        await protection.remove()


async def test_a_leftover_kubevirt_mtq_lock_is_reported_with_what_to_delete(
    kubevirt_api: ApiClient, kubevirt_namespace: str, controllers: Controllers
) -> None:
    """KubeVirt MTQ uninstalled mid-window left its lock.<ns>.com: with MTQ's service gone it
    refuses every pod create there. The controller says so on the Namespace, explain names it,
    and deleting it as they say lets pods in again."""
    api, namespace = kubevirt_api, kubevirt_namespace
    lock = kubevirt_mtq_lock(namespace)
    name = lock["metadata"]["name"]
    lock["metadata"].pop("creationTimestamp")
    pod = {"metadata": {"name": "probe"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}

    async def pods_refused() -> bool:
        try:
            await api.create(PODS, pod, namespace, dry_run=True)
        except errors.ApiError as error:
            return name in error.message
        return False

    await api.create(VALIDATING_WEBHOOK_CONFIGURATIONS, lock)
    try:
        await eventually(pods_refused, what="the leftover lock refuses pods")
        await controllers.start(leftover_after=0.0)

        async def reported() -> list[Object]:
            listed = await api.list_all(EVENTS, "default")
            return [
                e
                for e in listed.items
                if e.get("reason") == LEFTOVER_REASON
                and e["involvedObject"].get("name") == namespace
            ]

        (event,) = await eventually(reported, what="LeftoverMtqLock on the Namespace")
        command = f"kubectl delete validatingwebhookconfiguration {name}"
        assert event["involvedObject"]["kind"] == "Namespace" and command in event["message"]
        found = await explain(api, namespace)
        assert [entry["delete"] for entry in found.mtq_locks] == [command]
        await api.delete(VALIDATING_WEBHOOK_CONFIGURATIONS, name)

        async def pods_admitted() -> bool:
            return not await pods_refused()

        await eventually(pods_admitted, what="pods admitted once the lock is deleted")
    finally:
        with contextlib.suppress(errors.NotFound):
            await api.delete(VALIDATING_WEBHOOK_CONFIGURATIONS, name)


# Issue 38 item 4: no window between the lock and the restore ------------------------------------

SHORT_LOCK = 8.0
"""A lock window short enough to outlive in a test (seconds)."""
SQUATTER = squatter_pod(cpu="100m", memory="1Gi")
"""Beyond the base (425Mi of limits.memory left beside vm1's launcher), within the raise."""
VMMRQ_ADMIN: Final = {
    "apiGroups": ["mtq.kubevirt.io"],
    "resources": ["virtualmachinemigrationresourcequotas"],
    "verbs": ["create", "get", "list", "watch", "update", "patch", "delete"],
}
"""What a namespace administrator holds of its budgets: neither the chart nor Kubernetes'
`edit` or `admin` grants VMMRQs (no role is aggregated for them), so a tenant who manages its
own budget is given them by a Role of its namespace."""


async def raise_held_by_a_dead_controller(
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
    controllers: Controllers,
    budget_api: ApiClient | None = None,
) -> str:
    """vm1's migration refused; a controller (lock window SHORT_LOCK) locks, records, raises
    and publishes for a VMMRQ of vm1's room (created through `budget_api`, the admin's if
    None), then writes nothing more and is stopped: no replica is left to restore. Returns
    the migration, which the raise lets complete."""
    await tenant_quota(kv, V170_HARD)
    name = await refused_migration(kv, kubevirt)
    first = await controllers.start(
        lock_seconds=SHORT_LOCK, writes=KILL_POINTS["after-publish"], namespace=kv.namespace
    )
    await create_vmmrq(kv, V170_ROOM, budget_api)

    async def dead() -> bool:
        return first.client.killed[0] <= 0  # type: ignore[attr-defined, no-any-return]

    await eventually(dead, timeout=60, what="the controller's lock, record and raise")
    await controllers.stop_all()
    assert await raised(kv), "the premise: the quota is raised"
    assert parse_lock(await kv.api.get(NAMESPACES, kv.namespace)) is not None, "and locked"
    record = await kubevirt.wait_migration(name, timeout=MIGRATION_TIMEOUT)
    assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
    return name


async def squatter_fits(kv: KubeVirtByHand) -> bool:
    """Quota admission would admit SQUATTER now (the raise stands and vm1's source launcher
    has exited): only the lock stands in its way."""
    quota = await kv.api.get(RESOURCE_QUOTAS, QUOTA, kv.namespace)
    status = quota.get("status") or {}
    hard = parse_resource_list_leniently(status.get("hard"))
    used = resources.mask(parse_resource_list_leniently(status.get("used")), hard)
    wanted = resources.mask(pod_quota_usage(SQUATTER), hard)
    fits, _ = resources.less_or_equal(resources.add(used, wanted), hard)
    return fits


async def test_past_its_deadline_the_lock_refuses_a_tenant_pod_until_the_controller_has_restored(
    kubevirt_cluster: ClusterInfo,
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
    webhook: WebhookServer,
    controllers: Controllers,
) -> None:
    """Issue 38 item 4: the webhook ended the lock at its deadline while the quota stayed
    raised until the controller's restore, so a tenant pod created then took the budget. Here
    the controller raised and died (the restore held back for good), the window is over and
    the raised quota has room for the tenant's 1Gi pod: the webhook still refuses it, saying
    it waits for the restore; a new controller restores and unlocks, and the pod meets the
    quota at its base."""
    await raise_held_by_a_dead_controller(kv, kubevirt, controllers)
    await eventually(
        lambda: lock_window_over(kv), timeout=SHORT_LOCK + 30, what="the lock's deadline passed"
    )
    await eventually(lambda: squatter_fits(kv), what="room for the squatter in the raised quota")
    async with tenant(kv.api, kubevirt_cluster, kv.namespace) as squatter:
        message = await refused(lambda: squatter.api.create(PODS, SQUATTER, kv.namespace))
        assert message is not None, "past the deadline a tenant pod took the raised quota"
        assert "until the quotas are restored" in message, message
        await controllers.start()
        await eventually(lambda: restored(kv, V170_HARD), what="quota restored, unlocked")
        with pytest.raises(errors.Forbidden) as at_the_base:
            await squatter.api.create(PODS, SQUATTER, kv.namespace)
        assert EXCEEDED_QUOTA in at_the_base.value.message, at_the_base.value.message


async def test_a_tenant_cannot_unfinalize_or_delete_its_vmmrq_while_locked_and_one_gone_is_restored_before_the_unlock(
    kubevirt_cluster: ClusterInfo,
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
    webhook: WebhookServer,
    controllers: Controllers,
) -> None:
    """Issue 38 item 4: the VMMRQ held the only record of the originals, and its restore
    finalizer was anyone's to remove, so a tenant who manages its budget (a real identity:
    the edit roles and VMMRQ rights) took the finalizer off during a lock and deleted the VMMRQ
    once the webhook let it (at the deadline): the controller unlocked with the budget left in
    the quota for good. Now, while the namespace is locked (the controller that raised is dead,
    nothing restores), both are refused; and a VMMRQ gone regardless (the mtq-lock rule taken
    off the VMMRQs, as an administrator might) is restored from the quota's own record before
    the namespace is unlocked: the namespace is never seen unlocked with the quota raised."""
    async with tenant(kv.api, kubevirt_cluster, kv.namespace) as owner:
        await grant(kv.api, owner, "vmmrq-admin", [VMMRQ_ADMIN])
        await raise_held_by_a_dead_controller(kv, kubevirt, controllers, owner.api)
        unfinalize: Object = {"metadata": {"finalizers": []}}
        message = await refused(lambda: owner.api.patch(VMMRQS, "budget", unfinalize, kv.namespace))
        assert message is not None, "the tenant took the restore finalizer off during a lock"
        assert f"its finalizer {FINALIZER} may not be removed" in message, message
        message = await refused(lambda: owner.api.delete(VMMRQS, "budget", kv.namespace))
        assert message is not None and "delete is not allowed" in message, message
        budget = await kv.api.get(VMMRQS, "budget", kv.namespace)
        assert FINALIZER in budget["metadata"]["finalizers"] and await raised(kv)

        await unguard_vmmrqs(kv.api, kv.namespace)
        await eventually(
            lambda: gone_with_the_tenant(owner, unfinalize), what="the VMMRQ gone, unguarded"
        )
        async with unlock_watch(kv) as seen_unlocked_raised:
            await controllers.start()
            await eventually(lambda: restored(kv, V170_HARD), what="quota restored, unlocked")
        assert seen_unlocked_raised == [], seen_unlocked_raised


async def unguard_vmmrqs(api: ApiClient, namespace: str) -> None:
    """Takes VMMRQs out of the mtq-lock rule of the test's webhook configuration, as an
    administrator who edits the configuration would: VMMRQ writes meet no lock there."""
    listed = await api.list(VALIDATING_WEBHOOK_CONFIGURATIONS)
    (configuration,) = [c for c in listed["items"] if namespace in json.dumps(c)]
    for hook in configuration["webhooks"]:
        hook["rules"] = [r for r in hook["rules"] if VMMRQS.plural not in r["resources"]]
    await api.update(VALIDATING_WEBHOOK_CONFIGURATIONS, configuration)


async def gone_with_the_tenant(owner: Tenant, unfinalize: Object) -> bool:
    """The tenant removes the finalizer and deletes its VMMRQ (the API server applies the
    configuration change a moment after it is stored); True once the VMMRQ is gone."""
    try:
        await owner.api.patch(VMMRQS, "budget", unfinalize, owner.namespace)
        await owner.api.delete(VMMRQS, "budget", owner.namespace)
        await owner.api.get(VMMRQS, "budget", owner.namespace)
    except errors.NotFound:
        return True
    except errors.ApiError as refused_yet:
        if "locked by the Managed-Tenant-Quota mode" not in refused_yet.message:
            raise
    return False


@contextlib.asynccontextmanager
async def unlock_watch(kv: KubeVirtByHand) -> AsyncIterator[list[str]]:
    """Looks at the namespace, then the quota, over and over while the block runs; yields the
    list of each look that found the namespace unlocked and the quota, read after it, still
    raised (the unlock came before the restore)."""
    seen: list[str] = []

    async def look() -> None:
        while True:
            namespace = await kv.api.get(NAMESPACES, kv.namespace)
            if parse_lock(namespace) is None and await raised(kv):
                quota = await kv.api.get(RESOURCE_QUOTAS, QUOTA, kv.namespace)
                seen.append(f"unlocked, quota {quota['spec']['hard']}")
            await asyncio.sleep(0.05)  # the pace of the looks, not a wait for a state

    task = asyncio.ensure_future(look())
    try:
        yield seen
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
