"""Fewer quota writes while a namespace's migrations go on.

A release that only gives room back while another migration of the namespace still holds room
(its target pod to come or already there) is held back (at most a window), and a release is
never copied into status.hard; neither lets a tenant pod into the room being given back.
"""

from __future__ import annotations

import datetime
from types import SimpleNamespace
from typing import Any

import pytest
from harvester_quota.controller.resourcequota.writes import (
    ReleaseGathering,
    SpecWrites,
    raise_waits_on_status,
)
from harvester_quota.generic.pendingwrites import PendingWrites
from harvester_quota.generic.sharedhandler import RetryAfter
from harvester_quota.generic.store import Store
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.util.launcher import LauncherSettings
from harvester_quota.util.podusage import pod_quota_usage
from harvester_quota.util.resourcequota.plan import NamespaceSnapshot, QuotaPlan, plan_quota
from harvester_quota.util.resources import ResourceList
from harvester_quota.webhook.admission import Denied
from harvester_quota.webhook.resources.common import Identities

from tests.objects import launcher_pod, managed_quota, migration, rancher_namespace, vmi
from tests.unit.test_resourcequota_controller import bare_reconciler, plans_with, stub_plan
from tests.unit.test_webhook import FakeLookups, plain_pod, request, validate_pod

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
KEYS = ("limits.cpu", "limits.memory")


def _one_launcher() -> ResourceList:
    return {k: v for k, v in pod_quota_usage(launcher_pod(vmi("x"), "x")).items() if k in KEYS}


def _two_migrations(
    *, vm2_target: bool, hard_launchers: int = 4
) -> tuple[dict[str, Any], list[Any], list[Any], list[Any], dict[str, str]]:
    """vm1's migration ended (its source pod gone), vm2's is Pending; the quota stands raised
    for both rooms (`hard_launchers` launchers' worth) over a base of two launchers."""
    one = _one_launcher()
    vm1, vm2 = vmi("vm1", cores=1, memory="1Gi"), vmi("vm2", cores=1, memory="1Gi")
    done = migration("m1", vm1, phase="Succeeded", source_pod="src1")
    pending = migration("m2", vm2, phase="Scheduling" if vm2_target else "Pending")
    pods = [launcher_pod(vm1, "dst1", migration=done), launcher_pod(vm2, "src2")]
    if vm2_target:
        pods.append(launcher_pod(vm2, "dst2", migration=pending, node="kwok-node-1"))
    base = {"limitsCpu": str(one["limits.cpu"] * 2), "limitsMemory": str(one["limits.memory"] * 2)}
    quota = managed_quota("ns", {k: str(v * hard_launchers) for k, v in one.items()})
    quota["status"] = {
        "hard": {k: str(v * hard_launchers) for k, v in one.items()},
        "used": {k: str(v * (3 if vm2_target else 2)) for k, v in one.items()},
    }
    return quota, [done, pending], [vm1, vm2], pods, base


def _plan(quota: dict[str, Any], migrations: list[Any], vmis: list[Any], pods: list[Any],
          base: dict[str, str]) -> QuotaPlan:  # fmt: skip
    return plan_quota(
        NamespaceSnapshot(
            namespace=rancher_namespace("ns", base),
            quota=quota,
            migrations=migrations,
            vmis={v["metadata"]["name"]: v for v in vmis},
            pods=pods,
            now=NOW,
            launcher=LauncherSettings(ratio="1.5", kubevirt_version="1.6"),
            mode="auto",
        )
    )


def test_a_release_while_a_target_pod_is_still_to_come_gathers() -> None:
    plan = _plan(*_two_migrations(vm2_target=False))
    assert plan.holds_room and [r.vm_name for r in plan.rooms.rooms] == ["vm2"]
    assert plan.gathers, "vm1's room goes while vm2's target pod is still to be created"


def test_a_release_while_another_migration_runs_with_its_target_pod_gathers_too() -> None:
    plan = _plan(*_two_migrations(vm2_target=True))
    assert plan.holds_room and [r.vm_name for r in plan.rooms.rooms] == ["vm2"]
    assert plan.gathers, "vm1's room goes while vm2 still holds room, its target pod there"


def test_the_last_release_is_never_gathered() -> None:
    quota, migrations, vmis, pods, base = _two_migrations(vm2_target=True)
    vm2_done = migration("m2", vmis[1], phase="Succeeded", source_pod="src2")
    targets = [pod for pod in pods if pod["metadata"]["name"] != "src2"]
    plan = _plan(quota, [migrations[0], vm2_done], vmis, targets, base)
    assert not plan.holds_room and plan.hard != quota["spec"]["hard"], "every room goes back"
    assert not plan.gathers, "no room held after it: the release is written at once"


def test_a_plan_that_raises_never_gathers() -> None:
    quota, migrations, vmis, pods, base = _two_migrations(vm2_target=False, hard_launchers=2)
    plan = _plan(quota, migrations, vmis, pods, base)
    assert not plan.gathers, "a raise a target pod waits for is never held back"


def test_a_skipped_namespace_gives_its_room_back_without_gathering() -> None:
    quota, migrations, vmis, pods, base = _two_migrations(vm2_target=False)
    quota["metadata"].setdefault("annotations", {})[
        "harvesterhci.io/skipResourceQuotaAutoScaling"
    ] = "true"
    plan = _plan(quota, migrations, vmis, pods, base)
    assert plan.skipped and not plan.gathers


def test_a_hold_lasts_at_most_its_window_then_the_release_is_written() -> None:
    clock, holds = FakeClock(), []
    gathering = ReleaseGathering(clock, 3.0, lambda: holds.append(clock.monotonic()))
    assert gathering.hold("ns", True) == pytest.approx(3.0)
    clock.step(2.0)
    assert gathering.hold("ns", True) == pytest.approx(1.0), "the window runs from the first hold"
    clock.step(1.0)
    assert gathering.hold("ns", True) is None, "written once the window is over"
    assert gathering.hold("ns", True) is None, "a failed write is tried again at once"
    assert len(holds) == 1, "one hold counted per episode"
    assert gathering.hold("ns", False) is None
    assert gathering.hold("ns", True) == pytest.approx(3.0), "the next release starts afresh"
    assert len(holds) == 2


def test_a_plan_that_no_longer_gathers_ends_the_hold_at_once() -> None:
    gathering = ReleaseGathering(FakeClock(), 3.0)
    assert gathering.hold("ns", True) is not None
    assert gathering.hold("other", True) is not None
    assert gathering.hold("ns", False) is None
    assert list(gathering._held_since) == ["other"], "per namespace"


def test_a_window_of_zero_never_holds_and_a_negative_one_is_refused() -> None:
    assert ReleaseGathering(FakeClock(), 0.0).hold("ns", True) is None
    with pytest.raises(ValueError, match=">= 0"):
        ReleaseGathering(FakeClock(), -1.0)


async def test_the_reconcile_holds_a_gathering_release_back_then_writes_it() -> None:
    clock = FakeClock()
    instance = bare_reconciler(clock)
    instance.gathering = ReleaseGathering(clock, 3.0)
    gathers, writes = [True], []

    def plan(_key: str, ns: dict[str, Any], **_options: Any) -> Any:
        return stub_plan(ns, holds_room=True, gathers=gathers[0], label_writes_wait=True)

    start = clock.monotonic()

    async def write(*_args: Any) -> None:
        writes.append(clock.monotonic() - start)

    plans_with(instance, plan)
    instance._write_plan = write  # type: ignore[assignment,method-assign]
    namespace = rancher_namespace("ns", {"limitsCpu": "3000m"})
    with pytest.raises(RetryAfter) as held:
        await instance._reconcile("ns", namespace)
    assert writes == [] and held.value.seconds == pytest.approx(3.0)
    clock.step(1.0)
    gathers[0] = False  # a raise, or the last release: written at once
    await instance._reconcile("ns", namespace)
    assert writes == [1.0]
    gathers[0] = True
    with pytest.raises(RetryAfter):
        await instance._reconcile("ns", namespace)
    clock.step(3.0)
    await instance._reconcile("ns", namespace)
    assert writes == [1.0, 4.0], "written when the window ends, whatever still waits"
    with pytest.raises(RetryAfter) as again:
        await instance._reconcile("ns", namespace)
    assert writes == [1.0, 4.0] and again.value.seconds == pytest.approx(3.0), (
        "the next release of a drain that goes on is held a whole window again"
    )


RAISED = {"limits.cpu": "6", "limits.memory": "12Gi"}


def test_a_release_is_not_copied_into_status_hard_a_raise_is() -> None:
    def quota(spec: dict[str, str], status: dict[str, str]) -> dict[str, Any]:
        return {"spec": {"hard": spec}, "status": {"hard": status}}

    base = {"limits.cpu": "3", "limits.memory": "6Gi"}
    assert not raise_waits_on_status(quota(base, RAISED)), "a release waits on nothing"
    assert not raise_waits_on_status(quota(RAISED, RAISED)), "nothing to copy"
    assert raise_waits_on_status(quota(RAISED, base)), "a raise waits on its copy"
    mixed = {"limits.cpu": "2", "limits.memory": "13Gi"}
    assert raise_waits_on_status(quota(mixed, RAISED)), "one key raised is a raise"
    assert raise_waits_on_status(quota({**base, "pods": "10"}, RAISED)), "a key status lacks"
    assert raise_waits_on_status(quota({"limits.cpu": "x"}, RAISED)), "unreadable: copied"


async def test_spec_writes_hand_only_raises_to_the_status_publisher() -> None:
    base = {"limits.cpu": "3", "limits.memory": "6Gi"}
    stored: list[dict[str, Any]] = []

    async def patch_as_planned(quota: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
        written = {**quota, "spec": {"hard": dict(patch["spec"]["hard"])}}
        stored.append(written)
        return written

    writer = SimpleNamespace(patch_as_planned=patch_as_planned, copy_hard_to_status=None)
    metrics = SimpleNamespace(quota_writes=SimpleNamespace(labels=lambda _o: SimpleNamespace(
        inc=lambda: None)))  # fmt: skip
    recorder = SimpleNamespace(event=lambda *_a: None)
    writes = SpecWrites(writer, metrics, recorder, PendingWrites(Store()))  # type: ignore[arg-type]
    submitted: list[str] = []
    writes.publisher = SimpleNamespace(submit=lambda ns, _q: submitted.append(ns))  # type: ignore[assignment]
    holding = SimpleNamespace(rooms=SimpleNamespace(rooms=[]), holds_room=True)
    last = SimpleNamespace(rooms=SimpleNamespace(rooms=[]), holds_room=False)
    raised = managed_quota("ns", RAISED)
    raised["status"] = {"hard": dict(RAISED)}
    await writes.write(raised, {"spec": {"hard": base}}, holding)  # type: ignore[arg-type]
    assert submitted == [], "a release while rooms are held is left to kube-controller-manager"
    await writes.write(raised, {"spec": {"hard": base}}, last)  # type: ignore[arg-type]
    assert submitted == ["ns"], "the last release is copied: nothing of ours guards the lag"
    submitted.clear()
    low = managed_quota("ns", base)
    low["status"] = {"hard": dict(base)}
    await writes.write(low, {"spec": {"hard": RAISED}}, holding)  # type: ignore[arg-type]
    assert submitted == ["ns"], "the raise is copied at once"


@pytest.mark.parametrize("vm2_target", [False, True], ids=["target-to-come", "target-there"])
def test_a_tenant_pod_is_held_to_the_base_while_a_release_is_held_back(vm2_target: bool) -> None:
    """The abuse: vm1's room stays in spec.hard and status.hard while its release is held as
    vm2 migrates (its target pod still to come, or there); a tenant pod that fits what is raised,
    less vm2's room, but not the base must be denied."""
    quota, migrations, vmis, pods, base = _two_migrations(vm2_target=vm2_target)
    assert _plan(quota, migrations, vmis, pods, base).gathers, "the release is held here"
    one = _one_launcher()
    lookups = FakeLookups(
        quotas={"ns": quota},
        namespaces={"ns": rancher_namespace("ns", base)},
        migration_list=migrations,
        vmi_list=vmis,
        pods=pods,
    )
    grab = plain_pod("grab", str(one["limits.cpu"]), str(one["limits.memory"]))
    with pytest.raises(Denied):
        validate_pod(request("Pod", grab, operation="CREATE"), lookups, Identities())
