"""What the room mode's plans read (controller/resourcequota/planner.py) on a real informer factory
that never connects: which changes queue a namespace, and what is derived once per change."""

from __future__ import annotations

import copy
from typing import Any

from harvester_quota.config.management import Management, Options
from harvester_quota.controller.resourcequota.planner import PlanInputs
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.config import ClientConfig
from harvester_quota.testbench.clock import FakeClock
from prometheus_client import CollectorRegistry

from tests.objects import launcher_pod, migration, vmi
from tests.unit.fakes import upsert


def inputs() -> tuple[PlanInputs, list[str]]:
    """PlanInputs on a Management whose client is never used, and the namespaces it queued."""
    client = ApiClient(ClientConfig(host="https://127.0.0.1:1", ssl_context=False))
    management = Management(
        client=client, options=Options(), clock=FakeClock(), registry=CollectorRegistry()
    )
    queued: list[str] = []
    return PlanInputs(management, queued.append), queued


def kubevirt(ratio: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": "kubevirt", "resourceVersion": "1"},
        "spec": {"configuration": {"additionalGuestMemoryOverheadRatio": ratio}},
        "status": {"observedKubeVirtVersion": "v1.6.0"},
    }


def test_a_migration_queues_its_namespace_at_each_phase_class_and_each_refusal() -> None:
    """The migration's first sight, a refusal set and cleared and the end each queue;
    KubeVirt's steps before the end (Pending, Scheduling, PreparingTarget, TargetReady,
    Running) do not: no plan reads them apart (planviews.plan_acted_on)."""
    plan_inputs, queued = inputs()
    store = plan_inputs.informers.migrations.store
    vm = vmi("vm1")
    mig = migration("m1", vm, phase="Pending")
    steps: list[tuple[str, bool]] = [
        ("Pending", False),
        ("Pending", True),
        ("Pending", False),
        ("Scheduling", False),
        ("PreparingTarget", False),
        ("TargetReady", False),
        ("Running", False),
        ("Succeeded", False),
    ]
    queues = [True, True, True, False, False, False, False, True]
    seen = []
    for phase, rejected in steps:
        step = copy.deepcopy(mig)
        step["status"]["phase"] = phase
        if rejected:
            step["status"]["conditions"] = [
                {"type": "migrationRejectedByResourceQuota", "status": "True"}
            ]
        before = len(queued)
        upsert(store, step)
        seen.append(len(queued) > before)
    assert seen == queues
    assert plan_inputs.refusals.settle("ns").new_refusals == 1
    store.delete("ns/m1")
    assert queued[-1] == "ns" and len(queued) == sum(queues) + 1


def test_a_pod_whose_view_is_unchanged_queues_nothing() -> None:
    plan_inputs, queued = inputs()
    store = plan_inputs.informers.pods.store
    pod = launcher_pod(vmi("vm1"), "virt-launcher-vm1", phase="Pending")
    upsert(store, copy.deepcopy(pod))
    assert queued == ["ns"]
    pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    upsert(store, copy.deepcopy(pod))
    assert queued == ["ns"]
    pod["status"]["phase"] = "Running"
    upsert(store, copy.deepcopy(pod))
    assert queued == ["ns", "ns"]


def test_the_cluster_settings_are_derived_again_only_when_their_objects_change() -> None:
    plan_inputs, _queued = inputs()
    store = plan_inputs.informers.kubevirts.store
    upsert(store, kubevirt("1.5"))
    first = plan_inputs.cluster_settings()
    assert first == plan_inputs.informers.kubevirt_settings() and first.ratio == "1.5"
    assert plan_inputs.cluster_settings() is first, "kept while nothing changed"
    upsert(store, kubevirt("2"))
    assert plan_inputs.cluster_settings().ratio == "2"
    store.delete("kubevirt/kubevirt")
    assert plan_inputs.cluster_settings() == plan_inputs.informers.kubevirt_settings()
    assert plan_inputs.cluster_settings().ratio != "2", "derived again after the delete"


def test_a_relist_of_the_kubevirt_cr_derives_the_settings_again() -> None:
    """A watch that expired is followed by a relist (store.replace): the cached settings must
    follow it like an upsert."""
    plan_inputs, _queued = inputs()
    store = plan_inputs.informers.kubevirts.store
    upsert(store, kubevirt("1.5"))
    assert plan_inputs.cluster_settings().ratio == "1.5"
    store.replace([kubevirt("2.5")])
    assert plan_inputs.cluster_settings().ratio == "2.5"
    store.replace([])
    assert plan_inputs.cluster_settings() == plan_inputs.informers.kubevirt_settings()


def harvester_setting(value: str) -> dict[str, Any]:
    return {
        "apiVersion": "harvesterhci.io/v1beta1",
        "kind": "Setting",
        "metadata": {"name": "additional-guest-memory-overhead-ratio", "resourceVersion": "1"},
        "value": value,
    }


def test_without_a_kubevirt_cr_the_settings_follow_harvesters_setting_as_it_changes() -> None:
    """The derived settings are dropped on a change of Harvester's setting too, not only of the
    KubeVirt CR (a cluster where the CR is not visible reads the ratio from the setting)."""
    plan_inputs, _queued = inputs()
    store = plan_inputs.informers.settings.store
    upsert(store, harvester_setting("2"))
    first = plan_inputs.cluster_settings().ratio
    upsert(store, {**harvester_setting("3"), "metadata": {**harvester_setting("3")["metadata"]}})
    assert first == "2"
    assert plan_inputs.cluster_settings().ratio == "3"
    assert plan_inputs.cluster_settings() == plan_inputs.informers.kubevirt_settings()
