"""The cluster settings that decide what KubeVirt renders for a migration target pod.

A room estimated before the target pod exists must equal the pod KubeVirt will create, or the first
quota write is wrong and a third write follows. So the estimate reads what KubeVirt reads:

- the overhead ratio from the KubeVirt CR (``spec.configuration.additionalGuestMemoryOverheadRatio``),
  which Harvester fills from its setting ``additional-guest-memory-overhead-ratio``; without a
  visible KubeVirt CR, the Harvester setting itself (its value, else its default, else "1.5");
- the KubeVirt version from the CR's ``status.observedKubeVirtVersion`` unless one is configured;
- memory overcommit, CPU allocation ratio and serial-console logging from the CR;
- the VM rollout strategy from the CR (``spec.configuration.vmRolloutStrategy``): whether a running
  VM's CPU or memory edit is hot-plugged, which decides the migration target pod it leads to;
- from the CR too: the feature gates (AutoResourceLimitsGate; ImageVolume and
  ExternalNetResourceInjection as each KubeVirt version reads featureGates and
  disabledFeatureGates, see util/launcher/featuregates.py), emulation (no kvm or vhost-net
  device), the support containers' resources, the network binding plugins (memory overhead and
  sidecars) and the autoCPULimitNamespaceLabelSelector;
- the architecture virt-controller sizes a VMI without ``spec.architecture`` for: its own
  (Go's runtime.GOARCH), which we take to be ours, the sidecar running in the same cluster. The CR's
  ``architectureConfiguration.defaultArchitecture`` is not it: virt-api writes that into
  ``spec.architecture`` of new VMIs, where the overhead formula reads it;
- whether a quota of the namespace limits cpu or memory (KubeVirt's automatic limits), and the
  namespace's labels (`LauncherSettings.for_namespace`).

Not read: the device-plugin resource of a Multus network's NetworkAttachmentDefinition
(``k8s.v1.cni.cncf.io/resourceName``, e.g. SR-IOV), which would need an informer of that optional
CRD; `LauncherSettings.network_resources` stays empty, so a VMI on such a network is estimated
without that device (not a quota key unless a quota names ``requests.<resource>``).
"""

from __future__ import annotations

import logging
import platform
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ..apis.harvester import RATIO_SETTING
from ..generic.labelselector import LabelSelector
from ..util.kubevirtversion import (
    NEWEST_KUBEVIRT_VERSION,
    is_newer_than_known,
    parse_kubevirt_version,
)
from ..util.launcher import LauncherSettings
from ..util.launcher.settings import DEFAULT_KUBEVIRT_VERSION
from ..util.overhead import kubevirt_ratio_from_harvester_setting
from ..util.quantity import Quantity

log = logging.getLogger(__name__)

AUTO_RESOURCE_LIMITS_GATE: Final = "AutoResourceLimitsGate"

_GOARCH: Final = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "s390x": "s390x",
    "ppc64le": "ppc64le",
}


def host_architecture(machine: str | None = None) -> str:
    """This process's architecture as Go names it (runtime.GOARCH); amd64 if unknown."""
    raw = (machine if machine is not None else platform.machine()).lower()
    return _GOARCH.get(raw, "amd64")


def _get(obj: Mapping[str, Any] | None, *path: str) -> Any:
    value: Any = obj
    for part in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def ratio_from_setting(setting: Mapping[str, Any] | None) -> str | None:
    """Harvester's ratio: the setting's value, else its default, else "1.5" (Harvester's default).

    Harvester's `GetAdditionalGuestMemoryOverheadRatioWithoutError` (and
    `GetAdditionalGuestMemoryOverheadRatio`, which returns the error instead of logging it); read
    only when the KubeVirt CR, which carries the ratio in force, is not cached (`settings_from`)."""
    value = None
    if setting is not None:
        value = setting.get("value") or setting.get("default")
    try:
        return kubevirt_ratio_from_harvester_setting(value)
    except ValueError as error:
        log.warning(
            "setting %s is invalid (%s); using Harvester's default 1.5", RATIO_SETTING, error
        )
        return kubevirt_ratio_from_harvester_setting(None)


def settings_from(
    kubevirt: Mapping[str, Any] | None,
    setting: Mapping[str, Any] | None,
    *,
    configured_version: str | None = None,
    cluster_arch: str | None = None,
) -> LauncherSettings:
    """The cluster-wide launcher settings KubeVirt renders with, from its CR (if visible) and
    Harvester's setting. Per-namespace parts stay at their defaults: apply
    `LauncherSettings.for_namespace` for a namespace. `cluster_arch` defaults to this host's
    architecture (see the module's docstring). An unusable value is reported once and replaced
    by KubeVirt's default, never an error."""
    configuration = _get(kubevirt, "spec", "configuration")
    if not isinstance(configuration, Mapping):
        configuration = {}
    if kubevirt is not None:
        raw_ratio = configuration.get("additionalGuestMemoryOverheadRatio")
        ratio = str(raw_ratio) if raw_ratio not in (None, "") else None
    else:
        ratio = ratio_from_setting(setting)
    version = configured_version or _known_version(
        _get(kubevirt, "status", "observedKubeVirtVersion")
    )
    developer = configuration.get("developerConfiguration")
    if not isinstance(developer, Mapping):
        developer = {}
    enabled_gates = _feature_gates(developer, "featureGates")
    return LauncherSettings(
        ratio=ratio,
        kubevirt_version=version,
        cluster_arch=cluster_arch if cluster_arch is not None else host_architecture(),
        memory_overcommit=_positive_int(developer, "memoryOvercommit", 100),
        cpu_allocation_ratio=_positive_int(developer, "cpuAllocationRatio", 10),
        vm_rollout_live_update=configuration.get("vmRolloutStrategy") in (None, "LiveUpdate"),
        # An empty object there disables it: presence is what counts.
        serial_console_log_disabled=_get(
            configuration, "virtualMachineOptions", "disableSerialConsoleLog"
        )
        is not None,
        auto_resource_limits_gate=AUTO_RESOURCE_LIMITS_GATE in enabled_gates,
        feature_gates=enabled_gates,
        disabled_feature_gates=_feature_gates(developer, "disabledFeatureGates"),
        allow_emulation=_flag(developer, "useEmulation"),
        support_container_resources=_support_containers(
            configuration.get("supportContainerResources")
        ),
        network_bindings=_network_bindings(_get(configuration, "network", "binding")),
        auto_cpu_limit_namespace_selector=_namespace_selector(
            configuration.get("autoCPULimitNamespaceLabelSelector")
        ),
    )


_reported: set[str] = set()
"""Values already logged as unusable, so a reconcile loop reports each one once, not per run."""


def _report_once(key: str, message: str, *args: Any) -> None:
    if key not in _reported:
        _reported.add(key)
        log.warning(message, *args)


def _known_version(observed: Any) -> str:
    """The KubeVirt CR's observed version if we know its launcher formula, else the closest we do.

    A KubeVirt newer than this release (or a "devel" build) must not make every room estimate and
    every VM-start check fail. A release after v1.9 (v1.10.0, a main build's v1.10.0-alpha.0-...)
    was cut from main, and so is a "devel" build: both are computed as "main" (QEMU's 50Mi
    included; were it v1.9 after all, a room 20Mi too large is the harmless side, a room 20Mi
    too small refuses the target); anything else unknown as the newest release. Either is
    reported once; --kubevirt-version overrides it.
    """
    text = str(observed) if observed not in (None, "") else DEFAULT_KUBEVIRT_VERSION
    try:
        parse_kubevirt_version(text)
    except ValueError as error:
        fallback = known_fallback(text)
        _report_once(
            f"version:{text}",
            "%s; computing launcher pods as KubeVirt %s does (set --kubevirt-version to choose)",
            error,
            fallback,
        )
        return fallback
    return text


def known_fallback(version: str) -> str:
    """The version whose launcher formula stands in for `version`, which we do not know: "main"
    for a release after the newest we know or a "devel" build, else the newest release."""
    newer = is_newer_than_known(version) or version.strip() == DEVEL
    return "main" if newer else NEWEST_KUBEVIRT_VERSION


DEVEL: Final = "devel"
"""The version a KubeVirt built from its main branch without a tag reports."""


def _positive_int(developer: Mapping[str, Any], key: str, default: int) -> int:
    """A developerConfiguration number, or KubeVirt's default when it is absent or unusable."""
    value = developer.get(key)
    if value in (None, ""):
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if number <= 0:
        _report_once(
            f"{key}:{value}",
            "KubeVirt developerConfiguration.%s=%r is not a positive whole number; using %d",
            key,
            value,
            default,
        )
        return default
    return number


def _feature_gates(developer: Mapping[str, Any], key: str) -> frozenset[str]:
    """developerConfiguration's featureGates or disabledFeatureGates (names); unusable: none."""
    gates = developer.get(key)
    if gates is None:
        return frozenset()
    if isinstance(gates, str) or not isinstance(gates, Sequence):
        _report_once(
            f"{key}:{gates!r}",
            "KubeVirt developerConfiguration.%s=%r is not a list; assuming none",
            key,
            gates,
        )
        return frozenset()
    return frozenset(gate for gate in gates if isinstance(gate, str))


def _flag(developer: Mapping[str, Any], key: str) -> bool:
    """A developerConfiguration boolean; unusable: KubeVirt's default false."""
    value = developer.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        _report_once(
            f"{key}:{value!r}",
            "KubeVirt developerConfiguration.%s=%r is not a boolean; using false",
            key,
            value,
        )
        return False
    return value


def _quantities_parse(resources: Any, where: str) -> None:
    """Raises ValueError unless `resources` holds requests/limits of parsable quantities."""
    if resources is None:
        return
    if not isinstance(resources, Mapping):
        raise ValueError(f"{where} is not an object")
    for kind in ("requests", "limits"):
        values = resources.get(kind)
        if values is None:
            continue
        if not isinstance(values, Mapping):
            raise ValueError(f"{where}.{kind} is not an object")
        for raw in values.values():
            Quantity.parse(str(raw))


def _support_containers(raw: Any) -> tuple[Mapping[str, Any], ...]:
    """spec.configuration.supportContainerResources; an unusable entry is left out."""
    if raw is None:
        return ()
    if isinstance(raw, str) or not isinstance(raw, Sequence):
        _report_once(
            f"supportContainerResources:{raw!r}",
            "KubeVirt supportContainerResources=%r is not a list; using the default resources",
            raw,
        )
        return ()
    entries = []
    for index, entry in enumerate(raw):
        where = f"supportContainerResources[{index}]"
        try:
            if not isinstance(entry, Mapping) or not isinstance(entry.get("type"), str):
                raise ValueError(f"{where} is not an object with a type")
            _quantities_parse(entry.get("resources"), f"{where}.resources")
        except ValueError as error:
            _report_once(
                f"{where}:{entry!r}",
                "KubeVirt %s is unusable (%s); its container keeps the default resources",
                where,
                error,
            )
            continue
        entries.append(entry)
    return tuple(entries)


def _network_bindings(raw: Any) -> Mapping[str, Any] | None:
    """spec.configuration.network.binding: plugin name -> plugin; an unusable plugin is left out
    (a VMI using it then fails to render, as it would in KubeVirt)."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        _report_once(
            f"binding:{raw!r}",
            "KubeVirt network.binding=%r is not an object; assuming no binding plugins",
            raw,
        )
        return None
    plugins: dict[str, Any] = {}
    for name, plugin in raw.items():
        try:
            if not isinstance(plugin, Mapping):
                raise ValueError("not an object")
            _quantities_parse(plugin.get("computeResourceOverhead"), "computeResourceOverhead")
        except ValueError as error:
            _report_once(
                f"binding:{name}:{plugin!r}",
                "KubeVirt network binding plugin %s is unusable (%s); left out",
                name,
                error,
            )
            continue
        plugins[str(name)] = plugin
    return plugins


def _namespace_selector(raw: Any) -> Mapping[str, Any] | None:
    """autoCPULimitNamespaceLabelSelector; an invalid one selects nothing (KubeVirt: "assuming
    none")."""
    if raw is None:
        return None
    try:
        LabelSelector.parse(raw)
    except ValueError as error:
        _report_once(
            f"autoCPULimitNamespaceLabelSelector:{raw!r}",
            "KubeVirt autoCPULimitNamespaceLabelSelector is invalid (%s); assuming none",
            error,
        )
        return None
    selector: Mapping[str, Any] = raw
    return selector
