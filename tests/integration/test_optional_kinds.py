"""Optional kinds on the real API server: a CRD that is not installed is synced and empty, one
installed later is listed, one removed later empties the cache (issue: a cluster without
Harvester's Settings CRD never became ready)."""

from __future__ import annotations

import contextlib
import uuid

import pytest
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.informer import SharedInformerFactory
from harvester_quota.generic.resource import CRDS, PODS, Resource

from tests.helpers import eventually

pytestmark = pytest.mark.integration


def widget_crd(group: str) -> dict[str, object]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


async def test_optional_kind_follows_its_crd(api: ApiClient, namespace: str) -> None:
    group = f"t{uuid.uuid4().hex[:8]}.example.com"
    widgets = Resource(group, "v1", "widgets", "Widget")
    factory = SharedInformerFactory(api, presence_period=0.5)
    informer = factory.informer(widgets, optional=True)
    factory.start()
    try:
        assert await factory.wait_for_cache_sync(10), "absent is synced"
        assert informer.store.objects() == []
        assert informer.present is False

        await api.create(CRDS, widget_crd(group))

        async def created() -> bool:
            try:
                await api.create(
                    widgets,
                    {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w1"}},
                    namespace,
                )
            except errors.NotFound:
                return False  # the CRD is not established yet
            return True

        await eventually(created, what="a widget created once the CRD serves")
        await eventually(
            lambda: [o["metadata"]["name"] for o in informer.store.objects()] == ["w1"],
            what="the widget in the cache",
        )

        await api.delete(CRDS, f"widgets.{group}")
        await eventually(lambda: informer.store.objects() == [], what="the cache emptied")
        await eventually(lambda: informer.present is False, what="the kind seen gone")
        assert informer.has_synced() and informer.store.objects() == []
    finally:
        await factory.stop()
        with contextlib.suppress(errors.NotFound):
            await api.delete(CRDS, f"widgets.{group}")


async def test_a_required_kind_that_is_not_served_is_named(api: ApiClient) -> None:
    gadgets = Resource("absent.example.com", "v1", "gadgets", "Gadget")
    factory = SharedInformerFactory(api)
    factory.informer(PODS)
    factory.informer(gadgets)
    factory.informer(Resource("absent.example.com", "v1", "others", "Other"), optional=True)
    assert await factory.unserved_required() == [gadgets]
