"""Instant evaluation of the parser's PromQL subset against a `SeriesDatabase`, with
Prometheus' semantics where the alert rules depend on them.

Followed: an instant selector takes each series' latest point within the 5-minute lookback
before the moment, and nothing when that point is a staleness marker; a range selector takes
the points in (moment - range, moment] (Prometheus 3's left-open window), markers dropped;
`offset` moves both back. increase() is Prometheus' extrapolated counter increase (resets
added back, extrapolated to the window's ends when the first/last sample is within 1.1 average
intervals of them, else by half an interval, never back past the counter's zero) and needs two
samples; present_over_time() is 1 for each series with a sample in its window. Arithmetic
and functions drop the metric name; comparisons without `bool` filter and keep the left (or
the vector) side's sample. Vector/vector operators match one-to-one on all
labels but the name; a side with two series of one signature is an error, as in Prometheus.
absent() returns 1 labelled with its selector's single equality matchers. `sum` of nothing is
nothing.

Simplified (none of which the rules meet): no native histograms, no `@`, no range queries
(one moment at a time); staleness markers only come from scrapes (`SeriesDatabase.record`);
the 5-minute lookback is fixed per evaluator.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

from .parser import (
    COMPARISONS,
    SET_OPERATORS,
    Binary,
    Call,
    Expr,
    Number,
    RangeSelector,
    Selector,
    Sum,
    Unsupported,
    parse,
)
from .series import Labels, Point, SeriesDatabase

LOOKBACK: Final = 300.0
"""Seconds an instant selector looks back for a series' latest point (Prometheus' default
--query.lookback-delta)."""
EXTRAPOLATION_SLACK: Final = 1.1
"""A window end within this many average sample intervals of a sample is extrapolated to."""


@dataclass(frozen=True)
class Sample:
    """One element of an instant vector."""

    labels: Labels
    value: float

    def get(self, label: str) -> str:
        return dict(self.labels).get(label, "")

    def signature(self) -> Labels:
        """The labels a one-to-one match compares: all but the name."""
        return _without_name(self.labels)


Vector = list[Sample]
Value = float | Vector
"""A scalar (float) or an instant vector."""


def _without_name(labels: Labels) -> Labels:
    return tuple((k, v) for k, v in labels if k != "__name__")


def _divide(a: float, b: float) -> float:
    if b != 0:
        return a / b
    if a == 0 or math.isnan(a):
        return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)


def _power(a: float, b: float) -> float:
    try:
        return float(a**b)
    except OverflowError:
        return math.inf
    except ZeroDivisionError:
        return math.inf


_ARITHMETIC: Final[dict[str, Callable[[float, float], float]]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": _divide,
    "%": lambda a, b: math.fmod(a, b) if b != 0 else math.nan,
    "^": _power,
}
_COMPARE: Final[dict[str, Callable[[float, float], bool]]] = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    ">=": lambda a, b: a >= b,
}


def extrapolated_increase(points: list[tuple[float, float]], start: float, end: float) -> float:
    """Prometheus' increase() of a counter's `points` (time-ordered, at least two) in the
    window (`start`, `end`]."""
    (first_t, first_v), (last_t, last_v) = points[0], points[-1]
    result = last_v - first_v
    for (_, before), (_, after) in itertools.pairwise(points):
        if after < before:  # a reset: the counter went on from 0
            result += before
    sampled = last_t - first_t
    average = sampled / (len(points) - 1)
    threshold = average * EXTRAPOLATION_SLACK
    to_start, to_end = first_t - start, end - last_t
    if to_start >= threshold:
        to_start = average / 2
    if result > 0 and first_v >= 0:
        to_start = min(to_start, sampled * first_v / result)
    if to_end >= threshold:
        to_end = average / 2
    return result * (sampled + to_start + to_end) / sampled


class Evaluator:
    """Evaluates expressions at given moments (Unix seconds) over one database."""

    def __init__(self, database: SeriesDatabase, lookback: float = LOOKBACK) -> None:
        self.database = database
        self.lookback = lookback

    def evaluate(self, expr: Expr | str, at: float) -> Value:
        """The value of `expr` at `at`; `Unsupported` for PromQL outside the subset, ValueError
        for what Prometheus refuses at evaluation (many-to-many matching, duplicate series)."""
        return self._eval(parse(expr) if isinstance(expr, str) else expr, at)

    def vector(self, expr: Expr | str, at: float) -> Vector:
        """`evaluate` for an expression that must give an instant vector (an alert's)."""
        value = self.evaluate(expr, at)
        if isinstance(value, float):
            raise ValueError(f"{expr!r} gives a scalar, not an instant vector")
        return value

    def firing(
        self, expr: Expr | str, at: float, hold: float = 0.0, interval: float = 30.0
    ) -> Vector:
        """The elements of an alert rule (`expr`, `for: hold`) firing at `at` when the rule is
        evaluated every `interval` seconds: those present at every evaluation from
        `at` - `hold` to `at` (Prometheus keeps an element pending until then)."""
        tree = parse(expr) if isinstance(expr, str) else expr
        now = self.vector(tree, at)
        moment = at - interval
        while moment >= at - hold - 1e-9 and now:
            earlier = {s.labels for s in self.vector(tree, moment)}
            now = [s for s in now if s.labels in earlier]
            moment -= interval
        return now

    def _eval(self, expr: Expr, at: float) -> Value:
        if isinstance(expr, Number):
            return expr.value
        if isinstance(expr, Selector):
            return self._instant(expr, at)
        if isinstance(expr, RangeSelector):
            raise Unsupported(f"a range vector where an instant one is needed: {expr}")
        if isinstance(expr, Call):
            return self._call(expr, at)
        if isinstance(expr, Sum):
            return _sum(self._vector_of(expr.expr, at), expr.by)
        return self._binary(expr, at)

    def _vector_of(self, expr: Expr, at: float) -> Vector:
        value = self._eval(expr, at)
        if isinstance(value, float):
            raise Unsupported(f"a scalar where an instant vector is needed: {expr}")
        return value

    def _series(self, selector: Selector) -> Iterator[tuple[Labels, list[Point]]]:
        return self.database.select(selector.name, selector.matchers)

    def _instant(self, selector: Selector, at: float) -> Vector:
        moment = at - selector.offset
        found = []
        for labels, points in self._series(selector):
            index = bisect.bisect_right(points, moment, key=lambda p: p[0])
            if index == 0:
                continue
            when, value = points[index - 1]
            if value is not None and when > moment - self.lookback:
                found.append(Sample(labels, value))
        return found

    def _window(
        self, ranged: RangeSelector, at: float
    ) -> Iterator[tuple[Labels, list[tuple[float, float]]]]:
        end = at - ranged.selector.offset
        start = end - ranged.seconds
        for labels, points in self._series(ranged.selector):
            inside = [(t, v) for t, v in points if start < t <= end and v is not None]
            yield labels, inside

    def _call(self, call: Call, at: float) -> Value:
        if call.function == "time":
            return float(at)
        if call.function == "absent":
            return _absent(self._vector_of(call.args[0], at), call.args[0])
        (ranged,) = call.args
        assert isinstance(ranged, RangeSelector)  # the parser checked
        end = at - ranged.selector.offset
        if call.function == "present_over_time":
            return [
                Sample(_without_name(labels), 1.0)
                for labels, points in self._window(ranged, at)
                if points
            ]
        return _unique(
            [
                Sample(
                    _without_name(labels),
                    extrapolated_increase(points, end - ranged.seconds, end),
                )
                for labels, points in self._window(ranged, at)
                if len(points) >= 2
            ]
        )

    def _binary(self, expr: Binary, at: float) -> Value:
        left, right = self._eval(expr.left, at), self._eval(expr.right, at)
        if expr.op in SET_OPERATORS:
            if isinstance(left, float) or isinstance(right, float):
                raise Unsupported(f"{expr.op!r} between a scalar and a vector")
            return _set_operation(expr.op, left, right)
        if isinstance(left, float) and isinstance(right, float):
            if expr.op in COMPARISONS:
                raise Unsupported(f"comparison {expr.op!r} of two scalars needs bool")
            return _ARITHMETIC[expr.op](left, right)
        if isinstance(right, float):
            return _vector_scalar(expr.op, left, right, swapped=False)  # type: ignore[arg-type]
        if isinstance(left, float):
            return _vector_scalar(expr.op, right, left, swapped=True)
        return _one_to_one(expr.op, left, right)


def _absent(vector: Vector, arg: Expr) -> Vector:
    if vector:
        return []
    labels: dict[str, str] = {}
    if isinstance(arg, Selector):
        equal = [m for m in arg.matchers if m.op == "=" and m.label != "__name__"]
        names = [m.label for m in equal]
        labels = {m.label: m.value for m in equal if names.count(m.label) == 1}
    return [Sample(tuple(sorted(labels.items())), 1.0)]


def _sum(vector: Vector, by: tuple[str, ...] | None) -> Vector:
    groups: dict[Labels, float] = {}
    for sample in vector:
        key = tuple(sorted((k, sample.get(k)) for k in by or () if sample.get(k)))
        groups[key] = groups.get(key, 0.0) + sample.value
    return [Sample(labels, value) for labels, value in groups.items()]


def _unique(vector: Vector) -> Vector:
    """Prometheus refuses a result with two elements of one label set (after names dropped)."""
    seen: set[Labels] = set()
    for sample in vector:
        if sample.labels in seen:
            raise ValueError(
                f"vector cannot contain metrics with the same labelset {dict(sample.labels)}"
            )
        seen.add(sample.labels)
    return vector


def _apply(op: str, sample: Sample, a: float, b: float) -> Sample | None:
    """`a op b` for `sample` (the vector side): a comparison keeps it or drops it, arithmetic
    gives a new value without the name."""
    if op in COMPARISONS:
        return sample if _COMPARE[op](a, b) else None
    return Sample(_without_name(sample.labels), _ARITHMETIC[op](a, b))


def _vector_scalar(op: str, vector: Vector, scalar: float, *, swapped: bool) -> Vector:
    out = []
    for sample in vector:
        a, b = (scalar, sample.value) if swapped else (sample.value, scalar)
        result = _apply(op, sample, a, b)
        if result is not None:
            out.append(result)
    return _unique(out)


def _one_to_one(op: str, left: Vector, right: Vector) -> Vector:
    by_signature: dict[Labels, Sample] = {}
    for sample in right:
        if sample.signature() in by_signature:
            raise ValueError(
                f"many-to-many matching not allowed: two right-hand series of {dict(sample.signature())}"
            )
        by_signature[sample.signature()] = sample
    out, matched = [], set()
    for sample in left:
        other = by_signature.get(sample.signature())
        if other is None:
            continue
        if sample.signature() in matched:
            raise ValueError(f"multiple matches for labels {dict(sample.signature())} on the left")
        matched.add(sample.signature())
        result = _apply(op, sample, sample.value, other.value)
        if result is not None:
            out.append(result)
    return _unique(out)


def _set_operation(op: str, left: Vector, right: Vector) -> Vector:
    right_signatures = {s.signature() for s in right}
    if op == "and":
        return [s for s in left if s.signature() in right_signatures]
    if op == "unless":
        return [s for s in left if s.signature() not in right_signatures]
    left_signatures = {s.signature() for s in left}
    return left + [s for s in right if s.signature() not in left_signatures]
