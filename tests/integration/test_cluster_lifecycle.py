"""`cluster up/down` on their own state directories: idempotence, stale state, failures.

These start extra clusters beside the session one, each in a temporary state directory.
"""

from __future__ import annotations

import os
import signal
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from harvester_quota.testbench.localcluster import ClusterError, LocalCluster, binaries, process
from harvester_quota.testbench.localcluster.cluster import Ports

pytestmark = pytest.mark.integration


@pytest.fixture
def bin_dir() -> Path:
    return binaries.resolve_bin_dir()


@pytest.fixture
def local(tmp_path: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path / "state")
    try:
        yield cluster
    finally:
        cluster.down()


def no_process_left(records: list[process.ProcessRecord]) -> bool:
    return not any(record.running() for record in records)


def test_up_is_idempotent_recovers_from_a_killed_run_and_down_leaves_nothing(
    local: LocalCluster,
) -> None:
    """`up` on a running cluster keeps its processes; after its API server was killed, `up`
    replaces every process; `down` stops them all, frees their ports and is a no-op the second
    time."""
    first = local.up(nodes=1)
    again = local.up(nodes=1)
    assert [r.pid for r in again.processes] == [r.pid for r in first.processes]
    assert sorted(processes_in(local.state_dir)) == sorted(r.pid for r in first.processes)
    apiserver = next(r for r in first.processes if r.name == "kube-apiserver")
    os.killpg(apiserver.pid, signal.SIGKILL)
    process.wait_gone(apiserver, 10)
    second = local.up(nodes=1)
    assert no_process_left(first.processes)
    assert second.rest().healthy()
    assert {r.pid for r in second.processes}.isdisjoint({r.pid for r in first.processes})
    assert local.down() is True
    assert processes_in(local.state_dir) == []
    assert no_process_left(second.processes)
    assert not any(process.port_in_use(port) for port in second.ports.all())
    assert local.down() is False


def fake_bin_dir(tmp_path: Path, real: Path, crashing: str) -> Path:
    """Real binaries, except ``crashing``, which prints a cause and exits 3."""
    directory = tmp_path / "bin"
    directory.mkdir()
    for name in binaries.BINARIES:
        target = directory / name
        if name == crashing:
            target.write_text("#!/bin/sh\necho 'fatal: simulated start failure' >&2\nexit 3\n")
            target.chmod(target.stat().st_mode | stat.S_IEXEC)
        else:
            target.symlink_to(real / name)
    return directory


@pytest.mark.parametrize("crashing", ["etcd", "kube-apiserver", "kwok"])
def test_a_binary_crashing_at_start_is_named_and_nothing_is_left(
    tmp_path: Path, bin_dir: Path, crashing: str
) -> None:
    cluster = LocalCluster(tmp_path / "state", bin_dir=fake_bin_dir(tmp_path, bin_dir, crashing))
    with pytest.raises(ClusterError) as failed:
        cluster.up(nodes=1)
    message = str(failed.value)
    assert f"{crashing} exited while the cluster was starting" in message
    assert "simulated start failure" in message
    assert f"logs/{crashing}.log" in message
    assert cluster.info() is None
    # Every component that did start was stopped again: no process works in its state directory.
    assert processes_in(cluster.state_dir) == []


def processes_in(directory: Path) -> list[int]:
    """Pids whose working directory is ``directory`` (the cluster starts its components there)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(os.readlink(f"/proc/{entry}/cwd")) == directory:
                    found.append(int(entry))
            except OSError:
                continue
    return found


def test_a_port_taken_after_it_was_chosen_is_retried(
    local: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = process.free_port()
    blocker = process.start(
        "blocker",
        ["python3", "-m", "http.server", "--bind", "127.0.0.1", str(taken)],
        local.state_dir / "blocker.log",
    )
    try:
        assert process.wait_for(lambda: process.port_in_use(taken), timeout=10)
        real_pick = Ports.pick
        picks: list[Ports] = []

        def pick_taken_first() -> Ports:
            ports = real_pick()
            if not picks:
                ports.etcd_client = taken
            picks.append(ports)
            return ports

        monkeypatch.setattr(Ports, "pick", staticmethod(pick_taken_first))
        info = local.up(nodes=1)
        assert len(picks) == 2
        assert info.ports.etcd_client != taken
        assert info.rest().healthy()
    finally:
        process.stop(blocker)
