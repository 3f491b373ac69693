"""The safety net: a raise left standing while no migration holds room is planned again.

The reconcile is level-triggered, but it runs only when something queues the namespace: a raise
whose release was never planned (an event missed, a plan made from a view that was stale, a bug
of ours or of a peer's) would stand for good, capacity a tenant holds without paying for it.
So every `interval` seconds a sweep looks at the cached namespaces whose quota or
namespace shows a raise (`raise_shows`: cheap, no plan), plans those (pure, as the reconcile
would) and keeps the ones whose plan holds no room while something is still to be given back
(`left_to_give_back`). One still so `stale_after` seconds after it was first seen, is stale: it
is logged, counted (harvester_quota_stale_raises_total) and told in a Warning event on the
quota, once per episode, and queued for the reconcile, which gives it back. So a stale raise of
ours lasts at most `stale_after` plus one interval. Namespaces MTQ mode handles (their room-mode
raise given back) are not looked at: MTQ mode raises them its own way. In a healthy cluster it never fires: a release is
written by the reconcile its event queues, within a second.

A raise through Rancher's annotation is given back when the annotation is; the quota follows
when Rancher's agent copies it. Where the annotation is back at its base and the quota is not,
there is nothing for us to write (Rancher forbids it): the episode is still reported, naming
Rancher's agent, which syncs the quota again on the namespace's next event or its own restart.

Event loop only. The sweep reads the caches and plans; it writes nothing itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from ...config.management import Management
from ...config.metrics import QuotaMetrics
from ...generic.clock import Clock
from ...generic.events import WARNING, EventRecorder
from ...generic.logformat import fields
from ...generic.meta import annotations_of
from ...generic.resource import Object
from ...generic.tasks import cancel_and_wait
from ...util import resources
from ...util.annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA
from ...util.resourcequota.base import (
    ANNOTATION_BASE,
    RANCHER,
    BaseError,
    rancher_base,
    spec_hard,
)
from ...util.resourcequota.plan import QuotaPlan, patch_for
from ...util.resourcequota.raises import raise_records
from ...util.resourcequota.rancherpath import annotation_patch
from .planner import NamespacePlanner
from .writes import is_labelled

log = logging.getLogger(__name__)

SWEEP_INTERVAL: Final = 30.0
"""Seconds between sweeps. A release takes a reconcile (queued at most SOON_WINDOW, 1 s, after
its event) and, through Rancher, the agent's copy (milliseconds more): an interval is tens of
times that, and a sweep of 10,000 namespaces costs little (bench/SCALE.md)."""
STALE_AFTER: Final = 30.0
"""Seconds a raise must stand with no room held before it counts as stale."""
REASON: Final = "StaleRaiseGivenBack"
TURN: Final = 200
"""Namespaces looked at between two turns the sweep gives the event loop: 200 pre-filter looks
cost a few milliseconds; a plan, for a namespace that shows a raise, costs 0.2-1 ms more."""


Candidates = Callable[[], Iterable[tuple[str, Object, Object]]]
"""(namespace key, namespace, managed quota) for every cached namespace with one, as the reconcile
would read them (our writes the caches do not show yet included); lazily, so the sweep can give
the event loop a turn between them (PlanInputs.candidates)."""
LeftBehind = Callable[[str, Object, Object], str | None]
"""(key, namespace, quota) -> what a reconcile of `key` planned now would still give back while
its plan holds no room (`left_to_give_back`), in words; None if nothing (or it manages nothing):
`left_behind` over the reconcile's NamespacePlanner."""


def raise_shows(quota: Object, namespace: Object) -> bool:
    """Whether the quota or the namespace shows a raise of ours, or the quota stands away from
    its recorded base: records of a raise, spec.hard other than the base (Rancher's annotation,
    or our recorded base), or the room-held label on a namespace without Rancher's annotation
    (a Rancher namespace whose quota we raise directly keeps its label for good: its label alone
    shows nothing, and a label left on a Rancher namespace raised through its annotation, with
    no record and no raise left, is not looked for: it holds pods to the base, failing closed).
    Cheap (no plan); a false positive only costs a plan."""
    if raise_records(quota, namespace):
        return True
    if is_labelled(namespace) and CATTLE_ANNOTATION_RESOURCE_QUOTA not in annotations_of(namespace):
        return True  # a Rancher namespace raised directly keeps its label for good: no sign
    try:
        hard = spec_hard(quota)
        base = rancher_base(namespace)
        if base is None:
            recorded = annotations_of(quota).get(ANNOTATION_BASE)
            base = resources.loads(recorded) if recorded else None
    except (ValueError, BaseError):
        return True  # unreadable: let the plan say what it makes of it
    if base is None:
        return False
    return any(key in hard and hard[key] != value for key, value in base.items())


def left_to_give_back(
    quota: Object, namespace: Object, plan: QuotaPlan, *, through_rancher: bool, label_due: bool
) -> str | None:
    """What a plan that holds no room still has to give back, in words; None if nothing.
    `label_due`: the room-held label stands though neither a room, its linger nor a policy of
    keeping it for good calls for it (RoomHeldLabel.due)."""
    if not plan.managed or plan.holds_room:
        return None
    if through_rancher:
        if annotation_patch(namespace, plan) is not None:
            return "Rancher's annotation still carries the raise"
    elif patch_for(quota, plan) is not None:
        return "spec.hard or its records stand above the plan"
    if plan.base is not None and plan.base.source == RANCHER and patch_for(quota, plan):
        return "Rancher's agent has not copied the annotation's base into the quota"
    if label_due:
        return "the room-held label stands for a room no longer held"
    return None


def left_behind(
    planner: NamespacePlanner,
    label_due: Callable[[str, Object, bool], bool],
    key: str,
    namespace: Object,
    quota: Object,
) -> str | None:
    """The sweep's `LeftBehind` from the reconcile's planner (bound with functools.partial):
    `key`'s namespace planned now, and what it still has to give back (`left_to_give_back`).
    `label_due(key, namespace, holds_room)`: whether a room-held label outstayed its room
    (RoomHeldLabel.due)."""
    plan = planner.plan(namespace)
    if plan is None:
        return None  # not ours, or MTQ mode's once our raise is given back
    keeps_label = plan.labelled_for_good or plan.label_writes_wait
    namespace = plan.snapshot.namespace
    due = label_due(key, namespace, plan.holds_room)
    return left_to_give_back(
        plan.snapshot.quota,
        namespace,
        plan,
        through_rancher=planner.through(namespace, plan),
        label_due=due and not keeps_label,
    )


@dataclass
class _Episode:
    since: float
    why: str
    reported: bool = False


class StaleRaiseSweep:
    """Finds raises standing with no room held among the `candidates`, as `left_behind` plans
    them, reports each episode once, queues the namespace. `start` runs the sweep every
    `interval` seconds until `stop`."""

    def __init__(
        self,
        candidates: Candidates,
        left_behind: LeftBehind,
        enqueue: Callable[[str], None],
        *,
        clock: Clock,
        metrics: QuotaMetrics,
        recorder: EventRecorder,
        interval: float = SWEEP_INTERVAL,
        stale_after: float = STALE_AFTER,
        ready: Callable[[], bool] = lambda: True,
    ) -> None:
        self.candidates = candidates
        self.left_behind = left_behind
        self.ready = ready
        """Whether the caches have synced: a sweep over caches still filling would take rooms
        really held for none (their migrations not listed yet), so none runs before."""
        self.enqueue = enqueue
        self.clock = clock
        self.metrics = metrics
        self.recorder = recorder
        self.interval = interval
        self.stale_after = stale_after
        self.episodes: dict[str, _Episode] = {}
        """Namespace -> since when (monotonic) its raise stands with no room held."""
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Starts sweeping every `interval` seconds (idempotent)."""
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task])
            self._task = None

    async def _loop(self) -> None:
        while True:
            await self.clock.sleep(self.interval)
            if not self.ready():
                continue
            try:
                await self.sweep()
            except Exception:  # a failing cache: the net tries again, it does not fall
                log.exception("the sweep for stale raises failed; trying again next interval")

    async def sweep(self) -> list[str]:
        """One look at every cached namespace; returns the namespaces found stale (queued).
        Gives the event loop a turn every TURN namespaces (bench/sweep.py measures a look;
        bench/SCALE.md has the figures). The namespaces are those cached when the look began,
        each read with its quota as cached when its turn comes."""
        now = self.clock.monotonic()
        standing: dict[str, tuple[str, Object]] = {}
        for seen, (key, namespace, quota) in enumerate(self.candidates(), 1):
            why = self._why_standing(key, namespace, quota)
            if why is not None:
                standing[key] = (why, quota)
            if seen % TURN == 0:
                await asyncio.sleep(0)
        return self._note(standing, now)

    def _note(self, standing: dict[str, tuple[str, Object]], now: float) -> list[str]:
        """Ends the episodes no longer standing, reports and queues the stale ones."""
        for key in set(self.episodes) - set(standing):
            del self.episodes[key]
        stale = []
        for key, (why, quota) in standing.items():
            episode = self.episodes.setdefault(key, _Episode(now, why))
            if now - episode.since < self.stale_after:
                continue
            stale.append(key)
            if not episode.reported:
                episode.reported = True
                self._report(key, quota, why, now - episode.since)
            self.enqueue(key)
        return stale

    def _why_standing(self, key: str, namespace: Object, quota: Object) -> str | None:
        """Why `key`'s raise stands with no room held, or None; a namespace whose plan fails
        is logged and passed over (its reconcile reports the failure), never the sweep."""
        try:
            if not raise_shows(quota, namespace):
                return None
            return self.left_behind(key, namespace, quota)
        except Exception:
            log.exception(
                "namespace %s: cannot tell whether a raise stands; passed over",
                key,
                extra=fields(namespace=key),
            )
            return None

    def _report(self, key: str, quota: Object, why: str, seconds: float) -> None:
        message = (
            f"a raise stood {seconds:.0f}s with no migration holding room ({why}); planned "
            "again to give it back. This should never happen: please report it with the "
            "controller's log"
        )
        log.warning("namespace %s: %s", key, message, extra=fields(namespace=key))
        self.metrics.stale_raises.inc()
        self.recorder.event(quota, WARNING, REASON, message)


def stale_raise_sweep(
    management: Management,
    candidates: Candidates,
    left_behind: LeftBehind,
    enqueue: Callable[[str], None],
    metrics: QuotaMetrics,
) -> StaleRaiseSweep:
    """The sweep of `management`'s options (`stale_raise_sweep` seconds, both its interval and
    how long a raise stands before it is stale), ready once its informers synced; started with
    the controllers (ControllerApp.start), stopped with `management`."""
    sweep = StaleRaiseSweep(
        candidates,
        left_behind,
        enqueue,
        clock=management.clock,
        metrics=metrics,
        recorder=management.recorder,
        interval=management.options.stale_raise_sweep,
        stale_after=management.options.stale_raise_sweep,
        ready=management.informers.synced,
    )
    management.on_stop(sweep.stop)
    return sweep
