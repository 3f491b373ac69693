"""`harvester-quota explain` on the real cluster (KubeVirt's own virt-controller migrating): the
same plan as the controller, read-only."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest
from harvester_quota.explain import explain, render_text
from harvester_quota.generic.client import ApiClient
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.sim.kubevirt import VMSpec
from harvester_quota.testbench.virtcontroller import VirtControllerDriver

from tests.helpers import eventually
from tests.integration.kubevirt_by_hand import KubeVirtByHand
from tests.integration.test_controllers_on_kubevirt import kubevirt, kv, rejected_by_quota

pytestmark = pytest.mark.integration

__all__ = ["kubevirt", "kv"]  # fixtures shared with test_controllers_on_kubevirt.py

V170_LIMIT = {"limitsCpu": "3", "limitsMemory": "5000Mi"}
V170_HARD = {"limits.cpu": "3", "limits.memory": "5000Mi"}


async def test_a_pending_migration_explained(
    kubevirt_api: ApiClient, kv: KubeVirtByHand, kubevirt: VirtControllerDriver
) -> None:
    """No controller runs: KubeVirt's real virt-controller has its target pod refused and flags
    the migration; explain shows the room the migration needs, hard as it should be and is, and
    the refusal KubeVirt recorded."""
    await kv.set_rancher_base(V170_LIMIT)
    await kv.create_quota(V170_HARD)
    (await kubevirt.create_vm(VMSpec("vm1", cores=2, memory="4Gi"), node="kwok-node-0")).check()
    name = await kubevirt.migrate("vm1")
    await eventually(lambda: rejected_by_quota(kv, name), timeout=60, what="KubeVirt's flag")

    found = await explain(kubevirt_api, kv.namespace, kubevirt_version="1.6")

    assert found.quota == "default-quota" and found.managed
    assert found.base_source is not None and "rancher" in found.base_source.lower()
    assert found.base == {"limits.cpu": "3", "limits.memory": "5000Mi"}
    (room,) = found.rooms
    assert room["vm"] == "vm1" and room["why"] == "pending" and room["estimated"] is True
    assert room["room"]["limits.cpu"] == "2015m"
    assert found.hard["limits.cpu"] == {"desired": "5015m", "actual": "3"}, "no controller runs"
    assert any("vm1" in rule for rule in found.webhook)
    # The newest word on the refusal is virt-controller's FailedCreate event on the VMI.
    assert found.last_refusal is not None
    assert found.last_refusal["object"] == "VirtualMachineInstance/vm1"
    assert "limited: limits.cpu=3,limits.memory=5000Mi" in found.last_refusal["message"]
    text = render_text(found)
    assert "migrations holding room:" in text and "5015m -> 3   (differs)" in text


async def explain_command(cluster: ClusterInfo, *args: str) -> tuple[int | None, bytes, bytes]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "harvester_quota.main",
        "explain",
        *args,
        "--kubeconfig",
        str(cluster.kubeconfig),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode, out, err


async def test_the_command_line_prints_json(
    kubevirt_cluster: ClusterInfo, kv: KubeVirtByHand
) -> None:
    await kv.set_rancher_base(V170_LIMIT)
    await kv.create_quota(V170_HARD)
    code, out, err = await explain_command(kubevirt_cluster, kv.namespace, "-o", "json")
    assert code == 0, err.decode()
    document = json.loads(out)
    assert document["namespace"] == kv.namespace
    assert document["rooms"] == [] and document["last_refusal"] is None


async def test_an_unknown_namespace_is_exit_code_1(cluster: ClusterInfo) -> None:
    code, _, err = await explain_command(cluster, "no-such-namespace")
    assert code == 1
    assert b"not found" in err
