"""Where the controller's CPU goes: watch events counted by kind and type, the CPU of the watch
streams and of each handler run, measured per coroutine step (cputime.py, frameworkmetrics.py).

The CPU clock is a list stepped by the code under test, never the real one: the assertions
are about what is counted, not how fast anything ran."""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any, cast

import pytest
from harvester_quota.app import ControllerApp
from harvester_quota.config.management import Options
from harvester_quota.generic import reflector as reflector_module
from harvester_quota.generic import sharedhandler as sharedhandler_module
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.cputime import cpu_metered, cpu_timed
from harvester_quota.generic.frameworkmetrics import FrameworkMetrics
from harvester_quota.generic.reflector import Reflector
from harvester_quota.generic.resource import Object
from harvester_quota.generic.sharedhandler import SharedHandler
from harvester_quota.testbench.clock import FakeClock, settle
from prometheus_client import CollectorRegistry

from tests.unit.fakes import HANG, RecordingSink, ScriptedListerWatcher, event, pod

LOG = logging.getLogger("test-framework-metrics")


class SteppedCpu:
    """A CPU clock the code under test advances (`spend`)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def spend(self, seconds: float) -> None:
        self.now += seconds


async def test_cpu_timed_counts_its_own_steps_not_what_ran_while_it_waited() -> None:
    cpu = SteppedCpu()
    told: list[float] = []

    async def other_task() -> None:
        cpu.spend(10.0)  # runs while the timed coroutine is suspended

    async def timed() -> str:
        cpu.spend(0.25)
        await asyncio.sleep(0)
        cpu.spend(0.5)
        return "done"

    other = asyncio.ensure_future(other_task())
    assert await cpu_timed(timed(), told.append, clock=cpu) == "done"
    await other
    assert told == [0.75], "told once, its two steps only: the other task's 10 s are not its"


async def test_cpu_metered_tells_each_step_as_it_goes() -> None:
    cpu = SteppedCpu()
    told: list[float] = []

    async def metered() -> None:
        cpu.spend(0.25)
        await asyncio.sleep(0)
        assert told == [0.25], "the first step was told before the second ran"
        cpu.spend(0.5)

    await cpu_metered(metered(), told.append, clock=cpu)
    assert told == [0.25, 0.5]


async def test_a_failing_run_is_told_once_and_its_error_propagates() -> None:
    cpu = SteppedCpu()
    told: list[float] = []

    async def failing() -> None:
        cpu.spend(0.125)
        await asyncio.sleep(0)
        raise ValueError("bug")

    with pytest.raises(ValueError, match="bug"):
        await cpu_timed(failing(), told.append, clock=cpu)
    assert told == [0.125]


async def test_cancellation_reaches_the_timed_coroutine_and_is_told_once() -> None:
    cpu = SteppedCpu()
    told: list[float] = []
    seen: list[str] = []

    async def waiting() -> None:
        cpu.spend(0.5)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    task = asyncio.ensure_future(cpu_timed(waiting(), told.append, clock=cpu))
    await settle()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"]
    assert told == [0.5]


@pytest.mark.parametrize("cpu", [True, False])
async def test_the_reflector_counts_watch_events_by_resource_and_type(
    cpu: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Events are counted either way; the watch stream's CPU only with accounting on, and
    without it the stream is never driven through the CPU meter (no clock read a step)."""
    registry = CollectorRegistry()
    metrics = FrameworkMetrics(registry, cpu=cpu)
    if not cpu:
        monkeypatch.setattr(reflector_module, "cpu_metered", _never_called)
    lw = ScriptedListerWatcher()
    lw.add_list(pod("a", "10"), rv="10")
    lw.add_watch(
        event("ADDED", "b", "11"),
        event("MODIFIED", "a", "12"),
        event("MODIFIED", "b", "13"),
        event("BOOKMARK", "", "14"),
        event("DELETED", "a", "15"),
        HANG,
    )
    reflector = Reflector(
        "pods", lw, RecordingSink(), clock=FakeClock(), rng=random.Random(7), observer=metrics
    )
    task = asyncio.ensure_future(reflector.run())
    await settle()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

    def count(event_type: str) -> float | None:
        return registry.get_sample_value(
            "harvester_quota_watch_events_total", {"resource": "pods", "type": event_type}
        )

    assert [count(t) for t in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK")] == [1, 2, 1, 1]
    watch_cpu = registry.get_sample_value(
        "harvester_quota_watch_cpu_seconds_total", {"resource": "pods"}
    )
    assert (watch_cpu is not None) is cpu, "the stream's CPU is counted under its resource"


def _never_called(*args: object, **kwargs: object) -> Any:
    raise AssertionError("the CPU meter ran with accounting off")


@pytest.mark.parametrize("cpu", [True, False])
async def test_every_handler_run_is_observed_by_controller_and_handler_failures_too(
    cpu: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs are counted either way; each run's CPU only with accounting on, and without it no
    run is driven through the CPU timer."""
    registry = CollectorRegistry()
    shared = SharedHandler("namespaces", LOG, FrameworkMetrics(registry, cpu=cpu))
    if not cpu:
        monkeypatch.setattr(sharedhandler_module, "cpu_timed", _never_called)

    async def ok(key: str, obj: Object | None) -> Object | None:
        return None

    async def broken(key: str, obj: Object | None) -> Object | None:
        raise ValueError("bug")

    shared.register("quota", ok)
    shared.register("mtq", broken)
    await shared.on_change("ns-a", None)
    await shared.on_change("ns-b", None)

    def runs(handler: str, name: str = "harvester_quota_handler_runs_total") -> float | None:
        return registry.get_sample_value(name, {"controller": "namespaces", "handler": handler})

    assert (runs("quota"), runs("mtq")) == (2, 2)
    timed = "harvester_quota_handler_cpu_seconds_count"
    assert (runs("quota", timed), runs("mtq", timed)) == ((2, 2) if cpu else (None, None))


async def test_a_handler_returning_a_plain_awaitable_is_timed_too() -> None:
    observed: list[tuple[str, str]] = []

    class Recorder:
        measures_cpu = True

        def handler_started(self, controller: str, handler: str) -> None:
            pass

        def handler_ran(self, controller: str, handler: str, cpu_seconds: float) -> None:
            assert cpu_seconds >= 0
            observed.append((controller, handler))

    shared = SharedHandler("pods", LOG, Recorder())
    future: asyncio.Future[Object | None] = asyncio.get_running_loop().create_future()
    future.set_result(None)
    shared.register("plain", lambda key, obj: future)
    await shared.on_change("ns/p", None)
    assert observed == [("pods", "plain")]


def test_the_controller_process_measures_its_informers_and_handlers() -> None:
    registry = CollectorRegistry()
    app = ControllerApp(cast(ApiClient, object()), Options(), clock=FakeClock(), registry=registry)
    metrics = app.management.framework_metrics
    assert metrics is not None
    informer: Any = app.management.informers.informers[0]
    assert informer.reflector._observer is metrics
    controller: Any = app.management.controllers.controllers[0]
    assert controller._handlers._observer is metrics
    assert not metrics.measures_cpu, "CPU accounting is off unless asked for"
    measured = ControllerApp(
        cast(ApiClient, object()),
        Options(cpu_accounting=True),
        clock=FakeClock(),
        registry=CollectorRegistry(),
    ).management.framework_metrics
    assert measured is not None and measured.measures_cpu
