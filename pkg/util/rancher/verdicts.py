"""Whether a raise through Rancher's annotation fits the namespace's Rancher project (pure).

Rancher's agent copies a raised ``field.cattle.io/resourceQuota`` into the quota only if the
namespace, with every other namespace of its project, stays within the project's limit; if not,
it marks the namespace ``ResourceQuotaValidated=False`` ("... exceeds project limit") and leaves
the quota as it was (util/rancher/project.py). A migration then waits for a raise that never comes,
and once the raise is given back Rancher does not check the namespace again while its quota does
not change: it stays marked, out of the project's usedLimit.

So the controller asks first (`raise_verdict`, when it can read the project): a raise that does
not fit is not written, and the Warning names the cause and the cure, "the project has no room for
this migration: raise the project limit by X", X being what the project's namespaces would then
ask beyond its limit, per key. Where the project cannot be read, Rancher's own condition tells
(`refusal_verdict`): X from the project when it can be read by then, else Rancher's totals. A
raise that fits but whose room is owed to sibling namespaces' migrations earlier in KubeVirt's
order waits for them, named (`queued_verdict`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ...generic.meta import annotations_of
from ..annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA
from ..resources import ResourceList
from .project import Fit, ProjectQuota, lacks_room, namespace_fit

NO_ROOM: Final = "the project has no room for this migration"


@dataclass(frozen=True)
class NoRoom:
    """A raise the project cannot take: what to tell, and by how much the limit falls short
    (empty when only Rancher's totals are known)."""

    message: str
    shortfall: ResourceList
    first: tuple[str, ...] = ()
    """The sibling namespaces' migrations that go first, where the project's room would fit the
    raise but is owed to rooms earlier in KubeVirt's order (`queued_verdict`); () otherwise."""
    behind: tuple[tuple[str, str], ...] = ()
    """Those migrations as (namespace, migration uid): the raise is judged again once one of
    them no longer waits (projectdemands.py)."""


def describe_shortfall(shortfall: Mapping[str, Any]) -> str:
    return ", ".join(f"{key} {shortfall[key]}" for key in sorted(shortfall))


NAMED: Final = 3
"""At most this many migrations named in a queued verdict's message (the rest counted): a
project of hundreds of waiting namespaces must not make an Event message of every name."""


def queued_verdict(first: Sequence[str], behind: Sequence[tuple[str, str]] = ()) -> NoRoom:
    """The raise would fit the project, but its room goes first to `first` (each
    ``namespace/migration (priority, created)``), rooms of sibling namespaces that come earlier
    in KubeVirt's order and wait for it (util/resourcequota/projectqueue.py)."""
    named = ", ".join(first[:NAMED])
    if len(first) > NAMED:
        named += f" and {len(first) - NAMED} more migrations of sibling namespaces"
    return NoRoom(
        f"{NO_ROOM} yet: its room goes first to {named}, earlier in KubeVirt's order "
        "(priority, then creation); this raise follows once those are given",
        {},
        tuple(first),
        tuple(behind),
    )


def raise_verdict(
    namespace: Mapping[str, Any],
    raised: str,
    project: ProjectQuota | None,
    members: Iterable[Mapping[str, Any]],
) -> NoRoom | None:
    """NoRoom if the namespace with `raised` as its annotation would not fit its project (as
    Rancher's agent will judge it); None if it fits, or if it cannot be judged here (no project
    read, no quota on it, an annotation Rancher itself could not read)."""
    if project is None:
        return None
    try:
        fit = namespace_fit(namespace, raised, project, members)
    except ValueError:
        return None  # a sibling's annotation Rancher cannot read either: its agent fails too
    return fit_verdict(fit)


def fit_verdict(fit: Fit | None) -> NoRoom | None:
    """NoRoom naming what the project limit lacks where Rancher's verdict `fit` is no fit."""
    if fit is None or fit.fits or not fit.shortfall:
        return None
    text = describe_shortfall(fit.shortfall)
    return NoRoom(f"{NO_ROOM}: raise the project limit by {text}", fit.shortfall)


def refusal_verdict(
    namespace: Mapping[str, Any],
    project: ProjectQuota | None,
    members: Iterable[Mapping[str, Any]],
) -> NoRoom | None:
    """NoRoom when Rancher marked the namespace as not fitting its project (its condition),
    with X from the project if it can be read, else from Rancher's message; None otherwise."""
    rancher_says = lacks_room(namespace)
    if rancher_says is None:
        return None
    if project is not None and project.limit is not None:
        current = annotations_of(namespace).get(CATTLE_ANNOTATION_RESOURCE_QUOTA, "")
        # None: it fits the project as it is now (its limit was raised since; Rancher's agent
        # checks again on that project update).
        return raise_verdict(namespace, current, project, members)
    return NoRoom(
        f"{NO_ROOM}: raise the project limit so that it covers what Rancher reports "
        f"({rancher_says})",
        {},
    )
