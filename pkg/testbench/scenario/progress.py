"""A live progress table while a scenario runs, and the side-by-side comparison afterwards.

On a terminal the table is redrawn in place (a few lines, not a log flood); elsewhere (CI, a pipe)
a table is printed only when something in it changed, at most every few seconds.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from ...util import resources
from ...util.quantity import Quantity
from .runner import ScenarioRun
from .writers import identity_totals

PIPE_INTERVAL = 5.0


def _short(key: str, text: str | None) -> str:
    if text is None:
        return "-"
    try:
        quantity = Quantity.parse(text)
    except ValueError:
        return text
    if "memory" in key or "storage" in key:
        return f"{quantity.value() / 2**30:.2f}Gi"
    if "cpu" in key:
        return f"{quantity.milli_value() / 1000:g}"
    return str(quantity)


class ProgressTable:
    """Renders a run's migrations and quotas; call it as the runner's progress hook."""

    def __init__(self, stream: TextIO = sys.stdout, *, live: bool | None = None) -> None:
        self.stream = stream
        self.live = stream.isatty() if live is None else live
        self._drawn_lines = 0
        self._last_text = ""
        self._last_print = 0.0

    def lines(self, run: ScenarioRun) -> list[str]:
        out = [f"{run.scenario.name} [{run.strategy_name}] t={run.now():5.1f}s"]
        records = run.kubevirt.records.all() if run.kubevirt is not None else []
        out.append(f"  {'migration':<34} {'phase':<16} {'blocked':>8}  outcome")
        for record in sorted(records, key=lambda r: r.created.mono):
            blocked = record.blocked_seconds
            shown = "-" if blocked is None and not record.refusals else f"{blocked or 0:6.1f}s"
            if blocked is None and record.refusals:
                shown = "BLOCKED"
            outcome = record.outcome.value if record.outcome is not None else ""
            out.append(
                f"  {record.vmi + ' / ' + record.name:<34.34} {record.phase.value:<16} {shown:>8}  {outcome}"
            )
        latest: dict[str, Any] = {}
        for sample in run.result.samples:
            latest[sample.namespace] = sample
        for name, sample in latest.items():
            keys = (
                sorted(resources.parse_resource_list(sample.base))
                if sample.base
                else sorted(sample.hard)
            )
            cells = ", ".join(
                f"{key} {_short(key, sample.used.get(key))}/{_short(key, sample.hard.get(key))} (base {_short(key, sample.base.get(key))})"
                for key in keys[:3]
            )
            out.append(f"  quota {name}: {cells}")
        return out

    def __call__(self, run: ScenarioRun) -> None:
        text = "\n".join(self.lines(run))
        if self.live:
            if self._drawn_lines:
                self.stream.write(f"\x1b[{self._drawn_lines}F\x1b[J")
            self.stream.write(text + "\n")
            self.stream.flush()
            self._drawn_lines = text.count("\n") + 1
            return
        body = text.split("\n", 1)[1] if "\n" in text else ""
        if body != self._last_text and time.monotonic() - self._last_print >= PIPE_INTERVAL:
            self.stream.write(text + "\n\n")
            self.stream.flush()
            self._last_text, self._last_print = body, time.monotonic()


def summary_row(report: dict[str, Any]) -> dict[str, Any]:
    """The numbers a comparison puts side by side."""
    migrations = report["migrations"]
    blocked = [m for m in migrations if m["blocked_seconds"] is None or m["blocked_seconds"] > 0]
    writes = [
        w["per_migration"]
        for w in report["quota_writes"].values()
        if w["per_migration"] is not None
    ]
    drift = {name: q["drift"] for name, q in report["quotas"].items() if q["drift"]}
    return {
        "migrations": len(migrations),
        "finished": sum(1 for m in migrations if m["outcome"] == "Succeeded"),
        "blocked_by_quota": len(blocked),
        "seconds_blocked": round(sum(m["blocked_seconds"] or 0 for m in migrations), 1),
        "still_blocked": sum(1 for m in migrations if m["blocked_seconds"] is None),
        "quota_writes_per_migration": max(writes, default=0),
        "final_hard_equals_base": report["invariants"]["final_hard_equals_base"],
        "stale_annotations": not report["invariants"]["no_stale_annotation"],
        "drift": drift,
        "vm_starts_refused": sorted(vm for vm, refusal in report["vm_starts"].items() if refusal),
        **writers_summary(report.get("writers")),
    }


def writers_summary(writers: dict[str, Any] | None) -> dict[str, str]:
    """Everyone's quota writes from the audit log (writers.py), summed over the
    run's namespaces: ours, and Harvester's accepted/refused and error lines; "n/a" where the
    cluster keeps no audit log."""
    if not writers or writers.get("unavailable"):
        return dict.fromkeys(("our_writes", "harvester_writes", "harvester_errors"), "n/a")
    ours = identity_totals(writers["writes_by_identity"], "harvester-quota")
    theirs = identity_totals(writers["writes_by_identity"], "harvester")
    errors = sum(writers["harvester_error_lines"].values())
    return {
        "our_writes": f"{ours['accepted']} / {ours['refused']}",
        "harvester_writes": f"{theirs['accepted']} / {theirs['refused']}",
        "harvester_errors": str(errors) if writers["harvester_error_lines"] else "n/a",
    }


ROWS = (
    ("migrations", "migrations"),
    ("finished", "succeeded"),
    ("blocked_by_quota", "blocked by quota"),
    ("still_blocked", "never unblocked"),
    ("seconds_blocked", "seconds blocked (sum)"),
    ("quota_writes_per_migration", "quota writes per migration"),
    ("final_hard_equals_base", "final hard == base"),
    ("stale_annotations", "stale annotations left"),
    ("drift", "drift (final hard - base)"),
    ("vm_starts_refused", "VM starts refused"),
    ("our_writes", "our writes, accepted / refused"),
    ("harvester_writes", "Harvester's writes, acc. / ref."),
    ("harvester_errors", "Harvester's error lines"),
)


def comparison_table(reports: dict[str, dict[str, Any]]) -> str:
    """A plain-text table, one column per strategy."""
    rows = {strategy: summary_row(report) for strategy, report in reports.items()}
    strategies = list(rows)
    width = max(len(label) for _, label in ROWS) + 2
    header = " " * width + "".join(f"{name:>22}" for name in strategies)
    lines = [header]
    for key, label in ROWS:
        cells = "".join(f"{_cell(rows[s][key]):>22}" for s in strategies)
        lines.append(f"{label:<{width}}{cells}")
    for strategy in strategies:
        for namespace, keys in rows[strategy]["drift"].items():
            above = ", ".join(f"{key} +{value}" for key, value in keys.items())
            lines.append(f"drift, {strategy}, {namespace}: {above}")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        # The keys and amounts follow the table, in full: a cell is too narrow for them.
        return f"{len(value)} quota(s), below" if value else "none"
    if isinstance(value, list):
        return ",".join(value) if value else "none"
    return str(value)
