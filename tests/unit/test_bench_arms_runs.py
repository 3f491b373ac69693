"""bench/arms_runs.py: issue 40's runs in order on one kept cluster, each after a bounded wait
for an idle machine, logged, then the cluster down and scaleruns' verdicts (no run is made:
the runner is a stand-in that writes a report.json where a scale run would)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from harvester_quota.testbench.clock import FakeClock

from bench import arms_runs
from bench.arms_runs import HARVESTER, OURS, ArmsRuns, Options, order, wait_idle

REAL_REPORT = Path(__file__).with_name("scale_report.json")


def test_harvester_runs_go_first_and_spread_evenly_between_ours() -> None:
    assert order(10, 5) == [HARVESTER, OURS, OURS] * 5
    assert order(2, 3) == [HARVESTER, HARVESTER, OURS, HARVESTER, OURS]
    assert order(1, 0) == [OURS]
    assert order(0, 2) == [HARVESTER, HARVESTER]
    for ours, harvester in ((10, 5), (3, 7), (7, 3)):
        sequence = order(ours, harvester)
        assert (sequence.count(OURS), sequence.count(HARVESTER)) == (ours, harvester)
    with pytest.raises(ValueError, match="no runs"):
        order(0, 0)


async def test_a_run_waits_for_the_load_to_fall_under_the_threshold_polling() -> None:
    clock = FakeClock()
    loads = iter([3.0, 1.5, 0.7])
    waiting = asyncio.ensure_future(
        wait_idle(lambda: next(loads), clock, threshold=1.0, bound=600, poll=15)
    )
    await clock.advance(29)
    assert not waiting.done(), "two polls: 3.0, then 1.5"
    await clock.advance(1)
    assert waiting.done()
    result = waiting.result()
    assert (result.load, result.waited, result.idle) == (0.7, 30.0, True)


async def test_the_wait_for_an_idle_machine_is_bounded_and_says_it_was_not_idle() -> None:
    clock = FakeClock()
    waiting = asyncio.ensure_future(wait_idle(lambda: 4.0, clock, bound=40, poll=15))
    await clock.advance(40)
    assert waiting.done(), "no wait past its bound"
    result = waiting.result()
    assert (result.load, result.waited, result.idle) == (4.0, 40.0, False)


async def test_the_runs_share_one_kept_cluster_each_logs_its_load_and_commit_then_it_goes_down(
    tmp_path: Path,
) -> None:
    commands: list[list[str]] = []
    loads = iter([0.5, 0.9, 2.0, 2.0, 1.2])  # before 1, after 1, before 2 (twice), after 2

    def runner(command: list[str], log: Path) -> int:
        commands.append(command)
        if "--report" in command:
            report = Path(command[command.index("--report") + 1])
            report.mkdir(parents=True)
            (report / "report.json").write_text(REAL_REPORT.read_text())
        log.write_text("scale output\n")
        return 0

    options = Options(
        reports=tmp_path / "reports",
        state_dir=tmp_path / "state",
        idle_wait=10,
        scale_args=("--no-cpu-accounting",),
    )
    clock = FakeClock()
    runs = ArmsRuns(
        options, runner=runner, load=lambda: next(loads), clock=clock, commit=lambda: "abc"
    )
    task = asyncio.ensure_future(runs.run([HARVESTER, OURS]))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30  # real seconds: each command runs in a thread
    while not task.done() and loop.time() < deadline:
        await clock.advance(5)
        await asyncio.sleep(0.01)  # lets the runner's thread finish its files
    assert task.done(), "every wait for an idle machine is bounded"
    made = task.result()
    assert made == [options.reports / "01-harvester", options.reports / "02-ours"]
    harvester, ours, down = commands
    for command, report in ((harvester, made[0]), (ours, made[1])):
        assert command[command.index("--state-dir") + 1] == str(options.state_dir)
        assert command[command.index("--report") + 1] == str(report)
        assert "--keep" in command and command[-1] == "--no-cpu-accounting"
        assert command[command.index("--size") + 1 : command.index("--size") + 4] == [
            "small",
            "--waves",
            "2",
        ]
    assert [c[c.index("--arm-offset") + 1] for c in (harvester, ours)] == ["0", "1"], (
        "each run starts the arms' rotation one place further than the run before it"
    )
    assert harvester[harvester.index("--strategy") + 1] == HARVESTER
    assert "--strategy" not in ours
    assert harvester[harvester.index("--step-timeout") + 1] == "120"
    assert "--step-timeout" not in ours, "our runs wait as long as the scale run's default"
    assert down[-4:] == ["cluster", "down", "--state-dir", str(options.state_dir)]
    first = json.loads((made[0] / "runner.json").read_text())
    assert (first["commit"], first["load_before"], first["load_after"], first["idle"]) == (
        "abc",
        0.5,
        0.9,
        True,
    )
    second = json.loads((made[1] / "runner.json").read_text())
    assert (second["load_before"], second["idle"], second["idle_waited_s"]) == (2.0, False, 10)
    log = (options.reports / "runs.log").read_text()
    assert "02-ours: the machine was not idle after 10 s (load 2.00 >= 1.0): running anyway" in log
    assert arms_runs.judge(made, options.reports) == 1, "the stand-in reports have no twins"
    assert "(a) no target pod create fails" in (options.reports / "scaleruns.md").read_text()


async def test_a_run_that_left_no_report_is_named_and_left_out(tmp_path: Path) -> None:
    options = Options(reports=tmp_path, state_dir=tmp_path / "state", keep_cluster=True)
    commands: list[list[str]] = []

    def crashed(command: list[str], log: Path) -> int:
        commands.append(command)
        return 2

    made = await ArmsRuns(
        options, runner=crashed, load=lambda: 0.1, clock=FakeClock(), commit=lambda: None
    ).run([OURS])
    assert made == []
    assert (
        "01-ours: no report.json (see 01-ours.log); left out" in (tmp_path / "runs.log").read_text()
    )
    assert len(commands) == 1, "--keep-cluster: no cluster down"
    assert arms_runs.judge(made, tmp_path) == 2
