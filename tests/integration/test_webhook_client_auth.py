"""The deployed webhook answers the API server only: a pod that can reach the webhook's address
and forges AdmissionReviews gets no answer and reserves nothing.

The webhook runs as running_webhooks starts it, with webhook.clientAuth as the chart sets it:
the webhook client CA of the local cluster, whose certificate the API server presents to every
admission webhook (its AdmissionConfiguration). While a migration holds room, an admitted pod
create writes the tenant namespace's reservation Lease in harvester-system (resources/pod/
reservations.py): the side effect an attacker would forge to deny a victim's pods.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import uuid
from pathlib import Path

import aiohttp
import pytest
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import LEASES, PODS, Object
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.localcluster.deploy import SYSTEM_NAMESPACE
from harvester_quota.testbench.localcluster.pki import WEBHOOK_CLIENT_NAME
from harvester_quota.util.quantity import Quantity
from harvester_quota.webhook.resources.pod.reservations import lease_name

from tests.helpers import eventually
from tests.integration import deployment
from tests.integration.test_room_race import small_pod
from tests.integration.test_webhook_deployed import V170_HARD, V170_LIMIT, Stack, stack

pytestmark = pytest.mark.integration
__all__ = ["stack"]  # the deployed controllers and webhook, from test_webhook_deployed.py

RAISED_CPU = Quantity.parse("5015m")
"""limits.cpu while vm1's migration holds room (V170_HARD's 3 plus the target's 2015m)."""


def forged_review(namespace: str, name: str) -> bytes:
    """A pod create as the API server would describe it, written by a tenant's pod."""
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()),
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "operation": "CREATE",
                "namespace": namespace,
                "name": name,
                "userInfo": {"username": "system:serviceaccount:attacker:default"},
                "object": {**small_pod(name), "apiVersion": "v1", "kind": "Pod"},
                "dryRun": False,
            },
        }
    ).encode()


async def call_directly(
    port: int, cluster: ClusterInfo, body: bytes, client: tuple[Path, Path] | None
) -> tuple[int, str] | None:
    """POSTs `body` to the webhook's /validate/pods as a pod on the network would, presenting
    the client pair `client` (or none): (status, text), or None if the TLS handshake ends the
    connection before any HTTP answer."""
    context = ssl.create_default_context(cafile=str(cluster.ca_file))
    if client is not None:
        context.load_cert_chain(*client)
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"https://127.0.0.1:{port}/validate/pods",
                data=body,
                ssl=context,
                headers={"Content-Type": "application/json"},
            ) as response,
        ):
            return response.status, await response.text()
    except (aiohttp.ClientError, ssl.SSLError):
        return None


async def reservation(stack: Stack) -> Object | None:
    tenant = stack[0]
    try:
        return await tenant.api.get(
            LEASES, lease_name(tenant.namespace), deployment.SYSTEM_NAMESPACE
        )
    except errors.NotFound:
        return None


async def test_only_the_api_servers_calls_are_answered_and_a_forged_review_reserves_nothing(
    stack: Stack, cluster: ClusterInfo, tmp_path: Path
) -> None:
    tenant, kubevirt, _, server = stack
    await tenant.set_rancher_base(V170_LIMIT)
    await tenant.create_quota(V170_HARD)
    vmi, _ = await kubevirt.start_vm("vm1")
    await kubevirt.migrate(vmi)

    def room_held_in_the_webhooks_cache() -> bool:
        quota = server.lookups.managed_quota(tenant.namespace)
        hard = ((quota or {}).get("spec") or {}).get("hard") or {}
        return "limits.cpu" in hard and Quantity.parse(hard["limits.cpu"]) == RAISED_CPU

    # From here, every admitted pod create in the namespace writes its reservation Lease.
    await eventually(room_held_in_the_webhooks_cache, what="the room in the webhook's cache")
    assert await reservation(stack) is None

    ca = cluster.certificate_authority()
    ca.issue(WEBHOOK_CLIENT_NAME, client=True).write(tmp_path / "c.crt", tmp_path / "c.key")
    impostor = cluster.webhook_client_authority()
    impostor.issue("tenant-pod", client=True).write(tmp_path / "n.crt", tmp_path / "n.key")
    attempts = {
        "no certificate": None,
        "the cluster CA's certificate, the API server's name": (
            tmp_path / "c.crt",
            tmp_path / "c.key",
        ),
        "the admin's certificate": (cluster.client_cert, cluster.client_key),
        "the webhook client CA's certificate, another name": (
            tmp_path / "n.crt",
            tmp_path / "n.key",
        ),
    }
    answers = {
        what: await call_directly(
            server.port, cluster, forged_review(tenant.namespace, "phantom"), client
        )
        for what, client in attempts.items()
    }
    assert answers == {
        "no certificate": None,  # the handshake requires one
        "the cluster CA's certificate, the API server's name": None,
        "the admin's certificate": None,
        "the webhook client CA's certificate, another name": (
            403,
            "this client certificate is not accepted",
        ),
    }
    assert await reservation(stack) is None, "a refused forgery reserved room"

    # The API server's own call (with its client certificate) is answered, with its effect.
    await tenant.api.create(PODS, small_pod("real"), tenant.namespace)
    lease = await eventually(lambda: reservation(stack), what="the real pod's reservation")
    assert lease["metadata"]["namespace"] == deployment.SYSTEM_NAMESPACE

    # The same forged bytes with the API server's credentials do reserve: the forgery above was
    # a review that would have worked, had the webhook not asked who sent it.
    impostor.issue(WEBHOOK_CLIENT_NAME, client=True).write(tmp_path / "a.crt", tmp_path / "a.key")
    status, text = await call_directly(
        server.port,
        cluster,
        forged_review(tenant.namespace, "phantom"),
        (tmp_path / "a.crt", tmp_path / "a.key"),
    ) or (0, "no answer")
    assert status == 200 and json.loads(text)["response"]["allowed"] is True, text
    after = await reservation(stack)
    assert after is not None
    assert after["metadata"]["resourceVersion"] != lease["metadata"]["resourceVersion"]


async def test_the_webhooks_account_may_write_only_its_reservation_leases(
    api: ApiClient, cluster: ClusterInfo
) -> None:
    """RBAC cannot limit create to a name, so the webhook's Role may write every Lease of its
    namespace, the controllers' leader Lease included: a compromised webhook could take the
    controllers' leadership or stall it. The shipped admission policy confines its service
    account to its reservation Leases (room-reservation-*)."""
    await deployment.apply_rbac(api)
    webhook = await deployment.client_as(api, cluster, "harvester-quota-webhook")
    leader = f"harvester-quota-test-{uuid.uuid4().hex[:6]}"
    mine = lease_name(f"lease-test-{uuid.uuid4().hex[:6]}")
    try:
        await api.create(LEASES, {"metadata": {"name": leader}, "spec": {}}, SYSTEM_NAMESPACE)

        async def a_leader_lease_create_refused() -> bool:
            probe = {"metadata": {"name": f"{leader}-probe"}, "spec": {}}
            try:
                await webhook.create(LEASES, probe, SYSTEM_NAMESPACE, dry_run=True)
            except errors.Forbidden as refused:
                assert "reservation Leases" in refused.message, refused.message
                return True
            return False

        await eventually(a_leader_lease_create_refused, what="the policy in force for the webhook")
        current = await api.get(LEASES, leader, SYSTEM_NAMESPACE)
        with pytest.raises(errors.Forbidden):
            await webhook.update(LEASES, {**current, "spec": {"holderIdentity": "the-webhook"}})
        with pytest.raises(errors.Forbidden):
            await webhook.delete(LEASES, leader, SYSTEM_NAMESPACE)
        created = await webhook.create(
            LEASES, {"metadata": {"name": mine}, "spec": {}}, SYSTEM_NAMESPACE
        )
        assert created["metadata"]["name"] == mine, "its own reservation Leases stay writable"
        await webhook.delete(LEASES, mine, SYSTEM_NAMESPACE)
    finally:
        with contextlib.suppress(errors.ApiError):
            await api.delete(LEASES, leader, SYSTEM_NAMESPACE)
        await webhook.close()
