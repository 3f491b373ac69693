"""Issue 38 item 2 on the local cluster: one tenant's flood of dry-run pod creates, in a namespace
with many pending migrations, leaves another namespace's pod admissions answered.

The deployed stack (controllers and webhook as their service accounts, the webhook over TLS,
the shipped configuration), the flooder a real identity with the edit roles. Before, each of the
flood's admissions planned every room of its namespace, rendering every launcher again, in
arrival order on the webhook's one event loop: the victim namespace, holding room (so under the
fail-closed rule), had its creates queued behind the whole flood, past the admission slots' 1 s
(429) or the API server's 5 s, and refused: on the code before, a victim create failed with
"failed calling webhook ... context deadline exceeded" while all 150 dry runs were admitted. Now
the flood takes fair turns with the victim's admissions, its excess is refused at once, and its
rooms are rendered once. No time is asserted: only that every victim create is answered.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import NAMESPACES, PODS
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.localcluster.deploy import KINDS, apply
from harvester_quota.testbench.localcluster.deploy import (
    webhook_configuration as shipped_webhook_configuration,
)
from harvester_quota.util.annotations import LABEL_ROOM_HELD

from tests.helpers import eventually
from tests.integration.conftest import fresh_namespace_async
from tests.integration.kubevirt_by_hand import KubeVirtByHand
from tests.integration.tenant import Tenant, small_pod, tenant
from tests.integration.test_webhook_deployed import Stack, stack

pytestmark = pytest.mark.integration
__all__ = ["stack"]  # the deployed controllers and webhook, from test_webhook_deployed.py

FLOODER_VMS = 150
"""Pending migrations in the flooder's namespace: before, about 40 ms of rendering and planning
per admission there (bench/RESULTS.md), so the flood below was several seconds of the loop."""
FLOOD = 150
VICTIMS = 5
OPEN = {"limits.cpu": "1000", "limits.memory": "4000Gi"}


async def migrating_vms(kv: KubeVirtByHand, count: int) -> None:
    """`count` running VMs, each with a pending migration, ten at a time (call it before the
    namespace has a quota: ten launcher pods at once meet quota admission's conflicts with the
    controller's raise, 409)."""

    async def one(index: int) -> None:
        vmi, _source = await kv.start_vm(f"vm{index}", cores=1, memory="1Gi")
        await kv.migrate(vmi)

    for start in range(0, count, 10):
        await asyncio.gather(*(one(i) for i in range(start, min(count, start + 10))))


async def dry_run_create(attacker: Tenant, index: int) -> str:
    try:
        await attacker.api.create(
            PODS, small_pod(f"flood-{index}", "10m", "8Mi"), attacker.namespace, dry_run=True
        )
    except errors.ApiError as error:
        return error.message
    return "admitted"


async def test_a_tenants_flood_of_dry_run_creates_leaves_another_namespaces_admissions_answered(
    api: ApiClient, cluster: ClusterInfo, stack: Stack
) -> None:
    victim, _kubevirt, _controllers, server = stack
    await victim.create_quota(OPEN)
    vmi, _source = await victim.start_vm("victim-vm", cores=1, memory="1Gi")
    await victim.migrate(vmi)
    await eventually(
        lambda: victim_labelled(api, victim.namespace), what="the victim namespace holds room"
    )
    async with fresh_namespace_async(api, "flooder") as flooder_ns:
        flooder = KubeVirtByHand(api, flooder_ns)
        await migrating_vms(flooder, FLOODER_VMS)
        await flooder.create_quota(OPEN)
        await eventually(
            lambda: len(server.lookups.migrations(flooder_ns)) == FLOODER_VMS,
            what="the webhook's cache has the flooder's migrations",
        )
        configuration = shipped_webhook_configuration(
            f"https://127.0.0.1:{server.port}",
            cluster.certificate_authority().cert_pem,
            {"kubernetes.io/metadata.name": flooder_ns},
            name=f"harvester-quota-flooder-{uuid.uuid4().hex[:6]}",
        )
        created = await apply(api, configuration)
        try:
            async with tenant(api, cluster, flooder_ns) as attacker:
                await flood_and_create(api, attacker, server, victim.namespace)
        finally:
            await api.delete(KINDS["ValidatingWebhookConfiguration"], created["metadata"]["name"])


async def victim_labelled(api: ApiClient, namespace: str) -> bool:
    found = await api.get(NAMESPACES, namespace)
    return (found["metadata"].get("labels") or {}).get(LABEL_ROOM_HELD) == "true"


async def flood_and_create(api: ApiClient, attacker: Tenant, server: object, victim: str) -> None:
    """The flood is sent all at once; while the webhook holds some of it, the victim creates its
    pods one after another: each must be answered by the webhook and admitted (it fits)."""
    flood = [asyncio.ensure_future(dry_run_create(attacker, i)) for i in range(FLOOD)]
    slots = server.slots  # type: ignore[attr-defined]
    await eventually(lambda: slots.in_use > 1 or all(f.done() for f in flood), interval=0.01)
    failures = []
    for index in range(VICTIMS):
        try:
            await api.create(PODS, small_pod(f"victim-{index}", "10m", "8Mi"), victim)
        except errors.ApiError as error:
            failures.append(error.message)
    outcomes = await asyncio.gather(*flood)
    assert not failures, f"victim creates refused: {failures}; flood: {summary(outcomes)}"


def summary(outcomes: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for outcome in outcomes:
        key = outcome[:80]
        counts[key] = counts.get(key, 0) + 1
    return counts
