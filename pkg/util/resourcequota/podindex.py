"""A namespace's pods as the quota model reads them, kept up to date as pods change.

The plan reads a few fields of every pod of the namespace: its quota usage, whether it still
counts, a few of KubeVirt's labels. Decoding every cached pod and recomputing every pod's usage on
every reconcile made one reconcile cost 0.3-0.45 ms per VM of the namespace (measured), all of it
on the one event loop. Here each pod is reduced once, when it changes, to a PodView (what
pod_quota_usage charges, computed then), and each namespace keeps a running total of the pods
whose charge does not depend on the time: all but those being deleted (a terminal pod is among
them, charging nothing). A reconcile then costs the rooms it plans (a few pods) plus the pods
being deleted, whose grace period decides whether they still count at the moment of planning;
the rest is one sum it reads. The steady total is kept per distinct `PodScopeFacts` too (a
namespace's pods share a handful), so a quota with scopes reads the sum of the facts it charges
rather than walking the namespace. Terminal pods cost nothing: KubeVirt leaves every migration's
source pod Completed until its VMI goes, and a kept 3,000-VM namespace held 1,800 of them, which
each plan walked (10 ms a plan) while they were counted as changing.

The totals are exact (quantities are integers of nano-units; adding and removing a pod's usage
leaves no residue), and a key is in the total exactly while some counted pod charges it, so
`used` is what summing the pods would give, key for key, in the pods' own format when they share
one (DecimalSI when they mix).
"""

from __future__ import annotations

import bisect
import datetime
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from cachetools import LRUCache

from ...apis.kubevirt import (
    LABEL_CREATED_BY,
    LABEL_KUBEVIRT,
    LABEL_MIGRATION_JOB,
    LAUNCHER,
)
from ...generic.meta import labels, metadata, status
from ...generic.resource import Object
from ..launcher.parts import secondary_labels
from ..podusage import (
    KUBERNETES_1_36,
    QuotaFeatures,
    pod_quota_usage,
    pod_usage_inputs,
    pod_without_unreadable_quantities,
)
from ..quantity import Format, Quantity
from ..quotascope import PLAIN_FACTS, UNSCOPED, PodScopeFacts, QuotaScope, pod_scope_facts
from ..resources import ResourceList
from ..vmispec import deletion_deadline

_TERMINAL = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class PodView:
    """What the quota model reads of one pod, computed when the pod changed."""

    name: str
    usage: ResourceList
    """What quota charges while the pod counts ({} for a terminal pod)."""
    terminal: bool = False
    deadline: datetime.datetime | None = None
    """When a pod being deleted stops counting (deletionTimestamp + grace period)."""
    launcher: bool = False
    created_by: str | None = None
    """kubevirt.io/created-by: the VMI uid of a launcher pod."""
    migration_uid: str | None = None
    """kubevirt.io/migrationJobUID: the migration a target pod was made for."""
    created: str = ""
    """metadata.creationTimestamp as the API server set it (RFC 3339, UTC, whole seconds: such
    strings compare as the times do). No client can choose it, so it tells a pod that existed
    before a room was raised from one that came while it was held."""
    running: bool = False
    """status.phase is Running: written by the kubelet (pods/status), never by a tenant."""
    error: str | None = None
    """Why the pod could not be read in full (`usage` is what could be: the quantities that
    parse, or nothing; planning reports it)."""
    scope: PodScopeFacts = PLAIN_FACTS
    """What a quota's scopes read of it (quotascope.py; shared between views)."""
    uid: str = ""
    """metadata.uid (the API server's), of a launcher pod only."""
    part: str = ""
    """Its kubevirt.io label when that names a kind of pod KubeVirt makes beside a target
    launcher (launcher/parts.py: "hotplug-disk", an attachment pod), else "": such a pod if
    KubeVirt made it (a label anyone may set; rooms.pods_beside tells KubeVirt's apart)."""
    controller_uid: str | None = None
    """The uid of the ownerReference marked controller, of such a pod only: for KubeVirt's,
    the launcher pod it serves."""

    @property
    def steady(self) -> bool:
        """Charges the same at any time (until it changes): not being deleted. A terminal pod
        is steady: it charges nothing, ever."""
        return self.deadline is None

    def counts(self, now: datetime.datetime) -> bool:
        """Whether quota charges the pod at `now`: it is not terminal and, if being deleted, not
        past its grace period. A pod that could not be read in full counts the same way (its
        phase and deletion are read apart from its quantities), charging what could be read."""
        if self.terminal:
            return False
        return self.deadline is None or not now > self.deadline

    def usage_at(self, now: datetime.datetime) -> ResourceList:
        """What quota charges for the pod at `now` ({} once it no longer counts)."""
        return dict(self.usage) if self.counts(now) else {}


def pod_view(pod: Object, features: QuotaFeatures = KUBERNETES_1_36) -> PodView:
    """The view of `pod`, its usage charged as an API server with `features` charges it; never
    raises. Its phase and deletion deadline are read first, apart from its quantities; a
    quantity that cannot be read is left out (the pod's other keys still charge) and the view
    carries why, as it does when nothing of the pod can be read."""
    meta = metadata(pod)
    pod_labels = labels(pod)
    name = str(meta.get("name") or "")
    phase = status(pod).get("phase")
    common: dict[str, Any] = {
        "name": name,
        "launcher": pod_labels.get(LABEL_KUBEVIRT) == LAUNCHER,
        "created_by": pod_labels.get(LABEL_CREATED_BY),
        "migration_uid": pod_labels.get(LABEL_MIGRATION_JOB),
        "created": str(meta.get("creationTimestamp") or ""),
        "running": phase == "Running",
        "terminal": phase in _TERMINAL,
        "scope": pod_scope_facts(pod),
    }
    # Kept only where a room reads them (a string per pod of a 10,000-VM namespace otherwise):
    # a launcher's uid, the controller of a pod made beside one.
    kind = pod_labels.get(LABEL_KUBEVIRT)
    if common["launcher"]:
        common["uid"] = str(meta.get("uid") or "")
    elif kind and kind in secondary_labels():
        common["part"] = kind
        common["controller_uid"] = _controller_uid(meta)
    try:
        common["deadline"] = _deadline(meta)
    except (ValueError, TypeError) as error:
        return PodView(usage=_EMPTY, error=f"pod {name} cannot be read: {error}", **common)
    if common["terminal"]:
        return PodView(usage=_EMPTY, **common)
    return _with_usage(pod, common, features)


def _controller_uid(meta: Mapping[str, Any]) -> str | None:
    """The uid of the pod's controlling owner (metav1.GetControllerOf), None without one."""
    owners = meta.get("ownerReferences")
    if not isinstance(owners, list):
        return None
    for owner in owners:
        if isinstance(owner, Mapping) and owner.get("controller") is True and owner.get("uid"):
            return str(owner["uid"])
    return None


def _with_usage(pod: Object, common: dict[str, Any], features: QuotaFeatures) -> PodView:
    """The view with the pod's usage. A pod charged as one seen lately (`_USAGES`) is not
    parsed; one that reads whole (all but a crafted one) is parsed once; only one that does not
    is filtered (a second parse) to charge what can be read."""
    inputs = pod_usage_inputs(pod)
    key = None if inputs is None else (features, inputs)
    shared = None if key is None else _USAGES.get(key)
    if shared is not None:
        return PodView(usage=shared, **common)
    try:
        usage = pod_quota_usage(pod, now=None, features=features)
    except (ValueError, TypeError, AttributeError):
        pass
    else:
        if key is not None:
            _USAGES[key] = usage
        return PodView(usage=usage, **common)
    readable, dropped = pod_without_unreadable_quantities(pod)
    try:
        usage = pod_quota_usage(readable, now=None, features=features)
    except (ValueError, TypeError, AttributeError) as error:
        return PodView(
            usage=_EMPTY, error=f"pod {common['name']} cannot be read: {error}", **common
        )
    if dropped:
        why = f"pod {common['name']}: {'; '.join(dropped)} (its other quantities are charged)"
        return PodView(usage=usage, error=why, **common)
    return PodView(usage=usage, **common)


_EMPTY: ResourceList = {}
_USAGES: LRUCache[tuple[QuotaFeatures, bytes], ResourceList] = LRUCache(maxsize=4096)
"""Usages seen lately by what they were computed from (`pod_usage_inputs`), shared by the
views that charge the same: a pod's status writes (its conditions, IPs, container states)
leave its inputs as they were, so its next view costs no parse, and the pods of VMs of one
size read alike, so a usage of a dozen Quantities, most of a view's memory (an unshared one
took 1.8 KB a view at 10,000 VMs), is held once. A view's usage is never mutated (see
`usage_at`)."""


def _deadline(meta: Mapping[str, Any]) -> datetime.datetime | None:
    """vmispec.deletion_deadline: bounded, a grace period past year 9999 is FAR_FUTURE."""
    return deletion_deadline(meta.get("deletionTimestamp"), meta.get("deletionGracePeriodSeconds"))


@dataclass
class _Tally:
    """A running sum of ResourceLists that can take one back exactly: per key, the sum in
    nano-units and how many of the summed lists had the key in each format. The counts are
    plain dicts, not Counters: a plan copies the namespace's tally (`copy`) once or twice, and
    a Counter per key made that copy most of a 12-VM namespace's plan (profiled)."""

    nanos: dict[str, int] = field(default_factory=dict)
    formats: dict[str, dict[Format, int]] = field(default_factory=dict)

    def add(self, usage: Mapping[str, Quantity], sign: int = 1) -> None:
        for key, value in usage.items():
            self.nanos[key] = self.nanos.get(key, 0) + sign * value.nanos
            formats = self.formats.get(key)
            if formats is None:
                formats = self.formats[key] = {}
            formats[value.format] = formats.get(value.format, 0) + sign
            if sum(formats.values()) == 0:
                del self.nanos[key], self.formats[key]

    def remove(self, usage: Mapping[str, Quantity]) -> None:
        self.add(usage, -1)

    def merge(self, other: _Tally) -> None:
        """Adds everything `other` summed (as if each of its lists were added here)."""
        for key, nanos in other.nanos.items():
            self.nanos[key] = self.nanos.get(key, 0) + nanos
            mine = self.formats.setdefault(key, {})
            for fmt, count in other.formats[key].items():
                mine[fmt] = mine.get(fmt, 0) + count

    def copy(self) -> _Tally:
        return _Tally(dict(self.nanos), {key: dict(f) for key, f in self.formats.items()})

    def result(self) -> ResourceList:
        """The sum, each key in its lists' format where they share one, else DecimalSI."""
        result: ResourceList = {}
        for key, nanos in self.nanos.items():
            used = [fmt for fmt, count in self.formats[key].items() if count > 0]
            fmt = used[0] if len(used) == 1 else Format.DECIMAL_SI
            result[key] = Quantity(nanos=nanos, fmt=fmt)
        return result


class NamespacePods:
    """One namespace's pod views, with the total of its steady pods and lookups by name, by
    migration (target pods) and by VMI (launcher pods). Not thread-safe: event loop only."""

    def __init__(self, views: Iterable[PodView] = ()) -> None:
        self._views: dict[str, PodView] = {}
        self._steady = _Tally()
        self._steady_by_scope: dict[PodScopeFacts, _Tally] = {}
        """The steady total split by what quota scopes read of the pods (a handful of facts)."""
        self._by_migration: dict[str, set[str]] = {}
        self._by_vmi: dict[str, set[str]] = {}
        self._changing: set[str] = set()
        """Pods whose counting depends on the time."""
        self._unreadable: set[str] = set()
        """Pods that could not be read in full (they charge what could be read; planning warns
        about each)."""
        self._by_creation: list[tuple[str, str]] = []
        """(created, name) of every pod, sorted: the pods created since a moment, without a walk
        of the namespace (pods mostly arrive in creation order, so an insert is an append)."""
        for view in views:
            self.put(view)

    def __len__(self) -> int:
        return len(self._views)

    def __iter__(self) -> Iterator[PodView]:
        return iter(list(self._views.values()))

    def put(self, view: PodView) -> bool:
        """Stores `view`; False (and nothing done) when an equal view is stored already."""
        if self._views.get(view.name) == view:
            return False
        self.remove(view.name)
        self._views[view.name] = view
        if view.steady:
            self._steady.add(view.usage)
            self._steady_by_scope.setdefault(view.scope, _Tally()).add(view.usage)
        else:
            self._changing.add(view.name)
        if view.error is not None:
            self._unreadable.add(view.name)
        if view.migration_uid:
            self._by_migration.setdefault(view.migration_uid, set()).add(view.name)
        if view.launcher and view.created_by:
            self._by_vmi.setdefault(view.created_by, set()).add(view.name)
        bisect.insort(self._by_creation, (view.created, view.name))
        return True

    def remove(self, name: str) -> None:
        view = self._views.pop(name, None)
        if view is None:
            return
        if view.steady:
            self._steady.remove(view.usage)
            self._remove_scoped(view)
        self._changing.discard(name)
        self._unreadable.discard(name)
        _unlink(self._by_migration, view.migration_uid, name)
        _unlink(self._by_vmi, view.created_by if view.launcher else None, name)
        entry = (view.created, name)
        at = bisect.bisect_left(self._by_creation, entry)
        if at < len(self._by_creation) and self._by_creation[at] == entry:
            del self._by_creation[at]

    def _remove_scoped(self, view: PodView) -> None:
        """Takes a steady view's usage from its facts' total, dropped once it sums no list
        (an empty usage, a terminal pod's, may find it dropped already: nothing to take)."""
        scoped = self._steady_by_scope.get(view.scope)
        if scoped is None:
            return
        scoped.remove(view.usage)
        if not scoped.nanos:
            del self._steady_by_scope[view.scope]

    def get(self, name: str) -> PodView | None:
        return self._views.get(name)

    def labelled_targets(self, migration_uid: str) -> list[PodView]:
        """Every pod labelled as the migration's target, by name: KubeVirt's, and any a
        tenant labelled so before the labels were protected (rooms.is_target_of tells them
        apart)."""
        return [self._views[name] for name in sorted(self._by_migration.get(migration_uid, ()))]

    def launchers_of(self, vmi_uid: str) -> list[PodView]:
        return [self._views[name] for name in sorted(self._by_vmi.get(vmi_uid, ()))]

    def created_since(self, moment: str) -> list[PodView]:
        """Pods whose creationTimestamp is `moment` or later (RFC 3339 UTC strings, as the API
        server writes them), oldest first. Costs the pods returned, not the namespace."""
        at = bisect.bisect_left(self._by_creation, (moment, ""))
        return [self._views[name] for _, name in self._by_creation[at:]]

    def changing(self) -> list[PodView]:
        """Pods being deleted."""
        return [self._views[name] for name in sorted(self._changing)]

    def unreadable(self) -> list[PodView]:
        """Pods that could not be read in full, by name: each charges only what could be read
        (pod_view), and counts as long as a pod so phased and deleted would."""
        return [self._views[name] for name in sorted(self._unreadable)]

    def used_without(
        self, excluded: frozenset[str], now: datetime.datetime, scope: QuotaScope = UNSCOPED
    ) -> ResourceList:
        """What a quota of `scope` charges the namespace's pods at `now`, the pods named
        `excluded` aside. Costs the excluded and changing pods and, for a scoped quota, the
        distinct scope facts of the namespace, not the namespace."""
        tally = self._steady.copy() if scope.unscoped else self._steady_within(scope)
        for name in excluded:
            view = self._views.get(name)
            if view is not None and view.steady and scope.matches(view.scope):
                tally.remove(view.usage)
        for view in self.changing():
            if view.name not in excluded and scope.matches(view.scope):
                tally.add(view.usage_at(now))
        return tally.result()

    def _steady_within(self, scope: QuotaScope) -> _Tally:
        tally = _Tally()
        for facts, scoped in self._steady_by_scope.items():
            if scope.matches(facts):
                tally.merge(scoped)
        return tally


def _unlink(index: dict[str, set[str]], value: str | None, name: str) -> None:
    if not value:
        return
    names = index.get(value)
    if names is not None:
        names.discard(name)
        if not names:
            del index[value]


def namespace_pods(pods: Iterable[Object] | NamespacePods) -> NamespacePods:
    """The pods of a namespace as NamespacePods (built from a list where a caller has one, each
    pod charged as Kubernetes v1.36 charges it: the product's commands hand NamespacePods whose
    views their --quota-feature-gates made, so a list is for tests and the bench)."""
    if isinstance(pods, NamespacePods):
        return pods
    return NamespacePods(pod_view(pod) for pod in pods)


class PodIndex:
    """NamespacePods for every namespace of a pod store, kept by the listener of its view
    (`store.add_view(PodIndex.VIEW, pod_view, index.changed)`, pod_view given the process's
    QuotaFeatures): always exactly what the store holds."""

    VIEW = "quota"

    def __init__(self) -> None:
        self._namespaces: dict[str, NamespacePods] = {}

    def changed(self, key: str, view: PodView | None) -> bool:
        """The store's listener: the pod under `key` ("namespace/name") is now `view` (None:
        gone). Returns whether the namespace's pods changed as the plan sees them: a pod update
        that leaves its view equal (a status condition, a kwok heartbeat) changes nothing."""
        namespace, name = key.split("/", 1)
        if view is not None:
            return self._namespaces.setdefault(namespace, NamespacePods()).put(view)
        pods = self._namespaces.get(namespace)
        if pods is None or pods.get(name) is None:
            return False
        pods.remove(name)
        if not len(pods):
            del self._namespaces[namespace]
        return True

    def namespace(self, name: str) -> NamespacePods:
        """The namespace's pods (empty if it has none); the live object, not a copy."""
        return self._namespaces.get(name) or NamespacePods()
