"""The product deployed beside Harvester v1.8.2's own controllers (issue 39), as on a Harvester:
`run --adopt-harvester-quotas` and the webhook as their own processes with service-account
tokens, the chart's RBAC and TLS, on a cluster running Harvester's migration and resourcequota
controllers and namespace validator (built from Harvester's Go module) and KubeVirt's own
virt-controller.

A VM in a full Rancher namespace migrates three times: each migration succeeds with no target
pod refused, the quota is back at its base each time and stays adopted, Harvester logs no error
about the namespace, and the API server's audit log shows Harvester's controllers writing no
more than their migration controller's two annotation writes per migration. Then the uninstall's
first step (the controller without adoption) gives the quota back, and Harvester's own
behaviour is back: alone, its controllers raise the quota for the next migration.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from harvester_quota.apis.mtq import VMMRQS
from harvester_quota.config.management import Options
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.meta import annotations_of
from harvester_quota.generic.resource import RESOURCE_QUOTAS, Object
from harvester_quota.release import ReleaseConfig, leftovers, release
from harvester_quota.testbench.localcluster import ClusterInfo, LocalCluster
from harvester_quota.testbench.localcluster import deploy as deployment_module
from harvester_quota.testbench.localcluster.binaries import HARVESTER_CONTROLLERS
from harvester_quota.testbench.localcluster.chart import render
from harvester_quota.testbench.localcluster.cluster import VIRT_CONTROLLER_USER
from harvester_quota.testbench.scenario.writers import WriterMarks
from harvester_quota.testbench.sim.kubevirt import Outcome, VMSpec
from harvester_quota.testbench.virtcontroller import VirtControllerDriver
from harvester_quota.util.annotations import (
    ANNOTATION_ADOPTED,
    ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING,
)
from harvester_quota.util.mtq import FINALIZER
from harvester_quota.util.quantity import Quantity

from tests.helpers import eventually
from tests.integration.conftest import fresh_namespace_async
from tests.integration.kubevirt_by_hand import KubeVirtByHand
from tests.integration.real_kubevirt import node_to_migrate_from
from tests.integration.test_deployed_processes import (
    V170_HARD,
    V170_LIMIT,
    assert_no_refusal_logged,
    deployed,
)

pytestmark = pytest.mark.integration

MIGRATIONS = 3
SYSTEM = "harvester-system"
ADOPT = ("--adopt-harvester-quotas",)


@pytest.fixture
async def harvester_api(harvester_kubevirt_cluster: ClusterInfo) -> ApiClient:
    return ApiClient(harvester_kubevirt_cluster.admin_config())


def adopted(quota: Object) -> bool:
    annotations = annotations_of(quota)
    return (
        annotations.get(ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING) == "true"
        and annotations.get(ANNOTATION_ADOPTED) == "true"
    )


def driver(api: ApiClient, cluster: ClusterInfo, namespace: str) -> VirtControllerDriver:
    """The node side of KubeVirt (virt-handler's part) for `namespace`."""
    return VirtControllerDriver(
        api, kubevirt_version=str(cluster.kubevirt_version), namespaces=frozenset({namespace})
    )


async def full_rancher_namespace(
    api: ApiClient, cluster: ClusterInfo, namespace: str
) -> tuple[KubeVirtByHand, VirtControllerDriver]:
    """`namespace` with the v1.7.0 seed's Rancher base and quota, and its KubeVirt driver."""
    tenant = KubeVirtByHand(api, namespace)
    await tenant.set_rancher_base(V170_LIMIT)
    await tenant.create_quota(V170_HARD)
    return tenant, driver(api, cluster, namespace)


@contextlib.asynccontextmanager
async def adopting(
    api: ApiClient,
    cluster: ClusterInfo,
    namespace: str,
    tmp_path: Path,
    kubevirt: VirtControllerDriver,
) -> AsyncIterator[tuple[Path, Path]]:
    """Our controller (adopting) and webhook deployed for `namespace`, and KubeVirt's node side,
    for the block; yields the two processes' logs."""
    async with (
        deployed(
            api, cluster, namespace, tmp_path, VIRT_CONTROLLER_USER, controller_flags=ADOPT
        ) as logs,
        kubevirt,
    ):
        yield logs


async def run_where_it_can_migrate(
    api: ApiClient, kubevirt: VirtControllerDriver, namespace: str, spec: VMSpec
) -> None:
    """`spec` running on a node it can migrate from at once (`node_to_migrate_from`): earlier
    tests' namespaces, deleted mid-migration, hold outbound slots for a while. Only the VM's
    first migration is so placed; later ones start wherever it went."""
    node = await node_to_migrate_from(api, namespace)
    started = await kubevirt.create_vm(spec, node=node)
    assert started.started and started.node == node, started


def audit_marks(cluster: ClusterInfo) -> WriterMarks:
    """The audit log and Harvester's log, marked now."""
    marks = WriterMarks.take(cluster)
    assert marks is not None and marks.harvester_log is not None
    return marks


def harvester_wrote_hard(quota: Object) -> list[str]:
    """The managedFields entries of Harvester's controllers (their client's field manager,
    from the binary's name) that own some of spec.hard: a raise or lowering of theirs."""
    return [
        str(entry.get("manager"))
        for entry in quota["metadata"].get("managedFields") or []
        if str(entry.get("manager", "")).startswith("harvester-controllers")
        and "f:hard" in ((entry.get("fieldsV1") or {}).get("f:spec") or {})
    ]


async def migrate(kubevirt: VirtControllerDriver) -> None:
    record = await kubevirt.wait_migration(await kubevirt.migrate("vm1"), timeout=180)
    assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
    assert record.refusals == 0, record.as_dict()
    assert record.source_pod_gone is not None or await kubevirt.records.wait_for(
        lambda: record.source_pod_gone is not None, 60
    ), "the source launcher exited"


async def test_deployed_beside_harvesters_controllers_adopts_silences_them_and_gives_back(
    harvester_api: ApiClient, harvester_kubevirt_cluster: ClusterInfo, tmp_path: Path
) -> None:
    cluster = harvester_kubevirt_cluster
    async with harvester_api as api, fresh_namespace_async(api, "beside") as namespace:
        tenant, kubevirt = await full_rancher_namespace(api, cluster, namespace)

        async def quota_at_base(*, adoption: bool) -> bool:
            quota = await tenant.quota()
            return quota["spec"]["hard"] == V170_HARD and adopted(quota) is adoption

        marks = audit_marks(cluster)
        async with adopting(api, cluster, namespace, tmp_path, kubevirt) as logs:
            await eventually(lambda: quota_at_base(adoption=True), what="the quota adopted")
            await run_where_it_can_migrate(
                api, kubevirt, namespace, VMSpec("vm1", cores=2, memory="4Gi")
            )
            for _ in range(MIGRATIONS):
                await migrate(kubevirt)
                await eventually(lambda: quota_at_base(adoption=True), what="the room given back")
        assert not harvester_wrote_hard(await tenant.quota()), "Harvester never set spec.hard"
        counted = marks.count({"ns": namespace})
        assert_no_refusal_logged(logs)
        writes = counted.writes["ns"]
        assert counted.harvester_errors == {"ns": 0}, counted
        harvesters = writes.get("harvester", {}).get("accepted", 0)
        assert harvesters <= 2 * MIGRATIONS, writes
        ours = writes.get("harvester-quota", {}).get("accepted", 0)
        assert 0 < ours <= 1 + 2 * MIGRATIONS, writes

        # The uninstall's first step: the controller without adoption gives the quota back.
        after = tmp_path / "after"
        after.mkdir()
        async with deployed(api, cluster, namespace, after, VIRT_CONTROLLER_USER):
            await eventually(lambda: quota_at_base(adoption=False), what="the quota given back")
        # Harvester's own behaviour is back: alone, its controllers raise for a migration.
        alone = driver(api, cluster, namespace)
        async with alone:
            await alone.migrate("vm1")

            async def raised_by_harvester() -> bool:
                hard = (await tenant.quota())["spec"]["hard"]
                return Quantity.parse(hard["limits.cpu"]) > Quantity.parse(V170_HARD["limits.cpu"])

            await eventually(raised_by_harvester, timeout=90, what="Harvester's own raise")
            assert harvester_wrote_hard(await tenant.quota()), "the raise was Harvester's"


async def test_harvesters_controllers_restarted_mid_migration_neither_stall_nor_double_raise(
    harvester_api: ApiClient, harvester_kubevirt_cluster: ClusterInfo, tmp_path: Path
) -> None:
    """Harvester's controllers killed and started again while a migration runs (its pod
    restarted during an upgrade): the new process finds the quota adopted and leaves it, the
    migration completes with its target admitted, and the quota comes back to its base."""
    cluster = harvester_kubevirt_cluster
    async with harvester_api as api, fresh_namespace_async(api, "restart") as namespace:
        tenant, kubevirt = await full_rancher_namespace(api, cluster, namespace)
        marks = audit_marks(cluster)
        async with adopting(api, cluster, namespace, tmp_path, kubevirt) as logs:
            spec = VMSpec("vm1", cores=2, memory="4Gi", migration_duration=8)
            await run_where_it_can_migrate(api, kubevirt, namespace, spec)
            name = await kubevirt.migrate("vm1")

            async def raised() -> bool:
                hard = (await tenant.quota())["spec"]["hard"]
                return hard != V170_HARD

            await eventually(raised, what="the room raised")
            await asyncio.to_thread(
                LocalCluster(cluster.state_dir).restart_component, HARVESTER_CONTROLLERS
            )
            record = await kubevirt.wait_migration(name, timeout=180)
            assert record.outcome is Outcome.SUCCEEDED and record.refusals == 0, record.as_dict()

            async def back_at_base() -> bool:
                quota = await tenant.quota()
                return quota["spec"]["hard"] == V170_HARD and adopted(quota)

            await eventually(back_at_base, what="the room given back, the quota still adopted")
        assert not harvester_wrote_hard(await tenant.quota()), "no double raise by Harvester"
        assert_no_refusal_logged(logs)
        counted = marks.count({"ns": namespace})
        assert counted.harvester_errors == {"ns": 0}, counted
        ours = counted.writes["ns"].get("harvester-quota", {}).get("accepted", 0)
        assert ours <= 1 + 2, counted.writes


async def migrating_on_an_adopted_quota(
    api: ApiClient,
    cluster: ClusterInfo,
    tenant: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
    tmp_path: Path,
) -> str:
    """vm1 started and migrating (15 s) under our adopting controller, until its room stands on
    the adopted quota; the controller is stopped then, the migration goes on. Its name."""
    async with deployed(
        api, cluster, tenant.namespace, tmp_path, VIRT_CONTROLLER_USER, controller_flags=ADOPT
    ):
        spec = VMSpec("vm1", cores=2, memory="4Gi", migration_duration=15)
        await run_where_it_can_migrate(api, kubevirt, tenant.namespace, spec)
        name = await kubevirt.migrate("vm1")

        async def raised_and_adopted() -> bool:
            quota = await tenant.quota()
            return quota["spec"]["hard"] != V170_HARD and adopted(quota)

        await eventually(raised_and_adopted, what="the room raised on the adopted quota")
    return name


async def test_uninstalled_mid_migration_the_quota_is_given_back_only_after_the_room(
    harvester_api: ApiClient, harvester_kubevirt_cluster: ClusterInfo, tmp_path: Path
) -> None:
    """The uninstall's first step taken while a migration holds room: the controller without
    adoption keeps the quota adopted until the room is released (given back under a standing
    room, Harvester's resourcequota controller would add our room key to its own and raise
    twice), the migration completes with its target admitted, then the quota is Harvester's
    again at its base, and Harvester never set spec.hard meanwhile."""
    cluster = harvester_kubevirt_cluster
    async with harvester_api as api, fresh_namespace_async(api, "uninstall") as namespace:
        tenant, kubevirt = await full_rancher_namespace(api, cluster, namespace)
        async with kubevirt:
            name = await migrating_on_an_adopted_quota(api, cluster, tenant, kubevirt, tmp_path)
            after = tmp_path / "after"
            after.mkdir()
            async with deployed(api, cluster, namespace, after, VIRT_CONTROLLER_USER) as logs:
                quota = await tenant.quota()
                record = kubevirt.records.get(namespace, name)
                if record is None or not record.done:
                    assert adopted(quota), "still adopted while the room stands"
                record = await kubevirt.wait_migration(name, timeout=180)
                assert record.outcome is Outcome.SUCCEEDED and record.refusals == 0, (
                    record.as_dict()
                )

                async def given_back() -> bool:
                    quota = await tenant.quota()
                    return quota["spec"]["hard"] == V170_HARD and not adopted(quota)

                await eventually(given_back, what="the quota given back at its base")
            assert_no_refusal_logged(logs)
        assert not harvester_wrote_hard(await tenant.quota()), "Harvester never set spec.hard"


async def test_an_administrators_skip_annotation_beside_harvester_is_left_to_the_administrator(
    harvester_api: ApiClient, harvester_kubevirt_cluster: ClusterInfo, tmp_path: Path
) -> None:
    """An administrator's skip annotation (without our marker) opts the quota out of both
    controllers: it is never adopted, nobody raises it for a migration (one with room to spare
    here, so it completes), and Harvester logs nothing about it."""
    cluster = harvester_kubevirt_cluster
    async with harvester_api as api, fresh_namespace_async(api, "skip") as namespace:
        tenant = KubeVirtByHand(api, namespace)
        roomy = {"limitsCpu": "8000m", "limitsMemory": "20Gi"}
        await tenant.set_rancher_base(roomy)
        quota = await tenant.create_quota({"limits.cpu": "8", "limits.memory": "20Gi"})
        skip = {"metadata": {"annotations": {ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING: "true"}}}
        await api.patch(RESOURCE_QUOTAS, quota["metadata"]["name"], skip, namespace)
        kubevirt = driver(api, cluster, namespace)
        marks = audit_marks(cluster)
        async with adopting(api, cluster, namespace, tmp_path, kubevirt) as logs:
            await run_where_it_can_migrate(
                api, kubevirt, namespace, VMSpec("vm1", cores=2, memory="4Gi")
            )
            await migrate(kubevirt)
        final = await tenant.quota()
        assert final["spec"]["hard"] == {"limits.cpu": "8", "limits.memory": "20Gi"}
        assert annotations_of(final).get(ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING) == "true"
        assert ANNOTATION_ADOPTED not in annotations_of(final)
        assert_no_refusal_logged(logs)
        counted = marks.count({"ns": namespace})
        assert counted.harvester_errors == {"ns": 0}, counted
        assert counted.writes.get("ns", {}).get("harvester-quota", {}).get("accepted", 0) == 0


async def test_the_documented_uninstall_steps_mid_migration_leave_every_quota_at_its_base(
    harvester_api: ApiClient, harvester_kubevirt_cluster: ClusterInfo, tmp_path: Path
) -> None:
    """docs/operations.md's uninstall (the global switch on, adoption off) while a migration
    holds room: the room and the adoption go at once, the quota is Harvester's at its base, and
    stays so with our controller still running."""
    cluster = harvester_kubevirt_cluster
    async with harvester_api as api, fresh_namespace_async(api, "steps") as namespace:
        tenant, kubevirt = await full_rancher_namespace(api, cluster, namespace)
        async with kubevirt:
            await migrating_on_an_adopted_quota(api, cluster, tenant, kubevirt, tmp_path)
            after = tmp_path / "after"
            after.mkdir()
            paused = ("--paused",)
            async with deployed(
                api, cluster, namespace, after, VIRT_CONTROLLER_USER, controller_flags=paused
            ):

                async def given_back() -> bool:
                    quota = await tenant.quota()
                    return quota["spec"]["hard"] == V170_HARD and not adopted(quota)

                await eventually(given_back, what="the room and the adoption given back")


def release_hook(grace: int) -> tuple[list[Object], list[str]]:
    """The chart's pre-delete hook as rendered (graceSeconds `grace`): its RBAC documents, and
    the Job container's arguments."""
    values = {"release": {"graceSeconds": grace, "timeoutSeconds": 120}}
    documents = [d for d in yaml.safe_load_all(render(values)) if d]
    hook = [d for d in documents if "helm.sh/hook" in d["metadata"].get("annotations", {})]
    (job,) = [d for d in hook if d["kind"] == "Job"]
    rbac = [d for d in hook if d["kind"] != "Job"]
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == "harvester-quota"
    return rbac, job["spec"]["template"]["spec"]["containers"][0]["args"]


def controller_deployment() -> Object:
    """The chart's controller Deployment, as `helm install` creates it."""
    (found,) = [
        d
        for d in yaml.safe_load_all(render())
        if d and d["kind"] == "Deployment" and d["metadata"]["name"] == "harvester-quota"
    ]
    return dict(found)


async def test_the_charts_pre_delete_hook_mid_migration_waits_for_the_room_then_gives_all_back(
    harvester_api: ApiClient, harvester_kubevirt_cluster: ClusterInfo, tmp_path: Path
) -> None:
    """`helm uninstall`'s pre-delete hook (the chart's Job arguments, as the controller's
    service account with the chart's RBAC and the hook's own Role) started while a migration
    holds room on an adopted quota: the controllers keep the room until the migration ends (no
    target refused), then the hook scales the controller Deployment to 0, gives the adoption
    back itself, and exits 0 with the quota at its base, no room key, no marker, nothing of
    ours left in the namespace."""
    cluster = harvester_kubevirt_cluster
    # The grace covers this 10 s migration with room to spare. It waits for every room in the
    # cluster: in a full module run, rooms left in earlier tests' namespaces (terminating) ran a
    # 90 s grace out (113 s for this test, 28 s alone).
    rbac, args = release_hook(grace=40)
    async with harvester_api as api, fresh_namespace_async(api, "hook") as namespace:
        tenant, kubevirt = await full_rancher_namespace(api, cluster, namespace)
        await deployment_module.apply_shipped_rbac(api)
        for document in rbac:
            await deployment_module.apply(api, document)
        await deployment_module.apply(api, controller_deployment())
        kubeconfig = await deployment_module.write_token_kubeconfig(
            api, cluster, "harvester-quota", tmp_path / "hook"
        )
        lease = f"--lease-name=deployed-{namespace[-6:]}"  # the deployed controller's Lease
        hook_args = [*args, f"--kubeconfig={kubeconfig}", lease, "--output=json"]
        async with kubevirt:
            async with deployed(
                api, cluster, namespace, tmp_path, VIRT_CONTROLLER_USER, controller_flags=ADOPT
            ) as logs:
                spec = VMSpec("vm1", cores=2, memory="4Gi", migration_duration=10)
                await run_where_it_can_migrate(api, kubevirt, namespace, spec)
                name = await kubevirt.migrate("vm1")

                async def raised() -> bool:
                    quota = await tenant.quota()
                    return quota["spec"]["hard"] != V170_HARD and adopted(quota)

                await eventually(raised, what="the room raised on the adopted quota")
                hook = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "harvester_quota.main",
                    *hook_args,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.STDOUT,
                )
                await eventually(
                    lambda: scaled_to(api, 0), timeout=120, what="the Deployment scaled to 0"
                )
                record = kubevirt.records.get(namespace, name)
                assert record is not None and record.done, "the room was kept until it ended"
                assert record.outcome is Outcome.SUCCEEDED and record.refusals == 0, (
                    record.as_dict()
                )
            # Leaving `deployed` stops the controller process: the kubelet's part of the scale.
            output, _ = await asyncio.wait_for(hook.communicate(), 150)
        print(output.decode())  # the hook's log, for a slow run (pytest -rP)
        assert hook.returncode == 0, output.decode()
        report = json.loads(output.decode().strip().splitlines()[-1])
        assert report["released"] and report["controller_replicas"] == 2, report
        quota = await tenant.quota()
        assert quota["spec"]["hard"] == V170_HARD and not adopted(quota), quota
        assert ANNOTATION_ADOPTED not in annotations_of(quota), quota
        left = await leftovers(api)
        assert not [
            x for x in left if namespace in (x.namespace, x.name if x.kind == "Namespace" else "")
        ], left
        assert_no_refusal_logged(logs)
        await api.delete(deployment_module.KINDS["Deployment"], "harvester-quota", SYSTEM)


async def scaled_to(api: ApiClient, replicas: int) -> bool:
    found = await api.get(deployment_module.KINDS["Deployment"], "harvester-quota", SYSTEM)
    return bool(found["spec"]["replicas"] == replicas)


async def test_a_planted_restore_finalizer_cannot_block_the_release_with_the_deployment_gone(
    harvester_api: ApiClient, harvester_kubevirt_cluster: ClusterInfo
) -> None:
    """Whoever may edit a VMMRQ (a tenant, where cluster RBAC lets one) plants our restore
    finalizer with nothing recorded, to make `release` fail and the uninstall with it. With the
    controller Deployment already gone, `release` (as the controller's service account, with the
    hook's Role) runs the controllers itself: they take the finalizer off (nothing is recorded)
    and nothing of ours is left in the namespace."""
    cluster = harvester_kubevirt_cluster
    rbac, _ = release_hook(grace=0)
    async with harvester_api as api, fresh_namespace_async(api, "forge") as namespace:
        await deployment_module.apply_shipped_rbac(api)
        for document in rbac:
            await deployment_module.apply(api, document)
        with contextlib.suppress(errors.NotFound):
            await api.delete(deployment_module.KINDS["Deployment"], "harvester-quota", SYSTEM)
        planted = {
            "apiVersion": "mtq.kubevirt.io/v1alpha1",
            "kind": VMMRQS.kind,
            "metadata": {"name": "budget", "finalizers": [FINALIZER]},
            "spec": {"additionalMigrationResources": {"limits.cpu": "1"}},
        }
        created = await api.create(VMMRQS, planted, namespace)
        assert FINALIZER in created["metadata"]["finalizers"], "planted"
        options = Options(namespace=SYSTEM, lease_name=f"forge-{namespace[-6:]}")
        config = ReleaseConfig(options=options, grace=0, timeout=60, poll=1)
        controller = await deployment_module.client_as(api, cluster, "harvester-quota")
        async with controller:
            result = await release(controller, config)
        assert result.controller_replicas is None, "the Deployment was gone"
        mine = [x for x in result.left if namespace in (x.namespace, x.name)]
        assert not mine, result.left
        budget = await api.get(VMMRQS, "budget", namespace)
        assert FINALIZER not in (budget["metadata"].get("finalizers") or []), budget
