"""A scale step's result for unit tests: every count zero, every series empty, unless given."""

from __future__ import annotations

from typing import Any

from harvester_quota.testbench.scale.stats import StepResult


def step_result(name: str = "s", **given: Any) -> StepResult:
    """A StepResult named `name` with nothing measured, then `given` fields set."""
    nothing: dict[str, Any] = {
        "namespace_size": 0,
        "migrations": 0,
        "succeeded": 0,
        "latencies": (),
        "create_seconds": (),
        "refused": 0,
        "refusals": 0,
        "blocked_seconds": 0.0,
        "seconds": 1.0,
        "settle_seconds": 0.0,
        "quota_writes": 0.0,
        "requests": {},
        "cpu": {},
        "controller_rss_bytes": 0.0,
        "reconciles": 0.0,
        "reconcile_seconds": 0.0,
        "drift": 0,
        "stale": 0,
    }
    return StepResult(name=name, **{**nothing, **given})
