"""Early room: a migration's room written at its admission, before the migration is stored.

The controller raises a quota once it sees a VirtualMachineInstanceMigration; under a burst that
is one quota write after the migration exists (40-190 ms on two cores), and a migration that
arrives during that write waits for the next one (issue 12: p99 300-400 ms at 50 at once in a
3,000-VM namespace). The webhook sees each migration's create before it is stored, with its name,
uid and creation time already assigned, so it can write the room first (webhook
resources/migration). The room it writes is exactly what the controller's plan gives that
migration once it sees it; the quota carries, next to it, an early-room annotation per migration
(``harvester-quota.io/early-room-<migration uid>``) that says so:

- while the migration is not in the plan's caches and the early room has not expired, the plan
  counts it as a pending migration of its VMI (`as_migration`), so the controller keeps the
  room instead of lowering it back, and the webhook's pod rules keep non-target pods out of it;
- once the caches show the migration, its own room takes over (the same room: the early one is
  no longer counted) and the annotation is only dead weight: it is removed in the next write the
  plan makes anyway (`EarlyRooms.done`), so an isolated migration still costs two quota writes;
- an early room whose migration never appears (another webhook denied it after ours, the API
  server failed to store it) stops counting at its expiry, and the plan's write then gives the
  room back with the annotation. The expiry is wall-clock, written by the webhook and read by the
  controller: TTL seconds (30 by default) is far above the watch delay, and below the 60 s after
  which a finished migration is set aside from plans (settled.py), so a migration set aside can
  never make its early room count again. Skew between the two clocks never makes the quota
  wrong once the caches show the migration: a controller ahead by more than the TTL gives a
  fresh early room back at once and raises again when the migration shows (two extra writes,
  and its target pod may wait for that raise); one behind keeps a room whose migration never
  comes for the TTL plus its lag.

Pure functions: no I/O, no clock of their own.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ...apis.kubevirt import VIRTUAL_MACHINE_INSTANCE_MIGRATIONS
from ...generic.meta import annotations_of, metadata
from ...generic.resource import Object
from .. import resources
from ..annotations import migrating_vm_annotation_key
from ..podusage import parse_time
from ..resources import ResourceList
from .base import ANNOTATION_APPLIED, ANNOTATION_BASE

ANNOTATION_EARLY_ROOM_PREFIX: Final = "harvester-quota.io/early-room-"
"""Followed by the migration's uid (36 characters: the key's name part stays under 63)."""
EARLY_ROOM_TTL: Final = 30.0
"""Default seconds an early room counts while its migration is not in the caches."""


def early_room_key(migration_uid: str) -> str:
    return ANNOTATION_EARLY_ROOM_PREFIX + migration_uid


@dataclass(frozen=True)
class EarlyRoom:
    """The room written for one migration at its admission (see the module docstring)."""

    migration_uid: str
    migration: str
    vmi: str
    created: str
    """The migration's creationTimestamp, as the API server assigned it before admission."""
    expires: datetime.datetime

    @property
    def key(self) -> str:
        return early_room_key(self.migration_uid)

    def dumps(self) -> str:
        return json.dumps(
            {
                "migration": self.migration,
                "vmi": self.vmi,
                "created": self.created,
                "expires": self.expires.isoformat(),
            },
            sort_keys=True,
        )

    @classmethod
    def loads(cls, migration_uid: str, text: str) -> EarlyRoom:
        """Raises ValueError, naming what is wrong, for anything `dumps` does not write."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"not JSON: {error}") from None
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        names = {}
        for name in ("migration", "vmi", "created"):
            value = data.get(name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name} must be a non-empty string")
            names[name] = value
        expires = parse_time(data.get("expires"), "expires")
        parse_time(names["created"], "created")
        return cls(migration_uid, names["migration"], names["vmi"], names["created"], expires)

    def as_migration(self, namespace: str) -> Object:
        """The migration as the plan reads it (planviews.migration_plan_view's shape): pending,
        of its VMI, created when the API server said."""
        return {
            "apiVersion": VIRTUAL_MACHINE_INSTANCE_MIGRATIONS.api_version,
            "kind": VIRTUAL_MACHINE_INSTANCE_MIGRATIONS.kind,
            "metadata": {
                "name": self.migration,
                "namespace": namespace,
                "uid": self.migration_uid,
                "creationTimestamp": self.created,
            },
            "spec": {"vmiName": self.vmi},
            "status": {},
        }


@dataclass(frozen=True)
class EarlyRooms:
    """A quota's early rooms as one plan sees them."""

    held: list[EarlyRoom] = field(default_factory=list)
    """Not expired, and their migration is not in the caches: they count as pending migrations."""
    done: list[str] = field(default_factory=list)
    """Annotation keys of early rooms that count no more (expired, or their migration is in the
    caches): removed with the next write the plan makes anyway."""
    invalid: dict[str, str] = field(default_factory=dict)
    """Annotation key -> why it cannot be read (removed, with a warning)."""

    def migrations(self, namespace: str) -> list[Object]:
        return [room.as_migration(namespace) for room in self.held]

    def next_expiry(self, now: datetime.datetime) -> float | None:
        """Seconds until the first held early room expires, if any."""
        if not self.held:
            return None
        return max(0.0, min((room.expires - now).total_seconds() for room in self.held))


NO_EARLY_ROOMS: Final = EarlyRooms()


def parse_early_rooms(quota: Mapping[str, Any]) -> tuple[list[EarlyRoom], dict[str, str]]:
    """The quota's early rooms as written, and the keys of those that cannot be read (why)."""
    rooms: list[EarlyRoom] = []
    invalid: dict[str, str] = {}
    for key, text in sorted(annotations_of(quota).items()):
        if not key.startswith(ANNOTATION_EARLY_ROOM_PREFIX):
            continue
        try:
            rooms.append(EarlyRoom.loads(key.removeprefix(ANNOTATION_EARLY_ROOM_PREFIX), str(text)))
        except ValueError as error:
            invalid[key] = str(error)
    return rooms, invalid


def early_rooms(
    quota: Mapping[str, Any], migrations: Iterable[Object], now: datetime.datetime
) -> EarlyRooms:
    """The quota's early rooms, judged against the migrations the caches show and `now`.
    Costs nothing more than a scan of the annotations when the quota has none."""
    rooms, invalid = parse_early_rooms(quota)
    if not rooms and not invalid:
        return NO_EARLY_ROOMS
    shown = {str(metadata(m).get("uid", "")) for m in migrations} if rooms else set()
    result = EarlyRooms(invalid=invalid)
    for room in rooms:
        if room.migration_uid in shown or room.expires <= now:
            result.done.append(room.key)
        else:
            result.held.append(room)
    return result


@dataclass(frozen=True)
class Admitted:
    """One migration being admitted, with the room the plan gives it."""

    early: EarlyRoom
    vm_name: str
    room: ResourceList


def early_room_patch(
    quota: Mapping[str, Any], admitted: Sequence[Admitted]
) -> dict[str, Any] | None:
    """The merge patch adding the rooms of `admitted` to the quota as it is, or None when there
    is nothing to add (every one already has its early room, or the quota has no recorded base).

    Per key of the recorded base (standalone mode; without one, the controller has not adopted
    the quota yet and decides alone): spec.hard grows by the room, the VM's
    ``harvesterhci.io/migrating-<vm>`` annotation by the room too (the plan's per-VM total), and
    ``harvester-quota.io/applied`` becomes the new managed spec.hard, as the controller's plan
    writes them; so the controller, seeing the early room, plans the same quota and writes
    nothing. Only ever raises: if the quota was not at its plan (the controller behind), the
    controller's next write corrects it."""
    annotations = annotations_of(quota)
    base_text = annotations.get(ANNOTATION_BASE)
    if not base_text:
        return None
    base = resources.loads(base_text)
    hard = resources.parse_resource_list((quota.get("spec") or {}).get("hard") or {})
    managed = [key for key in base if key in hard]
    raised = dict(hard)
    changes: dict[str, str] = {}
    for one in admitted:
        if one.early.key in annotations or one.early.key in changes:
            continue
        room = resources.mask(one.room, managed)
        raised = resources.add(raised, room)
        vm_key = migrating_vm_annotation_key(one.vm_name)
        held = changes.get(vm_key, annotations.get(vm_key))
        vm_room = resources.add(resources.loads(held), room) if held else room
        changes[vm_key] = resources.dumps(vm_room)
        changes[one.early.key] = one.early.dumps()
    if not changes:
        return None
    changes[ANNOTATION_APPLIED] = resources.dumps({key: raised[key] for key in managed})
    spec = {key: str(raised[key]) for key in managed if raised[key] != hard[key]}
    patch: dict[str, Any] = {"metadata": {"annotations": changes}}
    if spec:
        patch["spec"] = {"hard": spec}
    return patch
