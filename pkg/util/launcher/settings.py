"""Everything outside a VMI that shapes the virt-launcher pod KubeVirt renders for it.

One frozen value, used alike by the controller (room estimates), the webhook (the VM-start check),
the KubeVirt simulator and the Harvester port. The defaults are KubeVirt's. Construction validates:
an impossible value is a `ValueError` naming the field, never a silently different pod.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ...generic.labelselector import selector_matches
from ..kubevirtversion import KubeVirtVersion, parse_kubevirt_version
from ..quantity import Quantity
from ..vmispec import mapping_at, quantity_of
from .featuregates import Gate, gate_enabled
from .limitrange import NO_DEFAULTS, ContainerDefaults, container_defaults

DEFAULT_KUBEVIRT_VERSION: Final = "1.6"

KVM_DEVICE: Final = "devices.kubevirt.io/kvm"
TUN_DEVICE: Final = "devices.kubevirt.io/tun"
VHOST_NET_DEVICE: Final = "devices.kubevirt.io/vhost-net"
VHOST_VSOCK_DEVICE: Final = "devices.kubevirt.io/vhost-vsock"
SEV_DEVICE: Final = "devices.kubevirt.io/sev"
PR_HELPER_DEVICE: Final = "devices.kubevirt.io/pr-helper"

AUTO_MEMORY_LIMITS_RATIO_LABEL: Final = "alpha.kubevirt.io/auto-memory-limits-ratio"
"""Namespace label: automatic memory limit = request x this ratio."""


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, not {value!r}")
    return value


@dataclass(frozen=True)
class LauncherSettings:
    """The cluster and namespace settings a launcher pod depends on (KubeVirt's defaults).

    Immutable and safe to share between tasks. `for_namespace` derives the per-namespace value from
    the cluster-wide one; nothing here reads the cluster.
    """

    ratio: str | float | None = None
    """KubeVirt CR spec.configuration.additionalGuestMemoryOverheadRatio, as stored (None: unset)."""
    kubevirt_version: str | KubeVirtVersion = DEFAULT_KUBEVIRT_VERSION
    """"0.54".."1.9", "v1.6.3", "main": selects every version-dependent rule."""
    cluster_arch: str = "amd64"
    """The cluster's default architecture (arm64 adds 128Mi of overhead)."""
    memory_overcommit: int = 100
    """developerConfiguration.memoryOvercommit, a percentage (v1.7+ derives a missing memory
    request from it)."""
    cpu_allocation_ratio: int = 10
    """developerConfiguration.cpuAllocationRatio: requests.cpu = vCPUs / it without a cpu request."""
    vm_rollout_live_update: bool = True
    """spec.configuration.vmRolloutStrategy is LiveUpdate or unset (KubeVirt's
    IsVMRolloutStrategyLiveUpdate): a running VM's CPU or memory edit is hot-plugged and the VMI
    migrated into a target pod rendered from the grown VMI (util/hotplug.py). False ("Stage"):
    KubeVirt never hot-plugs; the edit waits for a restart."""
    serial_console_log_disabled: bool = False
    """virtualMachineOptions.disableSerialConsoleLog is present: no guest-console-log container
    unless the VMI asks for one."""
    quota_has_limits_cpu: bool = False
    """Some ResourceQuota of the VMI's namespace has limits.cpu in spec.hard (automatic limits)."""
    quota_has_limits_memory: bool = False
    """Some ResourceQuota of the VMI's namespace has limits.memory in spec.hard."""
    auto_cpu_limit_namespace_match: bool = False
    """The namespace matches the CR's autoCPULimitNamespaceLabelSelector (`for_namespace` sets it
    from `auto_cpu_limit_namespace_selector` and the namespace's labels)."""
    auto_cpu_limit_namespace_selector: Mapping[str, Any] | None = None
    """spec.configuration.autoCPULimitNamespaceLabelSelector, a metav1.LabelSelector (None: unset,
    no namespace matches; an empty selector matches every namespace)."""
    auto_resource_limits_gate: bool = False
    """The AutoResourceLimitsGate feature gate (needed on v1.1 to v1.4)."""
    feature_gates: frozenset[str] = frozenset()
    """developerConfiguration.featureGates: the gates the CR turns on."""
    disabled_feature_gates: frozenset[str] = frozenset()
    """developerConfiguration.disabledFeatureGates: the gates the CR turns off (read from v1.8;
    from v1.9 a Beta gate is on unless listed here)."""
    auto_memory_limits_ratio: str | float | None = None
    """The namespace label alpha.kubevirt.io/auto-memory-limits-ratio (None: KubeVirt's 2.0)."""
    allow_emulation: bool = False
    """developerConfiguration.useEmulation: no kvm or vhost-net device."""
    support_container_resources: Sequence[Mapping[str, Any]] = ()
    """spec.configuration.supportContainerResources (v1.0+)."""
    network_bindings: Mapping[str, Any] | None = None
    """spec.configuration.network.binding: plugin memory overhead and sidecars."""
    network_resources: Mapping[str, str] | None = None
    """Network name -> device-plugin resource of its NetworkAttachmentDefinition
    (k8s.v1.cni.cncf.io/resourceName), e.g. for SR-IOV."""
    container_defaults: ContainerDefaults = NO_DEFAULTS
    """The namespace's LimitRange defaults for a container (limitrange.py): what admission
    adds to a launcher container without a limit or request of its own."""
    version: KubeVirtVersion = field(init=False, repr=False, compare=False)
    """`kubevirt_version`, parsed."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "version", parse_kubevirt_version(self.kubevirt_version))
        _positive_int(self.memory_overcommit, "memory_overcommit")
        _positive_int(self.cpu_allocation_ratio, "cpu_allocation_ratio")

    def for_namespace(
        self,
        namespace_quotas: Iterable[Mapping[str, Any]],
        namespace: Mapping[str, Any] | None = None,
        limit_ranges: Iterable[Mapping[str, Any]] | None = None,
    ) -> LauncherSettings:
        """The settings for one namespace: its quotas decide KubeVirt's automatic limits, its
        labels the automatic memory-limit ratio and whether the CR's
        autoCPULimitNamespaceLabelSelector selects it (an invalid selector selects nothing, as in
        KubeVirt), its LimitRanges the container defaults admission adds. Without `namespace`
        (KubeVirt: not in its cache) neither is changed, nor the defaults without
        `limit_ranges`. Pure: returns a new value."""
        keys: set[str] = set()
        for quota in namespace_quotas:
            hard = mapping_at(mapping_at(quota, "spec", "quota"), "hard", "spec")
            keys.update(str(key) for key in hard)
        changes: dict[str, Any] = {
            "quota_has_limits_cpu": "limits.cpu" in keys,
            "quota_has_limits_memory": "limits.memory" in keys,
        }
        if namespace is not None:
            labels = mapping_at(
                mapping_at(namespace, "metadata", "namespace"), "labels", "metadata"
            )
            changes["auto_memory_limits_ratio"] = labels.get(AUTO_MEMORY_LIMITS_RATIO_LABEL)
            if self.auto_cpu_limit_namespace_selector is not None:
                try:
                    match = selector_matches(self.auto_cpu_limit_namespace_selector, labels)
                except ValueError:
                    match = False
                changes["auto_cpu_limit_namespace_match"] = match
        if limit_ranges is not None:
            changes["container_defaults"] = container_defaults(limit_ranges)
        return dataclasses.replace(self, **changes)

    def gate(self, gate: Gate) -> bool:
        """Whether this KubeVirt version has `gate` on with this CR's gate lists
        (featuregates.gate_enabled)."""
        return gate_enabled(gate, self.version, self.feature_gates, self.disabled_feature_gates)

    def support_value(self, container_type: str, kind: str, name: str) -> Quantity | None:
        """GetSupportContainerRequest/Limit: the first non-zero override for that container type
        (supportContainerResources exists from KubeVirt v1.0)."""
        if not self.version.at_least(1, 0):
            return None
        for index, entry in enumerate(self.support_container_resources):
            if not isinstance(entry, Mapping) or entry.get("type") != container_type:
                continue
            where = f"supportContainerResources[{index}]"
            resources = mapping_at(entry, "resources", where)
            raw = mapping_at(resources, kind, f"{where}.resources").get(name)
            if raw is not None:
                quantity = quantity_of(raw, f"{where}.resources.{kind}.{name}")
                if not quantity.is_zero():
                    return quantity
        return None


DEFAULT_LAUNCHER_SETTINGS: Final = LauncherSettings()
"""KubeVirt's defaults at version 1.6."""
