"""A Rancher project's scarce room across its namespaces, in KubeVirt's order (pure).

On Rancher's protected path a namespace's raise is its ``field.cattle.io/resourceQuota``, which
Rancher's agent copies into the quota only while the project's namespaces together stay within the
project's limit (util/rancher/project.py). Within one namespace the room goes to its migrations in
KubeVirt's order (priorityprefix.py); across the namespaces of a project, this module says which
rooms of the siblings come first, so that a user's migration in one namespace does not take the
room a drain's evacuation (system-critical) in another is waiting for.

- `ladder`: a namespace's rooms in KubeVirt's order, each with the annotation the namespace would
  ask for with that room and every earlier one given (a step per room, cumulative, as the
  namespace's raises are written: priorityprefix.py).
- `covered`: how many steps of the ladder the namespace's annotation already asks for (the
  namespace's quota is one pool: the rooms it holds are its first ones, whichever pod uses them);
  `waiting_steps`, the rest: the rooms the project has not given the namespace yet.
- `claims_ahead`: per sibling namespace, the furthest of its waiting steps earlier in KubeVirt's
  order than the room being judged that would fit the project as its namespaces stand now;
  a step that cannot fit even with the whole room the project has left does not hold anyone back
  (no one starves behind a room that cannot be given). `with_claims` gives the siblings as the
  judge then counts them: each claiming sibling as if its claim were given.

The order key is `scarce_room_order` (spec.priority, which only virt-controller may set; the
API server's creationTimestamp; the migration's name), then the namespace: a total order across
the project. Nothing a tenant writes on its own objects but the name moves it, and the name only
between migrations of one priority created in the same second.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...generic.meta import annotations_of, metadata
from ..annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA
from ..migrationpriority import priority_name, scarce_room_order
from ..rancher.project import ProjectQuota, namespace_fit, namespace_limit
from ..resources import less_or_equal
from .base import rancher_base_text
from .plan import QuotaPlan
from .priorityprefix import in_priority_order, prefixes
from .rancherpath import raised_annotation
from .rooms import MigrationRoom

OrderKey = tuple[int, str, str, str]
"""(-priority, creationTimestamp, migration name, namespace): smaller goes first."""


def order_key(namespace: str, room: MigrationRoom) -> OrderKey:
    """Where `room` of `namespace` stands in KubeVirt's order across a project."""
    return (*scarce_room_order(room.priority, room.created, room.migration), namespace)


@dataclass(frozen=True)
class Step:
    """One room of a namespace's ladder: the room, its order, and the namespace's annotation
    with it and every earlier room of the namespace given (`plan`: that raise's plan)."""

    namespace: str
    room: MigrationRoom
    order: OrderKey
    annotation: str
    plan: QuotaPlan

    def describe(self) -> str:
        """``namespace/migration (priority P, created T)``, as Events and logs name it."""
        return (
            f"{self.namespace}/{self.room.migration} (priority "
            f"{priority_name(self.room.priority)}, created {self.room.created or 'unknown'})"
        )


def ladder(namespace: Mapping[str, Any], plan: QuotaPlan) -> list[Step]:
    """The namespace's steps in KubeVirt's order; [] for a plan that holds no room or a
    namespace without Rancher's annotation (nothing is asked of the project then)."""
    base_text = rancher_base_text(namespace)
    if not plan.holds_room or plan.base is None or base_text is None:
        return []
    name = str(metadata(namespace).get("name", ""))
    ordered = in_priority_order(plan.rooms.rooms)
    plans = [*reversed(list(prefixes(plan))), plan] if len(ordered) > 1 else [plan]
    return [
        Step(name, room, order_key(name, room), raised_annotation(base_text, fewer.hard), fewer)
        for room, fewer in zip(ordered, plans, strict=True)
    ]


def covered(namespace: Mapping[str, Any], steps: Sequence[Step]) -> int:
    """How many of `steps` the namespace's annotation asks for already: the furthest step whose
    request it meets on every key (0 when none, or when an annotation cannot be read)."""
    try:
        asked = namespace_limit(annotations_of(namespace).get(CATTLE_ANNOTATION_RESOURCE_QUOTA))
        if asked is None:
            return 0
        have = asked.hard()
        for count in range(len(steps), 0, -1):
            wanted = namespace_limit(steps[count - 1].annotation)
            if wanted is not None and less_or_equal(wanted.hard(), have)[0]:
                return count
    except ValueError:
        return 0
    return 0


def waiting_steps(namespace: Mapping[str, Any], plan: QuotaPlan) -> list[Step]:
    """The steps of the namespace's ladder its annotation does not ask for yet: the rooms its
    project has not given it."""
    steps = ladder(namespace, plan)
    return steps[covered(namespace, steps) :]


def claims_ahead(
    waiting: Iterable[Step],
    ahead_of: OrderKey,
    project: ProjectQuota,
    members: Sequence[Mapping[str, Any]],
) -> list[Step]:
    """Per sibling namespace, the furthest of its `waiting` steps earlier than `ahead_of` that
    fits the project with every namespace as `members` shows it (module docstring); a sibling
    not among `members` claims nothing."""
    by_namespace: dict[str, list[Step]] = {}
    for step in waiting:
        if step.order < ahead_of:
            by_namespace.setdefault(step.namespace, []).append(step)
    cached = {str(metadata(m).get("name", "")): m for m in members}
    claims = []
    for name, steps in sorted(by_namespace.items()):
        sibling = cached.get(name)
        if sibling is None:
            continue
        fitting = [s for s in steps if _fits(sibling, s.annotation, project, members)]
        if fitting:
            claims.append(max(fitting, key=lambda s: s.order))
    return claims


def _fits(
    namespace: Mapping[str, Any],
    annotation: str,
    project: ProjectQuota,
    members: Sequence[Mapping[str, Any]],
) -> bool:
    try:
        fit = namespace_fit(namespace, annotation, project, members)
    except ValueError:
        return False
    return fit is not None and fit.fits


def with_claims(
    members: Sequence[Mapping[str, Any]], claims: Sequence[Step]
) -> list[Mapping[str, Any]]:
    """`members`, each claiming sibling as if its claim were given (its annotation the claim's)."""
    claimed = {claim.namespace: claim.annotation for claim in claims}
    return [_asking(m, claimed[name]) if (name := _name(m)) in claimed else m for m in members]


def _name(namespace: Mapping[str, Any]) -> str:
    return str(metadata(namespace).get("name", ""))


def _asking(namespace: Mapping[str, Any], annotation: str) -> dict[str, Any]:
    meta = dict(metadata(namespace))
    meta["annotations"] = {
        **annotations_of(namespace),
        CATTLE_ANNOTATION_RESOURCE_QUOTA: annotation,
    }
    return {**namespace, "metadata": meta}


def first_waiting(claims: Sequence[Step], waiting: Iterable[Step]) -> list[Step]:
    """For each claim, its namespace's first waiting step: the migration that goes first."""
    steps = sorted(waiting, key=lambda s: s.order)
    return [next(s for s in steps if s.namespace == c.namespace) for c in claims]
