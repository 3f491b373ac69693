"""What a scenario run keeps so that a failure explains itself.

A run's report used to hold the quota's spec.hard over time and nothing else: when a quota stayed
raised, nobody could tell whether our controller never released it, Rancher's agent never copied
the release, or the run looked too early. So each run also keeps:

- the namespace's and the quota's annotations that say who raised what (`facts_of`), sampled with
  every look at the quota and kept only when they change (`changes`);
- the log lines our controllers and the bench's Rancher agent wrote about the run's namespaces
  (`LogCapture`): the plans, the writes, the refusals;
- Rancher's agent's writes of the quota (the runner adds them from the simulator).

Test bench only. Not thread-safe: the event loop's thread writes all of it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...generic.meta import annotations_of, labels
from ...util.annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA, LABEL_ROOM_HELD
from ...util.resourcequota.base import ANNOTATION_RANCHER_APPLIED, ANNOTATION_RANCHER_BASE

NAMESPACE_FACTS = (
    CATTLE_ANNOTATION_RESOURCE_QUOTA,
    ANNOTATION_RANCHER_BASE,
    ANNOTATION_RANCHER_APPLIED,
)
"""The namespace annotations a raise through Rancher reads and writes."""
QUOTA_FACT_PREFIXES = ("harvesterhci.io/", "harvester-quota.io/")
"""The quota annotations ours and Harvester's controllers write."""
LOGGERS = ("harvester_quota.controller", "harvester_quota.testbench.sim.rancher")
MAX_LINES = 2000
"""Log lines kept per run: a run that loops writes no report of gigabytes."""


def facts_of(
    namespace: Mapping[str, Any] | None, quota: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The facts of one look: who raised what, in the namespace and in the quota."""
    namespace_annotations = annotations_of(namespace)
    facts: dict[str, Any] = {
        key: namespace_annotations[key] for key in NAMESPACE_FACTS if key in namespace_annotations
    }
    if namespace is not None and LABEL_ROOM_HELD in labels(namespace):
        facts[LABEL_ROOM_HELD] = labels(namespace)[LABEL_ROOM_HELD]
    facts["quota"] = {
        key: value
        for key, value in annotations_of(quota).items()
        if key.startswith(QUOTA_FACT_PREFIXES)
    }
    if quota is not None:
        facts["hard"] = dict((quota.get("spec") or {}).get("hard") or {})
    return facts


@dataclass(frozen=True)
class Look:
    """The facts of one namespace at one moment (seconds into the run)."""

    at: float
    namespace: str
    facts: dict[str, Any]


def changes(looks: Iterable[Look]) -> list[dict[str, Any]]:
    """The looks whose facts differ from the namespace's look before, in order."""
    last: dict[str, dict[str, Any]] = {}
    kept = []
    for look in looks:
        if last.get(look.namespace) != look.facts:
            kept.append({"at": round(look.at, 2), "namespace": look.namespace, **look.facts})
            last[look.namespace] = look.facts
    return kept


class LogCapture(logging.Handler):
    """Keeps the INFO-and-above lines of the controllers' and the bench Rancher agent's loggers
    that name one of `names` (the run's namespaces), stamped by `now` (seconds into the run).
    `attach` lowers those loggers to INFO for the run; `detach` puts them back."""

    def __init__(self, names: Sequence[str], now: Callable[[], float]) -> None:
        super().__init__(logging.INFO)
        self.names = tuple(names)
        self.now = now
        self.lines: list[tuple[float, str]] = []
        self._levels: dict[str, int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.lines) >= MAX_LINES:
            return
        try:
            text = record.getMessage()
        except (TypeError, ValueError):
            return
        if any(name in text for name in self.names):
            self.lines.append((self.now(), f"{record.levelname} {record.name}: {text}"))

    def attach(self) -> None:
        for name in LOGGERS:
            logger = logging.getLogger(name)
            self._levels[name] = logger.level
            if logger.getEffectiveLevel() > logging.INFO:
                logger.setLevel(logging.INFO)
            logger.addHandler(self)

    def detach(self) -> None:
        for name, level in self._levels.items():
            logger = logging.getLogger(name)
            logger.removeHandler(self)
            logger.setLevel(level)
        self._levels.clear()

    def as_report(self) -> list[dict[str, Any]]:
        return [{"at": round(at, 2), "line": line} for at, line in self.lines]
