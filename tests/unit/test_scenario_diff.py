"""The differential's rules (testbench/scenario/diff.py) on reports built by hand: which measures
part, the tolerances, and that an undocumented difference or a documented one gone is reported."""

from __future__ import annotations

from typing import Any

import pytest
from harvester_quota.testbench.scenario import diff
from harvester_quota.testbench.scenario.schema import UNFINISHED


def report(
    strategy: str,
    *,
    outcomes: tuple[str, ...] = ("Succeeded",),
    blocked: tuple[float, ...] = (0.0,),
    at_base: bool = True,
    writes: int = 2,
) -> dict[str, Any]:
    """A scenario report of one namespace: the port counts its writes itself, the real code's
    come from the audit log."""
    migrations = [
        {"outcome": o, "blocked_seconds": b, "refusals": 3 if b else 0}
        for o, b in zip(outcomes, blocked, strict=True)
    ]
    count = len(migrations)
    port = strategy == "harvester-port"
    return {
        "strategy": strategy,
        "migrations": migrations,
        "invariants": {"final_hard_equals_base": at_base},
        "quota_writes": {"ns": {"writes": writes if port else 0, "migrations": count}},
        "writers": {
            "unavailable": None,
            "writes_by_identity": {"ns": {"harvester": {"accepted": 0 if port else writes}}},
        },
    }


def test_the_same_runs_show_no_difference_within_the_tolerances() -> None:
    port = report("harvester-port", blocked=(31.0,), writes=4)
    real = report("harvester", blocked=(36.5,), writes=4)
    assert diff.differences("s", port, real) == []


def test_a_refusal_within_the_race_of_raise_and_target_pod_is_no_difference() -> None:
    port = report("harvester-port", blocked=(0.1,))
    real = report("harvester", blocked=(0.0,))
    assert diff.differences("s", port, real) == []
    assert [d.measure for d in diff.differences("s", report("harvester-port"), real)] == []
    waited = report("harvester-port", blocked=(1.5,))
    assert [d.measure for d in diff.differences("s", waited, real)] == ["refused"]


def test_each_measure_parts_on_its_own() -> None:
    port = report("harvester-port", blocked=(0.0,), writes=2)
    real = report("harvester", outcomes=("unfinished",), blocked=(300.0,), at_base=False, writes=4)
    found = diff.differences("s", port, real)
    assert [d.measure for d in found] == list(diff.MEASURES)
    assert found[4].port == 2.0 and found[4].real == 4.0  # the real writes from the audit log


def test_an_undocumented_difference_is_unexplained_and_a_documented_one_gone_is_missing() -> None:
    name, measure = "v170-test2-ratio-raised", "outcome"
    known = diff.Difference(name, measure, ("Succeeded",) * 3, ("Succeeded", UNFINISHED))
    new = diff.Difference("long-vm-name", "quota_at_base", True, False)
    assert diff.unexplained([known, new]) == [new]
    assert "UNEXPLAINED" in diff.explain(new)
    behaviour, _ = diff.KNOWN_DIFFERENCES[known.key]
    assert diff.KNOWN_BEHAVIOURS[behaviour] in diff.explain(known)
    assert (name, measure) in diff.missing([], [name])
    assert diff.missing([], ["another-scenario"]) == []


def test_a_documented_difference_beyond_its_bound_or_the_other_way_is_unexplained() -> None:
    """Review: a documented difference absorbed any size and either direction."""
    drain = "drain-20-vms-5-namespaces"
    slower = diff.Difference(drain, "seconds_blocked", 12.5, 0.3)
    assert diff.unexplained([slower]) == [], "the measured difference"
    much_slower = diff.Difference(drain, "seconds_blocked", 300.0, 0.3)
    other_way = diff.Difference(drain, "refused", 0, 3)
    assert diff.unexplained([much_slower, other_way]) == [much_slower, other_way]
    assert "BEYOND ITS BOUND" in diff.explain(much_slower)
    writes = diff.Difference("v121-evacuation", "writes_per_migration", 4.0, 2.67)
    assert diff.unexplained([writes]) == [], "write coalescing goes either way"
    assert diff.unexplained([diff.Difference("v121-evacuation", "writes_per_migration", 7.0, 2.67)])
    outcome = "v170-test2-ratio-raised", "outcome"
    assert diff.unexplained([diff.Difference(*outcome, (UNFINISHED,), ("Succeeded",))])


def test_every_documented_difference_names_a_known_behaviour() -> None:
    assert {b for b, _ in diff.KNOWN_DIFFERENCES.values()} <= set(diff.KNOWN_BEHAVIOURS)
    assert {m for _, m in diff.KNOWN_DIFFERENCES} <= set(diff.MEASURES)


def test_a_documented_timing_difference_may_be_absent_but_a_behaviour_one_may_not() -> None:
    timing = [k for k, (b, _) in diff.KNOWN_DIFFERENCES.items() if b in diff.TIMING_BEHAVIOURS]
    behaviour = [
        k for k, (b, _) in diff.KNOWN_DIFFERENCES.items() if b not in diff.TIMING_BEHAVIOURS
    ]
    assert timing and behaviour
    assert diff.missing([], [name for name, _ in timing]) == sorted(
        k for k in behaviour if k[0] in {name for name, _ in timing}
    )
    assert set(behaviour) <= set(diff.missing([], [name for name, _ in behaviour]))


def test_a_real_run_without_its_audit_log_is_an_error_not_zero_writes() -> None:
    """Second review: its writes read as 0, which the documented write differences absorbed."""
    real = report("harvester")
    real["writers"] = {"unavailable": "the cluster keeps no audit log"}
    with pytest.raises(ValueError, match="cannot be counted: the cluster keeps no audit log"):
        diff.differences("s", report("harvester-port"), real)
