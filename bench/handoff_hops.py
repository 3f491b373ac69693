"""``python -m bench.handoff_hops AUDIT_LOG...``: where a scale run's migrations spend the time
after their target pod is admitted, per arm and step, from the API server's audit log alone.

The scale report's timeline (testbench/scale/timeline.py) ends a migration's target pod at
"admitted" and then jumps to Succeeded; in a drain wave that last hop is most of a migration and
swings by seconds between arms. The audit log has the writes of each party after admission, and
so splits it (level Metadata is enough: who wrote which object when):

- ``created``: the migration's create, accepted (the run's, as admin);
- ``admitted``: virt-controller's accepted create of the VM's target pod;
- ``handed off``: virt-controller's last write to the VMI before the node side's first (it hands
  the migration to the target node's virt-handler once kwok has started the target pod);
- ``target ready``: the node side's first write to the VMI after admission (virt-handler's; in the
  scale run its stand-in's, as admin): the target reports its address;
- ``node done``: the node side's last write to the VMI (the migration completed on the node);
- ``status written``: virt-controller's first accepted write to the migration's status after
  that. The body is not in the log (level Metadata), so whether this write is the one that makes
  the phase Succeeded, or a step before it, is not told; the scale report's Succeeded is when the
  run's own watch saw the phase.

A migration is ``<vm>-<run id>-<step index>`` in a namespace whose name tells its arm
(`ARMS`); each VM migrates once a step, so its writes up to its next migration's creation are its
own. Files are read in the order given (a rotated ``audit-<time>.log`` before ``audit.log``);
lines that are not VMI, migration or pod-create records are skipped before parsing. Prints, per
run, step and arm, the p50 of each hop in ms and the migrations counted; then, per step and arm,
the median of those p50s over the runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Final

from harvester_quota.apis.kubevirt import LABEL_VM_NAME
from harvester_quota.testbench.localcluster.audit import AuditRecord, parse_line

VIRT_CONTROLLER: Final = "system:serviceaccount:kubevirt:kubevirt-controller"
NODE_SIDE: Final = "admin"
"""Who writes the VMI for the node side in the scale run (the virt-handler stand-in runs in the
bench process, with the admin's credentials)."""
ARMS: Final = (("scale-noquota-", "no quota"), ("scale-headroom-", "headroom"), ("scale-", "ours"))
"""Namespace prefix -> arm, first match wins (testbench/scale/plan.py names them)."""
HOPS: Final = (
    ("created", "admitted"),
    ("admitted", "handed off"),
    ("handed off", "target ready"),
    ("target ready", "node done"),
    ("node done", "status written"),
)
_WANTED: Final = (b'"virtualmachineinstances"', b'"virtualmachineinstancemigrations"', b'"pods"')


@dataclass
class _Migration:
    """One migration's records, in the order the API server finished them."""

    arm: str
    run: str
    step: int
    created: datetime
    writes: list[AuditRecord] = field(default_factory=list)

    def moments(self) -> dict[str, datetime]:
        """The module docstring's moments this migration's records show (missing ones left out)."""
        found: dict[str, datetime] = {"created": self.created}
        pods = [r for r in self.writes if r.resource == "pods"]
        if not pods:
            return found
        found["admitted"] = admitted = pods[0].completed
        vmi = [r for r in self.writes if r.resource == "virtualmachineinstances"]
        node = [r for r in vmi if r.user == NODE_SIDE and r.completed >= admitted]
        if node:
            found["target ready"], found["node done"] = node[0].completed, node[-1].completed
            handed = [
                r
                for r in vmi
                if r.user == VIRT_CONTROLLER and admitted <= r.completed <= node[0].completed
            ]
            if handed:
                found["handed off"] = handed[-1].completed
        done = node[-1].completed if node else None
        ends = [
            r
            for r in self.writes
            if r.resource == "virtualmachineinstancemigrations"
            and r.subresource == "status"
            and r.user == VIRT_CONTROLLER
            and done is not None
            and r.completed >= done
        ]
        if ends:
            found["status written"] = ends[0].completed
        return found


def arm_of(namespace: str) -> str | None:
    return next((arm for prefix, arm in ARMS if namespace.startswith(prefix)), None)


def records(paths: Sequence[Path]) -> Iterator[AuditRecord]:
    """The accepted VMI and migration writes and virt-controller's accepted pod creates of the
    files, in their order."""
    for path in paths:
        with path.open("rb") as handle:
            for line in handle:
                if not any(mark in line for mark in _WANTED):
                    continue
                record = parse_line(line)
                if record is None or not record.accepted or record.namespace is None:
                    continue
                if record.resource == "pods" and not (
                    record.verb == "create" and record.user == VIRT_CONTROLLER
                ):
                    continue
                yield record


def _vm_of(record: AuditRecord) -> str | None:
    """The VM a record is about: the VMI's name, the target pod's VM label, or the migration's
    name without its ``-<run>-<step>`` tail."""
    if record.resource == "virtualmachineinstances":
        return record.name
    if record.resource == "pods":
        labels = ((record.request_object or {}).get("metadata") or {}).get("labels") or {}
        vm = labels.get(LABEL_VM_NAME)
        return str(vm) if vm else None
    parts = (record.name or "").rsplit("-", 2)
    return parts[0] if len(parts) == 3 and parts[2].isdigit() else None


def migrations(found: Iterable[AuditRecord]) -> list[_Migration]:
    """Each migration the records create, with the records of its VM until its VM's next
    migration is created."""
    current: dict[tuple[str, str], _Migration] = {}
    made: list[_Migration] = []
    for record in found:
        assert record.namespace is not None
        vm, arm = _vm_of(record), arm_of(record.namespace)
        if vm is None or arm is None:
            continue
        key = (record.namespace, vm)
        if record.resource == "virtualmachineinstancemigrations" and record.verb == "create":
            _, run, step = (record.name or "").rsplit("-", 2)
            current[key] = _Migration(arm, run, int(step), record.completed)
            made.append(current[key])
        elif key in current:
            current[key].writes.append(record)
    return made


def hop_p50s(made: Sequence[_Migration]) -> dict[tuple[str, int, str], dict[str, float]]:
    """(run, step, arm) -> hop name -> p50 ms over the migrations showing both its moments;
    "migrations" -> how many were created."""
    spans: dict[tuple[str, int, str], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for migration in made:
        key = (migration.run, migration.step, migration.arm)
        spans[key]["migrations"].append(1.0)
        moments = migration.moments()
        for start, end in HOPS:
            if start in moments and end in moments:
                seconds = (moments[end] - moments[start]).total_seconds()
                spans[key][f"{start} → {end}"].append(1000 * seconds)
    return {
        key: {
            hop: (len(values) if hop == "migrations" else statistics.median(values))
            for hop, values in hops.items()
        }
        for key, hops in spans.items()
    }


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def report(p50s: dict[tuple[str, int, str], dict[str, float]]) -> str:
    """The per-run rows, then the median over runs per step and arm."""
    names = ["migrations", *(f"{start} → {end}" for start, end in HOPS)]

    def cells(values: dict[str, float]) -> list[str]:
        return [f"{values[n]:.0f}" if n in values else "-" for n in names]

    runs = [
        [run, str(step), arm, *cells(values)]
        for (run, step, arm), values in sorted(p50s.items(), key=lambda kv: kv[0])
    ]
    by_step: dict[tuple[int, str], list[dict[str, float]]] = defaultdict(list)
    for (_, step, arm), values in p50s.items():
        by_step[(step, arm)].append(values)
    medians = [
        [str(step), arm, str(len(rows))]
        + [
            f"{statistics.median(r[n] for r in rows if n in r):.0f}"
            if any(n in r for r in rows)
            else "-"
            for n in names[1:]
        ]
        for (step, arm), rows in sorted(by_step.items())
    ]
    header = ["run", "step", "arm", *names]
    return (
        "p50 ms of each hop, per run, step and arm:\n\n"
        + table(header, runs)
        + "\n\nThe median of those p50s over the runs, per step and arm:\n\n"
        + table(["step", "arm", "runs", *names[1:]], medians)
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.handoff_hops", description=__doc__)
    parser.add_argument("audit_logs", nargs="+", type=Path, help="in the order they were written")
    args = parser.parse_args(argv)
    print(report(hop_p50s(migrations(records(args.audit_logs)))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
