"""The `harvester-quota` command line: the product's commands only.

Subcommands:
  run       the quota controllers (leader-elected)
  webhook   the validating admission webhook
  explain   why a namespace's quota is what it is (read-only)
  preflight which VMs a drain or an upgrade will not migrate, and why (read-only)
  release   give every room back before an uninstall (the chart's pre-delete hook)

Installed as `kubectl-harvester_quota` too, it is the kubectl plugin `kubectl harvester-quota`.

The test bench's commands (the local cluster, scenarios, scale, the demo) are another command
line, `python -m harvester_quota.testbench` (harvester_quota.testbench.cli): the product never
imports the bench, and a plain install does not carry it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, get_args

import orjson

from . import __version__, app
from .config.kubevirt import known_fallback
from .config.management import Options
from .generic import config, errors
from .generic.client import ApiClient
from .generic.commandline import (
    accept_logging_flags_everywhere,
    command_parser,
    non_negative_seconds,
    positive_seconds,
    run_command_line,
)
from .util.kubevirtversion import parse_kubevirt_version
from .util.podusage import (
    KUBERNETES_1_36,
    QUOTA_FEATURE_GATES,
    QuotaFeatures,
    quota_features_from_gates,
)
from .util.resourcequota.base import Mode
from .webhook.resources.common import DEFAULT_CONTROLLER_USERS, DEFAULT_TARGET_CREATORS, Identities
from .webhook.resources.pod.targets import TARGET_ROOM_WAIT

if TYPE_CHECKING:
    from .webhook.certkeeper import SelfSigned
    from .webhook.tls import ClientAuth

log = logging.getLogger(__name__)

RETIRED_RUN_FLAGS: Final = {
    "--no-harvester-compat": 0,
    "--no-leader-elect": 0,
    "--release-gather": 1,
    "--room-held-linger": 1,
    "--stale-raise-sweep": 1,
}
"""Flags `run` once had, with the number of values each took: still accepted (hidden from
--help, the value unchecked) and ignored with one warning at start, so that a Deployment whose
args still set one keeps running rather than crash-looping on a usage error."""


class _Retired(argparse.Action):
    """Records the retired flag given in `retired_flags` (a list, in the order given)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        namespace.retired_flags = [*getattr(namespace, "retired_flags", []), option_string]


def _add_retired_flags(parser: argparse.ArgumentParser) -> None:
    for flag, values in RETIRED_RUN_FLAGS.items():
        parser.add_argument(flag, action=_Retired, nargs=values, help=argparse.SUPPRESS)


def _warn_retired(args: argparse.Namespace) -> None:
    """One warning naming each retired flag given (RETIRED_RUN_FLAGS), if any."""
    retired = sorted(set(getattr(args, "retired_flags", [])))
    if retired:
        log.warning("retired flags, ignored: %s (remove them from the args)", ", ".join(retired))


# LAZY_IMPORTS: explain and the webhook server are imported by their commands only: the
# controllers' process (`run`) then does not carry them.


def _options(args: argparse.Namespace) -> Options:
    return Options(
        namespace=args.namespace,
        mode=args.mode,
        kubevirt_version=args.kubevirt_version,
        quota_features=args.quota_feature_gates,
        workers=args.workers,
        identity=args.identity or Options().identity,
        lease_name=args.lease_name,
        warm_standby=not args.cold_standby,
        health_port=args.health_port,
        cpu_accounting=args.cpu_accounting,
        harvester_annotations=args.harvester_annotations,
        mtq=not args.no_mtq,
        mtq_lock_seconds=args.mtq_lock_seconds,
        rancher_direct_fail_closed=not args.rancher_direct_fail_open,
        paused=args.paused,
        adopt_harvester_quotas=args.adopt_harvester_quotas,
    )


def cmd_run(args: argparse.Namespace) -> int:
    """Runs the controllers until SIGTERM. An API server that cannot be reached at startup is
    waited for, unready (its reflectors back off and retry, as during an API server restart),
    never a crash loop; a kubeconfig that cannot be loaded is one line on stderr and exit 2.
    Retired flags given are warned of first (`_warn_retired`)."""
    _warn_retired(args)

    async def main() -> int:
        async with ApiClient(config.load(args.kubeconfig, args.context)) as client:
            return await app.run(client, _options(args))

    return asyncio.run(main())


def cmd_webhook(args: argparse.Namespace) -> int:
    identities = Identities(
        controllers=frozenset(args.controller_user or DEFAULT_CONTROLLER_USERS),
        target_creators=frozenset(args.target_creator or DEFAULT_TARGET_CREATORS),
    )
    from .webhook import server as webhook_server  # noqa: PLC0415 - see LAZY_IMPORTS
    from .webhook.options import WebhookOptions  # noqa: PLC0415 - see LAZY_IMPORTS

    options = WebhookOptions(
        cert_file=Path(args.cert_file),
        key_file=Path(args.key_file),
        identities=identities,
        host=args.host,
        port=args.port,
        client_auth=_client_auth(args),
        metrics_address=(args.metrics_host, args.metrics_port),
        kubevirt_version=args.kubevirt_version,
        mode=args.mode,
        quota_features=args.quota_feature_gates,
        target_room_wait=args.target_room_wait,
        namespace=args.namespace,
        mtq=not args.no_mtq,
        self_signed=self_signed_options(args),
    )

    async def main() -> int:
        async with ApiClient(config.load(args.kubeconfig, args.context)) as client:
            return await webhook_server.serve(client, options)

    return asyncio.run(main())


def self_signed_options(args: argparse.Namespace) -> SelfSigned | None:
    """--self-signed-secret and its companions as the webhook's SelfSigned (None without a
    Secret name); exits with a usage error for lifetimes the policy refuses."""
    from .webhook.certkeeper import SelfSigned, parse_duration  # noqa: PLC0415 - LAZY_IMPORTS
    from .webhook.selfsigned import Policy  # noqa: PLC0415 - see LAZY_IMPORTS

    if not args.self_signed_secret:
        return None
    service = f"harvester-quota-webhook.{args.namespace}.svc"
    hosts = tuple(args.cert_host or (service, f"{service}.cluster.local"))
    try:
        policy = Policy(
            hosts,
            ca_lifetime=parse_duration(args.ca_lifetime),
            cert_lifetime=parse_duration(args.cert_lifetime),
        )
    except ValueError as error:
        sys.exit(f"harvester-quota webhook: {error}")
    return SelfSigned(args.self_signed_secret, args.webhook_configuration, policy)


def _client_auth(args: argparse.Namespace) -> ClientAuth | None:
    """--client-ca-file and --client-name as the webhook's ClientAuth (None without a CA);
    exits with a usage error for names without a CA."""
    from .webhook.tls import ClientAuth  # noqa: PLC0415 - see LAZY_IMPORTS

    if args.client_ca_file is None:
        if args.client_name:
            sys.exit("harvester-quota webhook: --client-name needs --client-ca-file")
        return None
    return ClientAuth(Path(args.client_ca_file), frozenset(args.client_name or ()))


def cmd_explain(args: argparse.Namespace) -> int:
    """Exit 0 with the explanation; 1: the namespace does not exist; 2: no namespace or two
    different ones given, or an API server that cannot be reached (run_command_line)."""
    from . import explain  # noqa: PLC0415 - see LAZY_IMPORTS

    namespace = _explained_namespace(args)
    if namespace is None:
        return EXPLAIN_USAGE

    async def main() -> int:
        async with ApiClient(config.load(args.kubeconfig, args.context)) as client:
            try:
                found = await explain.explain(
                    client,
                    namespace,
                    mode=args.mode,
                    kubevirt_version=args.kubevirt_version,
                    quota_features=args.quota_feature_gates,
                    controller_namespace=args.controller_namespace,
                )
            except errors.NotFound:
                print(f"harvester-quota: namespace {namespace} not found", file=sys.stderr)
                return 1
        render = explain.render_json if args.output == "json" else explain.render_text
        sys.stdout.write(render(found) + ("\n" if args.output == "json" else ""))
        return 0

    return asyncio.run(main())


EXPLAIN_USAGE = 2
"""explain's exit code for a namespace missing or given twice (argparse's usage code)."""


def _explained_namespace(args: argparse.Namespace) -> str | None:
    """The namespace `explain` was asked about: the positional NAMESPACE or -n/--namespace (as
    kubectl takes it), the same if both are given; None, with the reason on stderr, when
    neither is or they differ."""
    given: set[str] = {name for name in (args.namespace, args.namespace_flag) if name}
    if len(given) == 1:
        return given.pop()
    reason = (
        "two namespaces given" if given else "a namespace is needed (NAMESPACE or -n NAMESPACE)"
    )
    print(f"harvester-quota explain: {reason}", file=sys.stderr)
    return None


def cmd_preflight(args: argparse.Namespace) -> int:
    """Exit 0: nothing blocks; 1: something does; 2: bad input (an unknown node, a cluster that
    cannot be reached or read), with the reason on stderr."""
    from . import preflight  # noqa: PLC0415 - see LAZY_IMPORTS
    from .preflight import read  # noqa: PLC0415
    from .preflight.report import render_json, render_text  # noqa: PLC0415

    async def main() -> preflight.PreflightReport:
        async with ApiClient(config.load(args.kubeconfig, args.context)) as client:
            state, warnings = await read.read_cluster(
                client, kubevirt_version=args.kubevirt_version
            )
            if args.strategy == "auto":
                strategy, reason = await read.detect_strategy(client, state)
            else:
                strategy, reason = args.strategy, "asked for with --strategy"
        plan = preflight.Plan(
            args.operation,
            args.nodes or (),
            strategy,
            reason,
            mode=args.mode,
            quota_features=args.quota_feature_gates,
        )
        report = preflight.preflight(state, plan)
        report.warnings = [*warnings, *report.warnings]
        return report

    try:
        report = asyncio.run(main())
    except errors.ConnectionFailed:
        raise  # run_command_line's one line, the same as every command's
    except (preflight.UnknownNode, config.ConfigError, errors.ApiError, OSError) as error:
        print(f"harvester-quota preflight: {error}", file=sys.stderr)
        return PREFLIGHT_BAD_INPUT
    if args.output == "json":
        sys.stdout.write(render_json(report))
    else:
        sys.stdout.write(render_text(report, colour=sys.stdout.isatty()))
    return 1 if report.blocks else 0


PREFLIGHT_BAD_INPUT = 2
"""preflight's exit code for input it cannot judge (kubectl's and argparse's usage code too)."""


def cmd_release(args: argparse.Namespace) -> int:
    """Exit 0: every room given back, nothing of ours left; 1: something is left (listed; the
    controllers scaled back as they were); 2: the controller Deployment cannot be read or scaled
    (RBAC, a bad kubeconfig) or the API server cannot be reached, with the reason on stderr;
    3: something is left and the controllers could not be scaled back (the command on stderr)."""
    from . import release  # noqa: PLC0415 - see LAZY_IMPORTS

    settings = release.ReleaseConfig(
        options=Options(
            namespace=args.namespace,
            lease_name=args.lease_name,
            mode=args.mode,
            kubevirt_version=args.kubevirt_version,
            mtq=not args.no_mtq,
            mtq_lock_seconds=args.mtq_lock_seconds,
        ),
        deployment=args.deployment,
        grace=args.grace,
        timeout=args.timeout,
    )

    async def main() -> release.ReleaseResult:
        # SIGTERM (the hook's Job past its deadline) cancels the release, which then scales
        # the controllers back before it ends.
        current = asyncio.current_task()
        assert current is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, current.cancel)
        async with ApiClient(config.load(args.kubeconfig, args.context)) as client:
            return await release.release(client, settings)

    try:
        result = asyncio.run(main())
    except asyncio.CancelledError:
        print("harvester-quota release: stopped (SIGTERM) before it finished", file=sys.stderr)
        return RELEASE_FAILED
    except errors.ConnectionFailed:
        raise  # run_command_line's one line, the same as every command's
    except (config.ConfigError, errors.ApiError) as error:
        print(f"harvester-quota release: {error}", file=sys.stderr)
        return RELEASE_FAILED
    except release.ScaleBackFailed as error:
        print(f"harvester-quota release: {error}", file=sys.stderr)
        return RELEASE_CONTROLLERS_STOPPED
    if args.output == "json":
        sys.stdout.write(orjson.dumps(result.as_dict()).decode() + "\n")
    else:
        sys.stdout.write(release.render_text(result) + "\n")
    return 0 if result.released else 1


RELEASE_FAILED = 2
"""release's exit code when it could not start (the Deployment unreadable or unscalable)."""
RELEASE_CONTROLLERS_STOPPED = 3
"""release's exit code when something is left and the controllers it stopped could not be
scaled back (the message names the command that does it)."""


def _add_connection_flags(
    parser: argparse.ArgumentParser, default: Any = argparse.SUPPRESS
) -> None:
    """--kubeconfig and --context, on the top-level parser (default None) and on each command
    (SUPPRESS: a value given before the command is kept unless given again after it). kubectl
    hands a plugin its arguments as typed, so `kubectl harvester-quota --context prod preflight
    upgrade` is as good as `kubectl harvester-quota preflight upgrade --context prod`."""
    parser.add_argument(
        "--kubeconfig",
        default=default,
        help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)",
    )
    parser.add_argument("--context", default=default, help="kubeconfig context")


def _add_kubevirt_flags(
    parser: argparse.ArgumentParser, *, mode_help: str, version_help: str
) -> None:
    """--mode (where the base quota comes from: auto, rancher or standalone; default auto) and
    --kubevirt-version (whose launcher pods to size; unset: what the KubeVirt CR says), which
    every command that reads a base or sizes pods takes; the help says what this command does
    with them."""
    parser.add_argument("--mode", choices=get_args(Mode), default="auto", help=mode_help)
    parser.add_argument("--kubevirt-version", type=kubevirt_version_arg, help=version_help)


def _add_quota_feature_gates_flag(parser: argparse.ArgumentParser) -> None:
    """--quota-feature-gates, on every command that charges pods as quota admission does."""
    parser.add_argument(
        "--quota-feature-gates",
        type=quota_feature_gates_arg,
        default=KUBERNETES_1_36,
        metavar="GATE=BOOL,...",
        help="the API server's feature gates that change what quota charges a pod, in its "
        f"--feature-gates syntax (known: {', '.join(QUOTA_FEATURE_GATES)}; default: none on, "
        "as on Kubernetes v1.36; the same on the controller, the webhook, explain and preflight)",
    )


def quota_feature_gates_arg(text: str) -> QuotaFeatures:
    """--quota-feature-gates as QuotaFeatures; an unknown gate or a value that is not a bool is
    a usage error at start, naming the gates known."""
    try:
        return quota_features_from_gates(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def kubevirt_version_arg(text: str) -> str:
    """--kubevirt-version as the KubeVirt CR's version is read: a release we know, or "main"
    (given, or for a release after the newest we know, or a "devel" build); anything else is a
    usage error now rather than a ValueError at every room and VM-start check later."""
    try:
        parse_kubevirt_version(text)
    except ValueError as error:
        fallback = known_fallback(text)
        if fallback != "main":
            raise argparse.ArgumentTypeError(str(error)) from error
        return fallback
    return text


def _add_run_command(commands: Any) -> None:
    run = commands.add_parser("run", help="run the quota controllers (leader-elected)")
    _add_connection_flags(run)
    run.add_argument(
        "--namespace", default="harvester-system", help="namespace of the leader Lease"
    )
    _add_kubevirt_flags(
        run,
        mode_help="where the base quota comes from: Rancher's namespace annotation (rancher), a "
        "base recorded on the quota (standalone), or the first when present (auto)",
        version_help="KubeVirt version whose launcher pods to size (default: read from the "
        "KubeVirt CR)",
    )
    _add_quota_feature_gates_flag(run)
    run.add_argument("--workers", type=int, default=5, help="workers per controller")
    run.add_argument("--identity", help="leader-election identity (default: host name)")
    run.add_argument("--lease-name", default="harvester-quota", help="name of the leader Lease")
    run.add_argument(
        "--cold-standby",
        action="store_true",
        help="a standby opens no watch until it wins the Lease (half the API server watches and "
        "memory; a failover then waits for its caches to fill)",
    )
    run.add_argument("--health-port", type=int, default=8080, help="/healthz /readyz /metrics")
    run.add_argument(
        "--cpu-accounting",
        action="store_true",
        help="export the CPU of each watch stream and handler run (two CPU-clock reads per "
        "coroutine step: 8-10%% of the controller's CPU, measured)",
    )
    run.add_argument(
        "--harvester-annotations",
        action="store_true",
        help="write Harvester's VMI migration annotations and VM timestamp touch (off: on "
        "Harvester its own migration controller writes them; elsewhere nothing reads them)",
    )
    run.add_argument(
        "--no-mtq",
        action="store_true",
        help="leave namespaces with a VirtualMachineMigrationResourceQuota to the room mode "
        "(MTQ mode off)",
    )
    run.add_argument(
        "--mtq-lock-seconds",
        type=positive_seconds,
        default=30.0,
        help="the longest an MTQ namespace lock and its raise last (default 30)",
    )
    run.add_argument(
        "--rancher-direct-fail-open",
        action="store_true",
        help="leave namespaces whose Rancher quota is raised directly without the room-held "
        "label between rooms: their pods meet the webhook's fail-open rule, so a webhook outage "
        "blocks none of them but lets tenant pods into a held room (docs/security.md)",
    )
    run.add_argument(
        "--paused",
        action="store_true",
        help="the global switch: give every room back and raise none until restarted without it "
        "(the opt-out of one namespace is its label harvester-quota.io/paused=true)",
    )
    run.add_argument(
        "--adopt-harvester-quotas",
        action="store_true",
        help="run beside Harvester's own migration and resourcequota controllers: managed quotas "
        "carry Harvester's skip annotation with our marker, so its resourcequota controller "
        "leaves them to us; without the flag, quotas adopted before are given back to Harvester "
        "(docs/operations.md, On Harvester)",
    )
    _add_retired_flags(run)
    run.set_defaults(handler=cmd_run)


def _add_explain_command(commands: Any) -> None:
    command = commands.add_parser(
        "explain", help="why a namespace's quota is what it is (read-only)"
    )
    command.add_argument("namespace", nargs="?", metavar="NAMESPACE")
    command.add_argument(
        "-n", "--namespace", dest="namespace_flag", metavar="NAMESPACE", help="as NAMESPACE"
    )
    _add_connection_flags(command)
    command.add_argument("-o", "--output", choices=("text", "json"), default="text")
    _add_kubevirt_flags(
        command,
        mode_help="the controller's --mode, if not auto",
        version_help="the controller's --kubevirt-version, if set",
    )
    _add_quota_feature_gates_flag(command)
    command.add_argument(
        "--controller-namespace",
        default="harvester-system",
        help="where the controllers run: their leader Lease says whether they are paused "
        "(run --paused)",
    )
    command.set_defaults(handler=cmd_explain)


def _add_preflight_command(commands: Any) -> None:
    command = commands.add_parser(
        "preflight",
        help="which VMs a drain or an upgrade will not migrate, and why (read-only)",
        description="exit code 0: nothing blocks; 1: something blocks; 2: bad input",
    )
    _add_connection_flags(command)
    operations = command.add_subparsers(dest="operation", required=True)
    drain = operations.add_parser("drain", help="drain these nodes together")
    drain.add_argument("nodes", nargs="+", metavar="NODE")
    upgrade = operations.add_parser(
        "upgrade", help="every node, one at a time, in the order a rolling upgrade takes them"
    )
    for parser in (drain, upgrade):
        _add_connection_flags(parser)
        parser.add_argument("-o", "--output", choices=("text", "json"), default="text")
        parser.add_argument(
            "--strategy",
            choices=("ours", "harvester", "none", "auto"),
            default="auto",
            help="whose quota raises to expect: harvester-quota's, Harvester's, none (plain "
            "KubeVirt), or auto (what the cluster runs)",
        )
        _add_kubevirt_flags(
            parser,
            mode_help="the controller's --mode, if not auto (strategy ours)",
            version_help="KubeVirt version (default: from its CR)",
        )
        _add_quota_feature_gates_flag(parser)
        parser.set_defaults(handler=cmd_preflight)
    upgrade.set_defaults(nodes=[])


def _add_webhook_endpoint_flags(hook: argparse.ArgumentParser) -> None:
    """Who may call the admission port, and where /metrics is served instead."""
    hook.add_argument(
        "--client-ca-file",
        help="require a client certificate signed by this CA (PEM, reloaded on change) at "
        "the TLS handshake of --port: the one the API server presents to webhooks "
        '(docs/operations.md, "Client authentication"); probes go to --metrics-port',
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
        help="plain-HTTP port of /metrics (never served on --port), /healthz and /readyz "
        "(the probes' port)",
    )


def _add_self_signed_flags(hook: argparse.ArgumentParser) -> None:
    hook.add_argument(
        "--self-signed-secret",
        metavar="NAME",
        help="make and rotate the serving certificate with a CA of the webhook's own, kept in "
        "this Secret of --namespace (shared by the replicas), and keep the caBundle of "
        "--webhook-configuration in step",
    )
    hook.add_argument(
        "--webhook-configuration",
        default="harvester-quota",
        help="the ValidatingWebhookConfiguration whose caBundle --self-signed-secret keeps",
    )
    hook.add_argument(
        "--cert-host",
        action="append",
        help="DNS name or IP address the self-signed serving certificate covers (repeatable; "
        "default: the Service harvester-quota-webhook.<namespace>.svc[.cluster.local])",
    )
    hook.add_argument(
        "--ca-lifetime", default="7d", help="lifetime of the self-signed CA (default 7d)"
    )
    hook.add_argument(
        "--cert-lifetime",
        default="24h",
        help="lifetime of the serving certificate (default 24h); each is renewed after 80%% of it",
    )


def _add_release_command(commands: Any) -> None:
    command = commands.add_parser(
        "release",
        help="give every room back before an uninstall: stop the controllers, give back, check",
        description="exit code 0: every room given back, nothing of ours left; 1: something "
        "is left (listed; the controllers scaled back as they were); 2: could not start; "
        "3: something is left and the controllers could not be scaled back",
    )
    _add_connection_flags(command)
    command.add_argument("-o", "--output", choices=("text", "json"), default="text")
    command.add_argument(
        "--namespace", default="harvester-system", help="where the controllers run (their Lease)"
    )
    command.add_argument(
        "--deployment", default="harvester-quota", help="the controllers' Deployment"
    )
    command.add_argument(
        "--lease-name", default="harvester-quota", help="the controllers' leader Lease"
    )
    _add_kubevirt_flags(
        command,
        mode_help="the controller's --mode, if not auto",
        version_help="the controller's --kubevirt-version, if set",
    )
    command.add_argument("--no-mtq", action="store_true", help="the controller's --no-mtq")
    command.add_argument(
        "--mtq-lock-seconds",
        type=positive_seconds,
        default=30.0,
        help="the controller's --mtq-lock-seconds",
    )
    command.add_argument(
        "--grace",
        type=non_negative_seconds,
        default=60.0,
        help="seconds to let migrations holding room end first, while the controllers run "
        "(default 60; 0: give back at once)",
    )
    command.add_argument(
        "--timeout",
        type=positive_seconds,
        default=180.0,
        help="seconds to wait, after the controllers stopped, for nothing of ours to be left "
        "(default 180)",
    )
    command.set_defaults(handler=cmd_release)


def _add_webhook_command(commands: Any) -> None:
    hook = commands.add_parser("webhook", help="run the validating admission webhook (HTTPS)")
    _add_connection_flags(hook)
    _add_webhook_endpoint_flags(hook)
    hook.add_argument(
        "--cert-file",
        required=True,
        help="serving certificate (PEM), reloaded on change; written here with "
        "--self-signed-secret",
    )
    hook.add_argument("--key-file", required=True, help="its private key (PEM)")
    _add_self_signed_flags(hook)
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
    _add_kubevirt_flags(
        hook,
        mode_help="the controller's --mode: in standalone mode Rancher's annotation is no base",
        version_help="KubeVirt version (default: from the KubeVirt CR)",
    )
    _add_quota_feature_gates_flag(hook)
    hook.add_argument(
        "--namespace",
        default="harvester-system",
        help="the webhook's own namespace: the replicas share their admissions through Leases "
        "there",
    )
    hook.add_argument(
        "--target-room-wait",
        type=non_negative_seconds,
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


def build_parser(prog: str = "harvester-quota") -> argparse.ArgumentParser:
    parser, commands = command_parser(
        prog,
        "Keeps ResourceQuotas from blocking KubeVirt live migrations.",
        __version__,
    )
    _add_connection_flags(parser, default=None)
    _add_run_command(commands)
    _add_webhook_command(commands)
    _add_explain_command(commands)
    _add_preflight_command(commands)
    _add_release_command(commands)
    accept_logging_flags_everywhere(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_command_line(build_parser(), argv, (config.ConfigError,))


def kubectl_main(argv: Sequence[str] | None = None) -> int:
    """The kubectl plugin (`kubectl-harvester_quota` on PATH): `kubectl harvester-quota ...`;
    kubectl hands its plugin every argument, --kubeconfig and --context included."""
    return run_command_line(build_parser("kubectl harvester-quota"), argv, (config.ConfigError,))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
