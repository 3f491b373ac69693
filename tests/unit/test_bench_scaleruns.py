"""bench/scaleruns.py: many scale runs read together, and issue 40's three "done when" verdicts,
on synthetic report.json contents shaped like a real one (scale_report.json: one step of a small
run, trimmed)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from harvester_quota.testbench.scale.stats import ARM_HARVESTER, ARM_HEADROOM, ARM_NONE, ARM_OURS

from bench import scaleruns
from bench.scaleruns import Run, load, median, missing, refusals, render, verdicts

REAL = json.loads(Path(__file__).with_name("scale_report.json").read_text())
SPOT, DRAIN = "60 VMs/ns", "drain wave 1"
SIZES = {SPOT: 60, DRAIN: 0}


def step(
    name: str,
    *,
    p99: float = 10.0,
    events: int = 0,
    stalls: tuple[float, ...] = (),
    twins: dict[str, dict[str, float | None]] | None = None,
) -> dict[str, Any]:
    """The real step, renamed, with the figures a test sets (seconds)."""
    data = copy.deepcopy(REAL["steps"][0])
    data.update(
        name=name,
        namespace_size=SIZES[name],
        conflict_events=events,
        conflicted=len(stalls),
        conflict_stall_seconds=list(stalls),
        succeeded_after_create_sent_ms={"p50": 500 * p99, "p99": 1000 * p99, "max": 1000 * p99},
    )
    data.pop("migrations_by_twin", None)
    if twins is not None:
        data["migrations_by_twin"] = twins
    return data


def arm(**figures: Any) -> list[dict[str, Any]]:
    """Both steps of an arm, the drain wave's with `figures`."""
    return [step(SPOT), step(DRAIN, **figures)]


def write_run(
    root: Path,
    name: str,
    *,
    quota: list[dict[str, Any]] | None = None,
    none: list[dict[str, Any]] | None = None,
    headroom: list[dict[str, Any]] | None = None,
    strategy: str = "ours",
    commit: str | None = "0123abcd",
    options: str = "--size small --waves 2",
    runner: dict[str, Any] | None = None,
) -> Path:
    directory = root / name
    directory.mkdir(parents=True)
    data = copy.deepcopy(REAL)
    data.update(
        commit=commit,
        strategy=strategy,
        command=f"harvester-quota scale {options} --keep --state-dir /s --report {directory}"
        + (" --strategy harvester" if strategy == "harvester" else ""),
        steps=arm() if quota is None else quota,
        baseline_steps=arm() if none is None else none,
        headroom_steps=arm() if headroom is None else headroom,
    )
    (directory / "report.json").write_text(json.dumps(data))
    if runner is not None:
        (directory / "runner.json").write_text(json.dumps(runner))
    return directory


def runs(*directories: Path) -> list[Run]:
    return [load(d) for d in directories]


def by_name(judged: list[scaleruns.Verdict]) -> dict[str, scaleruns.Verdict]:
    return {v.name[:3]: v for v in judged}


def test_ours_pass_the_conflict_verdict_with_no_more_failed_creates_than_headroom_over_runs(
    tmp_path: Path,
) -> None:
    even = runs(
        write_run(tmp_path, "1", quota=arm(events=1), headroom=arm(events=0)),
        write_run(tmp_path, "2", quota=arm(events=0), headroom=arm(events=1)),
    )
    verdict = by_name(verdicts(even))["(a)"]
    assert verdict.met, "summed over the runs: 1 against 1"
    assert f"{DRAIN}: ours 1 [1, 0] vs headroom 1 [0, 1] over 2 runs: ok" in verdict.lines
    more = runs(
        write_run(tmp_path, "3", quota=arm(events=2), headroom=arm(events=1)),
        write_run(tmp_path, "4"),
    )
    verdict = by_name(verdicts(more))["(a)"]
    assert not verdict.met
    assert f"{DRAIN}: ours 2 [2, 0] vs headroom 1 [1, 0] over 2 runs: MORE" in verdict.lines


def test_the_conflict_verdict_counts_the_api_server_s_409s_where_events_were_dropped(
    tmp_path: Path,
) -> None:
    dropped = arm(events=1)
    dropped[1]["pod_create_409"] = 4.0  # the event recorder dropped repeats
    headroom = arm(events=2)
    headroom[1]["pod_create_409"] = None  # not scraped: the events stand
    verdict = by_name(verdicts(runs(write_run(tmp_path, "1", quota=dropped, headroom=headroom))))
    assert not verdict["(a)"].met
    assert f"{DRAIN}: ours 4 [4] vs headroom 2 [2] over 1 runs: MORE" in verdict["(a)"].lines


def test_the_conflict_verdict_compares_with_our_runs_headroom_not_harvester_runs(
    tmp_path: Path,
) -> None:
    mixed = runs(
        write_run(tmp_path, "h", strategy="harvester", headroom=arm(events=5)),
        write_run(tmp_path, "o", quota=arm(events=1)),
    )
    assert not by_name(verdicts(mixed))["(a)"].met, "a Harvester run's headroom excuses nothing"


def conflicted(succeeded: float | None, stall: float | None) -> dict[str, float | None]:
    return {"succeeded_s": succeeded, "conflict_stall_s": stall}


def test_a_conflicted_migration_waits_too_long_only_by_what_its_twin_did_not_and_its_stall(
    tmp_path: Path,
) -> None:
    twins = {"000/vm-1": {"succeeded_s": 19.5}, "001/vm-1": {"succeeded_s": 10.0}}
    close = write_run(
        tmp_path,
        "close",
        quota=arm(
            events=2,
            stalls=(5.0,),
            twins={
                "000/vm-1": conflicted(20.0, 5.0),  # 0.5 s beyond its twin: within a second
                "001/vm-1": {"succeeded_s": 40.0},  # 30 s beyond, but no conflict of it
            },
        ),
        none=arm(twins=twins),
    )
    verdict = by_name(verdicts(runs(close)))["(b)"]
    assert verdict.met, verdict.lines
    assert "the longest extra wait 0.50 s" in verdict.lines[-1]
    late = write_run(
        tmp_path,
        "late",
        quota=arm(events=1, stalls=(3.0,), twins={"000/vm-1": conflicted(20.0, 3.0)}),
        none=arm(twins={"000/vm-1": {"succeeded_s": 12.0}}),
    )
    verdict = by_name(verdicts(runs(close, late)))["(b)"]
    assert not verdict.met
    assert "the longest extra wait 3.00 s" in verdict.lines[-1], "8 s later, 3 s of it the stall"
    assert "000/vm-1" in verdict.lines[-1]


def test_a_conflicted_migration_without_a_succeeded_pair_counts_its_whole_stall(
    tmp_path: Path,
) -> None:
    failed = write_run(
        tmp_path,
        "failed",
        quota=arm(events=1, stalls=(1.5,), twins={"000/vm-1": conflicted(None, 1.5)}),
        none=arm(twins={"000/vm-1": {"succeeded_s": 12.0}}),
    )
    verdict = by_name(verdicts(runs(failed)))["(b)"]
    assert not verdict.met
    assert "1.50 s" in verdict.lines[-1]
    assert "no Succeeded pair" in verdict.lines[-1]


def test_a_conflicted_migration_still_waiting_when_the_step_ended_fails_the_wait_verdict(
    tmp_path: Path,
) -> None:
    stuck = write_run(
        tmp_path,
        "stuck",
        quota=arm(events=3, twins={"000/vm-1": conflicted(None, None)}),
        none=arm(twins={"000/vm-1": {"succeeded_s": 12.0}}),
    )
    verdict = by_name(verdicts(runs(stuck)))["(b)"]
    assert not verdict.met
    assert "inf s" in verdict.lines[-1] and scaleruns.STILL_WAITING in verdict.lines[-1]
    old = step(DRAIN, events=2, stalls=(0.5,))
    old["conflicted"] = 2  # one of the two had no stall yet: the old report left it out
    verdict = by_name(verdicts(runs(write_run(tmp_path, "old", quota=[step(SPOT), old]))))["(b)"]
    assert not verdict.met and scaleruns.STILL_WAITING in verdict.lines[-1]


def test_a_report_without_per_migration_times_takes_the_longest_stall_as_an_upper_bound(
    tmp_path: Path,
) -> None:
    old = write_run(tmp_path, "old", quota=arm(events=2, stalls=(0.4, 2.5)))
    verdict = by_name(verdicts(runs(old)))["(b)"]
    assert not verdict.met
    assert "2.50 s" in verdict.lines[-1] and "upper bound" in verdict.lines[-1]
    quiet = write_run(tmp_path, "quiet")
    assert by_name(verdicts(runs(quiet)))["(b)"].met, "no conflict: nothing to wait for"


def test_the_drain_verdict_is_the_median_over_runs_of_each_run_s_own_p99_ratio(
    tmp_path: Path,
) -> None:
    def pair(name: str, p99: float) -> Path:
        # The namespace step is far over 1.10 in every run: only drain waves are judged.
        return write_run(
            tmp_path,
            name,
            quota=[step(SPOT, p99=30.0), step(DRAIN, p99=p99)],
            none=[step(SPOT, p99=10.0), step(DRAIN, p99=10.0)],
        )

    within = by_name(verdicts(runs(pair("a", 10.0), pair("b", 12.0))))["(c)"]
    assert within.met, "the median of 1.00 and 1.20 is 1.10"
    assert within.lines == [f"{DRAIN}: p99 ratio 1.10 [1.00, 1.20] vs 1.10: ok"]
    over = by_name(verdicts(runs(pair("c", 10.0), pair("d", 13.0))))["(c)"]
    assert not over.met
    assert over.lines == [f"{DRAIN}: p99 ratio 1.15 [1.00, 1.30] vs 1.10: OVER"]


def test_issue_55_judges_the_drain_median_and_p99_admission_and_cpu_on_medians_over_runs(
    tmp_path: Path,
) -> None:
    def run(name: str, *, p99: float, admitted_ms: float, cpu: float) -> Path:
        quota = [step(SPOT, p99=10.0), step(DRAIN, p99=p99)]
        for data in quota:
            data["target_admitted_after_create_sent_ms"] = {"p50": admitted_ms, "p99": 1.0}
            data["controller_cpu_ms_per_migration"] = cpu
        none = [step(SPOT, p99=10.0), step(DRAIN, p99=10.0)]
        for data in none:
            data["target_admitted_after_create_sent_ms"] = {"p50": 1000.0, "p99": 1.0}
        return write_run(tmp_path, name, quota=quota, none=none)

    within = scaleruns.issue55_verdicts(
        runs(
            run("a", p99=10.0, admitted_ms=1000, cpu=18.0),
            run("b", p99=12.0, admitted_ms=1400, cpu=22.0),
        )
    )
    assert [v.met for v in within] == [True, True, True], "medians 1.10, 1.20 and 20 ms"
    over = scaleruns.issue55_verdicts(
        runs(
            run("c", p99=11.0, admitted_ms=1300, cpu=21.0),
            run("d", p99=11.4, admitted_ms=1300, cpu=20.0),
        )
    )
    assert [v.met for v in over] == [False, False, False]
    drain, admitted, cpu = (v.lines for v in over)
    assert drain == [
        f"{DRAIN}: ratio p50 1.12 [1.10, 1.14] vs 1.1: OVER",
        f"{DRAIN}: ratio p99 1.12 [1.10, 1.14] vs 1.1: OVER",
    ], "the median migration is judged as well as the p99"
    assert admitted[0] == f"{SPOT}: ratio admitted p50 1.30 [1.30, 1.30] vs 1.2: OVER"
    assert cpu[1] == f"{DRAIN}: cpu 20.5 [21.0, 20.0] vs 20: OVER"


def test_the_process_table_gives_each_process_s_cpu_a_migration(tmp_path: Path) -> None:
    text = render(runs(write_run(tmp_path, "a")))
    seconds = REAL["steps"][0]["cpu_seconds"]["kube-apiserver"]
    per_migration = 1000 * seconds / REAL["steps"][0]["migrations"]
    assert f"{per_migration:.1f} [{per_migration:.1f}]" in text
    assert "kube-apiserver CPU ms/mig" in text


def test_the_median_of_an_even_count_is_the_mean_of_the_middle_two() -> None:
    assert median([10.0, 1.0, 3.0, 2.0]) == 2.5
    assert median([None, 4.0, None, 2.0]) == 3.0, "unknown values are left out"
    assert median([None]) is None
    assert scaleruns.cell([1.0, None, 2.0], 2) == "1.50 [1.00, -, 2.00]"


def test_a_run_missing_an_arm_or_a_step_is_named_and_its_verdicts_are_incomplete(
    tmp_path: Path,
) -> None:
    whole = write_run(tmp_path, "whole")
    no_headroom = write_run(tmp_path, "no-headroom", headroom=[])
    short = write_run(tmp_path, "short", quota=[step(SPOT)])
    chosen = runs(whole, no_headroom, short)
    assert missing(chosen) == [
        f"{no_headroom}: no arm {ARM_HEADROOM!r}",
        f"{short}: {ARM_OURS!r} lacks step {DRAIN!r}",
    ]
    judged = by_name(verdicts(chosen))
    assert not any(v.met for v in judged.values())
    assert f"incomplete, no count in {no_headroom} ({ARM_HEADROOM!r})" in "".join(
        judged["(a)"].lines
    )
    assert f"{short} ({DRAIN!r})" in judged["(b)"].lines[0]
    assert judged["(c)"].lines == [f"{DRAIN}: incomplete, a run has no ratio: 1.00 [1.00, 1.00, -]"]
    assert f"- {no_headroom}: no arm {ARM_HEADROOM!r}" in render(chosen)


def test_runs_of_other_commits_commands_or_plans_are_refused_and_run_own_options_are_not(
    tmp_path: Path,
) -> None:
    one = write_run(tmp_path, "one")
    harvester = write_run(
        tmp_path,
        "harvester",
        strategy="harvester",
        options="--size small --waves 2 --step-timeout 90 --arm-offset 1",
    )
    assert refusals(runs(one, harvester)) == [], (
        "report, state dir, strategy, step timeout and the arms' rotation differ"
    )
    other_commit = write_run(tmp_path, "other-commit", commit="fedcba98")
    unknown = write_run(tmp_path, "unknown", commit=None)
    bigger = write_run(tmp_path, "bigger", options="--size small --waves 3")
    (refused,) = refusals(runs(one, other_commit, unknown))
    assert refused.startswith("the runs differ in commit")
    assert all(str(d) in refused for d in (one, other_commit, unknown))
    assert refusals(runs(one, bigger)) == [
        "the runs differ in command: 'harvester-quota scale --size small --waves 2': "
        f"{one}; 'harvester-quota scale --size small --waves 3': {bigger}"
    ]
    assert refusals(runs(harvester)) == ["no run of ours (every run is --strategy harvester)"]
    assert scaleruns.main([str(one), str(other_commit)]) == 2


def test_the_tables_give_each_arm_its_own_runs_median_and_every_run_s_value(
    tmp_path: Path,
) -> None:
    chosen = runs(
        write_run(tmp_path, "1-harvester", strategy="harvester", quota=arm(p99=30.0)),
        write_run(tmp_path, "1-ours", quota=arm(p99=11.0)),
        write_run(tmp_path, "2-ours", quota=arm(p99=12.0)),
    )
    text = scaleruns.table(chosen, scaleruns.FELT)
    rows = {tuple(r.split(" | ")[:3]): r for r in text.splitlines()[2:]}
    assert set(rows) == {
        (f"| {name}", arm_name, count)
        for name in (SPOT, DRAIN)
        for arm_name, count in (
            (ARM_NONE, "3"),
            (ARM_HEADROOM, "3"),
            (ARM_OURS, "2"),
            (ARM_HARVESTER, "1"),
        )
    }
    drain_ours = rows[(f"| {DRAIN}", ARM_OURS, "2")]
    assert "| 11.50 [11.00, 12.00] | 1.15 [1.10, 1.20] |" in drain_ours, "p99, then its ratio"
    assert "| 3.00 [3.00] |" in rows[(f"| {DRAIN}", ARM_HARVESTER, "1")], "ratio of its run"


def test_the_hops_table_gives_each_hop_s_p50_in_both_arms_and_their_difference(
    tmp_path: Path,
) -> None:
    def timed(ms: float) -> list[dict[str, Any]]:
        steps = arm()
        steps[1]["timeline_ms"] = {"accepted try → admitted": {"p50": ms, "p99": ms, "max": ms}}
        return steps

    chosen = runs(
        write_run(tmp_path, "1-ours", quota=timed(300), none=timed(20)),
        write_run(tmp_path, "2-ours", quota=timed(100), none=timed(40)),
        write_run(tmp_path, "3-harvester", strategy="harvester", quota=timed(900)),
    )

    rows = scaleruns.hops_table(chosen).splitlines()[2:]

    assert rows == [
        f"| {DRAIN} | accepted try → admitted | 200 [300, 100] | 30 [20, 40] | 170 [280, 60] |"
    ]
    assert scaleruns.hops_table(runs(write_run(tmp_path, "4-ours"))) == ""


def test_the_totals_give_conflicts_and_writes_per_migration_over_every_step(
    tmp_path: Path,
) -> None:
    writes = {"spec": 1.0, "status": 0.5, "vmi": 3.0}
    drain = step(DRAIN, events=10)
    drain["writes_per_migration_by_kind"] = writes
    chosen = runs(write_run(tmp_path, "1", quota=[step(SPOT), drain]))
    migrations = REAL["steps"][0]["migrations"]
    ours_row = next(
        r for r in scaleruns.totals_table(chosen).splitlines() if f"| {ARM_OURS} |" in r
    )
    spot_writes = REAL["steps"][0]["writes_per_migration_by_kind"]
    quota = (1.5 + sum(spot_writes.get(k, 0.0) for k in scaleruns.QUOTA_KINDS)) / 2
    assert ours_row.startswith(f"| {ARM_OURS} | 1 | {2 * migrations} | {10 / (2 * migrations):.4f}")
    assert f"| {quota:.2f} |" in ours_row


def test_the_command_line_expands_globs_prints_the_verdicts_and_exits_by_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    idle = {
        "load_before": 0.4,
        "load_after": 1.9,
        "started": "2026-11-28T01:00:00Z",
        "exit_code": 1,
    }
    write_run(tmp_path, "1-ours", runner=idle)
    write_run(tmp_path, "2-ours", runner={**idle, "load_before": 2.5})
    (tmp_path / "1-ours.log").write_text("a runner's log beside the runs is no run\n")
    assert scaleruns.main([f"{tmp_path}/*-ours*"]) == 0
    out = capsys.readouterr().out
    assert out.count("**met**") == 5, "issue 40's three, and issue 55's (d) and (e)"
    assert "- (f) the controller's CPU at or under 20 ms a migration: **not met**" in out, (
        "the real step's 32.8 ms a migration; issue 55's verdicts leave the exit code alone"
    )
    assert (
        f"| {tmp_path / '1-ours'} | ours | 0123abcd | 2026-11-28T01:00:00Z | 0.4 / 1.9 | 1 |" in out
    )
    assert f"not known idle (load >= 1.0 or not logged): {tmp_path / '2-ours'}" in out
    assert "2 runs of ours; issue 40's verdict is on 10" in out
    write_run(tmp_path, "3-ours", quota=arm(events=1))
    assert scaleruns.main([f"{tmp_path}/*-ours"]) == 1
    assert scaleruns.main([str(tmp_path / "nothing-*")]) == 2


def test_a_directory_without_a_scale_report_is_named_in_the_error(tmp_path: Path) -> None:
    (tmp_path / "report.json").write_text('{"scenario": "not a scale run"}')
    with pytest.raises(ValueError, match=f"{tmp_path}/report.json: not a scale run's report"):
        load(tmp_path)
