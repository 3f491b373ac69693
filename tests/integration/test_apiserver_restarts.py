"""Two API-server restarts 30 s apart while a migration holds room: the controllers watch again
within seconds each time, so the quota returns to its base as soon as the migration ends."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable

import pytest
from harvester_quota.app import ControllerApp
from harvester_quota.config.management import Options
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.reflector import REFUSED_BACKOFF_CAP
from harvester_quota.generic.resource import NAMESPACES, PODS, RESOURCE_QUOTAS
from harvester_quota.localcluster import LocalCluster
from harvester_quota.util.quantity import Quantity
from prometheus_client import CollectorRegistry

from tests.helpers import eventually, succeed_migration
from tests.integration.kubevirt_by_hand import KubeVirtByHand
from tests.integration.test_framework import eventually_create

pytestmark = pytest.mark.integration

BASE = {"limits.cpu": "3", "limits.memory": "5000Mi"}
RESTART_GAP = 30.0


async def cpu_hard(kv: KubeVirtByHand) -> str:
    try:
        return str((await kv.quota())["spec"]["hard"]["limits.cpu"])
    except Exception:  # the server may still be coming back
        return ""


async def test_two_restarts_30s_apart_then_the_room_is_given_back_promptly(
    api: ApiClient, kv: KubeVirtByHand, local_cluster: LocalCluster
) -> None:
    app = ControllerApp(
        api,
        Options(leader_elect=False, kubevirt_version="1.6", workers=2),
        registry=CollectorRegistry(),
    )
    await app.start()
    try:
        await kv.set_rancher_base({"limitsCpu": "3", "limitsMemory": "5000Mi"})
        await kv.create_quota(BASE)
        vmi, source = await kv.start_vm("vm1")
        migration = await kv.migrate(vmi)
        await eventually(lambda: _is(cpu_hard(kv), "5015m"), what="the raise")
        for restart in range(2):
            if restart:
                await asyncio.sleep(RESTART_GAP)  # the second fault comes 30 s after the first
            await asyncio.to_thread(local_cluster.restart_component, "kube-apiserver")
            await eventually_create(api, *_probe(kv, restart))
        target = await eventually(
            lambda: kv.try_create_target(vmi, migration), what="target admitted"
        )
        await succeed_migration(kv, migration, source, target, walk=False)
        await kv.delete_pod(source["metadata"]["name"], grace=0)
        ended = time.monotonic()
        await eventually(lambda: _is(cpu_hard(kv), "3"), timeout=60, what="back to the base")
        print(f"quota back to its base {time.monotonic() - ended:.2f}s after the migration ended")
        waits = [w for i in app.management.informers.informers for w in i.reflector.waits]
        assert waits, "the restarts were noticed"
        ours = [w.seconds for w in waits if not w.asked]  # a Retry-After is the server's call
        assert max(ours) <= 2 * REFUSED_BACKOFF_CAP, f"a reflector waited {max(ours):.1f}s"
    finally:
        await app.stop()
        await peers_caught_up(KubeVirtByHand(kv.api, f"{kv.namespace}-peers"))


async def peers_caught_up(kv: KubeVirtByHand) -> None:
    """Waits until kwok and kube-controller-manager watch again after the restarts, so the tests
    after this one meet a whole cluster: a probe pod gets Running (kwok), its delete completes
    (kwok) and its usage leaves status.used (kube-controller-manager). Their client-go
    reflectors back off for up to 30 s after losing the server; a later test once waited 30 s
    for a deleted pod's usage that kwok had not yet released. Uses a namespace of its own
    (`kv.namespace`, created here and deleted after), with room for the probe."""
    await eventually_create(kv.api, NAMESPACES, {"metadata": {"name": kv.namespace}}, "")
    quota = {"metadata": {"name": "default-quota"}, "spec": {"hard": {"limits.cpu": "1"}}}
    await kv.api.create(RESOURCE_QUOTAS, quota, kv.namespace)
    await eventually(lambda: _has_used(kv), timeout=90, what="the probe quota's status")
    pod = {
        "metadata": {"name": "peers-probe"},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"limits": {"cpu": "10m", "memory": "16Mi"}},
                }
            ],
        },
    }
    # The namespace's default service account comes from kube-controller-manager too.
    await eventually(lambda: _created(kv, pod), timeout=90, what="the probe pod created")
    await eventually(lambda: _pod_running(kv), timeout=90, what="kwok running the probe pod")
    # Quota admission charged the probe at its creation; only kube-controller-manager's recount
    # takes it off again (whatever else it recounts meanwhile only lowers the figure further).
    with_probe = await _used_cpu(kv)
    await kv.delete_pod("peers-probe", grace=1)
    await eventually(lambda: kv.pod_gone("peers-probe"), timeout=90, what="kwok deleting it")
    released = with_probe - Quantity.parse("10m")
    await eventually(
        lambda: _at_most(_used_cpu(kv), released), timeout=90, what="its usage released"
    )
    await kv.api.delete(NAMESPACES, kv.namespace)


async def _created(kv: KubeVirtByHand, pod: dict[str, object]) -> bool:
    try:
        await kv.api.create(PODS, pod, kv.namespace)
    except errors.Forbidden as refused:
        assert "serviceaccount" in refused.message, refused.message
        return False
    return True


async def _has_used(kv: KubeVirtByHand) -> bool:
    return "limits.cpu" in ((await kv.quota()).get("status") or {}).get("used", {})


async def _pod_running(kv: KubeVirtByHand) -> bool:
    pod = await kv.api.get(PODS, "peers-probe", kv.namespace)
    return bool((pod.get("status") or {}).get("phase") == "Running")


async def _used_cpu(kv: KubeVirtByHand) -> Quantity:
    return Quantity.parse(str((await kv.quota())["status"]["used"]["limits.cpu"]))


async def _at_most(value: Awaitable[Quantity], limit: Quantity) -> bool:
    return await value <= limit


async def _is(value: object, expected: str) -> bool:
    return await value == expected  # type: ignore[misc]


def _probe(kv: KubeVirtByHand, index: int) -> tuple[object, dict[str, object], str]:
    from harvester_quota.generic.resource import CONFIG_MAPS

    return CONFIG_MAPS, {"metadata": {"name": f"probe-{index}"}}, kv.namespace
