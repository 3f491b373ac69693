"""Reads of one resource from its shared informer's cache, as wrangler's generic cache."""

from __future__ import annotations

from .informer import SharedInformer
from .resource import Object
from .store import IndexFunc


class ResourceCache:
    """The cache reads of one resource (wrangler's generic cache: Get, List, GetByIndex,
    AddIndexer), which its ``Controller`` exposes as its own methods.

    Reads come from the informer's store: they never block and may lag the API server. Indexes
    are shared by every controller and reader of the informer.
    """

    def __init__(self, informer: SharedInformer) -> None:
        self.informer = informer

    def cached(self, namespace: str | None, name: str) -> Object | None:
        """The object as the informer's cache holds it (a private copy), or None. May lag the
        API server; never blocks."""
        return self.informer.store.get(f"{namespace}/{name}" if namespace else name)

    def by_index(self, index: str, value: str) -> list[Object]:
        """Cached objects whose `index` function yields `value`; KeyError for an unknown index."""
        return self.informer.store.by_index(index, value)

    def add_indexer(self, name: str, function: IndexFunc) -> None:
        """Adds an index to the shared cache once; a second registration of the name is a no-op
        (controllers sharing an informer may each ask for it)."""
        if not self.informer.store.has_index(name):
            self.informer.store.add_indexers({name: function})
