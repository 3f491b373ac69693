"""Finished migrations that hold no room any more, told apart so that plans stop reading them.

KubeVirt keeps finished VirtualMachineInstanceMigrations: virt-controller garbage-collects them
per VMI, keeping the newest few, so a namespace of thousands of VMs keeps thousands of them. The
plan judges each one again on every reconcile (rooms.py: a finished migration holds room until
its source pod, or for a failed one its target pod, stops counting). Measured in a 3,000-VM
namespace keeping 400-550 finished migrations (py-spy): 59 % of the
controller's CPU in a scale run went to plans (10 ms a plan at p50, 25 ms at p90, about half of
it on finished migrations), and the namespace was reconciled about ten times per migration.

A finished migration (Succeeded or Failed) is *settled* when it holds no room now and either
no plan has found it holding room for `after` seconds in a row, or KubeVirt recorded it finished
at least `after` seconds ago (its phaseTransitionTimestamps: a restarted controller then does
not judge the namespace's whole history again for `after` seconds). Nothing brings a settled
migration's room back: KubeVirt makes no pods for a finished migration, and a pod that stopped
counting (gone, terminal, past its grace period) never counts again. The grace covers caches
that lag behind each other (a failed migration's target pod seen after its final phase).

The caller sets settled migrations aside from what plans read (`NamespaceViews.set_aside`), and
only once its caches have synced; any change of the migration lists it again, to be judged
again. Nothing here needs to survive a restart: a restarted controller's fresh caches judge each
migration once more.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping

from ...apis.kubevirt import FINAL_PHASES
from ...generic.meta import metadata, status
from ...generic.resource import Object
from ..vmispec import parse_time
from .rooms import RoomPlan

SETTLE_AFTER = 60.0
"""Seconds a finished migration must hold no room, in every plan, before it is settled."""


class SettledMigrations:
    """Per namespace, since when each finished migration has been planned without room.

    Not thread-safe: call it from the event loop, for one namespace at a time (the namespace
    controller never runs two reconciles of a namespace at once). Memory: the finished
    migrations of the last `after` seconds, per namespace.
    """

    def __init__(self, after: float = SETTLE_AFTER) -> None:
        self.after = after
        self._idle_since: dict[str, dict[str, float]] = {}

    def settled(
        self,
        namespace: str,
        migrations: Iterable[Object],
        rooms: RoomPlan,
        now: float,
        wall: datetime.datetime,
    ) -> list[str]:
        """The names of the finished migrations, among those a plan of `namespace` read at
        monotonic `now` (wall-clock `wall`), that hold no room in `rooms` and either held none
        in any plan of the last `after` seconds or finished, as recorded, `after` seconds before
        `wall`. A migration whose room could not be estimated is never settled. The others are
        remembered from their first plan without room; a migration that holds room again, or
        is no longer read, is forgotten."""
        holding = {room.migration for room in rooms.rooms} | rooms.estimate_errors.keys()
        before = self._idle_since.get(namespace, {})
        idle: dict[str, float] = {}
        settled: list[str] = []
        for migration in migrations:
            name = str(metadata(migration).get("name") or "")
            phase = str(status(migration).get("phase") or "")
            if phase not in FINAL_PHASES or name in holding:
                continue
            since = before.get(name, now)
            if now - since >= self.after or _finished_before(migration, wall, self.after):
                settled.append(name)
            else:
                idle[name] = since
        if idle:
            self._idle_since[namespace] = idle
        else:
            self._idle_since.pop(namespace, None)
        return settled

    def forget(self, namespace: str) -> None:
        """Drops what is known of the namespace (deleted, or no longer ours)."""
        self._idle_since.pop(namespace, None)

    def remembered(self, namespace: str) -> int:
        """Finished migrations of the namespace within their grace now (for tests)."""
        return len(self._idle_since.get(namespace, {}))


def _finished_before(migration: Object, wall: datetime.datetime, seconds: float) -> bool:
    """Whether KubeVirt recorded the migration reaching a final phase at least `seconds` before
    `wall`; False when it recorded nothing readable."""
    transitions = status(migration).get("phaseTransitionTimestamps")
    if not isinstance(transitions, list):
        return False
    for transition in transitions:
        if not isinstance(transition, Mapping) or str(transition.get("phase")) not in FINAL_PHASES:
            continue
        try:
            moment = parse_time(
                transition.get("phaseTransitionTimestamp"), "phaseTransitionTimestamp"
            )
        except ValueError:
            continue
        if (wall - moment).total_seconds() >= seconds:
            return True
    return False
