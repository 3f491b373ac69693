"""`harvester-quota-bench scenario run|check`: validate scenario files, run them, write the reports."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from ...generic import config
from ...generic.client import ApiClient
from ..localcluster import ClusterInfo, LocalCluster, binaries
from . import report
from .progress import ProgressTable, comparison_table
from .runner import ScenarioRun
from .schema import Scenario, ScenarioError, load
from .versions import launcher_differences, listed_release


def check(paths: list[str]) -> int:
    """Validates files; prints every problem with its file and line."""
    failed = 0
    for path in paths:
        try:
            scenario = load(path)
        except ScenarioError as error:
            failed += 1
            for problem in error.problems:
                print(problem, file=sys.stderr)
            continue
        differences = [
            f"{path}: kubevirt.also_on {release}: {difference}"
            for release in scenario.kubevirt_also_on
            for difference in launcher_differences(scenario, release)
        ]
        if differences:
            failed += 1
            print("\n".join(differences), file=sys.stderr)
            continue
        print(f"{path}: ok ({len(scenario.vms)} VMs, {len(scenario.steps)} steps)")
    return 1 if failed else 0


def admin_client(cluster: ClusterInfo) -> ApiClient:
    return ApiClient(cluster.admin_config())


async def run_scenario(
    scenario: Scenario,
    *,
    api: ApiClient,
    cluster: ClusterInfo | None,
    strategies: list[str],
    report_dir: Path,
    progress: bool = True,
) -> dict[str, dict[str, Any]]:
    """Runs the scenario once per strategy; writes DIR/<strategy>/{report.json,timeline.png} and,
    for several strategies, DIR/comparison.{json,txt}. Returns the reports by strategy."""
    reports: dict[str, dict[str, Any]] = {}
    for strategy in strategies:
        hook = ProgressTable() if progress else None
        run = ScenarioRun(
            scenario,
            api,
            cluster,
            strategy=strategy,
            workdir=report_dir / strategy / "work",
            progress=hook,
        )
        result = await run.run()
        reports[strategy] = report.write(result, report_dir / strategy)
    if len(reports) > 1:
        table = comparison_table(reports)
        (report_dir / "comparison.txt").write_text(table + "\n")
        (report_dir / "comparison.json").write_text(
            json.dumps({s: r["invariants"] | {"ok": r["ok"]} for s, r in reports.items()}, indent=2)
        )
    return reports


async def _run_with_kubeconfig(
    scenario: Scenario, kubeconfig: str, strategies: list[str], directory: Path, progress: bool
) -> dict[str, dict[str, Any]]:
    """Against any cluster: the simulators run, but nothing is restarted or stopped."""
    async with ApiClient(config.load(kubeconfig)) as api:
        return await run_scenario(
            scenario,
            api=api,
            cluster=None,
            strategies=strategies,
            report_dir=directory,
            progress=progress,
        )


def run_on_local_cluster(
    scenario: Scenario,
    info: ClusterInfo,
    strategies: list[str],
    report_dir: Path,
    progress: bool,
) -> dict[str, dict[str, Any]]:
    """On our local cluster, whose components the scenario may stop and restart (controller-stop,
    apiserver restarts) because it knows their state directory."""

    async def main() -> dict[str, dict[str, Any]]:
        async with admin_client(info) as api:
            return await run_scenario(
                scenario,
                api=api,
                cluster=info,
                strategies=strategies,
                report_dir=report_dir,
                progress=progress,
            )

    return asyncio.run(main())


def local_cluster_for(scenario: Scenario, strategies: list[str]) -> ClusterInfo:
    """The default local cluster, started as `scenario` and `strategies` need it (a cluster
    running another way is restarted; see `kubevirt_for`).

    Without a `harvester` strategy: KubeVirt's real virt-controller of the scenario's release
    when one is built here, else none (the simulator then plays KubeVirt). With one, Harvester's
    own controllers (the newest version with a module here) run and every strategy runs beside
    them, as on a Harvester: beside the virt-controller that Harvester ships when the scenario
    plays on it (its release or `kubevirt.also_on`), else beside the simulator."""
    harvester = binaries.harvester_version() if "harvester" in strategies else None
    version = kubevirt_for(scenario, harvester)
    if version is None:
        return LocalCluster().up(virt_controller=False, harvester=harvester)
    return LocalCluster().up(virt_controller=True, kubevirt=version, harvester=harvester)


def kubevirt_for(scenario: Scenario, harvester: str | None) -> str | None:
    """The virt-controller version a local cluster runs for `scenario` beside Harvester
    `harvester` (None: no Harvester), or None for the simulator. Beside Harvester, only the
    KubeVirt that Harvester ships: a Harvester never runs another."""
    if harvester is None:
        return binaries.kubevirt_version_for_minor(scenario.kubevirt_version)
    shipped = binaries.harvester_kubevirt_version(harvester)
    return shipped if listed_release(scenario, shipped) else None


def strategies_named(choice: str) -> list[str]:
    """``both``: Harvester's own controllers, then ours beside them; else the one named."""
    return ["harvester", "ours"] if choice == "both" else [choice]


def run(
    path: str, *, kubeconfig: str | None, report_dir: str, strategy: str, progress: bool
) -> int:
    try:
        scenario = load(path)
    except ScenarioError as error:
        for problem in error.problems:
            print(problem, file=sys.stderr)
        return 2
    strategies = strategies_named(strategy)
    directory = Path(report_dir)

    if kubeconfig:
        reports = asyncio.run(
            _run_with_kubeconfig(scenario, kubeconfig, strategies, directory, progress)
        )
    else:
        reports = run_on_local_cluster(
            scenario, local_cluster_for(scenario, strategies), strategies, directory, progress
        )
    for name, result in reports.items():
        failed = [c for c in result["expectations"] if not c["ok"]]
        state = "expectations met" if not failed else f"{len(failed)} expectation(s) not met"
        print(
            f"{name}: {state}; report {directory / name / 'report.json'}, plot {directory / name / 'timeline.png'}"
        )
        for check_ in failed:
            print(
                f"  - {check_['expectation']}: expected {check_['expected']}, got {check_['actual']}"
            )
    if len(reports) > 1:
        print()
        print(comparison_table(reports))
    return 0 if all(r["ok"] for r in reports.values()) else 1
