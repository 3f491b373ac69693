"""Harvester's migration annotations are patched once per change, even while the VMI cache lags.

During a migration the VMI changes many times a second, and the VMIM controller re-processes the
migration on each phase change: judged from a cache that has not seen our patch yet, it sent the
same annotations again and touched the VM again (8 of each per migration in a 100-migration
drain). `VmiAnnotator` compares with the VMI our own patch returned (the VMIs' pending writes) until the
cache catches up.
"""

from __future__ import annotations

import asyncio
import copy
from types import SimpleNamespace
from typing import Any, cast

import pytest
from harvester_quota.apis.kubevirt import VIRTUAL_MACHINE_INSTANCES, VIRTUAL_MACHINES
from harvester_quota.config.management import Management
from harvester_quota.controller.migration.common import QUOTA_FIRST_SECONDS, VmiAnnotator
from harvester_quota.controller.migration.vmim_controller import VmimController, migration_state
from harvester_quota.generic.pendingwrites import PendingWrites
from harvester_quota.generic.store import Store
from harvester_quota.testbench.clock import FakeClock, settle
from harvester_quota.util.annotations import ANNOTATION_MIGRATION_STATE, ANNOTATION_MIGRATION_UID


class PatchingClient:
    """Applies annotation merge patches to one VMI, bumping its resourceVersion."""

    def __init__(self, vmi: dict[str, Any]) -> None:
        self.vmi = vmi
        self.patches: list[tuple[str, dict[str, Any]]] = []

    async def patch(self, resource: Any, name: str, body: dict[str, Any], namespace: str) -> Any:
        self.patches.append((resource.plural, body))
        if resource is not VIRTUAL_MACHINE_INSTANCES:
            return {}
        annotations = self.vmi["metadata"].setdefault("annotations", {})
        for key, value in body["metadata"]["annotations"].items():
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value
        version = int(self.vmi["metadata"]["resourceVersion"]) + 1
        self.vmi["metadata"]["resourceVersion"] = str(version)
        return copy.deepcopy(self.vmi)


def fresh_pending() -> PendingWrites:
    """The VMIs' pending writes of a process that has written none yet."""
    return PendingWrites(Store())


def vmi(version: int = 10, **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "vm",
            "namespace": "ns",
            "uid": "vmi-uid",
            "resourceVersion": str(version),
            "annotations": dict(annotations),
        }
    }


def annotator(server_vmi: dict[str, Any]) -> tuple[VmiAnnotator, PatchingClient]:
    client = PatchingClient(server_vmi)
    management = SimpleNamespace(client=client, clock=FakeClock())
    return VmiAnnotator(cast(Management, management), pending=fresh_pending()), client


MIGRATING = {ANNOTATION_MIGRATION_UID: "mig-1", ANNOTATION_MIGRATION_STATE: "Migrating"}


async def test_the_same_change_is_sent_once_while_the_cache_shows_the_vmi_before_it() -> None:
    stale = vmi()
    writer, client = annotator(copy.deepcopy(stale))
    for _ in range(4):  # four VMIM phase changes before the VMI cache catches up
        await writer.set(stale, MIGRATING)
    plurals = [plural for plural, _ in client.patches]
    assert plurals == [VIRTUAL_MACHINE_INSTANCES.plural, VIRTUAL_MACHINES.plural]


async def test_a_new_change_is_sent_even_while_the_cache_lags() -> None:
    stale = vmi()
    writer, client = annotator(copy.deepcopy(stale))
    await writer.set(stale, MIGRATING)
    await writer.set(stale, dict.fromkeys(MIGRATING))
    vmi_patches = [body for plural, body in client.patches if plural == "virtualmachineinstances"]
    assert [p["metadata"]["annotations"] for p in vmi_patches] == [
        MIGRATING,
        dict.fromkeys(MIGRATING),
    ]


async def test_once_the_cache_caught_up_it_is_the_authority_again() -> None:
    """Someone else removed the annotations after our write: the cache (newer than our write)
    says so, and they are written again."""
    writer, client = annotator(vmi())
    await writer.set(vmi(), MIGRATING)
    removed_by_someone = vmi(version=20)
    await writer.set(removed_by_someone, MIGRATING)
    vmi_patches = [p for plural, p in client.patches if plural == "virtualmachineinstances"]
    assert len(vmi_patches) == 2


class VmiCache:
    def __init__(self, cached: dict[str, Any]) -> None:
        self.vmi = cached

    def cached(self, namespace: str, name: str) -> dict[str, Any]:
        return self.vmi


def running_migration(uid: str = "mig-1") -> dict[str, Any]:
    return {
        "metadata": {"name": "m", "namespace": "ns", "uid": uid},
        "spec": {"vmiName": "vm"},
        "status": {"phase": "Running"},
    }


async def test_a_late_running_event_does_not_annotate_a_vmi_that_shows_the_migration_done() -> None:
    """The VMIM cache lags behind the VMI cache: the VMI controller has removed the annotations
    of a completed migration; the VMIM controller then sees the migration still Running. It must
    not put them back (a ping-pong of 4 extra patches per migration under load)."""
    completed = vmi(version=30)
    completed["status"] = {"migrationState": {"migrationUid": "mig-1", "completed": True}}
    writer, client = annotator(copy.deepcopy(completed))
    management = SimpleNamespace(
        client=client,
        clock=FakeClock(),
        kubevirt=SimpleNamespace(
            virtual_machine_instance_migrations=lambda: None,
            virtual_machine_instances=lambda: VmiCache(completed),
        ),
    )
    controller = VmimController(cast(Management, management), writer)
    await controller.on_changed("ns/m", running_migration())
    assert client.patches == []
    await controller.on_changed("ns/m2", running_migration(uid="mig-2"))
    assert [plural for plural, _ in client.patches][:1] == ["virtualmachineinstances"]


async def test_a_write_waits_for_the_namespace_raise_and_rechecks_after_it() -> None:
    stale = vmi()
    client = PatchingClient(copy.deepcopy(stale))
    management = cast(Management, SimpleNamespace(client=client, clock=FakeClock()))
    raised = asyncio.Event()
    waited_for: list[tuple[str, float]] = []

    async def quota_first(namespace: str, seconds: float) -> bool:
        waited_for.append((namespace, seconds))
        await raised.wait()
        return True

    writer = VmiAnnotator(management, quota_first=quota_first, pending=fresh_pending())
    first = asyncio.ensure_future(writer.set(stale, MIGRATING))
    second = asyncio.ensure_future(writer.set(stale, MIGRATING))
    await settle()
    assert client.patches == [], "nothing is written while the namespace's raise is pending"
    assert waited_for == [("ns", QUOTA_FIRST_SECONDS)] * 2
    raised.set()
    await asyncio.gather(first, second)
    plurals = [plural for plural, _ in client.patches]
    assert plurals == [VIRTUAL_MACHINE_INSTANCES.plural, VIRTUAL_MACHINES.plural], (
        "the second call saw the first one's patch once it was its turn"
    )


async def test_nothing_to_write_waits_for_nothing() -> None:
    current = vmi(**MIGRATING)
    client = PatchingClient(copy.deepcopy(current))
    management = cast(Management, SimpleNamespace(client=client, clock=FakeClock()))
    calls: list[str] = []

    async def quota_first(namespace: str, seconds: float) -> bool:
        calls.append(namespace)
        return True

    await VmiAnnotator(management, quota_first=quota_first, pending=fresh_pending()).set(
        current, MIGRATING
    )
    assert calls == [] and client.patches == []


@pytest.mark.parametrize(
    ("phase", "abort", "expected"),
    [
        ("", False, "Pending migration"),
        ("Pending", False, "Pending migration"),
        ("Scheduling", False, "Migrating"),
        ("Running", False, "Migrating"),
        # A decentralized migration's side waiting for its peer has started nothing yet...
        ("WaitingForSync", False, "Pending migration"),
        # ...while two sides that synchronize are under way.
        ("Synchronizing", False, "Migrating"),
        ("WaitingForSync", True, "Aborting migration"),
        ("Synchronizing", True, "Aborting migration"),
        ("Succeeded", False, None),
        ("Failed", True, None),
    ],
)
def test_each_vmim_phase_maps_to_harvesters_state_decentralized_ones_by_meaning(
    phase: str, abort: bool, expected: str | None
) -> None:
    conditions = [{"type": "migrationAbortRequested", "status": "True"}] if abort else []
    migration = {"status": {"phase": phase, "conditions": conditions}}
    assert migration_state(migration) == expected


class SlowPatchingClient(PatchingClient):
    """A PatchingClient whose patches take a few event-loop turns, as a real request does."""

    async def patch(self, resource: Any, name: str, body: dict[str, Any], namespace: str) -> Any:
        for _ in range(3):
            await asyncio.sleep(0)
        return await super().patch(resource, name, body, namespace)


async def test_two_controllers_released_by_one_raise_send_one_patch_not_two() -> None:
    """The VMIM and the VMI controller both clear a finished migration's annotations, both wait
    for the namespace's release, and wake together: each judged the VMI before the other's
    patch had returned, so each sent the clear and touched the VM (the scale run's 3.3-4 VMI
    and VM patches per migration in quota namespaces, 3 in namespaces without a quota)."""
    finished = vmi(**MIGRATING)
    client = SlowPatchingClient(copy.deepcopy(finished))
    management = cast(Management, SimpleNamespace(client=client, clock=FakeClock()))
    released = asyncio.Event()

    async def quota_first(namespace: str, seconds: float) -> bool:
        await released.wait()
        return True

    writer = VmiAnnotator(management, quota_first=quota_first, pending=fresh_pending())
    clear = dict.fromkeys(MIGRATING)
    both = asyncio.gather(writer.set(finished, clear), writer.set(finished, clear))
    await settle()
    released.set()
    await both
    plurals = [plural for plural, _ in client.patches]
    assert plurals == [VIRTUAL_MACHINE_INSTANCES.plural, VIRTUAL_MACHINES.plural]
    assert client.vmi["metadata"]["annotations"] == {}
    assert writer._writing._locks == {}, "no lock is kept for a VMI nobody writes"


async def test_each_vmi_patch_and_vm_touch_is_counted_once_as_sent() -> None:
    """harvester_quota_api_writes_total{kind="vmi"|"vm"}: the scale run's VMI and VM writes per
    migration; a change the annotator judges already written is neither sent nor counted."""
    stale = vmi()
    client = PatchingClient(copy.deepcopy(stale))
    counted: list[str] = []
    management = SimpleNamespace(client=client, clock=FakeClock())
    writer = VmiAnnotator(
        cast(Management, management), count_write=counted.append, pending=fresh_pending()
    )
    for _ in range(3):
        await writer.set(stale, MIGRATING)
    await writer.set(stale, {ANNOTATION_MIGRATION_UID: None, ANNOTATION_MIGRATION_STATE: None})
    assert counted == ["vmi", "vm", "vmi", "vm"]
    assert [plural for plural, _ in client.patches] == [
        VIRTUAL_MACHINE_INSTANCES.plural,
        VIRTUAL_MACHINES.plural,
    ] * 2
