"""Readiness of `harvester-quota run`: the truth about caches and leadership."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import cast

import pytest
from harvester_quota.app import ControllerApp, readiness
from harvester_quota.generic.leader import LeaderElector
from harvester_quota.testbench.clock import FakeClock

from tests.unit.test_leader_and_events import FreezingApi, elector


def app(synced: bool, *, warm: bool = False) -> ControllerApp:
    options = SimpleNamespace(warm_standby=warm)
    return cast(ControllerApp, SimpleNamespace(ready=lambda: synced, options=options))


def standby(leading: bool, healthy: bool) -> LeaderElector:
    return cast(LeaderElector, SimpleNamespace(leading=leading, healthy=lambda: healthy))


@pytest.mark.parametrize(
    ("synced", "elector", "ready"),
    [
        (False, None, False),  # no leader election: caches not synced yet
        (True, None, True),
        (False, standby(leading=True, healthy=True), False),  # leading, caches not synced
        (True, standby(leading=True, healthy=True), True),
        (False, standby(leading=False, healthy=True), True),  # a standby that reaches the server
        (False, standby(leading=False, healthy=False), False),  # a standby cut off from it
    ],
)
def test_readiness(synced: bool, elector: LeaderElector | None, ready: bool) -> None:
    assert readiness(app(synced), elector) is ready


@pytest.mark.parametrize(
    ("synced", "healthy", "ready"),
    [(False, True, False), (True, True, True), (True, False, False)],
)
def test_a_warm_standby_is_ready_once_its_caches_synced_and_it_reaches_the_lease(
    synced: bool, healthy: bool, ready: bool
) -> None:
    elector = standby(leading=False, healthy=healthy)
    assert readiness(app(synced, warm=True), elector) is ready


async def test_a_standby_is_healthy_only_while_it_reaches_the_lease() -> None:
    clock, api, leading = FakeClock(), FreezingApi(), []
    leader = asyncio.ensure_future(elector(api, clock, "a", leading).run())
    await clock.advance(1)
    candidate = elector(api, clock, "b", leading)
    assert not candidate.healthy(), "nothing seen yet"
    waiting = asyncio.ensure_future(candidate.run())
    await clock.advance(3)
    assert candidate.healthy() and not candidate.leading
    api.frozen = True
    await clock.advance(candidate.config.lease_duration + 1)
    assert not candidate.healthy()
    for task in (leader, waiting):
        task.cancel()
    await asyncio.gather(leader, waiting, return_exceptions=True)
