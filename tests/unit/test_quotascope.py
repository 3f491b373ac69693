"""Quota scopes as Kubernetes' quota pod evaluator judges them (pods.go podMatchesScopeFunc,
generic.Matches, qos.ComputePodQOS), one test per scope, and the facts a narrow pod cache keeps."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from harvester_quota.util.podusage import strip_pod_to_quota_fields
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.quotascope import (
    PLAIN_FACTS,
    PodScopeFacts,
    QuotaScope,
    ScopeRequirement,
    applies_to,
    launcher_scope_facts,
    pod_scope_facts,
    quota_scope,
)


def pod(**spec: Any) -> dict[str, Any]:
    """A pod asking for cpu and memory unless `containers` says otherwise."""
    spec.setdefault(
        "containers",
        [{"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
    )
    return {"metadata": {"name": "p"}, "spec": spec}


def scoped(*scopes: str, **expression: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"hard": {"pods": "1"}, "scopes": list(scopes)}
    if expression:
        spec["scopeSelector"] = {"matchExpressions": [expression]}
    return {"spec": spec}


def test_scopes_and_selector_expressions_make_one_list_of_requirements() -> None:
    quota = scoped("NotTerminating", scopeName="PriorityClass", operator="In", values=["a", "b"])
    assert quota_scope(quota) == QuotaScope(
        (
            ScopeRequirement("NotTerminating"),
            ScopeRequirement("PriorityClass", "In", ("a", "b")),
        )
    )
    assert quota_scope(quota["spec"]) == quota_scope(quota), "a bare spec reads the same"
    assert quota_scope({"spec": {"hard": {"pods": "1"}}}).unscoped
    assert str(quota_scope(quota)) == "NotTerminating Exists; PriorityClass In (a, b)"


def test_an_unscoped_quota_charges_every_pod() -> None:
    quota = {"spec": {"hard": {"pods": "1"}}}
    assert applies_to(quota, pod()) and applies_to(quota, pod(activeDeadlineSeconds=5))


@pytest.mark.parametrize(
    ("deadline", "terminating"), [(None, False), (0, True), (30, True), (True, False)]
)
def test_terminating_is_an_active_deadline_of_zero_or_more(
    deadline: Any, terminating: bool
) -> None:
    subject = pod() if deadline is None else pod(activeDeadlineSeconds=deadline)
    assert applies_to(scoped("Terminating"), subject) is terminating
    assert applies_to(scoped("NotTerminating"), subject) is not terminating


BEST_EFFORT_CASES = [
    ("no resources at all", [{"name": "c"}], None, None, True),
    (
        "ephemeral storage only",
        [{"name": "c", "resources": {"requests": {"ephemeral-storage": "1Gi"}}}],
        None,
        None,
        True,
    ),
    (
        "a zero cpu request",
        [{"name": "c", "resources": {"requests": {"cpu": "0"}}}],
        None,
        None,
        True,
    ),
    ("a cpu request", [{"name": "c", "resources": {"requests": {"cpu": "1m"}}}], None, None, False),
    (
        "a memory limit on an init container",
        [{"name": "c"}],
        [{"name": "i", "resources": {"limits": {"memory": "1Mi"}}}],
        None,
        False,
    ),
    (
        "pod-level resources decide",
        [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        None,
        {"limits": {"memory": "0"}},
        True,
    ),
    ("pod-level cpu", [{"name": "c"}], None, {"requests": {"cpu": "250m"}}, False),
]


@pytest.mark.parametrize(
    ("containers", "init", "pod_level", "best_effort"),
    [case[1:] for case in BEST_EFFORT_CASES],
    ids=[case[0] for case in BEST_EFFORT_CASES],
)
def test_best_effort_is_no_cpu_or_memory_asked_for_anywhere(
    containers: list[Any], init: list[Any] | None, pod_level: Any, best_effort: bool
) -> None:
    spec: dict[str, Any] = {"containers": containers}
    if init is not None:
        spec["initContainers"] = init
    if pod_level is not None:
        spec["resources"] = pod_level
    subject = pod(**spec)
    assert applies_to(scoped("BestEffort"), subject) is best_effort
    assert applies_to(scoped("NotBestEffort"), subject) is not best_effort


def test_the_qos_class_the_api_server_recorded_wins() -> None:
    subject = pod(containers=[{"name": "c"}])
    subject["status"] = {"qosClass": "Burstable"}
    assert not pod_scope_facts(subject).best_effort


PRIORITY_CASES = [
    ("In", ["batch"], "batch", True),
    ("In", ["batch"], "vm", False),
    ("In", ["batch"], "", False),
    ("NotIn", ["batch"], "vm", True),
    ("NotIn", ["batch"], "batch", False),
    ("NotIn", ["batch"], "", True),
    ("Exists", [], "vm", True),
    ("Exists", [], "", False),
    ("DoesNotExist", [], "", True),
    ("DoesNotExist", [], "vm", False),
]


@pytest.mark.parametrize(("operator", "values", "name", "matches"), PRIORITY_CASES)
def test_priority_class_operators_judge_the_class_as_a_label(
    operator: str, values: list[str], name: str, matches: bool
) -> None:
    expression: dict[str, Any] = {"scopeName": "PriorityClass", "operator": operator}
    if values:
        expression["values"] = values
    subject = pod(priorityClassName=name) if name else pod()
    assert applies_to(scoped(**expression), subject) is matches


def test_a_priority_class_in_the_scopes_list_means_exists() -> None:
    assert applies_to(scoped("PriorityClass"), pod(priorityClassName="vm"))
    assert not applies_to(scoped("PriorityClass"), pod())


def term(**fields: Any) -> dict[str, Any]:
    return {"topologyKey": "kubernetes.io/hostname", "labelSelector": {}, **fields}


AFFINITY_CASES = [
    ("none", None, False),
    (
        "same namespace",
        {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term()]}},
        False,
    ),
    (
        "named namespaces",
        {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [term(namespaces=["other"])]
            }
        },
        True,
    ),
    (
        "an empty namespaceSelector",
        {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [term(namespaceSelector={})]
            }
        },
        True,
    ),
    (
        "a preferred term",
        {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "podAffinityTerm": term(namespaces=["x"])}
                ]
            }
        },
        True,
    ),
    (
        "node affinity only",
        {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}
            }
        },
        False,
    ),
]


@pytest.mark.parametrize(
    ("affinity", "cross"), [c[1:] for c in AFFINITY_CASES], ids=[c[0] for c in AFFINITY_CASES]
)
def test_cross_namespace_pod_affinity_is_a_term_naming_or_selecting_namespaces(
    affinity: Any, cross: bool
) -> None:
    subject = pod() if affinity is None else pod(affinity=affinity)
    assert applies_to(scoped("CrossNamespacePodAffinity"), subject) is cross


def test_a_scope_pods_do_not_have_matches_no_pod() -> None:
    assert not applies_to(scoped("VolumeAttributesClass"), pod())


def test_every_requirement_must_match() -> None:
    quota = scoped("NotBestEffort", scopeName="PriorityClass", operator="In", values=["vm"])
    assert applies_to(quota, pod(priorityClassName="vm"))
    assert not applies_to(quota, pod(priorityClassName="vm", containers=[{"name": "c"}]))


def test_a_launcher_carries_its_vmis_priority_class_and_affinity() -> None:
    affinity = {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term(namespaces=["a"])]}
    }
    vmi = {"spec": {"priorityClassName": "vm-high", "affinity": affinity}}
    usage = {"limits.memory": Quantity.parse("4Gi"), "pods": Quantity.parse("1")}
    assert launcher_scope_facts(vmi, usage) == PodScopeFacts("vm-high", False, False, True)
    assert launcher_scope_facts({"spec": {}}, usage) == PLAIN_FACTS
    assert launcher_scope_facts({}, {"pods": Quantity.parse("1")}).best_effort


@pytest.mark.parametrize(
    "subject",
    [
        pod(),
        pod(priorityClassName="vm", activeDeadlineSeconds=0),
        pod(containers=[{"name": "c"}], affinity=AFFINITY_CASES[2][1]),
        pod(affinity=AFFINITY_CASES[1][1], resources={"requests": {"cpu": "1"}}),
        {
            **pod(containers=[{"name": "c"}]),
            "status": {"qosClass": "Guaranteed", "phase": "Running"},
        },
    ],
)
def test_the_narrow_pod_cache_keeps_every_scope_fact(subject: dict[str, Any]) -> None:
    assert pod_scope_facts(strip_pod_to_quota_fields(copy.deepcopy(subject))) == pod_scope_facts(
        subject
    )
