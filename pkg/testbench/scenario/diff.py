"""The differential of our port of Harvester's algorithm and Harvester's own code (pure).

The same scenario, run once with ``harvester-port`` (our Python port, Harvester v1.9's behaviour,
on a cluster without Harvester) and once with ``harvester`` (Harvester v1.8.2's own controllers
in the cluster), gives two reports. `differences` names every measure on which they part:

- ``outcome``: the migrations' outcomes (an unfinished one counts as such);
- ``refused``: how many migrations had their target pod refused by quota for more than
  RACE_SECONDS (or for good);
- ``seconds_blocked``: the seconds blocked in all, when they differ by more than
  SECONDS_TOLERANCE (the same wait, timed on a loaded machine, moves by a few seconds);
- ``quota_at_base``: every quota back at its base at the end, or not;
- ``writes_per_migration``: Harvester's quota writes per migration (the port's counter; the real
  controllers' accepted writes in the audit log), the most of any namespace, when they differ by
  WRITES_TOLERANCE or more.

KNOWN_DIFFERENCES is the documented list, each difference explained by a named behaviour of
v1.8.2 against the port's v1.9 (KNOWN_BEHAVIOURS) and bounded in size and direction (`Bound`). `unexplained` is what a run shows beyond it,
and `missing` what the list names that a run no longer shows: a new difference, or one gone, is
a finding to explain, never noise to absorb.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from .schema import UNFINISHED, Scenario

SECONDS_TOLERANCE: Final = 10.0
"""Seconds blocked that differ by less than this (or less than a quarter of the larger) are the
same wait: the refused target pod is retried by KubeVirt every 5 s or so and a run on a loaded
2-core machine shifts by a retry or two."""
SECONDS_RELATIVE: Final = 0.25
RACE_SECONDS: Final = 1.0
"""A refusal shorter than this is the race of the raise and KubeVirt's target pod, created in the
same moment (both Harvesters raise when the migration is Pending, retried on the quota update):
measured on both sides in the same scenario, once one way and once the other (long-vm-name,
2026-11-26), it is not a difference of behaviour."""
WRITES_TOLERANCE: Final = 1.0
"""Writes per migration apart by less than one write are the same: a resync or a conflict retry
adds one now and then."""
MEASURES: Final = ("outcome", "refused", "seconds_blocked", "quota_at_base", "writes_per_migration")

KNOWN_BEHAVIOURS: Final = {
    "compensation": (
        "v1.9 compensates limits.memory after a refusal (raises to used + the VM's share + 128Mi "
        "when usage already exceeds what the room gives); v1.8.2 does not, so a target pod that "
        "its room does not cover stays refused and its migration Pending for good"
    ),
    "uid-keys": (
        "v1.8.2 keys its room by the migration's UID (migratingUID-<uid>) and re-adds it on every "
        "event while the migration is Pending; v1.9 keys it by the VM's name (migrating-<vm>)"
    ),
    "skip-checks": (
        "v1.9 returns early (no raise) when the VMI sets no cpu or memory limits, the quota "
        "limits neither limits.cpu nor limits.memory, or Rancher's annotation has neither; "
        "v1.8.2 checks fewer of these and writes its annotation regardless"
    ),
    "reaction-time": (
        "not a v1.8.2/v1.9 behaviour: the port runs in the bench's Python process (3 workers, on "
        "a loaded machine) and raises later than Harvester's Go controllers, so with 20 "
        "migrations at once KubeVirt's target pod more often wins the race against the raise "
        "(refused at base: 'limited: limits.cpu=5'), and KubeVirt's retry backoff turns a lost "
        "race into seconds"
    ),
    "write-coalescing": (
        "not a v1.8.2/v1.9 behaviour as far as measured: with several migrations of one quota "
        "at once, whether one raise or lowering covers one migration or several depends on how "
        "their events interleave; both sides wrote 8 times for the 3 migrations of the v1.2.1 "
        "evacuation in one run and 12 in another (the port 8 beside virt-controller and 12 on "
        "the simulator, Harvester's own the other way round); one migration at a time both "
        "write 4"
    ),
    "port-under-load": (
        "not a v1.8.2/v1.9 behaviour: on a loaded machine the port, in the bench's Python process, "
        "sees its own writes late and redoes a step (its annotation and the resync flag written "
        "again): 6 writes for one migration where both write 4 idle (v170-test1-ratio-1.5, seen "
        "in a full run at load average 5-7)"
    ),
}
"""The behaviours of Harvester v1.8.2 that the port (v1.9) does not share, by name."""


@dataclass(frozen=True)
class Bound:
    """How far, and which way, a known difference may go: `holds(port, real)` (the measure's
    values), said in `says`. A difference the behaviour names but beyond its bound is
    unexplained: the behaviour explains that much, not any amount."""

    says: str
    holds: Callable[[Any, Any], bool]


def _all_succeeded_and_real_unfinished(port: Any, real: Any) -> bool:
    return set(port) == {"Succeeded"} and UNFINISHED in real


def _within(most: float, *, port_more: bool | None = None) -> Callable[[Any, Any], bool]:
    """Apart by at most `most`; with `port_more`, only the port above (True) or below (False)."""

    def holds(port: Any, real: Any) -> bool:
        gap = float(port) - float(real)
        if port_more is not None and (gap > 0) != port_more:
            return False
        return abs(gap) <= most

    return holds


KNOWN_DIFFERENCES: Final[dict[tuple[str, str], tuple[str, Bound]]] = {
    ("v170-test2-ratio-raised", "outcome"): (
        "compensation",
        Bound(
            "the port's migrations all Succeeded, some of Harvester's unfinished",
            _all_succeeded_and_real_unfinished,
        ),
    ),
    ("v170-test2-ratio-raised", "quota_at_base"): (
        "compensation",
        Bound("the port's quota at its base, Harvester's still raised", lambda p, r: p and not r),
    ),
    ("v170-test2-ratio-raised", "writes_per_migration"): (
        "compensation",
        Bound(
            "the port writes more, by at most 5 a migration (5.33 / 2.0)",
            _within(5.0, port_more=True),
        ),
    ),
    ("drain-20-vms-5-namespaces", "refused"): (
        "reaction-time",
        Bound("the port refused more, by at most 5 of the 20", _within(5, port_more=True)),
    ),
    ("drain-20-vms-5-namespaces", "seconds_blocked"): (
        "reaction-time",
        Bound(
            "the port blocked longer, by at most 60 s (12.5 / 0.3)", _within(60.0, port_more=True)
        ),
    ),
    ("v121-evacuation-kubevirt-1.6", "writes_per_migration"): (
        "write-coalescing",
        Bound("either way, by at most 2 a migration (8 or 12 writes for 3)", _within(2.0)),
    ),
    ("v121-evacuation", "writes_per_migration"): (
        "write-coalescing",
        Bound("either way, by at most 2 a migration (8 or 12 writes for 3)", _within(2.0)),
    ),
    ("v170-test1-ratio-1.5", "writes_per_migration"): (
        "port-under-load",
        Bound("the port writes more, by at most 2 a migration", _within(2.0, port_more=True)),
    ),
    ("long-vm-name", "writes_per_migration"): (
        "port-under-load",
        Bound("the port writes more, by at most 2 a migration", _within(2.0, port_more=True)),
    ),
}
"""(scenario, measure) -> the behaviour (KNOWN_BEHAVIOURS) that explains the difference and how
far it may go, as measured by `python -m bench.scenario_diff` (bench/SCENARIOS.md) with room for
a loaded machine's spread."""
TIMING_BEHAVIOURS: Final = frozenset({"reaction-time", "write-coalescing", "port-under-load"})
"""Differences that hang on timing: a run may show them or not, so `missing` never asks for
them (an unexplained one still fails)."""

NOT_RUN_BY_REAL_CODE: Final = {
    "vmi-deleted-mid-migration": (
        "stops and starts the controller mid-migration; Harvester's own controllers run for the "
        "cluster's lifetime and are not stopped per scenario"
    ),
}
"""Scenarios the differential cannot run on Harvester's own code, and why."""


@dataclass(frozen=True)
class Outcome:
    """One run's measures (module docstring)."""

    outcome: tuple[str, ...]
    refused: int
    seconds_blocked: float
    quota_at_base: bool
    writes_per_migration: float


@dataclass(frozen=True)
class Difference:
    """One measure on which port and real code part, with both values."""

    scenario: str
    measure: str
    port: Any
    real: Any

    @property
    def key(self) -> tuple[str, str]:
        return (self.scenario, self.measure)


def runnable_by_real_code(scenario: Scenario) -> bool:
    """Whether Harvester's own controllers can play this scenario (NOT_RUN_BY_REAL_CODE)."""
    return scenario.name not in NOT_RUN_BY_REAL_CODE


def _harvester_writes_per_migration(report: Mapping[str, Any]) -> float:
    """The most, over namespaces, of Harvester's accepted quota writes per migration: from the
    audit log for the real controllers, from the port's own counter for the port. A real run
    without its audit log is an error, never 0 writes (a difference it would hide)."""
    writers = report.get("writers") or {}
    if report.get("strategy") == "harvester" and writers.get("unavailable"):
        raise ValueError(
            f"scenario {report.get('scenario')!r}: Harvester's writes cannot be counted: "
            f"{writers.get('unavailable')}"
        )
    by_namespace = writers.get("writes_by_identity") or {}
    worst = 0.0
    for namespace, writes in (report.get("quota_writes") or {}).items():
        migrations = writes.get("migrations") or 0
        if not migrations:
            continue
        if report.get("strategy") == "harvester":
            count = (by_namespace.get(namespace) or {}).get("harvester", {})
            total = float(count.get("accepted", 0))
        else:
            total = float(writes.get("writes") or 0)
        worst = max(worst, total / migrations)
    return round(worst, 2)


def waited(migration: Mapping[str, Any]) -> bool:
    """Refused by quota for longer than the race, or never admitted."""
    if not migration.get("refusals"):
        return False
    blocked = migration.get("blocked_seconds")
    return blocked is None or float(blocked) > RACE_SECONDS


def outcome_of(report: Mapping[str, Any]) -> Outcome:
    """The measures of one report (report.build_report's JSON)."""
    migrations = report.get("migrations") or []
    return Outcome(
        outcome=tuple(sorted(str(m.get("outcome") or UNFINISHED) for m in migrations)),
        refused=sum(1 for m in migrations if waited(m)),
        seconds_blocked=round(sum(m.get("blocked_seconds") or 0.0 for m in migrations), 1),
        quota_at_base=bool((report.get("invariants") or {}).get("final_hard_equals_base")),
        writes_per_migration=_harvester_writes_per_migration(report),
    )


def _apart(measure: str, port: Any, real: Any) -> bool:
    if measure == "seconds_blocked":
        gap = abs(float(port) - float(real))
        return gap >= max(SECONDS_TOLERANCE, SECONDS_RELATIVE * max(float(port), float(real)))
    if measure == "writes_per_migration":
        return abs(float(port) - float(real)) >= WRITES_TOLERANCE
    return bool(port != real)


def differences(
    scenario: str, port: Mapping[str, Any], real: Mapping[str, Any]
) -> list[Difference]:
    """Every measure on which the port's report and the real code's part, in MEASURES order."""
    ours, theirs = outcome_of(port), outcome_of(real)
    return [
        Difference(scenario, measure, getattr(ours, measure), getattr(theirs, measure))
        for measure in MEASURES
        if _apart(measure, getattr(ours, measure), getattr(theirs, measure))
    ]


def unexplained(found: Iterable[Difference]) -> list[Difference]:
    """The differences KNOWN_DIFFERENCES does not name, or names with a bound they exceed."""
    return [d for d in found if not _explained(d)]


def _explained(difference: Difference) -> bool:
    known = KNOWN_DIFFERENCES.get(difference.key)
    return known is not None and known[1].holds(difference.port, difference.real)


def missing(found: Iterable[Difference], scenarios: Iterable[str]) -> list[tuple[str, str]]:
    """The known differences of `scenarios` (those run) that the run did not show."""
    shown = {d.key for d in found}
    ran = set(scenarios)
    return sorted(
        key
        for key, (behaviour, _) in KNOWN_DIFFERENCES.items()
        if key[0] in ran and key not in shown and behaviour not in TIMING_BEHAVIOURS
    )


def explain(difference: Difference) -> str:
    """One line: the difference, both values, and the behaviour that explains it (or none)."""
    known = KNOWN_DIFFERENCES.get(difference.key)
    if known is None:
        why = "UNEXPLAINED"
    else:
        behaviour, bound = known
        beyond = "" if bound.holds(difference.port, difference.real) else "BEYOND ITS BOUND, "
        why = f"{beyond}{behaviour}: {KNOWN_BEHAVIOURS[behaviour]}; expected: {bound.says}"
    return (
        f"{difference.scenario}: {difference.measure}: port {difference.port}, "
        f"Harvester's own code {difference.real} ({why})"
    )
