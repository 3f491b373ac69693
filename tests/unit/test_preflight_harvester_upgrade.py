"""`preflight upgrade` on a Harvester cluster says what Harvester's own upgrade does with each VM
(preflight/compute.py `note_upgrade_outcomes`, read in Harvester v1.8.2's upgrade_node.sh
pre-drain): shut down by its detector, stalls the pre-drain for good, shut down after a failed
evacuation, or migrates.
"""

from __future__ import annotations

from typing import Any

from harvester_quota.preflight import Plan, PreflightReport, preflight
from harvester_quota.preflight.compute import WITNESS_LABEL, detector_shuts_down
from harvester_quota.preflight.report import render_text

from .test_preflight import migratable, node, only_vm, rancher_case, running, state

Object = dict[str, Any]


def upgrade(cluster: Any, *, strategy: Any = "ours") -> PreflightReport:
    return preflight(cluster, Plan("upgrade", (), strategy))


def on_harvester(vmis: list[Object], pods: list[Object], **kwargs: Any) -> Any:
    kwargs.setdefault("nodes", [node("n1"), node("n2")])
    return state(vmis, pods, harvester=True, **kwargs)


def vm_on_n1(report: PreflightReport) -> Any:
    (vm,) = [vm for step in report.steps if step.nodes == ["n1"] for vm in step.vms]
    return vm


def test_a_quota_blocked_vm_stalls_its_nodes_pre_drain_and_the_upgrade_is_blocked() -> None:
    instance, pod, parts = rancher_case()
    cluster = on_harvester([instance], [pod], quotas=[parts["quota"]], namespaces=[parts["ns"]])
    report = upgrade(cluster, strategy="none")
    vm = vm_on_n1(report)
    assert vm.harvester_upgrade == "stalls-pre-drain"
    assert "stalls node n1's pre-drain" in vm.harvester_upgrade_says
    assert "without a timeout" in vm.harvester_upgrade_says
    assert report.blocks
    assert "HARVESTER UPGRADE ns/vm1: stalls node n1's pre-drain" in render_text(report)


def test_with_our_room_the_same_vm_live_migrates_and_nothing_stalls() -> None:
    instance, pod, parts = rancher_case()
    cluster = on_harvester([instance], [pod], quotas=[parts["quota"]], namespaces=[parts["ns"]])
    report = upgrade(cluster, strategy="ours")
    assert vm_on_n1(report).harvester_upgrade == "live-migrates"
    assert not report.stalls_harvester_upgrade
    assert "HARVESTER UPGRADE" not in render_text(report)


def test_a_target_that_fits_no_node_is_shut_down_after_kubevirt_fails_the_evacuation() -> None:
    instance, pod = running("vm1")
    nodes = [node("n1"), node("n2", memory="1Gi")]
    vm = vm_on_n1(upgrade(on_harvester([instance], [pod], nodes=nodes)))
    assert vm.harvester_upgrade == "shut-down"
    assert "after 300 s unschedulable" in vm.harvester_upgrade_says
    assert "virtctl stop" in vm.harvester_upgrade_says


def test_harvesters_detector_shuts_down_a_vm_with_a_node_selector_before_any_evacuation() -> None:
    instance, pod = running("vm1")
    instance["spec"]["nodeSelector"] = {"zone": "a"}
    vm = vm_on_n1(upgrade(on_harvester([instance], [pod])))
    assert vm.harvester_upgrade == "shut-down"
    assert "it has a nodeSelector" in vm.harvester_upgrade_says


def test_host_devices_and_an_affinity_no_other_node_meets_are_shut_down_too() -> None:
    with_devices, _ = running("a")
    with_devices["spec"]["domain"].setdefault("devices", {})["hostDevices"] = []
    pinned, _ = running("b")
    pinned["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
                ]
            }
        }
    }
    nodes = [node("n1"), node("n2")]
    assert "host" in str(detector_shuts_down(with_devices, nodes, "n1"))
    assert "node affinity" in str(detector_shuts_down(pinned, nodes, "n1"))
    assert detector_shuts_down(pinned, nodes, "n2") is None, "n1 meets it, seen from n2"


def test_a_witness_node_does_not_count_as_somewhere_to_go() -> None:
    instance, _ = running("vm1")
    nodes = [node("n1"), node("w", labels={WITNESS_LABEL: "true"})]
    assert "one node that is not a witness" in str(detector_shuts_down(instance, nodes, "n1"))
    assert detector_shuts_down(instance, [*nodes, node("n2")], "n1") is None


def test_a_vm_kubevirt_does_not_evacuate_stalls_the_pre_drain() -> None:
    instance, pod = running("vm1")
    instance["spec"]["evictionStrategy"] = "None"
    report = upgrade(on_harvester([instance], [pod]))
    vm = vm_on_n1(report)
    assert vm.harvester_upgrade == "stalls-pre-drain"
    assert "eviction strategy None" in vm.harvester_upgrade_says
    assert report.blocks, "Harvester's upgrade would wait for it for good"


def test_off_harvester_or_in_a_drain_no_upgrade_outcome_is_said() -> None:
    instance, pod = running("vm1")
    instance["spec"]["evictionStrategy"] = "None"
    plain = upgrade(state([instance], [pod]))
    assert vm_on_n1(plain).harvester_upgrade == ""
    assert not plain.blocks
    drained = preflight(on_harvester([instance], [pod]), Plan("drain", ("n1",)))
    assert only_vm(drained).harvester_upgrade == ""


def test_a_vmi_harvesters_detector_cannot_read_costs_only_its_own_outcome() -> None:
    """A tenant's VMI whose nodeAffinity is no object (not migratable, so nothing before the
    detector read it) would fail the whole preflight upgrade in the detector's reading."""
    odd, odd_pod = running("odd")
    migratable(odd, False, "DisksNotLiveMigratable")
    odd["spec"]["affinity"] = {"nodeAffinity": ["not", "an", "object"]}
    fine, fine_pod = running("fine")
    report = upgrade(on_harvester([odd, fine], [odd_pod, fine_pod]))
    outcomes = {vm.name: vm.harvester_upgrade for step in report.steps for vm in step.vms}
    assert outcomes == {"odd": "", "fine": "live-migrates"}
    assert any("ns/odd: cannot predict what Harvester's upgrade does" in w for w in report.warnings)
