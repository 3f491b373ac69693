"""The room Harvester v1.9's own controllers give one migration (pure): what `preflight
--strategy harvester` judges a target pod against.

Harvester scales one quota, the first labelled as Rancher's default, and only when the namespace
carries Rancher's annotation with a non-zero limitsCpu or limitsMemory, the quota limits one of
those two keys, the skip annotation is not "true" and the VMI sets cpu or memory limits. Its share
of a VM is the VMI's limits.cpu and its limits.memory plus KubeVirt's memory overhead of the
compute container, on the keys the quota already has: nothing on requests.*, pods or ephemeral
storage, nothing for the sidecars (the guest-console-log's 15m CPU and 60M memory). After a
refusal it compensates limits.memory (used + share - hard + 128Mi), never limits.cpu.

The test bench's port (harvester_quota.testbench.strategy.harvester) is the faithful copy of the
Go code; this is the small model of its outcome, checked against that port by
tests/unit/test_harvester_room.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ..generic.meta import annotations_of
from ..util.annotations import ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING
from ..util.kubevirtversion import KubeVirtVersion
from ..util.overhead import HARVESTER_RATIO_DEFAULT, go_parse_float, memory_overhead
from ..util.quantity import Quantity
from ..util.resourcequota.base import managed_quota, rancher_base
from ..util.resources import ResourceList, parse_resource_list_leniently

LIMITS_CPU: Final = "limits.cpu"
LIMITS_MEMORY: Final = "limits.memory"
HARVESTER_ARCH: Final = "amd64"
"""Harvester passes its own binary's architecture to KubeVirt's overhead formula."""
_RATIO_RANGE: Final = (1.0, 10.0)
"""Harvester's allowed range for its overhead-ratio setting; outside it (or 0) it uses 1.5."""


@dataclass(frozen=True)
class HarvesterRoom:
    """What Harvester raises for one migration: on which quota, by how much per key, whether it
    compensates limits.memory after a refusal, and if it raises nothing, why."""

    quota: str | None
    share: ResourceList = field(default_factory=dict)
    compensates_memory: bool = False
    why_none: str = ""


def harvester_ratio(setting: Mapping[str, Any] | None) -> str:
    """The overhead ratio Harvester scales with: its setting's value, else default, else 1.5; a
    value that does not parse, is 0 or lies outside 1..10 also gives 1.5."""
    if setting is None:
        return HARVESTER_RATIO_DEFAULT
    value = str(setting.get("value") or "") or str(setting.get("default") or "")
    if not value:
        return HARVESTER_RATIO_DEFAULT
    try:
        ratio = go_parse_float(value)
    except ValueError:
        return HARVESTER_RATIO_DEFAULT
    low, high = _RATIO_RANGE
    return value if low <= ratio <= high else HARVESTER_RATIO_DEFAULT


def _vmi_limits(vmi: Mapping[str, Any]) -> ResourceList:
    spec = vmi.get("spec") or {}
    domain = spec.get("domain") if isinstance(spec, Mapping) else None
    resources = domain.get("resources") if isinstance(domain, Mapping) else None
    limits = resources.get("limits") if isinstance(resources, Mapping) else None
    return parse_resource_list_leniently(limits)


def _positive(values: Mapping[str, Quantity], key: str) -> bool:
    value = values.get(key)
    return value is not None and value.sign() > 0


def _why_no_room(
    namespace: Mapping[str, Any], quota: Mapping[str, Any], limits: ResourceList
) -> str | None:
    """Harvester's early returns before it scales, in words; None when it scales."""
    hard = parse_resource_list_leniently((quota.get("spec") or {}).get("hard"))
    if annotations_of(quota).get(ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING) == "true":
        return "the quota carries the skip annotation"
    try:
        base = rancher_base(namespace) or {}
    except ValueError as error:
        return f"Rancher's annotation is invalid: {error}"
    if not (_positive(base, LIMITS_CPU) or _positive(base, LIMITS_MEMORY)):
        return "no limitsCpu or limitsMemory in Rancher's namespace annotation"
    if not (_positive(hard, LIMITS_CPU) or _positive(hard, LIMITS_MEMORY)):
        return "the quota limits neither limits.cpu nor limits.memory"
    if not (_positive(limits, "cpu") or _positive(limits, "memory")):
        return "the VMI sets no cpu or memory limits"
    return None


def harvester_room(
    namespace: Mapping[str, Any],
    quotas: Iterable[Mapping[str, Any]],
    vmi: Mapping[str, Any],
    *,
    ratio: str,
    kubevirt_version: str | KubeVirtVersion,
) -> HarvesterRoom:
    """Harvester's raise for a migration of `vmi` in `namespace` with these quotas."""
    quota = managed_quota(quotas)
    if quota is None:
        return HarvesterRoom(None, why_none="no quota labelled as Rancher's default")
    quota_name = str((quota.get("metadata") or {}).get("name"))
    limits = _vmi_limits(vmi)
    why = _why_no_room(namespace, quota, limits)
    if why is not None:
        return HarvesterRoom(quota_name, why_none=why)
    hard = parse_resource_list_leniently((quota.get("spec") or {}).get("hard"))
    share: ResourceList = {}
    if _positive(limits, "cpu") and LIMITS_CPU in hard:
        share[LIMITS_CPU] = limits["cpu"]
    if _positive(limits, "memory") and LIMITS_MEMORY in hard:
        overhead = memory_overhead(vmi, ratio, kubevirt_version, cluster_arch=HARVESTER_ARCH)
        share[LIMITS_MEMORY] = limits["memory"] + Quantity.from_int(overhead)
    base = rancher_base(namespace) or {}
    compensates = (
        _positive(limits, "memory")
        and _positive(hard, LIMITS_MEMORY)
        and _positive(base, LIMITS_MEMORY)
    )
    return HarvesterRoom(quota_name, share, compensates_memory=compensates)
