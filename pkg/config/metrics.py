"""The domain metrics operators ask for (harvester/harvester#10093), prefix ``harvester_quota_``.

One `QuotaMetrics` per process, on the process's registry. Gauges carry a ``namespace`` label
only while the namespace holds room (or is above its base): a namespace that stops doing so has
its series removed, so the number of series follows the migrations in flight, not the cluster.
Quantities are exported in base units (cores, bytes, counts) as float: the ``resource`` label
says which.

Not thread-safe by design: every update happens on the event loop.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Gauge

from ..generic.metrics import CappedLabelValues, MetricFactory
from ..util.quantity import Quantity

BLOCKED_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900, 1800)
RECONCILE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
WRITE_OUTCOMES = ("written", "conflict", "error")
"""The `outcome` values of harvester_quota_quota_writes_total, each exported from the start (at
0): an alert's increase() sees the first error, which it cannot on a series born with it."""
WRITE_KINDS = ("spec", "status", "label", "rancher", "vmi", "vm")
"""The `kind` values of harvester_quota_api_writes_total, each exported from the start (at 0): a
quota's spec.hard and annotations (both modes), a copy into its status.hard, the namespace's
room-held label, Rancher's namespace annotation (a raise through Rancher), Harvester's migration
annotations on a VMI, and the timestamp touch of its VM."""
FOREIGN_MANAGERS = 20
"""Distinct `manager` values of harvester_quota_foreign_quota_writes_total; later ones count
as "other". A cluster has a handful of writers (Harvester, a GitOps tool, kubectl's verbs)."""


def as_float(quantity: Quantity) -> float:
    """A Quantity in base units (0.25 for 250m), as Prometheus wants it; one too large for a
    float (a tenant's VMI may ask for 1e400 bytes, which parses) is +/-Inf, not OverflowError
    (that would fail the namespace's reconcile after its plan). Reporting only: no room
    is computed from it."""
    try:
        return quantity.milli_value() / 1000
    except OverflowError:
        return math.copysign(math.inf, quantity.sign())


class QuotaMetrics:
    """The controller's metrics: rooms, refusals, writes, reconcile time, usage over the base."""

    def __init__(self, registry: CollectorRegistry) -> None:
        declare = MetricFactory(registry)
        self.room = declare.gauge(
            "room",
            "Room held for live migrations, per namespace and quota key (base units).",
            ["namespace", "resource"],
        )
        self.migrations_holding_room = declare.gauge(
            "migrations_holding_room", "Live migrations holding room, per namespace.", ["namespace"]
        )
        self.usage_above_base = declare.gauge(
            "usage_above_base",
            "Usage without migration targets above the base, per namespace and key (base units).",
            ["namespace", "resource"],
        )
        self.target_pods_refused = declare.counter(
            "target_pods_refused",
            "Migrations whose target pod quota admission refused at least once "
            "(VMIM condition migrationRejectedByResourceQuota), per namespace.",
            ["namespace"],
        )
        self.blocked_seconds = declare.histogram(
            "migration_blocked_seconds",
            "How long a migration refused by quota stayed refused (first refusal to last clearing), "
            "observed when it leaves Pending or is deleted.",
            buckets=BLOCKED_BUCKETS,
        )
        self.quota_writes = declare.counter_over(
            "quota_writes",
            "Writes of managed ResourceQuotas, by outcome (written, conflict, error).",
            "outcome",
            WRITE_OUTCOMES,
        )
        self.api_writes = declare.counter_over(
            "api_writes",
            "Write requests this controller sent to the API server, by kind (spec, status, label, "
            "rancher, vmi, vm), counted as sent, whatever the answer.",
            "kind",
            WRITE_KINDS,
        )
        self.reconcile_seconds = declare.histogram(
            "reconcile_duration_seconds",
            "Time of one namespace reconcile, writes included.",
            buckets=RECONCILE_BUCKETS,
        )
        self.rancher_denials = declare.counter(
            "rancher_denials",
            "Quota writes denied by Rancher's protection of its default quota, per namespace.",
            ["namespace"],
        )
        self.stale_raises = declare.counter(
            "stale_raises",
            "Raises found standing with no migration holding room for longer than the sweep "
            "allows (staleraise.py), each then planned again. Never in a healthy cluster.",
        )
        self.foreign_quota_writes = declare.counter(
            "foreign_quota_writes",
            "Changes of a managed quota's spec.hard by a writer other than this controller and "
            "Rancher's agent, by field manager (the first 20; later ones as other).",
            ["manager"],
        )
        self.foreign_manager = CappedLabelValues(FOREIGN_MANAGERS)
        """The `manager` label of foreign_quota_writes for a field manager's name."""
        self.paused = declare.gauge(
            "paused",
            "1 while the controller runs with its global switch (run --paused): every room is "
            "given back and none raised.",
        )
        self.namespace_paused = declare.gauge(
            "namespace_paused",
            "1 per namespace whose opt-out label harvester-quota.io/paused=true gives its rooms "
            "back and stops its raises.",
            ["namespace"],
        )
        self.releases_held = declare.counter(
            "releases_held",
            "Releases held back while other migrations of the namespace held room "
            "(controller/resourcequota/writes.py), one per hold.",
        )
        self._room_keys: dict[str, set[str]] = {}
        self._above_keys: dict[str, set[str]] = {}

    def count_write(self, kind: str) -> None:
        """One write request of `kind` (one of WRITE_KINDS) sent to the API server."""
        self.api_writes.labels(kind).inc()

    def count_foreign_write(self, manager: str) -> None:
        """One foreign write of a managed quota by field manager `manager`."""
        self.foreign_quota_writes.labels(self.foreign_manager(manager)).inc()

    def set_room(self, namespace: str, room: Mapping[str, Quantity], migrations: int) -> None:
        """The namespace's room now; an empty room removes its series."""
        self._replace(self.room, self._room_keys, namespace, room)
        if migrations:
            self.migrations_holding_room.labels(namespace).set(migrations)
        else:
            self._remove(self.migrations_holding_room, namespace)

    def set_above_base(self, namespace: str, excess: Mapping[str, Quantity]) -> None:
        """Usage above the base now (keys with a positive excess only)."""
        positive = {k: v for k, v in excess.items() if v.sign() > 0}
        self._replace(self.usage_above_base, self._above_keys, namespace, positive)

    def set_namespace_paused(self, namespace: str, paused: bool) -> None:
        """Whether the namespace opted out (its series only while it does)."""
        if paused:
            self.namespace_paused.labels(namespace).set(1)
        else:
            self._remove(self.namespace_paused, namespace)

    def forget(self, namespace: str) -> None:
        """The namespace is gone or unmanaged: all its series go."""
        self.set_room(namespace, {}, 0)
        self.set_above_base(namespace, {})
        self.set_namespace_paused(namespace, False)

    @staticmethod
    def _replace(
        gauge: Gauge, known: dict[str, set[str]], namespace: str, values: Mapping[str, Quantity]
    ) -> None:
        for resource in known.get(namespace, set()) - set(values):
            gauge.remove(namespace, resource)
        for resource, value in values.items():
            gauge.labels(namespace, resource).set(as_float(value))
        if values:
            known[namespace] = set(values)
        else:
            known.pop(namespace, None)

    @staticmethod
    def _remove(gauge: Gauge, *labels: str) -> None:
        with contextlib.suppress(KeyError):
            gauge.remove(*labels)
