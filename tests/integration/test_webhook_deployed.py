"""The shipped manifests and the webhook on the real API server: every denial reaches the client."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from harvester_quota.apis.kubevirt import VIRTUAL_MACHINES
from harvester_quota.app import ControllerApp
from harvester_quota.config.management import Options
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import PODS, RESOURCE_QUOTAS, Object
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.util.quantity import Quantity
from harvester_quota.webhook.server import WebhookServer
from prometheus_client import CollectorRegistry

from tests.helpers import eventually
from tests.integration import deployment
from tests.integration.kubevirt_by_hand import KubeVirtByHand, strip_server_fields
from tests.objects import vmi as vmi_spec

pytestmark = pytest.mark.integration

V170_LIMIT = {"limitsCpu": "3000m", "limitsMemory": "5000Mi"}
V170_HARD = {"limits.cpu": "3", "limits.memory": "5000Mi"}


async def test_every_manifest_is_accepted_by_a_server_side_dry_run(api: ApiClient) -> None:
    await deployment.ensure_namespace(api)
    kinds = []
    for document in deployment.documents():
        answer = await deployment.apply(api, document, dry_run=True)
        assert answer["metadata"]["name"] == document["metadata"]["name"]
        kinds.append(document["kind"])
    assert {"Deployment", "ValidatingWebhookConfiguration", "ClusterRole", "Service"} <= set(kinds)


Stack = tuple[KubeVirtByHand, KubeVirtByHand, ControllerApp, WebhookServer]
"""(tenant, kubevirt, controllers, webhook server)."""


@pytest.fixture
async def stack(
    api: ApiClient, cluster: ClusterInfo, namespace: str, tmp_path: Path
) -> AsyncIterator[Stack]:
    """Controllers and webhook running as their service accounts with deploy/'s RBAC; the
    webhook registered with the shipped configuration. Yields (tenant, kubevirt, controllers,
    webhook server)."""
    async with deployed(api, cluster, namespace, tmp_path) as (tenant, kubevirt, app, servers):
        yield tenant, kubevirt, app, servers[0]


@contextlib.asynccontextmanager
async def deployed(
    api: ApiClient, cluster: ClusterInfo, namespace: str, workdir: Path, *, replicas: int = 1
) -> AsyncIterator[tuple[KubeVirtByHand, KubeVirtByHand, ControllerApp, tuple[WebhookServer, ...]]]:
    """The stack with `replicas` webhook servers behind one address (deployment.running_webhooks)."""
    await deployment.apply_rbac(api)
    controller_api = await deployment.client_as(api, cluster, "harvester-quota")
    kubevirt_api = await deployment.client_as(api, cluster, "kubevirt-controller")
    controllers = ControllerApp(
        controller_api,
        Options(leader_elect=False, kubevirt_version="1.6", workers=2),
        registry=CollectorRegistry(),
    )
    await controllers.start()
    try:
        async with deployment.running_webhooks(
            api, cluster, namespace, workdir, replicas=replicas
        ) as servers:
            yield (
                KubeVirtByHand(api, namespace),
                KubeVirtByHand(kubevirt_api, namespace),
                controllers,
                servers,
            )
    finally:
        await controllers.stop()
        for client in (controller_api, kubevirt_api):
            await client.close()


async def denial(action: object) -> str | None:
    """The API server's message if the action is refused by our webhook, None if it passed."""
    try:
        await action  # type: ignore[misc]
    except errors.ApiError as error:
        if "admission webhook" in error.message:
            return error.message
        raise
    return None


async def test_lowering_the_base_below_usage_is_denied(
    stack: Stack,
) -> None:
    tenant, kubevirt, _, _ = stack
    await tenant.set_rancher_base(V170_LIMIT)
    await tenant.create_quota(V170_HARD)
    await kubevirt.start_vm("vm1")

    async def try_lowering() -> str | None:
        return await denial(
            tenant.set_rancher_base({"limitsCpu": "3000m", "limitsMemory": "4000Mi"})
        )

    message = await eventually(try_lowering, what="the webhook to deny")
    assert "limitsMemory 4000Mi is lower than what the namespace uses now (4797464313)" in message
    await tenant.set_rancher_base({"limitsCpu": "4", "limitsMemory": "6000Mi"})  # raising is fine


async def test_migration_room_is_guarded_while_targets_pass(
    stack: Stack,
) -> None:
    """The controllers run as their service account (deploy/ RBAC) and raise the quota; while
    the room is held: lowering the base, resetting spec.hard by hand and a squatting pod are all
    denied with numbers; KubeVirt's target pod is admitted."""
    tenant, kubevirt, controllers, _ = stack
    await tenant.set_rancher_base(V170_LIMIT)
    await tenant.create_quota(V170_HARD)
    vmi, _ = await kubevirt.start_vm("vm1")
    migration = await kubevirt.migrate(vmi)

    async def raised() -> bool:
        hard = (await tenant.quota())["spec"]["hard"]
        return Quantity.parse(hard["limits.cpu"]) == Quantity.parse("5015m")

    await eventually(raised, what="the controllers, as their service account, to raise the quota")

    async def lowering_denied() -> str | None:
        return await denial(
            tenant.set_rancher_base({"limitsCpu": "3000m", "limitsMemory": "4900Mi"})
        )

    message = await eventually(lowering_denied, what="the namespace webhook")
    assert (
        "can't lower limitsMemory from 5000Mi to 4900Mi while live migrations (vm1) hold room"
        in message
    )

    reset = denial(
        tenant.api.patch(
            RESOURCE_QUOTAS, "default-quota", {"spec": {"hard": V170_HARD}}, tenant.namespace
        )
    )
    assert "can't lower limits.cpu from 5015m to 3" in str(await reset)

    squatter: Object = {
        "metadata": {"name": "squatter"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                }
            ]
        },
    }
    squat = await denial(tenant.api.create(PODS, squatter, tenant.namespace))
    assert squat is not None and "would take room reserved for the live migration of vm1" in squat
    assert "limits.cpu insufficient resources due to resource quota" in squat

    target = await kubevirt.try_create_target(vmi, migration)
    assert target is not None, "KubeVirt's target pod passes the webhook and quota admission"
    assert controllers.reconciler.writes[tenant.namespace] == 1


async def test_a_vm_that_does_not_fit_under_the_base_cannot_start(
    stack: Stack,
) -> None:
    tenant, _, _, _ = stack
    await tenant.set_rancher_base(V170_LIMIT)
    await tenant.create_quota(V170_HARD)
    template = vmi_spec("big", tenant.namespace, cores=2, memory="6Gi")
    vm: Object = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "big"},
        "spec": {"runStrategy": "RerunOnFailure", "template": {"spec": template["spec"]}},
    }

    async def start() -> str | None:
        return await denial(
            tenant.api.create(VIRTUAL_MACHINES, strip_server_fields(vm), tenant.namespace)
        )

    message = await eventually(start, what="the VM webhook")
    assert (
        "VM big: limits.memory insufficient resources due to resource quota default-quota"
        in message
    )
    assert "left of the base 5000Mi" in message
