"""A raise through Rancher's annotation and the Rancher project's room: the project as read from
its object, the fit as Rancher's agent judges it (every sibling, the namespace default), the
Warning that names the cause and the amount ("raise the project limit by X"), and the reconcile
that holds such a raise back instead of writing one Rancher will refuse."""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections import Counter
from types import SimpleNamespace
from typing import Any

from harvester_quota.controller.quotawriter import QuotaWriter
from harvester_quota.controller.resourcequota.rancher import (
    PROJECT_NO_ROOM_REASON,
    PROJECT_RECHECK,
    PROJECT_TTL,
    ProjectReader,
    ProjectRoom,
    RancherPath,
    project_index,
)
from harvester_quota.controller.resourcequota.reports import NamespaceReports, RefusalTracker
from harvester_quota.generic import errors
from harvester_quota.generic.pendingwrites import PendingWrites
from harvester_quota.generic.store import Store
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.util.annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA
from harvester_quota.util.launcher import LauncherSettings
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.rancher.annotation import RancherLimit
from harvester_quota.util.rancher.project import (
    NO_ROOM,
    ProjectQuota,
    lacks_room,
    namespace_fit,
    raise_verdict,
    refusal_verdict,
    validated_condition,
)
from harvester_quota.util.resourcequota.base import (
    ANNOTATION_RANCHER_APPLIED,
    ANNOTATION_RANCHER_BASE,
    ANNOTATION_RANCHER_GIVEN,
)
from harvester_quota.util.resourcequota.plan import NamespaceSnapshot, plan_quota
from harvester_quota.util.resourcequota.rancherpath import annotation_patch, prefixes
from harvester_quota.util.resources import parse_resource_list

from tests.objects import bare_launcher, managed_quota, migration, vmi

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
SEED = '{"limit":{"limitsCpu":"3000m","limitsMemory":"5000Mi"}}'


def project_object(limit: dict[str, Any], default: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "management.cattle.io/v3",
        "kind": "Project",
        "metadata": {"name": "p-abcde", "namespace": "local"},
        "spec": {
            "resourceQuota": {"limit": limit, "usedLimit": {"limitsCpu": "3"}},
            "namespaceDefaultResourceQuota": {"limit": default},
        },
    }


PROJECT = ProjectQuota.from_object(
    project_object(
        {"limitsCpu": "8", "limitsMemory": "20000Mi"},
        {"limitsCpu": "3", "limitsMemory": "5000Mi"},
    )
)


def member(name: str, annotation: str | None, *, project: str = "local:p-abcde") -> dict[str, Any]:
    annotations = {"field.cattle.io/projectId": project}
    if annotation is not None:
        annotations[CATTLE_ANNOTATION_RESOURCE_QUOTA] = annotation
    return {"metadata": {"name": name, "annotations": annotations}}


def condition(status: bool, message: str = "") -> str:
    return json.dumps(
        {
            "Conditions": [
                {
                    "Type": "ResourceQuotaValidated",
                    "Status": "True" if status else "False",
                    "Message": message,
                    "LastUpdateTime": "2026-01-01T00:00:01Z",
                }
            ]
        }
    )


def hard(**values: str) -> dict[str, Any]:
    return dict(parse_resource_list({k.replace("_", "."): v for k, v in values.items()}))


def test_a_project_is_read_from_its_object_with_rancher_s_fields() -> None:
    assert PROJECT.id == "local:p-abcde"
    assert PROJECT.limit == RancherLimit({"limits.cpu": "8", "limits.memory": "20000Mi"})
    extended = ProjectQuota.from_object(
        project_object(
            {"limitsCpu": "8", "extended": {"requests.nvidia.com/gpu": "4"}},
            {"limitsCpu": "1", "extended": {"requests.nvidia.com/gpu": "1"}},
        )
    )
    assert extended.limit is not None
    assert extended.limit.hard() == hard(limits_cpu="8", **{"requests.nvidia.com/gpu": "4"})
    bare = ProjectQuota.from_object({"metadata": {"name": "p", "namespace": "c"}, "spec": {}})
    assert bare.limit is None and bare.namespace_default is None


def test_a_malformed_project_reads_as_one_that_cannot_be_judged_instead_of_raising() -> None:
    """A project whose quota fields were not objects raised AttributeError (or TypeError) out
    of every reconcile, preflight and explain that read it."""
    for spec in (
        {"resourceQuota": "8", "namespaceDefaultResourceQuota": ["3"]},
        {"resourceQuota": {"limit": "8"}, "namespaceDefaultResourceQuota": {"limit": []}},
        {"resourceQuota": {"limit": {"extended": ["gpu"]}, "usedLimit": 3}},
    ):
        project = ProjectQuota.from_object({"metadata": {"name": "p-abcde"}, "spec": spec})
        verdict = raise_verdict(member("ns", SEED), SEED, project, [member("other", SEED)])
        assert verdict is None, spec
    assert ProjectQuota.from_object({"metadata": [], "spec": "x"}).limit is None
    unreadable = ProjectQuota.from_object(project_object({"limitsCpu": "eight"}, {}))
    assert unreadable.limit == RancherLimit({"limits.cpu": "eight"})
    assert raise_verdict(member("ns", SEED), SEED, unreadable, []) is None


def test_the_fit_counts_every_sibling_of_the_project_and_no_other() -> None:
    """Rancher sums the namespace's completed limit and every other namespace of the project's
    own annotation, validated or not; another project's namespaces do not count."""
    ns = member("ns", SEED)
    siblings = [
        ns,
        member("full", '{"limit":{"limitsCpu":"4"}}'),
        member("marked", '{"limit":{"limitsCpu":"1"}}'),
        member("elsewhere", '{"limit":{"limitsCpu":"100"}}', project="local:p-other"),
        member("bare", None),
    ]
    fit = namespace_fit(ns, SEED, PROJECT, siblings)
    assert fit is not None and fit.fits  # 3 + 4 + 1 = 8
    raised = '{"limit":{"limitsCpu":"5015m","limitsMemory":"5000Mi"}}'
    fit = namespace_fit(ns, raised, PROJECT, siblings)
    assert fit is not None and not fit.fits
    assert fit.exceeded == hard(limits_cpu="10015m")
    assert fit.shortfall == hard(limits_cpu="2015m")
    assert fit.message() == "Resource quota [limits.cpu=10015m] exceeds project limit"


def test_the_fit_judges_the_request_completed_with_the_namespace_default() -> None:
    """A request without limits.memory is judged with the default's 5000Mi, as Rancher copies
    it into the quota."""
    ns = member("ns", '{"limit":{"limitsCpu":"1"}}')
    others = [member("big", '{"limit":{"limitsMemory":"16000Mi"}}')]
    fit = namespace_fit(ns, '{"limit":{"limitsCpu":"1"}}', PROJECT, [ns, *others])
    assert fit is not None and not fit.fits
    assert fit.shortfall == hard(limits_memory="1000Mi")


def test_a_raise_without_room_is_named_with_the_amount_the_project_lacks() -> None:
    ns = member("ns", SEED)
    siblings = [ns, member("full", '{"limit":{"limitsCpu":"5","limitsMemory":"15000Mi"}}')]
    raised = '{"limit":{"limitsCpu":"5015m","limitsMemory":"9797464313"}}'
    verdict = raise_verdict(ns, raised, PROJECT, siblings)
    assert verdict is not None
    # limits.memory: 9797464313 + 15000Mi (15728640000) - 20000Mi (20971520000) = 4554584313
    assert verdict.message == (
        f"{NO_ROOM}: raise the project limit by limits.cpu 2015m, limits.memory 4554584313"
    )
    assert raise_verdict(ns, SEED, PROJECT, siblings) is None, "the base fits"
    assert raise_verdict(ns, raised, None, siblings) is None, "no project read: not judged"
    no_quota = ProjectQuota("local:p-abcde", None, None)
    assert raise_verdict(ns, raised, no_quota, siblings) is None


def test_rancher_s_condition_tells_when_the_project_cannot_be_read() -> None:
    marked = member("ns", '{"limit":{"limitsCpu":"9"}}')
    rancher = "Resource quota [limits.cpu=9] exceeds project limit"
    marked["metadata"]["annotations"]["cattle.io/status"] = condition(False, rancher)
    assert validated_condition(marked) == (False, rancher)
    assert lacks_room(marked) == rancher
    verdict = refusal_verdict(marked, None, [marked])
    assert verdict is not None and rancher in verdict.message
    assert verdict.message.startswith(f"{NO_ROOM}: raise the project limit")
    exact = refusal_verdict(marked, PROJECT, [marked])
    assert exact is not None and exact.message.endswith("by limits.cpu 1")
    roomy = ProjectQuota.from_object(project_object({"limitsCpu": "10"}, {"limitsCpu": "1"}))
    assert refusal_verdict(marked, roomy, [marked]) is None, "its limit was raised since"
    fine = member("ns", SEED)
    fine["metadata"]["annotations"]["cattle.io/status"] = condition(True)
    assert refusal_verdict(fine, None, [fine]) is None
    assert validated_condition(member("ns", SEED)) is None


class ProjectClient:
    """Serves one Project object (or refuses, or has none) and records namespace patches."""

    def __init__(self, project: dict[str, Any] | None, *, refuse: bool = False) -> None:
        self.project, self.refuse = project, refuse
        self.gets = 0
        self.patches: list[dict[str, Any]] = []

    async def get(self, resource: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        self.gets += 1
        if self.refuse:
            raise errors.Forbidden("projects is forbidden: cannot get", status=403)
        if self.project is None:
            raise errors.NotFound("the server could not find the requested resource", status=404)
        return self.project

    async def patch(
        self, resource: Any, name: str, body: dict[str, Any], *_: Any, **__: Any
    ) -> Any:
        self.patches.append(body)
        return {"metadata": {"name": name, "resourceVersion": "9"}}


async def test_the_reader_keeps_a_project_for_a_while_and_backs_off_when_refused() -> None:
    clock = FakeClock()
    client = ProjectClient(project_object({"limitsCpu": "8"}, {"limitsCpu": "3"}))
    reader = ProjectReader(client, clock)  # type: ignore[arg-type]
    ns = member("ns", SEED)
    assert (await reader.project_of(ns)) is not None
    assert (await reader.project_of(ns)) is not None and client.gets == 1
    clock.step(PROJECT_TTL)
    await reader.project_of(ns)
    assert client.gets == 2, "read again once the PROJECT_TTL is over"
    assert await reader.project_of(member("x", SEED, project="")) is None
    refused = ProjectClient(None, refuse=True)
    gated = ProjectReader(refused, clock)  # type: ignore[arg-type]
    assert await gated.project_of(ns) is None and await gated.project_of(ns) is None
    assert refused.gets == 1, "not asked again during the backoff"
    missing = ProjectClient(None)
    assert await ProjectReader(missing, clock).project_of(ns) is None  # type: ignore[arg-type]


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def event(self, obj: dict[str, Any], kind: str, reason: str, message: str) -> None:
        self.events.append((str(obj["metadata"]["name"]), reason, message))


def rancher_path(client: ProjectClient, members: list[dict[str, Any]]) -> RancherPath:
    """The Rancher path on `client` (projects and namespace writes), the project's siblings
    `members`, Events on a Recorder, `clock` a FakeClock."""
    clock = FakeClock()
    counter = SimpleNamespace(inc=lambda *_: None)
    metrics: Any = SimpleNamespace(quota_writes=SimpleNamespace(labels=lambda *_: counter))
    recorder: Any = Recorder()
    pending = PendingWrites(Store(), clock)
    path = RancherPath(
        QuotaWriter(client, clock),  # type: ignore[arg-type]
        pending,
        metrics=metrics,
        recorder=recorder,
        project_room=ProjectRoom(
            ProjectReader(client, clock),  # type: ignore[arg-type]
            recorder,
            lambda project: [pending.newest(m) for m in members if project in project_index(m)],
        ),
        reports=NamespaceReports(metrics, recorder, RefusalTracker(clock)),
        writes=Counter(),
    )
    return path


def migrating(namespace: dict[str, Any]) -> tuple[NamespaceSnapshot, dict[str, Any]]:
    """A namespace at its base (3 CPU, 5000Mi, used up by one VM) with that VM migrating."""
    quota = managed_quota("ns", {"limits.cpu": "3", "limits.memory": "5000Mi"})
    quota["status"] = {"used": {"limits.cpu": "2015m", "limits.memory": "4797464313"}}
    vm = vmi("vm1")
    snapshot = NamespaceSnapshot(
        namespace=namespace,
        quota=quota,
        migrations=[migration("m1", vm)],
        vmis={"vm1": vm},
        pods=[bare_launcher(vm, "virt-launcher-vm1")],
        now=NOW,
        launcher=LauncherSettings(ratio="1.5", kubevirt_version="1.6"),
    )
    return snapshot, quota


async def test_a_raise_the_project_has_no_room_for_is_held_back_with_one_warning() -> None:
    """The controller does not write a raise Rancher would refuse (which would mark the
    namespace not validated, out of the project's usedLimit, until its quota next changes): it
    says why and by how much, once, on the quota, the namespace and the migration, and checks the
    project again later."""
    ns = member("ns", SEED)
    full = member("full", '{"limit":{"limitsCpu":"5","limitsMemory":"15000Mi"}}')
    project = project_object(
        {"limitsCpu": "8", "limitsMemory": "20000Mi"}, {"limitsCpu": "3", "limitsMemory": "5000Mi"}
    )
    client = ProjectClient(project)
    instance = rancher_path(client, [ns, full])
    snapshot, quota = migrating(ns)
    plan = plan_quota(snapshot)
    assert plan.holds_room and plan.base is not None and plan.base.source == "rancher"

    assert await instance.write(ns, quota, plan, snapshot) == PROJECT_RECHECK
    assert client.patches == [], "no raise written"
    recorder: Any = instance.recorder
    warnings = [(name, message) for name, reason, message in recorder.events]
    assert {name for name, _ in warnings} == {quota["metadata"]["name"], "ns", "m1"}
    assert all(
        reason == PROJECT_NO_ROOM_REASON and message.startswith(f"{NO_ROOM}: raise the project")
        for _, reason, message in recorder.events
    )
    assert "limits.cpu" in warnings[0][1]
    await instance.write(ns, quota, plan, snapshot)
    assert len(recorder.events) == 3, "once per change"

    roomy = project_object(
        {"limitsCpu": "20", "limitsMemory": "40000Mi"}, {"limitsCpu": "3", "limitsMemory": "5000Mi"}
    )
    client.project = roomy
    clock = instance.project_room.reader.clock
    assert isinstance(clock, FakeClock)
    clock.step(PROJECT_TTL)
    assert await instance.write(ns, quota, plan, snapshot) is None
    (written,) = client.patches
    annotations = {
        op["path"].removeprefix("/metadata/annotations/").replace("~1", "/"): op["value"]
        for op in written
        if op["op"] == "add"
    }
    assert annotations[ANNOTATION_RANCHER_BASE] == SEED
    assert annotations[CATTLE_ANNOTATION_RESOURCE_QUOTA] == annotations[ANNOTATION_RANCHER_APPLIED]


async def test_a_raise_rancher_marked_as_not_fitting_gets_the_project_warning() -> None:
    """Where the project could not be read before the raise, Rancher's condition tells: the
    raise stands (a raised project limit lets Rancher copy it), the Warning names the project."""
    at_base = member("ns", SEED)
    first, _ = migrating(at_base)
    raising = annotation_patch(at_base, plan_quota(first))
    assert raising is not None
    raised = raising[CATTLE_ANNOTATION_RESOURCE_QUOTA]
    ns = member("ns", raised)  # our raise, written before, as Rancher rewrote it (the same)
    annotations = ns["metadata"]["annotations"]
    annotations[ANNOTATION_RANCHER_BASE] = SEED
    annotations[ANNOTATION_RANCHER_APPLIED] = raised
    rancher = "Resource quota [limits.cpu=5015m] exceeds project limit"
    annotations["cattle.io/status"] = condition(False, rancher)
    client = ProjectClient(None, refuse=True)
    instance = rancher_path(client, [ns])
    snapshot, quota = migrating(ns)
    uid = snapshot.migrations[0]["metadata"]["uid"]
    annotations[ANNOTATION_RANCHER_GIVEN] = f"local:p-abcde {uid}"  # given for it
    plan = plan_quota(snapshot)
    assert await instance.write(ns, quota, plan, snapshot) == PROJECT_RECHECK
    assert client.patches == []
    recorder: Any = instance.recorder
    messages = {message for _, _, message in recorder.events}
    (message,) = messages
    assert message.startswith(NO_ROOM) and rancher in message


def test_the_project_index_names_the_project_a_namespace_names_and_nothing_else() -> None:
    assert project_index(member("ns", SEED)) == ["local:p-abcde"]
    assert project_index(member("ns", SEED, project="local:p-other")) == ["local:p-other"]
    assert project_index({"metadata": {"name": "ns", "annotations": {"other": "x"}}}) == []
    assert project_index({"metadata": {"name": "ns"}}) == []


async def test_the_project_s_members_are_looked_up_only_for_a_verdict_and_by_its_id() -> None:
    """The members come from the namespace cache's project index, asked for the project read
    and only when a verdict needs them: a namespace whose raise needs none (no room held, or
    no raise of ours standing) costs no lookup, where a scan decoded every namespace."""
    ns = member("ns", SEED)
    asked: list[str] = []

    def members(project: str) -> list[dict[str, Any]]:
        asked.append(project)
        return [ns, member("full", '{"limit":{"limitsCpu":"5","limitsMemory":"15000Mi"}}')]

    client = ProjectClient(
        project_object(
            {"limitsCpu": "8", "limitsMemory": "20000Mi"},
            {"limitsCpu": "3", "limitsMemory": "5000Mi"},
        )
    )
    room = ProjectRoom(ProjectReader(client, FakeClock()), Recorder(), members)  # type: ignore[arg-type]
    snapshot, _ = migrating(ns)
    plan = plan_quota(snapshot)
    assert await room.lacking(ns, plan, None) is None, "no raise of ours standing"
    idle = plan_quota(dataclasses.replace(snapshot, migrations=[]))
    assert await room.lacking(ns, idle, annotation_patch(ns, plan)) is None, "no room held"
    assert asked == []
    changes = annotation_patch(ns, plan)
    assert await room.lacking(ns, plan, changes) is not None, "the sibling fills the project"
    assert asked == ["local:p-abcde"]


TWO_VMS = '{"limit":{"limitsCpu":"6000m","limitsMemory":"10000Mi"}}'


def competing(namespace: dict[str, Any], evacuation_first: bool) -> tuple[NamespaceSnapshot, Any]:
    """Two VMs at the namespace's base, each migrating: vm-user's migration a user's (no
    priority), created first; vm-evac's a drain's (system-critical), created a second later
    (or the other way round in time with `evacuation_first`)."""
    quota = managed_quota("ns", {"limits.cpu": "6", "limits.memory": "10000Mi"})
    user, evac = vmi("vm-user"), vmi("vm-evac")
    by_user, by_drain = migration("m-user", user), migration("m-evac", evac)
    by_drain["spec"]["priority"] = "system-critical"
    early, late = "2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z"
    by_user["metadata"]["creationTimestamp"] = late if evacuation_first else early
    by_drain["metadata"]["creationTimestamp"] = early if evacuation_first else late
    snapshot = NamespaceSnapshot(
        namespace=namespace,
        quota=quota,
        migrations=[by_user, by_drain],
        vmis={"vm-user": user, "vm-evac": evac},
        pods=[bare_launcher(user, "virt-launcher-user"), bare_launcher(evac, "virt-launcher-evac")],
        now=NOW,
        launcher=LauncherSettings(ratio="1.5", kubevirt_version="1.6"),
    )
    return snapshot, quota


def raised_cpu(client: ProjectClient) -> str:
    (written,) = client.patches
    value = next(
        op["value"]
        for op in written
        if op["op"] == "add"
        and op["path"].endswith(CATTLE_ANNOTATION_RESOURCE_QUOTA.replace("/", "~1"))
    )
    return str(json.loads(value)["limit"]["limitsCpu"])


async def test_scarce_project_room_goes_to_the_evacuation_before_an_older_user_migration() -> None:
    """Issue 41: the project has room for one of two rooms. The raise that fits is written for
    the drain's system-critical migration, though the user's migration is older; and for the
    older one when both have the same priority (KubeVirt's order: priority, then creation)."""
    ns = member("ns", TWO_VMS)
    other = member("other", '{"limit":{"limitsCpu":"1000m","limitsMemory":"1000Mi"}}')
    project = project_object(
        {"limitsCpu": "9500m", "limitsMemory": "17000Mi"},
        {"limitsCpu": "3", "limitsMemory": "5000Mi"},
    )
    client = ProjectClient(project)
    instance = rancher_path(client, [ns, other])
    snapshot, quota = competing(ns, evacuation_first=False)
    plan = plan_quota(snapshot)
    assert {r.vm_name: r.priority for r in plan.rooms.rooms} == {"vm-user": 0, "vm-evac": 100}
    assert await instance.write(ns, quota, plan, snapshot) == PROJECT_RECHECK
    recorder: Any = instance.recorder
    assert any(reason == PROJECT_NO_ROOM_REASON for _, reason, _ in recorder.events), "the rest"
    (one,) = [r.room["limits.cpu"] for r in plan.rooms.rooms if r.vm_name == "vm-evac"]
    assert Quantity.parse(raised_cpu(client)) == Quantity.parse("6") + one, "one room only"
    (kept,) = [p.rooms.rooms for p in prefixes(plan)]
    assert [r.vm_name for r in kept] == ["vm-evac"], "the evacuation's room, not the user's"
    same = dataclasses.replace(plan.rooms.rooms[1], priority=0)
    tied = dataclasses.replace(
        plan, rooms=dataclasses.replace(plan.rooms, rooms=[plan.rooms.rooms[0], same])
    )
    (kept,) = [p.rooms.rooms for p in prefixes(tied)]
    assert [r.vm_name for r in kept] == ["vm-user"], "one priority: the older first"


async def test_nothing_is_written_in_part_where_the_project_cannot_be_read() -> None:
    ns = member("ns", TWO_VMS)
    client = ProjectClient(None)
    instance = rancher_path(client, [ns])
    snapshot, quota = competing(ns, evacuation_first=True)
    plan = plan_quota(snapshot)
    await instance.write(ns, quota, plan, snapshot)
    assert len(client.patches) == 1, "the whole raise, unjudged, as before: never a part"
