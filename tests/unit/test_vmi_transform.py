"""The VMI caches' transform: the unknown fields KubeVirt's schema keeps and no rule reads
(spec.domain.clock), managedFields and kubectl's last-applied copy are dropped before encoding;
the rest is kept."""

from __future__ import annotations

import copy
import os
from typing import Any, cast

import orjson
from harvester_quota.apis.kubevirt import VIRTUAL_MACHINE_INSTANCES
from harvester_quota.app import ControllerApp
from harvester_quota.config.management import Options
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.informer import SharedInformer
from harvester_quota.generic.resource import Object
from harvester_quota.generic.store import LAST_APPLIED
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.testbench.decoding import depth_of
from harvester_quota.util.launcher.render import launcher_quota_usage
from harvester_quota.util.vmispec import strip_vmi_unread
from harvester_quota.webhook.caches import WebhookCaches
from prometheus_client import CollectorRegistry

from tests.objects import vmi
from tests.unit.fakes import FakeApi


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


def test_managed_fields_and_kubectls_last_applied_copy_are_dropped_and_the_rest_kept() -> None:
    written = vmi("v")
    written["metadata"]["annotations"] = {LAST_APPLIED: "{}", "team": "blue"}
    written["metadata"]["managedFields"] = [
        {"manager": "virt-controller", "operation": "Update", "fieldsV1": {"f:status": {}}}
    ]
    before = copy.deepcopy(written)

    stripped = strip_vmi_unread(written)

    assert "managedFields" not in stripped["metadata"]
    assert stripped["metadata"]["annotations"] == {"team": "blue"}
    assert written == before, "the object given is not changed"
    without = copy.deepcopy(before)
    del without["metadata"]["managedFields"]
    del without["metadata"]["annotations"][LAST_APPLIED]
    assert stripped == without, "everything else kept"
    assert launcher_quota_usage(stripped) == launcher_quota_usage(written)


def bloated(name: str) -> Object:
    """A tenant's VMI (kubevirt.io:edit may write managedFields and annotations) carrying about
    480 KB of managedFields entries with random keys, a 200 KB last-applied copy and a clock."""
    planted = vmi(name)
    planted["spec"]["domain"]["clock"] = {"utc": {}, "timer": {"hpet": {"present": False}}}
    planted["metadata"]["annotations"] = {LAST_APPLIED: os.urandom(100_000).hex()}
    planted["metadata"]["managedFields"] = [
        {
            "manager": f"tenant-{index}",
            "operation": "Update",
            "fieldsV1": {f"f:{os.urandom(8).hex()}": {} for _ in range(500)},
        }
        for index in range(40)
    ]
    return planted


def vmi_informer(informers: list[SharedInformer]) -> SharedInformer:
    return next(i for i in informers if i.name == VIRTUAL_MACHINE_INSTANCES.name)


async def test_the_controllers_and_the_webhooks_vmi_caches_keep_none_of_a_tenants_bloat() -> None:
    """Abuse: a VMI a tenant bloated with managedFields and a last-applied copy, through the VMI
    informer each process wires (ControllerApp's, WebhookCaches'): what either cache keeps is
    the VMI without them, under 8 KB stored, not the 680 KB written."""
    controller = ControllerApp(cast(ApiClient, FakeApi()), Options(), registry=CollectorRegistry())
    webhook = WebhookCaches(cast(ApiClient, FakeApi()), clock=FakeClock())
    for informers in (controller.management.informers.informers, webhook.factory.informers):
        informer = vmi_informer(informers)
        written = bloated("v")
        assert len(orjson.dumps(written)) > 600_000
        informer.on_event("ADDED", copy.deepcopy(written))

        cached = informer.store.get("ns/v")

        assert cached == strip_vmi_unread(written), "the VMI transform is the one wired"
        assert "managedFields" not in cached["metadata"]
        assert LAST_APPLIED not in cached["metadata"].get("annotations", {})
        assert max(len(encoded.stored) for encoded in informer.store.encoded()) < 8_000
