"""``python -m bench.arms_runs``: issue 40's scale runs, made one after the other on one kept
cluster, then read together by bench/scaleruns.py.

    python -m bench.arms_runs --ours 10 --harvester 5 --reports reports/arms \\
        --state-dir /tmp/arms/state [--size small] [--waves 2] \\
        [--harvester-step-timeout 120] [-- SCALE_ARGS...]

The Harvester runs go first and between ours, spread evenly (`order`): the first run starts the
cluster (with Harvester's controllers when it is a Harvester run), every later run takes it over
(``--keep``). Before each run the machine's one-minute load average must fall under
``--idle-load`` (1.0); the runner waits for it up to ``--idle-wait`` seconds, polling, and runs
anyway after that, saying so. Each run's report goes to ``REPORTS/NN-ours`` or
``REPORTS/NN-harvester`` (its output to ``NN-....log``), with ``runner.json`` beside its
report.json: the commit, the load before and after, when it started and ended, how long it waited
to be idle, its exit code; ``REPORTS/runs.log`` has one line per run. At the end the cluster is
brought down (unless ``--keep-cluster``) and bench/scaleruns.py's tables and verdicts are printed
and written to ``REPORTS/scaleruns.md``. The exit code is scaleruns' (0: issue 40's "done when"
met).

A Harvester run's steps wait at most ``--harvester-step-timeout`` seconds (120) for their
migrations' outcomes and again for the quotas to settle (``scale --step-timeout``): Harvester's
controllers leave some migrations Pending for good, and the scale run's default wait (120 s plus
2 s a migration, twice) would make each of its small runs about half an hour. A migration still
Pending then counts as not done, as it would after the longer wait; our runs keep the default.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from harvester_quota.generic.clock import REAL_CLOCK, Clock
from harvester_quota.generic.commandline import positive_seconds
from harvester_quota.testbench.scale.report import source_commit

from bench import scaleruns

BENCH: Final = (sys.executable, "-m", "harvester_quota.testbench")
IDLE_LOAD: Final = scaleruns.IDLE_LOAD
IDLE_WAIT_SECONDS: Final = 1800.0
"""How long a run waits for an idle machine: a test run of another engineer lasts 10-40 min."""
HARVESTER_STEP_TIMEOUT: Final = 120.0
"""Seconds a Harvester run's step waits for its migrations (module docstring)."""
IDLE_POLL_SECONDS: Final = 15.0
"""The one-minute load average moves little faster than this."""
OURS, HARVESTER = "ours", "harvester"

Runner = Callable[[list[str], Path], int]
"""Runs a command with its output to a log file; returns its exit code."""


def order(ours: int, harvester: int) -> list[str]:
    """The strategies of `ours` + `harvester` runs in the order they run: a Harvester run first
    (when there is one), the Harvester runs spread evenly between ours (Harvester's run j
    before our run j x ours // harvester); ValueError for no run or a negative count."""
    if ours < 0 or harvester < 0 or ours + harvester == 0:
        raise ValueError(f"no runs to make: {ours} of ours, {harvester} of Harvester's")
    before = [j * ours // harvester for j in range(harvester)]
    sequence: list[str] = []
    for i in range(ours):
        sequence += [HARVESTER] * before.count(i) + [OURS]
    return sequence or [HARVESTER] * harvester


def read_load() -> float:
    """The machine's one-minute load average."""
    return float(Path("/proc/loadavg").read_text().split()[0])


@dataclass(frozen=True)
class IdleWait:
    """What the wait for an idle machine found: the load when it ended, after how long, and
    whether it was under the threshold then."""

    load: float
    waited: float
    idle: bool


async def wait_idle(
    load: Callable[[], float],
    clock: Clock,
    *,
    threshold: float = IDLE_LOAD,
    bound: float = IDLE_WAIT_SECONDS,
    poll: float = IDLE_POLL_SECONDS,
) -> IdleWait:
    """Polls `load` every `poll` seconds until it is under `threshold`, at most `bound` seconds
    (then returns with ``idle`` False: the caller runs anyway and says so)."""
    start = clock.monotonic()
    while True:
        now_load, waited = load(), clock.monotonic() - start
        if now_load < threshold:
            return IdleWait(now_load, waited, True)
        if waited >= bound:
            return IdleWait(now_load, waited, False)
        await clock.sleep(min(poll, bound - waited))


@dataclass(frozen=True)
class Options:
    """What every run shares."""

    reports: Path
    state_dir: Path
    size: str = "small"
    waves: int = 2
    scale_args: tuple[str, ...] = ()
    idle_load: float = IDLE_LOAD
    idle_wait: float = IDLE_WAIT_SECONDS
    keep_cluster: bool = False
    harvester_step_timeout: float | None = HARVESTER_STEP_TIMEOUT
    """`scale --step-timeout` for Harvester's runs (None: the scale run's default)."""


def scale_command(strategy: str, report: Path, options: Options, *, place: int) -> list[str]:
    """One run's command: the shared size and waves, the kept cluster, its own report, and its
    arms' order rotated by `place` (its place in the sequence, from 0: `scale --arm-offset`), so
    that over three runs each arm runs first, second and last in every step."""
    return [
        *BENCH,
        "scale",
        "--size",
        options.size,
        "--waves",
        str(options.waves),
        "--keep",
        "--state-dir",
        str(options.state_dir),
        "--report",
        str(report),
        "--arm-offset",
        str(place),
        *(["--strategy", HARVESTER] if strategy == HARVESTER else []),
        *_step_timeout(strategy, options),
        *options.scale_args,
    ]


def _step_timeout(strategy: str, options: Options) -> list[str]:
    """The `--step-timeout` argument of a Harvester run, none for ours."""
    if strategy != HARVESTER or options.harvester_step_timeout is None:
        return []
    return ["--step-timeout", f"{options.harvester_step_timeout:g}"]


class ArmsRuns:
    """The runs of `Options`, in `order`, each after its wait for an idle machine; `runner`,
    `load` and `clock` are the real ones outside tests. Not reentrant: one sequence at a time."""

    def __init__(
        self,
        options: Options,
        *,
        runner: Runner,
        load: Callable[[], float] = read_load,
        clock: Clock = REAL_CLOCK,
        commit: Callable[[], str | None] = source_commit,
    ) -> None:
        self.options, self.runner, self.load, self.clock = options, runner, load, clock
        self.commit = commit

    async def run(self, sequence: Sequence[str]) -> list[Path]:
        """Makes every run of `sequence`; returns the report directories that hold a report
        (the others are logged: a run that crashed)."""
        self.options.reports.mkdir(parents=True, exist_ok=True)
        made = []
        for index, strategy in enumerate(sequence, start=1):
            report = self.options.reports / f"{index:02d}-{strategy}"
            await self._one(strategy, report, place=index - 1)
            if (report / "report.json").exists():
                made.append(report)
            else:
                self.say(f"{report.name}: no report.json (see {report.name}.log); left out")
        if not self.options.keep_cluster:
            down = [*BENCH, "cluster", "down", "--state-dir", str(self.options.state_dir)]
            self.runner(down, self.options.reports / "cluster-down.log")
        return made

    async def _one(self, strategy: str, report: Path, *, place: int) -> None:
        wait = await wait_idle(
            self.load,
            self.clock,
            threshold=self.options.idle_load,
            bound=self.options.idle_wait,
        )
        if not wait.idle:
            self.say(
                f"{report.name}: the machine was not idle after {wait.waited:.0f} s (load "
                f"{wait.load:.2f} >= {self.options.idle_load}): running anyway"
            )
        started, commit = self.clock.now(), self.commit()
        command = scale_command(strategy, report, self.options, place=place)
        code = await asyncio.to_thread(self.runner, command, report.with_suffix(".log"))
        log: dict[str, object] = {
            "strategy": strategy,
            "commit": commit,
            "started": started.isoformat(timespec="seconds"),
            "ended": self.clock.now().isoformat(timespec="seconds"),
            "load_before": wait.load,
            "load_after": self.load(),
            "idle_waited_s": round(wait.waited),
            "idle": wait.idle,
            "exit_code": code,
        }
        await asyncio.to_thread(write_runner_log, report, log)
        self.say(f"{report.name}: " + ", ".join(f"{k} {v}" for k, v in log.items()))

    def say(self, line: str) -> None:
        print(line, flush=True)
        with (self.options.reports / "runs.log").open("a") as runs_log:
            runs_log.write(line + "\n")


def write_runner_log(report: Path, log: dict[str, object]) -> None:
    """`log` as the run's runner.json (bench/scaleruns.py reads it), beside its report.json."""
    report.mkdir(parents=True, exist_ok=True)
    (report / scaleruns.RUNNER_LOG).write_text(json.dumps(log, indent=2) + "\n")


def run_logged(command: list[str], log: Path) -> int:
    """Runs `command` with its stdout and stderr to `log`."""
    with log.open("w") as out:
        return subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False).returncode


def judge(made: Sequence[Path], reports: Path) -> int:
    """bench/scaleruns.py on the runs `made`: printed and written to REPORTS/scaleruns.md."""
    if not made:
        print("no run left a report", file=sys.stderr)
        return 2
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        code = scaleruns.main([str(path) for path in made])
    (reports / "scaleruns.md").write_text(text.getvalue())
    print(text.getvalue())
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.arms_runs", description=__doc__)
    parser.add_argument("--ours", type=int, default=10)
    parser.add_argument("--harvester", type=int, default=5)
    parser.add_argument("--reports", type=Path, required=True)
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--size", default="small")
    parser.add_argument("--waves", type=int, default=2)
    parser.add_argument("--idle-load", type=float, default=IDLE_LOAD)
    parser.add_argument("--idle-wait", type=float, default=IDLE_WAIT_SECONDS)
    parser.add_argument("--keep-cluster", action="store_true")
    parser.add_argument(
        "--harvester-step-timeout",
        type=positive_seconds,
        default=HARVESTER_STEP_TIMEOUT,
        metavar="SECONDS",
    )
    parser.add_argument("scale_args", nargs="*", help="more `scale` arguments, after --")
    args = parser.parse_args(argv)
    try:
        sequence = order(args.ours, args.harvester)
    except ValueError as error:
        parser.error(str(error))
    options = Options(
        reports=args.reports,
        state_dir=args.state_dir,
        size=args.size,
        waves=args.waves,
        scale_args=tuple(args.scale_args),
        idle_load=args.idle_load,
        idle_wait=args.idle_wait,
        keep_cluster=args.keep_cluster,
        harvester_step_timeout=args.harvester_step_timeout,
    )
    made = asyncio.run(ArmsRuns(options, runner=run_logged).run(sequence))
    return judge(made, args.reports)


if __name__ == "__main__":
    sys.exit(main())
