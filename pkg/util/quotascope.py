"""Which pods a ResourceQuota applies to: its scopes, as Kubernetes' quota pod evaluator judges them.

A quota charges a pod only if the pod matches every requirement of the quota: each entry of
``spec.scopes`` (taken as the operator Exists) and each ``spec.scopeSelector.matchExpressions``
entry (pkg/quota/v1/evaluator/core/pods.go, podMatchesScopeFunc, with apiserver's generic.Matches).
Per scope:

- Terminating / NotTerminating: ``spec.activeDeadlineSeconds`` set and >= 0, or not;
- BestEffort / NotBestEffort: the pod's QoS class (``status.qosClass`` once the API server set
  it, else computed as qos.ComputePodQOS: pod-level resources when given, else no container or
  init container asks for or limits cpu or memory);
- PriorityClass: the operator against the pod's ``spec.priorityClassName`` taken as the label
  ``PriorityClass`` (absent when the pod has none): In, NotIn, Exists, DoesNotExist, as a label
  selector judges them (NotIn and DoesNotExist match a pod without a class);
- CrossNamespacePodAffinity: a pod (anti-)affinity term, required or preferred, that names
  namespaces or has a namespaceSelector (even an empty one);
- any other scope (VolumeAttributesClass, a future one) matches no pod.

The operator of Terminating, BestEffort and their negations is not read, as in Kubernetes
(validation allows only Exists there). A quota without requirements applies to every pod.

The facts a pod is judged by are reduced once (`PodScopeFacts`): from a pod (`pod_scope_facts`),
or for the launcher pod KubeVirt would render for a VMI (`launcher_scope_facts`), which carries
the VMI's priorityClassName and affinity, no activeDeadlineSeconds, and is BestEffort only if its
quota usage has no cpu or memory. Pure functions; every fit check (the room plan, MTQ, the
webhook, explain) judges scopes here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

from .quantity import Quantity

TERMINATING: Final = "Terminating"
NOT_TERMINATING: Final = "NotTerminating"
BEST_EFFORT: Final = "BestEffort"
NOT_BEST_EFFORT: Final = "NotBestEffort"
PRIORITY_CLASS: Final = "PriorityClass"
CROSS_NAMESPACE_POD_AFFINITY: Final = "CrossNamespacePodAffinity"

_QOS_RESOURCES: Final = ("cpu", "memory")
_QOS_USAGE_KEYS: Final = frozenset(
    {"cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"}
)


@dataclass(frozen=True, slots=True)
class PodScopeFacts:
    """What quota scopes read of one pod."""

    priority_class: str = ""
    """spec.priorityClassName ("" for none)."""
    terminating: bool = False
    best_effort: bool = False
    cross_namespace_affinity: bool = False


PLAIN_FACTS: Final = PodScopeFacts()
"""A pod that asks for resources, without priority class, deadline or cross-namespace affinity
(the launcher pod of a plain VMI)."""


@dataclass(frozen=True, slots=True)
class ScopeRequirement:
    """One requirement: a scope name, an operator, and the values of In/NotIn."""

    scope: str
    operator: str = "Exists"
    values: tuple[str, ...] = ()

    def matches(self, facts: PodScopeFacts) -> bool:
        if self.scope == PRIORITY_CLASS:
            return _priority_class_matches(self.operator, self.values, facts.priority_class)
        judge = _BY_FACT.get(self.scope)
        return judge(facts) if judge is not None else False

    def __str__(self) -> str:
        values = f" ({', '.join(self.values)})" if self.values else ""
        return f"{self.scope} {self.operator}{values}"


_BY_FACT: Final[dict[str, Callable[[PodScopeFacts], bool]]] = {
    TERMINATING: lambda facts: facts.terminating,
    NOT_TERMINATING: lambda facts: not facts.terminating,
    BEST_EFFORT: lambda facts: facts.best_effort,
    NOT_BEST_EFFORT: lambda facts: not facts.best_effort,
    CROSS_NAMESPACE_POD_AFFINITY: lambda facts: facts.cross_namespace_affinity,
}
"""The scopes decided by one fact of the pod, whatever the operator (as Kubernetes does)."""


def _priority_class_matches(operator: str, values: tuple[str, ...], name: str) -> bool:
    """A label selector on the one label PriorityClass=<name>, absent without a class. An
    operator the API server would not have admitted is taken to match (the quota is counted as
    applying: a fit check then errs on the side of refusing)."""
    if operator == "In":
        return bool(name) and name in values
    if operator == "NotIn":
        return not name or name not in values
    if operator == "DoesNotExist":
        return not name
    return bool(name) if operator == "Exists" else True


@dataclass(frozen=True, slots=True)
class QuotaScope:
    """A quota's requirements: it charges a pod only if the pod matches all of them."""

    requirements: tuple[ScopeRequirement, ...] = ()

    @property
    def unscoped(self) -> bool:
        return not self.requirements

    def matches(self, facts: PodScopeFacts) -> bool:
        return all(requirement.matches(facts) for requirement in self.requirements)

    def __str__(self) -> str:
        return "; ".join(str(r) for r in self.requirements) or "no scopes"


UNSCOPED: Final = QuotaScope()


def quota_scope(quota: Mapping[str, Any]) -> QuotaScope:
    """The scope of a ResourceQuota object (or of a bare ResourceQuotaSpec, which has no
    "spec" key). Malformed entries (never stored by the API server) are skipped."""
    spec = quota.get("spec") if "spec" in quota else quota
    if not isinstance(spec, Mapping):
        return UNSCOPED
    scopes = spec.get("scopes")
    selector = spec.get("scopeSelector")
    expressions = selector.get("matchExpressions") if isinstance(selector, Mapping) else None
    requirements = [ScopeRequirement(str(name)) for name in _list(scopes) if isinstance(name, str)]
    for expression in _list(expressions):
        if isinstance(expression, Mapping) and isinstance(expression.get("scopeName"), str):
            values = tuple(str(v) for v in _list(expression.get("values")))
            operator = str(expression.get("operator") or "Exists")
            requirements.append(ScopeRequirement(expression["scopeName"], operator, values))
    return QuotaScope(tuple(requirements))


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else []


def applies_to(quota: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """Whether `quota`'s scopes let it charge `pod`."""
    return quota_scope(quota).matches(pod_scope_facts(pod))


# Facts -------------------------------------------------------------------------------------


def pod_scope_facts(pod: Mapping[str, Any]) -> PodScopeFacts:
    """The facts of a pod object (or of a pod template's spec holder); never raises: a field of
    the wrong type reads as absent."""
    spec = pod.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    status = pod.get("status")
    qos = status.get("qosClass") if isinstance(status, Mapping) else None
    deadline = spec.get("activeDeadlineSeconds")
    return interned(
        PodScopeFacts(
            priority_class=_text(spec.get("priorityClassName")),
            terminating=isinstance(deadline, int)
            and not isinstance(deadline, bool)
            and deadline >= 0,
            best_effort=qos == "BestEffort" if isinstance(qos, str) and qos else _best_effort(spec),
            cross_namespace_affinity=uses_cross_namespace_affinity(spec.get("affinity")),
        )
    )


def launcher_scope_facts(vmi: Mapping[str, Any], usage: Mapping[str, Quantity]) -> PodScopeFacts:
    """The facts of the launcher pod KubeVirt renders for `vmi` whose quota usage is `usage`:
    the VMI's priorityClassName and affinity are copied to it (KubeVirt's template service; a
    migration target adds only a same-namespace anti-affinity), it sets no deadline, and it is
    BestEffort only if nothing in it asks for cpu or memory."""
    spec = vmi.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    return rendered_pod_facts(_text(spec.get("priorityClassName")), spec.get("affinity"), usage)


def rendered_pod_facts(
    priority_class: str, affinity: Any, usage: Mapping[str, Quantity]
) -> PodScopeFacts:
    """The facts of a pod KubeVirt renders with `priority_class` and `affinity` whose quota
    usage is `usage` (no deadline; BestEffort only if nothing in it asks for cpu or memory)."""
    return interned(
        PodScopeFacts(
            priority_class=priority_class,
            best_effort=not any(
                key in _QOS_USAGE_KEYS and value.sign() > 0 for key, value in usage.items()
            ),
            cross_namespace_affinity=uses_cross_namespace_affinity(affinity),
        )
    )


@lru_cache(maxsize=256)
def interned(facts: PodScopeFacts) -> PodScopeFacts:
    """One shared object per distinct facts (pods of a namespace share a handful)."""
    return facts


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _best_effort(spec: Mapping[str, Any]) -> bool:
    """qos.ComputePodQOS == BestEffort: pod-level resources when given, else every container
    and init container BestEffort (no cpu or memory asked for or limited)."""
    pod_level = spec.get("resources")
    if isinstance(pod_level, Mapping):
        return _asks_nothing(pod_level)
    containers = [*_list(spec.get("containers")), *_list(spec.get("initContainers"))]
    return all(_asks_nothing(c.get("resources")) for c in containers if isinstance(c, Mapping))


def _asks_nothing(resources: Any) -> bool:
    """No cpu or memory request or limit above zero (qos.resourceQOS is BestEffort)."""
    for values in _objects_at(resources, ("requests", "limits")):
        for name in _QOS_RESOURCES:
            if name in values and _positive(values[name]):
                return False
    return True


def _objects_at(obj: Any, keys: tuple[str, ...]) -> Iterator[Mapping[str, Any]]:
    """The values of `keys` in `obj` that are objects, in order (none if `obj` is not one)."""
    if isinstance(obj, Mapping):
        for key in keys:
            value = obj.get(key)
            if isinstance(value, Mapping):
                yield value


def _positive(value: Any) -> bool:
    try:
        return Quantity.parse(str(value)).sign() > 0
    except ValueError:
        return True  # unreadable: the API server would not have stored it; count it as asked


def uses_cross_namespace_affinity(affinity: Any) -> bool:
    """A pod (anti-)affinity term, required or preferred, that names namespaces or has a
    namespaceSelector (pods.go usesCrossNamespacePodAffinity)."""
    for rules in _objects_at(affinity, ("podAffinity", "podAntiAffinity")):
        required = _list(rules.get("requiredDuringSchedulingIgnoredDuringExecution"))
        preferred = [
            w.get("podAffinityTerm")
            for w in _list(rules.get("preferredDuringSchedulingIgnoredDuringExecution"))
            if isinstance(w, Mapping)
        ]
        if any(_cross_namespace_term(term) for term in (*required, *preferred)):
            return True
    return False


def _cross_namespace_term(term: Any) -> bool:
    if not isinstance(term, Mapping):
        return False
    return bool(_list(term.get("namespaces"))) or term.get("namespaceSelector") is not None


def reduced_affinity(affinity: Any) -> dict[str, Any] | None:
    """The least of `affinity` that keeps `uses_cross_namespace_affinity`'s answer (for narrow
    caches): None without a cross-namespace term."""
    if not uses_cross_namespace_affinity(affinity):
        return None
    return {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{"namespaceSelector": {}}]
        }
    }
