"""Why a target is bigger than its source (harvester/harvester#9753): the room against the source
launcher pod as it charges, and the overhead the target is rendered with now."""

from __future__ import annotations

import copy
import datetime
from typing import Any, cast

from harvester_quota.explain import explain, render_text
from harvester_quota.generic.client import ApiClient
from harvester_quota.util.launcher import LauncherSettings, rendered_memory_overhead
from harvester_quota.util.resourcequota.podindex import NamespacePods, PodView
from harvester_quota.util.resourcequota.rooms import source_pod, target_growth

from tests.objects import launcher_pod, managed_quota, migration, rancher_namespace, vmi
from tests.unit.test_quota_plan import V170_HARD, V170_LIMIT
from tests.unit.test_quota_scopes_in_fit_checks import ReadOnlyCluster
from tests.unit.vmis import V170_VM, q

NOW = datetime.datetime(2026, 11, 26, 12, 0, tzinfo=datetime.UTC)
VMI = copy.deepcopy(V170_VM)
VMI["metadata"] = {"name": "vm1", "uid": "vmi-uid"}


def _launcher(
    name: str, memory: str, *, migration: str | None = None, created: str = ""
) -> PodView:
    return PodView(
        name=name,
        usage={"requests.memory": q(memory), "requests.cpu": q("200m")},
        launcher=True,
        created_by="vmi-uid",
        migration_uid=migration,
        created=created or "2026-11-26T10:00:00Z",
        running=True,
    )


def test_a_ratio_raised_since_the_source_started_is_named_with_the_overhead_in_force() -> None:
    settings = LauncherSettings(ratio="2.0", kubevirt_version="v1.9.0")
    source = _launcher("virt-launcher-vm1-a", "4000Mi")
    growth = target_growth(
        {"requests.memory": q("4500Mi"), "requests.cpu": q("200m")}, VMI, source, settings
    )
    assert growth is not None
    assert growth.grown == {"requests.memory": q("500Mi")}
    assert growth.overhead_now == rendered_memory_overhead(VMI, settings)
    line = growth.sentence()
    assert "virt-launcher-vm1-a: requests.memory +500Mi" in line
    assert "overhead ratio 2.0, KubeVirt v1.9.0" in line


def test_a_room_no_bigger_than_its_source_has_no_growth_to_explain() -> None:
    source = _launcher("virt-launcher-vm1-a", "4000Mi")
    room = {"requests.memory": q("4000Mi"), "requests.cpu": q("100m")}
    assert target_growth(room, VMI, source, LauncherSettings()) is None


def test_cpu_growth_alone_names_no_memory_overhead() -> None:
    source = _launcher("virt-launcher-vm1-a", "4000Mi")
    room = {"requests.memory": q("4000Mi"), "requests.cpu": q("1")}
    growth = target_growth(room, VMI, source, LauncherSettings())
    assert growth is not None and "overhead" not in growth.sentence()


def test_the_source_is_the_oldest_counting_launcher_that_is_no_target_of_this_migration() -> None:
    pods = NamespacePods(
        [
            _launcher("virt-launcher-vm1-new", "4Gi", created="2026-11-26T11:00:00Z"),
            _launcher("virt-launcher-vm1-old", "4Gi", created="2026-11-26T09:00:00Z"),
            _launcher("virt-launcher-vm1-target", "5Gi", migration="mig-uid"),
            PodView(name="tenant-pod", usage={}, created_by="vmi-uid"),
        ]
    )
    found = source_pod(pods, "vmi-uid", "mig-uid", NOW)
    assert found is not None and found.name == "virt-launcher-vm1-old"
    assert source_pod(pods, "other-vmi", "mig-uid", NOW) is None


async def test_explain_names_a_raised_ratio_as_why_the_target_outgrows_its_source() -> None:
    """harvester/harvester#9753: vm1's source was rendered with ratio 1.5, the CR now says 3.0;
    explain's room shows the growth and the overhead in force, and no growth at the old ratio."""
    vm = vmi("vm1")
    objects: dict[str, list[dict[str, Any]]] = {
        "namespaces": [rancher_namespace("ns", V170_LIMIT)],
        "resourcequotas": [managed_quota("ns", V170_HARD)],
        "virtualmachineinstancemigrations": [migration("m", vm)],
        "virtualmachineinstances": [vm],
        "pods": [launcher_pod(vm, "virt-launcher-vm1-src", ratio="1.5")],
        "kubevirts": [_kubevirt_cr("1.5")],
    }
    same = await explain(cast(ApiClient, ReadOnlyCluster(objects)), "ns")
    assert [room["growth"] for room in same.rooms] == [""]
    objects["kubevirts"] = [_kubevirt_cr("3.0")]
    found = await explain(cast(ApiClient, ReadOnlyCluster(objects)), "ns")
    (room,) = found.rooms
    assert "bigger than its source pod virt-launcher-vm1-src: limits.memory +" in room["growth"]
    assert "overhead ratio 3.0, KubeVirt v1.6.0" in room["growth"]
    assert room["growth"] in render_text(found)


def _kubevirt_cr(ratio: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
        "spec": {"configuration": {"additionalGuestMemoryOverheadRatio": ratio}},
        "status": {"observedKubeVirtVersion": "v1.6.0"},
    }
