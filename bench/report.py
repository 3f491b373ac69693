"""What a results file says about where it was measured, and small formatting helpers."""

from __future__ import annotations

import os
import platform
import statistics
from importlib import metadata
from pathlib import Path


def _meminfo_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / (1 << 20)
    return float("nan")


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine() -> dict[str, str]:
    return {
        "cpus": str(os.cpu_count()),
        "cpu": _cpu_model(),
        "memory": f"{_meminfo_gib():.1f} GiB",
        "kernel": platform.release(),
        "python": platform.python_version(),
        "kubernetes (python)": _version("kubernetes"),
        "aiohttp": _version("aiohttp"),
        "orjson": _version("orjson"),
        "load average at start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def mib(value: float) -> str:
    return f"{value / (1 << 20):,.0f}"
