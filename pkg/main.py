"""The `harvester-quota` command line.

Subcommands:
  run                                the quota controllers (leader-elected)
  webhook                            the validating admission webhook
  scenario run|check                 replay incident scenarios on a cluster
  cluster build|up|down|status|env   the local test cluster (see harvester_quota.localcluster)
  demo                               the end-to-end demonstration `make demo` runs
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import __version__, app
from .config.management import Options
from .generic import config, errors
from .generic.client import ApiClient
from .localcluster import ClusterError, binaries
from .localcluster.nodes import DEFAULT_NODES
from .scale import cli as scale_cli
from .webhook.resources.common import DEFAULT_CONTROLLER_USERS, DEFAULT_TARGET_CREATORS, Identities
from .webhook.resources.pod.targets import TARGET_ROOM_WAIT

if TYPE_CHECKING:
    from .localcluster.cluster import LocalCluster
    from .webhook.tls import ClientAuth

Handler = Callable[[argparse.Namespace], int]
# The demo, scenarios, explain, the local cluster and the webhook server are imported by their
# commands only: the controllers' process (`run`) then does not carry them (13 MiB of RSS).


def _cluster(args: argparse.Namespace) -> LocalCluster:
    from .localcluster.cluster import LocalCluster  # noqa: PLC0415 - see Handler

    return LocalCluster(Path(args.state_dir) if args.state_dir else None)


def cmd_cluster_build(args: argparse.Namespace) -> int:
    directory = binaries.build(force=args.force)
    print(f"cluster binaries: {directory}")
    if not args.no_virt_controller:
        if args.kubevirt_version == "all":
            versions = binaries.supported_kubevirt_versions()
        else:
            versions = [binaries.kubevirt_version(args.kubevirt_version)]
        for version in versions:
            kubevirt = binaries.build_kubevirt(version, force=args.force)
            print(f"KubeVirt {version} virt-controller and CRDs: {kubevirt.directory}")
    print(f"helm: {binaries.build_helm(force=args.force)}")
    return 0


def cmd_cluster_up(args: argparse.Namespace) -> int:
    if args.kubevirt_version and not args.virt_controller:
        print(
            "--kubevirt-version chooses virt-controller's version: drop --no-virt-controller",
            file=sys.stderr,
        )
        return 2
    cluster = _cluster(args)
    info = cluster.up(
        nodes=args.nodes,
        node_pods=args.node_pods,
        virt_controller=args.virt_controller,
        kubevirt=args.kubevirt_version,
    )
    print(f"local cluster ready: {info.server} ({len(info.nodes)} kwok nodes)")
    if info.kubevirt_version:
        print(f"KubeVirt {info.kubevirt_version} virt-controller running")
    print(f"kubeconfig: {info.kubeconfig}")
    print(f"logs: {cluster.log_dir}")
    print('use it with: eval "$(harvester-quota cluster env)"')
    return 0


def cmd_cluster_down(args: argparse.Namespace) -> int:
    if _cluster(args).down():
        print("local cluster stopped")
    else:
        print("no local cluster is recorded in this state directory")
    return 0


def cmd_cluster_status(args: argparse.Namespace) -> int:
    info, components, ready = _cluster(args).status()
    if info is None:
        print("no local cluster is recorded in this state directory")
        return 1
    print(f"server: {info.server}  ready: {'yes' if ready else 'NO'}")
    print(f"kubeconfig: {info.kubeconfig}")
    if info.kubevirt_version:
        print(f"KubeVirt: {info.kubevirt_version} (virt-controller)")
    for component in components:
        state = "running" if component.running else "NOT RUNNING"
        print(f"  {component.name:<24} pid {component.pid:<8} {state:<12} {component.log}")
    return 0 if ready and all(c.running for c in components) else 1


def cmd_cluster_env(args: argparse.Namespace) -> int:
    info = _cluster(args).info()
    if info is None:
        print("no local cluster is recorded; run `harvester-quota cluster up`", file=sys.stderr)
        return 1
    print(f"export KUBECONFIG={info.kubeconfig}")
    return 0


def _options(args: argparse.Namespace) -> Options:
    return Options(
        namespace=args.namespace,
        mode=args.mode,
        kubevirt_version=args.kubevirt_version,
        workers=args.workers,
        identity=args.identity or Options().identity,
        lease_name=args.lease_name,
        leader_elect=not args.no_leader_elect,
        health_port=args.health_port,
        harvester_compat=not args.no_harvester_compat,
        mtq=not args.no_mtq,
        mtq_lock_seconds=args.mtq_lock_seconds,
        room_held_linger=args.room_held_linger,
    )


def cmd_run(args: argparse.Namespace) -> int:
    async def main() -> int:
        async with ApiClient(config.load(args.kubeconfig, args.context)) as client:
            return await app.run(client, _options(args))

    return asyncio.run(main())


def cmd_webhook(args: argparse.Namespace) -> int:
    identities = Identities(
        controllers=frozenset(args.controller_user or DEFAULT_CONTROLLER_USERS),
        target_creators=frozenset(args.target_creator or DEFAULT_TARGET_CREATORS),
    )
    client_auth = _client_auth(args)

    from .webhook import server as webhook_server  # noqa: PLC0415 - see Handler

    async def main() -> int:
        async with ApiClient(config.load(args.kubeconfig, args.context)) as client:
            return await webhook_server.serve(
                client,
                cert_file=Path(args.cert_file),
                key_file=Path(args.key_file),
                host=args.host,
                port=args.port,
                client_auth=client_auth,
                metrics_address=(args.metrics_host, args.metrics_port),
                identities=identities,
                kubevirt_version=args.kubevirt_version,
                target_room_wait=args.target_room_wait,
                namespace=args.namespace,
                mtq=not args.no_mtq,
            )

    return asyncio.run(main())


def _client_auth(args: argparse.Namespace) -> ClientAuth | None:
    """--client-ca-file and --client-name as the webhook's ClientAuth (None without a CA);
    exits with a usage error for names without a CA."""
    from .webhook.tls import ClientAuth  # noqa: PLC0415 - see Handler

    if args.client_ca_file is None:
        if args.client_name:
            sys.exit("harvester-quota webhook: --client-name needs --client-ca-file")
        return None
    return ClientAuth(Path(args.client_ca_file), frozenset(args.client_name or ()))


def cmd_explain(args: argparse.Namespace) -> int:
    from . import explain  # noqa: PLC0415 - see Handler

    async def main() -> int:
        async with ApiClient(config.load(args.kubeconfig, args.context)) as client:
            try:
                found = await explain.explain(
                    client, args.namespace, mode=args.mode, kubevirt_version=args.kubevirt_version
                )
            except errors.NotFound:
                print(f"harvester-quota: namespace {args.namespace} not found", file=sys.stderr)
                return 1
        render = explain.render_json if args.output == "json" else explain.render_text
        sys.stdout.write(render(found) + ("\n" if args.output == "json" else ""))
        return 0

    return asyncio.run(main())


def cmd_scenario_run(args: argparse.Namespace) -> int:
    from .scenario import cli as scenario_cli  # noqa: PLC0415 - see Handler

    return scenario_cli.run(
        args.file,
        kubeconfig=args.kubeconfig,
        report_dir=args.report,
        strategy=args.strategy,
        progress=not args.no_progress,
    )


def cmd_scenario_check(args: argparse.Namespace) -> int:
    from .scenario import cli as scenario_cli  # noqa: PLC0415 - see Handler

    return scenario_cli.check(args.files)


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo  # noqa: PLC0415 - see Handler

    if not args.verbose:
        # The demo shows a progress table; log lines would scroll it away.
        logging.getLogger().setLevel(logging.WARNING)
    return run_demo(state_dir=Path(args.state_dir) if args.state_dir else None)


def _add_connection_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)"
    )
    parser.add_argument("--context", help="kubeconfig context")


_KUBEVIRT_VERSION_HELP = (
    f"KubeVirt version of virt-controller (default: ${binaries.ENV_KUBEVIRT_VERSION} or "
    f"{binaries.DEFAULT_KUBEVIRT_VERSION}; supported: "
    f"{', '.join(binaries.supported_kubevirt_versions())})"
)


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
        help=f"{_KUBEVIRT_VERSION_HELP}; 'all' builds every supported version",
    )
    build.set_defaults(handler=cmd_cluster_build)
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
    up.set_defaults(handler=cmd_cluster_up)
    for action, handler, text in (
        ("down", cmd_cluster_down, "stop the cluster and delete its data"),
        ("status", cmd_cluster_status, "show each component"),
        ("env", cmd_cluster_env, "print `export KUBECONFIG=...` for eval"),
    ):
        actions.add_parser(action, parents=[state], help=text).set_defaults(handler=handler)


def _add_run_command(commands: Any) -> None:
    run = commands.add_parser("run", help="run the quota controllers (leader-elected)")
    _add_connection_flags(run)
    run.add_argument(
        "--namespace", default="harvester-system", help="namespace of the leader Lease"
    )
    run.add_argument(
        "--mode",
        choices=("auto", "rancher", "standalone"),
        default="auto",
        help="where the base quota comes from: Rancher's namespace annotation (rancher), a base "
        "recorded on the quota (standalone), or the first when present (auto)",
    )
    run.add_argument(
        "--kubevirt-version",
        help="KubeVirt version whose launcher pods to size (default: read from the KubeVirt CR)",
    )
    run.add_argument("--workers", type=int, default=5, help="workers per controller")
    run.add_argument("--identity", help="leader-election identity (default: host name)")
    run.add_argument("--lease-name", default="harvester-quota", help="name of the leader Lease")
    run.add_argument("--no-leader-elect", action="store_true", help="run without a Lease")
    run.add_argument("--health-port", type=int, default=8080, help="/healthz /readyz /metrics")
    run.add_argument(
        "--no-harvester-compat",
        action="store_true",
        help="skip Harvester's VMI migration annotations, VM timestamp touch and abort cleanup",
    )
    run.add_argument(
        "--no-mtq",
        action="store_true",
        help="leave namespaces with a VirtualMachineMigrationResourceQuota to the room mode "
        "(MTQ mode off)",
    )
    run.add_argument(
        "--mtq-lock-seconds",
        type=_positive_seconds,
        default=30.0,
        help="the longest an MTQ namespace lock and its raise last (default 30)",
    )
    run.add_argument(
        "--room-held-linger",
        type=_non_negative_seconds,
        default=30.0,
        help="seconds the room-held label stays after a namespace's room was given back, so a "
        "drain's next wave skips labelling (default 30; 0 removes it at once)",
    )
    run.set_defaults(handler=cmd_run)


def _add_explain_command(commands: Any) -> None:
    command = commands.add_parser(
        "explain", help="why a namespace's quota is what it is (read-only)"
    )
    command.add_argument("namespace")
    _add_connection_flags(command)
    command.add_argument("-o", "--output", choices=("text", "json"), default="text")
    command.add_argument(
        "--mode",
        choices=("auto", "rancher", "standalone"),
        default="auto",
        help="the controller's --mode, if not auto",
    )
    command.add_argument("--kubevirt-version", help="the controller's --kubevirt-version, if set")
    command.set_defaults(handler=cmd_explain)


def _non_negative_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not seconds >= 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, finite: {text!r}")
    return seconds


def _positive_seconds(text: str) -> float:
    seconds = _non_negative_seconds(text)
    if seconds == 0:
        raise argparse.ArgumentTypeError("must be more than 0 seconds")
    return seconds


def _add_webhook_endpoint_flags(hook: argparse.ArgumentParser) -> None:
    """Who may call the admission port, and where /metrics is served instead."""
    hook.add_argument(
        "--client-ca-file",
        help="require a client certificate signed by this CA (PEM, reloaded on change) on "
        '/validate/*: the one the API server presents to webhooks (README "Deploying"); '
        "/healthz and /readyz stay open to probes without one",
    )
    hook.add_argument(
        "--client-name",
        action="append",
        help="accept only client certificates with this subject common name (repeatable; "
        "default: any the CA signed); needs --client-ca-file",
    )
    hook.add_argument(
        "--metrics-host", default="0.0.0.0", help="address of the plain-HTTP metrics port"
    )
    hook.add_argument(
        "--metrics-port",
        type=int,
        default=8081,
        help="plain-HTTP port of /metrics, /healthz and /readyz (never served on --port)",
    )


def _add_webhook_command(commands: Any) -> None:
    hook = commands.add_parser("webhook", help="run the validating admission webhook (HTTPS)")
    _add_connection_flags(hook)
    _add_webhook_endpoint_flags(hook)
    hook.add_argument(
        "--cert-file", required=True, help="serving certificate (PEM), reloaded on change"
    )
    hook.add_argument("--key-file", required=True, help="its private key (PEM)")
    hook.add_argument("--host", default="0.0.0.0", help="address to listen on")
    hook.add_argument("--port", type=int, default=8443, help="port to listen on")
    hook.add_argument(
        "--controller-user",
        action="append",
        help="user whose quota edits are not checked (repeatable; default: "
        f"{DEFAULT_CONTROLLER_USERS[0]})",
    )
    hook.add_argument(
        "--target-creator",
        action="append",
        help="user that creates migration target pods (repeatable; default: KubeVirt's controller "
        "service accounts in harvester-system and kubevirt)",
    )
    hook.add_argument("--kubevirt-version", help="KubeVirt version (default: from the KubeVirt CR)")
    hook.add_argument(
        "--namespace",
        default="harvester-system",
        help="the webhook's own namespace: the replicas share their admissions through Leases "
        "there",
    )
    hook.add_argument(
        "--target-room-wait",
        type=_non_negative_seconds,
        default=TARGET_ROOM_WAIT,
        help="seconds a migration target pod's admission may wait for the controller's raise "
        f"(default {TARGET_ROOM_WAIT:g}; 0: never wait); keep it below the rule's timeoutSeconds",
    )
    hook.add_argument(
        "--no-mtq",
        action="store_true",
        help="as the controller's --no-mtq: namespaces with a VirtualMachineMigrationResourceQuota "
        "keep the room rules",
    )
    hook.set_defaults(handler=cmd_webhook)


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
        choices=("ours", "harvester", "both"),
        default="ours",
        help="our controllers and webhook, Harvester v1.9's algorithm, or both side by side",
    )
    scenario_run.add_argument("--no-progress", action="store_true", help="no live table")
    scenario_run.set_defaults(handler=cmd_scenario_run)
    scenario_check = scenario_actions.add_parser("check", help="validate scenario files")
    scenario_check.add_argument("files", nargs="+")
    scenario_check.set_defaults(handler=cmd_scenario_check)


def _add_demo_command(commands: Any) -> None:
    demo = commands.add_parser("demo", help="run the demonstration on a local cluster")
    demo.add_argument("--state-dir", help="state directory of the demo's own cluster")
    demo.set_defaults(handler=cmd_demo)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harvester-quota",
        description="Keeps ResourceQuotas from blocking KubeVirt live migrations.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True)

    _add_cluster_commands(commands)
    _add_run_command(commands)
    _add_webhook_command(commands)
    _add_explain_command(commands)
    _add_scenario_commands(commands)
    _add_demo_command(commands)
    scale_cli.add_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    handler: Handler = args.handler
    try:
        return handler(args)
    except (ClusterError, config.ConfigError) as error:
        print(f"harvester-quota: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
