"""Process handling: detached start, graceful then forced stop, pid identity."""

from __future__ import annotations

import os
import shutil
import socket
import time
from pathlib import Path

import pytest
from harvester_quota.testbench.localcluster import process


def test_started_process_runs_in_its_own_group_and_stops(tmp_path: Path) -> None:
    record = process.start("sleeper", [shutil.which("sleep") or "sleep", "60"], tmp_path / "l")
    assert record.running()
    assert os.getpgid(record.pid) == record.pid
    process.stop(record, timeout=5)
    assert not record.running()


def test_process_ignoring_sigterm_is_killed_after_the_timeout(tmp_path: Path) -> None:
    script = "trap '' TERM; echo armed; while true; do sleep 0.1; done"
    record = process.start("stubborn", ["/bin/bash", "-c", script], tmp_path / "log")
    # The log's first line repeats the command; wait for the line the trap-armed shell prints.
    assert process.wait_for(
        lambda: process.log_tail(record.log).splitlines()[-1] == "armed", timeout=5
    )
    started = time.monotonic()
    process.stop(record, timeout=0.5)
    assert not record.running()
    assert time.monotonic() - started >= 0.5


def test_a_recorded_pid_running_another_binary_is_not_ours(tmp_path: Path) -> None:
    record = process.start("sleeper", ["/bin/sleep", "30"], tmp_path / "l")
    try:
        stranger = process.ProcessRecord("x", record.pid, "/usr/bin/not-this-one", record.log)
        assert not stranger.running()
        # Only this Python process has the Popen handle; a later CLI call checks /proc.
        foreign = process.ProcessRecord("x", os.getpid(), "/bin/sleep", record.log)
        assert not foreign.running()
    finally:
        process.stop(record)


def test_log_tail_reads_the_end_of_a_log(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("\n".join(f"line {n}" for n in range(100)))
    assert process.log_tail(log, lines=2) == "line 98\nline 99"
    assert process.log_tail(tmp_path / "missing") == "(no log)"


def test_free_port_is_free() -> None:
    port = process.free_port()
    assert not process.port_in_use(port)


def test_free_ports_come_from_below_the_ephemeral_range_and_never_twice() -> None:
    """The kernel hands outgoing connections their local ports from the ephemeral range: a port
    from there could be taken by the suite's next connection before our server binds it."""
    low = int(process.EPHEMERAL_RANGE_FILE.read_text().split()[0])
    ports = [process.free_port() for _ in range(50)]
    assert all(process.LISTEN_PORT_FLOOR <= port < low for port in ports), ports
    assert len(set(ports)) == len(ports)


def test_a_port_someone_listens_on_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", process.free_port()))
        taken.listen()
        busy = taken.getsockname()[1]
        draws = iter([busy, busy, busy + 1])
        monkeypatch.setattr(process.random, "randrange", lambda _low, _high: next(draws))
        process._handed_out.discard(busy + 1)
        assert process.free_port() == busy + 1


def test_without_room_below_the_ephemeral_range_the_kernel_chooses(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    kernel_low = int(process.EPHEMERAL_RANGE_FILE.read_text().split()[0])
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("1024\t65000\n")
    monkeypatch.setattr(process, "EPHEMERAL_RANGE_FILE", ranges)
    assert process.free_port() >= kernel_low, "the kernel's own choice, from its real range"


def test_log_tail_of_a_large_log_reads_only_its_end(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    log.write_text("\n".join(f"line {n:07d}" for n in range(200_000)))  # ~2.4 MB
    assert process.log_tail(log, lines=3) == "line 0199997\nline 0199998\nline 0199999"
    assert log.stat().st_size > 20 * process.LOG_TAIL_BYTES


def test_a_recorded_pid_reused_by_a_later_process_of_the_same_binary_is_not_ours(
    tmp_path: Path,
) -> None:
    """Every local cluster runs the same binaries: a stale state file's pid, reused by another
    cluster's process of the same binary, passed the binary check, and stopping the stale
    cluster stopped the live one (stop 37's full run lost its session cluster mid-run). The
    start time recorded with the pid tells them apart."""
    record = process.start("sleeper", ["/bin/sleep", "30"], tmp_path / "l")
    try:
        assert record.started is not None and record.running()
        # As a later CLI call reads it from the state file (no Popen handle): the same pid and
        # binary, but recorded for a process that started at another time.
        stale = process.ProcessRecord(
            "x", record.pid, "/bin/sleep", record.log, started=record.started - 1
        )
        process._CHILDREN.pop(record.pid, None)
        assert not stale.running()
        same = process.ProcessRecord(
            "x", record.pid, "/bin/sleep", record.log, record.argv, record.started
        )
        assert same.running()
    finally:
        process.stop(record)


def test_run_logged_appends_the_command_and_its_output_and_returns_its_exit_code(
    tmp_path: Path,
) -> None:
    log = tmp_path / "build.log"
    log.write_text("earlier\n")
    argv = ["sh", "-c", "echo out; echo err >&2; pwd; exit 3"]

    code = process.run_logged(argv, log, shown="(cd here) sh", cwd=tmp_path)

    assert code == 3
    assert log.read_text().splitlines() == [
        "earlier",
        "",
        "$ (cd here) sh",
        "out",
        "err",
        str(tmp_path),
    ]


def test_run_logged_shows_argv_when_told_nothing_else_and_passes_the_environment(
    tmp_path: Path,
) -> None:
    log = tmp_path / "build.log"
    argv = ["sh", "-c", 'echo "$MARK"']

    code = process.run_logged(argv, log, env={"MARK": "given"})

    assert code == 0
    assert log.read_text().splitlines() == ["", f"$ {' '.join(argv)}", "given"]
