"""An in-memory time series database filled the way Prometheus' scrapes fill its own.

Each `record` is one scrape of one target at one moment: the exposition text's samples get the
target's labels (honor_labels: a label the sample carries itself wins, as the chart's PodMonitors
set it), `up` is written 1, or 0 when the scrape failed (`text` None), and every series the
target's previous scrape had but this one lacks gets a staleness marker, as Prometheus writes
one (all of them when the scrape failed). Timestamps are the scrape's, in seconds; scrapes of
one target are recorded in time order. Not thread-safe.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from .parser import Matcher

Labels = tuple[tuple[str, str], ...]
"""A series' labels, sorted by name, __name__ among them."""
STALE: float | None = None
"""A staleness marker's value: the series ends here."""
Point = tuple[float, float | None]


def labels_of(mapping: Mapping[str, str]) -> Labels:
    """The sorted label tuple of `mapping`, empty values left out (as Prometheus does)."""
    return tuple(sorted((k, v) for k, v in mapping.items() if v != ""))


@dataclass(frozen=True)
class Target:
    """One scrape target: its job, instance and the other target labels (pod, namespace)."""

    job: str
    instance: str
    extra: Mapping[str, str] = field(default_factory=dict)

    def labels(self) -> dict[str, str]:
        return {**self.extra, "job": self.job, "instance": self.instance}


class SeriesDatabase:
    """Series by label set, each a time-ordered list of points (STALE marks an end)."""

    def __init__(self) -> None:
        self._points: dict[Labels, list[Point]] = {}
        self._by_name: dict[str, dict[Labels, list[Point]]] = {}
        self._last_scrape: dict[tuple[str, str], set[Labels]] = {}

    def append(self, labels: Mapping[str, str], at: float, value: float | None) -> None:
        """One point of the series `labels`; ValueError if it goes back in time."""
        key = labels_of(labels)
        points = self._points.get(key)
        if points is None:
            points = self._points[key] = []
            self._by_name.setdefault(labels.get("__name__", ""), {})[key] = points
        if points and points[-1][0] > at:
            raise ValueError(f"point at {at} before the last one of {dict(key)}")
        points.append((at, value))

    def record(self, at: float, target: Target, text: str | None) -> None:
        """One scrape of `target` at `at`: its text, or None when it failed."""
        seen: set[Labels] = set()
        if text is not None:
            for labels, value in _samples(text, target):
                self.append(labels, at, value)
                seen.add(labels_of(labels))
        key = (target.job, target.instance)
        for gone in self._last_scrape.get(key, set()) - seen:
            self._points[gone].append((at, STALE))
        self._last_scrape[key] = seen
        up = {**target.labels(), "__name__": "up"}
        self.append(up, at, 0.0 if text is None else 1.0)

    def select(
        self, name: str, matchers: tuple[Matcher, ...]
    ) -> Iterator[tuple[Labels, list[Point]]]:
        """Every series named `name` (any name when "") whose labels pass every matcher."""
        candidates = self._by_name.get(name, {}) if name else self._points
        for labels, points in candidates.items():
            have = dict(labels)
            if all(m.matches(have.get(m.label, "")) for m in matchers):
                yield labels, points


def _samples(text: str, target: Target) -> Iterator[tuple[dict[str, str], float]]:
    """The exposition's samples with the target's labels under their own (honor_labels)."""
    base = target.labels()
    for labels, value in _parsed(text):
        yield {**base, **dict(labels)}, value


@functools.lru_cache(maxsize=512)
def _parsed(text: str) -> tuple[tuple[Labels, float], ...]:
    """The samples of an exposition text, each with its name as __name__ (parsed once: tests
    replay the same texts many times)."""
    return tuple(
        (labels_of({**sample.labels, "__name__": sample.name}), float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    )
