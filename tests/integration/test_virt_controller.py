"""KubeVirt's own virt-controller on the local cluster (`up(virt_controller=True)`).

The cluster, one per KubeVirt version, comes from `real_kubevirt` (shared with the launcher
differential test); this module checks that the real controller runs there and does its job.

virt-api does not run here, so VMIs are created the way virt-api's defaulting would leave them:
CPU topology and model, machine type, guest memory, requests and limits all set.
"""

from __future__ import annotations

from typing import Any

import pytest
from harvester_quota.testbench.localcluster import ClusterInfo, LocalCluster
from harvester_quota.testbench.localcluster.cluster import (
    KUBEVIRT_DEVICES,
    KUBEVIRT_NAMESPACE,
    VIRT_CONTROLLER_LEASE,
)
from harvester_quota.testbench.localcluster.rest import ApiError, RestClient
from harvester_quota.util.quantity import Quantity

from tests.helpers import wait_until
from tests.integration import real_kubevirt
from tests.integration.real_kubevirt import START_TIMEOUT, VMIS, VMS
from tests.integration.real_kubevirt import defaulted_vmi_spec as _defaulted_vmi_spec
from tests.integration.real_kubevirt import launcher_pods as _launcher_pods
from tests.integration.real_kubevirt import virt_controller as _virt_controller

pytestmark = pytest.mark.integration

kubevirt_cluster = real_kubevirt.kubevirt_cluster
kv_rest = real_kubevirt.kv_rest
kv_namespace = real_kubevirt.kv_namespace

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def _scheduled_vmi(rest: RestClient, namespace: str, name: str) -> dict[str, Any] | None:
    vmi = rest.get(f"{VMIS.format(ns=namespace)}/{name}")
    status = vmi.get("status", {})
    return vmi if status.get("phase") == "Scheduled" and status.get("nodeName") else None


def test_virt_controller_holds_its_lease(
    kubevirt_cluster: ClusterInfo, kv_rest: RestClient
) -> None:
    lease = kv_rest.get(VIRT_CONTROLLER_LEASE)
    assert lease["spec"]["holderIdentity"]
    assert _virt_controller(kubevirt_cluster).running()
    kubevirt = kv_rest.get(
        f"/apis/kubevirt.io/v1/namespaces/{KUBEVIRT_NAMESPACE}/kubevirts/kubevirt"
    )
    assert kubevirt["status"]["phase"] == "Deployed"
    assert kubevirt["status"]["observedKubeVirtVersion"] == kubevirt_cluster.kubevirt_version


def test_up_again_keeps_the_running_virt_controller(kubevirt_cluster: ClusterInfo) -> None:
    again = LocalCluster(kubevirt_cluster.state_dir).up(
        nodes=len(kubevirt_cluster.nodes),
        virt_controller=True,
        kubevirt=kubevirt_cluster.kubevirt_version,
    )
    assert _virt_controller(again).pid == _virt_controller(kubevirt_cluster).pid


def test_kubevirts_generated_crds_are_installed(kv_rest: RestClient) -> None:
    vmi_crd = kv_rest.get(f"{CRDS}/virtualmachineinstances.kubevirt.io")
    assert vmi_crd["spec"]["versions"], "the VMI CRD serves no version"
    for version in vmi_crd["spec"]["versions"]:
        assert "status" not in (version.get("subresources") or {}), version["name"]
        assert "spec" in version["schema"]["openAPIV3Schema"]["properties"]
    vm_crd = kv_rest.get(f"{CRDS}/virtualmachines.kubevirt.io")
    assert all("status" in v.get("subresources", {}) for v in vm_crd["spec"]["versions"])
    assert kv_rest.exists(f"{CRDS}/migrationpolicies.migrations.kubevirt.io")
    assert kv_rest.exists(f"{CRDS}/settings.harvesterhci.io")


def test_nodes_offer_what_launcher_pods_need(
    kubevirt_cluster: ClusterInfo, kv_rest: RestClient
) -> None:
    for name in kubevirt_cluster.nodes:
        node = kv_rest.get(f"/api/v1/nodes/{name}")
        assert node["metadata"]["labels"]["kubevirt.io/schedulable"] == "true"
        for device in KUBEVIRT_DEVICES:
            assert Quantity.parse(node["status"]["allocatable"][device]).value() >= 100, device


def test_vmi_gets_a_launcher_pod_from_the_real_virt_controller(
    kv_rest: RestClient, kv_namespace: str
) -> None:
    created = kv_rest.post(
        VMIS.format(ns=kv_namespace),
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": "vmi-a"},
            "spec": _defaulted_vmi_spec(cores=2, memory="2Gi"),
        },
    )
    uid = created["metadata"]["uid"]
    pods = wait_until(
        lambda: _launcher_pods(kv_rest, kv_namespace, uid),
        timeout=START_TIMEOUT,
        what="the launcher pod of vmi-a",
    )
    assert len(pods) == 1
    pod = pods[0]
    assert pod["metadata"]["name"].startswith("virt-launcher-vmi-a-")
    assert pod["metadata"]["labels"]["kubevirt.io"] == "virt-launcher"
    owner = pod["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "VirtualMachineInstance",
        uid,
        True,
    )
    compute = next(c for c in pod["spec"]["containers"] if c["name"] == "compute")
    assert compute["resources"]["limits"]["devices.kubevirt.io/kvm"] == "1"
    assert compute["resources"]["limits"]["cpu"] == "2"

    vmi = wait_until(
        lambda: _scheduled_vmi(kv_rest, kv_namespace, "vmi-a"),
        timeout=START_TIMEOUT,
        what="vmi-a Scheduled",
    )
    bound = kv_rest.get(f"/api/v1/namespaces/{kv_namespace}/pods/{pod['metadata']['name']}")
    assert vmi["status"]["nodeName"] == bound["spec"]["nodeName"]
    assert pod["metadata"]["uid"] in vmi["status"]["activePods"]


def test_vm_with_run_strategy_always_gets_a_vmi_from_the_real_vm_controller(
    kv_rest: RestClient, kv_namespace: str
) -> None:
    vm = kv_rest.post(
        VMS.format(ns=kv_namespace),
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachine",
            "metadata": {"name": "vm-b"},
            "spec": {
                "runStrategy": "Always",
                "template": {"metadata": {"labels": {"app": "b"}}, "spec": _defaulted_vmi_spec()},
            },
        },
    )

    def vmi_of_vm() -> dict[str, Any] | None:
        try:
            return kv_rest.get(f"{VMIS.format(ns=kv_namespace)}/vm-b")
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    vmi = wait_until(vmi_of_vm, timeout=START_TIMEOUT, what="the VMI of vm-b")
    owner = vmi["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("VirtualMachine", vm["metadata"]["uid"])
    assert vmi["metadata"]["labels"]["app"] == "b"
    wait_until(
        lambda: _scheduled_vmi(kv_rest, kv_namespace, "vm-b"),
        timeout=START_TIMEOUT,
        what="vm-b's VMI Scheduled",
    )
    assert _launcher_pods(kv_rest, kv_namespace, vmi["metadata"]["uid"])
