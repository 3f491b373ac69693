"""An informer of an optional kind: synced and empty while the server does not serve it."""

from __future__ import annotations

import random

from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.config import ClientConfig
from harvester_quota.generic.informer import (
    ResourceEventHandler,
    SharedInformer,
    SharedInformerFactory,
)
from harvester_quota.generic.resource import EVENTS, Object
from harvester_quota.generic.store import Tombstone
from harvester_quota.testbench.clock import FakeClock

from tests.unit.fakes import ScriptedListerWatcher, pod

PERIOD = 30.0


class Answers:
    """Scripted answers to "is it served?"; the last one repeats."""

    def __init__(self, *answers: bool | Exception) -> None:
        self.answers = list(answers)
        self.asked = 0

    async def __call__(self) -> bool:
        self.asked += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def optional_informer(
    lw: ScriptedListerWatcher, clock: FakeClock, presence: Answers
) -> tuple[SharedInformer, list[str]]:
    seen: list[str] = []
    informer = SharedInformer(
        lw,
        name="widgets.example.com",
        clock=clock,
        rng=random.Random(1),
        presence=presence,
        presence_period=PERIOD,
    )

    def name(obj: Object | Tombstone) -> str:
        return obj.key if isinstance(obj, Tombstone) else obj["metadata"]["name"]

    informer.add_event_handler(
        ResourceEventHandler(
            on_add=lambda obj, initial: seen.append(f"add {name(obj)}"),
            on_delete=lambda obj: seen.append(f"delete {name(obj)}"),
        )
    )
    return informer, seen


async def test_absent_kind_is_synced_and_empty_without_listing() -> None:
    clock, lw = FakeClock(), ScriptedListerWatcher()
    informer, _ = optional_informer(lw, clock, Answers(False))
    informer.start()
    await clock.advance(0)
    assert informer.has_synced()
    assert informer.store.objects() == []
    assert lw.list_calls == []
    await clock.advance(PERIOD * 3)
    assert lw.list_calls == [], "no list while absent, however long"
    await informer.stop()


async def test_a_kind_installed_later_is_listed_and_removed_later_is_emptied() -> None:
    clock, lw = FakeClock(), ScriptedListerWatcher()
    lw.add_list(pod("w1", "5"), rv="5")
    presence = Answers(False, True, True, False)
    informer, seen = optional_informer(lw, clock, presence)
    informer.start()
    await clock.advance(0)
    assert informer.has_synced() and informer.store.objects() == []
    await clock.advance(PERIOD)
    assert [o["metadata"]["name"] for o in informer.store.objects()] == ["w1"]
    await clock.advance(PERIOD * 2)
    assert informer.store.objects() == []
    assert seen == ["add w1", "delete ns/w1"]
    assert lw.active_watches == 0, "the reflector stopped with the kind"
    await informer.stop()


async def test_a_failed_look_keeps_what_was_known_and_asks_again_next_period() -> None:
    clock, lw = FakeClock(), ScriptedListerWatcher()
    presence = Answers(errors.ConnectionRefused("down"), False)
    informer, _ = optional_informer(lw, clock, presence)
    informer.start()
    await clock.advance(0)
    assert not informer.has_synced(), "nothing is known yet"
    assert presence.asked == 1
    await clock.advance(PERIOD / 2)
    assert presence.asked == 1, "no hot loop after a failure"
    await clock.advance(PERIOD / 2)
    assert informer.has_synced()
    await informer.stop()


async def test_an_informer_with_its_own_presence_is_optional_and_never_reported_unserved() -> None:
    client = ApiClient(ClientConfig(host="https://127.0.0.1:1", ssl_context=False))
    factory = SharedInformerFactory(client)
    informer = factory.informer(
        EVENTS, field_selector="reason=FailedCreate", presence=Answers(False)
    )
    assert informer.optional
    assert await factory.unserved_required() == []
    await client.close()
