"""The KubeVirt simulator on the real local cluster: VM starts counted by real quota admission with
the seeds' numbers, migrations walked to the end, blocked by quota and released by a raise, aborted,
and a node drain held to parallelOutboundMigrationsPerNode."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from harvester_quota.apis.harvester import SETTINGS
from harvester_quota.apis.kubevirt import (
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
    VIRTUAL_MACHINE_INSTANCES,
)
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import EVENTS, PODS, RESOURCE_QUOTAS, Object
from harvester_quota.testbench.sim.kubevirt import (
    KubeVirtConfig,
    KubeVirtSimulator,
    MigrationTimings,
    Outcome,
    ParallelLimits,
    Phase,
    VMSpec,
    set_overhead_ratio_setting,
)
from harvester_quota.testbench.sim.kubevirt.objects import SETTING_OVERHEAD_RATIO

from tests.helpers import eventually

pytestmark = pytest.mark.integration

FAST = MigrationTimings(
    scheduling=0.05,
    scheduled=0.05,
    preparing_target=0.05,
    target_ready=0.05,
    running=0.3,
    source_pod_grace_seconds=1,
    failed_target_linger=1.5,
    target_pod_grace_seconds=1,
    limit_retry=0.3,
    active_pods_retry=0.3,
)
ALL_PHASES = [
    Phase.PENDING,
    Phase.SCHEDULING,
    Phase.SCHEDULED,
    Phase.PREPARING_TARGET,
    Phase.TARGET_READY,
    Phase.RUNNING,
    Phase.SUCCEEDED,
]


async def create_quota(api: ApiClient, namespace: str, hard: dict[str, str]) -> Object:
    """A Rancher-style default quota, returned once the quota controller has filled its status
    (before that, admission refuses every pod)."""
    quota = await api.create(
        RESOURCE_QUOTAS,
        {
            "metadata": {
                "generateName": "default-",
                "labels": {"resourcequota.management.cattle.io/default-resource-quota": "true"},
            },
            "spec": {"hard": hard},
        },
        namespace,
    )
    name = quota["metadata"]["name"]

    async def ready() -> Object | None:
        current = await api.get(RESOURCE_QUOTAS, name, namespace)
        return current if "used" in current.get("status", {}) else None

    return await eventually(ready, what=f"status of quota {name}")


async def failed_create_message(api: ApiClient, namespace: str, vmi: str) -> str:
    """The message of the FailedCreate Event on VMI `vmi`, once one is written."""

    async def written() -> str | None:
        listed = await api.list(
            EVENTS,
            namespace,
            field_selector=f"involvedObject.kind=VirtualMachineInstance,"
            f"involvedObject.name={vmi},reason=FailedCreate",
        )
        return next((str(e["message"]) for e in listed["items"]), None)

    return await eventually(written, what=f"a FailedCreate Event on VMI {vmi}")


async def quota_used(api: ApiClient, namespace: str, name: str) -> dict[str, str]:
    return dict((await api.get(RESOURCE_QUOTAS, name, namespace)).get("status", {}).get("used", {}))


@pytest.fixture
async def ratio_setting(api: ApiClient) -> AsyncIterator[Callable[[str], Any]]:
    """Sets the Harvester overhead-ratio setting; puts it back to 1.5 afterwards."""

    async def set_ratio(value: str) -> None:
        await set_overhead_ratio_setting(api, value)

    yield set_ratio
    await set_overhead_ratio_setting(api, "1.5")


def simulator(api: ApiClient, namespace: str, **config: Any) -> KubeVirtSimulator:
    options: dict[str, Any] = {"timings": FAST, "ratio_from_setting": False, "ratio": "1.5"}
    options.update(config)
    return KubeVirtSimulator(api, namespace=namespace, config=KubeVirtConfig(**options))


async def test_vm_launcher_pod_counts_as_in_the_v170_seed(api: ApiClient, namespace: str) -> None:
    quota = await create_quota(api, namespace, {"limits.cpu": "3", "limits.memory": "5000Mi"})
    async with simulator(api, namespace) as kubevirt:
        started = await kubevirt.create_vm(VMSpec("vm1", cores=2, memory="4Gi"))
        assert started.started and started.node
        used = await eventually(
            lambda: quota_used(api, namespace, quota["metadata"]["name"]),
            what="quota usage",
        )
        assert used == {"limits.cpu": "2015m", "limits.memory": "4797464313"}
        vmi = await api.get(VIRTUAL_MACHINE_INSTANCES, "vm1", namespace)
        assert vmi["status"]["phase"] == "Running"
        assert vmi["status"]["nodeName"] == started.node
        assert vmi["spec"]["domain"]["memory"]["guest"] == "4Gi"
        assert vmi["spec"]["domain"]["resources"]["requests"] == {"cpu": "200m", "memory": "2730Mi"}
        pod = await api.get(PODS, str(started.pod), namespace)
        assert pod["metadata"]["labels"]["kubevirt.io/created-by"] == vmi["metadata"]["uid"]
        assert pod["metadata"]["ownerReferences"][0]["uid"] == vmi["metadata"]["uid"]
        assert list(vmi["status"]["activePods"]) == [pod["metadata"]["uid"]]

        # A second VM does not fit: the refusal is reported, the VMI stays Pending.
        refused = await kubevirt.create_vm(VMSpec("vm2", cores=2, memory="4Gi"))
        assert not refused.started
        assert refused.refusal is not None and "exceeded quota" in refused.refusal
        vmi2 = await api.get(VIRTUAL_MACHINE_INSTANCES, "vm2", namespace)
        assert vmi2["status"]["phase"] == "Pending"
        assert "exceeded quota" in vmi2["status"]["conditions"][0]["message"]
        message = await failed_create_message(api, namespace, "vm2")
        assert message.startswith("Error creating pod: ") and "exceeded quota" in message


async def test_v054_counts_as_in_the_v121_seed_and_flags_nothing(
    api: ApiClient, namespace: str
) -> None:
    """KubeVirt v0.54 (Harvester v1.2.1): 2 / 4531245057 per VM; a refused target pod is only
    retried with backoff: no migrationRejectedByResourceQuota, no phase timestamps (v0.59+/v1.0+)."""
    quota = await create_quota(api, namespace, {"limits.cpu": "3", "limits.memory": "60Gi"})
    async with simulator(api, namespace, kubevirt_version="0.54") as kubevirt:
        (await kubevirt.create_vm(VMSpec("vm1", cores=2, memory="4Gi"))).check()
        used = await eventually(
            lambda: quota_used(api, namespace, quota["metadata"]["name"]), what="quota usage"
        )
        assert used == {"limits.cpu": "2", "limits.memory": "4531245057"}
        vmi = await api.get(VIRTUAL_MACHINE_INSTANCES, "vm1", namespace)
        assert vmi["spec"]["domain"]["memory"]["guest"] == "3996Mi"
        assert vmi["spec"]["domain"]["resources"]["requests"] == {"cpu": "125m", "memory": "2730Mi"}
        again = await kubevirt.start_vm("vm1")  # already running: reported, not restarted
        assert again.started and again.vmi_uid == vmi["metadata"]["uid"]

        name = await kubevirt.migrate("vm1")

        def refused_thrice() -> bool:
            record = kubevirt.records.get(namespace, name)
            return record is not None and record.refusals >= 3

        await eventually(refused_thrice, what="three quota refusals")
        vmim = await api.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, name, namespace)
        assert vmim["status"] == {"phase": "Pending"}


async def test_migration_without_quota_walks_to_succeeded(api: ApiClient, namespace: str) -> None:
    async with simulator(api, namespace) as kubevirt:
        started = (await kubevirt.create_vm(VMSpec("vm1"))).check()
        name = await kubevirt.migrate("vm1")
        record = await kubevirt.wait_migration(name, timeout=30)
        assert record.outcome is Outcome.SUCCEEDED
        assert [phase for phase, _ in record.phases] == ALL_PHASES
        assert record.source_node == started.node
        assert record.target_node and record.target_node != started.node
        assert record.blocked_seconds == 0.0

        vmim = await api.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, name, namespace)
        assert vmim["status"]["phase"] == "Succeeded"
        assert [t["phase"] for t in vmim["status"]["phaseTransitionTimestamps"]] == ALL_PHASES

        async def finalizer_released() -> bool:
            current = await api.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, name, namespace)
            return "finalizers" not in current["metadata"]

        await eventually(finalizer_released, what="the migration's finalizer to go")
        vmi = await api.get(VIRTUAL_MACHINE_INSTANCES, "vm1", namespace)
        state = vmi["status"]["migrationState"]
        assert vmi["status"]["nodeName"] == record.target_node
        assert vmi["metadata"]["labels"]["kubevirt.io/nodeName"] == record.target_node
        assert state["completed"] is True and state["migrationUid"] == vmim["metadata"]["uid"]
        assert (state["sourceNode"], state["targetNode"]) == (started.node, record.target_node)
        assert state["startTimestamp"] and state["endTimestamp"]

        target = await api.get(PODS, str(record.target_pod), namespace)
        assert (
            target["metadata"]["labels"]["kubevirt.io/migrationJobUID"] == vmim["metadata"]["uid"]
        )
        assert target["spec"]["nodeName"] == record.target_node

        # The source pod terminates with its grace period, then is gone.
        assert await kubevirt.records.wait_all_finished(10, source_pods_gone=True)
        with pytest.raises(errors.NotFound):
            await api.get(PODS, str(started.pod), namespace)


async def test_blocked_migration_proceeds_after_a_quota_raise(
    api: ApiClient, namespace: str, ratio_setting: Callable[[str], Any]
) -> None:
    """The v1.7.0 seed's test 2: ratio 1.5 at start, 4.5 at migration; the target pod is refused,
    flagged, and admitted promptly once the quota is raised by hand."""
    await ratio_setting("1.5")
    quota = await create_quota(api, namespace, {"limits.cpu": "3", "limits.memory": "5000Mi"})
    quota_name = quota["metadata"]["name"]
    async with simulator(api, namespace, ratio_from_setting=True) as kubevirt:
        (await kubevirt.create_vm(VMSpec("vm1"))).check()
        await ratio_setting("4.5")
        name = await kubevirt.migrate("vm1")

        def refused_enough() -> bool:
            record = kubevirt.records.get(namespace, name)
            return record is not None and record.refusals >= 10

        await eventually(refused_enough, what="ten quota refusals")
        vmim = await api.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, name, namespace)
        assert vmim["status"]["phase"] == "Pending"
        conditions = vmim["status"]["conditions"]
        assert [c["type"] for c in conditions] == ["migrationRejectedByResourceQuota"]
        assert conditions[0]["status"] == "True"
        record = kubevirt.records.get(namespace, name)
        assert record is not None and record.admitted is None and record.blocked_seconds is None
        assert "exceeded quota: " + quota_name in record.refusal_messages[0]
        assert "limits.memory=5682461313" in record.refusal_messages[0]
        message = await failed_create_message(api, namespace, "vm1")
        assert message.startswith("Error creating pod: ") and quota_name in message

        # Raised by hand to the seed's values: the next quota event retries at once, long before
        # the rate limiter (now seconds apart) would have.
        quota = await api.get(RESOURCE_QUOTAS, quota_name, namespace)
        quota["spec"]["hard"] = {"limits.cpu": "5", "limits.memory": "10865341313"}
        await api.update(RESOURCE_QUOTAS, quota)
        raised_at = kubevirt.clock.monotonic()
        record = await kubevirt.wait_migration(name, timeout=30)
        assert record.outcome is Outcome.SUCCEEDED
        assert record.admitted is not None and record.admitted.mono - raised_at < 2.0
        assert record.blocked_seconds is not None and record.blocked_seconds > 2.0
        vmim = await api.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, name, namespace)
        assert not vmim["status"].get("conditions")
        target = await api.get(PODS, str(record.target_pod), namespace)
        limits = target["spec"]["containers"][0]["resources"]["limits"]
        assert limits["memory"] == "5622461313"  # compute; + 60M guest-console-log = 5682461313
        assert await kubevirt.records.wait_all_finished(10, source_pods_gone=True)
        used = await eventually(
            lambda: _used_memory_is(api, namespace, quota_name, "5682461313"),
            what="usage at ratio 4.5",
        )
        assert used


async def _used_memory_is(api: ApiClient, namespace: str, name: str, value: str) -> bool:
    return (await quota_used(api, namespace, name)).get("limits.memory") == value


async def test_abort_leaves_the_target_pod_for_a_while(api: ApiClient, namespace: str) -> None:
    async with simulator(api, namespace) as kubevirt:
        started = (await kubevirt.create_vm(VMSpec("vm1", migration_duration=60))).check()
        name = await kubevirt.migrate("vm1")

        def running() -> bool:
            record = kubevirt.records.get(namespace, name)
            return record is not None and record.phase is Phase.RUNNING

        await eventually(running, what="migration Running")
        await kubevirt.abort(name)
        record = await kubevirt.wait_migration(name, timeout=10)
        assert record.outcome is Outcome.ABORTED
        vmi = await api.get(VIRTUAL_MACHINE_INSTANCES, "vm1", namespace)
        state = vmi["status"]["migrationState"]
        assert state["abortStatus"] == "Succeeded"
        assert state["completed"] is True and state["failed"] is True
        assert vmi["status"]["nodeName"] == started.node
        # Still there right after the abort, gone after the linger and its grace period.
        target = await api.get(PODS, str(record.target_pod), namespace)
        assert "deletionTimestamp" not in target["metadata"]

        async def target_gone() -> bool:
            try:
                await api.get(PODS, str(record.target_pod), namespace)
            except errors.NotFound:
                return True
            return False

        await eventually(target_gone, timeout=15, what="the aborted target pod to go")
        await eventually(
            lambda: _migration_gone(api, namespace, name), what="the deleted migration to go"
        )
        await api.get(PODS, str(started.pod), namespace)  # the source pod lives on


async def _migration_gone(api: ApiClient, namespace: str, name: str) -> bool:
    try:
        await api.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, name, namespace)
    except errors.NotFound:
        return True
    return False


async def test_drain_respects_outbound_migrations_per_node(api: ApiClient, namespace: str) -> None:
    node = "kwok-node-0"
    # Running long enough that the evacuation's third migration, however late a loaded machine
    # creates it, finds the node's two outbound slots taken (1 s was not, once in ci29).
    timings = MigrationTimings(**{**vars(FAST), "running": 4.0})
    kubevirt = simulator(
        api, namespace, timings=timings, limits=ParallelLimits(per_cluster=5, outbound_per_node=2)
    )
    async with kubevirt:
        for index in range(3):
            (await kubevirt.create_vm(VMSpec(f"vm{index}"), node=node)).check()
        try:
            keys = await kubevirt.drain(node)
            assert len(keys) == 3
            assert await kubevirt.records.wait_all_finished(30)
        finally:
            await kubevirt.uncordon(node)
        records = kubevirt.records.all()
        assert all(r.outcome is Outcome.SUCCEEDED and r.evacuation_node == node for r in records)
        assert all(r.name.startswith("kubevirt-evacuation-") for r in records)
        assert sum(r.held_by_limits for r in records) > 0
        # A slot is taken from the target pod's creation until the VMI leaves the node (KubeVirt
        # counts a node's outbound migrations by their VMIs' nodeName), which is a few API writes
        # before the migration is marked Succeeded: measured to `finished`, a third migration
        # admitted in between looked like three at once (1 run in 5, loaded).
        intervals = sorted(
            (r.admitted.mono, r.left_source_node.mono)
            for r in records
            if r.admitted and r.left_source_node
        )
        assert len(intervals) == 3
        most = max(sum(1 for s, e in intervals if s <= start < e) for start, _ in intervals)
        assert most == 2
        for index in range(3):
            vmi = await api.get(VIRTUAL_MACHINE_INSTANCES, f"vm{index}", namespace)
            assert vmi["status"]["nodeName"] != node


async def test_vmi_deleted_mid_migration_fails_it(api: ApiClient, namespace: str) -> None:
    async with simulator(api, namespace) as kubevirt:
        (await kubevirt.create_vm(VMSpec("vm1", migration_duration=60))).check()
        name = await kubevirt.migrate("vm1")

        def running() -> bool:
            record = kubevirt.records.get(namespace, name)
            return record is not None and record.phase is Phase.RUNNING

        await eventually(running, what="migration Running")
        await kubevirt.delete_vmi("vm1", grace_seconds=1)
        record = await kubevirt.wait_migration(name, timeout=10)
        assert record.outcome is Outcome.FAILED
        assert record.failure_reason in {"vmi shutdown during migration", "vmi does not exist"}

        async def pods_gone() -> bool:
            listed = await api.list_all(PODS, namespace)
            return not listed.items

        await eventually(pods_gone, what="both launcher pods to go")
        await eventually(lambda: _migration_gone(api, namespace, name), what="migration deleted")


async def test_restart_and_stop(api: ApiClient, namespace: str) -> None:
    async with simulator(api, namespace) as kubevirt:
        first = (await kubevirt.create_vm(VMSpec("vm1"))).check()
        second = (await kubevirt.restart_vm("vm1", grace_seconds=1)).check()
        assert second.vmi_uid != first.vmi_uid
        with pytest.raises(errors.NotFound):
            await api.get(PODS, str(first.pod), namespace)
        await kubevirt.stop_vm("vm1", grace_seconds=1)
        with pytest.raises(errors.NotFound):
            await api.get(VIRTUAL_MACHINE_INSTANCES, "vm1", namespace)


async def test_settings_default_is_read_when_absent(api: ApiClient, namespace: str) -> None:
    kubevirt = simulator(api, namespace, ratio_from_setting=True)
    with contextlib.suppress(errors.NotFound):
        await api.delete(SETTINGS, SETTING_OVERHEAD_RATIO)
    assert await kubevirt.overhead_ratio() == "1.5"
    await set_overhead_ratio_setting(api, "")
    assert await kubevirt.overhead_ratio() == "1.5"  # empty value: the default
    await set_overhead_ratio_setting(api, "0")
    assert await kubevirt.overhead_ratio() is None  # cleared
    await set_overhead_ratio_setting(api, "1.5")
