"""Rancher's project accounting for namespace quotas, as its agent computes it (pure).

A Rancher project (management.cattle.io/v3 Project, in the namespace named after its cluster)
limits the sum of its namespaces' quotas: ``spec.resourceQuota.limit``, and a namespace default
``spec.namespaceDefaultResourceQuota.limit`` with the same fields (Rancher's project webhook
requires both or neither). Rancher's agent, on every namespace event of a create or an update of
the namespace's default quota (rancher/rancher ``pkg/controllers/managementuser/resourcequota``,
``validateAndSetNamespaceQuota``, and ``pkg/resourcequota/quota_validate.go`` ``IsQuotaFit``, as
released in v2.14 and v2.15):

- completes the namespace's ``field.cattle.io/resourceQuota`` with the default: the default's
  fields, with the requested values of the fields both have; ``extended`` is one field, taken
  whole from the request when both have one;
- adds that limit and every other namespace of the project's own annotation (all of them,
  validated or not), and compares the total with the project limit on the project's keys;
- marks the namespace ``ResourceQuotaValidated`` True, or False with "Resource quota [...]
  exceeds project limit" (the totals of the exceeded keys), and only then copies the limit into
  the quota; a namespace that does not fit keeps its quota as it was.

The project's ``usedLimit`` is the sum of the annotations of its validated namespaces.

Here (the limit itself, `RancherLimit`, is annotation.py's, whichever object it is read from):
the completion, the fit and the shortfall (`fit`), the project as read from its object
(`ProjectQuota`), the namespace condition as Rancher records it in ``cattle.io/status``, and our
verdict on a raise (`NoRoom`, below).

Whether a raise through Rancher's annotation fits the namespace's Rancher project:

Rancher's agent copies a raised ``field.cattle.io/resourceQuota`` into the quota only if the
namespace, with every other namespace of its project, stays within the project's limit; if not,
it marks the namespace ``ResourceQuotaValidated=False`` ("... exceeds project limit") and leaves
the quota as it was (above). A migration then waits for a raise that never comes,
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

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ...generic.meta import annotations_of, metadata, spec
from ...generic.resource import Object, Resource
from .. import resources
from ..annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA
from ..quantity import Quantity
from ..resources import ResourceList
from .annotation import RancherLimit, parse_namespace_resource_quota_details

PROJECTS: Final = Resource("management.cattle.io", "v3", "projects", "Project")
PROJECT_ID_ANNOTATION: Final = "field.cattle.io/projectId"
QUOTA_PROJECT_ID_ANNOTATION: Final = "field.cattle.io/resourceQuotaProjectId"
"""Rancher v2.14+: the project the namespace's quota was last counted in (lags projectId)."""
STATUS_ANNOTATION: Final = "cattle.io/status"
CONDITION_VALIDATED: Final = "ResourceQuotaValidated"
EXCEEDS: Final = "exceeds project limit"


def namespace_limit(annotation: str | None, *, extended: bool = True) -> RancherLimit | None:
    """The limit a namespace's ``field.cattle.io/resourceQuota`` requests; None without one.
    ``extended`` False reads it as Rancher before v2.14 (no such field). ValueError if invalid."""
    if not annotation or annotation == "null":
        return None
    details = parse_namespace_resource_quota_details(annotation)
    return RancherLimit(dict(details.fixed), dict(details.extended) if extended else {})


def complete_quota(requested: RancherLimit, default: RancherLimit) -> RancherLimit:
    """Rancher's completeQuota: the default's fields, with the requested values of the fields
    both have (``extended`` whole, when both have one)."""
    fixed = {key: requested.fixed.get(key, value) for key, value in default.fixed.items()}
    extended = requested.extended if requested.extended and default.extended else default.extended
    return RancherLimit(fixed, dict(extended))


@dataclass(frozen=True)
class Fit:
    """IsQuotaFit's answer: whether the namespace fits, the totals of the keys that do not
    (negative values of the namespace's own limit count as not fitting), and by how much each
    total exceeds the project limit (`shortfall`: what the project limit lacks)."""

    fits: bool
    exceeded: ResourceList
    shortfall: ResourceList

    def message(self) -> str:
        """The condition message Rancher writes when the namespace does not fit."""
        if self.fits:
            return ""
        return f"Resource quota [{format_resource_list(self.exceeded)}] {EXCEEDS}"


def fit(
    limit: Mapping[str, Quantity],
    siblings: Iterable[Mapping[str, Quantity]],
    project_limit: Mapping[str, Quantity],
) -> Fit:
    """This namespace's limit plus every sibling's, within the project limit on its keys."""
    total: ResourceList = dict(limit)
    for other in siblings:
        total = resources.add(total, other)
    _, over = resources.less_or_equal(total, project_limit)
    bad = sorted(set(over) | set(resources.negative_keys(limit)))
    if not bad:
        return Fit(True, {}, {})
    shortfall = {key: total[key] - project_limit[key] for key in over}
    return Fit(False, resources.mask(total, bad), shortfall)


def format_resource_list(values: Mapping[str, Quantity]) -> str:
    """Rancher's FormatResourceList: sorted ``name=quantity`` pairs joined by commas."""
    return ",".join(f"{key}={values[key]}" for key in sorted(values))


@dataclass(frozen=True)
class ProjectQuota:
    """A project's quota fields, as read from its object."""

    id: str
    """``<cluster>:<project>``, as namespaces name it in ``field.cattle.io/projectId``."""
    limit: RancherLimit | None
    """``spec.resourceQuota.limit``; None: the project has no quota."""
    namespace_default: RancherLimit | None

    @classmethod
    def from_object(cls, project: Object) -> ProjectQuota:
        """Never raises: a field that is not an object where one belongs reads as absent (a
        quota field so as no quota), since a raise here failed the project's reconciles, its
        preflight and explain with an AttributeError that named nothing."""
        meta, fields = metadata(project), spec(project)
        quota = fields.get("resourceQuota")
        default = fields.get("namespaceDefaultResourceQuota")
        return cls(
            id=f"{meta.get('namespace', '')}:{meta.get('name', '')}",
            limit=_limit_of(quota),
            namespace_default=_limit_of(default),
        )


def _limit_of(quota: Any) -> RancherLimit | None:
    """A project quota field's ``limit``; None without the field (or with one not an object)."""
    return RancherLimit.from_fields(quota.get("limit")) if isinstance(quota, Mapping) else None


def project_reference(namespace: Mapping[str, Any]) -> tuple[str, str] | None:
    """(cluster, project) from the namespace's ``field.cattle.io/projectId``; None outside one."""
    value = annotations_of(namespace).get(PROJECT_ID_ANNOTATION, "")
    cluster, _, project = value.partition(":")
    return (cluster, project) if cluster and project else None


def namespace_fit(
    namespace: Mapping[str, Any],
    annotation: str,
    project: ProjectQuota,
    members: Iterable[Mapping[str, Any]],
) -> Fit | None:
    """Whether `namespace` would fit its project with `annotation` as its request, as Rancher's
    agent would judge it now (`members`: the namespaces of the cluster; those of the project
    other than this one are its siblings). None when the project has no quota or default."""
    if project.limit is None or project.namespace_default is None:
        return None
    requested = namespace_limit(annotation) or RancherLimit()
    merged = complete_quota(requested, project.namespace_default)
    name = (namespace.get("metadata") or {}).get("name")
    siblings = [
        (
            namespace_limit(annotations_of(other).get(CATTLE_ANNOTATION_RESOURCE_QUOTA))
            or RancherLimit()
        )
        for other in members
        if (other.get("metadata") or {}).get("name") != name
        and annotations_of(other).get(PROJECT_ID_ANNOTATION) == project.id
    ]
    return fit(merged.hard(), [s.hard() for s in siblings], project.limit.hard())


def validated_condition(namespace: Mapping[str, Any]) -> tuple[bool, str] | None:
    """Rancher's ``ResourceQuotaValidated`` condition of the namespace: (status, message), or
    None when there is none (or ``cattle.io/status`` cannot be read)."""
    text = annotations_of(namespace).get(STATUS_ANNOTATION)
    if not text:
        return None
    try:
        decoded = json.loads(text)
    except ValueError:
        return None
    conditions = decoded.get("Conditions") if isinstance(decoded, dict) else None
    for condition in conditions or []:
        if isinstance(condition, dict) and condition.get("Type") == CONDITION_VALIDATED:
            return condition.get("Status") == "True", str(condition.get("Message") or "")
    return None


def lacks_room(namespace: Mapping[str, Any]) -> str | None:
    """Rancher's message when it marked the namespace as not fitting its project, else None."""
    condition = validated_condition(namespace)
    if condition is None or condition[0]:
        return None
    return condition[1] or f"{CONDITION_VALIDATED} is False"


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
    in KubeVirt's order and wait for it (util/resourcequota/rancherpath.py)."""
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
