"""The test bench's command line: `python -m harvester_quota.testbench` (or `cmd/harvester-quota-bench`
from a checkout; `make cluster-up`, `make demo`, `make scale` call it).

Subcommands:
  cluster build|build-node|up|down|status|env   the local test cluster (see harvester_quota.testbench.localcluster)
  scenario run|repeat|check          replay incident scenarios on a cluster
  scale                              the scale run on its own cluster
  demo                               the end-to-end demonstration `make demo` runs

The product's commands (`run`, `webhook`, `explain`) are `harvester-quota`'s (harvester_quota.main);
the bench starts them as separate processes, as they are deployed. Scenarios, the demo and the local
cluster's process code are imported by their commands only.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..generic import config
from ..generic.commandline import command_parser, run_command_line
from .localcluster import ClusterError, binaries
from .localcluster.nodes import DEFAULT_NODES
from .scale import cli as scale_cli

if TYPE_CHECKING:
    from .localcluster.cluster import LocalCluster


def _cluster(args: argparse.Namespace) -> LocalCluster:
    from .localcluster.cluster import LocalCluster  # noqa: PLC0415 - see module docstring

    return LocalCluster(Path(args.state_dir) if args.state_dir else None)


ALL_VERSIONS = "all"
"""The value of `cluster build --kubevirt-version` and `--harvester` that builds every supported
version (`make cluster-bin` passes both)."""


def _kubevirt_versions(asked: str | None) -> list[str]:
    """The KubeVirt versions `cluster build --kubevirt-version asked` builds."""
    if asked == ALL_VERSIONS:
        return binaries.supported_kubevirt_versions()
    return [binaries.kubevirt_version(asked)]


def _harvester_versions(asked: str | None) -> list[str]:
    """The Harvester versions `cluster build --harvester asked` builds: none unless asked."""
    if asked is None:
        return []
    if asked == ALL_VERSIONS:
        return binaries.supported_harvester_versions()
    return [binaries.harvester_version(asked)]


def cmd_cluster_build(args: argparse.Namespace) -> int:
    directory = binaries.build(force=args.force)
    print(f"cluster binaries: {directory}")
    if not args.no_virt_controller:
        for version in _kubevirt_versions(args.kubevirt_version):
            kubevirt = binaries.build_kubevirt(version, force=args.force)
            print(f"KubeVirt {version} virt-controller and CRDs: {kubevirt.directory}")
    print(f"helm: {binaries.build_helm(force=args.force)}")
    for version in _harvester_versions(args.harvester):
        path = binaries.build_harvester(version, force=args.force)
        print(f"Harvester {version} migration and resourcequota controllers: {path}")
    return 0


def cmd_cluster_up(args: argparse.Namespace) -> int:
    if args.kubevirt_version and not args.virt_controller:
        print(
            "--kubevirt-version chooses virt-controller's version: drop --no-virt-controller",
            file=sys.stderr,
        )
        return 2
    cluster = _cluster(args)
    options: dict[str, Any] = {
        "nodes": args.nodes,
        "node_pods": args.node_pods,
        "virt_controller": args.virt_controller,
        "kubevirt": args.kubevirt_version,
        "harvester": args.harvester,
    }
    if args.real_node:
        from .localcluster import realnode  # noqa: PLC0415 - see module docstring

        info, node = realnode.up_with_real_node(cluster, **options)
        print(f"real node {node.name} ready (logs: {node.log_dir})")
    else:
        info = cluster.up(**options)
    print(f"local cluster ready: {info.server} ({len(info.nodes)} kwok nodes)")
    if info.kubevirt_version:
        print(f"KubeVirt {info.kubevirt_version} virt-controller running")
    if info.harvester_version:
        print(f"Harvester {info.harvester_version} migration and resourcequota controllers running")
    print(f"kubeconfig: {info.kubeconfig}")
    print(f"logs: {cluster.log_dir} (audit log: {info.audit_log})")
    print('use it with: eval "$(harvester-quota-bench cluster env)"')
    return 0


def cmd_cluster_down(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    if (cluster.state_dir / "real-node" / "node.json").exists():
        from .localcluster import realnode  # noqa: PLC0415 - see module docstring

        if realnode.down_real_node(cluster):
            print("real node stopped")
    if cluster.down():
        print("local cluster stopped")
    else:
        print("no local cluster is recorded in this state directory")
    return 0


def cmd_cluster_status(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    info, components, ready = cluster.status()
    if info is None:
        print("no local cluster is recorded in this state directory")
        return 1
    print(f"server: {info.server}  ready: {'yes' if ready else 'NO'}")
    print(f"kubeconfig: {info.kubeconfig}")
    if info.kubevirt_version:
        print(f"KubeVirt: {info.kubevirt_version} (virt-controller)")
    if (cluster.state_dir / "real-node" / "node.json").exists():
        from .localcluster import realnode  # noqa: PLC0415 - see module docstring
        from .localcluster.cluster import ComponentStatus  # noqa: PLC0415

        node = realnode.RealNode.load(info, cluster.state_dir / realnode.NODE_STATE_DIR)
        components += [
            ComponentStatus(f"{node.name}: {r.name}", r.pid, r.running(), r.log)
            for r in node.processes
        ]
    for component in components:
        state = "running" if component.running else "NOT RUNNING"
        print(f"  {component.name:<24} pid {component.pid:<8} {state:<12} {component.log}")
    return 0 if ready and all(c.running for c in components) else 1


def cmd_cluster_env(args: argparse.Namespace) -> int:
    info = _cluster(args).info()
    if info is None:
        print(
            "no local cluster is recorded; run `python -m harvester_quota.testbench cluster up`",
            file=sys.stderr,
        )
        return 1
    # kubectl and helm as `make cluster-bin` built them, for commands typed by hand.
    with contextlib.suppress(ClusterError):
        tools = [binaries.resolve_bin_dir(), binaries.helm_path().parent]
        print(f'export PATH="{":".join(str(path) for path in tools)}:$PATH"')
    print(f"export KUBECONFIG={info.kubeconfig}")
    return 0


def cmd_scenario_run(args: argparse.Namespace) -> int:
    from .scenario import cli as scenario_cli  # noqa: PLC0415 - see module docstring

    return scenario_cli.run(
        args.file,
        kubeconfig=args.kubeconfig,
        report_dir=args.report,
        strategy=args.strategy,
        progress=not args.no_progress,
    )


def cmd_scenario_repeat(args: argparse.Namespace) -> int:
    from .scenario import repeat  # noqa: PLC0415 - see module docstring

    return repeat.repeat(
        args.file,
        times=args.times,
        burners=args.burners,
        strategy=args.strategy,
        report_dir=args.report,
    )


def cmd_scenario_check(args: argparse.Namespace) -> int:
    from .scenario import cli as scenario_cli  # noqa: PLC0415 - see module docstring

    return scenario_cli.check(args.files)


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo  # noqa: PLC0415 - see module docstring

    if not args.verbose:
        # The demo shows a progress table; log lines would scroll it away.
        logging.getLogger().setLevel(logging.WARNING)
    return run_demo(state_dir=Path(args.state_dir) if args.state_dir else None)


_KUBEVIRT_VERSION_HELP = (
    f"KubeVirt version of virt-controller (default: ${binaries.ENV_KUBEVIRT_VERSION} or "
    f"{binaries.DEFAULT_KUBEVIRT_VERSION}; supported: "
    f"{', '.join(binaries.supported_kubevirt_versions())})"
)


def cmd_cluster_build_node(args: argparse.Namespace) -> int:
    """What the real node needs (`make node-bin`): its Debian packages (installed as root on
    Debian), kubelet and kube-proxy (built like the control plane), and the product's image
    (built from deploy/Containerfile)."""
    from .localcluster import image, realnode  # noqa: PLC0415 - see module docstring

    reason = realnode.cannot_build()
    if reason is not None:
        # Nothing to build for a machine that cannot run it: the tests skip, saying why.
        print(f"no real node here: {reason}", file=sys.stderr)
        return 0
    realnode.install_packages(print)
    print(f"kubelet and kube-proxy: {binaries.build_node(force=args.force)}")
    print(
        f"images ({image.product_image()}, {image.SANDBOX_IMAGE}): {image.build_image(force=args.force)}"
    )
    return 0


def _add_cluster_commands(commands: Any) -> None:
    state_help = (
        "where the cluster keeps its state (default: $HARVESTER_QUOTA_STATE_DIR or "
        "~/.local/state/harvester-quota/cluster)"
    )
    cluster = commands.add_parser("cluster", help="the local test cluster")
    cluster.add_argument("--state-dir", help=state_help)
    # Accepted after the action too (`cluster up --state-dir D`); SUPPRESS keeps a value given
    # before the action (`cluster --state-dir D up`) when it is not repeated after it.
    state = argparse.ArgumentParser(add_help=False)
    state.add_argument("--state-dir", default=argparse.SUPPRESS, help=state_help)
    actions = cluster.add_subparsers(dest="action", required=True)
    build = actions.add_parser(
        "build", parents=[state], help="build the cluster binaries once (Go needed)"
    )
    build.add_argument("--force", action="store_true", help="rebuild even if cached")
    build.add_argument(
        "--no-virt-controller",
        action="store_true",
        help="build only etcd, Kubernetes and kwok, not KubeVirt's virt-controller",
    )
    build.add_argument(
        "--kubevirt-version",
        help=f"{_KUBEVIRT_VERSION_HELP}; '{ALL_VERSIONS}' builds every supported version",
    )
    build.add_argument(
        "--harvester",
        metavar="VERSION",
        help="also build Harvester's own migration and resourcequota controllers of VERSION, or "
        f"of every supported version with '{ALL_VERSIONS}' (what `make cluster-bin` passes; "
        f"supported: {', '.join(binaries.supported_harvester_versions())})",
    )
    build.set_defaults(handler=cmd_cluster_build)
    build_node = actions.add_parser(
        "build-node",
        parents=[state],
        help="build what the real node needs once: kubelet, kube-proxy, the product's image "
        "(root; installs their Debian packages)",
    )
    build_node.add_argument("--force", action="store_true", help="rebuild even if cached")
    build_node.set_defaults(handler=cmd_cluster_build_node)
    up = actions.add_parser(
        "up", parents=[state], help="start the cluster (idempotent); returns when ready"
    )
    up.add_argument("--nodes", type=int, default=DEFAULT_NODES, help="number of kwok nodes")
    up.add_argument("--node-pods", type=int, default=110, help="pod capacity of each node")
    kubevirt = up.add_mutually_exclusive_group()
    kubevirt.add_argument(
        "--virt-controller",
        dest="virt_controller",
        action="store_true",
        default=True,
        help="run KubeVirt's own virt-controller, on KubeVirt's generated CRDs, built first if "
        "needed (the default; the flag is accepted for scripts written when it was opt-in)",
    )
    kubevirt.add_argument(
        "--no-virt-controller",
        dest="virt_controller",
        action="store_false",
        help="run no virt-controller, for a KubeVirt simulator or tests that play KubeVirt by "
        "hand (either would fight a real virt-controller)",
    )
    up.add_argument("--kubevirt-version", help=_KUBEVIRT_VERSION_HELP)
    up.add_argument(
        "--harvester",
        metavar="VERSION",
        help="also run Harvester's own migration and resourcequota controllers of VERSION as "
        "Harvester's service account, built first if needed (they act on every namespace); "
        "virt-controller is then the KubeVirt that VERSION ships unless --kubevirt-version says "
        f"otherwise ({', '.join(f'{h}: {k}' for h, k in binaries.HARVESTER_KUBEVIRT.items())})",
    )
    up.add_argument(
        "--real-node",
        action="store_true",
        help="also run a real node beside the kwok nodes (kubelet, containerd, kube-proxy; root "
        "and `make node-bin` needed) that runs the product's image",
    )
    up.set_defaults(handler=cmd_cluster_up)
    for action, handler, text in (
        ("down", cmd_cluster_down, "stop the cluster and delete its data"),
        ("status", cmd_cluster_status, "show each component"),
        ("env", cmd_cluster_env, "print `export PATH=... KUBECONFIG=...` for eval"),
    ):
        actions.add_parser(action, parents=[state], help=text).set_defaults(handler=handler)


def _add_scenario_commands(commands: Any) -> None:
    scenario = commands.add_parser("scenario", help="replay incident scenarios")
    scenario_actions = scenario.add_subparsers(dest="action", required=True)
    scenario_run = scenario_actions.add_parser("run", help="run one scenario file")
    scenario_run.add_argument("file", help="scenario YAML (see scenarios/ and docs/scenarios.md)")
    scenario_run.add_argument(
        "--kubeconfig", help="cluster to run on (default: the local cluster, started if needed)"
    )
    scenario_run.add_argument("--report", default="reports", help="directory for the reports")
    scenario_run.add_argument(
        "--strategy",
        choices=("ours", "harvester", "harvester-port", "both"),
        default="ours",
        help="our controllers and webhook; Harvester's own controllers (the cluster then runs "
        "them, and ours runs beside them); our port of Harvester v1.9's algorithm; or both: "
        "Harvester's own, then ours beside it",
    )
    scenario_run.add_argument("--no-progress", action="store_true", help="no live table")
    scenario_run.set_defaults(handler=cmd_scenario_run)
    scenario_repeat = scenario_actions.add_parser(
        "repeat", help="run one scenario file many times on one cluster (idle or loaded)"
    )
    scenario_repeat.add_argument("file", help="scenario YAML")
    scenario_repeat.add_argument("--times", type=int, default=50, help="runs (default 50)")
    scenario_repeat.add_argument(
        "--burners", type=int, default=0, help="processes spinning on a core each meanwhile"
    )
    scenario_repeat.add_argument(
        "--strategy", choices=("ours", "harvester", "harvester-port"), default="ours"
    )
    scenario_repeat.add_argument("--report", default="reports/repeat", help="report directory")
    scenario_repeat.set_defaults(handler=cmd_scenario_repeat)
    scenario_check = scenario_actions.add_parser("check", help="validate scenario files")
    scenario_check.add_argument("files", nargs="+")
    scenario_check.set_defaults(handler=cmd_scenario_check)


def _add_demo_command(commands: Any) -> None:
    demo = commands.add_parser("demo", help="run the demonstration on a local cluster")
    demo.add_argument("--state-dir", help="state directory of the demo's own cluster")
    demo.set_defaults(handler=cmd_demo)


def build_parser() -> argparse.ArgumentParser:
    parser, commands = command_parser(
        "harvester-quota-bench",
        "harvester-quota's test bench: the local cluster, scenarios, scale, the demo.",
        __version__,
    )
    _add_cluster_commands(commands)
    _add_scenario_commands(commands)
    _add_demo_command(commands)
    scale_cli.add_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_command_line(build_parser(), argv, (ClusterError, config.ConfigError))
