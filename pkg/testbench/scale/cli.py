"""``harvester-quota-bench scale``: a scale run on its own local cluster (``make scale``)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ...generic.client import ApiClient
from ...generic.commandline import positive_seconds
from .plan import HARVESTER_VERSION, PRESETS, STRATEGIES, ScalePlan, parse_namespaces
from .product import ProcessArgs

if TYPE_CHECKING:
    from ..localcluster import ClusterInfo
    from .run import ScaleOptions

ENV_STATE_DIR: Final = "HARVESTER_QUOTA_SCALE_STATE_DIR"
PODS_PER_NODE_FLOOR: Final = 110


def add_command(commands: Any) -> None:
    scale = commands.add_parser(
        "scale",
        help="scale run: kwok nodes, VMs, migrations in flight, the product as deployed",
        description="Creates a local cluster with kwok nodes and KubeVirt's virt-controller, "
        "fills it with VMs, runs the controller and webhook as deployed, migrates in steps and "
        "prints each step's figures (VMIM-to-raise latency, refusals, writes and API requests "
        "per migration, CPU, RSS, drift).",
    )
    scale.add_argument("--size", choices=sorted(PRESETS), default="small", help="preset counts")
    scale.add_argument("--nodes", type=int, help="kwok nodes (overrides the preset)")
    scale.add_argument(
        "--namespaces", type=parse_namespaces, help="VMs per namespace, e.g. 3000,1000,100x60"
    )
    scale.add_argument("--per-size", type=int, help="migrations at once per namespace size")
    scale.add_argument("--in-flight", type=int, help="migrations at once per drain wave")
    scale.add_argument("--waves", type=int, help="drain waves")
    scale.add_argument("--state-dir", type=Path, help="state directory of the run's cluster")
    scale.add_argument("--report", type=Path, default=Path("reports/scale"), help="report dir")
    scale.add_argument(
        "--keep",
        action="store_true",
        help="leave the cluster running; reuse a kept one with its namespaces and VMs (a rerun "
        "skips creating them)",
    )
    scale.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default="ours",
        help="what keeps the quotas: the product as deployed, or Harvester v1.8.2's own "
        "controllers (the cluster runs them; no webhook) against the same baseline. Ours on a "
        "kept cluster running Harvester's controllers runs beside them, adopting its quotas",
    )
    scale.add_argument(
        "--no-baseline",
        action="store_true",
        help="run the quota arm only: no twin namespaces without a quota (the baseline), no "
        "headroom twins",
    )
    scale.add_argument(
        "--no-headroom",
        action="store_true",
        help="leave out the headroom arm: twin namespaces with a quota on the same keys, open, "
        "that no controller writes (kube-controller-manager and quota admission only)",
    )
    scale.add_argument(
        "--failover",
        action="store_true",
        help="run a standby controller beside the leader and SIGKILL the leader as the first "
        "drain wave starts: prints the time to the standby's takeover and its first raise",
    )
    scale.add_argument(
        "--arm-offset",
        type=int,
        default=0,
        metavar="N",
        help="rotate the arms' order by N places before the first step (it rotates by one each "
        "step): runs made one after the other give each its own N, so each arm takes each "
        "place in every step over the runs",
    )
    scale.add_argument(
        "--no-cpu-accounting",
        action="store_true",
        help="run our controller without --cpu-accounting, as the chart deploys it by default: "
        "no CPU breakdown, and none of the accounting's own cost in its CPU figures",
    )
    scale.add_argument(
        "--step-timeout",
        type=positive_seconds,
        default=None,
        metavar="SECONDS",
        help="how long a step waits at most for every migration's outcome, and again for the "
        "quotas to settle (default: 120 s plus 2 s a migration)",
    )
    scale.add_argument(
        "--controller-arg",
        action="append",
        default=[],
        help="a flag for the controller process, as deployed (repeatable), e.g. "
        "--controller-arg=--workers=10",
    )
    scale.add_argument(
        "--webhook-arg",
        action="append",
        default=[],
        help="a flag for the webhook process, as deployed (repeatable), e.g. "
        "--webhook-arg=--target-room-wait=4",
    )
    scale.set_defaults(handler=cmd_scale)


def plan_from(args: argparse.Namespace) -> ScalePlan:
    """The preset, with the counts given on the command line instead."""
    plan = PRESETS[args.size]
    changes = {
        name: value
        for name in ("nodes", "namespaces", "per_size", "in_flight", "waves")
        if (value := getattr(args, name)) is not None
    }
    return dataclasses.replace(plan, **changes)


def arm_count(args: argparse.Namespace) -> int:
    """How many arms the run has: the quota arm, and with the baseline its twins without a
    quota and (unless --no-headroom) the headroom twins."""
    return 1 if args.no_baseline else (2 if args.no_headroom else 3)


def harvester_for(strategy: str, kept: ClusterInfo | None) -> str | None:
    """The Harvester controllers' version the run's cluster is started with: HARVESTER_VERSION
    for Harvester's arm; for ours, the kept cluster's (a kept cluster is reused as it runs:
    ours then runs beside Harvester's controllers, as on a Harvester), else none. A kept cluster
    that does not run what is asked is started afresh (`LocalCluster.up`), which is said."""
    wanted = HARVESTER_VERSION if strategy == "harvester" else None
    if kept is None:
        return wanted
    if wanted is None:
        return kept.harvester_version
    if kept.harvester_version != wanted:
        print(
            f"the kept cluster does not run Harvester {wanted}'s controllers: it is started "
            "afresh with them (its namespaces and VMs are lost)"
        )
    return wanted


def cmd_scale(args: argparse.Namespace) -> int:
    # The stand-ins log every VM and migration step: thousands of lines that hide the figures.
    logging.getLogger("harvester_quota.testbench.sim").setLevel(logging.WARNING)
    try:
        plan = plan_from(args)
        if args.failover and args.strategy != "ours":
            raise ValueError("--failover needs --strategy ours")
    except ValueError as error:
        print(f"harvester-quota-bench scale: {error}", file=sys.stderr)
        return 2
    from ..localcluster import LocalCluster, default_state_dir  # noqa: PLC0415 - run only

    local = LocalCluster(args.state_dir or default_state_dir("scale", ENV_STATE_DIR))
    if not args.keep:
        local.down()
    harvester = harvester_for(args.strategy, local.info())
    vms = plan.vms * arm_count(args)  # each arm's twins hold as many
    node_pods = max(PODS_PER_NODE_FLOOR, 4 * vms // plan.nodes)
    print(
        f"starting a cluster of {plan.nodes} kwok nodes with virt-controller"
        + (f" and Harvester {harvester}'s controllers" if harvester else "")
        + f" ({local.state_dir})"
    )
    cluster = local.up(
        nodes=plan.nodes, node_pods=node_pods, virt_controller=True, harvester=harvester
    )
    if len(cluster.nodes) != plan.nodes:
        print(
            f"harvester-quota-bench scale: the kept cluster has {len(cluster.nodes)} nodes, not "
            f"{plan.nodes}; run without --keep",
            file=sys.stderr,
        )
        return 2
    from . import report as report_files  # noqa: PLC0415 - only `scale` needs the run
    from .run import ScaleOptions  # noqa: PLC0415 - only `scale` needs the run

    command = "harvester-quota " + shlex.join(sys.argv[1:])
    commit = report_files.source_commit()  # the code the run starts with
    try:
        report = asyncio.run(
            _run(
                cluster,
                plan,
                args.report,
                ScaleOptions(
                    baseline=not args.no_baseline,
                    headroom=not args.no_headroom,
                    strategy=args.strategy,
                    failover=args.failover,
                    cpu_accounting=not args.no_cpu_accounting,
                    arm_offset=args.arm_offset,
                    step_timeout=args.step_timeout,
                    process_args=ProcessArgs(tuple(args.controller_arg), tuple(args.webhook_arg)),
                ),
            )
        )
    finally:
        if not args.keep:
            local.down()
    path = report_files.write(report, args.report, command=command, commit=commit)
    print(path.read_text())
    return 0 if report.all_done and not report.drift and not report.stale else 1


async def _run(
    cluster: ClusterInfo,
    plan: ScalePlan,
    report_dir: Path,
    options: ScaleOptions,
) -> Any:
    from .run import ScaleRun  # noqa: PLC0415 - only `scale` needs the run

    async with ApiClient(cluster.admin_config(), timeout=120.0) as api:
        run = ScaleRun(
            api,
            cluster,
            plan,
            report_dir / "work",
            options,
        )
        return await run.run()
