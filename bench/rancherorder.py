"""``python -m bench.rancherorder``: what the Rancher project order gives a drain, both arms in
one run.

On Rancher's protected path a raise goes through the namespace's Rancher annotation and must fit
the namespace's Rancher project. Two ways of sharing a project too tight for every concurrent
migration of its namespaces are compared on the local cluster (KubeVirt's real virt-controller):

- ``order``: the controller as it is: a raise is judged counting as taken the rooms sibling
  namespaces wait for earlier in KubeVirt's order (WaitingForEarlierMigrationsInProject), and
  the project's waiters are queued again when room moves;
- ``off``: per-namespace priority only: a raise is judged against the project as it stands, the
  rooms that fit given in KubeVirt's order within the namespace, a ProjectHasNoRoom Warning
  for the rest, checked again at the namespace's next reconcile or its recheck. The arm patches
  the sibling judgment and the project's waiting registry out of the running controller (the
  bench's doing; the product has no such switch).

The scenarios: every scenario file with ``rancher`` in its name that KubeVirt v1.6 plays, as it
is (whether the case arises there), and the five-namespace drain (drain-20-vms-5-namespaces) on the protected path
with its project limit leaving room for ``--rooms`` concurrent migrations (the namespaces'
quotas added up, plus that many VMs' CPU and memory). Printed per scenario and arm: the
migrations finished of all, those refused by quota at least once, those still refused at the
end, the seconds blocked in total, the drain's seconds (first migration created to last
finished), whether every quota is back at its base, and the project verdicts (Warnings by
reason); then the ratios of ``off`` to ``order``.

    python -m bench.rancherorder [--rooms 1,2] [--timeout 240] [--cpu-burners N]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harvester_quota.controller.resourcequota.rancher import (
    PROJECT_NO_ROOM_REASON,
    PROJECT_QUEUED_REASON,
    ProjectRoom,
)
from harvester_quota.testbench.localcluster import LocalCluster
from harvester_quota.testbench.localcluster.cluster import default_state_dir
from harvester_quota.testbench.scenario.cli import run_on_local_cluster
from harvester_quota.testbench.scenario.progress import summary_row
from harvester_quota.testbench.scenario.report import UNFINISHED
from harvester_quota.testbench.scenario.schema import Scenario, load
from harvester_quota.testbench.scenario.versions import listed_release

from bench.load import cpu_burners

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
DRAIN = "drain-20-vms-5-namespaces"
RANCHER = {"version": "2.15.2", "protection": True}
VM_ROOM = {"limitsCpu": 1100, "limitsMemory": 2560}
"""One drained VM's room in the project, with some slack (1015m and 2.45Gi asked), in milli-CPU and Mi."""
ARMS = ("order", "off")
SETTLE = 20.0
"""Seconds the quotas are given after the drain's wait to come back to their bases."""
KUBEVIRT = "v1.6.0"
"""The virt-controller that plays the runs: scenarios of other releases are skipped."""
VERDICTS: Counter[str] = Counter()
"""Project Warnings reported in the current arm, by reason."""


def _tight(drain: Scenario, rooms: int, timeout: float) -> Scenario:
    """The drain on Rancher's protected path, its project limit the namespaces' quotas added up
    plus `rooms` VMs' room; the wait for migrations capped at `timeout` seconds, then SETTLE
    seconds for the quotas."""
    cpu = sum(int(ns.quota["limitsCpu"]) for ns in drain.namespaces if ns.quota)
    memory = sum(
        int(ns.quota["limitsMemory"].removesuffix("Gi")) for ns in drain.namespaces if ns.quota
    )
    limit = {
        "limitsCpu": f"{cpu * 1000 + rooms * VM_ROOM['limitsCpu']}m",
        "limitsMemory": f"{memory * 1024 + rooms * VM_ROOM['limitsMemory']}Mi",
    }
    steps = [
        dataclasses.replace(step, value={"for": "migrations", "timeout": timeout})
        if step.kind == "wait"
        else step
        for step in drain.steps
    ]
    settle = dataclasses.replace(steps[-1], value={"for": "quota-at-base", "timeout": SETTLE})
    # The runner's own final wait (ten minutes) is cut short by expecting a migration unfinished:
    # the wait above and the settle are the run's; the expectation itself is not judged here.
    expect = {**drain.expect, "outcome": {drain.vms[0].name: UNFINISHED}}
    return dataclasses.replace(
        drain,
        name=f"{DRAIN}-protected-room-{rooms}",
        rancher={**RANCHER, "project_limit": limit},
        steps=[*steps, settle],
        expect=expect,
    )


@contextlib.contextmanager
def _arm(name: str) -> Iterator[None]:
    """The controller as the arm runs it, its project Warnings counted in VERDICTS."""
    saved = {attr: getattr(ProjectRoom, attr) for attr in ("report", "_behind_siblings", "settle")}
    original_report = saved["report"]

    def report(self: ProjectRoom, *args: Any, **kwargs: Any) -> None:
        no_room = args[4] if len(args) > 4 else kwargs.get("no_room")
        if no_room is not None:
            VERDICTS[PROJECT_QUEUED_REASON if no_room.first else PROJECT_NO_ROOM_REASON] += 1
        original_report(self, *args, **kwargs)

    async def alone(self: ProjectRoom, *_args: Any) -> None:
        return None

    async def settle(self: ProjectRoom, _project: Any, judgment: Any, *_a: Any, **_k: Any) -> None:
        self.demands.forget(judgment.name)

    VERDICTS.clear()
    patches: dict[str, Any] = {"report": report}
    if name == "off":
        patches |= {"_behind_siblings": alone, "settle": settle}
    for attr, value in patches.items():
        setattr(ProjectRoom, attr, value)
    try:
        yield
    finally:
        for attr, value in saved.items():
            setattr(ProjectRoom, attr, value)


def _figures(report: dict[str, Any]) -> dict[str, Any]:
    summary = summary_row(report)
    migrations = report["migrations"]
    created = [m["created_at"] for m in migrations if m["created_at"] is not None]
    finished = [m["finished_at"] for m in migrations if m["finished_at"] is not None]
    done = all(m["outcome"] != UNFINISHED for m in migrations)
    drain = max(finished) - min(created) if created and finished and done else None
    return {
        "finished": f"{summary['finished']}/{summary['migrations']}",
        "refused": summary["blocked_by_quota"],
        "still_refused": summary["still_blocked"],
        "blocked_s": summary["seconds_blocked"],
        "drain_s": round(drain, 1) if drain is not None else "unfinished",
        "at_base": summary["final_hard_equals_base"],
        "queued": VERDICTS[PROJECT_QUEUED_REASON],
        "no_room": VERDICTS[PROJECT_NO_ROOM_REASON],
    }


def _ratio(off: Any, order: Any) -> str:
    if not isinstance(off, (int, float)) or not isinstance(order, (int, float)):
        return "n/a"
    if isinstance(off, bool) or isinstance(order, bool):
        return "n/a"
    return f"{off / order:.2f}" if order else ("1.00" if not off else "inf")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rooms", default="1,2", help="project room, in VMs, of each tight run")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds a drain may take")
    parser.add_argument("--reports", type=Path, default=Path("reports/rancherorder"))
    parser.add_argument("--only-tight", action="store_true", help="skip the rancher files")
    parser.add_argument("--cpu-burners", type=int, default=0, help="busy processes beside")
    args = parser.parse_args(argv)
    drain = load(SCENARIOS / f"{DRAIN}.yaml")
    chosen = [] if args.only_tight else [load(p) for p in sorted(SCENARIOS.glob("*rancher*.yaml"))]
    chosen += [_tight(drain, int(r), args.timeout) for r in args.rooms.split(",") if r]
    with cpu_burners(args.cpu_burners):
        return _run(chosen, args.reports)


def _run(chosen: list[Scenario], reports: Path) -> int:
    keys = ("finished", "refused", "still_refused", "blocked_s", "drain_s", "at_base")
    rows = [
        "| scenario | arm | finished | refused once | still refused | seconds blocked | "
        "drain seconds | quota at base | Warnings queued / no room |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    ratios = [
        "| scenario | " + " | ".join(f"{k} off/order" for k in keys[1:5]) + " |",
        "|---" * 5 + "|",
    ]
    local = LocalCluster(default_state_dir("bench-rancherorder"))
    info = local.up(virt_controller=True, kubevirt=KUBEVIRT)
    try:
        for scenario in chosen:
            if not listed_release(scenario, KUBEVIRT):
                print(f"{scenario.name}: skipped (not played by {KUBEVIRT})", file=sys.stderr)
                continue
            arms: dict[str, dict[str, Any]] = {}
            for arm in ARMS:
                started = time.monotonic()
                with _arm(arm):
                    report = run_on_local_cluster(
                        scenario, info, ["ours"], reports / scenario.name / arm, progress=False
                    )["ours"]
                    arms[arm] = _figures(report)
                print(
                    f"{scenario.name} {arm}: {time.monotonic() - started:.0f}s",
                    file=sys.stderr,
                    flush=True,
                )
                f = arms[arm]
                rows.append(
                    f"| {scenario.name} | {arm} | "
                    + " | ".join(str(f[k]) for k in keys)
                    + f" | {f['queued']} / {f['no_room']} |"
                )
            ratios.append(
                f"| {scenario.name} | "
                + " | ".join(_ratio(arms["off"][k], arms["order"][k]) for k in keys[1:5])
                + " |"
            )
    finally:
        local.down()
    print("\n".join([*rows, "", *ratios]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
