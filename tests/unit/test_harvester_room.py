"""The product's model of Harvester's room (preflight/admission.py `harvester_room`) against the
test bench's faithful port of Harvester's Go code (testbench/strategy/harvester): same share,
same refusals."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from harvester_quota.preflight.admission import harvester_ratio, harvester_room
from harvester_quota.testbench.strategy.harvester.calculator import (
    additional_guest_memory_overhead_ratio,
    calculate_scale_resource_quota_with_vmi,
)
from harvester_quota.testbench.strategy.harvester.migration import default_resource_quotas
from harvester_quota.testbench.strategy.harvester.rqutils import (
    is_auto_scaling_disabled,
    is_resource_quota_managed_by_namespace_annotation,
)
from harvester_quota.util.annotations import (
    ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING,
    CATTLE_ANNOTATION_RESOURCE_QUOTA,
)

from ..objects import managed_quota, rancher_namespace, vmi


def bench_share(namespace: Any, quotas: list[Any], instance: Any, ratio: str) -> Any:
    """What the bench's port would add for `instance`, or None where it adds nothing."""
    defaults = default_resource_quotas(quotas)
    if not defaults or is_auto_scaling_disabled(defaults[0]):
        return None
    text = namespace["metadata"].get("annotations", {}).get(CATTLE_ANNOTATION_RESOURCE_QUOTA, "")
    if not is_resource_quota_managed_by_namespace_annotation(defaults[0], text):
        return None
    needed, share = calculate_scale_resource_quota_with_vmi(
        copy.deepcopy(defaults[0]), instance, ratio, "1.6"
    )
    return share if needed else None


CASES = [
    ({"limitsCpu": "4", "limitsMemory": "8Gi"}, {"limits.cpu": "4", "limits.memory": "8Gi"}, {}),
    ({"limitsMemory": "8Gi"}, {"limits.memory": "8Gi", "requests.memory": "8Gi"}, {}),
    ({"limitsCpu": "4"}, {"limits.cpu": "4"}, {}),
    ({"requestsMemory": "8Gi"}, {"requests.memory": "8Gi"}, {}),
    (
        {"limitsCpu": "4", "limitsMemory": "8Gi"},
        {"limits.cpu": "4", "limits.memory": "8Gi"},
        {ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING: "true"},
    ),
]


@pytest.mark.parametrize(("limit", "hard", "annotations"), CASES)
@pytest.mark.parametrize("ratio", ["1.5", "2.3"])
def test_the_product_model_gives_the_share_the_bench_port_gives(
    limit: dict[str, str], hard: dict[str, str], annotations: dict[str, str], ratio: str
) -> None:
    namespace = rancher_namespace("ns", limit)
    quotas = [managed_quota("ns", hard, annotations)]
    instance = vmi("vm1", cores=2, memory="4Gi")
    room = harvester_room(namespace, quotas, instance, ratio=ratio, kubevirt_version="1.6")
    expected = bench_share(namespace, quotas, instance, ratio)
    if expected is None:
        assert not room.share and room.why_none
    else:
        assert room.share == expected


@pytest.mark.parametrize("value", ["", "0", "0.5", "11", "x", "1.8"])
def test_the_ratio_is_the_one_harvester_scales_with(value: str) -> None:
    setting = {"value": value, "default": "1.5"}
    assert harvester_ratio(setting) == additional_guest_memory_overhead_ratio(setting)
