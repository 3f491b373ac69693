"""The quota controllers on the real cluster: real quota admission decides every target pod."""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from harvester_quota.apis.kubevirt import VIRTUAL_MACHINE_INSTANCES
from harvester_quota.app import ControllerApp
from harvester_quota.config.management import Options
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import EVENTS, NAMESPACES, PODS, RESOURCE_QUOTAS
from harvester_quota.util.annotations import migrating_vm_annotation_key
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.resourcequota.plan import plan_quota
from prometheus_client import CollectorRegistry

from tests.helpers import caught_up, eventually, succeed_migration
from tests.integration.kubevirt_by_hand import KubeVirtByHand

pytestmark = pytest.mark.integration

V170_LIMIT = {"limitsCpu": "3000m", "limitsMemory": "5000Mi"}
V170_HARD = {"limits.cpu": "3", "limits.memory": "5000Mi"}


def new_app(api: ApiClient) -> ControllerApp:
    options = Options(leader_elect=False, kubevirt_version="1.6", workers=2)
    return ControllerApp(api, options, registry=CollectorRegistry())


@pytest.fixture
async def controllers(api: ApiClient) -> AsyncIterator[ControllerApp]:
    app = new_app(api)
    await app.start()
    yield app
    await app.stop()


async def hard_equals(kv: KubeVirtByHand, expected: dict[str, str]) -> bool:
    hard = (await kv.quota()).get("spec", {}).get("hard", {})
    return set(hard) == set(expected) and all(
        Quantity.parse(hard[k]) == Quantity.parse(v) for k, v in expected.items()
    )


def migrating_keys(quota: dict[str, Any]) -> list[str]:
    return [
        k
        for k in (quota["metadata"].get("annotations") or {})
        if k.startswith("harvesterhci.io/migrating")
    ]


async def test_a_target_pod_refused_by_quota_is_admitted_once_the_controller_runs(
    api: ApiClient, kv: KubeVirtByHand
) -> None:
    """Seed v1.7.0: a 2-core/4Gi VM fills 89 % of its quota; its migration target is refused
    by the real quota admission until the controller scales the quota, then admitted."""
    await kv.set_rancher_base(V170_LIMIT)
    await kv.create_quota(V170_HARD)
    vmi, _ = await kv.start_vm("vm1")
    migration = await kv.migrate(vmi)
    assert await kv.try_create_target(vmi, migration) is None, "without the controller: refused"

    app = new_app(api)
    await app.start()
    try:
        expected = {
            "limits.cpu": "5015m",
            "limits.memory": str(Quantity.parse("5000Mi") + Quantity.parse("4797464313")),
        }
        await eventually(lambda: hard_equals(kv, expected), what="the scaled quota")
        quota = await kv.quota()
        room = json.loads(quota["metadata"]["annotations"][migrating_vm_annotation_key("vm1")])
        assert room == {"limits.cpu": "2015m", "limits.memory": "4797464313"}
        target = await eventually(
            lambda: kv.try_create_target(vmi, migration), what="the target pod admitted"
        )
        assert (
            target["metadata"]["labels"]["kubevirt.io/migrationJobUID"]
            == migration["metadata"]["uid"]
        )
        vmi_now = await api.get(VIRTUAL_MACHINE_INSTANCES, "vm1", kv.namespace)
        assert (
            vmi_now["metadata"]["annotations"]["harvesterhci.io/migrationState"]
            == "Pending migration"
        )
    finally:
        await app.stop()


async def test_room_is_held_while_the_source_pod_terminates_then_hard_is_exactly_the_base(
    controllers: ControllerApp, kv: KubeVirtByHand
) -> None:
    await kv.set_rancher_base(V170_LIMIT)
    await kv.create_quota(V170_HARD)
    vmi, source = await kv.start_vm("vm1")
    migration = await kv.migrate(vmi)
    target = await eventually(lambda: kv.try_create_target(vmi, migration), what="target admitted")
    await succeed_migration(kv, migration, source, target)
    await kv.delete_pod(source["metadata"]["name"], grace=6)
    await eventually(lambda: caught_up(controllers, kv.namespace), what="controllers caught up")
    quota = await kv.quota()
    assert Quantity.parse(quota["spec"]["hard"]["limits.memory"]) > Quantity.parse("5000Mi"), (
        "the terminating source pod still counts, so the room is still held"
    )
    await eventually(
        lambda: kv.pod_gone(source["metadata"]["name"]), timeout=30, what="source pod gone"
    )
    await eventually(lambda: hard_equals(kv, V170_HARD), what="hard back to exactly the base")
    assert migrating_keys(await kv.quota()) == []
    vmi_now = await kv.api.get(VIRTUAL_MACHINE_INSTANCES, "vm1", kv.namespace)
    assert "harvesterhci.io/migrationState" not in (vmi_now["metadata"].get("annotations") or {})


async def test_rancher_reset_mid_migration_is_restored_and_30_cores_never_become_26(
    controllers: ControllerApp, kv: KubeVirtByHand
) -> None:
    base = {"limits.cpu": "30", "limits.memory": "60Gi"}
    await kv.set_rancher_base({"limitsCpu": "30", "limitsMemory": "60Gi"})
    await kv.create_quota(base)
    vmi, source = await kv.start_vm("vm1", cores=4, memory="8Gi")
    migration = await kv.migrate(vmi)
    scaled = {
        "limits.cpu": "34015m",
        "limits.memory": str(Quantity.parse("60Gi") + Quantity.parse("9018269021")),
    }

    async def scaled_up() -> bool:
        hard = (await kv.quota())["spec"]["hard"]
        return Quantity.parse(hard["limits.cpu"]) == Quantity.parse(scaled["limits.cpu"])

    await eventually(scaled_up, what="scale-up")
    # Rancher's cattle-cluster-agent restarts and resets spec.hard to the annotation's values.
    await kv.api.patch(RESOURCE_QUOTAS, "default-quota", {"spec": {"hard": base}}, kv.namespace)
    await eventually(scaled_up, what="the reset undone")
    target = await eventually(lambda: kv.try_create_target(vmi, migration), what="target admitted")
    await succeed_migration(kv, migration, source, target, walk=False)
    await kv.delete_pod(source["metadata"]["name"], grace=0)
    await eventually(lambda: hard_equals(kv, base), what="exactly 30 cores and 60Gi, never 26")


async def test_four_migrations_at_once_in_a_full_namespace_all_get_their_target_pods(
    controllers: ControllerApp, kv: KubeVirtByHand
) -> None:
    """Seed v1.2.1: four 1-core/2Gi VMs (KubeVirt 0.54 pods of 2372577281 bytes) fill the quota
    exactly; an evacuation migrates all four at once."""
    await kv.create_quota({"limits.cpu": "4", "limits.memory": str(2372577281 * 4)})
    vms = []
    for index in range(1, 5):
        vmi, _ = await kv.start_vm(f"vm{index}", cores=1, memory="2Gi", ratio=None, version="0.54")
        vms.append(vmi)
    controllers.options.kubevirt_version = "0.54"
    migrations = [
        await kv.migrate(vmi, f"kubevirt-evacuation-vm{i}") for i, vmi in enumerate(vms, 1)
    ]
    for vmi, migration in zip(vms, migrations, strict=True):
        await eventually(
            lambda vmi=vmi, migration=migration: kv.try_create_target(
                vmi, migration, ratio=None, version="0.54"
            ),
            what=f"target of {vmi['metadata']['name']} admitted",
        )


async def test_a_75_character_vm_name_migrates_with_a_valid_hashed_key(
    controllers: ControllerApp, kv: KubeVirtByHand
) -> None:
    name = "a-very-long-name-exceeds-the-63-length-and-it-reports-error-in-old-version"
    await kv.set_rancher_base(V170_LIMIT)
    await kv.create_quota(V170_HARD)
    vmi, _ = await kv.start_vm(name)
    migration = await kv.migrate(vmi, "long-name-migration")
    await eventually(lambda: kv.try_create_target(vmi, migration), what="target admitted")
    keys = migrating_keys(await kv.quota())
    assert keys == [migrating_vm_annotation_key(name)]
    assert len(keys[0].split("/", 1)[1]) <= 63


async def test_a_vmi_deleted_mid_migration_leaks_no_room(
    controllers: ControllerApp, kv: KubeVirtByHand
) -> None:
    await kv.set_rancher_base(V170_LIMIT)
    await kv.create_quota(V170_HARD)
    vmi, _ = await kv.start_vm("vm1")
    migration = await kv.migrate(vmi)
    await eventually(lambda: kv.try_create_target(vmi, migration), what="target admitted")
    await kv.api.delete(VIRTUAL_MACHINE_INSTANCES, "vm1", kv.namespace)
    await eventually(lambda: hard_equals(kv, V170_HARD), what="hard back to the base")
    assert migrating_keys(await kv.quota()) == []


async def test_a_vm_restarted_mid_migration_leaks_no_room(
    controllers: ControllerApp, kv: KubeVirtByHand
) -> None:
    await kv.set_rancher_base(V170_LIMIT)
    await kv.create_quota(V170_HARD)
    vmi, source = await kv.start_vm("vm1")
    migration = await kv.migrate(vmi)
    target = await eventually(lambda: kv.try_create_target(vmi, migration), what="target admitted")
    await kv.set_phase(migration, "Running")
    # The VM restarts: its pods go, a new VMI (new uid) comes; the old migration never finishes.
    await kv.api.delete(VIRTUAL_MACHINE_INSTANCES, "vm1", kv.namespace)
    for pod in (source, target):
        await kv.delete_pod(pod["metadata"]["name"], grace=0)
    await eventually(lambda: kv.pod_gone(target["metadata"]["name"]), what="old pods gone")
    # Creation timestamps have one-second resolution: the new VMI must be visibly younger.
    old_created = datetime.datetime.fromisoformat(vmi["metadata"]["creationTimestamp"])
    await eventually(
        lambda: datetime.datetime.now(datetime.UTC) >= old_created + datetime.timedelta(seconds=1),
        what="a new second",
    )
    await kv.start_vm("vm1")
    await eventually(lambda: hard_equals(kv, V170_HARD), what="hard back to the base")
    assert migrating_keys(await kv.quota()) == []


async def test_after_a_ratio_increase_the_vm_migrates_again_and_again(
    controllers: ControllerApp, kv: KubeVirtByHand
) -> None:
    """Seed v1.7.0 test 2: the VM started at ratio 1.5, the ratio went to 4.5; Harvester let the
    first migration through and stuck the second in Pending (5682461313 used of 5000Mi)."""
    await kv.set_rancher_base(V170_LIMIT)
    await kv.create_quota(V170_HARD)
    await kv.set_ratio("1.5")
    vmi, source = await kv.start_vm("vm1")
    try:
        await kv.set_ratio("4.5")
        for round_ in range(2):
            migration = await kv.migrate(vmi, f"vm1-round-{round_}")
            target = await eventually(
                lambda migration=migration, round_=round_: kv.try_create_target(
                    vmi, migration, ratio="4.5", suffix=f"dst{round_}"
                ),
                what=f"target of round {round_} admitted",
            )
            await kv.set_phase(
                migration, "Succeeded", migrationState={"sourcePod": source["metadata"]["name"]}
            )
            await kv.delete_pod(source["metadata"]["name"], grace=0)
            await eventually(
                lambda source=source: kv.pod_gone(source["metadata"]["name"]), what="source gone"
            )
            # The target becomes the VM's pod; relabel it as a plain launcher for the next round.
            await kv.api.patch(
                PODS,
                target["metadata"]["name"],
                {"metadata": {"labels": {"kubevirt.io/migrationJobUID": None}}},
                kv.namespace,
            )
            source = target
            await eventually(lambda: hard_equals(kv, V170_HARD), what="hard back to the base")
        quota = await kv.quota()
        assert Quantity.parse(quota["status"]["used"]["limits.memory"]) == Quantity.parse(
            "5682461313"
        )
    finally:
        await kv.set_ratio("1.5")


async def test_an_isolated_migration_writes_the_quota_exactly_twice(
    controllers: ControllerApp, kv: KubeVirtByHand
) -> None:
    await kv.set_rancher_base(V170_LIMIT)
    await kv.create_quota(V170_HARD)
    vmi, source = await kv.start_vm("vm1")
    await eventually(lambda: caught_up(controllers, kv.namespace), what="controllers caught up")
    before = controllers.reconciler.writes[kv.namespace]
    spec_versions: list[dict[str, str]] = []

    async def watch_spec() -> None:
        async for event in kv.api.watch(RESOURCE_QUOTAS, kv.namespace, resource_version="0"):
            if event.type not in ("ADDED", "MODIFIED"):
                continue
            hard = event.object.get("spec", {}).get("hard", {})
            if not spec_versions or spec_versions[-1] != hard:
                spec_versions.append(hard)

    watcher = asyncio.ensure_future(watch_spec())
    migration = await kv.migrate(vmi)
    target = await eventually(lambda: kv.try_create_target(vmi, migration), what="target admitted")
    for phase in ("Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running"):
        await kv.set_phase(migration, phase)
        await eventually(lambda: caught_up(controllers, kv.namespace), what="phase seen")
    await succeed_migration(kv, migration, source, target, walk=False)
    await kv.delete_pod(source["metadata"]["name"], grace=2)
    await eventually(lambda: hard_equals(kv, V170_HARD), what="hard back to the base")
    await eventually(lambda: caught_up(controllers, kv.namespace), what="controllers caught up")
    watcher.cancel()
    await asyncio.gather(watcher, return_exceptions=True)
    assert controllers.reconciler.writes[kv.namespace] - before == 2
    assert len(spec_versions) == 3, f"base, raised, base: {spec_versions}"


async def test_skip_annotation_returns_the_quota_to_its_base_and_explains_the_block(
    controllers: ControllerApp, kv: KubeVirtByHand
) -> None:
    await kv.set_rancher_base(V170_LIMIT)
    await kv.create_quota(V170_HARD)
    vmi, _ = await kv.start_vm("vm1")
    migration = await kv.migrate(vmi)
    await eventually(
        lambda: hard_equals(kv, {"limits.cpu": "5015m", "limits.memory": "10040344313"}),
        what="scaled",
    )
    patch = {"metadata": {"annotations": {"harvesterhci.io/skipResourceQuotaAutoScaling": "true"}}}
    await kv.api.patch(RESOURCE_QUOTAS, "default-quota", patch, kv.namespace)
    await eventually(lambda: hard_equals(kv, V170_HARD), what="hard back to the base")
    assert migrating_keys(await kv.quota()) == []
    assert await kv.try_create_target(vmi, migration) is None, "refused without the room"
    await kv.set_phase(
        migration,
        "Pending",
        conditions=[{"type": "migrationRejectedByResourceQuota", "status": "True"}],
    )

    async def blocked_event() -> str | None:
        listed = await kv.api.list(EVENTS, kv.namespace)
        for item in listed["items"]:
            if item["reason"] == "MigrationBlockedByQuota":
                return str(item["message"])
        return None

    message = await eventually(blocked_event, what="a Warning event on the blocked migration")
    assert "skipResourceQuotaAutoScaling" in message
    assert "limits.memory: needs 4797464313" in message


async def test_invalid_annotations_leave_the_quota_alone_with_a_warning_event(
    controllers: ControllerApp, kv: KubeVirtByHand
) -> None:
    await kv.create_quota(V170_HARD)
    await kv.set_rancher_base({"limitsCpu": "10000m invalid"})

    async def warning() -> str | None:
        listed = await kv.api.list(EVENTS, kv.namespace)
        for item in listed["items"]:
            if item["reason"] == "QuotaNotScaled":
                return str(item["message"])
        return None

    message = await eventually(warning, what="a Warning event")
    assert "10000m invalid" in message
    assert await hard_equals(kv, V170_HARD)


async def test_standalone_base_is_recorded_and_the_quota_returns_to_it(
    controllers: ControllerApp, kv: KubeVirtByHand
) -> None:
    await kv.create_quota(V170_HARD)

    async def recorded() -> bool:
        return "harvester-quota.io/base" in (
            (await kv.quota())["metadata"].get("annotations") or {}
        )

    await eventually(recorded, what="the base recorded")
    vmi, source = await kv.start_vm("vm1")
    migration = await kv.migrate(vmi)
    target = await eventually(lambda: kv.try_create_target(vmi, migration), what="target admitted")
    await succeed_migration(kv, migration, source, target, walk=False)
    await kv.delete_pod(source["metadata"]["name"], grace=0)
    await eventually(lambda: hard_equals(kv, V170_HARD), what="hard back to the recorded base")
    annotations = (await kv.quota())["metadata"]["annotations"]
    assert json.loads(annotations["harvester-quota.io/base"]) == {
        "limits.cpu": "3",
        "limits.memory": "5000Mi",
    }
    assert "harvester-quota.io/applied" not in annotations


async def test_a_quota_write_never_overwrites_an_edit_made_after_the_plan(
    controllers: ControllerApp, kv: KubeVirtByHand
) -> None:
    """The write carries the resourceVersion it was planned from: a user's edit in between is
    kept (Conflict), and the namespace is planned again from it."""
    await kv.set_rancher_base(V170_LIMIT)
    await kv.create_quota(V170_HARD)
    await eventually(lambda: caught_up(controllers, kv.namespace), what="controllers caught up")
    planned_from = await kv.quota()
    # A key outside the base: the controller passes it through, so only our stale write could
    # change it.
    user_edit = {"spec": {"hard": {"pods": "20"}}}
    await kv.api.patch(RESOURCE_QUOTAS, planned_from["metadata"]["name"], user_edit, kv.namespace)
    stale_patch = {"spec": {"hard": {"pods": "11"}}}
    plan = plan_quota(
        controllers.reconciler.snapshot(
            await kv.api.get(NAMESPACES, kv.namespace), planned_from, [planned_from]
        )
    )
    with pytest.raises(errors.Conflict):
        await controllers.reconciler._write(planned_from, stale_patch, plan)
    await eventually(lambda: caught_up(controllers, kv.namespace), what="controllers caught up")
    assert (await kv.quota())["spec"]["hard"]["pods"] == "20"


async def test_a_raise_is_in_status_hard_when_the_write_returns(
    controllers: ControllerApp, kv: KubeVirtByHand
) -> None:
    """Quota admission reads status.hard: the controller copies its spec.hard there itself
    instead of leaving a target pod to meet the old value until kube-controller-manager copies
    it. (If kube-controller-manager was quicker, the stored quota already has it.)"""
    quota = await kv.create_quota(V170_HARD)
    name = quota["metadata"]["name"]
    raised = await kv.api.patch(
        RESOURCE_QUOTAS, name, {"spec": {"hard": {"limits.cpu": "9"}}}, kv.namespace
    )
    assert raised["status"].get("hard", {}).get("limits.cpu") != "9", "the spec write alone"
    published = await controllers.reconciler._publish_hard(raised)
    assert published["status"]["hard"]["limits.cpu"] == "9"


async def cpu_raised(kv: KubeVirtByHand) -> bool:
    hard = (await kv.quota())["spec"]["hard"]
    return Quantity.parse(hard["limits.cpu"]) > Quantity.parse(V170_HARD["limits.cpu"])
