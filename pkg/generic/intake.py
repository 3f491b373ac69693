"""How objects get into an informer's store, each on its own (informer.py's per-object contract).

The transform, the store's key, codec, indexes and views run per object; one that raises on an
object skips that object only (kept out of the store, its cached version removed), and the skip
is logged by name and stage and told to the informer's `skips` callback. Handler failures are
told here too, so that every object an informer could not take or deliver is counted alike.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import deepjson
from .resource import Object, key_of
from .store import Prepared, StageFailed, Store, Tombstone, Transform

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SkippedObject:
    """One object an informer skipped, or a handler failed on (see informer.py)."""

    resource: str
    """The informer's name (its resource, e.g. ``pods``)."""
    stage: str
    """transform, key, encode, index, view, listener (a view's listener raised: the object is
    cached, that listener forgot it) or handler."""
    obj: Any
    """The object as it arrived (for naming it and referring to it in an Event)."""
    reason: str

    def describe(self) -> str:
        """``Kind namespace/name (uid ...)``: what a log line and an Event name."""
        return deepjson.describe(self.obj)


SkipReporter = Callable[[SkippedObject], None]
"""Told of every skip after it was logged (counts it, records an Event); must not raise."""

Change = tuple[str, Any, Any]
"""What handlers are told of a watch event: (add | update | delete, old, new)."""


class Intake:
    """Takes the objects of one informer into its store, each through the transform and
    Store.prepare, skipping (and reporting) any that raises. Event loop only."""

    def __init__(
        self, name: str, store: Store, transform: Transform | None, skips: SkipReporter | None
    ) -> None:
        self.name = name
        self._store = store
        self._transform = transform
        self._skips = skips
        self.skipped = 0
        """Objects skipped and handler failures so far (for tests and logs)."""

    def prepared(self, obj: Object) -> Prepared | None:
        """`obj` through the transform and Store.prepare, or None after reporting the stage
        that refused it; a cut (deepjson) is logged."""
        taken = self._taken(obj)
        return None if taken is None else taken[1]

    def _taken(self, obj: Object) -> tuple[Object, Prepared] | None:
        """(`obj` transformed, its Prepared), or None after reporting the stage that refused it."""
        try:
            transformed = self._transform(obj) if self._transform else obj
        except Exception as error:
            self._skip("transform", obj, error)
            return None
        try:
            prepared = self._store.prepare(transformed)
        except StageFailed as failed:
            self._skip(failed.stage, transformed, failed.__cause__ or failed)
            return None
        if prepared.cut:
            log.warning(
                "%s: %s: %d values nested deeper than %d levels cut before storing it",
                self.name,
                deepjson.describe(transformed),
                prepared.cut,
                deepjson.MAX_DEPTH,
            )
        return transformed, prepared

    def applied(self, event_type: str, obj: Object) -> Change | None:
        """Applies one watch event to the store; what to tell handlers (None: nothing). A
        skipped object's cached version is removed and told as a Tombstone's delete. Handlers
        get the object transformed, as the store has it (and as `old` is): never a raw new beside
        a transformed old. An update's `old` is the store's Encoded, decoded only when a
        handler reads it."""
        if event_type == "DELETED":
            return self._deleted(obj)
        taken = self._taken(obj)
        if taken is None:
            return self._dropped(_key_or_none(obj))
        transformed, prepared = taken
        old = self._store.put(prepared)
        return ("add", None, transformed) if old is None else ("update", old, transformed)

    def handler_failed(self, subject: Any, error: Exception) -> None:
        """A handler raised on a notification about `subject` (it was logged already)."""
        self._tell(SkippedObject(self.name, "handler", subject, f"{type(error).__name__}: {error}"))

    def listener_failed(self, view: str, key: str, error: Exception) -> None:
        """A view's listener raised on `key` (StoreViews isolated it: the write completed and
        the listener forgot the key): reported at stage ``listener``."""
        namespace, _, name = key.rpartition("/")
        subject = {"metadata": {"namespace": namespace, "name": name}}
        reason = f"view {view}: {type(error).__name__}: {error}"
        self._tell(SkippedObject(self.name, "listener", subject, reason))

    def _deleted(self, obj: Object) -> Change | None:
        key = _key_or_none(obj)
        try:
            gone = self._transform(obj) if self._transform else obj
        except Exception as error:
            self._skip("transform", obj, error)
            return self._dropped(key)
        if key is None:
            self._skip("key", obj, ValueError("no namespace/name"))
            return None
        self._store.delete(key)
        return ("delete", gone, None)

    def _dropped(self, key: str | None) -> Change | None:
        """Removes what is cached under `key`: a delete of a Tombstone (the object's last state
        was not taken in); nothing for an object without a key or not cached."""
        old = None if key is None else self._store.delete(key)
        return None if key is None or old is None else ("delete", Tombstone(key, old), None)

    def _skip(self, stage: str, obj: Any, error: BaseException) -> None:
        skipped = SkippedObject(self.name, stage, obj, f"{type(error).__name__}: {error}")
        log.warning(
            "%s: skipped %s at stage %s, kept out of the cache until it changes: %s",
            self.name,
            skipped.describe(),
            stage,
            skipped.reason,
            exc_info=error,
        )
        self._tell(skipped)

    def _tell(self, skipped: SkippedObject) -> None:
        self.skipped += 1
        if self._skips is None:
            return
        try:
            self._skips(skipped)
        except Exception:
            log.exception("%s: reporting a skipped object failed", self.name)


def _key_or_none(obj: Object) -> str | None:
    """The object's cache key, None when its metadata cannot give one."""
    try:
        return key_of(obj)
    except Exception:
        return None
