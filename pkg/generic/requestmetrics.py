"""API requests by verb, resource and response code: what a process asks of the API server.

client-go counts `rest_client_requests_total{code, host, method}`; an operator sizing the load a
controller puts on the control plane wants the Kubernetes verb and the resource instead (the API
server's own `apiserver_request_total` is labelled that way), so that is what is counted here:
`harvester_quota_api_requests_total{verb, resource, code}` and
`harvester_quota_api_request_duration_seconds{verb, resource}` (time to the response headers; a
watch's stream and a list's body are not included).

The verb is derived from the method and the path as the API server's request-info resolver does:
GET of a collection is `list`, with `watch=1` it is `watch`, of a named object `get`; POST `create`,
PUT `update`, PATCH `patch`, DELETE `delete` (of a collection `deletecollection`). A subresource
is part of the resource label (`resourcequotas/status`). A transport failure has code `error`.

Not thread-safe by design: every observation happens on the event loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CollectorRegistry

from .metrics import MetricFactory

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
TRANSPORT_ERROR = "error"
"""The code label of a request that got no HTTP response."""


class RequestObserver(Protocol):
    """Told of every request an ApiClient makes, once its response (or failure) is known."""

    def observe(
        self, method: str, path: str, params: Mapping[str, str] | None, code: str, seconds: float
    ) -> None: ...


@dataclass(frozen=True)
class RequestInfo:
    verb: str
    resource: str


_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
_COLLECTION_VERBS = {"GET": "list", "POST": "create", "DELETE": "deletecollection"}
_OBJECT_VERBS = {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def request_info(method: str, path: str, params: Mapping[str, str] | None = None) -> RequestInfo:
    """The verb and resource of one request (`/api/v1/namespaces/ns/pods/p` -> get pods).

    Paths that name no resource (`/healthz`, `/version`, discovery) have resource "" and the
    lowercased method as verb.
    """
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if parts[:1] == ["api"]:
        rest = parts[2:]
    elif parts[:1] == ["apis"]:
        rest = parts[3:]
    else:
        return RequestInfo(method.lower(), "")
    if rest[:1] == ["namespaces"] and len(rest) >= 3 and rest[2] not in _NAMESPACE_SUBRESOURCES:
        rest = rest[2:]  # namespaced: drop "namespaces/<name>" unless the namespace is the object
    if not rest:
        return RequestInfo(method.lower(), "")
    resource = rest[0] if len(rest) < 3 else f"{rest[0]}/{rest[2]}"
    if len(rest) == 1:
        verb = _COLLECTION_VERBS.get(method, method.lower())
        if verb == "list" and (params or {}).get("watch") in ("1", "true"):
            verb = "watch"
    else:
        verb = _OBJECT_VERBS.get(method, method.lower())
    return RequestInfo(verb, resource)


class ApiRequestMetrics:
    """The request counter and latency histogram on one registry (a RequestObserver)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        declare = MetricFactory(registry)
        self.requests = declare.counter(
            "api_requests",
            "API server requests by Kubernetes verb, resource and HTTP code ('error': none).",
            ["verb", "resource", "code"],
        )
        self.duration = declare.histogram(
            "api_request_duration_seconds",
            "Seconds from sending an API request to its response headers, by verb and resource.",
            ["verb", "resource"],
            buckets=DURATION_BUCKETS,
        )

    def observe(
        self, method: str, path: str, params: Mapping[str, str] | None, code: str, seconds: float
    ) -> None:
        info = request_info(method, path, params)
        self.requests.labels(info.verb, info.resource, code).inc()
        self.duration.labels(info.verb, info.resource).observe(seconds)
