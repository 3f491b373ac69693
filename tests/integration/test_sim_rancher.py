"""Rancher's quota sync simulator on the real local cluster: it creates the default quota, resets
a hand-edited spec.hard on the next namespace event and on an agent restart, never on a quota edit
alone, and deletes the quota when the project loses its resourceQuota."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable
from typing import Any

import pytest
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import NAMESPACES, PODS, RESOURCE_QUOTAS, Object, Resource
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.localcluster.cluster import client_config_from_files
from harvester_quota.testbench.localcluster.deploy import service_account_token
from harvester_quota.testbench.sim.rancher import Operation, Project, RancherQuotaSync
from harvester_quota.testbench.sim.rancher.admission import (
    API_SERVER,
    BYPASS_USER,
    CHANGING,
    CREATING,
    NAMESPACE_CONTROLLER,
    QUOTA_CONTROLLER,
    STATUS_IMMUTABLE,
)
from harvester_quota.testbench.sim.rancher.twin import RancherWebhookTwin
from harvester_quota.util.annotations import (
    CATTLE_ANNOTATION_RESOURCE_QUOTA,
    LABEL_DEFAULT_RESOURCE_QUOTA,
)
from harvester_quota.util.rancher.project import (
    PROJECTS,
    validated_condition,
)
from harvester_quota.util.rancher.project import (
    QUOTA_PROJECT_ID_ANNOTATION as QUOTA_PROJECT_ID,
)

from tests.helpers import eventually

pytestmark = pytest.mark.integration

SEED_ANNOTATION = '{"limit":{"limitsCpu":"3000m","limitsMemory":"5000Mi"}}'
SEED_HARD = {"limits.cpu": "3", "limits.memory": "5000Mi"}
SUDO_NAMESPACE, SUDO_ACCOUNT = "cattle-system", "rancher-webhook-sudo"
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
LIMIT_RANGES = Resource("", "v1", "limitranges", "LimitRange")
CLUSTER_ROLE_BINDINGS = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False
)


def seed_project(
    namespace: str, limit: dict[str, str] | None = None, *, cluster_id: str = "local"
) -> Project:
    """A project for the test's namespace, as Rancher's project webhook accepts one: the seed's
    quota as the namespace default, and a limit (by default, room for ten such namespaces)."""
    return Project(
        f"p-{namespace[-6:]}",
        cluster_id=cluster_id,
        limit=limit or {"limits.cpu": "30", "limits.memory": "50000Mi"},
        namespace_default=SEED_HARD,
    )


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
    project = seed_project(namespace)
    async with RancherQuotaSync(api, projects=[project], version="2.12") as rancher:
        await join_project(api, namespace, project, SEED_ANNOTATION)
        quota = await eventually(lambda: hard_is(api, namespace, SEED_HARD), what="the quota")
        assert await rancher.wait_idle(10)  # its own namespace writes sync once more
        assert quota["metadata"]["generateName"] == "default-"
        entries = quota["metadata"]["managedFields"]
        managers = {entry["manager"] for entry in entries if not entry.get("subresource")}
        assert managers == {"agent"}, "the API server names the agent's writes as Rancher's"
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
    project = seed_project(namespace)
    async with RancherQuotaSync(api, projects=[project], version="2.14") as rancher:
        await join_project(api, namespace, project, SEED_ANNOTATION)
        quota = await eventually(lambda: hard_is(api, namespace, SEED_HARD), what="the quota")
        assert "cattle.io/creator" not in quota["metadata"]["labels"]  # v2.13+: wrangler clients

        await rancher.set_project(Project(project.id))

        async def deleted() -> bool:
            return not await default_quotas(api, namespace)

        await eventually(deleted, what="the quota's deletion")
        ns = await api.get(NAMESPACES, namespace)
        assert CATTLE_ANNOTATION_RESOURCE_QUOTA not in ns["metadata"].get("annotations", {})


async def test_project_default_drops_keys_it_does_not_have(api: ApiClient, namespace: str) -> None:
    project = Project(
        f"p-{namespace[-6:]}",
        limit={"limits.cpu": "10", "requests.memory": "10Gi"},
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
    """Rancher 2.14.6+/2.15.2+ (the rancher-webhook twin): the default quota is Rancher's alone,
    refused with rancher-webhook's 400; the annotation is not protected, and Rancher's agent
    copies it to the quota as rancher-webhook-sudo in system:masters."""
    twin = await RancherWebhookTwin.install(api, cluster, [namespace])
    try:
        project = seed_project(namespace)
        async with RancherQuotaSync(api, projects=[project], quota_client=twin.sudo):
            await join_project(api, namespace, project, SEED_ANNOTATION)
            quota = await eventually(
                lambda: hard_is(api, namespace, SEED_HARD), what="Rancher's quota created"
            )
            denial = await refusal(
                api.patch(
                    RESOURCE_QUOTAS,
                    quota["metadata"]["name"],
                    {"spec": {"hard": {"limits.cpu": "5"}}},
                    namespace,
                    dry_run=True,
                )
            )
            assert isinstance(denial, errors.BadRequest) and denial.status == 400
            assert "rancher.cattle.io.resourcequotas" in denial.message
            assert errors.denied_by_rancher(denial), "in rancher-webhook's own words"
            # Rancher's source of truth stays writable, and its agent copies it to the quota.
            raised = '{"limit":{"limitsCpu":"5000m","limitsMemory":"5000Mi"}}'
            await join_project(api, namespace, project, raised)
            await eventually(
                lambda: hard_is(api, namespace, {"limits.cpu": "5", "limits.memory": "5000Mi"}),
                what="the annotation copied by Rancher's own identity",
            )
            assert any(r.verdict.allowed for r in twin.reviews_by(BYPASS_USER))
    finally:
        await twin.remove()

    async def allowed() -> bool:
        try:
            await api.patch(
                RESOURCE_QUOTAS,
                quota["metadata"]["name"],
                {"spec": {"hard": {"pods": "9"}}},
                namespace,
                dry_run=True,
            )
        except errors.BadRequest:
            return False
        return True

    await eventually(allowed, what="the same write allowed once the twin is removed")


async def refusal(write: Awaitable[object]) -> errors.ApiError:
    """The error `write` fails with (the test fails if it succeeds)."""
    try:
        await write
    except errors.ApiError as error:
        return error
    raise AssertionError("the write was allowed")


async def test_only_the_sudo_user_in_system_masters_passes_and_status_is_the_controllers(
    api: ApiClient, namespace: str, cluster: ClusterInfo
) -> None:
    """The bypass needs the user and the group (a service account of that name is refused);
    status writes are kube-controller-manager's quota controller's and the API server's alone,
    on every quota; the namespace controller still empties a namespace being deleted."""
    doomed = f"{namespace}-gone"
    await api.create(NAMESPACES, {"metadata": {"name": doomed}})
    twin = await RancherWebhookTwin.install(api, cluster, [namespace, doomed])
    labelled = {"metadata": {"name": "default-x", "labels": {LABEL_DEFAULT_RESOURCE_QUOTA: "true"}}}
    try:
        quota = await twin.sudo.create(
            RESOURCE_QUOTAS, {**labelled, "spec": {"hard": {"pods": "5"}}}, namespace
        )
        plain = await api.create(
            RESOURCE_QUOTAS,
            {"metadata": {"name": "plain"}, "spec": {"hard": {"pods": "7"}}},
            namespace,
        )
        # A service account named rancher-webhook-sudo is not Rancher: it lacks system:masters.
        await apply_sudo_service_account(api)
        token = await service_account_token(api, SUDO_ACCOUNT, SUDO_NAMESPACE)
        async with ApiClient(
            client_config_from_files(cluster.server, ca_file=cluster.ca_file, token=token)
        ) as impostor:

            async def impostor_refused() -> errors.BadRequest | None:
                try:
                    await impostor.patch(
                        RESOURCE_QUOTAS,
                        "default-x",
                        {"spec": {"hard": {"pods": "6"}}},
                        namespace,
                        dry_run=True,
                    )
                except errors.BadRequest as error:
                    return error
                except errors.Forbidden:
                    return None  # RBAC has not taken up its binding yet
                raise AssertionError("the impostor's write was allowed")

            denial = await eventually(impostor_refused, what="the impostor refused by the twin")
        assert isinstance(denial, errors.BadRequest) and CHANGING in denial.message

        # Status: refused to the admin on the labelled quota and on a plain one alike.
        for target in (quota, plain):
            status_denial = await refusal(
                api.patch(
                    RESOURCE_QUOTAS,
                    target["metadata"]["name"],
                    {"status": {"hard": {"pods": "1"}}},
                    namespace,
                    subresource="status",
                )
            )
            assert isinstance(status_denial, errors.BadRequest)
            assert STATUS_IMMUTABLE in status_denial.message

        # kube-controller-manager's quota controller fills status, and quota admission (the API
        # server) charges a pod to it: both pass the twin.
        await eventually(
            lambda: used_is(api, namespace, "default-x", "0"), what="status.used by the controller"
        )
        await api.create(PODS, pod("p1"), namespace)
        await eventually(lambda: used_is(api, namespace, "default-x", "1"), what="the pod charged")
        writers = {
            r.user for r in twin.reviewed if r.sub_resource == "status" and r.verdict.allowed
        }
        assert {QUOTA_CONTROLLER, API_SERVER} <= writers

        # A labelled LimitRange is Rancher's too.
        range_denial = await refusal(
            api.create(LIMIT_RANGES, {**labelled, "spec": {"limits": []}}, namespace)
        )
        assert isinstance(range_denial, errors.BadRequest) and CREATING in range_denial.message

        # Deleting a namespace: the namespace controller deletes its labelled quota.
        await twin.sudo.create(
            RESOURCE_QUOTAS, {**labelled, "spec": {"hard": {"pods": "5"}}}, doomed
        )
        await api.delete(NAMESPACES, doomed)

        async def gone() -> bool:
            try:
                await api.get(NAMESPACES, doomed)
            except errors.NotFound:
                return True
            return False

        await eventually(gone, what=f"namespace {doomed} deleted")
        assert any(
            r.user == NAMESPACE_CONTROLLER and r.operation == "DELETE" and r.verdict.allowed
            for r in twin.reviewed
        )
    finally:
        await twin.remove()


async def used_is(api: ApiClient, namespace: str, name: str, pods: str) -> bool:
    quota = await api.get(RESOURCE_QUOTAS, name, namespace)
    return ((quota.get("status") or {}).get("used") or {}).get("pods") == pods


def pod(name: str) -> Object:
    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "pause"}]},
    }


async def apply_sudo_service_account(api: ApiClient) -> None:
    """The service account rancher-webhook-sudo in cattle-system, bound to cluster-admin (so
    that only admission, not RBAC, can refuse it)."""
    with contextlib.suppress(errors.AlreadyExists):
        await api.create(NAMESPACES, {"metadata": {"name": SUDO_NAMESPACE}})
    with contextlib.suppress(errors.AlreadyExists):
        await api.create(SERVICE_ACCOUNTS, {"metadata": {"name": SUDO_ACCOUNT}}, SUDO_NAMESPACE)
    binding = {
        "metadata": {"name": f"{SUDO_ACCOUNT}-test"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cluster-admin",
        },
        "subjects": [{"kind": "ServiceAccount", "name": SUDO_ACCOUNT, "namespace": SUDO_NAMESPACE}],
    }
    with contextlib.suppress(errors.AlreadyExists):
        await api.create(CLUSTER_ROLE_BINDINGS, binding)


async def annotations_of(api: ApiClient, namespace: str) -> dict[str, str]:
    return dict((await api.get(NAMESPACES, namespace))["metadata"].get("annotations") or {})


async def validated(api: ApiClient, namespace: str) -> tuple[bool, str] | None:
    """The namespace's ResourceQuotaValidated condition as Rancher wrote it."""
    return validated_condition(await api.get(NAMESPACES, namespace))


async def used_limit(api: ApiClient, project: Project) -> dict[str, Any] | None:
    obj = await api.get(PROJECTS, project.id, project.cluster_id)
    return ((obj.get("spec") or {}).get("resourceQuota") or {}).get("usedLimit")


async def test_a_namespace_beyond_its_project_is_marked_left_alone_and_not_counted(
    api: ApiClient, namespace: str
) -> None:
    """Rancher's agent on a project with a real limit: a namespace that fits is validated and
    counted in the project's usedLimit; one raised beyond the limit is marked
    ResourceQuotaValidated=False ("exceeds project limit"), keeps its quota as it was, and drops
    out of usedLimit; taken back to what its quota already is, it stays marked (Rancher checks
    the fit only before it writes a quota)."""
    project = seed_project(namespace, {"limits.cpu": "5", "limits.memory": "10000Mi"})
    async with RancherQuotaSync(api, projects=[project], version="2.15.2") as rancher:
        await join_project(api, namespace, project, SEED_ANNOTATION)
        await eventually(lambda: hard_is(api, namespace, SEED_HARD), what="the quota")
        assert await rancher.wait_idle(10)
        assert await validated(api, namespace) == (True, "")
        assert (await annotations_of(api, namespace))[QUOTA_PROJECT_ID] == project.annotation_id
        seed_used = {"limitsCpu": "3", "limitsMemory": "5000Mi"}
        await eventually(lambda: used_is_now(api, project, seed_used), what="usedLimit")

        raised = '{"limit":{"limitsCpu":"6000m","limitsMemory":"5000Mi"}}'
        await join_project(api, namespace, project, raised)
        assert await rancher.wait_idle(10)
        assert await validated(api, namespace) == (
            False,
            "Resource quota [limits.cpu=6] exceeds project limit",
        )
        assert await hard_is(api, namespace, SEED_HARD), "the quota is left as it was"
        await eventually(lambda: used_is_now(api, project, {}), what="usedLimit without it")

        await join_project(api, namespace, project, SEED_ANNOTATION)
        assert await rancher.wait_idle(10)
        assert await hard_is(api, namespace, SEED_HARD)
        condition = await validated(api, namespace)
        assert condition is not None and condition[0] is False, "no write, no new check"


async def used_is_now(api: ApiClient, project: Project, wanted: dict[str, str]) -> bool:
    return await used_limit(api, project) == wanted


async def test_siblings_full_a_new_namespace_gets_zeroed_keys_counting_every_sibling(
    api: ApiClient, namespace: str
) -> None:
    """The fit counts every sibling, validated or not: with a sibling holding the project's
    whole limits.cpu, a joining namespace's quota is created with limits.cpu 0 (its other keys as
    asked) and marked not validated."""
    project = seed_project(namespace, {"limits.cpu": "5", "limits.memory": "10000Mi"})
    sibling = f"{namespace}-sib"
    await api.create(NAMESPACES, {"metadata": {"name": sibling}})
    try:
        async with RancherQuotaSync(api, projects=[project], version="2.15.2") as rancher:
            full = '{"limit":{"limitsCpu":"5","limitsMemory":"1000Mi"}}'
            await join_project(api, sibling, project, full)
            await eventually(
                lambda: hard_is(api, sibling, {"limits.cpu": "5", "limits.memory": "1000Mi"}),
                what="the sibling's quota",
            )
            await join_project(api, namespace, project, SEED_ANNOTATION)
            await eventually(
                lambda: hard_is(api, namespace, {"limits.cpu": "0", "limits.memory": "5000Mi"}),
                what="the zeroed quota",
            )
            assert await rancher.wait_idle(10)
            assert await validated(api, namespace) == (
                False,
                "Resource quota [limits.cpu=8] exceeds project limit",
            )
            assert await validated(api, sibling) == (True, "")
    finally:
        await api.delete(NAMESPACES, sibling)
