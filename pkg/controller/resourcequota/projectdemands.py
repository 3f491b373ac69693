"""Which namespaces of each Rancher project wait for its room, and queueing them when room moves.

A namespace's raise on Rancher's protected path is judged against its project counting as taken
the rooms its sibling namespaces have not been given yet that come earlier in KubeVirt's order
(rancher.ProjectRoom, util/resourcequota/rancherpath.py): those are planned from the
caches at the judgment (`siblings_waiting`, the judge's), whichever namespace reconciled
first. What this registry keeps is who waits: each reconcile on the Rancher path records the
namespace's rooms not given (none once given), and when a namespace of the project writes its
annotation (a raise given, a room given back) or a room it waited for goes (its migration ended
or gone, the namespace no longer ours), the project's other waiting namespaces are judged again
at once, not only at the project recheck (rancher.PROJECT_RECHECK); so is a namespace held
behind a sibling's migration (planned from the caches) once that sibling's reconcile finds the
migration no longer waiting, even if the sibling never recorded it.

They are judged one at a time, in KubeVirt's order of their first waiting rooms (the wave): the
first is queued (`enqueue`); once judged, the wave goes on to the next only where the room can go
further (it wrote, or it still waits and its room can never fit: ProjectRoom.next_in_wave then
picks the first waiter whose first room fits the project as it stands) and ends where it holds
the later rooms back. A freed room so costs a few judgments, each planning the project's
siblings once, not one per waiter (O(N) sibling plans, not O(N^2)). A waiter not known to wait
is queued at once. A wave whose awaited judgment never comes (that reconcile failing) stays at
it until a retry of that reconcile judges; meanwhile the other waiters are judged only at their
own rechecks (each alone, in the same order), not at once.

State is in memory and per process, rebuilt by the reconciles: after a restart (or a change of
leader) the waiting namespaces are unknown until each reconciles once (every namespace does at
the informers' first sync). The order itself is not affected (it is planned from the caches at
each judgment); only the at-once queueing is, and a namespace not known to wait is judged again
at its recheck.

Concurrency: the reconciles of different namespaces run in different workers on one event loop.
The registry is touched only from the loop, between awaits, so each call sees a consistent map;
the judge-then-write of a namespace of a project runs under that project's lock (`judging`), so
two siblings never judge against the same room and both write it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Final

from ...generic.meta import metadata
from ...generic.resource import Object
from ...util.resourcequota.rancherpath import OrderKey, Step, WaitingCache, asks_project
from .planner import NamespacePlanner

log = logging.getLogger(__name__)


class ProjectDemands:
    """Per project id, each namespace's waiting steps (in KubeVirt's order)."""

    def __init__(self, enqueue: Callable[[str], None]) -> None:
        self.enqueue = enqueue
        """Queues a namespace's reconcile (the namespace controller's enqueue_key)."""
        self._waiting: dict[str, dict[str, tuple[Step, ...]]] = {}
        self._project_of: dict[str, str] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._behind = _WaitsBehind()
        """Who waits behind which sibling's migrations (`record`'s `behind`)."""
        self._pending: dict[str, set[str]] = {}
        """Project -> its waiting namespaces still to be judged in the wave under way."""
        self._head: dict[str, str] = {}
        """Project -> the waiting namespace the wave queued last, whose judgment it awaits."""
        self.ladders = WaitingCache()
        """Each namespace's steps as its siblings' judges planned them
        (`siblings_waiting`), laddered again only when its inputs change; dropped with the rest
        when the namespace is forgotten."""
        self._users: dict[str, int] = {}
        """Project -> how many writes hold or wait for its lock (`judging`)."""

    def lock(self, project: str) -> asyncio.Lock:
        """The project's lock: held from a namespace's judgment to its write (module docstring).
        One per project id while any write holds or waits for it (`judging`)."""
        return self._locks.setdefault(project, asyncio.Lock())

    @contextlib.asynccontextmanager
    async def judging(self, project: str) -> AsyncIterator[None]:
        """Holds the project's lock for a judgment and its write; the lock is dropped once no
        write holds or waits for it (a project's lock is not kept for the process's life)."""
        self._users[project] = self._users.get(project, 0) + 1
        try:
            async with self.lock(project):
                yield
        finally:
            self._users[project] -= 1
            if not self._users[project]:
                del self._users[project]
                self._locks.pop(project, None)

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
        headed = self._head.get(before) == namespace
        if headed and (wrote or not waiting or before != project):
            del self._head[before]  # judged, and the wave goes on (below, or by `_requeue`)
        still = {step.room.migration_uid for step in waiting}
        gone = [step for step in self._take(namespace) if step.room.migration_uid not in still]
        if waiting:
            self._waiting.setdefault(project, {})[namespace] = tuple(waiting)
            self._project_of[namespace] = project
        self._behind.wait(namespace, behind)
        queued = (
            self._requeue(before, namespace, gone) if gone or wrote or before != project else []
        )
        self._release_waiters(before, namespace, still, queued)
        if headed and before not in self._head:
            self._advance(before)

    def _release_waiters(
        self, project: str | None, namespace: str, still: set[str], queued: Sequence[str]
    ) -> None:
        """Queues (in `project`'s wave) whoever waited behind a migration of `namespace` not
        among `still` (unless already `queued`)."""
        moved = [w for w in self._behind.released(namespace, still) if w not in queued]
        if moved:
            self._wave(project, moved)
            log.info(
                "%s: a migration waited behind no longer waits; queued %s",
                namespace,
                _bounded(moved),
            )

    def forget(self, namespace: str) -> None:
        """The namespace no longer asks its project for anything (no raise through Rancher's
        annotation, or no longer ours): its waiting rooms go, and its siblings are queued."""
        self.ladders.forget(namespace)
        project = self._project_of.get(namespace)
        headed = project is not None and self._head.get(project) == namespace
        if headed:
            del self._head[str(project)]
        gone = self._take(namespace)
        self._behind.wait(namespace, ())
        queued = self._requeue(project, namespace, gone) if project is not None else []
        self._release_waiters(project, namespace, set(), queued)
        if headed and project not in self._head:
            self._advance(str(project))

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
            "project %s: room moved in %s (%s); judged again in KubeVirt's order: %s",
            project,
            namespace,
            _bounded(moved) or "its annotation written",
            _bounded(siblings),
        )
        self._wave(project, siblings)
        return siblings

    # The wave: the waiters judged again one at a time, in KubeVirt's order ------------------

    def _wave(self, project: str | None, names: Sequence[str]) -> None:
        """`names` are to be judged again: a namespace not known to wait in `project` is
        queued at once; the others join the project's wave, whose first (in KubeVirt's order)
        is queued unless the wave awaits a judgment already (`advance` goes on from it)."""
        known = self._waiting.get(project, {}) if project is not None else {}
        for name in names:
            if name not in known:
                self.enqueue(name)
        if project is None:
            return
        self._pending.setdefault(project, set()).update(n for n in names if n in known)
        if project not in self._head:
            self._advance(project)

    def heading(self, project: str, namespace: str) -> bool:
        """Whether the project's wave awaits `namespace`'s judgment (its caller tells
        `advance` how the wave goes on)."""
        return self._head.get(project) == namespace

    def firsts(self, project: str) -> dict[str, Step]:
        """The first waiting step (in KubeVirt's order) of each namespace the wave has yet to
        judge, as it recorded them."""
        known = self._waiting.get(project, {})
        return {
            name: min(known[name], key=lambda step: step.order)
            for name in self._pending.get(project, ())
            if known.get(name)
        }

    def advance(self, project: str, namespace: str, to: str | None) -> None:
        """`namespace`, the wave's awaited judgment, still waits and wrote nothing: the wave
        goes on with `to` (a waiter whose first room fits the project now, behind no room
        that holds it back), or ends (None: the rest wait behind `namespace`'s room or an
        earlier one, and are judged again when room next moves, or at their recheck)."""
        if self._head.get(project) != namespace:
            return
        del self._head[project]
        if to is None:
            self._pending.pop(project, None)
            return
        self._advance(project, to)

    def _advance(self, project: str, to: str | None = None) -> None:
        """Queues `to`, else the first in KubeVirt's order of those the wave has yet to judge,
        as the judgment the wave awaits; the wave ends when none is left."""
        known = self._waiting.get(project, {})
        pending = {name for name in self._pending.get(project, ()) if known.get(name)}
        if not pending:
            self._pending.pop(project, None)
            return
        head = to if to in pending else min(pending, key=lambda n: _first_order(known[n]))
        pending.discard(head)
        self._pending[project] = pending
        self._head[project] = head
        self.enqueue(head)


class _WaitsBehind:
    """Who waits behind which sibling's migrations: sibling namespace -> waiter -> uids of the
    sibling's migrations the waiter waits behind (ProjectDemands.record's `behind`)."""

    def __init__(self) -> None:
        self._behind: dict[str, dict[str, set[str]]] = {}

    def wait(self, waiter: str, behind: Sequence[tuple[str, str]]) -> None:
        """`waiter` waits behind `behind` now (replacing what it waited behind)."""
        for sibling in list(self._behind):
            self._behind[sibling].pop(waiter, None)
            if not self._behind[sibling]:
                del self._behind[sibling]
        for sibling, uid in behind:
            self._behind.setdefault(sibling, {}).setdefault(waiter, set()).add(uid)

    def released(self, namespace: str, still: set[str]) -> list[str]:
        """The waiters (sorted) that waited behind a migration of `namespace` not among
        `still`, forgotten as its waiters."""
        waiters = self._behind.get(namespace, {})
        moved = sorted(w for w, uids in waiters.items() if uids - still and w != namespace)
        for waiter in moved:
            waiters.pop(waiter, None)
        if not waiters:
            self._behind.pop(namespace, None)
        return moved


def _first_order(steps: Sequence[Step]) -> OrderKey:
    return min(step.order for step in steps)


LOGGED_NAMES: Final = 5
"""At most this many names in one log line; the rest counted."""


def _bounded(names: Sequence[str]) -> str:
    """The first LOGGED_NAMES of `names`, then how many more: a project of hundreds of waiting
    namespaces writes one short line per move, not every name."""
    shown = ", ".join(names[:LOGGED_NAMES])
    more = len(names) - LOGGED_NAMES
    return f"{shown} and {more} more ({len(names)} in all)" if more > 0 else shown


SIBLINGS_SLICE: Final = 0.005
"""Seconds `siblings_waiting` plans siblings before it lets the event loop run others."""


async def siblings_waiting(
    project: str,
    besides: str,
    *,
    planner: NamespacePlanner,
    members: Callable[[str], list[Object]],
    ladders: WaitingCache,
    migrations: Callable[[str], Sequence[Object]],
    clock: Callable[[], float] = time.monotonic,
) -> list[Step]:
    """What a Rancher project's judge (rancher.ProjectRoom's `siblings_waiting`, the rest bound
    with functools.partial) counts as taken: the steps of the namespaces of Rancher project
    `project` but `besides`, planned by `planner`, each marked whether the project gave its room
    (rancherpath.project_steps: those not given wait; the given ones say when each was given),
    planned from the caches now, our writes the caches do not show yet applied: the judge of a
    raise on Rancher's protected path counts those earlier in KubeVirt's order as taken.
    `members`: the namespaces of a project, our writes the cache does not show yet applied (the
    namespaces' pending writes); `ladders`: each sibling's steps, laddered again only when its
    inputs change (ProjectDemands': a namespace no longer ours drops its entry with the rest of
    what it waited for); `migrations`: a namespace's cached migrations. Planned: a namespace
    with migrations cached, not Terminating (its rooms will never be given), whose base is
    Rancher's annotation, whether or not Rancher refused a quota write there in this process yet
    (RancherPath.through): a judge runs only where Rancher refused one, and Rancher's protection
    is its webhook's, for every namespace's default quota alike, so each such sibling's raise
    goes through the project too; waiting for its refusal would let the namespace reconciled
    first after a restart take the room ahead of a sibling's earlier migration. A sibling whose
    plan fails is logged and skipped (it claims nothing; its own reconcile reports it), never a
    failed judgment. Pure but for reading; called once per write (rancher.py's judgment of a
    write); yields to the event loop between siblings once it has held it SIBLINGS_SLICE seconds
    of `clock` (monotonic: /healthz and the Lease renewal run on the loop), so each sibling is
    read as the caches stand then."""
    steps: list[Step] = []
    since = clock()
    cached_members = members(project)
    ladders.keep(project, {str(metadata(m).get("name", "")) for m in cached_members})
    for cached in cached_members:
        if clock() - since > SIBLINGS_SLICE:
            await asyncio.sleep(0)
            since = clock()
        sibling = str(metadata(cached).get("name", ""))
        if sibling == besides or metadata(cached).get("deletionTimestamp"):
            continue  # a Terminating one is not worth planning: asks_project refuses it
        try:
            if planner.defer_to(sibling) or not migrations(sibling):
                continue  # it asks nothing of the project
            plan = planner.plan(cached)
            if plan is not None and asks_project(cached, plan):
                steps += ladders.steps(plan.snapshot.namespace, plan, project)
        except Exception:  # contained per sibling, logged
            log.exception("project %s: %s's waiting rooms not planned", project, sibling)
    return steps
