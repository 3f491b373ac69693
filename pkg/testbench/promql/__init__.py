"""Alert rules evaluated without Prometheus: the PromQL subset the chart's rules use
(parser), an in-memory series database filled by scrapes (series) and an instant evaluator with
Prometheus' semantics for that subset (evaluate). promtool would do this but costs more to build
than the cold cluster-bin budget allows (bench/CLUSTER.md); tests/integration/test_alert_rules.py
feeds it real scrapes of the controller and the webhook. Test bench only."""

from __future__ import annotations

from .evaluate import Evaluator, Sample, Value, Vector, extrapolated_increase
from .parser import Unsupported, parse, parse_duration
from .series import STALE, SeriesDatabase, Target

__all__ = [
    "STALE",
    "Evaluator",
    "Sample",
    "SeriesDatabase",
    "Target",
    "Unsupported",
    "Value",
    "Vector",
    "extrapolated_increase",
    "parse",
    "parse_duration",
]
