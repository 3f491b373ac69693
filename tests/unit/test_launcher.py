"""The virt-launcher pod KubeVirt renders, by version and settings, and the seeds' numbers.

The seed numbers: Harvester v1.2.1 (KubeVirt v0.54, seeds/harvester-v121-migration-with-resourcequota.md),
Harvester v1.7.0 (KubeVirt v1.6, seeds/harvester-v170-migration-quota-overhead-ratio.md) and
Harvester issue #7161 (KubeVirt v1.1, the "requested:" line of the quota error in the v1.2.1 seed).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

import pytest
from harvester_quota.testbench.harvestervm import (
    HARVESTER_DEFAULT_OVERCOMMIT,
    harvester_vm_requests,
)
from harvester_quota.util.launcher import (
    LauncherSettings,
    launcher_pod_resources,
    launcher_quota_usage,
)
from harvester_quota.util.launcher.render import MAX_HOOK_SIDECARS
from harvester_quota.util.podusage import pod_quota_usage
from harvester_quota.util.quantity import Quantity

from tests.unit.vmis import (
    GI,
    MI,
    V121_VM,
    V170_VM,
    as_strings,
    compute_container,
    harvester_vmi,
    q,
    strip_requests,
    total,
)

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


def hooked_vmi(annotation: str) -> dict[str, Any]:
    vmi = harvester_vmi(
        2, "4Gi", cpu={"cores": 2, "sockets": 1, "threads": 1, "dedicatedCpuPlacement": True}
    )
    vmi["metadata"]["annotations"]["hooks.kubevirt.io/hookSidecars"] = annotation
    return vmi


def test_hook_sidecars_up_to_the_cap_are_each_rendered() -> None:
    sidecars = [{"image": f"example/sidecar-{i}"} for i in range(MAX_HOOK_SIDECARS)]
    usage = launcher_quota_usage(hooked_vmi(json.dumps(sidecars)))
    plain = launcher_quota_usage(hooked_vmi("[]"))
    assert usage["limits.cpu"] - plain["limits.cpu"] == q("200m") * MAX_HOOK_SIDECARS


def test_a_hook_annotation_asking_for_more_sidecars_than_the_cap_is_not_estimated() -> None:
    """18,000 entries made a room of 3,602 CPU: past the cap the VMI gets no estimate at all."""
    sidecars = [{"image": "x"}] * 18_000
    with pytest.raises(ValueError, match=f"18000 hook sidecars, more than the {MAX_HOOK_SIDECARS}"):
        launcher_quota_usage(hooked_vmi(json.dumps(sidecars)))


@pytest.mark.parametrize("entry", ["x", 1, None, ["image"]])
def test_hook_entries_that_are_not_sidecar_objects_are_refused(entry: object) -> None:
    with pytest.raises(ValueError, match="must list sidecar objects"):
        launcher_quota_usage(hooked_vmi(json.dumps([{"image": "x"}, entry])))


def test_a_hook_annotation_nested_too_deep_to_parse_is_a_value_error() -> None:
    """A nested entry raised RecursionError, which no caller caught: every plan of the
    namespace failed and the webhook answered 500."""
    nested = '[{"image":"x","x":' + "[" * 100_000 + "]" * 100_000 + "}]"
    with pytest.raises(ValueError, match="not valid JSON"):
        launcher_quota_usage(hooked_vmi(nested))


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
