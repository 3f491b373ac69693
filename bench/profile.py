"""Where the controller's CPU goes during a scale run, by sampling it (issue 40, item 4).

    python -m bench.profile --out reports/profile -- --size small --no-baseline --waves 2

runs ``harvester-quota-bench scale`` with the arguments after ``--`` (its report in
``OUT/report``), attaches py-spy (the bench extra) to the controller process as soon as it starts,
samples it at 100 Hz without stopping it (``--nonblocking``) until it exits, keeps the collapsed
stacks in ``OUT/controller.raw`` and prints the share of samples in each part of the controller
(`PARTS`, first match wins, in that order). py-spy counts only samples where the thread was not
idle; a sample in the event loop's epoll call is the loop waking up with events ready.

The figures are shares of one run's samples, start-up and the cache fill included: compare the
parts, and compare runs only made side by side (a loaded machine stretches every part alike, but
not the waiting).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from harvester_quota.testbench.scale.product import LEADER

Stack = list[str]
"""One sample's frames, outermost first, each "function (file:line)" as py-spy writes them."""


def _leaf_in(name: str) -> Callable[[Stack], bool]:
    return lambda frames: name in frames[-1]


def _through(*names: str) -> Callable[[Stack], bool]:
    return lambda frames: any(n in frame for frame in frames for n in names)


PARTS: Sequence[tuple[str, Callable[[Stack], bool]]] = (
    ("CPU accounting (clock reads, --cpu-accounting)", _leaf_in("cputime.py")),
    ("event loop waking (epoll)", lambda f: "selectors.py" in f[-1] and "select" in f[-1]),
    ("start-up imports", _through("importlib")),
    ("room plan (plan_quota)", lambda f: any(frame.startswith("plan_quota ") for frame in f)),
    ("rest of the namespace reconcile", _through("QuotaReconciler.reconcile")),
    ("Harvester compatibility (VMI annotations, VM touch)", _through("VmiAnnotator", "Vmim")),
    ("MTQ handlers", _through("/mtq/")),
    ("other handlers", _through("SharedHandler.on_change")),
    ("watch streams: decode, store, notify", _through("Reflector._consume")),
    ("informer listeners and intake", _through("informer.py", "intake.py")),
    ("HTTP client (aiohttp, TLS)", _through("aiohttp", "sslproto", "selector_events")),
)
OTHER = "other"


def collapsed(lines: Iterable[str]) -> Iterable[tuple[Stack, int]]:
    """(frames, samples) of each line of py-spy's raw (collapsed) output; blank lines skipped."""
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if stack and count.isdigit():
            yield stack.split(";"), int(count)


def shares(samples: Iterable[tuple[Stack, int]]) -> tuple[int, dict[str, int]]:
    """The total samples and each part's (every part named, OTHER last)."""
    counted: Counter[str] = Counter()
    total = 0
    for frames, count in samples:
        total += count
        part = next((name for name, matches in PARTS if matches(frames)), OTHER)
        counted[part] += count
    return total, {name: counted[name] for name in [*(n for n, _ in PARTS), OTHER]}


def table(total: int, parts: dict[str, int]) -> str:
    """The markdown table the run prints."""
    rows = [f"| {name} | {count} | {100 * count / total:.1f} % |" for name, count in parts.items()]
    head = f"| part ({total} samples) | samples | share |\n|---|---|---|"
    return "\n".join([head, *rows])


def _controller_pid(report: Path, scale: subprocess.Popen[bytes]) -> int | None:
    """The pid of the run's leading controller process once it runs: its kubeconfig is in
    `report`, its leader-election identity ends in LEADER (a failover run's standby does not)."""
    while scale.poll() is None:
        found = subprocess.run(
            ["pgrep", "-f", "harvester_quota.main run"], capture_output=True, text=True, check=False
        ).stdout.split()
        for pid in found:
            if is_the_leader(_command_line(int(pid)), report):
                return int(pid)
        time.sleep(0.5)
    return None


def _command_line(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return []  # gone since pgrep listed it


def is_the_leader(args: list[str], report: Path) -> bool:
    return any(str(report) in a for a in args) and any(
        a.startswith("--identity=") and a.endswith(f"-{LEADER}") for a in args
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("reports/profile"))
    parser.add_argument("scale_args", nargs="*", help="harvester-quota-bench scale's arguments")
    args = parser.parse_args(argv)
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "harvester_quota.testbench", "scale"]
    scale = subprocess.Popen([*command, *args.scale_args, "--report", str(out / "report")])
    pid = _controller_pid(out / "report", scale)
    if pid is None:
        print("the scale run ended before its controller started", file=sys.stderr)
        return 2
    raw = out / "controller.raw"
    py_spy = str(Path(sys.executable).parent / "py-spy")  # the bench extra's, beside python
    sampling = ["--pid", str(pid), "--nonblocking", "--rate", "100", "--format", "raw"]
    sampler = subprocess.Popen([py_spy, "record", *sampling, "--output", str(raw)])
    code = scale.wait()
    sampler.wait()
    with raw.open() as lines:
        total, parts = shares(collapsed(lines))
    print(table(total, parts) if total else "no samples", flush=True)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
