"""An optional write's gate: closed for a doubling backoff after a refusal, never for good."""

from __future__ import annotations

import logging

import pytest
from harvester_quota.generic.permission import Permission
from harvester_quota.testbench.clock import FakeClock

REFUSAL = RuntimeError('403 Forbidden: clusterrole "x" not found')


def gate(clock: FakeClock) -> Permission:
    return Permission("label namespaces", "grant patch on namespaces", clock, max_retry=8.0)


def test_each_refusal_in_a_row_doubles_the_wait_up_to_the_cap() -> None:
    clock = FakeClock()
    permission = gate(clock)
    assert permission.allowed() and permission.retry_in() == 0
    waits = []
    for _ in range(6):
        permission.refused(REFUSAL)
        assert not permission.allowed()
        waits.append(permission.retry_in())
        clock.step(permission.retry_in())
        assert permission.allowed()
    assert waits == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


def test_a_write_that_goes_through_resets_the_backoff() -> None:
    clock = FakeClock()
    permission = gate(clock)
    for _ in range(3):
        permission.refused(REFUSAL)
        clock.step(permission.retry_in())
    permission.granted()
    assert permission.allowed()
    permission.refused(REFUSAL)
    assert permission.retry_in() == 1.0


def test_a_streak_warns_at_its_start_and_at_the_cap_then_says_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    permission = gate(clock)
    with caplog.at_level(logging.DEBUG, logger="harvester_quota.generic.permission"):
        for _ in range(5):
            permission.refused(REFUSAL)
            clock.step(permission.retry_in())
        permission.granted()
    levels = [record.levelname for record in caplog.records]
    assert levels == ["WARNING", "DEBUG", "DEBUG", "WARNING", "WARNING", "INFO"]
    assert "grant patch on namespaces" in caplog.records[0].getMessage()
    assert "after 5 refusals" in caplog.records[-1].getMessage()
