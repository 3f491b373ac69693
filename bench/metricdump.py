"""``python -m bench.metricdump A_DIR B_DIR``: two scenario runs' metric dumps, compared.

A scenario run of strategy ``ours`` writes ``metrics.prom`` beside its report.json: the
Prometheus text of every controller it started and of its webhook, each sample labelled with its
``process`` and namespaces by their scenario names (testbench/scenario/exposition.py). For every
metrics.prom found at the same relative path under both directories (``<scenario>/ours/``), this
prints what differs and exits 1 when anything judged differs, 0 when nothing does (2 on a usage
error or when no dump is common to both).

What is compared, and how:

- **Families** (metric names): one exported on one side only is always judged, whatever its
  kind (a metric added or removed is a change of what operators scrape, not of timing), except
  the ``_created`` families the text format writes beside each counter and histogram and the
  runtime's ``process_*`` and ``python_*``.
- **Ignored** (neither their series nor their values are judged), because they measure time or
  CPU, which no two runs share:
  every sample whose name contains ``_seconds`` (durations, CPU seconds, Unix timestamps in
  seconds, and all three series of those histograms: buckets, ``_sum`` and ``_count``) or
  ``_timestamp``; every ``_bucket`` sample (how observations fell between bounds); every
  ``_created`` sample (prometheus_client's creation time of a counter's or histogram's series);
  and the runtime's own ``process_*`` and ``python_*`` families (families included).
- **Timing-dependent** (`TIMING_DEPENDENT`: their series and values are printed, counted, never
  judged): counts of the machinery whose number follows the interleaving of the run's writers
  rather than the scenario: API requests (conflict retries, watch restarts and relists), watch
  events (how many status writes KubeVirt and kwok made while a migration ran), handler runs and
  work-queue adds and retries (a key added while queued is coalesced), the webhook's admission
  requests (every retry of a refused target pod and every quota write passes it) and how its
  target pods found their room (whether the raise or the pod came first).
- **Judged** (every other series): the domain counters and gauges of config/metrics.py
  (quota writes by outcome, API writes by kind, refusals, rooms, migrations holding room, usage
  above base, Rancher denials, stale raises, foreign writes, releases held, target-pod retries,
  pauses), the leader gauge, skipped objects and admissions in flight: given a scenario, their
  values do not depend on timing in our design, so a series on one side only or a differing
  value is reported and fails the comparison. A run compared with itself (two runs of one
  tree) shows which of them vary anyway: bench/METRICDUMP.md records it.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

DUMP = "metrics.prom"
IGNORED_NAME = re.compile(r"_seconds|_timestamp|_bucket$|_created$|^process_|^python_")
"""Samples measuring time or CPU, or the runtime's own (module docstring)."""
UNJUDGED_FAMILY = re.compile(r"^(process|python)_|_created$")
"""Families whose presence is not judged: the runtime's, and the ``_created`` ones, which the
text format writes beside each counter and histogram (they come and go with their metric)."""
TIMING_DEPENDENT = frozenset(
    {
        "harvester_quota_api_requests",
        "harvester_quota_watch_events",
        "harvester_quota_handler_runs",
        "harvester_quota_webhook_requests",
        "harvester_quota_webhook_target_pods",
        "workqueue_adds",
        "workqueue_retries",
        "workqueue_depth",
    }
)
"""Families whose counts follow the run's timing (module docstring): shown, never judged."""

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True)
class Dump:
    """One metrics.prom: each series' value and family, and the families exported."""

    values: dict[SeriesKey, float]
    family_of: dict[SeriesKey, str]
    families: frozenset[str]


def parse(text: str) -> Dump:
    """The samples of a Prometheus text exposition, keyed by name and sorted labels. Raises
    ValueError (prometheus_client's) on text that is not an exposition."""
    values: dict[SeriesKey, float] = {}
    family_of: dict[SeriesKey, str] = {}
    families: set[str] = set()
    for family in text_string_to_metric_families(text):
        families.add(family.name)
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            values[key] = sample.value
            family_of[key] = family.name
    return Dump(values, family_of, frozenset(families))


@dataclass
class Comparison:
    """What differs between two dumps; `judged` says whether any of it fails."""

    families_only_a: list[str] = field(default_factory=list)
    families_only_b: list[str] = field(default_factory=list)
    series_only_a: list[SeriesKey] = field(default_factory=list)
    series_only_b: list[SeriesKey] = field(default_factory=list)
    values: list[tuple[SeriesKey, float, float]] = field(default_factory=list)
    timing_series: list[tuple[SeriesKey, str]] = field(default_factory=list)
    """Timing-dependent series on one side only, with that side ("A" or "B"; not judged)."""
    timing_values: list[tuple[SeriesKey, float, float]] = field(default_factory=list)
    """Timing-dependent values that differ (not judged)."""

    @property
    def judged(self) -> bool:
        return bool(
            self.families_only_a
            or self.families_only_b
            or self.series_only_a
            or self.series_only_b
            or self.values
        )


def kind(key: SeriesKey, family: str) -> str:
    """``ignored``, ``timing`` or ``judged`` (module docstring)."""
    if IGNORED_NAME.search(key[0]):
        return "ignored"
    return "timing" if family in TIMING_DEPENDENT else "judged"


def compare(a: Dump, b: Dump) -> Comparison:
    """Every difference of `b` from `a`, sorted, each in its class (module docstring)."""
    result = Comparison(
        families_only_a=sorted(f for f in a.families - b.families if not UNJUDGED_FAMILY.search(f)),
        families_only_b=sorted(f for f in b.families - a.families if not UNJUDGED_FAMILY.search(f)),
    )
    shared = a.families & b.families
    for key in sorted(a.values.keys() | b.values.keys()):
        family = a.family_of.get(key) or b.family_of[key]
        what = kind(key, family)
        if what == "ignored" or family not in shared:
            continue
        if key not in a.values or key not in b.values:
            if what == "timing":
                result.timing_series.append((key, "A" if key in a.values else "B"))
            else:
                (result.series_only_a if key in a.values else result.series_only_b).append(key)
        elif a.values[key] != b.values[key]:
            target = result.timing_values if what == "timing" else result.values
            target.append((key, a.values[key], b.values[key]))
    return result


def show(key: SeriesKey) -> str:
    name, labels = key
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"


def number(value: float) -> str:
    return str(int(value)) if value.is_integer() else f"{value:g}"


def report_lines(comparison: Comparison, *, verbose: bool = False) -> list[str]:
    """The human form of `comparison`: judged differences in full, timing-dependent ones
    counted (listed with `verbose`)."""
    lines = [f"  family only in A: {f}" for f in comparison.families_only_a]
    lines += [f"  family only in B: {f}" for f in comparison.families_only_b]
    lines += [f"  series only in A: {show(k)}" for k in comparison.series_only_a]
    lines += [f"  series only in B: {show(k)}" for k in comparison.series_only_b]
    lines += [f"  value: {show(k)} {number(x)} -> {number(y)}" for k, x, y in comparison.values]
    if comparison.timing_series or comparison.timing_values:
        lines.append(
            f"  timing-dependent (not judged): {len(comparison.timing_values)} values differ, "
            f"{len(comparison.timing_series)} series on one side only"
        )
        if verbose:
            lines += [
                f"    series only in {side}: {show(k)}" for k, side in comparison.timing_series
            ]
            lines += [
                f"    value: {show(k)} {number(x)} -> {number(y)}"
                for k, x, y in comparison.timing_values
            ]
    return lines


def dumps_under(directory: Path) -> dict[str, Path]:
    """Every metrics.prom under `directory`, by its path relative to it."""
    return {str(p.relative_to(directory).parent): p for p in sorted(directory.rglob(DUMP))}


def compare_dirs(a_dir: Path, b_dir: Path, *, verbose: bool = False) -> tuple[int, list[str]]:
    """The exit code and the lines printed for two report directories."""
    a, b = dumps_under(a_dir), dumps_under(b_dir)
    lines = [f"{name}: only in A" for name in sorted(a.keys() - b.keys())]
    lines += [f"{name}: only in B" for name in sorted(b.keys() - a.keys())]
    common = sorted(a.keys() & b.keys())
    if not common:
        return 2, [*lines, f"no {DUMP} at the same path under {a_dir} and {b_dir}"]
    failed = 0
    for name in common:
        comparison = compare(parse(a[name].read_text()), parse(b[name].read_text()))
        failed += comparison.judged
        state = "DIFFERS" if comparison.judged else "same (judged series)"
        lines.append(f"{name}: {state}")
        lines += report_lines(comparison, verbose=verbose)
    lines.append(f"{failed} of {len(common)} dumps differ in judged series")
    return (1 if failed else 0), lines


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a_dir", type=Path, help="report directory A (before)")
    parser.add_argument("b_dir", type=Path, help="report directory B (after)")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="list timing-dependent differences"
    )
    args = parser.parse_args(None if argv is None else list(argv))
    for directory in (args.a_dir, args.b_dir):
        if not directory.is_dir():
            print(f"{directory}: not a directory", file=sys.stderr)
            return 2
    code, lines = compare_dirs(args.a_dir, args.b_dir, verbose=args.verbose)
    print("\n".join(lines))
    return code


if __name__ == "__main__":
    sys.exit(main())
