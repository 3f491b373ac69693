"""One namespace's flood of Warnings can neither drop nor delay another namespace's events: the
recorder's queue has a share per namespace and is served round-robin (fairqueue.py)."""

from __future__ import annotations

from typing import cast

import pytest
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.events import QUEUE_SIZE, WARNING, EventRecorder
from harvester_quota.generic.fairqueue import PER_KEY, FairQueue
from harvester_quota.generic.resource import EVENTS
from harvester_quota.testbench.clock import FakeClock

from tests.unit.fakes import FakeApi


def pod(namespace: str, index: int) -> dict[str, object]:
    return {
        "kind": "Pod",
        "metadata": {"name": f"p{index}", "namespace": namespace, "uid": f"u{index}"},
    }


async def test_a_tenants_flood_of_warnings_drops_none_of_another_namespaces_events() -> None:
    """The tenant lies loudly: 5000 objects of its own, each with a Warning, queued before the
    victim's one event. With one shared queue of 1000 the victim's event was dropped (or, had
    it fitted, written after the flood); now the flood keeps to its share and the victim's
    event is the second one written."""
    api = FakeApi()
    recorder = EventRecorder(cast(ApiClient, api), "harvester-quota", clock=FakeClock())
    for index in range(5000):
        recorder.event(pod("tenant", index), WARNING, "Flood", f"bad {index}")
    recorder.event(pod("victim", 0), WARNING, "Refused", "the victim's event")
    await recorder.close()
    events = [o for k, o in api.objects.items() if k[0] == EVENTS.name]
    written = [e["involvedObject"]["namespace"] for e in events]
    assert "victim" in written, "the victim's event was dropped by the tenant's flood"
    assert written.index("victim") <= 1, "the victim's event waited behind the flood"
    assert written.count("tenant") == PER_KEY
    assert recorder.dropped == 5000 - PER_KEY


def test_a_full_queue_evicts_from_the_namespace_holding_the_most() -> None:
    queue: FairQueue[int] = FairQueue(size=4, per_key=3)
    assert [queue.put("flood", i) for i in range(3)] == [None, None, None]
    assert queue.put("flood", 3) == 3, "a namespace at its share loses its own newest"
    assert queue.put("a", 10) is None
    assert queue.put("b", 20) == 0, "the full queue evicts the flood's oldest for a newcomer"
    assert queue.put("c", 30) == 1
    assert queue.put("c", 31) == 31, "no namespace holds more than c would: c's own is dropped"
    assert len(queue) == 4


def test_the_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="size 0"):
        FairQueue[int](0)


async def test_namespaces_are_served_in_turn() -> None:
    queue: FairQueue[str] = FairQueue(size=QUEUE_SIZE)
    for item in ("a1", "a2", "a3", "b1", "c1", "b2"):
        queue.put(item[0], item)
    taken = [await queue.get() for _ in range(6)]
    assert taken == ["a1", "b1", "c1", "a2", "b2", "a3"]
