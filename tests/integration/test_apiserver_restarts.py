"""Two API-server restarts while a migration holds room, the second after the reflectors' watches
have lasted (LASTING_WATCH: their backoff is forgotten): the controllers watch again within
seconds each time, so the quota returns to its base as soon as the migration ends."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Iterator

import pytest
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.relistwaits import LASTING_WATCH, REFUSED_BACKOFF_CAP
from harvester_quota.generic.resource import PODS
from harvester_quota.testbench.localcluster import LocalCluster
from harvester_quota.testbench.localcluster.rest import RestClient
from harvester_quota.util.quantity import Quantity

from tests.helpers import eventually, running_controllers, succeed_migration
from tests.integration.conftest import fresh_namespace
from tests.integration.kubevirt_by_hand import KubeVirtByHand
from tests.integration.test_framework import eventually_create

pytestmark = pytest.mark.integration

BASE = {"limits.cpu": "3", "limits.memory": "5000Mi"}
RESTART_GAP = 2 * (2 * REFUSED_BACKOFF_CAP) + LASTING_WATCH
"""From the server answering again to the second restart: a reflector's longest wait while the
server restarts (the cap doubled by its jitter), twice (a first re-watch may still meet the server
starting), then a watch that lasts LASTING_WATCH, so the second restart ends a lasting watch and
the reflector forgets the first restart's failures (it had been 30 s: 12 s of the suite more)."""


async def cpu_hard(kv: KubeVirtByHand) -> str:
    try:
        return str((await kv.quota())["spec"]["hard"]["limits.cpu"])
    except Exception:  # the server may still be coming back
        return ""


@pytest.fixture
def probe(rest: RestClient, api: ApiClient) -> Iterator[KubeVirtByHand]:
    """A namespace of its own for `peers_caught_up`, made while the cluster is whole."""
    with fresh_namespace(rest, "peers-probe") as name:
        yield KubeVirtByHand(api, name)


async def test_two_restarts_a_lasting_watch_apart_then_the_room_is_given_back_promptly(
    api: ApiClient, kv: KubeVirtByHand, local_cluster: LocalCluster, probe: KubeVirtByHand
) -> None:
    async with running_controllers(api) as app:
        await kv.set_rancher_base({"limitsCpu": "3", "limitsMemory": "5000Mi"})
        await kv.create_quota(BASE)
        await probe.create_quota({"limits.cpu": "1"})
        vmi, source = await kv.start_vm("vm1")
        migration = await kv.migrate(vmi)
        await eventually(lambda: _is(cpu_hard(kv), "5015m"), what="the raise")
        for restart in range(2):
            if restart:
                await asyncio.sleep(RESTART_GAP)  # the second fault: a fault's timing, no condition
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
    await peers_caught_up(probe)


RECOUNT_WAIT = 5.0
"""How long one probe pod's usage may take to leave status.used. A probe deleted while
kube-controller-manager did not watch is never recounted (until its 5-minute resync), so a
longer wait on it is lost: the next probe follows instead."""


async def peers_caught_up(probe: KubeVirtByHand, cycles: int = 32) -> None:
    """Waits until kwok and kube-controller-manager watch pods again after the restarts, so the
    tests after this one meet a whole cluster. Their client-go reflectors back off for up to 30 s
    after losing the server, and a pod created and deleted meanwhile is never seen by them: kube-
    controller-manager then recounts its usage only at its 5-minute resync (a later test once
    waited 30 s in vain). So, in `probe.namespace` (a quota with room), a probe pod is created,
    run and deleted by kwok, and its usage must leave status.used within RECOUNT_WAIT; if it does
    not, another probe pod follows, up to `cycles` of them (160 s of waits in all)."""
    for cycle in range(cycles):
        if await _recounted(probe, f"peers-probe-{cycle}"):
            return
        print(f"peers-probe-{cycle}: not recounted within {RECOUNT_WAIT:.0f} s; another follows")
    raise AssertionError(f"kube-controller-manager recounted none of {cycles} probe pods")


async def _recounted(probe: KubeVirtByHand, name: str) -> bool:
    """One probe pod created, run and deleted; True if its usage left status.used within
    RECOUNT_WAIT."""
    pod = {
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"limits": {"cpu": "10m"}}}
            ],
        },
    }
    await eventually_create(probe.api, PODS, pod, probe.namespace)
    await eventually(lambda: _pod_running(probe, name), timeout=90, what=f"kwok running {name}")
    # Quota admission charged the probe at its creation; only kube-controller-manager's recount
    # takes it off again (and whatever else it recounts meanwhile only lowers the figure).
    released = await _used_cpu(probe) - Quantity.parse("10m")
    await probe.delete_pod(name, grace=1)
    await eventually(lambda: probe.pod_gone(name), timeout=90, what=f"kwok deleting {name}")
    try:
        await eventually(lambda: _at_most(_used_cpu(probe), released), timeout=RECOUNT_WAIT)
    except AssertionError:
        return False
    return True


async def _pod_running(probe: KubeVirtByHand, name: str) -> bool:
    pod = await probe.api.get(PODS, name, probe.namespace)
    return bool((pod.get("status") or {}).get("phase") == "Running")


async def _used_cpu(probe: KubeVirtByHand) -> Quantity:
    return Quantity.parse(str((await probe.quota())["status"]["used"]["limits.cpu"]))


async def _at_most(value: Awaitable[Quantity], limit: Quantity) -> bool:
    return await value <= limit


async def _is(value: object, expected: str) -> bool:
    return await value == expected  # type: ignore[misc]


def _probe(kv: KubeVirtByHand, index: int) -> tuple[object, dict[str, object], str]:
    from harvester_quota.generic.resource import CONFIG_MAPS

    return CONFIG_MAPS, {"metadata": {"name": f"probe-{index}"}}, kv.namespace
