"""Issue 38 item 2: no tenant makes another namespace's pod admissions wait (webhook/turns.py).

Before, the costly part of a pod admission ran in arrival order on the one event loop: a flood of
(dry-run) creates in one namespace put another namespace's admission behind all of it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from harvester_quota.generic.clock import FakeClock
from harvester_quota.generic.resource import Object
from harvester_quota.util.annotations import LABEL_ROOM_HELD, TRUE
from harvester_quota.webhook.connections import AdmissionSlots
from harvester_quota.webhook.server import WebhookServer
from harvester_quota.webhook.turns import NamespaceTurns
from prometheus_client import CollectorRegistry

from tests.helpers import eventually
from tests.objects import migration, plain_namespace
from tests.unit.test_webhook import FakeLookups, plain_pod, quota_with, running_vm

BASE = {"limits.cpu": "3", "limits.memory": "5000Mi"}


async def test_turns_go_round_robin_so_a_flood_delays_another_namespace_by_one_turn() -> None:
    turns = NamespaceTurns(FakeClock(), share=100)
    order: list[str] = []

    async def admission(namespace: str) -> None:
        assert await turns.take(namespace)
        order.append(namespace)
        turns.release()

    flood = [asyncio.ensure_future(admission("flood")) for _ in range(10)]
    victim = asyncio.ensure_future(admission("victim"))
    await asyncio.gather(*flood, victim)
    assert order.index("victim") <= 1, order


async def test_a_namespace_over_its_share_is_refused_at_once_while_another_waits() -> None:
    clock = FakeClock()
    turns = NamespaceTurns(clock, share=2)
    assert await turns.take("holder")  # holds the turn: everyone else queues
    flood = [asyncio.ensure_future(turns.take("flood")) for _ in range(2)]
    victim = asyncio.ensure_future(turns.take("victim"))
    await eventually(lambda: turns.waiting("flood") == 2 and turns.waiting("victim") == 1)
    assert await turns.take("flood") is False, "a third of the flood's, while the victim waits"
    order: list[str] = []
    for name, task in [("flood0", flood[0]), ("flood1", flood[1]), ("victim", victim)]:
        task.add_done_callback(lambda t, name=name: order.append(name) if t.result() else None)
    for granted in range(1, 4):
        turns.release()
        await eventually(lambda granted=granted: len(order) == granted)
    assert order == ["flood0", "victim", "flood1"], "round robin, first come first within one"
    turns.release()


async def test_over_its_share_a_namespace_s_dry_runs_are_refused_while_the_slots_are_crowded() -> (
    None
):
    """No other namespace in the turns, but requests not yet read wait for the slots the flood's
    waiting turns hold (their namespace is unknown): the flood's next dry runs are refused then,
    and those already waiting past its share, and only then; real creates (an honest burst)
    queue even so."""
    crowded = False
    turns = NamespaceTurns(FakeClock(), share=2, crowded=lambda: crowded)
    assert await turns.take("holder")
    flood = [asyncio.ensure_future(turns.take("flood", dry_run=True)) for _ in range(3)]
    await eventually(lambda: turns.waiting("flood") == 3, what="a burst alone queues")
    crowded = True
    assert await turns.take("flood", dry_run=True) is False
    await eventually(flood[2].done, what="the newest past the share refused too")
    assert flood[2].result() is False and turns.refused == 2
    real = asyncio.ensure_future(turns.take("flood"))
    await eventually(lambda: turns.waiting("flood") == 3, what="a real create queues")
    for granted in range(1, 4):
        turns.release()
        await eventually(
            lambda granted=granted: sum(f.done() for f in [*flood, real]) == granted + 1
        )
    assert flood[0].result() and flood[1].result() and real.result()
    turns.release()


async def test_the_slots_tell_how_long_a_request_has_waited() -> None:
    clock = FakeClock()
    slots = AdmissionSlots(1, 1.0, clock)
    assert slots.longest_wait() == 0.0
    assert await slots.acquire()
    waiting = asyncio.ensure_future(slots.acquire())
    await eventually(lambda: slots.waiting == 1)
    clock.step(0.3)
    assert slots.longest_wait() == pytest.approx(0.3)
    slots.release()
    assert await waiting
    assert slots.longest_wait() == 0.0
    slots.release()


async def test_an_admission_that_waits_too_long_for_its_turn_beside_others_is_refused() -> None:
    clock = FakeClock()
    turns = NamespaceTurns(clock, wait=1.0)
    assert await turns.take("holder")
    waiting = asyncio.ensure_future(turns.take("victim"))
    await eventually(lambda: turns.waiting("victim") == 1)
    clock.step(0.5)
    flood = asyncio.ensure_future(turns.take("flood"))
    await eventually(lambda: turns.waiting("flood") == 1)
    assert not waiting.done()
    clock.step(0.5)
    assert await waiting is False, "1 s beside another namespace's admission"
    clock.step(0.5)
    await asyncio.sleep(0)
    assert not flood.done(), "alone in the turns now: it waits"
    turns.release()
    assert await flood is True
    turns.release()


async def test_a_namespace_alone_in_the_turns_waits_for_them_as_long_as_it_takes() -> None:
    """An honest burst on a busy machine: no other namespace waits, so no one gains by a refusal
    (forty racing creates were refused under load)."""
    clock = FakeClock()
    turns = NamespaceTurns(clock, wait=1.0)
    assert await turns.take("burst")
    waiting = asyncio.ensure_future(turns.take("burst"))
    await eventually(lambda: turns.waiting("burst") == 1)
    for _ in range(3):
        clock.step(1.0)
        await asyncio.sleep(0)
    assert not waiting.done()
    turns.release()
    assert await waiting is True
    turns.release()


@dataclass
class ObservedLookups(FakeLookups):
    """Two namespaces, each holding room; records which namespace's rooms were worked out."""

    per_namespace: dict[str, FakeLookups] = field(default_factory=dict)
    worked_out: list[str] = field(default_factory=list)

    def migrations(self, namespace: str) -> Sequence[Object]:
        self.worked_out.append(namespace)
        return self.per_namespace[namespace].migrations(namespace)

    def managed_quota(self, namespace: str) -> Object | None:
        return self.per_namespace[namespace].managed_quota(namespace)

    def namespace(self, name: str) -> Object | None:
        return self.per_namespace[name].namespace(name)

    def vmis(self, namespace: str) -> Any:
        return self.per_namespace[namespace].vmis(namespace)

    def launcher_pods(self, namespace: str) -> Any:
        return self.per_namespace[namespace].launcher_pods(namespace)

    def migrations_under_way(self, namespace: str) -> bool:
        return self.per_namespace[namespace].migrations_under_way(namespace)


def holding_room(name: str) -> FakeLookups:
    lookups = FakeLookups(quotas={name: quota_with({"limits.cpu": "1"}, BASE)})
    lookups.quotas[name]["metadata"]["namespace"] = name
    namespace = plain_namespace(name)
    namespace["metadata"]["labels"] = {LABEL_ROOM_HELD: TRUE}
    lookups.namespaces[name] = namespace
    instance = running_vm(lookups)
    lookups.migration_list.append(migration("m", instance))
    return lookups


def pod_review(namespace: str, name: str, *, dry_run: bool) -> bytes:
    pod = plain_pod(name, "100m", "1Mi")
    pod["metadata"]["namespace"] = namespace
    request = {
        "uid": name,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "operation": "CREATE",
        "namespace": namespace,
        "name": name,
        "userInfo": {"username": "tenant"},
        "object": pod,
        "dryRun": dry_run,
    }
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "request": request}).encode()


async def test_a_flood_of_dry_run_creates_does_not_put_another_namespace_behind_it() -> None:
    """Forty dry-run creates of one tenant arrive just before one create of another namespace,
    both holding room: the victim's rooms are worked out after at most one of the flood's (in
    arrival order, before: after all forty)."""
    lookups = ObservedLookups(
        per_namespace={"flood": holding_room("flood"), "victim": holding_room("victim")}
    )
    server = WebhookServer(lookups, registry=CollectorRegistry(), clock=FakeClock())
    flood = [
        asyncio.ensure_future(server.review("pods", pod_review("flood", f"f{i}", dry_run=True)))
        for i in range(40)
    ]
    victim = asyncio.ensure_future(server.review("pods", pod_review("victim", "v", dry_run=False)))
    answers = await asyncio.gather(*flood, victim)
    assert all(answer.status == 200 for answer in answers)
    assert lookups.worked_out.index("victim") <= 1, lookups.worked_out
