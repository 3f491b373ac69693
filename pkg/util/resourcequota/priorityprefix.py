"""Scarce room in KubeVirt's order: a plan raised for its first migrations only (pure).

Where a namespace's whole raise cannot be had (its Rancher project lacks the room for it:
rancher/project.py), the room goes to migrations in KubeVirt's priority order: a node
drain's evacuations (system-critical) before a user's migration, then the migration created
first (util/migrationpriority.py `scarce_room_order`). `prefixes` gives the plans that raise for
the first k rooms in that order, k from one fewer than all down to one, each with spec.hard as
`plan_quota` gives it for those rooms alone: per key, the base where none of them holds room,
else the same floor (the base or what is used without targets, whichever is more) plus their
rooms. The caller writes the first one that fits; the rest wait for the project's room.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from ..migrationpriority import scarce_room_order
from ..quantity import Quantity
from ..resources import ResourceList, total
from .plan import QuotaPlan
from .rooms import MigrationRoom, RoomPlan


def in_priority_order(rooms: list[MigrationRoom]) -> list[MigrationRoom]:
    """`rooms` in the order scarce room is handed out (KubeVirt's)."""
    return sorted(rooms, key=lambda r: scarce_room_order(r.priority, r.created, r.migration))


def prefixes(plan: QuotaPlan, ordered: list[MigrationRoom] | None = None) -> Iterator[QuotaPlan]:
    """The plans raising for fewer of `plan`'s rooms, most rooms first (module docstring), the
    rooms taken in `ordered` (default: KubeVirt's order); nothing for a plan that holds one
    room or none, or has no base."""
    if plan.base is None or not plan.holds_room or len(plan.rooms.rooms) < 2:
        return
    ordered = ordered if ordered is not None else in_priority_order(plan.rooms.rooms)
    everyone = plan.rooms.total()
    for count in range(len(ordered) - 1, 0, -1):
        kept = ordered[:count]
        hard = _hard_for(plan, everyone, total(room.room for room in kept))
        rooms = RoomPlan(rooms=kept, target_pods=plan.rooms.target_pods)
        yield dataclasses.replace(plan, hard=hard, rooms=rooms)


def _hard_for(plan: QuotaPlan, everyone: ResourceList, kept: ResourceList) -> dict[str, str]:
    """spec.hard of `plan` with only the `kept` rooms (module docstring)."""
    assert plan.base is not None
    hard = dict(plan.hard)
    for key, base in plan.base.hard.items():
        room, mine = everyone.get(key), kept.get(key)
        if key not in hard or room is None or room.sign() <= 0:
            continue
        if mine is None or mine.sign() <= 0:
            hard[key] = str(base)
            continue
        floor = Quantity.parse(hard[key]) - room
        hard[key] = str(floor + mine)
    return hard
