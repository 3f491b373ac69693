"""`harvester-quota-bench scenario repeat FILE --times N [--burners K]`: one scenario again and
again on one local cluster, idle or beside CPU burners, to show a rare failure or its absence.

Each run writes its report under DIR/run-<i>/<strategy>/; the summary counts the runs whose
expectations were not all met and names each failed expectation. The burners are processes that
spin on a core each (`multiprocessing`), started before the first run and stopped after the last,
so the runs meet a loaded machine as CI does when other work shares it.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..localcluster import ClusterInfo
from .cli import admin_client, local_cluster_for, run_scenario
from .schema import load


def _burn() -> None:  # pragma: no cover - runs in a child process
    while True:
        pass


@contextlib.contextmanager
def cpu_burners(count: int) -> Iterator[None]:
    """`count` processes spinning on a core each while the block runs."""
    context = multiprocessing.get_context("spawn")
    burners = [context.Process(target=_burn, daemon=True) for _ in range(count)]
    for burner in burners:
        burner.start()
    try:
        yield
    finally:
        for burner in burners:
            burner.terminate()
        for burner in burners:
            burner.join(timeout=5)


@dataclass
class RepeatSummary:
    """The runs of one scenario and which failed how."""

    runs: int = 0
    failures: list[tuple[int, list[str]]] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    def add(self, index: int, report: dict[str, Any]) -> None:
        self.runs += 1
        self.seconds.append(float(report.get("seconds", 0.0)))
        failed = [
            f"{c['expectation']}: expected {c['expected']}, got {c['actual']}"
            for c in report["expectations"]
            if not c["ok"]
        ]
        failed += [name for name, ok in report["invariants"].items() if not ok]
        if failed:
            self.failures.append((index, failed))

    def text(self, name: str, burners: int) -> str:
        load = f"beside {burners} CPU burners" if burners else "idle"
        lines = [
            f"{name}: {len(self.failures)} of {self.runs} runs failed ({load}); "
            f"run seconds {min(self.seconds, default=0):.1f}-{max(self.seconds, default=0):.1f}"
        ]
        lines += [f"  run {index}: {'; '.join(failed)}" for index, failed in self.failures]
        return "\n".join(lines)


async def _repeat(
    info: ClusterInfo, path: str, times: int, strategy: str, directory: Path
) -> RepeatSummary:
    scenario = load(path)
    summary = RepeatSummary()
    async with admin_client(info) as api:
        for index in range(1, times + 1):
            reports = await run_scenario(
                scenario,
                api=api,
                cluster=info,
                strategies=[strategy],
                report_dir=directory / f"run-{index}",
                progress=False,
            )
            summary.add(index, reports[strategy])
            state = "FAILED" if summary.failures and summary.failures[-1][0] == index else "ok"
            print(f"[{time.strftime('%H:%M:%S')}] run {index}/{times}: {state}", flush=True)
    return summary


def repeat(path: str, *, times: int, burners: int, strategy: str, report_dir: str) -> int:
    """Runs the scenario `times` times; 0 if every run met its expectations, else 1."""
    info = local_cluster_for(load(path), [strategy])
    with cpu_burners(burners):
        summary = asyncio.run(_repeat(info, path, times, strategy, Path(report_dir)))
    print(summary.text(load(path).name, burners))
    return 0 if not summary.failures else 1
