"""KubeVirt feature gates that change the launcher pod (ImageVolume, ExternalNetResourceInjection),
decided per KubeVirt version from the CR's featureGates and disabledFeatureGates, and the pods the
renderer gives with each gate on and off."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from harvester_quota.config.kubevirt import settings_from
from harvester_quota.util.kubevirtversion import parse_kubevirt_version
from harvester_quota.util.launcher import (
    LauncherSettings,
    launcher_pod_resources,
    launcher_quota_usage,
    target_quota_usage,
)
from harvester_quota.util.launcher.featuregates import (
    EXTERNAL_NET_RESOURCE_INJECTION,
    IMAGE_VOLUME,
    gate_enabled,
)

from tests.unit.test_launcher import container_names
from tests.unit.vmis import V170_VM, q


def _cr(version: str, developer: dict[str, Any] | None = None) -> dict[str, Any]:
    configuration = {"developerConfiguration": developer} if developer is not None else {}
    return {
        "spec": {"configuration": configuration},
        "status": {"observedKubeVirtVersion": version},
    }


@pytest.mark.parametrize(
    ("version", "enabled", "disabled", "expected"),
    [
        ("v1.5.0", ["ImageVolume"], [], False),  # not registered before v1.6
        ("v1.6.0", [], [], False),
        ("v1.6.0", ["ImageVolume"], [], True),
        ("v1.7.0", [], ["ImageVolume"], False),
        ("v1.7.0", [], [], False),  # Beta, off by default before v1.9
        ("v1.8.4", [], [], False),
        ("v1.8.4", ["ImageVolume"], [], True),
        ("v1.9.0", [], [], True),  # Beta is on by default from v1.9
        ("v1.9.0", [], ["ImageVolume"], False),
        ("v1.9.0", ["ImageVolume"], ["ImageVolume"], True),  # the enabled list wins
        ("main", [], [], True),
    ],
)
def test_image_volume_gate_is_read_as_each_kubevirt_version_reads_it(
    version: str, enabled: list[str], disabled: list[str], expected: bool
) -> None:
    parsed = parse_kubevirt_version(version)
    assert gate_enabled(IMAGE_VOLUME, parsed, enabled, disabled) is expected


def test_external_net_resource_injection_exists_from_v1_8_and_is_on_by_default_from_v1_9() -> None:
    def on(version: str, enabled: list[str], disabled: list[str]) -> bool:
        parsed = parse_kubevirt_version(version)
        return gate_enabled(EXTERNAL_NET_RESOURCE_INJECTION, parsed, enabled, disabled)

    assert on("v1.7.0", ["ExternalNetResourceInjection"], []) is False
    assert on("v1.8.4", [], []) is False
    assert on("v1.8.4", ["ExternalNetResourceInjection"], []) is True
    assert on("v1.9.0", [], []) is True
    assert on("v1.9.0", [], ["ExternalNetResourceInjection"]) is False


def test_settings_from_the_cr_carry_both_gate_lists() -> None:
    settings = settings_from(
        _cr("v1.9.0", {"featureGates": ["GPU"], "disabledFeatureGates": ["ImageVolume"]}), None
    )
    assert settings.feature_gates == frozenset({"GPU"})
    assert settings.disabled_feature_gates == frozenset({"ImageVolume"})
    assert settings.gate(IMAGE_VOLUME) is False
    assert settings.gate(EXTERNAL_NET_RESOURCE_INJECTION) is True


def test_an_unusable_disabled_gate_list_disables_nothing() -> None:
    settings = settings_from(_cr("v1.9.0", {"disabledFeatureGates": "ImageVolume"}), None)
    assert settings.gate(IMAGE_VOLUME) is True


def _with_container_disks() -> dict[str, Any]:
    vmi = copy.deepcopy(V170_VM)
    vmi["spec"]["volumes"].append({"name": "boot", "containerDisk": {"image": "quay.io/x"}})
    vmi["spec"]["domain"]["firmware"] = {"kernelBoot": {"container": {"image": "quay.io/k"}}}
    return vmi


def test_image_volume_drops_container_disk_containers_and_pulls_each_image_in_an_init() -> None:
    vmi = _with_container_disks()
    on = LauncherSettings(kubevirt_version="v1.9.0")
    off = LauncherSettings(
        kubevirt_version="v1.9.0", disabled_feature_gates=frozenset({"ImageVolume"})
    )
    assert container_names(launcher_pod_resources(vmi, off)) == (
        ["compute", "volumeboot", "kernel-boot"],
        ["guest-console-log", "container-disk-binary", "volumeboot-init", "kernel-boot-init"],
    )
    pod = launcher_pod_resources(vmi, on)
    assert container_names(pod) == (
        ["compute"],
        ["guest-console-log", "volumeboot", "volumekernel-boot-volume"],
    )
    assert pod["spec"]["initContainers"][1]["resources"] == {
        "limits": {"cpu": "10m", "memory": "40M"},
        "requests": {"cpu": "1m", "memory": "1M", "ephemeral-storage": "50M"},
    }
    # Two container-disk containers fewer: 2 x (10m, 40M) of limits, 2 x 50M of scratch space.
    usage_on, usage_off = launcher_quota_usage(vmi, on), launcher_quota_usage(vmi, off)
    assert usage_off["limits.cpu"] - usage_on["limits.cpu"] == q("20m")
    assert usage_off["requests.ephemeral-storage"] - usage_on["requests.ephemeral-storage"] == q(
        "100M"
    )


def test_an_image_volume_migration_target_has_no_image_pulling_init_containers() -> None:
    vmi = _with_container_disks()
    on = LauncherSettings(kubevirt_version="v1.9.0")
    target = launcher_pod_resources(vmi, on, migration_target=True)
    assert container_names(target) == (["compute"], ["guest-console-log"])
    assert target_quota_usage(vmi, on) == launcher_quota_usage(vmi, on, migration_target=True)


def test_v1_6_image_volume_renders_no_init_container_for_its_images() -> None:
    on = LauncherSettings(kubevirt_version="v1.6.0", feature_gates=frozenset({"ImageVolume"}))
    pod = launcher_pod_resources(_with_container_disks(), on)
    assert container_names(pod) == (["compute"], ["guest-console-log"])


def test_a_target_without_image_volume_is_the_first_launcher_pod() -> None:
    vmi = _with_container_disks()
    off = LauncherSettings(kubevirt_version="v1.8.4")
    assert target_quota_usage(vmi, off) == launcher_quota_usage(vmi, off)


def test_external_net_resource_injection_leaves_network_devices_out_of_the_compute_request() -> (
    None
):
    networks = {"sriov-net": "intel.com/sriov"}
    on = LauncherSettings(kubevirt_version="v1.9.0", network_resources=networks)
    off = LauncherSettings(
        kubevirt_version="v1.9.0",
        network_resources=networks,
        disabled_feature_gates=frozenset({"ExternalNetResourceInjection"}),
    )
    assert "requests.intel.com/sriov" not in launcher_quota_usage(V170_VM, on)
    assert launcher_quota_usage(V170_VM, off)["requests.intel.com/sriov"] == q("1")


VGPU = "nvidia.com/GRID_T4-1Q"


@pytest.mark.parametrize(
    "developer",
    [
        pytest.param({"featureGates": ["VGPULiveMigration"]}, id="gate-on"),
        pytest.param({}, id="gate-off"),
    ],
)
def test_a_vgpu_target_pod_asks_the_sources_extended_resource_with_vgpu_live_migration_on_or_off(
    developer: dict[str, Any],
) -> None:
    """KubeVirt v1.9.0 (template.go, renderresources.go WithGPUsDevicePlugins): the gate only adds
    a launcher flag; the target pod, like the source, requests and limits one of the VMI's own
    deviceName per device-plugin GPU (not a resource of another name, nothing from the status)."""
    vmi = copy.deepcopy(V170_VM)
    vmi["spec"]["domain"]["devices"]["gpus"] = [{"name": "gpu1", "deviceName": VGPU}]
    settings = settings_from(_cr("v1.9.0", developer), None)
    target = target_quota_usage(vmi, settings)
    assert target[f"requests.{VGPU}"] == q("1")
    assert target == launcher_quota_usage(vmi, settings)
    compute = launcher_pod_resources(vmi, settings, migration_target=True)["spec"]["containers"][0]
    assert compute["resources"]["limits"][VGPU] == compute["resources"]["requests"][VGPU] == "1"
