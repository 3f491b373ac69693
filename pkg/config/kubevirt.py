"""The cluster settings that decide what KubeVirt renders for a migration target pod.

A room estimated before the target pod exists must equal the pod KubeVirt will create, or the first
quota write is wrong and a third write follows. So the estimate reads what KubeVirt reads:

- the overhead ratio from the KubeVirt CR (``spec.configuration.additionalGuestMemoryOverheadRatio``),
  which Harvester fills from its setting ``additional-guest-memory-overhead-ratio``; without a
  visible KubeVirt CR, the Harvester setting itself (its value, else its default, else "1.5");
- the KubeVirt version from the CR's ``status.observedKubeVirtVersion`` unless one is configured;
- memory overcommit, CPU allocation ratio and serial-console logging from the CR;
- whether a quota of the namespace limits cpu or memory (KubeVirt's automatic limits).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pkg.util.overhead import kubevirt_ratio_from_harvester_setting
from pkg.util.podusage import LauncherOptions

log = logging.getLogger(__name__)

RATIO_SETTING = "additional-guest-memory-overhead-ratio"
DEFAULT_KUBEVIRT_VERSION = "1.6"


def _get(obj: Mapping[str, Any] | None, *path: str) -> Any:
    value: Any = obj
    for part in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


@dataclass(frozen=True)
class KubeVirtSettings:
    """The cluster-wide part of the launcher options."""

    ratio: str | None
    kubevirt_version: str
    memory_overcommit: int
    cpu_allocation_ratio: int
    serial_console_log_disabled: bool

    def launcher_options(self, namespace_quotas: Iterable[Mapping[str, Any]]) -> LauncherOptions:
        """The options for one namespace, whose quotas decide KubeVirt's automatic limits."""
        keys: set[str] = set()
        for quota in namespace_quotas:
            keys.update((_get(quota, "spec", "hard") or {}).keys())
        return LauncherOptions(
            ratio=self.ratio,
            kubevirt_version=self.kubevirt_version,
            memory_overcommit=self.memory_overcommit,
            cpu_allocation_ratio=self.cpu_allocation_ratio,
            serial_console_log_disabled=self.serial_console_log_disabled,
            quota_has_limits_cpu="limits.cpu" in keys,
            quota_has_limits_memory="limits.memory" in keys,
        )


def ratio_from_setting(setting: Mapping[str, Any] | None) -> str | None:
    """Harvester's ratio: the setting's value, else its default, else "1.5" (Harvester's default)."""
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
) -> KubeVirtSettings:
    """What KubeVirt will render with, from its CR (if visible) and Harvester's setting."""
    configuration = _get(kubevirt, "spec", "configuration") or {}
    if kubevirt is not None:
        raw_ratio = configuration.get("additionalGuestMemoryOverheadRatio")
        ratio = str(raw_ratio) if raw_ratio not in (None, "") else None
    else:
        ratio = ratio_from_setting(setting)
    version = configured_version or str(
        _get(kubevirt, "status", "observedKubeVirtVersion") or DEFAULT_KUBEVIRT_VERSION
    )
    developer = configuration.get("developerConfiguration") or {}
    return KubeVirtSettings(
        ratio=ratio,
        kubevirt_version=version,
        memory_overcommit=int(developer.get("memoryOvercommit") or 100),
        cpu_allocation_ratio=int(developer.get("cpuAllocationRatio") or 10),
        # An empty object there disables it: presence is what counts.
        serial_console_log_disabled=_get(
            configuration, "virtualMachineOptions", "disableSerialConsoleLog"
        )
        is not None,
    )
