"""The requests and guest memory Harvester's VM mutator derives from a VM's limits."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from harvester_quota.testbench.harvestervm import (
    HARVESTER_V121_OVERCOMMIT,
    harvester_guest_memory,
    harvester_vm_requests,
)

from tests.unit.vmis import (
    q,
)

# --------------------------------------------------------------------------------------------
# Harvester's VM mutator


@pytest.mark.parametrize(
    ("cpu", "memory", "overcommit", "dedicated", "expected"),
    [
        pytest.param(
            "2",
            "4Gi",
            HARVESTER_V121_OVERCOMMIT,
            False,
            {"cpu": "125m", "memory": "2730Mi"},
            id="v1.2.1-2c-4Gi",
        ),
        pytest.param(
            "1",
            "1Gi",
            HARVESTER_V121_OVERCOMMIT,
            False,
            {"cpu": "62m", "memory": "682Mi"},
            id="v1.2.1-1c-1Gi-truncated",
        ),
        pytest.param(
            "1",
            "2Gi",
            HARVESTER_V121_OVERCOMMIT,
            False,
            {"cpu": "62m", "memory": "1365Mi"},
            id="v1.2.1-1c-2Gi",
        ),
        pytest.param(
            "4",
            "8Gi",
            HARVESTER_V121_OVERCOMMIT,
            False,
            {"cpu": "250m", "memory": "5461Mi"},
            id="v1.2.1-4c-8Gi",
        ),
        pytest.param(
            "2", "4Gi", None, False, {"cpu": "200m", "memory": "2730Mi"}, id="today-default"
        ),
        pytest.param(
            "2",
            "4Gi",
            {"cpu": 100, "memory": 100},
            False,
            {"cpu": "2", "memory": "4Gi"},
            id="no-overcommit",
        ),
        pytest.param("2", "4Gi", None, True, {"cpu": "2", "memory": "4Gi"}, id="dedicated-cpu"),
        pytest.param(None, "4Gi", None, False, {"memory": "2730Mi"}, id="no-cpu-limit"),
        pytest.param("0", "0", None, False, {}, id="zero-limits"),
    ],
)
def test_harvester_vm_requests(
    cpu: str | None,
    memory: str,
    overcommit: Mapping[str, int] | None,
    dedicated: bool,
    expected: dict[str, str],
) -> None:
    requests = harvester_vm_requests(cpu, memory, overcommit, dedicated_cpu=dedicated)
    assert {name: q(value) for name, value in expected.items()} == requests


@pytest.mark.parametrize(
    "overcommit",
    [
        pytest.param({"cpu": 0, "memory": 150}, id="zero-cpu"),
        pytest.param({"cpu": 1000}, id="missing-memory"),
        pytest.param({"cpu": 1000, "memory": "150"}, id="string"),
    ],
)
def test_harvester_vm_requests_bad_overcommit(overcommit: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="overcommit"):
        harvester_vm_requests("2", "4Gi", overcommit)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        pytest.param({"overhead_ratio_set": False}, "3996Mi", id="v1.2.1-reserves-100Mi"),
        pytest.param({}, "4Gi", id="ratio-set-no-reservation"),
        pytest.param({"reserved_memory": "256Mi"}, "3840Mi", id="annotation-wins"),
    ],
)
def test_harvester_guest_memory(kwargs: dict[str, Any], expected: str) -> None:
    assert harvester_guest_memory("4Gi", **kwargs) == q(expected)


def test_harvester_guest_memory_rejects_reservation_above_limit() -> None:
    with pytest.raises(ValueError, match="reserved memory"):
        harvester_guest_memory("1Gi", reserved_memory="1Gi")
