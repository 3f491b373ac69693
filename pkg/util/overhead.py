"""The virt-launcher memory overhead, exactly as KubeVirt computes it, for KubeVirt v0.54 to v1.9.

A migration target pod is admitted by quota only if its *real* usage fits, and most of that usage is
the VMI's memory plus this overhead. KubeVirt's estimate changed many times (process sizes, video
RAM, where the dedicated-CPU reservation sits relative to the overhead ratio, passt, ...), sometimes
in patch releases, so the formula here is keyed by the full KubeVirt version. Every byte matches
KubeVirt's Go code: the page-table term is rounded through kilo-units before the division by 512,
and the overhead ratio is applied as `trunc(float64(ceil(overhead/1000)) * (ratio - 1)) * 1000`.

Sources (read, not copied): kubevirt/kubevirt `GetMemoryOverhead` in
`pkg/virt-controller/services/template.go` (v0.54, v0.55), `.../renderresources.go` (v0.56 to v1.7),
`pkg/hypervisor/kvm/hypervisorbackend.go` (v1.8 on), `CalculateMemoryOverhead` and the network
binding memory calculator. The version boundaries below were checked tag by tag.

The VMI is read through its typed view (vmispecview.py `SpecView`; a plain dict as the API server
returns it is adapted by `spec_view`). Missing fields mean "not set", as in Go; fields of the
wrong type are bad input and raise ValueError.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, TypedDict, Unpack

from .kubevirtversion import MAIN, NEWEST_KUBEVIRT_VERSION, KubeVirtVersion, parse_kubevirt_version
from .quantity import Quantity
from .vmispec import mapping_at, quantity_of
from .vmispecview import SpecView, spec_view, topology_vcpus

__all__ = [
    "HARVESTER_RATIO_DEFAULT",
    "MAIN",
    "NEWEST_KUBEVIRT_VERSION",
    "ClusterOptions",
    "KubeVirtVersion",
    "MemoryOverhead",
    "SpecSource",
    "as_spec",
    "dedicated_cpu",
    "kubevirt_ratio_from_harvester_setting",
    "memory_overhead",
    "memory_overhead_details",
    "pagetable_bytes",
    "parse_kubevirt_version",
    "parse_overhead_ratio",
    "topology_vcpus",
    "vcpu_count",
    "wants_guaranteed_qos",
]

MI: Final = 1024 * 1024
"""One MiB: KubeVirt writes every fixed part of the overhead in Mi."""

# ----------------------------------------------------------------------------------------------
# Versions


# ----------------------------------------------------------------------------------------------
# The overhead ratio (KubeVirt CR spec.configuration.additionalGuestMemoryOverheadRatio)

_GO_DECIMAL_FLOAT_RE: Final = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_GO_HEX_FLOAT_RE: Final = re.compile(
    r"[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?\d+"
)
_GO_SPECIAL_FLOAT_RE: Final = re.compile(r"[+-]?(?:inf|infinity)|nan", re.IGNORECASE)


def go_parse_float(text: str) -> float:
    """Go's strconv.ParseFloat(text, 64) for the inputs it accepts, or ValueError.

    Go and Python both round decimal input correctly to the nearest float64, so the value is the
    same bit pattern KubeVirt multiplies with. Unlike Python's float(), Go accepts no surrounding
    whitespace and no underscores in a decimal number.
    """
    if _GO_DECIMAL_FLOAT_RE.fullmatch(text):
        return float(text)
    if _GO_HEX_FLOAT_RE.fullmatch(text):
        return float.fromhex(text)
    if _GO_SPECIAL_FLOAT_RE.fullmatch(text):
        return float(text)
    raise ValueError(f"invalid overhead ratio {text!r}: not a number")


def parse_overhead_ratio(ratio: str | float | None) -> float | None:
    """The KubeVirt overhead ratio as a float, None when unset, or ValueError.

    Unset is None or "" (KubeVirt v1.1+ skips the empty string; v1.0 fails to parse it and also
    leaves the overhead unchanged, so the result is the same). Like KubeVirt's admission webhook we
    refuse anything that does not parse as a float64 and anything below 1.0; we also refuse NaN and
    infinities, which that webhook lets through but which would make KubeVirt's int64 conversion
    produce garbage.
    """
    if ratio is None:
        return None
    if isinstance(ratio, bool):
        raise ValueError(f"invalid overhead ratio {ratio!r}: not a number")
    if isinstance(ratio, str):
        if ratio == "":
            return None
        value = go_parse_float(ratio)
    elif isinstance(ratio, int | float):
        value = float(ratio)
    else:
        raise ValueError(f"invalid overhead ratio {ratio!r}: not a number")
    if not math.isfinite(value):
        raise ValueError(f"invalid overhead ratio {ratio!r}: must be a finite number")
    if value < 1.0:
        raise ValueError(f"invalid overhead ratio {ratio!r}: cannot be smaller than 1.0")
    return value


HARVESTER_RATIO_DEFAULT: Final = "1.5"
"""Harvester's default for the `additional-guest-memory-overhead-ratio` setting (v1.4+)."""

_HARVESTER_RATIO_MIN: Final = 1.0
_HARVESTER_RATIO_MAX: Final = 10.0


def kubevirt_ratio_from_harvester_setting(
    value: str | None, default: str | None = HARVESTER_RATIO_DEFAULT
) -> str | None:
    """What Harvester writes into the KubeVirt CR for `additional-guest-memory-overhead-ratio`.

    Harvester's setting controller uses the setting's value, or its default when the value is ""
    (so an empty value means "1.5", not "unset"). An effective value of "" or one that parses as 0
    clears the KubeVirt field (None here); any other valid value is copied as the string it is.
    Harvester refuses values that do not parse or lie outside 1.0..10.0 (and then leaves KubeVirt
    untouched): ValueError here.
    """
    effective = value if value else (default or "")
    if effective == "":
        return None
    try:
        ratio = go_parse_float(effective)
    except ValueError:
        raise ValueError(
            f"invalid additional-guest-memory-overhead-ratio {effective!r}: not a number"
        ) from None
    if ratio == 0.0:
        return None
    if not _HARVESTER_RATIO_MIN <= ratio <= _HARVESTER_RATIO_MAX:
        raise ValueError(
            f"invalid additional-guest-memory-overhead-ratio {effective!r}: "
            f"must be 0 (unset) or between {_HARVESTER_RATIO_MIN} and {_HARVESTER_RATIO_MAX}"
        )
    return effective


def _apply_ratio(overhead: int, ratio: float) -> int:
    """KubeVirt's multiplyMemory: the extra bytes the ratio adds to `overhead`.

    Go computes float64(overhead.ScaledValue(Kilo)) * (ratio - 1.0), truncates to int64 and scales
    back by 1000. A Python float is the same IEEE double, the subtraction and the multiplication
    round identically, and int() truncates toward zero like Go's conversion.
    """
    kilo = -(-overhead // 1000)  # ScaledValue(Kilo) rounds up
    if kilo >= 2**63:  # Go's int64 holds no such overhead (a quantity like 1e400, which parses)
        raise ValueError(f"a memory overhead of {overhead} bytes overflows int64")
    extra_kilo = float(kilo) * (ratio - 1.0)
    if extra_kilo >= 2.0**63:
        raise ValueError(f"overhead ratio {ratio!r} is too large: the overhead overflows int64")
    return int(extra_kilo) * 1000


# ----------------------------------------------------------------------------------------------
# Reading the VMI (its typed view, vmispecview.py)

SpecSource = SpecView | Mapping[str, Any]
"""A VMI as callers hold it: its spec view, or the full object (adapted by `spec_view`)."""


def as_spec(vmi: SpecSource) -> SpecView:
    """`vmi`'s spec view: itself if it is one, else adapted (ValueError for a malformed field)."""
    return vmi if isinstance(vmi, SpecView) else spec_view(vmi)


def vcpu_count(vmi: SpecSource) -> int:
    """The vCPU count the overhead is sized for (at least 1).

    From the CPU topology when spec.domain.cpu exists (even if all its counts are 0); otherwise from
    limits.cpu, else requests.cpu, rounded up to whole CPUs.
    """
    view = as_spec(vmi)
    if view.cpu is not None:
        vcpus = view.cpu.vcpus
    else:
        limit = view.resources.limits.get("cpu")
        request = view.resources.requests.get("cpu")
        if limit is not None:
            vcpus = limit.value()
        elif request is not None:
            vcpus = request.value()
        else:
            vcpus = 0
    return max(vcpus, 1)


def dedicated_cpu(vmi: SpecSource) -> bool:
    """VMI.IsCPUDedicated: spec.domain.cpu.dedicatedCpuPlacement."""
    cpu = as_spec(vmi).cpu
    return cpu is not None and cpu.dedicated


def wants_guaranteed_qos(vmi: SpecSource, version: str | KubeVirtVersion) -> bool:
    """VMI.WantsToHaveQOSGuaranteed for that KubeVirt version.

    CPU: requests.cpu is set, non-zero and equal to limits.cpu. Memory: requests.memory non-zero and
    equal to limits.memory; from v1.7 also a memory limit without a request (KubeVirt will copy the
    limit into the request).
    """
    kv = parse_kubevirt_version(version)
    resources = as_spec(vmi).resources
    zero = Quantity.from_int(0)
    req_mem = resources.requests.get("memory", zero)
    lim_mem = resources.limits.get("memory", zero)
    req_cpu = resources.requests.get("cpu", zero)
    lim_cpu = resources.limits.get("cpu", zero)
    memory_wants = not req_mem.is_zero() and req_mem == lim_mem
    if kv.at_least(1, 7):
        memory_wants = memory_wants or (req_mem.is_zero() and not lim_mem.is_zero())
    cpu_wants = not req_cpu.is_zero() and req_cpu == lim_cpu
    return memory_wants and cpu_wants


def _has_vfio(view: SpecView) -> bool:
    devices = view.devices
    return devices.gpus > 0 or devices.host_devices > 0 or any(i.sriov for i in devices.interfaces)


def _has_downward_metrics_disk(view: SpecView) -> bool:
    return any(v.downward_metrics for v in view.volumes)


def is_sev(vmi: SpecSource, version: KubeVirtVersion) -> bool:
    """SEV (and, from v1.7, SEV-SNP; SEV-ES is a SEV policy so it is covered by SEV)."""
    view = as_spec(vmi)
    return view.sev or (version.at_least(1, 7) and view.snp)


def _has_tpm(view: SpecView, version: KubeVirtVersion) -> bool:
    """A TPM device; from v1.4.1 / v1.5.1 one with `enabled: false` does not count."""
    if not view.devices.tpm:
        return False
    honours_enabled = version.between((1, 4, 1), (1, 5, 0)) or version.at_least(1, 5, 1)
    if not honours_enabled:
        return True
    enabled = view.devices.tpm_enabled
    return enabled is None or enabled


def _architecture(view: SpecView, version: KubeVirtVersion, cluster_arch: str) -> str:
    """v1.2+ sizes for spec.architecture (falling back to the cluster's); older for the cluster's."""
    if version.at_least(1, 2) and view.architecture:
        return view.architecture
    return cluster_arch


# ----------------------------------------------------------------------------------------------
# The formula


def pagetable_bytes(requests_memory: int) -> int:
    """Page tables for `requests_memory` bytes: KubeVirt rounds up to kilo-units, then //512."""
    if requests_memory < 0:
        raise ValueError(f"requests.memory must not be negative: {requests_memory}")
    kilo = -(-requests_memory // 1000)
    return kilo * 1000 // 512


_QEMU_50MI_SINCE: Final = (1, 10)
"""KubeVirt's main raised QemuOverhead from 30Mi to 50Mi after v1.9.0 (c822873795): v1.10 and main
(MAIN stands for both); every v1.9 patch release keeps 30Mi."""


def _process_rss_mib(version: KubeVirtVersion) -> tuple[tuple[str, int], ...]:
    """The fixed RSS of the launcher's processes, per release (changed in v0.55, v0.57, v0.58.1,
    v1.4.1, v1.5 and on main)."""
    launcher = 75 if not version.at_least(0, 55) else 100
    if not version.at_least(0, 57):
        virtlogd, daemon = 17, 33
    elif not version.at_least(0, 58, 1):
        virtlogd, daemon = 18, 35
    elif not version.at_least(1, 5):
        virtlogd, daemon = 20, 35
    else:
        virtlogd, daemon = 25, 35
    if version.at_least(1, 4, 1):  # v1.4.1 raised virtqemud to 40Mi before v1.5.0 shipped
        daemon = 40
    daemon_name = "libvirtd" if not version.at_least(0, 59) else "virtqemud"
    qemu = 50 if version.at_least(*_QEMU_50MI_SINCE) else 30
    return (
        ("virt-launcher-monitor", 25 * MI),
        ("virt-launcher", launcher * MI),
        ("virtlogd", virtlogd * MI),
        (daemon_name, daemon * MI),
        ("qemu", qemu * MI),
    )


def _supports_ratio(version: KubeVirtVersion) -> bool:
    """additionalGuestMemoryOverheadRatio exists from v0.58.2 and v0.59.1 (backports) on."""
    return version.between((0, 58, 2), (0, 59, 0)) or version.at_least(0, 59, 1)


@dataclass(frozen=True)
class MemoryOverhead:
    """KubeVirt's overhead for one VMI, with the parts it is made of (for logs and events)."""

    version: KubeVirtVersion
    multiplied: tuple[tuple[str, int], ...]
    """Parts the ratio multiplies (all of them before v1.1)."""
    ratio: float | None
    """The ratio applied, or None (unset, or not supported by that KubeVirt version)."""
    ratio_extra: int
    """Bytes the ratio added."""
    unmultiplied: tuple[tuple[str, int], ...]
    """Parts added after the ratio: dedicated CPU in v1.1 to v1.5.2, network bindings."""

    @property
    def total(self) -> int:
        return (
            sum(size for _, size in self.multiplied)
            + self.ratio_extra
            + sum(size for _, size in self.unmultiplied)
        )


def _base_parts(
    vmi: SpecView, version: KubeVirtVersion, cluster_arch: str
) -> list[tuple[str, int]]:
    """What every launcher needs: page tables, process RSS, vCPUs, an IOThread, video, firmware."""
    requests_memory = vmi.resources.requests.get("memory")
    pagetables = pagetable_bytes(0 if requests_memory is None else requests_memory.value())
    parts = [("pagetables", pagetables), *_process_rss_mib(version)]
    parts.append(("vcpus", 8 * MI * vcpu_count(vmi)))
    parts.append(("iothread", 8 * MI))
    autoattach_graphics = vmi.devices.autoattach_graphics
    if autoattach_graphics is None or autoattach_graphics:
        parts.append(("video", (32 if version.at_least(1, 6) else 16) * MI))
    if _architecture(vmi, version, cluster_arch) == "arm64":
        parts.append(("arm64-uefi-pflash", 128 * MI))
    return parts


def _feature_parts(vmi: SpecView, version: KubeVirtVersion) -> list[tuple[str, int]]:
    """Optional devices and features, each with its fixed reservation."""
    parts: list[tuple[str, int]] = []
    if _has_vfio(vmi):
        parts.append(("vfio", 1024 * MI))
    if _has_downward_metrics_disk(vmi):
        parts.append(("downward-metrics", 1 * MI))
    probes = [
        key
        for key, exec_probe in (
            ("livenessProbe", vmi.liveness_exec),
            ("readinessProbe", vmi.readiness_exec),
        )
        if exec_probe
    ]
    parts.extend((f"{key}-exec", 10 * MI) for key in probes)
    if probes:
        parts.append(("virt-probe", 100 * MI))
    if is_sev(vmi, version):
        parts.append(("sev", 256 * MI))
    if _has_tpm(vmi, version):
        parts.append(("tpm", 53 * MI))
    if version.between((0, 59, 0), (1, 3, 0)):
        # An 800Mi reservation per passt interface forwarding all ports, inside the ratio.
        parts.extend(
            ("passt", 800 * MI)
            for iface in vmi.devices.interfaces
            if iface.passt and iface.all_ports
        )
    return parts


def memory_overhead_details(
    vmi: SpecSource,
    ratio: str | float | None = None,
    kubevirt_version: str | KubeVirtVersion = "1.6",
    *,
    cluster_arch: str = "amd64",
    network_bindings: Mapping[str, Any] | None = None,
) -> MemoryOverhead:
    """The overhead KubeVirt adds to the compute container's memory, part by part.

    `ratio` is the KubeVirt CR's spec.configuration.additionalGuestMemoryOverheadRatio (validated
    even for versions that do not have the field; they ignore it, as the API server would prune
    it). `network_bindings` is spec.configuration.network.binding (plugins may declare
    computeResourceOverhead.requests.memory, added after the ratio from v1.3). `cluster_arch` is
    the cluster's default architecture, used when the VMI does not name one.
    """
    version = parse_kubevirt_version(kubevirt_version)
    parsed_ratio = parse_overhead_ratio(ratio)
    view = as_spec(vmi)
    parts = _base_parts(view, version, cluster_arch) + _feature_parts(view, version)

    unmultiplied: list[tuple[str, int]] = []
    wants_dedicated = dedicated_cpu(view) or wants_guaranteed_qos(view, version)
    if wants_dedicated and version.at_least(1, 1):
        # v1.1 to v1.5.2 add it after the ratio; v1.5.3 moved it before, so it is multiplied.
        (parts if version.at_least(1, 5, 3) else unmultiplied).append(("dedicated-cpu", 100 * MI))
    reserved = view.memory.added_overhead
    if version.at_least(1, 8) and reserved is not None:
        parts.append(("reserved-overhead", reserved.value()))

    applied_ratio = parsed_ratio if _supports_ratio(version) else None
    extra = 0
    if applied_ratio is not None:
        extra = _apply_ratio(sum(size for _, size in parts), applied_ratio)

    unmultiplied.extend(_network_binding_memory(view, version, network_bindings))
    return MemoryOverhead(
        version=version,
        multiplied=tuple(parts),
        ratio=applied_ratio,
        ratio_extra=extra,
        unmultiplied=tuple(unmultiplied),
    )


def _network_binding_memory(
    vmi: SpecView, version: KubeVirtVersion, network_bindings: Mapping[str, Any] | None
) -> list[tuple[str, int]]:
    """Memory of network bindings, added after the ratio: passt 250Mi (v1.8+), plus each distinct
    registered binding plugin's computeResourceOverhead.requests.memory (v1.3+)."""
    if not version.at_least(1, 3):
        return []
    result: list[tuple[str, int]] = []
    interfaces = vmi.devices.interfaces
    if version.at_least(1, 8) and any(i.passt_binding for i in interfaces):
        result.append(("passt-binding", 250 * MI))
    seen: set[str] = set()
    for iface in interfaces:
        name = iface.binding
        if name is None or name in seen or not network_bindings:
            continue
        plugin = network_bindings.get(name)
        if not isinstance(plugin, Mapping):
            continue
        seen.add(name)
        overhead = mapping_at(plugin, "computeResourceOverhead", f"binding {name}")
        requests = mapping_at(overhead, "requests", f"binding {name}.computeResourceOverhead")
        if requests.get("memory") is not None:
            memory = quantity_of(requests["memory"], f"binding {name} requests.memory")
            result.append((f"binding-{name}", memory.value()))
    return result


class ClusterOptions(TypedDict, total=False):
    """The keyword options of memory_overhead_details (which has their defaults): what the
    overhead reads of the cluster besides the KubeVirt CR's ratio and version."""

    cluster_arch: str
    network_bindings: Mapping[str, Any] | None


def memory_overhead(
    vmi: SpecSource,
    ratio: str | float | None = None,
    kubevirt_version: str | KubeVirtVersion = "1.6",
    **options: Unpack[ClusterOptions],
) -> int:
    """KubeVirt's virt-launcher memory overhead for `vmi`, in bytes.

    This is what KubeVirt adds to the compute container's memory request and limit (network binding
    memory included). See memory_overhead_details for the parameters and the parts.

    >>> vmi = {"spec": {"domain": {"cpu": {"cores": 2, "sockets": 1, "threads": 1},
    ...        "resources": {"limits": {"cpu": "2", "memory": "4Gi"},
    ...                      "requests": {"cpu": "200m", "memory": "2730Mi"}}}}}
    >>> memory_overhead(vmi, "1.5", "1.6")
    442497017
    """
    return memory_overhead_details(vmi, ratio, kubevirt_version, **options).total
