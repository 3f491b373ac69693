"""A busy machine on demand, for benchmarks and tests alike."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def cpu_burners(count: int = 2) -> Iterator[None]:
    """`count` processes spinning on the CPU for the duration: a busy machine, as a user's control
    plane often is. Stopped (and reaped) on exit, whatever happened."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
        for burner in burners:
            burner.wait()
