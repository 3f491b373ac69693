"""Initial sync time and RSS of pod informers: ours against the official Python client's and
against client-go's, same cluster.

For each population size the pods are created (or topped up), kwok is let to finish writing their
status, one unmeasured list warms the API server, and then every candidate runs in a fresh
process, the candidates in a rotated order each round so that none always runs first or right
after the slow one. The Python candidates run in ``bench.informer_worker``; the client-go ones in
a small Go program (``pkg/testbench/localcluster/gomod/clientgo-informer``, built once per machine
like the cluster's binaries) that prints the same JSON fields, plus the Go heap after sync.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harvester_quota.generic.resource import PODS
from harvester_quota.testbench.localcluster import ClusterError, ClusterInfo, binaries

from bench import populate
from bench.cluster import api_client, wait_until_idle
from bench.informer_worker import CANDIDATES
from bench.report import median, mib

REPO = Path(__file__).resolve().parent.parent
OFFICIAL = "official-informer"
CLIENT_GO = "client-go-protobuf"
GO_CANDIDATES: dict[str, tuple[str, ...]] = {
    CLIENT_GO: ("--content-type=protobuf",),
    "client-go-protobuf-strip": ("--content-type=protobuf", "--strip"),
    "client-go-json": ("--content-type=json",),
}
"""The client-go candidates and their flags: ``client-go-protobuf`` is a Go controller's informer
as usually written (protobuf, no transform), the second ratio column's reference; ``-strip`` drops
what our default transform drops, so its cache holds the same fields as ``ours-zstd``."""
DEFAULT_CANDIDATES = (*CANDIDATES, *GO_CANDIDATES)
LARGE = 10_000
"""Sizes above this get ``large_repeats`` rounds: one official run at 50k takes minutes and GBs."""
WORKER_TIMEOUT = 1800.0
PEAK_BYTES_PER_POD = {OFFICIAL: 200_000, **dict.fromkeys(GO_CANDIDATES, 60_000)}
"""Peak memory per pod to leave free before a run (measured: official ~175 KB/pod at 10k, ours
~100 KB/pod); a run that could push the shared machine into the OOM killer is skipped instead."""
DEFAULT_PEAK_BYTES_PER_POD = 120_000

DESCRIPTIONS = {
    "ours-zstd": "ours as shipped: SharedInformer, default transform, codec zstd (dictionary)",
    "ours-zlib": "ours: codec zlib (the default before session 36)",
    "ours-json": "ours: codec json",
    "ours-dict": "ours: codec dict (the decoded dicts kept)",
    "ours-zlib-notransform": "ours: codec zlib, no transform",
    OFFICIAL: "official: kubernetes.informer.SharedInformer",
    CLIENT_GO: f"client-go {binaries.CLIENT_GO_VERSION}: shared informer, protobuf, no transform",
    "client-go-protobuf-strip": "client-go: protobuf, managedFields and last-applied dropped",
    "client-go-json": "client-go: JSON",
}


@dataclass
class SizeResult:
    pods: int
    served_bytes_per_pod: float
    populate_seconds: float
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


def _available_memory() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 1 << 62


def run_worker(candidate: str, info: ClusterInfo, expect: int) -> dict[str, Any]:
    """One measured run in a fresh interpreter; returns its JSON line (with "error" on failure)."""
    needed = PEAK_BYTES_PER_POD.get(candidate, DEFAULT_PEAK_BYTES_PER_POD) * expect
    available = _available_memory()
    if available < needed:
        return {
            "candidate": candidate,
            "error": f"skipped: needs ~{mib(needed)} MiB, {mib(available)} MiB available",
        }
    try:
        command = worker_command(candidate, info, expect)
    except ClusterError as error:
        return {"candidate": candidate, "error": f"no client-go baseline: {error}"}
    try:
        completed = subprocess.run(
            command,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=WORKER_TIMEOUT + 60,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"candidate": candidate, "error": f"no result after {WORKER_TIMEOUT + 60:.0f}s"}
    lines = completed.stdout.strip().splitlines()
    try:
        result: dict[str, Any] = json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = completed.stderr.strip().splitlines()[-5:]
        return {"candidate": candidate, "error": f"exit {completed.returncode}: {tail}"}
    return result


def worker_command(candidate: str, info: ClusterInfo, expect: int) -> list[str]:
    """The command line of one measured run of ``candidate``: a fresh Python interpreter, or the
    client-go baseline (built on first use; ClusterError if Go or the module proxy fails)."""
    connection = [
        f"--server={info.server}",
        f"--ca-file={info.ca_file}",
        f"--cert-file={info.client_cert}",
        f"--key-file={info.client_key}",
        f"--expect={expect}",
    ]
    if candidate in GO_CANDIDATES:
        helper = binaries.build_clientgo_informer()
        return [
            str(helper),
            f"--candidate={candidate}",
            *connection,
            f"--timeout={WORKER_TIMEOUT:.0f}s",
            *GO_CANDIDATES[candidate],
        ]
    return [
        sys.executable,
        "-m",
        "bench.informer_worker",
        candidate,
        *connection,
        f"--kubeconfig={info.kubeconfig}",
        f"--timeout={WORKER_TIMEOUT}",
    ]


async def _prepare(info: ClusterInfo, pods: int, nodes: list[str]) -> tuple[int, float, float]:
    """Populates and settles; returns (pods in the cluster, served JSON bytes/pod, seconds)."""
    started = time.monotonic()
    async with api_client(info, timeout=600) as client:
        await populate.populate(client, pods, nodes)
        await populate.settle(client)
        total = await populate.count_pods(client)
        # Warm-up: the first large list after a burst of writes is slower for the server.
        async with client.session.get(
            client.config.host + PODS.path(), params={"resourceVersion": "0"}
        ) as response:
            served = len(await response.read())
    return total, served / max(total, 1), time.monotonic() - started


def run_size(
    info: ClusterInfo,
    pods: int,
    nodes: list[str],
    *,
    candidates: list[str],
    repeats: int,
    progress: Callable[[str], None] = print,
) -> SizeResult:
    total, served_per_pod, prepared_in = asyncio.run(_prepare(info, pods, nodes))
    progress(
        f"informer: {total} pods ready in {prepared_in:.0f}s "
        f"({served_per_pod / 1000:.1f} KB of JSON each as served)"
    )
    waited, usage = wait_until_idle(info)
    busy = ", ".join(f"{name} {cores:.2f}" for name, cores in usage.items() if cores >= 0.01)
    progress(f"informer: cluster idle after {waited:.0f}s (cores in use: {busy or 'none'})")
    result = SizeResult(total, served_per_pod, prepared_in + waited)
    for round_index in range(repeats):
        shift = round_index % len(candidates)
        for candidate in candidates[shift:] + candidates[:shift]:
            wait_until_idle(info, cores=0.5, window=1.0, timeout=60.0)
            run = run_worker(candidate, info, total)
            if "error" in run:
                result.failures.append(f"{candidate}: {run['error']}")
                progress(f"informer {total}: {candidate} FAILED: {run['error']}")
                continue
            result.runs.setdefault(candidate, []).append(run)
            progress(
                f"informer {total} round {round_index + 1}/{repeats}: {candidate:22} "
                f"sync {run['sync_seconds']:6.2f}s  "
                f"rss +{mib(run['rss_synced'] - run['rss_baseline'])} MiB"
            )
    return result


def _summary(runs: list[dict[str, Any]], pods: int) -> dict[str, float]:
    delta = median([r["rss_synced"] - r["rss_baseline"] for r in runs])
    payload = [r["store_payload_bytes"] for r in runs if r.get("store_payload_bytes")]
    return {
        "sync": median([r["sync_seconds"] for r in runs]),
        "cpu": median([r["cpu_seconds"] for r in runs]),
        "rss_delta": delta,
        "rss_total": median([r["rss_synced"] for r in runs]),
        "peak_delta": median([r["peak_rss"] - r["rss_baseline"] for r in runs]),
        "per_pod": delta / pods,
        "payload_per_pod": median(payload) / pods if payload else float("nan"),
        "go_heap": median([r.get("heap_inuse_synced", 0) for r in runs]),
        "runs": len(runs),
    }


def table(result: SizeResult) -> list[str]:
    """Markdown: medians per candidate, ratios against the official Python informer and against
    client-go's protobuf informer (below 1: the candidate is faster or smaller)."""
    summaries = {name: _summary(runs, result.pods) for name, runs in result.runs.items()}
    official = summaries.get(OFFICIAL)
    client_go = summaries.get(CLIENT_GO)
    lines = [
        f"**{result.pods:,} pods** ({result.served_bytes_per_pod / 1000:.1f} KB JSON/pod as "
        "served; medians; ratio = candidate / official Python client, vs client-go = candidate "
        f"/ {CLIENT_GO}; below 1 is better)",
        "",
        "| candidate | runs | sync s | sync ratio | client CPU s | RSS after sync MiB "
        "| RSS Δ MiB | RSS ratio | RSS Δ B/pod | peak Δ MiB | stored B/pod "
        "| sync vs client-go | RSS Δ vs client-go | Go heap MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in [c for c in DEFAULT_CANDIDATES if c in summaries]:
        s = summaries[name]
        sync_ratio = f"{s['sync'] / official['sync']:.2f}" if official else "-"
        rss_ratio = f"{s['rss_delta'] / official['rss_delta']:.2f}" if official else "-"
        stored = (
            "-" if s["payload_per_pod"] != s["payload_per_pod"] else f"{s['payload_per_pod']:,.0f}"
        )
        go_sync = f"{s['sync'] / client_go['sync']:.2f}" if client_go else "-"
        go_rss = f"{s['rss_delta'] / client_go['rss_delta']:.2f}" if client_go else "-"
        go_heap = mib(s["go_heap"]) if name in GO_CANDIDATES else "-"
        lines.append(
            f"| {name} | {s['runs']:.0f} | {s['sync']:.2f} | {sync_ratio} | {s['cpu']:.2f} "
            f"| {mib(s['rss_total'])} | {mib(s['rss_delta'])} | {rss_ratio} "
            f"| {s['per_pod']:,.0f} | {mib(s['peak_delta'])} | {stored} "
            f"| {go_sync} | {go_rss} | {go_heap} |"
        )
    lines += [f"- failed: {failure}" for failure in result.failures]
    return lines


def legend() -> list[str]:
    return [f"- `{name}`: {text}" for name, text in DESCRIPTIONS.items()]
