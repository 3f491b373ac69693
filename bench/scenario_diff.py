"""``python -m bench.scenario_diff``: our port of Harvester's algorithm against Harvester's own code.

Every scenario Harvester's own controllers can play (diff.NOT_RUN_BY_REAL_CODE names the others)
runs twice: with ``harvester`` on a local cluster running Harvester v1.8.2's controllers, and
with ``harvester-port`` on a cluster without them (both act on every namespace, so they never
share a cluster). Scenarios that play on the KubeVirt Harvester ships (v1.7.0 for v1.8.2: the
v1.6 scenarios, through ``kubevirt.also_on``) run both arms beside that real virt-controller, the
others on the simulator. It prints each run's measures side by side, every difference with the
behaviour that explains it (testbench/scenario/diff.py), and exits 1 when a difference is not in
the documented list or a documented one did not show. Reports go to
``reports/scenario-diff/<scenario>/<strategy>/``.

    python -m bench.scenario_diff [--only NAME ...] [--reports DIR] [--state-dir DIR]
                                  [--compare-only]

`--compare-only` compares the reports already in DIR without running anything.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from harvester_quota.testbench.localcluster import LocalCluster, binaries
from harvester_quota.testbench.localcluster.cluster import default_state_dir
from harvester_quota.testbench.scenario import diff
from harvester_quota.testbench.scenario.cli import run_on_local_cluster
from harvester_quota.testbench.scenario.schema import Scenario, load
from harvester_quota.testbench.scenario.versions import listed_release

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
PORT, REAL = "harvester-port", "harvester"


def _real_kubevirt(scenario: Scenario) -> bool:
    """Whether the scenario plays on the virt-controller Harvester ships (both arms run on it)."""
    shipped = binaries.harvester_kubevirt_version(binaries.harvester_version())
    return listed_release(scenario, shipped)


def _run_all(chosen: list[Scenario], reports: Path, state: Path) -> None:
    """Each batch (virt-controller or simulator) on a cluster with Harvester's controllers, then
    on one without; one cluster up at a time."""
    harvester = binaries.harvester_version()
    for real in (True, False):
        batch = [s for s in chosen if _real_kubevirt(s) == real]
        for strategy in (REAL, PORT) if batch else ():
            kind = ("kubevirt" if real else "sim") + ("-harvester" if strategy == REAL else "")
            local = LocalCluster(state.with_name(f"{state.name}-{kind}"))
            version = harvester if strategy == REAL else None
            info = (
                local.up(
                    virt_controller=True,
                    kubevirt=binaries.harvester_kubevirt_version(harvester),
                    harvester=version,
                )
                if real
                else local.up(harvester=version)
            )
            try:
                for scenario in batch:
                    started = time.monotonic()
                    run_on_local_cluster(
                        scenario, info, [strategy], reports / scenario.name, progress=False
                    )
                    print(
                        f"{scenario.name} {strategy}: {time.monotonic() - started:.0f}s",
                        file=sys.stderr,
                        flush=True,
                    )
            finally:
                local.down()


def _read(reports: Path, name: str, strategy: str) -> dict[str, Any] | None:
    path = reports / name / strategy / "report.json"
    return json.loads(path.read_text()) if path.exists() else None


def _outcomes(outcome: diff.Outcome) -> str:
    counts = Counter(outcome.outcome)
    return ", ".join(f"{n} {what}" for what, n in sorted(counts.items())) or "none"


def _table(rows: list[tuple[str, diff.Outcome, diff.Outcome]]) -> list[str]:
    lines = [
        "| scenario | outcomes (port / real) | refused | seconds blocked | quota at base | "
        "Harvester's writes per migration |",
        "|---|---|---|---|---|---|",
    ]
    for name, port, real in rows:
        lines.append(
            f"| {name} | {_outcomes(port)} / {_outcomes(real)} | "
            f"{port.refused} / {real.refused} | {port.seconds_blocked} / {real.seconds_blocked} | "
            f"{port.quota_at_base} / {real.quota_at_base} | "
            f"{port.writes_per_migration} / {real.writes_per_migration} |"
        )
    return lines


def compare(chosen: list[Scenario], reports: Path) -> int:
    """Prints the table and the differences; 1 if any is unexplained or a known one is gone."""
    rows, found, ran = [], [], []
    for scenario in chosen:
        port, real = _read(reports, scenario.name, PORT), _read(reports, scenario.name, REAL)
        if port is None or real is None:
            print(f"{scenario.name}: no reports of both runs in {reports}", file=sys.stderr)
            continue
        ran.append(scenario.name)
        rows.append((scenario.name, diff.outcome_of(port), diff.outcome_of(real)))
        found += diff.differences(scenario.name, port, real)
    print("\n".join(_table(rows)))
    print()
    for difference in found:
        print(diff.explain(difference))
    gone = diff.missing(found, ran)
    for name, measure in gone:
        print(f"{name}: {measure}: documented as different, the run shows none")
    return 1 if diff.unexplained(found) or gone else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="scenario names (default: all it can run)")
    parser.add_argument("--reports", type=Path, default=Path("reports/scenario-diff"))
    parser.add_argument("--state-dir", type=Path, default=default_state_dir().parent / "diff")
    parser.add_argument("--compare-only", action="store_true")
    args = parser.parse_args(argv)
    chosen = [
        scenario
        for scenario in (load(p) for p in sorted(SCENARIOS.glob("*.yaml")))
        if diff.runnable_by_real_code(scenario) and (not args.only or scenario.name in args.only)
    ]
    if not args.compare_only:
        _run_all(chosen, args.reports, args.state_dir)
    return compare(chosen, args.reports)


if __name__ == "__main__":
    sys.exit(main())
