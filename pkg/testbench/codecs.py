"""The store codecs the benches and tests compare with the product's ``ZstdCodec``.

A ``Store`` takes any ``Codec``: ``JsonCodec`` (exact-size JSON bytes: faster, about twice the
memory), ``ZlibCodec`` (JSON at zlib level 1, the store's default before zstd) and ``DictCodec``
(the dicts themselves: fastest reads, most memory, and readers must treat them as read-only, as
client-go's listers require). ``BY_NAME`` names them with the product's for the benches'
command lines (bench/RESULTS.md).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any, Final

import orjson

from ..generic.resource import Object
from ..generic.store import Codec
from ..generic.zstdcodec import ZstdCodec, exact_bytes


class DictCodec:
    """Keeps the dicts: fastest reads, most memory; readers must not mutate what they get."""

    def encode(self, obj: Object) -> Any:
        return obj

    def decode(self, stored: Any) -> Object:
        result: Object = stored
        return result


class JsonCodec:
    """Exact-size JSON bytes (orjson over-allocates its output buffer, so it is copied once)."""

    def encode(self, obj: Object) -> Any:
        return exact_bytes(orjson.dumps(obj))

    def decode(self, stored: Any) -> Object:
        result: Object = orjson.loads(stored)
        return result


class ZlibCodec:
    """JSON compressed at level 1 (the default): about 40 % of JsonCodec's memory."""

    def encode(self, obj: Object) -> Any:
        return zlib.compress(orjson.dumps(obj), 1)

    def decode(self, stored: Any) -> Object:
        result: Object = orjson.loads(zlib.decompress(stored))
        return result


BY_NAME: Final[dict[str, Callable[[], Codec]]] = {
    "dict": DictCodec,
    "json": JsonCodec,
    "zlib": ZlibCodec,
    "zstd": ZstdCodec,
}
"""Every codec by name; each call makes a fresh instance (a zstd dictionary fits one cache)."""
