"""What the room mode tells about a namespace's plan: metrics, Warning events, explanations.

Every reconcile of a managed namespace exports its room, its usage above the base and the
migrations refused by quota since the last run (config/metrics.py), and says in Events what an
operator should look at: warnings of the plan (QuotaNotScaled), a namespace using more than its
base (UsageAboveBase, once per change), and for each migration KubeVirt reports refused by quota
that our arithmetic cannot admit either, which key and by how much (MigrationBlockedByQuota).
Nothing here writes a quota. Not thread-safe: event loop only.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ...config.metrics import QuotaMetrics
from ...generic.events import WARNING, EventRecorder
from ...generic.logformat import fields
from ...generic.meta import metadata
from ...generic.resource import Object
from ...util.launcher import as_view
from ...util.quantity import Quantity
from ...util.resourcequota.plan import PAUSED_HERE, NamespaceSnapshot, QuotaPlan
from ...util.resourcequota.rooms import decentralized_side
from ...util.resources import parse_resource_list_leniently
from .refusals import RefusalTracker, refused_by_quota

log = logging.getLogger(__name__)

USAGE_ABOVE_BASE_REASON = "UsageAboveBase"
"""Warning event reason when a namespace's pods use more than its base (targets excluded)."""


class NamespaceReports:
    """Exports and reports each plan of a namespace; `forget` when it is no longer ours."""

    def __init__(
        self, metrics: QuotaMetrics, recorder: EventRecorder, refusals: RefusalTracker
    ) -> None:
        self.metrics = metrics
        self.recorder = recorder
        self.refusals = refusals
        self._above_base: dict[str, str] = {}
        """Namespace -> the excess last reported (a Warning event once per change)."""

    def export(self, namespace: str, snapshot: NamespaceSnapshot, plan: QuotaPlan) -> None:
        """Room, usage above the base and refusals of the namespace as they are now."""
        holding = plan.rooms.rooms if plan.holds_room else []
        self.metrics.set_room(namespace, plan.rooms.total() if holding else {}, len(holding))
        base = plan.base.hard if plan.base is not None else {}
        excess = {k: plan.used[k] - v for k, v in base.items() if k in plan.used}
        self.metrics.set_above_base(namespace, excess)
        self.metrics.set_namespace_paused(namespace, plan.paused == PAUSED_HERE)
        self._report_above_base(namespace, snapshot.quota, base, plan.used, excess)
        self._count_refusals(namespace)

    def _report_above_base(
        self,
        namespace: str,
        quota: Object,
        base: Mapping[str, Quantity],
        used: Mapping[str, Quantity],
        excess: Mapping[str, Quantity],
    ) -> None:
        """A Warning on the quota, once per change, while the namespace's pods (migration targets
        excluded) use more than its base: how a tenant got past the room guard (pods admitted
        before a room-held label, the label removed by hand) or a VM grew with the overhead ratio.
        The next migration's raise starts from that usage, so an operator should look."""
        positive = {k: v for k, v in sorted(excess.items()) if v.sign() > 0}
        text = ", ".join(f"{k} {used[k]} used of {base[k]} (+{v})" for k, v in positive.items())
        if text == self._above_base.get(namespace, ""):
            return
        if text:
            self._above_base[namespace] = text
            message = f"namespace {namespace} uses more than its base: {text}"
            log.warning("%s", message, extra=fields(namespace=namespace))
            self.recorder.event(quota, WARNING, USAGE_ABOVE_BASE_REASON, message)
        else:
            self._above_base.pop(namespace, None)

    def _count_refusals(self, namespace: str) -> None:
        """Counts each migration KubeVirt reported refused by quota once, however briefly, and
        observes how long each refusal that ended since stood (refusals.py)."""
        settled = self.refusals.settle(namespace)
        if settled.new_refusals:
            self.metrics.target_pods_refused.labels(namespace).inc(settled.new_refusals)
        for seconds in settled.blocked_seconds:
            self.metrics.blocked_seconds.observe(seconds)

    def warnings(self, namespace: Object, quota: Object, plan: QuotaPlan) -> None:
        """The plan's warnings (a room it cannot size, say), each a QuotaNotScaled Warning."""
        for warning in plan.warnings:
            name = metadata(namespace).get("name")
            log.warning("%s: %s", name, warning, extra=fields(namespace=name))
            self.recorder.event(quota, WARNING, "QuotaNotScaled", warning)

    def explain_blocked(
        self,
        snapshot: NamespaceSnapshot,
        quota: Object,
        plan: QuotaPlan,
        *,
        cause: str | None = None,
    ) -> None:
        """A Warning on every migration KubeVirt reports refused by quota that our arithmetic
        cannot admit either, saying which key and by how much (the quota as written is final),
        and why (`cause`, when the caller knows it: a Rancher project without room)."""
        hard = parse_resource_list_leniently((quota.get("spec") or {}).get("hard"))
        used = parse_resource_list_leniently((quota.get("status") or {}).get("used"))
        for migration in snapshot.migrations:
            if not refused_by_quota(migration):
                continue
            vmi = snapshot.vmis.get(str((migration.get("spec") or {}).get("vmiName")))
            if vmi is None:
                continue
            try:
                needed = snapshot.usage(as_view(vmi), snapshot.launcher)
            except ValueError:
                continue  # reported already as a QuotaNotScaled warning ("cannot size the room")
            short = [
                f"{key}: needs {needed[key]}, used {used.get(key, Quantity.from_int(0))}, hard {limit}"
                for key, limit in sorted(hard.items())
                if key in needed and used.get(key, needed[key] * 0) + needed[key] > limit
            ]
            if not short:
                continue
            self.recorder.event(
                migration,
                WARNING,
                "MigrationBlockedByQuota",
                f"target pod does not fit quota {metadata(quota).get('name')} "
                f"({cause or _why_not_raised(plan, migration)}): " + "; ".join(short),
            )

    def forget(self, namespace: str) -> None:
        """Drops the namespace's metrics and notes (it is no longer ours to report)."""
        self.metrics.forget(namespace)
        self._above_base.pop(namespace, None)
        self.refusals.forget(namespace)


def room_event_targets(
    namespace: Object, quota: Object, plan: QuotaPlan, snapshot: NamespaceSnapshot
) -> list[Object]:
    """Where someone will look when a raise cannot be written: the quota, the namespace and
    every migration holding room in the plan."""
    holders = {r.migration for r in plan.rooms.rooms}
    return [
        quota,
        namespace,
        *(m for m in snapshot.migrations if metadata(m).get("name") in holders),
    ]


def _why_not_raised(plan: QuotaPlan, migration: Object) -> str:
    """Why the quota as written is final for a migration it does not fit."""
    if decentralized_side(migration) is not None:
        return (
            "a decentralized migration brings the VM into this namespace for good, so it must "
            "fit the quota as it is: free room, or raise the quota"
        )
    if plan.paused:
        return plan.paused
    if plan.skipped:
        return "auto-scaling is disabled by harvesterhci.io/skipResourceQuotaAutoScaling"
    if plan.managed:
        return "these keys are not part of the base this controller scales"
    return "the quota's base cannot be determined (see the quota's events)"
