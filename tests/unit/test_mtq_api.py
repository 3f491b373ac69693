"""MTQ's VirtualMachineMigrationResourceQuota decoded as MTQ writes it, and malformed ones refused
with the field named."""

from __future__ import annotations

from typing import Any

import pytest
from harvester_quota.apis.mtq import VMMRQS, VmmrqError, decode_status, decode_vmmrq


def vmmrq(spec: Any = None, status: Any = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "mtq.kubevirt.io/v1alpha1",
        "kind": "VirtualMachineMigrationResourceQuota",
        "metadata": {"name": "budget", "namespace": "tenant", "uid": "u1", "resourceVersion": "7"},
    }
    if spec is not None:
        obj["spec"] = spec
    if status is not None:
        obj["status"] = status
    return obj


def test_the_resource_is_mtq_s() -> None:
    assert VMMRQS.path("tenant") == (
        "/apis/mtq.kubevirt.io/v1alpha1/namespaces/tenant/virtualmachinemigrationresourcequotas"
    )


def test_mtq_s_example_decodes() -> None:
    decoded = decode_vmmrq(
        vmmrq({"additionalMigrationResources": {"requests.cpu": "500m", "requests.memory": 512}})
    )
    assert decoded.additional == {"requests.cpu": "500m", "requests.memory": "512"}
    assert (decoded.namespace, decoded.name, decoded.uid) == ("tenant", "budget", "u1")
    assert decoded.status.originals == () and not decoded.deleting


def test_a_status_written_by_mtq_round_trips() -> None:
    status = {
        "additionalMigrationResources": {"requests.memory": "1Gi"},
        "migrationsToBlockingResourceQuotas": {"m1": ["rq-a", "rq-b"]},
        "originalBlockingResourceQuotas": [
            {"name": "rq-a", "spec": {"hard": {"requests.memory": "2Gi"}}},
            {"name": "rq-b", "spec": {"hard": {"pods": "3"}, "scopes": ["NotTerminating"]}},
        ],
    }
    decoded = decode_status(status)
    assert decoded.to_json() == status
    original = decoded.original("rq-b")
    assert original is not None and original.hard == {"pods": "3"}
    assert decoded.original("missing") is None


def test_an_empty_object_decodes_to_empty_fields() -> None:
    decoded = decode_vmmrq(vmmrq())
    assert decoded.additional == {} and decoded.status.to_json() == {}


@pytest.mark.parametrize(
    ("spec", "status", "named"),
    [
        ({"additionalMigrationResources": ["cpu"]}, None, "spec.additionalMigrationResources"),
        ({"additionalMigrationResources": {"cpu": True}}, None, "['cpu']"),
        (None, {"migrationsToBlockingResourceQuotas": {"m": "rq"}}, "['m']"),
        (None, {"originalBlockingResourceQuotas": {}}, "originalBlockingResourceQuotas"),
        (None, {"originalBlockingResourceQuotas": [{"spec": {}}]}, "[0].name"),
        (
            None,
            {"originalBlockingResourceQuotas": [{"name": "a", "spec": {"hard": {"cpu": 1.5}}}]},
            "[0].spec.hard['cpu']",
        ),
        ("nonsense", None, "spec: must be an object"),
    ],
)
def test_malformed_fields_are_named(spec: Any, status: Any, named: str) -> None:
    with pytest.raises(VmmrqError, match="tenant/budget") as raised:
        decode_vmmrq(vmmrq(spec, status))
    assert named in str(raised.value)


def test_an_object_without_metadata_is_refused() -> None:
    with pytest.raises(VmmrqError, match="needs metadata"):
        decode_vmmrq({"spec": {}})
