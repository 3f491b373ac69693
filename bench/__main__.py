"""``python -m bench`` (= ``make bench``): informer and work queue benchmarks, printed as tables.

    python -m bench                                   # everything, defaults (about 30 minutes)
    python -m bench informer --pods 1000,10000,50000  # informer sync time and RSS only
    python -m bench workqueue                         # work queue throughput only
    python -m bench webhook --webhook-rate 100        # the webhook on the tenant's pod creates
    python -m bench down                              # stop a cluster kept with --keep-cluster

The informer part starts its own local cluster (state in ~/.local/state/harvester-quota/bench, or
$HARVESTER_QUOTA_BENCH_STATE_DIR) and stops it at the end unless --keep-cluster; --reuse keeps an
existing one and its pods, so a second run skips the population.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from harvester_quota.testbench.localcluster import ClusterInfo, LocalCluster, binaries

from bench import cluster, informer, populate, report, webhook, workqueue

DEFAULT_PODS = (1_000, 10_000, 50_000)


def _progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _pods(text: str) -> list[int]:
    try:
        sizes = sorted({int(part.replace("_", "").replace("k", "000")) for part in text.split(",")})
    except ValueError:
        raise argparse.ArgumentTypeError(f"--pods wants numbers like 1000,10k: {text!r}") from None
    if not sizes or sizes[0] <= 0:
        raise argparse.ArgumentTypeError(f"--pods wants positive numbers: {text!r}")
    return sizes


def _candidates(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in informer.DEFAULT_CANDIDATES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown candidates {unknown}; choose from {', '.join(informer.DEFAULT_CANDIDATES)}"
        )
    return names


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument(
        "part",
        nargs="?",
        default="all",
        choices=("all", "informer", "workqueue", "webhook", "down"),
    )
    parser.add_argument("--pods", type=_pods, default=list(DEFAULT_PODS), help="1000,10000,50000")
    parser.add_argument(
        "--candidates",
        type=_candidates,
        default=list(informer.DEFAULT_CANDIDATES),
        help="informer candidates, comma-separated (default: all)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="rounds per size up to 10k")
    parser.add_argument("--large-repeats", type=int, default=2, help="rounds per size above 10k")
    parser.add_argument("--wq-repeats", type=int, default=5, help="work queue rounds")
    parser.add_argument("--webhook-rate", type=float, default=100.0, help="pod creates/s")
    parser.add_argument(
        "--webhook-seconds", type=float, default=10.0, help="seconds per namespace per round"
    )
    parser.add_argument("--webhook-rounds", type=int, default=3, help="webhook rounds")
    parser.add_argument(
        "--webhook-state-dir", type=Path, default=cluster.default_webhook_state_dir()
    )
    parser.add_argument("--keep-cluster", action="store_true", help="leave the cluster running")
    parser.add_argument("--reuse", action="store_true", help="use a running cluster and its pods")
    parser.add_argument("--state-dir", type=Path, default=cluster.default_state_dir())
    parser.add_argument("--json", type=Path, help="also write every measurement here")
    parser.add_argument("--markdown", type=Path, help="also write the tables here")
    return parser


def _run_informer(args: argparse.Namespace, out: list[str], raw: dict[str, object]) -> None:
    if any(name in informer.GO_CANDIDATES for name in args.candidates):
        binaries.build_clientgo_informer(progress=_progress)
    _progress(f"informer: cluster in {args.state_dir} ({'reuse' if args.reuse else 'fresh'})")
    local, info = cluster.start(args.state_dir, reuse=args.reuse)
    try:
        nodes = populate.node_names(cluster.NODES)
        out += ["## Informer initial sync", "", *informer.legend(), ""]
        for pods in args.pods:
            repeats = args.repeats if pods <= informer.LARGE else args.large_repeats
            result = informer.run_size(
                info,
                pods,
                nodes,
                candidates=args.candidates,
                repeats=repeats,
                progress=_progress,
            )
            out += [*informer.table(result), ""]
            raw[f"informer_{pods}"] = asdict(result)
            print("\n".join(informer.table(result)) + "\n", flush=True)
    finally:
        if args.keep_cluster:
            _progress("informer: cluster kept running; stop it with: python -m bench down")
        else:
            local.down()
            _progress("informer: cluster stopped")


def _run_webhook(args: argparse.Namespace, out: list[str], raw: dict[str, object]) -> None:
    state_dir = args.webhook_state_dir
    _progress(f"webhook: cluster in {state_dir} ({'reuse' if args.reuse else 'fresh'})")
    local = LocalCluster(state_dir)
    if not args.reuse:
        local.down()
    try:
        info = local.up(nodes=2)  # inside: a start that fails half way is stopped too
        result = asyncio.run(_webhook_run(args, info, state_dir / "product"))
        lines = webhook.table(result)
        out += ["## The webhook on the tenant's path", "", *webhook.legend(), "", *lines, ""]
        raw["webhook"] = asdict(result)
        print("\n".join(lines) + "\n", flush=True)
    finally:
        if args.keep_cluster:
            _progress("webhook: cluster kept running")
        else:
            local.down()
            _progress("webhook: cluster stopped")


async def _webhook_run(
    args: argparse.Namespace, info: ClusterInfo, workdir: Path
) -> webhook.WebhookBenchResult:
    async with cluster.api_client(info, timeout=60) as api:
        return await webhook.run(
            api,
            info,
            workdir,
            rate=args.webhook_rate,
            seconds=args.webhook_seconds,
            rounds=args.webhook_rounds,
            progress=_progress,
        )


def _run_workqueue(args: argparse.Namespace, out: list[str], raw: dict[str, object]) -> None:
    summaries = asyncio.run(workqueue.run_all(repeats=args.wq_repeats, progress=_progress))
    lines = workqueue.table(summaries)
    title = (
        f"## Work queue throughput ({workqueue.DISTINCT_KEYS:,} distinct keys; dupes: "
        f"{workqueue.DUPE_DISTINCT:,} keys x {workqueue.DUPE_REPEATS}; medians of "
        f"{args.wq_repeats} rounds; ratio = ours / asyncio-dedupe, above 1 is better)"
    )
    out += [title, "", *lines, ""]
    raw["workqueue"] = [asdict(summary) for summary in summaries]
    print("\n".join(lines) + "\n", flush=True)


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.part == "down":
        stopped = LocalCluster(args.state_dir).down()
        print("bench cluster stopped" if stopped else "no bench cluster was running")
        return
    started = time.monotonic()
    command = "python -m bench " + shlex.join(sys.argv[1:] if argv is None else argv)
    header = [
        f"# Benchmark run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"Command: `{command.strip()}`",
        "",
        *[f"- {key}: {value}" for key, value in report.machine().items()],
        "",
    ]
    print("\n".join(header), flush=True)
    out: list[str] = []
    raw: dict[str, object] = {"machine": report.machine(), "command": command}
    if args.part in ("all", "workqueue"):
        _run_workqueue(args, out, raw)
    if args.part in ("all", "informer"):
        _run_informer(args, out, raw)
    if args.part in ("all", "webhook"):
        _run_webhook(args, out, raw)
    elapsed = time.monotonic() - started
    footer = f"Total time: {elapsed / 60:.1f} min"
    print(footer)
    if args.markdown:
        args.markdown.write_text("\n".join([*header, *out, footer, ""]))
    if args.json:
        args.json.write_text(json.dumps({**raw, "seconds": elapsed}, indent=1, default=str))


if __name__ == "__main__":
    main()
