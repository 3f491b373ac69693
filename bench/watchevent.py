"""``python -m bench.watchevent``: what one watch event costs the controller, socket to handlers.

MODIFIED lines of a launcher pod and a VMI recorded from a scale run's cluster (`OBJECTS`) and
of a migration rendered as the test bench's KubeVirt renders it (with managedFields in the API
server's shape), each event a new resourceVersion and one of a few states, as KubeVirt's status
writes alternate, are fed, one chunk a line, through what a watch response goes through in the
controller: `watchstream.split_lines`, `decode_watch_line`, the reflector's
`_consume` (a turn of the loop after each event), the informer's intake (transform, the store's
key, codec, indexes and views with their listeners) and the handlers every controller of
`ControllerApp` registered (default Options: CPU accounting off, as in the chart), drained
before the clock stops. No worker runs: what a handler queues stays queued. Three stages a kind:

- ``decode``: split_lines and decode_watch_line alone;
- ``event``: the whole path, event after event;
- ``cold``: the whole path, each event alone after the CPU's own caches (L1, L2) were filled
  with other data (`evict_caches`, not counted), nearer a cluster, where the API server, etcd
  and the other processes run on the same cores between two events: bench/SCALE.md measured
  the same paths two to three times dearer so, and a scale run's watch CPU an event higher
  still (a model of the cluster, not the cluster).

It prints CPU µs an event (process time, the fastest of ``--repeat`` rounds of ``--events``;
of its first `COLD_EVENTS` for ``cold``).
``--profile`` prints cProfile's top functions for the whole path instead. ``--a DIR`` runs A
(``PYTHONPATH=DIR``: a directory holding a ``harvester_quota`` copy of another tree's ``pkg``)
and B (this tree) as subprocesses, alternated round by round, on the same lines, and prints
B/A of the fastest rounds (``--rounds`` each):

    python -m bench.watchevent
    python -m bench.watchevent --profile
    python -m bench.watchevent --a /tmp/main-tree --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import orjson
from harvester_quota.app import ControllerApp
from harvester_quota.config.management import Options
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.informer import SharedInformer
from harvester_quota.generic.resource import Object
from harvester_quota.generic.watchstream import WatchEvent, decode_watch_line, split_lines
from harvester_quota.testbench.sim.kubevirt.objects import (
    render_migration,
)
from harvester_quota.testbench.sim.kubevirt.phases import Phase
from prometheus_client import CollectorRegistry

NAMESPACE = "tenant"
KINDS = (
    "pods",
    "virtualmachineinstances.kubevirt.io",
    "virtualmachineinstancemigrations.kubevirt.io",
)
STAGES = ("decode", "event", "cold")
COLD_EVENTS = 100
"""Events a round of the ``cold`` stage (each one pays an eviction)."""
EVICTION_BYTES = 16 << 20
"""What `evict_caches` copies: eight times the 2 MiB L2 cache of one of this machine's cores
(its shared 260 MiB L3 keeps more than that: the copy evicts the core's own caches)."""
STAMP = "2026-11-22T10:00:00Z"


def managed_fields(obj: Object, managers: tuple[str, ...]) -> list[Object]:
    """managedFields as the API server writes them: each manager's fieldsV1, here the set of the
    object's own fields (its shape and size, not exactly which manager owns what)."""

    def fields(value: Any) -> Object:
        if isinstance(value, dict):
            return {f"f:{key}": fields(item) for key, item in value.items()}
        return {}

    shape = fields({k: v for k, v in obj.items() if k not in ("apiVersion", "kind")})
    return [
        {
            "manager": manager,
            "operation": "Update",
            "apiVersion": obj.get("apiVersion", "v1"),
            "time": STAMP,
            "fieldsType": "FieldsV1",
            "fieldsV1": shape,
            **({"subresource": "status"} if manager.endswith("status") else {}),
        }
        for manager in managers
    ]


OBJECTS = Path(__file__).with_name("watchevent-objects.json")
"""A launcher pod and its VMI as a scale run's cluster served them (KubeVirt v1.8.4's
virt-controller, kwok's pod status, the API server's managedFields), recorded with kubectl."""


def recorded(name: str) -> Object:
    """`pod` or `vmi` of OBJECTS, a fresh copy."""
    result: Object = orjson.loads(OBJECTS.read_bytes())[name]
    return result


def migration() -> Object:
    vmim = render_migration(NAMESPACE, "vm-00000", name="vm-00000-migration")
    vmim["metadata"].update(
        uid="vmim-00000000-0000-0000-0000-000000000000", creationTimestamp=STAMP
    )
    vmim["status"] = {"phase": "Pending", "phaseTransitionTimestamps": []}
    vmim["metadata"]["managedFields"] = managed_fields(vmim, ("harvester", "virt-controller"))
    return vmim


MIGRATION_PHASES = [str(p) for p in Phase if p not in (Phase.UNSET, Phase.FAILED)]
"""KubeVirt's steps of a migration that succeeds, Pending to Succeeded."""


def states(kind: str) -> list[Object]:
    """A few states of one object of `kind`, each as KubeVirt's or kwok's status writes leave it."""
    if kind == "pods":
        pod = recorded("pod")
        ready = recorded("pod")
        for condition in ready["status"]["conditions"]:
            if condition["type"] == "Ready":
                condition["status"] = "False"
        return [pod, ready]
    if kind == "virtualmachineinstances.kubevirt.io":
        vmi = recorded("vmi")
        result = []
        for step, phase in enumerate(("Scheduling", "PreparingTarget", "Running", "Succeeded")):
            state = json.loads(json.dumps(vmi))
            state["status"]["migrationState"] = {
                "migrationUid": "vmim-00000000-0000-0000-0000-000000000000",
                "sourceNode": "node-7",
                "targetNode": "node-8" if step else None,
                "targetPod": "virt-launcher-vm-00000-fghij",
                "startTimestamp": STAMP if step > 1 else None,
                "completed": phase == "Succeeded",
                "mode": "PreCopy",
            }
            result.append(state)
        return result
    vmim = migration()
    result = []
    for phase in MIGRATION_PHASES:
        state = json.loads(json.dumps(vmim))
        state["status"]["phase"] = phase
        state["status"]["phaseTransitionTimestamps"].append(
            {"phase": phase, "phaseTransitionTimestamp": STAMP}
        )
        result.append(state)
    return result


def lines(kind: str, count: int, first_version: int) -> list[bytes]:
    """`count` MODIFIED lines of one object, the states in turn, versions rising."""
    cycle = states(kind)
    result = []
    for index in range(count):
        obj = cycle[index % len(cycle)]
        obj["metadata"]["resourceVersion"] = str(first_version + index)
        result.append(orjson.dumps({"type": "MODIFIED", "object": obj}) + b"\n")
    return result


class _Content:
    """An aiohttp StreamReader's `iter_any` over chunks already received."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    async def iter_any(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


async def _events(chunks: list[bytes]) -> AsyncIterator[WatchEvent]:
    """What ApiClient.watch yields for a response of these chunks."""
    async for line in split_lines(cast(Any, _Content(chunks))):
        yield decode_watch_line(line)


class Controller:
    """ControllerApp's informers and handlers, no worker, no reflector. A tree whose informers
    give each handler a task of its own (before handlers were called in the watch's turn, for
    `--a`) gets those tasks started."""

    def __init__(self) -> None:
        self.app = ControllerApp(cast(ApiClient, object()), Options(), registry=CollectorRegistry())
        self.informers = {i.name: i for i in self.app.management.informers.informers}
        for informer in self.informers.values():
            for listener in informer._listeners:
                if hasattr(listener, "run"):
                    listener.task = asyncio.ensure_future(listener.run())

    def listed(self, kind: str, obj: Object) -> SharedInformer:
        informer = self.informers[kind]
        informer.on_list([informer.prepare_listed(json.loads(json.dumps(obj)))], "1")
        return informer

    async def drained(self) -> None:
        """Returns once every listener's queue is empty (their handlers ran): at once where
        handlers are called in the watch's turn."""
        for _ in range(100_000):
            if not any(
                getattr(listener, "queue", ())
                for i in self.informers.values()
                for listener in i._listeners
            ):
                return
            await asyncio.sleep(0)
        raise RuntimeError("the handlers did not drain")


async def _decode_only(chunks: list[bytes]) -> None:
    async for _event in _events(chunks):
        pass


async def _whole(informer: SharedInformer, chunks: list[bytes], controller: Controller) -> None:
    await informer.reflector._consume(_events(chunks))
    await controller.drained()


def evict_caches(scratch: bytearray) -> int:
    """Copies `scratch` (a C-level copy, which fills the CPU's caches with its bytes); returns a
    byte of the copy so that nothing is optimised away."""
    return bytes(scratch)[-1]


async def _cold(informer: SharedInformer, chunks: list[bytes], controller: Controller) -> float:
    """CPU seconds of the whole path for each chunk fed alone after `evict_caches`."""
    scratch = bytearray(EVICTION_BYTES)
    spent = 0.0
    for chunk in chunks:
        evict_caches(scratch)
        started = time.process_time()
        await _whole(informer, [chunk], controller)
        spent += time.process_time() - started
    return spent


async def measure(events: int, repeat: int) -> dict[str, dict[str, float]]:
    """{kind: {stage: the fastest round's CPU µs an event}}."""
    controller = Controller()
    result: dict[str, dict[str, float]] = {}
    for kind in KINDS:
        informer = controller.listed(kind, states(kind)[0])
        best = dict.fromkeys(STAGES, float("inf"))
        await _whole(informer, lines(kind, events, 2), controller)  # warm
        for round_ in range(repeat):
            chunks = lines(kind, events, 100 + round_ * events)
            for stage in STAGES:
                if stage == "cold":
                    cold = chunks[:COLD_EVENTS]
                    spent = await _cold(informer, cold, controller) / len(cold) * 1e6
                    best[stage] = min(best[stage], spent)
                    continue
                started = time.process_time()
                if stage == "decode":
                    await _decode_only(chunks)
                else:
                    await _whole(informer, chunks, controller)
                spent = (time.process_time() - started) / events * 1e6
                best[stage] = min(best[stage], spent)
        result[kind] = best
    return result


async def profile(events: int) -> None:
    controller = Controller()
    batches = []
    for kind in KINDS:
        informer = controller.listed(kind, states(kind)[0])
        await _whole(informer, lines(kind, events, 2), controller)  # warm: the codec trained
        batches.append((informer, lines(kind, events, 2 + events)))
    profiler = cProfile.Profile()
    profiler.enable()
    for informer, chunks in batches:
        await _whole(informer, chunks, controller)
    profiler.disable()
    stats = pstats.Stats(profiler)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(40)


def _sizes() -> str:
    return ", ".join(f"{kind} {len(lines(kind, 1, 2)[0])} B" for kind in KINDS)


def _table(results: dict[str, dict[str, float]]) -> list[str]:
    rows = ["| kind | decode µs | event µs | cold event µs |", "|---|---|---|---|"]
    for kind, best in results.items():
        rows.append(f"| {kind} | {best['decode']:.1f} | {best['event']:.1f} | {best['cold']:.1f} |")
    return rows


def _worker(pythonpath: str | None, events: int, repeat: int) -> dict[str, dict[str, float]]:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "result.json"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.watchevent",
                "--events",
                str(events),
                "--repeat",
                str(repeat),
                "--json",
                str(out),
            ],
            env=env,
            check=True,
        )
        return cast(dict[str, dict[str, float]], json.loads(out.read_text()))


def ab(tree: str, rounds: int, events: int, repeat: int) -> list[str]:
    """A (`tree` on PYTHONPATH) and B (this tree) alternated; the fastest of each, and B/A."""
    runs: dict[str, list[dict[str, dict[str, float]]]] = {"A": [], "B": []}
    for _ in range(rounds):
        runs["A"].append(_worker(tree, events, repeat))
        runs["B"].append(_worker(None, events, repeat))
    rows = ["| kind | stage | A µs | B µs | B/A |", "|---|---|---|---|---|"]
    for kind in KINDS:
        for stage in STAGES:
            a = min(run[kind][stage] for run in runs["A"])
            b = min(run[kind][stage] for run in runs["B"])
            rows.append(f"| {kind} | {stage} | {a:.1f} | {b:.1f} | {b / a:.2f} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=400, help="events a round")
    parser.add_argument("--repeat", type=int, default=5, help="rounds a process")
    parser.add_argument("--profile", action="store_true", help="cProfile the whole path")
    parser.add_argument("--a", metavar="DIR", help="A/B against DIR on PYTHONPATH")
    parser.add_argument("--rounds", type=int, default=3, help="processes of each, with --a")
    parser.add_argument("--json", metavar="FILE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.profile:
        asyncio.run(profile(args.events))
        return 0
    if args.a:
        print(f"one line: {_sizes()}")
        print("\n".join(ab(args.a, args.rounds, args.events, args.repeat)))
        return 0
    results = asyncio.run(measure(args.events, args.repeat))
    if args.json:
        Path(args.json).write_text(json.dumps(results))
        return 0
    print(f"one line: {_sizes()}")
    print("\n".join(_table(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
