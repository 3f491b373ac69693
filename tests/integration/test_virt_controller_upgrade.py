"""Differential test across a KubeVirt upgrade (issue 41): v1.8.4 to v1.9.0 under running VMs.

VMs with container disks (one; two, one of them by digest; a kernel-boot image) start under
virt-controller v1.8.4, whose launcher pods run each image in a `volume<name>` container. Their
namespace's quota is closed at what its pods use, our controllers (as their service account) and
webhook (called by the API server over TLS) run, and KubeVirt's workloadUpdateStrategy allows
LiveMigrate, as on Harvester. Then virt-controller is replaced by v1.9.0 on the same cluster
(`LocalCluster.switch_virt_controller`: its CRDs, the KubeVirt CR's status, its own launcher
image), with v1.9's defaults: every Beta gate on, ImageVolume among them. v1.9's workload
updater finds every VMI outdated and migrates it (system-critical), rendering each target with
image volumes: the digests are read from the source pod's `volume<name>` container statuses
(`imageID`, which the test writes as the kubelet reports it: kwok leaves it empty), so the
target has no init container at all.

Each real target pod's quota usage equals `target_quota_usage` with the settings read from the
v1.9 cluster on every key (and KubeVirt's reported overhead equals ours); KubeVirt reports no
quota refusal, so the room the controller raised covered every target; each migrated VMI is
never seen completed under its old launcher image (virt-handler's stand-in clears it in the
hand-off, as virt-handler does) and is migrated once, not again; and the quota returns to its
base.

A source pod without a digest (kwok's empty `imageID`): v1.9 refuses to render the target
("no reproducible image digest") and the migration stays Pending, retried with backoff, with no
target pod and no Event, for as long as it exists. Our controller holds that migration's room
meanwhile (a Pending migration of a running VM), exactly the target v1.9 would render; deleting
the migration (an abort) gives it back.

The cluster is the session's v1.8.4 one (`versioned_kubevirt_cluster`): the module switches it
back to v1.8.4 before it ends, keeping the session's ClusterInfo true (`real_kubevirt.switch`).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from harvester_quota.apis.kubevirt import (
    KUBEVIRTS,
    LABEL_MIGRATION_JOB,
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
    VIRTUAL_MACHINE_INSTANCES,
    VIRTUAL_MACHINES,
)
from harvester_quota.app import ControllerApp
from harvester_quota.config.kubevirt import settings_from
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import NAMESPACES, PODS, RESOURCE_QUOTAS, Object
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.localcluster.cluster import (
    KUBEVIRT_NAMESPACE,
    VIRT_CONTROLLER_USER,
    launcher_image,
)
from harvester_quota.testbench.sim.kubevirt import Outcome, ParallelLimits, VMSpec
from harvester_quota.testbench.sim.kubevirt.handler import HandlerTimings
from harvester_quota.testbench.virtcontroller import VirtControllerDriver
from harvester_quota.util.launcher import (
    LauncherSettings,
    launcher_pod_resources,
    target_quota_usage,
)
from harvester_quota.util.launcher.featuregates import IMAGE_VOLUME
from harvester_quota.util.podusage import pod_quota_usage
from harvester_quota.util.quantity import Quantity
from harvester_quota.webhook.server import WebhookServer

from tests.helpers import eventually
from tests.integration import deployment, real_kubevirt
from tests.integration.kubevirt_by_hand import KubeVirtByHand
from tests.integration.test_attachment_differential import (
    assert_reported_overhead_is_ours,
    live_migrate_workload_updates,
)
from tests.integration.test_controllers_on_kubevirt import MIGRATION_TIMEOUT, hard_equals
from tests.integration.test_target_room import (
    KEYS,
    NamespaceWatch,
    RejectionWatch,
    assert_never_refused,
    no_slack,
)

FROM, TO = "v1.8.4", "v1.9.0"
pytestmark = [
    pytest.mark.integration,
    pytest.mark.parametrize("versioned_kubevirt_cluster", [FROM], indirect=True),
]

kubevirt_cluster = real_kubevirt.kubevirt_cluster

WORKLOAD_UPDATE = "kubevirt.io/workloadUpdateMigration"
"""The annotation v1.9's workload updater puts on the migrations it creates."""
FINAL_PHASES = frozenset({"Succeeded", "Failed"})
"""A migration's phases after which nothing of it changes."""
NO_DIGEST = "no reproducible image digest"
"""What v1.9 says (in its log) when it refuses to render a target (RenderMigrationManifest)."""
DISK = "registry.example/os:1"
DATA = "registry.example/data@sha256:" + "a" * 64
KERNEL = "registry.example/kernel:1"


def _disks(*images: str) -> dict[str, Any]:
    names = ["root", "data"][: len(images)]
    return {
        "volumes": [
            {"name": name, "containerDisk": {"image": image}}
            for name, image in zip(names, images, strict=True)
        ],
        "domain": {
            "devices": {"disks": [{"name": name, "disk": {"bus": "virtio"}} for name in names]},
            "firmware": {},
        },
    }


def _kernel_boot() -> dict[str, Any]:
    template = _disks(DISK)
    template["domain"]["firmware"] = {
        "kernelBoot": {"container": {"image": KERNEL, "kernelPath": "/vmlinuz"}}
    }
    return template


VMS: dict[str, dict[str, Any]] = {
    "one-disk": _disks(DISK),
    "two-disks": _disks(DISK, DATA),
    "kernel-boot": _kernel_boot(),
    "no-digest": _disks(DISK),
}
"""Each VM's container disks and kernel-boot image (its template's volumes, disks, firmware)."""
WITHOUT_DIGEST = "no-digest"


@pytest.fixture(scope="module")
def upgrade(kubevirt_cluster: ClusterInfo) -> Iterator[ClusterInfo]:
    """The session's FROM cluster, to switch to TO (`real_kubevirt.switch`); switched back to
    FROM when the module ends (the next module of this version shares it)."""
    real_kubevirt.require_built(TO)
    yield kubevirt_cluster
    real_kubevirt.switch(kubevirt_cluster, FROM)


@pytest.fixture
def kv(kubevirt_api: ApiClient, kubevirt_namespace: str) -> KubeVirtByHand:
    return KubeVirtByHand(kubevirt_api, kubevirt_namespace)


@pytest.fixture
async def kubevirt(
    kubevirt_api: ApiClient, kubevirt_namespace: str
) -> AsyncIterator[VirtControllerDriver]:
    """The node side for this namespace; room for every VM's migration at once."""
    driver = VirtControllerDriver(
        kubevirt_api,
        kubevirt_version=FROM,
        namespaces=frozenset({kubevirt_namespace}),
        timings=HandlerTimings(migration=0.5, source_shutdown=1.0, target_exit=0.5),
        limits=ParallelLimits(8, 8),
    )
    async with driver:
        yield driver


@pytest.fixture
async def webhook(
    kubevirt_api: ApiClient, kubevirt_cluster: ClusterInfo, kubevirt_namespace: str, tmp_path: Path
) -> AsyncIterator[WebhookServer]:
    """Our webhook as deployed, knowing virt-controller as KubeVirt, its KubeVirt version read
    from the cluster (it changes under it)."""
    await deployment.apply_rbac(kubevirt_api)
    async with deployment.running_webhook(
        kubevirt_api,
        kubevirt_cluster,
        kubevirt_namespace,
        tmp_path,
        kubevirt_user=VIRT_CONTROLLER_USER,
        kubevirt_version=None,
    ) as server:
        yield server


@pytest.fixture
async def controllers(
    webhook: WebhookServer, kubevirt_api: ApiClient, kubevirt_cluster: ClusterInfo
) -> AsyncIterator[ControllerApp]:
    """Our controllers as their service account, the KubeVirt version read from the cluster."""
    del webhook  # applies deploy/'s RBAC first
    async with deployment.controllers_as_account(
        kubevirt_api, kubevirt_cluster, kubevirt_version=None
    ) as app:
        yield app


async def start_vm(
    kubevirt: VirtControllerDriver, api: ApiClient, namespace: str, name: str
) -> None:
    """VM `name` with its images (VMS, merged into its template), started."""
    await kubevirt.create_vm(VMSpec(name, cores=1, memory="1Gi"), running=False)
    await api.patch(VIRTUAL_MACHINES, name, {"spec": {"template": {"spec": VMS[name]}}}, namespace)
    (await kubevirt.start_vm(name, namespace)).check()


def image_id(image: str) -> str:
    """What the kubelet reports as a pulled image's imageID: its repository and digest."""
    repository = image.split("@", 1)[0].rsplit(":", 1)[0]
    return f"{repository}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


async def report_digests(api: ApiClient, namespace: str, vmi_uid: str) -> None:
    """The source pod's container statuses with the imageID the kubelet would report (kwok
    writes none)."""
    (pod,) = (await api.list(PODS, namespace, label_selector=f"kubevirt.io/created-by={vmi_uid}"))[
        "items"
    ]
    statuses = pod["status"]["containerStatuses"]
    for entry in statuses:
        entry["imageID"] = image_id(entry["image"])
    body = {"status": {"containerStatuses": statuses}}
    await api.patch(PODS, pod["metadata"]["name"], body, namespace, subresource="status")


async def workload_updates(api: ApiClient, namespace: str) -> dict[str, Object]:
    """The workload updater's migration of each VM, once it made one for every VM."""

    async def all_made() -> dict[str, Object] | None:
        listed = (await api.list(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, namespace))["items"]
        made = {
            m["spec"]["vmiName"]: m
            for m in listed
            if WORKLOAD_UPDATE in (m["metadata"].get("annotations") or {})
        }
        return made if set(made) == set(VMS) else None

    result: dict[str, Object] = await eventually(
        all_made, what="v1.9's workload-update migrations", timeout=MIGRATION_TIMEOUT
    )
    return result


async def target_pod(api: ApiClient, namespace: str, migration: Object) -> Object:
    selector = f"{LABEL_MIGRATION_JOB}={migration['metadata']['uid']}"

    async def created() -> Object | None:
        return next(iter((await api.list(PODS, namespace, label_selector=selector))["items"]), None)

    pod: Object = await eventually(
        created, what=f"the target of {migration['spec']['vmiName']}", timeout=MIGRATION_TIMEOUT
    )
    return pod


async def v19_settings(api: ApiClient, namespace: str) -> LauncherSettings:
    """What the controller reads from the cluster now, for `namespace`."""
    kubevirt_cr = await api.get(KUBEVIRTS, "kubevirt", KUBEVIRT_NAMESPACE)
    assert kubevirt_cr["status"]["observedKubeVirtVersion"] == TO
    quotas = (await api.list(RESOURCE_QUOTAS, namespace))["items"]
    settings = settings_from(kubevirt_cr, None).for_namespace(
        quotas, await api.get(NAMESPACES, namespace)
    )
    assert settings.gate(IMAGE_VOLUME), "v1.9's default: a Beta gate is on"
    return settings


def virt_controller_log(info: ClusterInfo) -> Path:
    return Path(real_kubevirt.virt_controller(info).log)


async def test_after_an_upgrade_to_v1_9_each_workload_update_target_is_ours_and_fits_the_room(
    upgrade: ClusterInfo,
    controllers: ControllerApp,
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
) -> None:
    """The module's case (its docstring): every target v1.9 renders for a VMI v1.8.4 started is
    ours and admitted at once in a namespace without slack; the one it cannot render holds its
    room until its migration is deleted."""
    api, namespace = kv.api, kv.namespace
    await asyncio.gather(*(start_vm(kubevirt, api, namespace, name) for name in VMS))
    for name in VMS:
        if name != WITHOUT_DIGEST:
            await report_digests(api, namespace, str(kubevirt.vmi_uid(namespace, name)))
    await kv.create_quota({k: "1000Gi" if "memory" in k else "1000" for k in KEYS})
    base = await no_slack(kv, controllers, len(VMS))
    async with live_migrate_workload_updates(api):
        await asyncio.to_thread(real_kubevirt.switch, upgrade, TO)
        # Only now: replacing a CRD ends every watch of its objects.
        async with RejectionWatch(api, namespace) as watch, HandOffWatch(api, namespace) as vmis:
            migrations = await workload_updates(api, namespace)
            stuck = migrations.pop(WITHOUT_DIGEST)
            settings = await v19_settings(api, namespace)
            await targets_are_ours(api, namespace, migrations, settings)
            for migration in migrations.values():
                name = migration["metadata"]["name"]
                record = await kubevirt.wait_migration(name, timeout=MIGRATION_TIMEOUT)
                assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
            done = [m["metadata"]["name"] for m in migrations.values()]
            await assert_never_refused(kubevirt, kv, watch, done)
            await each_migrated_once(api, namespace, vmis, list(migrations))
        await held_while_v19_refuses_to_render(upgrade, kv, stuck, base, settings)
    # Workload updates off first: v1.9's updater makes a new migration for the still outdated
    # VMI within milliseconds of its migration's delete (seen in a full run), raising its room
    # again; one it made before it saw the change is deleted too.
    await eventually(
        lambda: rooms_given_back_once_unfinished_deleted(kv, base),
        what="the stuck room given back",
    )


async def rooms_given_back_once_unfinished_deleted(
    kv: KubeVirtByHand, base: dict[str, str]
) -> bool:
    """Deletes every unfinished migration of the namespace (a 404 is one gone already);
    whether its quota is back at `base`."""
    api, namespace = kv.api, kv.namespace
    for migration in (await api.list(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, namespace))["items"]:
        if (migration.get("status") or {}).get("phase") in FINAL_PHASES:
            continue
        try:
            await api.delete(
                VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, migration["metadata"]["name"], namespace
            )
        except errors.NotFound:
            continue
    return bool(await hard_equals(kv, base))


class HandOffWatch(NamespaceWatch):
    """The namespace's VMIs ever seen migrated (``migrationState`` completed, not failed) while
    their status still named FROM's launcher image, and the launcher image each names last.
    virt-handler clears that image in the hand-off that completes a migration; a VMI seen so is
    one v1.9's workload updater can take for outdated and migrate a second time. The watch
    delivers a VMI's revisions in order: once it has seen TO's image on a VMI, it has seen every
    earlier revision of it."""

    resource = VIRTUAL_MACHINE_INSTANCES

    def __init__(self, api: ApiClient, namespace: str) -> None:
        super().__init__(api, namespace)
        self.stale: set[str] = set()
        self.images: dict[str, str | None] = {}

    def on_object(self, obj: Object) -> None:
        name, state = obj["metadata"]["name"], obj.get("status") or {}
        migration = state.get("migrationState") or {}
        handed_off = migration.get("completed") and not migration.get("failed")
        self.images[name] = state.get("launcherContainerImageVersion")
        if handed_off and self.images[name] == launcher_image(FROM):
            self.stale.add(name)


async def each_migrated_once(
    api: ApiClient, namespace: str, vmis: HandOffWatch, names: list[str]
) -> None:
    """Each VMI of `names` runs TO's launcher (virt-controller read it from the target pod), was
    never seen migrated under FROM's launcher image, and v1.9's workload updater made one
    migration of it, not a second."""

    def on_new_launcher() -> bool:
        return all(vmis.images.get(name) == launcher_image(TO) for name in names)

    await eventually(on_new_launcher, what="the watch seeing each migrated VMI on v1.9's launcher")
    assert vmis.stale == set()
    listed = (await api.list(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, namespace))["items"]
    updates = [
        m["spec"]["vmiName"]
        for m in listed
        if WORKLOAD_UPDATE in (m["metadata"].get("annotations") or {})
    ]
    assert sorted(n for n in updates if n in names) == sorted(names), updates


async def targets_are_ours(
    api: ApiClient, namespace: str, migrations: dict[str, Object], settings: LauncherSettings
) -> None:
    """Each migration's real target pod: no image-pulling init container (the digests came from
    the source pod) and no container-disk container (image volumes), as in our rendering, which
    has the same containers (an init container rarely changes what quota charges: the names are
    compared too); its quota usage ours on every key; KubeVirt's reported overhead ours."""
    for name, migration in migrations.items():
        target = await target_pod(api, namespace, migration)
        vmi = await api.get(VIRTUAL_MACHINE_INSTANCES, name, namespace)
        ours = launcher_pod_resources(vmi, settings, migration_target=True)
        assert container_names(target) == container_names(ours), name
        assert not [c for c in container_names(target) if c.startswith("volume")], name
        assert pod_quota_usage(target) == target_quota_usage(vmi, settings), name
        assert_reported_overhead_is_ours(target, vmi, settings, True)


def container_names(pod: Object) -> list[str]:
    spec = pod["spec"]
    return [c["name"] for c in [*(spec.get("initContainers") or []), *spec["containers"]]]


async def held_while_v19_refuses_to_render(
    upgrade: ClusterInfo,
    kv: KubeVirtByHand,
    stuck: Object,
    base: dict[str, str],
    settings: LauncherSettings,
) -> None:
    """v1.9 refused the target of the VM whose source pod reports no digest (its log says
    why); the migration is Pending with no target pod; the quota holds exactly that target's
    room over the base, once the other migrations gave theirs back."""
    api, namespace = kv.api, kv.namespace
    log = virt_controller_log(upgrade)
    line = f"reenqueuing Migration {namespace}/{stuck['metadata']['name']}"

    def refused() -> bool:
        return any(line in entry and NO_DIGEST in entry for entry in log.read_text().splitlines())

    await eventually(refused, what=f"v1.9 refusing {WITHOUT_DIGEST}'s target", timeout=60)
    now = await api.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, stuck["metadata"]["name"], namespace)
    assert now["status"]["phase"] == "Pending", now.get("status")
    selector = f"{LABEL_MIGRATION_JOB}={stuck['metadata']['uid']}"
    assert (await api.list(PODS, namespace, label_selector=selector))["items"] == []
    vmi = await api.get(VIRTUAL_MACHINE_INSTANCES, WITHOUT_DIGEST, namespace)
    room = target_quota_usage(vmi, settings)
    held = {
        key: str(Quantity.parse(value) + room.get(key, Quantity.parse("0")))
        for key, value in base.items()
    }
    await eventually(lambda: hard_equals(kv, held), what="only the stuck migration's room held")
