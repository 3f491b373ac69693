"""The handler behind a controller's `on_remove`: a finalizer that holds an object until its
handler has run (wrangler's OnRemove).

The guard adds the finalizer to every live object that lacks it, and once the object is being
deleted runs the handler, then removes the finalizer; an object being deleted without the
finalizer (ours was removed already, or never added) is left alone. Each write goes through
`update` on a deep copy, so the cached object is never changed in place.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable

from .resource import Object
from .sharedhandler import Handler

Update = Callable[[Object], Awaitable[Object]]


def finalizer_guard(finalizer: str, handler: Handler, update: Update) -> Handler:
    """A handler that keeps `finalizer` on each live object and, once the object is being
    deleted, runs `handler(key, obj)` and then removes `finalizer` (writing through `update`)."""

    async def guarded(key: str, obj: Object | None) -> Object | None:
        if obj is None:
            return None
        metadata = obj.get("metadata") or {}
        finalizers: list[str] = list(metadata.get("finalizers") or [])
        if not metadata.get("deletionTimestamp"):
            if finalizer in finalizers:
                return obj
            return await _set_finalizers(obj, [*finalizers, finalizer], update)
        if finalizer not in finalizers:
            return obj
        await handler(key, obj)
        return await _set_finalizers(obj, [f for f in finalizers if f != finalizer], update)

    return guarded


async def _set_finalizers(obj: Object, finalizers: list[str], update: Update) -> Object:
    updated = copy.deepcopy(obj)
    updated["metadata"]["finalizers"] = finalizers
    return await update(updated)
