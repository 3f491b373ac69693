"""What happened to each migration, for reports and for tests that wait for the end.

One `MigrationRecord` per VirtualMachineInstanceMigration the simulator handled: when it was
created, first refused by quota, admitted (its target pod created), started (Running) and finished,
its outcome, the quota refusal messages, and how often a parallel limit held it back. Times are the
simulator clock's: `*_at` wall times for reports, `*_mono` monotonic seconds for durations.
`MigrationLog` holds them and lets a caller wait until every migration has finished.
"""

from __future__ import annotations

import asyncio
import datetime
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from ....generic.clock import REAL_CLOCK, Clock, wait_at_most
from .phases import Phase

MAX_REFUSAL_MESSAGES: Final = 20
CONFLICT_MARKS: Final = (
    "the object has been modified",
    "Operation cannot be fulfilled on resourcequotas",
)
"""Text of a failed pod create that quota admission lost to a concurrent write of the quota (a
Conflict on its status update): either mark makes a failed create a conflict (`is_conflict`)."""


def is_conflict(message: str) -> bool:
    """Whether a failed create's message is quota admission's Conflict (CONFLICT_MARKS)."""
    return any(mark in message for mark in CONFLICT_MARKS)


"""Distinct refusal messages, and distinct failed-create messages, kept per migration (a blocked
migration retries many times; the count keeps growing, the list does not)."""


class Outcome(enum.StrEnum):
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    ABORTED = "Aborted"


@dataclass(frozen=True)
class Moment:
    """A point on the simulator's clock: wall time for reports, monotonic seconds for durations."""

    at: datetime.datetime
    mono: float

    @classmethod
    def now(cls, clock: Clock) -> Moment:
        return cls(clock.now(), clock.monotonic())


def _keep_distinct(messages: list[str], message: str) -> None:
    """Appends `message` to `messages` unless it is there already or the list is full."""
    if message not in messages and len(messages) < MAX_REFUSAL_MESSAGES:
        messages.append(message)


@dataclass
class MigrationRecord:
    """The life of one migration as the simulator saw it."""

    namespace: str
    name: str
    uid: str
    vmi: str
    created: Moment
    evacuation_node: str | None = None
    source_node: str | None = None
    target_node: str | None = None
    source_pod: str | None = None
    target_pod: str | None = None
    first_refused: Moment | None = None
    admitted: Moment | None = None
    started: Moment | None = None
    finished: Moment | None = None
    left_source_node: Moment | None = None
    """When the VMI's status.nodeName became the target's: from then on the migration no longer
    counts against its source node's outbound limit (KubeVirt counts a node's outbound
    migrations by their VMIs' nodeName), a moment before it is marked Succeeded."""
    source_pod_gone: Moment | None = None
    outcome: Outcome | None = None
    failure_reason: str = ""
    refusals: int = 0
    refusal_messages: list[str] = field(default_factory=list)
    """The distinct refusal messages, the first MAX_REFUSAL_MESSAGES of them."""
    last_refusal: str | None = None
    """The newest refusal's message (what blocks the migration now)."""
    failed_creates: int = 0
    """Target pod creates that failed for another cause than quota refusing them, such as quota
    admission losing its status update to a concurrent write of the quota (a Conflict):
    virt-controller retries those only as its rate limiter allows."""
    first_failed_create: Moment | None = None
    failed_create_messages: list[str] = field(default_factory=list)
    conflicts: int = 0
    """Of `failed_creates`, those whose message is quota admission's Conflict (`is_conflict`)."""
    held_by_limits: int = 0
    phases: list[tuple[Phase, Moment]] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def done(self) -> bool:
        return self.outcome is not None

    @property
    def phase(self) -> Phase:
        return self.phases[-1][0] if self.phases else Phase.UNSET

    @property
    def blocked_seconds(self) -> float | None:
        """Seconds from the first quota refusal until the target pod was admitted (or, if it never
        was, until the migration ended): 0.0 if quota never refused it, None while still blocked."""
        return self._waited_since(self.first_refused)

    @property
    def stalled_seconds(self) -> float | None:
        """Seconds from the first target pod create that failed for another cause than quota
        (`note_failed_create`) until the target pod was admitted (or the migration ended): 0.0
        if none failed, None while it still waits."""
        return self._waited_since(self.first_failed_create)

    def _waited_since(self, start: Moment | None) -> float | None:
        """Seconds from `start` until the target pod was admitted or the migration ended: 0.0
        without a start, None while neither happened."""
        if start is None:
            return 0.0
        end = self.admitted or self.finished
        if end is None:
            return None
        return max(0.0, end.mono - start.mono)

    @property
    def duration_seconds(self) -> float | None:
        """Seconds from creation to the end (None while unfinished)."""
        if self.finished is None:
            return None
        return self.finished.mono - self.created.mono

    def note_refusal(self, message: str, moment: Moment) -> None:
        self.refusals += 1
        self.last_refusal = message
        if self.first_refused is None:
            self.first_refused = moment
        _keep_distinct(self.refusal_messages, message)

    def note_failed_create(self, message: str, moment: Moment) -> None:
        self.failed_creates += 1
        if is_conflict(message):
            self.conflicts += 1
        if self.first_failed_create is None:
            self.first_failed_create = moment
        _keep_distinct(self.failed_create_messages, message)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready summary for reports."""

        def at(moment: Moment | None) -> str | None:
            return None if moment is None else moment.at.isoformat()

        return {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "vmi": self.vmi,
            "evacuationNode": self.evacuation_node,
            "sourceNode": self.source_node,
            "targetNode": self.target_node,
            "sourcePod": self.source_pod,
            "targetPod": self.target_pod,
            "created": at(self.created),
            "firstRefused": at(self.first_refused),
            "admitted": at(self.admitted),
            "started": at(self.started),
            "finished": at(self.finished),
            "sourcePodGone": at(self.source_pod_gone),
            "outcome": None if self.outcome is None else self.outcome.value,
            "failureReason": self.failure_reason,
            "blockedSeconds": self.blocked_seconds,
            "durationSeconds": self.duration_seconds,
            "refusals": self.refusals,
            "refusalMessages": list(self.refusal_messages),
            "failedCreates": self.failed_creates,
            "failedCreateMessages": list(self.failed_create_messages),
            "conflicts": self.conflicts,
            "stalledSeconds": self.stalled_seconds,
            "heldByLimits": self.held_by_limits,
            "phases": [(phase.value, at(moment)) for phase, moment in self.phases],
        }


class MigrationLog:
    """Every migration's record, and waiting for them to finish."""

    def __init__(self, clock: Clock = REAL_CLOCK) -> None:
        self._clock = clock
        self._records: dict[str, MigrationRecord] = {}
        self._changed = asyncio.Event()

    def add(self, record: MigrationRecord) -> MigrationRecord:
        """Keeps `record` (by uid: the same name may be reused by a later migration)."""
        self._records.setdefault(record.uid, record)
        self.changed()
        return self._records[record.uid]

    def by_uid(self, uid: str) -> MigrationRecord | None:
        return self._records.get(uid)

    def get(self, namespace: str, name: str) -> MigrationRecord | None:
        """The latest migration of that name."""
        found = [r for r in self._records.values() if r.namespace == namespace and r.name == name]
        return found[-1] if found else None

    def all(self) -> list[MigrationRecord]:
        return list(self._records.values())

    def unfinished(self) -> list[MigrationRecord]:
        return [r for r in self._records.values() if not r.done]

    def changed(self) -> None:
        """Wakes the waiters (call after changing a record)."""
        self._changed.set()

    async def wait_all_finished(
        self, timeout: float | None = None, *, source_pods_gone: bool = False
    ) -> bool:
        """Waits until every migration has an outcome (and, if asked, every succeeded migration's
        source pod is gone). False if `timeout` seconds of the clock pass first."""

        def finished() -> bool:
            for record in self._records.values():
                if not record.done:
                    return False
                if (
                    source_pods_gone
                    and record.outcome is Outcome.SUCCEEDED
                    and record.source_pod_gone is None
                ):
                    return False
            return True

        return await self.wait_for(finished, timeout)

    async def wait_for(self, predicate: Callable[[], bool], timeout: float | None = None) -> bool:
        """Waits until `predicate()` is true, re-checked after every change; False on timeout."""
        deadline = None if timeout is None else self._clock.monotonic() + timeout
        while not predicate():
            self._changed.clear()
            if deadline is None:
                await self._changed.wait()
                continue
            remaining = deadline - self._clock.monotonic()
            if remaining <= 0:
                return False
            waiter = asyncio.ensure_future(self._changed.wait())
            try:
                await wait_at_most(self._clock, waiter, remaining)
            finally:
                waiter.cancel()
        return True

    def summary(self) -> list[dict[str, Any]]:
        """Every record as a JSON-ready dict, in creation order."""
        return [record.as_dict() for record in self._records.values()]
