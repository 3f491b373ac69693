"""The webhook's metrics, and the plain-HTTP endpoint that serves them (never the admission port:
/metrics names every namespace)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from prometheus_client import REGISTRY, CollectorRegistry

from ..generic.health import HealthServer
from ..generic.metrics import MetricFactory
from .limiter import PRIORITY_SIZE, QUEUE, SIZE
from .resources.pod.targets import (
    OUTCOMES,
)

log = logging.getLogger(__name__)


METRICS_PORT = 8081
"""The plain-HTTP port of /metrics, /healthz and /readyz (never the admission port)."""
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
"""The bounds of `webhook_seconds`: below 5 ms in steps a pod create's admission is measured in
(most take 1-5 ms; client-go's defaults start at 5 ms, where "under 5 ms" cannot be told)."""


class WebhookMetrics:
    """The webhook's admission counters and timings, on `registry` (the default one unless a test
    gives its own)."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        declare = MetricFactory(registry)
        self.target_pods = declare.counter_over(
            "webhook_target_pods",
            "Migration target pods admitted, by how their room was found (pod/targets.py).",
            "outcome",
            OUTCOMES,
        )
        self.target_wait = declare.histogram(
            "webhook_target_wait_seconds",
            "Time a migration target pod's admission waited for its room.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16),
        )
        self.requests = declare.counter(
            "webhook_requests",
            "Admission requests answered, by endpoint and outcome.",
            ["endpoint", "outcome"],
        )
        self.latency = declare.histogram(
            "webhook_seconds",
            "Time to answer one admission request, from its headers (before its read slot and "
            "body) to its answer, the admission limiter's wait included.",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
        )
        self.certificate_expiry = declare.gauge(
            "webhook_certificate_expiry_timestamp_seconds",
            "When the serving certificate this replica serves expires (notAfter, Unix seconds; "
            "0 before one is loaded): falls behind time() + its renewal margin only when the "
            "certificates stopped being renewed.",
        )
        self.certificate_start = declare.gauge(
            "webhook_certificate_start_timestamp_seconds",
            "When the serving certificate this replica serves became valid (notBefore, Unix "
            "seconds; 0 before one is loaded): with its expiry, its lifetime.",
        )
        self.in_flight = declare.gauge(
            "webhook_admissions_in_flight",
            "Admissions read and not yet answered: waiting for a place of the admission limiter "
            f"or being decided (at most {SIZE + PRIORITY_SIZE + QUEUE} by default).",
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
