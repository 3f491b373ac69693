"""Would a migration's target pod be admitted by quota, with the room a strategy gives? (pure)

Quota admission charges a new pod against every ResourceQuota of its namespace whose scopes match
it, on the keys both the quota's spec.hard and the pod have: used + the pod's usage must stay
within hard, and a quota limiting cpu or memory also wants every container to state it. A target
pod is judged alone against the quotas as they are now: a target that does not fit alone never
will (the migrations that get through free their source pod's share only as their target takes
it), a block. One that fits alone may still wait: the targets of one namespace's migrations stack
while their source launchers count, and delays.py says which wait and for how long at most.

The room each strategy adds to spec.hard for one migration:

- ``ours`` (harvester-quota): with a VMMRQ in the namespace (MTQ mode), its budget on every quota,
  key by key (``mtq.raise_hard``); otherwise on the managed quota with a known base, the
  controller's ``plan.desired_hard`` with the whole target pod as the room (compensation as
  arithmetic: each base key the pod uses at max(base, used) + its share, the others at their base),
  unless the quota carries the skip annotation. On Rancher's path the raise must also fit the
  Rancher project (rancher/project.py); a raise it has no room for is never written. Any other quota
  gets nothing.
- ``harvester`` (Harvester v1.9): the room Harvester's own controllers give one migration
  (`harvester_room`). Harvester scales one quota, the first labelled as Rancher's default, and
  only when the namespace carries Rancher's annotation with a non-zero limitsCpu or limitsMemory,
  the quota limits one of those two keys, the skip annotation is not "true" and the VMI sets cpu
  or memory limits. Its share of a VM is the VMI's limits.cpu and its limits.memory plus
  KubeVirt's memory overhead of the compute container, on the keys the quota already has:
  nothing on requests.*, pods or ephemeral storage, nothing for the sidecars (the
  guest-console-log's 15m CPU and 60M memory). After a refusal it compensates limits.memory
  (used + share - hard + 128Mi), never limits.cpu. The test bench's port
  (harvester_quota.testbench.strategy.harvester) is the faithful copy of the Go code; this is
  the small model of its outcome, checked against that port by tests/unit/test_harvester_room.py.
- ``none`` (plain KubeVirt, no quota controller): nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from ..apis.mtq import Vmmrq
from ..generic.meta import annotations_of, name
from ..util.annotations import (
    ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING,
    parse_migration_annotations,
)
from ..util.kubevirtversion import KubeVirtVersion
from ..util.launcher.parts import RenderedPart
from ..util.mtq import budget_of, quota_view, raise_hard
from ..util.overhead import HARVESTER_RATIO_DEFAULT, go_parse_float, memory_overhead
from ..util.podusage import (
    KUBERNETES_1_36,
    QuotaFeatures,
    quota_constraint_violations,
    usage_constraint_violations,
)
from ..util.quantity import Quantity
from ..util.quotascope import PodScopeFacts, QuotaScope
from ..util.rancher.project import ProjectQuota, describe_shortfall, raise_verdict
from ..util.resourcequota.base import (
    RANCHER,
    BaseError,
    Mode,
    managed_quota,
    rancher_base,
    rancher_base_text,
    resolve_base,
    shortfalls,
)
from ..util.resourcequota.plan import desired_hard
from ..util.resourcequota.raises import raise_records
from ..util.resourcequota.rancherpath import raised_annotation
from ..util.resources import ResourceList, add, parse_resource_list_leniently
from .report import Blocker, QuotaShortfall

Strategy = Literal["ours", "harvester", "none"]
STRATEGIES: Final = ("ours", "harvester", "none")
_COMPENSATION_MARGIN: Final = Quantity.from_int(128 << 20, "BinarySI")
"""Harvester's margin on a memory compensation (128Mi)."""
LIMITS_CPU: Final = "limits.cpu"
LIMITS_MEMORY: Final = "limits.memory"
HARVESTER_ARCH: Final = "amd64"
"""Harvester passes its own binary's architecture to KubeVirt's overhead formula."""
_RATIO_RANGE: Final = (1.0, 10.0)
"""Harvester's allowed range for its overhead-ratio setting; outside it (or 0) it uses 1.5."""


@dataclass(frozen=True)
class NamespaceContext:
    """What admission and the strategies read about one namespace."""

    namespace: Mapping[str, Any]
    quotas: Sequence[Mapping[str, Any]]
    vmmrqs: Sequence[Vmmrq] = ()
    project: ProjectQuota | None = None
    project_members: Sequence[Mapping[str, Any]] = ()
    harvester_ratio: str = "1.5"
    kubevirt_version: str | KubeVirtVersion = "1.6"
    mode: Mode = "auto"
    """The controller's --mode (in standalone, Rancher's annotation is no base)."""
    quota_features: QuotaFeatures = KUBERNETES_1_36
    """The controller's --quota-feature-gates: what quota charges a pod."""


@dataclass
class _Rooms:
    """The strategy's raise, per quota name and key, and anything it refuses outright."""

    raised: dict[str, ResourceList] = field(default_factory=dict)
    blockers: list[Blocker] = field(default_factory=list)
    fix: str = ""
    """What would help a quota the strategy gives no room, in words."""
    vmmrq: str | None = None


@dataclass(frozen=True)
class TargetPod:
    """A migration's target pod as KubeVirt would render it for `vmi`."""

    vmi: Mapping[str, Any]
    pod: Mapping[str, Any]
    usage: ResourceList
    """Its quota usage (podusage.pod_quota_usage)."""
    facts: PodScopeFacts
    """What quota scopes see of it (quotascope.launcher_scope_facts)."""
    beside: tuple[RenderedPart, ...] = ()
    """The other pods of its target side, rendered (launcher/parts.py `beside_parts`: the
    attachment pod of a VMI with hotplugged volumes, and every kind registered there)."""

    @property
    def total(self) -> ResourceList:
        """What the whole target side charges: the launcher and every pod beside it."""
        total = dict(self.usage)
        for part in self.beside:
            total = add(total, part.usage)
        return total

    def charged(self, scope: QuotaScope) -> ResourceList | None:
        """What the target side charges a quota of `scope`: the usage of each of its pods the
        scope matches (each pod is admitted with its own facts), summed; None if it matches
        none."""
        pods = [(self.usage, self.facts), *((p.usage, p.facts) for p in self.beside)]
        matched = [usage for usage, facts in pods if scope.matches(facts)]
        if not matched:
            return None
        total: ResourceList = {}
        for usage in matched:
            total = add(total, usage)
        return total


def quota_blockers(
    strategy: Strategy, context: NamespaceContext, target: TargetPod
) -> list[Blocker]:
    """Every reason quota admission would refuse `target` under `strategy`; [] if it would be
    admitted."""
    charged = {name(q): target.charged(quota_view(q).scope) for q in context.quotas}
    applying = [q for q in context.quotas if charged[name(q)] is not None]
    launcher_applying = [q for q in applying if quota_view(q).scope.matches(target.facts)]
    blockers = _constraint_blockers(launcher_applying, target.pod, context.quota_features)
    blockers.extend(_part_constraint_blockers(applying, target.beside))
    rooms = _rooms(strategy, context, target.vmi, target.total)
    blockers.extend(rooms.blockers)
    for quota in sorted(applying, key=name):
        shortfalls = _shortfalls(quota, charged[name(quota)] or {}, rooms.raised.get(name(quota)))
        if shortfalls:
            blockers.append(_quota_blocker(name(quota), shortfalls, rooms, strategy))
    return blockers


def strategy_raise(
    strategy: Strategy, context: NamespaceContext, target: TargetPod
) -> dict[str, ResourceList]:
    """The spec.hard `strategy` gives each quota of the namespace for `target`'s migration
    alone, by quota name (quotas it does not raise absent): what delays.py stacks when several
    targets of a namespace arrive while the sources count."""
    return _rooms(strategy, context, target.vmi, target.total).raised


def _constraint_blockers(
    quotas: Sequence[Mapping[str, Any]], pod: Mapping[str, Any], features: QuotaFeatures
) -> list[Blocker]:
    out = []
    for quota in sorted(quotas, key=name):
        hard = (quota.get("spec") or {}).get("hard") or {}
        for key, containers in sorted(
            quota_constraint_violations(pod, hard, features=features).items()
        ):
            out.append(
                Blocker(
                    "quota",
                    f"quota {name(quota)} limits {key}, and the target pod's "
                    f"{', '.join(containers)} does not set it (quota admission refuses it "
                    "whatever the room)",
                    f"add a LimitRange that gives every container a default for {key}",
                    quotas=[name(quota)],
                )
            )
    return out


def _part_constraint_blockers(
    quotas: Sequence[Mapping[str, Any]], beside: Sequence[RenderedPart]
) -> list[Blocker]:
    """The constraint check for each pod made beside the launcher, against the quotas whose
    scope matches it: quota admission refuses such a pod as it would the launcher, and the
    migration waits on it (podusage.usage_constraint_violations)."""
    out = []
    for part in beside:
        for quota in sorted(quotas, key=name):
            view = quota_view(quota)
            if not view.scope.matches(part.facts):
                continue
            for key in usage_constraint_violations(part.usage, view.hard):
                out.append(
                    Blocker(
                        "quota",
                        f"quota {view.name} limits {key}, and the target's {part.kind.name} "
                        "pod does not set it (quota admission refuses it whatever the room)",
                        f"add a LimitRange that gives every container a default for {key}",
                        quotas=[view.name],
                    )
                )
    return out


def _shortfalls(
    quota: Mapping[str, Any], usage: ResourceList, raised: ResourceList | None
) -> list[QuotaShortfall]:
    """The keys of the quota's spec.hard (as the strategy raises them) the target does not fit
    under: base.shortfalls, the webhook's rule, which as quota admission checks only the
    keys the pod uses more than zero of."""
    view = quota_view(quota)
    hard = {key: (raised or {}).get(key, value) for key, value in view.hard.items()}
    return [
        QuotaShortfall(
            name(quota),
            s.key,
            str(s.needed),
            str(s.in_use),
            str(s.limit),
            str(s.in_use + s.needed - s.limit),
        )
        for s in shortfalls(usage, hard, view.used)
    ]


_MI: Final = 1 << 20
_GI: Final = 1 << 30


def readable(key: str, text: str, *, round_up: bool = False) -> str:
    """A byte quantity as a person reads it: Gi with two decimals from 1Gi (Mi, whole and
    rounded up, with `round_up`: what to raise by), else Mi; anything else as written."""
    if not any(word in key for word in ("memory", "storage", "hugepages")):
        return text
    try:
        value = Quantity.parse(text).value()
    except ValueError:
        return text
    if value < _MI:
        return text
    if round_up:
        return f"{-(-value // _MI)}Mi"
    return f"{value / _GI:.2f}Gi" if value >= _GI else f"{value / _MI:.0f}Mi"


def _quota_blocker(
    quota: str, shortfalls: list[QuotaShortfall], rooms: _Rooms, strategy: Strategy
) -> Blocker:
    keys = "; ".join(
        f"{s.key}: the target pod needs {readable(s.key, s.needed)}, "
        f"{readable(s.key, s.used)} used of {readable(s.key, s.hard)} "
        f"(short by {readable(s.key, s.short_by, round_up=True)})"
        for s in shortfalls
    )
    raise_by = ", ".join(
        f"{s.key} by {readable(s.key, s.short_by, round_up=True)}" for s in shortfalls
    )
    if rooms.vmmrq is not None:
        fix = f"raise VMMRQ {rooms.vmmrq}'s additionalMigrationResources: {raise_by}"
    else:
        fix = f"raise quota {quota}'s {raise_by}" + (f", or {rooms.fix}" if rooms.fix else "")
    given = (
        " with the strategy's room" if quota in rooms.raised else f" ({strategy} gives it no room)"
    )
    return Blocker("quota", f"quota {quota}{given}: {keys}", fix, shortfalls, [quota])


def _rooms(
    strategy: Strategy, context: NamespaceContext, vmi: Mapping[str, Any], usage: ResourceList
) -> _Rooms:
    if strategy == "harvester":
        return _harvester_rooms(context, vmi, usage)
    if strategy == "ours":
        live = [v for v in context.vmmrqs if not v.deleting]
        if live:
            return _mtq_rooms(context, sorted(live, key=lambda v: v.name)[0])
        return _our_rooms(context, usage)
    return _Rooms(fix="run harvester-quota's controllers (they raise the managed quota by the pod)")


def _mtq_rooms(context: NamespaceContext, vmmrq: Vmmrq) -> _Rooms:
    try:
        budget = budget_of(vmmrq)
    except ValueError as error:
        return _Rooms(blockers=[Blocker("quota", f"VMMRQ {vmmrq.name}: {error}", "fix its spec")])
    raised = {name(q): raise_hard(quota_view(q).hard, budget) for q in context.quotas}
    return _Rooms(raised=raised, vmmrq=vmmrq.name)


_OUR_FIX: Final = "add a VMMRQ (MTQ mode raises every quota that blocks by its budget)"


def _our_rooms(context: NamespaceContext, usage: ResourceList) -> _Rooms:
    quota = managed_quota(context.quotas)
    if quota is None:
        return _Rooms(fix=_OUR_FIX)
    if parse_migration_annotations(annotations_of(quota)).skip_auto_scaling:
        return _Rooms(fix="remove the skip annotation from quota " + name(quota))
    try:
        base = resolve_base(
            context.namespace, quota, mode=context.mode, raise_recorded=raise_records(quota, None)
        )
    except BaseError as error:
        return _Rooms(fix=f"fix the base of quota {name(quota)} ({error})")
    if base is None:
        return _Rooms(fix=_OUR_FIX)
    view = quota_view(quota)
    raised = {**view.hard, **desired_hard(base.hard, view.used, usage)}
    rooms = _Rooms(raised={name(quota): raised}, fix=_OUR_FIX)
    if base.source == RANCHER:
        rooms.blockers.extend(_project_blockers(context, raised, name(quota)))
    return rooms


def _project_blockers(context: NamespaceContext, raised: ResourceList, quota: str) -> list[Blocker]:
    base_text = rancher_base_text(context.namespace)
    if base_text is None:
        return []
    text = raised_annotation(base_text, {k: str(v) for k, v in raised.items()})
    verdict = raise_verdict(context.namespace, text, context.project, context.project_members)
    if verdict is None:
        return []
    project = context.project.id if context.project is not None else "?"
    return [
        Blocker(
            "quota",
            f"Rancher project {project}: {verdict.message} (the raise is held back, the target "
            "pod waits)",
            f"raise project {project}'s limit by {describe_shortfall(verdict.shortfall)}",
            quotas=[quota],
        )
    ]


def _harvester_rooms(
    context: NamespaceContext, vmi: Mapping[str, Any], usage: ResourceList
) -> _Rooms:
    room = harvester_room(
        context.namespace,
        context.quotas,
        vmi,
        ratio=context.harvester_ratio,
        kubevirt_version=context.kubevirt_version,
    )
    fix = "run harvester-quota's controllers (they raise every key of the base by the whole pod)"
    if room.quota is None or not room.share:
        return _Rooms(fix=fix)
    quota = next(q for q in context.quotas if name(q) == room.quota)
    view = quota_view(quota)
    raised = {k: v + room.share[k] if k in room.share else v for k, v in view.hard.items()}
    if room.compensates_memory and LIMITS_MEMORY in raised:
        share = room.share.get(LIMITS_MEMORY, Quantity())
        used = view.used.get(LIMITS_MEMORY, Quantity())
        raised[LIMITS_MEMORY] = max(raised[LIMITS_MEMORY], used + share + _COMPENSATION_MARGIN)
    return _Rooms(raised={room.quota: raised}, fix=fix)


@dataclass(frozen=True)
class _HarvesterRoom:
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
) -> _HarvesterRoom:
    """Harvester's raise for a migration of `vmi` in `namespace` with these quotas."""
    quota = managed_quota(quotas)
    if quota is None:
        return _HarvesterRoom(None, why_none="no quota labelled as Rancher's default")
    quota_name = str((quota.get("metadata") or {}).get("name"))
    limits = _vmi_limits(vmi)
    why = _why_no_room(namespace, quota, limits)
    if why is not None:
        return _HarvesterRoom(quota_name, why_none=why)
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
    return _HarvesterRoom(quota_name, share, compensates_memory=compensates)
