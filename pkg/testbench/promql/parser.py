"""A recursive-descent parser for the part of PromQL the chart's alert rules use.

Accepted: numbers; instant selectors with label matchers (=, !=, =~, !~); range selectors
(`[15m]`); `offset`; the functions increase(), present_over_time(), absent() and time();
`sum` with or without `by (...)`; the binary operators + - * / % ^, == != < > <= >=, and, or, unless, with
Prometheus' precedence (^ binds tightest and to the right; then * / %; + -; comparisons; and
unless; or loosest). Anything else PromQL has (bool, on/ignoring, group_left, other functions
and aggregations, subqueries, @, strings, unary minus) is refused with `Unsupported` naming the
construct, so a rule that starts to use one fails its test instead of being evaluated wrongly.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final, TypeVar

DURATION_UNITS: Final = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
    "y": 31536000.0,
}
"""Seconds per unit of a PromQL duration (a year is 365 days, as in Prometheus)."""

_TOKEN = re.compile(
    r"""
    (?P<space>\s+|\#[^\n]*)
    |(?P<duration>(?:\d+(?:ms|[smhdwy]))+(?![\w.]))
    |(?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
    |(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)
    |(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
    |(?P<op>=~|!~|!=|==|<=|>=|[-+*/%^<>=(){}\[\],@])
    """,
    re.VERBOSE,
)
_ESCAPES: Final = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'"}
_LEVELS: Final = (
    ("or",),
    ("and", "unless"),
    ("==", "!=", "<", ">", "<=", ">="),
    ("+", "-"),
    ("*", "/", "%"),
    ("^",),
)
"""Binary operators from the loosest to the tightest binding."""
SET_OPERATORS: Final = frozenset({"and", "or", "unless"})
COMPARISONS: Final = frozenset(_LEVELS[2])
_MODIFIERS: Final = frozenset({"bool", "on", "ignoring", "group_left", "group_right"})
_AGGREGATIONS: Final = frozenset(
    {"sum", "avg", "min", "max", "count", "group", "stddev", "stdvar", "topk", "bottomk"}
    | {"quantile", "count_values", "limitk", "limit_ratio"}
)
FUNCTIONS: Final = frozenset({"increase", "present_over_time", "absent", "time"})
RANGE_FUNCTIONS: Final = frozenset({"increase", "present_over_time"})


class Unsupported(ValueError):
    """The expression uses PromQL this evaluator does not implement (or is not PromQL)."""


@dataclass(frozen=True)
class Matcher:
    """One label matcher; regular expressions are anchored at both ends, as Prometheus'."""

    label: str
    op: str
    value: str

    def matches(self, actual: str) -> bool:
        """Whether a label value (the empty string for a missing label) passes."""
        if self.op in ("=", "!="):
            hit = actual == self.value
        else:
            hit = re.fullmatch(self.value, actual, flags=re.DOTALL) is not None
        return hit if self.op in ("=", "=~") else not hit


@dataclass(frozen=True)
class Number:
    value: float


@dataclass(frozen=True)
class Selector:
    """An instant vector selector; `name` is "" when only matchers are given."""

    name: str
    matchers: tuple[Matcher, ...]
    offset: float = 0.0


@dataclass(frozen=True)
class RangeSelector:
    selector: Selector
    seconds: float


@dataclass(frozen=True)
class Call:
    function: str
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Sum:
    """`sum` over everything (`by` None) or by the given labels."""

    by: tuple[str, ...] | None
    expr: Expr


@dataclass(frozen=True)
class Binary:
    op: str
    left: Expr
    right: Expr


Expr = Number | Selector | RangeSelector | Call | Sum | Binary


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    at: int


def parse_duration(text: str) -> float:
    """Seconds of a PromQL duration such as `15m` or `1h30m`; ValueError otherwise."""
    parts = re.findall(r"(\d+)(ms|[smhdwy])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a PromQL duration: {text!r}")
    return sum(int(n) * DURATION_UNITS[u] for n, u in parts)


def _tokens(text: str) -> Iterator[_Token]:
    at = 0
    while at < len(text):
        found = _TOKEN.match(text, at)
        if found is None:
            raise Unsupported(f"unexpected character {text[at]!r} at {at} in {text!r}")
        kind = found.lastgroup or ""
        if kind != "space":
            yield _Token(kind, found.group(), at)
        at = found.end()


def _unquote(token: _Token) -> str:
    body = token.text[1:-1]
    if token.text.startswith("`"):
        return body
    out, escaped = [], False
    for char in body:
        if escaped:
            if char not in _ESCAPES:
                raise Unsupported(f"escape \\{char} in {token.text} (at {token.at})")
            out.append(_ESCAPES[char])
            escaped = False
        elif char == "\\":
            escaped = True
        else:
            out.append(char)
    return "".join(out)


Item = TypeVar("Item")


class _Parser:
    """One expression's tokens, consumed left to right."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = list(_tokens(text))
        self.at = 0

    def peek(self) -> _Token | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def next(self) -> _Token:
        token = self.peek()
        if token is None:
            raise Unsupported(f"unexpected end of {self.text!r}")
        self.at += 1
        return token

    def expect(self, text: str) -> _Token:
        token = self.next()
        if token.text != text:
            raise Unsupported(f"expected {text!r}, found {token.text!r} at {token.at}")
        return token

    def accept(self, text: str) -> bool:
        token = self.peek()
        if token is not None and token.text == text and token.kind in ("op", "name"):
            self.at += 1
            return True
        return False

    def fail(self, what: str, token: _Token | None = None) -> Unsupported:
        where = f" at {token.at}" if token else ""
        return Unsupported(f"{what}{where} in {self.text!r}")

    def expression(self, level: int = 0) -> Expr:
        if level == len(_LEVELS):
            return self.primary()
        left = self.expression(level + 1)
        while (token := self.peek()) is not None and token.text in _LEVELS[level]:
            self.at += 1
            modifier = self.peek()
            if modifier is not None and modifier.text in _MODIFIERS:
                raise self.fail(f"the {modifier.text!r} modifier", modifier)
            # ^ is right-associative: its right side may hold another ^.
            right = self.expression(level if token.text == "^" else level + 1)
            left = Binary(token.text, left, right)
        return left

    def primary(self) -> Expr:
        token = self.next()
        if token.kind == "number":
            return Number(float(token.text))
        if token.kind == "string":
            raise self.fail("a string literal", token)
        if token.text == "(":
            inner = self.expression()
            self.expect(")")
            self.refuse_postfix()
            return inner
        if token.text == "{":
            self.at -= 1
            return self.selector("")
        if token.kind == "name":
            return self.named(token)
        raise self.fail(f"{token.text!r}", token)

    def refuse_postfix(self) -> None:
        token = self.peek()
        if token is not None and token.text in ("[", "offset", "@"):
            raise self.fail(f"{token.text!r} after an expression (a subquery or modifier)", token)

    def named(self, token: _Token) -> Expr:
        following = self.peek()
        if token.text in _AGGREGATIONS:
            return self.aggregation(token)
        if following is not None and following.text == "(":
            return self.call(token)
        return self.selector(token.text)

    def aggregation(self, token: _Token) -> Sum:
        if token.text != "sum":
            raise self.fail(f"the aggregation {token.text!r}", token)
        by = self.grouping()
        self.expect("(")
        inner = self.expression()
        self.expect(")")
        after = self.grouping()
        if by is not None and after is not None:
            raise self.fail("two groupings", token)
        self.refuse_postfix()
        return Sum(by if by is not None else after, inner)

    def grouping(self) -> tuple[str, ...] | None:
        token = self.peek()
        if token is None or token.text not in ("by", "without"):
            return None
        if token.text == "without":
            raise self.fail("'without'", token)
        self.at += 1
        self.expect("(")
        return tuple(self.comma_list(")", self.label_name))

    def comma_list(self, close: str, item: Callable[[], Item]) -> list[Item]:
        """What `item` parses, again and again, separated by commas, until `close` (consumed); a
        comma before `close` is allowed, as PromQL allows it in groupings and selectors."""
        items: list[Item] = []
        while not self.accept(close):
            if items:
                self.expect(",")
                if self.accept(close):
                    break
            items.append(item())
        return items

    def label_name(self) -> str:
        token = self.next()
        if token.kind != "name":
            raise self.fail(f"label name expected, found {token.text!r}", token)
        return token.text

    def call(self, token: _Token) -> Call:
        if token.text not in FUNCTIONS:
            raise self.fail(f"the function {token.text!r}", token)
        self.expect("(")
        args: list[Expr] = []
        while not self.accept(")"):
            if args:
                self.expect(",")
            args.append(self.expression())
        self.refuse_postfix()
        return _checked_call(Call(token.text, tuple(args)), self)

    def selector(self, name: str) -> Expr:
        matchers = self.comma_list("}", self.matcher) if self.accept("{") else []
        if not name and all(m.matches("") for m in matchers):
            raise self.fail("a selector without a metric name or a matcher that needs a value")
        seconds = self.range()
        offset = self.offset()
        token = self.peek()
        if token is not None and token.text in ("@", "["):
            raise self.fail(f"{token.text!r} after a selector", token)
        selector = Selector(name, tuple(matchers), offset)
        return selector if seconds is None else RangeSelector(selector, seconds)

    def matcher(self) -> Matcher:
        label = self.label_name()
        op = self.next()
        if op.text not in ("=", "!=", "=~", "!~"):
            raise self.fail(f"matcher operator expected, found {op.text!r}", op)
        value = self.next()
        if value.kind != "string":
            raise self.fail(f"a quoted label value expected, found {value.text!r}", value)
        return Matcher(label, op.text, _unquote(value))

    def range(self) -> float | None:
        if not self.accept("["):
            return None
        token = self.next()
        if token.kind != "duration":
            raise self.fail(f"a range duration expected, found {token.text!r}", token)
        close = self.next()
        if close.text != "]":
            raise self.fail(f"{close.text!r} in a range (a subquery)", close)
        return parse_duration(token.text)

    def offset(self) -> float:
        if not self.accept("offset"):
            return 0.0
        token = self.next()
        if token.kind != "duration":
            raise self.fail(f"an offset duration expected, found {token.text!r}", token)
        return parse_duration(token.text)


def _checked_call(call: Call, parser: _Parser) -> Call:
    """The argument types each supported function takes."""
    if call.function == "time" and call.args:
        raise parser.fail("time() takes no argument")
    arg = call.args[0] if len(call.args) == 1 else None
    if call.function in RANGE_FUNCTIONS and not isinstance(arg, RangeSelector):
        raise parser.fail(f"{call.function}() takes one range selector")
    if call.function == "absent" and (arg is None or isinstance(arg, (RangeSelector, Number))):
        raise parser.fail("absent() takes one instant vector")
    return call


def parse(text: str) -> Expr:
    """The expression `text` as a tree; `Unsupported` (a ValueError) names what it cannot
    read."""
    parser = _Parser(text)
    expr = parser.expression()
    rest = parser.peek()
    if rest is not None:
        raise parser.fail(f"unexpected {rest.text!r}", rest)
    return expr
