"""A release is written only once the API server shows no migration the plan has not read.

The v170-test4 scenario's second migration of a VM was created as the first one's source pod
went: the controller's cache did not show it yet, its plan gave the VM's room back, and the
target pod met quota admission between that release and the raise that followed (refused once).
"""

from __future__ import annotations

import datetime
import logging
from types import SimpleNamespace
from typing import Any

import pytest
from harvester_quota.controller.resourcequota.writes import (
    MAX_WARNED,
    ReleaseCheck,
    unseen,
    write_lowers,
)
from harvester_quota.generic import errors
from harvester_quota.generic.sharedhandler import RetryAfter
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.util.annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA
from harvester_quota.util.launcher import LauncherSettings
from harvester_quota.util.podusage import pod_quota_usage
from harvester_quota.util.resourcequota.base import (
    ANNOTATION_RANCHER_APPLIED,
    ANNOTATION_RANCHER_BASE,
)
from harvester_quota.util.resourcequota.plan import NamespaceSnapshot, plan_quota
from harvester_quota.util.resourcequota.rancherpath import raised_annotation

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
    return plan_quota(snapshot), [first, second]


class ApiServer:
    """Pages of `live` as the API server serves them: `continue` while more remain, and
    remainingItemCount with it unless `counts` is False. `limits` records each read's limit."""

    def __init__(self, live: list[Any] | Exception, counts: bool = True) -> None:
        self.live, self.counts, self.limits = live, counts, list[int]()

    async def __call__(self, _namespace: str, limit: int, token: str | None) -> dict[str, Any]:
        self.limits.append(limit)
        if isinstance(self.live, Exception):
            raise self.live
        start = int(token or 0)
        items, rest = self.live[start : start + limit], len(self.live) - start - limit
        meta: dict[str, Any] = {"continue": str(start + limit)} if rest > 0 else {}
        if rest > 0 and self.counts:
            meta["remainingItemCount"] = rest
        return {"items": items, "metadata": meta}


def _reconciler(live: list[Any] | Exception, counts: bool = True) -> tuple[Any, ApiServer]:
    reconciler = bare_reconciler(FakeClock())
    server = ApiServer(live, counts)
    reconciler.release_check = ReleaseCheck(server, reconciler.management.clock)
    return reconciler, server


def _created(item: Any, seconds_before: float, now: datetime.datetime = NOW) -> Any:
    moment = now - datetime.timedelta(seconds=seconds_before)
    item["metadata"]["creationTimestamp"] = moment.isoformat()
    return item


def test_the_cached_plan_of_that_moment_gives_the_room_back() -> None:
    planned, _ = _first_migration_over()
    assert not planned.holds_room
    assert write_lowers(planned.snapshot.quota, None, planned), "the cache's plan is a release"


async def test_a_release_waits_while_the_api_server_has_a_migration_the_cache_lacks() -> None:
    planned, live = _first_migration_over()
    reconciler, _client, _clock, _holding = lingering_reconciler(0.0, planned.snapshot.quota)
    written: list[Any] = []

    def plan(_key: str, _ns: dict[str, Any], **_options: Any) -> Any:
        return planned

    async def write(*args: Any) -> None:
        written.append(args)

    plans_with(reconciler, plan)
    reconciler._write_plan = write  # type: ignore[method-assign, assignment]
    reconciler.release_check = ReleaseCheck(ApiServer(live), reconciler.management.clock)
    with pytest.raises(RetryAfter):
        await reconciler._reconcile("ns", planned.snapshot.namespace)
    assert written == [], "no release while the API server has vm1's next migration"
    reconciler.release_check = _reconciler(live[:1])[0].release_check
    await reconciler._reconcile("ns", planned.snapshot.namespace)
    assert len(written) == 1, "the release is written once the API server confirms it"


async def test_a_release_the_api_server_confirms_is_written() -> None:
    planned, live = _first_migration_over()
    await _reconciler(live[:1])[0]._confirm_release("ns", planned)
    finished = migration("m3", vmi("vm1"), phase="Failed")
    deleting = migration("m4", vmi("vm1"))
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert unseen([*live[:1], finished, deleting], live[:1]) == [], "neither can hold room"


async def test_a_release_is_written_when_the_migrations_cannot_be_listed_and_a_warning_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    planned, _ = _first_migration_over()
    reconciler, _server = _reconciler(errors.ApiError("forbidden"))
    with caplog.at_level(logging.WARNING):
        await reconciler._confirm_release("ns", planned)
        await reconciler._confirm_release("ns", planned)
        assert len(caplog.records) == 1, "one warning a minute, not one per release"
        reconciler.management.clock.step(60.0)
        await reconciler._confirm_release("ns", planned)
    assert len(caplog.records) == 2 and "migrations not listed" in caplog.text


async def test_a_plan_that_gives_every_room_back_whatever_exists_is_not_held() -> None:
    planned, live = _first_migration_over()
    planned.skipped = True
    await _reconciler(live)[0]._confirm_release("ns", planned)


async def test_a_release_the_count_confirms_reads_one_migration_only() -> None:
    planned, live = _first_migration_over()
    earlier = migration("m0", vmi("vm1"), phase="Succeeded")
    planned.snapshot.migrations.append(earlier)
    reconciler, server = _reconciler([live[0], earlier])
    await reconciler._confirm_release("ns", planned)
    assert server.limits == [1], "the API server holds no more than the cache: no full LIST"
    reconciler, server = _reconciler([live[0], earlier, live[1]])
    with pytest.raises(RetryAfter):
        await reconciler._confirm_release("ns", planned)
    assert server.limits == [1, 500], "one more than the cache: all are listed"


async def test_a_count_above_the_caches_lists_them_all_in_pages() -> None:
    planned, live = _first_migration_over()
    reconciler, server = _reconciler([*live[:1] * 600, live[1]])
    with pytest.raises(RetryAfter):
        await reconciler._confirm_release("ns", planned)
    assert server.limits == [1, 500, 500], "paged, so that no single decode is large"


async def test_a_list_without_a_count_is_read_in_full() -> None:
    planned, live = _first_migration_over()
    reconciler, server = _reconciler([*live[:1], live[1]], counts=False)
    with pytest.raises(RetryAfter):
        await reconciler._confirm_release("ns", planned)
    assert server.limits == [1, 500]


async def test_a_migration_the_cache_lacks_30_s_after_its_creation_is_warned_of_once_and_let_go(
    caplog: pytest.LogCaptureFixture,
) -> None:
    planned, live = _first_migration_over()
    reconciler, _server = _reconciler([live[0], _created(live[1], 29.0)])
    with pytest.raises(RetryAfter):
        await reconciler._confirm_release("ns", planned)
    reconciler.management.clock.step(1.0)
    with caplog.at_level(logging.WARNING):
        await reconciler._confirm_release("ns", planned)
        await reconciler._confirm_release("ns", planned)
    assert len(caplog.records) == 1 and "ns/m2" in caplog.text


async def test_a_release_through_rancher_is_judged_on_the_annotation_not_on_spec_hard() -> None:
    planned, live = _first_migration_over()
    reconciler, server = _reconciler(live)
    reconciler.rancher = SimpleNamespace(
        through=lambda *_: True, pending=SimpleNamespace(newest=lambda ns: ns)
    )
    await reconciler._confirm_release("ns", planned)
    assert server.limits == [], "the annotation is back at the base: nothing is lowered"
    annotations = planned.snapshot.namespace["metadata"]["annotations"]
    base = annotations[CATTLE_ANNOTATION_RESOURCE_QUOTA]
    raised = raised_annotation(base, planned.snapshot.quota["spec"]["hard"])
    annotations.update(
        {
            CATTLE_ANNOTATION_RESOURCE_QUOTA: raised,
            ANNOTATION_RANCHER_BASE: base,
            ANNOTATION_RANCHER_APPLIED: raised,
        }
    )
    with pytest.raises(RetryAfter):
        await reconciler._confirm_release("ns", planned)


async def test_the_memory_of_stale_migrations_warned_of_stays_bounded() -> None:
    """A tenant's stream of migrations the cache never stores (each let go after 30 s) cannot
    grow what the check remembers past MAX_WARNED."""
    clock = FakeClock()
    stale = [
        {
            "metadata": {
                "name": f"m{i}",
                "namespace": "ns",
                "uid": f"u{i}",
                "creationTimestamp": (clock.now() - datetime.timedelta(seconds=60)).isoformat(),
            }
        }
        for i in range(MAX_WARNED + 10)
    ]
    check = ReleaseCheck(ApiServer(stale, counts=False), clock)
    assert await check.waits("ns", []) == []
    assert 0 < len(check.warned) <= MAX_WARNED
