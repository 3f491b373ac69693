"""Who gets a Rancher project's scarce room in a drain, across the project's namespaces (pure).

On Rancher's protected path our raise is a namespace's ``field.cattle.io/resourceQuota``, which
the project gives only while its namespaces together stay within its limit. The controller hands
that room out across the project in KubeVirt's order: a raise that fits the project as it stands
still waits where rooms sibling namespaces wait for, earlier in KubeVirt's order and able to fit,
would then no longer fit (util/resourcequota/rancherpath.py `waits_behind`; the controller's
WaitingForEarlierMigrationsInProject Warning). admission.py judges each evacuation alone against
the project as it stands; this module makes the controller's judgment of the order, with the
product's own code, when the step's evacuations arrive:

- Each namespace of a project the step evacuates from is planned as the controller plans it
  (`NamespacePlanner`) from its migrations under way and, where the step evacuates from it, the
  step's evacuations that fit alone (admission.py) as KubeVirt creates them (`evacuation_migration`):
  spec.priority as the VM's `migration_priority` (system-critical with KubeVirt's priority queue
  on), created after every migration under way, wave by wave (KubeVirt creates a migration when
  its parallel limits leave a slot); within a wave in the step's order (namespace, then VM).
  KubeVirt names evacuations at random, so the order of two created in the same second is
  preflight's guess, not KubeVirt's promise.
- A namespace whose plan does not go through Rancher's annotation (another base, MTQ mode, a
  namespace being deleted, no managed quota) takes no part, as the controller skips it.
- For each evacuation, its namespace's raise up to its room (`rancherpath.ladder`: rooms given
  first, then KubeVirt's order) is judged as the controller judges a write's step: where it fits
  the project as it stands but waits behind siblings' rooms, the VM is delayed (`ProjectWait`),
  naming each migration it waits behind with its priority; where it takes the room ahead of a
  sibling's waiting migration later in KubeVirt's order, the VM's note names that migration (a
  tenant's migration the drain will hold back).

What the module does not do: follow the project over time (a step is judged once, as its
evacuations arrive); judge a raise that does not fit beside the namespace's own earlier rooms;
or tell that an evacuation admission.py blocks because a sibling's migration under way holds the
project's room (given, never taken back) moves once that migration has ended: it stays blocked.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ..apis.mtq import VmmrqError, decode_vmmrq
from ..controller.resourcequota.planner import ListedSource, NamespacePlanner
from ..generic.meta import annotations_of, metadata, name
from ..generic.resource import Object
from ..util.launcher import LauncherSettings
from ..util.migrationpriority import PRIORITIES, priority_name
from ..util.rancher.project import PROJECT_ID_ANNOTATION, ProjectQuota
from ..util.resourcequota.base import RANCHER, Mode, managed_quota, rancher_base_text
from ..util.resourcequota.plan import QuotaPlan
from ..util.resourcequota.rancherpath import (
    MemberTotals,
    Step,
    given,
    kept_raise,
    lacks_alone,
    ladder,
    last_waiting,
    project_steps,
    waits_behind,
)
from .admission import NamespaceContext

EVACUATION_UID: Final = "preflight-evacuation:"
"""The uid prefix of an evacuation the step simulates (never a real migration's: the API
server's uids are UUIDs)."""
TIMESTAMP: Final = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True)
class Evacuation:
    """One evacuation of the step whose target pod fits alone: its VM and namespace, the wave
    it starts in (1 first; None: no wave) and the spec.priority KubeVirt gives it."""

    namespace: str
    vm: str
    wave: int | None
    priority: str


@dataclass(frozen=True)
class Members:
    """What planning a project's namespaces reads, indexed by namespace (compute.py's state)."""

    namespaces: Mapping[str, Object]
    quotas: Mapping[str, Sequence[Object]]
    vmmrqs: Mapping[str, Sequence[Object]]
    migrations: Mapping[str, Sequence[Object]]
    vmis: Mapping[str, Sequence[Object]]
    pods: Mapping[str, Sequence[Object]]
    settings: Callable[[str], LauncherSettings]
    """The launcher settings KubeVirt renders a namespace's pods with."""
    mode: Mode
    now: datetime.datetime


@dataclass
class ProjectWait:
    """What the order means for one evacuation: the sibling namespaces' migrations its room
    goes to first (`behind`: the first waiting one of each sibling that claims room ahead of
    it), or, where none, the siblings' waiting migrations it takes the room ahead of
    (`ahead_of`); each a step of its namespace's ladder (rancherpath.Step)."""

    behind: list[Step] = field(default_factory=list)
    ahead_of: list[Step] = field(default_factory=list)


def evacuation_migration(evacuation: Evacuation, sequence: int, now: datetime.datetime) -> Object:
    """The VirtualMachineInstanceMigration KubeVirt's evacuation would create (module
    docstring): created `wave` seconds after `now`, named so that the step's order decides
    between two of one second."""
    wave = evacuation.wave or 1
    created = (now + datetime.timedelta(seconds=wave)).strftime(TIMESTAMP)
    spec: dict[str, Any] = {"vmiName": evacuation.vm}
    if evacuation.priority in PRIORITIES:
        spec["priority"] = evacuation.priority
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {
            "name": f"evacuation-{sequence:05d}-{evacuation.vm}",
            "namespace": evacuation.namespace,
            "uid": f"{EVACUATION_UID}{evacuation.namespace}/{evacuation.vm}",
            "creationTimestamp": created,
        },
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def simulated(step: Step) -> bool:
    """Whether `step` is the room of an evacuation the preflight simulates."""
    return step.room.migration_uid.startswith(EVACUATION_UID)


def describe(step: Step) -> str:
    """A migration as the report names it: a simulated evacuation by its VM ("ns/vm's
    evacuation in this drain (priority P)"), one under way as the controller's Warning does."""
    if simulated(step):
        return (
            f"{step.namespace}/{step.room.vm_name}'s evacuation in this drain (priority "
            f"{priority_name(step.room.priority)})"
        )
    return step.describe()


def project_order(
    evacuations: Sequence[Evacuation],
    contexts: Mapping[str, NamespaceContext],
    members: Members,
) -> dict[tuple[str, str], ProjectWait]:
    """Per evacuation (namespace, VM) that waits behind, or goes ahead of, a sibling
    namespace's migration for its Rancher project's room: who (module docstring). `contexts`:
    each evacuated namespace's (its project read). Evacuations in namespaces of no readable
    project with a limit, or off Rancher's path, are judged by admission.py alone."""
    moves = {(e.namespace, e.vm): e for e in evacuations}
    sequence = {key: index for index, key in enumerate(moves)}
    projects: dict[str, ProjectQuota] = {}
    for evacuation in evacuations:
        project = contexts[evacuation.namespace].project
        if project is not None and project.limit is not None:
            projects.setdefault(project.id, project)
    out: dict[tuple[str, str], ProjectWait] = {}
    for project in projects.values():
        out.update(_one_project(project, moves, sequence, members))
    return out


def _one_project(
    project: ProjectQuota,
    moves: Mapping[tuple[str, str], Evacuation],
    sequence: Mapping[tuple[str, str], int],
    members: Members,
) -> dict[tuple[str, str], ProjectWait]:
    namespaces = [
        ns
        for ns in members.namespaces.values()
        if annotations_of(ns).get(PROJECT_ID_ANNOTATION) == project.id
    ]
    plans: dict[str, QuotaPlan] = {}
    for ns in namespaces:
        ns_name = name(ns)
        simulated_here = [
            evacuation_migration(e, sequence[key], members.now)
            for key, e in moves.items()
            if key[0] == ns_name
        ]
        plan = _rancher_plan(ns, simulated_here, members)
        if plan is not None:
            plans[ns_name] = plan
    laddered = {
        ns_name: project_steps(members.namespaces[ns_name], p) for ns_name, p in plans.items()
    }
    evacuated = {key[0] for key in moves}
    out: dict[tuple[str, str], ProjectWait] = {}
    for ns_name, plan in plans.items():
        if ns_name not in evacuated:
            continue
        siblings = [s for other, steps in laddered.items() if other != ns_name for s in steps]
        judged = _judge(project, namespaces, members.namespaces[ns_name], plan, siblings)
        out.update({(ns_name, vm): wait for vm, wait in judged.items()})
    return out


def _rancher_plan(ns: Object, evacuations: list[Object], members: Members) -> QuotaPlan | None:
    """The controller's plan of `ns` with the step's `evacuations` beside its migrations, or
    None where its raise does not go through Rancher's annotation (module docstring)."""
    ns_name = name(ns)
    quota = managed_quota(members.quotas.get(ns_name, []))
    if quota is None or metadata(ns).get("deletionTimestamp") or _mtq_mode(members, ns_name):
        return None
    if rancher_base_text(ns) is None:
        return None
    source = ListedSource(
        quota_list=members.quotas.get(ns_name, []),
        migrations=[*members.migrations.get(ns_name, []), *evacuations],
        vmis={name(v): v for v in members.vmis.get(ns_name, [])},
        pods=list(members.pods.get(ns_name, [])),
        now=members.now,
        launcher=members.settings(ns_name),
        mode=members.mode,
    )
    planned = NamespacePlanner(source).plan(ns)
    if planned is None:
        return None
    plan = planned.plan
    if plan.base is None or plan.base.source != RANCHER or not plan.holds_room:
        return None
    return plan


def _mtq_mode(members: Members, ns_name: str) -> bool:
    """Whether a live VMMRQ puts the namespace in MTQ mode (the controller defers to it)."""
    for raw in members.vmmrqs.get(ns_name, []):
        try:
            if not decode_vmmrq(raw).deleting:
                return True
        except VmmrqError:
            continue
    return False


def _judge(
    project: ProjectQuota,
    namespaces: Sequence[Object],
    ns: Object,
    plan: QuotaPlan,
    siblings: Sequence[Step],
) -> dict[str, ProjectWait]:
    """Per simulated evacuation of `ns` (by VM), the rooms it waits behind and goes ahead of,
    its namespace's raise up to its room judged as the controller judges a write's step
    (rancherwrites.py `_write_what_fits`), by the same two functions: against the project as it
    stands first (rancherpath.lacks_alone); fitting, the siblings' claims ahead of it
    (rancherpath.waits_behind). `siblings` holds the siblings'
    given steps too (`project_steps`): with the namespace's own given steps they are what
    `EventualFit` reads, as in the controller (rancherprojects.py `_behind_siblings`)."""
    steps = ladder(ns, plan)
    flags = given(ns, steps)
    keeps, own_given = kept_raise(ns, steps, flags)
    totals = MemberTotals(project, namespaces, name(ns), keeps)
    out: dict[str, ProjectWait] = {}
    for index, step in enumerate(steps):
        ahead_of = last_waiting(steps[: index + 1], flags)
        if not simulated(step) or ahead_of is None or lacks_alone(totals, step.annotation):
            continue
        judged_with = [*siblings, *own_given]
        wait = ProjectWait(behind=waits_behind(judged_with, ahead_of, totals, step.annotation))
        if not wait.behind:
            raised = MemberTotals(project, namespaces, name(ns), step.annotation)
            wait.ahead_of = _pushed_back(step, siblings, totals, raised)
        if wait.behind or wait.ahead_of:
            out[step.room.vm_name] = wait
    return out


def _pushed_back(
    step: Step, siblings: Sequence[Step], totals: MemberTotals, raised: MemberTotals
) -> list[Step]:
    """The siblings' first waiting migrations later in KubeVirt's order than `step` that would
    fit the project beside the judged namespace's kept raise (`totals`) but not beside its
    raise to `step` (`raised`): the rooms the evacuation takes ahead of them."""
    first: dict[str, Step] = {}
    for sibling in sorted(siblings, key=lambda s: s.order):
        if not sibling.given and sibling.order > step.order:
            first.setdefault(sibling.namespace, sibling)
    return [
        s
        for s in first.values()
        if totals.fits(s.namespace, s.annotation) and not raised.fits(s.namespace, s.annotation)
    ]
