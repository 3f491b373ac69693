"""A preflight report for a person (text: the summary line first, then blockers, colour only on
a terminal) or for a program (JSON, `PreflightReport.as_dict`)."""

from __future__ import annotations

from typing import Final

import orjson

from ..util.quantity import Quantity
from .report import (
    UPGRADE_SHUTS_DOWN,
    UPGRADE_STALLS,
    Delay,
    PreflightReport,
    Step,
    VmVerdict,
)

_RED: Final = "\033[31m"
_YELLOW: Final = "\033[33m"
_GREEN: Final = "\033[32m"
_BOLD: Final = "\033[1m"
_RESET: Final = "\033[0m"


def render_json(report: PreflightReport) -> str:
    return orjson.dumps(report.as_dict(), option=orjson.OPT_INDENT_2).decode() + "\n"


def duration(seconds: float) -> str:
    """`1h02m`, `3m20s`, `12s`."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def summary(report: PreflightReport) -> str:
    vms = report.vms
    blocked = report.blocked
    shut = [vm for vm in vms if vm.action == "shutdown"]
    moving = [vm for vm in vms if vm.action == "migrate" and not vm.blocked]
    waves = sum(len(step.waves) for step in report.steps)
    nodes = ", ".join(n for step in report.steps for n in step.nodes)
    head = f"preflight {report.operation} {nodes}: "
    stalls = report.stalls_harvester_upgrade
    delayed = report.delayed
    if blocked:
        verdict = f"BLOCKED, {len(blocked)} of {len(vms)} VMs will not move"
    elif stalls:
        verdict = f"BLOCKED, {len(stalls)} of {len(vms)} VMs stall Harvester's upgrade"
    elif delayed:
        verdict = f"DELAYED, nothing blocks for good ({len(vms)} VMs)"
    else:
        verdict = f"OK, nothing blocks ({len(vms)} VMs)"
    if delayed:
        waits = [vm for vm in delayed if vm.delay is not None and vm.delay.cause == "project"]
        verdict += (
            f"; {len(delayed)} target pods wait for quota until a source launcher exits"
            + (
                f" ({len(waits)} behind sibling namespaces' migrations for their Rancher "
                "project's room)"
                if waits
                else ""
            )
            + f", up to {duration(report.delayed_seconds_at_most)} in all"
        )
    plural = "wave" if waves == 1 else "waves"
    tail = (
        f"; {len(moving)} migrate in {waves} {plural}, about {duration(report.estimated_seconds)}"
    )
    tail += " (estimate)"
    if shut:
        tail += f"; {len(shut)} shut down"
    return head + verdict + tail + f" [strategy {report.strategy}]"


def render_text(report: PreflightReport, *, colour: bool = False) -> str:
    """Summary, blockers, shutdowns, the moves by step and wave, then the settings used."""

    def paint(text: str, code: str) -> str:
        return f"{code}{text}{_RESET}" if colour else text

    first = summary(report)
    tone = _RED if report.blocks else _YELLOW if report.delayed else _GREEN
    lines = [paint(first, _BOLD + tone)]
    for vm in report.blocked:
        lines.append(paint(f"BLOCKED {vm.key} on {vm.node}", _RED))
        for blocker in vm.blockers:
            lines.append(f"  {blocker.cause}: {blocker.message}")
            lines.append(f"    fix: {blocker.fix}")
    for vm in report.vms:
        if vm.action in ("shutdown", "external"):
            what = "SHUT DOWN" if vm.action == "shutdown" else "EXTERNAL"
            why = f"evictionStrategy {vm.eviction_strategy} (from {vm.eviction_strategy_from})"
            if not vm.live_migratable:
                why += f", not live-migratable: {vm.migratable_reason}"
            lines.append(paint(f"{what} {vm.key} on {vm.node}: {why}", _YELLOW))
    for vm in report.vms:
        if vm.delay is not None:
            lines.append(paint(f"DELAYED {vm.key} on {vm.node}", _YELLOW))
            lines.append(_delay_line(vm.delay))
    for vm in report.vms:
        lines.extend(paint(f"NOTE {vm.key}: {note}", _YELLOW) for note in vm.notes)
    for vm in report.vms:
        if vm.harvester_upgrade in (UPGRADE_STALLS, UPGRADE_SHUTS_DOWN):
            stalls = vm.harvester_upgrade == UPGRADE_STALLS
            line = f"HARVESTER UPGRADE {vm.key}: {vm.harvester_upgrade_says}"
            lines.append(paint(line, _RED if stalls else _YELLOW))
    for step in report.steps:
        lines.extend(_step_lines(step, report.operation))
    lines.append(
        "limits: "
        + ", ".join(f"{k} {v}" for k, v in report.limits.items() if k != "bandwidthPerMigration")
        + f", bandwidthPerMigration {Quantity.from_int(report.limits['bandwidthPerMigration'], 'BinarySI')}/s"
    )
    lines.append(f"strategy: {report.strategy} ({report.strategy_reason})")
    if report.order_reason:
        lines.append(f"order: {report.order_reason}")
    lines.extend(f"warning: {w}" for w in report.warnings)
    return "\n".join(lines) + "\n"


def _step_lines(step: Step, operation: str) -> list[str]:
    title = ", ".join(step.nodes)
    if not step.vms:
        return [f"{operation} {title}: no running VMs"]
    if not step.waves:
        return [f"{operation} {title}: no live migration"]
    lines = [f"{operation} {title}: {duration(step.estimated_seconds)} (estimate)"]
    by_key = {vm.key: vm for vm in step.vms}
    for number, wave in enumerate(step.waves, start=1):
        moves = ", ".join(_move(by_key[key]) for key in wave)
        lines.append(f"  wave {number}: {moves}")
    return lines


def _move(vm: VmVerdict) -> str:
    memory = Quantity.from_int(vm.memory_bytes, "BinarySI")
    return f"{vm.key} -> {vm.target_node} ({memory}, priority {vm.migration_priority})"


def _delay_line(delay: Delay) -> str:
    """Why a delayed VM waits, and how long at most."""
    if delay.cause == "project":
        return (
            f"  project: {delay.message}; up to {duration(delay.wait_seconds_at_most)} if those "
            "move at once"
        )
    return (
        f"  quota: {delay.message}; waits for {delay.rounds} source launcher exit(s), "
        f"up to {duration(delay.wait_seconds_at_most)}"
    )
