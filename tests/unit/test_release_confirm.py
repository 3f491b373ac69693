"""A release is written only once the API server shows no migration the plan has not read.

The v170-test4 scenario's second migration of a VM was created as the first one's source pod
went: the controller's cache did not show it yet, its plan gave the VM's room back, and the
target pod met quota admission between that release and the raise that followed (refused once).
"""

from __future__ import annotations

import datetime
from types import SimpleNamespace
from typing import Any

import pytest
from harvester_quota.controller.resourcequota.releaseconfirm import lowers, unseen
from harvester_quota.generic import errors
from harvester_quota.generic.clock import FakeClock
from harvester_quota.generic.sharedhandler import RetryAfter
from harvester_quota.util.launcher import LauncherSettings
from harvester_quota.util.podusage import pod_quota_usage
from harvester_quota.util.resourcequota.plan import NamespaceSnapshot, plan_quota

from tests.objects import launcher_pod, managed_quota, migration, rancher_namespace, vmi
from tests.unit.test_resourcequota_controller import (
    bare_reconciler,
    lingering_reconciler,
    plans_with,
)

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
KEYS = ("limits.cpu", "limits.memory")


def _first_migration_over() -> tuple[Any, list[Any]]:
    """vm1's first migration succeeded and its source pod is gone; the quota still stands
    raised by vm1's room over a base of one launcher. Returns the plan as `_reconcile` holds it
    (from a cache with that migration only) and the API server's migrations: it and a second
    one of vm1, just created."""
    vm1 = vmi("vm1", cores=1, memory="1Gi")
    one = {k: v for k, v in pod_quota_usage(launcher_pod(vm1, "x")).items() if k in KEYS}
    first = migration("m1", vm1, phase="Succeeded", source_pod="src1")
    second = migration("m2", vm1)
    quota = managed_quota("ns", {k: str(v * 2) for k, v in one.items()})
    quota["status"] = {"hard": quota["spec"]["hard"], "used": {k: str(v) for k, v in one.items()}}
    base = {"limitsCpu": str(one["limits.cpu"]), "limitsMemory": str(one["limits.memory"])}
    snapshot = NamespaceSnapshot(
        namespace=rancher_namespace("ns", base),
        quota=quota,
        migrations=[first],
        vmis={"vm1": vm1},
        pods=[launcher_pod(vm1, "dst1", migration=first)],
        now=NOW,
        launcher=LauncherSettings(ratio="1.5", kubevirt_version="1.6"),
        mode="auto",
    )
    plan = plan_quota(snapshot)
    planned = SimpleNamespace(quota=quota, plan=plan, snapshot=snapshot)
    return planned, [first, second]


def _reconciler(live: list[Any] | Exception) -> Any:
    reconciler = bare_reconciler(FakeClock())

    async def read(_namespace: str) -> list[Any]:
        if isinstance(live, Exception):
            raise live
        return live

    reconciler.live_migrations = read
    return reconciler


def test_the_cached_plan_of_that_moment_gives_the_room_back() -> None:
    planned, _ = _first_migration_over()
    assert not planned.plan.holds_room
    assert lowers(planned.quota, planned.plan.hard), "the cache's plan is a release"


async def test_a_release_waits_while_the_api_server_has_a_migration_the_cache_lacks() -> None:
    planned, live = _first_migration_over()
    reconciler, _client, _clock, _holding = lingering_reconciler(0.0, planned.quota)
    written: list[Any] = []

    def plan(_key: str, ns: dict[str, Any], **_options: Any) -> Any:
        return SimpleNamespace(
            namespace=ns,
            quota=planned.quota,
            snapshot=planned.snapshot,
            plan=planned.plan,
            labels_room=False,
            labelled_for_good=False,
            label_writes_wait=False,
        )

    async def write(*args: Any) -> None:
        written.append(args)

    async def read(_namespace: str) -> list[Any]:
        return live

    plans_with(reconciler, plan)
    reconciler._write_plan = write  # type: ignore[method-assign, assignment]
    reconciler.live_migrations = read
    with pytest.raises(RetryAfter):
        await reconciler._reconcile("ns", planned.snapshot.namespace)
    assert written == [], "no release while the API server has vm1's next migration"
    reconciler.live_migrations = _reconciler(live[:1]).live_migrations
    await reconciler._reconcile("ns", planned.snapshot.namespace)
    assert len(written) == 1, "the release is written once the API server confirms it"


async def test_a_release_the_api_server_confirms_is_written() -> None:
    planned, live = _first_migration_over()
    await _reconciler(live[:1])._confirm_release("ns", planned)
    finished = migration("m3", vmi("vm1"), phase="Failed")
    deleting = migration("m4", vmi("vm1"))
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert unseen([*live[:1], finished, deleting], live[:1]) == [], "neither can hold room"


async def test_a_release_is_written_when_the_migrations_cannot_be_listed() -> None:
    planned, _ = _first_migration_over()
    await _reconciler(errors.ApiError("down"))._confirm_release("ns", planned)


async def test_a_plan_that_gives_every_room_back_whatever_exists_is_not_held() -> None:
    planned, live = _first_migration_over()
    planned.plan.skipped = True
    await _reconciler(live)._confirm_release("ns", planned)
