"""Which VMI updates can change a quota plan: those that change its facts (launcher.VmiView, planviews.vmi_facts);
the controller queues no reconcile for the others."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from harvester_quota.util.resourcequota.planviews import vmi_facts


def vmi() -> dict[str, Any]:
    return {
        "metadata": {"name": "vm", "uid": "u1", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"domain": {"resources": {"limits": {"cpu": "2", "memory": "4Gi"}}}},
        "status": {
            "phase": "Running",
            "migrationState": {"migrationUid": "m1", "sourcePod": "virt-launcher-vm-abcde"},
        },
    }


@pytest.mark.parametrize(
    "progress",
    [
        lambda v: v["status"]["migrationState"].update(targetNodeAddress="10.0.0.2"),
        lambda v: v["status"]["migrationState"].update(startTimestamp="2026-01-01T00:01:00Z"),
        lambda v: v["status"].update(conditions=[{"type": "Ready", "status": "True"}]),
        lambda v: v["status"].update(nodeName="kwok-node-2"),
        lambda v: v["status"]["migrationState"].update(sourcePod="virt-launcher-vm-fghij"),
        lambda v: v["status"].pop("migrationState"),
        lambda v: v["metadata"].update(resourceVersion="99"),
    ],
)
def test_migration_progress_and_status_changes_cannot_change_a_plan(progress: Any) -> None:
    """Rooms are decided from pods, not from what the VMI's status names (a tenant can write a
    VMI's status: it has no status subresource)."""
    updated = copy.deepcopy(vmi())
    progress(updated)
    assert vmi_facts(updated) == vmi_facts(vmi())


@pytest.mark.parametrize(
    "change",
    [
        lambda v: v["spec"]["domain"]["resources"]["limits"].update(memory="8Gi"),
        lambda v: v["status"].update(conditions=[{"type": "LiveMigratable", "status": "False"}]),
        lambda v: v["metadata"].update(annotations={"hooks.kubevirt.io/hookSidecars": "[]"}),
        lambda v: v["metadata"].update(uid="u2"),
    ],
)
def test_what_sizes_the_launcher_or_says_it_cannot_migrate_does(change: Any) -> None:
    updated = copy.deepcopy(vmi())
    change(updated)
    assert vmi_facts(updated) != vmi_facts(vmi())


def test_harvesters_migration_annotations_written_by_our_controllers_change_no_plan() -> None:
    annotated = copy.deepcopy(vmi())
    annotated["metadata"]["annotations"] = {
        "harvesterhci.io/migrationUID": "m1",
        "harvesterhci.io/migrationState": "Migrating",
        "harvesterhci.io/migrationTargetNodeName": "kwok-node-2",
    }
    assert vmi_facts(annotated) == vmi_facts(vmi())
