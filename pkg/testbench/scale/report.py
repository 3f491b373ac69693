"""A scale run's report files: report.json, the Markdown table, and scale.png.

scale.png has two panels: the distribution of VMIM-to-raise latency per step (a CDF, with the
100 ms target marked) and the controller's CPU per migration per step. matplotlib is the
``report`` extra; without it the report says how to get the plot.
"""

from __future__ import annotations

import json
import logging
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Final

from . import timeline
from .run import ScaleReport
from .stats import (
    ARM_HARVESTER,
    ARM_OURS,
    arms_table,
    baseline_table,
    beside_table,
    breakdown_table,
    table,
)

log = logging.getLogger(__name__)

TARGET_P99_MS: Final = 100.0
SOURCE: Final = Path(__file__).resolve().parent
GIT_TIMEOUT_SECONDS: Final = 10.0
"""Two local git commands; a checkout that takes longer is broken, and the run goes on without."""
PLOT_MISSING: Final = (
    "no scale.png: matplotlib is not installed; pip install 'harvester-quota[report]' to get it"
)


def write(report: ScaleReport, directory: Path, *, command: str, commit: str | None = None) -> Path:
    """Writes report.json, report.md and scale.png into `directory`; returns report.md's path.
    `commit` (`source_commit`) goes into report.json, so that runs of different code are told
    apart (bench/scaleruns.py)."""
    directory.mkdir(parents=True, exist_ok=True)
    data = {"command": command, "commit": commit, **report.to_json()}
    (directory / "report.json").write_text(json.dumps(data, indent=2) + "\n")
    markdown = render_markdown(report, command)
    note = plot(report, directory / "scale.png")
    if note is not None:
        markdown += f"\n{note}\n"
    (directory / "report.md").write_text(markdown)
    return directory / "report.md"


def source_commit(directory: Path = SOURCE) -> str | None:
    """The commit of the git checkout holding `directory` (by default this package's source),
    with ``+dirty`` when a tracked file differs from it; None (logged) outside a checkout or
    without git."""
    try:
        head = _git(directory, "rev-parse", "HEAD")
        changed = _git(directory, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError) as error:
        log.warning("the run's commit is unknown (%s): report.json says null", error)
        return None
    return head.strip() + ("+dirty" if changed.strip() else "")


def _git(directory: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(directory), *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=GIT_TIMEOUT_SECONDS,
    ).stdout


def render_markdown(report: ScaleReport, command: str) -> str:
    plan = report.plan
    lines = [
        f"`{command}`",
        "",
        *_who_line(report),
        f"{plan.nodes} kwok nodes, {plan.vms} VMs in {len(plan.namespaces)} namespaces "
        f"(largest {max(plan.namespaces)}), {plan.in_flight} migrations in flight per drain "
        f"wave; setup {report.setup_seconds:.0f} s ({report.vms_running} VMs running).",
        "",
        table(report.steps),
        "",
        *_arms_section(report),
        *_beside_section(report),
        *_breakdown_section(report),
        *_baseline_section(report),
        *_timeline_section(report),
        f"End: all done {report.all_done}, drift {len(report.drift)} namespaces, stale "
        f"annotations {len(report.stale)} namespaces, controller RSS "
        f"{report.controller_rss_bytes / 2**20:.0f} MiB.",
        "",
        *([report.failover.line().capitalize() + ".", ""] if report.failover else []),
    ]
    return "\n".join(lines)


def _who_line(report: ScaleReport) -> list[str]:
    """Who kept the quotas, and beside what."""
    if report.strategy == "harvester":
        return [
            f"Harvester {report.harvester_version}'s own controllers keep the quotas (no "
            "webhook), not the product; their writes are counted from the API server's audit "
            "log.",
            "",
        ]
    if report.harvester_version:
        return [
            f"Our controller and webhook, beside Harvester {report.harvester_version}'s own "
            "controllers (quotas adopted); the writes are ours only.",
            "",
        ]
    return []


def _arms_section(report: ScaleReport) -> list[str]:
    """Per step and arm, the conflicts, stalls and writes that show whether our
    quota writes collide with quota admission's (empty for a run of
    the quota arm alone)."""
    arms = report.arms()
    if len(arms) < 2:
        return []
    quota = "Harvester's controllers" if report.strategy == "harvester" else "our controller"
    return [
        f"Per step and arm: the quota arm is {quota} (the other strategy's arm is a run of its "
        "own, `--strategy`, on the same kept cluster); 'no quota' and 'headroom, no controller' "
        "are twins of the same VMs without a quota and with one nobody writes. Failed creates "
        "on a conflict are virt-controller's FailedCreate events in the arm's namespaces; 409 "
        "pod creates are the API server's own count over the step (all namespaces); the stall "
        "runs from a migration's first failed create to its target pod admitted; writes are "
        "the quota arm's controller's requests during the step (Harvester's: its write "
        "requests in the audit log, in every namespace):",
        "",
        arms_table(arms),
        "",
    ]


def _timeline_section(report: ScaleReport) -> list[str]:
    """Per step, arm and hop of a migration's timeline (timeline.py), p50 and p99."""
    arms = report.arms()
    quota = ARM_HARVESTER if report.strategy == "harvester" else ARM_OURS
    rendered = timeline.table(quota, arms)
    if not rendered:
        return []
    return [
        "A migration's timeline per step and arm, from the API server's audit log (requests "
        "received and completed), the webhook's log and the run's KubeVirt watch: its create, "
        "our raise, the quota's status.hard following it, virt-controller's first and accepted "
        "target pod create, the webhook's answer, the pod admitted, the migration Succeeded:",
        "",
        rendered,
        "",
    ]


def _beside_section(report: ScaleReport) -> list[str]:
    """Harvester's own writes per step and arm, in a run of ours beside its controllers."""
    if report.strategy == "harvester" or not report.harvester_version:
        return []
    return [
        f"Harvester {report.harvester_version}'s own controllers beside ours, their write "
        "requests per migration during each step (the audit log; every namespace):",
        "",
        beside_table(report.arms()),
        "",
    ]


def _breakdown_section(report: ScaleReport) -> list[str]:
    """Where the controller's CPU went, per step and migration (and in the twins, if any)."""
    if not report.has_breakdown:
        return []  # the split is our controller's accounting: off, or Harvester's process
    steps = list(report.steps)
    if report.baseline_steps:
        steps += [replace(s, name=f"{s.name} (no quota)") for s in report.baseline_steps]
    return [
        "Where the controller's CPU went, per migration (watch: its watch streams' read, decode "
        "and store, and the informers' handlers queueing keys; handlers: its reconciles and "
        "annotations, their requests' client side "
        "included; other: the rest of the process):",
        "",
        breakdown_table(steps),
        "",
    ]


def _baseline_section(report: ScaleReport) -> list[str]:
    """The same steps in namespaces without any quota, and what users feel of each with the
    quota against without (empty for a run without a baseline)."""
    if not report.baseline_steps:
        return []
    whose = "Harvester's" if report.strategy == "harvester" else "our"
    return [
        "The same steps in twin namespaces without any ResourceQuota (the baseline):",
        "",
        table(report.baseline_steps),
        "",
        f"What users feel, from each migration's create request: with {whose} quota / without "
        "any quota = ratio (1.00: the quota cost nothing):",
        "",
        baseline_table(report.steps, report.baseline_steps),
        "",
    ]


def plot(report: ScaleReport, path: Path) -> str | None:
    """Draws scale.png; returns why not when matplotlib is missing."""
    try:
        import matplotlib  # noqa: PLC0415 - heavy, only needed here
    except ImportError:
        log.warning(PLOT_MISSING)
        return PLOT_MISSING
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    figure, (cdf, cpu) = plt.subplots(1, 2, figsize=(12, 4.5))
    for step in report.steps:
        values = [1000 * v for v in step.latencies]
        if values:
            fractions = [(i + 1) / len(values) for i in range(len(values))]
            cdf.step(values, fractions, where="post", label=step.name)
    cdf.axvline(TARGET_P99_MS, color="tab:red", linestyle="--", linewidth=1, label="100 ms")
    cdf.set_xscale("log")
    cdf.set_xlabel("VMIM created -> room raised (ms, log)")
    cdf.set_ylabel("fraction of the step's migrations")
    cdf.grid(alpha=0.3)
    cdf.legend(fontsize=8)
    names = [step.name for step in report.steps]
    cpu.bar(names, [1000 * s.per_migration(s.cpu.get("controller", 0.0)) for s in report.steps])
    cpu.set_ylabel("controller CPU per migration (ms)")
    cpu.tick_params(axis="x", labelrotation=30, labelsize=8)
    cpu.grid(alpha=0.3, axis="y")
    plan = report.plan
    figure.suptitle(
        f"scale run: {plan.nodes} nodes, {plan.vms} VMs, {plan.in_flight} in flight", fontsize=11
    )
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return None
