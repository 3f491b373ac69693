"""What KubeVirt will render with, read from its CR: unknown or broken values fall back with one
warning instead of failing every reconcile and every VM-start check."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from harvester_quota.config import kubevirt
from harvester_quota.config.kubevirt import settings_from
from harvester_quota.util.kubevirtversion import NEWEST_KUBEVIRT_VERSION, parse_kubevirt_version
from harvester_quota.util.launcher import launcher_quota_usage
from harvester_quota.util.quantity import Quantity


def _cr(version: Any = None, developer: Any = None, configuration: Any = None) -> dict[str, Any]:
    spec_configuration = configuration if configuration is not None else {}
    if developer is not None:
        spec_configuration = {"developerConfiguration": developer}
    return {
        "spec": {"configuration": spec_configuration},
        "status": {"observedKubeVirtVersion": version} if version is not None else {},
    }


@pytest.fixture(autouse=True)
def _fresh_reports() -> None:
    kubevirt._reported.clear()


def test_a_known_version_is_used_as_observed() -> None:
    assert settings_from(_cr("v1.5.3"), None).kubevirt_version == "v1.5.3"
    assert settings_from(_cr(), None).kubevirt_version == kubevirt.DEFAULT_KUBEVIRT_VERSION


@pytest.mark.parametrize(
    ("observed", "fallback"),
    [
        ("v1.10.0", "main"),
        ("v1.10.0-alpha.0-123-gabcdef0", "main"),
        ("v2.0.0", "main"),
        ("devel", "main"),
        ("v0.40.0", NEWEST_KUBEVIRT_VERSION),
    ],
)
def test_an_unknown_version_falls_back_to_main_if_newer_else_the_newest_release_warning_once(
    observed: str, fallback: str, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(ValueError):
        parse_kubevirt_version(observed)
    with caplog.at_level(logging.WARNING, logger="harvester_quota.config.kubevirt"):
        for _ in range(3):
            assert settings_from(_cr(observed), None).kubevirt_version == fallback
    warnings = [r for r in caplog.records if observed in r.getMessage()]
    assert len(warnings) == 1, "reported once, not once per reconcile"
    assert "--kubevirt-version" in warnings[0].getMessage()


def test_a_configured_version_wins_over_the_cr() -> None:
    assert settings_from(_cr("devel"), None, configured_version="1.4").kubevirt_version == "1.4"


@pytest.mark.parametrize("bad", ["lots", -5, 0, [1], {"a": 1}])
def test_unusable_developer_numbers_fall_back_to_kubevirt_defaults(bad: Any) -> None:
    settings = settings_from(_cr("1.6", {"memoryOvercommit": bad, "cpuAllocationRatio": bad}), None)
    assert settings.memory_overcommit == 100
    assert settings.cpu_allocation_ratio == 10


def test_usable_developer_numbers_are_read() -> None:
    settings = settings_from(
        _cr("1.6", {"memoryOvercommit": "150", "cpuAllocationRatio": 16}), None
    )
    assert (settings.memory_overcommit, settings.cpu_allocation_ratio) == (150, 16)


@pytest.mark.parametrize("configuration", [["not", "an", "object"], "text"])
def test_a_configuration_that_is_not_an_object_is_ignored(configuration: Any) -> None:
    settings = settings_from(_cr("1.6", configuration=configuration), None)
    assert settings.memory_overcommit == 100
    assert settings.ratio is None


# ------------------------------------------------------------------------------------------------
# Every other CR field that changes the launcher pod


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def _vmi(cpu_limit: bool = False) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "1Gi"}}
    if cpu_limit:
        resources["limits"] = {"cpu": "3"}
    return {
        "metadata": {"name": "a", "namespace": "ns"},
        "spec": {
            "architecture": "amd64",
            "domain": {
                "cpu": {"cores": 2, "sockets": 1, "threads": 1},
                "memory": {"guest": "1Gi"},
                "resources": resources,
                "devices": {
                    "interfaces": [{"name": "default", "binding": {"name": "plug"}}],
                },
            },
            "networks": [{"name": "default", "pod": {}}],
        },
    }


def test_feature_gates_are_read() -> None:
    gated = settings_from(
        _cr("1.3", {"featureGates": ["Snapshot", "AutoResourceLimitsGate"]}), None
    )
    assert gated.auto_resource_limits_gate is True
    assert (
        settings_from(_cr("1.3", {"featureGates": ["Snapshot"]}), None).auto_resource_limits_gate
        is False
    )
    assert settings_from(_cr("1.3", {}), None).auto_resource_limits_gate is False


@pytest.mark.parametrize("bad", ["AutoResourceLimitsGate", 7, {"AutoResourceLimitsGate": True}])
def test_feature_gates_that_are_not_a_list_count_as_none_with_one_warning(
    bad: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="harvester_quota.config.kubevirt"):
        for _ in range(2):
            assert (
                settings_from(_cr("1.3", {"featureGates": bad}), None).auto_resource_limits_gate
                is False
            )
    assert len([m for m in _warnings(caplog) if "featureGates" in m]) == 1


def test_use_emulation_is_read() -> None:
    assert settings_from(_cr("1.6", {"useEmulation": True}), None).allow_emulation is True
    assert settings_from(_cr("1.6", {"useEmulation": False}), None).allow_emulation is False
    assert settings_from(_cr("1.6", {}), None).allow_emulation is False


def test_use_emulation_that_is_not_a_boolean_is_false_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="harvester_quota.config.kubevirt"):
        assert settings_from(_cr("1.6", {"useEmulation": "yes"}), None).allow_emulation is False
    assert any("useEmulation" in m for m in _warnings(caplog))


def test_emulation_drops_the_kvm_device_from_the_estimate() -> None:
    emulated = settings_from(_cr("v1.8.4", {"useEmulation": True}), None)
    vmi = _vmi()
    vmi["spec"]["domain"]["devices"] = {}
    assert "requests.devices.kubevirt.io/kvm" not in launcher_quota_usage(vmi, emulated)
    normal = settings_from(_cr("v1.8.4", {}), None)
    assert "requests.devices.kubevirt.io/kvm" in launcher_quota_usage(vmi, normal)


SUPPORT = [
    {"type": "guest-console-log", "resources": {"limits": {"cpu": "40m", "memory": "90M"}}},
    {"type": "sidecar", "resources": {"requests": {"cpu": "30m"}}},
]


def test_support_container_resources_are_read() -> None:
    settings = settings_from(_cr("1.6", configuration={"supportContainerResources": SUPPORT}), None)
    assert list(settings.support_container_resources) == SUPPORT
    assert settings.support_value("guest-console-log", "limits", "memory") == Quantity.parse("90M")


def test_unusable_support_container_entries_are_left_out_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    entries = [
        "text",
        {"type": "sidecar", "resources": {"limits": {"cpu": "lots"}}},
        {"resources": {"limits": {"cpu": "1"}}},
        *SUPPORT,
    ]
    with caplog.at_level(logging.WARNING, logger="harvester_quota.config.kubevirt"):
        settings = settings_from(
            _cr("1.6", configuration={"supportContainerResources": entries}), None
        )
    assert list(settings.support_container_resources) == SUPPORT
    assert len([m for m in _warnings(caplog) if "supportContainerResources" in m]) == 3
    not_a_list = settings_from(_cr("1.6", configuration={"supportContainerResources": {}}), None)
    assert not_a_list.support_container_resources == ()


PLUGIN = {"sidecarImage": "img", "computeResourceOverhead": {"requests": {"memory": "300Mi"}}}


def test_network_binding_plugins_are_read_and_change_the_estimate() -> None:
    with_plugin = settings_from(
        _cr("v1.8.4", configuration={"network": {"binding": {"plug": PLUGIN}}}), None
    )
    assert with_plugin.network_bindings == {"plug": PLUGIN}
    without = settings_from(_cr("v1.8.4", configuration={}), None)
    assert without.network_bindings is None
    plugin_usage = launcher_quota_usage(_vmi(), with_plugin)
    plain_usage = launcher_quota_usage(_vmi(), without)
    # 300Mi of overhead, and the plugin's sidecar (no resources by default).
    assert plugin_usage["requests.memory"] - plain_usage["requests.memory"] == Quantity.parse(
        "300Mi"
    )


def test_unusable_network_binding_plugins_are_left_out_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    binding = {
        "plug": PLUGIN,
        "broken": "text",
        "bad-quantity": {"computeResourceOverhead": {"requests": {"memory": "much"}}},
    }
    with caplog.at_level(logging.WARNING, logger="harvester_quota.config.kubevirt"):
        settings = settings_from(_cr("1.6", configuration={"network": {"binding": binding}}), None)
        not_an_object = settings_from(_cr("1.6", configuration={"network": {"binding": []}}), None)
    assert settings.network_bindings == {"plug": PLUGIN}
    assert not_an_object.network_bindings is None
    assert len([m for m in _warnings(caplog) if "binding" in m]) == 3


SELECTOR = {"matchLabels": {"auto-cpu": "yes"}}


def _namespace(labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "ns", "labels": labels}}


def test_the_auto_cpu_limit_selector_is_read_and_matched_per_namespace() -> None:
    settings = settings_from(
        _cr("v1.8.4", configuration={"autoCPULimitNamespaceLabelSelector": SELECTOR}), None
    )
    assert settings.auto_cpu_limit_namespace_selector == SELECTOR
    selected = settings.for_namespace([], _namespace({"auto-cpu": "yes"}))
    other = settings.for_namespace([], _namespace({"auto-cpu": "no"}))
    assert selected.auto_cpu_limit_namespace_match is True
    assert other.auto_cpu_limit_namespace_match is False
    assert launcher_quota_usage(_vmi(), selected)["limits.cpu"] == Quantity.parse("2015m")
    # Only the console-log container's limit, without the selector.
    assert launcher_quota_usage(_vmi(), other)["limits.cpu"] == Quantity.parse("15m")
    # The VMI's own cpu limit wins.
    assert launcher_quota_usage(_vmi(cpu_limit=True), selected)["limits.cpu"] == Quantity.parse(
        "3015m"
    )


def test_an_empty_auto_cpu_limit_selector_selects_every_namespace() -> None:
    settings = settings_from(
        _cr("v1.8.4", configuration={"autoCPULimitNamespaceLabelSelector": {}}), None
    )
    assert settings.for_namespace([], _namespace({})).auto_cpu_limit_namespace_match is True
    unset = settings_from(_cr("v1.8.4"), None)
    assert unset.for_namespace([], _namespace({})).auto_cpu_limit_namespace_match is False


def test_an_invalid_auto_cpu_limit_selector_selects_nothing_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bad = {"matchExpressions": [{"key": "auto-cpu", "operator": "Near", "values": ["yes"]}]}
    with caplog.at_level(logging.WARNING, logger="harvester_quota.config.kubevirt"):
        settings = settings_from(
            _cr("v1.8.4", configuration={"autoCPULimitNamespaceLabelSelector": bad}), None
        )
    assert settings.auto_cpu_limit_namespace_selector is None
    ns = _namespace({"auto-cpu": "yes"})
    assert settings.for_namespace([], ns).auto_cpu_limit_namespace_match is False
    assert any("autoCPULimitNamespaceLabelSelector" in m for m in _warnings(caplog))


@pytest.mark.parametrize(
    ("machine", "goarch"),
    [
        ("x86_64", "amd64"),
        ("AMD64", "amd64"),
        ("aarch64", "arm64"),
        ("s390x", "s390x"),
        ("?", "amd64"),
    ],
)
def test_the_host_architecture_is_named_as_go_names_it(machine: str, goarch: str) -> None:
    assert kubevirt.host_architecture(machine) == goarch


def test_the_cluster_architecture_is_virt_controllers_not_the_crs_default() -> None:
    """virt-controller sizes an arch-less VMI for its own runtime.GOARCH; defaultArchitecture only
    reaches VMIs through virt-api's defaulting of spec.architecture."""
    cr = _cr(
        "v1.8.4", configuration={"architectureConfiguration": {"defaultArchitecture": "arm64"}}
    )
    assert settings_from(cr, None).cluster_arch == kubevirt.host_architecture()
    assert settings_from(cr, None, cluster_arch="arm64").cluster_arch == "arm64"
    vmi = _vmi()
    del vmi["spec"]["architecture"]
    vmi["spec"]["domain"]["devices"] = {}
    arm = launcher_quota_usage(vmi, settings_from(cr, None, cluster_arch="arm64"))
    amd = launcher_quota_usage(vmi, settings_from(cr, None, cluster_arch="amd64"))
    assert arm["requests.memory"] - amd["requests.memory"] == Quantity.parse("128Mi")
