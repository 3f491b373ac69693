"""Rancher's namespace quota arithmetic (pure): from the namespace annotation and the project to the
default ResourceQuota's `spec.hard`, and what to do about the existing one.

Mirrors rancher/rancher `pkg/controllers/managementuser/resourcequota` (`deriveRequestedResourceQuota`,
`completeQuota`, `CreateResourceQuota`) and `pkg/resourcequota/quota_validate.go` (`IsQuotaFit`):

- requested (the `field.cattle.io/resourceQuota` annotation) without a project default: nothing;
  a project default without requested: the default; both: the default with the requested values
  for the keys the default has (other requested keys are dropped);
- no ResourceQuota and a non-empty result: create; a ResourceQuota and no result: delete (and strip
  the annotation); otherwise update when `spec.hard` is not semantically equal (any extra or missing
  key, or a different value).
"""

from __future__ import annotations

import datetime
import enum
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ....util import resources
from ....util.quantity import Quantity
from ....util.rancher import (
    format_namespace_resource_quota,
    parse_namespace_resource_quota_details,
)
from ....util.resources import ResourceList

PROJECT_ID_ANNOTATION: Final = "field.cattle.io/projectId"
STATUS_ANNOTATION: Final = "cattle.io/status"
CREATOR_LABEL: Final = "cattle.io/creator"
CONDITION_VALIDATED: Final = "ResourceQuotaValidated"
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
      strips their annotations). An empty mapping is a quota that constrains nothing.
    - `namespace_default`: `spec.namespaceDefaultResourceQuota.limit`; None means "the keys of each
      namespace's own annotation", i.e. a default that covers whatever the annotation asks for.
    """

    id: str
    cluster_id: str = "local"
    limit: Mapping[str, str] | None = field(default_factory=dict)
    namespace_default: Mapping[str, str] | None = None

    @property
    def annotation_id(self) -> str:
        """The value of a member namespace's `field.cattle.io/projectId` annotation."""
        return f"{self.cluster_id}:{self.id}"

    def namespace_annotations(self, quota: Mapping[str, str] | None = None) -> dict[str, str]:
        """Annotations for a namespace of this project, with `quota` (ResourceQuota keys) as its
        `field.cattle.io/resourceQuota` if given."""
        annotations = {PROJECT_ID_ANNOTATION: self.annotation_id}
        if quota is not None:
            annotations["field.cattle.io/resourceQuota"] = format_namespace_resource_quota(quota)
        return annotations


@dataclass(frozen=True)
class Derived:
    """The merged limit (ResourceQuota key -> quantity text, as the annotation will say it) and the
    `spec.hard` it converts to."""

    limit: dict[str, str]
    hard: ResourceList


class Operation(enum.StrEnum):
    NONE = "none"
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"


def requested_limit(annotation: str | None, flavour: RancherFlavour) -> dict[str, str] | None:
    """The namespace's requested limit (ResourceQuota key -> text); None when not annotated.

    ValueError (naming the annotation) when it is not valid JSON; `extended` counts from v2.14,
    the fixed fields winning over it.
    """
    if not annotation or annotation == "null":
        return None
    details = parse_namespace_resource_quota_details(annotation)
    limit = dict(details.raw_limit)
    if flavour.extended:
        limit = {**details.extended, **limit}
    return limit


def project_default(
    project: Project | None, requested: Mapping[str, str] | None
) -> dict[str, str] | None:
    """The project's namespace default, or None when there is none to apply (no project, or a
    project without resourceQuota)."""
    if project is None or project.limit is None:
        return None
    if project.namespace_default is None:
        return None if requested is None else dict(requested)
    return dict(project.namespace_default)


def complete_quota(requested: Mapping[str, str], default: Mapping[str, str]) -> dict[str, str]:
    """Rancher's completeQuota: the default, with the requested values of the keys it has."""
    merged = dict(default)
    for key, value in requested.items():
        if key in merged:
            merged[key] = value
    return merged


def derive(
    annotation: str | None, project: Project | None, flavour: RancherFlavour
) -> Derived | None:
    """The default ResourceQuota a namespace should have, or None (no quota)."""
    requested = requested_limit(annotation, flavour)
    default = project_default(project, requested)
    if default is None:
        return None
    limit = default if requested is None else complete_quota(requested, default)
    return Derived(limit=limit, hard=resources.parse_resource_list(limit))


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


def annotation_text(limit: Mapping[str, str]) -> str:
    """The annotation Rancher writes back: `{"limit":{...}}` in Go field order."""
    return format_namespace_resource_quota(limit)


def is_quota_fit(
    limit: Mapping[str, Quantity],
    siblings: Iterable[Mapping[str, Quantity]],
    project_limit: Mapping[str, Quantity],
) -> tuple[bool, dict[str, Quantity]]:
    """Rancher's IsQuotaFit: this namespace plus its validated siblings within the project limit
    (only the keys the project limits), and no negative value. Returns (fits, offending values)."""
    negatives = resources.negative_keys(limit)
    total: ResourceList = {k: v for k, v in limit.items() if k not in negatives}
    for other in siblings:
        total = resources.add(total, {k: v for k, v in other.items() if v.sign() >= 0})
    fits, exceeded = resources.less_or_equal(total, project_limit)
    bad = {**resources.mask(total, exceeded), **resources.mask(limit, negatives)}
    return fits and not negatives, bad


def zero_out(limit: Mapping[str, str], bad: Iterable[str]) -> dict[str, str]:
    """What Rancher creates for a namespace that does not fit: the offending keys set to "0"."""
    offending = set(bad)
    return {key: ("0" if key in offending else value) for key, value in limit.items()}


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


def format_resource_list(values: Mapping[str, Quantity]) -> str:
    """Rancher's FormatResourceList: sorted `name=quantity` pairs joined by commas."""
    return ",".join(f"{key}={values[key]}" for key in sorted(values))
