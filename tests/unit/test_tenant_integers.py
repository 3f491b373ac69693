"""Integers and quantities a tenant writes, read with bounds (issue 38, gap 10): none makes a
view, a plan or a report raise anything but the ValueError each turns into "no room for that
migration" (the side that never gives a tenant more room)."""

from __future__ import annotations

import copy
import datetime
import math
from typing import Any

import pytest
from harvester_quota.config.metrics import as_float
from harvester_quota.util.hotplug import hot_plugged
from harvester_quota.util.launcher.render import launcher_quota_usage
from harvester_quota.util.overhead import vcpu_count
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.vmispec import COUNT_MAX, FAR_FUTURE, deletion_deadline, int_at

from tests.objects import vmi

INT64_MAX = 2**63 - 1


def with_cpu(**counts: int) -> dict[str, Any]:
    found = copy.deepcopy(vmi("v"))
    found["spec"]["domain"]["cpu"].update(counts)
    return found


@pytest.mark.parametrize("field", ["sockets", "cores", "threads"])
@pytest.mark.parametrize(
    "count", [COUNT_MAX + 1, INT64_MAX, 2**1000, -1], ids=["2^32", "int64", "2^1000", "-1"]
)
def test_a_cpu_count_outside_uint32_is_a_value_error_not_an_overflow(
    field: str, count: int
) -> None:
    """Abuse: the API server stores any integer there; virt-controller decodes uint32 only.
    Before, 2**1000 in each factor overflowed a float (OverflowError out of the view)."""
    with pytest.raises(ValueError, match="uint32"):
        launcher_quota_usage(with_cpu(**{field: count}))
    with pytest.raises(ValueError, match="uint32"):
        vcpu_count(with_cpu(sockets=count, cores=count, threads=count))


def test_the_largest_uint32_counts_still_render() -> None:
    usage = launcher_quota_usage(with_cpu(sockets=COUNT_MAX, cores=COUNT_MAX, threads=COUNT_MAX))
    assert usage["memory"].sign() > 0
    assert int_at({"n": COUNT_MAX}, "n", "x") == COUNT_MAX


@pytest.mark.parametrize(
    "text", ["1e400", "9" * 999, "-1e400"], ids=["1e400", "999 nines", "-1e400"]
)
def test_a_quantity_too_large_for_a_float_reports_as_infinity(text: str) -> None:
    """Abuse: a VMI asking for 1e400 bytes (it parses) made the room metric raise."""
    value = as_float(Quantity.parse(text))
    assert math.isinf(value) and (value < 0) == text.startswith("-")
    assert as_float(Quantity.parse("250m")) == 0.25


@pytest.mark.parametrize("grace", [INT64_MAX, -INT64_MAX])
def test_a_deletion_deadline_beyond_a_datetime_is_far_future(grace: int) -> None:
    """The documented choice: the pod counts while it exists (security.md A1)."""
    assert deletion_deadline("2026-01-01T00:00:00Z", grace) == FAR_FUTURE
    assert deletion_deadline("2026-01-01T00:00:00Z", 30) == datetime.datetime(
        2026, 1, 1, 0, 0, 30, tzinfo=datetime.UTC
    )


def test_a_hot_plug_to_sockets_outside_uint32_is_a_value_error() -> None:
    """Abuse: a running VM's template asks for 2**40 sockets under maxSockets 2**41."""
    running = with_cpu(sockets=1, maxSockets=COUNT_MAX)
    running["status"]["conditions"] = [{"type": "LiveMigratable", "status": "True"}]
    template = copy.deepcopy(running["spec"])
    template["domain"]["cpu"]["sockets"] = 2**40
    with pytest.raises(ValueError, match="uint32"):
        hot_plugged(template, running)
    template["domain"]["cpu"]["sockets"] = 4
    assert hot_plugged(template, running) is not None, "within uint32: hot-plugged as before"
