"""`harvester-quota run` as a real process beside KubeVirt's virt-controller: killed mid-migration,
restarted, nothing leaks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.localcluster.process import free_port
from harvester_quota.testbench.sim.kubevirt import Outcome, VMSpec
from harvester_quota.testbench.virtcontroller import VirtControllerDriver
from harvester_quota.util.quantity import Quantity

from tests.helpers import eventually
from tests.integration.kubevirt_by_hand import KubeVirtByHand
from tests.integration.test_controllers_on_kubevirt import kubevirt, kv

__all__ = ["kubevirt", "kv"]  # fixtures shared with test_controllers_on_kubevirt.py

pytestmark = pytest.mark.integration

V170_HARD = {"limits.cpu": "3", "limits.memory": "5000Mi"}


def start_controller(
    cluster: ClusterInfo, lease: str, log: Path, *extra: str, health_port: int | None = None
) -> subprocess.Popen[bytes]:
    """`harvester-quota run` with the admin kubeconfig and its Lease in ``default``."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harvester_quota.main",
            "run",
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--namespace",
            "default",
            "--lease-name",
            lease,
            "--kubevirt-version",
            "1.6",
            "--health-port",
            str(health_port or free_port()),
            *extra,
        ],
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )


async def cpu_hard(kv: KubeVirtByHand) -> Quantity:
    return Quantity.parse((await kv.quota())["spec"]["hard"]["limits.cpu"])


async def test_a_controller_killed_mid_migration_is_replaced_without_leaking_room(
    kubevirt_cluster: ClusterInfo,
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
    tmp_path: Path,
) -> None:
    """KubeVirt's real virt-controller migrates the VM while our controller process lies dead
    after raising: the room is left behind, and the next process gives it back."""
    await kv.set_rancher_base({"limitsCpu": "3000m", "limitsMemory": "5000Mi"})
    await kv.create_quota(V170_HARD)
    (await kubevirt.create_vm(VMSpec("vm1", cores=2, memory="4Gi"), node="kwok-node-0")).check()
    lease = f"controller-{uuid.uuid4().hex[:6]}"
    log = tmp_path / "controller.log"
    first = start_controller(kubevirt_cluster, lease, log)
    try:

        async def raised() -> bool:
            return await cpu_hard(kv) == Quantity.parse("5015m")

        name = await kubevirt.migrate("vm1")
        await eventually(raised, timeout=60, what="the first process to raise the quota")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        # While no controller runs, the migration finishes and its source launcher exits.
        record = await kubevirt.wait_migration(name, timeout=90)
        assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
        await kubevirt.records.wait_for(lambda: record.source_pod_gone is not None, 30)
        # The killed process left its room behind: the next one has something to clean up.
        assert await cpu_hard(kv) == Quantity.parse("5015m")
        assert any(
            key.startswith("harvesterhci.io/migrating")
            for key in ((await kv.quota())["metadata"].get("annotations") or {})
        )

        # The killed leader never released its Lease: the next one waits it out (15 s), then
        # recomputes the namespace from the cluster.
        second = start_controller(kubevirt_cluster, lease, log)
        try:

            async def at_base() -> bool:
                quota = await kv.quota()
                annotations = quota["metadata"].get("annotations") or {}
                return await cpu_hard(kv) == Quantity.parse("3") and not any(
                    k.startswith("harvesterhci.io/migrating") for k in annotations
                )

            await eventually(
                at_base, timeout=60, what="the second process to return the quota to its base"
            )
            second.send_signal(signal.SIGTERM)
            assert second.wait(20) == 0, "SIGTERM is a clean shutdown"
        finally:
            if second.poll() is None:
                second.kill()
    finally:
        if first.poll() is None:
            first.kill()
    assert "lost leadership" not in log.read_text()
