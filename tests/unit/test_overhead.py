"""KubeVirt's virt-launcher memory overhead, byte for byte, per KubeVirt version.

The expected numbers come from the field (the Harvester seeds), from the worked examples in
shared/reference/mtq-and-launcher-overhead.md Part 2, and from KubeVirt's Go code read tag by tag.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from harvester_quota.util.kubevirtversion import MAIN, KubeVirtVersion, parse_kubevirt_version
from harvester_quota.util.overhead import (
    kubevirt_ratio_from_harvester_setting,
    memory_overhead,
    memory_overhead_details,
    pagetable_bytes,
    parse_overhead_ratio,
    vcpu_count,
    wants_guaranteed_qos,
)

MI = 1024 * 1024
GI = 1024 * MI


def make_vmi(
    *,
    cores: int = 2,
    limits: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    **domain: Any,
) -> dict[str, Any]:
    """A VMI as Harvester creates it: 1 socket x `cores` x 1 thread, masquerade pod network."""
    spec_domain: dict[str, Any] = {
        "cpu": {"cores": cores, "sockets": 1, "threads": 1},
        "devices": {"interfaces": [{"name": "default", "masquerade": {}, "model": "virtio"}]},
        "resources": {
            "limits": limits if limits is not None else {"cpu": str(cores), "memory": "4Gi"},
            "requests": requests if requests is not None else {"cpu": "125m", "memory": "2730Mi"},
        },
    }
    spec_domain.update(domain)
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "vm1", "namespace": "test"},
        "spec": {"domain": spec_domain, "networks": [{"name": "default", "pod": {}}]},
    }


def with_devices(vmi: dict[str, Any], **devices: Any) -> dict[str, Any]:
    result = copy.deepcopy(vmi)
    result["spec"]["domain"]["devices"].update(devices)
    return result


def with_spec(vmi: dict[str, Any], **spec: Any) -> dict[str, Any]:
    result = copy.deepcopy(vmi)
    result["spec"].update(spec)
    return result


VM_2C_4GI = make_vmi()
# Memory not overcommitted, CPU still is (requests.cpu == limits.cpu would ask for guaranteed QoS,
# which reserves another 100Mi).
VM_2C_4GI_NO_OVERCOMMIT = make_vmi(requests={"cpu": "200m", "memory": "4Gi"})


# --------------------------------------------------------------------------------------------
# The worked examples (reference Part 2.5) and the field numbers


@pytest.mark.parametrize(
    ("version", "vmi", "ratio", "expected"),
    [
        pytest.param("0.54", VM_2C_4GI, None, 236_277_761, id="v0.54-2730Mi-harvester-v1.2.1"),
        pytest.param("1.6", VM_2C_4GI, None, 294_998_017, id="v1.6-2730Mi-unset"),
        pytest.param("1.6", VM_2C_4GI, "", 294_998_017, id="v1.6-2730Mi-empty-string"),
        pytest.param("1.6", VM_2C_4GI, "1.0", 294_998_017, id="v1.6-2730Mi-1.0"),
        pytest.param("1.6", VM_2C_4GI, 1.0, 294_998_017, id="v1.6-2730Mi-float-1.0"),
        pytest.param("1.6", VM_2C_4GI, "1.5", 442_497_017, id="v1.6-2730Mi-1.5"),
        pytest.param("v1.6.3", VM_2C_4GI, "1.5", 442_497_017, id="v1.6.3-2730Mi-1.5"),
        pytest.param("1.7", VM_2C_4GI, "1.5", 442_497_017, id="v1.7-2730Mi-1.5"),
        pytest.param("1.8.3", VM_2C_4GI, "1.5", 442_497_017, id="v1.8.3-2730Mi-1.5"),
        pytest.param("1.9", VM_2C_4GI, "1.5", 442_497_017, id="v1.9-2730Mi-1.5"),
        pytest.param("1.6", VM_2C_4GI, 1.5, 442_497_017, id="v1.6-2730Mi-float-1.5"),
        pytest.param("1.6", VM_2C_4GI, "4.5", 1_327_494_017, id="v1.6-2730Mi-4.5"),
        pytest.param("1.9", VM_2C_4GI, "4.5", 1_327_494_017, id="v1.9-2730Mi-4.5"),
        pytest.param("main", VM_2C_4GI, "1.0", 315_969_537, id="main-2730Mi-1.0"),
        pytest.param("main", VM_2C_4GI, "1.5", 473_954_537, id="main-2730Mi-1.5"),
        pytest.param("main", VM_2C_4GI, "4.5", 1_421_864_537, id="main-2730Mi-4.5"),
        pytest.param("1.6", VM_2C_4GI_NO_OVERCOMMIT, None, 297_795_585, id="v1.6-4Gi-unset"),
        pytest.param("1.6", VM_2C_4GI_NO_OVERCOMMIT, "1.5", 446_693_585, id="v1.6-4Gi-1.5"),
        pytest.param("1.6", VM_2C_4GI_NO_OVERCOMMIT, "4.5", 1_340_081_585, id="v1.6-4Gi-4.5"),
        pytest.param("main", VM_2C_4GI_NO_OVERCOMMIT, None, 318_767_105, id="main-4Gi-unset"),
        pytest.param("main", VM_2C_4GI_NO_OVERCOMMIT, "1.5", 478_151_105, id="main-4Gi-1.5"),
        pytest.param("main", VM_2C_4GI_NO_OVERCOMMIT, "4.5", 1_434_455_105, id="main-4Gi-4.5"),
    ],
)
def test_worked_examples(
    version: str, vmi: dict[str, Any], ratio: str | float | None, expected: int
) -> None:
    assert memory_overhead(vmi, ratio, version) == expected


@pytest.mark.parametrize(
    ("version", "ratio", "pod_limits_memory"),
    [
        # Harvester v1.2.1 (KubeVirt v0.54, no guest-console-log container): the seed's used value.
        pytest.param("0.54", None, 4_531_245_057, id="harvester-v1.2.1"),
        # Harvester v1.7.0 (KubeVirt v1.6): compute limit + the 60M guest-console-log limit.
        pytest.param("1.6", "1.5", 4_797_464_313 - 60_000_000, id="harvester-v1.7.0-ratio-1.5"),
        pytest.param("1.6", "4.5", 5_682_461_313 - 60_000_000, id="harvester-v1.7.0-ratio-4.5"),
    ],
)
def test_field_numbers_compute_limit(
    version: str, ratio: str | None, pod_limits_memory: int
) -> None:
    assert 4 * GI + memory_overhead(VM_2C_4GI, ratio, version) == pod_limits_memory


@pytest.mark.parametrize(
    "version",
    [
        pytest.param("1.1.1", id="v1.1.1"),
        pytest.param("1.2", id="v1.2"),
        pytest.param("1.3.1", id="v1.3.1"),
        pytest.param("1.4.0", id="v1.4.0"),
    ],
)
def test_harvester_7161_vm_share(version: str) -> None:
    """Harvester #7161: a 4-core 8Gi VM whose compute limit is 8,880,039,936 bytes.

    Requests per Harvester's mutator at overcommit 150% memory: 5461Mi. Harvester v1.3 shipped a
    KubeVirt v1.1.x; any release up to v1.4.0 gives the same number (v1.4.1 raised virtqemud).
    """
    vmi = make_vmi(
        cores=4,
        limits={"cpu": "4", "memory": "8Gi"},
        requests={"cpu": "250m", "memory": "5461Mi"},
        memory={"guest": "8092Mi"},
    )
    assert 8 * GI + memory_overhead(vmi, None, version) == 8_880_039_936


def test_harvester_7161_differs_after_virtqemud_bump() -> None:
    vmi = make_vmi(
        cores=4,
        limits={"cpu": "4", "memory": "8Gi"},
        requests={"cpu": "250m", "memory": "5461Mi"},
    )
    assert memory_overhead(vmi, None, "1.4.1") - memory_overhead(vmi, None, "1.4.0") == 5 * MI


@pytest.mark.parametrize(
    ("cores", "limit", "request_memory", "expected_compute_limit"),
    [
        pytest.param(2, "4Gi", "2730Mi", 4_531_245_057, id="2c-4Gi"),
        pytest.param(1, "2Gi", "1365Mi", 2_372_577_281, id="1c-2Gi-migrating-annotation"),
        pytest.param(1, "1Gi", "682Mi", 1_297_436_672, id="1c-1Gi"),
    ],
)
def test_harvester_v121_vm_sizes(
    cores: int, limit: str, request_memory: str, expected_compute_limit: int
) -> None:
    """The other VM sizes of the v1.2.1 seed (harvesterhci.io/migrating-* annotation values)."""
    vmi = make_vmi(
        cores=cores,
        limits={"cpu": str(cores), "memory": limit},
        requests={"cpu": "62m", "memory": request_memory},
    )
    limit_bytes = {"4Gi": 4 * GI, "2Gi": 2 * GI, "1Gi": GI}[limit]
    assert limit_bytes + memory_overhead(vmi, None, "0.54") == expected_compute_limit


def test_guest_memory_does_not_change_the_overhead() -> None:
    with_guest = copy.deepcopy(VM_2C_4GI)
    with_guest["spec"]["domain"]["memory"] = {"guest": "3996Mi"}
    other_guest = copy.deepcopy(VM_2C_4GI)
    other_guest["spec"]["domain"]["memory"] = {"guest": "4Gi"}
    assert memory_overhead(with_guest, "1.5") == memory_overhead(other_guest, "1.5")


# --------------------------------------------------------------------------------------------
# The fixed part by version (2 vCPU, graphics on, amd64, no requests.memory => no page tables)


@pytest.mark.parametrize(
    ("version", "fixed_mib"),
    [
        pytest.param("0.54", 220, id="v0.54"),
        pytest.param("0.55", 245, id="v0.55-launcher-100"),
        pytest.param("0.56.1", 245, id="v0.56.1"),
        pytest.param("0.57", 248, id="v0.57-virtlogd-18-libvirtd-35"),
        pytest.param("0.58", 248, id="v0.58.0"),
        pytest.param("0.58.1", 250, id="v0.58.1-virtlogd-20"),
        pytest.param("0.59", 250, id="v0.59"),
        pytest.param("1.0", 250, id="v1.0"),
        pytest.param("1.2.2", 250, id="v1.2.2"),
        pytest.param("1.4.0", 250, id="v1.4.0"),
        pytest.param("1.4.1", 255, id="v1.4.1-virtqemud-40"),
        pytest.param("1.5", 260, id="v1.5-virtlogd-25"),
        pytest.param("1.5.3", 260, id="v1.5.3"),
        pytest.param("1.6", 276, id="v1.6-video-32"),
        pytest.param("1.9", 276, id="v1.9"),
        pytest.param("main", 296, id="main-qemu-50"),
    ],
)
def test_fixed_part_by_version(version: str, fixed_mib: int) -> None:
    vmi = make_vmi(requests={"cpu": "125m"})
    assert memory_overhead(vmi, None, version) == fixed_mib * MI


@pytest.mark.parametrize(
    ("version", "qemu_mib"),
    [
        pytest.param(KubeVirtVersion(1, 9, 0), 30, id="v1.9.0"),
        pytest.param(KubeVirtVersion(1, 9, 7), 30, id="v1.9-patch"),
        pytest.param(KubeVirtVersion(1, 10, 0), 50, id="v1.10.0"),
        pytest.param(MAIN, 50, id="main"),
    ],
)
def test_qemu_share_is_50mi_from_v1_10_and_on_main_30mi_on_every_v1_9(
    version: KubeVirtVersion, qemu_mib: int
) -> None:
    parts = dict(
        memory_overhead_details(make_vmi(requests={"cpu": "125m"}), None, version).multiplied
    )
    assert parts["qemu"] == qemu_mib * MI


# --------------------------------------------------------------------------------------------
# Rounding


@pytest.mark.parametrize(
    ("request_memory", "expected"),
    [
        pytest.param(2730 * MI, 5_591_041, id="2730Mi"),
        pytest.param(4 * GI, 8_388_609, id="4Gi"),
        pytest.param(0, 0, id="zero"),
        pytest.param(1, 1, id="one-byte-rounds-to-a-kilo"),
        pytest.param(512_000, 1000, id="exact"),
    ],
)
def test_pagetable_rounding(request_memory: int, expected: int) -> None:
    assert pagetable_bytes(request_memory) == expected


def test_ratio_uses_go_float64_truncation() -> None:
    """K = ceil(overhead / 1000) = 290,000 and ratio 1.2: float64 gives 57,999.99.., truncated to
    57,999, where exact decimal arithmetic would give 58,000."""
    vmi = make_vmi(requests={"cpu": "200m", "memory": "303360k"})
    details = memory_overhead_details(vmi, "1.2", "1.6")
    before = sum(size for _, size in details.multiplied)
    assert -(-before // 1000) == 290_000
    assert details.ratio_extra == 57_999_000
    assert details.total == before + 57_999_000 == 347_998_476


def test_ratio_string_and_float_agree() -> None:
    assert memory_overhead(VM_2C_4GI, "4.5") == memory_overhead(VM_2C_4GI, 4.5)
    assert memory_overhead(VM_2C_4GI, "1.5e0") == memory_overhead(VM_2C_4GI, "1.5")
    assert memory_overhead(VM_2C_4GI, "0x1.8p0") == memory_overhead(VM_2C_4GI, "1.5")


# --------------------------------------------------------------------------------------------
# Which versions apply the ratio


@pytest.mark.parametrize(
    ("version", "applied"),
    [
        pytest.param("0.54", False, id="v0.54"),
        pytest.param("0.58.1", False, id="v0.58.1"),
        pytest.param("0.58.2", True, id="v0.58.2-backport"),
        pytest.param("0.59.0", False, id="v0.59.0"),
        pytest.param("0.59.1", True, id="v0.59.1-backport"),
        pytest.param("1.0", True, id="v1.0"),
        pytest.param("1.6", True, id="v1.6"),
        pytest.param("main", True, id="main"),
    ],
)
def test_ratio_support_by_version(version: str, applied: bool) -> None:
    unset = memory_overhead(VM_2C_4GI, None, version)
    doubled = memory_overhead(VM_2C_4GI, "2", version)
    assert (doubled > unset) is applied
    if applied:
        assert doubled == unset + -(-unset // 1000) * 1000


# --------------------------------------------------------------------------------------------
# Invalid input


@pytest.mark.parametrize(
    "ratio",
    [
        pytest.param("abc", id="not-a-number"),
        pytest.param("0.5", id="below-one"),
        pytest.param("0", id="zero-string"),
        pytest.param(0, id="zero-int"),
        pytest.param(0.99, id="below-one-float"),
        pytest.param("-1.5", id="negative"),
        pytest.param("NaN", id="nan"),
        pytest.param("Inf", id="inf"),
        pytest.param("1e400", id="overflow"),
        pytest.param(" 1.5", id="leading-space"),
        pytest.param("1_5", id="underscore"),
        pytest.param("1.5x", id="trailing-garbage"),
        pytest.param(True, id="bool"),
    ],
)
def test_invalid_ratio(ratio: Any) -> None:
    with pytest.raises(ValueError, match="overhead ratio"):
        memory_overhead(VM_2C_4GI, ratio, "1.6")


def test_invalid_ratio_message_names_the_value() -> None:
    with pytest.raises(ValueError, match=r"'0\.5'.*smaller than 1\.0"):
        parse_overhead_ratio("0.5")


def test_invalid_ratio_is_rejected_even_where_ignored() -> None:
    with pytest.raises(ValueError, match="overhead ratio"):
        memory_overhead(VM_2C_4GI, "abc", "0.54")


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        pytest.param("0.54", KubeVirtVersion(0, 54, 0), id="0.54"),
        pytest.param("v1.6.3", KubeVirtVersion(1, 6, 3), id="v1.6.3"),
        pytest.param("1.8.3", KubeVirtVersion(1, 8, 3), id="1.8.3"),
        pytest.param(" 1.9 ", KubeVirtVersion(1, 9, 0), id="whitespace"),
        pytest.param("main", MAIN, id="main"),
        pytest.param("0.54.0-150400.3.19.1", KubeVirtVersion(0, 54, 0), id="suse-build"),
    ],
)
def test_parse_version(version: str, expected: KubeVirtVersion) -> None:
    assert parse_kubevirt_version(version) == expected


@pytest.mark.parametrize(
    "version",
    [
        pytest.param("0.53", id="too-old"),
        pytest.param("1.10", id="too-new"),
        pytest.param("2.0", id="v2"),
        pytest.param("v1", id="no-minor"),
        pytest.param("", id="empty"),
        pytest.param("latest", id="word"),
    ],
)
def test_unknown_version(version: str) -> None:
    with pytest.raises(ValueError, match="unknown KubeVirt version"):
        memory_overhead(VM_2C_4GI, None, version)


@pytest.mark.parametrize(
    "vmi",
    [
        pytest.param({"spec": []}, id="spec-not-an-object"),
        pytest.param(make_vmi(requests={"memory": "lots"}), id="bad-quantity"),
        pytest.param(make_vmi(requests={"memory": "-1Gi"}), id="negative-memory"),
        pytest.param(make_vmi(cpu={"cores": "2"}), id="cores-not-an-int"),
    ],
)
def test_malformed_vmi(vmi: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        memory_overhead(vmi)


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        pytest.param(None, "1.5", id="unset-means-the-default"),
        pytest.param("", "1.5", id="empty-means-the-default"),
        pytest.param("0", None, id="zero-clears"),
        pytest.param("0.0", None, id="zero-float-clears"),
        pytest.param("1.5", "1.5", id="default-value"),
        pytest.param("4.5", "4.5", id="raised"),
        pytest.param("10", "10", id="maximum"),
    ],
)
def test_ratio_from_harvester_setting(setting: str | None, expected: str | None) -> None:
    assert kubevirt_ratio_from_harvester_setting(setting) == expected


def test_ratio_from_harvester_setting_with_empty_default() -> None:
    assert kubevirt_ratio_from_harvester_setting("", default="") is None


@pytest.mark.parametrize("setting", ["abc", "0.5", "10.5", "-1"])
def test_ratio_from_harvester_setting_rejects(setting: str) -> None:
    with pytest.raises(ValueError, match="additional-guest-memory-overhead-ratio"):
        kubevirt_ratio_from_harvester_setting(setting)


# --------------------------------------------------------------------------------------------
# vCPUs


@pytest.mark.parametrize(
    ("domain", "expected"),
    [
        pytest.param({"cpu": {"cores": 2, "sockets": 1, "threads": 1}}, 2, id="topology"),
        pytest.param({"cpu": {"cores": 0, "sockets": 2, "threads": 2}}, 4, id="zero-cores-skipped"),
        pytest.param({"cpu": {"sockets": 3}}, 3, id="sockets-only"),
        pytest.param({"cpu": {}}, 1, id="empty-cpu-section-is-one"),
        pytest.param(
            {"resources": {"limits": {"cpu": "1500m"}, "requests": {"cpu": "4"}}},
            2,
            id="no-cpu-section-limit-rounded-up",
        ),
        pytest.param({"resources": {"requests": {"cpu": "3"}}}, 3, id="no-cpu-section-request"),
        pytest.param({}, 1, id="nothing"),
    ],
)
def test_vcpu_count(domain: dict[str, Any], expected: int) -> None:
    assert vcpu_count({"spec": {"domain": domain}}) == expected


# --------------------------------------------------------------------------------------------
# Optional parts, by version


def _delta(vmi: dict[str, Any], version: str, ratio: str | None = None) -> int:
    """Overhead of `vmi` minus that of the plain 2-core 4Gi VM."""
    return memory_overhead(vmi, ratio, version) - memory_overhead(VM_2C_4GI, ratio, version)


GUARANTEED = make_vmi(requests={"cpu": "2", "memory": "4Gi"})


def doubled(overhead: int) -> int:
    """An overhead after ratio "2": KubeVirt adds ceil(overhead / 1000) * 1000."""
    return overhead + -(-overhead // 1000) * 1000


def inside_ratio_2(part: int, vmi: dict[str, Any] | None = None, version: str = "1.6") -> int:
    """What `part` adds to the overhead of `vmi` (default: the plain VM) when ratio 2 multiplies it."""
    base = memory_overhead(vmi or VM_2C_4GI, None, version)
    return doubled(base + part) - doubled(base)


DEDICATED = make_vmi(cpu={"cores": 2, "sockets": 1, "threads": 1, "dedicatedCpuPlacement": True})
DEDICATED["spec"]["domain"]["resources"]["requests"] = {"cpu": "125m", "memory": "2730Mi"}


@pytest.mark.parametrize(
    ("vmi", "version", "ratio", "expected"),
    [
        pytest.param(
            with_devices(VM_2C_4GI, autoattachGraphicsDevice=False),
            "1.6",
            None,
            -32 * MI,
            id="no-video-v1.6",
        ),
        pytest.param(
            with_devices(VM_2C_4GI, autoattachGraphicsDevice=False),
            "1.5",
            None,
            -16 * MI,
            id="no-video-v1.5",
        ),
        pytest.param(
            with_spec(VM_2C_4GI, architecture="arm64"), "1.2", None, 128 * MI, id="arm64-v1.2"
        ),
        pytest.param(
            with_spec(VM_2C_4GI, architecture="arm64"),
            "1.1",
            None,
            0,
            id="arm64-spec-ignored-before-v1.2",
        ),
        pytest.param(
            with_devices(VM_2C_4GI, gpus=[{"name": "g", "deviceName": "nvidia.com/T4"}]),
            "1.6",
            None,
            1024 * MI,
            id="vfio-gpu",
        ),
        pytest.param(
            with_devices(VM_2C_4GI, hostDevices=[{"name": "h", "deviceName": "x.io/y"}]),
            "0.54",
            None,
            1024 * MI,
            id="vfio-hostdevice",
        ),
        pytest.param(
            with_devices(VM_2C_4GI, interfaces=[{"name": "sriov", "sriov": {}}]),
            "1.6",
            None,
            1024 * MI,
            id="vfio-sriov",
        ),
        pytest.param(
            with_spec(VM_2C_4GI, volumes=[{"name": "m", "downwardMetrics": {}}]),
            "1.6",
            None,
            1 * MI,
            id="downward-metrics",
        ),
        pytest.param(
            with_spec(VM_2C_4GI, livenessProbe={"exec": {"command": ["true"]}}),
            "1.6",
            None,
            110 * MI,
            id="exec-liveness",
        ),
        pytest.param(
            with_spec(
                VM_2C_4GI,
                livenessProbe={"exec": {"command": ["true"]}},
                readinessProbe={"exec": {"command": ["true"]}},
            ),
            "1.6",
            None,
            120 * MI,
            id="exec-liveness-and-readiness",
        ),
        pytest.param(
            with_spec(VM_2C_4GI, readinessProbe={"httpGet": {"port": 80}}),
            "1.6",
            None,
            0,
            id="http-probe-is-free",
        ),
        pytest.param(
            make_vmi(launchSecurity={"sev": {}}),
            "1.6",
            None,
            256 * MI,
            id="sev",
        ),
        pytest.param(make_vmi(launchSecurity={"snp": {}}), "1.6", None, 0, id="snp-v1.6"),
        pytest.param(make_vmi(launchSecurity={"snp": {}}), "1.7", None, 256 * MI, id="snp-v1.7"),
        pytest.param(with_devices(VM_2C_4GI, tpm={}), "1.6", None, 53 * MI, id="tpm"),
        pytest.param(
            with_devices(VM_2C_4GI, tpm={"enabled": False}), "1.6", None, 0, id="tpm-disabled"
        ),
        pytest.param(
            with_devices(VM_2C_4GI, tpm={"enabled": False}),
            "1.4.0",
            None,
            53 * MI,
            id="tpm-enabled-field-unknown-v1.4.0",
        ),
        pytest.param(
            with_devices(VM_2C_4GI, tpm={"enabled": False}),
            "1.4.1",
            None,
            0,
            id="tpm-disabled-v1.4.1",
        ),
        pytest.param(
            with_devices(VM_2C_4GI, tpm={"enabled": False}),
            "1.5.0",
            None,
            53 * MI,
            id="tpm-enabled-field-unknown-v1.5.0",
        ),
        pytest.param(DEDICATED, "1.0", None, 0, id="dedicated-v1.0-none"),
        pytest.param(DEDICATED, "1.1", None, 100 * MI, id="dedicated-v1.1"),
        pytest.param(DEDICATED, "1.1", "2", 100 * MI, id="dedicated-v1.1-after-ratio"),
        pytest.param(DEDICATED, "1.5.2", "2", 100 * MI, id="dedicated-v1.5.2-after-ratio"),
        pytest.param(
            DEDICATED,
            "1.5.3",
            "2",
            inside_ratio_2(100 * MI, version="1.5.3"),
            id="dedicated-v1.5.3-inside-ratio",
        ),
        pytest.param(
            DEDICATED, "1.6", "2", inside_ratio_2(100 * MI), id="dedicated-v1.6-inside-ratio"
        ),
        pytest.param(DEDICATED, "main", None, 100 * MI, id="dedicated-main"),
    ],
)
def test_optional_parts(
    vmi: dict[str, Any], version: str, ratio: str | None, expected: int
) -> None:
    assert _delta(vmi, version, ratio) == expected


def test_guaranteed_qos_reserves_like_dedicated_cpu() -> None:
    """requests == limits (cpu and memory) wants guaranteed QoS: +100Mi from v1.1."""
    base = memory_overhead(VM_2C_4GI_NO_OVERCOMMIT, None, "1.6")
    assert memory_overhead(GUARANTEED, None, "1.6") == base + 100 * MI
    assert memory_overhead(GUARANTEED, None, "1.0") == memory_overhead(
        VM_2C_4GI_NO_OVERCOMMIT, None, "1.0"
    )


@pytest.mark.parametrize(
    ("resources", "version", "expected"),
    [
        pytest.param(
            {"limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "2", "memory": "4Gi"}},
            "1.6",
            True,
            id="equal",
        ),
        pytest.param(
            {
                "limits": {"cpu": "2", "memory": "4Gi"},
                "requests": {"cpu": "2000m", "memory": "4096Mi"},
            },
            "1.6",
            True,
            id="equal-by-value",
        ),
        pytest.param(
            {"limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "2"}},
            "1.6",
            False,
            id="memory-limit-only-v1.6",
        ),
        pytest.param(
            {"limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "2"}},
            "1.7",
            True,
            id="memory-limit-only-v1.7",
        ),
        pytest.param(
            {"limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "125m", "memory": "4Gi"}},
            "1.7",
            False,
            id="cpu-overcommitted",
        ),
        pytest.param({"requests": {"cpu": "2", "memory": "4Gi"}}, "1.7", False, id="no-limits"),
    ],
)
def test_wants_guaranteed_qos(resources: dict[str, Any], version: str, expected: bool) -> None:
    vmi = {"spec": {"domain": {"resources": resources}}}
    assert wants_guaranteed_qos(vmi, version) is expected


def test_memory_limit_only_vmi_is_guaranteed_from_v1_7() -> None:
    vmi = make_vmi(limits={"cpu": "2", "memory": "4Gi"}, requests={"cpu": "2"})
    assert _delta(vmi, "1.7") - _delta(vmi, "1.6") == 100 * MI


PASST = with_devices(VM_2C_4GI, interfaces=[{"name": "default", "passt": {}}])
PASST_WITH_PORTS = with_devices(
    VM_2C_4GI, interfaces=[{"name": "default", "passt": {}, "ports": [{"port": 22}]}]
)
PASST_BINDING = with_devices(VM_2C_4GI, interfaces=[{"name": "default", "passtBinding": {}}])


@pytest.mark.parametrize(
    ("vmi", "version", "ratio", "expected"),
    [
        pytest.param(PASST, "0.58", None, 0, id="passt-v0.58-none"),
        pytest.param(PASST, "0.59", None, 800 * MI, id="passt-v0.59"),
        pytest.param(
            PASST,
            "1.2",
            "2",
            inside_ratio_2(800 * MI, version="1.2"),
            id="passt-v1.2-inside-ratio",
        ),
        pytest.param(PASST_WITH_PORTS, "1.2", None, 0, id="passt-with-ports"),
        pytest.param(PASST, "1.3", None, 0, id="passt-v1.3-none"),
        pytest.param(PASST_BINDING, "1.7", None, 0, id="passt-binding-v1.7"),
        pytest.param(PASST_BINDING, "1.8", None, 250 * MI, id="passt-binding-v1.8"),
        pytest.param(PASST_BINDING, "1.8", "2", 250 * MI, id="passt-binding-after-ratio"),
    ],
)
def test_passt(vmi: dict[str, Any], version: str, ratio: str | None, expected: int) -> None:
    assert _delta(vmi, version, ratio) == expected


def test_binding_plugin_memory_is_added_once_per_plugin_after_the_ratio() -> None:
    vmi = with_devices(
        VM_2C_4GI,
        interfaces=[
            {"name": "a", "binding": {"name": "slirp"}},
            {"name": "b", "binding": {"name": "slirp"}},
            {"name": "c", "binding": {"name": "unregistered"}},
        ],
    )
    bindings = {"slirp": {"computeResourceOverhead": {"requests": {"memory": "64Mi"}}}}
    base = memory_overhead(VM_2C_4GI, "2", "1.6")
    assert memory_overhead(vmi, "2", "1.6", network_bindings=bindings) == base + 64 * MI
    assert memory_overhead(vmi, "2", "1.2", network_bindings=bindings) == memory_overhead(
        VM_2C_4GI, "2", "1.2"
    )


def test_reserved_overhead_is_multiplied_from_v1_8() -> None:
    vmi = make_vmi(memory={"reservedOverhead": {"addedOverhead": "100Mi"}})
    assert _delta(vmi, "1.7", "2") == 0
    assert _delta(vmi, "1.8", "2") == inside_ratio_2(100 * MI, version="1.8")
    assert _delta(vmi, "1.8") == 100 * MI


def test_cluster_arch_fallback() -> None:
    arm = memory_overhead(VM_2C_4GI, None, "1.6", cluster_arch="arm64")
    assert arm - memory_overhead(VM_2C_4GI, None, "1.6") == 128 * MI
    amd_vmi = with_spec(VM_2C_4GI, architecture="amd64")
    assert memory_overhead(amd_vmi, None, "1.6", cluster_arch="arm64") == memory_overhead(
        VM_2C_4GI, None, "1.6"
    )


def test_details_name_the_parts() -> None:
    details = memory_overhead_details(DEDICATED, "1.5", "1.2")
    names = [name for name, _ in details.multiplied]
    assert names[:6] == [
        "pagetables",
        "virt-launcher-monitor",
        "virt-launcher",
        "virtlogd",
        "virtqemud",
        "qemu",
    ]
    assert [name for name, _ in details.unmultiplied] == ["dedicated-cpu"]
    assert details.ratio == 1.5
    assert details.total == memory_overhead(DEDICATED, "1.5", "1.2")


def test_a_memory_request_beyond_int64_is_a_value_error_not_an_overflow() -> None:
    """The quantity "1e400" parses; a tenant's VMI asking for it made the overhead's
    float() raise OverflowError, which the room estimate and MTQ's sizing did not expect (they
    catch ValueError): the namespace's plans failed on every reconcile."""
    vmi = copy.deepcopy(VM_2C_4GI)
    vmi["spec"]["domain"]["resources"] = {"requests": {"memory": "1e400"}}
    with pytest.raises(ValueError, match="overflows int64"):
        memory_overhead(vmi, "1.5", "1.6")
