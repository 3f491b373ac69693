"""Launcher pods rendered once per VMI version, not once per admission.

A pod admission in a namespace that may hold room plans the namespace's rooms, and each
migration still waiting for its target pod is sized by rendering the launcher pod KubeVirt would
make for its VMI now (util/launcher). Rendering is most of that cost (about 0.2 ms a VMI here, so
12 ms an admission with 50 pending migrations, measured with cProfile): repeated for every
admission, it let one tenant's migrations make every admission of its namespace, and through the
shared event loop everyone's, slower the more it created.

`LauncherRenders.usage` keeps what target_quota_usage answered for a VMI under the key
(uid, resourceVersion, the launcher settings): the resourceVersion changes with every write of
the VMI (its spec, its annotations, which the rendering reads too, even its status), the
settings key with the cluster-wide KubeVirt settings and the namespace's own (quota keys,
labels, LimitRange defaults). So a changed VMI, or changed settings, renders anew, and an
unchanged one never again while it stays in the bounded LRU.
"""

from __future__ import annotations

from typing import Final

from cachetools import LRUCache

from ..util.launcher import LauncherSettings, VmiSource, as_view, target_quota_usage
from ..util.resources import ResourceList

MAX_RENDERS: Final = 4096
"""Rendered usages kept: a few small dicts each (about 1 KiB), so at most a few MiB; above the
pending migrations a webhook replica sees at once in all namespaces (the scale run peaks at a few
hundred), so a drain's admissions never render a VMI twice."""


class LauncherRenders:
    """The quota usage of a VMI's launcher pod, rendered once per VMI version and settings
    (an LRU of `maxsize`). `usage` has target_quota_usage's contract (ValueError for a VMI it
    cannot render, never cached: the error is raised again on every call). A VMI without a uid
    or resourceVersion (not as the API server stores it) is rendered every time. Not
    thread-safe: event loop only."""

    def __init__(self, maxsize: int = MAX_RENDERS) -> None:
        self._usages: LRUCache[tuple[str, str, str], ResourceList] = LRUCache(maxsize=maxsize)
        self._settings: tuple[LauncherSettings, str] | None = None
        self.renders = 0
        """Launcher pods rendered (misses and uncacheable VMIs)."""

    def usage(self, vmi: VmiSource, settings: LauncherSettings) -> ResourceList:
        """What target_quota_usage(vmi, settings) gives; the result is the caller's."""
        view = as_view(vmi)
        uid, version = view.uid, view.resource_version
        if not uid or not version:
            self.renders += 1
            return target_quota_usage(view, settings)
        key = (uid, version, self._settings_key(settings))
        cached = self._usages.get(key)
        if cached is None:
            self.renders += 1
            cached = self._usages[key] = target_quota_usage(view, settings)
        return dict(cached)

    def __len__(self) -> int:
        return len(self._usages)

    def _settings_key(self, settings: LauncherSettings) -> str:
        """Settings by value (the frozen dataclass's repr), worked out once per settings object
        in a row: one admission passes the same object for all its migrations."""
        if self._settings is None or self._settings[0] is not settings:
            self._settings = (settings, repr(settings))
        return self._settings[1]
