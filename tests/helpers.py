"""Small helpers shared by the test tiers."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar, overload

from harvester_quota.apis.kubevirt import VIRTUAL_MACHINE_INSTANCE_MIGRATIONS
from harvester_quota.generic.resource import PODS, RESOURCE_QUOTAS
from prometheus_client import CollectorRegistry

from bench.load import cpu_burners

__all__ = ["cpu_burners"]  # one busy-machine helper for tests and benchmarks (bench/load.py)

if TYPE_CHECKING:
    from harvester_quota.app import ControllerApp
    from harvester_quota.generic.client import ApiClient
    from harvester_quota.testbench.strategy.harvester import HarvesterStrategy

    from tests.integration.kubevirt_by_hand import KubeVirtByHand

T = TypeVar("T")

MIGRATION_WALK = ("Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running")
"""The phases virt-controller walks a migration through before Succeeded."""


def wait_until(
    probe: Callable[[], T | None],
    *,
    timeout: float = 30.0,
    interval: float = 0.2,
    what: str = "condition",
) -> T:
    """Blocks, polling ``probe`` until it returns something truthy; fails the test with ``what``
    on timeout. For synchronous fixtures; inside an event loop use `eventually`.

    Integration tests observe controllers that run in other processes (kube-controller-manager,
    kwok), so they wait for a state rather than sleeping a fixed time.
    """
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last value: {last!r}")


@overload
async def eventually(
    probe: Callable[[], Awaitable[T | None]],
    *,
    timeout: float = ...,
    interval: float = ...,
    what: str = ...,
) -> T: ...


@overload
async def eventually(
    probe: Callable[[], T | None], *, timeout: float = ..., interval: float = ..., what: str = ...
) -> T: ...


async def eventually(
    probe: Callable[[], Any],
    *,
    timeout: float = 30.0,
    interval: float = 0.1,
    what: str = "condition",
) -> Any:
    """Polls ``probe`` (plain, or returning an awaitable) until it returns something truthy; fails
    the test with ``what`` and the last value on timeout. The one polling helper of the async
    tests: they wait for a state, never a fixed time."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        last = probe()
        if inspect.isawaitable(last):
            last = await last
        if last:
            return last
        if loop.time() > deadline:
            raise AssertionError(
                f"timed out after {timeout:.0f}s waiting for {what}; last value: {last!r}"
            )
        await asyncio.sleep(interval)


@asynccontextmanager
async def running_controllers(
    api: ApiClient,
    *,
    workers: int = 2,
    registry: CollectorRegistry | None = None,
    adopt_harvester_quotas: bool = False,
) -> AsyncIterator[ControllerApp]:
    """The controllers in this process as `api`'s user, without leader election, for KubeVirt
    1.6, with `workers` workers and their metrics in `registry` (a fresh one if None), adopting
    quotas from Harvester if asked; started on entry, stopped on exit, however the block ends."""
    from harvester_quota.app import ControllerApp
    from harvester_quota.config.management import Options

    app = ControllerApp(
        api,
        Options(
            leader_elect=False,
            kubevirt_version="1.6",
            workers=workers,
            adopt_harvester_quotas=adopt_harvester_quotas,
        ),
        registry=registry if registry is not None else CollectorRegistry(),
    )
    await app.start()
    try:
        yield app
    finally:
        await app.stop()


async def succeed_migration(
    kv: KubeVirtByHand,
    migration: dict[str, Any],
    source: dict[str, Any],
    target: dict[str, Any],
    *,
    walk: bool = True,
) -> None:
    """virt-controller's move of ``migration`` to Succeeded from ``source`` to ``target`` pod
    (through every phase, or with ``walk=False`` straight there); the source pod is left running
    (it completes later)."""
    if walk:
        for phase in MIGRATION_WALK:
            await kv.set_phase(migration, phase)
    await kv.set_phase(
        migration,
        "Succeeded",
        migrationState={
            "sourcePod": source["metadata"]["name"],
            "targetPod": target["metadata"]["name"],
        },
    )
    await asyncio.sleep(0)


async def caught_up(app: ControllerApp | HarvesterStrategy, namespace: str) -> bool:
    """True when the controllers' caches hold the API server's current pods, migrations and quotas
    of ``namespace`` and every controller queue is idle: whatever the controllers will do about
    the cluster as it is now, they have done. Use with `eventually` where a test would otherwise
    sleep "long enough" before asserting that something did *not* change."""
    management = app.management
    for resource in (PODS, VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, RESOURCE_QUOTAS):
        listed = await app.client.list(resource, namespace)
        server = {
            item["metadata"]["name"]: item["metadata"]["resourceVersion"]
            for item in listed.get("items") or []
        }
        cached = {
            item["metadata"]["name"]: item["metadata"]["resourceVersion"]
            for item in management.informers.informer(resource).store.by_index(
                "namespace", namespace
            )
        }
        if server != cached:
            return False
    return all(
        c.queue.len() == 0 and c.queue.in_flight() == 0 for c in management.controllers.controllers
    )
