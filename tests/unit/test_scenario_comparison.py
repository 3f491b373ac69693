"""The side-by-side comparison a scenario run prints: every figure comes from the reports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from harvester_quota.testbench.scenario.progress import comparison_table, summary_row


def _report(*, blocked: list[float | None], writes: float, drift: dict[str, str]) -> dict[str, Any]:
    migrations = [
        {
            "vm": f"vm{i}",
            "outcome": "Unfinished" if b is None else "Succeeded",
            "blocked_seconds": b,
        }
        for i, b in enumerate(blocked)
    ]
    return {
        "migrations": migrations,
        "quota_writes": {"ns": {"per_migration": writes}},
        "quotas": {"ns": {"drift": drift}},
        "invariants": {"final_hard_equals_base": not drift, "no_stale_annotation": not drift},
        "vm_starts": {"vm0": None},
    }


def test_summary_counts_blocked_stuck_and_seconds() -> None:
    row = summary_row(_report(blocked=[0, 2.5, None], writes=3.0, drift={}))
    assert row["blocked_by_quota"] == 2
    assert row["still_blocked"] == 1
    assert row["seconds_blocked"] == 2.5  # the stuck one adds nothing
    assert row["finished"] == 2


def test_drift_is_listed_in_full_below_the_table() -> None:
    drift = {"limits.cpu": "2", "limits.memory": "5622461313"}
    table = comparison_table(
        {
            "ours": _report(blocked=[0], writes=2.0, drift={}),
            "harvester": _report(blocked=[None], writes=3.0, drift=drift),
        }
    )
    lines = table.splitlines()
    assert lines[0].split() == ["ours", "harvester"]
    drift_row = next(line for line in lines if line.startswith("drift (final hard - base)"))
    assert "none" in drift_row and drift_row.endswith("1 quota(s), below")
    assert lines[-1] == "drift, harvester, ns: limits.cpu +2, limits.memory +5622461313"


def test_a_report_without_matplotlib_says_how_to_get_the_plot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """matplotlib is the `report` extra, not a dependency of the sidecar."""
    import builtins

    from harvester_quota.testbench.scenario import report

    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    assert report.plot_timeline(None, tmp_path / "t.png") == report.PLOT_MISSING  # type: ignore[arg-type]
    assert "harvester-quota[report]" in report.PLOT_MISSING
    assert not (tmp_path / "t.png").exists()
