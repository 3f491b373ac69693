"""A store's indexes, as client-go's storeIndex beside its threadSafeStore.

The bookkeeping only: for each index, indexed value -> keys, and key -> the values it was indexed
under (so that removing or replacing a key never decodes the object it replaces). The store
(store.py) owns the objects and calls in here inside each of its writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from .resource import Object

IndexFunc = Callable[[Object], Iterable[str]]


class StoreIndex:
    """Named indexes over a store's keys. Not thread-safe, as the store that owns it: every call
    runs on the event loop and none awaits, so a reader sees each write whole.

    Every key is indexed by every index: an index added later is built over what the store holds
    at once (`add_indexer`), and a key's values are kept exactly as of the store's last write of
    it. An index function's values count once each, in the order it gives them.
    """

    def __init__(self) -> None:
        self._indexers: dict[str, IndexFunc] = {}
        self._indices: dict[str, dict[str, set[str]]] = {}
        """index name -> indexed value -> keys."""
        self._values: dict[str, dict[str, tuple[str, ...]]] = {}
        """index name -> key -> its values (for removal without decoding the old object)."""

    # Reads ----------------------------------------------------------------------------------------

    def has_index(self, name: str) -> bool:
        """Whether an index of that name exists."""
        return name in self._indexers

    def index_keys(self, index: str, value: str) -> list[str]:
        """The keys `index` maps `value` to, sorted (KeyError for an unknown index)."""
        if index not in self._indices:
            raise KeyError(f"no index named {index!r}")
        return sorted(self._indices[index].get(value, ()))

    def indexed_values(self, index: str) -> list[str]:
        """Every value `index` currently has keys for, in no particular order (KeyError for an
        unknown index)."""
        return list(self._indices[index])

    def values_of(self, obj: Object) -> dict[str, tuple[str, ...]]:
        """Every index's values for `obj` (what a prepared write carries), without indexing it."""
        return {name: index_values(function, obj) for name, function in self._indexers.items()}

    # Writes ---------------------------------------------------------------------------------------

    def add_indexer(
        self, name: str, function: IndexFunc, existing: Iterable[tuple[str, Object]]
    ) -> None:
        """Adds an index and builds it over `existing`, the (key, object) pairs the store holds
        (iterated once, after the name is checked); ValueError if the name is taken."""
        if name in self._indexers:
            raise ValueError(f"index {name!r} exists already")
        self._indexers[name] = function
        self._indices[name] = {}
        self._values[name] = {}
        for key, obj in existing:
            self._add(name, key, index_values(function, obj))

    def update_prepared(
        self, key: str, values: Mapping[str, tuple[str, ...]], decode: Callable[[], Object]
    ) -> None:
        """Indexes `key` as holding the object now, in place of whatever it was indexed under,
        each index's values given (`values_of`, computed earlier); an index added since is
        computed now, over `decode()`, called once at most."""
        self.delete(key)
        obj: Object | None = None
        for name, function in self._indexers.items():
            found = values.get(name)
            if found is None:
                obj = obj if obj is not None else decode()
                found = index_values(function, obj)
            self._add(name, key, found)

    def delete(self, key: str) -> None:
        """Forgets `key` in every index (nothing if it was not indexed)."""
        for name, by_key in self._values.items():
            values = by_key.pop(key, ())
            index = self._indices[name]
            for value in values:
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]

    def _add(self, name: str, key: str, values: tuple[str, ...]) -> None:
        if not values:
            return
        self._values[name][key] = values
        index = self._indices[name]
        for value in values:
            index.setdefault(value, set()).add(key)


def index_values(function: IndexFunc, obj: Object) -> tuple[str, ...]:
    """An index function's values for ``obj``, each once, in order."""
    return tuple(dict.fromkeys(function(obj)))
