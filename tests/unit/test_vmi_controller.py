"""The VMI controller deletes an aborted migration's leftover target pod once, not per update.

Between our DELETE and the pod informer showing the pod's deletionTimestamp, every VMI update
would otherwise issue another DELETE; the expectations cache (cachetools.TTLCache on the process
clock) remembers the deletes in flight for client-go's 5 minutes.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from harvester_quota.apis.kubevirt import LABEL_MIGRATION_JOB
from harvester_quota.config.management import Management
from harvester_quota.controller.migration.vmi_controller import (
    DELETE_EXPECTATION_TTL,
    VmiController,
)
from harvester_quota.testbench.clock import FakeClock


class PodStore:
    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods

    def by_index(self, index: str, value: str) -> list[dict[str, Any]]:
        assert index == "namespace"
        return [p for p in self.pods if p["metadata"]["namespace"] == value]


class RecordingClient:
    def __init__(self) -> None:
        self.deleted: list[tuple[str, str]] = []

    async def delete(self, resource: Any, name: str, namespace: str) -> dict[str, Any]:
        self.deleted.append((namespace, name))
        return {}


def target_pod(uid: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "virt-launcher-vm-target",
            "namespace": "ns",
            "uid": uid,
            "labels": {LABEL_MIGRATION_JOB: "mig-1"},
        }
    }


def aborted_vmi() -> dict[str, Any]:
    return {
        "metadata": {"name": "vm", "namespace": "ns", "annotations": {}},
        "status": {
            "migrationState": {
                "completed": True,
                "abortStatus": "Succeeded",
                "migrationUid": "mig-1",
            }
        },
    }


def controller(pods: list[dict[str, Any]]) -> tuple[VmiController, RecordingClient, FakeClock]:
    clock, client = FakeClock(), RecordingClient()
    management = SimpleNamespace(
        client=client,
        clock=clock,
        kubevirt=SimpleNamespace(virtual_machine_instances=lambda: None),
        informers=SimpleNamespace(
            informer=lambda resource, **_options: SimpleNamespace(store=PodStore(pods))
        ),
    )
    return VmiController(cast(Management, management)), client, clock


async def test_leftover_target_pod_is_deleted_once_while_the_cache_lags() -> None:
    pods = [target_pod("uid-1")]
    vmi_controller, client, _ = controller(pods)
    for _ in range(3):  # three VMI updates before the pod cache shows the deletion
        await vmi_controller.on_changed("ns/vm", aborted_vmi())
    assert client.deleted == [("ns", "virt-launcher-vm-target")]


async def test_a_delete_that_did_not_happen_is_retried_after_the_expectation_expires() -> None:
    pods = [target_pod("uid-1")]
    vmi_controller, client, clock = controller(pods)
    await vmi_controller.on_changed("ns/vm", aborted_vmi())
    clock.step(DELETE_EXPECTATION_TTL + 1)
    await vmi_controller.on_changed("ns/vm", aborted_vmi())
    assert len(client.deleted) == 2


async def test_a_recreated_pod_of_the_same_name_is_a_new_expectation() -> None:
    pods = [target_pod("uid-1")]
    vmi_controller, client, _ = controller(pods)
    await vmi_controller.on_changed("ns/vm", aborted_vmi())
    pods[0] = target_pod("uid-2")
    await vmi_controller.on_changed("ns/vm", aborted_vmi())
    assert len(client.deleted) == 2


async def test_a_pod_already_terminating_is_left_alone() -> None:
    pod = target_pod("uid-1")
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    vmi_controller, client, _ = controller([pod])
    await vmi_controller.on_changed("ns/vm", aborted_vmi())
    assert client.deleted == []


async def test_without_an_annotator_a_finished_migrations_annotations_are_left_alone() -> None:
    """Harvester's own migration controller wrote and clears them (run --harvester-annotations
    off): the cleanup of the aborted target still runs, and nothing patches the VMI."""
    pods = [target_pod("uid-1")]
    vmi_controller, client, _ = controller(pods)
    finished = aborted_vmi()
    finished["metadata"]["annotations"] = {
        "harvesterhci.io/migrationUID": "mig-1",
        "harvesterhci.io/migrationState": "Aborting migration",
    }
    await vmi_controller.on_changed("ns/vm1", finished)  # RecordingClient has no patch
    assert client.deleted == [("ns", "virt-launcher-vm-target")]


async def test_the_update_filter_refuses_only_vmis_the_handler_does_nothing_for() -> None:
    registered: dict[str, Any] = {}
    pods = [target_pod("uid-1")]
    vmi_controller, client, _ = controller(pods)
    vmi_controller.vmis = SimpleNamespace(  # type: ignore[assignment]
        on_change=lambda name, handler, *, updates_wanted: registered.update(
            name=name, wanted=updates_wanted
        )
    )
    vmi_controller.register()
    wanted = registered["wanted"]
    in_progress = aborted_vmi()
    in_progress["status"]["migrationState"]["completed"] = False
    odd: list[dict[str, Any]] = [
        in_progress,
        {"metadata": {"name": "vm", "namespace": "ns"}},
        {"metadata": {"name": "vm", "namespace": "ns"}, "status": ["not", "a", "mapping"]},
        {"metadata": {"name": "vm", "namespace": "ns"}, "status": {"migrationState": "done"}},
    ]
    for vmi in odd:
        assert not wanted(vmi), vmi
        await vmi_controller.on_changed("ns/vm", vmi)
    assert client.deleted == [], "nothing done for a VMI the filter refuses"
    assert wanted(aborted_vmi())
    await vmi_controller.on_changed("ns/vm", aborted_vmi())
    assert client.deleted == [("ns", "virt-launcher-vm-target")], "and acted on what it wants"
