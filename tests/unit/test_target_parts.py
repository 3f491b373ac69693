"""Adding a kind of pod to a migration's target side is one registration (launcher/parts.py):
a "sidecar" kind registered here only, by replacing the registry for one test, shows up in the
room (rendered before it exists, its real pod after, a forged one charged to the base), in
MTQ's budget for a blocked migration, in the VM start check and in explain, without any other
file knowing it; and in preflight's answer for a drain."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from harvester_quota import explain as explain_module
from harvester_quota.apis.kubevirt import LABEL_MIGRATION_JOB
from harvester_quota.preflight import Plan, preflight
from harvester_quota.util.launcher import LauncherSettings, VmiView, launcher_pod_resources, parts
from harvester_quota.util.launcher.parts import PartKind
from harvester_quota.util.podusage import pod_quota_usage
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.quotascope import PLAIN_FACTS, PodScopeFacts
from harvester_quota.util.resourcequota.plan import NamespaceSnapshot, QuotaPlan
from harvester_quota.util.resources import ResourceList, add
from harvester_quota.webhook.admission import Denied
from harvester_quota.webhook.resources.virtualmachine.validator import validate_vm_start

from tests.objects import launcher_pod, pods_of, vmi
from tests.unit.mtq_fakes import harness
from tests.unit.test_mtq_controller import NOT_ENOUGH_REASON, namespace_labels, setup
from tests.unit.test_preflight import only_vm, quota, state
from tests.unit.test_preflight import running as preflight_running
from tests.unit.test_rooms_all_pods import NOW, migration_of, rooms
from tests.unit.test_webhook import FakeLookups, quota_with, request, vm_object

SIDECAR_LABEL = "test-sidecar"
SIDECAR_POD = {"spec": {"containers": [{"name": "side", "resources": {"limits": {"cpu": "50m"}}}]}}


def _sidecar_usage(_vmi: VmiView, _settings: LauncherSettings) -> ResourceList:
    return pod_quota_usage(SIDECAR_POD)


def _sidecar_facts(_vmi: VmiView, _usage: ResourceList) -> PodScopeFacts:
    return PLAIN_FACTS


SIDECAR = PartKind("sidecar", SIDECAR_LABEL, _sidecar_usage, _sidecar_usage, _sidecar_facts)


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one registration: the sidecar kind after the shipped ones."""
    monkeypatch.setattr(parts, "TARGET_PARTS", (*parts.TARGET_PARTS, SIDECAR))


def sidecar_pod(name: str, owner: dict[str, Any], mig: dict[str, Any] | None) -> dict[str, Any]:
    """A sidecar pod beside a target launcher pod, made for `mig` (None: not labelled)."""
    labels = {"kubevirt.io": SIDECAR_LABEL}
    if mig is not None:
        labels[LABEL_MIGRATION_JOB] = mig["metadata"]["uid"]
    pod = copy.deepcopy(SIDECAR_POD)
    pod["metadata"] = {
        "name": name,
        "namespace": "ns",
        "uid": f"uid-{name}",
        "labels": labels,
        "creationTimestamp": mig["metadata"]["creationTimestamp"]
        if mig
        else "2026-01-01T11:00:00Z",
        "ownerReferences": [
            {"kind": "Pod", "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"]}
            | {"controller": True, "apiVersion": "v1"}
        ],
    }
    pod["status"] = {"phase": "Running"}
    return pod


def running(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    instance = vmi(name)
    instance["metadata"]["creationTimestamp"] = "2026-01-01T09:00:00Z"
    return instance, launcher_pod(instance, f"virt-launcher-{name}-src")


def test_a_registered_kind_is_rendered_into_the_room_before_its_pod_exists() -> None:
    instance, source = running("vm1")
    mig = migration_of("m1", instance)
    target = launcher_pod(instance, "virt-launcher-vm1-dst", migration=mig)
    (room,) = rooms([mig], [instance], [source, target]).rooms
    assert [part.kind for part in room.parts] == ["launcher", "sidecar"]
    assert room.room["limits.cpu"] == (
        pod_quota_usage(target)["limits.cpu"] + Quantity.parse("50m")
    )
    assert room.in_use["pods"] == Quantity.parse("1"), "the sidecar is not made yet"


def test_a_registered_kinds_real_pod_is_the_room_and_a_forged_one_is_the_base() -> None:
    instance, source = running("vm1")
    mig = migration_of("m1", instance)
    target = launcher_pod(instance, "virt-launcher-vm1-dst", migration=mig)
    real = sidecar_pod("side-real", target, mig)
    forged = sidecar_pod("side-forged", source, mig)  # controlled by the source, not the target
    planned = rooms([mig], [instance], [source, target, real, forged])
    (room,) = planned.rooms
    assert pods_of(room, "sidecar") == ("side-real",)
    assert planned.target_pods == {"virt-launcher-vm1-dst", "side-real"}
    assert room.in_use == room.room


async def test_mtq_budgets_a_registered_kind_too() -> None:
    """The budget setup() gives holds the launcher alone: with the sidecar registered, MTQ
    mode must find it short and touch nothing."""
    h = harness()
    setup(h)
    await h.reconcile(h.reconciler())
    assert [(name, reason) for name, reason, _ in h.events] == [("mig0", NOT_ENOUGH_REASON)]
    assert not any("locked" in key for key in namespace_labels(h))


def test_the_vm_start_check_counts_a_registered_kind() -> None:
    launcher = pod_quota_usage(launcher_pod_resources(vmi("vm1", cores=2, memory="4Gi")))
    fits_launcher = {"limits.cpu": str(launcher["limits.cpu"])}
    lookups = FakeLookups(quotas={"ns": quota_with({}, fits_launcher)})
    with pytest.raises(Denied) as denied:
        validate_vm_start(request("VirtualMachine", vm_object("vm1", 2, "4Gi")), lookups)
    assert "limits.cpu" in denied.value.message
    both = add(launcher, pod_quota_usage(SIDECAR_POD))
    lookups = FakeLookups(quotas={"ns": quota_with({}, {"limits.cpu": str(both["limits.cpu"])})})
    validate_vm_start(request("VirtualMachine", vm_object("vm1", 2, "4Gi")), lookups)


def test_explain_lists_a_registered_kinds_pods() -> None:
    instance, source = running("vm1")
    mig = migration_of("m1", instance)
    target = launcher_pod(instance, "virt-launcher-vm1-dst", migration=mig)
    planned = rooms([mig], [instance], [source, target, sidecar_pod("side-real", target, mig)])
    quota = {"metadata": {"name": "rq", "namespace": "ns"}, "spec": {"hard": {}}}
    snapshot = NamespaceSnapshot({}, quota, [mig], {}, [], NOW)
    explained = explain_module._explanation(
        "ns", quota, QuotaPlan(managed=True, snapshot=snapshot, rooms=planned), [mig], []
    )
    (room,) = explained.rooms
    assert [part["kind"] for part in room["parts"]] == ["launcher", "sidecar"]
    assert ", sidecar pods side-real" in explain_module.render_text(explained)


def test_preflight_charges_a_registered_kind_to_the_drains_target_side() -> None:
    """A quota with room for exactly one more launcher: the target side with the sidecar is
    50m short of it, and preflight names the sidecar among the parts it charged."""
    instance, pod = preflight_running("vm1")
    launcher = pod_quota_usage(pod)["limits.cpu"]
    exact = quota("team-cap", {"limits.cpu": str(launcher + launcher)}, [pod])
    vm = only_vm(
        preflight(state([instance], [pod], quotas=[exact]), Plan("drain", ("n1",), "ours"))
    )
    assert vm.target_parts == ["launcher", "sidecar"]
    assert Quantity.parse(vm.target_usage["limits.cpu"]) == launcher + Quantity.parse("50m")
    (blocker,) = vm.blockers
    (short,) = blocker.shortfalls
    assert (short.quota, short.key, short.short_by) == ("team-cap", "limits.cpu", "50m")


def test_preflight_checks_a_registered_kinds_pod_against_a_quotas_constraints() -> None:
    """A quota on requests.memory makes every container set it: the launcher does, the sidecar
    (limits.cpu alone) does not, so quota admission would refuse the sidecar whatever the room,
    and preflight says so by its kind."""
    instance, pod = preflight_running("vm1")
    roomy = quota("mem-cap", {"requests.memory": "1Ti"}, [pod])
    vm = only_vm(
        preflight(state([instance], [pod], quotas=[roomy]), Plan("drain", ("n1",), "ours"))
    )
    (blocker,) = vm.blockers
    assert blocker.cause == "quota" and blocker.quotas == ["mem-cap"]
    assert "the target's sidecar pod does not set it" in blocker.message
    assert "limits requests.memory" in blocker.message
