"""The quota plan replays the incident reports' numbers and the failure scenarios it must beat."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest
from harvester_quota.testbench.harvestervm import HARVESTER_V121_OVERCOMMIT
from harvester_quota.util import resources
from harvester_quota.util.annotations import (
    ANNOTATION_MIGRATING_COMPENSATION,
    ANNOTATION_MIGRATING_SCALING_RESYNC_NEEDED,
    ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING,
    migrating_uid_annotation_key,
    migrating_vm_annotation_key,
)
from harvester_quota.util.launcher import LauncherSettings
from harvester_quota.util.podusage import pod_quota_usage
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.resourcequota.base import ANNOTATION_APPLIED, ANNOTATION_BASE
from harvester_quota.util.resourcequota.plan import (
    NamespaceSnapshot,
    QuotaPlan,
    patch_for,
    plan_quota,
)

from tests.objects import (
    launcher_pod,
    managed_quota,
    migration,
    plain_namespace,
    rancher_namespace,
    vmi,
)
from tests.unit.annotationkeys import is_valid_annotation_key

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
V170_LIMIT = {"limitsCpu": "3000m", "limitsMemory": "5000Mi"}
V170_HARD = {"limits.cpu": "3", "limits.memory": "5000Mi"}


def snapshot(
    namespace: dict[str, Any],
    quota: dict[str, Any],
    *,
    migrations: list[dict[str, Any]] = (),  # type: ignore[assignment]
    vmis: list[dict[str, Any]] = (),  # type: ignore[assignment]
    pods: list[dict[str, Any]] = (),  # type: ignore[assignment]
    ratio: str | None = "1.5",
    version: str = "1.6",
    mode: str = "auto",
) -> NamespaceSnapshot:
    return NamespaceSnapshot(
        namespace=namespace,
        quota=quota,
        migrations=list(migrations),
        vmis={v["metadata"]["name"]: v for v in vmis},
        pods=list(pods),
        now=NOW,
        launcher=LauncherSettings(ratio=ratio, kubevirt_version=version),
        mode=mode,  # type: ignore[arg-type]
    )


def hard(plan: QuotaPlan, key: str) -> Quantity:
    return Quantity.parse(plan.hard[key])


def test_v170_first_migration_room_is_the_whole_target_pod() -> None:
    """Seed v1.7.0 test 1: 2 cores / 4Gi at ratio 1.5. Harvester raised limits.memory to
    9980344313 (compute container only); the target pod really charges 4797464313 with its
    guest-console-log sidecar, so the room is that, and CPU gets 2015m, not 2."""
    vm = vmi("vm1")
    source = launcher_pod(vm, "virt-launcher-vm1-src")
    plan = plan_quota(
        snapshot(
            rancher_namespace("quota-test", V170_LIMIT),
            managed_quota("quota-test", V170_HARD),
            migrations=[migration("vm1-mig", vm)],
            vmis=[vm],
            pods=[source],
        )
    )
    assert plan.managed and plan.holds_room
    assert hard(plan, "limits.memory") == Quantity.parse("5000Mi") + Quantity.parse("4797464313")
    assert hard(plan, "limits.cpu") == Quantity.parse("5015m")
    room = json.loads(plan.annotations[migrating_vm_annotation_key("vm1")])
    assert room == {"limits.cpu": "2015m", "limits.memory": "4797464313"}


def test_v170_vm_over_its_base_after_the_ratio_change_still_migrates() -> None:
    """Seed v1.7.0 test 2: after one migration at ratio 4.5 the VM charges 5682461313 against a
    5000Mi base. Harvester's second migration was stuck (hard 10865341313 < 11364922626 needed);
    here the floor is the usage, so hard is exactly what source + target need."""
    vm = vmi("vm1")
    running = launcher_pod(vm, "virt-launcher-vm1-a", ratio="4.5")
    plan = plan_quota(
        snapshot(
            rancher_namespace("quota-test", V170_LIMIT),
            managed_quota("quota-test", V170_HARD),
            migrations=[migration("vm1-second", vm)],
            vmis=[vm],
            pods=[running],
            ratio="4.5",
        )
    )
    assert hard(plan, "limits.memory") == Quantity.parse("11364922626")
    needed = Quantity.parse("5682461313") + Quantity.parse("5682461313")
    assert needed <= hard(plan, "limits.memory")


def test_v121_room_covers_every_key_the_quota_limits() -> None:
    """Seed v1.2.1 (KubeVirt 0.54): limits.memory 60Gi + 4531245057 = 68955754497 as Harvester
    had it, and also requests.cpu, requests.memory and pods, which Harvester never scaled."""
    rq_hard = {
        "limits.cpu": "30",
        "limits.memory": "60Gi",
        "requests.cpu": "30",
        "requests.memory": "60Gi",
        "pods": "50",
        "requests.storage": "320Gi",
    }
    vm = vmi("vm1", overcommit=HARVESTER_V121_OVERCOMMIT, ratio_set=False)
    source = launcher_pod(vm, "virt-launcher-vm1-src", ratio=None, kubevirt_version="0.54")
    plan = plan_quota(
        snapshot(
            plain_namespace("test-migration"),
            managed_quota("test-migration", rq_hard),
            migrations=[migration("vm1-9rdqx", vm)],
            vmis=[vm],
            pods=[source],
            ratio=None,
            version="0.54",
        )
    )
    assert plan.hard["limits.memory"] == "68955754497"
    assert hard(plan, "limits.cpu") == Quantity.parse("32")
    assert hard(plan, "requests.cpu") == Quantity.parse("30125m")
    assert hard(plan, "requests.memory") == Quantity.parse("60Gi") + Quantity.parse("3098890241")
    assert hard(plan, "pods") == Quantity.parse("51")
    assert plan.hard["requests.storage"] == "320Gi", "no pod charges storage: untouched"


def four_vm_namespace(succeeded: set[str]) -> NamespaceSnapshot:
    """Seed v1.2.1 "4 VMs at once": four 1-core/2Gi VMs, quota exactly full."""
    vms = [
        vmi(
            f"vm{i}",
            "test-migration",
            cores=1,
            memory="2Gi",
            overcommit=HARVESTER_V121_OVERCOMMIT,
            ratio_set=False,
        )
        for i in range(1, 5)
    ]
    pods, migrations = [], []
    for vm in vms:
        name = vm["metadata"]["name"]
        source = launcher_pod(vm, f"virt-launcher-{name}-src", ratio=None, kubevirt_version="0.54")
        pods.append(source)
        phase = "Succeeded" if name in succeeded else "Pending"
        mig = migration(
            f"kubevirt-evacuation-{name}", vm, phase=phase, source_pod=source["metadata"]["name"]
        )
        migrations.append(mig)
        if name in succeeded:
            pods.append(
                launcher_pod(
                    vm,
                    f"virt-launcher-{name}-dst",
                    ratio=None,
                    kubevirt_version="0.54",
                    migration=mig,
                    node="kwok-node-1",
                )
            )
    used = resources.total(
        resources.parse_resource_list({"limits.cpu": "1", "limits.memory": "2372577281"})
        for _ in vms
    )
    return snapshot(
        plain_namespace("test-migration"),
        managed_quota("test-migration", {k: str(v) for k, v in used.items()}),
        migrations=migrations,
        vmis=vms,
        pods=pods,
        ratio=None,
        version="0.54",
    )


def test_four_migrations_in_a_full_namespace_all_get_room() -> None:
    plan = plan_quota(four_vm_namespace(succeeded=set()))
    assert len(plan.rooms.rooms) == 4
    assert hard(plan, "limits.cpu") == Quantity.parse("8")
    assert hard(plan, "limits.memory") == Quantity.parse("2372577281") * 8


def test_a_succeeded_migration_keeps_its_room_while_its_source_pod_counts() -> None:
    """The v1.2.1 bug: Harvester released vm1's room at Succeeded while its source pod still
    counted for ~31 s, and the next target pod was refused."""
    plan = plan_quota(four_vm_namespace(succeeded={"vm1"}))
    assert [r.vm_name for r in plan.rooms.rooms] == ["vm1", "vm2", "vm3", "vm4"]
    assert hard(plan, "limits.memory") == Quantity.parse("2372577281") * 8
    vm1 = plan.rooms.rooms[0]
    assert not vm1.estimated and vm1.reason.startswith("source pod")


def test_room_is_released_when_the_source_pod_is_gone_and_hard_returns_exactly_to_base() -> None:
    vm = vmi("vm1")
    source = launcher_pod(vm, "src")
    mig = migration("m", vm, phase="Succeeded", source_pod="src")
    target = launcher_pod(vm, "dst", migration=mig, node="kwok-node-1")
    quota = managed_quota(
        "quota-test",
        {"limits.cpu": "5015m", "limits.memory": "10040344313"},
        {migrating_vm_annotation_key("vm1"): '{"limits.cpu":"2015m"}'},
    )
    terminating = {
        **source,
        "metadata": {
            **source["metadata"],
            "deletionTimestamp": "2026-01-01T00:00:20Z",
            "deletionGracePeriodSeconds": 30,
        },
    }
    during = plan_quota(
        snapshot(
            rancher_namespace("quota-test", V170_LIMIT),
            quota,
            migrations=[mig],
            vmis=[vm],
            pods=[terminating, target],
        )
    )
    assert during.holds_room, "a terminating source pod still counts"
    assert during.requeue_after == pytest.approx(50.0), "re-check when its grace period ends"
    after = plan_quota(
        snapshot(
            rancher_namespace("quota-test", V170_LIMIT),
            quota,
            migrations=[mig],
            vmis=[vm],
            pods=[target],
        )
    )
    assert not after.holds_room
    assert after.hard == {"limits.cpu": "3", "limits.memory": "5000Mi"}
    assert after.remove_annotations == [migrating_vm_annotation_key("vm1")]
    assert patch_for(quota, after) == {
        "spec": {"hard": {"limits.cpu": "3", "limits.memory": "5000Mi"}},
        "metadata": {"annotations": {migrating_vm_annotation_key("vm1"): None}},
    }


def test_rancher_reset_mid_migration_is_restored_and_never_goes_below_base() -> None:
    """#7178: Rancher reset spec.hard to the base mid-migration and old Harvester subtracted the
    VM's share at the end: 30 cores became 26. Recomputing from the cluster cannot do that."""
    vm = vmi("vm1", cores=4, memory="8Gi")
    source = launcher_pod(vm, "src")
    reset = managed_quota(
        "ns",
        {"limits.cpu": "30", "limits.memory": "60Gi"},
        {migrating_vm_annotation_key("vm1"): '{"limits.cpu":"4015m"}'},
    )
    during = plan_quota(
        snapshot(
            rancher_namespace("ns", {"limitsCpu": "30", "limitsMemory": "60Gi"}),
            reset,
            migrations=[migration("m", vm)],
            vmis=[vm],
            pods=[source],
        )
    )
    assert hard(during, "limits.cpu") == Quantity.parse("34015m")
    finished = plan_quota(
        snapshot(
            rancher_namespace("ns", {"limitsCpu": "30", "limitsMemory": "60Gi"}),
            reset,
            migrations=[migration("m", vm, phase="Succeeded", source_pod="src")],
            vmis=[vm],
            pods=[launcher_pod(vm, "dst")],
        )
    )
    assert finished.hard == {"limits.cpu": "30", "limits.memory": "60Gi"}


def test_long_vm_names_get_a_valid_hashed_key() -> None:
    name = "a-very-long-name-exceeds-the-63-length-and-it-reports-error-in-old-version"
    vm = vmi(name)
    plan = plan_quota(
        snapshot(
            rancher_namespace("ns", V170_LIMIT),
            managed_quota("ns", V170_HARD),
            migrations=[migration("m", vm)],
            vmis=[vm],
            pods=[launcher_pod(vm, "src")],
        )
    )
    (key,) = [k for k in plan.annotations if k.startswith("harvesterhci.io/migrating-")]
    assert is_valid_annotation_key(key) and key == migrating_vm_annotation_key(name)


def test_historic_keys_are_removed_and_invalid_ones_reported() -> None:
    quota = managed_quota(
        "ns",
        V170_HARD,
        {
            migrating_uid_annotation_key(
                "0b9d1c1e-0000-4000-8000-000000000000"
            ): '{"limits.memory":"2Gi invalid"}',
            ANNOTATION_MIGRATING_COMPENSATION: '{"limits.memory":"128Mi"}',
            ANNOTATION_MIGRATING_SCALING_RESYNC_NEEDED: "false",
            "harvesterhci.io/migrating-gone-vm": '{"limits.cpu":"1"}',
        },
    )
    plan = plan_quota(snapshot(rancher_namespace("ns", V170_LIMIT), quota))
    assert len(plan.remove_annotations) == 4
    assert plan.hard == V170_HARD
    assert any("2Gi invalid" in w for w in plan.warnings)


def test_a_deleted_vmi_or_a_restarted_vm_leaves_no_room() -> None:
    vm = vmi("vm1")
    mig = migration("m", vm, phase="Running")
    stale_target = launcher_pod(vm, "dst", migration=mig)
    restarted = vmi("vm1")  # same name, new uid
    plan = plan_quota(
        snapshot(
            rancher_namespace("ns", V170_LIMIT),
            managed_quota("ns", V170_HARD),
            migrations=[mig],
            vmis=[restarted],
            pods=[stale_target],
        )
    )
    assert not plan.holds_room
    gone = plan_quota(
        snapshot(
            rancher_namespace("ns", V170_LIMIT),
            managed_quota("ns", V170_HARD),
            migrations=[mig],
            vmis=[],
            pods=[stale_target],
        )
    )
    assert not gone.holds_room and gone.hard == V170_HARD


def test_a_migration_older_than_its_vmi_belongs_to_an_earlier_instance() -> None:
    """The VM restarted mid-migration and KubeVirt never finished the old VMIM: no room."""
    restarted = vmi("vm1")
    restarted["metadata"]["creationTimestamp"] = "2026-01-01T10:05:00Z"
    mig = migration("m", restarted, phase="Running")
    mig["metadata"]["creationTimestamp"] = "2026-01-01T10:00:00Z"
    ns, quota = rancher_namespace("ns", V170_LIMIT), managed_quota("ns", V170_HARD)
    plan = plan_quota(
        snapshot(ns, quota, migrations=[mig], vmis=[restarted], pods=[launcher_pod(restarted, "p")])
    )
    assert not plan.holds_room
    mig["metadata"]["creationTimestamp"] = "2026-01-01T10:06:00Z"
    later = plan_quota(
        snapshot(ns, quota, migrations=[mig], vmis=[restarted], pods=[launcher_pod(restarted, "p")])
    )
    assert later.holds_room


def test_a_failed_migration_holds_room_until_its_target_pod_is_gone() -> None:
    vm = vmi("vm1")
    mig = migration("m", vm, phase="Failed")
    target = launcher_pod(vm, "dst", migration=mig, node="kwok-node-1")
    ns, quota = rancher_namespace("ns", V170_LIMIT), managed_quota("ns", V170_HARD)
    lingering = plan_quota(
        snapshot(ns, quota, migrations=[mig], vmis=[vm], pods=[launcher_pod(vm, "src"), target])
    )
    assert lingering.holds_room and not lingering.rooms.rooms[0].estimated
    errored = {**target, "status": {"phase": "Failed"}}
    done = plan_quota(
        snapshot(ns, quota, migrations=[mig], vmis=[vm], pods=[launcher_pod(vm, "src"), errored])
    )
    assert not done.holds_room


def test_skip_annotation_returns_the_quota_to_its_base() -> None:
    vm = vmi("vm1")
    quota = managed_quota(
        "ns",
        {"limits.cpu": "5015m", "limits.memory": "10040344313"},
        {
            ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING: "true",
            migrating_vm_annotation_key("vm1"): '{"limits.cpu":"2015m"}',
        },
    )
    plan = plan_quota(
        snapshot(
            rancher_namespace("ns", V170_LIMIT),
            quota,
            migrations=[migration("m", vm)],
            vmis=[vm],
            pods=[launcher_pod(vm, "src")],
        )
    )
    assert plan.skipped and not plan.holds_room
    assert plan.hard == V170_HARD
    assert migrating_vm_annotation_key("vm1") in plan.remove_annotations


def test_invalid_rancher_annotation_leaves_the_quota_alone_with_a_reason() -> None:
    namespace = rancher_namespace("ns", {"limitsCpu": "10000m invalid"})
    plan = plan_quota(snapshot(namespace, managed_quota("ns", V170_HARD)))
    assert not plan.managed
    assert patch_for(managed_quota("ns", V170_HARD), plan) is None
    assert any("10000m invalid" in w for w in plan.warnings)


def test_negative_rancher_limits_leave_the_quota_alone_with_a_reason() -> None:
    # The API server refuses a negative spec.hard: writing one would fail on every retry.
    namespace = rancher_namespace("ns", {"limitsCpu": "-1", "limitsMemory": "5000Mi"})
    plan = plan_quota(snapshot(namespace, managed_quota("ns", V170_HARD)))
    assert not plan.managed
    assert patch_for(managed_quota("ns", V170_HARD), plan) is None
    assert any("negative limits (limits.cpu)" in w for w in plan.warnings)


def test_a_negative_recorded_room_does_not_inflate_the_adopted_base() -> None:
    quota = managed_quota(
        "ns", {"limits.cpu": "3"}, {"harvesterhci.io/migrating-vm1": '{"limits.cpu":"-2"}'}
    )
    plan = plan_quota(snapshot(plain_namespace("ns"), quota))
    assert plan.managed and plan.base is not None
    assert plan.base.hard == {"limits.cpu": Quantity.parse("3")}
    assert plan.hard == {"limits.cpu": "3"}
    assert any("negative quantities for limits.cpu" in w for w in plan.warnings)


def test_rancher_extended_keys_and_unknown_keys_pass_through() -> None:
    namespace = rancher_namespace(
        "ns", {"limitsCpu": "3", "extended": {"requests.nvidia.com/gpu": "2"}}
    )  # type: ignore[dict-item]
    quota = managed_quota("ns", {"limits.cpu": "3", "requests.nvidia.com/gpu": "2"})
    plan = plan_quota(snapshot(namespace, quota))
    assert plan.hard == {"limits.cpu": "3", "requests.nvidia.com/gpu": "2"}
    assert patch_for(quota, plan) is None


def test_standalone_base_is_recorded_once_and_follows_user_edits() -> None:
    quota = managed_quota("ns", {"limits.cpu": "3", "limits.memory": "5000Mi"})
    first = plan_quota(snapshot(plain_namespace("ns"), quota))
    assert json.loads(first.annotations[ANNOTATION_BASE]) == {
        "limits.cpu": "3",
        "limits.memory": "5000Mi",
    }
    recorded = managed_quota(
        "ns",
        {"limits.cpu": "4", "limits.memory": "5000Mi"},
        {ANNOTATION_BASE: first.annotations[ANNOTATION_BASE]},
    )
    edited = plan_quota(snapshot(plain_namespace("ns"), recorded))
    assert json.loads(edited.annotations[ANNOTATION_BASE])["limits.cpu"] == "4", (
        "the user raised it"
    )
    assert "spec" not in (patch_for(recorded, edited) or {})


def test_standalone_edit_during_a_migration_moves_the_base_by_the_same_amount() -> None:
    vm = vmi("vm1")
    base = '{"limits.cpu":"3","limits.memory":"5000Mi"}'
    applied = '{"limits.cpu":"5015m","limits.memory":"10040344313"}'
    quota = managed_quota(
        "ns",
        {"limits.cpu": "6015m", "limits.memory": "10040344313"},
        {
            ANNOTATION_BASE: base,
            ANNOTATION_APPLIED: applied,
            migrating_vm_annotation_key(
                "vm1"
            ): '{"limits.cpu":"2015m","limits.memory":"4797464313"}',
        },
    )
    plan = plan_quota(
        snapshot(
            plain_namespace("ns"),
            quota,
            migrations=[migration("m", vm)],
            vmis=[vm],
            pods=[launcher_pod(vm, "src")],
        )
    )
    assert json.loads(plan.annotations[ANNOTATION_BASE])["limits.cpu"] == "4", "+1 CPU by the user"
    assert hard(plan, "limits.cpu") == Quantity.parse("6015m")


def test_an_isolated_migration_writes_the_quota_exactly_twice() -> None:
    """Up when the VMIM appears; nothing while the target is created and the phases advance
    (the estimate equals the real target pod); down when the source pod is gone."""
    vm = vmi("vm1")
    ns = rancher_namespace("ns", V170_LIMIT)
    quota = managed_quota("ns", V170_HARD)
    source = launcher_pod(vm, "src")
    mig = migration("m", vm)
    writes = 0

    def step(pods: list[dict[str, Any]], phase: str) -> None:
        nonlocal quota, writes
        current = {
            **mig,
            "status": {**mig["status"], "phase": phase, "migrationState": {"sourcePod": "src"}},
        }
        plan = plan_quota(snapshot(ns, quota, migrations=[current], vmis=[vm], pods=pods))
        patch = patch_for(quota, plan)
        if patch is not None:
            writes += 1
            quota = _apply_merge_patch(quota, patch)

    target = launcher_pod(vm, "dst", migration=mig, node="kwok-node-1")
    step([source], "Pending")
    for phase in (
        "Pending",
        "Scheduling",
        "Scheduled",
        "PreparingTarget",
        "TargetReady",
        "Running",
        "Succeeded",
    ):
        step([source, target], phase)
    step([target], "Succeeded")
    assert writes == 2
    assert quota["spec"]["hard"] == V170_HARD
    assert not [
        k for k in quota["metadata"]["annotations"] if k.startswith("harvesterhci.io/migrating")
    ]


def _apply_merge_patch(obj: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    result = json.loads(json.dumps(obj))

    def merge(target: dict[str, Any], change: dict[str, Any]) -> None:
        for key, value in change.items():
            if value is None:
                target.pop(key, None)
            elif isinstance(value, dict):
                merge(target.setdefault(key, {}), value)
            else:
                target[key] = value

    merge(result, patch)
    return result


def test_a_pending_target_keeps_the_room_quota_admission_counts_until_status_used_catches_up() -> (
    None
):
    """vm1's migration finished and its source pod is gone; vm2's target pod is still to come.
    Until kube-controller-manager recounts, status.used still charges vm1's source pod, and
    quota admission would refuse vm2's target under a hard lowered by it."""
    vm1, vm2 = vmi("vm1", cores=1, memory="1Gi"), vmi("vm2", cores=1, memory="1Gi")
    done = migration("m1", vm1, phase="Succeeded", source_pod="src1")
    pending = migration("m2", vm2)
    pods = [launcher_pod(vm1, "dst1", migration=done), launcher_pod(vm2, "src2")]
    keys = ("limits.cpu", "limits.memory")
    one = {k: v for k, v in pod_quota_usage(pods[1]).items() if k in keys}
    # The namespace was full with src1 and src2; Rancher's base is that.
    base = {"limitsCpu": str(one["limits.cpu"] * 2), "limitsMemory": str(one["limits.memory"] * 2)}
    # Raised for both rooms while src1 counted: the base and two target pods.
    raised = {k: str(v * 4) for k, v in one.items()}

    def plan_with(pods_in_status: int) -> QuotaPlan:
        quota = managed_quota("ns", raised)
        quota["status"] = {"used": {k: str(v * pods_in_status) for k, v in one.items()}}
        return plan_quota(
            snapshot(
                rancher_namespace("ns", base),
                quota,
                migrations=[done, pending],
                vmis=[vm1, vm2],
                pods=pods,
            )
        )

    stale = plan_with(3)  # dst1, src2 and the gone src1
    recounted = plan_with(2)
    assert [r.vm_name for r in stale.rooms.rooms] == ["vm2"]
    for key in keys:
        assert hard(recounted, key) == one[key] * 3, "the base and vm2's room"
        assert hard(stale, key) == one[key] * 4, "what admission counts, and vm2's room"


def test_what_admission_counts_never_raises_the_quota_above_where_it_is() -> None:
    """A target pod admitted is in status.used before the pod caches show it (its room still an
    estimate): that double count must not write the quota up, and down again a moment later."""
    vm = vmi("vm1", cores=1, memory="1Gi")
    pending = migration("m1", vm)
    src = launcher_pod(vm, "src1")
    keys = ("limits.cpu", "limits.memory")
    one = {k: v for k, v in pod_quota_usage(src).items() if k in keys}
    base = {"limitsCpu": str(one["limits.cpu"]), "limitsMemory": str(one["limits.memory"])}
    quota = managed_quota("ns", {k: str(v * 2) for k, v in one.items()})
    quota["status"] = {"used": {k: str(v * 2) for k, v in one.items()}}  # src1 and the target
    plan = plan_quota(
        snapshot(rancher_namespace("ns", base), quota, migrations=[pending], vmis=[vm], pods=[src])
    )
    assert plan.rooms.rooms[0].estimated
    for key in keys:
        assert hard(plan, key) == one[key] * 2, key
