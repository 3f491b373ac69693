"""Early room on the local cluster, as deployed (service-account tokens, deploy/'s RBAC, the webhook
called by the API server over TLS, one replica or two behind one address): a migration's room
is in its namespace's quota by the time its create returns, so its target pod never waits for
the controller; the controller agrees and writes nothing until the room is given back; an early
room whose migration is never stored is given back at its expiry, also across an API-server
restart.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from harvester_quota.app import ControllerApp
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.meta import annotations_of
from harvester_quota.generic.resource import CONFIG_MAPS, RESOURCE_QUOTAS, Object
from harvester_quota.localcluster import ClusterInfo, LocalCluster
from harvester_quota.util import resources
from harvester_quota.util.annotations import migrating_vm_annotation_key
from harvester_quota.util.podusage import pod_quota_usage
from harvester_quota.util.resourcequota.base import ANNOTATION_BASE
from harvester_quota.util.resourcequota.early import (
    ANNOTATION_EARLY_ROOM_PREFIX,
    early_room_key,
)
from harvester_quota.util.resourcequota.plan import MIGRATING_PREFIX
from harvester_quota.util.resources import ResourceList
from harvester_quota.webhook.server import WebhookServer

from tests import objects
from tests.helpers import caught_up, cpu_burners, eventually, succeed_migration
from tests.integration.kubevirt_by_hand import KubeVirtByHand
from tests.integration.test_apiserver_restarts import peers_caught_up, probe
from tests.integration.test_framework import eventually_create
from tests.integration.test_room_race import replicas
from tests.integration.test_webhook_deployed import deployed

pytestmark = pytest.mark.integration
__all__ = ["probe", "replicas"]  # fixtures: a namespace for peers_caught_up; the deployed stack
# with one or two webhook replicas (test_room_race.py)

VMS = 6
KEYS = ("limits.cpu", "limits.memory", "requests.memory")
Stack = tuple[KubeVirtByHand, KubeVirtByHand, ControllerApp, tuple[WebhookServer, ...]]


def launcher_usage() -> ResourceList:
    """What one test VM's launcher pod (2 cores, 4Gi, ratio 1.5) charges on KEYS."""
    pod = objects.launcher_pod(objects.vmi("probe"), "probe")
    return resources.mask(pod_quota_usage(pod), KEYS)


def closed_hard(vms: int) -> dict[str, str]:
    """A quota exactly full with `vms` VMs: every migration needs room."""
    usage = launcher_usage()
    return {key: str(value * vms) for key, value in usage.items()}


def hard_of(quota: Object) -> ResourceList:
    return resources.parse_resource_list((quota.get("spec") or {}).get("hard") or {})


async def full_namespace(stack_: Stack, vms: int) -> tuple[list[Object], list[Object]]:
    """`vms` running VMs in a quota exactly full with them, its base recorded by the controller,
    and every webhook replica's caches showing the VMIs and the recorded base."""
    tenant, kubevirt, _, servers = stack_
    await tenant.create_quota(closed_hard(vms))
    started = [await kubevirt.start_vm(f"vm{i}") for i in range(vms)]
    namespace = tenant.namespace

    def ready() -> bool:
        for server in servers:
            quota = server.lookups.managed_quota(namespace)
            if quota is None or ANNOTATION_BASE not in annotations_of(quota):
                return False
            if any(server.lookups.vmis(namespace).get(f"vm{i}") is None for i in range(vms)):
                return False
        return True

    await eventually(ready, what="the base recorded and the VMIs cached by every replica")
    return [vmi for vmi, _ in started], [pod for _, pod in started]


async def test_every_room_is_in_the_quota_when_its_migration_s_create_returns(
    replicas: Stack,
) -> None:
    """Six migrations created at once with two CPU burners beside the cluster: when the creates
    have returned, the quota (read at once, no waiting) holds every one's room; the controller,
    caught up, has not changed it; every target pod is admitted; then back to the base with no
    annotation of ours left."""
    tenant, kubevirt, app, servers = replicas
    vmis, sources = await full_namespace(replicas, VMS)
    base = hard_of(await tenant.quota())
    with cpu_burners(2):
        migrations = await asyncio.gather(
            *(tenant.migrate(vmi, f"{vmi['metadata']['name']}-mig") for vmi in vmis)
        )
        quota = await tenant.quota()
    annotations = annotations_of(quota)
    for migration in migrations:
        assert early_room_key(migration["metadata"]["uid"]) in annotations, sorted(annotations)
    for vmi in vmis:
        assert migrating_vm_annotation_key(vmi["metadata"]["name"]) in annotations
    room = launcher_usage()
    expected = resources.add(base, {key: value * VMS for key, value in room.items()})
    assert resources.equal(hard_of(quota), expected), (quota["spec"]["hard"], expected)
    written = sum(
        sample.value
        for server in servers
        for metric in server.metrics.early_rooms.collect()
        for sample in metric.samples
        if sample.name.endswith("_total") and sample.labels["outcome"] == "written"
    )
    assert written == VMS

    await eventually(lambda: caught_up(app, tenant.namespace), what="the controller caught up")
    assert resources.equal(hard_of(await tenant.quota()), expected), "the controller agrees"

    targets = await asyncio.gather(
        *(
            kubevirt.create_target(vmi, migration, suffix="dst")
            for vmi, migration in zip(vmis, migrations, strict=True)
        )
    )
    for migration, source, target in zip(migrations, sources, targets, strict=True):
        await succeed_migration(kubevirt, migration, source, target, walk=False)
        await kubevirt.delete_pod(source["metadata"]["name"], grace=0)

    await eventually(
        lambda: given_back(tenant, base),
        timeout=60,
        what="the quota back at its base, nothing left",
    )


OUR_ROOM_KEYS = (ANNOTATION_EARLY_ROOM_PREFIX, MIGRATING_PREFIX)


@pytest.fixture
async def short_lived(
    request: pytest.FixtureRequest,
    api: ApiClient,
    cluster: ClusterInfo,
    namespace: str,
    tmp_path: Path,
) -> AsyncIterator[Stack]:
    """The deployed stack whose early rooms stand 3 s (or the seconds the test gives, as an
    indirect parameter) for a migration nobody has seen."""
    ttl = float(getattr(request, "param", 3.0))
    async with deployed(api, cluster, namespace, tmp_path, early_room_ttl=ttl) as stack_:
        yield stack_


async def test_an_early_room_whose_migration_is_never_stored_is_given_back_at_its_expiry(
    short_lived: Stack,
) -> None:
    """Quota admission, which runs after every webhook, refuses the migration itself (a second
    quota allows no migrations): our webhook had written its room already. The room stands
    until its expiry, then the controller gives it back, annotation and all."""
    tenant, _, _, _ = short_lived
    vmis, _ = await full_namespace(short_lived, 1)
    base = hard_of(await tenant.quota())
    await doomed_migration(tenant, vmis[0], base)
    await eventually(
        lambda: given_back(tenant, base), timeout=30, what="the early room given back at its expiry"
    )


NO_MIGRATIONS = "no-migrations"


async def doomed_migration(tenant: KubeVirtByHand, vmi: Object, base: ResourceList) -> None:
    """Quota admission, which runs after every webhook, refuses `vmi`'s migration (a second
    quota allows no migrations) after our webhook wrote its room; checks the room stands."""
    no_migrations = {
        "metadata": {"name": NO_MIGRATIONS},
        "spec": {"hard": {"count/virtualmachineinstancemigrations.kubevirt.io": "0"}},
    }
    await tenant.api.create(RESOURCE_QUOTAS, no_migrations, tenant.namespace)
    await eventually(lambda: _has_status(tenant, NO_MIGRATIONS), what="the second quota's status")
    with pytest.raises(errors.Forbidden, match="exceeded quota"):
        await tenant.migrate(vmi, "doomed")
    raised = await tenant.quota()
    early = [k for k in annotations_of(raised) if k.startswith(ANNOTATION_EARLY_ROOM_PREFIX)]
    assert len(early) == 1, "the room was written before quota admission refused the migration"
    assert not resources.equal(hard_of(raised), base)


async def given_back(tenant: KubeVirtByHand, base: ResourceList) -> Object | None:
    """The managed quota if it is at `base` with no room annotation of ours left, else None."""
    current = await tenant.quota()
    return current if at_base(current, base) else None


def at_base(quota: Object | None, base: ResourceList) -> bool:
    """Whether `quota` is at `base` with no room annotation of ours left."""
    if quota is None:
        return False
    ours = [k for k in annotations_of(quota) if k.startswith(OUR_ROOM_KEYS)]
    return resources.equal(hard_of(quota), base) and not ours


@pytest.mark.parametrize("short_lived", [10.0], indirect=True)  # outlasts the restart
async def test_an_api_server_restart_while_an_early_room_stands_leaves_nothing_behind(
    short_lived: Stack, api: ApiClient, local_cluster: LocalCluster, probe: KubeVirtByHand
) -> None:
    """The API server restarts while an early room stands for a migration quota admission
    refused. The controller, watching again, still gives the room back at its expiry, annotation
    and all; the webhook, its caches caught up again, writes the next migration's room before
    that create returns."""
    tenant, _, _, servers = short_lived
    await probe.create_quota({"limits.cpu": "1"})
    vmis, _ = await full_namespace(short_lived, 2)
    base = hard_of(await tenant.quota())
    await doomed_migration(tenant, vmis[0], base)
    await asyncio.to_thread(local_cluster.restart_component, "kube-apiserver")
    await eventually_create(api, CONFIG_MAPS, {"metadata": {"name": "restarted"}}, tenant.namespace)
    await eventually(
        lambda: given_back(tenant, base), timeout=60, what="the early room given back after it"
    )
    await tenant.api.delete(RESOURCE_QUOTAS, NO_MIGRATIONS, tenant.namespace)

    def caches_caught_up() -> bool:
        return all(
            at_base(server.lookups.managed_quota(tenant.namespace), base)
            and len(server.lookups.quotas.store.by_index("namespace", tenant.namespace)) == 1
            for server in servers
        )

    await eventually(caches_caught_up, what="every webhook replica's cache caught up")
    # The real create is tried once: a refused try would leave an early room of its own, which
    # the next try would find standing. A dry run (no early room: our webhook skips dry runs)
    # shows when quota admission no longer counts the deleted quota.
    await eventually(
        lambda: _admitted_dry(tenant, vmis[1]), what="quota admission without the second quota"
    )
    migration = await tenant.migrate(vmis[1], "after-restart")
    annotations = annotations_of(await tenant.quota())
    assert early_room_key(migration["metadata"]["uid"]) in annotations, sorted(annotations)
    await peers_caught_up(probe)


async def _admitted_dry(tenant: KubeVirtByHand, vmi: Object) -> bool:
    try:
        await tenant.migrate(vmi, "after-restart", dry_run=True)
    except errors.Forbidden:
        return False
    return True


async def _has_status(tenant: KubeVirtByHand, name: str) -> bool:
    quota = await tenant.api.get(RESOURCE_QUOTAS, name, tenant.namespace)
    return "used" in (quota.get("status") or {})
