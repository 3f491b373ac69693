"""Which namespaces have a migration under way, kept as the migration cache changes.

A migration exists before the controller raises a quota for it, so a namespace with one under
way may hold room any moment: its pods are checked (pod/validator.py `room_check_needed`). This
index answers that in one lookup instead of decoding every migration of the namespace on every
admission (a namespace keeps thousands of finished ones).
"""

from __future__ import annotations

from typing import Final

from ..apis.kubevirt import is_finished
from ..generic.resource import Object

VIEW: Final = "under-way"
"""The migration store's view this index listens to (`Store.add_view(VIEW, under_way, ...)`)."""


def under_way(migration: Object) -> bool:
    """The store view: the migration has not finished (no phase yet counts as under way)."""
    return not is_finished(migration)


class MigrationsUnderWay:
    """Names of the migrations under way, by namespace: exactly what the store holds, since the
    store calls `changed` inside each write. Not thread-safe: event loop only."""

    def __init__(self) -> None:
        self._names: dict[str, set[str]] = {}

    def changed(self, key: str, view: bool | None) -> None:
        """The view listener: the migration `key` ("namespace/name") is now under way (True),
        finished (False) or gone (None)."""
        namespace, _, name = key.rpartition("/")
        names = self._names.get(namespace)
        if view:
            self._names.setdefault(namespace, set()).add(name)
        elif names is not None:
            names.discard(name)
            if not names:
                del self._names[namespace]

    def any_in(self, namespace: str) -> bool:
        return namespace in self._names
