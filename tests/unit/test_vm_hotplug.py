"""CPU and memory hot-plug (issue 25, review finding 4): a tenant who edits a running VM's
sockets or guest memory makes KubeVirt migrate it into a larger target pod, a target like any
other; the VM edit is checked like an in-place resize, so a VM never grows past the base."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from harvester_quota.util.hotplug import hot_plugged
from harvester_quota.util.quantity import Quantity
from harvester_quota.webhook.admission import Denied
from harvester_quota.webhook.resources.virtualmachine.validator import validate_vm

from tests.objects import launcher_pod, vmi
from tests.unit.test_webhook import FakeLookups, quota_with, request, room_held

FOUR_GI = 4 * 1024**3


def hotpluggable_vmi(name: str = "vm2") -> dict[str, Any]:
    """A running Harvester-style VMI (2 cores, 4Gi) started under LiveUpdate: KubeVirt set
    maxSockets and maxGuest (4x, its default hot-plug ratio)."""
    instance = vmi(name, cores=2, memory="4Gi")
    domain = instance["spec"]["domain"]
    domain["cpu"]["maxSockets"] = 4
    domain["memory"]["maxGuest"] = str(Quantity.parse(domain["memory"]["guest"]) * 4)
    return instance


def vm_of(
    instance: dict[str, Any], *, sockets: int = 1, guest: str | None = None
) -> dict[str, Any]:
    """The VM of `instance` with its template edited: `sockets` sockets, `guest` memory."""
    template = copy.deepcopy(instance["spec"])
    template["domain"]["cpu"] = {"cores": 2, "sockets": sockets, "threads": 1}
    if guest is not None:
        template["domain"]["memory"] = {"guest": guest}
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": instance["metadata"]["name"], "namespace": "ns"},
        "spec": {"runStrategy": "Always", "template": {"spec": template}},
    }


def guest_of(instance: dict[str, Any]) -> Quantity:
    return Quantity.parse(instance["spec"]["domain"]["memory"]["guest"])


def running(lookups: FakeLookups, instance: dict[str, Any]) -> None:
    lookups.vmi_list.append(instance)
    lookups.pods.append(launcher_pod(instance, f"virt-launcher-{instance['metadata']['name']}"))


def test_a_cpu_hot_plug_patches_the_vmi_as_kubevirt_does() -> None:
    """KubeVirt v1.8 VMICPUsPatch: sockets to the template's; requests and limits that are set
    grow by 1000m / cpuAllocationRatio per added vCPU (two sockets of two cores: +200m)."""
    instance = hotpluggable_vmi()
    grown = hot_plugged(vm_of(instance, sockets=2)["spec"]["template"]["spec"], instance)
    assert grown is not None
    domain = grown["spec"]["domain"]
    assert domain["cpu"]["sockets"] == 2
    assert Quantity.parse(domain["resources"]["limits"]["cpu"]) == Quantity.parse("2200m")
    assert instance["spec"]["domain"]["cpu"]["sockets"] == 1, "the VMI given is not changed"


def test_a_memory_hot_plug_patches_the_vmi_as_kubevirt_does() -> None:
    instance = hotpluggable_vmi()
    wanted = guest_of(instance) + Quantity.from_int(FOUR_GI)
    grown = hot_plugged(vm_of(instance, guest=str(wanted))["spec"]["template"]["spec"], instance)
    assert grown is not None
    resources = grown["spec"]["domain"]["resources"]
    assert Quantity.parse(grown["spec"]["domain"]["memory"]["guest"]) == wanted
    assert Quantity.parse(resources["limits"]["memory"]) == Quantity.parse("8Gi")
    assert Quantity.parse(resources["requests"]["memory"]) >= wanted


@pytest.mark.parametrize(
    ("sockets", "guest_factor", "max_sockets"),
    [(1, 1, 4), (8, 1, 4), (2, 1, 0), (1, 8, 4)],
    ids=["nothing-grows", "beyond-max-sockets", "no-max-sockets", "beyond-max-guest"],
)
def test_growth_kubevirt_applies_only_at_a_restart_is_no_hot_plug(
    sockets: int, guest_factor: int, max_sockets: int
) -> None:
    instance = hotpluggable_vmi()
    instance["spec"]["domain"]["cpu"]["maxSockets"] = max_sockets
    guest = str(guest_of(instance) * guest_factor)
    template = vm_of(instance, sockets=sockets, guest=guest)["spec"]["template"]["spec"]
    assert hot_plugged(template, instance) is None


def test_a_memory_hot_plug_beyond_the_base_is_denied_and_one_within_passes() -> None:
    """The v1.7.0 namespace's base (3 CPU, 5000Mi) holds vm2's 4797464313 bytes: 4Gi more guest
    memory does not fit, and the edit is denied, naming the key; with a 10Gi base it passes."""
    lookups = FakeLookups(quotas={"ns": quota_with({"limits.memory": "4797464313"})})
    instance = hotpluggable_vmi()
    running(lookups, instance)
    bigger = vm_of(instance, guest=str(guest_of(instance) + Quantity.from_int(FOUR_GI)))
    with pytest.raises(Denied) as denied:
        validate_vm(request("VirtualMachine", bigger), lookups)
    assert "hot-plugging its CPU or memory grows its launcher pod" in denied.value.message
    assert "limits.memory insufficient" in denied.value.message
    lookups.quotas["ns"] = quota_with(
        {"limits.memory": "4797464313"}, {"limits.cpu": "3", "limits.memory": "10Gi"}
    )
    validate_vm(request("VirtualMachine", bigger), lookups)


def test_a_hot_plug_is_held_to_the_base_while_room_is_held() -> None:
    """vm1's migration holds room: spec.hard is the 5-CPU base plus its 2015m. Pods use 4900m
    (100m free under the base, 2115m under the raise). vm2's CPU hot-plug (+200m) fits the
    raise, not the base: denied, since the room is for vm1's target. Used at 4800m it passes."""
    lookups = FakeLookups()
    room_held(lookups)
    quota = lookups.quotas["ns"]
    quota["spec"]["hard"] = {"limits.cpu": "7015m", "limits.memory": "20Gi"}
    quota["status"]["used"] = {"limits.cpu": "4900m", "limits.memory": "10Gi"}
    instance = hotpluggable_vmi()
    running(lookups, instance)
    with pytest.raises(Denied) as denied:
        validate_vm(request("VirtualMachine", vm_of(instance, sockets=2)), lookups)
    assert "limits.cpu insufficient" in denied.value.message
    assert "100m left of the base 5" in denied.value.message
    quota["status"]["used"]["limits.cpu"] = "4800m"
    validate_vm(request("VirtualMachine", vm_of(instance, sockets=2)), lookups)


def test_a_second_hot_plug_before_the_first_migrated_is_charged_for_both() -> None:
    """Growth is measured from the launcher pod running now, not from the VMI KubeVirt already
    patched: two edits each fitting alone, the second before the first's migration, would
    otherwise take twice what the base leaves free."""
    lookups = FakeLookups(
        quotas={
            "ns": quota_with(
                {"limits.memory": "4797464313"}, {"limits.cpu": "3", "limits.memory": "10Gi"}
            )
        }
    )
    instance = hotpluggable_vmi()
    running(lookups, instance)
    step = Quantity.from_int(FOUR_GI)
    first = vm_of(instance, guest=str(guest_of(instance) + step))
    validate_vm(request("VirtualMachine", first), lookups)
    patched = hot_plugged(first["spec"]["template"]["spec"], instance)
    assert patched is not None
    lookups.vmi_list[0] = patched  # KubeVirt patched the VMI; its pod is still the 4Gi one
    second = vm_of(patched, guest=str(guest_of(instance) + step + step))
    with pytest.raises(Denied):
        validate_vm(request("VirtualMachine", second), lookups)


def test_an_edit_that_grows_nothing_passes_in_a_namespace_above_its_base() -> None:
    lookups = FakeLookups(quotas={"ns": quota_with({"limits.memory": "6000Mi"})})
    instance = hotpluggable_vmi()
    running(lookups, instance)
    relabelled = vm_of(instance)
    relabelled["metadata"]["labels"] = {"team": "b"}
    validate_vm(request("VirtualMachine", relabelled), lookups)


def test_a_stop_or_relabel_passes_while_growth_is_left_pending() -> None:
    """Review: the check charged any difference between the template and the VMI, so once an
    edit left growth pending (KubeVirt made it a RestartRequired, or it came while the webhook
    was down), every later update of the VM was denied: a stop, a relabel, KubeVirt's own."""
    lookups = FakeLookups(quotas={"ns": quota_with({"limits.memory": "4797464313"})})
    instance = hotpluggable_vmi()
    running(lookups, instance)
    pending = vm_of(instance, guest=str(guest_of(instance) + Quantity.from_int(FOUR_GI)))
    relabelled = copy.deepcopy(pending)
    relabelled["metadata"]["labels"] = {"team": "b"}
    validate_vm(request("VirtualMachine", relabelled, pending), lookups)
    stopped = copy.deepcopy(pending)
    stopped["spec"]["runStrategy"] = "Halted"
    validate_vm(request("VirtualMachine", stopped, pending), lookups)
    with pytest.raises(Denied):
        validate_vm(request("VirtualMachine", pending, vm_of(instance)), lookups)


def test_kubevirt_restarts_rather_than_hot_plugs_a_changed_core_count_or_an_unmigratable_vmi() -> (
    None
):
    instance = hotpluggable_vmi()
    more_cores = vm_of(instance, sockets=2)["spec"]["template"]["spec"]
    more_cores["domain"]["cpu"]["cores"] = 4
    assert hot_plugged(more_cores, instance) is None
    unmigratable = copy.deepcopy(instance)
    unmigratable["status"]["conditions"] = [{"type": "LiveMigratable", "status": "False"}]
    assert hot_plugged(vm_of(instance, sockets=2)["spec"]["template"]["spec"], unmigratable) is None
