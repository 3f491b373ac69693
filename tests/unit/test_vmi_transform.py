"""The VMI caches' transform: the unknown fields KubeVirt's schema keeps and no rule reads
(spec.domain.clock) and the API server's managedFields are dropped before encoding; the rest,
the annotations included, is kept."""

from __future__ import annotations

import copy
from typing import Any

from harvester_quota.testbench.decoding import depth_of
from harvester_quota.util.launcher.render import launcher_quota_usage
from harvester_quota.util.vmispec import strip_vmi_unread

from tests.objects import vmi


def deep(levels: int) -> Any:
    value: Any = {}
    for _ in range(levels):
        value = {"x": value}
    return value


def test_a_tenants_deep_clock_is_dropped_and_nothing_read_changes() -> None:
    """Abuse: 300 levels in spec.domain.clock (past the store codec's 254)."""
    planted = vmi("v")
    planted["spec"]["domain"]["clock"] = {"utc": {}, "timer": deep(300)}
    before = copy.deepcopy(planted)

    stripped = strip_vmi_unread(planted)

    assert "clock" not in stripped["spec"]["domain"]
    assert depth_of(stripped) < 10
    assert planted == before, "the object given is not changed"
    without = copy.deepcopy(before)
    del without["spec"]["domain"]["clock"]
    assert stripped == without, "everything else kept"
    assert launcher_quota_usage(stripped) == launcher_quota_usage(vmi("v")), "clock is not read"


def test_a_vmi_without_the_field_or_with_odd_shapes_passes_unchanged() -> None:
    assert strip_vmi_unread({"metadata": {"name": "a"}}) == {"metadata": {"name": "a"}}
    odd = {"metadata": {"name": "a"}, "spec": {"domain": "not an object"}}
    assert strip_vmi_unread(odd) == odd


def test_managed_fields_are_dropped_and_the_annotations_and_what_is_read_are_kept() -> None:
    written = vmi("v")
    written["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "{}"}
    written["metadata"]["managedFields"] = [
        {"manager": "virt-controller", "operation": "Update", "fieldsV1": {"f:status": {}}}
    ]
    before = copy.deepcopy(written)

    stripped = strip_vmi_unread(written)

    assert "managedFields" not in stripped["metadata"]
    assert written == before, "the object given is not changed"
    without = copy.deepcopy(before)
    del without["metadata"]["managedFields"]
    assert stripped == without, "everything else kept, the annotations too"
    assert launcher_quota_usage(stripped) == launcher_quota_usage(written)
