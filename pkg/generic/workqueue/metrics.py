"""Prometheus metrics for work queues, under the names client-go's workqueue metrics use.

Dashboards and alerts written for Go controllers (``workqueue_depth{name="..."}`` and friends) work
unchanged against this sidecar. Every metric carries one label, ``name``: the queue's name.

The queues count in plain attributes (``stats.adds += 1``) and a custom collector turns the counts
into metric families when the registry is scraped. prometheus_client's own metric objects take a
lock and a few checks per update, about 0.5 us for a counter and 1.5 us for a histogram; a queue
cycle (add, get, done) makes seven such updates, which made a named queue ten times slower than an
unnamed one.

One collector is registered per ``CollectorRegistry``, on the first named queue that uses it; it
holds one ``QueueStats`` per queue name. So any number of queues (and tests) may use the same name
and the same registry without a duplicate-registration error; queues that share a name share their
series (their counts add up). A queue without a name gets no metrics object at all, which keeps an
unnamed queue's hot path free of metric work, like client-go's no-op provider.

A scrape from another thread (prometheus_client's own HTTP server) reads the counts without a lock:
each value is read atomically, but a histogram's count and buckets may be one observation apart.
Served from the event loop (``harvester_quota.generic.health``), a scrape is exact.
"""

from __future__ import annotations

import bisect
import time
import weakref
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from ..clock import Clock, RealClock

T = TypeVar("T", bound=Hashable)

DEPTH = "workqueue_depth"
ADDS = "workqueue_adds_total"
QUEUE_DURATION = "workqueue_queue_duration_seconds"
WORK_DURATION = "workqueue_work_duration_seconds"
UNFINISHED_WORK = "workqueue_unfinished_work_seconds"
LONGEST_RUNNING_PROCESSOR = "workqueue_longest_running_processor_seconds"
RETRIES = "workqueue_retries_total"

DURATION_BUCKETS: tuple[float, ...] = (
    1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0,
)  # fmt: skip
"""Powers of ten from 10 ns to 1000 s, as controller-runtime registers them: a queue wait can be a
few microseconds on an idle controller and up to the 1000 s backoff cap on a failing one."""

DEFAULT_REGISTRY: CollectorRegistry = REGISTRY
"""Where named queues register when no registry is given: prometheus_client's process-wide
registry, the one a ``/metrics`` endpoint serves by default."""

_HELP = {
    DEPTH: "Current depth of the work queue.",
    ADDS: "Adds handled by the work queue.",
    QUEUE_DURATION: "Seconds an item waits in the work queue before a worker gets it.",
    WORK_DURATION: "Seconds a worker spends on an item, from get to done.",
    UNFINISHED_WORK: (
        "Seconds of work in progress not yet observed by work_duration; a large value with few "
        "items in progress points at stuck workers."
    ),
    LONGEST_RUNNING_PROCESSOR: "Seconds the longest-running item of the work queue has been in "
    "progress.",
    RETRIES: "Retries handled by the work queue.",
}
_BUCKET_LABELS = [repr(bound) for bound in DURATION_BUCKETS] + ["+Inf"]
"""The ``le`` labels; ``repr`` spells these bounds as prometheus_client does ("1e-08", "10.0")."""


class Histogram:
    """Observation counts per bucket (the last one is +Inf) and their sum."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(DURATION_BUCKETS) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # bisect_left finds the first bound >= value: the bucket whose ``le`` holds it.
        self.counts[bisect.bisect_left(DURATION_BUCKETS, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, float]]:
        """Prometheus buckets: for each ``le``, how many observations were at most that."""
        counts = list(self.counts)  # one atomic copy, then no more reads of the live list
        running = 0
        buckets = []
        for label, count in zip(_BUCKET_LABELS, counts, strict=True):
            running += count
            buckets.append((label, float(running)))
        return buckets


class QueueStats:
    """The current values of one queue name's series."""

    __slots__ = (
        "adds",
        "depth",
        "has_retries",
        "longest_running_processor",
        "queue_duration",
        "retries",
        "unfinished_work",
        "work_duration",
    )

    def __init__(self) -> None:
        self.adds = 0
        self.depth = 0
        self.queue_duration = Histogram()
        self.work_duration = Histogram()
        self.unfinished_work = 0.0
        self.longest_running_processor = 0.0
        self.retries = 0
        self.has_retries = False  # only delaying queues export retries, as in client-go


class _WorkqueueCollector:
    """Turns the stats of every queue name of one registry into metric families at scrape time."""

    def __init__(self) -> None:
        self.stats: dict[str, QueueStats] = {}

    def stats_for(self, name: str) -> QueueStats:
        stats = self.stats.get(name)
        if stats is None:
            stats = self.stats[name] = QueueStats()
        return stats

    def describe(self) -> Iterator[Metric]:
        """The families this collector owns, so the registry can refuse a clashing one."""
        return self._families({})

    def collect(self) -> Iterator[Metric]:
        return self._families(dict(self.stats))

    def _families(self, stats_by_name: dict[str, QueueStats]) -> Iterator[Metric]:
        labels = ["name"]
        depth = GaugeMetricFamily(DEPTH, _HELP[DEPTH], labels=labels)
        adds = CounterMetricFamily(ADDS, _HELP[ADDS], labels=labels)
        queue_duration = HistogramMetricFamily(QUEUE_DURATION, _HELP[QUEUE_DURATION], labels=labels)
        work_duration = HistogramMetricFamily(WORK_DURATION, _HELP[WORK_DURATION], labels=labels)
        unfinished = GaugeMetricFamily(UNFINISHED_WORK, _HELP[UNFINISHED_WORK], labels=labels)
        longest = GaugeMetricFamily(
            LONGEST_RUNNING_PROCESSOR, _HELP[LONGEST_RUNNING_PROCESSOR], labels=labels
        )
        retries = CounterMetricFamily(RETRIES, _HELP[RETRIES], labels=labels)
        for name, stats in stats_by_name.items():
            value = [name]
            depth.add_metric(value, stats.depth)
            adds.add_metric(value, stats.adds)
            queue_duration.add_metric(
                value, stats.queue_duration.cumulative(), stats.queue_duration.sum
            )
            work_duration.add_metric(
                value, stats.work_duration.cumulative(), stats.work_duration.sum
            )
            unfinished.add_metric(value, stats.unfinished_work)
            longest.add_metric(value, stats.longest_running_processor)
            if stats.has_retries:
                retries.add_metric(value, stats.retries)
        yield from (depth, adds, queue_duration, work_duration, unfinished, longest, retries)


_collectors: weakref.WeakKeyDictionary[CollectorRegistry, _WorkqueueCollector] = (
    weakref.WeakKeyDictionary()
)


def queue_stats(name: str, registry: CollectorRegistry | None = None) -> QueueStats:
    """The shared stats of queue ``name`` in ``registry``, registering the collector on first use."""
    registry = DEFAULT_REGISTRY if registry is None else registry
    collector = _collectors.get(registry)
    if collector is None:
        collector = _WorkqueueCollector()
        registry.register(collector)
        _collectors[registry] = collector
    return collector.stats_for(name)


class QueueMetrics(Generic[T]):
    """What one named queue records, with client-go's bookkeeping.

    ``add`` is called only when an item becomes dirty (not for a collapsed duplicate), ``get`` when a
    worker takes it, ``done`` when the worker finishes. The depth gauge therefore counts dirty items
    not yet handed out, including an item re-added while it is being processed: such an item is not
    in the queue yet (``Queue.len()`` leaves it out) but it is waiting.
    """

    __slots__ = ("_add_times", "_now", "_processing_start_times", "stats")

    def __init__(self, name: str, clock: Clock, registry: CollectorRegistry | None) -> None:
        # Durations only need differences of one monotonic clock. RealClock reads the event loop's
        # time, which is time.monotonic behind two calls; reading that directly saves a third of a
        # named queue's metric cost (three readings per item).
        self._now: Callable[[], float] = (
            time.monotonic if type(clock) is RealClock else clock.monotonic
        )
        self.stats = queue_stats(name, registry)
        self._add_times: dict[T, float] = {}
        self._processing_start_times: dict[T, float] = {}

    def add(self, item: T) -> None:
        stats = self.stats
        stats.adds += 1
        stats.depth += 1
        # The first add counts: a re-add of an item still waiting does not reset its wait.
        if item not in self._add_times:
            self._add_times[item] = self._now()

    def get(self, item: T) -> None:
        now = self._now()
        stats = self.stats
        stats.depth -= 1
        self._processing_start_times[item] = now
        added_at = self._add_times.pop(item, None)
        if added_at is not None:
            stats.queue_duration.observe(now - added_at)

    def done(self, item: T) -> None:
        started_at = self._processing_start_times.pop(item, None)
        if started_at is not None:
            self.stats.work_duration.observe(self._now() - started_at)

    def update_unfinished_work(self) -> None:
        """Sets the two in-progress gauges from the items being processed now."""
        now = self._now()
        total = 0.0
        oldest = 0.0
        for started_at in self._processing_start_times.values():
            age = now - started_at
            total += age
            oldest = max(oldest, age)
        self.stats.unfinished_work = total
        self.stats.longest_running_processor = oldest


def new_queue_metrics(
    name: str, clock: Clock, registry: CollectorRegistry | None
) -> QueueMetrics[T] | None:
    """The metrics of a queue called ``name``; None for an unnamed queue (it records nothing)."""
    return QueueMetrics(name, clock, registry) if name else None


def new_retry_stats(name: str, registry: CollectorRegistry | None) -> QueueStats | None:
    """The stats whose ``retries`` a delaying queue called ``name`` counts; None if unnamed."""
    if not name:
        return None
    stats = queue_stats(name, registry)
    stats.has_retries = True
    return stats
