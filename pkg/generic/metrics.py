"""Declaring the product's Prometheus metrics: every name under one prefix, on one registry.

client_golang's users fill an opts struct (Namespace, Name, Help, labels) per metric and register
it; `MetricFactory` keeps the two parts every metric of a process shares, the prefix and the
registry, so that a module declares a metric by its own name, help and labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

PREFIX: Final = "harvester_quota"
"""Every metric of the product is named ``harvester_quota_<name>``."""


@dataclass(frozen=True)
class MetricFactory:
    """Declares metrics named ``PREFIX_<name>`` on `registry` (prometheus_client adds ``_total``
    to a counter's name when it exports it). A name declared twice on one registry raises."""

    registry: CollectorRegistry

    def counter(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Counter:
        return Counter(f"{PREFIX}_{name}", documentation, labels, registry=self.registry)

    def gauge(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Gauge:
        return Gauge(f"{PREFIX}_{name}", documentation, labels, registry=self.registry)

    def histogram(
        self,
        name: str,
        documentation: str,
        labels: Sequence[str] = (),
        *,
        buckets: Sequence[float] = Histogram.DEFAULT_BUCKETS,
    ) -> Histogram:
        return Histogram(
            f"{PREFIX}_{name}", documentation, labels, registry=self.registry, buckets=buckets
        )
