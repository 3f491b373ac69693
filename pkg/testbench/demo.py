"""`make demo`: the v1.2.1 evacuation incident, replayed on a real local cluster, both ways.

It starts a local cluster in its own state directory with Harvester's own migration and
resourcequota controllers and namespace validator (v1.8.2, built from Harvester's Go module) and
the virt-controller that Harvester ships (v1.7.0, binaries.HARVESTER_KUBEVIRT), runs
scenarios/v121-evacuation-kubevirt-1.6.yaml (the incident's shape on a KubeVirt built here: the
v1.2.1 seed's own KubeVirt 0.54 cannot be) first on Harvester's controllers alone and then
with harvester-quota installed beside them (adopting the quotas it manages), showing a live
progress table of the migrations and the quota, then prints the two side by side (everyone's
quota writes counted from the API server's audit log) with the paths of the reports and
timeline plots, and stops the cluster.

The scenario was written for KubeVirt v1.6 (Harvester v1.7's) and lists v1.7 in
``kubevirt.also_on``: its quotas are tuned to its launcher pods (room for one target pod, not
two), and v1.7.0 renders those pods to the same figures (1015m limits.cpu, 1173751936
requests.memory, 1557364928 limits.memory each; the runner checks this before it starts, see
scenario/versions.py), so the incident plays out alike beside the KubeVirt Harvester v1.8.2 runs.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from .localcluster import LocalCluster, binaries
from .localcluster.cluster import default_state_dir
from .scenario.cli import run_on_local_cluster
from .scenario.progress import comparison_table, summary_row
from .scenario.schema import ScenarioError, load

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "v121-evacuation-kubevirt-1.6.yaml"
HARVESTER = "v1.8.2"
"""The Harvester whose own controllers the demo runs."""
KUBEVIRT = binaries.HARVESTER_KUBEVIRT[HARVESTER]
"""The virt-controller the demo runs: the one that Harvester ships."""
STRATEGIES = ["harvester", "ours"]


def _say(text: str = "") -> None:
    print(text, flush=True)


def _preflights(reports: dict[str, dict[str, Any]]) -> None:
    """What `harvester-quota preflight drain` said before each run's drain."""
    _say()
    _say("Before the drain, `harvester-quota preflight drain` said:")
    for name, report in reports.items():
        for event in report.get("events") or []:
            what = str(event.get("what") or "")
            if what.startswith("preflight"):
                _say(f"  [{name}] {what}")


def _explain(reports: dict[str, dict[str, Any]]) -> None:
    rows = {name: summary_row(report) for name, report in reports.items()}
    harvester, ours = rows["harvester"], rows["ours"]
    _say()
    _say("What happened:")
    _say(
        f"  Harvester {HARVESTER}'s own controllers: {harvester['blocked_by_quota']} of "
        f"{harvester['migrations']} migrations refused by quota, {harvester['seconds_blocked']} s "
        "blocked in total. They raise "
        "only limits.cpu and limits.memory, and give the room back when a migration succeeds while "
        "its source launcher still counts; requests.memory stays full, and KubeVirt's "
        "virt-controller retries the refused target pod until a source launcher has exited."
    )
    _say(
        f"  harvester-quota beside them: {ours['blocked_by_quota']} refused, "
        f"{ours['seconds_blocked']} s blocked, our writes {ours['our_writes']} (accepted / "
        f"refused), Harvester's {ours['harvester_writes']} and {ours['harvester_errors']} error "
        f"lines, final hard == base: {'yes' if ours['final_hard_equals_base'] else 'NO'}."
    )


def run_demo(state_dir: Path | None = None, report_dir: Path = Path("reports/demo")) -> int:
    try:
        scenario = load(SCENARIO)
    except ScenarioError as error:
        _say("\n".join(error.problems))
        return 2
    cluster = LocalCluster(state_dir or default_state_dir().parent / "demo")
    _say("== harvester-quota demo: the Harvester v1.2.1 evacuation incident, replayed ==")
    _say(scenario.description.strip())
    _say()
    started = time.monotonic()
    info = cluster.up(virt_controller=True, kubevirt=KUBEVIRT, harvester=HARVESTER)
    _say(
        f"local cluster up in {time.monotonic() - started:.1f}s ({len(info.nodes)} kwok nodes, "
        f"KubeVirt {info.kubevirt_version} virt-controller, Harvester {info.harvester_version}'s "
        "migration and resourcequota controllers)"
    )
    _say()
    try:
        reports = run_on_local_cluster(scenario, info, STRATEGIES, report_dir, progress=True)
    finally:
        cluster.down()
    _say()
    _say(comparison_table(reports))
    _preflights(reports)
    _explain(reports)
    _say()
    for name in STRATEGIES:
        _say(f"  {name:<10} report {report_dir / name / 'report.json'}")
        _say(f"  {'':<10} plot   {report_dir / name / 'timeline.png'}")
    _say(f"  comparison {report_dir / 'comparison.txt'}")
    _say("\nlocal cluster stopped; nothing left running")
    ok = bool(reports["ours"]["ok"])
    if not ok:
        print("our strategy did not meet the scenario's expectations", file=sys.stderr)
    return 0 if ok else 1
