"""What a preflight reports: the report as plain data, and its renderings for a person (text:
the summary line first, then blockers, colour only on a terminal) or for a program (JSON,
`PreflightReport.as_dict`).

Contract: every list is in a fixed order (steps in the order the nodes are taken, VMs by
namespace then name, blockers in the order they were found), so two runs on the same cluster
state give the same report.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import orjson

from ..util.quantity import Quantity

SCHEMA_VERSION: Final = 1
"""Bumped when a field of the JSON form changes meaning or goes away (fields may be added)."""

Action = Literal["migrate", "shutdown", "blocks-drain", "external"]
"""What KubeVirt does with the VMI when its node is drained: live-migrate it; shut it down (its
VM's runStrategy may restart it elsewhere); refuse the launcher's eviction so the drain hangs
(LiveMigrate on a VMI that cannot migrate); or leave it to an external controller."""
Cause = Literal["not-migratable", "quota", "node-fit"]
DelayCause = Literal["quota", "project"]
UPGRADE_MIGRATES: Final = "live-migrates"
UPGRADE_SHUTS_DOWN: Final = "shut-down"
UPGRADE_STALLS: Final = "stalls-pre-drain"
"""What Harvester's upgrade does with a VM (compute.py `note_upgrade_outcomes`)."""


@dataclass
class QuotaShortfall:
    """One key of one quota the target pod does not fit under, with the room the strategy gives."""

    quota: str
    key: str
    needed: str
    used: str
    hard: str
    """spec.hard as the strategy would make it for this migration (its raise included)."""
    short_by: str


@dataclass
class Blocker:
    """Why a VM will not move: the cause, a sentence with the figures, and what fixes it."""

    cause: Cause
    message: str
    fix: str
    shortfalls: list[QuotaShortfall] = field(default_factory=list)
    quotas: list[str] = field(default_factory=list)
    """For a quota blocker, the quotas whose admission refuses the target pod (a raise the
    Rancher project has no room for leaves the managed quota refusing it)."""


@dataclass
class Delay:
    """Why a VM's target pod, which fits alone, waits for quota next to the other migrations of
    its namespace, and for how long at most (delays.py): it moves in the end, late."""

    message: str
    quotas: list[str]
    rounds: int
    """How many source launchers' exits (one after the other) it waits for."""
    wait_seconds_at_most: float
    """rounds x (a migration's copy + a source launcher's grace period): an upper bound (for
    a `project` wait, the sum of the awaited migrations' copy and grace, if they run)."""
    cause: DelayCause = "quota"
    """What it waits for: `quota` (the target pods of its namespace's earlier migrations,
    delays.py) or `project` (its Rancher project's room, owed first to sibling namespaces'
    migrations earlier in KubeVirt's order, projectorder.py)."""
    behind: list[str] = field(default_factory=list)
    """For a `project` wait, each migration it waits behind, in KubeVirt's order,
    ``namespace/migration (priority P, created T)`` (a simulated evacuation of the drain:
    ``namespace/vm's evacuation in this drain (priority P)``), as the controller's
    WaitingForEarlierMigrationsInProject names them."""


@dataclass
class VmVerdict:
    """One VMI on a node being drained."""

    namespace: str
    name: str
    node: str
    eviction_strategy: str
    eviction_strategy_from: str
    """"vmi", "kubevirt" (the KubeVirt CR's default) or "default" (KubeVirt's: None)."""
    live_migratable: bool
    migratable_reason: str
    action: Action
    memory_bytes: int
    target_usage: dict[str, str] = field(default_factory=dict)
    """The quota usage of its migration's target side, rendered as KubeVirt renders it: the
    target launcher pod and every pod made beside it (`target_parts`)."""
    target_parts: list[str] = field(default_factory=list)
    """The kinds of pod its target side is made of, the launcher first (launcher/parts.py)."""
    migration_priority: str = ""
    """The spec.priority KubeVirt's evacuation gives its migration (util/migrationpriority.py
    `evacuation_priority`): the order in which a scarce MTQ budget is handed out; empty for a
    VM that does not migrate."""
    target_node: str | None = None
    wave: int | None = None
    blockers: list[Blocker] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    delay: Delay | None = None
    """Set when its target pod fits alone but is refused next to the others' (not a block)."""
    harvester_upgrade: str = ""
    """On a Harvester cluster's `upgrade`: what Harvester's upgrade does with the VM
    (compute.py `note_upgrade_outcomes`: live-migrates, shut-down, stalls-pre-drain); else empty."""
    harvester_upgrade_says: str = ""
    """That outcome as a sentence naming the node and the cause."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def blocked(self) -> bool:
        return bool(self.blockers)

    @property
    def delayed(self) -> bool:
        return self.delay is not None


@dataclass
class DrainStep:
    """One drain: the nodes drained together, their VMs, and the migrations in waves."""

    nodes: list[str]
    vms: list[VmVerdict] = field(default_factory=list)
    waves: list[list[str]] = field(default_factory=list)
    """VM keys per wave, as KubeVirt's parallel-migration limits let them run."""
    estimated_seconds: float = 0.0


@dataclass
class PreflightReport:
    """The whole answer: each step and the settings it was computed with."""

    operation: str
    strategy: str
    strategy_reason: str
    order_reason: str
    limits: dict[str, Any]
    steps: list[DrainStep] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    @property
    def vms(self) -> list[VmVerdict]:
        return [vm for step in self.steps for vm in step.vms]

    @property
    def blocked(self) -> list[VmVerdict]:
        return [vm for vm in self.vms if vm.blocked]

    @property
    def stalls_harvester_upgrade(self) -> list[VmVerdict]:
        """The VMs for which Harvester's upgrade would wait for good (a Harvester `upgrade`)."""
        return [vm for vm in self.vms if vm.harvester_upgrade == UPGRADE_STALLS]

    @property
    def blocks(self) -> bool:
        return bool(self.blocked) or bool(self.stalls_harvester_upgrade)

    @property
    def delayed(self) -> list[VmVerdict]:
        """The VMs that move late: their target pods wait for quota (not blocks)."""
        return [vm for vm in self.vms if vm.delayed]

    @property
    def delayed_seconds_at_most(self) -> float:
        """The sum of the delayed targets' waits, at most (what a run reports as blocked)."""
        return sum(vm.delay.wait_seconds_at_most for vm in self.vms if vm.delay is not None)

    @property
    def estimated_seconds(self) -> float:
        return sum(step.estimated_seconds for step in self.steps)

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["blocks"] = self.blocks
        out["delayed"] = len(self.delayed)
        out["delayed_seconds_at_most"] = round(self.delayed_seconds_at_most, 1)
        out["estimated_seconds"] = round(self.estimated_seconds, 1)
        for step, raw in zip(self.steps, out["steps"], strict=True):
            raw["estimated_seconds"] = round(step.estimated_seconds, 1)
            for vm, raw_vm in zip(step.vms, raw["vms"], strict=True):
                raw_vm["blocked"] = vm.blocked
                raw_vm["delayed"] = vm.delayed
        return out


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


def _step_lines(step: DrainStep, operation: str) -> list[str]:
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
