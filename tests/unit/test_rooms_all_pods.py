"""Rooms cover every pod a migration creates on the target side, for every kind of migration
KubeVirt runs (issue 29): the hotplug attachment pod beside the target launcher pod (rendered
before it exists, the real one after), decentralized migrations (no room on either side: the
receiving side is a VM arriving, charged to the base), and a tenant who forges attachment pods or
abuses sendTo/receive."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from harvester_quota.apis.kubevirt import LABEL_MIGRATION_JOB
from harvester_quota.util.launcher import (
    LauncherSettings,
    attachment_pod_resources,
    has_hotplug_volumes,
    launcher_quota_usage,
    vmi_view,
)
from harvester_quota.util.launcher.attachment import attachment_usage
from harvester_quota.util.launcher.limitrange import container_defaults
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.quotascope import QuotaScope, ScopeRequirement
from harvester_quota.util.resourcequota.plan import desired_hard
from harvester_quota.util.resourcequota.planviews import vmi_facts
from harvester_quota.util.resourcequota.rooms import (
    RoomPlan,
    decentralized_side,
    plan_rooms,
)
from harvester_quota.util.resources import total

from tests.objects import launcher_pod, migration, pods_of, vmi

NOW = datetime.datetime(2026, 1, 1, 12, tzinfo=datetime.UTC)
VM_STARTED = "2026-01-01T09:00:00Z"
MIGRATED = "2026-01-01T10:00:00Z"
SETTINGS = LauncherSettings(ratio="1.5", kubevirt_version="1.6")


def q(text: str) -> Quantity:
    return Quantity.parse(text)


def hotplugged(name: str, *claims: str) -> dict[str, Any]:
    """A running VMI with `claims` hotplugged (as virtctl addvolume leaves the spec)."""
    instance = vmi(name)
    instance["metadata"]["creationTimestamp"] = VM_STARTED
    volumes = instance["spec"].setdefault("volumes", [])
    for claim in claims:
        volumes.append(
            {"name": claim, "persistentVolumeClaim": {"claimName": claim, "hotpluggable": True}}
        )
    return instance


def migration_of(name: str, instance: dict[str, Any], **spec: Any) -> dict[str, Any]:
    mig = migration(name, instance)
    mig["metadata"]["creationTimestamp"] = MIGRATED
    mig["spec"].update(spec)
    return mig


def attachment_pod(
    name: str, owner: dict[str, Any], mig: dict[str, Any] | None, created: str = MIGRATED
) -> dict[str, Any]:
    """An attachment pod as virt-controller creates it for a migration's target."""
    labels = {"kubevirt.io": "hotplug-disk"}
    if mig is not None:
        labels[LABEL_MIGRATION_JOB] = mig["metadata"]["uid"]
    pod = attachment_pod_resources(SETTINGS)
    pod["metadata"] = {
        "name": name,
        "namespace": "ns",
        "uid": f"uid-{name}",
        "labels": labels,
        "creationTimestamp": created,
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ],
    }
    pod["status"] = {"phase": "Running"}
    return pod


def rooms(
    migrations: list[dict[str, Any]], vmis: list[dict[str, Any]], pods: list[dict[str, Any]]
) -> RoomPlan:
    return plan_rooms(
        migrations, {v["metadata"]["name"]: v for v in vmis}, pods, NOW, launcher=SETTINGS
    )


ATTACHMENT = {
    "count/pods": "1",
    "pods": "1",
    "cpu": "10m",
    "requests.cpu": "10m",
    "limits.cpu": "100m",
    "memory": "2M",
    "requests.memory": "2M",
    "limits.memory": "80M",
}


def test_the_attachment_pod_is_kubevirts_support_container_whatever_the_volume_count() -> None:
    one, three = hotplugged("one", "a"), hotplugged("three", "a", "b", "c")
    expected = {key: q(value) for key, value in ATTACHMENT.items()}
    assert attachment_usage(vmi_view(one), SETTINGS) == expected
    assert attachment_usage(vmi_view(three), SETTINGS) == expected
    assert attachment_usage(vmi_view(vmi("plain")), SETTINGS) == {}


def test_the_kubevirt_crs_hotplug_attachment_resources_and_limitrange_defaults_shape_it() -> None:
    settings = LauncherSettings(
        kubevirt_version="1.8",
        support_container_resources=[
            {
                "type": "hotplug-disk",
                "resources": {"limits": {"cpu": "300m"}, "requests": {"memory": "5M"}},
            },
            {"type": "virtiofs", "resources": {"limits": {"memory": "1Gi"}}},
        ],
        container_defaults=container_defaults(
            [{"spec": {"limits": [{"type": "Container", "default": {"ephemeral-storage": "1Gi"}}]}}]
        ),
    )
    usage = attachment_usage(vmi_view(hotplugged("vm", "a")), settings)
    assert usage["limits.cpu"] == q("300m") and usage["requests.cpu"] == q("10m")
    assert usage["limits.memory"] == q("80M") and usage["requests.memory"] == q("5M")
    assert usage["limits.ephemeral-storage"] == q("1Gi")


@pytest.mark.parametrize(
    ("volume", "expected"),
    [
        ({"name": "d", "dataVolume": {"name": "d", "hotpluggable": True}}, True),
        ({"name": "p", "persistentVolumeClaim": {"claimName": "p"}}, False),
        ({"name": "c", "containerDisk": {"image": "x"}}, False),
    ],
)
def test_hotplug_volumes_as_virt_controller_tells_them(
    volume: dict[str, Any], expected: bool
) -> None:
    instance = vmi("vm")
    instance["spec"]["volumes"] = [volume]
    assert has_hotplug_volumes(instance) is expected


def test_a_hotplug_volume_status_alone_makes_an_attachment_pod_as_in_virt_controller() -> None:
    instance = vmi("vm")
    instance["status"] = {"volumeStatus": [{"name": "x", "hotplugVolume": {}}]}
    assert has_hotplug_volumes(instance)
    assert vmi_facts(instance).hotplug and attachment_usage(vmi_facts(instance), SETTINGS)
    assert not vmi_facts(vmi("plain")).hotplug


def test_before_any_target_pod_the_room_includes_the_rendered_attachment_pod() -> None:
    instance = hotplugged("vm1", "a")
    source = launcher_pod(instance, "virt-launcher-vm1-src")
    planned = rooms([migration_of("m1", instance)], [instance], [source])
    (room,) = planned.rooms
    assert room.estimated
    assert room.room == total(
        [launcher_quota_usage(instance, SETTINGS), attachment_usage(vmi_view(instance), SETTINGS)]
    )


def test_a_target_without_its_attachment_pod_yet_keeps_the_attachment_in_the_room() -> None:
    """virt-controller creates the attachment pod once the target is ready: the room must not
    shrink to the target alone in between, or the attachment pod is refused."""
    instance = hotplugged("vm1", "a")
    mig = migration_of("m1", instance)
    source = launcher_pod(instance, "virt-launcher-vm1-src")
    target = launcher_pod(instance, "virt-launcher-vm1-dst", migration=mig)
    (room,) = rooms([mig], [instance], [source, target]).rooms
    assert not room.estimated
    assert room.room["pods"] == q("2") and room.room["limits.cpu"] == (
        launcher_quota_usage(instance, SETTINGS)["limits.cpu"] + q("100m")
    )
    # What quota admission counts already is the target alone: the webhook subtracts only that
    # from status.used (the whole room undercounted it by the attachment pod not yet made).
    assert room.in_use["pods"] == q("1")
    assert room.in_use["limits.cpu"] == launcher_quota_usage(instance, SETTINGS)["limits.cpu"]


def test_kubevirts_attachment_pod_is_part_of_the_room_and_not_of_the_base() -> None:
    instance = hotplugged("vm1", "a", "b")
    mig = migration_of("m1", instance)
    source = launcher_pod(instance, "virt-launcher-vm1-src")
    target = launcher_pod(instance, "virt-launcher-vm1-dst", migration=mig)
    attachment = attachment_pod("hp-volume-abcde", target, mig)
    planned = rooms([mig], [instance], [source, target, attachment])
    (room,) = planned.rooms
    assert pods_of(room, "attachment") == ("hp-volume-abcde",)
    assert planned.target_pods == {"virt-launcher-vm1-dst", "hp-volume-abcde"}
    assert room.room["pods"] == q("2")
    assert room.in_use == room.room, "both pods exist and count"


VM_CLASS = QuotaScope((ScopeRequirement("PriorityClass", "In", ("vm",)),))
NO_CLASS = QuotaScope((ScopeRequirement("PriorityClass", "DoesNotExist"),))


def test_a_scoped_quota_is_raised_only_for_the_target_pods_its_scopes_charge() -> None:
    """KubeVirt renders the attachment pod without the VMI's priority class: a quota of the
    VM's class was raised for it too (never charged there), and a quota of pods without a class,
    which charges it, got no room for it (the whole room left with the launcher's facts), so
    the attachment pod was refused there and the migration waited."""
    instance = hotplugged("vm1", "a")
    instance["spec"]["priorityClassName"] = "vm"
    mig = migration_of("m1", instance)
    source = launcher_pod(instance, "virt-launcher-vm1-src")
    source["spec"]["priorityClassName"] = "vm"
    target = launcher_pod(instance, "virt-launcher-vm1-dst", migration=mig)
    target["spec"]["priorityClassName"] = "vm"
    launcher = launcher_quota_usage(instance, SETTINGS)
    attachment = attachment_usage(vmi_view(instance), SETTINGS)
    for pods in (
        [source],
        [source, target],
        [source, target, attachment_pod("hp-volume-abcde", target, mig)],
    ):
        planned = rooms([mig], [instance], pods)
        (whole,) = planned.rooms
        assert whole.room == total([launcher, attachment])
        (vm_class,) = planned.within(VM_CLASS).rooms
        assert vm_class.room == launcher, [p["metadata"]["name"] for p in pods]
        (no_class,) = planned.within(NO_CLASS).rooms
        assert no_class.room == attachment, [p["metadata"]["name"] for p in pods]
    other = QuotaScope((ScopeRequirement("PriorityClass", "In", ("batch",)),))
    assert not rooms([mig], [instance], [source]).within(other).rooms


def test_a_plain_vmis_room_has_no_attachment_pod() -> None:
    instance = vmi("vm1")
    instance["metadata"]["creationTimestamp"] = VM_STARTED
    source = launcher_pod(instance, "virt-launcher-vm1-src")
    (room,) = rooms([migration_of("m1", instance)], [instance], [source]).rooms
    assert room.room == launcher_quota_usage(instance, SETTINGS)


@pytest.mark.parametrize(
    "forgery",
    ["no-migration-label", "owned-by-the-source", "created-before-the-migration", "a-launcher"],
)
def test_a_forged_attachment_pod_is_charged_to_the_base(forgery: str) -> None:
    """Only KubeVirt's attachment pod of the target (the migration's protected label, owned by
    the target launcher pod, created since the migration) is room: anything else a tenant can
    make is an ordinary pod, and the room keeps the rendered attachment pod for KubeVirt's."""
    instance = hotplugged("vm1", "a")
    mig = migration_of("m1", instance)
    source = launcher_pod(instance, "virt-launcher-vm1-src")
    target = launcher_pod(instance, "virt-launcher-vm1-dst", migration=mig)
    forged = {
        "no-migration-label": attachment_pod("hp-volume-x", target, None),
        "owned-by-the-source": attachment_pod("hp-volume-x", source, mig),
        "created-before-the-migration": attachment_pod("hp-volume-x", target, mig, VM_STARTED),
        "a-launcher": attachment_pod("hp-volume-x", target, mig),
    }[forgery]
    if forgery == "a-launcher":
        forged["metadata"]["labels"]["kubevirt.io"] = "virt-launcher"
    planned = rooms([mig], [instance], [source, target, forged])
    (room,) = planned.rooms
    assert pods_of(room, "attachment") == ()
    assert "hp-volume-x" not in planned.target_pods
    assert room.room["pods"] == q("2"), "the rendered attachment pod still stands in the room"


def test_a_finished_migration_renders_no_attachment_pod() -> None:
    instance = hotplugged("vm1", "a")
    mig = migration_of("m1", instance)
    mig["status"]["phase"] = "Failed"
    source = launcher_pod(instance, "virt-launcher-vm1-src")
    target = launcher_pod(instance, "virt-launcher-vm1-dst", migration=mig)
    (room,) = rooms([mig], [instance], [source, target]).rooms
    assert room.room["pods"] == q("1")


# ----------------------------------------------------------------------------------------------
# Decentralized live migration (KubeVirt v1.6+)

SEND = {"sendTo": {"migrationID": "x", "connectURL": "peer:9185"}}
RECEIVE = {"receive": {"migrationID": "x"}}


def test_which_side_of_a_decentralized_migration_a_vmim_is() -> None:
    instance = vmi("vm1")
    assert decentralized_side(migration_of("m", instance, **SEND)) == "source"
    assert decentralized_side(migration_of("m", instance, **RECEIVE)) == "target"
    assert decentralized_side(migration_of("m", instance, **SEND, **RECEIVE)) is None
    assert decentralized_side(migration_of("m", instance)) is None


@pytest.mark.parametrize("phase", ["Pending", "WaitingForSync", "Synchronizing", "Running"])
def test_the_sending_side_holds_no_room_in_any_phase(phase: str) -> None:
    instance = hotplugged("vm1")
    source = launcher_pod(instance, "virt-launcher-vm1-src")
    mig = migration_of("m1", instance, **SEND)
    mig["status"]["phase"] = phase
    assert not rooms([mig], [instance], [source]).holds_room


@pytest.mark.parametrize(
    "phase", ["", "Pending", "WaitingForSync", "Scheduling", "Running", "Succeeded", "Failed"]
)
def test_the_receiving_side_holds_no_room_its_target_is_charged_to_the_base(phase: str) -> None:
    """The receiving side's target pod becomes the VM's pod for good: the VM arriving, charged
    to the base like a VM that starts. A room there let a tenant with two namespaces move VMs
    into a full one, above its quota for good."""
    receiver = hotplugged("vm1")  # a VMI waiting as receiver: no launcher pod of its own
    mig = migration_of("m1", receiver, **RECEIVE)
    mig["status"]["phase"] = phase
    assert not rooms([mig], [receiver], []).holds_room
    target = launcher_pod(receiver, "virt-launcher-vm1-dst", migration=mig, phase="Pending")
    planned = rooms([mig], [receiver], [target])
    assert not planned.holds_room and planned.target_pods == frozenset(), "target in `used`"


def test_a_tenants_receives_and_sends_for_one_vmi_hold_no_room() -> None:
    receiver = hotplugged("vm1")
    source = launcher_pod(receiver, "virt-launcher-vm1-src")
    migrations = [migration_of(f"r{i:02}", receiver, **RECEIVE) for i in range(10)]
    migrations += [migration_of(f"s{i:02}", receiver, **SEND) for i in range(10)]
    assert not rooms(migrations, [receiver], []).holds_room
    assert not rooms(migrations, [receiver], [source]).holds_room


def test_a_receive_beside_an_ordinary_migration_of_the_vmi_leaves_its_one_room() -> None:
    """A tenant's receive for a VMI that runs and migrates here takes nothing from, and adds
    nothing to, the ordinary migration's room."""
    instance = hotplugged("vm1")
    source = launcher_pod(instance, "virt-launcher-vm1-src")
    ordinary = migration_of("m1", instance)
    ordinary["status"]["phase"] = "Scheduling"
    receive = migration_of("m0", instance, **RECEIVE)
    planned = rooms([receive, ordinary], [instance], [source])
    assert [room.migration for room in planned.rooms] == ["m1"]


VGPU = "nvidia.com/GRID_T4-1Q"


def vgpu_vmi(name: str) -> dict[str, Any]:
    """A running VMI with one mediated (vGPU) device, the only GPU VMI KubeVirt v1.9 migrates
    (VGPULiveMigration on)."""
    instance = vmi(name)
    instance["metadata"]["creationTimestamp"] = VM_STARTED
    instance["spec"]["domain"].setdefault("devices", {})["gpus"] = [
        {"name": "gpu1", "deviceName": VGPU}
    ]
    return instance


def test_a_vgpu_migrations_room_covers_a_quota_on_the_vgpu_extended_resource() -> None:
    """v1.9's target pod asks the source's own vGPU resource (one per GPU, the VMI's deviceName):
    the room holds requests.<resource> and a quota limiting it is raised by exactly that."""
    instance = vgpu_vmi("vm1")
    source = launcher_pod(instance, "virt-launcher-vm1-src")
    (room,) = rooms([migration_of("m1", instance)], [instance], [source]).rooms
    assert room.room[f"requests.{VGPU}"] == q("1")
    base = {f"requests.{VGPU}": q("1"), "requests.cpu": q("8")}
    used = {f"requests.{VGPU}": q("1"), "requests.cpu": q("1")}
    assert desired_hard(base, used, room.room)[f"requests.{VGPU}"] == q("2")
