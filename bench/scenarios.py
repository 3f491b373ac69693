"""``python -m bench.scenarios``: every scenario, both strategies, one table.

Scenarios of KubeVirt v1.6 run on a local cluster with KubeVirt's real virt-controller v1.6.0; the
others (KubeVirt 0.54 and 1.3, not buildable here) on a cluster without it, played by the
simulator. Per scenario and strategy it prints the migrations, how many were refused by quota at
least once, the seconds they were blocked in total, the quota writes per migration (the most of any
namespace) and the final drift of hard from the base. Reports go to ``reports/scenarios/``.

    python -m bench.scenarios [--only NAME ...] [--strategy ours|harvester] [--cpu-burners N]

`--cpu-burners 2` runs the scenarios beside two processes spinning on the CPU: a busy control
plane, where target pods used to lose the race against the raise.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from harvester_quota.testbench.localcluster import ClusterInfo, LocalCluster, binaries
from harvester_quota.testbench.localcluster.cluster import default_state_dir
from harvester_quota.testbench.scenario.cli import run_on_local_cluster
from harvester_quota.testbench.scenario.progress import summary_row
from harvester_quota.testbench.scenario.schema import Scenario, load

from bench.load import cpu_burners

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
REAL_KUBEVIRT = "v1.6.0"
STRATEGIES = ["harvester", "ours"]


def _real(scenario: Scenario) -> bool:
    return binaries.kubevirt_version_for_minor(scenario.kubevirt_version) == REAL_KUBEVIRT


def _row(name: str, player: str, strategy: str, report: dict[str, Any]) -> str:
    summary = summary_row(report)
    drift = "none" if not summary["drift"] else str(summary["drift"])
    return (
        f"| {name} | {player} | {strategy} | {summary['migrations']} | "
        f"{summary['blocked_by_quota']} | {summary['seconds_blocked']} | "
        f"{summary['quota_writes_per_migration']} | {drift} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="scenario names (default: all)")
    parser.add_argument("--reports", type=Path, default=Path("reports/scenarios"))
    parser.add_argument(
        "--strategy", choices=STRATEGIES, action="append", help="default: both, side by side"
    )
    parser.add_argument("--cpu-burners", type=int, default=0, help="busy processes beside")
    args = parser.parse_args(argv)
    with cpu_burners(args.cpu_burners):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    strategies = args.strategy or STRATEGIES
    chosen = [
        load(path)
        for path in sorted(SCENARIOS.glob("*.yaml"))
        if not args.only or path.stem in args.only
    ]
    rows = [
        "| scenario | KubeVirt | strategy | migrations | refused at least once | "
        "seconds blocked | writes per migration | final drift |",
        "|---|---|---|---|---|---|---|---|",
    ]
    state = default_state_dir().parent
    for real, player in ((True, f"virt-controller {REAL_KUBEVIRT}"), (False, "simulator")):
        batch = [s for s in chosen if _real(s) == real]
        if not batch:
            continue
        local = LocalCluster(state / ("bench-kubevirt" if real else "bench-sim"))
        info: ClusterInfo = (
            local.up(virt_controller=True, kubevirt=REAL_KUBEVIRT) if real else local.up()
        )
        try:
            for scenario in batch:
                started = time.monotonic()
                reports = run_on_local_cluster(
                    scenario, info, strategies, args.reports / scenario.name, progress=False
                )
                print(
                    f"{scenario.name}: {time.monotonic() - started:.0f}s",
                    file=sys.stderr,
                    flush=True,
                )
                rows += [_row(scenario.name, player, s, reports[s]) for s in strategies]
        finally:
            local.down()
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
