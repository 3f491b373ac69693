"""Planning one namespace: what its managed quota should be now, and what the room-held label does.

Harvester sizes one VMI's raise with `CalculateScaleResourceQuotaWithVMI` (calculator.go) and
adds it to the quota in its vmim controller's scaling (`scaleResourceQuotaWithVMI`); here one
plan of the whole namespace does both (`plan_quota`, util/resourcequota/plan.py). A
`NamespacePlanner` makes that plan from a `PlanSource`: the controller's caches with our writes
they do not show yet (`CachedSource`), or objects listed from the API server (`ListedSource`:
`explain`, `preflight`). The reconcile, the stale-raise sweep and a Rancher project's sibling
judgment hold the same planner, so each reads a namespace as the others do.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from ...generic.meta import metadata, name
from ...generic.resource import Object
from ...util.launcher import LauncherSettings, VmiSource
from ...util.resourcequota.base import RANCHER, Mode
from ...util.resourcequota.managed import managed_quota
from ...util.resourcequota.plan import NamespaceSnapshot, QuotaPlan, plan_quota
from ...util.resourcequota.podindex import NamespacePods
from ...util.resourcequota.standing import raise_records
from .inputs import PlanInputs

__all__ = ["CachedSource", "ListedSource", "NamespacePlan", "NamespacePlanner", "PlanSource"]


class PlanSource(Protocol):
    """What a plan of one namespace reads."""

    def quotas(self, key: str) -> tuple[Object | None, list[Object]]:
        """Namespace `key`'s managed quota as we last know it (None without one) and all its
        quotas."""
        ...

    def newest(self, namespace: Object) -> Object:
        """`namespace` with our writes the source does not show yet."""
        ...

    def snapshot(self, namespace: Object, quota: Object, quotas: list[Object]) -> NamespaceSnapshot:
        """What a plan of `namespace` reads now, with `quota` its managed quota of `quotas`."""
        ...


@dataclass(frozen=True)
class NamespacePlan:
    """One plan of a namespace and what it was made from."""

    namespace: Object
    """The namespace as planned (our writes the source did not show yet applied)."""
    quota: Object
    snapshot: NamespaceSnapshot
    plan: QuotaPlan
    labels_room: bool
    """The plan holds room and the namespace may carry LABEL_ROOM_HELD (`_may_label`)."""
    labelled_for_good: bool
    """The namespace carries LABEL_ROOM_HELD whether or not room is held (`label_policy`)."""
    label_writes_wait: bool
    """No label write now: one would have Rancher's agent reset the raise standing here."""


@dataclass(frozen=True)
class _LabelPolicy:
    """What one plan of a namespace does with its label (`label_policy`)."""

    labels_room: bool
    """Set it now: the plan holds room and a namespace write is safe."""
    for_good: bool
    """Keep it whether or not room is held: set whenever it is missing, never removed."""
    waits: bool
    """A namespace write now would have Rancher's agent reset a standing raise: a label this
    policy does not keep for good is not removed now."""


def label_policy(
    *, managed: bool, holds_room: bool, may_label: bool, raise_stands: bool, fail_closed: bool
) -> _LabelPolicy:
    """The label's policy for a plan. Where a namespace write is safe during a room
    (`may_label`), the label is set for the room and lingers after it. Where it is not (a
    Rancher quota raised directly), a label per room could never be written, which left those
    rooms on the pods rule that fails open; with `fail_closed` the label is kept there for
    good instead. It is written once, normally when the namespace is first planned, before any
    raise; found missing while a raise stands (an upgrade from a version that did not keep it,
    the write refused until then), it is written all the same: Rancher's agent may then reset
    the raise once, which the next plan raises again, where leaving the room on the fail-open
    rule would let pods in for as long as it lasts. A label not kept for good there is only
    removed while no raise of ours `raise_stands`."""
    return _LabelPolicy(
        labels_room=managed and holds_room and may_label,
        for_good=managed and not may_label and fail_closed,
        waits=not may_label and (holds_room or raise_stands),
    )


def rancher_base(plan: QuotaPlan) -> bool:
    """Whether the plan's base is Rancher's annotation."""
    return plan.base is not None and plan.base.source == RANCHER


def never(_key: str) -> bool:
    """No namespace is another mode's (the default `defer_to`)."""
    return False


class NamespacePlanner:
    """Plans one namespace from `source`: Harvester's `scaleResourceQuotaWithVMI`, each VMI's
    raise sized as its `CalculateScaleResourceQuotaWithVMI` sizes it, for every migration of the
    namespace at once. Pure but for reading: no write, no Event, no metric.

    `through(namespace, plan)`: whether the plan's raise goes through Rancher's annotation
    (RancherPath.through; by default wherever the base is Rancher's). `defer_to(key)`: whether
    another mode handles the namespace (MTQ mode, where it has a VMMRQ): its plan then gives
    every room back, and once no raise of ours stands there it is not planned at all.
    `fail_closed`: a Rancher namespace raised directly keeps the room-held label for good.
    Event loop only."""

    def __init__(
        self,
        source: PlanSource,
        *,
        through: Callable[[Object, QuotaPlan], bool] = lambda _ns, plan: rancher_base(plan),
        defer_to: Callable[[str], bool] = never,
        fail_closed: bool = False,
    ) -> None:
        self.source = source
        self.through = through
        self.defer_to = defer_to
        self.fail_closed = fail_closed

    def plan(self, namespace: Object) -> NamespacePlan | None:
        """The namespace's plan now; None without a managed quota, or where another mode
        handles the namespace and no raise of ours stands there any more (`defer_to`)."""
        key = name(namespace)
        handing_over = self.defer_to(key)
        if handing_over and not self.raise_left(namespace):
            return None
        return self._plan(key, namespace, release=handing_over)

    def raise_left(self, namespace: Object) -> bool:
        """Whether a raise of ours still stands in the namespace (as we last wrote it)."""
        key = name(namespace)
        quota, _quotas = self.source.quotas(key)
        return raise_records(quota, self.source.newest(namespace))

    def _plan(self, key: str, namespace: Object, *, release: bool) -> NamespacePlan | None:
        """With `release`, the plan of the namespace with no migration (every room given
        back: a namespace handed over to MTQ mode)."""
        quota, quotas = self.source.quotas(key)
        if quota is None:
            return None
        namespace = self.source.newest(namespace)
        snapshot = self.source.snapshot(namespace, quota, quotas)
        if release:
            snapshot = dataclasses.replace(snapshot, migrations=[])
        plan = plan_quota(snapshot)
        may_label = self._may_label(namespace, plan)
        label = label_policy(
            managed=plan.managed,
            holds_room=plan.holds_room,
            may_label=may_label,
            raise_stands=not may_label and raise_records(quota, namespace),
            fail_closed=self.fail_closed,
        )
        return NamespacePlan(
            namespace, quota, snapshot, plan, label.labels_room, label.for_good, label.waits
        )

    def _may_label(self, namespace: Object, plan: QuotaPlan) -> bool:
        """Whether a namespace write is safe while room is held. Rancher's agent re-derives the
        quota from its annotation on every namespace event: where our raise is written to
        spec.hard directly, a label write would have Rancher reset the raise (measured: a second
        raise and a refusal per migration). Through Rancher's annotation (its protected quota)
        the raise survives any namespace event, and elsewhere nobody resets."""
        if not rancher_base(plan):
            return True
        return self.through(namespace, plan)


class CachedSource:
    """The controller's caches (`inputs`), read through our namespace and quota writes they do
    not show yet (PlanInputs.namespaces and .quotas, generic/pendingwrites.py)."""

    def __init__(self, inputs: PlanInputs) -> None:
        self.inputs = inputs

    def quotas(self, key: str) -> tuple[Object | None, list[Object]]:
        quotas = self.inputs.quotas.by_index("namespace", key)
        return managed_quota(quotas), quotas

    def newest(self, namespace: Object) -> Object:
        return self.inputs.namespaces.newest(namespace)

    def snapshot(self, namespace: Object, quota: Object, quotas: list[Object]) -> NamespaceSnapshot:
        return self.inputs.snapshot(namespace, quota, quotas)

    def candidates(self) -> Iterable[tuple[str, Object, Object]]:
        """(key, namespace, managed quota) of every namespace cached when the call began and not
        Terminating, each with its quota as cached when it is reached, our writes the caches do
        not show yet applied; lazily."""
        for namespace in self.inputs.namespaces.store.iter():
            key = name(namespace)
            if metadata(namespace).get("deletionTimestamp"):
                continue
            quota, _quotas = self.quotas(key)
            if quota is not None:
                yield key, self.newest(namespace), quota


@dataclass(frozen=True)
class ListedSource:
    """One namespace's objects as listed from the API server (or simulated on top of them);
    nothing of ours is pending, so `newest` is the namespace itself."""

    quota_list: Sequence[Object]
    migrations: Sequence[Object]
    vmis: Mapping[str, VmiSource]
    pods: Iterable[Object] | NamespacePods
    now: datetime.datetime
    launcher: LauncherSettings
    mode: Mode = "auto"
    paused: bool = False
    adopt_harvester: bool = False

    def quotas(self, key: str) -> tuple[Object | None, list[Object]]:
        return managed_quota(self.quota_list), list(self.quota_list)

    def newest(self, namespace: Object) -> Object:
        return namespace

    def snapshot(self, namespace: Object, quota: Object, quotas: list[Object]) -> NamespaceSnapshot:
        return NamespaceSnapshot(
            namespace=namespace,
            quota=quota,
            migrations=self.migrations,
            vmis=self.vmis,
            pods=self.pods,
            now=self.now,
            launcher=self.launcher,
            mode=self.mode,
            paused=self.paused,
            adopt_harvester=self.adopt_harvester,
        )
