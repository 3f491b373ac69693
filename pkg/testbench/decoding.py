"""Driving and measuring the product's JSON decoding in tests and benches.

``split_list`` feeds a whole LIST response to the product's ``ListSplitter`` in chunks, as a
response body arrives; ``depth_of`` measures how deep a decoded value nests (what the product's
depth cut bounds).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..generic.listdecode import ListSplitter


def split_list(
    raw: bytes, each: Callable[[dict[str, Any]], Any] | None = None, *, chunk: int = 1 << 16
) -> tuple[dict[str, Any], list[Any]]:
    """A whole response, fed in chunks: (the List without items, its items through ``each``)."""
    splitter = ListSplitter(each)
    for start in range(0, len(raw), chunk):
        splitter.feed(raw[start : start + chunk])
    return splitter.finish(), splitter.items


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
