"""The webhook's metrics, and the plain-HTTP endpoint that serves them (never the admission port:
/metrics names every namespace)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from ..generic.health import HealthServer
from .connections import MAX_ADMISSIONS
from .resources.pod.targets import (
    OUTCOMES,
)

log = logging.getLogger(__name__)


METRICS_PORT = 8081
"""The plain-HTTP port of /metrics, /healthz and /readyz (never the admission port)."""


@dataclass
class WebhookMetrics:
    registry: CollectorRegistry = REGISTRY
    requests: Counter = field(init=False)
    latency: Histogram = field(init=False)
    in_flight: Gauge = field(init=False)
    target_pods: Counter = field(init=False)
    target_wait: Histogram = field(init=False)

    def __post_init__(self) -> None:
        self.target_pods = Counter(
            "harvester_quota_webhook_target_pods",
            "Migration target pods admitted, by how their room was found (pod/targets.py).",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in OUTCOMES:
            self.target_pods.labels(outcome)
        self.target_wait = Histogram(
            "harvester_quota_webhook_target_wait_seconds",
            "Time a migration target pod's admission waited for its room.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16),
            registry=self.registry,
        )
        self.requests = Counter(
            "harvester_quota_webhook_requests",
            "Admission requests answered, by endpoint and outcome.",
            ["endpoint", "outcome"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "harvester_quota_webhook_seconds",
            "Time to answer one admission request.",
            ["endpoint"],
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "harvester_quota_webhook_admissions_in_flight",
            f"Admissions holding one of the slots (at most {MAX_ADMISSIONS} by default) between "
            "reading their body and answering.",
            registry=self.registry,
        )


async def start_metrics_endpoint(
    address: tuple[str, int], ready: Callable[[], bool]
) -> HealthServer:
    """/metrics (the default registry: every namespace's usage), /healthz and /readyz (`ready`)
    over plain HTTP on `address`, apart from the admission port: the chart's NetworkPolicy lets
    only monitoring reach it. Returns the started server."""
    host, port = address
    endpoint = HealthServer(host=host, port=port)
    endpoint.add_readiness_check("caches", ready)
    await endpoint.start()
    log.info("metrics on http://%s:%d/metrics", host, endpoint.port)
    return endpoint
