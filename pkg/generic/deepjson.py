"""JSON nested deeper than anything the product reads, cut to a bound instead of refused.

A field KubeVirt's schema keeps unknown (preserve-unknown-fields) holds whatever JSON a tenant
writes, however deep. orjson refuses to decode more than 1024 levels and to encode more than 254,
and one object it refuses stopped a whole cache (issue 38): the watch line, the list, the store's
encoding all failed on it, every relist again. No field the product reads is nested more than a
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

_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
"""A string (skipped whole, so brackets inside it are not counted) or a bracket."""
_QUOTE, _OPEN = 0x22, (0x5B, 0x7B)


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
    how many were. Strings are skipped whole, so brackets inside them do not count. A document
    whose brackets do not balance is returned with its unbalanced tail as it was (still invalid:
    the decoder then says so)."""
    out = bytearray()
    depth = copied = cut = 0
    skip_from = -1
    for match in _TOKEN.finditer(raw):
        start = match.start()
        first = raw[start]
        if first == _QUOTE:
            continue
        if first in _OPEN:
            depth += 1
            if depth == max_depth + 1 and skip_from < 0:
                out += raw[copied:start]
                out += b"null"
                skip_from = start
                cut += 1
            continue
        if depth == max_depth + 1 and skip_from >= 0:
            copied = match.end()
            skip_from = -1
        depth -= 1
    out += raw[copied:] if skip_from < 0 else raw[skip_from:]
    return bytes(out), cut


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


def depth_of(value: Any) -> int:
    """How many levels of dicts and lists `value` has (0 for a scalar); iterative."""
    deepest = 0
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        current, depth = pending.pop()
        if isinstance(current, dict):
            children: Any = current.values()
        elif isinstance(current, list):
            children = current
        else:
            continue
        deepest = max(deepest, depth)
        pending.extend((child, depth + 1) for child in children)
    return deepest


def describe(obj: Any) -> str:
    """An object as logs and Events name it: ``Kind namespace/name (uid)``, what can be read."""
    if not isinstance(obj, dict):
        return f"a {type(obj).__name__}, not an object"
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    namespace, name = meta.get("namespace"), meta.get("name")
    where = f"{namespace}/{name}" if namespace else str(name)
    return f"{obj.get('kind') or 'object'} {where} (uid {meta.get('uid') or '?'})"
