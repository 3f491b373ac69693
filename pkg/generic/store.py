"""The informer cache: objects keyed ``namespace/name``, with indexes, stored compactly.

A decoded pod costs about 12 KB as Python dicts; the same pod re-encoded as JSON bytes about
5-6 KB, compressed at zlib level 1 about 2 KB, and with zstd and a dictionary trained on the
cache's own objects a few hundred bytes. Caches therefore store bytes and hand out a fresh dict
on every read, which callers may mutate freely. The codec, ``ZstdCodec`` (zstdcodec.py), is the
smallest of the codecs measured that store bytes and, after plain JSON, the fastest to write
(bench/RESULTS.md): a few µs per write and per read more than plain JSON. The others measured
(JSON, zlib, the dicts themselves) are the bench's, in ``harvester_quota.testbench.codecs``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from . import deepjson
from .resource import Object, key_of
from .storeindex import IndexFunc, StoreIndex
from .storeviews import StoreViews, ViewFailed, ViewListener
from .zstdcodec import ZstdCodec

__all__ = [
    "LAST_APPLIED",
    "NAMESPACE_INDEX",
    "Change",
    "Codec",
    "Encoded",
    "IndexFunc",
    "NamespaceObjects",
    "Prepared",
    "StageFailed",
    "Store",
    "Tombstone",
    "Transform",
    "ViewListener",
    "ZstdCodec",
    "namespace_index",
    "strip_unread_fields",
]

Transform = Callable[[Object], Object]

NAMESPACE_INDEX = "namespace"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def namespace_index(obj: Object) -> list[str]:
    namespace = (obj.get("metadata") or {}).get("namespace")
    return [namespace] if namespace else []


def strip_unread_fields(obj: Object) -> Object:
    """The default transform: drops managedFields and kubectl's last-applied annotation.

    Nobody here reads either, and together they are often half of an object's size.
    """
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
        annotations = metadata.get("annotations")
        if isinstance(annotations, dict) and LAST_APPLIED in annotations:
            del annotations[LAST_APPLIED]
    return obj


@dataclass(frozen=True, slots=True)
class Tombstone:
    """A delete seen only as absence from a relist: the last state we knew (client-go's
    DeletedFinalStateUnknown). Handlers receive it instead of the object."""

    key: str
    obj: Object


class Codec(Protocol):
    """How the store holds an object: encode on write, decode on every read."""

    def encode(self, obj: Object) -> Any: ...

    def decode(self, stored: Any) -> Object: ...


class Encoded:
    """An object as the store holds it, decoded when first asked for and then shared.

    Notifications carry these rather than dicts, so that a relist's changes, held until each
    is told, cost what the cache costs (the same bytes), not a dict each; and a handler that
    reads only the new object never decodes the old.
    """

    __slots__ = ("_codec", "_object", "stored")

    def __init__(self, stored: Any, codec: Codec) -> None:
        self.stored = stored
        self._codec = codec
        self._object: Object | None = None

    def get(self) -> Object:
        """The object, decoded now into a private dict (the stored bytes are never shared)."""
        if self._object is None:
            self._object = self._codec.decode(self.stored)
        return self._object


@dataclass(frozen=True, slots=True)
class Change:
    """One difference a replace found: added (old None), updated, or deleted (new None)."""

    key: str
    old: Encoded | None
    new: Encoded | None
    old_version: str = ""
    new_version: str = ""

    @property
    def unchanged(self) -> bool:
        """A relist found nothing new for this key: the same resourceVersion (the API server's
        word that the object did not change; list items and watch objects of one version may
        still encode differently, e.g. with kind and apiVersion in another place), or, for
        objects without one, the same encoding."""
        if self.old is None or self.new is None:
            return False
        if self.old_version and self.new_version:
            return self.old_version == self.new_version
        return bool(self.old.stored == self.new.stored)


class StageFailed(Exception):
    """One object could not be made ready for the store; the store is unchanged by it.

    `stage` says where: ``key`` (no namespace/name), ``encode`` (the codec refused it), ``index``
    (an index function raised) or ``view`` (a view's derive raised); the cause is chained."""

    def __init__(self, stage: str, cause: BaseException) -> None:
        super().__init__(f"{stage}: {type(cause).__name__}: {cause}")
        self.stage = stage


@dataclass(frozen=True, slots=True)
class Prepared:
    """An object made ready for the store while its dicts are alive: key, encoding, index values."""

    key: str
    stored: Any
    index_values: dict[str, tuple[str, ...]]
    resource_version: str = ""
    views: dict[str, Any] | None = None
    """Each view's value for the object (Store.add_view), computed from its dicts."""
    cut: int = 0
    """Values nested deeper than deepjson.MAX_DEPTH that were replaced by null so that the
    codec could encode the object (0 for any object but a crafted one)."""


class Store:
    """Keyed objects plus indexes and views, as client-go's threadSafeStore (the indexes'
    bookkeeping is a StoreIndex beside it, as client-go's storeIndex; the views' a StoreViews).

    Single event loop, so no locking: no method awaits, and each write updates the objects, the
    indexes and the views together, so a reader never sees one without the others. Reads hand
    out private copies (ZstdCodec decodes a fresh one at each read); listings come in no
    particular order, index lookups sorted by key.

    `has_index`, `index_keys` and `indexed_values` are the StoreIndex's own methods, bound at
    construction as attributes (a subclass's method of the same name would be shadowed).
    """

    def __init__(
        self,
        *,
        indexers: dict[str, IndexFunc] | None = None,
        codec: Codec | None = None,
        view_failed: ViewFailed | None = None,
    ) -> None:
        """`codec`: None for a ZstdCodec of its own (a zstd dictionary fits one cache).
        `view_failed`: told when a view's listener raised (StoreViews isolates it: the write
        completes whole); None: logged only."""
        self._codec: Codec = ZstdCodec() if codec is None else codec
        self._items: dict[str, Any] = {}
        self._versions: dict[str, str] = {}
        """key -> metadata.resourceVersion of what is stored (to tell an unchanged relist item)."""
        self._index = StoreIndex()
        self._index.add_indexer(NAMESPACE_INDEX, namespace_index, ())
        self._views = StoreViews(view_failed)
        self.has_index = self._index.has_index
        """Whether an index of that name exists (StoreIndex.has_index)."""
        self.index_keys = self._index.index_keys
        """The keys an index maps a value to, sorted; KeyError for an unknown index."""
        self.indexed_values = self._index.indexed_values
        """Every value an index currently has objects for; KeyError for an unknown index."""
        if indexers:
            self.add_indexers(indexers)

    # Reads ----------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def get(self, key: str) -> Object | None:
        """The object under `key` as a private copy (the caller may mutate it), or None."""
        stored = self._items.get(key)
        return None if stored is None else self._codec.decode(stored)

    def list_keys(self) -> list[str]:
        """Every key in the store, in no particular order (a snapshot: safe to iterate while the store changes)."""
        return list(self._items)

    def objects(self) -> list[Object]:
        """Every object, each a private copy; in no particular order."""
        decode = self._codec.decode
        return [decode(stored) for stored in self._items.values()]

    def encoded(self) -> Iterator[Encoded]:
        """Every object stored when iteration began, each decoded only when asked for: what
        notifications of the whole cache (a late handler's initial adds, a resync) carry. Each
        is made as it is reached, so a consumer that drops one before the next holds one
        decoded object at a time, not the cache."""
        codec = self._codec
        for stored in list(self._items.values()):
            yield Encoded(stored, codec)

    def iter(self) -> Iterator[Object]:
        """Decodes lazily, one object at a time (for scans over large caches); the objects are
        those stored when iteration began."""
        decode = self._codec.decode
        for stored in list(self._items.values()):
            yield decode(stored)

    def by_index(self, index: str, value: str) -> list[Object]:
        """The objects `index` maps `value` to, each a private copy, in key order (KeyError for
        an unknown index)."""
        return [obj for key in self.index_keys(index, value) if (obj := self.get(key)) is not None]

    # Writes ---------------------------------------------------------------------------------------

    def add_indexers(self, indexers: dict[str, IndexFunc]) -> None:
        """Adds indexes, building them over what is cached already; ValueError for a name that
        exists (the indexes before it in `indexers` are added)."""
        for name, function in indexers.items():
            self._index.add_indexer(name, function, self._decoded_items())

    def add_view(self, name: str, derive: Callable[[Object], Any], listener: ViewListener) -> None:
        """Calls `listener(key, derive(obj))` whenever an object is stored and `listener(key,
        None)` when it goes, synchronously, inside the write; `derive` runs on the dicts at hand
        (never by decoding what is stored, except once for what is cached already, at once).
        The store keeps nothing of it: the listener keeps what it needs, so a consumer that
        reads a few fields of many objects can hold just those, and aggregates that are always
        exactly what the store holds. `derive` runs on the event loop; when it raises on an
        object, the write of that object is refused (StageFailed("view")). A `listener` that
        raises never leaves a write half-applied: it is isolated (StoreViews), told None for
        the key, and `view_failed` is told."""
        self._views.add(name, derive, listener, self._decoded_items())

    def put(self, entry: Prepared) -> Encoded | None:
        """Stores a prepared object (its key's objects, indexes and views together); returns
        the previous object as it was stored, decoded only when asked for (a watch event's
        update whose handlers never read the old object costs no decode), or None."""
        key = entry.key
        stored = self._items.get(key)
        old = None if stored is None else Encoded(stored, self._codec)
        self._items[key] = entry.stored
        self._versions[key] = entry.resource_version
        decode = partial(self._codec.decode, entry.stored)  # only for what was not prepared
        self._index.update_prepared(key, entry.index_values, decode)
        self._views.stored_prepared(key, entry.views, decode)
        return old

    def delete(self, key: str) -> Object | None:
        """Removes ``key``; returns what was cached, or None if nothing was."""
        stored = self._items.pop(key, None)
        self._versions.pop(key, None)
        if stored is None:
            return None
        self._index.delete(key)
        self._views.removed(key)
        return self._codec.decode(stored)

    def prepare(self, obj: Object) -> Prepared:
        """Encodes and indexes ``obj`` without storing it (a relist prepares items as they arrive
        and stores them together once the list is complete).

        Raises StageFailed naming the stage that refused it; nothing is stored then. An object
        nested too deep for the codec is first cut to deepjson.MAX_DEPTH levels (in place,
        before its indexes and views are derived, so they see what is stored) and encoded
        again; `Prepared.cut` says how many values went."""
        key = _staged("key", key_of, obj)
        stored, cut = _encoded(self._codec, obj)
        return Prepared(
            key,
            stored,
            _staged("index", self._index.values_of, obj),
            _version_of(obj),
            _staged("view", self._views.derive, obj),
            cut,
        )

    def replace(self, objects: Iterable[Object]) -> list[Change]:
        """Makes the cache equal to ``objects`` (a relist) and says what changed."""
        return self.replace_prepared(self.prepare(obj) for obj in objects)

    def replace_prepared(self, entries: Iterable[Prepared]) -> list[Change]:
        """Makes the cache equal to ``entries`` and says what changed.

        Changes come in the order of ``entries`` (an add or update for each), then the deletions,
        in the order the keys were stored. Objects that disappear become deletions whose ``old``
        is the last cached state: the caller turns them into Tombstones, because the real final
        state was never seen. Indexes and views are updated key by key, as the changes are.
        """
        codec = self._codec
        changes: list[Change] = []
        seen: set[str] = set()
        for entry in entries:
            key = entry.key
            seen.add(key)
            stored = self._items.get(key)
            old_version = self._versions.get(key, "")
            self._items[key] = entry.stored
            self._versions[key] = entry.resource_version
            decode = partial(codec.decode, entry.stored)  # only for what was not prepared
            self._index.update_prepared(key, entry.index_values, decode)
            self._views.stored_prepared(key, entry.views, decode)
            old = None if stored is None else Encoded(stored, codec)
            changes.append(
                Change(key, old, Encoded(entry.stored, codec), old_version, entry.resource_version)
            )
        for key in [key for key in self._items if key not in seen]:
            stored = self._items.pop(key)
            old_version = self._versions.pop(key, "")
            self._index.delete(key)
            self._views.removed(key)
            changes.append(Change(key, Encoded(stored, codec), None, old_version))
        return changes

    def _decoded_items(self) -> Iterator[tuple[str, Object]]:
        """(key, object) for what is stored, each decoded when reached."""
        decode = self._codec.decode
        for key, stored in self._items.items():
            yield key, decode(stored)


class NamespaceObjects(Mapping[str, Object]):
    """A namespace's objects of one store by name, each decoded only when looked up (a
    reconcile that needs a few of a namespace's objects by name pays for those few). Reads the
    store as it is at each lookup."""

    def __init__(self, store: Store, namespace: str) -> None:
        self._store = store
        self._namespace = namespace

    def __getitem__(self, name: str) -> Object:
        found = self._store.get(f"{self._namespace}/{name}")
        if found is None:
            raise KeyError(name)
        return found

    def __iter__(self) -> Iterator[str]:
        for key in self._store.index_keys(NAMESPACE_INDEX, self._namespace):
            yield key.split("/", 1)[1]

    def __len__(self) -> int:
        return len(self._store.index_keys(NAMESPACE_INDEX, self._namespace))


def _encoded(codec: Codec, obj: Object) -> tuple[Any, int]:
    """(what `codec` stores of `obj`, values cut); an object too deep to encode is cut to
    deepjson.MAX_DEPTH in place and encoded again; StageFailed("encode") for any refusal."""
    try:
        return codec.encode(obj), 0
    except TypeError as error:  # orjson.JSONEncodeError is a TypeError
        if not deepjson.too_deep(error):
            raise StageFailed("encode", error) from error
        cut = deepjson.cut_deep(obj)
    except Exception as error:
        raise StageFailed("encode", error) from error
    return _staged("encode", codec.encode, obj), cut


def _staged(stage: str, step: Callable[[Object], Any], obj: Object) -> Any:
    """`step(obj)`, any exception it raises as StageFailed(`stage`)."""
    try:
        return step(obj)
    except Exception as error:
        raise StageFailed(stage, error) from error


def _version_of(obj: Object) -> str:
    metadata = obj.get("metadata")
    version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
    return str(version) if version else ""
