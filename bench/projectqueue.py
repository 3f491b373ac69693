"""``python -m bench.projectqueue``: what one judgment of a Rancher project's room costs.

On Rancher's protected path a namespace's raise is judged against its project counting as taken
the rooms its sibling namespaces wait for that come earlier in KubeVirt's order
(util/resourcequota/rancherpath.py, controller/resourcequota/rancher.py). This bench
builds a project of N namespaces with M pending migrations each, without a cluster, the
project's room enough for about half the rooms (so every namespace waits and every step of the
judged namespace is tried), and times `RancherPath.write` of the namespace whose migrations
come last in KubeVirt's order (the worst case: every sibling's waiting step is earlier), three
ways in the same run:

- ``single``: the same namespace with no sibling waiting (the judgment of a namespace alone in
  its project: the baseline);
- ``judge``: the siblings' waiting steps planned beforehand, handed to the judge (its own cost:
  the claims, the sums, the verdicts of every step);
- ``planned``: the siblings planned within the judgment, from their objects (`plan_quota` of
  each, then `project_steps`);
- ``cached``: the same, each sibling's ladder taken from a `WaitingCache` filled by an earlier
  write (its inputs unchanged), as siblings_waiting does once per write (it plans from the
  informers' views, which render a launcher once per VM shape: cheaper than here).

It prints milliseconds per judgment (median of `--repeat`) for each size, and the ratio of
``judge`` and ``cached`` against ``single``. With siblings the judged namespace waits (nothing
is written); alone, its raise fits and is written to a fake that does not apply it.

    python -m bench.projectqueue                        # 20x10, 50x10, 100x10
    python -m bench.projectqueue --sizes 100x10,200x5 --repeat 7

``--freed 20,40,80,100`` (the default; ``--freed ''`` skips it) times one freed room instead: N
namespaces each waiting with one migration (the one first in KubeVirt's order last by name), a
namespace holding the project's one room; its migration ends and its reconcile gives the room
back; then every namespace queued is reconciled until none is (the controller's queue, drained
in order, each write applying). Printed per N: the judgments (waiters' reconciles) and the
sibling plannings they made, and the seconds from the give-back to the queue drained, two ways
in the same run: ``fan-out`` (every waiter queued at once, as before review 51's major 4) and
``wave`` (ProjectDemands' wave: the first in KubeVirt's order, then on only while the room can
go further).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import dataclasses
import logging
import statistics
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

from harvester_quota.config.kubevirt import settings_from
from harvester_quota.controller.quotawriter import QuotaWriter
from harvester_quota.controller.resourcequota.projectdemands import ProjectDemands
from harvester_quota.controller.resourcequota.rancher import (
    ProjectReader,
    ProjectRoom,
    RancherPath,
    project_index,
)
from harvester_quota.controller.resourcequota.reports import NamespaceReports, RefusalTracker
from harvester_quota.generic.pendingwrites import PendingWrites
from harvester_quota.generic.resource import Object
from harvester_quota.generic.store import Store
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.testbench.sim.kubevirt.objects import (
    VMSpec,
    parse_version,
    render_launcher_pod,
    render_migration,
    render_vm,
    render_vmi,
    vm_resources,
)
from harvester_quota.util.annotations import (
    CATTLE_ANNOTATION_RESOURCE_QUOTA,
    LABEL_DEFAULT_RESOURCE_QUOTA,
)
from harvester_quota.util.rancher.project import PROJECT_ID_ANNOTATION
from harvester_quota.util.resourcequota.plan import NamespaceSnapshot, QuotaPlan, plan_quota
from harvester_quota.util.resourcequota.rancherpath import Step, WaitingCache, project_steps

from bench.reconcile import NOW

VERSION = "1.6"
PROJECT = "local:p-bench"
SEED = '{"limit":{"limitsCpu":"3000m","limitsMemory":"5000Mi"}}'
DEFAULT_SIZES = ((20, 10), (50, 10), (100, 10))


class Nothing:
    """Events and metrics that go nowhere."""

    def event(self, *_: Any) -> None:
        """No Event."""

    def labels(self, *_: Any) -> Any:
        return SimpleNamespace(inc=lambda *_: None)


class Cluster:
    """The Project object and the namespaces, as the judge reads them (writes not applied)."""

    def __init__(self, namespaces: int, rooms: int) -> None:
        cpu = 3000 * namespaces + 2015 * (namespaces * rooms // 2)
        memory = 5000 * namespaces + 4600 * (namespaces * rooms // 2)
        self.project = {
            "metadata": {"name": "p-bench", "namespace": "local"},
            "spec": {
                "resourceQuota": {"limit": {"limitsCpu": f"{cpu}m", "limitsMemory": f"{memory}Mi"}},
                "namespaceDefaultResourceQuota": {
                    "limit": {"limitsCpu": "3", "limitsMemory": "5000Mi"}
                },
            },
        }
        self.namespaces: dict[str, Object] = {}

    async def get(self, *_: Any, **__: Any) -> Object:
        return copy.deepcopy(self.project)

    async def patch(self, _resource: Any, name: str, *_: Any, **__: Any) -> Object:
        """The write of the single path (the judged namespace alone fits): not applied."""
        return self.namespaces[name]

    def members(self, project: str) -> list[Object]:
        return [ns for ns in self.namespaces.values() if project in project_index(ns)]


def _namespace(name: str) -> Object:
    annotations = {PROJECT_ID_ANNOTATION: PROJECT, CATTLE_ANNOTATION_RESOURCE_QUOTA: SEED}
    return {"metadata": {"name": name, "uid": f"uid-{name}", "annotations": annotations}}


def _snapshot(namespace: Object, rooms: int, minute: int) -> NamespaceSnapshot:
    """`rooms` running 2-core VMs, each with a pending migration created in `minute`."""
    name = str(namespace["metadata"]["name"])
    settings = settings_from(None, None, configured_version=VERSION)
    vmis: dict[str, Object] = {}
    pods: list[Object] = []
    migrations: list[Object] = []
    for index in range(rooms):
        spec = VMSpec(f"vm-{index}", cores=2, memory="4Gi")
        vm = render_vm(spec, name, vm_resources(spec, parse_version(VERSION), "1.5"), running=True)
        vmi = render_vmi(vm)
        vmi["metadata"].update(uid=f"{name}-vmi-{index}", creationTimestamp="2026-01-01T00:00:00Z")
        pod = render_launcher_pod(vmi, node="node-0", settings=settings)
        pod["metadata"].update(name=f"virt-launcher-vm-{index}", uid=f"{name}-pod-{index}")
        pod["status"] = {"phase": "Running"}
        migration = render_migration(name, spec.name, name=f"mig-{index}")
        created = f"2026-01-01T{minute // 60:02d}:{minute % 60:02d}:{index:02d}Z"
        migration["metadata"].update(uid=f"{name}-mig-{index}", creationTimestamp=created)
        migration["status"] = {"phase": "Pending"}
        vmis[spec.name] = vmi
        pods.append(pod)
        migrations.append(migration)
    quota = {
        "metadata": {
            "name": "default-bench",
            "namespace": name,
            "labels": {LABEL_DEFAULT_RESOURCE_QUOTA: "true"},
            "annotations": {},
        },
        "spec": {"hard": {"limits.cpu": str(3 * rooms), "limits.memory": f"{5000 * rooms}Mi"}},
    }
    return NamespaceSnapshot(
        namespace=namespace,
        quota=quota,
        migrations=migrations,
        vmis=vmis,
        pods=pods,
        now=NOW,
        launcher=settings,
    )


class Project:
    """N namespaces of one project, M pending migrations each; the last namespace's come last."""

    def __init__(self, namespaces: int, rooms: int) -> None:
        self.cluster = Cluster(namespaces, rooms)
        self.snapshots: dict[str, NamespaceSnapshot] = {}
        for index in range(namespaces):
            name = f"ns{index:03d}"
            self.cluster.namespaces[name] = _namespace(name)
            minute = 59 if index == namespaces - 1 else index % 59
            self.snapshots[name] = _snapshot(self.cluster.namespaces[name], rooms, minute)
        self.judged = f"ns{namespaces - 1:03d}"
        self.ladders = WaitingCache()

    async def planned(self, _project: str, besides: str) -> list[Step]:
        """Every other namespace planned and laddered now."""
        steps: list[Step] = []
        for name, snapshot in self.snapshots.items():
            if name != besides:
                steps += project_steps(snapshot.namespace, plan_quota(snapshot))
        return steps

    async def cached(self, _project: str, besides: str) -> list[Step]:
        """Every other namespace planned now, its ladder from the last write where its inputs
        did not change, as siblings_waiting does once per write (WaitingCache)."""
        steps: list[Step] = []
        for name, snapshot in self.snapshots.items():
            if name != besides:
                steps += self.ladders.steps(snapshot.namespace, plan_quota(snapshot), PROJECT)
        return steps

    def path(self, siblings: Callable[[str, str], Awaitable[list[Step]]]) -> RancherPath:
        nothing: Any = Nothing()
        clock = FakeClock()
        client: Any = self.cluster
        metrics: Any = SimpleNamespace(quota_writes=nothing)
        pending = PendingWrites(Store(), clock)
        return RancherPath(
            QuotaWriter(client, clock),
            pending,
            metrics=metrics,
            recorder=nothing,
            project_room=ProjectRoom(
                ProjectReader(client, clock),
                nothing,
                lambda project: [pending.newest(m) for m in self.cluster.members(project)],
                ProjectDemands(lambda _key: None),
                siblings,
            ),
            reports=NamespaceReports(metrics, nothing, RefusalTracker(clock)),
            writes=Counter(),
        )

    def plan(self) -> tuple[Object, Object, QuotaPlan, NamespaceSnapshot]:
        snapshot = self.snapshots[self.judged]
        return snapshot.namespace, snapshot.quota, plan_quota(snapshot), snapshot


async def _time(project: Project, mode: str, repeat: int) -> float:
    """Median seconds of one `write` of the judged namespace in `mode`."""
    waiting = await project.planned(PROJECT, project.judged)

    async def given(_project: str, _besides: str) -> list[Step]:
        return waiting

    async def alone(_project: str, _besides: str) -> list[Step]:
        return []

    await project.cached(PROJECT, project.judged)  # the ladders of an earlier write
    modes = {"single": alone, "judge": given, "planned": project.planned, "cached": project.cached}
    siblings = modes[mode]
    figures = []
    for _ in range(repeat):
        path = project.path(siblings)
        namespace, quota, plan, snapshot = project.plan()
        started = time.perf_counter()
        await path.write(namespace, quota, plan, snapshot)
        figures.append(time.perf_counter() - started)
    return statistics.median(figures)


class Applying(Cluster):
    """The cluster of the freed-room case: namespace annotation patches applied (their tests
    checked), so each judgment sees the writes before it."""

    async def patch(self, _resource: Any, name: str, body: Any, *_: Any, **__: Any) -> Object:
        annotations = self.namespaces[name]["metadata"]["annotations"]
        for op in body:
            key = op["path"].split("/")[-1].replace("~1", "/").replace("~0", "~")
            if op["path"] == "/metadata/uid":
                continue
            if op["op"] == "test" and annotations.get(key) != op["value"]:
                raise RuntimeError(f"test of {key} failed")
            if op["op"] == "add":
                annotations[key] = op["value"]
            if op["op"] == "remove":
                annotations.pop(key, None)
        return copy.deepcopy(self.namespaces[name])


class FanOut(ProjectDemands):
    """The queueing before the wave: every waiter queued at once when room moves."""

    def _wave(self, project: str | None, names: Any) -> None:
        for name in names:
            self.enqueue(name)


class FreedRoom:
    """`waiters` namespaces each waiting with one migration, `holder` holding the one room."""

    def __init__(self, waiters: int, demands: type[ProjectDemands]) -> None:
        self.cluster = Applying(waiters + 1, 0)
        limit = self.cluster.project["spec"]["resourceQuota"]["limit"]  # type: ignore[index]
        limit.update(
            limitsCpu=f"{3000 * (waiters + 1) + 2015}m",
            limitsMemory=f"{5000 * (waiters + 1) + 4600}Mi",
        )
        self.snapshots: dict[str, NamespaceSnapshot] = {}
        for index, name in enumerate(["holder", *(f"w{i:03d}" for i in range(waiters))]):
            self.cluster.namespaces[name] = _namespace(name)
            minute = 0 if name == "holder" else 1 if index == waiters else 2
            self.snapshots[name] = _snapshot(self.cluster.namespaces[name], 1, minute)
        self.head = f"w{waiters - 1:03d}"
        self.queued: list[str] = []
        self.plannings = 0
        self.ladders = WaitingCache()
        bench = Project.__new__(Project)
        bench.cluster = self.cluster
        self.path = bench.path(self.siblings)
        self.path.project_room.demands = demands(self.enqueue)

    def enqueue(self, name: str) -> None:
        """The controller's queue: a key already queued is not queued twice."""
        if name not in self.queued:
            self.queued.append(name)

    def snapshot(self, name: str) -> NamespaceSnapshot:
        namespace = self.path.pending.newest(self.cluster.namespaces[name])
        return dataclasses.replace(self.snapshots[name], namespace=copy.deepcopy(namespace))

    async def siblings(self, _project: str, besides: str) -> list[Step]:
        """Every other namespace planned now, its ladder cached (siblings_waiting)."""
        self.plannings += 1
        steps: list[Step] = []
        for name in self.snapshots:
            if name != besides:
                snapshot = self.snapshot(name)
                steps += self.ladders.steps(snapshot.namespace, plan_quota(snapshot), PROJECT)
        return steps

    async def reconcile(self, name: str) -> None:
        snapshot = self.snapshot(name)
        await self.path.write(snapshot.namespace, snapshot.quota, plan_quota(snapshot), snapshot)


async def freed_room(waiters: int, demands: type[ProjectDemands]) -> tuple[int, int, float]:
    """(judgments, sibling plannings, seconds) of one freed room (module docstring)."""
    case = FreedRoom(waiters, demands)
    for name in case.snapshots:
        await case.reconcile(name)
    case.queued.clear()
    case.plannings = 0
    case.snapshots["holder"] = dataclasses.replace(case.snapshots["holder"], migrations=[])
    started = time.perf_counter()
    await case.reconcile("holder")
    judgments = 0
    while case.queued:
        judgments += 1
        await case.reconcile(case.queued.pop(0))
    took = time.perf_counter() - started
    raised = case.cluster.namespaces[case.head]["metadata"]["annotations"]
    if raised[CATTLE_ANNOTATION_RESOURCE_QUOTA] == SEED:
        raise AssertionError(f"the head {case.head} was not given the freed room")
    return judgments, case.plannings, took


async def run_freed(counts: list[int]) -> None:
    print(
        f"{'waiters':>8} {'fan-out judged':>15} {'plannings':>10} {'s':>7} "
        f"{'wave judged':>12} {'plannings':>10} {'s':>7}"
    )
    for count in counts:
        before = await freed_room(count, FanOut)
        after = await freed_room(count, ProjectDemands)
        print(
            f"{count:>8} {before[0]:>15} {before[1]:>10} {before[2]:>7.2f} "
            f"{after[0]:>12} {after[1]:>10} {after[2]:>7.2f}",
            flush=True,
        )


def _sizes(text: str) -> list[tuple[int, int]]:
    sizes = []
    for part in text.split(","):
        namespaces, _, rooms = part.partition("x")
        sizes.append((int(namespaces), int(rooms)))
    return sizes


async def run(sizes: list[tuple[int, int]], repeat: int) -> None:
    print(
        f"{'project':>10} {'single ms':>10} {'judge ms':>10} {'planned ms':>11} "
        f"{'cached ms':>10} {'judge/single':>13} {'cached/single':>14}"
    )
    for namespaces, rooms in sizes:
        project = Project(namespaces, rooms)
        single = await _time(project, "single", repeat)
        judge = await _time(project, "judge", repeat)
        planned = await _time(project, "planned", repeat)
        cached = await _time(project, "cached", repeat)
        print(
            f"{namespaces:>5}x{rooms:<4} {single * 1e3:>10.1f} {judge * 1e3:>10.1f} "
            f"{planned * 1e3:>11.1f} {cached * 1e3:>10.1f} {judge / single:>13.1f} "
            f"{cached / single:>14.1f}",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    logging.disable(logging.WARNING)  # the judged namespace's Warning lines, not the figures
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(f"{n}x{m}" for n, m in DEFAULT_SIZES))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--freed", default="20,40,80,100")
    options = parser.parse_args(argv)
    if options.sizes:
        asyncio.run(run(_sizes(options.sizes), options.repeat))
    if options.freed:
        asyncio.run(run_freed([int(part) for part in options.freed.split(",")]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
