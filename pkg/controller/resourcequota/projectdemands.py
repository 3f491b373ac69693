"""Which namespaces of each Rancher project wait for its room, and queueing them when room moves.

A namespace's raise on Rancher's protected path is judged against its project counting as taken
the rooms its sibling namespaces have not been given yet that come earlier in KubeVirt's order
(rancherprojects.ProjectRoom, util/resourcequota/projectqueue.py): those are planned from the
caches at the judgment (the reconciler's `siblings_waiting`), whichever namespace reconciled
first. What this registry keeps is who waits: each reconcile on the Rancher path records the
namespace's rooms not given (none once given), and when a namespace of the project writes its
annotation (a raise given, a room given back) or a room it waited for goes (its migration ended
or gone, the namespace no longer ours), the project's other waiting namespaces are queued at
once (`enqueue`), not only at the project recheck (rancherwrites.PROJECT_RECHECK); so is a
namespace held behind a sibling's migration (planned from the caches) once that sibling's
reconcile finds the migration no longer waiting, even if the sibling never recorded it.

State is in memory and per process, rebuilt by the reconciles: after a restart (or a change of
leader) the waiting namespaces are unknown until each reconciles once (every namespace does at
the informers' first sync). The order itself is not affected (it is planned from the caches at
each judgment); only the at-once queueing is, and a namespace not known to wait is judged again
at its recheck.

Concurrency: the reconciles of different namespaces run in different workers on one event loop.
The registry is touched only from the loop, between awaits, so each call sees a consistent map;
the judge-then-write of a namespace of a project runs under that project's lock (`lock`), so
two siblings never judge against the same room and both write it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Final

from ...util.resourcequota.projectqueue import Step

log = logging.getLogger(__name__)


class ProjectDemands:
    """Per project id, each namespace's waiting steps (in KubeVirt's order)."""

    def __init__(self, enqueue: Callable[[str], None]) -> None:
        self.enqueue = enqueue
        """Queues a namespace's reconcile (the namespace controller's enqueue_key)."""
        self._waiting: dict[str, dict[str, tuple[Step, ...]]] = {}
        self._project_of: dict[str, str] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._behind: dict[str, dict[str, set[str]]] = {}
        """Sibling namespace -> waiter -> uids of the sibling's migrations the waiter waits
        behind (`record`'s `behind`)."""

    def lock(self, project: str) -> asyncio.Lock:
        """The project's lock: held from a namespace's judgment to its write (module docstring).
        One per project id, kept for the process's life (projects are few)."""
        return self._locks.setdefault(project, asyncio.Lock())

    def record(
        self,
        project: str,
        namespace: str,
        waiting: Sequence[Step],
        *,
        wrote: bool = False,
        behind: Sequence[tuple[str, str]] = (),
    ) -> None:
        """`namespace` of `project` waits for `waiting` now (replacing what it waited for),
        behind the siblings' migrations `behind` ((namespace, migration uid), planned from the
        caches: the sibling may never have recorded them). If it `wrote` its annotation, or a
        room it waited for is no longer waiting, the project's other waiting namespaces are
        queued; and whoever waited behind one of its migrations that no longer waits is queued
        (a sibling's migration gone before that sibling ever recorded it included)."""
        before = self._project_of.get(namespace, project)
        still = {step.room.migration_uid for step in waiting}
        gone = [step for step in self._take(namespace) if step.room.migration_uid not in still]
        if waiting:
            self._waiting.setdefault(project, {})[namespace] = tuple(waiting)
            self._project_of[namespace] = project
        self._wait_behind(namespace, behind)
        queued = (
            self._requeue(before, namespace, gone) if gone or wrote or before != project else []
        )
        self._release_waiters(namespace, still, queued)

    def _wait_behind(self, waiter: str, behind: Sequence[tuple[str, str]]) -> None:
        """`waiter` waits behind `behind` now (replacing what it waited behind)."""
        for sibling in list(self._behind):
            self._behind[sibling].pop(waiter, None)
            if not self._behind[sibling]:
                del self._behind[sibling]
        for sibling, uid in behind:
            self._behind.setdefault(sibling, {}).setdefault(waiter, set()).add(uid)

    def _release_waiters(self, namespace: str, still: set[str], queued: Sequence[str]) -> None:
        """Queues whoever waited behind a migration of `namespace` not among `still` (unless
        already `queued`)."""
        waiters = self._behind.get(namespace, {})
        moved = sorted(w for w, uids in waiters.items() if uids - still and w != namespace)
        for waiter in moved:
            waiters.pop(waiter, None)
        if not waiters:
            self._behind.pop(namespace, None)
        moved = [waiter for waiter in moved if waiter not in queued]
        for waiter in moved:
            self.enqueue(waiter)
        if moved:
            log.info(
                "%s: a migration waited behind no longer waits; queued %s",
                namespace,
                _bounded(moved),
            )

    def waiters(self, project: str) -> list[str]:
        """The project's namespaces known to wait for room, sorted."""
        return sorted(self._waiting.get(project, {}))

    def forget(self, namespace: str) -> None:
        """The namespace no longer asks its project for anything (no raise through Rancher's
        annotation, or no longer ours): its waiting rooms go, and its siblings are queued."""
        project = self._project_of.get(namespace)
        gone = self._take(namespace)
        self._wait_behind(namespace, ())
        queued = self._requeue(project, namespace, gone) if project is not None else []
        self._release_waiters(namespace, set(), queued)

    def waiting(self, project: str, besides: str) -> list[Step]:
        """Every waiting step of the project's namespaces but `besides`, as they recorded it
        (where the judge is given no planner of the siblings: ProjectRoom)."""
        namespaces = self._waiting.get(project, {})
        return [step for name, steps in namespaces.items() if name != besides for step in steps]

    def _take(self, namespace: str) -> tuple[Step, ...]:
        project = self._project_of.pop(namespace, None)
        if project is None:
            return ()
        namespaces = self._waiting.get(project, {})
        steps = namespaces.pop(namespace, ())
        if not namespaces:
            self._waiting.pop(project, None)
        return steps

    def _requeue(self, project: str, namespace: str, gone: Sequence[Step]) -> list[str]:
        """Queues the project's waiting namespaces but `namespace`; returns them."""
        siblings = sorted(self._waiting.get(project, {}))
        siblings = [name for name in siblings if name != namespace]
        if not siblings:
            return []
        moved = [f"{step.room.migration} no longer waits" for step in gone]
        log.info(
            "project %s: room moved in %s (%s); queued %s",
            project,
            namespace,
            _bounded(moved) or "its annotation written",
            _bounded(siblings),
        )
        for name in siblings:
            self.enqueue(name)
        return siblings


LOGGED_NAMES: Final = 5
"""At most this many names in one log line; the rest counted."""


def _bounded(names: Sequence[str]) -> str:
    """The first LOGGED_NAMES of `names`, then how many more: a project of hundreds of waiting
    namespaces writes one short line per move, not every name."""
    shown = ", ".join(names[:LOGGED_NAMES])
    more = len(names) - LOGGED_NAMES
    return f"{shown} and {more} more ({len(names)} in all)" if more > 0 else shown
