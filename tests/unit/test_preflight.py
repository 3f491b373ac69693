"""The preflight's rules, one by one, on cluster states built by hand (harvester_quota.preflight).

Each test builds the objects the reader would list (nodes, VMIs with their launcher pods, quotas
whose status.used is what those pods use) and checks one rule of the report: which VMs move,
quota admission with each strategy's room, node fit, waves, the exit codes and both renderings.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from harvester_quota import main as cli
from harvester_quota.generic import errors
from harvester_quota.preflight import (
    ClusterState,
    NamespaceContext,
    Plan,
    PreflightReport,
    preflight,
    read,
)
from harvester_quota.preflight.admission import TargetPod, quota_blockers
from harvester_quota.preflight.report import render_json, render_text
from harvester_quota.util.annotations import (
    ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING,
)
from harvester_quota.util.podusage import pod_quota_usage
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.quotascope import launcher_scope_facts
from harvester_quota.util.rancher.project import PROJECT_ID_ANNOTATION

from ..objects import launcher_pod, managed_quota, plain_namespace, rancher_namespace, vmi

Object = dict[str, Any]
NS = "ns"
KUBEVIRT_NODE = {
    "ephemeral-storage": "100Gi",
    "devices.kubevirt.io/kvm": "1000",
    "devices.kubevirt.io/tun": "1000",
    "devices.kubevirt.io/vhost-net": "1000",
}
"""What a KubeVirt node offers besides cpu and memory: disk, and virt-handler's device plugins."""


def node(
    name: str,
    *,
    cpu: str = "16",
    memory: str = "64Gi",
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Object] = (),
    schedulable: bool = True,
    pods: str = "110",
) -> Object:
    node_labels = {"kubevirt.io/schedulable": "true"} if schedulable else {}
    return {
        "metadata": {"name": name, "labels": {**node_labels, **(labels or {})}},
        "spec": {"taints": list(taints)},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods, **KUBEVIRT_NODE}},
    }


def migratable(instance: Object, value: bool = True, reason: str = "") -> Object:
    condition = {"type": "LiveMigratable", "status": "True" if value else "False"}
    if reason:
        condition["reason"] = reason
    instance["status"]["conditions"] = [condition]
    return instance


def running(name: str, node_name: str = "n1", **kwargs: Any) -> tuple[Object, Object]:
    """A migratable VMI (LiveMigrate) on `node_name` and its launcher pod."""
    instance = migratable(vmi(name, NS, node=node_name, **kwargs))
    return instance, launcher_pod(instance, f"virt-launcher-{name}", node=node_name)


def quota(
    name: str,
    hard: Mapping[str, str],
    pods: Sequence[Object],
    *,
    managed: bool = False,
    annotations: Mapping[str, str] | None = None,
    spec_extra: Mapping[str, Any] | None = None,
) -> Object:
    """A quota whose status.used is what `pods` use on its keys."""
    if managed:
        obj = managed_quota(NS, hard, annotations, name=name)
    else:
        obj = {
            "metadata": {"name": name, "namespace": NS, "annotations": dict(annotations or {})},
            "spec": {"hard": dict(hard)},
        }
    obj["spec"].update(spec_extra or {})
    used: dict[str, Any] = {}
    for pod in pods:
        for key, value in pod_quota_usage(pod).items():
            if key in hard:
                used[key] = used.get(key, value * 0) + value
    obj["status"] = {"hard": dict(hard), "used": {k: str(v) for k, v in used.items()}}
    return obj


def state(
    vmis: Sequence[Object],
    pods: Sequence[Object],
    *,
    nodes: Sequence[Object] | None = None,
    quotas: Sequence[Object] = (),
    namespaces: Sequence[Object] | None = None,
    **extra: Any,
) -> ClusterState:
    return ClusterState(
        nodes=list(nodes if nodes is not None else [node("n1"), node("n2")]),
        vmis=list(vmis),
        pods=list(pods),
        quotas=list(quotas),
        namespaces=list(namespaces if namespaces is not None else [plain_namespace(NS)]),
        kubevirt_version="1.6",
        **extra,
    )


def drain(cluster: ClusterState, *nodes: str, strategy: Any = "ours") -> PreflightReport:
    return preflight(cluster, Plan("drain", nodes or ("n1",), strategy))


def only_vm(report: PreflightReport) -> Any:
    (vm,) = report.vms
    return vm


RANCHER_LIMIT = {"limitsCpu": "4", "limitsMemory": "6Gi"}
"""A Rancher namespace quota one 2-core 4Gi VM (about 4.3Gi of launcher) nearly fills."""


def rancher_case() -> tuple[Object, Object, Object]:
    instance, pod = running("vm1")
    ns = rancher_namespace(NS, RANCHER_LIMIT)
    hard = {"limits.cpu": "4", "limits.memory": "6Gi"}
    return instance, pod, {"ns": ns, "quota": quota("default-q", hard, [pod], managed=True)}


# --- which VMs move -------------------------------------------------------------------------------


def test_only_running_vmis_on_the_drained_node_are_judged() -> None:
    a, pa = running("a", "n1")
    b, pb = running("b", "n2")
    c, pc = running("c", "n1")
    c["status"]["phase"] = "Succeeded"
    pc["status"]["phase"] = "Succeeded"  # the launcher decides: a VMI's phase is the tenant's
    report = drain(state([a, b, c], [pa, pb, pc]))
    assert [vm.key for vm in report.vms] == ["ns/a"]


def test_a_live_migrate_vm_that_cannot_migrate_blocks_the_drain_with_kubevirts_reason() -> None:
    instance, pod = running("vm1")
    migratable(instance, False, "DisksNotLiveMigratable")
    vm = only_vm(drain(state([instance], [pod])))
    assert vm.action == "blocks-drain"
    assert [b.cause for b in vm.blockers] == ["not-migratable"]
    assert "DisksNotLiveMigratable" in vm.blockers[0].message


def test_a_vmi_without_the_condition_counts_as_not_migratable() -> None:
    instance, pod = running("vm1")
    del instance["status"]["conditions"]
    assert only_vm(drain(state([instance], [pod]))).action == "blocks-drain"


def test_a_tenant_written_label_or_annotation_does_not_make_a_vmi_migratable() -> None:
    """Only status (KubeVirt's) counts: labels and annotations are the tenant's to write."""
    instance, pod = running("vm1")
    migratable(instance, False, "HostDevice")
    instance["metadata"]["labels"]["kubevirt.io/LiveMigratable"] = "True"
    instance["metadata"]["annotations"] = {"LiveMigratable": "True"}
    assert only_vm(drain(state([instance], [pod]))).blocked


def test_a_tenant_written_status_node_name_does_not_take_a_vm_out_of_the_drain() -> None:
    """status.nodeName is the tenant's to write (no status subresource on VMIs); where the
    launcher pod runs is the scheduler's, and its labels KubeVirt's only."""
    instance, pod = running("vm1", "n1")
    instance["status"]["nodeName"] = "n2"
    (vm,) = drain(state([instance], [pod])).vms
    assert (vm.key, vm.node) == ("ns/vm1", "n1")
    assert drain(state([instance], [pod]), "n2").vms == []


def test_a_tenant_written_status_phase_does_not_take_a_running_vm_out_of_the_drain() -> None:
    """Second review, finding 3: status.phase is the tenant's to write too; a VM that cannot
    migrate was dropped from the report by a phase of "Scheduled" while its launcher ran, and
    the preflight said the drain was fine."""
    instance, pod = running("vm1")
    migratable(instance, False, "HostDevice")
    instance["status"]["phase"] = "Scheduled"
    assert only_vm(drain(state([instance], [pod]))).blocked


def test_a_pod_in_another_namespace_naming_a_vmis_uid_is_none_of_its_launchers() -> None:
    """A launcher is the VMI's only in the VMI's namespace, as KubeVirt finds a VMI's pods: where
    the labels policy is not installed (a plain Harvester), a tenant's pod labelled with another
    namespace's stopped VMI's uid would otherwise put that VMI on the tenant's chosen node."""
    stopped = migratable(vmi("stopped", NS, node="n2"), False, "HostDevice")
    stopped["status"]["phase"] = "Failed"
    del stopped["status"]["nodeName"]
    forged = launcher_pod(stopped, "not-a-launcher", node="n1")
    forged["metadata"]["namespace"] = "tenant"
    assert drain(state([stopped], [forged])).vms == []
    forged["metadata"]["namespace"] = NS
    assert only_vm(drain(state([stopped], [forged]))).blocked


def test_if_possible_shuts_down_what_cannot_migrate_and_that_does_not_block() -> None:
    instance, pod = running("vm1")
    instance["spec"]["evictionStrategy"] = "LiveMigrateIfPossible"
    migratable(instance, False, "HostDevice")
    report = drain(state([instance], [pod]))
    assert only_vm(report).action == "shutdown" and not report.blocks


def test_the_kubevirt_crs_default_applies_when_the_vmi_sets_none_and_the_vmis_own_wins() -> None:
    a, pa = running("a")
    b, pb = running("b")
    del a["spec"]["evictionStrategy"]
    kubevirt = {"spec": {"configuration": {"evictionStrategy": "None"}}}
    vms = drain(state([a, b], [pa, pb], kubevirt=kubevirt)).vms
    assert [(vm.eviction_strategy, vm.eviction_strategy_from, vm.action) for vm in vms] == [
        ("None", "kubevirt", "shutdown"),
        ("LiveMigrate", "vmi", "migrate"),
    ]


def test_without_any_eviction_strategy_kubevirts_default_none_shuts_the_vm_down() -> None:
    instance, pod = running("vm1")
    del instance["spec"]["evictionStrategy"]
    vm = only_vm(drain(state([instance], [pod])))
    assert (vm.eviction_strategy_from, vm.action) == ("default", "shutdown")


# --- quota: every quota, each strategy ------------------------------------------------------------


def test_an_unmanaged_second_quota_blocks_with_its_key_shortfall_and_fix() -> None:
    instance, pod = running("vm1")
    usage = pod_quota_usage(pod)
    full = quota("team-cap", {"requests.memory": str(usage["requests.memory"])}, [pod])
    vm = only_vm(drain(state([instance], [pod], quotas=[full])))
    (blocker,) = vm.blockers
    (short,) = blocker.shortfalls
    assert (short.quota, short.key, short.short_by) == (
        "team-cap",
        "requests.memory",
        str(usage["requests.memory"]),
    )
    assert "team-cap" in blocker.fix and "VMMRQ" in blocker.fix


def test_our_room_lets_a_full_managed_quota_pass_where_no_controller_does_not() -> None:
    instance, pod, parts = rancher_case()
    cluster = state([instance], [pod], quotas=[parts["quota"]], namespaces=[parts["ns"]])
    assert not drain(cluster, strategy="ours").blocks
    blocked = only_vm(drain(cluster, strategy="none"))
    assert {s.key for b in blocked.blockers for s in b.shortfalls} == {
        "limits.cpu",
        "limits.memory",
    }


def test_the_skip_annotation_takes_our_room_away() -> None:
    instance, pod, parts = rancher_case()
    parts["quota"]["metadata"]["annotations"][ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING] = "true"
    cluster = state([instance], [pod], quotas=[parts["quota"]], namespaces=[parts["ns"]])
    vm = only_vm(drain(cluster))
    assert vm.blocked and "skip annotation" in vm.blockers[0].fix


def test_an_over_used_key_the_target_pod_asks_none_of_does_not_block() -> None:
    """Quota admission checks only the keys a pod uses more than zero of (it drops the zeros of
    the pod's usage): a key already over its hard, after someone lowered it, refuses no pod
    that asks for none of it."""
    instance, pod = running("vm1")
    instance["spec"]["domain"]["resources"]["requests"]["example.com/dongle"] = "0"
    lowered = quota("dongles", {"requests.example.com/dongle": "1"}, [])
    lowered["status"]["used"] = {"requests.example.com/dongle": "2"}
    vm = only_vm(drain(state([instance], [pod], quotas=[lowered]), strategy="none"))
    assert vm.target_usage["requests.example.com/dongle"] == "0"
    assert not vm.blocked
    instance["spec"]["domain"]["resources"]["requests"]["example.com/dongle"] = "1"
    asking = only_vm(drain(state([instance], [pod], quotas=[lowered]), strategy="none"))
    (blocker,) = [b for b in asking.blockers if b.cause == "quota"]
    assert [(s.key, s.used, s.hard, s.short_by) for s in blocker.shortfalls] == [
        ("requests.example.com/dongle", "2", "1", "2")
    ]


def test_a_quota_whose_scope_the_target_pod_does_not_match_does_not_block() -> None:
    instance, pod = running("vm1")
    scoped = quota(
        "gold-only",
        {"requests.memory": "1Mi"},
        [],
        spec_extra={
            "scopeSelector": {
                "matchExpressions": [
                    {"scopeName": "PriorityClass", "operator": "In", "values": ["gold"]}
                ]
            }
        },
    )
    assert not drain(state([instance], [pod], quotas=[scoped])).blocks
    instance["spec"]["priorityClassName"] = "gold"
    assert drain(state([instance], [pod], quotas=[scoped])).blocks


def test_a_quota_on_limits_cpu_gets_kubevirts_automatic_limit_on_a_vmi_without_one() -> None:
    instance, pod = running("vm1")
    del instance["spec"]["domain"]["resources"]["limits"]["cpu"]
    roomy = quota("cpu-cap", {"limits.cpu": "100"}, [])
    vm = only_vm(drain(state([instance], [pod], quotas=[roomy])))
    assert not vm.blocked and "limits.cpu" in vm.target_usage


def test_a_container_without_the_limit_a_quota_asks_for_is_refused_whatever_the_room() -> None:
    instance, _ = running("vm1")
    pod = {"spec": {"containers": [{"name": "compute", "resources": {"requests": {"cpu": "1"}}}]}}
    usage = pod_quota_usage(pod)
    context = NamespaceContext(plain_namespace(NS), [quota("cpu-cap", {"limits.cpu": "100"}, [])])
    target = TargetPod(instance, pod, usage, launcher_scope_facts(instance, usage))
    (blocker,) = quota_blockers("ours", context, target)
    assert "compute does not set it" in blocker.message and "LimitRange" in blocker.fix


def test_an_mtq_budget_too_small_names_the_vmmrq_and_one_big_enough_passes() -> None:
    instance, pod = running("vm1")
    need = pod_quota_usage(pod)["requests.memory"]
    full = quota("team-cap", {"requests.memory": str(need)}, [pod])

    def vmmrq(budget: str) -> Object:
        return {
            "metadata": {"name": "budget", "namespace": NS, "uid": "u"},
            "spec": {"additionalMigrationResources": {"requests.memory": budget}},
        }

    small = only_vm(drain(state([instance], [pod], quotas=[full], vmmrqs=[vmmrq("1Gi")])))
    assert small.blocked and "VMMRQ budget" in small.blockers[0].fix
    big = state([instance], [pod], quotas=[full], vmmrqs=[vmmrq("16Gi")])
    assert not drain(big).blocks


def test_a_rancher_project_without_room_blocks_our_raise_and_says_by_how_much() -> None:
    instance, pod, parts = rancher_case()
    ns = parts["ns"]
    ns["metadata"]["annotations"][PROJECT_ID_ANNOTATION] = "c-1:p-1"
    project = {
        "metadata": {"name": "p-1", "namespace": "c-1"},
        "spec": {
            "resourceQuota": {"limit": RANCHER_LIMIT},
            "namespaceDefaultResourceQuota": {"limit": RANCHER_LIMIT},
        },
    }
    cluster = state([instance], [pod], quotas=[parts["quota"]], namespaces=[ns], projects=[project])
    vm = only_vm(drain(cluster))
    assert vm.blocked and "project c-1:p-1" in vm.blockers[0].fix
    project["spec"]["resourceQuota"]["limit"] = {"limitsCpu": "40", "limitsMemory": "60Gi"}
    assert not drain(cluster).blocks


def test_in_standalone_mode_rancher_s_annotation_and_project_are_no_base() -> None:
    """A controller run with --mode standalone raises the quota from its own recorded base and
    never through Rancher's annotation: the preflight, asked with the same --mode, does not
    hold the raise to a Rancher project (it always ran in auto mode)."""
    instance, pod, parts = rancher_case()
    ns = parts["ns"]
    ns["metadata"]["annotations"][PROJECT_ID_ANNOTATION] = "c-1:p-1"
    project = {
        "metadata": {"name": "p-1", "namespace": "c-1"},
        "spec": {
            "resourceQuota": {"limit": RANCHER_LIMIT},
            "namespaceDefaultResourceQuota": {"limit": RANCHER_LIMIT},
        },
    }
    cluster = state([instance], [pod], quotas=[parts["quota"]], namespaces=[ns], projects=[project])
    assert preflight(cluster, Plan("drain", ("n1",), "ours")).blocks
    assert not preflight(cluster, Plan("drain", ("n1",), "ours", mode="standalone")).blocks


def test_harvester_leaves_a_quota_on_requests_memory_blocking_where_ours_raises_it() -> None:
    instance, pod = running("vm1")
    usage = pod_quota_usage(pod)
    ns = rancher_namespace(NS, {"limitsMemory": "6Gi", "requestsMemory": "4Gi"})
    hard = {"limits.memory": "6Gi", "requests.memory": str(usage["requests.memory"])}
    cluster = state(
        [instance], [pod], quotas=[quota("default-q", hard, [pod], managed=True)], namespaces=[ns]
    )
    assert not drain(cluster, strategy="ours").blocks
    vm = only_vm(drain(cluster, strategy="harvester"))
    assert {s.key for b in vm.blockers for s in b.shortfalls} == {"requests.memory"}
    assert "harvester-quota's controllers" in vm.blockers[0].fix


def test_harvester_compensates_limits_memory_but_not_the_sidecars_limits_cpu() -> None:
    instance, pod = running("vm1")
    usage = pod_quota_usage(pod)
    ns = rancher_namespace(NS, {"limitsCpu": "2", "limitsMemory": "4Gi"})
    hard = {"limits.cpu": str(usage["limits.cpu"]), "limits.memory": str(usage["limits.memory"])}
    cluster = state(
        [instance], [pod], quotas=[quota("default-q", hard, [pod], managed=True)], namespaces=[ns]
    )
    vm = only_vm(drain(cluster, strategy="harvester"))
    (short,) = [s for b in vm.blockers for s in b.shortfalls]
    assert (short.key, short.short_by) == ("limits.cpu", "15m")  # the guest-console-log sidecar


def evacuation_case(grace: int | None = None) -> ClusterState:
    """The v1.2.1 evacuation's shape: three VMs on n1, a default quota whose limits are theirs
    plus one VM's (Rancher's base) and whose requests.memory leaves room for one target pod."""
    pairs = [running(name) for name in ("vm1", "vm2", "vm3")]
    for instance, _ in pairs if grace is not None else ():
        instance["spec"]["terminationGracePeriodSeconds"] = grace
    pods = [pod for _, pod in pairs]
    usage = pod_quota_usage(pods[0])
    one_more = {k: str(v + v + v + v) for k, v in usage.items()}
    ns = rancher_namespace(
        NS,
        {
            "limitsCpu": one_more["limits.cpu"],
            "limitsMemory": one_more["limits.memory"],
            "requestsMemory": one_more["requests.memory"],
        },
    )
    hard = {
        "limits.cpu": one_more["limits.cpu"],
        "limits.memory": one_more["limits.memory"],
        "requests.memory": one_more["requests.memory"],
    }
    quotas = [quota("default-q", hard, pods, managed=True)]
    return state([v for v, _ in pairs], pods, quotas=quotas, namespaces=[ns])


def test_harvester_delays_the_targets_that_fit_alone_but_not_next_to_each_other() -> None:
    report = drain(evacuation_case(), strategy="harvester")
    assert not report.blocks
    assert [vm.name for vm in report.delayed] == ["vm2", "vm3"]
    assert [vm.delay.rounds for vm in report.vms if vm.delay] == [1, 2]
    assert all(vm.delay.quotas == ["default-q"] for vm in report.vms if vm.delay)
    assert "requests.memory" in report.delayed[0].delay.message  # type: ignore[union-attr]
    text = render_text(report)
    assert text.startswith("preflight drain n1: DELAYED, nothing blocks for good (3 VMs); 2 ")
    assert "DELAYED ns/vm2 on n1" in text
    assert json.loads(render_json(report))["delayed"] == 2


def test_a_source_launcher_gone_before_the_next_wave_delays_only_its_own_wave() -> None:
    report = drain(evacuation_case(grace=1), strategy="harvester")
    assert report.steps[0].waves == [["ns/vm1", "ns/vm2"], ["ns/vm3"]]
    assert [vm.name for vm in report.delayed] == ["vm2"]


def test_delays_wait_a_source_launchers_grace_per_round() -> None:
    report = drain(evacuation_case(), strategy="harvester")
    copy = report.vms[0].memory_bytes / report.limits["bandwidthPerMigration"]
    round_seconds = 30 + 30 + copy  # KubeVirt's default grace for a VMI, its launcher's padding
    waits = [vm.delay.wait_seconds_at_most for vm in report.vms if vm.delay]
    assert waits == [round(round_seconds, 1), round(2 * round_seconds, 1)]
    assert report.delayed_seconds_at_most == sum(waits)


def test_targets_are_judged_in_the_order_their_waves_start_not_by_name() -> None:
    """Second review: vm4, on another node, starts in wave 1 beside vm1 and vm2 while vm3 waits
    for wave 2 (two outbound migrations per node); judged by name, vm3 was charged before vm4
    and found room that vm4, starting earlier, takes. Room for three targets: wave 1's three
    get it, and vm3 waits for their sources to go."""
    pairs = [running(n, "n1") for n in ("vm1", "vm2", "vm3")] + [running("vm4", "n2")]
    pods = [pod for _, pod in pairs]
    seven = {k: str(v * 7) for k, v in pod_quota_usage(pods[0]).items()}
    ns = rancher_namespace(
        NS,
        {
            "limitsCpu": seven["limits.cpu"],
            "limitsMemory": seven["limits.memory"],
            "requestsMemory": seven["requests.memory"],
        },
    )
    hard = {k: seven[k] for k in ("limits.cpu", "limits.memory", "requests.memory")}
    cluster = state(
        [v for v, _ in pairs],
        pods,
        quotas=[quota("default-q", hard, pods, managed=True)],
        namespaces=[ns],
        nodes=[node("n1"), node("n2"), node("n3")],
    )
    report = preflight(cluster, Plan("drain", ("n1", "n2"), "harvester"))
    assert report.steps[0].waves == [["ns/vm1", "ns/vm2", "ns/vm4"], ["ns/vm3"]]
    assert [vm.name for vm in report.delayed] == ["vm3"]


def test_our_rooms_stack_so_no_target_of_the_evacuation_waits() -> None:
    report = drain(evacuation_case(), strategy="ours")
    assert not report.blocks and not report.delayed
    assert render_text(report).startswith("preflight drain n1: OK, nothing blocks (3 VMs)")


def test_an_earlier_target_the_quotas_scope_does_not_match_delays_nothing_there() -> None:
    """Review minor 8: delays.py stacked every earlier target's whole usage onto each quota. A
    quota scoped to PriorityClass gold, with room for vm2's (gold) target alone: vm1's target,
    which starts first and is not gold, is not charged to it, so vm2 does not wait."""
    plain, plain_pod = running("vm1")
    gold, gold_pod = running("vm2")
    gold["spec"]["priorityClassName"] = "gold"
    gold_pod["spec"]["priorityClassName"] = "gold"
    target = pod_quota_usage(gold_pod)["requests.memory"]
    scoped = quota(
        "gold-only",
        {"requests.memory": str(target + target)},
        [gold_pod],
        spec_extra={
            "scopeSelector": {
                "matchExpressions": [
                    {"scopeName": "PriorityClass", "operator": "In", "values": ["gold"]}
                ]
            }
        },
    )
    report = drain(state([plain, gold], [plain_pod, gold_pod], quotas=[scoped]), strategy="none")
    assert not report.blocks
    assert not report.delayed
    tight = quota(
        "gold-only",
        {"requests.memory": str(target + target)},
        [gold_pod],
        spec_extra={"scopes": []},
    )
    unscoped = drain(state([plain, gold], [plain_pod, gold_pod], quotas=[tight]), strategy="none")
    assert [vm.name for vm in unscoped.delayed] == ["vm2"], "an unscoped quota does charge both"


def test_without_a_quota_nothing_waits_for_quota() -> None:
    a, pa = running("a")
    b, pb = running("b")
    assert not drain(state([a, b], [pa, pb]), strategy="harvester").delayed


# --- node fit ------------------------------------------------------------------------------------


def test_a_target_that_fits_on_no_node_left_is_a_blocker_with_each_nodes_figures() -> None:
    instance, pod = running("vm1")
    nodes = [node("n1"), node("n2", memory="2Gi"), node("n3", schedulable=False)]
    vm = only_vm(drain(state([instance], [pod], nodes=nodes)))
    (blocker,) = vm.blockers
    assert blocker.cause == "node-fit"
    assert "n2: memory 2Gi free, needs" in blocker.message
    assert "n3: not labelled kubevirt.io/schedulable=true" in blocker.message


def test_a_hotplugged_vms_attachment_pod_must_fit_on_the_target_node_with_its_launcher() -> None:
    """KubeVirt pins the attachment pod to the target launcher's node: a node with room for the
    launcher alone, not for the attachment pod's 2M of memory beside it, does not take the
    target side."""
    instance, pod = running("vm1")
    instance["spec"].setdefault("volumes", []).append(
        {"name": "hp", "persistentVolumeClaim": {"claimName": "hp", "hotpluggable": True}}
    )
    side = only_vm(drain(state([instance], [pod])))
    assert side.target_parts == ["launcher", "attachment"]
    launcher_memory = Quantity.parse(side.target_usage["requests.memory"]) - Quantity.parse("2M")
    just_the_launcher = str(launcher_memory + Quantity.parse("1M"))
    nodes = [node("n1"), node("n2", memory=just_the_launcher)]
    (blocker,) = only_vm(drain(state([instance], [pod], nodes=nodes))).blockers
    assert blocker.cause == "node-fit"
    assert f"n2: memory {just_the_launcher} free, needs" in blocker.message
    roomier = [node("n1"), node("n2", memory=str(launcher_memory + Quantity.parse("2M")))]
    vm = only_vm(drain(state([instance], [pod], nodes=roomier)))
    assert not vm.blockers and vm.target_node == "n2", "the launcher and its 2M fit exactly"


def test_the_nodes_refusing_for_one_reason_are_named_up_to_three_and_the_rest_counted() -> None:
    instance, pod = running("vm1")
    instance["spec"]["nodeSelector"] = {"gpu": "yes"}
    nodes = [node("n1"), *(node(f"m{i}") for i in range(5)), node("x", schedulable=False)]
    (blocker,) = only_vm(drain(state([instance], [pod], nodes=nodes))).blockers
    assert blocker.message == (
        "its target side fits on no node left (m0, m1, m2 and 2 more: nodeSelector gpu=yes does "
        "not match; x: not labelled kubevirt.io/schedulable=true)"
    )


def test_first_fit_charges_each_placed_target_so_the_second_finds_no_room() -> None:
    a, pa = running("a")
    b, pb = running("b")
    nodes = [node("n1"), node("n2", memory="6Gi")]
    vms = drain(state([a, b], [pa, pb], nodes=nodes)).vms
    assert [(vm.target_node, vm.blocked) for vm in vms] == [("n2", False), (None, True)]


def test_requests_of_pods_already_on_a_node_count() -> None:
    instance, pod = running("vm1")
    busy = {
        "metadata": {"name": "db", "namespace": "other"},
        "spec": {
            "nodeName": "n2",
            "containers": [{"name": "db", "resources": {"requests": {"memory": "62Gi"}}}],
        },
        "status": {"phase": "Running"},
    }
    assert drain(state([instance], [pod, busy])).blocks
    busy["status"]["phase"] = "Succeeded"
    assert not drain(state([instance], [pod, busy])).blocks


@pytest.mark.parametrize(
    ("vmi_spec", "node_extra", "reason"),
    [
        ({"nodeSelector": {"zone": "a"}}, {"labels": {"zone": "b"}}, "nodeSelector zone=a"),
        ({}, {"taints": [{"key": "gpu", "effect": "NoSchedule"}]}, "taint gpu="),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "zone", "operator": "In", "values": ["a"]}
                                    ]
                                }
                            ]
                        }
                    }
                }
            },
            {"labels": {"zone": "b"}},
            "required node affinity",
        ),
        ({"domain_cpu": {"dedicatedCpuPlacement": True}}, {}, "nodeSelector cpumanager=true"),
    ],
)
def test_placement_rules_refuse_a_node_with_the_reason(
    vmi_spec: Object, node_extra: Object, reason: str
) -> None:
    instance, pod = running("vm1")
    cpu = vmi_spec.pop("domain_cpu", None)
    if cpu is not None:
        instance["spec"]["domain"]["cpu"].update(cpu)
    instance["spec"].update(vmi_spec)
    vm = only_vm(drain(state([instance], [pod], nodes=[node("n1"), node("n2", **node_extra)])))
    assert reason in vm.blockers[0].message


def test_a_tolerated_taint_and_a_matching_affinity_accept_the_node() -> None:
    instance, pod = running("vm1")
    instance["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists"}]
    instance["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]}
                ]
            }
        }
    }
    target = node("n2", labels={"zone": "a"}, taints=[{"key": "gpu", "effect": "NoSchedule"}])
    assert only_vm(drain(state([instance], [pod], nodes=[node("n1"), target]))).target_node == "n2"


def test_hugepages_need_a_node_that_has_them() -> None:
    instance, pod = running("vm1")
    instance["spec"]["domain"]["memory"]["hugepages"] = {"pageSize": "2Mi"}
    vm = only_vm(drain(state([instance], [pod])))
    assert vm.blocked and "hugepages-2Mi 0 free" in vm.blockers[0].message


# --- waves and the estimate ----------------------------------------------------------------------


def test_waves_follow_the_per_node_and_per_cluster_limits() -> None:
    pairs = [running(f"vm{i}", "n1" if i < 5 else "n2") for i in range(8)]
    nodes = [node("n1"), node("n2"), node("n3", cpu="64", memory="256Gi")]
    cluster = state([v for v, _ in pairs], [p for _, p in pairs], nodes=nodes)
    report = drain(cluster, "n1", "n2")
    assert [len(w) for w in report.steps[0].waves] == [4, 3, 1]
    cluster.kubevirt = {
        "spec": {
            "configuration": {
                "migrations": {
                    "parallelMigrationsPerCluster": 3,
                    "parallelOutboundMigrationsPerNode": 1,
                }
            }
        }
    }
    assert [len(w) for w in drain(cluster, "n1", "n2").steps[0].waves] == [2, 2, 2, 1, 1]


def test_the_estimate_is_the_slowest_copy_per_wave_at_the_bandwidth() -> None:
    a, pa = running("a", memory="8Gi")
    b, pb = running("b", memory="4Gi")
    c, pc = running("c", memory="2Gi")
    kubevirt = {"spec": {"configuration": {"migrations": {"bandwidthPerMigration": "1Gi"}}}}
    report = drain(state([a, b, c], [pa, pb, pc], kubevirt=kubevirt))
    guest = {vm.name: vm.memory_bytes for vm in report.vms}
    assert report.steps[0].waves == [["ns/a", "ns/b"], ["ns/c"]]
    assert report.estimated_seconds == pytest.approx((guest["a"] + guest["c"]) / (1 << 30))


# --- upgrade --------------------------------------------------------------------------------------


def test_upgrade_takes_control_plane_nodes_first_then_by_name_and_follows_moved_vms() -> None:
    instance, pod = running("vm1", "b-worker")
    nodes = [
        node("b-worker"),
        node("a-worker", memory="1Gi"),
        node("z-server", labels={"node-role.kubernetes.io/control-plane": "true"}),
    ]
    report = preflight(state([instance], [pod], nodes=nodes), Plan("upgrade"))
    assert [s.nodes for s in report.steps] == [["z-server"], ["a-worker"], ["b-worker"]]
    assert report.steps[2].vms[0].target_node == "z-server"
    assert "control-plane nodes first" in report.order_reason


def test_an_unknown_node_is_refused_by_name() -> None:
    instance, pod = running("vm1")
    with pytest.raises(ValueError, match="no such node: n9"):
        drain(state([instance], [pod]), "n9")


# --- rendering and the command line ---------------------------------------------------------------


def blocked_and_ok() -> ClusterState:
    a, pa = running("a")
    b, pb = running("b")
    migratable(b, False, "HostDevice")
    return state([a, b], [pa, pb])


def test_text_starts_with_the_summary_then_blockers_and_has_colour_only_when_asked() -> None:
    report = drain(blocked_and_ok())
    lines = render_text(report).splitlines()
    assert lines[0].startswith("preflight drain n1: BLOCKED, 1 of 2 VMs will not move")
    assert "(estimate)" in lines[0]
    assert lines[1] == "BLOCKED ns/b on n1"
    assert "\033[" not in render_text(report)
    assert render_text(report, colour=True).startswith("\033[")


def test_json_carries_the_schema_version_verdicts_and_blockers() -> None:
    out = json.loads(render_json(drain(blocked_and_ok())))
    assert out["schema_version"] == 1 and out["blocks"] is True
    vms = out["steps"][0]["vms"]
    assert [(v["name"], v["blocked"], v["action"]) for v in vms] == [
        ("a", False, "migrate"),
        ("b", True, "blocks-drain"),
    ]
    assert vms[1]["blockers"][0]["cause"] == "not-migratable"
    assert set(out["limits"]) == {
        "parallelMigrationsPerCluster",
        "parallelOutboundMigrationsPerNode",
        "bandwidthPerMigration",
    }


def test_json_gives_each_steps_estimate_to_a_tenth_of_a_second_as_the_whole() -> None:
    instance, pod = running("vm1", memory="4Gi")
    kubevirt = {"spec": {"configuration": {"migrations": {"bandwidthPerMigration": "3Gi"}}}}
    out = json.loads(render_json(drain(state([instance], [pod], kubevirt=kubevirt))))
    assert out["steps"][0]["estimated_seconds"] == out["estimated_seconds"] == 1.3


@pytest.mark.parametrize(("cluster", "code"), [(blocked_and_ok, 1), (lambda: state([], []), 0)])
def test_exit_code_is_1_when_something_blocks_and_0_otherwise(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    cluster: Any,
    code: int,
    tmp_path: Path,
) -> None:
    async def read_cluster(_client: Any, **_: Any) -> tuple[ClusterState, list[str]]:
        return cluster(), []

    monkeypatch.setattr(read, "read_cluster", read_cluster)
    kubeconfig = unreachable_kubeconfig(tmp_path)
    argv = ["preflight", "drain", "n1", "--strategy", "ours", "--kubeconfig", str(kubeconfig)]
    assert cli.main(argv) == code
    assert capsys.readouterr().out.startswith("preflight drain n1: ")


def unreachable_kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    return path


def test_an_unreachable_cluster_exits_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["preflight", "upgrade", "--kubeconfig", str(unreachable_kubeconfig(tmp_path))]
    assert cli.main(argv) == 2
    assert capsys.readouterr().err.startswith("harvester-quota preflight: ")


def test_an_unknown_node_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    async def read_cluster(_client: Any, **_: Any) -> tuple[ClusterState, list[str]]:
        return state([], []), []

    monkeypatch.setattr(read, "read_cluster", read_cluster)
    argv = [
        "preflight",
        "drain",
        "nope",
        "--strategy",
        "none",
        "--kubeconfig",
        str(unreachable_kubeconfig(tmp_path)),
    ]
    assert cli.main(argv) == 2
    assert "no such node: nope" in capsys.readouterr().err


def test_the_kubectl_plugin_takes_kubectls_context_flag() -> None:
    args = cli.build_parser("kubectl harvester-quota").parse_args(
        ["preflight", "drain", "n1", "--context", "prod", "-o", "json"]
    )
    assert (args.context, args.output, args.nodes) == ("prod", "json", ["n1"])


def test_in_an_upgrade_a_blocked_vm_stays_and_its_node_keeps_its_requests() -> None:
    """vm1 cannot migrate, so n1's step leaves it there; n2's step then finds n1 as full as
    before (its launcher still requests its memory) and vm2 goes to n3; n3's step moves vm2
    again, to n2, upgraded and back by then."""
    stuck, p1 = running("vm1", "n1", memory="8Gi")
    migratable(stuck, False, "HostDevice")
    mover, p2 = running("vm2", "n2", memory="8Gi")
    nodes = [node("n1", memory="8Gi"), node("n2"), node("n3")]
    report = preflight(state([stuck, mover], [p1, p2], nodes=nodes), Plan("upgrade"))
    by_step = {s.nodes[0]: [(vm.name, vm.target_node) for vm in s.vms] for s in report.steps}
    assert by_step == {"n1": [("vm1", None)], "n2": [("vm2", "n3")], "n3": [("vm2", "n2")]}
    assert report.blocks


class ListingClient:
    """Answers list_all with the objects given per kind (read.detect_strategy's only call)."""

    def __init__(self, objects: dict[str, list[Object]]) -> None:
        self.objects = objects

    async def list_all(self, resource: Any, *_: Any, **__: Any) -> Any:
        return type("Listed", (), {"items": self.objects.get(resource.plural, [])})()


@pytest.mark.parametrize(
    ("webhooks", "ratio_setting", "strategy"),
    [
        ([{"metadata": {"name": "harvester-quota"}}], None, "ours"),
        ([{"metadata": {"name": "other"}}], {"metadata": {"name": "r"}}, "harvester"),
        ([], None, "none"),
    ],
)
async def test_auto_picks_what_the_cluster_runs(
    webhooks: list[Object], ratio_setting: Object | None, strategy: str
) -> None:
    client = ListingClient({"validatingwebhookconfigurations": webhooks})
    cluster = state([], [], harvester_ratio_setting=ratio_setting)
    found, reason = await read.detect_strategy(client, cluster)  # type: ignore[arg-type]
    assert found == strategy and reason.startswith("auto: ")


class KubeVirtlessClient(ListingClient):
    """A cluster without KubeVirt's CRDs: listing its kinds answers NotFound."""

    async def list_all(self, resource: Any, *args: Any, **kwargs: Any) -> Any:
        if resource.group == "kubevirt.io":
            raise errors.NotFound(f"the server could not find {resource.plural}", status=404)
        return await super().list_all(resource, *args, **kwargs)


async def test_a_cluster_without_kubevirt_says_so_instead_of_reading_as_no_vms() -> None:
    """It read as "OK, nothing blocks (0 VMs)" without a word (review)."""
    found, warnings = await read.read_cluster(KubeVirtlessClient({"nodes": [node("n1")]}))  # type: ignore[arg-type]
    assert found.vmis == []
    assert any("serves no KubeVirt VirtualMachineInstances" in w for w in warnings)
