"""Tolerant accessors for the parts of an API object every controller reads.

Objects are plain dicts as the server sent them (or as a test wrote them), so any field may be
missing or, from a hostile or broken client, of the wrong type. Each accessor returns an empty
mapping (or string) instead of raising: callers decide what absence means. The results are
read-only views of the object; copy before mutating.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

_EMPTY: Mapping[str, Any] = {}


def _is_mapping(value: Any) -> TypeGuard[Mapping[str, Any]]:
    """isinstance(value, Mapping), with the dicts every decoded object is made of checked first
    (an ABC check costs several times a type check, and plans call these accessors for every
    migration and room of a namespace)."""
    return type(value) is dict or isinstance(value, Mapping)


def as_mapping(value: Any) -> Mapping[str, Any]:
    """`value` if it is a JSON object (a mapping), else an empty mapping: any field of an
    object read without trusting its type."""
    return value if _is_mapping(value) else _EMPTY


def metadata(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``metadata``, or an empty mapping."""
    return as_mapping(obj.get("metadata")) if _is_mapping(obj) else _EMPTY


def labels(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    """``metadata.labels``, or an empty mapping."""
    return as_mapping(metadata(obj).get("labels"))


def annotations_of(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    """``metadata.annotations``, or an empty mapping."""
    return as_mapping(metadata(obj).get("annotations"))


def spec(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``spec``, or an empty mapping."""
    return as_mapping(obj.get("spec")) if _is_mapping(obj) else _EMPTY


def status(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``status``, or an empty mapping."""
    return as_mapping(obj.get("status")) if _is_mapping(obj) else _EMPTY


def name(obj: Mapping[str, Any] | None) -> str:
    """``metadata.name`` as a string ("" when absent)."""
    value = metadata(obj).get("name")
    return str(value) if value is not None else ""


def namespace(obj: Mapping[str, Any] | None) -> str:
    """``metadata.namespace`` as a string ("" for cluster-scoped or absent)."""
    value = metadata(obj).get("namespace")
    return str(value) if value is not None else ""


def is_deleting(obj: Mapping[str, Any] | None) -> bool:
    """True once the object has a ``metadata.deletionTimestamp``."""
    return bool(metadata(obj).get("deletionTimestamp"))


def has_condition(obj: Mapping[str, Any] | None, condition_type: str) -> bool:
    """True if ``status.conditions`` has an entry of that type whose status is "True"."""
    conditions = status(obj).get("conditions")
    if not isinstance(conditions, list):
        return False
    return any(
        isinstance(c, Mapping) and c.get("type") == condition_type and c.get("status") == "True"
        for c in conditions
    )


def condition_status(obj: Mapping[str, Any] | None, condition_type: str) -> str | None:
    """The ``status`` of the ``status.conditions`` entry of that type, None if there is none."""
    conditions = status(obj).get("conditions")
    if not isinstance(conditions, list):
        return None
    for condition in conditions:
        if isinstance(condition, Mapping) and condition.get("type") == condition_type:
            return str(condition.get("status"))
    return None
