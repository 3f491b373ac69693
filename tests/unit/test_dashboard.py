"""The Grafana dashboard in deploy/ only plots metrics the product exports."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from harvester_quota.config.metrics import QuotaMetrics
from harvester_quota.util.quantity import Quantity
from harvester_quota.webhook.metrics import WebhookMetrics
from prometheus_client import CollectorRegistry

DASHBOARD = (
    Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "harvester-quota-dashboard.json"
)


def exported_samples() -> set[str]:
    registry = CollectorRegistry()
    QuotaMetrics(registry)
    WebhookMetrics(registry)
    names = set()
    for family in registry.collect():
        names.add(family.name)
        for suffix in ("_total", "_bucket", "_count", "_sum", "_created"):
            names.add(family.name + suffix)
    return names


def test_every_harvester_quota_series_in_the_dashboard_is_exported() -> None:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    used = {
        name
        for panel in panels
        for target in panel["targets"]
        for name in re.findall(r"harvester_quota_\w+", target["expr"])
    }
    assert len(used) >= 8
    assert used - exported_samples() == set()


def test_the_webhooks_latency_histogram_tells_apart_admissions_under_5_ms() -> None:
    """Issue 30, item 6's target for a namespace without room is a p99 under 5 ms: the
    histogram needs bounds below 5 ms to say whether it is met."""
    registry = CollectorRegistry()
    metrics = WebhookMetrics(registry)
    for seconds in (0.0008, 0.002, 0.004):
        metrics.latency.labels("pods").observe(seconds)
    below = {
        bound: registry.get_sample_value(
            "harvester_quota_webhook_seconds_bucket", {"endpoint": "pods", "le": bound}
        )
        for bound in ("0.001", "0.0025", "0.005")
    }
    assert below == {"0.001": 1.0, "0.0025": 2.0, "0.005": 3.0}


def test_every_panel_follows_the_job_variable_and_per_namespace_series_the_namespace_one() -> None:
    """Another controller's work queues (workqueue_depth has client-go's names) or a second
    install's series never mix into a panel: each selector filters on $job; the series with a
    namespace label (the tenant's) filter on $namespace as well."""
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert {"job", "namespace"} <= variables.keys()
    assert 'job=~"$job"' in variables["namespace"]["definition"]
    labelled = {
        family.name
        for family in _families()
        if "namespace" in (family.samples[0].labels if family.samples else {})
    } | {"harvester_quota_target_pods_refused", "harvester_quota_rancher_denials"}
    selectors = [
        (name, matchers)
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name, matchers in re.findall(r"(\w+)\{([^}]*)\}", target["expr"])
    ]
    assert {name for name, _ in selectors} >= {"workqueue_depth", "harvester_quota_room"}
    for name, matchers in selectors:
        assert 'job=~"$job"' in matchers, name
        if name.removesuffix("_total") in labelled:
            assert 'namespace=~"$namespace"' in matchers, name


def _families() -> list[Any]:
    """The controller's domain metric families, with one namespace's series set."""
    registry = CollectorRegistry()
    metrics = QuotaMetrics(registry)
    metrics.set_room("tenant", {"limits.cpu": Quantity.parse("1")}, 1)
    metrics.set_above_base("tenant", {"limits.cpu": Quantity.parse("1")})
    return list(registry.collect())
