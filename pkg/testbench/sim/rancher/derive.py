"""Rancher's namespace quota arithmetic (pure): from the namespace annotation and the project to the
default ResourceQuota's `spec.hard`, and what to do about the existing one.

Mirrors rancher/rancher `pkg/controllers/managementuser/resourcequota` (`deriveRequestedResourceQuota`,
`completeQuota`, `CreateResourceQuota`, `zeroOutResourceQuotaLimit`) and
`pkg/resourcequota/quota_validate.go` (`IsQuotaFit`) as released in v2.14 and v2.15 (read at
release/v2.14 096e380e and release/v2.15 2e25858e); the completion and the fit are
`harvester_quota.util.rancher.project`'s, which the product shares:

- requested (the `field.cattle.io/resourceQuota` annotation) without a project default: nothing
  (a project without quota, or none at all); a project default without requested: the default;
  both: the default with the requested values of the fields the default has (other requested
  fields are dropped; `extended` is one field, replaced whole);
- no ResourceQuota and a non-empty result: create; a ResourceQuota and no result: delete (and strip
  the annotation); otherwise update when `spec.hard` is not semantically equal (any extra or missing
  key, or a different value).

A project is checked as Rancher's project webhook checks it (`Project.__post_init__`): a quota and
a namespace default come together, with the same fields, the default within the limit.
"""

from __future__ import annotations

import datetime
import enum
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ....util import resources
from ....util.quantity import Quantity
from ....util.rancher import project as rancherproject
from ....util.rancher.annotation import EXTENDED_FIELD, LIMIT_FIELDS, RancherLimit
from ....util.rancher.project import (
    CONDITION_VALIDATED,
    PROJECT_ID_ANNOTATION,
    QUOTA_PROJECT_ID_ANNOTATION,
    STATUS_ANNOTATION,
    complete_quota,
    format_resource_list,
)
from ....util.resources import ResourceList

__all__ = [
    "CONDITION_VALIDATED",
    "PROJECT_ID_ANNOTATION",
    "QUOTA_PROJECT_ID_ANNOTATION",
    "STATUS_ANNOTATION",
    "RancherLimit",
    "as_fields",
    "complete_quota",
    "field_names",
    "format_namespace_resource_quota",
    "format_resource_list",
    "limit_from_keys",
]

_FIELD_BY_RESOURCE: Final = {resource: json_field for json_field, resource in LIMIT_FIELDS}


def limit_from_keys(keys: Mapping[str, str]) -> RancherLimit:
    """A limit from quota keys: those with a Rancher field are fixed, the rest extended (as
    Rancher converts a ResourceList back)."""
    fixed = {k: str(v) for k, v in keys.items() if k in _FIELD_BY_RESOURCE}
    extended = {k: str(v) for k, v in keys.items() if k not in _FIELD_BY_RESOURCE}
    return RancherLimit(fixed, extended)


def field_names(limit: RancherLimit) -> set[str]:
    """Rancher's top-level fields present in `limit` (``extended`` counts as one)."""
    names = {_FIELD_BY_RESOURCE[key] for key in limit.fixed}
    return names | ({EXTENDED_FIELD} if limit.extended else set())


def as_fields(limit: RancherLimit) -> dict[str, Any]:
    """Rancher's JSON object for `limit` (fixed fields in Go order, then ``extended``)."""
    fields: dict[str, Any] = {
        json_field: limit.fixed[key] for json_field, key in LIMIT_FIELDS if key in limit.fixed
    }
    if limit.extended:
        fields[EXTENDED_FIELD] = dict(sorted(limit.extended.items()))
    return fields


def format_namespace_resource_quota(resources: Mapping[str, Quantity | str]) -> str:
    """The annotation text Rancher writes for these ResourceQuota keys.

    `{"limit":{...}}`, compact, fields in Go order; keys without a Rancher field go to `extended`
    (sorted), as Rancher's reverse conversion does. A Quantity is written as Go's `String()`; a str
    is written verbatim (to keep e.g. "10000m") once it is checked to be a valid quantity.
    """
    texts: dict[str, str] = {}
    for name, value in resources.items():
        if isinstance(value, str):
            Quantity.parse(value)  # refuse to write what neither Rancher nor we could read back
            texts[name] = value
        else:
            texts[name] = str(value)
    return limit_from_keys(texts).canonical_text()


CREATOR_LABEL: Final = "cattle.io/creator"
CONDITION_INIT: Final = "ResourceQuotaInit"
CONDITION_DELAY: Final = datetime.timedelta(seconds=1)
"""Rancher stamps a namespace condition's LastUpdateTime one second in the future."""

_VERSION_RE: Final = re.compile(r"v?(\d+)\.(\d+)(?:\.\d+)?(?:[-+].*)?")


@dataclass(frozen=True)
class RancherFlavour:
    """What differs between Rancher releases for the quota sync.

    - before v2.13 the norman client labels what it creates `cattle.io/creator: norman`;
    - from v2.14 the annotation's `extended` map enters `spec.hard`, and writes whose result equals
      the object (reflect.DeepEqual) are skipped.
    """

    major: int
    minor: int

    @classmethod
    def parse(cls, version: str) -> RancherFlavour:
        match = _VERSION_RE.fullmatch(version.strip())
        if match is None:
            raise ValueError(
                f"unknown Rancher version {version!r}: expected e.g. '2.9' or 'v2.14.3'"
            )
        return cls(int(match.group(1)), int(match.group(2)))

    def at_least(self, major: int, minor: int) -> bool:
        return (self.major, self.minor) >= (major, minor)

    @property
    def creator_label(self) -> bool:
        return not self.at_least(2, 13)

    @property
    def extended(self) -> bool:
        return self.at_least(2, 14)

    @property
    def skip_unchanged_writes(self) -> bool:
        return self.at_least(2, 14)


@dataclass(frozen=True)
class Project:
    """A Rancher project as far as namespace quotas go.

    - `limit`: `spec.resourceQuota.limit` as ResourceQuota keys ("limits.cpu": "10"); None when
      the project has no resourceQuota (Rancher then deletes its namespaces' default quotas and
      strips their annotations). Keys without a Rancher field are `extended` entries.
    - `namespace_default`: `spec.namespaceDefaultResourceQuota.limit`, required with a limit, with
      the same fields (`extended` counting as one), each within the limit: Rancher's project
      webhook refuses any other project (ValueError here, with its reason).
    """

    id: str
    cluster_id: str = "local"
    limit: Mapping[str, str] | None = None
    namespace_default: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        problem = project_problem(self.limit, self.namespace_default)
        if problem is not None:
            raise ValueError(f"project {self.annotation_id}: {problem}")

    @property
    def annotation_id(self) -> str:
        """The value of a member namespace's `field.cattle.io/projectId` annotation."""
        return f"{self.cluster_id}:{self.id}"

    @property
    def quota_limit(self) -> RancherLimit | None:
        return None if self.limit is None else limit_from_keys(self.limit)

    @property
    def default_limit(self) -> RancherLimit | None:
        if self.namespace_default is None:
            return None
        return limit_from_keys(self.namespace_default)

    def namespace_annotations(self, quota: Mapping[str, str] | None = None) -> dict[str, str]:
        """Annotations for a namespace of this project, with `quota` (ResourceQuota keys) as its
        `field.cattle.io/resourceQuota` if given."""
        annotations = {PROJECT_ID_ANNOTATION: self.annotation_id}
        if quota is not None:
            annotations["field.cattle.io/resourceQuota"] = annotation_text(limit_from_keys(quota))
        return annotations


def project_problem(
    limit: Mapping[str, str] | None, default: Mapping[str, str] | None
) -> str | None:
    """Why Rancher's project webhook would refuse this pair of limits, or None."""
    if limit is None and default is None:
        return None
    if limit is None:
        return "resourceQuota is required when namespaceDefaultResourceQuota is set"
    if default is None:
        return "namespaceDefaultResourceQuota is required when resourceQuota is set"
    project_fields = field_names(limit_from_keys(limit))
    default_fields = field_names(limit_from_keys(default))
    if project_fields != default_fields:
        return "resource quota and namespace default quota do not have the same resources defined"
    over = rancherproject.fit(
        resources.parse_resource_list(default), [], resources.parse_resource_list(limit)
    )
    if not over.fits:
        return (
            "namespace default quota limit exceeds project limit on fields: "
            + format_resource_list(over.exceeded)
        )
    return None


@dataclass(frozen=True)
class Derived:
    """The merged limit (Rancher's fields, as the annotation will say them) and the `spec.hard`
    it converts to."""

    limit: RancherLimit
    hard: ResourceList


class Operation(enum.StrEnum):
    NONE = "none"
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"


def requested_limit(annotation: str | None, flavour: RancherFlavour) -> RancherLimit | None:
    """The namespace's requested limit; None when not annotated. ValueError (naming the
    annotation) when it is not valid JSON; `extended` counts from v2.14."""
    return rancherproject.namespace_limit(annotation, extended=flavour.extended)


def project_default(project: Project | None, flavour: RancherFlavour) -> RancherLimit | None:
    """The project's namespace default, or None when there is none to apply (no project, or a
    project without resourceQuota)."""
    if project is None or project.limit is None:
        return None
    default = project.default_limit
    if default is None or flavour.extended:
        return default
    return RancherLimit(default.fixed, {})


def derive(
    annotation: str | None, project: Project | None, flavour: RancherFlavour
) -> Derived | None:
    """The default ResourceQuota a namespace should have, or None (no quota)."""
    requested = requested_limit(annotation, flavour)
    default = project_default(project, flavour)
    if default is None:
        return None
    limit = default if requested is None else complete_quota(requested, default)
    return Derived(limit=limit, hard=limit.hard())


def operation(existing_hard: Mapping[str, Quantity] | None, desired: Derived | None) -> Operation:
    """Create, update, delete or nothing, comparing `spec.hard` with semantic equality."""
    if existing_hard is None:
        return Operation.CREATE if desired is not None and desired.hard else Operation.NONE
    if desired is None or not desired.hard:
        return Operation.DELETE
    if resources.equal(existing_hard, desired.hard):
        return Operation.NONE
    return Operation.UPDATE


def spec_hard(hard: Mapping[str, Quantity]) -> dict[str, str]:
    """`spec.hard` as Rancher sends it (each quantity in Go's canonical form)."""
    return {key: str(value) for key, value in hard.items()}


def annotation_text(limit: RancherLimit) -> str:
    """The annotation Rancher writes back: `{"limit":{...}}` in Go field order, `extended` last."""
    return RancherLimit(limit.fixed, limit.extended).canonical_text()


def is_quota_fit(
    limit: Mapping[str, Quantity],
    siblings: Iterable[Mapping[str, Quantity]],
    project_limit: Mapping[str, Quantity],
) -> rancherproject.Fit:
    """Rancher's IsQuotaFit (released): this namespace plus every sibling within the project
    limit (only the keys the project limits), and no negative value of its own."""
    return rancherproject.fit(limit, siblings, project_limit)


def zero_out(limit: RancherLimit, bad: Iterable[str]) -> RancherLimit:
    """What Rancher creates for a namespace that does not fit: the offending keys set to "0"
    (through a ResourceList and back, as zeroOutResourceQuotaLimit does)."""
    offending = set(bad)
    keys = {key: ("0" if key in offending else str(value)) for key, value in limit.hard().items()}
    return limit_from_keys(keys)


def _conditions(status_annotation: str | None) -> list[dict[str, Any]]:
    if not status_annotation:
        return []
    try:
        decoded = json.loads(status_annotation)
    except json.JSONDecodeError as error:
        raise ValueError(f"invalid {STATUS_ANNOTATION} annotation {status_annotation!r}") from error
    conditions = decoded.get("Conditions") if isinstance(decoded, dict) else None
    return [c for c in conditions or [] if isinstance(c, dict)]


def condition_is_set(status_annotation: str | None, condition_type: str, value: bool) -> bool:
    """Whether `cattle.io/status` has the condition with that status."""
    wanted = "True" if value else "False"
    return any(
        c.get("Type") == condition_type and c.get("Status") == wanted
        for c in _conditions(status_annotation)
    )


def set_condition(
    status_annotation: str | None,
    condition_type: str,
    value: bool,
    message: str,
    now: datetime.datetime,
) -> str:
    """Rancher's SetNamespaceCondition: replace the condition of that type (or append it), with
    LastUpdateTime one second ahead and the message kept only when the status is False."""
    conditions = _conditions(status_annotation)
    condition = {
        "Type": condition_type,
        "Status": "True" if value else "False",
        "Message": "" if value else message,
        "LastUpdateTime": (now + CONDITION_DELAY)
        .astimezone(datetime.UTC)
        .strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    for index, existing in enumerate(conditions):
        if existing.get("Type") == condition_type:
            conditions[index] = condition
            break
    else:
        conditions.append(condition)
    return json.dumps({"Conditions": conditions}, separators=(",", ":"))
