"""A migration's timeline, end to end, from the API server's audit log and the webhook's log.

For each migration of a step (`Migration`), `assemble` finds these moments (wall time, UTC):

- ``created``: its VirtualMachineInstanceMigration's create request received (the audit log);
- ``raised``: the first accepted write of our controller to the namespace's quota whose body adds
  the VM's room key (the audit log at Request level for quota writes);
- ``hard``: the first accepted write to that quota's status received after the raise completed,
  by kube-controller-manager or our controller (`hard_by`): an update or patch the API server
  accepted after the raise was made on the raised quota, so its ``status.hard`` followed the raise
  (kube-controller-manager copies ``spec.hard``; our controller publishes it the same way);
- ``tried``: virt-controller's first create of the VM's target pod received (the audit log at
  Request level for pod creates: the pod's ``vm.kubevirt.io/name`` label), and ``last_try`` the
  one the API server accepted (``refusals``: those it refused in between);
- ``answered``: our webhook's answer to that accepted create (its log line, for a pod it held;
  one it let through at once answered when the create was received); None where no webhook
  serves the namespace;
- ``admitted``: that accepted create completed (quota admission admitted the pod);
- ``succeeded``: the migration's Succeeded phase as the run's KubeVirt watch saw it.

`HOPS` are the spans between them a report shows per arm (`hop_seconds`); `waited_hop` names
the hop whose median the quota arm waits longer on than the no-quota arm. Pure: no I/O but
`webhook_answers`, which reads a log file.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson

from ...apis.kubevirt import LABEL_VM_NAME
from ..localcluster.audit import AuditRecord
from ..localcluster.deploy import CONTROLLER_USER
from .stats import ARM_NONE, StepResult, percentile

VIRT_CONTROLLER_USER: Final = "system:serviceaccount:kubevirt:kubevirt-controller"
KCM_QUOTA_USER: Final = "system:serviceaccount:kube-system:resourcequota-controller"
TARGET_LINE: Final = "migration target pod "
"""How the webhook's log line about a target pod it held begins (webhook/pods.py)."""
_ANNOTATIONS: Final = "/metadata/annotations"
LOG_SLACK: Final = datetime.timedelta(milliseconds=2)
"""The webhook's log times are in milliseconds: a line may read up to this much before the
create request the API server received."""


@dataclass(frozen=True)
class Migration:
    """What the run knows of one migration of a step."""

    namespace: str
    vm: str
    name: str
    room_keys: frozenset[str]
    """The quota annotation keys that hold the VM's room (any of them)."""
    succeeded: datetime.datetime | None
    webhook: bool
    """Whether our webhook serves the namespace (the quota arm): a target pod's create is then
    answered by it."""


@dataclass(frozen=True)
class WebhookAnswer:
    """One target pod the webhook held, from its log."""

    namespace: str
    vm: str
    at: datetime.datetime


@dataclass(frozen=True)
class Timeline:
    """One migration's moments (see the module docstring); None: not seen."""

    created: datetime.datetime | None = None
    raised: datetime.datetime | None = None
    hard: datetime.datetime | None = None
    hard_by: str | None = None
    tried: datetime.datetime | None = None
    refusals: int = 0
    last_try: datetime.datetime | None = None
    answered: datetime.datetime | None = None
    admitted: datetime.datetime | None = None
    succeeded: datetime.datetime | None = None


HOPS: Final = (
    ("created → raised", "created", "raised"),
    ("raised → status.hard", "raised", "hard"),
    ("created → first try", "created", "tried"),
    ("first try → accepted try", "tried", "last_try"),
    ("accepted try → webhook answered", "last_try", "answered"),
    ("webhook answered → admitted", "answered", "admitted"),
    ("accepted try → admitted", "last_try", "admitted"),
    ("status.hard → admitted", "hard", "admitted"),
    ("admitted → Succeeded", "admitted", "succeeded"),
    ("created → admitted", "created", "admitted"),
)
"""(name, from, to): the spans a report shows; the first two and the webhook's exist in the
quota arm only."""


def assemble(
    migrations: Sequence[Migration],
    records: Sequence[AuditRecord],
    answers: Sequence[WebhookAnswer] = (),
) -> list[Timeline]:
    """Each migration's timeline, in the order of `migrations`, from the audit `records` of its
    step (oldest first, as `AuditLog.since` gives them) and the webhook's `answers`."""
    return [_timeline(m, records, answers) for m in migrations]


def _timeline(
    migration: Migration, records: Sequence[AuditRecord], answers: Sequence[WebhookAnswer]
) -> Timeline:
    ns = [r for r in records if r.namespace == migration.namespace]
    created = _first(
        r.received
        for r in ns
        if r.verb == "create" and r.target == "virtualmachineinstancemigrations"
        if r.name == migration.name
    )
    if created is None:
        return Timeline(succeeded=migration.succeeded)
    raise_write = _first_record(
        r
        for r in ns
        if r.target == "resourcequotas" and r.accepted and r.verb in ("patch", "update")
        if r.received >= created and _adds_any(r.request_object, migration.room_keys)
    )
    raised = None if raise_write is None else raise_write.completed
    status = _first_record(
        r
        for r in ns
        if raise_write is not None and r.target == "resourcequotas/status" and r.accepted
        if r.received >= raise_write.completed and r.user != "system:apiserver"
    )
    tries = [
        r
        for r in ns
        if r.verb == "create" and r.target == "pods" and r.user == VIRT_CONTROLLER_USER
        if r.received >= created and _pod_vm(r.request_object) == migration.vm
    ]
    accepted = next((r for r in tries if r.accepted), None)
    return Timeline(
        created=created,
        raised=raised,
        hard=None if status is None else status.completed,
        hard_by=None if status is None else status.user,
        tried=tries[0].received if tries else None,
        refusals=sum(
            1 for r in tries if not r.accepted and accepted and r.received < accepted.received
        ),
        last_try=None if accepted is None else accepted.received,
        answered=_answered(migration, accepted, answers),
        admitted=None if accepted is None else accepted.completed,
        succeeded=migration.succeeded,
    )


def _answered(
    migration: Migration, accepted: AuditRecord | None, answers: Sequence[WebhookAnswer]
) -> datetime.datetime | None:
    """When the webhook answered the accepted create: its line about the VM's pod logged while
    that request was under way, else (it let the pod through at once) the request's receipt."""
    if accepted is None or not migration.webhook:
        return None
    during = (
        a.at
        for a in answers
        if a.namespace == migration.namespace and a.vm == migration.vm
        if accepted.received - LOG_SLACK <= a.at <= accepted.completed + LOG_SLACK
    )
    return min(during, default=accepted.received)


def _first(moments: Iterable[datetime.datetime]) -> datetime.datetime | None:
    return next(iter(moments), None)


def _first_record(records: Iterable[AuditRecord]) -> AuditRecord | None:
    return next(iter(records), None)


def _pod_vm(body: Any) -> str | None:
    """The VM a pod create's body is the launcher of (KubeVirt's label), if it says."""
    if not isinstance(body, dict):
        return None
    labels = (body.get("metadata") or {}).get("labels") or {}
    vm = labels.get(LABEL_VM_NAME)
    return vm if isinstance(vm, str) else None


def _adds_any(body: Any, keys: frozenset[str]) -> bool:
    """Whether a quota write's body (a JSON patch, a merge patch or a whole object) sets one of
    the annotation `keys` to a value."""
    if isinstance(body, list):  # JSON patch: the key's own path, or the whole map's
        return any(_op_adds_any(op, keys) for op in body if isinstance(op, dict))
    if isinstance(body, dict):
        return _sets_any((body.get("metadata") or {}).get("annotations"), keys)
    return False


def _op_adds_any(op: Mapping[str, Any], keys: frozenset[str]) -> bool:
    if op.get("op") not in ("add", "replace"):
        return False
    path = op.get("path")
    if path == _ANNOTATIONS:
        return _sets_any(op.get("value"), keys)
    escaped = {f"{_ANNOTATIONS}/" + k.replace("~", "~0").replace("/", "~1") for k in keys}
    return path in escaped and op.get("value") is not None


def _sets_any(annotations: Any, keys: frozenset[str]) -> bool:
    return isinstance(annotations, dict) and any(annotations.get(k) is not None for k in keys)


def hop_seconds(timelines: Iterable[Timeline]) -> dict[str, tuple[float, ...]]:
    """Per hop of `HOPS`, the seconds of each timeline that has both its ends (a hop no timeline
    has is left out), sorted."""
    spans: dict[str, list[float]] = {}
    for timeline in timelines:
        for hop, start, end in HOPS:
            begun, ended = getattr(timeline, start), getattr(timeline, end)
            if begun is not None and ended is not None:
                spans.setdefault(hop, []).append((ended - begun).total_seconds())
    return {hop: tuple(sorted(values)) for hop, values in spans.items()}


def counts(timelines: Iterable[Timeline]) -> dict[str, int]:
    """How many migrations had a timeline (their create seen), how many had status.hard raised
    for them before virt-controller's first try at their target pod (then the target never
    waited for its room), and by whom status.hard followed: kube-controller-manager or our
    controller's copy."""
    seen = [t for t in timelines if t.created is not None]
    return {
        "migrations": len(seen),
        "room before first try": sum(
            1 for t in seen if t.hard is not None and t.tried is not None and t.hard <= t.tried
        ),
        "status.hard by kube-controller-manager": sum(
            1 for t in seen if t.hard_by == KCM_QUOTA_USER
        ),
        "status.hard by our controller": sum(1 for t in seen if t.hard_by == CONTROLLER_USER),
    }


COMPARED: Final = (
    "created → first try",
    "first try → accepted try",
    "accepted try → admitted",
    "admitted → Succeeded",
)
"""The consecutive hops both arms have, from the migration's create to its Succeeded phase."""


def waited_hop(
    quota: Mapping[str, Sequence[float]], none: Mapping[str, Sequence[float]]
) -> tuple[str, float] | None:
    """The hop of `COMPARED` whose median is longest in `quota` beyond that in `none`, with that
    excess in seconds; None if no hop is longer with the quota (or either arm lacks them)."""
    excess = [
        (q - n, hop)
        for hop in COMPARED
        if (q := percentile(quota.get(hop, ()), 0.5)) is not None
        if (n := percentile(none.get(hop, ()), 0.5)) is not None
    ]
    longest = max(excess, default=None)
    return None if longest is None or longest[0] <= 0 else (longest[1], longest[0])


def webhook_answers(path: Path, since: datetime.datetime) -> list[WebhookAnswer]:
    """The target pods the webhook logged an answer for at or after `since`, from its JSON log
    (``--log-format=json``) at `path`; lines of another format or about other things are
    skipped, a missing log is none."""
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        return []
    answers = []
    for line in lines:
        answer = _answer(line)
        if answer is not None and answer.at >= since:
            answers.append(answer)
    return answers


def _answer(line: bytes) -> WebhookAnswer | None:
    try:
        entry = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(entry, dict) or not str(entry.get("message", "")).startswith(TARGET_LINE):
        return None
    namespace, vm, at = entry.get("namespace"), entry.get("vm"), entry.get("time")
    if not (isinstance(namespace, str) and isinstance(vm, str) and isinstance(at, str)):
        return None
    return WebhookAnswer(namespace, vm, datetime.datetime.fromisoformat(at))


def table(quota_arm: str, arms: Mapping[str, Sequence[StepResult]]) -> str:
    """Per step, each hop's p50 / p99 in milliseconds in each of `arms` (in their order), and
    the hop the `quota_arm` waits on beyond ``ARM_NONE``; empty if no step has a timeline."""
    if not any(step.timeline for steps in arms.values() for step in steps):
        return ""
    names = list(arms)
    lines = [
        "| step | hop | " + " | ".join(f"{arm} p50 / p99 ms" for arm in names) + " |",
        "|---|---|" + "---:|" * len(names),
    ]
    waits = []
    for index, step in enumerate(arms[names[0]]):
        row = {arm: steps[index].timeline for arm, steps in arms.items() if index < len(steps)}
        for hop, _, _ in HOPS:
            if any(hop in spans for spans in row.values()):
                cells = " | ".join(_spread(row.get(arm, {}).get(hop, ())) for arm in names)
                lines.append(f"| {step.name} | {hop} | {cells} |")
        waited = waited_hop(row.get(quota_arm, {}), row.get(ARM_NONE, {}))
        room = _room_note(step.timeline_counts)
        if waited is not None:
            waits.append(
                f"{step.name}: {waited[0]} (+{1000 * waited[1]:.0f} ms at the median{room})"
            )
    verdict = "; ".join(waits) if waits else "none (no hop is longer with the quota)"
    return "\n".join([*lines, "", f"The hop the quota arm waits on beyond no quota: {verdict}."])


def _room_note(found: Mapping[str, int]) -> str:
    """``; room before the first try N of M`` from `counts`' figures, empty without them."""
    if not found.get("migrations"):
        return ""
    return f"; room before the first try {found['room before first try']} of {found['migrations']}"


def _spread(values: Sequence[float]) -> str:
    p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
    if p50 is None or p99 is None:
        return "-"
    return f"{1000 * p50:.0f} / {1000 * p99:.0f}"
