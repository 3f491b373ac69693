"""Narrow values of a store's objects, grouped by namespace and kept as the objects change.

A reconcile that reads a few fields of every object of a namespace would otherwise decode each
object from the store on every run (store.py keeps them compressed). `NamespaceViews` is a
`Store.add_view` listener: the store derives each object's value once, when the object changes,
and the listener keeps it under the object's namespace and name. Reads then cost a dict lookup.

A consumer may also set a view aside (`set_aside`): it stays known (`get`, `aside`) but leaves the
namespace's listing (`namespace`, `by_name`) until its object changes again. This is for objects
a reconcile has judged settled for good (a migration long finished), so that a namespace that
keeps thousands of them does not make every reconcile read them all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

V = TypeVar("V")


class NamespaceViews(Generic[V]):
    """Every object's view by namespace and name: exactly what the store holds, because the store
    calls `changed` inside each write (Store.add_view). Not thread-safe: event loop only.

    `on_change(namespace)` is called when a view of that namespace was added, changed (compared
    with ``==``) or removed; an update that leaves the view equal calls nothing, so a consumer
    can enqueue its reconcile there instead of on every event of the kind. With `acted_on`, a
    change is told only if it changes `acted_on(view)` (the part the consumer acts on): the
    new view is stored either way, so a later read sees it, but nothing is queued for it.
    `on_change_of(namespace, old, new)` is told the same changes with the listed view before
    (None: not listed) and after (None: removed), after the listing changed.
    """

    def __init__(
        self,
        on_change: Callable[[str], object] | None = None,
        *,
        acted_on: Callable[[V], object] | None = None,
        on_change_of: Callable[[str, V | None, V | None], object] | None = None,
    ) -> None:
        self._namespaces: dict[str, dict[str, V]] = {}
        self._aside: dict[str, dict[str, V]] = {}
        """Views set aside, by namespace and name (never also in `_namespaces`)."""
        self._on_change = on_change
        self._on_change_of = on_change_of
        self._acted_on = acted_on

    def changed(self, key: str, view: V | None) -> bool:
        """The store's listener: the object under `key` ("namespace/name") is now `view` (None:
        gone). Returns whether the namespace's views changed. A view set aside that stays equal
        stays aside; one that changes is listed again (and `on_change` called); one whose
        object is gone is forgotten without a call (the listing never showed it)."""
        namespace, _, name = key.rpartition("/")
        if self._take_aside(namespace, name, view):
            return False
        views = self._namespaces.get(namespace)
        if view is None:
            old = None if views is None else views.pop(name, None)
            if old is None:
                return False
            if not views:
                del self._namespaces[namespace]
        else:
            if views is None:
                views = self._namespaces[namespace] = {}
            old = views.get(name)
            if old == view:
                return False
            views[name] = view
            if old is not None and self._unremarkable(old, view):
                return True
        if self._on_change is not None:
            self._on_change(namespace)
        if self._on_change_of is not None:
            self._on_change_of(namespace, old, view)
        return True

    def _unremarkable(self, old: V, new: V) -> bool:
        """Whether the change from `old` to `new` leaves what the consumer acts on equal."""
        return self._acted_on is not None and self._acted_on(old) == self._acted_on(new)

    def _take_aside(self, namespace: str, name: str, view: V | None) -> bool:
        """For `changed`: True if the change is fully handled here (an object set aside that
        is gone or unchanged). A changed one leaves the aside and `changed` lists it."""
        aside = self._aside.get(namespace)
        if aside is None or name not in aside:
            return False
        if view is not None and aside[name] == view:
            return True
        del aside[name]
        if not aside:
            del self._aside[namespace]
        return view is None

    def set_aside(self, namespace: str, name: str) -> bool:
        """Takes a listed view out of the namespace's listing until its object changes (see the
        module docstring). No `on_change` call: the object itself did not change. Returns
        whether a listed view was set aside."""
        views = self._namespaces.get(namespace)
        if views is None or name not in views:
            return False
        self._aside.setdefault(namespace, {})[name] = views.pop(name)
        if not views:
            del self._namespaces[namespace]
        return True

    def set_aside_views(self, namespace: str) -> list[V]:
        """The namespace's views set aside (a new list; the views are shared, not to mutate)."""
        return list((self._aside.get(namespace) or {}).values())

    def get(self, namespace: str, name: str) -> V | None:
        """The view, listed or set aside."""
        views = self._namespaces.get(namespace)
        found = None if views is None else views.get(name)
        if found is None:
            found = (self._aside.get(namespace) or {}).get(name)
        return found

    def namespace(self, namespace: str) -> list[V]:
        """The namespace's listed views in the order of their names (a new list; the views are
        shared and must not be mutated)."""
        views = self._namespaces.get(namespace) or {}
        return [views[name] for name in sorted(views)]

    def by_name(self, namespace: str) -> Mapping[str, V]:
        """The namespace's listed views by name, live (reads see later changes)."""
        return _LiveNamespace(self._namespaces, namespace)


class _LiveNamespace(Mapping[str, V]):
    def __init__(self, namespaces: dict[str, dict[str, V]], namespace: str) -> None:
        self._namespaces = namespaces
        self._namespace = namespace

    def _views(self) -> dict[str, V]:
        return self._namespaces.get(self._namespace) or {}

    def __getitem__(self, name: str) -> V:
        return self._views()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._views()))

    def __len__(self) -> int:
        return len(self._views())
