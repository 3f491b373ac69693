"""``python -m bench.scenarios``: every scenario, the strategies side by side, one table.

Scenarios of KubeVirt v1.6 run on a local cluster with KubeVirt's real virt-controller v1.6.0; the
others (KubeVirt 0.54 and 1.3, not buildable here) on a cluster without it, played by the
simulator. With strategy `harvester` (a default), the clusters also run Harvester v1.8.2's own
controllers, and `ours` runs beside them, as on a Harvester: the real virt-controller is then
the one Harvester ships (v1.7.0), which plays the v1.6 scenarios (their ``kubevirt.also_on``); `harvester-port` is our port of
Harvester v1.9's algorithm, never run with `harvester` (on one cluster both would act on every
quota): the differential of port and real code is `python -m bench.scenario_diff`.
Per scenario and strategy it prints the migrations, how many were refused by quota at least once,
the seconds they were blocked in total, the quota writes per migration (the most of any
namespace), the final drift of hard from the base, and from the audit log our writes,
Harvester's writes (accepted / refused) and Harvester's error lines. Reports go to
``reports/scenarios/``.

    python -m bench.scenarios [--only NAME ...] [--strategy ours|harvester|harvester-port]
                              [--cpu-burners N]

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
from harvester_quota.testbench.scenario.versions import listed_release

from bench.load import cpu_burners

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
REAL_KUBEVIRT = "v1.6.0"
STRATEGIES = ["harvester", "ours"]
CHOICES = [*STRATEGIES, "harvester-port"]


def _kubevirt(harvester: str | None) -> str:
    """The virt-controller of the real-KubeVirt batch: the one Harvester ships beside Harvester's
    controllers, else REAL_KUBEVIRT."""
    return binaries.harvester_kubevirt_version(harvester) if harvester else REAL_KUBEVIRT


def _real(scenario: Scenario, kubevirt: str) -> bool:
    return listed_release(scenario, kubevirt)


def _row(name: str, player: str, strategy: str, report: dict[str, Any]) -> str:
    summary = summary_row(report)
    drift = "none" if not summary["drift"] else str(summary["drift"])
    return (
        f"| {name} | {player} | {strategy} | {summary['migrations']} | "
        f"{summary['blocked_by_quota']} | {summary['seconds_blocked']} | "
        f"{summary['quota_writes_per_migration']} | {drift} | {summary['our_writes']} | "
        f"{summary['harvester_writes']} | {summary['harvester_errors']} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="scenario names (default: all)")
    parser.add_argument("--reports", type=Path, default=Path("reports/scenarios"))
    parser.add_argument(
        "--strategy", choices=CHOICES, action="append", help="default: harvester and ours"
    )
    parser.add_argument("--cpu-burners", type=int, default=0, help="busy processes beside")
    args = parser.parse_args(argv)
    if {"harvester", "harvester-port"} <= set(args.strategy or STRATEGIES):
        parser.error(
            "harvester and harvester-port on one cluster: see python -m bench.scenario_diff"
        )
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
        "seconds blocked | writes per migration | final drift | our writes (acc. / ref.) | "
        "Harvester's writes (acc. / ref.) | Harvester's error lines |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    harvester = binaries.harvester_version() if "harvester" in strategies else None
    state = default_state_dir().parent
    kubevirt = _kubevirt(harvester)
    for real, player in ((True, f"virt-controller {kubevirt}"), (False, "simulator")):
        batch = [s for s in chosen if _real(s, kubevirt) == real]
        if not batch:
            continue
        local = LocalCluster(state / ("bench-kubevirt" if real else "bench-sim"))
        info: ClusterInfo = (
            local.up(virt_controller=True, kubevirt=kubevirt, harvester=harvester)
            if real
            else local.up(harvester=harvester)
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
