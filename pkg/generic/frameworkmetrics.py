"""What the framework's own machinery costs: watch events received and the CPU of handlers.

An operator asking where a controller's CPU goes wants it split the way the framework spends it:

- `harvester_quota_watch_events_total{resource, type}`: watch events received and decoded, by
  resource (the informer's name, e.g. ``pods``) and event type (ADDED, MODIFIED, DELETED,
  BOOKMARK); every one of them except bookmarks was stored in the informer's cache;
- `harvester_quota_watch_cpu_seconds_total{resource}`: the CPU of the watch streams' own task:
  reading and splitting the stream, decoding each event, storing it (views included) and
  calling the informer's handlers, which hand keys to the workqueues;
- `harvester_quota_informer_objects_skipped_total{resource, stage}` (`SkipMetrics`, its own
  class because the webhook counts it too): objects an informer kept out of its cache, or whose
  notification a handler failed on, by the stage that refused them (informer.py's contract);
- `harvester_quota_handler_runs_total{controller, handler}`: runs of a controller's named
  handler (the reconciles by handler), counted as each starts;
- `harvester_quota_handler_cpu_seconds{controller, handler}`: one observation per run, the CPU
  of that run, its API requests' client side included (building, encoding, decoding), its
  waits not.

The two CPU metrics are kept only with `cpu=True` (`run --cpu-accounting`; the scale run turns
it on): they read the event loop thread's CPU clock twice per coroutine step
(`cputime.cpu_metered` for the watch streams, `cputime.cpu_timed` for handler runs), a system
call each, which a profile of a scale run found to be 8-10 % of the controller's CPU. What
neither counts (lists and relists with the handlers they call, resyncs, the HTTP transport's
reading of responses, work beside the reconciles, leader election, /metrics) is the process's
CPU less these.
CPython's garbage collector runs inside whichever step allocated when it triggered, so most of
its cost lands in watch or handler CPU.

Not thread-safe by design: every observation happens on the event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter

from .metrics import MetricFactory

HANDLER_CPU_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1)


class WatchObserver(Protocol):
    """Told of every watch event a reflector applies and, if it `measures_cpu`, of its watch
    streams' CPU."""

    @property
    def measures_cpu(self) -> bool: ...

    def watch_event(self, resource: str, event_type: str) -> None: ...

    def watch_cpu(self, resource: str, seconds: float) -> None: ...


class HandlerObserver(Protocol):
    """Told of every run of a controller's named handler as it starts and, if it
    `measures_cpu`, of each run's CPU seconds when it ends."""

    @property
    def measures_cpu(self) -> bool: ...

    def handler_started(self, controller: str, handler: str) -> None: ...

    def handler_ran(self, controller: str, handler: str, cpu_seconds: float) -> None: ...


class FrameworkMetrics:
    """The metrics of the module docstring on one registry (a WatchObserver and a
    HandlerObserver); a registry takes one instance, a second raises. With `cpu` False the two
    CPU metrics are not declared and `measures_cpu` tells the framework not to measure."""

    def __init__(self, registry: CollectorRegistry, *, cpu: bool = False) -> None:
        declare = MetricFactory(registry)
        self.measures_cpu = cpu
        self.watch_events = declare.counter(
            "watch_events",
            "Watch events received and decoded, by informer resource and event type.",
            ["resource", "type"],
        )
        self.handler_runs = declare.counter(
            "handler_runs",
            "Runs of a controller's named handler, counted as each starts.",
            ["controller", "handler"],
        )
        if cpu:
            self.watch_cpu_seconds = declare.counter(
                "watch_cpu_seconds",
                "CPU seconds of the watch streams' task (read, decode, store, notify), by "
                "resource (run --cpu-accounting).",
                ["resource"],
            )
            self.handler_cpu_seconds = declare.histogram(
                "handler_cpu_seconds",
                "CPU seconds of one run of a controller's handler, its API calls' client side "
                "included; the count is the runs (run --cpu-accounting).",
                ["controller", "handler"],
                buckets=HANDLER_CPU_BUCKETS,
            )
        self._bound: dict[tuple[object, ...], Callable[..., None]] = {}
        """The labelled children's `inc`, by metric and labels, bound once: a `labels()`
        lookup per event or step cost more than the clock reads it records."""

    def _inc(self, counter: Counter, *labels: str) -> Callable[..., None]:
        """`counter.labels(*labels).inc`, bound at its first use."""
        key = (id(counter), *labels)  # the counters live as long as this object
        inc = self._bound.get(key)
        if inc is None:
            inc = self._bound[key] = counter.labels(*labels).inc
        return inc

    def watch_event(self, resource: str, event_type: str) -> None:
        self._inc(self.watch_events, resource, event_type)()

    def watch_cpu(self, resource: str, seconds: float) -> None:
        """A watch stream step's CPU (nothing without `measures_cpu`)."""
        if self.measures_cpu:
            self._inc(self.watch_cpu_seconds, resource)(seconds)

    def handler_started(self, controller: str, handler: str) -> None:
        self._inc(self.handler_runs, controller, handler)()

    def handler_ran(self, controller: str, handler: str, cpu_seconds: float) -> None:
        """A run's CPU (nothing without `measures_cpu`)."""
        if self.measures_cpu:
            self.handler_cpu_seconds.labels(controller, handler).observe(cpu_seconds)


class SkipMetrics:
    """`harvester_quota_informer_objects_skipped_total{resource, stage}` on one registry: what
    informers skip (informer.SkippedObject). A registry takes one instance, a second raises."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.skipped = MetricFactory(registry).counter(
            "informer_objects_skipped",
            "Objects an informer kept out of its cache, or a handler failed on, by informer "
            "resource and the stage that refused them (transform, key, encode, index, view, "
            "listener, handler).",
            ["resource", "stage"],
        )

    def object_skipped(self, resource: str, stage: str) -> None:
        """Counts one object `resource`'s informer skipped at `stage`."""
        self.skipped.labels(resource, stage).inc()
