"""One measured informer run, in a fresh process: ``python -m bench.informer_worker CANDIDATE ...``.

The parent (``bench.informer``) starts one of these per run so that every RSS figure starts from
a clean interpreter. The run:

1. imports the candidate's modules and loads its configuration (that much is the baseline),
2. collects garbage, reads VmRSS (the baseline) and resets VmHWM,
3. starts the informer with one event handler that counts adds; "synced" is the moment the
   handler has seen every expected pod, i.e. every pod is in the cache and was delivered,
4. collects garbage and reads VmRSS and VmHWM again,

and prints one JSON line. It then leaves with ``os._exit``: the official informer's thread sits in
a blocking watch that ``stop()`` cannot interrupt before the next event.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from bench import memory

CANDIDATES = (
    "ours-zstd",
    "ours-zlib",
    "ours-json",
    "ours-dict",
    "ours-zlib-notransform",
    "official-informer",
)
"""``ours-zstd`` is our informer as shipped (default codec and transform); the others change one
setting each, to show what it costs or saves (``ours-zlib``: the default before session 36)."""


@dataclass
class Target:
    server: str
    ca_file: str
    cert_file: str
    key_file: str
    kubeconfig: str
    expect: int
    timeout: float


@dataclass
class Measurement:
    candidate: str
    expected: int
    cached: int
    sync_seconds: float
    cpu_seconds: float
    rss_baseline: int
    rss_synced: int
    peak_rss: int
    peak_reset: bool
    store_payload_bytes: int | None = None


class _Clock:
    """Start of the run, the moment the last expected add arrived, and the CPU spent meanwhile."""

    def __init__(self) -> None:
        self.started = 0.0
        self.cpu_started = 0.0
        self.synced_at: float | None = None
        self.cpu_at_sync = 0.0

    def start(self) -> None:
        self.started = time.perf_counter()
        self.cpu_started = time.process_time()

    def mark_synced(self) -> None:
        self.synced_at = time.perf_counter()
        self.cpu_at_sync = time.process_time()


def _baseline() -> tuple[int, bool]:
    gc.collect()
    baseline = memory.rss_bytes()
    return baseline, memory.reset_peak()


def _finish(
    candidate: str,
    target: Target,
    clock: _Clock,
    *,
    baseline: int,
    peak_reset: bool,
    cached: int,
) -> Measurement:
    if clock.synced_at is None:
        raise TimeoutError(f"{candidate}: not synced after {target.timeout:.0f}s ({cached} cached)")
    gc.collect()
    return Measurement(
        candidate=candidate,
        expected=target.expect,
        cached=cached,
        sync_seconds=clock.synced_at - clock.started,
        cpu_seconds=clock.cpu_at_sync - clock.cpu_started,
        rss_baseline=baseline,
        rss_synced=memory.rss_bytes(),
        peak_rss=memory.peak_rss_bytes(),
        peak_reset=peak_reset,
    )


# Ours ----------------------------------------------------------------------------------------------


def _ours(codec: str, *, transform: bool = True) -> Callable[..., Any]:
    def run(candidate: str, target: Target) -> Measurement:
        return asyncio.run(_run_ours(candidate, target, codec, transform))

    return run


async def _run_ours(candidate: str, target: Target, codec: str, transform: bool) -> Measurement:
    from harvester_quota.generic.client import ApiClient
    from harvester_quota.generic.config import ClientConfig, client_ssl_context
    from harvester_quota.generic.informer import ResourceEventHandler, SharedInformerFactory
    from harvester_quota.generic.resource import PODS, Object
    from harvester_quota.generic.store import strip_unread_fields
    from harvester_quota.testbench.codecs import BY_NAME

    context = client_ssl_context(target.ca_file, target.cert_file, target.key_file, verify=True)
    config = ClientConfig(host=target.server.rstrip("/"), ssl_context=context)
    client = ApiClient(config, timeout=600)
    factory = SharedInformerFactory(client)
    informer = factory.informer(
        PODS, codec=BY_NAME[codec](), transform=strip_unread_fields if transform else None
    )
    clock = _Clock()
    done = asyncio.Event()
    adds = 0

    def on_add(obj: Object, initial: bool) -> None:
        nonlocal adds
        adds += 1
        if adds == target.expect:
            clock.mark_synced()
            done.set()

    informer.add_event_handler(ResourceEventHandler(on_add=on_add), name="bench")
    baseline, peak_reset = _baseline()
    clock.start()
    factory.start()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done.wait(), target.timeout)
    result = _finish(
        candidate,
        target,
        clock,
        baseline=baseline,
        peak_reset=peak_reset,
        cached=len(informer.store),
    )
    if codec != "dict":
        # The bytes the codec keeps, without the dict and key overheads around them.
        stored = informer.store._items.values()
        result.store_payload_bytes = sum(len(value) for value in stored)
    return result


# The official client -------------------------------------------------------------------------------


def _run_official(candidate: str, target: Target) -> Measurement:
    """kubernetes.informer.SharedInformer over CoreV1Api.list_pod_for_all_namespaces."""
    from kubernetes import client, config
    from kubernetes.informer import ADDED, SharedInformer

    config.load_kube_config(config_file=target.kubeconfig)  # type: ignore[no-untyped-call]
    api = client.CoreV1Api()
    informer = SharedInformer(api.list_pod_for_all_namespaces)  # type: ignore[no-untyped-call]
    clock = _Clock()
    done = threading.Event()
    adds = 0

    def on_add(obj: Any) -> None:
        nonlocal adds
        adds += 1
        if adds == target.expect:
            clock.mark_synced()
            done.set()

    informer.add_event_handler(ADDED, on_add)  # type: ignore[no-untyped-call]
    baseline, peak_reset = _baseline()
    clock.start()
    informer.start()  # type: ignore[no-untyped-call]
    done.wait(target.timeout)
    return _finish(
        candidate,
        target,
        clock,
        baseline=baseline,
        peak_reset=peak_reset,
        cached=len(informer.cache.list_keys()),
    )


RUNNERS: dict[str, Callable[[str, Target], Measurement]] = {
    "ours-zstd": _ours("zstd"),
    "ours-zlib": _ours("zlib"),
    "ours-json": _ours("json"),
    "ours-dict": _ours("dict"),
    "ours-zlib-notransform": _ours("zlib", transform=False),
    "official-informer": _run_official,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.informer_worker")
    parser.add_argument("candidate", choices=CANDIDATES)
    parser.add_argument("--server", required=True)
    parser.add_argument("--ca-file", required=True)
    parser.add_argument("--cert-file", required=True)
    parser.add_argument("--key-file", required=True)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--expect", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args(argv)
    target = Target(
        server=args.server,
        ca_file=args.ca_file,
        cert_file=args.cert_file,
        key_file=args.key_file,
        kubeconfig=args.kubeconfig,
        expect=args.expect,
        timeout=args.timeout,
    )
    try:
        result = RUNNERS[args.candidate](args.candidate, target)
    except Exception as error:
        print(json.dumps({"candidate": args.candidate, "error": repr(error)}), flush=True)
        os._exit(1)
    print(json.dumps(asdict(result)), flush=True)
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
