"""Pod quota usage (Kubernetes v1.36's pod evaluator) and the virt-launcher pod KubeVirt renders.

The seed numbers: Harvester v1.2.1 (KubeVirt v0.54, seeds/harvester-v121-migration-with-resourcequota.md),
Harvester v1.7.0 (KubeVirt v1.6, seeds/harvester-v170-migration-quota-overhead-ratio.md) and
Harvester issue #7161 (KubeVirt v1.1, the "requested:" line of the quota error in the v1.2.1 seed).
"""

from __future__ import annotations

import copy
import datetime
import json
from collections.abc import Iterable, Mapping
from typing import Any

import pytest
from harvester_quota.util.harvestervm import (
    HARVESTER_DEFAULT_OVERCOMMIT,
    HARVESTER_V121_OVERCOMMIT,
    harvester_guest_memory,
    harvester_vm_requests,
)
from harvester_quota.util.launcher import (
    LauncherSettings,
    launcher_pod_resources,
    launcher_quota_usage,
)
from harvester_quota.util.podusage import (
    pod_counts_against_quota,
    pod_limits,
    pod_quota_usage,
    pod_requests,
    quota_constraint_violations,
    quota_usage_for,
)
from harvester_quota.util.quantity import Quantity

MI = 1024 * 1024
GI = 1024 * MI
UTC = datetime.UTC


def q(text: str) -> Quantity:
    return Quantity.parse(text)


def as_strings(values: Mapping[str, Quantity]) -> dict[str, str]:
    return {name: str(value) for name, value in values.items()}


def total(usages: Iterable[Mapping[str, Quantity]]) -> dict[str, Quantity]:
    """How the quota controller sums the usage of several pods."""
    result: dict[str, Quantity] = {}
    for usage in usages:
        for name, value in usage.items():
            result[name] = result[name] + value if name in result else value
    return result


def harvester_vmi(
    cores: int,
    limits_memory: str,
    *,
    overcommit: Mapping[str, int] = HARVESTER_V121_OVERCOMMIT,
    guest: str | None = None,
    **domain: Any,
) -> dict[str, Any]:
    """A VMI as Harvester's VM mutator leaves it (the v1.2.1 seed's VMI, resized).

    The guest memory is limits - 100Mi, as in Harvester v1.2.1 (no overhead-ratio setting), unless
    `guest` says otherwise.
    """
    guest_options = {"overhead_ratio_set": False}
    requests = harvester_vm_requests(str(cores), limits_memory, overcommit)
    spec_domain: dict[str, Any] = {
        "cpu": {"cores": cores, "model": "host-model", "sockets": 1, "threads": 1},
        "devices": {
            "disks": [
                {"bootOrder": 1, "disk": {"bus": "virtio"}, "name": "disk-0"},
                {"disk": {"bus": "virtio"}, "name": "cloudinitdisk"},
            ],
            "inputs": [{"bus": "usb", "name": "tablet", "type": "tablet"}],
            "interfaces": [{"masquerade": {}, "model": "virtio", "name": "default"}],
        },
        "features": {"acpi": {"enabled": True}},
        "machine": {"type": "q35"},
        "memory": {"guest": guest or str(harvester_guest_memory(limits_memory, **guest_options))},
        "resources": {
            "limits": {"cpu": str(cores), "memory": limits_memory},
            "requests": as_strings(requests),
        },
    }
    spec_domain.update(domain)
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "vm1", "namespace": "test-migration", "annotations": {}},
        "spec": {
            "domain": spec_domain,
            "evictionStrategy": "LiveMigrate",
            "networks": [{"name": "default", "pod": {}}],
            "terminationGracePeriodSeconds": 120,
            "volumes": [
                {"name": "disk-0", "persistentVolumeClaim": {"claimName": "vm1-disk-0"}},
                {"name": "cloudinitdisk", "cloudInitNoCloud": {"secretRef": {"name": "vm1"}}},
            ],
        },
    }


V121_VM = harvester_vmi(2, "4Gi")
V170_VM = harvester_vmi(2, "4Gi", overcommit=HARVESTER_DEFAULT_OVERCOMMIT, guest="4Gi")


def compute_container(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    container = pod["spec"]["containers"][0]
    assert container["name"] == "compute"
    return container


# --------------------------------------------------------------------------------------------
# Harvester's VM mutator


@pytest.mark.parametrize(
    ("cpu", "memory", "overcommit", "dedicated", "expected"),
    [
        pytest.param(
            "2",
            "4Gi",
            HARVESTER_V121_OVERCOMMIT,
            False,
            {"cpu": "125m", "memory": "2730Mi"},
            id="v1.2.1-2c-4Gi",
        ),
        pytest.param(
            "1",
            "1Gi",
            HARVESTER_V121_OVERCOMMIT,
            False,
            {"cpu": "62m", "memory": "682Mi"},
            id="v1.2.1-1c-1Gi-truncated",
        ),
        pytest.param(
            "1",
            "2Gi",
            HARVESTER_V121_OVERCOMMIT,
            False,
            {"cpu": "62m", "memory": "1365Mi"},
            id="v1.2.1-1c-2Gi",
        ),
        pytest.param(
            "4",
            "8Gi",
            HARVESTER_V121_OVERCOMMIT,
            False,
            {"cpu": "250m", "memory": "5461Mi"},
            id="v1.2.1-4c-8Gi",
        ),
        pytest.param(
            "2", "4Gi", None, False, {"cpu": "200m", "memory": "2730Mi"}, id="today-default"
        ),
        pytest.param(
            "2",
            "4Gi",
            {"cpu": 100, "memory": 100},
            False,
            {"cpu": "2", "memory": "4Gi"},
            id="no-overcommit",
        ),
        pytest.param("2", "4Gi", None, True, {"cpu": "2", "memory": "4Gi"}, id="dedicated-cpu"),
        pytest.param(None, "4Gi", None, False, {"memory": "2730Mi"}, id="no-cpu-limit"),
        pytest.param("0", "0", None, False, {}, id="zero-limits"),
    ],
)
def test_harvester_vm_requests(
    cpu: str | None,
    memory: str,
    overcommit: Mapping[str, int] | None,
    dedicated: bool,
    expected: dict[str, str],
) -> None:
    requests = harvester_vm_requests(cpu, memory, overcommit, dedicated_cpu=dedicated)
    assert {name: q(value) for name, value in expected.items()} == requests


@pytest.mark.parametrize(
    "overcommit",
    [
        pytest.param({"cpu": 0, "memory": 150}, id="zero-cpu"),
        pytest.param({"cpu": 1000}, id="missing-memory"),
        pytest.param({"cpu": 1000, "memory": "150"}, id="string"),
    ],
)
def test_harvester_vm_requests_bad_overcommit(overcommit: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="overcommit"):
        harvester_vm_requests("2", "4Gi", overcommit)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        pytest.param({"overhead_ratio_set": False}, "3996Mi", id="v1.2.1-reserves-100Mi"),
        pytest.param({}, "4Gi", id="ratio-set-no-reservation"),
        pytest.param({"reserved_memory": "256Mi"}, "3840Mi", id="annotation-wins"),
    ],
)
def test_harvester_guest_memory(kwargs: dict[str, Any], expected: str) -> None:
    assert harvester_guest_memory("4Gi", **kwargs) == q(expected)


def test_harvester_guest_memory_rejects_reservation_above_limit() -> None:
    with pytest.raises(ValueError, match="reserved memory"):
        harvester_guest_memory("1Gi", reserved_memory="1Gi")


# --------------------------------------------------------------------------------------------
# The seeds


def test_v121_seed_vmi_matches_the_field() -> None:
    """The VMI in the v1.2.1 seed: requests 125m / 2730Mi, guest 3996Mi."""
    domain = V121_VM["spec"]["domain"]
    assert domain["resources"]["requests"] == {"cpu": "125m", "memory": "2730Mi"}
    assert domain["memory"]["guest"] == "3996Mi"


@pytest.mark.parametrize(
    ("vmi", "pods", "expected"),
    [
        pytest.param(
            V121_VM,
            1,
            {
                "limits.cpu": "2",
                "limits.memory": "4531245057",
                "requests.cpu": "125m",
                "requests.memory": "3098890241",
                "pods": "1",
            },
            id="2c-4Gi-one-pod",
        ),
        pytest.param(
            V121_VM,
            2,
            {
                "limits.cpu": "4",
                "limits.memory": "9062490114",
                "requests.cpu": "250m",
                "requests.memory": "6197780482",
                "pods": "2",
            },
            id="2c-4Gi-source-and-target",
        ),
        pytest.param(
            harvester_vmi(1, "2Gi"),
            4,
            {
                "limits.cpu": "4",
                "limits.memory": "9490309124",
                "requests.cpu": "248m",
                "requests.memory": "6625599492",
                "pods": "4",
            },
            id="1c-2Gi-four-pods",
        ),
        pytest.param(
            harvester_vmi(1, "1Gi"),
            3,
            {
                "limits.cpu": "3",
                "limits.memory": "3892310016",
                "requests.cpu": "186m",
                "requests.memory": "2750460Ki",
                "pods": "3",
            },
            id="1c-1Gi-three-vms",
        ),
        pytest.param(
            harvester_vmi(1, "1Gi"),
            1,
            {"requests.memory": "916820Ki"},
            id="1c-1Gi-target-pod-in-quota-error",
        ),
    ],
)
def test_harvester_v121_seed(vmi: dict[str, Any], pods: int, expected: dict[str, str]) -> None:
    """KubeVirt v0.54: no guest-console-log container, the compute container is the pod."""
    one = launcher_quota_usage(vmi, LauncherSettings(kubevirt_version="0.54"))
    used = total([one] * pods)
    assert {name: used[name] for name in expected} == {n: q(v) for n, v in expected.items()}


def test_harvester_v121_migrating_annotation_is_the_compute_limits() -> None:
    """harvesterhci.io/migrating-vm1: {"limits.cpu":"2","limits.memory":"4531245057"}."""
    limits = compute_container(
        launcher_pod_resources(V121_VM, LauncherSettings(kubevirt_version="0.54"))
    )["resources"]["limits"]
    assert {"cpu": limits["cpu"], "memory": limits["memory"]} == {
        "cpu": "2",
        "memory": "4531245057",
    }
    one_cpu = harvester_vmi(1, "2Gi")
    limits = compute_container(
        launcher_pod_resources(one_cpu, LauncherSettings(kubevirt_version="0.54"))
    )["resources"]["limits"]
    assert (limits["cpu"], limits["memory"]) == ("1", "2372577281")


@pytest.mark.parametrize(
    ("ratio", "limits_memory", "compute_limit"),
    [
        pytest.param("1.5", "4797464313", "4737464313", id="ratio-1.5"),
        pytest.param("4.5", "5682461313", "5622461313", id="ratio-4.5"),
    ],
)
def test_harvester_v170_seed_one_pod(ratio: str, limits_memory: str, compute_limit: str) -> None:
    pod = launcher_pod_resources(V170_VM, LauncherSettings(kubevirt_version="1.6", ratio=ratio))
    usage = pod_quota_usage(pod)
    assert usage["limits.cpu"] == q("2015m")
    assert usage["limits.memory"] == q(limits_memory)
    assert compute_container(pod)["resources"]["limits"]["memory"] == compute_limit
    log = pod["spec"]["initContainers"][0]
    assert log["name"] == "guest-console-log"
    assert log["restartPolicy"] == "Always"
    assert log["resources"] == {
        "limits": {"cpu": "15m", "memory": "60M"},
        "requests": {"cpu": "5m", "memory": "35M"},
    }


def test_harvester_v170_seed_requests() -> None:
    """Not in the seed's output (its quota has limits only), but fixed by the same VMI."""
    usage = launcher_quota_usage(V170_VM, LauncherSettings(kubevirt_version="1.6", ratio="1.5"))
    assert usage["requests.cpu"] == q("205m")
    assert usage["requests.memory"] == q("3340109497")


@pytest.mark.parametrize(
    ("ratios", "expected_cpu", "expected_memory"),
    [
        pytest.param(("1.5", "1.5"), "4030m", "9594928626", id="test1-migration-at-1.5"),
        pytest.param(("1.5", "4.5"), "4030m", "10479925626", id="test2-ratio-raised-mid-life"),
        pytest.param(("4.5", "4.5"), "4030m", "11364922626", id="test4-migration-at-4.5"),
    ],
)
def test_harvester_v170_seed_migrations(
    ratios: tuple[str, str], expected_cpu: str, expected_memory: str
) -> None:
    """Source pod rendered at the ratio it started with, target at the ratio in force now."""
    used = total(
        launcher_quota_usage(V170_VM, LauncherSettings(kubevirt_version="1.6", ratio=ratio))
        for ratio in ratios
    )
    assert used["limits.cpu"] == q(expected_cpu)
    assert used["limits.memory"] == q(expected_memory)


@pytest.mark.parametrize(
    ("base", "ratio", "raised_hard"),
    [
        pytest.param("5000Mi", "1.5", "9980344313", id="test1"),
        pytest.param("5000Mi", "4.5", "10865341313", id="test2"),
        pytest.param("6000Mi", "4.5", "11913917313", id="test4"),
    ],
)
def test_harvester_v170_raise_misses_the_console_log(
    base: str, ratio: str, raised_hard: str
) -> None:
    """Harvester raises limits.memory by the compute container's limit only (not the pod's)."""
    pod = launcher_pod_resources(V170_VM, LauncherSettings(kubevirt_version="1.6", ratio=ratio))
    compute_limit = q(compute_container(pod)["resources"]["limits"]["memory"])
    assert q(base) + compute_limit == q(raised_hard)
    assert pod_quota_usage(pod)["limits.memory"] - compute_limit == q("60M")


HARVESTER_7161_VM = harvester_vmi(4, "8Gi", guest="8092Mi")


@pytest.mark.parametrize("version", ["1.1", "1.1.1", "1.2.2", "1.3.1", "1.4.0"])
def test_harvester_7161(version: str) -> None:
    """requested: limits.cpu=4015m, limits.memory=8940039936; limited 60Gi - 8880039936 (the VM's
    share Harvester subtracted) = 54242646Ki."""
    pod = launcher_pod_resources(HARVESTER_7161_VM, LauncherSettings(kubevirt_version=version))
    usage = pod_quota_usage(pod)
    assert usage["limits.cpu"] == q("4015m")
    assert usage["limits.memory"] == q("8940039936")
    compute_limits = compute_container(pod)["resources"]["limits"]
    assert compute_limits["cpu"] == "4"
    # Go prints this BinarySI multiple of 1024 the same way: 8671914Ki == 8,880,039,936 bytes.
    assert compute_limits["memory"] == "8671914Ki"
    assert q(compute_limits["memory"]) == q("8880039936")
    assert q("60Gi") - q(compute_limits["memory"]) == q("54242646Ki")
    # v1.1 to v1.5 render guest-console-log as a plain second container.
    assert [c["name"] for c in pod["spec"]["containers"]] == ["compute", "guest-console-log"]


# --------------------------------------------------------------------------------------------
# The launcher pod: containers by version and settings


def container_names(pod: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    spec = pod["spec"]
    return (
        [c["name"] for c in spec["containers"]],
        [c["name"] for c in spec.get("initContainers", [])],
    )


def with_domain(vmi: dict[str, Any], **changes: Any) -> dict[str, Any]:
    result = copy.deepcopy(vmi)
    result["spec"]["domain"].update(changes)
    return result


def with_devices(vmi: dict[str, Any], **changes: Any) -> dict[str, Any]:
    result = copy.deepcopy(vmi)
    result["spec"]["domain"]["devices"].update(changes)
    return result


@pytest.mark.parametrize(
    ("vmi", "kwargs", "expected"),
    [
        pytest.param(V170_VM, {"kubevirt_version": "1.0"}, (["compute"], []), id="v1.0-no-log"),
        pytest.param(
            V170_VM,
            {"kubevirt_version": "1.5.3"},
            (["compute", "guest-console-log"], []),
            id="v1.5-log-container",
        ),
        pytest.param(
            V170_VM,
            {"kubevirt_version": "1.6"},
            (["compute"], ["guest-console-log"]),
            id="v1.6-native-sidecar",
        ),
        pytest.param(
            V170_VM,
            {"serial_console_log_disabled": True},
            (["compute"], []),
            id="disabled-cluster-wide",
        ),
        pytest.param(
            with_devices(V170_VM, logSerialConsole=True),
            {"serial_console_log_disabled": True},
            (["compute"], ["guest-console-log"]),
            id="vmi-opts-in",
        ),
        pytest.param(
            with_devices(V170_VM, logSerialConsole=False),
            {},
            (["compute"], []),
            id="vmi-opts-out",
        ),
        pytest.param(
            with_devices(V170_VM, autoattachSerialConsole=False),
            {},
            (["compute"], []),
            id="no-serial-console",
        ),
    ],
)
def test_console_log_container(
    vmi: dict[str, Any], kwargs: dict[str, Any], expected: tuple[list[str], list[str]]
) -> None:
    assert container_names(launcher_pod_resources(vmi, LauncherSettings(**kwargs))) == expected


def test_console_log_overrides_and_guaranteed_qos() -> None:
    overrides = [
        {"type": "guest-console-log", "resources": {"limits": {"memory": "100M"}}},
        {"type": "sidecar", "resources": {"limits": {"memory": "1G"}}},
    ]
    pod = launcher_pod_resources(V170_VM, LauncherSettings(support_container_resources=overrides))
    assert pod["spec"]["initContainers"][0]["resources"]["limits"] == {
        "cpu": "15m",
        "memory": "100M",
    }
    guaranteed = copy.deepcopy(V170_VM)
    guaranteed["spec"]["domain"]["resources"]["requests"] = {"cpu": "2", "memory": "4Gi"}
    pod = launcher_pod_resources(guaranteed)
    log = pod["spec"]["initContainers"][0]["resources"]
    assert log["requests"] == log["limits"] == {"cpu": "15m", "memory": "60M"}


def test_compute_container_v16() -> None:
    pod = launcher_pod_resources(V170_VM, LauncherSettings(ratio="1.5"))
    resources = compute_container(pod)["resources"]
    assert resources["limits"] == {
        "cpu": "2",
        "memory": "4737464313",
        "devices.kubevirt.io/tun": "1",
        "devices.kubevirt.io/vhost-net": "1",
        "devices.kubevirt.io/kvm": "1",
    }
    assert resources["requests"] == {
        "cpu": "200m",
        "memory": "3305109497",
        "ephemeral-storage": "50M",
    }


def test_full_launcher_usage_v16() -> None:
    usage = launcher_quota_usage(V170_VM, LauncherSettings(ratio="1.5"))
    assert as_strings(usage) == {
        "count/pods": "1",
        "pods": "1",
        "cpu": "205m",
        "requests.cpu": "205m",
        "limits.cpu": "2015m",
        "memory": "3340109497",
        "requests.memory": "3340109497",
        "limits.memory": "4797464313",
        "ephemeral-storage": "50M",
        "requests.ephemeral-storage": "50M",
        "requests.devices.kubevirt.io/tun": "1",
        "requests.devices.kubevirt.io/vhost-net": "1",
        "requests.devices.kubevirt.io/kvm": "1",
    }


def strip_requests(vmi: dict[str, Any], *names: str) -> dict[str, Any]:
    result = copy.deepcopy(vmi)
    for name in names:
        result["spec"]["domain"]["resources"]["requests"].pop(name, None)
    return result


def compute_values(vmi: dict[str, Any], kind: str, **kwargs: Any) -> dict[str, str]:
    return dict(
        compute_container(launcher_pod_resources(vmi, LauncherSettings(**kwargs)))["resources"][
            kind
        ]
    )


@pytest.mark.parametrize(
    ("cores", "ratio", "expected"),
    [
        pytest.param(2, 10, "200m", id="2-vcpus"),
        pytest.param(15, 10, "1.5", id="15-vcpus"),
        pytest.param(10, 10, "1", id="10-vcpus"),
        pytest.param(1, 3, "333.3333333333333m", id="go-%g-digits"),
    ],
)
def test_cpu_request_from_allocation_ratio(cores: int, ratio: int, expected: str) -> None:
    vmi = strip_requests(harvester_vmi(cores, "4Gi"), "cpu")
    requests = compute_values(vmi, "requests", cpu_allocation_ratio=ratio)
    assert q(requests["cpu"]) == q(expected)


@pytest.mark.parametrize(
    ("version", "kwargs", "expected_cpu_limit"),
    [
        pytest.param("1.6", {}, None, id="no-quota-limits"),
        pytest.param("1.6", {"quota_has_limits_cpu": True}, "2", id="v1.6-quota-has-limits"),
        pytest.param("1.2", {"quota_has_limits_cpu": True}, None, id="v1.2-needs-gate"),
        pytest.param(
            "1.2",
            {"quota_has_limits_cpu": True, "auto_resource_limits_gate": True},
            "2",
            id="v1.2-gate",
        ),
        pytest.param("1.0", {"auto_cpu_limit_namespace_match": True}, "2", id="v1.0-ns-label"),
        pytest.param("0.59", {"auto_cpu_limit_namespace_match": True}, None, id="v0.59-none"),
    ],
)
def test_auto_cpu_limits(
    version: str, kwargs: dict[str, Any], expected_cpu_limit: str | None
) -> None:
    vmi = copy.deepcopy(V170_VM)
    del vmi["spec"]["domain"]["resources"]["limits"]["cpu"]
    limits = compute_values(vmi, "limits", kubevirt_version=version, **kwargs)
    assert limits.get("cpu") == expected_cpu_limit


@pytest.mark.parametrize(
    ("kwargs", "ratio_factor"),
    [
        pytest.param({"quota_has_limits_memory": True}, 2.0, id="default-ratio"),
        pytest.param(
            {"quota_has_limits_memory": True, "auto_memory_limits_ratio": "1.5"},
            1.5,
            id="namespace-label",
        ),
        pytest.param(
            {"quota_has_limits_memory": True, "auto_memory_limits_ratio": "0.5"},
            2.0,
            id="invalid-label-falls-back",
        ),
    ],
)
def test_auto_memory_limits(kwargs: dict[str, Any], ratio_factor: float) -> None:
    vmi = copy.deepcopy(V170_VM)
    del vmi["spec"]["domain"]["resources"]["limits"]["memory"]
    requests = compute_values(vmi, "requests", **kwargs)
    limits = compute_values(vmi, "limits", **kwargs)
    assert q(limits["memory"]) == Quantity.from_int(
        int(float(q(requests["memory"]).value()) * ratio_factor)
    )
    assert "memory" not in compute_values(vmi, "limits")


def test_v17_fills_an_empty_memory_request_from_guest_and_overcommit() -> None:
    vmi = copy.deepcopy(V170_VM)
    vmi["spec"]["domain"]["resources"] = {"requests": {"cpu": "200m"}}
    v17 = compute_values(vmi, "requests", kubevirt_version="1.7", memory_overcommit=150)
    v16 = compute_values(vmi, "requests", kubevirt_version="1.6", memory_overcommit=150)
    overhead_17 = q(v17["memory"]) - Quantity.from_int(4 * GI * 100 // 150)
    assert q(v16["memory"]) == overhead_17  # v1.6 leaves the request empty: overhead only
    # ... and v1.7's page tables are still sized from the VMI's (empty) request: none.
    assert overhead_17 == Quantity.from_int(276 * MI)


def test_memory_limit_without_request_v17() -> None:
    vmi = copy.deepcopy(V170_VM)
    vmi["spec"]["domain"]["resources"] = {"limits": {"cpu": "2", "memory": "4Gi"}}
    requests = compute_values(vmi, "requests", kubevirt_version="1.7")
    limits = compute_values(vmi, "limits", kubevirt_version="1.7")
    assert requests["memory"] == limits["memory"]


def test_dedicated_cpu_v16() -> None:
    vmi = harvester_vmi(
        2,
        "4Gi",
        overcommit=HARVESTER_DEFAULT_OVERCOMMIT,
        guest="4Gi",
        cpu={
            "cores": 2,
            "sockets": 1,
            "threads": 1,
            "dedicatedCpuPlacement": True,
            "isolateEmulatorThread": True,
        },
    )
    vmi["spec"]["domain"]["resources"]["requests"] = as_strings(
        harvester_vm_requests("2", "4Gi", dedicated_cpu=True)
    )
    pod = launcher_pod_resources(vmi, LauncherSettings(ratio="1.5"))
    resources = compute_container(pod)["resources"]
    assert resources["limits"]["cpu"] == resources["requests"]["cpu"] == "3"
    assert resources["limits"]["memory"] == resources["requests"]["memory"]
    usage = pod_quota_usage(pod)
    assert usage["requests.cpu"] == usage["limits.cpu"] == q("3015m")
    assert usage["requests.memory"] == usage["limits.memory"]


@pytest.mark.parametrize(
    ("version", "expected_cpu_limit"),
    [
        pytest.param("0.54", "3", id="v0.54-overrides-vmi-limit"),
        pytest.param("0.58", "4", id="v0.58-vmi-limit-wins"),
        pytest.param("1.2", "3", id="v1.2-emulator-thread-on-vmi-limit"),
        pytest.param("1.6", "3", id="v1.6"),
    ],
)
def test_dedicated_cpu_limit_by_version(version: str, expected_cpu_limit: str) -> None:
    """A VMI with 2 dedicated vCPUs, an isolated emulator thread and (oddly) limits.cpu 4."""
    vmi = harvester_vmi(
        2,
        "4Gi",
        cpu={
            "cores": 2,
            "sockets": 1,
            "threads": 1,
            "dedicatedCpuPlacement": True,
            "isolateEmulatorThread": True,
        },
    )
    vmi["spec"]["domain"]["resources"]["limits"]["cpu"] = "4"
    limits = compute_values(vmi, "limits", kubevirt_version=version)
    assert limits["cpu"] == expected_cpu_limit


def test_hugepages() -> None:
    vmi = with_domain(V170_VM, memory={"guest": "4Gi", "hugepages": {"pageSize": "2Mi"}})
    pod = launcher_pod_resources(vmi, LauncherSettings(ratio="1.5"))
    resources = compute_container(pod)["resources"]
    # requests.memory (2730Mi) < guest, so the hugepages cover the request; memory = overhead.
    assert resources["requests"]["hugepages-2Mi"] == resources["limits"]["hugepages-2Mi"]
    assert q(resources["requests"]["hugepages-2Mi"]) == q("2730Mi")
    assert q(resources["requests"]["memory"]) == Quantity.from_int(442_497_017)
    # limits.memory (4Gi) is not above the guest (4Gi) either: the limit is the overhead alone.
    assert q(resources["limits"]["memory"]) == Quantity.from_int(442_497_017)
    usage = pod_quota_usage(pod)
    assert usage["requests.hugepages-2Mi"] == usage["hugepages-2Mi"] == q("2730Mi")


def test_ephemeral_storage_limit_gets_the_overhead_too() -> None:
    vmi = copy.deepcopy(V170_VM)
    vmi["spec"]["domain"]["resources"]["limits"]["ephemeral-storage"] = "1G"
    vmi["spec"]["domain"]["resources"]["requests"]["ephemeral-storage"] = "500M"
    assert compute_values(vmi, "limits")["ephemeral-storage"] == "1050M"
    assert compute_values(vmi, "requests")["ephemeral-storage"] == "550M"


def test_devices() -> None:
    vmi = with_devices(
        V170_VM,
        gpus=[
            {"name": "g1", "deviceName": "nvidia.com/TU104GL"},
            {"name": "g2", "deviceName": "nvidia.com/TU104GL"},
        ],
    )
    usage = launcher_quota_usage(
        vmi, LauncherSettings(network_resources={"sriov-net": "intel.com/sriov", "plain": ""})
    )
    assert usage["requests.nvidia.com/TU104GL"] == q("2")
    assert usage["requests.intel.com/sriov"] == q("1")
    emulated = launcher_quota_usage(V170_VM, LauncherSettings(allow_emulation=True))
    assert "requests.devices.kubevirt.io/kvm" not in emulated
    assert "requests.devices.kubevirt.io/vhost-net" not in emulated
    assert emulated["requests.devices.kubevirt.io/tun"] == q("1")


def test_container_disk_pod() -> None:
    vmi = copy.deepcopy(V170_VM)
    vmi["spec"]["volumes"].append({"name": "boot", "containerDisk": {"image": "quay.io/x"}})
    pod = launcher_pod_resources(vmi)
    assert container_names(pod) == (
        ["compute", "volumeboot"],
        ["guest-console-log", "container-disk-binary", "volumeboot-init"],
    )
    disk = pod["spec"]["containers"][1]["resources"]
    assert disk == {
        "limits": {"cpu": "10m", "memory": "40M"},
        "requests": {"cpu": "1m", "memory": "1M", "ephemeral-storage": "50M"},
    }
    binary = pod["spec"]["initContainers"][1]["resources"]
    assert binary == {
        "limits": {"cpu": "100m", "memory": "40M"},
        "requests": {"cpu": "10m", "memory": "1M"},
    }
    usage = pod_quota_usage(pod)
    plain = launcher_quota_usage(V170_VM)
    assert usage["limits.cpu"] - plain["limits.cpu"] == q("10m")
    assert usage["requests.ephemeral-storage"] - plain["requests.ephemeral-storage"] == q("50M")


def test_hook_sidecars_for_dedicated_cpu() -> None:
    vmi = harvester_vmi(
        2, "4Gi", cpu={"cores": 2, "sockets": 1, "threads": 1, "dedicatedCpuPlacement": True}
    )
    vmi["metadata"]["annotations"]["hooks.kubevirt.io/hookSidecars"] = json.dumps(
        [{"image": "example/sidecar"}]
    )
    pod = launcher_pod_resources(vmi)
    sidecar = pod["spec"]["containers"][1]
    assert sidecar["name"] == "hook-sidecar-0"
    assert sidecar["resources"]["limits"] == {"cpu": "200m", "memory": "64M"}
    plain = launcher_pod_resources(V170_VM)
    assert len(plain["spec"]["containers"]) == 1


def test_bad_hook_annotation() -> None:
    vmi = copy.deepcopy(V170_VM)
    vmi["metadata"]["annotations"]["hooks.kubevirt.io/hookSidecars"] = "{not json"
    with pytest.raises(ValueError, match="hookSidecars"):
        launcher_pod_resources(vmi)


@pytest.mark.parametrize(
    ("version", "guaranteed", "expected"),
    [
        pytest.param("0.57", False, None, id="v0.57-virtiofsd-in-compute"),
        pytest.param(
            "0.58",
            False,
            {
                "limits": {"memory": "40M", "cpu": "100m"},
                "requests": {"cpu": "10m", "memory": "1M"},
            },
            id="v0.58",
        ),
        pytest.param(
            "1.0",
            True,
            {
                "limits": {"memory": "80M", "cpu": "100m"},
                "requests": {"cpu": "10m", "memory": "1M"},
            },
            id="v1.0-ignores-qos",
        ),
        pytest.param(
            "1.6",
            False,
            {
                "limits": {"memory": "80M", "cpu": "100m"},
                "requests": {"cpu": "10m", "memory": "1M"},
            },
            id="v1.6",
        ),
        pytest.param(
            "1.6",
            True,
            {
                "limits": {"memory": "80M", "cpu": "100m"},
                "requests": {"cpu": "100m", "memory": "80M"},
            },
            id="v1.6-guaranteed",
        ),
    ],
)
def test_virtiofs_container(
    version: str, guaranteed: bool, expected: dict[str, Any] | None
) -> None:
    vmi = with_devices(V170_VM, filesystems=[{"name": "shared", "virtiofs": {}}])
    vmi["spec"]["volumes"].append({"name": "shared", "persistentVolumeClaim": {"claimName": "s"}})
    if guaranteed:
        vmi["spec"]["domain"]["resources"]["requests"] = {"cpu": "2", "memory": "4Gi"}
    containers = launcher_pod_resources(vmi, LauncherSettings(kubevirt_version=version))["spec"][
        "containers"
    ]
    if expected is None:
        assert len(containers) == 1
    else:
        assert containers[1]["name"] == "virtiofs-shared"
        assert containers[1]["resources"] == expected


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        pytest.param({"ratio": "0.5"}, "overhead ratio", id="ratio-below-one"),
        pytest.param({"ratio": "x"}, "overhead ratio", id="ratio-not-a-number"),
        pytest.param({"kubevirt_version": "1.10"}, "unknown KubeVirt version", id="version"),
        pytest.param({"memory_overcommit": 0}, "memory_overcommit", id="overcommit"),
        pytest.param({"cpu_allocation_ratio": 0}, "cpu_allocation_ratio", id="cpu-ratio"),
    ],
)
def test_launcher_bad_settings(kwargs: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        launcher_quota_usage(V170_VM, LauncherSettings(**kwargs))


def test_launcher_is_pure() -> None:
    before = copy.deepcopy(V170_VM)
    first = launcher_pod_resources(V170_VM, LauncherSettings(ratio="1.5"))
    assert before == V170_VM
    assert launcher_pod_resources(V170_VM, LauncherSettings(ratio="1.5")) == first


# --------------------------------------------------------------------------------------------
# pod_quota_usage: the Kubernetes v1.36 pod evaluator


def container(
    name: str,
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "resources": resources, **extra}


def pod(
    *containers: dict[str, Any], init: list[dict[str, Any]] | None = None, **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": list(containers), **spec}
    if init is not None:
        body["initContainers"] = init
    return {"metadata": {"name": "p"}, "spec": body, "status": {"phase": "Running"}}


SIDECAR = {"restartPolicy": "Always"}


@pytest.mark.parametrize(
    ("the_pod", "expected"),
    [
        pytest.param(
            pod(container("a", {"cpu": "100m", "memory": "1Gi"}, {"cpu": "1", "memory": "2Gi"})),
            {
                "count/pods": "1",
                "pods": "1",
                "cpu": "100m",
                "requests.cpu": "100m",
                "limits.cpu": "1",
                "memory": "1Gi",
                "requests.memory": "1Gi",
                "limits.memory": "2Gi",
            },
            id="one-container",
        ),
        pytest.param(
            pod(container("a", limits={"cpu": "1", "memory": "2Gi"})),
            {
                "count/pods": "1",
                "pods": "1",
                "cpu": "1",
                "requests.cpu": "1",
                "limits.cpu": "1",
                "memory": "2Gi",
                "requests.memory": "2Gi",
                "limits.memory": "2Gi",
            },
            id="requests-defaulted-from-limits",
        ),
        pytest.param(
            pod(container("a", {"cpu": "100m"}), container("b", {"cpu": "200m"})),
            {"count/pods": "1", "pods": "1", "cpu": "300m", "requests.cpu": "300m"},
            id="containers-add-up",
        ),
        pytest.param(
            pod(
                container("a", {"cpu": "100m"}),
                init=[
                    container("log", {"cpu": "50m"}, **SIDECAR),
                    container("init", {"cpu": "500m"}),
                ],
            ),
            {"count/pods": "1", "pods": "1", "cpu": "550m", "requests.cpu": "550m"},
            id="init-after-sidecar-runs-beside-it",
        ),
        pytest.param(
            pod(
                container("a", {"cpu": "100m"}),
                init=[
                    container("init", {"cpu": "500m"}),
                    container("log", {"cpu": "50m"}, **SIDECAR),
                ],
            ),
            {"count/pods": "1", "pods": "1", "cpu": "500m", "requests.cpu": "500m"},
            id="init-before-sidecar",
        ),
        pytest.param(
            pod(
                container("a", {"cpu": "1"}),
                init=[
                    container("log", {"cpu": "50m"}, **SIDECAR),
                    container("init", {"cpu": "500m"}),
                ],
            ),
            {"count/pods": "1", "pods": "1", "cpu": "1050m", "requests.cpu": "1050m"},
            id="sidecar-adds-to-app-containers",
        ),
        pytest.param(
            pod(
                container("a", {"cpu": "1", "memory": "1Gi"}, {"cpu": "2"}),
                overhead={"cpu": "250m", "memory": "120Mi"},
            ),
            {
                "count/pods": "1",
                "pods": "1",
                "cpu": "1250m",
                "requests.cpu": "1250m",
                "limits.cpu": "2250m",
                "memory": "1144Mi",
                "requests.memory": "1144Mi",
            },
            id="pod-overhead-only-on-set-limits",
        ),
        pytest.param(
            pod(
                container(
                    "a",
                    {"hugepages-2Mi": "1Gi", "ephemeral-storage": "1G"},
                    {"hugepages-2Mi": "1Gi", "ephemeral-storage": "2G"},
                )
            ),
            {
                "count/pods": "1",
                "pods": "1",
                "hugepages-2Mi": "1Gi",
                "requests.hugepages-2Mi": "1Gi",
                "ephemeral-storage": "1G",
                "requests.ephemeral-storage": "1G",
                "limits.ephemeral-storage": "2G",
            },
            id="hugepages-and-ephemeral-storage",
        ),
        pytest.param(
            pod(
                container(
                    "a",
                    limits={
                        "nvidia.com/gpu": "1",
                        "example.com/dongle": "2",
                        "kubernetes.io/native-thing": "1",
                        "deviceclass.resource.kubernetes.io/gpu": "1",
                    },
                )
            ),
            {
                "count/pods": "1",
                "pods": "1",
                "requests.nvidia.com/gpu": "1",
                "requests.example.com/dongle": "2",
                "requests.deviceclass.resource.kubernetes.io/gpu": "1",
            },
            id="extended-resources",
        ),
        pytest.param(
            pod(container("a", {"cpu": "100m", "memory": "1Gi"})),
            {
                "count/pods": "1",
                "pods": "1",
                "cpu": "100m",
                "requests.cpu": "100m",
                "memory": "1Gi",
                "requests.memory": "1Gi",
            },
            id="no-limits",
        ),
        pytest.param(
            pod(
                container("a", {"cpu": "100m", "memory": "1Gi"}),
                resources={"requests": {"cpu": "1"}, "limits": {"cpu": "2", "memory": "4Gi"}},
            ),
            {
                "count/pods": "1",
                "pods": "1",
                "cpu": "1",
                "requests.cpu": "1",
                "limits.cpu": "2",
                "memory": "1Gi",
                "requests.memory": "1Gi",
                "limits.memory": "4Gi",
            },
            id="pod-level-resources",
        ),
        pytest.param(
            pod(container("a", {"memory": "1Gi"}), resources={"limits": {"cpu": "2"}}),
            {
                "count/pods": "1",
                "pods": "1",
                "cpu": "2",
                "requests.cpu": "2",
                "limits.cpu": "2",
                "memory": "1Gi",
                "requests.memory": "1Gi",
            },
            id="pod-level-requests-defaulted-from-pod-limits",
        ),
    ],
)
def test_pod_quota_usage(the_pod: dict[str, Any], expected: dict[str, str]) -> None:
    assert pod_quota_usage(the_pod) == {name: q(value) for name, value in expected.items()}


def resized(infeasible: bool) -> dict[str, Any]:
    the_pod = pod(container("a", {"cpu": "1"}, {"cpu": "1"}))
    the_pod["status"]["containerStatuses"] = [
        {
            "name": "a",
            "allocatedResources": {"cpu": "1500m"},
            "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "3"}},
        }
    ]
    if infeasible:
        the_pod["status"]["conditions"] = [{"type": "PodResizePending", "reason": "Infeasible"}]
        the_pod["spec"]["containers"][0]["resources"] = {
            "requests": {"cpu": "8"},
            "limits": {"cpu": "8"},
        }
    return the_pod


@pytest.mark.parametrize(
    ("the_pod", "requests_cpu", "limits_cpu"),
    [
        pytest.param(resized(False), "2", "3", id="in-place-resize-max-of-spec-and-status"),
        pytest.param(resized(True), "2", "3", id="infeasible-resize-uses-status"),
    ],
)
def test_in_place_resize_status(
    the_pod: dict[str, Any], requests_cpu: str, limits_cpu: str
) -> None:
    assert pod_requests(the_pod)["cpu"] == q(requests_cpu)
    assert pod_limits(the_pod)["cpu"] == q(limits_cpu)


NOW = datetime.datetime(2024, 12, 13, 12, 40, 0, tzinfo=UTC)


def terminating(deleted_at: str, grace: int | None) -> dict[str, Any]:
    the_pod = pod(container("a", {"cpu": "1"}))
    the_pod["metadata"]["deletionTimestamp"] = deleted_at
    if grace is not None:
        the_pod["metadata"]["deletionGracePeriodSeconds"] = grace
    return the_pod


def in_phase(phase: str) -> dict[str, Any]:
    the_pod = pod(container("a", {"cpu": "1"}))
    the_pod["status"]["phase"] = phase
    return the_pod


@pytest.mark.parametrize(
    ("the_pod", "now", "counts"),
    [
        pytest.param(in_phase("Running"), NOW, True, id="running"),
        pytest.param(in_phase("Pending"), NOW, True, id="pending"),
        pytest.param(in_phase("Succeeded"), NOW, False, id="succeeded"),
        pytest.param(in_phase("Failed"), NOW, False, id="failed"),
        pytest.param(terminating("2024-12-13T12:39:00Z", 30), NOW, False, id="grace-expired"),
        pytest.param(terminating("2024-12-13T12:39:30Z", 30), NOW, True, id="at-deadline"),
        pytest.param(terminating("2024-12-13T12:39:45Z", 30), NOW, True, id="within-grace"),
        pytest.param(terminating("2024-12-13T12:00:00Z", None), NOW, True, id="no-grace-period"),
        pytest.param(terminating("2024-12-13T12:00:00Z", 30), None, True, id="no-clock"),
        pytest.param(in_phase("Succeeded"), None, False, id="no-clock-still-sees-phase"),
    ],
)
def test_pod_counts_against_quota(
    the_pod: dict[str, Any], now: datetime.datetime | None, counts: bool
) -> None:
    assert pod_counts_against_quota(the_pod, now) is counts
    usage = pod_quota_usage(the_pod, now=now)
    assert ("pods" in usage) is counts
    assert usage["count/pods"] == q("1")


def test_naive_clock_is_rejected() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        pod_counts_against_quota(
            terminating("2024-12-13T12:39:00Z", 30), datetime.datetime(2024, 1, 1)
        )


def test_quota_usage_for_masks_to_the_quota_keys() -> None:
    usage = quota_usage_for(
        launcher_pod_resources(V170_VM, LauncherSettings(ratio="1.5")),
        ["limits.cpu", "limits.memory", "requests.storage", "configmaps"],
    )
    assert as_strings(usage) == {"limits.cpu": "2015m", "limits.memory": "4797464313"}


@pytest.mark.parametrize(
    "the_pod",
    [
        pytest.param(
            {"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "x"}}}]}},
            id="bad-quantity",
        ),
        pytest.param({"spec": {"containers": "a"}}, id="containers-not-a-list"),
        pytest.param(
            {"spec": {"containers": [{"name": "a", "resources": []}]}}, id="resources-not-an-object"
        ),
    ],
)
def test_malformed_pod(the_pod: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        pod_quota_usage(the_pod)


@pytest.mark.parametrize(
    ("vmi", "version", "kwargs", "hard", "expected"),
    [
        pytest.param(V170_VM, "1.6", {}, ["limits.cpu", "limits.memory"], {}, id="limits-set"),
        pytest.param(
            strip_requests(V170_VM, "cpu"),
            "1.6",
            {},
            ["requests.cpu"],
            {},
            id="cpu-request-calculated",
        ),
        pytest.param(
            {"spec": {"domain": {"resources": {"requests": {"memory": "1Gi"}}}}},
            "0.54",
            {},
            ["limits.cpu"],
            {"limits.cpu": ["compute"]},
            id="v0.54-no-auto-cpu-limit",
        ),
        pytest.param(
            {"spec": {"domain": {"resources": {"requests": {"memory": "1Gi"}}}}},
            "1.6",
            {"quota_has_limits_cpu": True},
            ["limits.cpu"],
            {},
            id="v1.6-auto-cpu-limit",
        ),
    ],
)
def test_quota_constraints_on_launcher_pods(
    vmi: dict[str, Any],
    version: str,
    kwargs: dict[str, Any],
    hard: list[str],
    expected: dict[str, list[str]],
) -> None:
    the_pod = launcher_pod_resources(vmi, LauncherSettings(kubevirt_version=version, **kwargs))
    assert quota_constraint_violations(the_pod, hard) == expected


def test_quota_constraints_checks_init_containers_and_skips_pod_level() -> None:
    the_pod = pod(
        container("a", {"cpu": "1"}, {"cpu": "1"}),
        init=[container("init", {"memory": "1Gi"})],
    )
    assert quota_constraint_violations(the_pod, ["cpu", "limits.cpu", "pods"]) == {
        "cpu": ["init"],
        "limits.cpu": ["init"],
    }
    the_pod["spec"]["resources"] = {"limits": {"cpu": "2"}}
    assert quota_constraint_violations(the_pod, ["limits.cpu"]) == {}
