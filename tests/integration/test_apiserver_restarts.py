"""Two API-server restarts 30 s apart while a migration holds room: the controllers watch again
within seconds each time, so the quota returns to its base as soon as the migration ends."""

from __future__ import annotations

import asyncio
import time

import pytest
from harvester_quota.app import ControllerApp
from harvester_quota.config.management import Options
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.reflector import REFUSED_BACKOFF_CAP
from harvester_quota.localcluster import LocalCluster
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


async def _is(value: object, expected: str) -> bool:
    return await value == expected  # type: ignore[misc]


def _probe(kv: KubeVirtByHand, index: int) -> tuple[object, dict[str, object], str]:
    from harvester_quota.generic.resource import CONFIG_MAPS

    return CONFIG_MAPS, {"metadata": {"name": f"probe-{index}"}}, kv.namespace
