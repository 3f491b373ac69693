"""Issue 41 item 3 on the real cluster: a scarce MTQ budget, and a Rancher project's scarce room
across its namespaces, follow KubeVirt's priority when a user's migration and a node drain's
evacuation compete for them.

KubeVirt v1.9.0's own virt-controller (its migration priority queue is GA there) creates the
evacuation, with the spec.priority it gives a drain's migration; our controller runs in MTQ mode
as its service account under deploy/'s RBAC, our webhook holds the lock, real quota admission
decides every target pod. The cluster is the session's v1.9.0 one (`versioned_kubevirt_cluster`,
three nodes: the drained one, the user's VM's, and one for the targets to land on).
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from harvester_quota.apis.kubevirt import VIRTUAL_MACHINE_INSTANCE_MIGRATIONS
from harvester_quota.app import ControllerApp
from harvester_quota.controller.mtq.reports import WAITING_REASON
from harvester_quota.controller.resourcequota.rancher import (
    PROJECT_NO_ROOM_REASON,
    PROJECT_QUEUED_REASON,
)
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import EVENTS, NAMESPACES, PODS, RESOURCE_QUOTAS, Object
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.sim.kubevirt import Outcome, ParallelLimits, VMSpec
from harvester_quota.testbench.sim.kubevirt.handler import HandlerTimings
from harvester_quota.testbench.sim.kubevirt.record import MigrationRecord
from harvester_quota.testbench.sim.rancher import RancherQuotaSync
from harvester_quota.testbench.sim.rancher.twin import RancherWebhookTwin
from harvester_quota.testbench.virtcontroller import VirtControllerDriver
from harvester_quota.util.annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA
from harvester_quota.util.migrationpriority import (
    DEFAULT,
    SYSTEM_CRITICAL,
    migration_priority,
    scarce_room_order,
)
from harvester_quota.util.podusage import pod_quota_usage
from harvester_quota.util.quantity import Quantity
from harvester_quota.webhook.server import WebhookServer

from tests.helpers import eventually
from tests.integration import deployment, real_kubevirt
from tests.integration.kubevirt_by_hand import KubeVirtByHand
from tests.integration.test_controllers_on_kubevirt import MIGRATION_TIMEOUT, wait_refused
from tests.integration.test_mtq import (
    QUOTA,
    Controllers,
    controllers,
    create_vmmrq,
    restored,
    tenant_quota,
)
from tests.integration.test_sim_rancher import (
    SEED_ANNOTATION,
    SEED_HARD,
    hard_is,
    join_project,
    seed_project,
)

__all__ = ["controllers"]  # the fixture

KUBEVIRT_VERSION = "v1.9.0"
"""The first KubeVirt whose priority queue is GA: every drain's evacuation is system-critical (the
session's virt-controller cluster runs v1.6.0, which gives an evacuation no priority)."""
pytestmark = [
    pytest.mark.integration,
    pytest.mark.parametrize("versioned_kubevirt_cluster", [KUBEVIRT_VERSION], indirect=True),
]
kubevirt_cluster = real_kubevirt.kubevirt_cluster
DRAINED, USERS_NODE = "kwok-node-0", "kwok-node-1"
KEY = "requests.memory"
MARGIN = Quantity.parse("256Mi")
"""Over one target pod's usage, far under a second one's (each launcher asks over 1Gi)."""


@pytest.fixture
async def webhook(
    kubevirt_api: ApiClient, kubevirt_cluster: ClusterInfo, kubevirt_namespace: str, tmp_path: Path
) -> AsyncIterator[WebhookServer]:
    """Our webhook, called by the API server: while the budget is lent, only the released
    migration's target pod may use it."""
    async with deployment.webhook_for_virt_controller(
        kubevirt_api, kubevirt_cluster, kubevirt_namespace, tmp_path
    ) as server:
        yield server


@pytest.fixture
async def kubevirt(
    kubevirt_api: ApiClient, kubevirt_cluster: ClusterInfo, kubevirt_namespace: str
) -> AsyncIterator[VirtControllerDriver]:
    driver = VirtControllerDriver(
        kubevirt_api,
        kubevirt_version=str(kubevirt_cluster.kubevirt_version),
        namespaces=frozenset({kubevirt_namespace}),
        timings=HandlerTimings(migration=0.5, source_shutdown=0.5, target_exit=0.5),
        limits=ParallelLimits(5, 2),
    )
    async with driver:
        yield driver


async def start(kubevirt: VirtControllerDriver, name: str, node: str, namespace: str) -> Object:
    """A 1-core/1Gi VM running on `node`; returns its launcher pod."""
    started = await kubevirt.create_vm(VMSpec(name, cores=1, memory="1Gi"), namespace, node=node)
    started.check()
    assert started.node == node
    return await kubevirt.client.get(PODS, str(started.pod), started.namespace)


async def full_quota(kv: KubeVirtByHand, first: Object) -> Quantity:
    """The tenant's quota on KEY closed to what both launchers use; returns that hard."""
    await tenant_quota(kv, {KEY: "100Gi"})

    async def both_counted() -> Quantity | None:
        quota = await kv.api.get(RESOURCE_QUOTAS, QUOTA, kv.namespace)
        used = ((quota.get("status") or {}).get("used") or {}).get(KEY)
        value = Quantity.parse(used) if used else None
        return value if value is not None and value > pod_quota_usage(first)[KEY] else None

    used = await eventually(both_counted, what="both launchers in the tenant's quota")
    await kv.api.patch(RESOURCE_QUOTAS, QUOTA, {"spec": {"hard": {KEY: str(used)}}}, kv.namespace)

    async def closed() -> bool:
        quota = await kv.api.get(RESOURCE_QUOTAS, QUOTA, kv.namespace)
        hard = ((quota.get("status") or {}).get("hard") or {}).get(KEY)
        return hard is not None and Quantity.parse(hard) == used

    await eventually(closed, what="the tenant's quota full")
    return used


async def evacuation_of(kubevirt: VirtControllerDriver, vmi: str) -> MigrationRecord:
    """The migration KubeVirt's evacuation controller created for `vmi`, once refused by quota."""

    def refused() -> MigrationRecord | None:
        return next(
            (
                r
                for r in kubevirt.records.all()
                if r.vmi == vmi and r.evacuation_node and r.first_refused is not None
            ),
            None,
        )

    try:
        found: MigrationRecord = await eventually(
            refused, timeout=MIGRATION_TIMEOUT, what=f"{vmi}'s evacuation refused"
        )
    except AssertionError as error:
        listed = await kubevirt.client.list_all(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS)
        raise AssertionError(
            f"{error}; records {[r.as_dict() for r in kubevirt.records.all()]}; "
            f"migrations {[(m['metadata'], m.get('spec'), m.get('status')) for m in listed.items]}"
        ) from None
    return found


async def waiting_warnings(api: ApiClient, namespace: str, migration: str) -> list[str]:
    """The messages of our WaitingForHigherPriorityMigrations Warnings on `migration`."""
    events = await api.list_all(EVENTS, namespace)
    return [
        str(e.get("message"))
        for e in events.items
        if e.get("reason") == WAITING_REASON
        and (e.get("involvedObject") or {}).get("name") == migration
        and (e.get("involvedObject") or {}).get("kind") == "VirtualMachineInstanceMigration"
    ]


async def a_second_after_creation(api: ApiClient, migration: str, namespace: str) -> None:
    """Returns once the wall clock has passed `migration`'s creation second: a migration
    created after that is older by its creationTimestamp (whole seconds), not only by name."""
    created = (await api.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, migration, namespace))[
        "metadata"
    ]["creationTimestamp"]
    after = datetime.datetime.fromisoformat(created) + datetime.timedelta(seconds=1)
    await eventually(
        lambda: datetime.datetime.now(datetime.UTC) > after, what=f"a second after {created}"
    )


def order_of(migrations: list[Object], *, priorities: bool) -> list[str]:
    """The migrations' names in the order scarce room goes to them: KubeVirt's priorities, or
    with `priorities` False every one at the default (what a controller without the ordering,
    or a KubeVirt without the priority queue, would see)."""
    keyed = [
        (
            scarce_room_order(
                migration_priority(m) if priorities else DEFAULT,
                str(m["metadata"]["creationTimestamp"]),
                str(m["metadata"]["name"]),
            ),
            str(m["metadata"]["name"]),
        )
        for m in migrations
    ]
    return [name for _, name in sorted(keyed)]


async def test_a_drains_evacuation_takes_a_scarce_budget_before_an_older_user_migration(
    kubevirt_api: ApiClient,
    kubevirt_namespace: str,
    kubevirt: VirtControllerDriver,
    webhook: WebhookServer,
    controllers: Controllers,
) -> None:
    """vm-a (on kwok-node-1) and vm-b (on kwok-node-0) fill the tenant's quota; the VMMRQ's
    budget covers one target pod. The user migrates vm-a first: refused by quota. Then
    kwok-node-0 is drained: KubeVirt's evacuation of vm-b, system-critical, is refused too. Our
    controller starts with both waiting: vm-b's evacuation gets the budget and Succeeds while
    vm-a's migration waits (Warning WaitingForHigherPriorityMigrations naming the evacuation),
    then vm-a's migration gets it and Succeeds; the quota ends at its base, unlocked."""
    ns = kubevirt_namespace
    kv = KubeVirtByHand(kubevirt_api, ns)
    launcher_a = await start(kubevirt, "vm-a", USERS_NODE, ns)
    await start(kubevirt, "vm-b", DRAINED, ns)
    base = await full_quota(kv, launcher_a)
    await create_vmmrq(kv, {KEY: str(pod_quota_usage(launcher_a)[KEY] + MARGIN)})

    user = await kubevirt.migrate("vm-a", ns)
    await wait_refused(kubevirt, ns, user)
    await a_second_after_creation(kubevirt_api, user, ns)
    await kubevirt.drain(DRAINED)
    evacuation = (await evacuation_of(kubevirt, "vm-b")).name

    # KubeVirt's own word on the two: the evacuation is system-critical, the user's has none,
    # and the user's is the older: only the priority puts the evacuation first.
    live = [
        await kubevirt_api.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, name, ns)
        for name in (user, evacuation)
    ]
    assert [m["spec"].get("priority") for m in live] == [None, SYSTEM_CRITICAL]
    assert order_of(live, priorities=False) == [user, evacuation]
    assert order_of(live, priorities=True) == [evacuation, user]

    await controllers.start()
    first = await kubevirt.wait_migration(evacuation, ns, timeout=MIGRATION_TIMEOUT)
    assert first.outcome is Outcome.SUCCEEDED, first.as_dict()
    waiting = kubevirt.records.get(ns, user)
    assert waiting is not None, kubevirt.records.all()
    assert waiting.admitted is None and waiting.outcome is None, (
        waiting.as_dict(),
        first.as_dict(),
    )
    warnings = await waiting_warnings(kubevirt_api, ns, user)
    assert warnings and all(evacuation in message for message in warnings), warnings

    second = await kubevirt.wait_migration(user, ns, timeout=MIGRATION_TIMEOUT)
    assert second.outcome is Outcome.SUCCEEDED, second.as_dict()
    assert first.finished is not None and second.admitted is not None
    assert second.admitted.mono > first.finished.mono, (first.as_dict(), second.as_dict())
    await eventually(lambda: restored(kv, {KEY: str(base)}), what="quota at its base, unlocked")


PROJECT_FULL_BY_A_THIRD = '{"limit":{"limitsCpu":"6","limitsMemory":"12000Mi"}}'
"""A third namespace of the project, raised by an administrator: with the two tenants' seeds
(3 CPU, 5000Mi each) it fills the project's limit (12 CPU, 22000Mi)."""
PROJECT_ROOM_FOR_ONE = {"limits.cpu": "12", "limits.memory": "22000Mi"}
"""Once the third namespace is back at the seed, room for one 2-core/4Gi target (about 2 CPU
and 4.5Gi of limits), not two."""


async def queued_warnings(api: ApiClient, namespace: str, migration: str) -> list[str]:
    """The messages of our WaitingForEarlierMigrationsInProject Warnings on `migration`."""
    events = await api.list_all(EVENTS, namespace)
    return [
        str(e.get("message"))
        for e in events.items
        if e.get("reason") == PROJECT_QUEUED_REASON
        and (e.get("involvedObject") or {}).get("name") == migration
    ]


async def asks(api: ApiClient, namespace: str) -> str:
    """The namespace's field.cattle.io/resourceQuota: what it asks of its Rancher project."""
    found = (await api.get(NAMESPACES, namespace))["metadata"].get("annotations") or {}
    return str(found.get(CATTLE_ANNOTATION_RESOURCE_QUOTA))


async def touch(api: ApiClient, namespace: str, value: str) -> None:
    """An administrator's annotation on the namespace: its (and only its) reconcile is queued."""
    patch = {"metadata": {"annotations": {"example.com/touched": value}}}
    await api.patch(NAMESPACES, namespace, patch)


def hold_judgments(app: ControllerApp, namespace: str) -> asyncio.Event:
    """Until the returned Event is set, `namespace`'s writes through Rancher's annotation are not
    judged: its reconcile is requeued a moment later (the in-process controller's RancherPath
    wrapped; nothing else changes). Lets a test fix which sibling is judged first."""
    path = app.reconciler.rancher
    write = path.write
    gate = asyncio.Event()

    async def gated(namespace_obj: Any, *args: Any) -> float | None:
        if not gate.is_set() and namespace_obj["metadata"]["name"] == namespace:
            return 0.5
        return await write(namespace_obj, *args)

    path.write = gated  # type: ignore[method-assign]
    return gate


async def test_a_drains_evacuation_takes_a_rancher_projects_room_before_a_sibling_users_migration(
    kubevirt_api: ApiClient,
    kubevirt_cluster: ClusterInfo,
    kubevirt_namespace: str,
    controllers: Controllers,
) -> None:
    """Rancher 2.15.2 protects the quotas of a project's namespaces (twin and agent): tenant-a's
    VM and tenant-b's each fill their namespace, a third namespace fills the project. A user
    migrates tenant-a's VM; then the node of tenant-b's VM is drained (KubeVirt v1.9's
    evacuation, system-critical). Our controller (as deployed: its account, deploy/'s RBAC)
    holds both raises back for the project's room. The third namespace gives its room back and
    tenant-a's namespace is judged first: its raise would fit, but the room goes to tenant-b's
    evacuation, named in a Warning on the user's migration. The evacuation gets it and
    Succeeds; then the user's raise follows and its migration Succeeds."""
    users, drained = kubevirt_namespace, f"{kubevirt_namespace}-b"
    third = f"{kubevirt_namespace}-c"
    for created in (drained, third):
        await kubevirt_api.create(NAMESPACES, {"metadata": {"name": created}})
    project = seed_project(users, PROJECT_ROOM_FOR_ONE)
    twin = await RancherWebhookTwin.install(kubevirt_api, kubevirt_cluster, [users, drained])
    try:
        async with (
            RancherQuotaSync(
                kubevirt_api, projects=[project], quota_client=twin.sudo, version="2.15.2"
            ),
            VirtControllerDriver(
                kubevirt_api,
                kubevirt_version=str(kubevirt_cluster.kubevirt_version),
                namespaces=frozenset({users, drained}),
                timings=HandlerTimings(migration=0.5, source_shutdown=0.5, target_exit=0.5),
                limits=ParallelLimits(5, 2),
            ) as kubevirt,
        ):
            await join_project(kubevirt_api, third, project, PROJECT_FULL_BY_A_THIRD)
            for tenant in (users, drained):
                await join_project(kubevirt_api, tenant, project, SEED_ANNOTATION)
                await eventually(
                    partial(hard_is, kubevirt_api, tenant, SEED_HARD), what="Rancher's quota"
                )
            spec = {"cores": 2, "memory": "4Gi"}
            (await kubevirt.create_vm(VMSpec("vm-a", **spec), users, node=USERS_NODE)).check()
            (await kubevirt.create_vm(VMSpec("vm-b", **spec), drained, node=DRAINED)).check()
            user = await kubevirt.migrate("vm-a", users)
            await wait_refused(kubevirt, users, user)
            await a_second_after_creation(kubevirt_api, user, users)
            await kubevirt.drain(DRAINED)
            evacuation = (await evacuation_of(kubevirt, "vm-b")).name

            app = await controllers.start()

            async def held(namespace: str) -> bool:
                listed = await kubevirt_api.list_all(EVENTS, namespace)
                return any(e.get("reason") == PROJECT_NO_ROOM_REASON for e in listed.items)

            for tenant in (users, drained):
                await eventually(partial(held, tenant), what=f"{tenant}'s raise held back")
            # Deterministic whatever the order of reconciles: drained's judgments wait (its
            # reconcile requeued, the product's own code untouched) until users' raise has been
            # judged with the room free, so the room is users' unless the project's order
            # (the evacuation in the caches, earlier in KubeVirt's order) holds it back.
            gate = hold_judgments(app, drained)
            await join_project(kubevirt_api, third, project, SEED_ANNOTATION)
            touches = itertools.count(1)

            async def users_judged() -> list[str] | None:
                if await asks(kubevirt_api, users) != SEED_ANNOTATION:
                    return ["users raised ahead of the evacuation"]
                warned = await queued_warnings(kubevirt_api, users, user)
                if not warned:  # judged before its cache showed the room free: again
                    await touch(kubevirt_api, users, str(next(touches)))
                return warned or None

            warned = await eventually(users_judged, what="users judged with the room free")
            assert all(f"{drained}/{evacuation}" in m for m in warned), warned
            assert await asks(kubevirt_api, users) == SEED_ANNOTATION, "no raise for the user's"
            gate.set()
            await touch(kubevirt_api, drained, "1")
            first = await kubevirt.wait_migration(evacuation, drained, timeout=MIGRATION_TIMEOUT)
            assert first.outcome is Outcome.SUCCEEDED, first.as_dict()
            second = await kubevirt.wait_migration(user, users, timeout=MIGRATION_TIMEOUT)
            assert second.outcome is Outcome.SUCCEEDED, second.as_dict()
            assert first.finished is not None and second.admitted is not None
            assert second.admitted.mono > first.finished.mono, (first.as_dict(), second.as_dict())
    finally:
        await twin.remove()
        for created in (drained, third):
            await kubevirt_api.delete(NAMESPACES, created)
