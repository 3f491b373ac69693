"""Our pod quota usage (util/podusage.py) against the real kube-controller-manager's quota
recount: for pods with and without pod-level resources (spec.resources, PodLevelResources, on
by default since Kubernetes v1.34), the quota's status.used is the sum of what
pod_quota_usage charges the pods as the API server stored them, key for key."""

from __future__ import annotations

from typing import Any

import pytest
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import PODS, RESOURCE_QUOTAS, Object
from harvester_quota.util.podusage import pod_quota_usage
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.resources import ResourceList, total

from tests.helpers import eventually

pytestmark = pytest.mark.integration

HARD = dict.fromkeys(
    (
        "pods",
        "count/pods",
        "cpu",
        "memory",
        "requests.cpu",
        "requests.memory",
        "limits.cpu",
        "limits.memory",
    ),
    "1000Gi",
)


def container(name: str, requests: dict[str, str] | None, limits: dict[str, str] | None) -> Object:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {"name": name, "image": "x", "resources": resources}


def pod(name: str, containers: list[Object], **spec: Any) -> Object:
    return {"metadata": {"name": name}, "spec": {"containers": containers, **spec}}


SMALL = {"cpu": "100m", "memory": "64Mi"}
PODS_TRIED = [
    pod("containers-only", [container("c", SMALL, {"cpu": "200m", "memory": "128Mi"})]),
    pod(
        "pod-level-requests-and-limits",
        [container("c", SMALL, None)],
        resources={
            "requests": {"cpu": "1", "memory": "1Gi"},
            "limits": {"cpu": "2", "memory": "2Gi"},
        },
    ),
    pod(
        "pod-level-limits-only",
        [container("c", None, None), container("d", None, None)],
        resources={"limits": {"cpu": "700m", "memory": "512Mi"}},
    ),
    pod(
        "pod-level-limits-with-container-requests",
        [container("c", SMALL, None)],
        resources={"limits": {"cpu": "900m", "memory": "768Mi"}},
    ),
    pod(
        "pod-level-requests-container-limits",
        [container("c", SMALL, {"cpu": "500m", "memory": "512Mi"})],
        resources={"requests": {"cpu": "300m", "memory": "256Mi"}},
    ),
    pod(
        "pod-level-with-a-native-sidecar",
        [container("c", SMALL, None)],
        initContainers=[{**container("s", SMALL, None), "restartPolicy": "Always"}],
        resources={"requests": {"cpu": "400m", "memory": "300Mi"}, "limits": {"cpu": "3"}},
    ),
]


def used_of(quota: Object) -> ResourceList:
    used = (quota.get("status") or {}).get("used") or {}
    return {str(k): Quantity.parse(str(v)) for k, v in used.items()}


async def test_the_quota_controllers_recount_agrees_with_pod_quota_usage(
    api: ApiClient, namespace: str
) -> None:
    await api.create(
        RESOURCE_QUOTAS, {"metadata": {"name": "q"}, "spec": {"hard": HARD}}, namespace
    )

    async def enforced() -> bool:
        stored = await api.get(RESOURCE_QUOTAS, "q", namespace)
        return bool((stored.get("status") or {}).get("hard"))

    await eventually(enforced, what="quota q enforced")
    stored = [await api.create(PODS, p, namespace) for p in PODS_TRIED]
    by_pod = {p["metadata"]["name"]: pod_quota_usage(p) for p in stored}
    assert by_pod["pod-level-requests-and-limits"]["requests.cpu"] == Quantity.parse("1")
    assert by_pod["pod-level-limits-only"]["requests.memory"] == Quantity.parse("512Mi")
    ours = {key: value for key, value in total(by_pod.values()).items() if key in HARD}

    async def recounted() -> bool:
        return used_of(await api.get(RESOURCE_QUOTAS, "q", namespace)) == ours

    await eventually(recounted, what="status.used equal to our sum")
    theirs = used_of(await api.get(RESOURCE_QUOTAS, "q", namespace))
    assert theirs == ours
