"""CPU and memory hot-plug (issue 25, review finding 4): a tenant who edits a running VM's
sockets or guest memory makes KubeVirt migrate it into a larger target pod, a target like any
other; the VM edit is checked like an in-place resize, so a VM never grows past the base."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import orjson
import pytest
from harvester_quota.config.kubevirt import settings_from
from harvester_quota.util.hotplug import hot_plugged
from harvester_quota.util.launcher import LauncherSettings
from harvester_quota.util.quantity import Quantity
from harvester_quota.webhook.admission import Denied, Request
from harvester_quota.webhook.resources.virtualmachine.validator import validate_vm
from harvester_quota.webhook.server import WebhookServer
from prometheus_client import CollectorRegistry

from tests.objects import launcher_pod, vmi
from tests.unit.test_webhook import FakeLookups, quota_with, request, room_held

FOUR_GI = 4 * 1024**3


def hotpluggable_vmi(name: str = "vm2") -> dict[str, Any]:
    """A running Harvester-style VMI (2 cores, 4Gi; its memory request below its guest memory)
    started under LiveUpdate: KubeVirt set maxSockets and maxGuest (4x, its default hot-plug
    ratio), and virt-api status.memory (guestAtBoot, guestCurrent, guestRequested: the guest)."""
    instance = vmi(name, cores=2, memory="4Gi")
    domain = instance["spec"]["domain"]
    domain["cpu"]["maxSockets"] = 4
    guest = domain["memory"]["guest"]
    domain["memory"]["maxGuest"] = str(Quantity.parse(guest) * 4)
    instance["status"]["memory"] = {
        "guestAtBoot": guest,
        "guestCurrent": guest,
        "guestRequested": guest,
    }
    return instance


def guaranteed_vmi(name: str = "vm2") -> dict[str, Any]:
    """`hotpluggable_vmi` with its memory request equal to its guest memory (4Gi), so a memory
    hot-plug grows the request by the delta and the limit with it."""
    instance = hotpluggable_vmi(name)
    instance["spec"]["domain"]["resources"]["requests"]["memory"] = "4Gi"
    return instance


def template_of(instance: dict[str, Any], **edits: Any) -> dict[str, Any]:
    """The template of `vm_of(instance, **edits)`."""
    template: dict[str, Any] = vm_of(instance, **edits)["spec"]["template"]["spec"]
    return template


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


def memory_of(vmi: dict[str, Any] | None) -> tuple[Quantity, Quantity]:
    """The memory request and limit of a hot-plugged VMI (which must exist)."""
    assert vmi is not None
    resources = vmi["spec"]["domain"]["resources"]
    return Quantity.parse(resources["requests"]["memory"]), Quantity.parse(
        resources["limits"]["memory"]
    )


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
    """KubeVirt v1.8 handleMemoryHotplugRequest on a Harvester-style VMI (request 2730Mi below
    its 4Gi guest): the request plus the 4Gi delta (6826Mi) falls short of the 8Gi guest, so the
    request becomes the guest and the delta for the limit is recomputed from it (0): the limit
    stays 4Gi."""
    instance = hotpluggable_vmi()
    wanted = guest_of(instance) + Quantity.from_int(FOUR_GI)
    grown = hot_plugged(template_of(instance, guest=str(wanted)), instance)
    assert grown is not None
    resources = grown["spec"]["domain"]["resources"]
    assert Quantity.parse(grown["spec"]["domain"]["memory"]["guest"]) == wanted
    assert Quantity.parse(resources["requests"]["memory"]) == wanted
    assert Quantity.parse(resources["limits"]["memory"]) == Quantity.parse("4Gi")


def test_a_memory_hot_plug_grows_a_request_equal_to_the_guest_and_the_limit_by_the_delta() -> None:
    instance = guaranteed_vmi()
    grown = hot_plugged(template_of(instance, guest="8Gi"), instance)
    assert memory_of(grown) == (Quantity.parse("8Gi"), Quantity.parse("8Gi"))


def test_the_memory_delta_is_taken_from_the_guest_memory_the_vmi_reports() -> None:
    """KubeVirt: delta = template guest - status.memory.guestCurrent, not - spec guest. A VMI
    whose guest reports 3Gi (a hot-unplug not all released) grows by 3Gi to reach 6Gi."""
    instance = guaranteed_vmi()
    instance["status"]["memory"]["guestCurrent"] = "3Gi"
    grown = hot_plugged(template_of(instance, guest="6Gi"), instance)
    assert memory_of(grown) == (Quantity.parse("7Gi"), Quantity.parse("7Gi"))


def test_without_a_reported_current_guest_memory_kubevirt_hot_plugs_no_memory() -> None:
    instance = hotpluggable_vmi()
    del instance["status"]["memory"]["guestCurrent"]
    assert hot_plugged(template_of(instance, guest="8Gi"), instance) is None
    del instance["status"]["memory"]
    assert hot_plugged(template_of(instance, guest="8Gi"), instance) is None


def test_a_decrease_not_below_the_boot_guest_is_a_hot_plug_whose_delta_can_be_positive() -> None:
    """A VMI booted with 4Gi, hot-plugged to 8Gi while its guest reports 6Gi: a template guest of
    7Gi is below the VMI's but not below the boot guest, so KubeVirt hot-plugs it with a delta of
    7Gi - 6Gi = +1Gi: the request and limit grow. 3Gi, below the boot guest, is a restart."""
    instance = guaranteed_vmi()
    instance["spec"]["domain"]["memory"]["guest"] = "8Gi"
    instance["spec"]["domain"]["resources"]["requests"]["memory"] = "8Gi"
    instance["spec"]["domain"]["resources"]["limits"]["memory"] = "8Gi"
    instance["status"]["memory"]["guestCurrent"] = "6Gi"
    grown = hot_plugged(template_of(instance, guest="7Gi"), instance)
    assert memory_of(grown) == (Quantity.parse("9Gi"), Quantity.parse("9Gi"))
    assert hot_plugged(template_of(instance, guest="3Gi"), instance) is None


@pytest.mark.parametrize(
    ("field", "value", "guest"),
    [
        ("guest", None, "5000Mi"),  # 2Mi aligned, but leave it: the next is the unaligned one
        ("guest", None, "5001Mi"),
        ("architecture", "arm64", "8Gi"),
        ("architecture", "s390x", "8Gi"),
        ("realtime", {}, "8Gi"),
        ("guestMappingPassthrough", {}, "8Gi"),
        ("launchSecurity", {"sev": {}}, "8Gi"),
        ("hugepages", {"pageSize": "1Gi"}, "8200Mi"),
    ],
    ids=[
        "aligned",
        "guest-not-2Mi-aligned",
        "arm64",
        "s390x",
        "realtime",
        "guest-mapping-passthrough",
        "launch-security",
        "1Gi-hugepages-unaligned",
    ],
)
def test_memory_kubevirt_cannot_live_update_is_no_hot_plug(
    field: str, value: Any, guest: str
) -> None:
    """memory.ValidateLiveUpdateMemory on the template: KubeVirt asks for a restart instead."""
    instance = hotpluggable_vmi()
    template = template_of(instance, guest=guest)
    domain = template["domain"]
    if field == "architecture":
        template["architecture"] = value
    elif field == "realtime":
        domain["cpu"]["realtime"] = value
    elif field == "guestMappingPassthrough":
        domain["cpu"]["numa"] = {"guestMappingPassthrough": value}
    elif field == "launchSecurity":
        domain["launchSecurity"] = value
    elif field == "hugepages":
        domain["memory"]["hugepages"] = value
    expected_plug = field == "guest" and guest == "5000Mi"
    assert (hot_plugged(template, instance) is not None) is expected_plug


def test_an_unaligned_max_guest_or_a_guest_below_1gi_is_no_memory_hot_plug() -> None:
    instance = hotpluggable_vmi()
    instance["spec"]["domain"]["memory"]["maxGuest"] = "16385Mi"
    assert hot_plugged(template_of(instance, guest="8Gi"), instance) is None
    small = hotpluggable_vmi()
    small["spec"]["domain"]["memory"].update(guest="512Mi", maxGuest="2Gi")
    small["status"]["memory"].update(guestAtBoot="512Mi", guestCurrent="512Mi")
    assert hot_plugged(template_of(small, guest="1000Mi"), small) is None


def test_kubevirt_hot_plugs_no_cpu_into_an_arm64_vm() -> None:
    instance = hotpluggable_vmi()
    template = template_of(instance, sockets=2)
    template["architecture"] = "arm64"
    assert hot_plugged(template, instance) is None


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
    instance = guaranteed_vmi()
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
    instance = guaranteed_vmi()
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
    instance = guaranteed_vmi()
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


def test_a_harvester_style_memory_hot_plug_is_charged_on_requests_memory_not_limits() -> None:
    """The request-first rule at admission: a Harvester-style VM's +4Gi guest memory leaves its
    limit alone, so a limits-only base (10Gi, the pod using 4797464313 bytes) holds it, while a
    requests.memory base of 6Gi does not hold the request grown to the 8Gi guest."""
    used = {"limits.memory": "4797464313", "requests.memory": "3Gi"}
    lookups = FakeLookups(
        quotas={"ns": quota_with(used, {"limits.cpu": "3", "limits.memory": "10Gi"})}
    )
    instance = hotpluggable_vmi()
    running(lookups, instance)
    bigger = vm_of(instance, guest="8Gi")
    validate_vm(request("VirtualMachine", bigger), lookups)
    lookups.quotas["ns"] = quota_with(
        used, {"limits.cpu": "3", "limits.memory": "10Gi", "requests.memory": "6Gi"}
    )
    with pytest.raises(Denied) as denied:
        validate_vm(request("VirtualMachine", bigger), lookups)
    assert "requests.memory insufficient" in denied.value.message


class StagedLookups(FakeLookups):
    """A cluster whose KubeVirt CR sets vmRolloutStrategy: Stage."""

    def kubevirt_settings(self) -> LauncherSettings:
        return dataclasses.replace(super().kubevirt_settings(), vm_rollout_live_update=False)


def test_the_kubevirt_cr_s_rollout_strategy_is_read() -> None:
    def strategy(value: str | None) -> bool:
        configuration = {} if value is None else {"vmRolloutStrategy": value}
        kubevirt = {"spec": {"configuration": configuration}}
        return settings_from(kubevirt, None, cluster_arch="amd64").vm_rollout_live_update

    assert strategy(None) and strategy("LiveUpdate")
    assert not strategy("Stage")


def test_under_the_stage_rollout_strategy_kubevirt_hot_plugs_nothing_and_the_edit_passes() -> None:
    lookups = StagedLookups(quotas={"ns": quota_with({"limits.memory": "4797464313"})})
    instance = guaranteed_vmi()
    running(lookups, instance)
    validate_vm(request("VirtualMachine", vm_of(instance, guest="8Gi", sockets=4)), lookups)


def test_a_vm_started_by_hand_under_the_manual_run_strategy_is_still_checked() -> None:
    """KubeVirt hot-plugs into any running VMI whose VM it is not stopping: a Manual VM started
    with virtctl start grows like an Always one."""
    lookups = FakeLookups(quotas={"ns": quota_with({"limits.memory": "4797464313"})})
    instance = guaranteed_vmi()
    running(lookups, instance)
    manual = vm_of(instance, guest="8Gi")
    manual["spec"]["runStrategy"] = "Manual"
    with pytest.raises(Denied):
        validate_vm(request("VirtualMachine", manual), lookups)


def test_dropping_what_held_kubevirt_s_hot_plug_back_is_checked() -> None:
    """An edit that raises the guest memory while the template has launch security is no
    hot-plug (ValidateLiveUpdateMemory) and passes; the next edit, dropping only the launch
    security, makes KubeVirt hot-plug the growth left pending, so it is checked and denied."""
    lookups = FakeLookups(quotas={"ns": quota_with({"limits.memory": "4797464313"})})
    instance = guaranteed_vmi()
    running(lookups, instance)
    secured = vm_of(instance, guest="8Gi")
    secured["spec"]["template"]["spec"]["domain"]["launchSecurity"] = {"sev": {}}
    validate_vm(request("VirtualMachine", secured, vm_of(instance)), lookups)
    with pytest.raises(Denied):
        validate_vm(request("VirtualMachine", vm_of(instance, guest="8Gi"), secured), lookups)


def with_instancetype(vm: dict[str, Any], name: str, **extra: Any) -> dict[str, Any]:
    changed = copy.deepcopy(vm)
    changed["spec"]["instancetype"] = {
        "kind": "VirtualMachineClusterInstancetype",
        "name": name,
        **extra,
    }
    return changed


def test_switching_a_running_vm_to_a_bigger_instancetype_is_denied() -> None:
    """KubeVirt expands the instancetype into the template before it hot-plugs, so a switch to
    a bigger one hot-plugs CPU and memory the template never shows: any change of a running
    VM's instancetype or preference is refused, the template unchanged."""
    lookups = FakeLookups(quotas={"ns": quota_with({"limits.memory": "4797464313"})})
    instance = guaranteed_vmi()
    running(lookups, instance)
    small = with_instancetype(vm_of(instance), "u1.medium", revisionName="r1")
    for bigger in (
        with_instancetype(vm_of(instance), "u1.2xlarge"),
        with_instancetype(vm_of(instance), "u1.medium"),  # revisionName cleared: re-resolved
        with_instancetype(vm_of(instance), "u1.medium", revisionName="r1", kind="X"),
    ):
        with pytest.raises(Denied) as denied:
            validate_vm(request("VirtualMachine", bigger, small), lookups)
        assert "stop the VM first, change it, and start it again" in denied.value.message
    preferred = copy.deepcopy(small)
    preferred["spec"]["preference"] = {"name": "sockets-first"}
    with pytest.raises(Denied):
        validate_vm(request("VirtualMachine", preferred, small), lookups)


def test_an_instancetype_vm_that_is_stopped_or_keeps_its_instancetype_passes() -> None:
    lookups = FakeLookups(quotas={"ns": quota_with({})})
    instance = guaranteed_vmi()
    small = with_instancetype(vm_of(instance), "u1.medium", revisionName="r1")
    bigger = with_instancetype(vm_of(instance), "u1.2xlarge")
    validate_vm(request("VirtualMachine", bigger, small), lookups)  # no VMI: a start is checked
    lookups.quotas["ns"] = quota_with({"limits.memory": "4797464313"})
    running(lookups, instance)
    relabelled = copy.deepcopy(small)
    relabelled["metadata"]["labels"] = {"team": "b"}
    validate_vm(request("VirtualMachine", relabelled, small), lookups)
    halted = copy.deepcopy(bigger)
    halted["spec"]["runStrategy"] = "Halted"
    validate_vm(request("VirtualMachine", halted, small), lookups)


def test_a_cpu_hot_plug_beyond_the_base_is_denied_naming_limits_cpu() -> None:
    """The integration test's numbers: vm2 (limits.cpu 2015m) and a 500m pod under the 3-CPU
    base leave 485m; 1 -> 4 sockets of 2 cores adds 6 vCPUs, +600m on limits.cpu: denied.
    With 200m fewer in use, 685m are free, and it passes."""
    used = {"limits.cpu": "2515m", "limits.memory": "4864573177"}
    lookups = FakeLookups(quotas={"ns": quota_with(used)})
    instance = hotpluggable_vmi()
    running(lookups, instance)
    with pytest.raises(Denied) as denied:
        validate_vm(request("VirtualMachine", vm_of(instance, sockets=4)), lookups)
    assert "limits.cpu insufficient" in denied.value.message
    assert "needs 600m, 485m left" in denied.value.message
    lookups.quotas["ns"] = quota_with({**used, "limits.cpu": "2315m"})
    validate_vm(request("VirtualMachine", vm_of(instance, sockets=4)), lookups)


def socket_only_vmi() -> dict[str, Any]:
    """A running VMI whose VM's template set only sockets (2, maxSockets 8): KubeVirt's defaults
    gave the VMI 1 core and 1 thread, which the template never set."""
    instance = hotpluggable_vmi()
    instance["spec"]["domain"]["cpu"] = {"sockets": 2, "cores": 1, "threads": 1, "maxSockets": 8}
    instance["spec"]["domain"]["resources"]["limits"]["cpu"] = "2"
    return instance


def socket_only_vm(instance: dict[str, Any], sockets: int) -> dict[str, Any]:
    """The VM of `socket_only_vmi`, its template setting `sockets` and no cores or threads."""
    vm = vm_of(instance)
    vm["spec"]["template"]["spec"]["domain"]["cpu"] = {"sockets": sockets, "maxSockets": 8}
    return vm


def test_a_template_without_cores_or_threads_hot_plugs_its_sockets() -> None:
    """Issue 38 item 3: KubeVirt compares the template with the one the VMI started from (unset
    cores and threads on both sides), not with the VMI's defaulted 1, and hot-plugs 2 -> 8
    sockets: 6 vCPUs, +600m on the CPU limit at cpuAllocationRatio 10. The check called it a
    restart and let it through."""
    instance = socket_only_vmi()
    template = socket_only_vm(instance, 8)["spec"]["template"]["spec"]
    grown = hot_plugged(template, instance)
    assert grown is not None, "KubeVirt hot-plugs these sockets; the check called it a restart"
    assert grown["spec"]["domain"]["cpu"]["sockets"] == 8
    limit = grown["spec"]["domain"]["resources"]["limits"]["cpu"]
    assert Quantity.parse(limit) == Quantity.parse("2600m")


def test_a_tenant_cannot_grow_a_vm_without_cores_or_threads_past_the_base_by_hot_plug() -> None:
    """The tenant lies by omission: a template that never set cores or threads, sockets 2 -> 8.
    The VM rule passed it as a restart while KubeVirt hot-plugged +600m into the target pod; it
    is now denied when the 600m do not fit. A real core change still counts as a restart:
    setting 2 cores is not what the VMI started with."""
    used = {"limits.cpu": "2515m", "limits.memory": "4864573177"}
    lookups = FakeLookups(quotas={"ns": quota_with(used)})
    instance = socket_only_vmi()
    running(lookups, instance)
    old = socket_only_vm(instance, 2)
    with pytest.raises(Denied) as denied:
        validate_vm(request("VirtualMachine", socket_only_vm(instance, 8), old), lookups)
    assert "needs 600m" in denied.value.message, denied.value.message
    more_cores = socket_only_vm(instance, 8)
    more_cores["spec"]["template"]["spec"]["domain"]["cpu"]["cores"] = 2
    assert hot_plugged(more_cores["spec"]["template"]["spec"], instance) is None


def deep_clock_review(vm: dict[str, Any], old: dict[str, Any], levels: int) -> bytes:
    """An UPDATE AdmissionReview of `vm` whose spec.template.spec.domain.clock (kept unknown by
    KubeVirt's schema) holds `levels` nested arrays: more than orjson decodes (1024)."""
    vm = copy.deepcopy(vm)
    vm["spec"]["template"]["spec"]["domain"]["clock"] = {"deep": "@DEEP@"}
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-deep",
            "kind": {"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachine"},
            "operation": "UPDATE",
            "namespace": "ns",
            "name": vm["metadata"]["name"],
            "userInfo": {"username": "tenant"},
            "object": vm,
            "oldObject": old,
        },
    }
    deep = b"[" * levels + b"]" * levels
    return json.dumps(body).encode().replace(b'"@DEEP@"', deep)


async def test_a_hot_plug_past_the_base_hidden_under_a_deep_clock_is_denied() -> None:
    """B1: 1,100 levels in the clock made orjson refuse the review, the webhook answered 400 and
    the API server, the VM rule being failurePolicy Ignore, admitted the hot-plug unchecked. The
    review is decoded with the depth cut now, so the 2 -> 8 sockets are checked and denied."""
    used = {"limits.cpu": "2515m", "limits.memory": "4864573177"}
    lookups = FakeLookups(quotas={"ns": quota_with(used)})
    instance = socket_only_vmi()
    running(lookups, instance)
    server = WebhookServer(lookups, registry=CollectorRegistry())
    body = deep_clock_review(socket_only_vm(instance, 8), socket_only_vm(instance, 2), 1100)
    answer = await server.review("virtualmachines", body)
    assert answer.status == 200, answer.text
    response = orjson.loads(answer.body)["response"]  # type: ignore[arg-type]
    assert response["uid"] == "u-deep" and response["allowed"] is False
    assert "needs 600m" in response["status"]["message"], response


async def test_a_vm_validator_failure_is_a_denial_in_the_review_not_an_http_error() -> None:
    """B1: an unexpected failure validating a VM review that has a uid is answered as a denial
    (allowed false, with a message): an HTTP error would let the Ignore rule admit the VM."""

    def broken(_request: Request) -> None:
        raise KeyError("spec")

    server = WebhookServer(FakeLookups(), registry=CollectorRegistry())
    server.validators["virtualmachines"] = ("VirtualMachine", broken)
    instance = socket_only_vmi()
    body = deep_clock_review(socket_only_vm(instance, 8), socket_only_vm(instance, 2), 3)
    answer = await server.review("virtualmachines", body)
    assert answer.status == 200, answer.text
    response = orjson.loads(answer.body)["response"]  # type: ignore[arg-type]
    assert response["uid"] == "u-deep" and response["allowed"] is False
    assert "KeyError" in response["status"]["message"]
