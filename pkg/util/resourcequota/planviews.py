"""Migrations and VMIs as the quota plan reads them, kept narrow so a reconcile decodes nothing.

Measured at 3,000 VMs and 150 migrations in one namespace (py-spy, a scale run): a reconcile took
35-170 ms of CPU, most of it decoding every migration of the namespace and the VMI of each from
the compressed caches, and rendering the launcher pod of every migration that waits for its
target. The event loop was held all that time, so migrations arriving meanwhile waited for it.
Here:

- a migration is reduced, when it changes, to the few fields the plan and the controller read
  (`migration_plan_view`, a small dict shaped like the object, so every reader keeps working);
- a VMI is reduced to its `VmiView` without the object (launcher/vmiview.py): its identity and
  the facts rooms read, and a fingerprint of what the launcher rendering reads (annotations,
  spec);
- `RenderedUsages` renders a launcher pod once per fingerprint and settings: VMIs of one size
  share it, and a VMI's status updates (several a second while it migrates) keep it;
- `SettledMigrations` tells apart the finished migrations that hold no room any more, so that
  plans stop reading them (below).

KubeVirt keeps finished VirtualMachineInstanceMigrations: virt-controller garbage-collects them
per VMI, keeping the newest few, so a namespace of thousands of VMs keeps thousands of them. The
plan judges each one again on every reconcile (rooms.py: a finished migration holds room until
its source pod, or for a failed one its target pod, stops counting). Measured in a 3,000-VM
namespace keeping 400-550 finished migrations (py-spy): 59 % of the
controller's CPU in a scale run went to plans (10 ms a plan at p50, 25 ms at p90, about half of
it on finished migrations), and the namespace was reconciled about ten times per migration.

A finished migration (Succeeded or Failed) is *settled* when it holds no room now and either
no plan has found it holding room for `after` seconds in a row, or KubeVirt recorded it finished
at least `after` seconds ago (its phaseTransitionTimestamps: a restarted controller then does
not judge the namespace's whole history again for `after` seconds). Nothing brings a settled
migration's room back: KubeVirt makes no pods for a finished migration, and a pod that stopped
counting (gone, terminal, past its grace period) never counts again. The grace covers caches
that lag behind each other (a failed migration's target pod seen after its final phase).

The caller sets settled migrations aside from what plans read (`NamespaceViews.set_aside`), and
only once its caches have synced; any change of the migration lists it again, to be judged
again. Nothing here needs to survive a restart: a restarted controller's fresh caches judge each
migration once more.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import orjson
from cachetools import LRUCache

from ...apis.kubevirt import (
    CONDITION_REJECTED_BY_QUOTA,
    FINAL_PHASES,
    PHASE_PENDING,
    is_finished,
)
from ...generic.meta import has_condition, metadata, status
from ...generic.resource import Object
from ..launcher import LauncherSettings, VmiView, spec_of, target_quota_usage, vmi_view
from ..resources import ResourceList
from ..vmispec import parse_time
from .rooms import HARVESTER_MIGRATION_PREFIX, RoomPlan

RENDERED_USAGES = 1024
"""Launcher usages kept (one per VM shape and namespace settings in use)."""


def migration_plan_view(migration: Object) -> Object:
    """The migration with only what the quota plan and its controller read: identity (and kind,
    for Events), creation and deletion times, the VMI, which side of a decentralized migration
    it is (spec.sendTo and spec.receive kept as {} where set: `rooms.decentralized_side` reads
    only their presence), the phase, the conditions' type and status (and the quota refusal's
    lastProbeTime) and when it reached a final phase (phaseTransitionTimestamps of Succeeded
    and Failed only, for `SettledMigrations`). Not status.migrationState: rooms find a
    migration's pods from the pods' own labels, never from a status, and KubeVirt's first
    status write (phase Pending with the source pod) would otherwise queue a plan that reads
    nothing new (`plan_acted_on`). Never raises; a malformed field is kept as it is and judged
    by the reader, as on the full object."""
    meta = metadata(migration)
    state = status(migration)
    narrow: dict[str, Any] = {
        "apiVersion": migration.get("apiVersion", ""),
        "kind": migration.get("kind", ""),
        "metadata": {
            k: meta[k]
            for k in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp")
            if k in meta
        },
        "spec": _narrow_spec(migration.get("spec")),
        "status": {},
    }
    if "phase" in state:
        narrow["status"]["phase"] = state["phase"]
    conditions = state.get("conditions")
    if isinstance(conditions, list):
        narrow["status"]["conditions"] = [
            _narrow_condition(c) for c in conditions if isinstance(c, Mapping)
        ]
    transitions = state.get("phaseTransitionTimestamps")
    if isinstance(transitions, list):
        final = [
            t for t in transitions if isinstance(t, Mapping) and str(t.get("phase")) in FINAL_PHASES
        ]
        if final:
            narrow["status"]["phaseTransitionTimestamps"] = final
    return narrow


def _narrow_condition(condition: Mapping[str, Any]) -> dict[str, Any]:
    """A condition's type and status; for the quota refusal also its lastProbeTime, which
    virt-controller sets once when it adds the condition (when the block began:
    controller/resourcequota/reports.py RefusalTracker)."""
    narrow = {"type": condition.get("type"), "status": condition.get("status")}
    if condition.get("type") == CONDITION_REJECTED_BY_QUOTA and "lastProbeTime" in condition:
        narrow["lastProbeTime"] = condition["lastProbeTime"]
    return narrow


UNDER_WAY: Final = "(not finished)"
"""What `plan_acted_on` makes of every phase but a final one (none and Pending included),
unless the migration carries KubeVirt's quota refusal."""


def plan_acted_on(view: Object) -> Object:
    """The part of a `migration_plan_view` a plan acts on: the view with its phase reduced to
    the classes the room model tells apart. A final phase (Succeeded, Failed) is kept: a
    finished migration holds room only while its pods count. Every other phase, none and
    Pending included, is UNDER_WAY: a migration not finished holds the same room whatever its
    step (rooms.py: `_holding_reason` and `_room` read the phase only as final or not, besides
    the room's reason, "pending" or "migrating", which only the log line and Event of a write
    show, and a write reads the view stored, which keeps the exact phase). So KubeVirt's steps
    from none to Pending, Scheduling, Scheduled, PreparingTarget, TargetReady and Running
    queue no plan; the changes that matter at those moments come as changes of their own (the
    target pod's view, a condition). One reader tells Pending apart: a quota refusal counts
    while the migration is Pending (reports.py `refused_by_quota`, whose end a reconcile
    settles), so a migration carrying the refusal condition keeps its phase as none-or-Pending
    or UNDER_WAY. The view stored keeps the exact phase for whatever reads it next."""
    state = status(view)
    phase = state.get("phase")
    if is_finished(view):
        return view
    if phase in (None, "", PHASE_PENDING) and has_condition(view, CONDITION_REJECTED_BY_QUOTA):
        return {**view, "status": {**state, "phase": PHASE_PENDING}}
    return {**view, "status": {**state, "phase": UNDER_WAY}}


def _narrow_spec(spec: object) -> dict[str, Any]:
    """spec.vmiName, spec.priority (interned: a handful of names) where it is a string, and
    spec.sendTo and spec.receive as {} where they are set (not null)."""
    spec = spec if isinstance(spec, Mapping) else {}
    narrow: dict[str, Any] = {"vmiName": spec.get("vmiName")}
    priority = spec.get("priority")
    if isinstance(priority, str):
        narrow["priority"] = sys.intern(priority)
    for side in ("sendTo", "receive"):
        if spec.get(side) is not None:
            narrow[side] = {}
    return narrow


def vmi_facts(vmi: Object) -> VmiView:
    """The VMI as the controller's caches keep it: its view without the object, with the digest
    of what the launcher rendering reads (`render_key`); never raises (what cannot be encoded
    gets a key of its own, so it is rendered, and its error reported, on every plan as before)."""
    return vmi_view(vmi, keep=False, render_key=_render_key(vmi))


def _render_key(vmi: Object) -> bytes:
    annotations = metadata(vmi).get("annotations") or {}
    if isinstance(annotations, Mapping):
        annotations = {
            k: v
            for k, v in annotations.items()
            if not str(k).startswith(HARVESTER_MIGRATION_PREFIX)
        }
    try:
        encoded = orjson.dumps([annotations, vmi.get("spec")], option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        return os.urandom(16)
    return hashlib.blake2b(encoded, digest_size=16).digest()


class RenderedUsages:
    """Launcher quota usages by VMI fingerprint and launcher settings (an LRU of
    RENDERED_USAGES). `usage` is the launcher part's renderer (parts.PartRender) for the narrow
    VMI views the caches keep (`vmi_facts`): it reads the view's `render_key` and, on a miss
    only, decodes the full VMI `full(key)` once to render it. A view with its spec (or its spec's error) is
    rendered as given.
    Not thread-safe: event loop only."""

    def __init__(
        self, full: Callable[[str], Object | None], maxsize: int = RENDERED_USAGES
    ) -> None:
        self._full = full
        self._usages: LRUCache[tuple[bytes, str], ResourceList] = LRUCache(maxsize=maxsize)
        self._settings: tuple[LauncherSettings, str] | None = None
        self.renders = 0
        """Launcher pods rendered (misses)."""

    def usage(self, vmi: VmiView, settings: LauncherSettings) -> ResourceList:
        """The quota usage of the launcher pod KubeVirt would render for `vmi` now; ValueError
        as target_quota_usage, or when the VMI left the cache. The result is the caller's."""
        if vmi.spec_reader is not None:
            return target_quota_usage(spec_of(vmi), settings)
        key = (vmi.render_key, self._settings_key(settings))
        cached = self._usages.get(key)
        if cached is None:
            full = self._full(vmi.key)
            if full is None:
                raise ValueError(f"VMI {vmi.key} is no longer cached")
            self.renders += 1
            cached = self._usages[key] = target_quota_usage(full, settings)
        return dict(cached)

    def _settings_key(self, settings: LauncherSettings) -> str:
        """Settings by value (repr of the frozen dataclass), computed once per settings object
        in a row: a reconcile passes the same one for all its migrations."""
        if self._settings is None or self._settings[0] is not settings:
            self._settings = (settings, repr(settings))
        return self._settings[1]


SETTLE_AFTER = 60.0
"""Seconds a finished migration must hold no room, in every plan, before it is settled."""


class SettledMigrations:
    """Per namespace, since when each finished migration has been planned without room.

    Not thread-safe: call it from the event loop, for one namespace at a time (the namespace
    controller never runs two reconciles of a namespace at once). Memory: the finished
    migrations of the last `after` seconds, per namespace.
    """

    def __init__(self, after: float = SETTLE_AFTER) -> None:
        self.after = after
        self._idle_since: dict[str, dict[str, float]] = {}

    def settled(
        self,
        namespace: str,
        migrations: Iterable[Object],
        rooms: RoomPlan,
        now: float,
        wall: datetime.datetime,
    ) -> list[str]:
        """The names of the finished migrations, among those a plan of `namespace` read at
        monotonic `now` (wall-clock `wall`), that hold no room in `rooms` and either held none
        in any plan of the last `after` seconds or finished, as recorded, `after` seconds before
        `wall`. A migration whose room could not be estimated is never settled. The others are
        remembered from their first plan without room; a migration that holds room again, or
        is no longer read, is forgotten."""
        holding = {room.migration for room in rooms.rooms} | rooms.estimate_errors.keys()
        before = self._idle_since.get(namespace, {})
        idle: dict[str, float] = {}
        settled: list[str] = []
        for migration in migrations:
            name = str(metadata(migration).get("name") or "")
            phase = str(status(migration).get("phase") or "")
            if phase not in FINAL_PHASES or name in holding:
                continue
            since = before.get(name, now)
            if now - since >= self.after or _finished_before(migration, wall, self.after):
                settled.append(name)
            else:
                idle[name] = since
        if idle:
            self._idle_since[namespace] = idle
        else:
            self._idle_since.pop(namespace, None)
        return settled

    def forget(self, namespace: str) -> None:
        """Drops what is known of the namespace (deleted, or no longer ours)."""
        self._idle_since.pop(namespace, None)


def _finished_before(migration: Object, wall: datetime.datetime, seconds: float) -> bool:
    """Whether KubeVirt recorded the migration reaching a final phase at least `seconds` before
    `wall`; False when it recorded nothing readable."""
    transitions = status(migration).get("phaseTransitionTimestamps")
    if not isinstance(transitions, list):
        return False
    for transition in transitions:
        if not isinstance(transition, Mapping) or str(transition.get("phase")) not in FINAL_PHASES:
            continue
        try:
            moment = parse_time(
                transition.get("phaseTransitionTimestamp"), "phaseTransitionTimestamp"
            )
        except ValueError:
            continue
        if (wall - moment).total_seconds() >= seconds:
            return True
    return False
