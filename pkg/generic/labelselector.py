"""A metav1.LabelSelector, evaluated against a set of labels as apimachinery does.

`LabelSelectorAsSelector` semantics: a missing selector (None) selects nothing, an empty one
(no matchLabels, no matchExpressions) selects everything, and every requirement must hold. An
invalid selector (unknown operator, values where none belong or none where some must, a malformed
key or value) is a `ValueError`, so the caller decides what an invalid selector means.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

_NAME_RE: Final = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN_RE: Final = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)

IN: Final = "In"
NOT_IN: Final = "NotIn"
EXISTS: Final = "Exists"
DOES_NOT_EXIST: Final = "DoesNotExist"


def _check_key(key: Any) -> str:
    """IsQualifiedName: an optional DNS-subdomain prefix and a name of at most 63 characters."""
    if not isinstance(key, str):
        raise ValueError(f"label key must be a string: {key!r}")
    prefix, slash, name = key.rpartition("/")
    if "/" in prefix or (
        slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN_RE.fullmatch(prefix))
    ):
        raise ValueError(f"invalid label key {key!r}")
    if not 0 < len(name) <= 63 or not _NAME_RE.fullmatch(name):
        raise ValueError(f"invalid label key {key!r}")
    return key


def _check_value(value: Any, key: str) -> str:
    """IsValidLabelValue: empty, or at most 63 characters of the name alphabet."""
    if not isinstance(value, str):
        raise ValueError(f"label value for {key!r} must be a string: {value!r}")
    if value and (len(value) > 63 or not _NAME_RE.fullmatch(value)):
        raise ValueError(f"invalid label value {value!r} for {key!r}")
    return value


@dataclass(frozen=True)
class _Requirement:
    key: str
    operator: str
    values: frozenset[str]

    def matches(self, labels: Mapping[str, Any]) -> bool:
        present = self.key in labels
        if self.operator == IN:
            return present and labels[self.key] in self.values
        if self.operator == NOT_IN:
            return not present or labels[self.key] not in self.values
        if self.operator == EXISTS:
            return present
        return not present


def _requirement(raw: Any, where: str) -> _Requirement:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be an object: {raw!r}")
    key = _check_key(raw.get("key"))
    operator = raw.get("operator")
    values = raw.get("values") or []
    if not isinstance(values, list):
        raise ValueError(f"{where}.values must be a list: {values!r}")
    if operator in (IN, NOT_IN):
        if not values:
            raise ValueError(f"{where}: values must be non-empty for operator {operator}")
    elif operator in (EXISTS, DOES_NOT_EXIST):
        if values:
            raise ValueError(f"{where}: values must be empty for operator {operator}")
    else:
        raise ValueError(f"{where}: {operator!r} is not a valid label selector operator")
    return _Requirement(key, operator, frozenset(_check_value(v, key) for v in values))


@dataclass(frozen=True)
class LabelSelector:
    """A parsed selector; `None` requirements means it selects nothing."""

    requirements: tuple[_Requirement, ...] | None

    @classmethod
    def parse(cls, selector: Mapping[str, Any] | None) -> LabelSelector:
        """Parses a metav1.LabelSelector object (None: selects nothing). Raises ValueError."""
        if selector is None:
            return cls(None)
        if not isinstance(selector, Mapping):
            raise ValueError(f"label selector must be an object: {selector!r}")
        requirements: list[_Requirement] = []
        match_labels = selector.get("matchLabels") or {}
        if not isinstance(match_labels, Mapping):
            raise ValueError(f"matchLabels must be an object: {match_labels!r}")
        for key, value in match_labels.items():
            checked = _check_key(key)
            requirements.append(_Requirement(checked, IN, frozenset({_check_value(value, key)})))
        expressions = selector.get("matchExpressions") or []
        if not isinstance(expressions, list):
            raise ValueError(f"matchExpressions must be a list: {expressions!r}")
        for index, raw in enumerate(expressions):
            requirements.append(_requirement(raw, f"matchExpressions[{index}]"))
        return cls(tuple(requirements))

    def matches(self, labels: Mapping[str, Any] | None) -> bool:
        if self.requirements is None:
            return False
        present = labels or {}
        return all(requirement.matches(present) for requirement in self.requirements)


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, Any] | None) -> bool:
    """Whether `labels` satisfy the metav1.LabelSelector `selector`. Raises ValueError if the
    selector is invalid."""
    return LabelSelector.parse(selector).matches(labels)
