"""API requests by Kubernetes verb and resource: the path parsing and the counting."""

from __future__ import annotations

import pytest
from harvester_quota.generic.requestmetrics import ApiRequestMetrics, RequestInfo, request_info
from prometheus_client import CollectorRegistry

from tests.unit.fakes import RequestRecorder


@pytest.mark.parametrize(
    ("method", "path", "params", "expected"),
    [
        ("GET", "/api/v1/pods", None, RequestInfo("list", "pods")),
        ("GET", "/api/v1/pods", {"watch": "1"}, RequestInfo("watch", "pods")),
        ("GET", "/api/v1/namespaces/ns/pods", {"watch": "true"}, RequestInfo("watch", "pods")),
        ("GET", "/api/v1/namespaces/ns/pods/p", None, RequestInfo("get", "pods")),
        ("POST", "/api/v1/namespaces/ns/events", None, RequestInfo("create", "events")),
        (
            "PATCH",
            "/api/v1/namespaces/ns/resourcequotas/q",
            None,
            RequestInfo("patch", "resourcequotas"),
        ),
        (
            "PUT",
            "/api/v1/namespaces/ns/resourcequotas/q/status",
            None,
            RequestInfo("update", "resourcequotas/status"),
        ),
        ("GET", "/api/v1/namespaces", None, RequestInfo("list", "namespaces")),
        ("GET", "/api/v1/namespaces/ns", None, RequestInfo("get", "namespaces")),
        ("PATCH", "/api/v1/namespaces/ns", None, RequestInfo("patch", "namespaces")),
        ("PUT", "/api/v1/namespaces/ns/status", None, RequestInfo("update", "namespaces/status")),
        (
            "GET",
            "/apis/kubevirt.io/v1/namespaces/ns/virtualmachineinstancemigrations",
            {"watch": "1", "allowWatchBookmarks": "true"},
            RequestInfo("watch", "virtualmachineinstancemigrations"),
        ),
        (
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l",
            None,
            RequestInfo("update", "leases"),
        ),
        ("GET", "/apis/harvesterhci.io/v1beta1/settings", None, RequestInfo("list", "settings")),
        ("DELETE", "/api/v1/namespaces/ns/pods", None, RequestInfo("deletecollection", "pods")),
        ("DELETE", "/api/v1/namespaces/ns/pods/p", None, RequestInfo("delete", "pods")),
        ("GET", "/apis/kubevirt.io/v1", None, RequestInfo("get", "")),
        ("GET", "/healthz", None, RequestInfo("get", "")),
        ("GET", "/api/v1/pods?watch=1", None, RequestInfo("list", "pods")),
    ],
)
def test_the_verb_and_resource_are_the_api_servers_own(
    method: str, path: str, params: dict[str, str] | None, expected: RequestInfo
) -> None:
    assert request_info(method, path, params) == expected


def test_requests_are_counted_by_verb_resource_and_code() -> None:
    registry = CollectorRegistry()
    metrics = ApiRequestMetrics(registry)
    metrics.observe("PATCH", "/api/v1/namespaces/a/resourcequotas/q", None, "200", 0.01)
    metrics.observe("PATCH", "/api/v1/namespaces/b/resourcequotas/q", None, "200", 0.02)
    metrics.observe("PATCH", "/api/v1/namespaces/b/resourcequotas/q", None, "409", 0.02)
    metrics.observe("GET", "/api/v1/pods", {"watch": "1"}, "error", 3.0)

    def count(verb: str, resource: str, code: str) -> float | None:
        return registry.get_sample_value(
            "harvester_quota_api_requests_total",
            {"verb": verb, "resource": resource, "code": code},
        )

    assert count("patch", "resourcequotas", "200") == 2
    assert count("patch", "resourcequotas", "409") == 1
    assert count("watch", "pods", "error") == 1
    assert (
        registry.get_sample_value(
            "harvester_quota_api_request_duration_seconds_count",
            {"verb": "patch", "resource": "resourcequotas"},
        )
        == 3
    )


async def test_a_request_that_gets_no_answer_is_observed_once_as_an_error() -> None:
    from harvester_quota.generic import errors
    from harvester_quota.generic.client import ApiClient
    from harvester_quota.generic.config import ClientConfig
    from harvester_quota.generic.resource import PODS
    from harvester_quota.testbench.localcluster.process import free_port

    recorder = RequestRecorder()
    async with ApiClient(ClientConfig(f"http://127.0.0.1:{free_port()}", False)) as client:
        client.add_request_observer(recorder)
        with pytest.raises(errors.ConnectionRefused):
            await client.get(PODS, "p", "ns")
        with pytest.raises(errors.ConnectionRefused):
            async for _ in client.watch(PODS, "ns"):
                pass
        client.remove_request_observer(recorder)
        with pytest.raises(errors.ConnectionRefused):
            await client.get(PODS, "p", "ns")
    assert recorder.seen == [
        ("GET", "/api/v1/namespaces/ns/pods/p", "error"),
        ("GET", "/api/v1/namespaces/ns/pods", "error"),
    ]
