"""Who wrote a run's quotas, as the API server tells it: its audit log, and Harvester's own log.

A scenario run on the local cluster marks the cluster's audit log (`localcluster.audit`) and the
log of Harvester's controllers, when they run, at its start (`WriterMarks.take`); at its end it
counts (`WriterMarks.count`), per scenario namespace and per identity, the ResourceQuota and
Namespace writes the API server accepted and refused, and the error lines Harvester's controllers
logged about the run's namespaces (quota writes and Namespace writes apart). A comparison of strategies then counts everyone's writes, not
only the strategy's own: on a cluster running Harvester, Harvester's too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ..localcluster import ClusterInfo
from ..localcluster.audit import AuditLog, AuditMark, AuditRecord
from ..localcluster.deploy import CONTROLLER_USER
from ..localcluster.errors import ClusterError
from ..localcluster.harvester import HARVESTER_USER

QUOTA_WRITES: Final = frozenset({"update", "patch"})
"""The verbs that change a quota or a namespace's annotations (creates and deletes are the
runner's own setup and teardown)."""
HARVESTER_LOG: Final = "harvester-controllers.log"
OURS_IN_SCENARIOS: Final = "harvester-quota-scenario"
"""The client-certificate user our strategy runs as in a scenario on the local cluster."""
SHORT_NAMES: Final = {
    HARVESTER_USER: "harvester",
    OURS_IN_SCENARIOS: "harvester-quota",
    CONTROLLER_USER: "harvester-quota",
}
"""Harvester's service account; our controllers in a scenario and as deployed (its account)."""


@dataclass(frozen=True)
class WriterMarks:
    """Where the audit log and Harvester's log stood when a run began."""

    audit: AuditLog
    audit_mark: AuditMark
    harvester_log: Path | None
    harvester_offset: int

    @classmethod
    def take(cls, cluster: ClusterInfo) -> WriterMarks | None:
        """Marks both logs now; None when the cluster keeps no audit log (started by an older
        version of the bench, or not a local cluster)."""
        if not cluster.audit_log.exists():
            return None
        audit = AuditLog(cluster.audit_log)
        harvester_log = cluster.state_dir / "logs" / HARVESTER_LOG
        if cluster.harvester_version is None or not harvester_log.exists():
            return cls(audit, audit.mark(), None, 0)
        return cls(audit, audit.mark(), harvester_log, harvester_log.stat().st_size)

    def count(self, namespaces: Mapping[str, str]) -> RunWriters:
        """The writes and Harvester's error lines since the marks, for ``namespaces`` (scenario
        name -> the run's namespace). An audit log rotated away since the mark is reported as
        such, not as zero writes."""
        try:
            records = self.audit.since(self.audit_mark)
        except ClusterError as lost:
            return RunWriters({}, {}, {}, {}, str(lost))
        causes = self._harvester_errors(namespaces)
        return RunWriters(
            writes_by_identity(records, namespaces, "resourcequotas"),
            writes_by_identity(records, namespaces, "namespaces"),
            {name: sum(by_cause.values()) for name, by_cause in causes.items()},
            causes,
            None,
        )

    def _harvester_errors(self, namespaces: Mapping[str, str]) -> dict[str, dict[str, int]]:
        if self.harvester_log is None:
            return {}
        with self.harvester_log.open("rb") as handle:
            handle.seek(self.harvester_offset)
            lines = handle.read().decode(errors="replace").splitlines()
        return error_lines_by_namespace(lines, namespaces)


@dataclass(frozen=True)
class RunWriters:
    """What `WriterMarks.count` found."""

    writes: dict[str, dict[str, dict[str, int]]]
    """Quota writes: scenario namespace -> identity (`identity_label`) -> {"accepted": n,
    "refused": n}."""
    namespace_writes: dict[str, dict[str, dict[str, int]]]
    """The same for writes of the Namespace itself (labels, Rancher's annotation)."""
    harvester_errors: dict[str, int]
    """Scenario namespace -> error lines of Harvester's controllers naming it ({} when they do
    not run)."""
    harvester_error_causes: dict[str, dict[str, int]]
    """The same by cause (`error_cause`)."""
    unavailable: str | None
    """Why the writes could not be counted, or None."""

    def as_report(self) -> dict[str, object]:
        return {
            "writes_by_identity": self.writes,
            "namespace_writes_by_identity": self.namespace_writes,
            "harvester_error_lines": self.harvester_errors,
            "harvester_error_causes": self.harvester_error_causes,
            "unavailable": self.unavailable,
        }


def identity_label(user: str) -> str:
    """A short name for an audit user: ``harvester`` for Harvester's service account,
    ``harvester-quota`` for our controllers (in a scenario, or as deployed), else the user as it
    is."""
    return SHORT_NAMES.get(user, user)


def writes_by_identity(
    records: Iterable[AuditRecord], namespaces: Mapping[str, str], resource: str
) -> dict[str, dict[str, dict[str, int]]]:
    """Updates and patches of ``resource`` (``resourcequotas``: the run's quotas, by their
    namespace; ``namespaces``: the run's Namespaces themselves, by their name), per scenario
    namespace and identity."""
    scenario_name = {real: name for name, real in namespaces.items()}
    counts: dict[str, Counter[tuple[str, str]]] = {}
    for record in records:
        if record.verb not in QUOTA_WRITES or record.subresource or record.resource != resource:
            continue
        real = record.namespace if resource == "resourcequotas" else record.name
        name = scenario_name.get(real or "")
        if name is None:
            continue
        outcome = "accepted" if record.accepted else "refused"
        counts.setdefault(name, Counter())[(identity_label(record.user), outcome)] += 1
    return {name: _by_identity(counter) for name, counter in counts.items()}


def identity_totals(
    writes: Mapping[str, Mapping[str, Mapping[str, int]]], identity: str
) -> dict[str, int]:
    """One identity's writes summed over the run's namespaces (a report's
    `writes_by_identity`): {"accepted": n, "refused": n}."""
    total = {"accepted": 0, "refused": 0}
    for per_identity in writes.values():
        for key in total:
            total[key] += per_identity.get(identity, {}).get(key, 0)
    return total


def _by_identity(counter: Counter[tuple[str, str]]) -> dict[str, dict[str, int]]:
    table: dict[str, dict[str, int]] = {}
    for (identity, outcome), count in sorted(counter.items()):
        table.setdefault(identity, {"accepted": 0, "refused": 0})[outcome] = count
    return table


ERROR_CAUSES: Final = (
    ("refused by harvester-quota", "harvester-quota.io"),
    ("refused by Rancher's protection", "rancher.cattle.io"),
    ("conflict", "the object has been modified"),
    ("an object gone", "not found"),
)
"""A Harvester error line's cause, by what it quotes: our webhook's name, Rancher's webhook's,
the API server's optimistic-concurrency refusal, or an object (a VMI) that no longer exists."""


def error_cause(line: str) -> str:
    """The first of ERROR_CAUSES whose text the line quotes, else ``other``."""
    return next((cause for cause, text in ERROR_CAUSES if text in line), "other")


def error_lines_by_namespace(
    lines: Iterable[str], namespaces: Mapping[str, str]
) -> dict[str, dict[str, int]]:
    """Per scenario namespace, the lines logged at level error (logrus' ``level=error``) that name
    the run's namespace, by cause (`error_cause`)."""
    counts: dict[str, dict[str, int]] = {name: {} for name in namespaces}
    for line in lines:
        if "level=error" not in line:
            continue
        for name, real in namespaces.items():
            if real in line:
                cause = error_cause(line)
                counts[name][cause] = counts[name].get(cause, 0) + 1
    return counts
