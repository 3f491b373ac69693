"""Rancher's quota sync simulator on the real local cluster: it creates the default quota, resets
a hand-edited spec.hard on the next namespace event and on an agent restart, never on a quota edit
alone, and deletes the quota when the project loses its resourceQuota."""

from __future__ import annotations

from typing import Any

import pytest
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import NAMESPACES, RESOURCE_QUOTAS, Object
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.sim.rancher import Operation, Project, RancherQuotaSync
from harvester_quota.testbench.sim.rancher.protection import RancherProtection
from harvester_quota.util.annotations import (
    CATTLE_ANNOTATION_RESOURCE_QUOTA,
    LABEL_DEFAULT_RESOURCE_QUOTA,
)

from tests.helpers import eventually

pytestmark = pytest.mark.integration

SEED_ANNOTATION = '{"limit":{"limitsCpu":"3000m","limitsMemory":"5000Mi"}}'
SEED_HARD = {"limits.cpu": "3", "limits.memory": "5000Mi"}


async def default_quotas(api: ApiClient, namespace: str) -> list[Object]:
    listed = await api.list_all(
        RESOURCE_QUOTAS, namespace, label_selector=f"{LABEL_DEFAULT_RESOURCE_QUOTA}=true"
    )
    return listed.items


async def hard_is(api: ApiClient, namespace: str, hard: dict[str, str]) -> Object | None:
    quotas = await default_quotas(api, namespace)
    if len(quotas) == 1 and quotas[0]["spec"].get("hard") == hard:
        return quotas[0]
    return None


async def join_project(api: ApiClient, namespace: str, project: Project, quota: str | None) -> None:
    annotations: dict[str, Any] = {"field.cattle.io/projectId": project.annotation_id}
    if quota is not None:
        annotations[CATTLE_ANNOTATION_RESOURCE_QUOTA] = quota
    await api.patch(NAMESPACES, namespace, {"metadata": {"annotations": annotations}})


async def hand_edit(api: ApiClient, quota: Object, hard: dict[str, str]) -> Object:
    """What Harvester (or a user) does to the quota: new hard values and an annotation."""
    quota = await api.get(
        RESOURCE_QUOTAS, quota["metadata"]["name"], quota["metadata"]["namespace"]
    )
    quota["spec"]["hard"] = hard
    quota["metadata"].setdefault("annotations", {})["harvesterhci.io/migrating-vm1"] = "{}"
    return await api.update(RESOURCE_QUOTAS, quota)


async def test_sync_creates_resets_on_namespace_events_and_restart(
    api: ApiClient, namespace: str
) -> None:
    project = Project(f"p-{namespace[-6:]}")
    async with RancherQuotaSync(api, projects=[project], version="2.12") as rancher:
        await join_project(api, namespace, project, SEED_ANNOTATION)
        quota = await eventually(lambda: hard_is(api, namespace, SEED_HARD), what="the quota")
        assert await rancher.wait_idle(10)  # its own namespace writes sync once more
        assert quota["metadata"]["generateName"] == "default-"
        assert quota["metadata"]["labels"] == {
            LABEL_DEFAULT_RESOURCE_QUOTA: "true",
            "cattle.io/creator": "norman",
        }
        ns = await api.get(NAMESPACES, namespace)
        assert ns["metadata"]["annotations"][CATTLE_ANNOTATION_RESOURCE_QUOTA] == SEED_ANNOTATION
        status = ns["metadata"]["annotations"]["cattle.io/status"]
        assert '"Type":"ResourceQuotaValidated","Status":"True"' in status
        assert '"Type":"ResourceQuotaInit","Status":"True"' in status

        # A quota edit alone changes nothing: Rancher has no handler on ResourceQuotas.
        scaled = {"limits.cpu": "5", "limits.memory": "10865341313", "pods": "10"}
        await hand_edit(api, quota, scaled)
        assert await rancher.wait_idle(10)
        assert await hard_is(api, namespace, scaled)
        assert [a.operation for a in rancher.actions_for(namespace)] == [Operation.CREATE]

        # Any namespace event resets the whole spec, keeping the quota's metadata.
        await api.patch(NAMESPACES, namespace, {"metadata": {"labels": {"touched": "yes"}}})
        reset = await eventually(lambda: hard_is(api, namespace, SEED_HARD), what="the reset")
        assert await rancher.wait_idle(10)
        assert reset["metadata"]["annotations"]["harvesterhci.io/migrating-vm1"] == "{}"
        assert reset["metadata"]["uid"] == quota["metadata"]["uid"]

        # So does an agent restart, without any namespace event.
        await hand_edit(api, reset, scaled)
        assert await rancher.wait_idle(10)
        assert await hard_is(api, namespace, scaled)
        await rancher.agent_restart()
        assert await eventually(lambda: hard_is(api, namespace, SEED_HARD), what="restart reset")
        operations = [a.operation for a in rancher.actions_for(namespace)]
        assert operations == [Operation.CREATE, Operation.UPDATE, Operation.UPDATE]


async def test_project_without_quota_deletes_it_and_strips_the_annotation(
    api: ApiClient, namespace: str
) -> None:
    project = Project(f"p-{namespace[-6:]}")
    async with RancherQuotaSync(api, projects=[project], version="2.14") as rancher:
        await join_project(api, namespace, project, SEED_ANNOTATION)
        quota = await eventually(lambda: hard_is(api, namespace, SEED_HARD), what="the quota")
        assert "cattle.io/creator" not in quota["metadata"]["labels"]  # v2.13+: wrangler clients

        rancher.set_project(Project(project.id, limit=None))

        async def deleted() -> bool:
            return not await default_quotas(api, namespace)

        await eventually(deleted, what="the quota's deletion")
        ns = await api.get(NAMESPACES, namespace)
        assert CATTLE_ANNOTATION_RESOURCE_QUOTA not in ns["metadata"].get("annotations", {})


async def test_project_default_drops_keys_it_does_not_have(api: ApiClient, namespace: str) -> None:
    project = Project(
        f"p-{namespace[-6:]}",
        namespace_default={"limits.cpu": "1", "requests.memory": "1Gi"},
    )
    async with RancherQuotaSync(api, projects=[project]):
        await join_project(api, namespace, project, SEED_ANNOTATION)
        # limits.cpu from the annotation, requests.memory from the default, limits.memory dropped.
        expected = {"limits.cpu": "3", "requests.memory": "1Gi"}
        await eventually(lambda: hard_is(api, namespace, expected), what="the merged quota")
        ns = await api.get(NAMESPACES, namespace)
        assert (
            ns["metadata"]["annotations"][CATTLE_ANNOTATION_RESOURCE_QUOTA]
            == '{"limit":{"requestsMemory":"1Gi","limitsCpu":"3000m"}}'
        )


async def test_write_protection_lets_only_rancher_write_its_default_quota(
    api: ApiClient, namespace: str, cluster: ClusterInfo
) -> None:
    """Rancher 2.14.6+/2.15.2+: the default quota is Rancher's alone; the annotation is not."""
    protection = await RancherProtection.install(
        api, [namespace], ca_file=cluster.ca_file, name=f"rq-{namespace[-8:]}"
    )
    try:
        project = Project(f"p-{namespace[-6:]}")
        async with RancherQuotaSync(api, projects=[project], quota_client=protection.sudo):
            await join_project(api, namespace, project, SEED_ANNOTATION)
            quota = await eventually(
                lambda: hard_is(api, namespace, SEED_HARD), what="Rancher's quota created"
            )

            async def denied() -> errors.ApiError | None:
                try:
                    await api.patch(
                        RESOURCE_QUOTAS,
                        quota["metadata"]["name"],
                        {"spec": {"hard": {"limits.cpu": "5"}}},
                        namespace,
                        dry_run=True,
                    )
                except errors.Forbidden as error:
                    return error
                return None

            # The API server takes up a new policy within about a second.
            denial = await eventually(denied, what="the admin's write denied")
            assert errors.denied_by_admission(denial)
            assert errors.denied_by_rancher(denial), "in rancher-webhook's own words"
            # Rancher's source of truth stays writable, and its agent copies it to the quota.
            raised = '{"limit":{"limitsCpu":"5000m","limitsMemory":"5000Mi"}}'
            await join_project(api, namespace, project, raised)
            await eventually(
                lambda: hard_is(api, namespace, {"limits.cpu": "5", "limits.memory": "5000Mi"}),
                what="the annotation copied by Rancher's own account",
            )
    finally:
        await protection.remove()

    async def allowed() -> bool:
        try:
            await api.patch(
                RESOURCE_QUOTAS,
                quota["metadata"]["name"],
                {"spec": {"hard": {"pods": "9"}}},
                namespace,
                dry_run=True,
            )
        except errors.Forbidden:
            return False
        return True

    await eventually(allowed, what="the same write allowed once the protection is removed")
