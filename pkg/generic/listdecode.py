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
        at = self._buffer.find(ITEMS_OPEN)
        if at < 0:
            if len(self._buffer) > MAX_PENDING_BYTES:
                self._whole = True
            return False
        head = bytes(self._buffer[:at])
        if not _is_top_level(head):
            # An "items" array nested in something before the List's own: only a whole decode
            # can tell which one is the List's (or that there is none).
            self._whole = True
            return False
        self._head = head
        del self._buffer[: at + len(ITEMS_OPEN)]
        return True

    def _learn_boundary(self) -> bool:
        """Reads the first item's first key; an empty list or an odd layout is left to finish."""
        if len(self._buffer) < 2 + 64 + 2:
            return False
        match = _FIRST_KEY.match(self._buffer)
        if match is None:
            if self._buffer[:1] != b"]":
                self._whole = True
            return False
        self._boundary = b'},{"' + match.group(1) + b'":'
        return True

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
            try:
                item = orjson.loads(memoryview(buffer)[: end + 1])
            except orjson.JSONDecodeError as error:
                if deepjson.too_deep(error):
                    self._deep = deepjson.DepthScan(deepjson.MAX_DEPTH, stop_at_end=True)
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
            search_from = 0
            for _ in range(MAX_TRIES_PER_ITEM):
                end = buffer.find(b"}]", search_from)
                if end < 0:
                    break
                try:
                    item = orjson.loads(memoryview(buffer)[: end + 1])
                except orjson.JSONDecodeError as error:
                    if deepjson.too_deep(error):
                        self._deep = deepjson.DepthScan(deepjson.MAX_DEPTH, stop_at_end=True)
                        break
                    search_from = end + 1
                    continue
                del buffer[: end + 2]
                self._items_closed = True
                self._keep(item)
                return
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
        if self._head is None:
            document = bytes(self._buffer)
        else:
            document = self._head + ITEMS_OPEN + bytes(self._buffer)
        decoded, cut = _loads(document)
        if "items" not in decoded:
            raise ListDecodeError(f"not a List: no items array in {document[:200]!r}")
        # Go encodes an empty (nil) slice as null; client-go reads that as no items.
        rest = decoded.pop("items")
        rest = [] if rest is None else rest
        if not isinstance(rest, list):
            raise ListDecodeError(f"not a List: items is not an array in {document[:200]!r}")
        if cut:
            log.warning(
                "a list: %d values nested deeper than %d levels cut", cut, deepjson.MAX_DEPTH
            )
            self.cut += cut
        for item in rest:
            self._keep(item)
        self.list_object = decoded

    def _decode_list_object(self, tail: bytes) -> None:
        assert self._head is not None
        decoded, _ = _loads(self._head + ITEMS_EMPTY + tail)
        decoded.pop("items", None)
        self.list_object = decoded


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


def split_list(
    raw: bytes, each: Callable[[dict[str, Any]], Any] | None = None, *, chunk: int = 1 << 16
) -> tuple[dict[str, Any], list[Any]]:
    """A whole response, fed in chunks: (the List without items, its items through ``each``)."""
    splitter = ListSplitter(each)
    for start in range(0, len(raw), chunk):
        splitter.feed(raw[start : start + chunk])
    return splitter.finish(), splitter.items
