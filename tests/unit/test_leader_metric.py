"""harvester_quota_leader: what the NoLeader alert sums over the controller's replicas."""

from __future__ import annotations

import asyncio
import contextlib
from typing import cast

import pytest
from harvester_quota.app import ControllerApp
from harvester_quota.config.management import Options
from harvester_quota.generic.client import ApiClient
from harvester_quota.testbench.clock import FakeClock
from prometheus_client import CollectorRegistry


class StartFails(RuntimeError):
    pass


def app_with(registry: CollectorRegistry, *, start_fails: bool = False) -> ControllerApp:
    """A ControllerApp whose start and stop touch no API server (the gauge is what is tested)."""
    app = ControllerApp(cast(ApiClient, object()), Options(), clock=FakeClock(), registry=registry)
    started = asyncio.Event()

    async def start() -> None:
        if start_fails:
            raise StartFails
        started.set()

    async def stop() -> None:
        return None

    app.start = start  # type: ignore[method-assign]
    app.stop = stop  # type: ignore[method-assign]
    app.started = started  # type: ignore[attr-defined]
    return app


def leader(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("harvester_quota_leader")


async def test_the_leader_gauge_is_1_while_leading_and_0_before_and_after() -> None:
    registry = CollectorRegistry()
    app = app_with(registry)
    assert leader(registry) == 0, "a standby exports 0, so the replicas' sum counts leaders"
    leading = asyncio.ensure_future(app.lead())
    await app.started.wait()  # type: ignore[attr-defined]
    assert leader(registry) == 1
    leading.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await leading
    assert leader(registry) == 0


async def test_a_leader_whose_start_fails_exports_0_again() -> None:
    registry = CollectorRegistry()
    with pytest.raises(StartFails):
        await app_with(registry, start_fails=True).lead()
    assert leader(registry) == 0
