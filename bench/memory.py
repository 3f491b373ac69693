"""This process's memory as the kernel sees it (Linux /proc), for RSS-per-object figures."""

from __future__ import annotations

from pathlib import Path

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kib(field: str) -> int:
    for line in _STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} missing from {_STATUS}")


def rss_bytes() -> int:
    """Resident set size now (VmRSS)."""
    return _status_kib("VmRSS") * 1024


def peak_rss_bytes() -> int:
    """Highest resident set size since start or since ``reset_peak`` (VmHWM)."""
    return _status_kib("VmHWM") * 1024


def reset_peak() -> bool:
    """Sets VmHWM to the current RSS (writing 5 to clear_refs); False where the kernel refuses."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True
