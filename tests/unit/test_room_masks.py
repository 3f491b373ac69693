"""A room masked to the base's keys: what it drops, and that a room with nothing to drop is kept."""

from __future__ import annotations

from harvester_quota.util.quantity import Quantity
from harvester_quota.util.resourcequota.rooms import MigrationRoom


def room(**quantities: str) -> MigrationRoom:
    values = {key.replace("_", "."): Quantity.parse(text) for key, text in quantities.items()}
    return MigrationRoom("m", "uid", "vm", "vmi-uid", "Pending", values, None, True, "pending")


def test_a_room_masked_to_keys_it_holds_no_other_of_is_the_same_room() -> None:
    held = room(limits_cpu="2", limits_memory="1Gi")
    assert held.masked(["limits.cpu", "limits.memory", "pods"]) is held


def test_a_room_masked_drops_the_other_keys_and_leaves_the_room_it_was_made_from() -> None:
    held = room(limits_cpu="2", limits_memory="1Gi")
    masked = held.masked(["limits.cpu"])
    assert masked.room == {"limits.cpu": Quantity.parse("2")}
    assert held.room.keys() == {"limits.cpu", "limits.memory"}
