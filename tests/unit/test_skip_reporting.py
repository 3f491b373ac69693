"""How skipped objects are reported (issue 38, informer.py's per-object contract): the metric
`harvester_quota_informer_objects_skipped_total{resource, stage}` (SkipMetrics) and, from the
controller, a Warning Event `ObjectSkipped` on the object (Management.object_skipped)."""

from __future__ import annotations

import random
from typing import Any, cast

import pytest
from harvester_quota.config.management import (
    SKIPPED_REASON,
    Management,
    Options,
    skipped_event_target,
)
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.config import ClientConfig
from harvester_quota.generic.events import WARNING
from harvester_quota.generic.frameworkmetrics import SkipMetrics
from harvester_quota.generic.informer import SharedInformer
from harvester_quota.generic.intake import SkippedObject
from harvester_quota.generic.resource import EVENTS, Object
from harvester_quota.testbench.clock import FakeClock, settle
from harvester_quota.webhook.caches import WebhookCaches, counted_skips
from prometheus_client import CollectorRegistry

from tests.unit.fakes import HANG, FakeApi, ScriptedListerWatcher, pod

METRIC = "harvester_quota_informer_objects_skipped_total"


def skipped_count(registry: CollectorRegistry, resource: str, stage: str) -> float | None:
    return registry.get_sample_value(METRIC, {"resource": resource, "stage": stage})


def test_skip_metrics_count_by_resource_and_stage() -> None:
    registry = CollectorRegistry()
    metrics = SkipMetrics(registry)
    metrics.object_skipped("pods", "view")
    metrics.object_skipped("pods", "view")
    metrics.object_skipped("virtualmachineinstances", "encode")
    assert skipped_count(registry, "pods", "view") == 2
    assert skipped_count(registry, "virtualmachineinstances", "encode") == 1
    assert skipped_count(registry, "pods", "encode") is None


def management(api: FakeApi, clock: FakeClock, registry: CollectorRegistry) -> Management:
    return Management(
        client=cast(ApiClient, api),
        options=Options(),
        clock=clock,
        registry=registry,
        skip_metrics=SkipMetrics(registry),
    )


def kinded_pod(name: str, rv: str, **extra: Any) -> Object:
    return {"kind": "Pod", "apiVersion": "v1", **pod(name, rv, uid=f"uid-{name}", **extra)}


def events_of(api: FakeApi) -> list[Object]:
    return [obj for key, obj in api.objects.items() if key[0] == EVENTS.name]


async def test_the_controller_counts_a_skip_and_records_a_warning_event_on_the_object() -> None:
    """Abuse: a tenant's pod that the transform raises on, in the controller's informer. It
    is counted by resource and stage, and a Warning Event ObjectSkipped names the stage."""
    api, clock, registry = FakeApi(), FakeClock(), CollectorRegistry()
    managed = management(api, clock, registry)

    def transform(obj: Object) -> Object:
        if obj["metadata"].get("labels", {}).get("poison"):
            raise ValueError("cannot read this one")
        return obj

    lw = ScriptedListerWatcher()
    lw.add_list(kinded_pod("a", "1"), kinded_pod("bad", "2", labels={"poison": "y"}), rv="2")
    lw.add_watch(HANG)
    shared = SharedInformer(
        lw,
        name="pods",
        clock=clock,
        rng=random.Random(1),
        transform=transform,
        skips=managed.object_skipped,
    )
    shared.start()
    await settle(100)
    await managed.recorder.close()
    await shared.stop()

    assert shared.has_synced()
    assert skipped_count(registry, "pods", "transform") == 1
    [event] = events_of(api)
    assert event["type"] == WARNING and event["reason"] == SKIPPED_REASON
    assert event["involvedObject"]["name"] == "bad"
    assert event["involvedObject"]["uid"] == "uid-bad"
    assert "stage transform" in event["message"] and "cannot read this one" in event["message"]


async def test_a_skip_without_a_kind_or_name_is_counted_but_gets_no_event() -> None:
    """An Event must refer to an object; a listener failure knows the key only, and a
    transform's raise on something that is no object has nothing to refer to."""
    api, clock, registry = FakeApi(), FakeClock(), CollectorRegistry()
    managed = management(api, clock, registry)
    key_only = {"metadata": {"namespace": "ns", "name": "bad"}}
    managed.object_skipped(SkippedObject("pods", "listener", key_only, "RuntimeError: x"))
    managed.object_skipped(SkippedObject("pods", "transform", ["not", "an object"], "x"))
    await managed.recorder.close()
    assert skipped_count(registry, "pods", "listener") == 1
    assert skipped_count(registry, "pods", "transform") == 1
    assert events_of(api) == []
    assert not skipped_event_target(key_only)
    assert skipped_event_target(kinded_pod("a", "1"))


def test_the_webhooks_caches_log_and_count_a_skip_without_an_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Abuse: an object the webhook's launcher-pod cache cannot take (no key can be read from it).
    It is logged naming it and counted; the webhook has no Event recorder (security.md A3)."""
    registry = CollectorRegistry()
    client = ApiClient(ClientConfig(host="https://127.0.0.1:1", ssl_context=False))
    caches = WebhookCaches(client, clock=FakeClock(), skips=counted_skips(registry))
    poison: Object = {"kind": "Pod", "metadata": 7}  # no shape the API server writes
    caches.pods.on_event("ADDED", poison)
    caches.pods.on_event("ADDED", kinded_pod("good", "2"))
    assert sorted(caches.pods.store.list_keys()) == ["ns/good"]
    assert skipped_count(registry, "pods", "key") == 1
    assert "skipped Pod None (uid ?) at stage key" in caplog.text
