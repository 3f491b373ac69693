"""ResourceList helpers: `dict[str, Quantity]`, as Kubernetes' `corev1.ResourceList`.

The arithmetic follows k8s.io/apiserver/pkg/quota/v1 (Add, Subtract, Max, Mask, LessThanOrEqual,
Equals, IsZero, ...) because quota admission uses exactly those rules. JSON in and out follows Go's
`encoding/json` on a ResourceList, because Harvester writes and reads its ResourceQuota annotations
that way (`{"limits.cpu":"2","limits.memory":"4531245057"}`) and its readers must keep summing ours.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Mapping
from typing import NoReturn, TypeAlias

from .quantity import Quantity

__all__ = [
    "ResourceList",
    "add",
    "dumps",
    "equal",
    "go_json_dumps",
    "is_zero",
    "less_or_equal",
    "loads",
    "mask",
    "maximum",
    "negative_keys",
    "parse_quantity_value",
    "parse_resource_list",
    "subtract",
    "subtract_non_negative",
    "to_json_dict",
    "total",
]

ResourceList: TypeAlias = dict[str, Quantity]
"""Resource name (e.g. "limits.cpu") to quantity."""

_ZERO = Quantity()


# --------------------------------------------------------------------------- decoding


def parse_quantity_value(key: str, value: object) -> Quantity:
    """One ResourceList value as Go's `Quantity.UnmarshalJSON` reads it, or ValueError naming key.

    A string is trimmed of surrounding whitespace (Go's TrimSpace) and parsed; a JSON number is
    parsed from its text; null is zero. Anything else (bool, object, list) is an error.
    """
    if isinstance(value, Quantity):
        return value
    if value is None:
        return _ZERO
    if isinstance(value, bool):
        _bad_value(key, value, "not a quantity")
    if isinstance(value, str):
        text = value.strip()
    elif isinstance(value, int):
        text = str(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            _bad_value(key, value, "not a finite number")
        text = repr(value)
    else:
        _bad_value(key, value, f"a {type(value).__name__} is not a quantity")
    try:
        return Quantity.parse(text)
    except ValueError as err:
        _bad_value(key, value, str(err))


def _bad_value(key: str, value: object, reason: str) -> NoReturn:
    raise ValueError(f"invalid quantity for {key!r}: {value!r}: {reason}")


def parse_resource_list(mapping: Mapping[str, object] | None) -> ResourceList:
    """A decoded JSON object (an API object's `spec.hard`, `resources.limits`, ...) as a ResourceList.

    None (an absent field) is an empty list. A bad value is a ValueError naming its key and value.
    """
    if mapping is None:
        return {}
    if not isinstance(mapping, Mapping):
        raise ValueError(f"a resource list must be a JSON object, not {mapping!r}")
    result: ResourceList = {}
    for key, value in mapping.items():
        if not isinstance(key, str):
            raise ValueError(f"resource name must be a string: {key!r}")
        result[key] = parse_quantity_value(key, value)
    return result


def parse_resource_list_leniently(mapping: object) -> ResourceList:
    """`parse_resource_list` for values already validated by the API server (a quota's spec.hard
    or status.used as cached): {} instead of an error if it is not a valid ResourceList."""
    if mapping is not None and not isinstance(mapping, Mapping):
        return {}
    try:
        return parse_resource_list(mapping)
    except ValueError:
        return {}


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_int=str, parse_float=str, parse_constant=_reject_constant)


def _json(text: str) -> object:
    """`json.loads(text, parse_int=str, parse_float=str, parse_constant=_reject_constant)` with
    one decoder for every call (json.loads makes one a call when given those arguments); what
    json.loads checks before decoding (input other than str, a leading BOM) it still checks."""
    if isinstance(text, str) and not text.startswith("\ufeff"):
        return _DECODER.decode(text)
    decoded: object = json.loads(
        text, parse_int=str, parse_float=str, parse_constant=_reject_constant
    )
    return decoded


def loads(text: str) -> ResourceList:
    """A ResourceList from JSON, as Go's `json.Unmarshal` into a `corev1.ResourceList`.

    Numbers keep their exact text (never a float), "null" is an empty list (Go leaves the map nil
    without an error), and anything that is not a JSON object of quantities is a ValueError that
    quotes the text. (One divergence: Go parses a string value's raw bytes, so a JSON escape such
    as \\u0031 inside a quantity is an error for Go and a digit for us.)
    """
    try:
        decoded = _json(text)
    except ValueError as err:  # json.JSONDecodeError is a ValueError
        raise ValueError(
            f"invalid resource list JSON {_quoted(text)}: not valid JSON: {err}"
        ) from None
    except RecursionError:  # arrays or objects nested deeper than the decoder's stack
        raise ValueError(f"invalid resource list JSON {_quoted(text)}: nested too deep") from None
    if decoded is None:
        return {}
    if not isinstance(decoded, dict):
        raise ValueError(f"invalid resource list JSON {_quoted(text)}: not a JSON object")
    try:
        return parse_resource_list(decoded)
    except ValueError as err:
        raise ValueError(f"invalid resource list JSON {_quoted(text)}: {err}") from None


_QUOTED_AT_MOST = 200
"""Characters of a bad text an error quotes: an annotation may hold 256 KiB."""


def _quoted(text: str) -> str:
    """`text` as an error quotes it: whole when short, else its start and its length."""
    if len(text) <= _QUOTED_AT_MOST:
        return repr(text)
    return f"{text[:_QUOTED_AT_MOST]!r}... ({len(text)} characters)"


# --------------------------------------------------------------------------- encoding


def to_json_dict(resources: Mapping[str, Quantity]) -> dict[str, str]:
    """Resource name to Go's `String()` of each quantity, keys sorted (as Go's json.Marshal)."""
    return {key: str(resources[key]) for key in sorted(resources)}


# Go's encoding/json escapes these even inside strings (HTML safety and JavaScript line breaks).
_GO_JSON_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


def go_json_dumps(value: object) -> str:
    """JSON text as Go's `json.Marshal` writes it, for dicts already in the order Go would use.

    Compact, non-ASCII left as is, `<`, `>`, `&`, U+2028, U+2029 escaped like Go. (Go sorts map keys
    and keeps struct field order; the caller builds the dicts in that order.)
    """
    encoded = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for raw, escaped in _GO_JSON_ESCAPES.items():
        encoded = encoded.replace(raw, escaped)
    return encoded


_DUMPED_SIZE = 1024
"""Distinct ResourceLists whose text `dumps` keeps: a cluster's VM shapes and bases."""


def dumps(resources: Mapping[str, Quantity]) -> str:
    """The exact text Go's `json.Marshal(corev1.ResourceList)` would produce: keys sorted.

    Identical text matters: Harvester (and we) compare annotation values as strings. The same
    few lists recur in every plan (a VM shape's room), so the text of each is kept
    (`_dumped`, bounded)."""
    return _dumped(tuple((key, str(resources[key])) for key in sorted(resources)))


@functools.lru_cache(maxsize=_DUMPED_SIZE)
def _dumped(items: tuple[tuple[str, str], ...]) -> str:
    """`dumps` of the list whose sorted (name, quantity text) pairs are `items`."""
    return go_json_dumps(dict(items))


# --------------------------------------------------------------------------- arithmetic


def add(a: Mapping[str, Quantity], b: Mapping[str, Quantity]) -> ResourceList:
    """Union of keys; a key in both is the sum (in a's format, as Go's Add)."""
    result = dict(a)
    for key, value in b.items():
        result[key] = result[key] + value if key in result else value
    return result


def total(lists: Iterable[Mapping[str, Quantity]]) -> ResourceList:
    """The sum of many ResourceLists (empty for none)."""
    result: ResourceList = {}
    for resources in lists:
        result = add(result, resources)
    return result


def subtract(a: Mapping[str, Quantity], b: Mapping[str, Quantity]) -> ResourceList:
    """a - b per key; a key only in b comes out negated (Go's quota Subtract)."""
    result = dict(a)
    for key, value in b.items():
        result[key] = result[key] - value if key in result else -value
    return result


def subtract_non_negative(a: Mapping[str, Quantity], b: Mapping[str, Quantity]) -> ResourceList:
    """a - b per key, floored at zero; a key only in b is zero (Go's SubtractWithNonNegativeResult)."""
    result: ResourceList = {}
    for key, value in a.items():
        difference = value - b[key] if key in b else value
        result[key] = difference if difference.sign() > 0 else _ZERO
    for key in b:
        result.setdefault(key, _ZERO)
    return result


def maximum(a: Mapping[str, Quantity], b: Mapping[str, Quantity]) -> ResourceList:
    """Union of keys; a key in both is the larger value (b's on a tie, as Go's Max)."""
    result = dict(b)
    for key, value in a.items():
        if key not in b or value > b[key]:
            result[key] = value
    return result


def mask(resources: Mapping[str, Quantity], keys: Iterable[str]) -> ResourceList:
    """Only the given keys (those present)."""
    wanted = set(keys)
    return {key: value for key, value in resources.items() if key in wanted}


def less_or_equal(a: Mapping[str, Quantity], b: Mapping[str, Quantity]) -> tuple[bool, list[str]]:
    """Whether a <= b, and the keys of a that exceed b (sorted).

    Only keys present in both are compared: a key of a missing from b is unconstrained, as in
    Kubernetes' quota `LessThanOrEqual`.
    """
    exceeded = sorted(key for key, limit in b.items() if key in a and a[key] > limit)
    return not exceeded, exceeded


def equal(a: Mapping[str, Quantity], b: Mapping[str, Quantity]) -> bool:
    """Kubernetes' semantic equality: same keys, each value equal by value ("1Gi" == "1024Mi")."""
    return a.keys() == b.keys() and all(value == b[key] for key, value in a.items())


def is_zero(resources: Mapping[str, Quantity]) -> bool:
    """Every value is zero (an empty list is zero)."""
    return all(value.is_zero() for value in resources.values())


def negative_keys(resources: Mapping[str, Quantity]) -> list[str]:
    """The keys whose value is below zero, sorted."""
    return sorted(key for key, value in resources.items() if value.sign() < 0)
