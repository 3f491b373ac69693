"""The local cluster's audit log: whose writes the real kube-apiserver accepted or refused.

`LocalCluster.up` starts kube-apiserver with `POLICY` (written by `write_policy`) and
`apiserver_flags`: one JSON line per finished write (stage ResponseComplete, level Metadata: who,
what, the answer's code and message) to ResourceQuotas, Namespaces, Pods and KubeVirt's VMs, VMIs
and migrations, and nothing else; pod creates and quota spec writes with the request's body
(level Request, `REQUEST_LEVEL`), never a response's. The log is
``<state dir>/logs/audit.log`` (`ClusterInfo.audit_log`); kube-apiserver rotates it at
`MAX_SIZE_MB` into ``audit-<time>.log``, keeping `MAX_BACKUPS`, and a restart of the cluster moves
it with the other logs to ``logs.previous``.

A test counts what happened during its own steps::

    log = AuditLog(cluster.audit_log)
    mark = log.mark()
    ...  # the test's writes
    counts = log.count_writes(mark, namespace=namespace)
    assert counts[WriteKey("admin", "update", "resourcequotas", accepted=True)] == 1

The user is the one the API server authenticated: kwok and kube-scheduler use the admin's
kubeconfig, so their writes are ``admin``'s too (`AuditRecord.user_agent` tells them apart);
kube-controller-manager's controllers are each their own service account.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Final, NamedTuple

import orjson
import yaml

from .errors import ClusterError

LOG_NAME: Final = "audit.log"
POLICY_FLAG: Final = "--audit-policy-file"
"""The flag naming the policy: a cluster whose API server ran without it has no audit log."""
MAX_SIZE_MB: Final = 100
"""kube-apiserver rotates the log at this size (its own default); with MAX_BACKUPS, one cluster's
audit logs take 300 MB at most."""
MAX_BACKUPS: Final = 2
WRITE_VERBS: Final = ("create", "update", "patch", "delete")
AUDITED_RESOURCES: Final = {
    "": (
        "resourcequotas",
        "resourcequotas/status",
        "namespaces",
        "pods",
        "pods/eviction",
        "pods/resize",
    ),
    "kubevirt.io": (
        "virtualmachineinstances",
        "virtualmachineinstances/status",
        "virtualmachineinstancemigrations",
        "virtualmachineinstancemigrations/status",
        "virtualmachines",
        "virtualmachines/status",
    ),
}
"""What is audited, by API group: the kinds quota admission and migrations turn on, with the
subresources that change quota usage (a quota's status, a pod's resize, an eviction) or the
phases controllers act on. Not pods/status nor pods/binding: kwok's and kube-scheduler's
bookkeeping, a few writes for every pod of the suite, which no test counts."""
REQUEST_LEVEL: Final = (
    {"verbs": ["create"], "resources": [{"group": "", "resources": ["pods"]}]},
    {"verbs": ["update", "patch"], "resources": [{"group": "", "resources": ["resourcequotas"]}]},
)
"""The writes logged with their body (level Request): pod creates, whose labels say whose
launcher a pod is (a generated name is not in the metadata), and writes of a quota's spec and
annotations, which say whose room a write raised (the scale run's migration timelines,
scale/timeline.py). A quota is small; a pod's body is a few kB."""
POLICY: Final[dict[str, Any]] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted", "Panic"],
    "rules": [
        # Every component's heartbeat: the most frequent write there is, and never of interest.
        {"level": "None", "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}]},
        *({"level": "Request", **rule} for rule in REQUEST_LEVEL),
        {
            "level": "Metadata",
            "verbs": list(WRITE_VERBS),
            "resources": [
                {"group": group, "resources": list(resources)}
                for group, resources in AUDITED_RESOURCES.items()
            ],
        },
        {"level": "None"},
    ],
}
"""The audit Policy kube-apiserver loads (audit.k8s.io/v1): the first matching rule decides."""
_COMPLETE: Final = "ResponseComplete"
_TAIL_CHUNK: Final = 64 * 1024


def write_policy(path: Path) -> None:
    """Writes `POLICY` as YAML to ``path`` (replacing what was there)."""
    path.write_text(yaml.safe_dump(POLICY, sort_keys=False))


def apiserver_flags(policy: Path, log: Path) -> list[str]:
    """kube-apiserver's flags for auditing with the policy file ``policy`` into ``log``, JSON lines,
    rotated; in the log backend's default mode, blocking: a request's event is written before its
    response is sent."""
    return [
        f"{POLICY_FLAG}={policy}",
        f"--audit-log-path={log}",
        "--audit-log-format=json",
        f"--audit-log-maxsize={MAX_SIZE_MB}",
        f"--audit-log-maxbackup={MAX_BACKUPS}",
    ]


@dataclass(frozen=True)
class AuditRecord:
    """One finished request as the audit log tells it."""

    audit_id: str
    user: str
    """The authenticated user name (user.username), e.g. ``admin`` or
    ``system:serviceaccount:<namespace>:<name>``."""
    groups: tuple[str, ...]
    impersonated_user: str | None
    """The user the request impersonated, if it did; ``user`` is then the impersonator."""
    verb: str
    api_group: str
    """The object's API group, ``""`` for the core group."""
    resource: str
    subresource: str | None
    namespace: str | None
    """None for a cluster-scoped object, such as a Namespace."""
    name: str | None
    """None for a create whose name the server generated."""
    code: int | None
    """The HTTP status of the answer (responseStatus.code); None if the log has none."""
    message: str | None
    """Why the request was refused (responseStatus.message); None for an accepted one."""
    user_agent: str | None
    received: datetime
    """When the API server received the request (requestReceivedTimestamp, aware, UTC)."""
    completed: datetime
    """When it finished answering (stageTimestamp, aware, UTC)."""
    request_object: Any = None
    """The request's body as sent (requestObject), for the writes `POLICY` logs at Request level
    (`REQUEST_LEVEL`); None for the others."""

    @property
    def accepted(self) -> bool:
        """The API server answered 2xx; any other answer (403, 409, 422, ...) is a refusal."""
        return self.code is not None and 200 <= self.code < 300

    @property
    def target(self) -> str:
        """``resource``, or ``resource/subresource`` for a subresource."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    def write_key(self) -> WriteKey:
        return WriteKey(self.user, self.verb, self.target, self.accepted)


class WriteKey(NamedTuple):
    """What `count_writes` counts by."""

    user: str
    verb: str
    resource: str
    """``resource``, or ``resource/subresource`` (AuditRecord.target)."""
    accepted: bool


@dataclass(frozen=True)
class AuditMark:
    """A place in the audit log (`AuditLog.mark`): the file, by inode (None: there was none yet,
    so everything the log and its backups hold is after it), and the length of its complete lines
    then."""

    inode: int | None
    offset: int


def parse_line(line: bytes) -> AuditRecord | None:
    """The record of one complete JSON line; None for an event of a stage other than
    ResponseComplete. Raises ClusterError for a line that is not an audit event."""
    try:
        event = orjson.loads(line)
        return _record(event) if event["stage"] == _COMPLETE else None
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as error:
        raise ClusterError(f"not an audit event ({error!r}): {line[:200]!r}") from error


def _record(event: dict[str, Any]) -> AuditRecord:
    user = event["user"]
    target = event.get("objectRef") or {}
    status = event.get("responseStatus") or {}
    return AuditRecord(
        audit_id=event["auditID"],
        user=user["username"],
        groups=tuple(user.get("groups") or ()),
        impersonated_user=(event.get("impersonatedUser") or {}).get("username"),
        verb=event["verb"],
        api_group=target.get("apiGroup", ""),
        resource=target.get("resource", ""),
        subresource=target.get("subresource"),
        namespace=target.get("namespace"),
        name=target.get("name"),
        code=status.get("code"),
        message=status.get("message") or None,
        user_agent=event.get("userAgent"),
        received=datetime.fromisoformat(event["requestReceivedTimestamp"]),
        completed=datetime.fromisoformat(event["stageTimestamp"]),
        request_object=event.get("requestObject"),
    )


def count_writes(
    records: Iterable[AuditRecord], *, namespace: str | None = None
) -> Counter[WriteKey]:
    """How many create, update, patch and delete requests of ``records`` there were, by user, verb,
    resource (or resource/subresource) and whether they were accepted; only those on objects in
    ``namespace`` when it is given (a Namespace object itself is in none)."""
    return Counter(
        record.write_key()
        for record in records
        if record.verb in WRITE_VERBS and (namespace is None or record.namespace == namespace)
    )


class AuditLog:
    """Reads one kube-apiserver audit log (``path``) and the backups it rotated beside it.

    Reading never blocks the API server and tolerates its writing: a last line not yet complete
    is left for a later read.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def mark(self) -> AuditMark:
        """Where the log's complete lines end now: `since` this mark returns what is written after
        this call (and a line still being written during it: in the log backend's blocking mode,
        that request has not been answered yet)."""
        try:
            with self.path.open("rb") as handle:
                inode, size = _identity(handle)
                return AuditMark(inode, _complete_length(handle, size))
        except FileNotFoundError:
            return AuditMark(None, 0)

    def since(self, mark: AuditMark) -> list[AuditRecord]:
        """The records written after ``mark``, oldest first, following the log across rotations.

        Raises ClusterError if the file marked is no longer beside ``path``: rotated out of the
        kept backups, or moved to ``logs.previous`` by a restart of the cluster.
        """
        for _ in range(2):  # a rotation between listing and opening the files: list them again
            with contextlib.ExitStack() as stack:
                handles = [stack.enter_context(path.open("rb")) for path in self._files()]
                inodes = [_identity(handle)[0] for handle in handles]
                if mark.inode is None:
                    return _read_all(handles, 0)
                if mark.inode in inodes:
                    first = inodes.index(mark.inode)
                    return _read_all(handles[first:], mark.offset)
        raise ClusterError(
            f"the audit log marked (inode {mark.inode}) is no longer beside {self.path}: "
            "rotated out of its backups, or the cluster was restarted"
        )

    def received_since(self, when: datetime) -> list[AuditRecord]:
        """The records of requests received at or after ``when`` (an aware datetime), oldest
        written first, from the log and those of its backups written to since then."""
        with contextlib.ExitStack() as stack:
            handles = [
                stack.enter_context(path.open("rb"))
                for path in self._files()
                if path.stat().st_mtime >= when.timestamp()
            ]
            return [record for record in _read_all(handles, 0) if record.received >= when]

    def count_writes(
        self, since: AuditMark | datetime, *, namespace: str | None = None
    ) -> Counter[WriteKey]:
        """`count_writes` over the records `since` a mark, or `received_since` a time."""
        records = self.since(since) if isinstance(since, AuditMark) else self.received_since(since)
        return count_writes(records, namespace=namespace)

    def _files(self) -> list[Path]:
        """The rotated backups, oldest first (their names hold the time of rotation), then the log
        itself; those that exist."""
        backups = sorted(self.path.parent.glob(f"{self.path.stem}-*{self.path.suffix}"))
        return [*backups, self.path] if self.path.exists() else backups


def _read_all(handles: Sequence[IO[bytes]], offset: int) -> list[AuditRecord]:
    """The records of the complete lines of each file in turn, the first one from ``offset``."""
    records: list[AuditRecord] = []
    for index, handle in enumerate(handles):
        handle.seek(offset if index == 0 else 0)
        records.extend(_records(handle))
    return records


def _records(handle: IO[bytes]) -> Iterator[AuditRecord]:
    for line in handle:
        if not line.endswith(b"\n"):
            return  # torn: the API server is still writing it
        record = parse_line(line) if line.strip() else None
        if record is not None:
            yield record


def _identity(handle: IO[bytes]) -> tuple[int, int]:
    """(inode, size) of an open file."""
    stat = os.fstat(handle.fileno())
    return stat.st_ino, stat.st_size


def _complete_length(handle: IO[bytes], size: int) -> int:
    """The length of the file's complete lines: ``size`` less a torn last line."""
    end = size
    while end > 0:
        start = max(0, end - _TAIL_CHUNK)
        handle.seek(start)
        newline = handle.read(end - start).rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0
