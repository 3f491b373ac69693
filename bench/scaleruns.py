"""``python -m bench.scaleruns DIR [DIR ...]``: many scale runs read together, and issue 40's
"done when" judged on them.

Each DIR is a scale run's ``--report`` directory (its report.json; a quoted glob such as
``'reports/arms/*'`` is expanded here). The runs must be of one commit and one command (size,
waves, arguments; the report and state directories and the strategy aside): otherwise nothing is
compared and the exit code is 2. The runs of ``--strategy harvester`` give Harvester's arm, the
others ours; every run gives its own no-quota and headroom twins.

It prints Markdown ready for bench/SCALE.md: the runs (commit, strategy, the machine's load when
each started, if the runner logged it), then per step and arm the median over the runs, each
run's value in brackets, of what users feel and what conflicted, and of what each migration
cost; then the three verdicts with the figures behind each:

a. per step, the target pod creates that failed on quota admission's Conflict in our arm
   (virt-controller's events, or the API server's 409 pod creates if more), summed over our
   runs, at most the headroom arm's of the same runs (a quota nobody writes);
b. the longest a conflicted migration of ours waited beyond its no-quota twin of the same run
   (the same VM of the same namespace index, report.json's ``migrations_by_twin``) because of
   the conflict: its Succeeded later than the twin's, at most by its stall (first failed create
   to target admitted), at most ONE_SECOND;
c. per drain wave, our p99 Succeeded over the same run's no-quota p99, the median over our runs,
   at most DRAIN_P99_RATIO.

A run that lacks an arm or a step is named, and a verdict it leaves without its figures says
"incomplete" (not met). Exit code 0 when all three are met, 1 otherwise. Issue 55's three
verdicts follow, each on the median over our runs (not in the exit code): (d) per drain wave, our
median and p99 Succeeded within 1.10x of no quota; (e) per step, our target-admitted p50 within
1.2x of no quota's; (f) per step, the controller's CPU at or under 20 ms a migration. A table of
each measured process's CPU a migration (the API server's, etcd's, KubeVirt's ...) comes before
them.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import shlex
import statistics
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from harvester_quota.testbench.scale.stats import (
    ARM_HARVESTER,
    ARM_HEADROOM,
    ARM_NONE,
    ARM_OURS,
    WRITE_COLUMNS,
)
from harvester_quota.testbench.scale.timeline import HOPS

ONE_SECOND: Final = 1.0
"""Issue 40: no migration waits more than a second longer than its no-quota twin because of a
conflict."""
DRAIN_P99_RATIO: Final = 1.10
"""Issue 40: the drain's p99 Succeeded within 1.10x of no quota (median of the runs)."""
RUNS_ASKED: Final = 10
"""Issue 40 asks for ten idle runs of ours."""
IDLE_LOAD: Final = 1.0
"""The one-minute load average under which the runner calls the machine idle (bench/arms_runs.py)."""
ARM_ORDER: Final = (ARM_NONE, ARM_HEADROOM, ARM_OURS, ARM_HARVESTER)
RUN_ARMS: Final = {"ours": ARM_OURS, "harvester": ARM_HARVESTER}
ARM_KEYS: Final = ((ARM_NONE, "baseline_steps"), (ARM_HEADROOM, "headroom_steps"))
RUN_OWN_OPTIONS: Final = frozenset(
    {"--report", "--state-dir", "--strategy", "--step-timeout", "--arm-offset"}
)
"""Options that differ between runs of one comparison (each takes a value): `--step-timeout`
only bounds how long a step waits for migrations that never end (Harvester's runs);
`--arm-offset` only where a run's rotation of the arms starts (bench/arms_runs.py)."""
RUN_OWN_FLAGS: Final = frozenset({"--keep"})
RUNNER_LOG: Final = "runner.json"
"""What bench/arms_runs.py writes beside each run's report.json (load, commit, times)."""


# Reading the runs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One scale run's report.json, its steps by arm (each step's JSON as written)."""

    name: str
    strategy: str
    commit: str | None
    command: str
    plan: Mapping[str, Any]
    arms: Mapping[str, Sequence[Mapping[str, Any]]]
    runner: Mapping[str, Any] = field(default_factory=dict)

    @property
    def quota_arm(self) -> str:
        return RUN_ARMS[self.strategy]

    def step(self, arm: str, name: str) -> Mapping[str, Any] | None:
        return next((s for s in self.arms.get(arm, ()) if s["name"] == name), None)


def load(directory: Path) -> Run:
    """The run in `directory` (its report.json, and runner.json if the runner wrote one);
    ValueError naming the file for anything unreadable."""
    path = directory / "report.json"
    try:
        data = json.loads(path.read_text())
        strategy = data.get("strategy", "ours")
        if strategy not in RUN_ARMS:
            raise ValueError(f"unknown strategy {strategy!r}")
        arms = {RUN_ARMS[strategy]: data["steps"]}
        arms.update({arm: data.get(key, []) for arm, key in ARM_KEYS})
        return Run(
            name=str(directory),
            strategy=strategy,
            commit=data.get("commit"),
            command=data["command"],
            plan=data["plan"],
            arms={arm: steps for arm, steps in arms.items() if steps},
            runner=_runner_log(directory),
        )
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: not a scale run's report ({error!r})") from error


def _runner_log(directory: Path) -> dict[str, Any]:
    path = directory / RUNNER_LOG
    return json.loads(path.read_text()) if path.exists() else {}


def directories(patterns: Iterable[str]) -> list[Path]:
    """The report directories `patterns` name, globs expanded to the directories they match (in
    order, each once: a runner's logs beside them are not runs); ValueError for a pattern that
    names none."""
    found: list[Path] = []
    for pattern in patterns:
        matches = (
            sorted(m for m in glob.glob(pattern) if Path(m).is_dir())
            if glob.has_magic(pattern)
            else [pattern]
        )
        if not matches:
            raise ValueError(f"{pattern!r} names no directory")
        found += [Path(m) for m in matches if Path(m) not in found]
    return found


def command_shape(command: str) -> str:
    """`command` without what differs between runs of one comparison (RUN_OWN_*)."""
    words = shlex.split(command)
    kept: list[str] = []
    skip = False
    for word in words:
        option = word.split("=", 1)[0]
        if skip:
            skip = False
        elif option in RUN_OWN_OPTIONS:
            skip = "=" not in word
        elif word not in RUN_OWN_FLAGS:
            kept.append(word)
    return str(shlex.join(kept))


def refusals(runs: Sequence[Run]) -> list[str]:
    """Why `runs` cannot be compared (empty: they can): different commits, commands or plans,
    or no run of ours."""
    problems = []
    for what, value in (
        ("commit", lambda r: r.commit),
        ("command", lambda r: command_shape(r.command)),
        ("plan", lambda r: json.dumps(r.plan, sort_keys=True)),
    ):
        groups = _group(runs, value)
        if len(groups) > 1:
            told = "; ".join(f"{shown!r}: {', '.join(names)}" for shown, names in groups.items())
            problems.append(f"the runs differ in {what}: {told}")
    if not any(r.strategy == "ours" for r in runs):
        problems.append("no run of ours (every run is --strategy harvester)")
    return problems


def _group(runs: Sequence[Run], value: Callable[[Run], Any]) -> dict[Any, list[str]]:
    groups: dict[Any, list[str]] = {}
    for run in runs:
        groups.setdefault(value(run), []).append(run.name)
    return groups


def warnings(runs: Sequence[Run]) -> list[str]:
    """What the reader should know of comparable runs: unknown or dirty commits, fewer runs of
    ours than issue 40 asks, runs the runner did not find idle."""
    notes = []
    commit = runs[0].commit
    if commit is None:
        notes.append("the commit is unknown (report.json written before it carried one)")
    elif commit.endswith("+dirty"):
        notes.append(f"{commit}: tracked files differed from the commit; one code is not sure")
    ours = sum(1 for r in runs if r.strategy == "ours")
    if ours < RUNS_ASKED:
        notes.append(f"{ours} runs of ours; issue 40's verdict is on {RUNS_ASKED}")
    loaded = [r.name for r in runs if not _idle(r)]
    if loaded:
        notes.append(f"not known idle (load >= {IDLE_LOAD} or not logged): {', '.join(loaded)}")
    return notes


def _idle(run: Run) -> bool:
    load_before = run.runner.get("load_before")
    return isinstance(load_before, int | float) and load_before < IDLE_LOAD


def missing(runs: Sequence[Run]) -> list[str]:
    """Each arm a run lacks (its quota arm, no quota, headroom) and each step one of its arms
    lacks (of the steps any run has), by name."""
    names = step_names(runs)
    gaps = []
    for run in runs:
        for arm in (run.quota_arm, ARM_NONE, ARM_HEADROOM):
            if arm not in run.arms:
                gaps.append(f"{run.name}: no arm {arm!r}")
                continue
            gaps += [f"{run.name}: {arm!r} lacks step {n!r}" for n in names if not run.step(arm, n)]
    return gaps


def step_names(runs: Sequence[Run]) -> list[str]:
    """Every step any run has, in the order runs first give it."""
    names: list[str] = []
    for run in runs:
        for steps in run.arms.values():
            names += [s["name"] for s in steps if s["name"] not in names]
    return names


# Each step's figures ------------------------------------------------------------------------------


def succeeded_s(step: Mapping[str, Any], which: str) -> float | None:
    """The step's p50 or p99 (`which`) Succeeded, seconds from each create request sent."""
    value = step.get("succeeded_after_create_sent_ms", {}).get(which)
    return None if value is None else value / 1000


def admitted_s(step: Mapping[str, Any], which: str) -> float | None:
    """The step's p50 or p99 (`which`) target pod admitted, seconds from each create sent."""
    value = step.get("target_admitted_after_create_sent_ms", {}).get(which)
    return None if value is None else value / 1000


def _ratio(value: float | None, baseline: float | None) -> float | None:
    return None if value is None or baseline is None or baseline <= 0 else value / baseline


def figures(run: Run, arm: str, name: str) -> dict[str, float | None] | None:
    """The step's figures in `arm` of `run` (None if it lacks them), ratios against the same
    run's no-quota step."""
    step = run.step(arm, name)
    if step is None:
        return None
    none = run.step(ARM_NONE, name)
    p50, p99 = succeeded_s(step, "p50"), succeeded_s(step, "p99")
    writes = step.get("writes_per_migration_by_kind", {})
    cpu = step.get("cpu_seconds", {})
    return {
        "done": step["succeeded"] / step["migrations"] if step["migrations"] else None,
        "p50": p50,
        "p99": p99,
        "ratio p50": None if none is None else _ratio(p50, succeeded_s(none, "p50")),
        "ratio p99": None if none is None else _ratio(p99, succeeded_s(none, "p99")),
        "ratio admitted p50": None
        if none is None
        else _ratio(admitted_s(step, "p50"), admitted_s(none, "p50")),
        "conflict events": step.get("conflict_events"),
        "conflicted": step.get("conflicted"),
        "409": step.get("pod_create_409"),
        "stall": sum(step.get("conflict_stall_seconds", [])),
        **{kind: writes.get(kind, 0.0) for kind in WRITE_COLUMNS},
        "requests": sum(step.get("api_requests_per_migration_by_verb", {}).values()),
        "cpu": step.get("controller_cpu_ms_per_migration"),
        **{
            f"cpu {process}": 1000 * cpu[process] / step["migrations"]
            if process in cpu and step["migrations"]
            else None
            for process in PROCESSES
        },
    }


def median(values: Sequence[float | None]) -> float | None:
    """The median of the known values (the mean of the middle two for an even count); None
    when none is known."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def cell(values: Sequence[float | None], digits: int) -> str:
    """``median [each run's value]``, each to `digits` decimals, ``-`` where unknown."""

    def text(value: float | None) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    return f"{text(median(values))} [{', '.join(text(v) for v in values)}]"


# The tables ---------------------------------------------------------------------------------------

FELT: Final = (
    ("done", "done (share)", 2),
    ("p50", "Succeeded p50 s", 2),
    ("p99", "Succeeded p99 s", 2),
    ("ratio p50", "ratio to no quota p50", 2),
    ("ratio p99", "ratio to no quota p99", 2),
    ("ratio admitted p50", "target admitted p50, ratio to no quota", 2),
    ("conflict events", "failed creates on a conflict", 0),
    ("409", "409 pod creates (API server)", 0),
    ("stall", "stall s (sum)", 1),
)
PROCESSES: Final = (
    "controller",
    "webhook",
    "kube-apiserver",
    "etcd",
    "kube-controller-manager",
    "virt-controller",
)
"""The processes whose CPU a scale step measures (report.json's ``cpu_seconds``)."""
PROCESS_CPU: Final = tuple((f"cpu {p}", f"{p} CPU ms/mig", 1) for p in PROCESSES)
COST: Final = (
    *((kind, f"writes/mig {kind}", 2) for kind in WRITE_COLUMNS),
    ("requests", "requests/mig", 2),
    ("cpu", "controller CPU ms/mig", 1),
)


def arm_runs(runs: Sequence[Run], arm: str) -> list[Run]:
    """The runs that give `arm`: every run for the twins, the strategy's runs for a quota arm."""
    if arm in (ARM_NONE, ARM_HEADROOM):
        return list(runs)
    return [r for r in runs if r.quota_arm == arm]


def table(runs: Sequence[Run], columns: Sequence[tuple[str, str, int]]) -> str:
    """Per step and arm (ARM_ORDER, the arms some run has), the median over the arm's runs of
    each column, each run's value in brackets (run order; ``-`` where a run lacks the step)."""
    rows = [
        "| step | arm | runs | " + " | ".join(title for _, title, _ in columns) + " |",
        "|---|---|---:|" + "---|" * len(columns),
    ]
    for name in step_names(runs):
        for arm in ARM_ORDER:
            given = arm_runs(runs, arm)
            per_run = [figures(run, arm, name) for run in given]
            if not any(per_run):
                continue
            cells = [
                cell([None if f is None else f[key] for f in per_run], digits)
                for key, _, digits in columns
            ]
            rows.append(f"| {name} | {arm} | {len(given)} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def hop_p50_s(step: Mapping[str, Any] | None, hop: str) -> float | None:
    """The step's p50 of one hop of a migration's timeline (timeline.HOPS), seconds; None if the
    step lacks it (a report without timelines, or a hop the arm has not)."""
    value = None if step is None else step.get("timeline_ms", {}).get(hop, {}).get("p50")
    return None if value is None else value / 1000


def hops_table(runs: Sequence[Run]) -> str:
    """Per step and hop of a migration's timeline, the p50 in our arm and in the no-quota arm
    (the median over runs [each run's value], ms) and their difference's median: where the
    quota arm waits beyond no quota. Empty if no run has timelines."""
    given = [r for r in runs if r.quota_arm == ARM_OURS]
    rows = [
        f"| step | hop | {ARM_OURS} p50 ms | {ARM_NONE} p50 ms | {ARM_OURS} - {ARM_NONE} ms |",
        "|---|---|---|---|---|",
    ]
    for name in step_names(given):
        for hop, _, _ in HOPS:
            ours_s = [hop_p50_s(run.step(ARM_OURS, name), hop) for run in given]
            none_s = [hop_p50_s(run.step(ARM_NONE, name), hop) for run in given]
            if not any(v is not None for v in (*ours_s, *none_s)):
                continue
            excess = [
                None if o is None or n is None else o - n
                for o, n in zip(ours_s, none_s, strict=True)
            ]
            cells = [cell([_ms(v) for v in values], 0) for values in (ours_s, none_s, excess)]
            rows.append(f"| {name} | {hop} | " + " | ".join(cells) + " |")
    return "\n".join(rows) if len(rows) > 2 else ""


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else 1000 * seconds


def runs_table(runs: Sequence[Run]) -> str:
    """The runs in order: strategy, commit, and what the runner logged of each."""
    rows = [
        "| run | strategy | commit | started | load before / after | exit code |",
        "|---|---|---|---|---|---:|",
    ]
    for run in runs:
        log = run.runner
        commit = (run.commit or "-")[:12] + (
            "+dirty" if (run.commit or "").endswith("+dirty") else ""
        )
        rows.append(
            f"| {run.name} | {run.strategy} | {commit} | {log.get('started', '-')} "
            f"| {log.get('load_before', '-')} / {log.get('load_after', '-')} "
            f"| {log.get('exit_code', '-')} |"
        )
    return "\n".join(rows)


QUOTA_KINDS: Final = ("spec", "status", "label", "rancher")
"""The writes of a quota or its namespace; the rest (VMI, VM) are Harvester's annotations."""


def totals_table(runs: Sequence[Run]) -> str:
    """Per arm, over every step of the arm's runs: failed creates on a conflict and writes per
    migration (totals over migrations, not medians): the closing note's before and after."""
    rows = [
        "| arm | runs | migrations | failed creates on a conflict /mig | conflicted migrations "
        "| quota writes/mig (spec + status + label + rancher) | VMI + VM writes/mig |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for arm in ARM_ORDER:
        given = arm_runs(runs, arm)
        steps = [s for run in given for s in run.arms.get(arm, ())]
        if not steps:
            continue
        migrations = sum(s["migrations"] for s in steps)
        events = sum(s.get("conflict_events", 0) for s in steps)
        conflicted = sum(s.get("conflicted", 0) for s in steps)
        rows.append(
            f"| {arm} | {len(given)} | {migrations} | {_per(events, migrations):.4f} "
            f"| {conflicted} | {_writes(steps, QUOTA_KINDS, migrations):.2f} "
            f"| {_writes(steps, ('vmi', 'vm'), migrations):.2f} |"
        )
    return "\n".join(rows)


def _per(count: float, migrations: int) -> float:
    return count / migrations if migrations else 0.0


def _writes(steps: Iterable[Mapping[str, Any]], kinds: Sequence[str], migrations: int) -> float:
    """Writes of `kinds` per migration over `steps` (each step's per-migration figure weighed
    by its migrations)."""
    total = sum(
        s["migrations"] * s.get("writes_per_migration_by_kind", {}).get(kind, 0.0)
        for s in steps
        for kind in kinds
    )
    return _per(total, migrations)


# The verdicts -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """One of issue 40's "done when" conditions: met or not, and the figures that say so."""

    name: str
    met: bool
    lines: list[str]

    def markdown(self) -> str:
        state = "**met**" if self.met else "**not met**"
        return "\n".join([f"- {self.name}: {state}", *(f"  - {line}" for line in self.lines)])


def ours(runs: Sequence[Run]) -> list[Run]:
    return [r for r in runs if r.strategy == "ours"]


def failed_on_conflict(step: Mapping[str, Any]) -> float | None:
    """The step's target pod creates that failed on a conflict: virt-controller's FailedCreate
    events (a lower bound: the API server's event recorder drops repeats), or the API server's
    409 pod creates over the step if more (arms' steps never overlap); None without either."""
    counts = [step.get("conflict_events"), step.get("pod_create_409")]
    known = [c for c in counts if c is not None]
    return max(known) if known else None


def conflicts_verdict(runs: Sequence[Run]) -> Verdict:
    """(a) Per step, our arm's failed creates on a conflict (`failed_on_conflict`) summed over
    our runs, at most the headroom arm's summed over the same runs."""
    lines, met = [], True
    for name in step_names(runs):
        counts: dict[str, list[float]] = {ARM_OURS: [], ARM_HEADROOM: []}
        gaps = []
        for run in ours(runs):
            for arm, found in counts.items():
                step = run.step(arm, name)
                count = None if step is None else failed_on_conflict(step)
                if count is None:
                    gaps.append(f"{run.name} ({arm!r})")
                else:
                    found.append(count)
        if gaps:
            met = False
            lines.append(f"{name}: incomplete, no count in {', '.join(gaps)}")
            continue
        mine, theirs = sum(counts[ARM_OURS]), sum(counts[ARM_HEADROOM])
        met = met and mine <= theirs
        lines.append(
            f"{name}: ours {mine:.0f} {_counts(counts[ARM_OURS])} vs headroom {theirs:.0f} "
            f"{_counts(counts[ARM_HEADROOM])} over {len(counts[ARM_OURS])} runs: "
            + ("ok" if mine <= theirs else "MORE")
        )
    return Verdict("(a) no target pod create fails on a conflict of our making", met, lines)


def _counts(values: Sequence[float]) -> str:
    return "[" + ", ".join(f"{v:.0f}" for v in values) + "]"


@dataclass(frozen=True)
class ExtraWait:
    """How much longer one conflicted migration of ours waited than its no-quota twin because
    of the conflict, and how that was known."""

    run: str
    step: str
    key: str
    seconds: float
    how: str


def extra_waits(run: Run, name: str) -> list[ExtraWait] | None:
    """Per conflicted migration of our arm in step `name` of `run`, its extra wait over its
    no-quota twin that the conflict explains: its Succeeded later than the twin's, bounded by
    its stall; the whole stall where either has no Succeeded time; without end (math.inf) for
    one still waiting when the step ended. From a report without per-migration times, the
    longest stall (an upper bound, said so). None if the run lacks either step."""
    step, twin = run.step(ARM_OURS, name), run.step(ARM_NONE, name)
    if step is None or twin is None:
        return None
    if "migrations_by_twin" not in step:
        return _step_wide_wait(run, name, step)
    twins = twin.get("migrations_by_twin", {})
    waits = []
    for key, times in step["migrations_by_twin"].items():
        if "conflict_stall_s" not in times:
            continue  # no create of it failed on a conflict
        stall, mine = times["conflict_stall_s"], times.get("succeeded_s")
        theirs = twins.get(key, {}).get("succeeded_s")
        if stall is None:
            waits.append(ExtraWait(run.name, name, key, math.inf, STILL_WAITING))
        elif mine is None or theirs is None:
            waits.append(ExtraWait(run.name, name, key, stall, "the stall (no Succeeded pair)"))
        else:
            extra = min(max(mine - theirs, 0.0), stall)
            how = f"Succeeded {mine:.2f} s vs twin {theirs:.2f} s, stall {stall:.2f} s"
            waits.append(ExtraWait(run.name, name, key, extra, how))
    return waits


STILL_WAITING: Final = "no target pod when the step ended"


def _step_wide_wait(run: Run, name: str, step: Mapping[str, Any]) -> list[ExtraWait]:
    """A report from before ``migrations_by_twin``: its longest stall, or no end if a conflicted
    migration has none (it still waited)."""
    stalls = step.get("conflict_stall_seconds", [])
    if step.get("conflicted", 0) > len(stalls):
        return [ExtraWait(run.name, name, "?", math.inf, STILL_WAITING)]
    how = "the stall (report without per-migration times: an upper bound)"
    return [ExtraWait(run.name, name, "?", max(stalls), how)] if stalls else []


def wait_verdict(runs: Sequence[Run]) -> Verdict:
    """(b) No conflicted migration of ours waits more than ONE_SECOND longer than its no-quota
    twin because of the conflict."""
    waits: list[ExtraWait] = []
    gaps = []
    for run in ours(runs):
        for name in step_names(runs):
            found = extra_waits(run, name)
            if found is None:
                gaps.append(f"{run.name} ({name!r})")
            else:
                waits += found
    lines = (
        [f"incomplete: no {ARM_OURS!r} or {ARM_NONE!r} step in {', '.join(gaps)}"] if gaps else []
    )
    worst = max(waits, key=lambda w: w.seconds, default=None)
    if worst is None:
        lines.append("no migration of ours failed a create on a conflict: 0 s")
    else:
        lines.append(
            f"{len(waits)} conflicted migrations of ours; the longest extra wait "
            f"{worst.seconds:.2f} s ({worst.run}, {worst.step}, {worst.key}: {worst.how}), "
            f"limit {ONE_SECOND:.0f} s"
        )
    met = not gaps and (worst is None or worst.seconds <= ONE_SECOND)
    return Verdict("(b) no migration waits over a second longer because of one", met, lines)


def drain_steps(runs: Sequence[Run]) -> list[str]:
    """The steps that are drain waves (over many namespaces: namespace_size 0)."""
    return [
        name
        for name in step_names(runs)
        if any(
            (s := run.step(arm, name)) is not None and s.get("namespace_size") == 0
            for run in runs
            for arm in run.arms
        )
    ]


def drain_verdict(runs: Sequence[Run]) -> Verdict:
    """(c) Per drain wave, the median over our runs of our p99 Succeeded over the same run's
    no-quota p99, at most DRAIN_P99_RATIO."""
    names = drain_steps(runs)
    lines, met = [], bool(names)
    if not names:
        lines.append("no drain wave in the runs")
    for name in names:
        ratios = [
            None if (f := figures(run, ARM_OURS, name)) is None else f["ratio p99"]
            for run in ours(runs)
        ]
        middle = median(ratios)
        if None in ratios or middle is None:
            met = False
            lines.append(f"{name}: incomplete, a run has no ratio: {cell(ratios, 2)}")
            continue
        met = met and middle <= DRAIN_P99_RATIO
        verdict = "ok" if middle <= DRAIN_P99_RATIO else "OVER"
        lines.append(f"{name}: p99 ratio {cell(ratios, 2)} vs {DRAIN_P99_RATIO:.2f}: {verdict}")
    return Verdict("(c) the drain's p99 Succeeded within 1.10x of no quota", met, lines)


def verdicts(runs: Sequence[Run]) -> list[Verdict]:
    return [conflicts_verdict(runs), wait_verdict(runs), drain_verdict(runs)]


DRAIN_RATIO_55: Final = 1.10
"""Issue 55: the drain's median and p99 Succeeded within 1.10x of no quota (median of runs)."""
ADMITTED_RATIO_55: Final = 1.2
"""Issue 55: the target-admitted p50 within 1.2x of no quota (median of runs)."""
CPU_MS_55: Final = 20.0
"""Issue 55: the controller's CPU at or under 20 ms a migration (median of runs)."""


def _bounded(
    runs: Sequence[Run], names: Sequence[str], key: str, bound: float, digits: int
) -> tuple[bool, list[str]]:
    """Per step of `names`, the median over our runs of figure `key` at most `bound`."""
    met, lines = bool(names), []
    for name in names:
        values = [
            None if (f := figures(run, ARM_OURS, name)) is None else f[key] for run in ours(runs)
        ]
        middle = median(values)
        ok = middle is not None and None not in values and middle <= bound
        met = met and ok
        lines.append(f"{name}: {key} {cell(values, digits)} vs {bound:g}: {'ok' if ok else 'OVER'}")
    return met, lines


def issue55_verdicts(runs: Sequence[Run]) -> list[Verdict]:
    """Issue 55's "done when", each on the median over our runs: (d) per drain wave, our median
    and p99 Succeeded over the same run's no quota; (e) per step, our target-admitted p50 over
    no quota's; (f) per step, the controller's CPU a migration."""
    drains, steps = drain_steps(runs), step_names(runs)
    p50_met, p50_lines = _bounded(runs, drains, "ratio p50", DRAIN_RATIO_55, 2)
    p99_met, p99_lines = _bounded(runs, drains, "ratio p99", DRAIN_RATIO_55, 2)
    admitted = _bounded(runs, steps, "ratio admitted p50", ADMITTED_RATIO_55, 2)
    cpu = _bounded(runs, steps, "cpu", CPU_MS_55, 1)
    return [
        Verdict(
            "(d) the drain's median and p99 Succeeded within 1.10x of no quota",
            p50_met and p99_met,
            p50_lines + p99_lines,
        ),
        Verdict("(e) the target-admitted p50 within 1.2x of no quota", *admitted),
        Verdict("(f) the controller's CPU at or under 20 ms a migration", *cpu),
    ]


# The report ---------------------------------------------------------------------------------------


def render(runs: Sequence[Run]) -> str:
    """The Markdown for bench/SCALE.md: notes, the runs, the two tables and the verdicts."""
    judged = verdicts(runs)
    notes = [*warnings(runs), *missing(runs)]
    return "\n".join(
        [
            f"{len(ours(runs))} runs of ours, {len(runs) - len(ours(runs))} of Harvester's "
            f"(commit {runs[0].commit or 'unknown'}; `{command_shape(runs[0].command)}`).",
            "",
            *([*(f"- {n}" for n in notes), ""] if notes else []),
            runs_table(runs),
            "",
            "What users feel and what conflicted, per step and arm: the median over the arm's "
            "runs [each run's value]; ratios against the same run's no-quota step:",
            "",
            table(runs, FELT),
            "",
            "What each migration cost, per step and arm (the quota arm's controller; the twins' "
            "VMI and VM writes are Harvester's or ours as in each run):",
            "",
            table(runs, COST),
            "",
            "CPU a migration by process, per step and arm (each process's CPU over the step, "
            "the cluster's background included, over the step's migrations):",
            "",
            table(runs, PROCESS_CPU),
            "",
            *_hops_section(runs),
            "Per migration over every step, totals of the arm's runs (the closing note's figures):",
            "",
            totals_table(runs),
            "",
            'Issue 40\'s "done when":',
            "",
            *(v.markdown() for v in judged),
            "",
            'Issue 55\'s "done when" (not in the exit code):',
            "",
            *(v.markdown() for v in issue55_verdicts(runs)),
            "",
        ]
    )


def _hops_section(runs: Sequence[Run]) -> list[str]:
    rendered = hops_table(runs)
    if not rendered:
        return []
    return [
        "A migration's timeline per step and hop (scale/timeline.py), our arm against no quota:",
        "",
        rendered,
        "",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scaleruns", description=__doc__)
    parser.add_argument("dirs", nargs="+", help="scale runs' --report directories (or globs)")
    args = parser.parse_args(argv)
    try:
        runs = [load(d) for d in directories(args.dirs)]
    except ValueError as error:
        print(f"bench.scaleruns: {error}", file=sys.stderr)
        return 2
    refused = refusals(runs)
    if refused:
        print("bench.scaleruns: not one comparison:", *refused, sep="\n  ", file=sys.stderr)
        return 2
    print(render(runs))
    return 0 if all(v.met for v in verdicts(runs)) else 1


if __name__ == "__main__":
    sys.exit(main())
