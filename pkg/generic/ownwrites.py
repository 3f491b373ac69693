"""A controller's own writes, remembered until its informer cache catches up with them.

A reconcile that runs between a write and that write's watch event sees the object as it was and
would write the same change again: harmless, but not "one write per change". `OwnWrites` keeps,
per key, the object a write returned and the resourceVersion it replaced, and `newest` hands back
whichever of the cached object and the written one is newer.

resourceVersions are etcd revisions on every API server we know, so "older than our write" is a
number comparison; were they ever opaque, only the exact version we replaced counts as older.
An object of another uid (deleted and created again) is never mistaken for ours.

Not thread-safe: use from the event loop, and per key from one worker at a time (the workqueue's
guarantee).
"""

from __future__ import annotations

from .meta import metadata
from .resource import Object


class OwnWrites:
    """Per key: (the resourceVersion a write replaced, the object it returned)."""

    def __init__(self) -> None:
        self._written: dict[str, tuple[str, Object]] = {}

    def wrote(self, key: str, replaced_version: str, written: Object) -> None:
        """Remembers a successful write of `key` over `replaced_version`."""
        self._written[key] = (replaced_version, written)

    def forget(self, key: str) -> None:
        """Drops what is remembered of `key` (after a conflict, the cache is the authority)."""
        self._written.pop(key, None)

    def newest(self, key: str, cached: Object) -> Object:
        """Our last write of `key` if the cache has not caught up with it yet, else `cached`
        (and the write is forgotten: the cache has it now)."""
        written = self._written.get(key)
        if written is None:
            return cached
        replaced_version, ours = written
        if metadata(cached).get("uid") == metadata(ours).get("uid") and _older(
            cached, ours, replaced_version
        ):
            return ours
        del self._written[key]
        return cached


def _older(cached: Object, ours: Object, replaced_version: str) -> bool:
    cached_version = str(metadata(cached).get("resourceVersion", ""))
    our_version = str(metadata(ours).get("resourceVersion", ""))
    if cached_version.isdigit() and our_version.isdigit():
        return int(cached_version) < int(our_version)
    return cached_version == replaced_version
