"""Rancher's namespace quota annotation, `field.cattle.io/resourceQuota`.

With Rancher, this annotation is the base quota: the only source of truth Rancher keeps (Rancher
rewrites the ResourceQuota's `spec.hard` from it). Its value is Rancher's `NamespaceResourceQuota`
JSON, `{"limit": {"limitsCpu": "2000m", ...}}`, whose fields map to ResourceQuota keys as in
rancher/rancher `pkg/resourcequota/quota_validate.go`.

Both Rancher and Harvester read it with Go's encoding/json into a struct, so we read it the same way:
keys in any order and any letter case ("LimitsCpu" is limitsCpu), unknown keys ignored, null as
absent, a duplicated key overriding (and a duplicated object merging into) the earlier one, and an
empty value as an absent field (Rancher drops it with `omitempty`). Values are then parsed strictly
with Go's `ParseQuantity` (no surrounding spaces).

`extended` (Rancher v2.14+: resource name -> quantity) is kept apart and does not enter the base:
Harvester's vendored Rancher API has no such field and ignores it, whatever it holds.

The annotation's value is a Rancher `ResourceQuotaLimit`, the same limit a project's
``spec.resourceQuota.limit`` and ``namespaceDefaultResourceQuota.limit`` hold: `RancherLimit` is
that limit, read from the annotation (`parse_namespace_resource_quota_details`) or from a
project's JSON fields (`RancherLimit.from_fields`), with the field mapping between the two.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn

from ...generic.meta import as_mapping
from ..annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA
from ..quantity import Quantity
from ..resources import ResourceList, go_json_dumps, parse_resource_list

__all__ = [
    "EXTENDED_FIELD",
    "LIMIT_FIELDS",
    "RancherLimit",
    "parse_namespace_resource_quota",
    "parse_namespace_resource_quota_details",
]

LIMIT_FIELDS: Final[tuple[tuple[str, str], ...]] = (
    ("pods", "pods"),
    ("services", "services"),
    ("replicationControllers", "replicationcontrollers"),
    ("secrets", "secrets"),
    ("configMaps", "configmaps"),
    ("persistentVolumeClaims", "persistentvolumeclaims"),
    ("servicesNodePorts", "services.nodeports"),
    ("servicesLoadBalancers", "services.loadbalancers"),
    ("requestsCpu", "requests.cpu"),
    ("requestsMemory", "requests.memory"),
    ("requestsStorage", "requests.storage"),
    ("limitsCpu", "limits.cpu"),
    ("limitsMemory", "limits.memory"),
)
"""Rancher `ResourceQuotaLimit` JSON field -> ResourceQuota `hard` key, in Go field order (the order
json.Marshal writes them)."""

EXTENDED_FIELD: Final = "extended"
_LIMIT_FIELD: Final = "limit"

_RESOURCE_BY_FIELD: Final = dict(LIMIT_FIELDS)
_FIELD_BY_RESOURCE: Final = {resource: json_field for json_field, resource in LIMIT_FIELDS}


def go_fold(name: str) -> str:
    """Go's encoding/json key folding: case-insensitive, one character at a time."""
    folded = []
    for char in name:
        upper = char.upper()
        folded.append(upper.lower() if len(upper) == 1 else char)
    return "".join(folded)


_FIELD_BY_FOLDED_NAME: Final = {go_fold(json_field): json_field for json_field, _ in LIMIT_FIELDS}
_FOLDED_LIMIT: Final = go_fold(_LIMIT_FIELD)
_FOLDED_EXTENDED: Final = go_fold(EXTENDED_FIELD)


@dataclass(frozen=True)
class RancherLimit:
    """Rancher's ResourceQuotaLimit, as a namespace's annotation or a project's quota fields
    hold it: its fixed fields (by quota key, the text as written, in Go field order when read
    from the annotation) and ``extended`` (resource name -> text), kept apart."""

    fixed: dict[str, str] = field(default_factory=dict)
    extended: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_fields(cls, fields: Any) -> RancherLimit:
        """From Rancher's JSON object (``limitsCpu``, ``extended``...); unknown fields ignored,
        and so is what is not an object where one belongs (nothing of it can be read). A value
        that is not a quantity is kept as written: `hard` names it."""
        fields = as_mapping(fields)
        fixed = {
            _RESOURCE_BY_FIELD[name]: str(value)
            for name, value in fields.items()
            if name in _RESOURCE_BY_FIELD and value not in (None, "")
        }
        extended = {str(k): str(v) for k, v in as_mapping(fields.get(EXTENDED_FIELD)).items()}
        return cls(fixed, extended)

    def keys(self) -> dict[str, str]:
        """As quota keys: ``extended`` first, the fixed fields winning over it."""
        return {**self.extended, **self.fixed}

    def hard(self) -> ResourceList:
        """As quantities; ValueError naming a value that is not one."""
        return parse_resource_list(self.keys())

    def limit(self) -> ResourceList:
        """The fixed fields as quantities (the annotation's base: `extended` apart); ValueError
        naming a value that is not one."""
        return {key: Quantity.parse(text) for key, text in self.fixed.items()}

    def canonical_text(self) -> str:
        """The annotation as Rancher rewrites it: compact, Go field order, the values' own text."""
        return _format_annotation(self.fixed, self.extended)


class _JsonObject(list[tuple[str, object]]):
    """A JSON object kept as its ordered pairs (duplicates included), to decode it the Go way."""


def _invalid(text: str, reason: str) -> NoReturn:
    raise ValueError(f"invalid {CATTLE_ANNOTATION_RESOURCE_QUOTA} annotation {text!r}: {reason}")


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


def parse_namespace_resource_quota_details(text: str) -> RancherLimit:
    """Read the annotation; ValueError (quoting the text and naming the field) if it is invalid.

    An empty annotation (and JSON null) is an empty quota, as for Rancher and Harvester.
    """
    if text == "":
        return RancherLimit()
    try:
        decoded: object = json.loads(
            text, object_pairs_hook=_JsonObject, parse_constant=_reject_constant
        )
    except ValueError as err:
        _invalid(text, f"not valid JSON: {err}")
    if decoded is None:
        return RancherLimit()
    if not isinstance(decoded, _JsonObject):
        _invalid(text, "not a JSON object")

    strings: dict[str, str] = {}  # JSON field -> text, last one wins
    extended: dict[str, str] = {}
    for key, value in decoded:
        if go_fold(key) == _FOLDED_LIMIT:
            _decode_limit(text, value, strings, extended)

    raw_limit: dict[str, str] = {}
    for json_field, resource_name in LIMIT_FIELDS:
        value_text = strings.get(json_field, "")
        if value_text == "":  # Rancher's omitempty: an empty field is no field
            continue
        try:
            Quantity.parse(value_text)
        except ValueError as err:
            _invalid(text, f"field {_LIMIT_FIELD}.{json_field}: {err}")
        raw_limit[resource_name] = value_text
    return RancherLimit(raw_limit, extended)


def _decode_limit(
    text: str, value: object, strings: dict[str, str], extended: dict[str, str]
) -> None:
    if value is None:  # Go leaves the struct as it is
        return
    if not isinstance(value, _JsonObject):
        _invalid(text, f"field {_LIMIT_FIELD} must be a JSON object")
    for key, item in value:
        folded = go_fold(key)
        if folded == _FOLDED_EXTENDED:
            _decode_extended(item, extended)
            continue
        json_field = _FIELD_BY_FOLDED_NAME.get(folded)
        if json_field is None or item is None:  # unknown keys are skipped; null changes nothing
            continue
        if not isinstance(item, str):
            _invalid(text, f"field {_LIMIT_FIELD}.{json_field} must be a string, not {item!r}")
        strings[json_field] = item


def _decode_extended(value: object, extended: dict[str, str]) -> None:
    """What of `extended` is a map of strings; the rest is skipped (Harvester ignores it all)."""
    if value is None:  # Go sets a map to nil on null
        extended.clear()
        return
    if isinstance(value, _JsonObject):
        extended.update((name, item) for name, item in value if isinstance(item, str))


def parse_namespace_resource_quota(text: str) -> ResourceList:
    """The base quota from the annotation: ResourceQuota `hard` keys, `extended` ignored.

    Harvester's `GetCPUMemoryLimitsFromRancherNamespaceResourceQuota`,
    `GetMemoryLimitsFromRancherNamespaceResourceQuota` and
    `convertNamespaceResourceLimitToResourceList` read a few of its fields; this maps every field
    Rancher maps.

    "" -> {}. Invalid JSON or an invalid quantity ("10000m invalid") -> ValueError naming the field.
    """
    return parse_namespace_resource_quota_details(text).limit()


def _format_annotation(fixed: Mapping[str, str], extended: Mapping[str, str]) -> str:
    """Go's json.Marshal of the struct: fixed fields in field order, then the sorted map."""
    limit: dict[str, object] = {
        json_field: fixed[resource_name]
        for json_field, resource_name in LIMIT_FIELDS
        if fixed.get(resource_name)
    }
    if extended:
        limit[EXTENDED_FIELD] = {name: extended[name] for name in sorted(extended)}
    return go_json_dumps({_LIMIT_FIELD: limit})
