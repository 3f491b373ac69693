"""The failover measurement of the scale run (testbench/scale/failover.py): what it counts from
the kill, and when it calls the target met."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.testbench.scale import failover
from harvester_quota.testbench.scale.failover import FailoverTimes, first_after
from harvester_quota.testbench.scale.run import ScaleOptions


def test_only_raises_after_the_kill_count_and_the_first_is_measured_from_it() -> None:
    assert first_after([9.0, None, 12.5, 11.0, 30.0], since=10.0) == (1.0, 3)


def test_no_raise_after_the_kill_reads_as_never() -> None:
    assert first_after([1.0, None], since=10.0) == (None, 0)


@pytest.mark.parametrize(
    ("first_raise", "met"), [(15.9, True), (16.0, True), (16.01, False), (None, False)]
)
def test_the_target_is_the_lease_duration_plus_one_second(
    first_raise: float | None, met: bool
) -> None:
    times = FailoverTimes("warm", 15.2, first_raise, 3, lease_seconds=15.0)
    assert times.met is met
    assert ("met" if met else "missed") in times.line()


def test_the_new_leaders_share_is_from_its_takeover_to_its_first_raise() -> None:
    assert FailoverTimes("warm", 15.5, 15.75, 1).after_takeover == 0.25
    assert FailoverTimes("cold", None, 15.75, 1).after_takeover is None
    assert "0.25 s after the takeover" in FailoverTimes("warm", 15.5, 15.75, 1).line()


def test_a_failover_run_needs_our_controller() -> None:
    with pytest.raises(ValueError, match="failover"):
        ScaleOptions(failover=True, strategy="harvester")


class LeaseReads:
    """A client whose Lease names `holders` in turn, a failed read between them."""

    def __init__(self, *holders: str) -> None:
        self.holders = list(holders)

    async def get(self, _resource: object, _name: str, _namespace: str) -> dict[str, object]:
        holder = self.holders.pop(0)
        if holder == "error":
            raise errors.ApiError("unavailable", status=503)
        return {"spec": {"holderIdentity": holder}}


async def test_the_takeover_is_the_first_read_that_names_the_survivor() -> None:
    clock = FakeClock()
    api = cast(ApiClient, LeaseReads("lease-a", "error", "lease-a", "lease-b"))
    started = clock.monotonic()
    waiting = asyncio.ensure_future(failover.await_holder(api, "system", "lease", "lease-b", clock))
    while not waiting.done():
        await clock.advance(failover.LEASE_POLL)
    assert await waiting == pytest.approx(started + 3 * failover.LEASE_POLL)
