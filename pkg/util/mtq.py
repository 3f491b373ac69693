"""The Managed-Tenant-Quota model (KubeVirt MTQ's design, made safe): pure, shared by the MTQ
controller and the lock rules of the webhook.

A namespace with a VirtualMachineMigrationResourceQuota (VMMRQ) has a migration budget. A
migration KubeVirt reports refused by quota is *releasable* when its target pod fits under every
quota of the namespace once each is raised by the budget; the quotas it does not fit under today
are its *blocking* quotas. Releasable migrations share one raise: the union of their blocking
quotas is raised once, by the whole budget, on the keys each quota has (``raise_hard``).

A quota nobody but Rancher may write (Rancher 2.14.6+/2.15.2+ protects its labelled default quota,
and the caller has seen it refuse) is *protected*: it is never raised, so a migration it blocks is
*held by Rancher*, neither releasable nor short of budget (no lock would help it).

Restore rule (an administrator's edit made during the window is kept): per key of spec.hard, a
value still equal to what the raise wrote goes back to the original (or away, if the original
had no such key); any other value is someone else's edit and stays as it is. So a key the
administrator changed, added or removed while the quota was raised keeps the administrator's
choice, and every other key is exactly the original. (An edit that sets a key to exactly the
raised value cannot be told from the raise; it is restored to the original.)

The lock lives on the Namespace: the label LABEL_LOCKED (what the webhook rule selects, so its
failure policy applies to locked namespaces only) and the annotation ANNOTATION_LOCK, a JSON
record of the deadline, the VMMRQ and the migrations whose target pods may pass. Past its
deadline the window is over (the controller raises nothing more and restores), but the webhook
enforces the lock until the controller removes it, after the restore. Each raise writes its own
record on the quota (ANNOTATION_RAISED), so the restore does not depend on the VMMRQ surviving.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ..apis.mtq import OriginalQuota, Vmmrq
from ..generic.meta import annotations_of, labels
from . import resources
from .annotations import LABEL_DEFAULT_RESOURCE_QUOTA
from .migrationpriority import DEFAULT as DEFAULT_PRIORITY
from .migrationpriority import scarce_room_order
from .quantity import Quantity
from .quotascope import PLAIN_FACTS, UNSCOPED, PodScopeFacts, QuotaScope, quota_scope
from .resourcequota.base import Shortfall
from .resources import ResourceList, parse_resource_list, parse_resource_list_leniently

LABEL_LOCKED: Final = "mtq.harvester-quota.io/locked"
"""On a Namespace while MTQ mode holds its lock: "true"."""
ANNOTATION_LOCK: Final = "mtq.harvester-quota.io/lock"
"""On a locked Namespace: ``{"until": RFC 3339, "vmmrq": name, "migrations": {uid: name}}``."""
ANNOTATION_RAISED: Final = "mtq.harvester-quota.io/raised-from"
"""On a quota MTQ mode holds raised, written in the same patch as the raise and removed with the
restore: ``{"original": spec.hard before the raise, "budget": the budget added}``. The record a
tenant cannot write (the VMMRQ's status and finalizer may be a tenant's): a namespace whose VMMRQ
is gone is restored from it before it is unlocked."""
FINALIZER: Final = "mtq.harvester-quota.io/restore"
"""On a VMMRQ while it records originals: deleting it restores the quotas first. While the
namespace is locked only our controller may remove it (the webhook's lock rules)."""
NOT_ENOUGH_REASON: Final = "NotEnoughResourceToRelease"
"""MTQ's Warning event reason, on a migration the budget cannot release."""
RANCHER_PROTECTED_REASON: Final = "QuotaProtectedByRancher"
"""Warning event reason, on a VMMRQ whose namespace's quota only Rancher may raise."""

_ZERO = Quantity()


# The lock ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Lock:
    """A namespace's MTQ lock: void from `until` on, whatever the label says."""

    until: datetime.datetime
    vmmrq: str
    migrations: Mapping[str, str] = field(default_factory=dict)
    """Migration uid -> name: the migrations whose target pods may be created."""

    def active(self, now: datetime.datetime) -> bool:
        """True while `now` is before the deadline: the window in which the controller may
        raise. The webhook enforces the lock longer, for as long as the namespace carries it
        (the controller removes it only once the quotas are restored)."""
        return now < self.until

    def admits_target_of(self, migration_uid: str) -> bool:
        """True if `migration_uid` is one of the migrations this lock is held for."""
        return migration_uid in self.migrations

    def annotation(self) -> str:
        """The ANNOTATION_LOCK value (deterministic: same lock, same text)."""
        return json.dumps(
            {
                "until": format_time(self.until),
                "vmmrq": self.vmmrq,
                "migrations": dict(sorted(self.migrations.items())),
            },
            separators=(",", ":"),
        )


def format_time(moment: datetime.datetime) -> str:
    """RFC 3339 in UTC with a Z, to the second (as Kubernetes writes times)."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_lock(namespace: Mapping[str, Any] | None) -> Lock | None:
    """The namespace's lock, or None when it is not labelled locked.

    A labelled namespace whose annotation is missing or unreadable has a lock whose window is
    already over (deadline at the epoch): the controller raises nothing under it and restores
    and unlocks; until then the webhook still enforces it (the label is ours alone)."""
    if labels(namespace).get(LABEL_LOCKED) != "true":
        return None
    text = annotations_of(namespace).get(ANNOTATION_LOCK, "")
    try:
        raw = json.loads(text)
        until = datetime.datetime.fromisoformat(str(raw["until"]).replace("Z", "+00:00"))
        if until.tzinfo is None:
            raise ValueError("no time zone")
        migrations = {str(k): str(v) for k, v in dict(raw.get("migrations") or {}).items()}
        return Lock(until, str(raw.get("vmmrq") or ""), migrations)
    except (ValueError, KeyError, TypeError, AttributeError):
        return Lock(datetime.datetime.fromtimestamp(0, datetime.UTC), "")


# Quotas ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QuotaView:
    """One ResourceQuota as the model reads it."""

    name: str
    hard: ResourceList
    used: ResourceList
    spec: Mapping[str, Any]
    scope: QuotaScope = UNSCOPED
    """Which pods it charges (quotascope.py): a target pod outside it is not judged by it."""
    rancher_default: bool = False
    """Labelled as Rancher's default quota: the one Rancher 2.14.6+/2.15.2+ may protect."""
    raised_from: str | None = None
    """Its ANNOTATION_RAISED (None without one): the raise MTQ mode holds on it."""


def quota_view(quota: Mapping[str, Any]) -> QuotaView:
    """A cached ResourceQuota (already validated by the API server) as a QuotaView."""
    raw_spec = quota.get("spec")
    spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, Mapping) else {}
    return QuotaView(
        name=str((quota.get("metadata") or {}).get("name")),
        hard=parse_resource_list_leniently(spec.get("hard")),
        used=parse_resource_list_leniently((quota.get("status") or {}).get("used")),
        spec=spec,
        scope=quota_scope(spec),
        rancher_default=labels(quota).get(LABEL_DEFAULT_RESOURCE_QUOTA) == "true",
        raised_from=annotations_of(quota).get(ANNOTATION_RAISED),
    )


def raise_record(original: Mapping[str, Quantity], budget: Mapping[str, Quantity]) -> str:
    """The ANNOTATION_RAISED value for a raise of `original` by `budget` (deterministic)."""
    record = {"original": hard_json(original), "budget": hard_json(budget)}
    return json.dumps(record, sort_keys=True, separators=(",", ":"))


def recorded_raise(quota: QuotaView) -> tuple[OriginalQuota, ResourceList] | None:
    """The original and the budget a quota's ANNOTATION_RAISED records, or None without one.
    ValueError naming the quota for a record that cannot be read (only our controller writes
    quotas, so that is a bug or an administrator's hand: it is left for them, not guessed)."""
    if quota.raised_from is None:
        return None
    try:
        raw = json.loads(quota.raised_from)
        original = OriginalQuota(quota.name, {"hard": dict(raw["original"])})
        return original, parse_resource_list(dict(raw["budget"]))
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"quota {quota.name}: unreadable {ANNOTATION_RAISED} {quota.raised_from!r}: {error}"
        ) from error


def raise_hard(hard: Mapping[str, Quantity], budget: Mapping[str, Quantity]) -> ResourceList:
    """`hard` plus the budget on the keys `hard` has (exact key match, as MTQ: a budget of
    ``memory`` does not raise ``requests.memory``); keys of the budget it lacks are ignored."""
    return {key: value + budget[key] if key in budget else value for key, value in hard.items()}


def restored_hard(
    live: Mapping[str, Quantity],
    original: Mapping[str, Quantity],
    raised: Mapping[str, Quantity],
) -> ResourceList:
    """The restore rule (module docstring): per key, the original where `live` still holds what
    the raise wrote, `live` (someone's edit) elsewhere."""
    out: ResourceList = {}
    for key in sorted(set(live) | set(original) | set(raised)):
        ours = key in raised and key in live and live[key] == raised[key]
        untouched_absent = key not in live and key not in raised
        if ours or untouched_absent:
            if key in original:
                out[key] = original[key]
        elif key in live:
            out[key] = live[key]
    return out


def hard_json(hard: Mapping[str, Quantity]) -> dict[str, str]:
    """spec.hard as JSON (Go's quantity strings)."""
    return resources.to_json_dict(hard)


# Feasibility ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """What the budget can do for one blocked migration."""

    blocking: tuple[str, ...] = ()
    """The quotas its target pod does not fit under today, by name."""
    short: tuple[Shortfall, ...] = ()
    """Non-empty: even raised by the budget, these keys are too small."""
    held: tuple[str, ...] = ()
    """Protected quotas (only Rancher may raise them) the target pod does not fit under today."""

    @property
    def releasable(self) -> bool:
        return bool(self.blocking) and not self.short and not self.held


def evaluate(
    usage: Mapping[str, Quantity],
    quotas: Iterable[QuotaView],
    originals: Mapping[str, ResourceList],
    budget: Mapping[str, Quantity],
    *,
    facts: PodScopeFacts = PLAIN_FACTS,
    protected: frozenset[str] = frozenset(),
) -> Verdict:
    """Whether a target pod of quota usage `usage` is blocked, and whether the budget frees it.

    Each quota is judged at its original hard when one is recorded (a raised quota still blocks
    the migrations it was raised for) and its live status.used (target pods admitted already
    count), on the keys both its hard and the pod have, as quota admission does, if its scopes
    match the target pod's `facts` (a quota that does not charge the pod neither blocks it nor
    is raised for it). A quota named in `protected` is never raised: blocking, it holds the
    migration (`Verdict.held`)."""
    blocking: list[str] = []
    held: list[str] = []
    short: list[Shortfall] = []
    for quota in sorted(quotas, key=lambda q: q.name):
        if not quota.scope.matches(facts):
            continue
        hard = originals.get(quota.name, quota.hard)
        keys = sorted(k for k in hard if k in usage)
        blocks = any(quota.used.get(k, _ZERO) + usage[k] > hard[k] for k in keys)
        if quota.name in protected:
            held.extend([quota.name] if blocks else [])
            continue
        if blocks:
            blocking.append(quota.name)
        raised = raise_hard(hard, budget)
        short.extend(
            Shortfall(
                k,
                usage[k],
                quota.used.get(k, _ZERO),
                raised[k],
                quota=quota.name,
                budget=budget.get(k, _ZERO),
            )
            for k in keys
            if quota.used.get(k, _ZERO) + usage[k] > raised[k]
        )
    return Verdict(tuple(blocking), tuple(short), tuple(held))


def not_enough_message(
    vmmrq: str, namespace: str, migration: str, short: Sequence[Shortfall]
) -> str:
    """The NotEnoughResourceToRelease event's text: MTQ's sentence, with every key and number."""
    return (
        f"VirtualMachineMigrationResourceQuota {vmmrq} in namespace {namespace} does not have "
        f"enough resources to release blocked migration {migration}: "
        + "; ".join(_budget_words(s) for s in short)
    )


def _budget_words(short: Shortfall) -> str:
    """One key the budget cannot release, in the NotEnoughResourceToRelease event's words."""
    return (
        f"quota {short.quota} {short.key}: the target pod needs {short.needed}, "
        f"{short.in_use} is used of {short.limit} including the budget's {short.budget} "
        f"(short by {short.in_use + short.needed - short.limit})"
    )


def rancher_held_message(vmmrq: str, namespace: str, quotas: Iterable[str], refusal: str) -> str:
    """The QuotaProtectedByRancher event's text: what Rancher refused and what to do instead."""
    names = ", ".join(sorted(set(quotas)))
    return (
        f"Rancher protects ResourceQuota {names} in namespace {namespace} and refuses every write "
        f"of it but its own ({refusal}): MTQ mode never raises it, so "
        f"VirtualMachineMigrationResourceQuota {vmmrq} cannot release a migration it blocks. "
        "Raise the namespace's limit in Rancher (its field.cattle.io/resourceQuota, within the "
        f"project's limits), or delete {vmmrq} so that harvester-quota's room mode raises the "
        "quota through Rancher's annotation"
    )


# The namespace's plan -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Blocked:
    """A migration KubeVirt reports refused by quota, with no target pod yet."""

    name: str
    uid: str
    usage: ResourceList
    """Its target pod's quota usage."""
    facts: PodScopeFacts = PLAIN_FACTS
    """What quota scopes read of its target pod (quotascope.launcher_scope_facts)."""
    vmi: str = ""
    """The name of the VMI it migrates."""
    priority: int = DEFAULT_PRIORITY
    """KubeVirt's priority of the migration (util/migrationpriority.py)."""
    created: str = ""
    """Its creationTimestamp (the API server's): among equals, the older goes first."""


@dataclass(frozen=True)
class MtqPlan:
    """MTQ mode's plan of a namespace: what its quotas and its VMMRQ's status should be now."""

    budget: ResourceList
    migrations: Mapping[str, tuple[str, ...]]
    """Releasable migration name -> its blocking quotas (status.migrationsToBlockingResourceQuotas)."""
    uids: Mapping[str, str]
    """Releasable migration uid -> name (the lock's migrations)."""
    refused: Mapping[str, tuple[Shortfall, ...]]
    """Migration name -> why the budget cannot release it."""
    held: Mapping[str, tuple[str, ...]]
    """Migration name -> the protected quotas that block it (only Rancher may raise them)."""
    originals: tuple[OriginalQuota, ...]
    """status.originalBlockingResourceQuotas: every quota to hold raised, spec before the raise."""
    restore: tuple[OriginalQuota, ...]
    """Recorded originals no longer needed: to restore (the restore rule), then forget."""
    waiting: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Migration name -> the migrations of higher priority it waits for: the budget releases
    it alone, but not beside them (`prioritized`)."""

    @property
    def locks(self) -> bool:
        return bool(self.originals)


def budget_of(vmmrq: Vmmrq) -> ResourceList:
    """The budget in force: the one recorded in status while a raise is recorded (what the raise
    wrote, so the restore knows it even if spec changed), else spec's. ValueError naming the key
    for a bad quantity."""
    recorded = vmmrq.status.originals and vmmrq.status.additional
    return parse_resource_list(vmmrq.status.additional if recorded else vmmrq.additional)


def original_hard(original: OriginalQuota) -> ResourceList:
    """The recorded spec.hard; ValueError naming the key for a bad quantity."""
    return parse_resource_list(original.hard)


def plan_namespace(
    vmmrq: Vmmrq,
    blocked: Iterable[Blocked],
    quotas: Sequence[QuotaView],
    *,
    excluded: frozenset[str] = frozenset(),
    protected: frozenset[str] = frozenset(),
) -> MtqPlan:
    """The namespace's plan from its VMMRQ, its blocked migrations and its quotas.

    `excluded` names migrations not to release now (their last window expired; they wait for a
    change); `protected` names quotas never to raise (evaluate). A VMMRQ being deleted releases
    nothing and restores everything."""
    budget = budget_of(vmmrq)
    recorded = {o.name: o for o in vmmrq.status.originals}
    recorded_hard = {name: original_hard(o) for name, o in recorded.items()}
    live = {q.name: q for q in quotas}
    migrations: dict[str, tuple[str, ...]] = {}
    uids: dict[str, str] = {}
    refused: dict[str, tuple[Shortfall, ...]] = {}
    held: dict[str, tuple[str, ...]] = {}
    for migration in sorted(blocked, key=lambda b: b.name):
        if vmmrq.deleting or migration.name in excluded:
            continue
        verdict = evaluate(
            migration.usage,
            quotas,
            recorded_hard,
            budget,
            facts=migration.facts,
            protected=protected,
        )
        if verdict.held:
            held[migration.name] = verdict.held
        elif verdict.short:
            refused[migration.name] = verdict.short
        elif verdict.blocking:
            migrations[migration.name] = verdict.blocking
    releasable = [b for b in blocked if b.name in migrations]
    waiting = prioritized(releasable, quotas, recorded_hard, budget, protected)
    for migration in releasable:
        if migration.name in waiting:
            del migrations[migration.name]
        else:
            uids[migration.uid] = migration.name
    needed = sorted({q for names in migrations.values() for q in names})
    originals = tuple(
        recorded[name] if name in recorded else OriginalQuota(name, dict(live[name].spec))
        for name in needed
        if name in recorded or name in live
    )
    restore = tuple(o for name, o in sorted(recorded.items()) if name not in needed)
    return MtqPlan(budget, migrations, uids, refused, held, originals, restore, waiting)


def prioritized(
    releasable: Sequence[Blocked],
    quotas: Sequence[QuotaView],
    originals: Mapping[str, ResourceList],
    budget: Mapping[str, Quantity],
    protected: frozenset[str] = frozenset(),
) -> dict[str, tuple[str, ...]]:
    """The migrations the budget releases alone but not beside those of higher priority, each
    with the names of those it waits for. Taken in KubeVirt's order (scarce_room_order), a
    migration is judged with the target pods of every migration of strictly higher priority
    counted on each quota that charges them: scarce room goes to evacuations before a user's
    migrations. Among migrations of one priority nothing changes: each is judged alone, as
    MTQ does, and quota admission decides between their target pods."""
    ordered = sorted(releasable, key=lambda b: scarce_room_order(b.priority, b.created, b.name))
    waiting: dict[str, tuple[str, ...]] = {}
    for index, migration in enumerate(ordered):
        ahead = [a for a in ordered[:index] if a.priority > migration.priority]
        ahead = [a for a in ahead if a.name not in waiting]
        if ahead and not _fits_beside(
            migration,
            ahead,
            quotas=quotas,
            originals=originals,
            budget=budget,
            protected=protected,
        ):
            waiting[migration.name] = tuple(a.name for a in ahead)
    return waiting


def _fits_beside(
    migration: Blocked,
    ahead: Sequence[Blocked],
    *,
    quotas: Sequence[QuotaView],
    originals: Mapping[str, ResourceList],
    budget: Mapping[str, Quantity],
    protected: frozenset[str],
) -> bool:
    """Whether `migration`'s target pod fits every raised quota that charges it with the target
    pods of `ahead` admitted first (each counted where its own scopes match)."""
    for quota in quotas:
        if quota.name in protected or not quota.scope.matches(migration.facts):
            continue
        raised = raise_hard(originals.get(quota.name, quota.hard), budget)
        before = [a.usage for a in ahead if quota.scope.matches(a.facts)]
        for key in (k for k in raised if k in migration.usage):
            taken = sum((u.get(key, _ZERO) for u in before), quota.used.get(key, _ZERO))
            if taken + migration.usage[key] > raised[key]:
                return False
    return True


def raise_action(
    live: QuotaView, original: OriginalQuota, budget: ResourceList
) -> ResourceList | None:
    """The spec.hard to write to raise `live`, or None: raised already, or edited by someone
    since it was recorded (their edit stands; the restore keeps it too)."""
    base = original_hard(original)
    raised = raise_hard(base, budget)
    if resources.equal(live.hard, base) and not resources.equal(base, raised):
        return raised
    return None


def restore_action(
    live: QuotaView, original: OriginalQuota, budget: ResourceList
) -> ResourceList | None:
    """The spec.hard to write to restore `live` by the restore rule, or None if it is there."""
    base = original_hard(original)
    target = restored_hard(live.hard, base, raise_hard(base, budget))
    return None if resources.equal(live.hard, target) else target
