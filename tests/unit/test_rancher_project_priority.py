"""A Rancher project's scarce room across its namespaces goes in KubeVirt's order (issue 41,
item 3, on Rancher's protected path): a drain's evacuation (system-critical) in one namespace
before a user's migration in a sibling, whichever namespace reconciles first; among one
priority, the older migration; a room that can never fit holds no one back; nothing a tenant
writes on its objects moves the order; a sibling is queued again when room moves; a partial
raise that stands is kept; the reconciler plans only its Rancher siblings' rooms; explain shows
the controller's last word. Fakes as in test_rancher_project_room.py: the Project served,
namespace patches applied, Rancher's agent assumed to copy what fits."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import datetime
import itertools
import json
from collections import Counter
from types import SimpleNamespace
from typing import Any, cast

from harvester_quota.controller.quotawriter import QuotaWriter
from harvester_quota.controller.resourcequota.projectdemands import (
    SIBLINGS_SLICE,
    ProjectDemands,
    siblings_waiting,
)
from harvester_quota.controller.resourcequota.rancher import (
    PROJECT_NO_ROOM_REASON,
    PROJECT_QUEUED_REASON,
    PROJECT_RECHECK,
    ProjectReader,
    ProjectRoom,
    RancherPath,
    project_index,
)
from harvester_quota.controller.resourcequota.reports import NamespaceReports, RefusalTracker
from harvester_quota.explain import explain, render_text
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.pendingwrites import PendingWrites
from harvester_quota.generic.store import Store
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.util.annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA
from harvester_quota.util.launcher import LauncherSettings
from harvester_quota.util.rancher.project import queued_verdict
from harvester_quota.util.resourcequota.base import (
    ANNOTATION_RANCHER_APPLIED,
    ANNOTATION_RANCHER_BASE,
    ANNOTATION_RANCHER_GIVEN,
)
from harvester_quota.util.resourcequota.plan import NamespaceSnapshot, plan_quota
from harvester_quota.util.resourcequota.rancherpath import (
    Step,
    WaitingCache,
    project_steps,
)

from tests.objects import (
    bare_launcher,
    launcher_pod,
    managed_quota,
    migration,
    rancher_namespace,
    vmi,
)
from tests.unit.test_quota_plan import V170_HARD, V170_LIMIT
from tests.unit.test_quota_scopes_in_fit_checks import ReadOnlyCluster

PROJECT_ID = "local:p-abcde"
SEED = '{"limit":{"limitsCpu":"3000m","limitsMemory":"5000Mi"}}'
"""Each namespace's base: one VM (2 cores, 4Gi) fills it; its migration's room is ~2 CPU."""
ROOM_FOR_ONE = {"limitsCpu": "8500m", "limitsMemory": "16000Mi"}
"""Two bases (6 CPU, 10000Mi) and one migration's room (2015m, ~4575Mi), not two."""
ROOM_FOR_TWO = {"limitsCpu": "10500m", "limitsMemory": "20000Mi"}
C_FULL = '{"limit":{"limitsCpu":"2015m","limitsMemory":"4600Mi"}}'
"""A third namespace of the project taking what room the project has (c's room given)."""
C_EMPTY = '{"limit":{"limitsCpu":"0","limitsMemory":"0"}}'
EARLY, LATE = "2026-01-01T00:00:00Z", "2026-01-01T00:00:07Z"


def unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")


class Cluster:
    """The API server as the Rancher path meets it: one Project served, namespaces whose
    annotation patches are applied (their tests checked, a failed one a Conflict), and the
    namespace cache, which shows every write at once unless `lagging`."""

    def __init__(self, limit: dict[str, str]) -> None:
        self.project = {
            "metadata": {"name": "p-abcde", "namespace": "local"},
            "spec": {
                "resourceQuota": {"limit": dict(limit)},
                "namespaceDefaultResourceQuota": {
                    "limit": {"limitsCpu": "3", "limitsMemory": "5000Mi"}
                },
            },
        }
        self.namespaces: dict[str, dict[str, Any]] = {}
        self.cache: dict[str, dict[str, Any]] = {}
        self.lagging = False
        self.versions = itertools.count(2)
        self.patched: list[str] = []

    def add(self, name: str, annotation: str = SEED) -> None:
        self.namespaces[name] = {
            "metadata": {
                "name": name,
                "uid": f"uid-{name}",
                "resourceVersion": "1",
                "annotations": {
                    "field.cattle.io/projectId": PROJECT_ID,
                    CATTLE_ANNOTATION_RESOURCE_QUOTA: annotation,
                },
            }
        }
        self.cache[name] = copy.deepcopy(self.namespaces[name])

    def set_cached(self, name: str, annotation: str) -> None:
        """The namespace's annotation as the cache shows it (someone else's write)."""
        self.cache[name]["metadata"]["annotations"][CATTLE_ANNOTATION_RESOURCE_QUOTA] = annotation

    def members(self, project: str) -> list[dict[str, Any]]:
        return [ns for ns in self.cache.values() if project in project_index(ns)]

    async def get(self, resource: Any, name: str, namespace: str | None = None) -> Any:
        return copy.deepcopy(self.project)

    async def patch(self, resource: Any, name: str, body: Any, *_: Any, **__: Any) -> Any:
        stored = self.namespaces[name]
        for op in body:
            parts = [unescape(p) for p in op["path"].split("/")[1:]]
            if parts == ["metadata", "uid"]:
                continue
            annotations = stored["metadata"]["annotations"]
            key = parts[-1]
            if op["op"] == "test" and annotations.get(key) != op["value"]:
                raise errors.Conflict(f"test of {key} failed")
            if op["op"] == "add":
                annotations[key] = op["value"]
            if op["op"] == "remove":
                annotations.pop(key, None)
        stored["metadata"]["resourceVersion"] = str(next(self.versions))
        self.patched.append(name)
        if not self.lagging:
            self.cache[name] = copy.deepcopy(stored)
        return copy.deepcopy(stored)

    def asks(self, name: str) -> str:
        return str(
            self.namespaces[name]["metadata"]["annotations"][CATTLE_ANNOTATION_RESOURCE_QUOTA]
        )

    def raised(self, name: str) -> bool:
        return self.asks(name) != SEED


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def event(self, obj: dict[str, Any], kind: str, reason: str, message: str) -> None:
        self.events.append((str(obj["metadata"]["name"]), reason, message))


class Project:
    """Namespaces of one project, each a base filled by its VMs, their migrations, and the
    Rancher path that reconciles them (a namespace's reconcile: its plan, then `write`)."""

    def __init__(self, limit: dict[str, str]) -> None:
        self.cluster = Cluster(limit)
        self.clock = FakeClock()
        self.queued: list[str] = []
        self.recorder = Recorder()
        counter = SimpleNamespace(inc=lambda *_: None)
        metrics: Any = SimpleNamespace(quota_writes=SimpleNamespace(labels=lambda *_: counter))
        self.demands = ProjectDemands(self.queued.append)
        self.pending = PendingWrites(Store(), self.clock)
        self.path = RancherPath(
            QuotaWriter(self.cluster, self.clock),  # type: ignore[arg-type]
            self.pending,
            metrics=metrics,
            recorder=self.recorder,  # type: ignore[arg-type]
            project_room=ProjectRoom(
                ProjectReader(self.cluster, self.clock),  # type: ignore[arg-type]
                self.recorder,  # type: ignore[arg-type]
                self.members,
                self.demands,
                self.siblings_waiting,
            ),
            reports=NamespaceReports(metrics, self.recorder, RefusalTracker(self.clock)),  # type: ignore[arg-type]
            writes=Counter(),
        )
        self.vms: dict[str, dict[str, Any]] = {}
        self.migrations: dict[str, list[dict[str, Any]]] = {}

    def namespace(self, name: str, vms: int = 1, annotation: str | None = None) -> None:
        self.cluster.add(name, annotation or SEED)
        self.migrations[name] = []
        for index in range(vms):
            self.vms[f"{name}-vm{index}"] = vmi(f"{name}-vm{index}", namespace=name)

    def migrate(
        self,
        namespace: str,
        name: str,
        *,
        vm: int = 0,
        created: str = EARLY,
        priority: str | None = None,
    ) -> dict[str, Any]:
        made = migration(name, self.vms[f"{namespace}-vm{vm}"])
        made["metadata"]["creationTimestamp"] = created
        if priority is not None:
            made["spec"]["priority"] = priority
        self.migrations[namespace].append(made)
        return made

    def end(self, namespace: str, name: str) -> None:
        self.migrations[namespace] = [
            m for m in self.migrations[namespace] if m["metadata"]["name"] != name
        ]

    def snapshot(self, name: str) -> tuple[NamespaceSnapshot, dict[str, Any]]:
        vms = {k: v for k, v in self.vms.items() if v["metadata"]["namespace"] == name}
        limit = {"limits.cpu": str(3 * len(vms)), "limits.memory": f"{5000 * len(vms)}Mi"}
        quota = managed_quota(name, limit)
        quota["metadata"]["namespace"] = name
        snapshot = NamespaceSnapshot(
            namespace=self.pending.newest(self.cluster.cache[name]),
            quota=quota,
            migrations=self.migrations[name],
            vmis=vms,
            pods=[bare_launcher(vm, f"virt-launcher-{key}") for key, vm in vms.items()],
            now=NOW,
            launcher=LauncherSettings(ratio="1.5", kubevirt_version="1.9"),
        )
        return snapshot, quota

    async def siblings_waiting(self, project: str, besides: str) -> list[Step]:
        """As the reconciler plans them: every other namespace's rooms not given yet."""
        steps: list[Step] = []
        for name in self.migrations:
            cached = self.pending.newest(self.cluster.cache[name])
            if name != besides and project in project_index(cached):
                snapshot, _ = self.snapshot(name)
                steps += project_steps(cached, plan_quota(snapshot))
        return steps

    async def reconcile(self, name: str) -> float | None:
        snapshot, quota = self.snapshot(name)
        plan = plan_quota(snapshot)
        assert plan.base is not None and plan.base.source == "rancher"
        return await self.path.write(self.cluster.cache[name], quota, plan, snapshot)

    def members(self, project: str) -> list[dict[str, Any]]:
        """The namespaces of `project` as the reconciler reads them: the cache, our writes it
        does not show yet applied (PlanInputs.namespaces)."""
        return [self.pending.newest(m) for m in self.cluster.members(project)]

    def warnings(self, reason: str) -> list[tuple[str, str]]:
        return [(name, message) for name, why, message in self.recorder.events if why == reason]


NOW = datetime.datetime(2026, 1, 1, 0, 1, tzinfo=datetime.UTC)


def evacuation_and_user(*, evacuation_created: str, user_created: str) -> Project:
    """Namespace a: a user's migration; namespace b: a drain's evacuation (system-critical);
    the project has room for one of the two."""
    project = Project(ROOM_FOR_ONE)
    project.namespace("a")
    project.namespace("b")
    project.migrate("a", "user-mig", created=user_created)
    project.migrate("b", "evacuation", created=evacuation_created, priority="system-critical")
    return project


async def test_the_evacuation_in_a_sibling_gets_the_room_whatever_the_reconcile_order() -> None:
    """A user's migration in a, an evacuation in b, room for one: the evacuation gets it
    whether it was created before or after the user's migration and whichever namespace
    reconciles first (a's first reconcile sees b's evacuation in the caches, before b's
    reconcile ever ran); a's raise waits."""
    for evacuation_created, user_created in ((LATE, EARLY), (EARLY, LATE)):
        for first, second in (("a", "b"), ("b", "a")):
            project = evacuation_and_user(
                evacuation_created=evacuation_created, user_created=user_created
            )
            await project.reconcile(first)
            await project.reconcile(second)
            await project.reconcile(first)
            case = (evacuation_created, first)
            assert project.cluster.raised("b"), case
            assert not project.cluster.raised("a"), case


async def test_the_user_s_raise_waits_named_and_follows_once_the_evacuation_s_room_is_given_back() -> (
    None
):
    """a reconciles first: its raise would fit, but the room goes to b's evacuation, and the
    Warning on a's quota, namespace and held migration names it. b is given the room; when
    b's migration ends and its room is given back, a is queued at once and raised."""
    project = evacuation_and_user(evacuation_created=LATE, user_created=EARLY)
    assert await project.reconcile("a") == PROJECT_RECHECK
    assert not project.cluster.raised("a")
    warned = project.warnings(PROJECT_QUEUED_REASON)
    assert {name for name, _ in warned} == {"default-abcde", "a", "user-mig"}
    assert all("b/evacuation (priority system-critical" in message for _, message in warned)
    assert await project.reconcile("b") is None and project.cluster.raised("b")
    assert project.queued == ["a"], "b's write moved the project's room: a is judged again"
    assert await project.reconcile("a") == PROJECT_RECHECK, "no room left for a"
    project.queued.clear()
    project.end("b", "evacuation")
    assert await project.reconcile("b") is None and not project.cluster.raised("b")
    assert project.queued == ["a"], "b gave its room back: a queued at once"
    assert await project.reconcile("a") is None
    assert project.cluster.raised("a")


async def test_a_sibling_waiting_behind_a_room_is_queued_when_that_room_is_given() -> None:
    """Room for one, taken by a third namespace: b's evacuation and a's user migration both
    wait. Once the third gives its room back, b (first in order) gets it; a is queued the
    moment b's waiting room goes (given), and a's raise follows once b's ends."""
    project = Project(ROOM_FOR_ONE)
    project.namespace("a")
    project.namespace("b")
    project.cluster.add("c", C_FULL)
    project.migrate("a", "user-mig", created=EARLY)
    project.migrate("b", "evacuation", created=LATE, priority="system-critical")
    assert await project.reconcile("b") == PROJECT_RECHECK
    assert await project.reconcile("a") == PROJECT_RECHECK
    assert project.warnings(PROJECT_NO_ROOM_REASON), "the project lacks the room: said so"
    project.cluster.set_cached("c", C_EMPTY)
    project.cluster.namespaces["c"] = copy.deepcopy(project.cluster.cache["c"])
    project.queued.clear()
    assert await project.reconcile("a") == PROJECT_RECHECK, "b's evacuation comes first"
    assert project.queued == []
    assert await project.reconcile("b") is None and project.cluster.raised("b")
    assert project.queued == ["a"], "a queued as b's waiting room went"
    project.end("b", "evacuation")
    await project.reconcile("b")
    assert await project.reconcile("a") is None and project.cluster.raised("a")


async def test_a_sibling_is_queued_when_the_migration_it_waited_behind_is_gone() -> None:
    project = Project(ROOM_FOR_ONE)
    project.namespace("a")
    project.namespace("b")
    project.cluster.add("c", C_FULL)
    project.migrate("a", "user-mig", created=LATE)
    project.migrate("b", "older-user-mig", created=EARLY)
    await project.reconcile("b")
    await project.reconcile("a")
    project.queued.clear()
    project.end("b", "older-user-mig")
    await project.reconcile("b")
    assert project.queued == ["a"]
    project.path.forget("a")
    project.queued.clear()
    project.migrate("b", "again", created=LATE)
    await project.reconcile("b")
    project.path.forget("b")
    assert project.queued == [], "no sibling waits: nothing to queue"


async def test_between_two_user_migrations_the_older_one_gets_the_room() -> None:
    for first in ("a", "b"):
        project = Project(ROOM_FOR_ONE)
        project.namespace("a")
        project.namespace("b")
        project.migrate("a", "newer", created=LATE)
        project.migrate("b", "older", created=EARLY)
        await project.reconcile(first)
        await project.reconcile("b" if first == "a" else "a")
        await project.reconcile(first)
        assert project.cluster.raised("b") and not project.cluster.raised("a"), first


async def test_a_newer_migration_waits_for_an_older_one_in_a_sibling_named_in_its_warning() -> None:
    """b's older migration waits while a third namespace holds the room; the room frees and
    a's newer migration is judged first: a does not take it, and says who goes first."""
    project = Project(ROOM_FOR_ONE)
    project.namespace("a")
    project.namespace("b")
    project.cluster.add("c", C_FULL)
    project.migrate("b", "older", created=EARLY)
    await project.reconcile("b")
    project.cluster.set_cached("c", C_EMPTY)
    project.migrate("a", "newer", created=LATE)
    assert await project.reconcile("a") == PROJECT_RECHECK
    assert not project.cluster.raised("a")
    (message,) = {m for _, m in project.warnings(PROJECT_QUEUED_REASON)}
    assert "b/older (priority default, created 2026-01-01T00:00:00Z)" in message


async def test_a_room_bigger_than_the_project_can_ever_give_holds_no_later_room_back() -> None:
    """b's evacuation needs more than the project limit less the bases (a 4-core VM), so it
    could not fit even with every given room back; a's user migration fits: it is raised, not
    starved behind a room the project can never give (no deadlock)."""
    project = Project(ROOM_FOR_ONE)
    project.namespace("a")
    project.cluster.add("b", SEED)
    project.migrations["b"] = []
    project.vms["b-vm0"] = vmi("b-vm0", namespace="b", cores=4, memory="4Gi")
    project.migrate("b", "big-evacuation", created=EARLY, priority="system-critical")
    project.migrate("a", "user-mig", created=LATE)
    assert await project.reconcile("b") == PROJECT_RECHECK
    assert project.warnings(PROJECT_NO_ROOM_REASON)
    assert await project.reconcile("a") is None
    assert project.cluster.raised("a") and not project.cluster.raised("b")


async def test_a_tenant_cannot_get_ahead_by_a_label_an_annotation_or_a_name() -> None:
    """Only spec.priority (which only virt-controller may set) and the API server's
    creationTimestamp order the rooms: a label or annotation naming a priority, or a name
    that sorts first, leaves a newer user migration behind an older one and any migration
    behind an evacuation."""
    project = Project(ROOM_FOR_ONE)
    project.namespace("a")
    project.namespace("b")
    sneaky = project.migrate("a", "0000-first", created=LATE)
    sneaky["metadata"]["labels"]["kubevirt.io/migration-priority"] = "system-critical"
    sneaky["metadata"]["annotations"] = {"kubevirt.io/priority": "system-critical"}
    sneaky["spec"]["priority"] = "i-am-important"  # not KubeVirt's: the default
    project.migrate("b", "zzzz-evac", created=LATE, priority="system-critical")
    await project.reconcile("a")
    await project.reconcile("b")
    assert project.cluster.raised("b") and not project.cluster.raised("a")
    tied = Project(ROOM_FOR_ONE)
    tied.namespace("a")
    tied.namespace("b")
    tied.migrate("a", "0000-newer", created=LATE)
    tied.migrate("b", "zzzz-older", created=EARLY)
    await tied.reconcile("a")
    await tied.reconcile("b")
    assert tied.cluster.raised("b") and not tied.cluster.raised("a")


T0, T5, T9 = "2026-01-01T00:00:00Z", "2026-01-01T00:00:05Z", "2026-01-01T00:00:09Z"
T1 = "2026-01-01T00:00:01Z"


async def _handoff(*, a1_cores: int) -> Project:
    """a's user migration a1 (T0, an `a1_cores` VM) is given the project's room; b's
    evacuation (T5, 2 cores) waits; the tenant starts a2 in a (T9, 2 cores), then a1 ends."""
    project = Project(ROOM_FOR_ONE)
    project.namespace("a", vms=2)
    project.vms["a-vm0"] = vmi("a-vm0", namespace="a", cores=a1_cores, memory="2Gi")
    project.namespace("b")
    project.migrate("a", "a1", vm=0, created=T0)
    assert await project.reconcile("a") is None and project.cluster.raised("a")
    project.migrate("b", "evac", created=T5, priority="system-critical")
    assert await project.reconcile("b") == PROJECT_RECHECK and not project.cluster.raised("b")
    project.migrate("a", "a2", vm=1, created=T9)
    await project.reconcile("a")
    project.end("a", "a1")
    project.queued.clear()
    return project


async def test_a_new_migration_does_not_inherit_an_ended_room_ahead_of_a_siblings_evacuation() -> (
    None
):
    """Review 50, major 1: a tenant starting a migration while its earlier one runs cannot
    keep the project's room once that one ends: the new room (as big, or bigger) was never
    given, so it waits behind b's earlier evacuation; a gives back the ended room (the release
    is written even though a is held back, else b could never fit) and b is raised."""
    for a1_cores in (2, 1):
        project = await _handoff(a1_cores=a1_cores)
        assert await project.reconcile("a") == PROJECT_RECHECK, a1_cores
        assert not project.cluster.raised("a"), "the ended room is given back"
        assert project.queued == ["b"], "b is queued at once by a's write"
        warned = {message for _, message in project.warnings(PROJECT_QUEUED_REASON)}
        assert any("b/evac (priority system-critical" in m for m in warned), warned
        assert await project.reconcile("b") is None and project.cluster.raised("b"), a1_cores
        assert await project.reconcile("a") == PROJECT_RECHECK
        assert not project.cluster.raised("a"), "a2 waits for the room b holds"


async def test_a_room_given_for_a_migration_is_kept_while_it_runs_beside_a_new_one() -> None:
    """The other side of the record: a1's room, given, stays while a1 runs; a2, started after
    b's evacuation, waits; a1's raise is not lowered for it."""
    project = Project(ROOM_FOR_ONE)
    project.namespace("a", vms=2)
    project.namespace("b")
    project.migrate("a", "a1", vm=0, created=T0)
    assert await project.reconcile("a") is None
    one = project.cluster.asks("a")
    project.migrate("b", "evac", created=T5, priority="system-critical")
    await project.reconcile("b")
    project.migrate("a", "a2", vm=1, created=T9)
    assert await project.reconcile("a") == PROJECT_RECHECK
    assert project.cluster.asks("a") == one and not project.cluster.raised("b")


async def test_a_given_room_is_not_taken_back_when_an_evacuation_arrives_beside_it() -> None:
    """a1's room is given; b's evacuation (T3) waits for it; then a drain evacuates a VM of a
    (T5). a1's room stays a1's (neither given back to b's earlier evacuation nor moved to a's
    own): a room once given is never taken back; both evacuations wait."""
    project = Project(ROOM_FOR_ONE)
    project.namespace("a", vms=2)
    project.namespace("b")
    project.migrate("a", "a1", vm=0, created=T0)
    assert await project.reconcile("a") is None
    one = project.cluster.asks("a")
    project.migrate("b", "b-evac", created="2026-01-01T00:00:03Z", priority="system-critical")
    assert await project.reconcile("b") == PROJECT_RECHECK
    project.migrate("a", "a-evac", vm=1, created=T5, priority="system-critical")
    assert await project.reconcile("a") == PROJECT_RECHECK
    assert project.cluster.asks("a") == one, "a1's room stands"
    given = project.cluster.namespaces["a"]["metadata"]["annotations"][ANNOTATION_RANCHER_GIVEN]
    assert given == f"{PROJECT_ID} {project.migrations['a'][0]['metadata']['uid']}", "given for a1"
    assert await project.reconcile("b") == PROJECT_RECHECK and not project.cluster.raised("b")


async def test_a_standing_partial_raise_is_lowered_once_it_no_longer_fits_on_its_own() -> None:
    """Minor 5: a standing raise for one of two migrations is kept at its recheck while it fits,
    but once the project's limit is lowered below it, it is given back, not kept for good."""
    project = Project(ROOM_FOR_ONE)
    project.namespace("a", vms=2)
    project.namespace("b")
    project.migrate("a", "a1", vm=0, created=T0)
    project.migrate("a", "a2", vm=1, created=T5)
    assert await project.reconcile("a") == PROJECT_RECHECK and project.cluster.raised("a")
    project.clock.step(PROJECT_RECHECK)
    written = len(project.cluster.patched)
    assert await project.reconcile("a") == PROJECT_RECHECK
    assert len(project.cluster.patched) == written and project.cluster.raised("a")
    project.cluster.project["spec"]["resourceQuota"]["limit"] = {
        "limitsCpu": "6000m",
        "limitsMemory": "10000Mi",
    }
    project.clock.step(PROJECT_RECHECK)
    assert await project.reconcile("a") == PROJECT_RECHECK
    assert not project.cluster.raised("a"), "a raise the project no longer fits goes"


async def test_a_waiter_is_queued_when_a_claim_goes_before_its_sibling_ever_recorded() -> None:
    """Minor 4: a is held behind b's evacuation, planned from the caches before b ever
    reconciled; the evacuation is gone before b's first reconcile. b's reconcile (on the Rancher
    path or not) queues a at once, not at its 30 s recheck."""
    for b_on_the_path in (True, False):
        project = evacuation_and_user(evacuation_created=LATE, user_created=EARLY)
        assert await project.reconcile("a") == PROJECT_RECHECK
        project.queued.clear()
        project.end("b", "evacuation")
        if b_on_the_path:
            await project.reconcile("b")
        else:
            project.path.asks_nothing("b")
        assert project.queued == ["a"], b_on_the_path
        assert await project.reconcile("a") is None and project.cluster.raised("a")


def test_a_move_in_a_big_project_logs_one_bounded_line(caplog: Any) -> None:
    """Minor 11: a room moving in a project of 200 waiting namespaces logs one line naming the
    first few and counting the rest; review 51 major 4: it queues one of them (the wave's
    first, in KubeVirt's order), not all 200."""
    queued: list[str] = []
    demands = ProjectDemands(queued.append)
    project = Project(ROOM_FOR_ONE)
    project.namespace("a")
    project.migrate("a", "m")
    steps = project_steps(project.cluster.cache["a"], plan_quota(project.snapshot("a")[0]))
    step = next(step for step in steps if not step.given)
    for index in range(200):
        demands.record(PROJECT_ID, f"ns{index:03d}", [dataclasses.replace(step, namespace="x")])
    caplog.set_level("INFO")
    demands.record(PROJECT_ID, "mover", [], wrote=True)
    assert len(queued) == 1 and demands.heading(PROJECT_ID, queued[0])
    (line,) = [r.getMessage() for r in caplog.records if "judged again" in r.getMessage()]
    assert "ns000, ns001, ns002, ns003, ns004 and 195 more (200 in all)" in line
    assert len(line) < 300


async def test_planning_siblings_yields_to_the_event_loop_between_siblings() -> None:
    """Major 2: planning a big project's siblings lets the event loop run (/healthz, the Lease
    renewal) once it has held it SIBLINGS_SLICE seconds, not only at the end."""
    project = Project(ROOM_FOR_ONE)
    for index in range(4):
        project.namespace(f"s{index}")
    ran: list[int] = []
    ticks = itertools.count()
    planner: Any = SimpleNamespace(defer_to=lambda name: True)  # each sibling costs a tick

    async def other_task() -> None:
        ran.append(next(ticks))

    task = asyncio.ensure_future(other_task())
    await siblings_waiting(
        PROJECT_ID,
        "none",
        planner=planner,
        members=project.members,
        ladders=project.path.project_room.demands.ladders,
        migrations=lambda _name: [],
        clock=lambda: next(ticks) * SIBLINGS_SLICE,
    )
    assert ran and task.done(), "another task ran while the siblings were planned"


def test_a_queued_verdict_names_a_few_migrations_and_counts_the_rest() -> None:
    """A namespace behind 99 siblings' migrations gets a Warning naming three and counting the
    other 96, not an Event message of every name; all 99 still count for its requeue."""
    first = [f"ns{index:03d}/mig (priority default, created T)" for index in range(99)]
    verdict = queued_verdict(first, [(f"ns{index:03d}", "uid") for index in range(99)])
    assert "ns000/mig" in verdict.message and "ns002/mig" in verdict.message
    assert "ns003/mig" not in verdict.message
    assert "and 96 more migrations of sibling namespaces" in verdict.message
    assert len(verdict.behind) == 99 and len(verdict.message) < 400


def _waiting(steps: list[Step]) -> list[Step]:
    """The steps of a namespace's ladder its project has not given it (they wait)."""
    return [step for step in steps if not step.given]


async def test_a_siblings_ladder_is_reused_only_while_its_annotations_and_plan_stand() -> None:
    """siblings_waiting ladders a sibling again only when what a ladder reads
    changed: the same annotations and an equal plan (made anew) give the same steps without
    laddering; a room that changed size, or the sibling's annotation written, ladder again."""
    project = Project(ROOM_FOR_ONE)
    project.namespace("b", vms=2)
    project.migrate("b", "b1", vm=0, created=T0)
    project.migrate("b", "b2", vm=1, created=T5)
    cache = WaitingCache()
    cached = project.cluster.cache["b"]

    def ladder(namespace: dict[str, Any]) -> list[Step]:
        return cache.steps(namespace, plan_quota(project.snapshot("b")[0]), PROJECT_ID)

    first = ladder(cached)
    assert len(_waiting(first)) == 2
    assert ladder(cached) is first
    project.vms["b-vm1"] = vmi("b-vm1", namespace="b", cores=4, memory="8Gi")
    bigger = ladder(cached)
    assert bigger is not first and bigger[-1].annotation != first[-1].annotation
    await project.reconcile("b")  # the project has room for b1's: b's annotation written
    assert project.cluster.raised("b")
    written = project.cluster.cache["b"]
    given = ladder(written)
    assert [step.room.migration for step in _waiting(given)] == ["b2"], "b1's room given now"
    cache.keep(PROJECT_ID, {"b"})
    assert ladder(written) is given
    cache.keep(PROJECT_ID, {"a"})  # b deleted or moved: its entry goes
    assert ladder(written) is not given


async def test_a_sibling_queued_before_the_cache_shows_a_room_given_back_is_raised_at_once() -> (
    None
):
    """b gives its room back and a is queued at once; the namespace cache does not show b's
    write yet, but a's judge sees it (our own writes), so a is raised now, not 30 s later."""
    project = evacuation_and_user(evacuation_created=LATE, user_created=EARLY)
    await project.reconcile("b")
    assert await project.reconcile("a") == PROJECT_RECHECK
    project.cluster.lagging = True
    project.end("b", "evacuation")
    project.queued.clear()
    assert await project.reconcile("b") is None
    assert project.queued == ["a"]
    assert await project.reconcile("a") is None
    assert project.cluster.raised("a")


async def test_a_standing_partial_raise_is_kept_not_lowered_at_each_recheck() -> None:
    """Three migrations in one namespace, room for two: the raise for two is written once and
    then stands; a recheck does not lower it to one (which took a room back, then gave it
    again, at every recheck)."""
    project = Project(ROOM_FOR_TWO)
    project.namespace("a", vms=3)
    project.cluster.add("b", SEED)
    project.migrations["b"] = []
    for vm, created in enumerate(("2026-01-01T00:00:01Z", "2026-01-01T00:00:02Z", LATE)):
        project.migrate("a", f"mig-{vm}", vm=vm, created=created)
    seeds = '{"limit":{"limitsCpu":"9000m","limitsMemory":"15000Mi"}}'
    project.cluster.namespaces["a"]["metadata"]["annotations"][CATTLE_ANNOTATION_RESOURCE_QUOTA] = (
        seeds
    )
    project.cluster.cache["a"] = copy.deepcopy(project.cluster.namespaces["a"])
    project.cluster.project["spec"]["resourceQuota"]["limit"] = {
        "limitsCpu": "16500m",
        "limitsMemory": "30000Mi",
    }
    assert await project.reconcile("a") == PROJECT_RECHECK
    assert project.cluster.patched == ["a"]
    two = project.cluster.asks("a")
    for _ in range(3):
        project.clock.step(PROJECT_RECHECK)
        assert await project.reconcile("a") == PROJECT_RECHECK
    assert project.cluster.patched == ["a"] and project.cluster.asks("a") == two
    assert json.loads(two)["limit"]["limitsCpu"] != "9000m"


async def test_explain_shows_the_controllers_last_word_on_the_siblings_that_go_first() -> None:
    """explain reads the controller's WaitingForEarlierMigrationsInProject Warning (the
    latest our controller reported, on the quota or a migration still holding room) into the
    Rancher project's lines; one about a migration that holds no room any more, one another
    component wrote, and any once the raise was given (minor 9), are not shown."""
    vm = vmi("vm1", "ns")
    namespace = rancher_namespace("ns", V170_LIMIT)
    namespace["metadata"]["annotations"]["field.cattle.io/projectId"] = PROJECT_ID

    def said(
        kind: str, name: str, message: str, time: str, by: str = "harvester-quota"
    ) -> dict[str, Any]:
        return {
            "metadata": {"name": f"e-{time}"},
            "reason": PROJECT_QUEUED_REASON,
            "involvedObject": {"kind": kind, "name": name},
            "message": message,
            "lastTimestamp": time,
            "reportingComponent": by,
            "source": {"component": by},
        }

    objects: dict[str, list[dict[str, Any]]] = {
        "namespaces": [namespace],
        "resourcequotas": [managed_quota("ns", V170_HARD)],
        "virtualmachineinstancemigrations": [migration("mine", vm)],
        "virtualmachineinstances": [vm],
        "pods": [launcher_pod(vm, "virt-launcher-vm1")],
        "events": [
            said("ResourceQuota", "default-abcde", "goes first to b/old", "2026-01-01T00:00:01Z"),
            said(
                "VirtualMachineInstanceMigration",
                "mine",
                "goes first to b/evac",
                "2026-01-01T00:00:09Z",
            ),
            said(
                "VirtualMachineInstanceMigration",
                "gone",
                "goes first to b/x",
                "2026-01-01T00:00:20Z",
            ),
            said(
                "VirtualMachineInstanceMigration",
                "mine",
                "forged: goes first to b/forged",
                "2026-01-01T00:00:30Z",
                by="someone-else",
            ),
        ],
    }
    found = await explain(cast(ApiClient, ReadOnlyCluster(objects)), "ns", kubevirt_version="1.6")
    assert found.rancher_project is not None
    assert found.rancher_project["queued_behind"]["message"] == "goes first to b/evac"
    assert "the controller, 2026-01-01T00:00:09Z: goes first to b/evac" in render_text(found)
    raised = '{"limit":{"limitsCpu":"100","limitsMemory":"1000Gi"}}'
    mine = objects["virtualmachineinstancemigrations"][0]["metadata"]["uid"]
    namespace["metadata"]["annotations"] |= {
        CATTLE_ANNOTATION_RESOURCE_QUOTA: raised,
        ANNOTATION_RANCHER_BASE: json.dumps({"limit": V170_LIMIT}),
        ANNOTATION_RANCHER_APPLIED: raised,
        ANNOTATION_RANCHER_GIVEN: mine,
    }
    given = await explain(cast(ApiClient, ReadOnlyCluster(objects)), "ns", kubevirt_version="1.6")
    assert given.rancher_project is not None
    assert given.rancher_project["queued_behind"] is None, "the raise was given since"
    objects["virtualmachineinstancemigrations"] = []
    idle = await explain(cast(ApiClient, ReadOnlyCluster(objects)), "ns", kubevirt_version="1.6")
    assert idle.rancher_project is not None and idle.rancher_project["queued_behind"] is None


async def test_the_reconciler_plans_the_waiting_rooms_of_its_rancher_siblings_only() -> None:
    """siblings_waiting plans, from the caches, each other namespace of the project with
    migrations whose base is Rancher's annotation: not the namespace judged, not one MTQ mode
    handles, not one without migrations (never planned), not one whose base is not Rancher's,
    not a Terminating one (never planned); one not refused by Rancher in this process yet is
    counted (after a restart it would otherwise lose its place); one whose plan fails for any
    reason is skipped, the others still counted (minors 3, 4 and 10)."""
    project = Project(ROOM_FOR_ONE)
    names = ("judged", "sibling", "mtq", "idle", "direct", "terminating", "unrefused", "broken")
    for name in names:
        project.namespace(name)
        if name != "idle":
            project.migrate(name, f"{name}-mig")
    project.cluster.cache["terminating"]["metadata"]["deletionTimestamp"] = T5
    planned: list[str] = []

    def plan(namespace: dict[str, Any]) -> Any:
        name = namespace["metadata"]["name"]
        planned.append(name)
        if name == "broken":
            raise KeyError("a bug planning one sibling")
        made = plan_quota(project.snapshot(name)[0])
        if name == "direct":
            made = dataclasses.replace(made, base=dataclasses.replace(made.base, source="quota"))
        return made

    project.path.protected.update({"sibling", "direct", "broken"})
    planner: Any = SimpleNamespace(defer_to=lambda name: name == "mtq", plan=plan)
    steps = await siblings_waiting(
        PROJECT_ID,
        "judged",
        planner=planner,
        members=project.members,
        ladders=project.path.project_room.demands.ladders,
        migrations=lambda name: project.migrations[name],
    )
    assert sorted((s.namespace, s.room.migration) for s in steps) == [
        ("sibling", "sibling-mig"),
        ("unrefused", "unrefused-mig"),
    ]
    assert sorted(planned) == ["broken", "direct", "sibling", "unrefused"]


def at(second: int) -> str:
    return f"2026-01-01T00:{second // 60:02d}:{second % 60:02d}Z"


def given_uids(project: Project, name: str) -> str:
    annotations = project.cluster.namespaces[name]["metadata"]["annotations"]
    return str(annotations.get(ANNOTATION_RANCHER_GIVEN, ""))


async def test_a_big_evacuation_is_not_starved_by_later_small_rooms_freeing_a_bit_at_a_time() -> (
    None
):
    """Review 51, major 1: a holds two small given rooms (created before b's 4-core
    evacuation) and starts a new small migration each time one ends. Each freed 2-core room
    would fit a's new one, but b's evacuation (earlier, and able to fit once a's rooms are
    back) holds it back: the rooms a was given are kept while their migrations run, and b is
    raised once they have ended."""
    project = Project({"limitsCpu": "10130m", "limitsMemory": "19300Mi"})
    project.namespace("a", vms=6)
    project.namespace("b")
    project.vms["b-vm0"] = vmi("b-vm0", namespace="b", cores=4, memory="4Gi")
    project.migrate("a", "t0", vm=0, created=at(0))
    t1 = project.migrate("a", "t1", vm=1, created=at(1))
    assert await project.reconcile("a") is None, "both small rooms given"
    project.migrate("b", "big-evac", created=at(10), priority="system-critical")
    assert await project.reconcile("b") == PROJECT_RECHECK, "no room now"
    project.migrate("a", "t2", vm=2, created=at(20))
    project.end("a", "t0")
    await project.reconcile("a")
    assert given_uids(project, "a").endswith(t1["metadata"]["uid"]), "t1's room kept"
    assert await project.reconcile("b") == PROJECT_RECHECK, "t1 still holds its room"
    await project.reconcile("a")
    assert not project.cluster.raised("b") and t1["metadata"]["uid"] in given_uids(project, "a")
    project.migrate("a", "t3", vm=3, created=at(21))
    project.end("a", "t1")
    for name in ("a", "b", "a"):
        await project.reconcile(name)
    assert project.cluster.raised("b"), "the evacuation gets the room a's ended rooms left"
    assert not project.cluster.raised("a"), "t2 and t3 wait behind it"


async def test_a_given_room_that_grows_stays_given_and_only_its_growth_is_judged() -> None:
    """Review 51, major 3: a1's room is given; b's evacuation waits; a1's room grows 100Mi
    (its target pod asks more). a1's room is not given away to b: its growth is judged
    against the project alone, fits, and a's raise follows it; b still waits."""
    project = Project(ROOM_FOR_TWO)
    project.namespace("a")
    project.namespace("b")
    project.cluster.add("c", C_FULL)
    project.migrations["c"] = []
    project.migrate("a", "a1", created=T0)
    assert await project.reconcile("a") is None and project.cluster.raised("a")
    project.migrate("b", "evac", created=T5, priority="system-critical")
    assert await project.reconcile("b") == PROJECT_RECHECK and not project.cluster.raised("b")
    one = project.cluster.asks("a")
    project.vms["a-vm0"] = vmi("a-vm0", namespace="a", memory="4196Mi")
    assert await project.reconcile("a") is None, "the growth fits the project: written"
    grown = json.loads(project.cluster.asks("a"))["limit"]["limitsMemory"]
    assert project.cluster.raised("a") and project.cluster.asks("a") != one, grown
    assert await project.reconcile("b") == PROJECT_RECHECK and not project.cluster.raised("b")


async def test_a_given_room_whose_growth_does_not_fit_stands_as_written_and_goes_to_no_sibling() -> (
    None
):
    """Review 52, major 1: a1's room is given; b's evacuation waits; a1's room grows 100Mi past
    what the project has left. a's raise stands as written (its growth waits, rechecked), it is
    not given back, and b is still not raised: a room once given is never taken back by the
    order. Once the project's limit is lowered below the raise standing, it goes."""
    project = Project({"limitsCpu": "8500m", "limitsMemory": "14625Mi"})
    project.namespace("a")
    project.namespace("b")
    project.migrate("a", "a1", created=T0)
    assert await project.reconcile("a") is None and project.cluster.raised("a")
    written = project.cluster.asks("a")
    project.migrate("b", "evac", created=T5, priority="system-critical")
    assert await project.reconcile("b") == PROJECT_RECHECK and not project.cluster.raised("b")
    project.vms["a-vm0"] = vmi("a-vm0", namespace="a", memory="4196Mi")
    assert await project.reconcile("a") == PROJECT_RECHECK, "the growth waits, rechecked"
    assert project.cluster.asks("a") == written, "the given room stands as written"
    assert await project.reconcile("b") == PROJECT_RECHECK and not project.cluster.raised("b")
    project.cluster.project["spec"]["resourceQuota"]["limit"] = {
        "limitsCpu": "6000m",
        "limitsMemory": "10000Mi",
    }
    project.clock.step(PROJECT_RECHECK)
    await project.reconcile("a")
    assert not project.cluster.raised("a"), "a standing raise the project no longer fits goes"


async def test_of_two_given_rooms_one_growing_past_the_free_room_neither_is_taken_back() -> None:
    """Review 52, major 1 with two rooms: a1 and a2 given; a2's room grows past what the
    project has left. a's raise is not lowered to a1's room alone (a2's given room taken back
    and handed to b's evacuation): both stay recorded, the annotation stands, b waits."""
    project = Project({"limitsCpu": "10530m", "limitsMemory": "19200Mi"})
    project.namespace("a", vms=2)
    project.namespace("b")
    project.migrate("a", "a1", vm=0, created=T0)
    project.migrate("a", "a2", vm=1, created=T1)
    assert await project.reconcile("a") is None
    written, record = project.cluster.asks("a"), given_uids(project, "a")
    project.migrate("b", "evac", created=T5, priority="system-critical")
    await project.reconcile("b")
    assert not project.cluster.raised("b")
    project.vms["a-vm1"] = vmi("a-vm1", namespace="a", memory="4196Mi")
    await project.reconcile("a")
    assert (project.cluster.asks("a"), given_uids(project, "a")) == (written, record)
    await project.reconcile("b")
    assert not project.cluster.raised("b")


async def test_an_ended_given_room_goes_back_while_another_given_room_waits_for_its_growth() -> (
    None
):
    """Review 53, major 1: a1 and a2 given; b's evacuation waits; a1 ends and a2's room grows
    past the free room plus a1's. a's raise is kept for a2 alone, capped at what stands: a1's
    room goes back (the CPU a2's growth does not touch is lowered) and the record names a2
    only; a2's growth waits."""
    project = Project({"limitsCpu": "10530m", "limitsMemory": "19200Mi"})
    project.namespace("a", vms=2)
    project.namespace("b")
    project.migrate("a", "a1", vm=0, created=T0)
    a2 = project.migrate("a", "a2", vm=1, created=T1)
    assert await project.reconcile("a") is None
    two = json.loads(project.cluster.asks("a"))["limit"]
    project.migrate("b", "evac", created=T5, priority="system-critical")
    assert await project.reconcile("b") == PROJECT_RECHECK
    project.end("a", "a1")
    project.vms["a-vm1"] = vmi("a-vm1", namespace="a", memory="9Gi")
    assert await project.reconcile("a") == PROJECT_RECHECK
    kept_for_a2 = json.loads(project.cluster.asks("a"))["limit"]
    assert kept_for_a2["limitsCpu"] != two["limitsCpu"], "a1's ended room went back"
    assert project.cluster.raised("a"), "a2's given room is kept"
    assert given_uids(project, "a") == f"{PROJECT_ID} {a2['metadata']['uid']}"


async def test_a_lowered_project_limit_keeps_the_given_rooms_that_still_fit() -> None:
    """Review 53, major 2: a1 and a2 given with room for two; the project's limit is lowered to
    room for one (and a3 arrives). The raise standing no longer fits, so smaller sets of the
    given rooms are tried, against the project alone: a keeps a1's room, not its base."""
    project = Project(ROOM_FOR_TWO)
    project.namespace("a", vms=3)
    project.namespace("b")
    project.migrate("a", "a1", vm=0, created=T0)
    project.migrate("a", "a2", vm=1, created=T1)
    assert await project.reconcile("a") is None
    project.cluster.project["spec"]["resourceQuota"]["limit"] = dict(ROOM_FOR_ONE)
    project.migrate("a", "a3", vm=2, created=T5)
    project.clock.step(PROJECT_RECHECK)
    assert await project.reconcile("a") == PROJECT_RECHECK
    assert project.cluster.raised("a"), "a1's room fits the lowered project: kept"


async def test_a_raise_without_the_record_gets_it_at_once_so_no_later_migration_inherits_it() -> (
    None
):
    """Review 51, major 2: a raise for a1 written before the record existed (an upgrade): the
    first reconcile writes the record, freezing the rooms given at a1's; when a1 ends and a2
    (same size, created after b's evacuation) runs, a2 does not inherit the room: b gets it."""
    project = Project(ROOM_FOR_ONE)
    project.namespace("a", vms=2)
    project.namespace("b")
    a1 = project.migrate("a", "a1", vm=0, created=T0)
    assert await project.reconcile("a") is None and project.cluster.raised("a")
    for store in (project.cluster.namespaces, project.cluster.cache):
        store["a"]["metadata"]["annotations"].pop(ANNOTATION_RANCHER_GIVEN)
    project.pending.forget("a")
    assert await project.reconcile("a") is None
    assert given_uids(project, "a") == f"{PROJECT_ID} {a1['metadata']['uid']}", "recorded"
    project.migrate("b", "evac", created=T5, priority="system-critical")
    assert await project.reconcile("b") == PROJECT_RECHECK
    project.migrate("a", "a2", vm=1, created=T9)
    project.end("a", "a1")
    for name in ("a", "b", "a"):
        await project.reconcile(name)
    assert project.cluster.raised("b") and not project.cluster.raised("a")


async def test_a_namespace_moved_to_another_project_keeps_no_room_given_by_the_first() -> None:
    """Review 51, minor 8: the record names the project that gave the rooms; once the
    namespace names another project, none of them counts as given there: its room is judged
    again in its new project's order (here behind the evacuation of a namespace already in
    it) and given back."""
    project = Project(ROOM_FOR_ONE)
    project.namespace("a")
    project.migrate("a", "a1", created=LATE)
    other = "local:p-other"
    project.namespace("b")
    assert await project.reconcile("a") is None and project.cluster.raised("a")
    project.migrate("b", "evac", created=EARLY, priority="system-critical")
    for store in (project.cluster.namespaces, project.cluster.cache):
        for name in ("a", "b"):
            store[name]["metadata"]["annotations"]["field.cattle.io/projectId"] = other
    project.cluster.project["metadata"]["name"] = "p-other"  # as big as the first
    project.pending.forget("a")
    project.clock.step(10)
    steps = project_steps(project.cluster.cache["a"], plan_quota(project.snapshot("a")[0]))
    assert any(not step.given for step in steps)
    assert await project.reconcile("a") == PROJECT_RECHECK
    assert not project.cluster.raised("a"), "given back: the new project gave it nothing"


async def test_a_raise_written_while_the_project_cannot_be_read_records_no_room_as_given() -> None:
    """Review 51, minor 5: the project read fails (a transient error): the raise is written
    unjudged, but its record names no room, so the room still waits in the project's order:
    once the project can be read, it goes to b's earlier evacuation."""
    project = evacuation_and_user(evacuation_created=LATE, user_created=EARLY)
    failing = project.cluster.get

    async def unavailable(*_: Any, **__: Any) -> Any:
        raise errors.ApiError("etcd leader changed")

    project.cluster.get = unavailable  # type: ignore[method-assign]
    assert await project.reconcile("a") is None and project.cluster.raised("a")
    assert given_uids(project, "a") == f"{PROJECT_ID} ", "no room recorded as given"
    project.cluster.get = failing  # type: ignore[method-assign]
    project.clock.step(10)
    for name in ("a", "b", "a"):
        await project.reconcile(name)
    assert project.cluster.raised("b") and not project.cluster.raised("a")


async def _freed_room(waiters: int) -> tuple[Project, str, int, int]:
    """A project of `waiters` waiting namespaces (one, `head`, first in KubeVirt's order) and
    h holding the one room; h's migration ends. Returns the project, the head, and how many
    judgments (reconciles of a waiter) and sibling plannings the freed room cost until no
    namespace was queued."""
    project = Project(
        {"limitsCpu": f"{3000 * waiters + 5015}m", "limitsMemory": f"{5000 * waiters + 9600}Mi"}
    )
    project.namespace("h")
    project.migrate("h", "hm", created="2025-12-31T00:00:00Z")
    assert await project.reconcile("h") is None and project.cluster.raised("h")
    head = f"w{waiters - 1:03d}"
    for index in range(waiters):
        project.namespace(f"w{index:03d}")
        project.migrate(f"w{index:03d}", "m", created=EARLY if index == waiters - 1 else LATE)
    for index in range(waiters):
        assert await project.reconcile(f"w{index:03d}") == PROJECT_RECHECK
    plannings = 0
    planner = project.siblings_waiting

    async def counting(name: str, besides: str) -> list[Step]:
        nonlocal plannings
        plannings += 1
        return await planner(name, besides)

    project.path.project_room.siblings_waiting = counting
    project.queued.clear()
    project.end("h", "hm")
    await project.reconcile("h")
    judgments = 0
    while project.queued:
        judgments += 1
        await project.reconcile(project.queued.pop(0))
    return project, head, judgments, plannings


async def test_one_freed_room_is_judged_by_the_first_waiter_not_every_waiter() -> None:
    """Review 51, major 4: a room given back in a project of 40 waiting namespaces queues the
    waiters one at a time in KubeVirt's order: the first (the head) gets it and the wave
    stops at the next, which can no longer fit: two judgments, each planning the siblings
    once (O(N) sibling plans per freed room, not O(N^2))."""
    project, head, judgments, plannings = await _freed_room(40)
    assert project.cluster.raised(head)
    assert sum(project.cluster.raised(f"w{i:03d}") for i in range(40)) == 1
    assert judgments <= 2 and plannings <= 2 * judgments, (judgments, plannings)


async def test_the_wave_goes_past_a_room_the_project_can_never_give_to_one_that_fits() -> None:
    """Review 51, major 4, no deadlock: the wave's first waiter (b's 4-core evacuation, more than
    the project could ever give) holds no one back, so the wave goes on to a's room, which
    fits the freed room: a is raised by the wave, not at its 30 s recheck."""
    project = Project(ROOM_FOR_ONE)
    project.namespace("a")
    project.namespace("b")
    project.vms["b-vm0"] = vmi("b-vm0", namespace="b", cores=4, memory="4Gi")
    project.cluster.add("c", C_FULL)
    project.migrations["c"] = []
    project.migrate("b", "big-evac", created=EARLY, priority="system-critical")
    project.migrate("a", "user-mig", created=LATE)
    assert await project.reconcile("b") == PROJECT_RECHECK
    assert await project.reconcile("a") == PROJECT_RECHECK
    project.queued.clear()
    project.cluster.set_cached("c", C_EMPTY)
    project.demands.record(PROJECT_ID, "c", [], wrote=True)  # c gave its room back
    assert project.queued == ["b"], "the wave starts with the first in KubeVirt's order"
    await project.reconcile(project.queued.pop(0))
    assert project.queued == ["a"], "b's room can never be given: the wave goes on"
    assert await project.reconcile(project.queued.pop(0)) is None
    assert project.cluster.raised("a") and not project.cluster.raised("b")


async def test_a_projects_lock_and_a_forgotten_siblings_ladder_are_not_kept() -> None:
    """Review 51, minor 12: a project's lock lives while a write holds or waits for it, then
    goes; a namespace no longer ours drops its cached ladder."""
    demands = ProjectDemands(lambda _name: None)
    inside: list[bool] = []

    async def write() -> None:
        async with demands.judging(PROJECT_ID):
            inside.append(demands.lock(PROJECT_ID).locked())
            await asyncio.sleep(0)

    await asyncio.gather(write(), write())
    assert inside == [True, True] and demands._locks == {}
    project = Project(ROOM_FOR_ONE)
    project.namespace("b")
    project.migrate("b", "b1")
    cache = WaitingCache()
    first = cache.steps(project.cluster.cache["b"], plan_quota(project.snapshot("b")[0]), "p")
    cache.forget("b")
    again = cache.steps(project.cluster.cache["b"], plan_quota(project.snapshot("b")[0]), "p")
    assert again == first and again is not first
