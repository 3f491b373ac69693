"""Declaring the product's Prometheus metrics: every name under one prefix, on one registry.

client_golang's users fill an opts struct (Namespace, Name, Help, labels) per metric and register
it; `MetricFactory` keeps the two parts every metric of a process shares, the prefix and the
registry, so that a module declares a metric by its own name, help and labels.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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

    def counter_over(
        self, name: str, documentation: str, label: str, values: Iterable[str]
    ) -> Counter:
        """A counter of one `label` whose every value is known: each series is exported from
        the start, at 0, so that a rate over it never starts from nothing."""
        counter = self.counter(name, documentation, [label])
        for value in values:
            counter.labels(value)
        return counter

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


LABEL_VALUE_MAX: Final = 63
"""Characters kept of a label value that comes from outside (a field manager's name may have 128)."""
OTHER: Final = "other"


class CappedLabelValues:
    """The values of one label that comes from outside the process (a field manager's name),
    normalised and capped so that no writer can grow the series without bound: each value keeps
    its first LABEL_VALUE_MAX characters of ``[A-Za-z0-9._:-]`` (others become "_", an empty one
    "unknown"); the first `limit` distinct values are kept, every later one is OTHER. The values
    kept are remembered for the process's life (at most `limit`)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._kept: set[str] = set()

    def __call__(self, raw: str) -> str:
        """The label value to use for `raw`."""
        value = "".join(c if c.isascii() and (c.isalnum() or c in "._:-") else "_" for c in raw)
        value = value[:LABEL_VALUE_MAX] or "unknown"
        if value in self._kept:
            return value
        if len(self._kept) >= self.limit:
            return OTHER
        self._kept.add(value)
        return value
