"""The quota controllers beside KubeVirt's own virt-controller: every migration here is created,
throttled, refused, retried and completed by the real virt-controller (the virt-handler stand-in
does the node side), and real quota admission decides every target pod.

test_controllers.py keeps what no migration of the real virt-controller can produce: a source pod
that terminates with a grace period instead of exiting (KubeVirt 0.54, the v1.2.1 seed), and the
writer's own contracts, which need no migration.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from harvester_quota.apis.kubevirt import (
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
    VIRTUAL_MACHINE_INSTANCES,
)
from harvester_quota.app import ControllerApp
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import (
    EVENTS,
    LIMIT_RANGES,
    NAMESPACES,
    PODS,
    RESOURCE_QUOTAS,
    Object,
)
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.sim.kubevirt import Outcome, ParallelLimits, VMSpec
from harvester_quota.testbench.sim.kubevirt.handler import HandlerTimings
from harvester_quota.testbench.sim.kubevirt.simulator import set_overhead_ratio_setting
from harvester_quota.testbench.virtcontroller import VirtControllerDriver
from harvester_quota.util.annotations import LABEL_PAUSED, migrating_vm_annotation_key
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.resourcequota.plan import PAUSED_HERE

from tests.helpers import caught_up, eventually
from tests.integration.kubevirt_by_hand import KubeVirtByHand
from tests.integration.test_controllers import new_app

pytestmark = pytest.mark.integration

V170_LIMIT = {"limitsCpu": "3000m", "limitsMemory": "5000Mi"}
V170_HARD = {"limits.cpu": "3", "limits.memory": "5000Mi"}
# What a 2-core/4Gi VM's launcher pod uses at ratio 1.5 under KubeVirt 1.6 (the v1.7.0 seed).
V170_ROOM = {"limits.cpu": "2015m", "limits.memory": "4797464313"}
# A migration the stand-in keeps running until the test has done what it does mid-migration.
LONG = 120.0
MIGRATION_TIMEOUT = 90.0
REFUSAL_TIMEOUT = 120.0
"""How long virt-controller may take to be refused a target pod: seconds on an idle machine,
much more while something else loads the CPU (failed at 60 s beside a full-size scale run)."""


@pytest.fixture
def kv(kubevirt_api: ApiClient, kubevirt_namespace: str) -> KubeVirtByHand:
    """Only KubeVirtByHand's quota and Rancher helpers: nothing is played by hand here."""
    return KubeVirtByHand(kubevirt_api, kubevirt_namespace)


@pytest.fixture
async def kubevirt(
    kubevirt_api: ApiClient, kubevirt_cluster: ClusterInfo, kubevirt_namespace: str
) -> AsyncIterator[VirtControllerDriver]:
    """KubeVirt v1.6's virt-controller for this test's namespace, at Harvester's ratio 1.5, with
    room for four migrations at once from one node."""
    driver = VirtControllerDriver(
        kubevirt_api,
        kubevirt_version=str(kubevirt_cluster.kubevirt_version),
        namespaces=frozenset({kubevirt_namespace}),
        timings=HandlerTimings(migration=0.5, source_shutdown=1.0, target_exit=0.5),
        limits=ParallelLimits(8, 4),
    )
    async with driver:
        await set_ratio(driver, "1.5")
        yield driver
    await set_overhead_ratio_setting(kubevirt_api, "1.5")


@pytest.fixture
async def controllers(kubevirt_api: ApiClient) -> AsyncIterator[ControllerApp]:
    app = new_app(kubevirt_api)
    await app.start()
    yield app
    await app.stop()


async def set_ratio(kubevirt: VirtControllerDriver, value: str) -> None:
    """Harvester's setting, and the KubeVirt CR that Harvester copies it into."""
    await set_overhead_ratio_setting(kubevirt.client, value)
    await kubevirt.set_ratio(value)


async def hard_equals(kv: KubeVirtByHand, expected: dict[str, str]) -> bool:
    hard = (await kv.quota()).get("spec", {}).get("hard", {})
    return set(hard) == set(expected) and all(
        Quantity.parse(hard[k]) == Quantity.parse(v) for k, v in expected.items()
    )


def migrating_keys(quota: Object) -> list[str]:
    return [
        k
        for k in (quota["metadata"].get("annotations") or {})
        if k.startswith("harvesterhci.io/migrating")
    ]


async def v170_namespace(
    kv: KubeVirtByHand, kubevirt: VirtControllerDriver, name: str = "vm1"
) -> None:
    """The v1.7.0 seed's namespace: Rancher's base 3 CPU / 5000Mi, a quota at it, and a 2-core/4Gi
    VM running in it (89 % of the memory)."""
    await kv.set_rancher_base(V170_LIMIT)
    await kv.create_quota(V170_HARD)
    (await kubevirt.create_vm(VMSpec(name, cores=2, memory="4Gi"), node="kwok-node-0")).check()


async def v170_mid_migration(
    kv: KubeVirtByHand, kubevirt: VirtControllerDriver, *, name: str = "vm1", grace: int = 120
) -> str:
    """The v1.7.0 seed's namespace with its VM `name` (launcher pods deleted with `grace`) in a
    migration that the stand-in keeps running; returns the migration's name once it runs."""
    await kv.set_rancher_base(V170_LIMIT)
    await kv.create_quota(V170_HARD)
    spec = VMSpec(
        name,
        cores=2,
        memory="4Gi",
        migration_duration=LONG,
        termination_grace_period_seconds=grace,
    )
    (await kubevirt.create_vm(spec, node="kwok-node-0")).check()
    migration = await kubevirt.migrate(name)
    await kubevirt.records.wait_for(lambda: started(kubevirt, kv.namespace, migration), 60)
    return migration


async def back_to_the_base(kv: KubeVirtByHand, app: ControllerApp | None = None) -> None:
    """Hard is exactly the base again and no room annotation is left; a timeout shows the quota,
    the pods and the migrations as they were (and as `app` caches them)."""
    try:
        await eventually(lambda: hard_equals(kv, V170_HARD), what="hard back to the base")
    except AssertionError as timed_out:
        cached = "" if app is None else cache_state(app, kv.namespace)
        raise AssertionError(f"{timed_out}\n{await namespace_state(kv)}\n{cached}") from None
    assert migrating_keys(await kv.quota()) == []


def cache_state(app: ControllerApp, namespace: str) -> str:
    """What the controller's caches hold of the namespace, and its reflectors' recent waits."""
    lines = []
    for informer in app.management.informers.informers:
        if not informer.store.has_index("namespace"):
            continue
        items = informer.store.by_index("namespace", namespace)
        summary = [
            f"{metadata['name']}@{metadata.get('resourceVersion')}"
            f"/{(item.get('status') or {}).get('phase')}"
            for item in items
            for metadata in [item["metadata"]]
        ]
        waits = [(round(w.seconds, 1), w.asked) for w in informer.reflector.waits]
        lines.append(f"cache {informer.name}: {summary} waits={waits}")
    return "\n".join(lines)


async def namespace_state(kv: KubeVirtByHand) -> str:
    """The quota, pods and migrations of the test's namespace, for a failure message."""
    quota = await kv.quota()
    pods = (await kv.api.list(PODS, kv.namespace))["items"]
    migrations = (await kv.api.list(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, kv.namespace))["items"]
    lines = [
        f"quota spec.hard={quota['spec'].get('hard')} status={quota.get('status')}",
        f"quota annotations={quota['metadata'].get('annotations')}",
    ]
    lines += [
        f"pod {p['metadata']['name']} phase={p['status'].get('phase')} "
        f"deleting={p['metadata'].get('deletionTimestamp')}"
        for p in pods
    ]
    lines += [
        f"migration {m['metadata']['name']} phase={(m.get('status') or {}).get('phase')} "
        f"deleting={m['metadata'].get('deletionTimestamp')}"
        for m in migrations
    ]
    return "\n".join(lines)


class SpecHistory:
    """Every distinct spec.hard and every room annotation of the namespace's quotas, from a watch
    of our own (the controller's bookkeeping is not evidence)."""

    def __init__(self, api: ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.hards: list[dict[str, str]] = []
        self.rooms: list[dict[str, str]] = []
        self._task: asyncio.Task[None] | None = None
        self._seen_first = asyncio.Event()

    async def _watch(self) -> None:
        async for event in self.api.watch(RESOURCE_QUOTAS, self.namespace, resource_version="0"):
            if event.type not in ("ADDED", "MODIFIED"):
                continue
            self._seen_first.set()
            hard = event.object.get("spec", {}).get("hard", {})
            if not self.hards or self.hards[-1] != hard:
                self.hards.append(hard)
            annotations = event.object["metadata"].get("annotations") or {}
            self.rooms += [
                json.loads(v)
                for k, v in annotations.items()
                if k == migrating_vm_annotation_key("vm1")
            ]

    async def __aenter__(self) -> SpecHistory:
        """Returns once the watch has shown the quota as it is now: a history that began after
        the raise (a loaded machine) would miss the base it started from."""
        self._task = asyncio.ensure_future(self._watch())
        await asyncio.wait_for(self._seen_first.wait(), timeout=60)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


async def test_a_migration_refused_by_quota_goes_through_once_the_controller_runs(
    kubevirt_api: ApiClient, kv: KubeVirtByHand, kubevirt: VirtControllerDriver
) -> None:
    """Seed v1.7.0: without the controller virt-controller's target pod is refused (FailedCreate
    on the VMI); once the controller runs it raises hard by the VM's launcher usage, virt-
    controller's retry on that quota update is admitted, and hard returns to exactly the base."""
    await v170_namespace(kv, kubevirt)
    name = await kubevirt.migrate("vm1")
    await wait_refused(kubevirt, kv.namespace, name)
    record = kubevirt.records.get(kv.namespace, name)
    assert record is not None and record.admitted is None, "refused without the controller"

    app = new_app(kubevirt_api, harvester_annotations=True)  # their clearing, checked below
    async with SpecHistory(kubevirt_api, kv.namespace) as history:
        await app.start()
        try:
            record = await kubevirt.wait_migration(name, timeout=MIGRATION_TIMEOUT)
            assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
            await back_to_the_base(kv)
            vmi = await kubevirt_api.get(VIRTUAL_MACHINE_INSTANCES, "vm1", kv.namespace)
            annotations = vmi["metadata"].get("annotations") or {}
            assert "harvesterhci.io/migrationState" not in annotations
        finally:
            await app.stop()
    assert history.rooms and all(room == V170_ROOM for room in history.rooms), history.rooms
    raised = {"limits.cpu": "5015m", "limits.memory": str(5242880000 + 4797464313)}
    assert any(as_quantities(h) == as_quantities(raised) for h in history.hards), history.hards


def as_quantities(values: dict[str, str]) -> dict[str, Quantity]:
    return {k: Quantity.parse(str(v)) for k, v in values.items()}


async def wait_refused(kubevirt: VirtControllerDriver, namespace: str, name: str) -> None:
    """Waits until KubeVirt reported `name`'s target pod refused by quota: its FailedCreate event
    or the VMIM's condition, whichever the test's caches show first. Fails with the record."""

    def refused() -> bool:
        record = kubevirt.records.get(namespace, name)
        return record is not None and record.first_refused is not None

    if not await kubevirt.records.wait_for(refused, REFUSAL_TIMEOUT):
        record = kubevirt.records.get(namespace, name)
        shown = "no record" if record is None else record.as_dict()
        raise AssertionError(f"{name} not refused by quota in {REFUSAL_TIMEOUT:.0f} s: {shown}")


def refusals(kubevirt: VirtControllerDriver, namespace: str, name: str) -> int:
    record = kubevirt.records.get(namespace, name)
    return 0 if record is None else record.refusals


def started(kubevirt: VirtControllerDriver, namespace: str, name: str) -> bool:
    record = kubevirt.records.get(namespace, name)
    return record is not None and record.started is not None


async def test_an_isolated_migration_writes_the_quota_exactly_twice(
    controllers: ControllerApp, kv: KubeVirtByHand, kubevirt: VirtControllerDriver
) -> None:
    """Up when the migration appears, down when its source pod has exited: base, raised, base,
    whatever virt-controller's phases and retries in between."""
    await v170_namespace(kv, kubevirt)
    await eventually(lambda: caught_up(controllers, kv.namespace), what="controllers caught up")
    before = controllers.reconciler.writes[kv.namespace]
    async with SpecHistory(kv.api, kv.namespace) as history:
        record = await kubevirt.wait_migration(
            await kubevirt.migrate("vm1"), timeout=MIGRATION_TIMEOUT
        )
        assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
        await back_to_the_base(kv)
        await eventually(lambda: caught_up(controllers, kv.namespace), what="caught up")
    assert controllers.reconciler.writes[kv.namespace] - before == 2
    assert len(history.hards) == 3, f"base, raised, base: {history.hards}"


async def test_a_limit_range_default_is_part_of_the_room(
    controllers: ControllerApp, kv: KubeVirtByHand, kubevirt: VirtControllerDriver
) -> None:
    """The namespace's LimitRange gives every launcher container a default ephemeral-storage
    limit KubeVirt never sets, and the managed quota limits that key to what vm1 uses. The room
    includes the default, as admission will charge it: the target pod gets in and the quota
    returns to its base. (Sized without the default, the raise left that key at the base and the
    target pod was refused on it for good.)"""
    key = "limits.ephemeral-storage"
    default = {"type": "Container", "default": {"ephemeral-storage": "1Gi"}}
    limit_range = {"metadata": {"name": "defaults"}, "spec": {"limits": [default]}}
    await kv.api.create(LIMIT_RANGES, limit_range, kv.namespace)
    await kv.create_quota({**V170_HARD, key: "1000Gi"})
    (await kubevirt.create_vm(VMSpec("vm1", cores=2, memory="4Gi"), node="kwok-node-0")).check()

    async def used() -> str | None:
        quota = await kv.quota()
        value = ((quota.get("status") or {}).get("used") or {}).get(key)
        return str(value) if value and Quantity.parse(str(value)).sign() > 0 else None

    in_use = await eventually(used, what=f"{key} used, from the LimitRange alone")
    base = {**V170_HARD, key: in_use}
    await kv.api.patch(RESOURCE_QUOTAS, "default-quota", {"spec": {"hard": base}}, kv.namespace)
    await eventually(lambda: caught_up(controllers, kv.namespace), what="the base recorded")
    async with SpecHistory(kv.api, kv.namespace) as history:
        record = await kubevirt.wait_migration(
            await kubevirt.migrate("vm1"), timeout=MIGRATION_TIMEOUT
        )
        assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
        await eventually(lambda: hard_equals(kv, base), what="hard back to the base")
    doubled = Quantity.parse(in_use) * 2
    raised = [h for h in history.hards if Quantity.parse(h.get(key, "0")) == doubled]
    assert raised, f"no raise of {key} by the LimitRange's default: {history.hards}"


async def test_rancher_reset_mid_migration_is_restored_and_30_cores_never_become_26(
    controllers: ControllerApp, kv: KubeVirtByHand, kubevirt: VirtControllerDriver
) -> None:
    """Rancher's agent resets spec.hard to its annotation while a migration runs: the room is
    put back, and after the migration hard is exactly Rancher's 30 cores (Harvester's bug left
    26)."""
    base = {"limits.cpu": "30", "limits.memory": "60Gi"}
    await kv.set_rancher_base({"limitsCpu": "30", "limitsMemory": "60Gi"})
    await kv.create_quota(base)
    spec = VMSpec("vm1", cores=4, memory="8Gi", migration_duration=LONG)
    (await kubevirt.create_vm(spec, node="kwok-node-0")).check()
    name = await kubevirt.migrate("vm1")
    await kubevirt.records.wait_for(lambda: started(kubevirt, kv.namespace, name), 60)
    scaled = Quantity.parse("34015m")

    async def scaled_up() -> bool:
        hard = (await kv.quota())["spec"]["hard"]
        return Quantity.parse(hard["limits.cpu"]) == scaled

    assert await scaled_up(), "the room is held while the migration runs"
    await kv.api.patch(RESOURCE_QUOTAS, "default-quota", {"spec": {"hard": base}}, kv.namespace)
    await eventually(scaled_up, what="the reset undone")
    await kubevirt.abort(name)
    record = await kubevirt.wait_migration(name, timeout=MIGRATION_TIMEOUT)
    assert record.outcome is Outcome.ABORTED, record.as_dict()
    await eventually(lambda: hard_equals(kv, base), what="exactly 30 cores and 60Gi, never 26")
    assert migrating_keys(await kv.quota()) == []


async def test_four_migrations_at_once_in_a_full_namespace_all_complete(
    controllers: ControllerApp, kv: KubeVirtByHand, kubevirt: VirtControllerDriver
) -> None:
    """Seed v1.2.1's shape on KubeVirt 1.6: four 1-core/2Gi VMs fill the quota exactly and all
    four migrate at once; every target pod gets in and hard returns to exactly the base."""
    vms = [f"vm{i}" for i in range(1, 5)]
    for vm in vms:
        (await kubevirt.create_vm(VMSpec(vm, cores=1, memory="2Gi"), node="kwok-node-0")).check()
    used = await quota_used_by_pods(kv)
    await kv.create_quota(used)
    names = [await kubevirt.migrate(vm) for vm in vms]
    records = [await kubevirt.wait_migration(n, timeout=MIGRATION_TIMEOUT) for n in names]
    assert [r.outcome for r in records] == [Outcome.SUCCEEDED] * 4, [r.as_dict() for r in records]
    await eventually(lambda: hard_equals(kv, used), what="hard back to the base")
    assert migrating_keys(await kv.quota()) == []


async def quota_used_by_pods(kv: KubeVirtByHand) -> dict[str, str]:
    """What the namespace's running pods use, measured by an unlabelled quota (kube-controller-
    manager's count, not ours), which is then deleted."""
    probe = {
        "metadata": {"name": "probe"},
        "spec": {"hard": {"limits.cpu": "1000", "limits.memory": "1000Ti"}},
    }
    await kv.api.create(RESOURCE_QUOTAS, probe, kv.namespace)

    async def counted() -> dict[str, str] | None:
        status = (await kv.api.get(RESOURCE_QUOTAS, "probe", kv.namespace)).get("status") or {}
        return status.get("used")

    used = await eventually(counted, what="the probe quota's count")
    await kv.api.delete(RESOURCE_QUOTAS, "probe", kv.namespace)
    return dict(used)


async def test_a_61_character_vm_name_migrates_with_a_valid_hashed_key(
    controllers: ControllerApp, kv: KubeVirtByHand, kubevirt: VirtControllerDriver
) -> None:
    """The longest name KubeVirt can migrate (its label values stop at 63) still makes an
    annotation key over 63 characters: it is hashed to a valid one, and removed afterwards."""
    name = "a-vm-name-of-sixty-one-characters-that-kubevirt-can-migrate-x"
    assert len(name) == 61
    migration = await v170_mid_migration(kv, kubevirt, name=name)
    keys = migrating_keys(await kv.quota())
    assert keys == [migrating_vm_annotation_key(name)]
    assert len(keys[0].split("/", 1)[1]) <= 63
    await kubevirt.abort(migration)
    await kubevirt.wait_migration(migration, timeout=MIGRATION_TIMEOUT)
    await back_to_the_base(kv)


async def test_a_vmi_deleted_mid_migration_leaks_no_room(
    controllers: ControllerApp, kv: KubeVirtByHand, kubevirt: VirtControllerDriver
) -> None:
    """Both launcher pods are deleted with the VMI; the migration fails and its room goes once
    the launchers have exited. The VMI's grace period is 0 here, so that the test need not wait
    out its shutdown, during which the pods still count and the room stays (their deletion, the
    grace KubeVirt pads by 30 s, goes on after: its end is no part of what is tested)."""
    await v170_mid_migration(kv, kubevirt, grace=0)
    await kubevirt.delete_vmi("vm1")
    await back_to_the_base(kv, controllers)


async def test_a_vm_restarted_mid_migration_leaks_no_room(
    controllers: ControllerApp, kv: KubeVirtByHand, kubevirt: VirtControllerDriver
) -> None:
    """The VM restarts while migrating: the old VMI and its migration go, a new VMI (new uid)
    starts; nothing of the old migration's room is left. (A grace period of 0, as above.)"""
    await v170_mid_migration(kv, kubevirt, grace=0)
    old_uid = (await kv.api.get(VIRTUAL_MACHINE_INSTANCES, "vm1", kv.namespace))["metadata"]["uid"]
    await kubevirt.stop_vm("vm1")
    # The start waits for two things. The old VMI must be gone: a VM set running again while its
    # old VMI still terminates records the new run strategy as seen, and virt-controller then
    # never starts it (CI saw that). And kube-controller-manager must have recounted the old
    # launcher pods: quota admission refuses the new one until then (CI saw that once too;
    # virt-controller would retry, the stand-in's start reports the first refusal).
    await eventually(lambda: vmi_gone(kv, "vm1"), timeout=90, what="the old VMI gone")
    await eventually(lambda: nothing_used(kv), timeout=60, what="the old launcher pods recounted")
    started = (await kubevirt.start_vm("vm1")).check()
    assert started.vmi_uid != old_uid, "a new VMI, as a restart makes"
    await back_to_the_base(kv)


async def vmi_gone(kv: KubeVirtByHand, name: str) -> bool:
    try:
        await kv.api.get(VIRTUAL_MACHINE_INSTANCES, name, kv.namespace)
    except errors.NotFound:
        return True
    return False


async def nothing_used(kv: KubeVirtByHand) -> bool:
    used = ((await kv.quota()).get("status") or {}).get("used") or {}
    return all(Quantity.parse(str(v)).sign() == 0 for v in used.values())


async def test_after_a_ratio_increase_the_vm_migrates_again_and_again(
    controllers: ControllerApp, kv: KubeVirtByHand, kubevirt: VirtControllerDriver
) -> None:
    """Seed v1.7.0 test 2: the VM started at ratio 1.5 and the ratio went to 4.5; Harvester let the
    first migration through and stuck the second in Pending. Here both complete and the VM ends
    at the seed's 5682461313 bytes, over its 5000Mi base, with hard back at the base."""
    await v170_namespace(kv, kubevirt)
    await set_ratio(kubevirt, "4.5")
    for _ in range(2):
        record = await kubevirt.wait_migration(
            await kubevirt.migrate("vm1"), timeout=MIGRATION_TIMEOUT
        )
        assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
        await back_to_the_base(kv)

    async def seed_usage() -> bool:
        used = (await kv.quota())["status"]["used"]
        return Quantity.parse(used["limits.memory"]) == Quantity.parse("5682461313")

    await eventually(seed_usage, what="the VM at the seed's 5682461313 bytes")

    async def above_base_event() -> str | None:
        listed = await kv.api.list(EVENTS, kv.namespace)
        for item in listed["items"]:
            if item["reason"] == "UsageAboveBase" and item["type"] == "Warning":
                return str(item["message"])
        return None

    message = await eventually(above_base_event, what="a Warning: the namespace is over its base")
    assert "limits.memory 5682461313 used of 5000Mi (+439581313)" in message, message


async def test_skip_annotation_returns_the_quota_to_its_base_and_explains_the_block(
    controllers: ControllerApp, kv: KubeVirtByHand, kubevirt: VirtControllerDriver
) -> None:
    """With skipResourceQuotaAutoScaling the quota stays at its base, virt-controller's target
    pod is refused and flagged on the migration, and a Warning event says why and by how much;
    removing the annotation lets the migration through."""
    await kv.set_rancher_base(V170_LIMIT)
    await kv.create_quota(V170_HARD)
    skip = {"metadata": {"annotations": {"harvesterhci.io/skipResourceQuotaAutoScaling": "true"}}}
    await kv.api.patch(RESOURCE_QUOTAS, "default-quota", skip, kv.namespace)
    (await kubevirt.create_vm(VMSpec("vm1", cores=2, memory="4Gi"), node="kwok-node-0")).check()
    name = await kubevirt.migrate("vm1")
    message = await eventually(
        lambda: blocked_event(kv), timeout=60, what="a Warning event on the blocked migration"
    )
    assert "skipResourceQuotaAutoScaling" in message
    assert "limits.memory: needs 4797464313" in message
    assert await hard_equals(kv, V170_HARD)
    assert await rejected_by_quota(kv, name), "virt-controller flagged the migration"
    unskip = {"metadata": {"annotations": {"harvesterhci.io/skipResourceQuotaAutoScaling": None}}}
    await kv.api.patch(RESOURCE_QUOTAS, "default-quota", unskip, kv.namespace)
    record = await kubevirt.wait_migration(name, timeout=MIGRATION_TIMEOUT)
    assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
    await back_to_the_base(kv)


async def test_the_opt_out_label_gives_a_held_room_back_and_blocks_like_the_skip_annotation(
    controllers: ControllerApp, kv: KubeVirtByHand, kubevirt: VirtControllerDriver
) -> None:
    """An administrator labels the namespace harvester-quota.io/paused=true: the quota stays at
    its base, virt-controller's target pod is refused, the Warning event says the namespace is
    paused and the metric counts it; removing the label lets the migration through."""
    await kv.set_rancher_base(V170_LIMIT)
    await kv.create_quota(V170_HARD)
    await label_paused(kv, "true")
    (await kubevirt.create_vm(VMSpec("vm1", cores=2, memory="4Gi"), node="kwok-node-0")).check()
    name = await kubevirt.migrate("vm1")
    message = await eventually(
        lambda: blocked_event(kv), timeout=60, what="a Warning event on the blocked migration"
    )
    assert PAUSED_HERE in message
    assert await hard_equals(kv, V170_HARD)
    gauge = "harvester_quota_namespace_paused"
    assert controllers.registry.get_sample_value(gauge, {"namespace": kv.namespace}) == 1
    await label_paused(kv, None)
    record = await kubevirt.wait_migration(name, timeout=MIGRATION_TIMEOUT)
    assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
    await back_to_the_base(kv)


async def label_paused(kv: KubeVirtByHand, value: str | None) -> None:
    """The administrator sets (or, None, removes) the namespace's opt-out label."""
    patch = {"metadata": {"labels": {LABEL_PAUSED: value}}}
    await kv.api.patch(NAMESPACES, kv.namespace, patch)


async def blocked_event(kv: KubeVirtByHand) -> str | None:
    listed = await kv.api.list(EVENTS, kv.namespace)
    for item in listed["items"]:
        if item["reason"] == "MigrationBlockedByQuota":
            return str(item["message"])
    return None


async def rejected_by_quota(kv: KubeVirtByHand, name: str) -> bool:
    migration = await kv.api.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, name, kv.namespace)
    conditions: list[dict[str, Any]] = (migration.get("status") or {}).get("conditions") or []
    return any(
        c.get("type") == "migrationRejectedByResourceQuota" and c.get("status") == "True"
        for c in conditions
    )


async def test_standalone_base_is_recorded_and_the_quota_returns_to_it(
    controllers: ControllerApp, kv: KubeVirtByHand, kubevirt: VirtControllerDriver
) -> None:
    """No Rancher: the quota's own spec.hard is recorded as its base before the first raise, and
    the quota returns to it, with nothing of ours left but that record."""
    await kv.create_quota(V170_HARD)

    async def recorded() -> bool:
        return "harvester-quota.io/base" in (
            (await kv.quota())["metadata"].get("annotations") or {}
        )

    await eventually(recorded, what="the base recorded")
    (await kubevirt.create_vm(VMSpec("vm1", cores=2, memory="4Gi"), node="kwok-node-0")).check()
    record = await kubevirt.wait_migration(await kubevirt.migrate("vm1"), timeout=MIGRATION_TIMEOUT)
    assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
    await back_to_the_base(kv)
    annotations = (await kv.quota())["metadata"]["annotations"]
    assert json.loads(annotations["harvester-quota.io/base"]) == {
        "limits.cpu": "3",
        "limits.memory": "5000Mi",
    }
    assert "harvester-quota.io/applied" not in annotations


async def test_a_deleted_namespace_quota_during_a_migration_is_not_recreated(
    controllers: ControllerApp, kv: KubeVirtByHand, kubevirt: VirtControllerDriver
) -> None:
    """An administrator deletes the quota while a migration holds room in it: the migration
    completes and the controller does not bring the quota back (it owns rooms, not quotas)."""
    await v170_namespace(kv, kubevirt)
    spec_name = await kubevirt.migrate("vm1")
    await kubevirt.records.wait_for(lambda: started(kubevirt, kv.namespace, spec_name), 60)
    await kv.api.delete(RESOURCE_QUOTAS, "default-quota", kv.namespace)
    record = await kubevirt.wait_migration(spec_name, timeout=MIGRATION_TIMEOUT)
    assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
    await eventually(lambda: caught_up(controllers, kv.namespace), what="caught up")
    with pytest.raises(errors.NotFound):
        await kv.quota()
