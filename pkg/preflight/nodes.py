"""Would a target pod fit on a node? First fit on the nodes a drain leaves (pure).

A node can take a launcher pod when it is schedulable (not cordoned, KubeVirt's
``kubevirt.io/schedulable=true`` label, which KubeVirt puts in every launcher's nodeSelector), the
VMI's nodeSelector and required node affinity match its labels, every NoSchedule/NoExecute taint
is tolerated, a VMI with dedicated CPUs lands on a node labelled ``cpumanager=true`` (KubeVirt adds
that selector), and what the pod requests (cpu, memory, hugepages, devices, one pod) fits in the
node's allocatable minus the requests of the pods already bound there. Preferred affinity, pod
(anti-)affinity and topology spread are not judged: they rank nodes or depend on other pods, and
the scheduler may still refuse a node this accepts for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ..generic.meta import labels, name, spec, status
from ..util.podusage import KUBERNETES_1_36, QuotaFeatures, pod_requests
from ..util.quantity import Quantity
from ..util.resources import ResourceList, parse_resource_list_leniently

SCHEDULABLE_LABEL: Final = "kubevirt.io/schedulable"
CPU_MANAGER_LABEL: Final = "cpumanager"
_BLOCKING_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})
_FINISHED: Final = frozenset({"Succeeded", "Failed"})
_ONE_POD: Final = Quantity.from_int(1)
_REQUESTS: Final = "requests."


@dataclass
class NodeRoom:
    """One node a target may land on, and what is still free on it."""

    node: Mapping[str, Any]
    free: ResourceList = field(default_factory=dict)

    @property
    def name(self) -> str:
        return name(self.node)

    def take(self, requests: ResourceList) -> None:
        for key, value in requests.items():
            self.free[key] = self.free.get(key, value * 0) - value


def free_on_nodes(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    features: QuotaFeatures = KUBERNETES_1_36,
) -> dict[str, NodeRoom]:
    """Each node's allocatable minus the requests of the unfinished pods bound to it (summed
    with `features`, the gates taken to be the cluster's), with ``pods`` counting one per pod.
    Pods that cannot be read are charged nothing."""
    rooms = {
        name(n): NodeRoom(n, parse_resource_list_leniently(status(n).get("allocatable")))
        for n in nodes
    }
    for pod in pods:
        node = spec(pod).get("nodeName")
        if node not in rooms or status(pod).get("phase") in _FINISHED:
            continue
        try:
            requests = pod_requests(pod, features=features)
        except ValueError:
            continue
        rooms[str(node)].take({**requests, "pods": _ONE_POD})
    return rooms


def target_requests(
    pod: Mapping[str, Any], features: QuotaFeatures = KUBERNETES_1_36
) -> ResourceList:
    """What the scheduler counts for the target pod: its requests and one pod."""
    return {**pod_requests(pod, features=features), "pods": _ONE_POD}


def target_side_requests(
    pod: Mapping[str, Any],
    beside: Iterable[ResourceList],
    features: QuotaFeatures = KUBERNETES_1_36,
) -> ResourceList:
    """What the scheduler counts on the target's node for its whole side: the launcher pod's
    requests and one pod, and for each pod made beside it (by its quota usage, `beside`) its
    requests and one pod. KubeVirt pins those pods to the launcher's node (the attachment pod's
    required node affinity), so they fit there or the target side does not."""
    total = target_requests(pod, features)
    for usage in beside:
        for key, value in (*_requested(usage), ("pods", _ONE_POD)):
            total[key] = total[key] + value if key in total else value
    return total


def _requested(usage: ResourceList) -> list[tuple[str, Quantity]]:
    """A pod's requests, read back from its quota usage (requests.<name>: cpu, memory,
    ephemeral-storage, hugepages and extended resources alike)."""
    return [
        (key.removeprefix(_REQUESTS), value)
        for key, value in usage.items()
        if key.startswith(_REQUESTS)
    ]


def why_not(room: NodeRoom, vmi: Mapping[str, Any], requests: ResourceList) -> str | None:
    """Why the target pod of `vmi` cannot go to the node; None if it can."""
    node = room.node
    node_labels = labels(node)
    if spec(node).get("unschedulable"):
        return "cordoned"
    if node_labels.get(SCHEDULABLE_LABEL) != "true":
        return f"not labelled {SCHEDULABLE_LABEL}=true"
    vmi_spec = spec(vmi)
    for key, value in sorted(_node_selector(vmi_spec).items()):
        if node_labels.get(key) != value:
            return f"nodeSelector {key}={value} does not match"
    if not _affinity_matches(vmi_spec.get("affinity"), node):
        return "required node affinity does not match"
    taint = _untolerated_taint(spec(node).get("taints"), vmi_spec.get("tolerations"))
    if taint is not None:
        return f"taint {taint} not tolerated"
    short = [
        f"{key} {max(room.free.get(key, value * 0), value * 0)} free, needs {value}"
        for key, value in sorted(requests.items())
        if value.sign() > 0 and room.free.get(key, value * 0) < value
    ]
    return "; ".join(short) if short else None


def _node_selector(vmi_spec: Mapping[str, Any]) -> dict[str, str]:
    selector = vmi_spec.get("nodeSelector")
    out = {str(k): str(v) for k, v in selector.items()} if isinstance(selector, Mapping) else {}
    cpu = ((vmi_spec.get("domain") or {}).get("cpu")) or {}
    if isinstance(cpu, Mapping) and cpu.get("dedicatedCpuPlacement"):
        out[CPU_MANAGER_LABEL] = "true"
    return out


def _untolerated_taint(taints: Any, tolerations: Any) -> str | None:
    tolerations = [t for t in tolerations or [] if isinstance(t, Mapping)]
    for taint in taints or []:
        if not isinstance(taint, Mapping) or taint.get("effect") not in _BLOCKING_EFFECTS:
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            key, value, effect = taint.get("key"), taint.get("value"), taint.get("effect")
            return f"{key}={value or ''}:{effect}"
    return None


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """corev1 Toleration.ToleratesTaint."""
    effect = toleration.get("effect")
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key")
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return str(toleration.get("value") or "") == str(taint.get("value") or "")


def required_affinity_matches(affinity: Any, node: Mapping[str, Any]) -> bool:
    """Whether `node` meets a pod's (or VMI's) required node affinity, as the scheduler's
    MatchNodeSelectorTerms judges it: any term matches; no terms, any node."""
    return _affinity_matches(affinity, node)


def _affinity_matches(affinity: Any, node: Mapping[str, Any]) -> bool:
    """requiredDuringSchedulingIgnoredDuringExecution: any term matches (no terms: any node)."""
    if not isinstance(affinity, Mapping):
        return True
    required = (affinity.get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not isinstance(required, Mapping):
        return True
    terms = [t for t in required.get("nodeSelectorTerms") or [] if isinstance(t, Mapping)]
    return not terms or any(_term_matches(t, node) for t in terms)


def _term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False  # an empty term matches nothing
    node_labels = labels(node)
    node_fields = {"metadata.name": name(node)}
    return all(_expression_matches(e, node_labels) for e in expressions) and all(
        _expression_matches(f, node_fields) for f in fields
    )


def _compare(actual: str, wanted: list[str], greater: bool) -> bool:
    if len(wanted) != 1:
        return False
    try:
        have, bound = int(actual), int(wanted[0])
    except ValueError:
        return False
    return have > bound if greater else have < bound


_OPERATORS: Final[dict[str, Callable[[bool, str, list[str]], bool]]] = {
    "In": lambda present, actual, wanted: present and actual in wanted,
    "NotIn": lambda present, actual, wanted: not present or actual not in wanted,
    "Exists": lambda present, _actual, _wanted: present,
    "DoesNotExist": lambda present, _actual, _wanted: not present,
    "Gt": lambda present, actual, wanted: present and _compare(actual, wanted, greater=True),
    "Lt": lambda present, actual, wanted: present and _compare(actual, wanted, greater=False),
}
"""corev1 NodeSelectorOperator; an unknown operator matches nothing."""


def _expression_matches(expression: Any, values: Mapping[str, str]) -> bool:
    if not isinstance(expression, Mapping):
        return False
    key = str(expression.get("key"))
    operator = _OPERATORS.get(str(expression.get("operator")))
    wanted = [str(v) for v in expression.get("values") or []]
    return operator is not None and operator(key in values, values.get(key, ""), wanted)


def first_fit(
    rooms: Sequence[NodeRoom], vmi: Mapping[str, Any], requests: ResourceList
) -> tuple[NodeRoom | None, dict[str, str]]:
    """The first node (in `rooms`' order) that takes the target, charged for it; else None and
    why each node refused."""
    refusals: dict[str, str] = {}
    for room in rooms:
        reason = why_not(room, vmi, requests)
        if reason is None:
            room.take(requests)
            return room, {}
        refusals[room.name] = reason
    return None, refusals


NODES_NAMED: Final = 3
"""How many nodes a refusal names per reason before it counts the rest."""


def refusal_text(refusals: Mapping[str, str]) -> str:
    """Why each node refused, one entry per reason in the order first met, the nodes of a reason
    named up to NODES_NAMED and the rest counted: a line, not a list of every node of the
    cluster for a target whose selector matches none."""
    by_reason: dict[str, list[str]] = {}
    for node, reason in refusals.items():
        by_reason.setdefault(reason, []).append(node)
    parts = []
    for reason, nodes in by_reason.items():
        named = ", ".join(nodes[:NODES_NAMED])
        more = len(nodes) - NODES_NAMED
        parts.append(f"{named}{f' and {more} more' if more > 0 else ''}: {reason}")
    return "; ".join(parts)
