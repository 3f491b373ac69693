"""A store's views: narrow values derived from each object inside the write that stores it.

A view is a `derive` function and a `listener`. The store (store.py) calls in here inside each of
its writes, while the written object's dicts are at hand, so a view costs one `derive` per change
and never a decode of what is stored. Nothing of a view is kept here: the listener keeps what it
needs (views.py's NamespaceViews, say), and so always holds exactly what the store holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .resource import Object

ViewListener = Callable[[str, Any], object]
"""(key, the view of what is stored now, or None once it is gone), called inside the write;
what it returns is ignored."""


@dataclass(frozen=True, slots=True)
class _View:
    derive: Callable[[Object], Any]
    listener: ViewListener


class StoreViews:
    """The views of one store, by name. Listeners are called synchronously, on the event loop,
    in the order the views were added, once per key a write touches; `derive` must not raise.
    Not thread-safe, as the store that owns it."""

    def __init__(self) -> None:
        self._views: dict[str, _View] = {}

    def add(
        self,
        name: str,
        derive: Callable[[Object], Any],
        listener: ViewListener,
        existing: Iterable[tuple[str, Object]],
    ) -> None:
        """Adds a view and tells its listener at once of `existing`, the (key, object) pairs the
        store holds; ValueError if the name is taken."""
        if name in self._views:
            raise ValueError(f"view {name!r} exists already")
        self._views[name] = _View(derive, listener)
        for key, obj in existing:
            listener(key, derive(obj))

    def derive(self, obj: Object) -> dict[str, Any] | None:
        """Every view's value for `obj` (what a prepared write carries), telling no listener;
        None when there are no views."""
        return {name: view.derive(obj) for name, view in self._views.items()} or None

    def stored(self, key: str, obj: Object) -> None:
        """`obj` is now stored under `key`: each listener hears its view of it."""
        for view in self._views.values():
            view.listener(key, view.derive(obj))

    def stored_prepared(
        self, key: str, values: Mapping[str, Any] | None, decode: Callable[[], Object]
    ) -> None:
        """As `stored`, with each view's value given (`derive`, computed earlier); a view added
        since is derived now, from `decode()`, called once at most."""
        obj: Object | None = None
        for name, view in self._views.items():
            if values is not None and name in values:
                value = values[name]
            else:
                obj = obj if obj is not None else decode()
                value = view.derive(obj)
            view.listener(key, value)

    def removed(self, key: str) -> None:
        """Nothing is stored under `key` any more: each listener hears None."""
        for view in self._views.values():
            view.listener(key, None)
