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
from collections.abc import Mapping
from typing import Any

from ..apis.harvester import RATIO_SETTING
from ..util.launcher import LauncherSettings
from ..util.launcher.settings import DEFAULT_KUBEVIRT_VERSION
from ..util.overhead import (
    NEWEST_KUBEVIRT_VERSION,
    kubevirt_ratio_from_harvester_setting,
    parse_kubevirt_version,
)

log = logging.getLogger(__name__)


def _get(obj: Mapping[str, Any] | None, *path: str) -> Any:
    value: Any = obj
    for part in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


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
) -> LauncherSettings:
    """The cluster-wide launcher settings KubeVirt renders with, from its CR (if visible) and
    Harvester's setting. Per-namespace parts stay at their defaults: apply
    `LauncherSettings.for_namespace` for a namespace."""
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
    return LauncherSettings(
        ratio=ratio,
        kubevirt_version=version,
        memory_overcommit=_positive_int(developer, "memoryOvercommit", 100),
        cpu_allocation_ratio=_positive_int(developer, "cpuAllocationRatio", 10),
        # An empty object there disables it: presence is what counts.
        serial_console_log_disabled=_get(
            configuration, "virtualMachineOptions", "disableSerialConsoleLog"
        )
        is not None,
    )


_reported: set[str] = set()
"""Values already logged as unusable, so a reconcile loop reports each one once, not per run."""


def _report_once(key: str, message: str, *args: Any) -> None:
    if key not in _reported:
        _reported.add(key)
        log.warning(message, *args)


def _known_version(observed: Any) -> str:
    """The KubeVirt CR's observed version if we know its launcher formula, else the newest we do.

    A KubeVirt newer than this release (or a "devel" build) must not make every room estimate and
    every VM-start check fail: the newest formula is the closest guess, and --kubevirt-version
    overrides it.
    """
    text = str(observed) if observed not in (None, "") else DEFAULT_KUBEVIRT_VERSION
    try:
        parse_kubevirt_version(text)
    except ValueError as error:
        _report_once(
            f"version:{text}",
            "%s; computing launcher pods as KubeVirt %s does (set --kubevirt-version to choose)",
            error,
            NEWEST_KUBEVIRT_VERSION,
        )
        return NEWEST_KUBEVIRT_VERSION
    return text


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
