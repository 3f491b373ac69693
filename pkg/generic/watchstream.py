"""Watch streams, as client-go's watch.StreamWatcher and its decoder: lines to typed events.

A watch response is a stream of JSON events, one per line, in the order the server sent them.
`split_lines` cuts the stream into lines (with no limit on a line's length) and
`decode_watch_line` makes each line a `WatchEvent` or refuses it: a stream that carried one
malformed event cannot be trusted any more, and the reflector relists.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import orjson

from . import deepjson, errors
from .resource import Object

WATCH_EVENT_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"})


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One line of a watch stream: ADDED, MODIFIED, DELETED, BOOKMARK or ERROR (a Status)."""

    type: str
    object: Object
    cut: int = 0
    """How many values nested deeper than deepjson.MAX_DEPTH were replaced by null."""


def decode_watch_line(line: bytes) -> WatchEvent:
    """Parses one watch event, refusing anything that is not a well-formed event.

    A truncated line, an unknown event type, or a Status where an object was expected raise
    DecodeError: the caller cannot trust the stream any more and must relist. A line nested
    deeper than orjson decodes is no such line: it is decoded with what lies deeper than
    deepjson.MAX_DEPTH cut (a tenant's JSON in a field KubeVirt keeps unknown), and the event
    says how much was cut.
    """
    try:
        raw, cut = deepjson.loads(line)
    except orjson.JSONDecodeError as error:
        raise errors.DecodeError(
            f"watch event is not valid JSON ({error}): {line[:200]!r}"
        ) from error
    if not isinstance(raw, dict) or not isinstance(raw.get("object"), dict):
        raise errors.DecodeError(f"watch event has no object: {line[:200]!r}")
    event_type = raw.get("type")
    if event_type not in WATCH_EVENT_TYPES:
        raise errors.DecodeError(f"unknown watch event type {event_type!r}")
    obj: Object = raw["object"]
    if event_type != "ERROR" and (obj.get("kind") == "Status" or "metadata" not in obj):
        raise errors.DecodeError(f"{event_type} event carries a Status, not an object: {obj}")
    return WatchEvent(event_type, obj, cut)


def status_error(status: Object) -> errors.ApiError:
    """The typed error an ERROR watch event stands for."""
    return errors.from_status(int(status.get("code") or 500), status)


async def split_lines(content: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """Splits a chunked stream into lines without a line-length limit, in order; blank lines
    are skipped.

    aiohttp's own readline refuses lines above its buffer limit, and one watch event (a large
    object) can exceed it; splitting chunks ourselves has no such limit and copies each byte once.
    """
    pending = bytearray()
    async for chunk in content.iter_any():
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                pending += chunk[start:]
                break
            if pending:
                pending += chunk[start:end]
                line = bytes(pending)
                pending.clear()
            else:
                line = chunk[start:end]
            start = end + 1
            if line.strip():
                yield line
    if pending.strip():
        # The stream ended in the middle of an event: hand the fragment on so that decoding
        # reports it as a truncated event instead of silently dropping it.
        yield bytes(pending)
