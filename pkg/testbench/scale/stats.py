"""A scale step's figures, from what the run observed (pure: no I/O).

Percentiles are nearest-rank (p99 of 50 samples is the largest but none); CPU is in seconds of one
core; requests and writes are per migration of the step.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ..sim.kubevirt.record import MigrationRecord, Outcome
from . import breakdown
from .breakdown import Breakdown
from .plan import Step
from .product import Metrics


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """Nearest-rank percentile of `values` (None when empty); `fraction` in (0, 1]."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class MigrationTimes:
    """One migration of a step, under the key it shares with its twins in the other arms
    (`ScalePlan.twin_key`): what pairs it with its no-quota twin (bench/scaleruns.py)."""

    succeeded: float | None
    """Seconds from its create request being sent to its Succeeded phase; None if it did not
    succeed."""
    conflicted: bool = False
    """A target pod create of it failed on quota admission's Conflict."""
    conflict_stall: float | None = None
    """If `conflicted`: seconds from its first failed create until its target pod was admitted
    (or it ended; `conflict_stalls`' figure), None while it still waited when the step ended.
    None if not conflicted."""

    def to_json(self) -> dict[str, float | None]:
        """``succeeded_s``, and for a conflicted migration ``conflict_stall_s`` (null: it still
        waited when the step ended)."""
        data: dict[str, float | None] = {"succeeded_s": _round_s(self.succeeded)}
        if self.conflicted:
            data["conflict_stall_s"] = _round_s(self.conflict_stall)
        return data


def migration_times(
    migrations: Iterable[tuple[str, MigrationRecord | None, float]],
) -> dict[str, MigrationTimes]:
    """Each migration's `MigrationTimes` by twin key, from (twin key, its record if KubeVirt's
    watch saw it, the monotonic moment its create request was sent)."""
    times = {}
    for key, record, asked in migrations:
        if record is None:
            times[key] = MigrationTimes(None)
            continue
        succeeded = (
            record.finished.mono - asked
            if record.outcome is Outcome.SUCCEEDED and record.finished is not None
            else None
        )
        conflicted = bool(record.conflicts)
        stall = record.stalled_seconds if conflicted else None
        times[key] = MigrationTimes(succeeded, conflicted, stall)
    return times


def _round_s(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


@dataclass(frozen=True)
class StepResult:
    """One step's figures (see the module docstring)."""

    name: str
    namespace_size: int
    migrations: int
    succeeded: int
    latencies: tuple[float, ...]
    """Seconds from each migration's create response to its room seen on the quota."""
    create_seconds: tuple[float, ...]
    """How long each migration's create request took."""
    refused: int
    """Migrations whose target pod quota admission refused at least once."""
    refusals: int
    blocked_seconds: float
    seconds: float
    """From the first create request until every migration had an outcome."""
    settle_seconds: float
    """From then until every quota was back at its base, without migration annotations."""
    quota_writes: float
    requests: Mapping[tuple[str, str], float]
    cpu: Mapping[str, float]
    """Process name -> CPU seconds during the step (controller from its own /metrics)."""
    controller_rss_bytes: float
    reconciles: float
    reconcile_seconds: float
    drift: int
    stale: int
    outcomes: Mapping[str, int] = field(default_factory=dict)
    breakdown: Breakdown = field(default_factory=Breakdown)
    """Where the controller's CPU went in the step (breakdown.py)."""
    targets_waited: float = 0.0
    """Migration target pods whose admission waited for their room (the webhook's count)."""
    target_wait_seconds: float = 0.0
    failed_creates: int = 0
    """Migrations whose target pod create failed at least once for another cause than quota
    refusing it (a quota admission Conflict, say), and that quota never refused: none is
    refused, yet virt-controller's rate limiter may hold the migration for minutes."""
    stalled_seconds: float = 0.0
    """Summed over those, seconds from the first failed create until the target pod was
    admitted (or the migration ended)."""
    since_request: tuple[float, ...] = ()
    """Seconds from each migration's create request being sent to its room seen on the quota:
    the create and the raise together, whichever writes the room."""
    target_admitted: tuple[float, ...] = ()
    """Seconds from each migration's create request being sent to its target pod admitted (as
    the run's KubeVirt watch saw it): what a migration waits for, end to end."""
    succeeded_after: tuple[float, ...] = ()
    """Seconds from each successful migration's create request being sent to its Succeeded
    phase (as the run's KubeVirt watch saw it)."""
    conflicted: int = 0
    """Migrations whose target pod create failed at least once on quota admission's Conflict
    (virt-controller's FailedCreate events, `record.is_conflict`), refused by quota or not."""
    conflict_events: int = 0
    """Those failed creates, all of them (an Event's count included)."""
    conflict_stalls: tuple[float, ...] = ()
    """Per conflicted migration, seconds from its first failed create until its target pod was
    admitted (or it ended)."""
    pod_create_409: float | None = None
    """Pod creates the API server answered 409 during the step, all namespaces
    (apiserver_request_total): the cross-check of `conflict_events`; None if not scraped."""
    writes: Mapping[str, float] = field(default_factory=dict)
    """Our controller's write requests during the step by kind (WRITE_KINDS), or Harvester's."""
    beside_writes: Mapping[str, float] = field(default_factory=dict)
    """With ours beside Harvester's own controllers: theirs during the step, by kind (from the
    audit log: harvester.metrics_of); empty otherwise."""
    run_namespace_writes: int | None = None
    """Our controller's accepted writes during the step in the run's quota namespaces, from the
    API server's audit log, by namespace: unlike `writes` (the controller's own counters, every
    namespace), nothing another namespace's migrations cause enters it. None for Harvester's arm
    or where the audit log could not be read."""
    by_twin: Mapping[str, MigrationTimes] = field(default_factory=dict)
    """Each migration's times by the key it shares with its twins (`migration_times`): what
    pairs a conflicted migration with its no-quota twin; empty where not measured."""
    timeline: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    """Per hop of a migration's timeline (timeline.HOPS), the seconds each migration of the step
    spent on it, sorted; empty where not measured (no audit log, Harvester's arm)."""
    timeline_counts: Mapping[str, int] = field(default_factory=dict)
    """The step's migrations with a timeline, those whose room was in status.hard before the
    first try at their target pod, and who made status.hard follow (timeline.counts)."""

    @property
    def not_raised(self) -> int:
        """Migrations whose room the run never saw (they fitted, or the raise was missed)."""
        return self.migrations - len(self.latencies)

    def p(self, fraction: float) -> float | None:
        return percentile(self.latencies, fraction)

    def per_migration(self, value: float) -> float:
        return value / self.migrations if self.migrations else 0.0

    def requests_by_verb(self) -> dict[str, float]:
        by_verb: dict[str, float] = {}
        for (verb, _), count in self.requests.items():
            by_verb[verb] = by_verb.get(verb, 0.0) + count
        return dict(sorted(by_verb.items()))

    def line(self) -> str:
        """One human line: what an operator watching the run wants to see."""
        p50, p99 = self.p(0.5), self.p(0.99)
        worst = max(self.latencies, default=None)
        return (
            f"{self.name}: {self.succeeded}/{self.migrations} succeeded in {self.seconds:.1f}s, "
            f"raise p50 {_ms(p50)} p99 {_ms(p99)} max {_ms(worst)}, {self.refused} refused "
            f"({self.blocked_seconds:.1f}s blocked), {self.failed_creates} failed creates "
            f"({self.stalled_seconds:.1f}s stalled), {self.conflicted} on a conflict "
            f"({self.conflict_events} events, {_count(self.pod_create_409)} pod creates 409), "
            f"{self.per_migration(self.quota_writes):.2f} writes/migration, controller "
            f"{1000 * self.per_migration(self.cpu.get('controller', 0.0)):.1f} ms CPU/migration, "
            f"{self.controller_rss_bytes / 2**20:.0f} MiB, drift {self.drift}, stale {self.stale}"
        )

    def breakdown_line(self) -> str:
        """The controller's CPU split and counts per migration, one human line."""
        return breakdown.line(self.breakdown, self.cpu.get("controller", 0.0), self.migrations)

    def breakdown_row(self) -> str:
        """The step as a row of `breakdown.table`."""
        return breakdown.row(
            self.name, self.breakdown, self.cpu.get("controller", 0.0), self.migrations
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "namespace_size": self.namespace_size,
            "migrations": self.migrations,
            "succeeded": self.succeeded,
            "outcomes": dict(self.outcomes),
            "raise_latency_ms": {
                **_spread_ms(self.latencies),
                "not_raised": self.not_raised,
                "all": [round(1000 * v, 1) for v in self.latencies],
            },
            "create_request_ms": _spread_ms(self.create_seconds),
            "target_admitted_after_create_sent_ms": _spread_ms(self.target_admitted),
            "succeeded_after_create_sent_ms": _spread_ms(self.succeeded_after),
            "room_after_create_sent_ms": _spread_ms(self.since_request),
            "reconciles": self.reconciles,
            "reconcile_ms_mean": _round_ms(self.reconcile_seconds / self.reconciles)
            if self.reconciles
            else None,
            "targets_waited": self.targets_waited,
            "target_wait_seconds": round(self.target_wait_seconds, 2),
            "refused": self.refused,
            "refusals": self.refusals,
            "blocked_seconds": round(self.blocked_seconds, 2),
            "failed_creates": self.failed_creates,
            "stalled_seconds": round(self.stalled_seconds, 2),
            "seconds": round(self.seconds, 2),
            "settle_seconds": round(self.settle_seconds, 2),
            "quota_writes_per_migration": round(self.per_migration(self.quota_writes), 3),
            "api_requests_per_migration_by_verb": {
                verb: round(self.per_migration(n), 3) for verb, n in self.requests_by_verb().items()
            },
            "api_requests_by_verb_and_resource": {
                f"{verb} {resource}": n for (verb, resource), n in sorted(self.requests.items())
            },
            "cpu_seconds": {k: round(v, 2) for k, v in sorted(self.cpu.items())},
            "controller_cpu_ms_per_migration": round(
                1000 * self.per_migration(self.cpu.get("controller", 0.0)), 2
            ),
            "controller_rss_mib": round(self.controller_rss_bytes / 2**20, 1),
            "controller_breakdown_per_migration": breakdown.to_json(
                self.breakdown, self.cpu.get("controller", 0.0), self.migrations
            ),
            "drift": self.drift,
            "stale_annotations": self.stale,
            "conflicted": self.conflicted,
            "conflict_events": self.conflict_events,
            "conflict_stall_seconds": [round(v, 2) for v in self.conflict_stalls],
            "pod_create_409": self.pod_create_409,
            "writes_per_migration_by_kind": {
                kind: round(self.per_migration(n), 3) for kind, n in sorted(self.writes.items())
            },
            "harvester_beside_writes_per_migration_by_kind": {
                kind: round(self.per_migration(n), 3)
                for kind, n in sorted(self.beside_writes.items())
            },
            "run_namespace_writes": self.run_namespace_writes,
            "timeline_ms": {hop: _spread_ms(spans) for hop, spans in self.timeline.items()},
            "timeline_counts": dict(self.timeline_counts),
            "migrations_by_twin": {
                key: times.to_json() for key, times in sorted(self.by_twin.items())
            },
        }


def summarize_step(
    step: Step,
    *,
    records: Sequence[MigrationRecord],
    latencies: Sequence[float],
    create_seconds: Sequence[float],
    since_request: Sequence[float] = (),
    target_admitted: Sequence[float] = (),
    succeeded_after: Sequence[float] = (),
    metrics: Metrics,
    cpu: Mapping[str, float],
    seconds: float,
    settle_seconds: float,
    drift: int,
    stale: int,
    pod_create_409: float | None = None,
    beside_writes: Mapping[str, float] | None = None,
    run_namespace_writes: int | None = None,
    by_twin: Mapping[str, MigrationTimes] | None = None,
    timeline: Mapping[str, tuple[float, ...]] | None = None,
    timeline_counts: Mapping[str, int] | None = None,
) -> StepResult:
    """The step's figures. `cpu` holds per-process CPU seconds read from /proc; the controller's
    comes from its own /metrics (`metrics.cpu_seconds`), which counts exactly its process."""
    outcomes: dict[str, int] = {}
    for record in records:
        key = record.outcome.value if record.outcome is not None else "unfinished"
        outcomes[key] = outcomes.get(key, 0) + 1
    blocked = [r.blocked_seconds for r in records if r.blocked_seconds is not None]
    # A migration quota refused is counted as refused only, even if a create of it also failed
    # otherwise (its blocked time runs from the first refusal): one column a migration.
    stalled_only = [r for r in records if r.failed_creates and not r.refusals]
    stalled = [r.stalled_seconds for r in stalled_only if r.stalled_seconds is not None]
    conflicted = [r for r in records if r.conflicts]
    return StepResult(
        name=step.name,
        namespace_size=step.namespace_size,
        migrations=len(step.migrations),
        succeeded=sum(1 for r in records if r.outcome is Outcome.SUCCEEDED),
        latencies=tuple(sorted(latencies)),
        create_seconds=tuple(sorted(create_seconds)),
        since_request=tuple(sorted(since_request)),
        target_admitted=tuple(sorted(target_admitted)),
        succeeded_after=tuple(sorted(succeeded_after)),
        refused=sum(1 for r in records if r.refusals),
        refusals=sum(r.refusals for r in records),
        blocked_seconds=sum(blocked),
        failed_creates=len(stalled_only),
        stalled_seconds=sum(stalled),
        seconds=seconds,
        settle_seconds=settle_seconds,
        quota_writes=metrics.quota_writes.get("written", 0.0),
        requests=dict(metrics.requests),
        cpu={**cpu, "controller": metrics.cpu_seconds},
        controller_rss_bytes=metrics.rss_bytes,
        reconciles=metrics.reconciles,
        reconcile_seconds=metrics.reconcile_seconds,
        targets_waited=metrics.targets_waited,
        target_wait_seconds=metrics.target_wait_seconds,
        drift=drift,
        stale=stale,
        outcomes=outcomes,
        breakdown=metrics.breakdown,
        conflicted=len(conflicted),
        conflict_events=sum(r.conflicts for r in conflicted),
        conflict_stalls=tuple(
            sorted(r.stalled_seconds for r in conflicted if r.stalled_seconds is not None)
        ),
        pod_create_409=pod_create_409,
        writes=dict(metrics.writes),
        beside_writes=dict(beside_writes or {}),
        run_namespace_writes=run_namespace_writes,
        by_twin=dict(by_twin or {}),
        timeline=dict(timeline or {}),
        timeline_counts=dict(timeline_counts or {}),
    )


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{1000 * value:.0f} ms"


def _round_ms(value: float | None) -> float | None:
    return None if value is None else round(1000 * value, 1)


def _spread_ms(values: Sequence[float]) -> dict[str, float | None]:
    """The p50, p99 and largest of `values` (seconds) in milliseconds; None where empty."""
    return {
        "p50": _round_ms(percentile(values, 0.5)),
        "p99": _round_ms(percentile(values, 0.99)),
        "max": _round_ms(max(values, default=None)),
    }


def table(steps: Sequence[StepResult]) -> str:
    """The steps as a Markdown table (the form bench/SCALE.md records)."""
    header = (
        "| step | done | raise p50 / p99 / max (ms) | create p50 / p99 (ms) "
        "| room after create sent p99 (ms) | target pod after create sent p50 / p99 (ms) "
        "| targets waited (s) | refused (s blocked) | failed creates (s stalled) | writes/mig "
        "| requests/mig by verb | controller CPU ms/mig | RSS MiB | apiserver / KCM / "
        "virt-controller CPU s | drift | stale |"
    )
    rows = [header, "|" + "---|" * 16]
    for s in steps:
        verbs = ", ".join(f"{v} {s.per_migration(n):.2f}" for v, n in s.requests_by_verb().items())
        rows.append(
            f"| {s.name} | {s.succeeded}/{s.migrations} "
            f"| {_num(s.p(0.5))} / {_num(s.p(0.99))} / {_num(max(s.latencies, default=None))} "
            f"| {_num(percentile(s.create_seconds, 0.5))} / {_num(percentile(s.create_seconds, 0.99))} "
            f"| {_num(percentile(s.since_request, 0.99))} "
            f"| {_num(percentile(s.target_admitted, 0.5))} / {_num(percentile(s.target_admitted, 0.99))} "
            f"| {s.targets_waited:.0f} ({s.target_wait_seconds:.1f}) "
            f"| {s.refused} ({s.blocked_seconds:.1f}) "
            f"| {s.failed_creates} ({s.stalled_seconds:.1f}) | {s.per_migration(s.quota_writes):.2f} "
            f"| {verbs or '-'} | {1000 * s.per_migration(s.cpu.get('controller', 0.0)):.1f} "
            f"| {s.controller_rss_bytes / 2**20:.0f} "
            f"| {s.cpu.get('kube-apiserver', 0.0):.1f} / {s.cpu.get('kube-controller-manager', 0.0):.1f}"
            f" / {s.cpu.get('virt-controller', 0.0):.1f} | {s.drift} | {s.stale} |"
        )
    return "\n".join(rows)


def breakdown_table(steps: Sequence[StepResult]) -> str:
    """Where the controller's CPU went, per step and migration, as a Markdown table."""
    return breakdown.table(step.breakdown_row() for step in steps)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{1000 * value:.0f}"


# The baseline: the same steps without a quota -----------------------------------------------------

USER_FELT: Final = (
    ("target admitted p50", lambda s: percentile(s.target_admitted, 0.5)),
    ("target admitted p99", lambda s: percentile(s.target_admitted, 0.99)),
    ("Succeeded p50", lambda s: percentile(s.succeeded_after, 0.5)),
    ("Succeeded p99", lambda s: percentile(s.succeeded_after, 0.99)),
    ("wall", lambda s: s.seconds),
)
"""What users feel of a step, each from the migration's create request being sent: its target pod
admitted, its Succeeded phase (p50 and p99 over the step's migrations), and the step's wall time
(first create until every migration had an outcome)."""


def _ratio(ours: float | None, baseline: float | None) -> float | None:
    if ours is None or baseline is None or baseline <= 0:
        return None
    return ours / baseline


def baseline_ratios(
    steps: Sequence[StepResult], baselines: Sequence[StepResult]
) -> list[dict[str, Any]]:
    """Per step, each user-felt figure (seconds) with quota, without, and their ratio (with /
    without: 1.0 means the quota cost nothing); `baselines` pairs with `steps` by position."""
    rows = []
    for ours, baseline in zip(steps, baselines, strict=False):
        figures = {}
        for name, figure in USER_FELT:
            mine, theirs = figure(ours), figure(baseline)
            ratio = _ratio(mine, theirs)
            figures[name] = {
                "quota_s": None if mine is None else round(mine, 3),
                "no_quota_s": None if theirs is None else round(theirs, 3),
                "ratio": None if ratio is None else round(ratio, 3),
            }
        rows.append({"step": ours.name, **figures})
    return rows


def baseline_table(steps: Sequence[StepResult], baselines: Sequence[StepResult]) -> str:
    """The baseline ratios as a Markdown table: per step and figure, seconds with the quota /
    without any quota, and the ratio."""
    names = [name for name, _ in USER_FELT]
    rows = [
        "| step | " + " | ".join(f"{n} s (quota / none = ratio)" for n in names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for row in baseline_ratios(steps, baselines):
        cells = []
        for name in names:
            one = row[name]
            ratio = "-" if one["ratio"] is None else f"**{one['ratio']:.2f}**"
            cells.append(f"{_seconds(one['quota_s'])} / {_seconds(one['no_quota_s'])} = {ratio}")
        rows.append(f"| {row['step']} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


# The arms: the same steps with our quota (or Harvester's), without any, with one nobody writes --

ARM_OURS: Final = "ours"
ARM_HARVESTER: Final = "Harvester's"
ARM_NONE: Final = "no quota"
ARM_HEADROOM: Final = "headroom, no controller"
WRITE_COLUMNS: Final = ("spec", "status", "label", "rancher", "vmi", "vm")
"""The kinds of write the arms table gives per migration, in its order (config.metrics'
WRITE_KINDS)."""


def arm_rows(arms: Mapping[str, Sequence[StepResult]]) -> list[dict[str, Any]]:
    """Per step (by position) and arm (in `arms`' order), what shows whether our quota writes
    collide with quota admission's: migrations,
    failed creates on a Conflict (migrations, events), the API server's 409 pod creates, the
    stall (sum and largest), writes per migration by kind, p50/p99 Succeeded and their ratio to
    the ARM_NONE arm's same step (None without it)."""
    baseline = arms.get(ARM_NONE, ())
    rows: list[dict[str, Any]] = []
    for index in range(max((len(steps) for steps in arms.values()), default=0)):
        none = baseline[index] if index < len(baseline) else None
        for arm, steps in arms.items():
            if index < len(steps):
                rows.append(_arm_row(arm, steps[index], none))
    return rows


def _arm_row(arm: str, step: StepResult, none: StepResult | None) -> dict[str, Any]:
    p50, p99 = percentile(step.succeeded_after, 0.5), percentile(step.succeeded_after, 0.99)
    none_p50 = None if none is None else percentile(none.succeeded_after, 0.5)
    none_p99 = None if none is None else percentile(none.succeeded_after, 0.99)
    return {
        "step": step.name,
        "arm": arm,
        "migrations": step.migrations,
        "succeeded": step.succeeded,
        "conflicted": step.conflicted,
        "conflict_events": step.conflict_events,
        "pod_create_409": step.pod_create_409,
        "stall_seconds": round(sum(step.conflict_stalls), 2),
        "stall_max_seconds": round(max(step.conflict_stalls, default=0.0), 2),
        "writes_per_migration": {
            kind: round(step.per_migration(step.writes.get(kind, 0.0)), 3) for kind in WRITE_COLUMNS
        },
        "harvester_beside_writes_per_migration": {
            kind: round(step.per_migration(count), 3) for kind, count in step.beside_writes.items()
        },
        "succeeded_p50_s": p50,
        "succeeded_p99_s": p99,
        "ratio_p50": _ratio(p50, none_p50),
        "ratio_p99": _ratio(p99, none_p99),
    }


def arms_table(arms: Mapping[str, Sequence[StepResult]]) -> str:
    """`arm_rows` as a Markdown table: one row per step and arm."""
    rows = [
        "| step | arm | done | failed creates on a conflict (migrations, events) "
        "| 409 pod creates (API server) | stall s (sum / max) "
        "| writes/mig spec / status / label / rancher / VMI / VM "
        "| Succeeded p50 / p99 s | ratio to no quota p50 / p99 |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for row in arm_rows(arms):
        writes = " / ".join(f"{v:.2f}" for v in row["writes_per_migration"].values())
        api_409 = "-" if row["pod_create_409"] is None else f"{row['pod_create_409']:.0f}"
        rows.append(
            f"| {row['step']} | {row['arm']} | {row['succeeded']}/{row['migrations']} "
            f"| {row['conflicted']} ({row['conflict_events']}) | {api_409} "
            f"| {row['stall_seconds']:.1f} / {row['stall_max_seconds']:.1f} | {writes} "
            f"| {_seconds(row['succeeded_p50_s'])} / {_seconds(row['succeeded_p99_s'])} "
            f"| {_ratio_text(row['ratio_p50'])} / {_ratio_text(row['ratio_p99'])} |"
        )
    return "\n".join(rows)


def beside_table(arms: Mapping[str, Sequence[StepResult]]) -> str:
    """Per step and arm, Harvester's own writes per migration beside ours (`beside_writes`) and
    the quota writes of both together, as a Markdown table."""
    rows = [
        "| step | arm | Harvester's writes/mig spec / VMI / VM | quota writes/mig ours + Harvester's |",
        "|---|---|---|---:|",
    ]
    for arm, steps in arms.items():
        for step in steps:
            theirs = [step.per_migration(step.beside_writes.get(k, 0.0)) for k in BESIDE_COLUMNS]
            ours = step.per_migration(step.writes.get("spec", 0.0) + step.writes.get("status", 0.0))
            rows.append(
                f"| {step.name} | {arm} | {' / '.join(f'{v:.2f}' for v in theirs)} "
                f"| {ours:.2f} + {theirs[0]:.2f} |"
            )
    return "\n".join(rows)


BESIDE_COLUMNS: Final = ("spec", "vmi", "vm")
"""Harvester's write kinds (harvester.WRITE_KIND_OF: it writes no quota status nor namespace)."""


def _ratio_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
