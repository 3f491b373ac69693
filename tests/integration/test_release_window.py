"""The release window on the local cluster, deployed as users deploy it (the controllers and the
webhook as their service accounts under the chart's RBAC, the webhook called by the API server
over TLS, the attacker a real identity with the edit and migrate roles).

A migration ends when its source pod is gone: quota admission drops status.used at once, while
the controller's release write comes a moment later (behind a drain's queue, a busy CPU). In
that moment no room is held, but spec.hard and status.hard still stand at the raise. Before, the
webhook passed every pod then (no room held, status.hard not above spec.hard), and quota
admission admitted a pod into the raise: the tenant sat above its base for good, and at each
later migration the floor counted that pod as usage from before the room period and raised on
top of it. The test holds the release write deterministically by stopping the controllers
before the migration ends.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
from harvester_quota.apis.kubevirt import VIRTUAL_MACHINE_INSTANCE_MIGRATIONS
from harvester_quota.apis.mtq import VMMRQS
from harvester_quota.app import ControllerApp
from harvester_quota.config.management import Options
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.meta import metadata
from harvester_quota.generic.resource import PODS, RESOURCE_QUOTAS, Object
from harvester_quota.testbench.localcluster import ClusterInfo, LocalCluster
from harvester_quota.util.podusage import pod_quota_usage
from harvester_quota.util.quantity import Quantity
from harvester_quota.webhook.caches import WebhookCaches
from prometheus_client import CollectorRegistry

from tests.helpers import eventually, succeed_migration
from tests.integration.kubevirt_by_hand import KubeVirtByHand
from tests.integration.tenant import small_pod, tenant
from tests.integration.test_webhook_deployed import Stack, stack

pytestmark = pytest.mark.integration
__all__ = ["stack"]  # the deployed controllers and webhook, from test_webhook_deployed.py

KEYS = ("limits.cpu", "limits.memory")


def limits_of(quota: Object, part: str = "spec") -> dict[str, Quantity]:
    hard = (quota.get(part) or {}).get("hard") or {}
    return {key: Quantity.parse(str(hard[key])) for key in KEYS if key in hard}


def used_of(quota: Object) -> dict[str, Quantity]:
    used = (quota.get("status") or {}).get("used") or {}
    return {key: Quantity.parse(str(used[key])) for key in KEYS if key in used}


async def raised(admin: KubeVirtByHand, base: dict[str, Quantity]) -> dict[str, Quantity] | None:
    """spec.hard once the raise stands and quota admission enforces it (status.hard equal)."""
    quota = await admin.quota()
    spec, status = limits_of(quota), limits_of(quota, "status")
    above = any(spec[key] > base[key] for key in KEYS)
    return spec if above and spec == status else None


async def at_base(admin: KubeVirtByHand, base: dict[str, Quantity]) -> bool:
    quota = await admin.quota()
    return limits_of(quota) == base and limits_of(quota, "status") == base


def webhook_saw_the_end(
    caches: WebhookCaches, namespace: str, migration: Object, source: str
) -> bool:
    """The webhook's caches show the migration Succeeded and its source pod gone."""
    cached = caches.migration(namespace, str(metadata(migration)["uid"]))
    phase = ((cached or {}).get("status") or {}).get("phase")
    names = {metadata(p).get("name") for p in caches.pods.store.by_index("namespace", namespace)}
    return phase == "Succeeded" and source not in names


async def end_migration(
    kubevirt: KubeVirtByHand,
    admin: KubeVirtByHand,
    migration: Object,
    source: Object,
    target: Object,
) -> None:
    """virt-controller's end of a migration: Succeeded, then the source pod gone for good."""
    await succeed_migration(kubevirt, migration, source, target, walk=False)
    name = str(metadata(source)["name"])
    await kubevirt.delete_pod(name, grace=0)
    await eventually(lambda: admin.pod_gone(name), what=f"source pod {name} gone")


async def test_no_pod_enters_a_raise_before_its_release_and_later_migrations_raise_alike(
    api: ApiClient, cluster: ClusterInfo, stack: Stack
) -> None:
    admin, kubevirt, controllers, server = stack
    caches = server.lookups
    assert isinstance(caches, WebhookCaches)
    vmi, source = await kubevirt.start_vm("vm1", cores=1, memory="1Gi")
    usage = pod_quota_usage(source)
    base = {key: usage[key] for key in KEYS}
    await admin.create_quota({key: str(value) for key, value in base.items()})
    migration = await kubevirt.migrate(vmi)
    first_raise = await eventually(lambda: raised(admin, base), what="the raise, enforced")
    room_cpu = first_raise["limits.cpu"] - base["limits.cpu"]
    target = await kubevirt.create_target(vmi, migration)

    await controllers.stop()  # the release write is held from here on
    await end_migration(kubevirt, admin, migration, source, target)
    await eventually(lambda: _used_is(admin, base), what="quota admission's usage back at the base")
    assert await raised(admin, base) == first_raise, "the raise still stands, the room is gone"
    await eventually(
        lambda: webhook_saw_the_end(caches, admin.namespace, migration, metadata(source)["name"]),
        what="the webhook's caches at the migration's end",
    )
    async with tenant(api, cluster, admin.namespace) as attacker:
        grab = small_pod("grab", str(room_cpu), "16Mi")
        with pytest.raises(errors.ApiError) as refused:
            await attacker.api.create(PODS, grab, admin.namespace)
        assert "admission webhook" in refused.value.message, refused.value.message
        assert "limits.cpu insufficient resources" in refused.value.message

    restarted = ControllerApp(
        controllers.client,
        Options(leader_elect=False, kubevirt_version="1.6", workers=2),
        registry=CollectorRegistry(),
    )
    await restarted.start()
    try:
        await eventually(lambda: at_base(admin, base), what="the held release written")
        current = target
        for turn in range(1, 4):
            moving = await kubevirt.migrate(vmi, f"vm1-again-{turn}")
            again = await eventually(lambda: raised(admin, base), what=f"raise {turn}")
            assert again == first_raise, f"migration {turn} raised by more than its room"
            landed = await kubevirt.create_target(vmi, moving, suffix=f"dst{turn}")
            await end_migration(kubevirt, admin, moving, current, landed)
            await eventually(lambda: at_base(admin, base), what=f"release {turn}")
            current = landed
    finally:
        await restarted.stop()
    assert await _migrations_succeeded(admin) == 4


async def _used_is(admin: KubeVirtByHand, expected: dict[str, Any]) -> bool:
    return used_of(await admin.quota()) == expected


async def _migrations_succeeded(admin: KubeVirtByHand) -> int:
    listed = await admin.api.list(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, admin.namespace)
    return sum(
        1
        for item in listed.get("items") or []
        if ((item.get("status") or {}).get("phase")) == "Succeeded"
    )


async def test_a_budgeted_namespace_keeps_the_room_rules_while_status_hard_still_holds_the_raise(
    api: ApiClient, cluster: ClusterInfo, local_cluster: LocalCluster, stack: Stack
) -> None:
    """The MTQ handover moment: a namespace with a VMMRQ whose room mode raise was just given
    back (no records of ours, spec.hard at the base) while status.hard, what quota admission
    enforces, still holds the raise. Before, the webhook handed the namespace to MTQ's rules at
    once (no lock: nothing checked) and quota admission admitted a pod into the raise. The
    moment is held by freezing kube-controller-manager (SIGSTOP) with status.hard written by
    hand, nothing of ours running but the webhook."""
    admin, kubevirt, controllers, server = stack
    caches = server.lookups
    assert isinstance(caches, WebhookCaches) and caches.vmmrqs is not None
    await controllers.stop()  # the state below is set by hand
    _vmi, source = await kubevirt.start_vm("vm1", cores=1, memory="1Gi")
    usage = pod_quota_usage(source)
    base = {key: str(usage[key]) for key in KEYS}
    await admin.create_quota(base)
    budget = {
        "apiVersion": "mtq.kubevirt.io/v1alpha1",
        "kind": "VirtualMachineMigrationResourceQuota",
        "metadata": {"name": "budget"},
        "spec": {"additionalMigrationResources": {"limits.cpu": "2", "limits.memory": "2Gi"}},
    }
    await admin.api.create(VMMRQS, budget, admin.namespace)
    await eventually(
        lambda: bool(caches.vmmrqs and caches.vmmrqs.store.by_index("namespace", admin.namespace)),
        what="the webhook's caches to hold the budget",
    )
    current = local_cluster.info()
    assert current is not None
    (kcm,) = [p for p in current.processes if p.name == "kube-controller-manager"]
    os.kill(kcm.pid, signal.SIGSTOP)
    try:
        quota = await admin.quota()
        raised_status = {key: str(usage[key] * 2) for key in KEYS}
        quota["status"] = {**quota["status"], "hard": raised_status}
        await admin.api.update_status(RESOURCE_QUOTAS, quota)
        await eventually(
            lambda: _status_raised_in(caches, admin.namespace),
            what="the webhook's caches to show status.hard above spec.hard",
        )
        async with tenant(api, cluster, admin.namespace) as attacker:
            grab = small_pod("grab", str(usage["limits.cpu"]), "16Mi")
            with pytest.raises(errors.ApiError) as refused:
                await attacker.api.create(PODS, grab, admin.namespace)
            assert "admission webhook" in refused.value.message, refused.value.message
            assert "limits.cpu insufficient resources" in refused.value.message
    finally:
        os.kill(kcm.pid, signal.SIGCONT)


def _status_raised_in(caches: WebhookCaches, namespace: str) -> bool:
    quota = caches.quotas.store.by_index("namespace", namespace)
    return bool(quota) and limits_of(quota[0], "status") != limits_of(quota[0])
