"""The local cluster is a real Kubernetes: quota admission, the quota controller, webhooks, CRDs."""

from __future__ import annotations

from typing import Any

import pytest
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.localcluster.rest import ApiError, RestClient

from tests.helpers import wait_until

pytestmark = pytest.mark.integration


def cpu_pod(name: str, cpu: str, grace: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": grace,
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"limits": {"cpu": cpu}}}
            ],
        },
    }


def create_quota(rest: RestClient, namespace: str, hard: dict[str, str]) -> str:
    """Creates a quota and waits until kube-controller-manager has filled its status.

    Right after creation, admission answers "status unknown for quota" until the quota
    controller computes status.used, so a test that does not wait is flaky.
    """
    rest.post(
        f"/api/v1/namespaces/{namespace}/resourcequotas",
        {"metadata": {"name": "compute"}, "spec": {"hard": hard}},
    )
    wait_until(
        lambda: "used" in quota_status(rest, namespace),
        what="the quota controller to fill status.used",
    )
    return "compute"


def quota_status(rest: RestClient, namespace: str) -> dict[str, Any]:
    status: dict[str, Any] = rest.get(f"/api/v1/namespaces/{namespace}/resourcequotas/compute").get(
        "status", {}
    )
    return status


def used_cpu(rest: RestClient, namespace: str) -> str | None:
    used: str | None = quota_status(rest, namespace).get("used", {}).get("limits.cpu")
    return used


def test_pod_over_quota_is_refused_with_the_quota_named(rest: RestClient, namespace: str) -> None:
    quota = create_quota(rest, namespace, {"limits.cpu": "2"})
    with pytest.raises(ApiError) as refused:
        rest.post(f"/api/v1/namespaces/{namespace}/pods", cpu_pod("too-big", "3"))
    assert refused.value.status == 403
    assert f"exceeded quota: {quota}" in refused.value.message
    assert "requested: limits.cpu=3" in refused.value.message
    assert "limited: limits.cpu=2" in refused.value.message


def test_quota_usage_is_recomputed_by_the_controller_after_a_delete(
    rest: RestClient, namespace: str
) -> None:
    create_quota(rest, namespace, {"limits.cpu": "2"})
    pods = f"/api/v1/namespaces/{namespace}/pods"
    rest.post(pods, cpu_pod("first", "1"))
    rest.post(pods, cpu_pod("second", "1"))
    with pytest.raises(ApiError) as refused:
        rest.post(pods, cpu_pod("third", "1"))
    assert "exceeded quota: compute" in refused.value.message

    wait_until(lambda: used_cpu(rest, namespace) == "2", what="used limits.cpu 2")
    rest.delete(f"{pods}/first")
    # The terminating pod still counts until kwok removes it at the end of its grace period;
    # then kube-controller-manager (not this test) recomputes status.used.
    wait_until(lambda: used_cpu(rest, namespace) == "1", what="used limits.cpu back to 1")
    created = rest.post(pods, cpu_pod("third", "1"))
    assert created["metadata"]["name"] == "third"


def test_pods_are_scheduled_and_run_on_kwok_nodes(
    rest: RestClient, namespace: str, cluster: ClusterInfo
) -> None:
    rest.post(f"/api/v1/namespaces/{namespace}/pods", cpu_pod("runner", "100m"))

    def running() -> dict[str, Any] | None:
        pod = rest.get(f"/api/v1/namespaces/{namespace}/pods/runner")
        return pod if pod.get("status", {}).get("phase") == "Running" else None

    pod = wait_until(running, what="the pod to be scheduled and Running")
    assert pod["spec"]["nodeName"] in cluster.nodes


def test_terminating_pod_counts_until_its_grace_period_ends(
    rest: RestClient, namespace: str
) -> None:
    create_quota(rest, namespace, {"limits.cpu": "1"})
    pods = f"/api/v1/namespaces/{namespace}/pods"
    rest.post(pods, cpu_pod("source", "1", grace=6))
    wait_until(lambda: used_cpu(rest, namespace) == "1", what="used limits.cpu 1")
    # Only a pod bound to a node is deleted gracefully: the API server removes an unscheduled
    # one at once (seen in CI, where the scheduler had not bound it yet).
    wait_until(lambda: rest.get(f"{pods}/source")["spec"].get("nodeName"), what="source bound")
    rest.delete(f"{pods}/source")
    # Like a virt-launcher source pod after a migration: gone from the workload's point of view,
    # still charged to the quota, so a pod of the same size is refused for now.
    with pytest.raises(ApiError) as refused:
        rest.post(pods, cpu_pod("target", "1"))
    assert "exceeded quota" in refused.value.message
    assert rest.exists(f"{pods}/source")
    wait_until(lambda: not rest.exists(f"{pods}/source"), timeout=30, what="grace period end")
    wait_until(lambda: used_cpu(rest, namespace) == "0", what="usage released")
    rest.post(pods, cpu_pod("target", "1"))
