"""A namespace's LimitRange defaults, as the LimitRanger admission plugin gives them to a pod.

A container created without a limit or a request for some resource gets the ``default`` (limits)
or ``defaultRequest`` (requests) of the namespace's LimitRanges of type Container, and quota then
charges those values: a launcher pod's sidecars (hook sidecars have no resources of their own) or
a compute container without a cpu limit are charged more than KubeVirt rendered. The order is the
API server's: first its own defaulting (a request missing where a limit is set takes the limit),
then LimitRanger fills only what is still missing, in every container and init container.

The LimitRange items are read as the API server stores them, after its defaulting (a missing
``default`` takes ``max``; a missing ``defaultRequest`` takes ``default``, then ``min``), which is
applied here too so a hand-written object means the same. Where several LimitRanges default one
resource, Kubernetes applies them in its cache's order (not fixed); the largest value is taken
here, so an estimate is never short. Minimum, maximum and ratio checks (LimitRanger's refusals)
are not modelled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ..quantity import Quantity

CONTAINER: Final = "Container"


@dataclass(frozen=True)
class ContainerDefaults:
    """Default limits and requests for a container, resource name -> quantity text (pairs in
    name order, so that equal defaults are equal values and settings stay hashable)."""

    limits: tuple[tuple[str, str], ...] = ()
    requests: tuple[tuple[str, str], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.limits or self.requests)


NO_DEFAULTS: Final = ContainerDefaults()


def container_defaults(limit_ranges: Iterable[Mapping[str, Any]]) -> ContainerDefaults:
    """The defaults LimitRanger gives a container in a namespace with these LimitRanges (the
    largest where several disagree). Items that are not objects, or values that are not
    quantities (never stored by the API server), are skipped."""
    limits: dict[str, Quantity] = {}
    requests: dict[str, Quantity] = {}
    for limit_range in limit_ranges:
        spec = limit_range.get("spec")
        items = spec.get("limits") if isinstance(spec, Mapping) else None
        for item in items if isinstance(items, list) else []:
            if isinstance(item, Mapping) and item.get("type") == CONTAINER:
                default, default_request = _defaulted(item)
                _keep_largest(limits, default)
                _keep_largest(requests, default_request)
    return ContainerDefaults(_pairs(limits), _pairs(requests))


def _defaulted(item: Mapping[str, Any]) -> tuple[dict[str, Quantity], dict[str, Quantity]]:
    """An item's default and defaultRequest after the API server's SetDefaults_LimitRangeItem."""
    default = _quantities(item.get("default"))
    for name, value in _quantities(item.get("max")).items():
        default.setdefault(name, value)
    default_request = _quantities(item.get("defaultRequest"))
    for name, value in (*default.items(), *_quantities(item.get("min")).items()):
        default_request.setdefault(name, value)
    return default, default_request


def _quantities(raw: Any) -> dict[str, Quantity]:
    if not isinstance(raw, Mapping):
        return {}
    parsed: dict[str, Quantity] = {}
    for name, value in raw.items():
        try:
            parsed[str(name)] = Quantity.parse(str(value))
        except ValueError:
            continue
    return parsed


def _keep_largest(into: dict[str, Quantity], values: Mapping[str, Quantity]) -> None:
    for name, value in values.items():
        if name not in into or value > into[name]:
            into[name] = value


def _pairs(values: Mapping[str, Quantity]) -> tuple[tuple[str, str], ...]:
    return tuple((name, str(values[name])) for name in sorted(values))


def apply_defaults(pod: dict[str, Any], defaults: ContainerDefaults) -> dict[str, Any]:
    """`pod` (a rendered pod: spec.containers and spec.initContainers with resources) with the
    API server's request defaulting and then `defaults` applied to every container, as
    admission would; mutates and returns it. Nothing changes without defaults."""
    if not defaults:
        return pod
    spec = pod.get("spec") or {}
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or []:
            resources = container.setdefault("resources", {})
            limits = resources.setdefault("limits", {})
            requests = resources.setdefault("requests", {})
            for name, value in limits.items():
                requests.setdefault(name, value)
            for name, value in defaults.limits:
                limits.setdefault(name, value)
            for name, value in defaults.requests:
                requests.setdefault(name, value)
    return pod
