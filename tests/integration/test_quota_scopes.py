"""Our quota scope matcher (util/quotascope.py) against the real kube-apiserver's quota admission:
for each scoped quota allowing no pod at all, every pod of a varied set is refused by the API
server exactly when our matcher says the quota charges it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import PODS, RESOURCE_QUOTAS, Object, Resource
from harvester_quota.util.quotascope import applies_to

from tests.helpers import eventually

pytestmark = pytest.mark.integration

PRIORITY_CLASSES = Resource(
    "scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False
)
CLASS_A, CLASS_B = "hq-scope-test-a", "hq-scope-test-b"


def pod(name: str, **spec: Any) -> Object:
    resources = {"requests": {"cpu": "10m", "memory": "16Mi"}}
    spec.setdefault("containers", [{"name": "c", "image": "x", "resources": resources}])
    return {"metadata": {"name": name}, "spec": spec}


def affinity_term(**fields: Any) -> dict[str, Any]:
    return {"topologyKey": "kubernetes.io/hostname", "labelSelector": {}, **fields}


PODS_TRIED = [
    pod("plain"),
    pod("best-effort", containers=[{"name": "c", "image": "x"}]),
    pod("terminating", activeDeadlineSeconds=30),
    pod("class-a", priorityClassName=CLASS_A),
    pod("class-b", priorityClassName=CLASS_B),
    pod("class-a-best-effort", priorityClassName=CLASS_A, containers=[{"name": "c", "image": "x"}]),
    pod(
        "same-namespace-affinity",
        affinity={
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [affinity_term()]}
        },
    ),
    pod(
        "cross-namespace-affinity",
        affinity={
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "podAffinityTerm": affinity_term(namespaces=["elsewhere"])}
                ]
            }
        },
    ),
    pod(
        "namespace-selector-affinity",
        affinity={
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    affinity_term(namespaceSelector={})
                ]
            }
        },
    ),
]


def selector(operator: str, *values: str) -> dict[str, Any]:
    expression: dict[str, Any] = {"scopeName": "PriorityClass", "operator": operator}
    if values:
        expression["values"] = list(values)
    return {"matchExpressions": [expression]}


QUOTAS_TRIED: list[tuple[str, dict[str, Any]]] = [
    ("terminating", {"scopes": ["Terminating"]}),
    ("not-terminating", {"scopes": ["NotTerminating"]}),
    ("best-effort", {"scopes": ["BestEffort"]}),
    ("not-best-effort", {"scopes": ["NotBestEffort"]}),
    ("class-in", {"scopeSelector": selector("In", CLASS_A)}),
    ("class-not-in", {"scopeSelector": selector("NotIn", CLASS_A)}),
    ("class-exists", {"scopeSelector": selector("Exists")}),
    ("class-does-not-exist", {"scopeSelector": selector("DoesNotExist")}),
    ("cross-namespace", {"scopes": ["CrossNamespacePodAffinity"]}),
    (
        "not-best-effort-of-a-or-b",
        {"scopes": ["NotBestEffort"], "scopeSelector": selector("In", CLASS_A, CLASS_B)},
    ),
]


@pytest.fixture
async def priority_classes(kubevirt_api: ApiClient) -> AsyncIterator[None]:
    for name in (CLASS_A, CLASS_B):
        with contextlib.suppress(errors.AlreadyExists):
            await kubevirt_api.create(PRIORITY_CLASSES, {"metadata": {"name": name}, "value": 10})
    try:
        yield
    finally:
        for name in (CLASS_A, CLASS_B):
            with contextlib.suppress(errors.NotFound):
                await kubevirt_api.delete(PRIORITY_CLASSES, name)


async def refused_by_quota(api: ApiClient, namespace: str, subject: Object) -> bool:
    """Whether the API server refuses `subject` for quota (a dry run: nothing is created)."""
    try:
        await api.create(PODS, subject, namespace, dry_run=True)
    except errors.Forbidden as error:
        if "exceeded quota" in error.message:
            return True
        raise
    return False


@pytest.mark.parametrize(("name", "scope"), QUOTAS_TRIED, ids=[n for n, _ in QUOTAS_TRIED])
async def test_the_api_servers_quota_admission_agrees_with_our_scopes(
    name: str,
    scope: dict[str, Any],
    kubevirt_api: ApiClient,
    kubevirt_namespace: str,
    priority_classes: None,
) -> None:
    api, namespace = kubevirt_api, kubevirt_namespace
    quota = {"metadata": {"name": name}, "spec": {"hard": {"pods": "0"}, **scope}}
    await api.create(RESOURCE_QUOTAS, quota, namespace)

    async def enforced() -> bool:
        stored = await api.get(RESOURCE_QUOTAS, name, namespace)
        return bool((stored.get("status") or {}).get("hard"))

    await eventually(enforced, what=f"quota {name} enforced")
    stored = await api.get(RESOURCE_QUOTAS, name, namespace)
    ours = {p["metadata"]["name"]: applies_to(stored, p) for p in PODS_TRIED}
    theirs = {p["metadata"]["name"]: await refused_by_quota(api, namespace, p) for p in PODS_TRIED}
    assert theirs == ours
    assert any(ours.values()), "the quota charges at least one pod tried"
