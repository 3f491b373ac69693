"""Who gets a Rancher project's scarce room in a drain, across the project's namespaces (pure).

On Rancher's protected path our raise is a namespace's ``field.cattle.io/resourceQuota``, which
the project gives only while its namespaces together stay within its limit. The controller hands
that room out across the project in KubeVirt's order: a raise that fits the project as it stands
still waits where rooms sibling namespaces wait for, earlier in KubeVirt's order and able to fit,
would then no longer fit (util/resourcequota/rancherpath.py `waits_behind`; the controller's
WaitingForEarlierMigrationsInProject Warning). admission.py judges each evacuation alone against
the project as it stands; this module makes the controller's judgment of the order, with the
product's own code, when the step's evacuations arrive:

- Each namespace of a project the step evacuates from is planned by the caller's `plan_with`
  (compute.py: the controller's `NamespacePlanner` over the state read, MTQ mode deferred to as
  the controller defers) from its migrations under way and, where the step evacuates from it,
  the step's evacuations that fit alone (admission.py) as KubeVirt creates them
  (`evacuation_migration`):
  spec.priority as the VM's `migration_priority` (system-critical with KubeVirt's priority queue
  on), created after every migration under way, wave by wave (KubeVirt creates a migration when
  its parallel limits leave a slot); within a wave in the step's order (namespace, then VM).
  KubeVirt names evacuations at random, so the order of two created in the same second is
  preflight's guess, not KubeVirt's promise.
- A namespace whose plan does not go through Rancher's annotation (another base, MTQ mode, a
  namespace being deleted, no managed quota) takes no part (`rancherpath.asks_project`: the
  rule the controller's siblings_waiting applies to its siblings).
- For each evacuation, its namespace's raise up to its room (`rancherpath.ladder`: rooms given
  first, then KubeVirt's order) is judged as the controller judges a write's step: where it fits
  the project as it stands but waits behind siblings' rooms, the VM is delayed (`_ProjectWait`),
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

from ..generic.meta import annotations_of, metadata, name
from ..generic.resource import Object
from ..util.migrationpriority import PRIORITIES, priority_name
from ..util.rancher.project import PROJECT_ID_ANNOTATION, ProjectQuota
from ..util.resourcequota.plan import QuotaPlan
from ..util.resourcequota.rancherpath import (
    MemberTotals,
    Step,
    asks_project,
    given,
    kept_raise,
    lacks_alone,
    ladder,
    last_waiting,
    project_steps,
    waits_behind,
)
from .admission import NamespaceContext
from .report import VmVerdict

EVACUATION_UID: Final = "preflight-evacuation:"
"""The uid prefix of an evacuation the step simulates (never a real migration's: the API
server's uids are UUIDs)."""
TIMESTAMP: Final = "%Y-%m-%dT%H:%M:%SZ"


PlanWith = Callable[[Object, list[Object]], QuotaPlan | None]
"""The controller's plan of a namespace from the caller's reads, with these simulated
evacuations beside its migrations under way (None: no managed quota, or MTQ mode's)."""


@dataclass
class _ProjectWait:
    """What the order means for one evacuation: the sibling namespaces' migrations its room
    goes to first (`behind`: the first waiting one of each sibling that claims room ahead of
    it), or, where none, the siblings' waiting migrations it takes the room ahead of
    (`ahead_of`); each a step of its namespace's ladder (rancherpath.Step)."""

    behind: list[Step] = field(default_factory=list)
    ahead_of: list[Step] = field(default_factory=list)


def evacuation_migration(evacuation: VmVerdict, sequence: int, now: datetime.datetime) -> Object:
    """The VirtualMachineInstanceMigration KubeVirt's evacuation of `evacuation`'s VM would
    create (module docstring): created `wave` seconds after `now`, named so that the step's
    order decides between two of one second; spec.priority its `migration_priority`."""
    wave = evacuation.wave or 1
    created = (now + datetime.timedelta(seconds=wave)).strftime(TIMESTAMP)
    spec: dict[str, Any] = {"vmiName": evacuation.name}
    if evacuation.migration_priority in PRIORITIES:
        spec["priority"] = evacuation.migration_priority
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {
            "name": f"evacuation-{sequence:05d}-{evacuation.name}",
            "namespace": evacuation.namespace,
            "uid": f"{EVACUATION_UID}{evacuation.namespace}/{evacuation.name}",
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
    evacuations: Sequence[VmVerdict],
    contexts: Mapping[str, NamespaceContext],
    namespaces: Mapping[str, Object],
    plan_with: PlanWith,
    now: datetime.datetime,
) -> dict[tuple[str, str], _ProjectWait]:
    """Per evacuation (namespace, VM) that waits behind, or goes ahead of, a sibling
    namespace's migration for its Rancher project's room: who (module docstring).
    `evacuations`: the step's that fit alone, in the step's order (their wave set); `contexts`:
    each evacuated namespace's (its project read); `namespaces`: every namespace read, by name;
    `now`: when the state was read. Evacuations in namespaces of no readable project with a
    limit, or off Rancher's path, are judged by admission.py alone."""
    moves = {(e.namespace, e.name): e for e in evacuations}
    sequence = {key: index for index, key in enumerate(moves)}
    projects: dict[str, ProjectQuota] = {}
    for evacuation in evacuations:
        project = contexts[evacuation.namespace].project
        if project is not None and project.limit is not None:
            projects.setdefault(project.id, project)
    out: dict[tuple[str, str], _ProjectWait] = {}
    for project in projects.values():
        members = [
            ns
            for ns in namespaces.values()
            if annotations_of(ns).get(PROJECT_ID_ANNOTATION) == project.id
        ]
        simulated_in = {
            name(ns): [
                evacuation_migration(e, sequence[key], now)
                for key, e in moves.items()
                if key[0] == name(ns)
            ]
            for ns in members
        }
        plans = _plans(members, simulated_in, plan_with)
        out.update(_one_project(project, members, plans, {key[0] for key in moves}))
    return out


def _plans(
    members: Sequence[Object], simulated_in: Mapping[str, list[Object]], plan_with: PlanWith
) -> dict[str, tuple[Object, QuotaPlan]]:
    """The members whose rooms take part in the project's order (rancherpath.asks_project),
    each with its plan, the step's evacuations in it simulated."""
    plans: dict[str, tuple[Object, QuotaPlan]] = {}
    for ns in members:
        if metadata(ns).get("deletionTimestamp"):
            continue  # not planned: asks_project says no to it whatever its plan
        plan = plan_with(ns, simulated_in[name(ns)])
        if plan is not None and asks_project(ns, plan):
            plans[name(ns)] = (ns, plan)
    return plans


def _one_project(
    project: ProjectQuota,
    members: Sequence[Object],
    plans: Mapping[str, tuple[Object, QuotaPlan]],
    evacuated: set[str],
) -> dict[tuple[str, str], _ProjectWait]:
    laddered = {ns_name: project_steps(ns, plan) for ns_name, (ns, plan) in plans.items()}
    out: dict[tuple[str, str], _ProjectWait] = {}
    for ns_name, (ns, plan) in plans.items():
        if ns_name not in evacuated:
            continue
        siblings = [s for other, steps in laddered.items() if other != ns_name for s in steps]
        judged = _judge(project, members, ns, plan, siblings)
        out.update({(ns_name, vm): wait for vm, wait in judged.items()})
    return out


def _judge(
    project: ProjectQuota,
    namespaces: Sequence[Object],
    ns: Object,
    plan: QuotaPlan,
    siblings: Sequence[Step],
) -> dict[str, _ProjectWait]:
    """Per simulated evacuation of `ns` (by VM), the rooms it waits behind and goes ahead of,
    its namespace's raise up to its room judged as the controller judges a write's step
    (controller/resourcequota/rancher.py `_WhatFits.write`), by the same two functions: against
    the project as it stands first (rancherpath.lacks_alone); fitting, the siblings' claims
    ahead of it (rancherpath.waits_behind). `siblings` holds the siblings' given steps too
    (`project_steps`): with the namespace's own given steps they are what
    `MemberTotals.eventual` reads, as in the controller (controller/resourcequota/rancher.py
    `ProjectRoom._behind_siblings`)."""
    steps = ladder(ns, plan)
    flags = given(ns, steps)
    keeps, own_given = kept_raise(ns, steps, flags)
    totals = MemberTotals(project, namespaces, name(ns), keeps)
    out: dict[str, _ProjectWait] = {}
    for index, step in enumerate(steps):
        ahead_of = last_waiting(steps[: index + 1], flags)
        if not simulated(step) or ahead_of is None or lacks_alone(totals, step.annotation):
            continue
        judged_with = [*siblings, *own_given]
        wait = _ProjectWait(behind=waits_behind(judged_with, ahead_of, totals, step.annotation))
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
