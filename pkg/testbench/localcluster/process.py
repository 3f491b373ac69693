"""Starting and stopping the cluster's processes, each in its own process group with its own log.

A cluster outlives the CLI call that started it (`cluster up` returns, the processes stay), so a
later call knows the processes only by the pid recorded in the state file. Before it signals such a
pid it checks that the pid still runs the binary it recorded and started when it recorded: a pid
reused by an unrelated program after a reboot must never be killed, nor one reused by another
cluster's process of the same binary (every local cluster runs the same kube-apiserver; with
pid_max at 32768, a busy machine reuses pids within hours, and a stale state file has stopped a
live test cluster mid-run).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from .errors import ClusterError

STOP_TIMEOUT = 10.0
POLL_INTERVAL = 0.05


@dataclass(frozen=True)
class ProcessRecord:
    """What the state file remembers of a started process."""

    name: str
    pid: int
    binary: str
    log: str
    argv: tuple[str, ...] = ()
    started: int | None = None
    """The process's start time in clock ticks since boot (/proc/<pid>/stat), which tells the
    process from a later one given the same pid; None in state files written before it was kept."""

    def running(self) -> bool:
        """True while the pid is alive and still runs ``binary`` (not a zombie, not a reused pid)."""
        return pid_runs(self.pid, self.binary, self.started)


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (field 22 of /proc/<pid>/stat); None if it
    cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    try:
        return int(fields[19])  # field 22 overall: the two before the ")" are pid and comm
    except (IndexError, ValueError):
        return None


def pid_runs(pid: int, binary: str, started_at: int | None = None) -> bool:
    """Whether ``pid`` is a live process of ``binary`` (not a zombie, not a reused pid), started at
    ``started_at`` clock ticks since boot when that is known.

    A process this Python process started is judged by its Popen handle, which has no race.
    Otherwise /proc/<pid>/exe is compared with the binary: unlike /proc/<pid>/cmdline, which reads
    empty for a moment while execve is still setting up the new image (after Popen has already
    returned), the exe link is switched before the exec becomes visible to the parent.
    """
    started = _CHILDREN.get(pid)
    if started is not None and started[1] == binary:
        return started[0].poll() is None
    proc = Path(f"/proc/{pid}")
    try:
        stat = (proc / "stat").read_text()
        exe = os.readlink(proc / "exe").removesuffix(" (deleted)")
    except OSError:
        return False
    # The state letter follows the parenthesised command name, which may itself contain spaces.
    state = stat.rsplit(")", 1)[1].split()[0]
    if state in ("Z", "X"):
        return False
    if started_at is not None and start_ticks(pid) != started_at:
        return False  # the pid now belongs to a later process, whatever it runs
    return exe == os.path.realpath(binary)


def start(
    name: str,
    argv: Sequence[str],
    log_path: Path,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> ProcessRecord:
    """Starts ``argv`` detached in a new session (its own process group), output to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        log.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(argv)}\n".encode())
        log.flush()
        child = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    _CHILDREN[child.pid] = (child, argv[0])
    return ProcessRecord(
        name=name,
        pid=child.pid,
        binary=argv[0],
        log=str(log_path),
        argv=tuple(argv),
        started=start_ticks(child.pid),
    )


def child_env() -> dict[str, str]:
    """The environment of a started component: this one's, without a proxy for HTTP(S) (the
    components talk to the API server, the node and each other directly; 127.0.0.1 and
    localhost named in NO_PROXY besides)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key.lower() not in ("http_proxy", "https_proxy", "all_proxy")
    }
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


def launch(
    records: list[ProcessRecord], name: str, argv: Sequence[str], log_dir: Path, cwd: Path
) -> ProcessRecord:
    """Starts ``argv`` as ``start`` does, with ``child_env``, logging to ``log_dir/<name>.log``
    in ``cwd``, and appends its record to ``records`` (the caller's list of what to stop)."""
    record = start(name, argv, log_dir / f"{name}.log", env=child_env(), cwd=cwd)
    records.append(record)
    return record


def await_ready(
    ready: Callable[[], bool],
    *,
    name: str,
    log: Path,
    timeout: float,
    records: Sequence[ProcessRecord],
    starting: str,
    died: Callable[[ProcessRecord, str], None] | None = None,
) -> None:
    """Polls ``ready()`` until true; ClusterError with the last lines of ``log`` (``name``'s) if
    it is not after ``timeout`` seconds. Fails fast if any of ``records`` exits meanwhile:
    ``died(record, log tail)`` may raise an error of its own first, else ClusterError saying it
    exited while ``starting`` (such as "the cluster") was starting, with its log's last lines."""

    def alive() -> None:
        for record in records:
            if not record.running():
                tail = log_tail(record.log)
                if died is not None:
                    died(record, tail)
                raise ClusterError(
                    f"{record.name} exited while {starting} was starting. "
                    f"Last log lines:\n{tail}\nFull log: {record.log}"
                )

    if not wait_for(ready, timeout=timeout, alive=alive):
        raise ClusterError(
            f"{name} was not ready after {timeout:.0f}s. "
            f"Last log lines:\n{log_tail(log)}\nFull log: {log}"
        )


@contextlib.contextmanager
def exclusive(lock_path: Path) -> Iterator[None]:
    """Holds an exclusive lock on ``lock_path`` (created, with its folder) for the body: one
    holder per machine at a time, whichever process."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# Popen objects of the processes this Python process started, by pid: the race-free way to know
# whether they still run, and what reaps their exit status (no zombies) once they stop.
_CHILDREN: dict[int, tuple[subprocess.Popen[bytes], str]] = {}


def wait_gone(record: ProcessRecord, timeout: float) -> bool:
    """Waits until the process has exited; True if it did within ``timeout`` seconds."""
    gone = wait_for(lambda: not record.running(), timeout=timeout, interval=POLL_INTERVAL)
    if gone:
        _CHILDREN.pop(record.pid, None)
    return gone


def _signal_group(record: ProcessRecord, sig: signal.Signals) -> None:
    """Signals the process group the record leads, falling back to the pid alone."""
    with contextlib.suppress(ProcessLookupError):
        try:
            os.killpg(record.pid, sig)
        except PermissionError:
            os.kill(record.pid, sig)


def stop(record: ProcessRecord, timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM to the process group, then SIGKILL if it has not exited after ``timeout`` seconds."""
    if not record.running():
        _CHILDREN.pop(record.pid, None)
        return
    _signal_group(record, signal.SIGTERM)
    if wait_gone(record, timeout):
        return
    _signal_group(record, signal.SIGKILL)
    wait_gone(record, STOP_TIMEOUT)


EPHEMERAL_RANGE_FILE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")
LISTEN_PORT_FLOOR: Final = 10000
"""The lowest port `free_port` hands out: above the well-known and registered services most
machines run."""
DEFAULT_EPHEMERAL_LOW: Final = 32768
"""Linux's default start of the ephemeral range, when /proc does not say."""
FREE_PORT_ATTEMPTS: Final = 200
_handed_out: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody is bound to right now, below the kernel's ephemeral range and not handed
    out before by this process (a later bind by someone else may still race; callers retry).

    Below the ephemeral range: the kernel gives the local port of every outgoing connection
    (kubectl's, the controllers', the informers') from that range, so a port asked of it (a bind
    to port 0) was one a busy suite's next connection could take before our server bound it, and
    the server then failed with EADDRINUSE. Chosen at random, so that two processes drawing at
    once rarely draw the same.
    """
    low = LISTEN_PORT_FLOOR
    high = _ephemeral_low()
    if high - low < 100:  # an ephemeral range that starts low leaves nothing below it
        return _kernel_port(host)
    for _ in range(FREE_PORT_ATTEMPTS):
        port = random.randrange(low, high)  # spreading, not secrecy
        if port not in _handed_out and _bindable(host, port):
            _handed_out.add(port)
            return port
    return _kernel_port(host)


def _ephemeral_low() -> int:
    try:
        return int(EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_EPHEMERAL_LOW


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def _kernel_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def run_logged(
    argv: Sequence[str],
    log: Path,
    *,
    shown: str | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: int | None = None,
    timeout: float | None = None,
) -> int:
    """Runs ``argv`` to its end with stdout and stderr appended to ``log``, after a line
    ``$ <shown>`` (default: ``argv`` joined by spaces); returns its exit code. Blocks the caller;
    TimeoutExpired after ``timeout`` seconds (None: no limit)."""
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(argv) if shown is None else shown}\n")
        out.flush()
        done = subprocess.run(
            argv,
            stdin=stdin,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            timeout=timeout,
            check=False,
        )
    return done.returncode


LOG_TAIL_BYTES = 64 * 1024


def log_tail(path: str | Path, lines: int = 15) -> str:
    """The last lines of a log, for error messages that should show the cause at once."""
    try:
        with Path(path).open("rb") as log:
            # The end of the file only: an API server's log grows to many megabytes.
            size = log.seek(0, os.SEEK_END)
            log.seek(max(0, size - LOG_TAIL_BYTES))
            text = log.read().decode(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.rstrip().splitlines()[-lines:])


def wait_for(
    condition: Callable[[], bool],
    *,
    timeout: float,
    interval: float = 0.2,
    alive: Callable[[], None] | None = None,
) -> bool:
    """Polls ``condition`` until true or ``timeout``; ``alive`` raises if a process has died."""
    deadline = time.monotonic() + timeout
    while True:
        if alive is not None:
            alive()
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
