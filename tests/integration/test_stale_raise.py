"""The safety net on the real cluster: a raise whose release no event ever queues is found by
the sweep, reported and given back (issue 44, item 3)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from harvester_quota.app import ControllerApp
from harvester_quota.config.management import Options
from harvester_quota.controller.resourcequota.staleraise import REASON
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import EVENTS, RESOURCE_QUOTAS
from harvester_quota.util.annotations import LABEL_DEFAULT_RESOURCE_QUOTA
from harvester_quota.util.resourcequota.base import ANNOTATION_APPLIED, ANNOTATION_BASE
from prometheus_client import CollectorRegistry

from tests.helpers import eventually

pytestmark = pytest.mark.integration

SWEEP = 1.0
"""Seconds between the sweep's looks in this test (30 in production): a raise must be given
back within two of them."""


def _hard(quota: dict[str, Any]) -> dict[str, str]:
    return dict((quota.get("spec") or {}).get("hard") or {})


async def test_a_raise_whose_release_no_event_queues_is_given_back_by_the_sweep(
    api: ApiClient, namespace: str
) -> None:
    """A raise of ours stands (spec.hard 2 CPUs above the recorded base, a VM's room recorded)
    while no migration exists, and its watch event is lost (the namespace's keys are dropped
    while it lands, as a watch that missed it would leave it): no reconcile runs for it. The
    sweep finds it within two intervals, says so once (log, metric, Warning on the quota) and
    queues the namespace, whose reconcile gives the room back. Without the sweep, the quota
    stays 2 CPUs above its base for good."""
    await api.create(
        RESOURCE_QUOTAS,
        {
            "metadata": {"name": "default-quota", "labels": {LABEL_DEFAULT_RESOURCE_QUOTA: "true"}},
            "spec": {"hard": {"limits.cpu": "3"}},
        },
        namespace,
    )
    app = ControllerApp(
        api,
        Options(leader_elect=False, kubevirt_version="1.6", workers=2, stale_raise_sweep=SWEEP),
        registry=CollectorRegistry(),
    )
    await app.start()
    try:

        async def base_recorded() -> bool:
            quota = await api.get(RESOURCE_QUOTAS, "default-quota", namespace)
            return ANNOTATION_BASE in (quota["metadata"].get("annotations") or {})

        await eventually(base_recorded, what="the base recorded")
        controller = app.reconciler.namespaces
        # What was asked for before the loss runs first (a run asked soon may still wait).
        assert await controller.wait_pending_runs(namespace, 5.0)
        enqueue, enqueue_soon = controller._add, controller.enqueue_soon

        def lose_this_namespace(key: str) -> None:
            if key != namespace:
                enqueue(key)

        def lose_this_namespace_soon(key: str) -> None:
            if key != namespace:
                enqueue_soon(key)

        # Lost both ways: a change queued at once and one queued soon (kube-controller-manager's
        # status copy of the plant), as a watch that missed them would leave them.
        controller._add = lose_this_namespace  # type: ignore[method-assign]
        controller.enqueue_soon = lose_this_namespace_soon  # type: ignore[method-assign]
        planted = await api.patch(
            RESOURCE_QUOTAS,
            "default-quota",
            {
                "metadata": {
                    "annotations": {
                        ANNOTATION_APPLIED: json.dumps({"limits.cpu": "5"}),
                        "harvesterhci.io/migrating-vm1": json.dumps({"limits.cpu": "2"}),
                    }
                },
                "spec": {"hard": {"limits.cpu": "5"}},
            },
            namespace,
        )
        cache = app.reconciler.inputs.informers.quotas.store

        def cached_the_plant() -> bool:
            """The plant and kube-controller-manager's copy of it into status.hard (whose event
            would queue the namespace too) are both in the cache."""
            cached = cache.get(f"{namespace}/default-quota") or {}
            version = int(cached.get("metadata", {}).get("resourceVersion", "0"))
            status = (cached.get("status") or {}).get("hard") or {}
            return version > int(planted["metadata"]["resourceVersion"]) and (
                status.get("limits.cpu") == "5"
            )

        await eventually(cached_the_plant, what="the planted raise in the cache, its events lost")
        del controller._add  # events flow again; none is coming for this namespace
        del controller.enqueue_soon

        async def given_back() -> bool:
            quota = await api.get(RESOURCE_QUOTAS, "default-quota", namespace)
            annotations = quota["metadata"].get("annotations") or {}
            return _hard(quota) == {"limits.cpu": "3"} and not any(
                key.startswith("harvesterhci.io/migrating") for key in annotations
            )

        await eventually(given_back, timeout=4 * SWEEP + 10, what="the stale raise given back")
        assert app.reconciler.metrics.stale_raises._value.get() == 1  # type: ignore[attr-defined]

        async def warned() -> list[str]:
            events = await api.list(EVENTS, namespace)
            return [
                event["message"]
                for event in events.get("items") or []
                if event.get("reason") == REASON
                and event["involvedObject"].get("name") == "default-quota"
            ]

        messages = await eventually(warned, what="the StaleRaiseGivenBack Warning on the quota")
        assert "with no migration holding room" in messages[0]
    finally:
        await app.stop()
