"""Where a step's controller CPU went, per migration: read from the
controller's own /metrics (pure: no I/O).

The controller exports (generic/frameworkmetrics.py) its watch events by resource and type with
the CPU of its watch streams (read, decode, store, notify), and each handler run by controller and
handler with that run's CPU (its API calls' client side included); generic/requestmetrics.py its
API requests by verb and resource. `Breakdown` holds those counters of one scrape; `minus` gives
a step's share; `render` says it per migration. The controller's CPU less the watch streams' and
the handlers' is "other": informer handlers queueing keys, the status copies beside the
reconciles, leader election, serving /metrics, the garbage collector, the HTTP client's transport.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from prometheus_client.samples import Sample

K = TypeVar("K")

WATCH_EVENTS: Final = "harvester_quota_watch_events_total"
WATCH_CPU: Final = "harvester_quota_watch_cpu_seconds_total"
HANDLER_RUNS: Final = "harvester_quota_handler_runs_total"
HANDLER_CPU: Final = "harvester_quota_handler_cpu_seconds_sum"
REQUESTS: Final = "harvester_quota_api_requests_total"


@dataclass(frozen=True)
class Breakdown:
    """The controller's counters of one scrape (or, after `minus`, of one step)."""

    watch_events: Mapping[tuple[str, str], float] = field(default_factory=dict)
    """(resource, event type) -> watch events received and decoded."""
    watch_cpu: Mapping[str, float] = field(default_factory=dict)
    """resource -> CPU seconds of its watch streams."""
    handler_runs: Mapping[tuple[str, str], float] = field(default_factory=dict)
    """(controller, handler) -> runs."""
    handler_cpu: Mapping[tuple[str, str], float] = field(default_factory=dict)
    """(controller, handler) -> CPU seconds of those runs."""
    requests: Mapping[tuple[str, str], float] = field(default_factory=dict)
    """(verb, resource) -> the controller's own API requests (the webhook's are not here)."""

    def minus(self, earlier: Breakdown) -> Breakdown:
        """What happened between `earlier` and this scrape."""
        return Breakdown(
            _minus(self.watch_events, earlier.watch_events),
            _minus(self.watch_cpu, earlier.watch_cpu),
            _minus(self.handler_runs, earlier.handler_runs),
            _minus(self.handler_cpu, earlier.handler_cpu),
            _minus(self.requests, earlier.requests),
        )

    def watch_seconds(self) -> float:
        return sum(self.watch_cpu.values())

    def handler_seconds(self) -> float:
        return sum(self.handler_cpu.values())

    def events_by_resource(self) -> dict[str, dict[str, float]]:
        """resource -> event type -> events, resources with the most events first."""
        by_resource: dict[str, dict[str, float]] = {}
        for (resource, event_type), n in sorted(self.watch_events.items()):
            by_resource.setdefault(resource, {})[event_type] = n
        return dict(sorted(by_resource.items(), key=lambda kv: -sum(kv[1].values())))


def _minus(now: Mapping[K, float], before: Mapping[K, float]) -> dict[K, float]:
    return {k: v - before.get(k, 0.0) for k, v in now.items() if v - before.get(k, 0.0)}


def _add(into: dict[K, float], key: K, value: float) -> None:
    into[key] = into.get(key, 0.0) + value


def breakdown_of(samples: Iterable[Sample]) -> Breakdown:
    """The breakdown's counters among a process's samples (others are ignored)."""
    events: dict[tuple[str, str], float] = {}
    watch_cpu: dict[str, float] = {}
    runs: dict[tuple[str, str], float] = {}
    handler_cpu: dict[tuple[str, str], float] = {}
    requests: dict[tuple[str, str], float] = {}
    for sample in samples:
        labels = sample.labels
        if sample.name == WATCH_EVENTS:
            _add(events, (labels.get("resource", ""), labels.get("type", "")), sample.value)
        elif sample.name == WATCH_CPU:
            _add(watch_cpu, labels.get("resource", ""), sample.value)
        elif sample.name in (HANDLER_RUNS, HANDLER_CPU):
            key = (labels.get("controller", ""), labels.get("handler", ""))
            _add(runs if sample.name == HANDLER_RUNS else handler_cpu, key, sample.value)
        elif sample.name == REQUESTS:
            _add(requests, (labels.get("verb", ""), labels.get("resource", "")), sample.value)
    return Breakdown(events, watch_cpu, runs, handler_cpu, requests)


# Per migration ------------------------------------------------------------------------------------


def cpu_split_ms(breakdown: Breakdown, controller_cpu: float, migrations: int) -> dict[str, float]:
    """The controller's CPU per migration in ms: total, watch streams, handlers, other."""
    if not migrations:
        return {"total": 0.0, "watch": 0.0, "handlers": 0.0, "other": 0.0}
    watch, handlers = breakdown.watch_seconds(), breakdown.handler_seconds()
    return {
        "total": 1000 * controller_cpu / migrations,
        "watch": 1000 * watch / migrations,
        "handlers": 1000 * handlers / migrations,
        "other": 1000 * (controller_cpu - watch - handlers) / migrations,
    }


def to_json(breakdown: Breakdown, controller_cpu: float, migrations: int) -> dict[str, Any]:
    """Per migration: the CPU split (ms), watch events by resource and type, handler runs and
    their CPU (ms) by controller/handler, the controller's requests by verb and resource."""
    per = 1 / migrations if migrations else 0.0
    return {
        "cpu_ms": {
            k: round(v, 2) for k, v in cpu_split_ms(breakdown, controller_cpu, migrations).items()
        },
        "watch_events": {
            resource: {t: round(n * per, 2) for t, n in types.items()}
            for resource, types in breakdown.events_by_resource().items()
        },
        "watch_cpu_ms": {
            r: round(1000 * s * per, 2) for r, s in sorted(breakdown.watch_cpu.items())
        },
        "handler_runs": {
            f"{c}/{h}": round(n * per, 2) for (c, h), n in sorted(breakdown.handler_runs.items())
        },
        "handler_cpu_ms": {
            f"{c}/{h}": round(1000 * s * per, 2)
            for (c, h), s in sorted(breakdown.handler_cpu.items())
        },
        "controller_requests": {
            f"{v} {r}": round(n * per, 2) for (v, r), n in sorted(breakdown.requests.items())
        },
    }


HEADER: Final = (
    "| step | controller CPU ms/mig: total = watch + handlers + other "
    "| watch events/mig by resource, bookmarks included (ADDED/MODIFIED/DELETED) "
    "| handler runs/mig (CPU ms/mig) by controller/handler "
    "| controller requests/mig by verb and resource |"
)


def row(name: str, breakdown: Breakdown, controller_cpu: float, migrations: int) -> str:
    """One step's breakdown as a Markdown table row under `HEADER`."""
    per = 1 / migrations if migrations else 0.0
    split = cpu_split_ms(breakdown, controller_cpu, migrations)
    cpu = (
        f"{split['total']:.1f} = {split['watch']:.1f} + {split['handlers']:.1f} "
        f"+ {split['other']:.1f}"
    )
    events = ", ".join(
        f"{resource} {sum(types.values()) * per:.1f} ("
        + "/".join(f"{types.get(t, 0.0) * per:.1f}" for t in ("ADDED", "MODIFIED", "DELETED"))
        + ")"
        for resource, types in breakdown.events_by_resource().items()
        if any(t != "BOOKMARK" for t in types)
    )
    runs = ", ".join(
        f"{c}/{h} {n * per:.2f} ({1000 * breakdown.handler_cpu.get((c, h), 0.0) * per:.1f})"
        for (c, h), n in sorted(breakdown.handler_runs.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    requests = ", ".join(
        f"{v} {r} {n * per:.2f}"
        for (v, r), n in sorted(breakdown.requests.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    return f"| {name} | {cpu} | {events or '-'} | {runs or '-'} | {requests or '-'} |"


def table(rows: Iterable[str]) -> str:
    """`HEADER`, its rule and `rows`."""
    return "\n".join([HEADER, "|" + "---|" * 5, *rows])


def line(breakdown: Breakdown, controller_cpu: float, migrations: int) -> str:
    """One human line per step: the CPU split and the busiest figures, per migration."""
    per = 1 / migrations if migrations else 0.0
    split = cpu_split_ms(breakdown, controller_cpu, migrations)
    events = sum(n for (_, t), n in breakdown.watch_events.items() if t != "BOOKMARK")
    return (
        f"  CPU/migration {split['total']:.1f} ms = watch {split['watch']:.1f} + handlers "
        f"{split['handlers']:.1f} + other {split['other']:.1f}; {events * per:.1f} watch "
        f"events, {sum(breakdown.handler_runs.values()) * per:.1f} handler runs, "
        f"{sum(breakdown.requests.values()) * per:.1f} controller requests per migration"
    )
