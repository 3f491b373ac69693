"""Small helpers shared by the test tiers."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

if TYPE_CHECKING:
    from tests.integration.kubevirt_by_hand import KubeVirtByHand

T = TypeVar("T")

MIGRATION_WALK = ("Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running")
"""The phases virt-controller walks a migration through before Succeeded."""


def eventually(
    probe: Callable[[], T | None],
    *,
    timeout: float = 30.0,
    interval: float = 0.2,
    what: str = "condition",
) -> T:
    """Polls ``probe`` until it returns something truthy; fails the test with ``what`` on timeout.

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
async def eventually_async(
    probe: Callable[[], Awaitable[T | None]],
    *,
    timeout: float = ...,
    interval: float = ...,
    what: str = ...,
) -> T: ...


@overload
async def eventually_async(
    probe: Callable[[], T | None], *, timeout: float = ..., interval: float = ..., what: str = ...
) -> T: ...


async def eventually_async(
    probe: Callable[[], Any],
    *,
    timeout: float = 30.0,
    interval: float = 0.1,
    what: str = "condition",
) -> Any:
    """`eventually` inside an event loop: ``probe`` may be plain or return an awaitable."""
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
