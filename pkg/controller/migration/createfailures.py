"""virt-controller's reports of a failed target pod create, read from its Events, and what the
target-pod retry (targetretry.py) does about one: the pure part, no I/O.

KubeVirt v1.6 to v1.9 (pkg/virt-controller/watch/migration/migration.go, createTargetPod): when
the create of a migration's target pod fails, virt-controller records a Warning Event with reason
``FailedCreate`` on the *VMI* (not the migration), message ``Error creating pod: <the API's
error>``, lowers its pod expectations (so its next pass may create the pod again at once), and
returns the error, which requeues the migration through its queue's rate limiter: client-go's
default controller limiter, the larger of a per-key backoff from 5 ms and one token bucket (10 a
second, burst 100) shared by every migration. During a drain that bucket is in debt and the retry
comes minutes later (bench/SCALE.md, "Why a failed create stalls for minutes").

A quota refusal (the message holds "exceeded quota", which is how virt-controller tells it too) is
not ours: virt-controller sets the migrationRejectedByResourceQuota condition and requeues such a
migration, without its limiter, on every change of a quota of its namespace. Anything else (quota
admission's own Conflict on the ResourceQuota, a webhook timeout or denial) has only the limiter.

An update of the migration object is handled without the limiter (the informer's update handler
adds the key with no delay, and controller-runtime's priority queue moves a key waiting out a
backoff to ready at once), which is what a retry is: a patch of one annotation of ours.

Events are written by anyone with create on events in a namespace, so nothing here trusts one
beyond what the caches vouch for: a failure counts only on a VMI that exists with the Event's uid,
in the Event's own namespace, for a migration that waits in Pending without a target pod and was
created before the failure; each migration is retried at most MAX_RETRIES times.
"""

from __future__ import annotations

import datetime
import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from ...apis.kubevirt import PHASE_PENDING
from ...generic.meta import annotations_of, metadata, status
from ...generic.resource import Object

FAILED_CREATE: Final = "FailedCreate"
VMI_KIND: Final = "VirtualMachineInstance"
EVENT_SELECTOR: Final = f"involvedObject.kind={VMI_KIND},reason={FAILED_CREATE}"
"""The field selector of the Events watch: only virt-controller's kind of report (and forgeries
of it), a few per failed create, never the cluster's whole event stream."""
EXCEEDED_QUOTA: Final = "exceeded quota"
NAMESPACE_TERMINATING: Final = "because it is being terminated"
"""The API server's refusal of any create in a namespace being deleted: no retry creates there."""
"""What virt-controller looks for in the error to call it a quota refusal; so do we."""
FAILURE_INDEX: Final = "failed-create-by-vmi-uid"
FAILURES_READ: Final = 8
"""The newest failures of a VMI a decision reads (`newest`)."""
"""The Event store's index of FailedCreate Events by the uid of the VMI they name."""
MESSAGE_LIMIT: Final = 512
"""Characters of an Event's message kept in the cache: enough for KubeVirt's ("Error creating
pod: " and the API's error), and a forged megabyte costs us nothing."""
ANNOTATION_RETRIES: Final = "harvester-quota.io/target-pod-retries"
"""On a migration: how many times we requeued it after a failed target pod create. Writing it is
the requeue (a change of the object); it also carries the count to the next leader."""
MAX_RETRIES: Final = 3
"""Retries per migration. The failure this answers (a Conflict of quota admission, a webhook
timeout) is transient: one retry nearly always does; three bound what a forged Event or a failure
that persists costs (three patches and three Events per migration)."""
QUIET: Final = 1.0
"""Seconds virt-controller must have left a failed migration alone (no newer failure, no target
pod) before we retry it: its own first retries come within milliseconds when its limiter has
credit, and then no write of ours is needed."""
CLOCK_SKEW: Final = 10.0
"""Seconds a failure may seem to predate its migration (virt-controller's clock against the API
server's creationTimestamp, each to the second) and still count as the migration's."""


def strip_event(event: Object) -> Object:
    """The Event store's transform: only what a failure is read from (its message cut to
    MESSAGE_LIMIT), so a flood of forged Events costs little memory."""
    meta = metadata(event)
    involved = event.get("involvedObject") or {}
    return {
        "metadata": {
            key: meta[key] for key in ("name", "namespace", "uid", "resourceVersion") if key in meta
        },
        "involvedObject": {
            key: involved[key]
            for key in ("kind", "namespace", "name", "uid")
            if isinstance(involved, dict) and key in involved
        },
        "reason": event.get("reason"),
        "message": printable(str(event.get("message") or "")[:MESSAGE_LIMIT]),
        "count": event.get("count"),
        "lastTimestamp": event.get("lastTimestamp") or event.get("eventTime"),
    }


def failure_key(namespace: str, vmi_uid: str) -> str:
    """FAILURE_INDEX's key: the namespace and the VMI's uid. The Event's own namespace is part of
    it, so an Event naming another namespace's VMI by its uid is found under the Event's
    namespace, never the VMI's."""
    return f"{namespace}/{vmi_uid}"


def failure_index(event: Object) -> list[str]:
    """FAILURE_INDEX's function: `failure_key` of the Event's namespace and the named VMI's uid,
    for a FailedCreate Event in that VMI's own namespace (an Event naming another namespace's
    object is nobody's failure)."""
    involved = event.get("involvedObject") or {}
    if not isinstance(involved, dict) or event.get("reason") != FAILED_CREATE:
        return []
    if involved.get("kind") != VMI_KIND or not involved.get("uid"):
        return []
    if involved.get("namespace") != metadata(event).get("namespace"):
        return []
    return [failure_key(str(involved["namespace"]), str(involved["uid"]))]


def printable(text: str) -> str:
    """`text` with control characters (a forged message's newlines, which would forge log
    lines in the text format) as spaces: it is quoted in our Events and log lines."""
    return "".join(c if c.isprintable() else " " for c in text)


def newest(failures: Iterable[CreateFailure], count: int = FAILURES_READ) -> list[CreateFailure]:
    """The `count` newest of `failures`: a flood of forged Events on one VMI costs each decision
    a scan, never a decision over every one of them."""
    return heapq.nlargest(count, failures, key=lambda f: f.at)


def parse_time(value: Any) -> datetime.datetime | None:
    """An RFC 3339 time as the API writes it, or None if it is not one."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


@dataclass(frozen=True)
class CreateFailure:
    """One failed create as an Event reports it; `ident` changes with every repetition (the
    recorder bumps `count` on the same Event for an identical message)."""

    ident: tuple[str, int]
    """(the Event's uid, its count)."""
    message: str
    at: datetime.datetime
    """When it last happened, by the Event (virt-controller's clock)."""

    @property
    def quota_refusal(self) -> bool:
        return EXCEEDED_QUOTA in self.message

    @property
    def retryable(self) -> bool:
        """Whether a retry may create the pod: not a quota refusal (KubeVirt's own to retry), not
        a namespace being deleted (nothing is created there again; seen in a full run, where a
        Warning we then wrote there was refused too)."""
        return not self.quota_refusal and NAMESPACE_TERMINATING not in self.message


def failure_of(event: Object) -> CreateFailure | None:
    """The failure an indexed Event reports, or None without a uid or a time."""
    uid = metadata(event).get("uid")
    at = parse_time(event.get("lastTimestamp"))
    if not uid or at is None:
        return None
    count = event.get("count")
    return CreateFailure(
        (str(uid), count if isinstance(count, int) else 1), str(event.get("message") or ""), at
    )


@dataclass(frozen=True)
class Retry:
    """Requeue the migration now, answering `failure`; it becomes retry number `number`."""

    failure: CreateFailure
    number: int


@dataclass(frozen=True)
class Wait:
    """Look again after `seconds` (virt-controller may still retry by itself)."""

    seconds: float


@dataclass(frozen=True)
class Exhausted:
    """A failure to answer, and the migration's retries are spent (told once: RetryState)."""

    failure: CreateFailure


@dataclass(frozen=True)
class Nothing:
    """Nothing to do; `why` is for the debug log."""

    why: str


Decision = Retry | Wait | Exhausted | Nothing


@dataclass
class RetryState:
    """What one migration (by uid) has had from us. Event loop only."""

    uid: str
    retries: int = 0
    answered: set[tuple[str, int]] = field(default_factory=set)
    """Failures already answered (by a retry, or by being told the retries are spent)."""
    seen: dict[tuple[str, int], float] = field(default_factory=dict)
    """When (monotonic, our clock) each failure was first seen."""
    exhausted: bool = False
    """Told that the retries are spent (once per migration)."""

    def observe(self, failures: list[CreateFailure], now: float) -> None:
        for failure in failures:
            if failure.ident not in self.answered:
                self.seen.setdefault(failure.ident, now)

    def forget_gone(self, failures: list[CreateFailure]) -> None:
        """Drops what is known of failures no longer reported (an Event expired, or bumped to a
        new count): the state stays as small as the Events cache, however many came and went."""
        present = {failure.ident for failure in failures}
        self.answered &= present
        self.seen = {ident: at for ident, at in self.seen.items() if ident in present}

    def answer(self, failures: list[CreateFailure]) -> None:
        """Every failure known now is answered (an older one never triggers a later retry)."""
        for failure in failures:
            self.answered.add(failure.ident)
            self.seen.pop(failure.ident, None)


def retries_written(migration: Object) -> int:
    """The count our annotation carries (0 if absent or not a count): a floor, since a tenant may
    edit it but not our memory."""
    raw = annotations_of(migration).get(ANNOTATION_RETRIES, "")
    return int(raw) if raw.isdigit() else 0


def created_at(migration: Object) -> datetime.datetime | None:
    return parse_time(metadata(migration).get("creationTimestamp"))


def decide(
    migration: Object,
    failures: list[CreateFailure],
    *,
    has_target: bool,
    state: RetryState,
    now: float,
) -> Decision:
    """What to do for `migration` given the failures reported on its VMI (already matched by
    uid and namespace) and whether its target pod exists. `state` must have observed `failures`.

    A retry needs: the migration Pending with no target pod; a failure that is not a quota
    refusal, happened after the migration was created (within CLOCK_SKEW) and is not answered
    yet; QUIET seconds since we first saw it; and fewer than MAX_RETRIES retries so far."""
    if str(status(migration).get("phase") or "") != PHASE_PENDING:
        return Nothing("not Pending")
    if has_target:
        return Nothing("its target pod exists")
    since = created_at(migration)
    floor = since - datetime.timedelta(seconds=CLOCK_SKEW) if since else None
    open_ = [
        f
        for f in failures
        if f.retryable and f.ident not in state.answered and (floor is None or f.at >= floor)
    ]
    if not open_:
        return Nothing("no failure to answer")
    newest = max(open_, key=lambda f: (f.at, f.ident[1]))
    done = max(state.retries, retries_written(migration))
    if done >= MAX_RETRIES:
        return Exhausted(newest)
    first_seen = max(state.seen.get(f.ident, now) for f in open_)
    if now < first_seen + QUIET:
        return Wait(first_seen + QUIET - now)
    return Retry(newest, done + 1)
