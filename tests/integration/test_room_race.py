"""Forty pods created at once while a migration holds room, through the deployed webhook (TLS,
service accounts, deploy/'s RBAC): the tenant never ends above its base, every pod that fits
under the base is admitted, and every denial names the key, the numbers and the migration.

The webhook decides from its caches, which learn of an admitted pod only when quota admission's
update of status.used comes back through a watch: without its ledger of what it admitted since,
concurrent creates all saw the same free room and together took more than the base.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from harvester_quota.apis.kubevirt import VIRTUAL_MACHINE_INSTANCE_MIGRATIONS
from harvester_quota.app import ControllerApp
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import NAMESPACES, PODS, Object
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.util.annotations import LABEL_ROOM_HELD
from harvester_quota.util.quantity import Quantity
from harvester_quota.webhook.server import WebhookServer

from tests.helpers import cpu_burners, eventually, succeed_migration
from tests.integration.kubevirt_by_hand import KubeVirtByHand
from tests.integration.test_webhook_deployed import (
    V170_HARD,
    V170_LIMIT,
    Stack,
    denial,
    deployed,
    stack,
)

pytestmark = pytest.mark.integration
__all__ = ["stack"]  # the deployed controllers and webhook, from test_webhook_deployed.py

RACERS = 40
POD_CPU = "50m"
POD_MEMORY = "16Mi"
VM_CPU = Quantity.parse("2015m")  # what the VM's launcher pod uses (limits.cpu)


def small_pod(name: str) -> Object:
    return {
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {"limits": {"cpu": POD_CPU, "memory": POD_MEMORY}},
                }
            ]
        },
    }


RETRIES_AFTER_429 = 20
"""How often a racer sends its pod again after a 429, as a ReplicaSet controller would: the
webhook answers 429 (retry) to a pod whose decision kept losing the replicas' Lease races."""


async def create(tenant: KubeVirtByHand, name: str) -> bool:
    """True if admitted, False if our webhook denied it (anything else fails the test); a 429 is
    sent again, at most RETRIES_AFTER_429 times."""
    for _ in range(RETRIES_AFTER_429):
        try:
            return await create_once(tenant, name)
        except errors.TooManyRequests:
            await asyncio.sleep(0.1)
    return await create_once(tenant, name)


async def create_once(tenant: KubeVirtByHand, name: str) -> bool:
    """One create: True if admitted, False if our webhook denied it."""
    try:
        await tenant.api.create(PODS, small_pod(name), tenant.namespace)
    except errors.Forbidden as denied:
        assert "would take room reserved for the live migration of vm1" in denied.message, (
            denied.message
        )
        assert "limits.cpu insufficient resources due to resource quota default-quota" in (
            denied.message
        ), denied.message
        return False
    return True


Replicas = tuple[KubeVirtByHand, KubeVirtByHand, ControllerApp, tuple[WebhookServer, ...]]


@pytest.fixture(params=[1, 2], ids=["one webhook replica", "two webhook replicas"])
async def replicas(
    request: pytest.FixtureRequest,
    api: ApiClient,
    cluster: ClusterInfo,
    namespace: str,
    tmp_path: Path,
) -> AsyncIterator[Replicas]:
    """The deployed stack with one webhook replica, or two behind one address (the chart's
    default, each with its own caches: they share what they admit through Leases)."""
    async with deployed(api, cluster, namespace, tmp_path, replicas=request.param) as stack_:
        yield stack_


def pods_answered(server: WebhookServer) -> float:
    return sum(
        sample.value
        for metric in server.metrics.requests.collect()
        for sample in metric.samples
        if sample.name.endswith("_total") and sample.labels["endpoint"] == "pods"
    )


async def test_forty_racing_pods_never_take_the_room_and_all_that_fit_get_in(
    replicas: Replicas,
) -> None:
    """Three migrations one after another, forty pods racing during each, two CPU burners beside
    the cluster: usage never ends above the base, exactly the pods that fit get in, and every
    migration's target pod gets in; with two replicas each decides some of the pods."""
    tenant, kubevirt, _, servers = replicas
    await tenant.set_rancher_base(V170_LIMIT)
    await tenant.create_quota(V170_HARD)
    vmi, source = await kubevirt.start_vm("vm1")
    base_cpu = Quantity.parse(V170_HARD["limits.cpu"])
    fit = int((base_cpu - VM_CPU).milli_value() // Quantity.parse(POD_CPU).milli_value())
    assert fit < RACERS, "the race must be for less room than is asked"
    with cpu_burners(2):
        for round_ in range(3):
            migration = await kubevirt.migrate(vmi, f"vm1-round-{round_}")
            # Quota admission judges against status.hard: once it shows the raise, a racer is
            # refused by our webhook or by nothing.
            await eventually(lambda: cpu_hard(tenant, above=base_cpu), what="the room raised")
            names = [f"racer-{round_}-{i}" for i in range(RACERS)]
            admitted = await asyncio.gather(*(create(tenant, name) for name in names))
            # The pods themselves, not status.used: kube-controller-manager recounts it from its
            # pod cache when spec.hard changes, and a recount racing these creates can write a
            # count that misses some of them until its next resync, minutes later.
            let_in = {name for name, got_in in zip(names, admitted, strict=True) if got_in}
            assert await racers_present(tenant, round_) == let_in, "exactly the admitted racers"
            expected = VM_CPU + Quantity.parse(POD_CPU) * len(let_in)
            print(
                f"{len(servers)} replica(s), round {round_}: {len(let_in)} admitted, "
                f"{RACERS - len(let_in)} denied"
            )
            assert expected <= base_cpu, f"{len(let_in)} admitted: {expected} above the base"
            assert len(let_in) == fit, "every pod that fits under the base is admitted"
            # KubeVirt's target pod gets in (created as its service account; refused, it
            # raises), the migration completes and the source pod goes: the room goes, and the
            # tenant makes room for the next round.
            target = await kubevirt.create_target(vmi, migration, suffix=f"round{round_}")
            await succeed_migration(kubevirt, migration, source, target, walk=False)
            await kubevirt.delete_pod(source["metadata"]["name"], grace=0)
            source = target
            await eventually(lambda: cpu_hard(tenant, equal=base_cpu), what="back to the base")
            for name in let_in:
                await tenant.delete_pod(name, grace=0)
            await eventually(lambda: used_cpu_is(tenant, VM_CPU), timeout=60, what="racers gone")
    answered = [pods_answered(server) for server in servers]
    assert all(answered), f"pods answered per replica: {answered}"


async def cpu_hard(
    tenant: KubeVirtByHand, *, above: Quantity | None = None, equal: Quantity | None = None
) -> bool:
    """Whether spec.hard's limits.cpu and status.hard's (the copy quota admission judges by,
    ours or kube-controller-manager's) are both above, or both equal to, the given value."""
    quota = await tenant.quota()
    status_hard = ((quota.get("status") or {}).get("hard") or {}).get("limits.cpu")
    if status_hard is None:
        return False
    hards = (Quantity.parse(quota["spec"]["hard"]["limits.cpu"]), Quantity.parse(status_hard))
    return all(
        (above is not None and hard > above) or (equal is not None and hard == equal)
        for hard in hards
    )


async def racers_present(tenant: KubeVirtByHand, round_: int) -> set[str]:
    """The names of the round's racer pods the API server has, not being deleted."""
    pods = (await tenant.api.list(PODS, tenant.namespace)).get("items") or []
    return {
        str(pod["metadata"]["name"])
        for pod in pods
        if str(pod["metadata"]["name"]).startswith(f"racer-{round_}-")
        and not pod["metadata"].get("deletionTimestamp")
    }


async def used_cpu_is(tenant: KubeVirtByHand, expected: Quantity) -> bool:
    used = (((await tenant.quota()).get("status") or {}).get("used") or {}).get("limits.cpu")
    return used is not None and Quantity.parse(used) == expected


async def attempt(tenant: KubeVirtByHand, name: str) -> str:
    """'admitted', or why not: 'webhook unreachable' (the fail-closed rule) or the message."""
    try:
        await tenant.api.create(PODS, small_pod(name), tenant.namespace)
    except errors.ApiError as refused:
        if "failed calling webhook" in refused.message:
            return "webhook unreachable"
        return refused.message
    return "admitted"


async def room_label(tenant: KubeVirtByHand) -> str | None:
    namespace = await tenant.api.get(NAMESPACES, tenant.namespace)
    return (namespace["metadata"].get("labels") or {}).get(LABEL_ROOM_HELD)


async def test_with_the_webhook_down_only_kubevirts_target_gets_in_while_room_is_held(
    stack: Stack,
) -> None:
    """The pods rule fails closed only where room is held and never for KubeVirt's controller:
    with the webhook stopped, forty racing pods are all refused during the migration, the target
    pod gets in, the migration completes, and once the room is given back the label goes (no
    linger by default) and the namespace is open again."""
    tenant, kubevirt, _, server = stack
    # No Rancher here: in a Rancher namespace whose raise goes to spec.hard directly, a label
    # write would have Rancher's agent reset the raise, so the controller does not label it.
    await tenant.create_quota(V170_HARD)
    vmi, source = await kubevirt.start_vm("vm1")
    await server.stop()
    assert await attempt(tenant, "before") == "admitted", "no room held: the webhook is not asked"
    base_cpu = Quantity.parse(V170_HARD["limits.cpu"])

    migration = await kubevirt.migrate(vmi)
    await eventually(lambda: cpu_hard(tenant, above=base_cpu), what="the room raised")
    assert await room_label(tenant) == "true", "labelled before the raise"
    outcomes = await asyncio.gather(*(attempt(tenant, f"racer-{i}") for i in range(RACERS)))
    assert set(outcomes) == {"webhook unreachable"}, outcomes
    target = await kubevirt.create_target(vmi, migration)
    await succeed_migration(kubevirt, migration, source, target, walk=False)
    await kubevirt.delete_pod(source["metadata"]["name"], grace=0)
    await eventually(lambda: cpu_hard(tenant, equal=base_cpu), what="hard back to the base")
    await eventually(lambda: _is_none(room_label(tenant)), what="the label removed with the room")
    expected = VM_CPU + Quantity.parse(POD_CPU)  # the VM on its new pod, and "before"
    await eventually(lambda: used_cpu_is(tenant, expected), what="no pod above the base")
    assert await attempt(tenant, "after") == "admitted", "room given back: open again"


async def _is_none(value: object) -> bool:
    return await value is None  # type: ignore[misc]


def sized_pod(name: str, cpu: str) -> Object:
    pod = small_pod(name)
    pod["spec"]["containers"][0]["resources"]["limits"]["cpu"] = cpu
    return pod


async def test_a_migration_leaving_frees_nothing_admitted_a_moment_ago(
    api: ApiClient,
    cluster: ClusterInfo,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tenant's own migration holds room; the webhook's quota watch lags from then on (its
    lookup is held at the quota it shows then: 2015m used, 985m free under the base). p0 (900m) is
    admitted; the tenant deletes that migration before its target pod exists and migrates again.
    The reservation made under the first was void once it left, so p1 (900m) was decided on the
    lagging figure and admitted, and quota admission let it into the new raise: 3815m against a
    base of 3000m. Now p1 is denied, counted next to p0."""
    async with deployed(api, cluster, namespace, tmp_path, replicas=1) as (
        tenant,
        kubevirt,
        _,
        servers,
    ):
        await tenant.create_quota(V170_HARD)
        vmi, _source = await kubevirt.start_vm("vm1")
        base_cpu = Quantity.parse(V170_HARD["limits.cpu"])
        first = await kubevirt.migrate(vmi, "vm1-first")
        await eventually(lambda: cpu_hard(tenant, above=base_cpu), what="the room raised")
        caches = servers[0].lookups
        await eventually(lambda: _raised_in(caches, tenant.namespace), what="the webhook sees it")
        lagging = caches.managed_quota(tenant.namespace)
        monkeypatch.setattr(caches, "managed_quota", lambda _namespace: lagging)

        await tenant.api.create(PODS, sized_pod("p0", "900m"), tenant.namespace)
        await tenant.api.delete(
            VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, first["metadata"]["name"], tenant.namespace
        )
        await kubevirt.migrate(vmi, "vm1-second")
        await eventually(
            lambda: _migrations_seen(caches, tenant.namespace, {"vm1-second"}),
            what="the webhook sees the first migration gone and the second",
        )
        await eventually(lambda: cpu_hard(tenant, above=base_cpu), what="raised for the second")
        message = await denial(tenant.api.create(PODS, sized_pod("p1", "900m"), tenant.namespace))
        assert message is not None, "p1 admitted: 3815m used against a base of 3000m"
        assert "would take room reserved for the live migration of vm1" in message, message
        assert "in use 2915m" in message, message


async def _raised_in(caches: Any, namespace: str) -> bool:
    quota = caches.managed_quota(namespace)
    hard = ((quota or {}).get("spec") or {}).get("hard") or {}
    return Quantity.parse(hard.get("limits.cpu", "0")) > Quantity.parse(V170_HARD["limits.cpu"])


async def _migrations_seen(caches: Any, namespace: str, names: set[str]) -> bool:
    return {m["metadata"]["name"] for m in caches.migrations(namespace)} == names
