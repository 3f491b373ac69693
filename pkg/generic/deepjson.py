"""JSON nested deeper than anything the product reads, cut to a bound instead of refused.

A field KubeVirt's schema keeps unknown (preserve-unknown-fields) holds whatever JSON a tenant
writes, however deep. orjson refuses to decode more than 1024 levels and to encode more than 254,
and one object it refuses would stop a whole cache: the watch line, the list, the store's
encoding all fail on it, every relist again. No field the product reads is nested more than a
few dozen levels (a pod's or a VMI's deepest read is about 10), so values deeper than
`MAX_DEPTH` are replaced by null, in the bytes before decoding (`loads`) or in the dicts before
encoding (`cut_deep`). What is cut is what no reader looks at; the object keeps its name, its
version and everything shallower, so the cache still has it, and it is counted and logged
(informer.py).
"""

from __future__ import annotations

import re
from typing import Any, Final

import orjson

MAX_DEPTH: Final = 100
"""Levels kept from a document's root (the root object is level 1); a container deeper than
this becomes null. Well below orjson's limits (254 to encode, 1024 to decode), so a cut object
still encodes inside a wrapper (a watch event, an AdmissionReview), and far above any read."""

_STRING = rb'"[^"\\]*(?:\\.[^"\\]*)*"'
"""A JSON string, unrolled, so the regex engine runs over it in C without backtracking."""
_TEXT = rb'(?:[^"\[\]{}]|' + _STRING + rb")"
_SKIP = re.compile(_TEXT + rb"*", re.DOTALL)
"""Everything up to the next bracket outside a string, strings skipped whole; stops at a string
not yet terminated."""
_SKIP_LEAVES = re.compile(
    rb"(?:" + _TEXT + rb"|\[" + _TEXT + rb"*\]|\{" + _TEXT + rb"*\})*", re.DOTALL
)
"""The same, and containers holding no container too (one level up and back): skipped where that
level cannot be the first one cut nor the end of the value, which is nearly everywhere."""
_RUN = re.compile(rb"[\[{]+|[\]}]+")
"""A run of opening or of closing brackets: handled as one step however long."""
_QUOTE = 0x22
_OPENS = (0x5B, 0x7B)


class DepthScan:
    """One pass over a JSON text, resumable as more of it arrives: tracks the nesting and builds
    the text with every container deeper than `max_depth` replaced by ``null``. With `stop_at_end`
    it stops where the first value closes (depth back to 0) and sets `end` to that bracket's
    index, which is how listdecode finds the end of an item orjson refused for its depth.

    Each byte is looked at once, whatever `scan` is called with: the same text again, grown at its
    end. Strings and the text between brackets are skipped by a C-level regex; a run of brackets
    costs one Python step, so 1,000 levels of ``[[[...`` cost what one does."""

    def __init__(self, max_depth: int, *, stop_at_end: bool = False) -> None:
        self.max_depth = max_depth
        self.stop_at_end = stop_at_end
        self.cut = 0
        self.end = -1
        """The index of the bracket that closes the first value (with `stop_at_end`), else -1."""
        self.depth = 0
        self._out = bytearray()
        self._pos = 0
        self._copied = 0
        self._skip_from = -1

    def scan(self, raw: bytes | bytearray | memoryview) -> int:
        """Scans what `raw` has past the previous call; returns `end` (-1: not there yet)."""
        if self.end >= 0:
            return self.end
        size, pos, depth, limit = len(raw), self._pos, self.depth, self.max_depth + 1
        while True:
            skip = _SKIP if depth == limit - 1 and self._skip_from < 0 else _SKIP_LEAVES
            pos = skip.match(raw, pos).end()  # type: ignore[union-attr]  # always matches
            if pos >= size or raw[pos] == _QUOTE:
                break  # the text ends here, or in a string: wait for more
            run = _RUN.match(raw, pos)
            assert run is not None
            count = run.end() - pos
            if raw[pos] in _OPENS:
                if depth < limit <= depth + count and self._skip_from < 0:
                    start = pos + limit - depth - 1
                    self._out += raw[self._copied : start]
                    self._out += b"null"
                    self._skip_from = start
                    self.cut += 1
                depth += count
            else:
                if self._skip_from >= 0 and depth - count < limit <= depth:
                    self._copied = pos + depth - limit + 1
                    self._skip_from = -1
                if self.stop_at_end and depth - count <= 0:
                    self.end = pos + depth - 1
                    depth = 0
                    pos = self.end + 1
                    break
                depth -= count
            pos = run.end()
        self._pos, self.depth = pos, depth
        return self.end

    def text(self, raw: bytes | bytearray | memoryview) -> bytes:
        """The text scanned so far (up to `end` with `stop_at_end`), cut. A tail whose brackets
        do not balance is kept as it was (still invalid: the decoder then says so)."""
        stop = self.end + 1 if self.end >= 0 else len(raw)
        tail = raw[self._copied : stop] if self._skip_from < 0 else raw[self._skip_from : stop]
        return bytes(self._out) + bytes(tail)


def too_deep(error: Exception) -> bool:
    """Whether orjson refused a document (or an object) for its nesting, not its syntax."""
    message = str(error)
    return "depth limit" in message or "Recursion limit" in message


def loads(raw: bytes | bytearray | memoryview) -> tuple[Any, int]:
    """(the decoded value, how many values were cut). orjson decodes it if it can; a document
    orjson refuses for its depth is decoded with every container deeper than `MAX_DEPTH`
    replaced by null. Raises orjson.JSONDecodeError for anything else it refuses (a truncated or
    malformed document), as orjson.loads does."""
    try:
        return orjson.loads(raw), 0
    except orjson.JSONDecodeError as error:
        if not too_deep(error):
            raise
    cut_text, cut = cut_bytes(bytes(raw), MAX_DEPTH)
    return orjson.loads(cut_text), cut


def cut_bytes(raw: bytes, max_depth: int) -> tuple[bytes, int]:
    """`raw` with every array or object nested deeper than `max_depth` replaced by ``null``, and
    how many were (one DepthScan pass). Strings are skipped whole, so brackets inside them do not
    count. A document whose brackets do not balance is returned with its unbalanced tail as it
    was (still invalid: the decoder then says so)."""
    scan = DepthScan(max_depth)
    scan.scan(raw)
    return scan.text(raw), scan.cut


def cut_deep(value: Any, max_depth: int = MAX_DEPTH) -> int:
    """Replaces in place every dict or list nested deeper than `max_depth` (`value` itself is
    level 1) with None; returns how many were. Iterative: no Python recursion limit applies."""
    if not isinstance(value, dict | list):
        return 0
    cut = 0
    pending: list[tuple[dict[Any, Any] | list[Any], int]] = [(value, 1)]
    while pending:
        container, depth = pending.pop()
        slots = container.items() if isinstance(container, dict) else enumerate(container)
        for slot, child in list(slots):
            if not isinstance(child, dict | list):
                continue
            if depth + 1 > max_depth:
                container[slot] = None
                cut += 1
            else:
                pending.append((child, depth + 1))
    return cut


def describe(obj: Any) -> str:
    """An object as logs and Events name it: ``Kind namespace/name (uid)``, what can be read."""
    if not isinstance(obj, dict):
        return f"a {type(obj).__name__}, not an object"
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    namespace, name = meta.get("namespace"), meta.get("name")
    where = f"{namespace}/{name}" if namespace else str(name)
    return f"{obj.get('kind') or 'object'} {where} (uid {meta.get('uid') or '?'})"
