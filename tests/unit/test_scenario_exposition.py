"""metrics.prom of a scenario run: every process's registry in one text, told apart by process."""

from __future__ import annotations

from harvester_quota.testbench.scenario.exposition import exposition
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.parser import text_string_to_metric_families


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _controller(writes: int) -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("hq_writes", "w", ["outcome"], registry=registry).labels("written").inc(writes)
    Gauge("hq_room", "r", ["namespace"], registry=registry).labels("ns-ab12c").set(2)
    return registry


def test_every_process_keeps_its_own_series_and_namespaces_get_the_scenario_names() -> None:
    webhook = CollectorRegistry()
    Counter("hq_requests", "q", registry=webhook).inc(5)
    text = exposition(
        [("webhook", webhook), ("controller-1", _controller(3)), ("controller-2", _controller(4))],
        {"ns-ab12c": "ns"},
    )
    samples = _samples(text)
    written = frozenset({("outcome", "written")})
    assert samples[("hq_writes_total", written | {("process", "controller-1")})] == 3
    assert samples[("hq_writes_total", written | {("process", "controller-2")})] == 4
    assert samples[("hq_requests_total", frozenset({("process", "webhook")}))] == 5
    assert ("hq_room", frozenset({("namespace", "ns"), ("process", "controller-2")})) in samples
    assert not any(("namespace", "ns-ab12c") in labels for _, labels in samples)
    assert text.count("# TYPE hq_writes_total counter") == 1
