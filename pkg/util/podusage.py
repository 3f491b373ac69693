"""What a pod costs a ResourceQuota: Kubernetes v1.36's quota pod evaluator.

`pod_quota_usage` follows pkg/quota/v1/evaluator/core/pods.go with k8s.io/component-helpers/resource:
container requests and limits summed the way the scheduler and quota do it (sidecars add up, plain
init containers only raise the maximum), pod overhead, pod-level resources, in-place-resize status,
terminal and long-terminating pods. Pure functions of their arguments.

The virt-launcher pod KubeVirt renders for a VMI is in `harvester_quota.util.launcher`; the requests
Harvester's VM mutator writes are in `harvester_quota.testbench.harvestervm`.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from .quantity import Quantity
from .quotascope import reduced_affinity
from .vmispec import deletion_deadline, mapping_at, quantity_of, resource_list_at, sequence_at

__all__ = [
    "KUBERNETES_1_36",
    "QUOTA_FEATURE_GATES",
    "QuotaFeatures",
    "ResourceList",
    "pod_counts_against_quota",
    "pod_limits",
    "pod_quota_usage",
    "pod_requests",
    "pod_usage_inputs",
    "pod_without_unreadable_quantities",
    "quota_constraint_violations",
    "quota_features_from_gates",
    "strip_pod_to_quota_fields",
]

ResourceList = dict[str, Quantity]

# ----------------------------------------------------------------------------------------------
# Kubernetes: what the quota pod evaluator charges

_RESTARTABLE: Final = "Always"
_HUGEPAGES_PREFIX: Final = "hugepages-"
_REQUESTS_PREFIX: Final = "requests."
_DEVICE_CLASS_PREFIX: Final = "deviceclass.resource.kubernetes.io/"
_NATIVE_NAMESPACE: Final = "kubernetes.io/"
_POD_LEVEL_RESOURCES: Final = frozenset({"cpu", "memory"})
_EPHEMERAL_STORAGE: Final = "ephemeral-storage"
_TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})
_RESIZE: Final = "PodResizePending"

_DNS1123_LABEL: Final = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_RE: Final = re.compile(rf"{_DNS1123_LABEL}(?:\.{_DNS1123_LABEL})*")
_QUALIFIED_NAME_RE: Final = re.compile(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def _one() -> Quantity:
    return Quantity.from_int(1)


def _is_native(name: str) -> bool:
    """Unprefixed names and names in the kubernetes.io/ namespace (helper.IsNativeResource)."""
    return "/" not in name or _NATIVE_NAMESPACE in name


def _is_qualified_name(value: str) -> bool:
    """apimachinery's IsQualifiedName: an optional DNS-subdomain prefix and a 63-character name."""
    parts = value.split("/")
    if len(parts) > 2:
        return False
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN_RE.fullmatch(prefix):
            return False
    name = parts[-1]
    return 0 < len(name) <= 63 and _QUALIFIED_NAME_RE.fullmatch(name) is not None


def _is_extended_resource(name: str) -> bool:
    """IsDRAExtendedResourceName: a device-plugin style extended resource, or a DRA device class."""
    if name.startswith(_DEVICE_CLASS_PREFIX):
        return True
    if _is_native(name) or name.startswith(_REQUESTS_PREFIX):
        return False
    return _is_qualified_name(_REQUESTS_PREFIX + name)


@dataclass(frozen=True)
class QuotaFeatures:
    """Kubernetes feature gates, as the API server has them, that change what quota charges.

    The default is Kubernetes v1.36 (the bench's cluster), where none of these exists.
    `pod_level_ephemeral_storage` is PodLevelResourcesEphemeralStorage (KEP-6386, alpha in v1.38,
    off by default): a pod's spec.resources may set `ephemeral-storage`, which then replaces the
    containers' sum as cpu and memory do. No server version implies it (an alpha gate is off
    unless the cluster's operator turns it on), so only an explicit option sets it. Modelled from
    the KEP's text, not checked against a real API server.
    """

    pod_level_ephemeral_storage: bool = False

    @property
    def pod_level_resources(self) -> frozenset[str]:
        """The named resources spec.resources may set besides hugepages-<size>."""
        if self.pod_level_ephemeral_storage:
            return _POD_LEVEL_RESOURCES | {_EPHEMERAL_STORAGE}
        return _POD_LEVEL_RESOURCES


KUBERNETES_1_36: Final = QuotaFeatures()
"""No optional gate: what the bench's Kubernetes v1.36 charges."""

_GATES: Final = {"PodLevelResourcesEphemeralStorage": "pod_level_ephemeral_storage"}
"""Kubernetes' gate name -> the QuotaFeatures field it sets."""
QUOTA_FEATURE_GATES: Final = tuple(sorted(_GATES))
"""The gates `quota_features_from_gates` knows, by name."""
_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})
"""The spellings Go's strconv.ParseBool takes, as the API server's --feature-gates reads them."""


def quota_features_from_gates(text: str) -> QuotaFeatures:
    """QuotaFeatures from gates written as the API server's `--feature-gates` takes them:
    comma-separated `Gate=bool` pairs (empty pairs skipped, the last of a gate given twice
    wins). ValueError naming the offending pair, and the known gates for an unknown one: a
    gate we do not model must not be taken as set."""
    fields: dict[str, bool] = {}
    for pair in text.split(","):
        if not pair.strip():
            continue
        gate, equals, value = (part.strip() for part in pair.partition("="))
        if not equals:
            raise ValueError(f"malformed pair {pair!r}: expected Gate=true or Gate=false")
        if gate not in _GATES:
            raise ValueError(
                f"unknown feature gate {gate!r} (known: {', '.join(QUOTA_FEATURE_GATES)})"
            )
        if value not in _TRUE | _FALSE:
            raise ValueError(f"invalid value of {gate}={value!r}: expected true or false")
        fields[_GATES[gate]] = value in _TRUE
    return QuotaFeatures(**fields)


def _is_pod_level_resource(name: str, pod_level: frozenset[str]) -> bool:
    return name in pod_level or name.startswith(_HUGEPAGES_PREFIX)


def _add_into(target: ResourceList, other: Mapping[str, Quantity]) -> None:
    """component-helpers addResourceList."""
    for name, quantity in other.items():
        target[name] = target[name] + quantity if name in target else quantity


def _max_into(target: ResourceList, other: Mapping[str, Quantity]) -> None:
    """component-helpers maxResourceList."""
    for name, quantity in other.items():
        if name not in target or quantity > target[name]:
            target[name] = quantity


def _max_of(*lists: Mapping[str, Quantity]) -> ResourceList:
    result: ResourceList = {}
    for other in lists:
        _max_into(result, other)
    return result


@dataclass(frozen=True)
class _Container:
    name: str
    requests: ResourceList
    limits: ResourceList
    restartable: bool


@dataclass(frozen=True)
class _ContainerStatus:
    requests: ResourceList
    limits: ResourceList
    allocated: ResourceList


@dataclass(frozen=True)
class _PodView:
    """The parts of a pod the quota evaluator reads, parsed and defaulted like the API server does."""

    containers: tuple[_Container, ...]
    init_containers: tuple[_Container, ...]
    statuses: Mapping[str, _ContainerStatus]
    resize_infeasible: bool
    pod_requests: ResourceList | None
    pod_limits: ResourceList | None
    overhead: ResourceList = field(default_factory=dict)
    pod_level: frozenset[str] = _POD_LEVEL_RESOURCES
    """The resources spec.resources may set besides hugepages (QuotaFeatures)."""


def _parse_container(raw: Any, where: str) -> _Container:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be an object")
    resources = mapping_at(raw, "resources", where)
    requests = resource_list_at(resources.get("requests"), f"{where}.resources.requests")
    limits_raw = resources.get("limits")
    limits = resource_list_at(limits_raw, f"{where}.resources.limits")
    if limits_raw is not None:
        # SetDefaults_Pod: a limit without a request defaults the request (a no-op for stored pods).
        requests = {**limits, **requests}
    return _Container(
        name=str(raw.get("name", "")),
        requests=requests,
        limits=limits,
        restartable=raw.get("restartPolicy") == _RESTARTABLE,
    )


def _parse_pod(pod: Mapping[str, Any], features: QuotaFeatures = KUBERNETES_1_36) -> _PodView:
    if not isinstance(pod, Mapping):
        raise ValueError(f"a pod must be an object, not {type(pod).__name__}")
    spec = mapping_at(pod, "spec", "pod")
    status = mapping_at(pod, "status", "pod")
    containers = tuple(
        _parse_container(c, f"spec.containers[{i}]")
        for i, c in enumerate(sequence_at(spec, "containers", "spec"))
    )
    init_containers = tuple(
        _parse_container(c, f"spec.initContainers[{i}]")
        for i, c in enumerate(sequence_at(spec, "initContainers", "spec"))
    )
    statuses: dict[str, _ContainerStatus] = {}
    for key in ("containerStatuses", "initContainerStatuses"):
        for i, raw in enumerate(sequence_at(status, key, "status")):
            if not isinstance(raw, Mapping) or raw.get("resources") is None:
                continue
            where = f"status.{key}[{i}]"
            actual = mapping_at(raw, "resources", where)
            statuses[str(raw.get("name", ""))] = _ContainerStatus(
                requests=resource_list_at(actual.get("requests"), f"{where}.resources.requests"),
                limits=resource_list_at(actual.get("limits"), f"{where}.resources.limits"),
                allocated=resource_list_at(raw.get("allocatedResources"), f"{where}.allocated"),
            )
    resize_infeasible = False
    for condition in sequence_at(status, "conditions", "status"):
        if isinstance(condition, Mapping) and condition.get("type") == _RESIZE:
            resize_infeasible = condition.get("reason") == "Infeasible"
            break
    pod_requests: ResourceList | None = None
    pod_limits: ResourceList | None = None
    if spec.get("resources") is not None:
        pod_resources = mapping_at(spec, "resources", "spec")
        pod_requests = resource_list_at(pod_resources.get("requests"), "spec.resources.requests")
        pod_limits = resource_list_at(pod_resources.get("limits"), "spec.resources.limits")
    view = _PodView(
        containers=containers,
        init_containers=init_containers,
        statuses=statuses,
        resize_infeasible=resize_infeasible,
        pod_requests=pod_requests,
        pod_limits=pod_limits,
        overhead=resource_list_at(spec.get("overhead"), "spec.overhead"),
        pod_level=features.pod_level_resources,
    )
    return _default_pod_level_resources(view)


def _default_pod_level_resources(view: _PodView) -> _PodView:
    """SetDefaults_Pod for pod-level resources (PodLevelResources, on by default since v1.34).

    Only when spec.resources is partly set: hugepage limits default to the containers' sum, then
    cpu/memory requests to the containers' effective requests, else to the pod-level limits.
    """
    if view.pod_requests is None or view.pod_limits is None:
        return view
    requests, limits = dict(view.pod_requests), dict(view.pod_limits)
    if requests or limits:
        container_limits = _aggregate(view, use_status=False, kind="limits")
        for name, quantity in container_limits.items():
            if name.startswith(_HUGEPAGES_PREFIX) and name not in requests:
                limits.setdefault(name, quantity)
    if limits:
        container_requests = _aggregate(view, use_status=False, kind="requests")
        for name, quantity in container_requests.items():
            if name in view.pod_level:  # overcommittable pod-level resources
                requests.setdefault(name, quantity)
        for name, quantity in limits.items():
            if _is_pod_level_resource(name, view.pod_level):
                requests.setdefault(name, quantity)
    return dataclasses.replace(view, pod_requests=requests, pod_limits=limits)


def _effective(view: _PodView, container: _Container, kind: str, use_status: bool) -> ResourceList:
    """A container's requests or limits, raised by its in-place resize status (v1.35 GA)."""
    spec_values = container.requests if kind == "requests" else container.limits
    status = view.statuses.get(container.name) if use_status else None
    if status is None:
        return spec_values
    if kind == "requests":
        if view.resize_infeasible:
            return _max_of(status.requests, status.allocated)
        return _max_of(spec_values, status.requests, status.allocated)
    if view.resize_infeasible:
        return dict(status.limits)
    return _max_of(spec_values, status.limits)


def _aggregate(view: _PodView, *, use_status: bool, kind: str) -> ResourceList:
    """AggregateContainerRequests / AggregateContainerLimits (the sidecar KEP formula)."""
    total: ResourceList = {}
    for container in view.containers:
        _add_into(total, _effective(view, container, kind, use_status))
    sidecars: ResourceList = {}
    init_peak: ResourceList = {}
    for container in view.init_containers:
        if container.restartable:
            values = _effective(view, container, kind, use_status)
            _add_into(total, values)
            _add_into(sidecars, values)
            _max_into(init_peak, sidecars)
        else:
            running = dict(container.requests if kind == "requests" else container.limits)
            _add_into(running, sidecars)
            _max_into(init_peak, running)
    _max_into(total, init_peak)
    return total


def _pod_requests(view: _PodView) -> ResourceList:
    requests = _aggregate(view, use_status=True, kind="requests")
    pod_level = view.pod_requests or {}
    if any(_is_pod_level_resource(name, view.pod_level) for name in pod_level):
        for name, quantity in pod_level.items():
            if _is_pod_level_resource(name, view.pod_level):
                requests[name] = quantity
    _add_into(requests, view.overhead)
    return requests


def _pod_limits(view: _PodView) -> ResourceList:
    limits = _aggregate(view, use_status=True, kind="limits")
    pod_level = {**(view.pod_requests or {}), **(view.pod_limits or {})}
    if any(_is_pod_level_resource(name, view.pod_level) for name in pod_level):
        for name, quantity in (view.pod_limits or {}).items():
            if _is_pod_level_resource(name, view.pod_level):
                limits[name] = quantity
    for name, quantity in view.overhead.items():
        if name in limits and not limits[name].is_zero():
            limits[name] = limits[name] + quantity
    return limits


def pod_requests(
    pod: Mapping[str, Any], *, features: QuotaFeatures = KUBERNETES_1_36
) -> ResourceList:
    """resourcehelper.PodRequests as the quota evaluator calls it (status resources, pod-level
    resources and pod overhead included)."""
    return _pod_requests(_parse_pod(pod, features))


def pod_limits(
    pod: Mapping[str, Any], *, features: QuotaFeatures = KUBERNETES_1_36
) -> ResourceList:
    """resourcehelper.PodLimits as the quota evaluator calls it."""
    return _pod_limits(_parse_pod(pod, features))


def pod_counts_against_quota(pod: Mapping[str, Any], now: datetime.datetime | None) -> bool:
    """QuotaV1Pod: whether quota charges this pod's compute resources.

    A pod in phase Succeeded or Failed does not count. A pod being deleted counts until its
    deletionTimestamp + deletionGracePeriodSeconds has passed (strictly), so that a pod stuck
    terminating on a lost node stops blocking new pods. `now` must be timezone-aware; None skips the
    grace-period test (only the phase is looked at).
    """
    if not isinstance(pod, Mapping):
        raise ValueError(f"a pod must be an object, not {type(pod).__name__}")
    if mapping_at(pod, "status", "pod").get("phase") in _TERMINAL_PHASES:
        return False
    metadata = mapping_at(pod, "metadata", "pod")
    deletion = metadata.get("deletionTimestamp")
    grace = metadata.get("deletionGracePeriodSeconds")
    if now is None or deletion is None or grace is None:
        return True
    if now.tzinfo is None:
        raise ValueError("now must be a timezone-aware datetime")
    deadline = deletion_deadline(deletion, grace)
    return deadline is None or not now > deadline


def _compute_usage(requests: ResourceList, limits: ResourceList) -> ResourceList:
    """podComputeUsageHelper: the quota keys one pod's requests and limits map to."""
    usage: ResourceList = {"pods": _one()}
    for name in ("cpu", "memory", "ephemeral-storage"):
        if name in requests:
            usage[name] = requests[name]
            usage[_REQUESTS_PREFIX + name] = requests[name]
        if name in limits:
            usage["limits." + name] = limits[name]
    for name, quantity in requests.items():
        if name.startswith(_HUGEPAGES_PREFIX):
            usage[name] = quantity
            usage[_REQUESTS_PREFIX + name] = quantity
        if _is_extended_resource(name):
            usage[_REQUESTS_PREFIX + name] = quantity
    return usage


def pod_quota_usage(
    pod: Mapping[str, Any],
    *,
    now: datetime.datetime | None = None,
    features: QuotaFeatures = KUBERNETES_1_36,
) -> ResourceList:
    """Exactly what Kubernetes v1.36's quota pod evaluator charges for `pod`.

    `count/pods` always; for a pod that counts (see pod_counts_against_quota) also `pods`, `cpu`,
    `memory`, `ephemeral-storage` (= the requests), `requests.*` and `limits.*` of those three,
    `hugepages-<size>` and `requests.hugepages-<size>`, and `requests.<name>` for each extended
    resource. Containers whose limits lack a request get the limit as request, as the API server
    defaults them on create (a no-op for pods read from the API). `features` are the API server's
    gates that change the charge (QuotaFeatures; default v1.36's).
    """
    usage: ResourceList = {"count/pods": _one()}
    if not pod_counts_against_quota(pod, now):
        return usage
    view = _parse_pod(pod, features)
    _add_into(usage, _compute_usage(_pod_requests(view), _pod_limits(view)))
    return usage


def pod_usage_inputs(pod: Mapping[str, Any]) -> bytes | None:
    """A digest of everything of `pod` that `pod_quota_usage` reads with ``now=None`` (its
    phase, the containers, init containers, pod resources and overhead of its spec, the names,
    resources and allocated resources of its container statuses and its PodResizePending
    conditions): two pods with the same digest are
    charged the same under the same features, whatever else differs (names, nodes, IPs, the
    other conditions). None for a pod whose parts are not of the types those reads take (the
    charge then raises, or is made of what can be read: compute it)."""
    spec, state = pod.get("spec"), pod.get("status")
    if not (
        _object_or_none(pod.get("metadata")) and _object_or_none(spec) and _object_or_none(state)
    ):
        return None
    spec, state = spec or {}, state or {}
    conditions = state.get("conditions")
    if not (conditions is None or type(conditions) is list):
        return None
    read = [
        state.get("phase"),
        [spec.get(key) for key in ("containers", "initContainers", "resources", "overhead")],
        [_status_inputs(state.get(key)) for key in ("containerStatuses", "initContainerStatuses")],
        [c for c in conditions or () if type(c) is not dict or c.get("type") == _RESIZE],
    ]
    try:
        encoded = orjson.dumps(read)
    except TypeError:  # orjson.JSONEncodeError: a value decoded JSON cannot hold
        return None
    return hashlib.blake2b(encoded, digest_size=16).digest()


def _status_inputs(statuses: Any) -> Any:
    """What the charge reads of a pod's container statuses: each entry's name, resources and
    allocatedResources (not its id, state, readiness or restart count, which the kubelet
    rewrites while the pod runs, nor anything else that tells two pods of one shape apart),
    kept as an object: a key absent stays apart from one set to null, and an entry that is no
    object from one that is. A list or entry of another type is kept whole."""
    if type(statuses) is not list:
        return statuses
    return [
        {key: e[key] for key in _CONTAINER_STATUS_READ if key in e} if type(e) is dict else e
        for e in statuses
    ]


def _object_or_none(value: Any) -> bool:
    """A JSON object or absent (the dicts decoded objects are made of checked first: cheaper)."""
    return value is None or type(value) is dict or isinstance(value, Mapping)


_SPEC_QUANTITIES: Final = (("resources", "requests"), ("resources", "limits"), ("overhead",))
_CONTAINER_QUANTITIES: Final = (("resources", "requests"), ("resources", "limits"))
_STATUS_QUANTITIES: Final = (*_CONTAINER_QUANTITIES, ("allocatedResources",))


def pod_without_unreadable_quantities(
    pod: Mapping[str, Any],
) -> tuple[Mapping[str, Any], list[str]]:
    """`pod` with every requests/limits/overhead/allocated quantity that does not parse left
    out, and why each was: what pod_quota_usage can still charge of a pod one quantity of
    which it refuses (over 1000 digits, which Go accepts). The pod is not changed (the parts
    on the way to a dropped quantity are copied); a malformed structure is left as it is."""
    dropped: list[str] = []
    spec = _filtered_items(pod.get("spec"), "containers", _CONTAINER_QUANTITIES, "spec", dropped)
    spec = _filtered_items(spec, "initContainers", _CONTAINER_QUANTITIES, "spec", dropped)
    for path in _SPEC_QUANTITIES:
        spec = _filtered(spec, path, "spec", dropped)
    status = pod.get("status")
    for key in ("containerStatuses", "initContainerStatuses"):
        status = _filtered_items(status, key, _STATUS_QUANTITIES, "status", dropped)
    if not dropped:
        return pod, dropped
    return {**pod, "spec": spec, "status": status}, dropped


def _filtered_items(
    obj: Any, key: str, paths: Iterable[tuple[str, ...]], where: str, dropped: list[str]
) -> Any:
    """`obj` with each item of its list `key` filtered along `paths`."""
    if not isinstance(obj, Mapping) or not isinstance(obj.get(key), list):
        return obj
    items = []
    for index, item in enumerate(obj[key]):
        kept = item
        for path in paths:
            kept = _filtered(kept, path, f"{where}.{key}[{index}]", dropped)
        items.append(kept)
    return {**obj, key: items}


def _filtered(obj: Any, path: tuple[str, ...], where: str, dropped: list[str]) -> Any:
    """`obj` with the resource list at `path` keeping only the quantities that parse."""
    if not isinstance(obj, Mapping) or path[0] not in obj:
        return obj
    inner, at = obj[path[0]], f"{where}.{path[0]}"
    if len(path) > 1:
        kept = _filtered(inner, path[1:], at, dropped)
    elif isinstance(inner, Mapping):
        kept = {
            name: value
            for name, value in inner.items()
            if _readable(value, f"{at}.{name}", dropped)
        }
    else:
        kept = inner
    return {**obj, path[0]: kept}


def _readable(value: Any, where: str, dropped: list[str]) -> bool:
    try:
        quantity_of(value, where)
    except ValueError as error:
        dropped.append(str(error))
        return False
    return True


_CONSTRAINED: Final = frozenset(
    {"cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"}
)


def quota_constraint_violations(
    pod: Mapping[str, Any],
    quota_hard_keys: Iterable[str],
    *,
    features: QuotaFeatures = KUBERNETES_1_36,
) -> dict[str, list[str]]:
    """The pod evaluator's Constraints check: resource -> containers that do not specify it.

    When a quota limits cpu or memory (requests.* or limits.*), every container and init container
    must set that request or limit, or the pod is rejected ("must specify limits.cpu for:
    compute"), whatever the totals. Not checked when pod-level resources are set (with
    `features`' PodLevelResourcesEphemeralStorage, pod-level ephemeral-storage alone counts as
    set, as the KEP extends the supported pod-level resources). An empty result means the pod
    passes.
    """
    view = _parse_pod(pod, features)
    required = _CONSTRAINED.intersection(quota_hard_keys)
    pod_level = {**(view.pod_requests or {}), **(view.pod_limits or {})}
    if not required or any(_is_pod_level_resource(name, view.pod_level) for name in pod_level):
        return {}
    missing: dict[str, list[str]] = {}
    for container in (*view.containers, *view.init_containers):
        present = _compute_usage(container.requests, container.limits)
        for name in sorted(required.difference(present)):
            missing.setdefault(name, []).append(container.name)
    return missing


def usage_constraint_violations(usage: ResourceList, quota_hard_keys: Iterable[str]) -> list[str]:
    """The Constraints check of `quota_constraint_violations` for a pod known by its quota usage
    alone, one whose containers all set the same keys (a pod KubeVirt renders beside the
    launcher, launcher/parts.py: one container): the keys the quota makes every container set
    that the pod does not, sorted; [] if it passes. A key the pod sets at 0 is set."""
    return sorted(_CONSTRAINED.intersection(quota_hard_keys).difference(usage))


_SPEC_READ: Final = (
    "containers",
    "initContainers",
    "resources",
    "overhead",
    "nodeName",
    "priorityClassName",
    "activeDeadlineSeconds",
)
"""Quota's reads, and what its scopes read (quotascope.py; affinity is kept reduced)."""
_CONTAINER_READ: Final = ("name", "resources", "restartPolicy")
_STATUS_READ: Final = (
    "phase",
    "containerStatuses",
    "initContainerStatuses",
    "conditions",
    "qosClass",
)
_CONTAINER_STATUS_READ: Final = ("name", "resources", "allocatedResources")
_CONDITION_READ: Final = ("type", "reason", "status")


def strip_pod_to_quota_fields(pod: dict[str, Any]) -> dict[str, Any]:
    """An informer transform for caches that read pods only as quota does (`pod_quota_usage`,
    `pod_counts_against_quota`) and by their metadata: drops the annotations, managedFields, and
    every field of spec and status neither quota nor its scopes read (volumes, tolerations,
    IPs..., and affinity but for whether it is cross-namespace), about two thirds of a
    virt-launcher pod. Keeps what it does not recognise (a field of the
    wrong type stays as it is, so the quota model reports it exactly as for the whole pod).

    Mutates and returns `pod` (the informer hands over a fresh decode)."""
    metadata = pod.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
        metadata.pop("annotations", None)
    spec = pod.get("spec")
    if isinstance(spec, dict):
        pod["spec"] = _kept(spec, _SPEC_READ)
        affinity = reduced_affinity(spec.get("affinity"))
        if affinity is not None:
            pod["spec"]["affinity"] = affinity
        for key in ("containers", "initContainers"):
            _prune_items(pod["spec"], key, _CONTAINER_READ)
    status = pod.get("status")
    if isinstance(status, dict):
        pod["status"] = _kept(status, _STATUS_READ)
        for key in ("containerStatuses", "initContainerStatuses"):
            _prune_items(pod["status"], key, _CONTAINER_STATUS_READ)
        _prune_items(pod["status"], "conditions", _CONDITION_READ)
    return pod


def _kept(mapping: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {key: mapping[key] for key in keys if key in mapping}


def _prune_items(parent: dict[str, Any], key: str, keys: tuple[str, ...]) -> None:
    items = parent.get(key)
    if isinstance(items, list):
        parent[key] = [_kept(item, keys) if isinstance(item, dict) else item for item in items]
