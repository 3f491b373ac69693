"""Writes of a managed quota's spec.hard by another identity, on the real cluster: the controller
tells who (a ForeignQuotaWrite Warning, the metric by field manager), writes its plan back, and
does not take its own write back for a foreign one."""

from __future__ import annotations

import json
from typing import Any

import pytest
from harvester_quota.app import ControllerApp
from harvester_quota.config.management import Options
from harvester_quota.controller.resourcequota.reports import (
    FOREIGN_WRITE_NEXT,
    FOREIGN_WRITE_REASON,
)
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import EVENTS, NAMESPACES, RESOURCE_QUOTAS
from harvester_quota.generic.rest import FIELD_MANAGER
from harvester_quota.util.annotations import (
    CATTLE_ANNOTATION_RESOURCE_QUOTA,
    LABEL_DEFAULT_RESOURCE_QUOTA,
)
from harvester_quota.util.resourcequota.conditional import hard_writers
from prometheus_client import CollectorRegistry

from tests.helpers import eventually

pytestmark = pytest.mark.integration

QUOTA = "default-quota"
GITOPS = "gitops-test"
PERSON = "kubectl-edit"


def _cpu(quota: dict[str, Any]) -> str | None:
    return ((quota.get("spec") or {}).get("hard") or {}).get("limits.cpu")


async def _set_cpu(api: ApiClient, namespace: str, cpu: str, manager: str) -> dict[str, Any]:
    """spec.hard limits.cpu set to `cpu` by field manager `manager` (another identity's write:
    the API server records it under that name, not under ours)."""
    return await api.patch(
        RESOURCE_QUOTAS,
        QUOTA,
        {"spec": {"hard": {"limits.cpu": cpu}}},
        namespace,
        field_manager=manager,
    )


async def _warnings(api: ApiClient, namespace: str) -> list[str]:
    events = await api.list(EVENTS, namespace)
    return [
        event["message"]
        for event in events.get("items") or []
        if event.get("reason") == FOREIGN_WRITE_REASON
        and event["involvedObject"].get("name") == QUOTA
    ]


async def test_a_foreign_write_is_told_counted_and_written_back(
    api: ApiClient, namespace: str
) -> None:
    """A Rancher namespace (base limits.cpu 3 from its annotation) whose quota stands at its
    base. A GitOps tool sets limits.cpu to 8: the controller tells it once (a Warning naming
    the tool, the field from 3 to 8 and what the controller does), counts it under the tool's name and
    writes 3 back. A person then sets 9: counted too (its Warning waits for the interval), and
    nothing in between was counted for us, though our write back came between the two."""
    await api.patch(
        NAMESPACES,
        namespace,
        {
            "metadata": {
                "annotations": {
                    CATTLE_ANNOTATION_RESOURCE_QUOTA: json.dumps({"limit": {"limitsCpu": "3000m"}})
                }
            }
        },
    )
    await api.create(
        RESOURCE_QUOTAS,
        {
            "metadata": {"name": QUOTA, "labels": {LABEL_DEFAULT_RESOURCE_QUOTA: "true"}},
            "spec": {"hard": {"limits.cpu": "3"}},
        },
        namespace,
    )
    dry = await api.patch(
        RESOURCE_QUOTAS,
        QUOTA,
        {"spec": {"hard": {"limits.cpu": "8"}}},
        namespace,
        field_manager=GITOPS,
        dry_run=True,
    )
    [gitops] = [w for w in hard_writers(dry) if w.manager != FIELD_MANAGER]
    assert (gitops.manager, gitops.operation, gitops.keys) == (GITOPS, "Update", ("limits.cpu",))

    registry = CollectorRegistry()
    app = ControllerApp(
        api, Options(leader_elect=False, kubevirt_version="1.6", workers=2), registry=registry
    )
    await app.start()
    try:

        def counted(manager: str) -> float:
            value = registry.get_sample_value(
                "harvester_quota_foreign_quota_writes_total", {"manager": manager}
            )
            return value or 0.0

        cache = app.reconciler.inputs.informers.quotas.store
        await eventually(lambda: cache.get(f"{namespace}/{QUOTA}"), what="the quota cached")
        await _set_cpu(api, namespace, "8", GITOPS)

        async def written_back() -> dict[str, Any] | None:
            quota = await api.get(RESOURCE_QUOTAS, QUOTA, namespace)
            return quota if _cpu(quota) == "3" else None

        restored = await eventually(written_back, what="the plan (limits.cpu 3) written back")
        owners = [w.manager for w in hard_writers(restored) if "limits.cpu" in w.keys]
        assert owners == [FIELD_MANAGER]
        [message] = await eventually(
            lambda: _warnings(api, namespace), what="the ForeignQuotaWrite Warning on the quota"
        )
        assert message.startswith(f"written by {GITOPS} (Update, ")
        assert "spec.hard limits.cpu 3 -> 8" in message
        assert message.endswith(FOREIGN_WRITE_NEXT)
        assert counted(GITOPS) == 1

        await _set_cpu(api, namespace, "9", PERSON)
        await eventually(lambda: counted(PERSON) == 1, what="the person's write counted")
        # The handler takes the quota's updates in order: our write back, between the two
        # foreign writes, has been judged by now.
        assert counted(FIELD_MANAGER) == 0 and counted(GITOPS) == 1
        await eventually(written_back, what="the plan written back again")
        assert len(await _warnings(api, namespace)) == 1  # the person's waits for the interval
    finally:
        await app.stop()
