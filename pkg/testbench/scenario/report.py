"""What a scenario run shows: report.json, timeline.png, the invariants and the expectations
(and, for strategy ``ours``, metrics.prom: exposition.py).

report.json holds, per migration, its outcome and the seconds it was blocked by quota; per quota,
its base, final hard, highest hard and usage; the quota writes per migration; and the invariants
every run must keep with our strategy: the final hard equals the base, no stale annotation is
left, every migration finished. timeline.png draws hard, used and base over time for each quota
key, with each migration's span marked.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from ...generic.meta import annotations_of
from ...util import resources
from ...util.quantity import Quantity
from ...util.resourcequota.base import (
    ANNOTATION_RANCHER_APPLIED,
    ANNOTATION_RANCHER_BASE,
    ANNOTATION_RANCHER_GIVEN,
)
from ...util.resources import ResourceList
from ..sim.kubevirt.record import MigrationRecord
from .evidence import changes, facts_of
from .runner import STALE_PREFIXES, RunResult
from .schema import UNFINISHED

RANCHER_RECORDS = (ANNOTATION_RANCHER_BASE, ANNOTATION_RANCHER_APPLIED, ANNOTATION_RANCHER_GIVEN)
"""Our records of a raise through Rancher's annotation: stale once every migration is done."""
METRICS_FILE = "metrics.prom"
"""Beside report.json: the run's processes' Prometheus text (RunResult.metrics)."""


def _parse(mapping: dict[str, str]) -> ResourceList:
    try:
        return resources.parse_resource_list(mapping)
    except ValueError:
        return {}


def _migration(record: MigrationRecord, result: RunResult) -> dict[str, Any]:
    def at(moment: Any) -> float | None:
        return None if moment is None else round(moment.mono - result.started, 2)

    blocked = record.blocked_seconds
    return {
        "vm": record.vmi,
        "namespace": result.original(record.namespace),
        "migration": record.name,
        "outcome": record.outcome.value if record.outcome is not None else UNFINISHED,
        "blocked_seconds": round(blocked, 2) if blocked is not None else None,
        "refusals": record.refusals,
        "first_refusal": record.refusal_messages[0] if record.refusal_messages else None,
        "created_at": at(record.created),
        "admitted_at": at(record.admitted),
        "finished_at": at(record.finished),
        "source_pod_gone_at": at(record.source_pod_gone),
    }


def _quota(name: str, result: RunResult) -> dict[str, Any]:
    samples = [s for s in result.samples if s.namespace == name]
    final = result.final_quotas.get(name) or {}
    base = _parse(samples[-1].base) if samples else {}
    highest: ResourceList = {}
    for sample in samples:
        highest = resources.maximum(highest, _parse(sample.hard))
    hard = _parse((final.get("spec") or {}).get("hard") or {})
    stale = sorted(
        k
        for k in ((final.get("metadata") or {}).get("annotations") or {})
        if k.startswith(STALE_PREFIXES)
    )
    namespace_annotations = annotations_of(result.final_namespaces.get(name))
    stale += [f"namespace {k}" for k in RANCHER_RECORDS if k in namespace_annotations]
    return {
        "base": resources.to_json_dict(base),
        "final_hard": resources.to_json_dict(hard),
        "highest_hard": resources.to_json_dict(highest),
        "used": dict((final.get("status") or {}).get("used") or {}),
        "final_hard_equals_base": bool(base)
        and all(k in hard and hard[k] == v for k, v in base.items()),
        "drift": {k: str(hard[k] - v) for k, v in base.items() if k in hard and hard[k] != v},
        "stale_annotations": stale,
        "writes": result.writes.get(name, 0),
    }


def build_report(result: RunResult) -> dict[str, Any]:
    migrations = [_migration(record, result) for record in result.migrations]
    quotas = {name: _quota(name, result) for name in result.namespaces}
    per_namespace = {
        name: sum(1 for m in migrations if m["namespace"] == name) for name in result.namespaces
    }
    writes = {
        name: {
            "writes": result.writes.get(name, 0),
            "setup_writes": result.setup_writes.get(name, 0),
            "migrations": count,
            "per_migration": round(result.writes.get(name, 0) / count, 2) if count else None,
        }
        for name, count in per_namespace.items()
    }
    invariants = {
        "final_hard_equals_base": all(q["final_hard_equals_base"] for q in quotas.values()),
        "no_stale_annotation": all(not q["stale_annotations"] for q in quotas.values()),
        "every_migration_finished": all(m["outcome"] != UNFINISHED for m in migrations),
    }
    expected = result.scenario.expectations(result.strategy)
    checks = check_expectations(expected, migrations, quotas, writes, result)
    return {
        "scenario": result.scenario.name,
        "file": str(result.scenario.path),
        "strategy": result.strategy,
        "kubevirt": result.kubevirt,
        "run_id": result.run_id,
        "seconds": round(result.seconds, 1),
        "migrations": migrations,
        "quotas": quotas,
        "quota_writes": writes,
        "writers": result.writers.as_report() if result.writers is not None else None,
        "vm_starts": result.vm_starts,
        "preflights": result.preflights,
        "invariants": invariants,
        "expectations": checks,
        "ok": all(check["ok"] for check in checks),
        "step_errors": result.step_errors,
        "events": [{"at": round(at, 2), "what": what} for at, what in result.events],
        "evidence": evidence(result),
    }


def evidence(result: RunResult) -> dict[str, Any]:
    """What explains a failure (evidence.py): who raised what over time, the final look and
    when it was taken, Rancher's agent's quota writes, and our controllers' log lines."""
    return {
        "final_at": round(result.final_at, 2),
        "final_namespaces": {
            name: facts_of(namespace, result.final_quotas.get(name))
            for name, namespace in result.final_namespaces.items()
        },
        "timeline": changes(result.looks),
        "rancher_actions": result.rancher_actions,
        "log": result.log,
    }


def check_expectations(
    expected: dict[str, Any],
    migrations: list[dict[str, Any]],
    quotas: dict[str, dict[str, Any]],
    writes: dict[str, dict[str, Any]],
    result: RunResult,
) -> list[dict[str, Any]]:
    checks: list[dict[str, Any]] = []

    def check(name: str, want: Any, actual: Any, ok: bool) -> None:
        checks.append({"expectation": name, "expected": want, "actual": actual, "ok": ok})

    for key, want in expected.items():
        if key == "outcome":
            if isinstance(want, str):
                outcomes = sorted({m["outcome"] for m in migrations})
                check(key, want, outcomes, bool(migrations) and outcomes == [want])
            else:
                for vm, outcome in want.items():
                    last = [m["outcome"] for m in migrations if m["vm"] == vm]
                    check(
                        f"outcome of {vm}",
                        outcome,
                        last[-1] if last else None,
                        bool(last) and last[-1] == outcome,
                    )
        elif key == "quota_at_base":
            actual = all(q["final_hard_equals_base"] for q in quotas.values())
            check(key, want, actual, actual == want)
        elif key == "no_stale_annotations":
            actual = all(not q["stale_annotations"] for q in quotas.values())
            check(key, want, actual, actual == want)
        elif key == "max_blocked_seconds":
            values = [m["blocked_seconds"] for m in migrations]
            worst = max((v for v in values if v is not None), default=0.0)
            never_unblocked = any(v is None for v in values)
            check(
                key,
                want,
                "still blocked" if never_unblocked else worst,
                not never_unblocked and worst <= want,
            )
        elif key == "min_blocked_migrations":
            blocked = sum(
                1 for m in migrations if m["blocked_seconds"] is None or m["blocked_seconds"] > 0
            )
            check(key, want, blocked, blocked >= want)
        elif key == "max_writes_per_migration":
            worst = max(
                (w["per_migration"] for w in writes.values() if w["per_migration"] is not None),
                default=0.0,
            )
            check(key, want, worst, worst <= want)
        elif key == "vm_start_refused":
            refused = sorted(vm for vm, refusal in result.vm_starts.items() if refusal)
            check(key, want, refused, set(want) <= set(refused))
    return checks


def write(result: RunResult, directory: Path) -> dict[str, Any]:
    """Writes report.json, timeline.png and, when the strategy exported metrics (``ours``),
    metrics.prom (its processes' Prometheus text, bench/metricdump.py compares two) into
    ``directory``; returns the report."""
    directory.mkdir(parents=True, exist_ok=True)
    report = build_report(result)
    (directory / "report.json").write_text(json.dumps(report, indent=2))
    if result.metrics is not None:
        (directory / METRICS_FILE).write_text(result.metrics)
    note = plot_timeline(result, directory / "timeline.png")
    if note:
        report["timeline"] = note
        (directory / "report.json").write_text(json.dumps(report, indent=2))
    return report


def _plot_value(key: str, quantity: Quantity) -> float:
    """CPU in cores, memory and storage in GiB, counts as they are."""
    if "cpu" in key:
        return quantity.milli_value() / 1000
    if "memory" in key or "storage" in key:
        return quantity.value() / 2**30
    return float(quantity.value())


def _unit(key: str) -> str:
    return "cores" if "cpu" in key else "GiB" if ("memory" in key or "storage" in key) else "count"


log = logging.getLogger(__name__)

PLOT_MISSING = (
    "no timeline.png: matplotlib is not installed; "
    "pip install 'harvester-quota[report]' to get the plot"
)


def plot_timeline(result: RunResult, path: Path) -> str | None:
    """Draws the quota timeline; returns why there is none when matplotlib (the `report` extra,
    not a dependency of the sidecar) is not installed, so the report says how to get it."""
    try:
        import matplotlib  # noqa: PLC0415 - heavy, only needed here
    except ImportError:
        log.warning(PLOT_MISSING)
        return PLOT_MISSING
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    panels = [
        (name, key)
        for name in result.namespaces
        for key in sorted(
            _parse(next((s.base for s in reversed(result.samples) if s.namespace == name), {}))
        )
    ]
    if not panels:
        return None
    figure, axes = plt.subplots(
        len(panels), 1, figsize=(10, 2.6 * len(panels)), sharex=True, squeeze=False
    )
    for axis, (name, key) in zip(axes[:, 0], panels, strict=True):
        samples = [s for s in result.samples if s.namespace == name]
        times = [s.at for s in samples]
        for label, attribute, style in (
            ("hard", "hard", "-"),
            ("used", "used", "-"),
            ("base", "base", "--"),
        ):
            values = [
                _plot_value(key, q)
                if (q := _parse(getattr(s, attribute)).get(key)) is not None
                else float("nan")
                for s in samples
            ]
            axis.step(
                times,
                values,
                style,
                where="post",
                label=label,
                linewidth=1.6 if label == "hard" else 1.2,
            )
        for record in result.migrations:
            if result.original(record.namespace) != name:
                continue
            start = record.created.mono - result.started
            end = (
                record.source_pod_gone or record.finished or record.created
            ).mono - result.started
            axis.axvspan(start, max(end, start + 0.2), alpha=0.08, color="tab:purple")
            if record.admitted is not None:
                axis.axvline(
                    record.admitted.mono - result.started,
                    color="tab:green",
                    linewidth=0.6,
                    alpha=0.6,
                )
        axis.set_ylabel(f"{key}\n({_unit(key)})", fontsize=8)
        axis.set_title(f"{name}: {key}", fontsize=9, loc="left")
        axis.grid(alpha=0.3)
    axes[0, 0].legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel(
        "seconds since the scenario started (shaded: a migration holding room; green: target admitted)"
    )
    figure.suptitle(f"{result.scenario.name} — strategy: {result.strategy}", fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return None
