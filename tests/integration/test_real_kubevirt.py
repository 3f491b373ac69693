"""`VirtControllerDriver` and the virt-handler stand-in against KubeVirt's own virt-controller.

Every migration here is walked, throttled, refused and retried by the real virt-controller; the
stand-in does only the node side. Each test has its own namespace on the session's virt-controller
cluster.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from harvester_quota.apis.kubevirt import (
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
    VIRTUAL_MACHINE_INSTANCES,
)
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import NODES, PODS, RESOURCE_QUOTAS, Object
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.sim.kubevirt import Outcome, ParallelLimits, VMSpec
from harvester_quota.testbench.sim.kubevirt.handler import SELINUX_NONE, HandlerTimings
from harvester_quota.testbench.virtcontroller import DRAIN_TAINT_KEY, VirtControllerDriver

from tests.helpers import eventually
from tests.integration.real_kubevirt import node_to_drain
from tests.integration.test_target_room import NamespaceWatch

pytestmark = pytest.mark.integration

FAST = HandlerTimings(migration=0.3, source_shutdown=0.5, target_exit=0.5)


@pytest.fixture
def real_ns(kubevirt_namespace: str) -> str:
    return kubevirt_namespace


@pytest.fixture
async def real(
    kubevirt_api: ApiClient, kubevirt_cluster: ClusterInfo, real_ns: str
) -> AsyncIterator[VirtControllerDriver]:
    driver = VirtControllerDriver(
        kubevirt_api,
        kubevirt_version=str(kubevirt_cluster.kubevirt_version),
        namespaces=frozenset({real_ns}),
        timings=FAST,
        limits=ParallelLimits(5, 2),
    )
    async with driver:
        yield driver


async def test_a_vm_runs_on_the_node_it_prefers(real: VirtControllerDriver, real_ns: str) -> None:
    started = await real.create_vm(VMSpec("vm1", cores=1, memory="1Gi"), node="kwok-node-1")
    assert started.started, started.refusal
    assert started.node == "kwok-node-1"
    vmi = await real.client.get(VIRTUAL_MACHINE_INSTANCES, "vm1", real_ns)
    assert vmi["status"]["selinuxContext"] == SELINUX_NONE
    migratable = [c for c in vmi["status"]["conditions"] if c["type"] == "LiveMigratable"]
    assert migratable[0]["status"] == "True"
    pod = await real.client.get(PODS, str(started.pod), real_ns)
    assert pod["spec"]["nodeName"] == "kwok-node-1"


async def test_a_migration_succeeds_and_the_source_launcher_exits(
    real: VirtControllerDriver, real_ns: str
) -> None:
    started = await real.create_vm(VMSpec("vm1", cores=1, memory="1Gi"), node="kwok-node-0")
    name = await real.migrate("vm1")
    record = await real.wait_migration(name, timeout=60)
    assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
    assert record.admitted is not None and record.started is not None
    assert record.refusals == 0
    vmi = await real.client.get(VIRTUAL_MACHINE_INSTANCES, "vm1", real_ns)
    assert vmi["status"]["nodeName"] == record.target_node != "kwok-node-0"
    assert vmi["metadata"]["labels"]["kubevirt.io/nodeName"] == record.target_node

    async def source_exited() -> bool:
        pod = await real.client.get(PODS, str(started.pod), real_ns)
        return pod["status"]["phase"] == "Succeeded"

    await eventually(source_exited, what="the source launcher pod Succeeded")
    await real.records.wait_for(lambda: record.source_pod_gone is not None, 10)
    assert record.source_pod == started.pod


async def test_a_refused_target_pod_is_counted_and_retried_when_the_quota_grows(
    real: VirtControllerDriver, real_ns: str
) -> None:
    """virt-controller's own retry on a quota update lets the migration through."""
    await real.create_vm(VMSpec("vm1", cores=1, memory="1Gi"))
    quota = {
        "metadata": {"name": "tight"},
        "spec": {"hard": {"limits.cpu": "1500m"}},
    }
    await real.client.create(RESOURCE_QUOTAS, quota, real_ns)
    name = await real.migrate("vm1")
    await real.records.wait_for(lambda: _refusals(real, real_ns, name) > 0, 60)
    record = real.records.get(real_ns, name)
    assert record is not None and record.admitted is None
    assert "exceeded quota: tight" in record.refusal_messages[0]
    await real.client.patch(
        RESOURCE_QUOTAS, "tight", {"spec": {"hard": {"limits.cpu": "3"}}}, real_ns
    )
    record = await real.wait_migration(name, timeout=60)
    assert record.outcome is Outcome.SUCCEEDED
    assert record.blocked_seconds is not None and record.blocked_seconds > 0


def _refusals(real: VirtControllerDriver, namespace: str, name: str) -> int:
    record = real.records.get(namespace, name)
    return 0 if record is None else record.refusals


async def test_an_aborted_migration_ends_aborted_and_its_target_exits(
    real: VirtControllerDriver, real_ns: str
) -> None:
    await real.create_vm(VMSpec("vm1", cores=1, memory="1Gi", migration_duration=120))
    name = await real.migrate("vm1")
    await real.records.wait_for(lambda: _started(real, real_ns, name), 60)
    await real.abort(name)
    record = await real.wait_migration(name, timeout=60)
    assert record.outcome is Outcome.ABORTED, record.as_dict()

    async def target_exited() -> bool:
        try:
            pod = await real.client.get(PODS, str(record.target_pod), real_ns)
        except errors.NotFound:
            return True
        return pod["status"]["phase"] == "Failed"

    await eventually(target_exited, what="the aborted migration's target launcher gone")


def _started(real: VirtControllerDriver, namespace: str, name: str) -> bool:
    record = real.records.get(namespace, name)
    return record is not None and record.started is not None


async def test_a_failed_migration_leaves_the_vm_where_it_was(
    real: VirtControllerDriver, real_ns: str
) -> None:
    started = await real.create_vm(VMSpec("vm1", cores=1, memory="1Gi"))
    real.fail_next_migration("vm1")
    name = await real.migrate("vm1")
    record = await real.wait_migration(name, timeout=60)
    assert record.outcome is Outcome.FAILED, record.as_dict()
    vmi = await real.client.get(VIRTUAL_MACHINE_INSTANCES, "vm1", real_ns)
    assert vmi["status"]["nodeName"] == started.node


class PodPhases(NamespaceWatch):
    """Every phase each pod of the namespace was seen in, in the order of the watch."""

    resource = PODS

    def __init__(self, api: ApiClient, namespace: str) -> None:
        super().__init__(api, namespace)
        self.phases: dict[str, list[str]] = {}

    def on_object(self, obj: Object) -> None:
        seen = self.phases.setdefault(obj["metadata"]["name"], [])
        phase = str((obj.get("status") or {}).get("phase"))
        if seen[-1:] != [phase]:
            seen.append(phase)


async def test_a_vmi_deleted_mid_migration_has_both_launchers_exit_within_its_grace(
    real: VirtControllerDriver, real_ns: str
) -> None:
    """virt-handler's share of a deletion: the domain is shut down within the VMI's grace period
    (0 here) and both launchers exit, their pods Succeeded, so they count for quota no longer.
    virt-controller deletes the pods with the launcher's own grace, the VMI's padded by 30 s;
    a launcher that never exited would count until kwok removed its pod when that ended."""
    spec = VMSpec(
        "vm1", cores=1, memory="1Gi", migration_duration=120, termination_grace_period_seconds=0
    )
    started = await real.create_vm(spec, node="kwok-node-0")
    name = await real.migrate("vm1")
    await real.records.wait_for(lambda: _started(real, real_ns, name), 60)
    record = real.records.get(real_ns, name)
    assert record is not None and record.target_pod is not None
    launchers = {str(started.pod), str(record.target_pod)}
    async with PodPhases(real.client, real_ns) as pods:
        await eventually(lambda: all(pod in pods.phases for pod in launchers), what="watched")
        await real.delete_vmi("vm1")

        def exited() -> bool:
            return all(pods.phases.get(pod, [])[-1:] == ["Succeeded"] for pod in launchers)

        await eventually(exited, what=f"launchers {sorted(launchers)} Succeeded")
    assert all(pods.phases[pod][-2:] == ["Running", "Succeeded"] for pod in launchers)


async def test_a_drain_evacuates_through_kubevirts_evacuation_controller(
    real: VirtControllerDriver, real_ns: str
) -> None:
    drained = await node_to_drain(real.client, real_ns)
    for name in ("vm1", "vm2", "vm3"):
        started = await real.create_vm(VMSpec(name, cores=1, memory="1Gi"), node=drained)
        assert started.node == drained
    assert await real.drain(drained) == []
    try:

        async def evacuated() -> bool:
            return not await real.evacuating() and len(real.records.all()) == 3

        await eventually(evacuated, timeout=90, what=f"every VMI off {drained}")
        assert await real.records.wait_all_finished(60)
        for record in real.records.all():
            assert record.evacuation_node == drained
            assert record.name.startswith("kubevirt-evacuation-")
            assert record.outcome is Outcome.SUCCEEDED
        migrations = await real.client.list_all(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, real_ns)
        assert len(migrations.items) == 3
    finally:
        await real.uncordon(drained)
    node = await real.client.get(NODES, drained)
    assert not node["spec"].get("unschedulable")
    assert DRAIN_TAINT_KEY not in [t["key"] for t in node["spec"].get("taints") or []]


async def test_a_vmi_named_longer_than_a_label_cannot_be_migrated(
    real: VirtControllerDriver, real_ns: str
) -> None:
    """As on a real cluster (virt-api labels the migration with the VMI's name): refused."""
    long_name = "a-very-long-name-exceeds-the-63-length-and-it-reports-error-in-old-version"
    started = await real.create_vm(VMSpec(long_name, cores=1, memory="1Gi"))
    assert started.started, started.refusal
    with pytest.raises(errors.ApiError, match="must be no more than 63"):
        await real.migrate(long_name)
