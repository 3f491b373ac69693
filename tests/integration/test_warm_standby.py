"""A warm standby (`harvester-quota run`'s default): its caches fill while another replica holds the
Lease, it queues and writes nothing until it wins, and it reconciles from those caches once it
does."""

from __future__ import annotations

import asyncio
import datetime
import signal
from pathlib import Path

import aiohttp
import pytest
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.leader import format_micro_time
from harvester_quota.generic.resource import LEASES
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.localcluster.process import free_port
from harvester_quota.testbench.sim.kubevirt import VMSpec
from harvester_quota.testbench.virtcontroller import VirtControllerDriver
from harvester_quota.util.quantity import Quantity
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import eventually
from tests.integration.kubevirt_by_hand import KubeVirtByHand
from tests.integration.test_controller_process import V170_HARD, cpu_hard, start_controller
from tests.integration.test_controllers_on_kubevirt import kubevirt, kv

__all__ = ["kubevirt", "kv"]  # fixtures shared with test_controllers_on_kubevirt.py

pytestmark = pytest.mark.integration

READ_VERBS = frozenset({"get", "list", "watch"})


async def samples(port: int, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The process's /metrics samples called `name`, by their labels."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        text = await response.text()
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


async def requests_by_verb(port: int) -> dict[tuple[str, str], float]:
    """(verb, resource) -> requests the process made."""
    counts: dict[tuple[str, str], float] = {}
    for labels, value in (await samples(port, "harvester_quota_api_requests_total")).items():
        found = dict(labels)
        key = (found["verb"], found["resource"])
        counts[key] = counts.get(key, 0.0) + value
    return counts


async def migrations_seen(port: int) -> float:
    """Migration ADDED events the process's informer decoded."""
    events = await samples(port, "harvester_quota_watch_events_total")
    return sum(
        value
        for labels, value in events.items()
        if ("type", "ADDED") in labels
        and ("resource", "virtualmachineinstancemigrations.kubevirt.io") in labels
    )


async def queued(port: int) -> float:
    """Keys the process's controllers ever queued, all queues together."""
    return sum((await samples(port, "workqueue_adds_total")).values())


async def ready(port: int) -> bool:
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/readyz") as response,
        ):
            return response.status == 200
    except aiohttp.ClientError:
        return False


async def hold_lease(api: ApiClient, name: str) -> None:
    """A Lease in ``default`` held by another replica for an hour: nobody else may take it."""
    now = format_micro_time(datetime.datetime.now(datetime.UTC))
    lease = {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "holderIdentity": "another-replica",
            "leaseDurationSeconds": 3600,
            "acquireTime": now,
            "renewTime": now,
        },
    }
    await api.create(LEASES, lease, "default")


async def release_lease(api: ApiClient, name: str) -> None:
    """What a leader stopping cleanly writes: no holder."""
    lease = await api.get(LEASES, name, "default")
    lease["spec"]["holderIdentity"] = ""
    lease["spec"]["leaseDurationSeconds"] = 1
    await api.update(LEASES, lease)


async def test_a_warm_standby_fills_its_caches_queues_and_writes_nothing_and_reconciles_from_them_on_winning(
    kubevirt_cluster: ClusterInfo,
    kubevirt_api: ApiClient,
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
    tmp_path: Path,
) -> None:
    await kv.set_rancher_base({"limitsCpu": "3000m", "limitsMemory": "5000Mi"})
    await kv.create_quota(V170_HARD)
    (await kubevirt.create_vm(VMSpec("vm1", cores=2, memory="4Gi"), node="kwok-node-0")).check()
    lease = f"standby-{kv.namespace}"
    await hold_lease(kubevirt_api, lease)
    port = free_port()
    standby = start_controller(kubevirt_cluster, lease, tmp_path / "standby.log", health_port=port)
    try:
        await eventually(lambda: ready(port), timeout=60, what="the standby ready (caches synced)")
        while_standby = await requests_by_verb(port)
        assert while_standby.get(("list", "pods"), 0) >= 1, "a warm standby lists pods at once"

        # A migration needing room while the Lease is someone else's: the standby's informers
        # see it, and its held controllers queue nothing, run nothing and write nothing.
        seen_before = await migrations_seen(port)
        await kubevirt.migrate("vm1")

        async def seen() -> bool:
            return await migrations_seen(port) > seen_before

        await eventually(seen, timeout=30, what="the migration in the standby's cache")
        assert await queued(port) == 0, "a standby queued keys"
        assert await cpu_hard(kv) == Quantity.parse("3")
        writes = {k: v for k, v in (await requests_by_verb(port)).items() if k[0] not in READ_VERBS}
        assert not writes, f"a standby wrote: {writes}"

        await release_lease(kubevirt_api, lease)

        async def raised() -> bool:
            return await cpu_hard(kv) == Quantity.parse("5015m")

        await eventually(raised, timeout=60, what="the standby, now leading, to raise the room")
        after = await requests_by_verb(port)
        assert after.get(("list", "pods"), 0) == while_standby[("list", "pods")], (
            "the new leader reconciled from the caches it filled as a standby, without listing "
            "pods again"
        )
    finally:
        await kubevirt_api.delete(LEASES, lease, "default")
        standby.terminate()
        if standby.wait(20) != 0:
            pytest.fail((tmp_path / "standby.log").read_text()[-3000:])


async def test_a_warm_standby_stopped_by_sigterm_exits_cleanly_and_leaves_the_leaders_lease(
    kubevirt_cluster: ClusterInfo, kubevirt_api: ApiClient, tmp_path: Path
) -> None:
    lease = f"standby-sigterm-{free_port()}"
    await hold_lease(kubevirt_api, lease)
    port = free_port()
    log = tmp_path / "standby.log"
    standby = start_controller(kubevirt_cluster, lease, log, health_port=port)
    try:
        await eventually(lambda: ready(port), timeout=60, what="the standby ready (caches synced)")
        standby.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(standby.wait, 20)
        text = log.read_text()
        assert code == 0, text[-3000:]
        assert "shutting down" in text
        for leftover in ("Traceback", "Unclosed", "Task was destroyed"):
            assert leftover not in text, f"{leftover!r} on a standby's exit:\n{text[-3000:]}"
        held = await kubevirt_api.get(LEASES, lease, "default")
        assert held["spec"]["holderIdentity"] == "another-replica", (
            "a standby stopping released or took a Lease it never held"
        )
    finally:
        if standby.poll() is None:
            standby.kill()
        await kubevirt_api.delete(LEASES, lease, "default")
