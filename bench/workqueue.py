"""Work queue throughput: ours against the dedupe-set asyncio.Queue people write by hand.

Every candidate runs the same two loads in the same process, interleaved and repeated:

* ``distinct``: N distinct keys are added (timed: adds/s), then W workers drain them (timed:
  get+done cycles/s). Each worker awaits ``asyncio.sleep(0)`` between get and done, the cheapest
  stand-in for a reconcile that awaits anything; without it one worker would take every item.
* ``tight``: as ``distinct`` with one worker that does not await between get and done: the
  queue's own cost without the event loop's (the other loads are dominated by the loop).
* ``dupes``: a producer adds D distinct keys R times each, in random order, 200 adds per event-loop
  turn, while W workers process; timed from the first add until the queue is drained (adds/s).
  ``reconciles`` says how many items the workers got: the fewer, the better the dedupe.

The baseline (``asyncio-dedupe``) dedupes with a set cleared on get, so it guarantees less than
ours: a key re-added during its processing is queued again at once and a second worker may take it
while the first still holds it. Ours never hands one key to two workers and re-queues it on done.
"""

from __future__ import annotations

import asyncio
import gc
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from harvester_quota.generic.workqueue import Queue, RateLimitingQueue
from prometheus_client import CollectorRegistry

DISTINCT_KEYS = 100_000
DUPE_DISTINCT = 10_000
DUPE_REPEATS = 20
ADDS_PER_TURN = 200
WORKER_COUNTS = (1, 4)
BASELINE = "asyncio-dedupe"


class WorkQueue(Protocol):
    def add(self, item: str) -> None: ...

    async def get(self) -> tuple[str | None, bool]: ...

    def done(self, item: str) -> None: ...

    def shut_down(self) -> None: ...


class DedupeAsyncioQueue:
    """The naive queue: asyncio.Queue plus a set of keys waiting in it."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._waiting: set[str] = set()

    def add(self, item: str) -> None:
        if item in self._waiting:
            return
        self._waiting.add(item)
        self._queue.put_nowait(item)

    async def get(self) -> tuple[str | None, bool]:
        item = await self._queue.get()
        if item is None:
            return None, True
        self._waiting.discard(item)
        return item, False

    def done(self, item: str) -> None:
        self._queue.task_done()

    def shut_down(self) -> None:
        """Lets each waiting worker see the end (one sentinel per worker, at most 64)."""
        for _ in range(64):
            self._queue.put_nowait(None)


def _factories() -> dict[str, Callable[[], WorkQueue]]:
    return {
        BASELINE: DedupeAsyncioQueue,
        "Queue": Queue[str],
        "Queue named": lambda: Queue[str](name="bench", registry=CollectorRegistry()),
        "RateLimitingQueue": RateLimitingQueue[str],
        "RateLimitingQueue named": lambda: RateLimitingQueue[str](
            name="bench", registry=CollectorRegistry()
        ),
    }


CANDIDATES = tuple(_factories())


@dataclass
class Run:
    candidate: str
    load: str
    workers: int
    ops_per_second: float
    add_per_second: float | None = None
    reconciles: int = 0


async def _worker(queue: WorkQueue, counter: list[int], *, yields: bool = True) -> None:
    while True:
        item, shutdown = await queue.get()
        if shutdown or item is None:
            return
        if yields:
            await asyncio.sleep(0)
        counter[0] += 1
        queue.done(item)


async def _drain(queue: WorkQueue, workers: list[asyncio.Task[None]], expected: int) -> None:
    """Waits until every queued key was processed, then stops the workers."""
    if isinstance(queue, DedupeAsyncioQueue):
        await queue._queue.join()
    queue.shut_down()
    await asyncio.gather(*workers)


async def run_distinct(
    name: str, make: Callable[[], WorkQueue], workers: int, keys: int, *, yields: bool = True
) -> Run:
    queue = make()
    items = [f"ns-{i % 100}/virt-launcher-{i}" for i in range(keys)]
    counter = [0]
    started = time.perf_counter()
    for item in items:
        queue.add(item)
    added = time.perf_counter()
    tasks = [asyncio.ensure_future(_worker(queue, counter, yields=yields)) for _ in range(workers)]
    await _drain(queue, tasks, keys)
    finished = time.perf_counter()
    if counter[0] != keys:
        raise AssertionError(f"{name}: processed {counter[0]} of {keys} distinct keys")
    return Run(
        name,
        "distinct" if yields else "tight",
        workers,
        ops_per_second=keys / (finished - added),
        add_per_second=keys / (added - started),
        reconciles=counter[0],
    )


async def run_dupes(
    name: str, make: Callable[[], WorkQueue], workers: int, distinct: int, repeats: int
) -> Run:
    queue = make()
    keys = [f"ns-{i % 100}/virt-launcher-{i}" for i in range(distinct)]
    adds = keys * repeats
    random.Random(7).shuffle(adds)
    counter = [0]
    tasks = [asyncio.ensure_future(_worker(queue, counter)) for _ in range(workers)]
    started = time.perf_counter()
    for start in range(0, len(adds), ADDS_PER_TURN):
        for item in adds[start : start + ADDS_PER_TURN]:
            queue.add(item)
        await asyncio.sleep(0)
    await _drain(queue, tasks, distinct)
    finished = time.perf_counter()
    return Run(name, "dupes", workers, len(adds) / (finished - started), reconciles=counter[0])


@dataclass
class Summary:
    candidate: str
    load: str
    workers: int
    ops: list[float] = field(default_factory=list)
    adds: list[float] = field(default_factory=list)
    reconciles: list[int] = field(default_factory=list)


async def run_all(
    *,
    repeats: int = 5,
    keys: int = DISTINCT_KEYS,
    dupe_distinct: int = DUPE_DISTINCT,
    dupe_repeats: int = DUPE_REPEATS,
    progress: Callable[[str], None] = print,
) -> list[Summary]:
    """Every (candidate, load, workers) ``repeats`` times, candidates in a rotated order per round."""
    factories = _factories()
    names = list(factories)
    summaries: dict[tuple[str, str, int], Summary] = {}
    for round_index in range(repeats):
        order = names[round_index % len(names) :] + names[: round_index % len(names)]
        for workers in WORKER_COUNTS:
            for name in order:
                loads = ("tight", "distinct", "dupes") if workers == 1 else ("distinct", "dupes")
                for load in loads:
                    gc.collect()
                    if load in ("tight", "distinct"):
                        run = await run_distinct(
                            name, factories[name], workers, keys, yields=load == "distinct"
                        )
                    else:
                        run = await run_dupes(
                            name, factories[name], workers, dupe_distinct, dupe_repeats
                        )
                    summary = summaries.setdefault(
                        (name, load, workers), Summary(name, load, workers)
                    )
                    summary.ops.append(run.ops_per_second)
                    if run.add_per_second is not None:
                        summary.adds.append(run.add_per_second)
                    summary.reconciles.append(run.reconciles)
        progress(f"workqueue: round {round_index + 1}/{repeats} done")
    return list(summaries.values())


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(summaries: list[Summary]) -> list[str]:
    """Markdown rows: medians and ratios against the baseline of the same load and workers."""
    baseline = {(s.load, s.workers): s for s in summaries if s.candidate == BASELINE}
    lines = [
        "| load | workers | queue | adds/s | get+done/s (tight, distinct) or adds/s until drained "
        "(dupes) | vs asyncio-dedupe | reconciles |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    order = {name: index for index, name in enumerate(CANDIDATES)}
    loads = {"tight": 0, "distinct": 1, "dupes": 2}
    for s in sorted(summaries, key=lambda s: (loads[s.load], s.workers, order[s.candidate])):
        base = baseline[(s.load, s.workers)]
        ratio = median(s.ops) / median(base.ops)
        adds = f"{median(s.adds) / 1e3:,.0f}k" if s.adds else "-"
        lines.append(
            f"| {s.load} | {s.workers} | {s.candidate} | {adds} | {median(s.ops) / 1e3:,.0f}k "
            f"| {ratio:.2f} | {int(statistics.median(s.reconciles)):,} |"
        )
    return lines
