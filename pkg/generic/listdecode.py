"""Decoding a List response one item at a time, while it arrives.

Why: decoding a list whole means the raw body and every item's dicts exist at once. For 50,000
pods that is about 570 MB of JSON becoming some 3 GB of dicts, and because a few small objects
that outlive the list (cache keys, index entries) end up scattered over all of the allocator's
arenas, the process keeps most of that peak as RSS for good. Decoded item by item, one item's
dicts exist at a time and the cache holds only what the caller keeps of each.

How items are found without a JSON tokenizer in Python: the API server writes compact JSON, and
every item of a list starts with the same key (``"metadata"`` for built-in kinds, ``"apiVersion"``
for custom resources, whose keys come sorted). So items are separated by ``},{"<first key>":``.
That sequence can also occur inside an item (a nested list of objects starting with the same
key, such as ownerReferences), but never inside a string, where a quote is escaped. Every
occurrence is therefore a candidate end of the item: a candidate inside a nested list leaves
braces open and orjson refuses the prefix, so the search moves on to the next one. The first
prefix that parses is the item, because no shorter prefix of an object is balanced.

Anything that does not look like that (whitespace, an unexpected first item, an item that will not
parse within a bounded number of tries) switches to decoding the remainder whole, which is always
correct and only costs the memory this module exists to save.

An item nested deeper than orjson decodes (a tenant's JSON in a field KubeVirt keeps unknown) is
decoded with what lies deeper than deepjson.MAX_DEPTH cut, never refused (a refused item would
fail the whole list, every relist again). `cut` counts the values cut; the item is logged. The
first candidate end orjson refuses for its depth switches that item to one bracket-aware pass
(deepjson.DepthScan, resumed as chunks arrive) that finds the item's end and cuts it at once; the
candidates are not tried further. Cutting each candidate prefix instead took 10.7 s on the event
loop for one 844 KB VMI with many item-like boundaries inside a deep clock (bench/RESULTS.md).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any, Final

import orjson

from . import deepjson

log = logging.getLogger(__name__)

ITEMS_OPEN: Final = b'"items":['
ITEMS_EMPTY: Final = b'"items":[]'
_FIRST_KEY = re.compile(rb'\{"([A-Za-z0-9_]{1,64})":')
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
MAX_TRIES_PER_ITEM: Final = 64
"""Failed candidate ends tolerated for one item before falling back (a pod has a handful)."""
MAX_PENDING_BYTES: Final = 16 << 20
"""An item this long without a parse is not one (etcd stores at most 1.5 MiB per object)."""


class ListDecodeError(ValueError):
    """The response is not a JSON List: truncated, not JSON, or without an items array."""


class ListSplitter:
    """Feed it a List response in chunks of any size; it returns each item as soon as it is whole.

    ``each`` is applied to every item as it is decoded (so a caller can keep a compact form of it
    and let the dicts go); ``items`` collects what it returns. After ``finish``, ``list_object`` is
    the List without its items (kind, apiVersion and metadata, wherever the server put them).
    """

    def __init__(self, each: Callable[[dict[str, Any]], Any] | None = None) -> None:
        self._each = each
        self.items: list[Any] = []
        self.list_object: dict[str, Any] = {}
        self._buffer = bytearray()
        self._head: bytes | None = None
        self._boundary: bytes | None = None
        self._search_from = 0
        self._tries = 0
        self._deep: deepjson.DepthScan | None = None
        """The pass over the item at the buffer's start once orjson refused it for its depth."""
        self._items_closed = False
        self._whole = False
        self.cut = 0
        """Values nested deeper than deepjson.MAX_DEPTH replaced by null, over every item."""

    # Feeding ----------------------------------------------------------------------------------

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        if self._whole or self._items_closed:
            return
        if self._head is None and not self._find_items():
            return
        if self._boundary is None and not self._learn_boundary():
            return
        self._take_items()

    def finish(self) -> dict[str, Any]:
        """The response ended: decodes what is left and returns the List without its items."""
        if self._head is None:
            self._whole = True
        if not self._whole and not self._items_closed:
            if self._buffer[:1] == b"]":
                del self._buffer[:1]
                self._items_closed = True
            else:
                self._take_last_item()
        if self._whole:
            self._decode_rest_whole()
        else:
            self._decode_list_object(bytes(self._buffer))
        self._buffer = bytearray()
        return self.list_object

    # Finding the items ------------------------------------------------------------------------

    def _find_items(self) -> bool:
        self._head, self._whole = _items_head(self._buffer)
        if self._head is None:
            return False
        del self._buffer[: len(self._head) + len(ITEMS_OPEN)]
        return True

    def _learn_boundary(self) -> bool:
        """Reads the first item's first key; an empty list or an odd layout is left to finish."""
        self._boundary, self._whole = _item_boundary(self._buffer)
        return self._boundary is not None

    def _take_items(self) -> None:
        assert self._boundary is not None
        buffer = self._buffer
        while not self._whole and not self._items_closed:
            if self._deep is not None:
                if not self._take_deep_item():
                    return
                continue
            end = buffer.find(self._boundary, self._search_from)
            if end < 0:
                self._search_from = max(self._search_from, len(buffer) - len(self._boundary))
                if len(buffer) > MAX_PENDING_BYTES:
                    self._whole = True
                return
            item, too_deep = _item_ending_at(buffer, end)
            if item is None:
                if too_deep:
                    self._deep = _depth_pass()
                else:
                    self._missed(end)
                continue
            del buffer[: end + 2]  # the item and the comma after it
            self._search_from = 0
            self._tries = 0
            self._keep(item)

    def _take_deep_item(self) -> bool:
        """Advances the depth pass over the item at the buffer's start; takes the item once its
        end and the character after it are in. False: wait for more."""
        assert self._deep is not None
        buffer = self._buffer
        end = self._deep.scan(buffer)
        if end < 0 or len(buffer) <= end + 1:
            if len(buffer) > MAX_PENDING_BYTES:
                self._whole = True
            return False
        after = buffer[end + 1]
        if after not in b",]":
            self._whole = True
            return False
        item = self._decode_deep(end)
        if item is None:
            return False
        del buffer[: end + 1 if after == ord("]") else end + 2]
        if after == ord("]"):
            del buffer[:1]
            self._items_closed = True
        self._search_from = 0
        self._tries = 0
        return True

    def _decode_deep(self, end: int) -> dict[str, Any] | None:
        """The item the depth pass found ending at `end`, cut and kept; None (decoding the rest
        whole) if even cut it does not parse."""
        assert self._deep is not None
        deep, self._deep = self._deep, None
        try:
            item = orjson.loads(deep.text(self._buffer))
        except orjson.JSONDecodeError:
            self._whole = True
            return None
        self._keep(item, deep.cut)
        return item  # type: ignore[no-any-return]

    def _take_last_item(self) -> None:
        """The last item ends at the first ``}]`` whose prefix parses; failing that, decode whole."""
        buffer = self._buffer
        if self._deep is None:
            end, item, too_deep = _last_item(buffer)
            if item is not None:
                del buffer[: end + 2]
                self._items_closed = True
                self._keep(item)
                return
            if too_deep:
                self._deep = _depth_pass()
        if self._deep is not None:
            end = self._deep.scan(buffer)
            if (
                end >= 0
                and buffer[end + 1 : end + 2] == b"]"
                and self._decode_deep(end) is not None
            ):
                del buffer[: end + 2]
                self._items_closed = True
                return
        self._whole = True

    def _missed(self, end: int) -> None:
        self._search_from = end + 1
        self._tries += 1
        if self._tries > MAX_TRIES_PER_ITEM:
            self._whole = True

    def _keep(self, item: Any, cut: int = 0) -> None:
        if not isinstance(item, dict):
            raise ListDecodeError(f"list item is not an object: {str(item)[:200]}")
        if cut:
            self.cut += cut
            log.warning(
                "%s: %d values nested deeper than %d levels cut",
                deepjson.describe(item),
                cut,
                deepjson.MAX_DEPTH,
            )
        self.items.append(self._each(item) if self._each else item)

    # The rest ------------------------------------------------------------------------------------

    def _decode_rest_whole(self) -> None:
        """What is left, decoded in one go: the header, the items not yet taken, the tail."""
        self.list_object, rest, cut = decode_whole(self._head, bytes(self._buffer))
        if cut:
            log.warning(
                "a list: %d values nested deeper than %d levels cut", cut, deepjson.MAX_DEPTH
            )
            self.cut += cut
        for item in rest:
            self._keep(item)

    def _decode_list_object(self, tail: bytes) -> None:
        assert self._head is not None
        decoded, _ = _loads(self._head + ITEMS_EMPTY + tail)
        decoded.pop("items", None)
        self.list_object = decoded


def _items_head(buffer: bytearray) -> tuple[bytes | None, bool]:
    """(what precedes the List's ``"items":[``, False) once the buffer holds it; (None, True)
    where only a whole decode can tell (MAX_PENDING_BYTES without it, or an "items" array nested
    in something before the List's own); (None, False): wait for more."""
    at = buffer.find(ITEMS_OPEN)
    if at < 0:
        return None, len(buffer) > MAX_PENDING_BYTES
    head = bytes(buffer[:at])
    if not _is_top_level(head):
        return None, True
    return head, False


def _item_boundary(buffer: bytearray) -> tuple[bytes | None, bool]:
    """(what separates the items, False) from the first item's first key at the buffer's start;
    (None, True) for a layout only a whole decode reads; (None, False) for an empty list, or to
    wait for more."""
    if len(buffer) < 2 + 64 + 2:
        return None, False
    match = _FIRST_KEY.match(buffer)
    if match is None:
        return None, buffer[:1] != b"]"
    return b'},{"' + match.group(1) + b'":', False


def _last_item(buffer: bytearray) -> tuple[int, Any, bool]:
    """The last item, ending at the first ``}]`` whose prefix parses, of at most
    MAX_TRIES_PER_ITEM: (its end, the item, False); (-1, None, True) once orjson refused a
    candidate for its depth; (-1, None, False) if none parsed."""
    search_from = 0
    for _ in range(MAX_TRIES_PER_ITEM):
        end = buffer.find(b"}]", search_from)
        if end < 0:
            break
        item, too_deep = _item_ending_at(buffer, end)
        if too_deep:
            return -1, None, True
        if item is not None:
            return end, item, False
        search_from = end + 1
    return -1, None, False


def _item_ending_at(buffer: bytearray, end: int) -> tuple[Any, bool]:
    """(the item, False) if the buffer up to `end` (a candidate closing brace) parses; else
    (None, whether orjson refused it for its depth: then only a depth pass can find its end)."""
    try:
        return orjson.loads(memoryview(buffer)[: end + 1]), False
    except orjson.JSONDecodeError as error:
        return None, deepjson.too_deep(error)


def _depth_pass() -> deepjson.DepthScan:
    """The bracket-aware pass over an item orjson refused for its depth (module docstring)."""
    return deepjson.DepthScan(deepjson.MAX_DEPTH, stop_at_end=True)


def decode_whole(head: bytes | None, rest: bytes) -> tuple[dict[str, Any], list[Any], int]:
    """A List decoded in one go from what came before its items array (`head`, None if it was
    never found) and the rest of the response: (the List without items, its items, how many
    values were cut for their depth)."""
    document = rest if head is None else head + ITEMS_OPEN + rest
    decoded, cut = _loads(document)
    if "items" not in decoded:
        raise ListDecodeError(f"not a List: no items array in {document[:200]!r}")
    # Go encodes an empty (nil) slice as null; client-go reads that as no items.
    items = decoded.pop("items")
    items = [] if items is None else items
    if not isinstance(items, list):
        raise ListDecodeError(f"not a List: items is not an array in {document[:200]!r}")
    return decoded, items, cut


def _loads(document: bytes) -> tuple[dict[str, Any], int]:
    """The List object and how many values were cut (deepjson.loads)."""
    try:
        decoded, cut = deepjson.loads(document)
    except orjson.JSONDecodeError as error:
        raise ListDecodeError(f"undecodable list ({error}): {document[:200]!r}") from error
    if not isinstance(decoded, dict):
        raise ListDecodeError(f"not a List object: {document[:200]!r}")
    return decoded, cut


def _is_top_level(head: bytes) -> bool:
    """Whether the ``"items":[`` that follows ``head`` is a key of the outermost object: ``head``
    opens exactly one more bracket than it closes, strings aside."""
    structure = _STRING.sub(b"", head)
    opened = structure.count(b"{") + structure.count(b"[")
    return opened - structure.count(b"}") - structure.count(b"]") == 1
