"""A store's views: narrow values derived from each object inside the write that stores it.

A view is a `derive` function and a `listener`. The store (store.py) calls in here inside each of
its writes, while the written object's dicts are at hand, so a view costs one `derive` per change
and never a decode of what is stored. Nothing of a view is kept here: the listener keeps what it
needs (views.py's NamespaceViews, say), and so always holds exactly what the store holds, or
less: a listener that raises is isolated, see `StoreViews`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .resource import Object

log = logging.getLogger(__name__)

ViewListener = Callable[[str, Any], object]
"""(key, the view of what is stored now, or None once it is gone), called inside the write;
what it returns is ignored."""

ViewFailed = Callable[[str, str, Exception], object]
"""(view name, key, what its listener raised): told after a listener failed on a key."""


@dataclass(frozen=True, slots=True)
class _View:
    derive: Callable[[Object], Any]
    listener: ViewListener


class StoreViews:
    """The views of one store, by name. Listeners are called synchronously, on the event loop,
    in the order the views were added, once per key a write touches; `derive` must not raise
    (the store derives before it writes, so a `derive` that raises refuses the write whole).
    Not thread-safe, as the store that owns it.

    A listener that raises is isolated, so that a write is never half-applied (the store, its
    indexes and the other listeners all take it): the exception is logged naming the view and
    the key, the listener is then told None for that key (it forgets the key, so what it holds
    stays a part of what the store holds, never a stale value; a raise from that is logged too),
    and `failed` is told. The write itself completes and returns normally."""

    def __init__(self, failed: ViewFailed | None = None) -> None:
        """`failed`: told of every listener failure (None: logged only); must not raise."""
        self._views: dict[str, _View] = {}
        self._failed = failed

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

    def stored_prepared(
        self, key: str, values: Mapping[str, Any] | None, decode: Callable[[], Object]
    ) -> None:
        """The object is now stored under `key`: each listener hears its view of it, the value
        given (`derive`, computed earlier); a view added since is derived now, from `decode()`,
        called once at most. A listener that raises is isolated (see the class)."""
        obj: Object | None = None
        for name, view in self._views.items():
            if values is not None and name in values:
                value = values[name]
            else:
                obj = obj if obj is not None else decode()
                value = view.derive(obj)
            self._tell(name, view, key, value)

    def removed(self, key: str) -> None:
        """Nothing is stored under `key` any more: each listener hears None (isolated too)."""
        for name, view in self._views.items():
            self._tell(name, view, key, None)

    def _tell(self, name: str, view: _View, key: str, value: Any) -> None:
        """`view`'s listener hears `value` for `key`; if it raises, it hears None (forgets the
        key) and the failure is logged and told to `failed`."""
        try:
            view.listener(key, value)
        except Exception as error:
            log.exception("view %s: listener failed for %s; it forgets the key", name, key)
            if value is not None:
                try:
                    view.listener(key, None)
                except Exception:
                    log.exception("view %s: listener failed to forget %s too", name, key)
            if self._failed is not None:
                self._failed(name, key, error)
