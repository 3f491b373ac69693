"""`harvester-quota explain NAMESPACE`: why the namespace's quota is what it is, read-only.

Reads the namespace as the controller would (its quotas, migrations, VMIs, pods, the KubeVirt
CR and Harvester's ratio setting when present) straight from the API server, plans it with the
controller's planner (`NamespacePlanner` over a `NamespaceSnapshot`), and reports: the base and where it comes from, each migration holding
room (why, since when, how much, which pod), usage without migration targets, desired versus
actual spec.hard per key, what the webhook would deny now, the last refusal KubeVirt reported,
any write Rancher denied, for a namespace of a Rancher project whether Rancher validates it and
whether the project has room for the raise the plan wants (reading the Project object when the
cluster has it) and, where the controller holds the raise back for sibling namespaces'
migrations earlier in KubeVirt's order, its last word naming them, any lock KubeVirt MTQ left on the namespace (with what to delete), and who
besides the controller owns what the plan writes (the quota's managedFields). It
writes nothing, so any kubeconfig that can read those kinds will do.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import orjson

from .apis.harvester import RATIO_SETTING, SETTINGS
from .apis.kubevirt import (
    CONDITION_REJECTED_BY_QUOTA,
    KUBEVIRTS,
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
    VIRTUAL_MACHINE_INSTANCES,
)
from .config.kubevirt import settings_from
from .config.management import COMPONENT
from .controller.resourcequota.planner import NamespacePlanner
from .controller.resourcequota.rancher import PROJECT_QUEUED_REASON, RANCHER_DENIAL_REASON
from .generic import errors
from .generic.client import ApiClient
from .generic.discovery import list_if_served
from .generic.meta import annotations_of, has_condition, metadata, name, spec, status
from .generic.resource import (
    EVENTS,
    LEASES,
    LIMIT_RANGES,
    NAMESPACES,
    PODS,
    RESOURCE_QUOTAS,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
    Object,
    Resource,
)
from .generic.rest import FIELD_MANAGER
from .util.annotations import ANNOTATION_PAUSED, TRUE, parse_migration_annotations
from .util.launcher import VmiSource, as_view, spec_of
from .util.migrationpriority import migration_priority, priority_name
from .util.mtqlock import locks_of
from .util.podusage import KUBERNETES_1_36, QuotaFeatures
from .util.quotascope import quota_scope
from .util.rancher.project import (
    PROJECTS,
    NoRoom,
    ProjectQuota,
    project_reference,
    raise_verdict,
    refusal_verdict,
    validated_condition,
)
from .util.resourcequota.base import (
    ANNOTATION_RANCHER_BASE,
    RANCHER,
    Mode,
    managed_quota,
    rancher_base_text,
)
from .util.resourcequota.conditional import hard_writers
from .util.resourcequota.plan import NamespaceSnapshot, QuotaPlan
from .util.resourcequota.planviews import migration_plan_view, vmi_facts
from .util.resourcequota.podindex import NamespacePods, pod_view
from .util.resourcequota.rancherpath import given, ladder, raised_annotation
from .util.resourcequota.rooms import source_pod, target_growth
from .util.screen import screened
from .util.vmispecview import SpecView


@dataclass
class Explanation:
    """Everything `explain` reports, as plain data (its JSON form is `as_dict`)."""

    namespace: str
    quota: str | None
    managed: bool
    base_source: str | None = None
    base: dict[str, str] = field(default_factory=dict)
    rooms: list[dict[str, Any]] = field(default_factory=list)
    used_without_targets: dict[str, str] = field(default_factory=dict)
    hard: dict[str, dict[str, str | None]] = field(default_factory=dict)
    free_under_base: dict[str, str] = field(default_factory=dict)
    webhook: list[str] = field(default_factory=list)
    last_refusal: dict[str, str] | None = None
    rancher_denials: list[dict[str, str]] = field(default_factory=list)
    rancher_project: dict[str, Any] | None = None
    """For a namespace of a Rancher project: its id, whether its object could be read, Rancher's
    ResourceQuotaValidated condition, `no_room` (what to raise the project limit by), empty
    when the project has room for the plan, and `queued_behind`: the controller's last Warning
    that the room goes first to sibling namespaces' migrations (object, message, time), or
    None."""
    scope: str = ""
    """The managed quota's scopes ("" for none): it charges, and is raised for, only the pods
    they match."""
    paused: str | None = None
    """Why the controller gives this namespace's rooms back and raises none (its global switch,
    read from its leader Lease, or the namespace's opt-out label), or None."""
    mtq_locks: list[dict[str, str]] = field(default_factory=list)
    """KubeVirt MTQ's namespace locks on this namespace: configuration, what it does, how to
    delete it."""
    other_writers: list[dict[str, Any]] = field(default_factory=list)
    """The quota's writers other than the controller, from its managedFields, that own a key of
    spec.hard the plan writes (the base's keys): manager, operation, time, the fields; oldest
    first (writers.hard_writers)."""
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


async def explain(
    client: ApiClient,
    namespace: str,
    *,
    mode: Mode = "auto",
    kubevirt_version: str | None = None,
    quota_features: QuotaFeatures = KUBERNETES_1_36,
    now: datetime.datetime | None = None,
    controller_namespace: str = "harvester-system",
    lease_name: str = "harvester-quota",
) -> Explanation:
    """Reads the namespace and explains its managed quota, its pods charged as an API server
    with `quota_features` charges them; raises NotFound for no namespace.
    Whether the controller runs paused is read from its leader Lease `lease_name` in
    `controller_namespace` (unreadable: not paused, with a warning)."""
    ns = await client.get(NAMESPACES, namespace)
    locks, lock_warnings = await _mtq_locks(client, namespace)
    quotas = await list_if_served(client, RESOURCE_QUOTAS, namespace)
    quota = managed_quota(quotas)
    if quota is None:
        warnings = ["no managed ResourceQuota", *lock_warnings]
        return Explanation(namespace, None, managed=False, mtq_locks=locks, warnings=warnings)
    kubevirts = await list_if_served(client, KUBEVIRTS, None)
    settings = [s for s in await list_if_served(client, SETTINGS, None) if name(s) == RATIO_SETTING]
    launcher = settings_from(
        kubevirts[0] if kubevirts else None,
        settings[0] if settings else None,
        configured_version=kubevirt_version,
    ).for_namespace(quotas, ns, await list_if_served(client, LIMIT_RANGES, namespace))
    listed = await _screened_lists(client, namespace, quota_features)
    paused, lease_warnings = await controller_paused(client, controller_namespace, lease_name)
    migrations = listed.migrations
    source = NamespaceSnapshot(
        namespace=ns,
        quota=quota,
        migrations=migrations,
        vmis={name(v): v for v in listed.vmis},
        pods=listed.pods,
        now=now or datetime.datetime.now(datetime.UTC),
        launcher=launcher,
        mode=mode,
        paused=paused,
        # The controller's option is not known here: an adopted quota is explained as kept so.
        adopt_harvester=parse_migration_annotations(annotations_of(quota)).adopted,
    )
    plan = NamespacePlanner(source).plan(ns)
    if plan is None:  # the planner found no managed quota where the list had one
        warnings = ["the planner found no managed ResourceQuota", *lock_warnings]
        return Explanation(namespace, None, managed=False, mtq_locks=locks, warnings=warnings)
    snapshot = plan.snapshot
    events = await list_if_served(client, EVENTS, namespace)
    result = _explanation(namespace, quota, plan, migrations, events)
    _add_growth(result, plan, snapshot)
    result.rancher_project = await _rancher_project(client, ns, plan)
    if result.rancher_project is not None:
        result.rancher_project["queued_behind"] = _queued_behind(events, ns, plan)
    result.mtq_locks = locks
    result.warnings = [*result.warnings, *lock_warnings, *listed.skipped, *lease_warnings]
    return result


async def controller_paused(
    client: ApiClient, namespace: str, lease_name: str
) -> tuple[bool, list[str]]:
    """Whether the controllers' leader runs with its global switch (`run --paused`): the
    annotation it keeps on its Lease. False, with a warning saying so, when the Lease cannot be
    read (absent, or not readable with these credentials)."""
    try:
        lease = await client.get(LEASES, lease_name, namespace)
    except (errors.NotFound, errors.Forbidden) as error:
        why = "not found" if isinstance(error, errors.NotFound) else "not readable here"
        return False, [
            f"the controllers' Lease {namespace}/{lease_name} is {why}: whether raising is "
            "paused cluster-wide is unknown (--controller-namespace names where they run)"
        ]
    return annotations_of(lease).get(ANNOTATION_PAUSED) == TRUE, []


@dataclass
class _Listed:
    """The namespace's migrations, VMIs and pods that their per-object computation takes, and
    a warning naming each it raised on (skipped, as the controller's informers skip it)."""

    migrations: list[Object]
    vmis: list[Object]
    pods: NamespacePods
    skipped: list[str]


async def _screened_lists(client: ApiClient, namespace: str, features: QuotaFeatures) -> _Listed:
    """Lists the namespace's migrations, VMIs and pods and runs on each the view the
    controller's caches derive (migration_plan_view, vmi_facts, pod_view): one that raises is
    skipped and named instead of failing the whole command (util/screen.py)."""
    migrations, skipped_migrations = screened(
        await list_if_served(client, VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, namespace),
        migration_plan_view,
        "VirtualMachineInstanceMigration",
    )
    vmis, skipped_vmis = screened(
        await list_if_served(client, VIRTUAL_MACHINE_INSTANCES, namespace),
        vmi_facts,
        "VirtualMachineInstance",
    )
    pods, skipped_pods = screened(
        await list_if_served(client, PODS, namespace), partial(pod_view, features=features), "Pod"
    )
    return _Listed(
        [m for m, _ in migrations],
        [v for v, _ in vmis],
        NamespacePods(view for _, view in pods),
        [*skipped_migrations, *skipped_vmis, *skipped_pods],
    )


async def _rancher_project(
    client: ApiClient, namespace: Object, plan: QuotaPlan
) -> dict[str, Any] | None:
    """The namespace's Rancher project as it bears on the plan (rancher/project.py), or None."""
    reference = project_reference(namespace)
    if reference is None or plan.base is None or plan.base.source != RANCHER:
        return None
    cluster, project_name = reference
    try:
        project: ProjectQuota | None = ProjectQuota.from_object(
            await client.get(PROJECTS, project_name, cluster)
        )
    except (errors.NotFound, errors.Forbidden):
        project = None
    condition = validated_condition(namespace)
    no_room = None
    if plan.holds_room:
        members = await _readable(client, NAMESPACES)
        no_room = _no_room(namespace, plan, project, members)
    return {
        "project": f"{cluster}:{project_name}",
        "readable": project is not None,
        "validated": None if condition is None else condition[0],
        "rancher_message": "" if condition is None else condition[1],
        "no_room": no_room.message if no_room is not None else "",
    }


def _no_room(
    namespace: Object, plan: QuotaPlan, project: ProjectQuota | None, members: list[Object]
) -> NoRoom | None:
    """What the controller would say: our raise standing and marked by Rancher, or the raise the
    plan wants judged against the project."""
    if ANNOTATION_RANCHER_BASE in annotations_of(namespace):
        return refusal_verdict(namespace, project, members)
    base_text = rancher_base_text(namespace)
    if base_text is None:
        return None
    return raise_verdict(namespace, raised_annotation(base_text, plan.hard), project, members)


def _queued_behind(
    events: Sequence[Object], namespace: Object, plan: QuotaPlan
) -> dict[str, str] | None:
    """The controller's last word that the project's room goes first to sibling namespaces'
    migrations earlier in KubeVirt's order (its WaitingForEarlierMigrationsInProject Warning on
    the quota or a migration whose room is still held back), or None: shown only while the
    namespace's annotation was not given a room of the plan (rancherpath.given; once every
    room is given, the last Warning is history), and only an Event our controller reported
    (its reportingComponent or source). Read from the Events, not planned again here: which
    siblings wait is the controller's judgment of every namespace of the project from its
    caches, at the moment it judged."""
    if not plan.holds_room:
        return None
    try:
        steps = ladder(namespace, plan)
        flags = given(namespace, steps)
    except ValueError:
        return None
    held = {step.room.migration for step, done in zip(steps, flags, strict=True) if not done}
    if not held:
        return None
    said = [
        _event_summary(e)
        for e in events
        if e.get("reason") == PROJECT_QUEUED_REASON
        and _ours(e)
        and (
            (e.get("involvedObject") or {}).get("kind") == "ResourceQuota"
            or (e.get("involvedObject") or {}).get("name") in held
        )
    ]
    return max(said, key=lambda summary: summary["time"]) if said else None


def _ours(event: Object) -> bool:
    """Whether our controller reported `event` (as its EventRecorder names itself)."""
    source = event.get("source") or {}
    return COMPONENT in {event.get("reportingComponent"), source.get("component")}


async def _readable(client: ApiClient, resource: Resource) -> list[Object]:
    """Every object of a cluster-wide kind, or [] where this kubeconfig may not list it."""
    try:
        return await list_if_served(client, resource, None)
    except errors.Forbidden:
        return []


async def _mtq_locks(client: ApiClient, namespace: str) -> tuple[list[dict[str, str]], list[str]]:
    """KubeVirt MTQ's locks of the namespace, and a warning if they could not be read."""
    try:
        configurations = await list_if_served(client, VALIDATING_WEBHOOK_CONFIGURATIONS, None)
    except errors.Forbidden as error:
        return [], [f"cannot look for KubeVirt MTQ's namespace locks: {error}"]
    return [
        {
            "configuration": lock.configuration,
            "message": lock.message(),
            "delete": lock.delete_command(),
        }
        for lock in locks_of(namespace, configurations)
    ], []


def _explanation(
    namespace: str,
    quota: Object,
    plan: QuotaPlan,
    migrations: Sequence[Object],
    events: Sequence[Object],
) -> Explanation:
    result = Explanation(namespace, name(quota), managed=plan.managed, warnings=plan.warnings)
    result.other_writers = _other_writers(quota, plan)
    result.paused = plan.paused
    scope = quota_scope(quota)
    result.scope = "" if scope.unscoped else str(scope)
    actual = {str(k): str(v) for k, v in (spec(quota).get("hard") or {}).items()}
    result.hard = {
        key: {"desired": plan.hard.get(key), "actual": actual.get(key)}
        for key in sorted(set(actual) | set(plan.hard))
    }
    if plan.base is not None:
        result.base_source = plan.base.source
        result.base = {k: str(v) for k, v in sorted(plan.base.hard.items())}
        result.used_without_targets = {
            k: str(v) for k, v in sorted(plan.used.items()) if k in plan.base.hard or k in actual
        }
        zero = {k: v * 0 for k, v in plan.base.hard.items()}
        result.free_under_base = {
            k: str(max(v - plan.used.get(k, zero[k]), zero[k]))
            for k, v in sorted(plan.base.hard.items())
        }
    created = {name(m): str(metadata(m).get("creationTimestamp") or "") for m in migrations}
    priority = {name(m): priority_name(migration_priority(m)) for m in migrations}
    result.rooms = [
        {
            "migration": room.migration,
            "vm": room.vm_name,
            "phase": room.phase or "Pending",
            "why": room.reason,
            "since": created.get(room.migration, ""),
            "priority": priority.get(room.migration, "default"),
            "room": {k: str(v) for k, v in sorted(room.room.items())},
            "target_pod": room.target_pod,
            "attachment_pods": [pod for part in room.parts[1:] for pod in part.pods],
            "parts": [
                {
                    "kind": part.kind,
                    "pods": list(part.pods),
                    "room": {k: str(v) for k, v in sorted(part.room.items())},
                }
                for part in room.parts
            ],
            "estimated": room.estimated,
        }
        for room in plan.rooms.rooms
    ]
    result.webhook = _webhook_rules(result, plan)
    result.last_refusal = _last_refusal(migrations, events)
    result.rancher_denials = [
        _event_summary(e) for e in events if e.get("reason") == RANCHER_DENIAL_REASON
    ]
    return result


def _add_growth(result: Explanation, plan: QuotaPlan, snapshot: NamespaceSnapshot) -> None:
    """Each room's `growth`: why it is bigger than its source pod (rooms.target_growth), ""
    when it is not or no source counts."""
    pods = snapshot.pods if isinstance(snapshot.pods, NamespacePods) else None
    for shown, room in zip(result.rooms, plan.rooms.rooms, strict=True):
        shown["growth"] = ""
        vmi = snapshot.vmis.get(room.vm_name)
        full = _spec_or_none(vmi)
        if pods is None or full is None:
            continue
        source = source_pod(pods, room.vmi_uid, room.migration_uid, snapshot.now)
        growth = (
            None if source is None else target_growth(room.room, full, source, snapshot.launcher)
        )
        shown["growth"] = growth.sentence() if growth is not None else ""


def _spec_or_none(vmi: VmiSource | None) -> SpecView | None:
    """The VMI's spec view, None without one (a narrow view) or for a spec that does not read
    (its room then has no estimate to explain)."""
    if vmi is None:
        return None
    try:
        return spec_of(as_view(vmi))
    except ValueError:
        return None


def _other_writers(quota: Object, plan: QuotaPlan) -> list[dict[str, Any]]:
    """Who else owns keys of spec.hard the plan writes (the base's keys; every key without a
    base), oldest first, as `explain` shows them."""
    found = []
    for writer in sorted(hard_writers(quota), key=lambda w: (w.time, w.manager)):
        keys = [k for k in writer.keys if plan.base is None or k in plan.base.hard]
        if writer.manager != FIELD_MANAGER and keys:
            found.append(
                {
                    "manager": writer.manager,
                    "operation": writer.operation,
                    "time": writer.time,
                    "fields": [f"spec.hard {key}" for key in keys],
                }
            )
    return found


def _writers_line(writers: Sequence[Mapping[str, Any]]) -> str:
    """'also written by: harvester (Update, 2026-11-26T11:07:36Z: spec.hard limits.cpu)'."""
    told = [
        f"{w['manager']} ({w['operation']}, {w['time'] or 'no time'}: {', '.join(w['fields'])})"
        for w in writers
    ]
    return "also written by: " + ("; ".join(told) or "nobody else")


def _webhook_rules(result: Explanation, plan: QuotaPlan) -> list[str]:
    """The webhook's rules as they apply to this namespace now, in words."""
    if not plan.managed or plan.base is None:
        return ["nothing: the quota's base is unknown, so the webhook leaves it to quota admission"]
    free = ", ".join(f"{k} {v}" for k, v in result.free_under_base.items()) or "nothing"
    rules = [f"a VM may start only if its launcher pod fits in what is free under the base: {free}"]
    if plan.holds_room:
        holders = ", ".join(sorted({r.vm_name for r in plan.rooms.rooms}))
        rules.append(
            f"a pod that is not a migration target is denied if it needs more than {free} "
            f"(room held for the migration of {holders})"
        )
        rules.append(
            f"lowering the base or spec.hard is denied until the migration of {holders} ends"
        )
    else:
        rules.append("lowering the base or spec.hard below what the namespace uses is denied")
    return rules


def _last_refusal(migrations: Sequence[Object], events: Sequence[Object]) -> dict[str, str] | None:
    """KubeVirt's newest word on a target pod refused by quota: a FailedCreate event naming a
    quota, else a VMIM that still carries the refusal condition."""
    refusals = [
        e
        for e in events
        if e.get("reason") == "FailedCreate" and "exceeded quota" in str(e.get("message"))
    ]
    if refusals:
        newest = max(refusals, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime")))
        return _event_summary(newest)
    for migration in migrations:
        if has_condition(migration, CONDITION_REJECTED_BY_QUOTA):
            return {
                "object": f"VirtualMachineInstanceMigration/{name(migration)}",
                "message": "target pod refused by quota (condition "
                + CONDITION_REJECTED_BY_QUOTA
                + ")",
                "time": _condition_time(migration),
            }
    return None


def _condition_time(migration: Object) -> str:
    for condition in status(migration).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == CONDITION_REJECTED_BY_QUOTA:
            return str(condition.get("lastTransitionTime") or "")
    return ""


def _event_summary(event: Object) -> dict[str, str]:
    involved = event.get("involvedObject") or {}
    return {
        "object": f"{involved.get('kind', '')}/{involved.get('name', '')}",
        "message": str(event.get("message") or ""),
        "time": str(event.get("lastTimestamp") or event.get("eventTime") or ""),
    }


def render_json(explanation: Explanation) -> str:
    return orjson.dumps(explanation.as_dict(), option=orjson.OPT_INDENT_2).decode()


def render_text(e: Explanation) -> str:
    """The explanation for a terminal: sections in the order an operator asks the questions."""
    locks = [f"KubeVirt MTQ lock left: {lock['message']}" for lock in e.mtq_locks]
    if e.quota is None:
        nothing = f"namespace {e.namespace}: no managed ResourceQuota (nothing to explain)"
        return "\n".join([nothing, *locks]) + "\n"
    lines = [f"namespace {e.namespace}, quota {e.quota}", *locks]
    if e.scope:
        lines.append(
            f"scopes: {e.scope} (only the pods they match count, and only migrations whose "
            "target pod they match hold room)"
        )
    if e.paused:
        lines.append(f"paused: {e.paused}; every room is given back and none raised")
    if not e.managed:
        lines.append("  not scaled: " + ("; ".join(e.warnings) or "no base"))
    else:
        lines.append(f"base ({e.base_source}): " + _pairs(e.base))
        lines.append("used without migration targets: " + _pairs(e.used_without_targets))
    lines.append("migrations holding room:" + ("" if e.rooms else " none"))
    for room in e.rooms:
        pod = room["target_pod"] or "no target pod yet (estimated from the VMI)"
        for part in room.get("parts", [])[1:]:
            if part["pods"]:
                pod += f", {part['kind']} pods " + ", ".join(part["pods"])
        lines.append(
            f"  {room['migration']} (VM {room['vm']}, {room['phase']}, since {room['since']}, "
            f"priority {room['priority']}): "
            f"{room['why']}; room {_pairs(room['room'])}; {pod}"
        )
        if room.get("growth"):
            lines.append(f"    {room['growth']}")
    lines.append(_writers_line(e.other_writers))
    lines.append("spec.hard, desired -> actual:")
    for key, values in e.hard.items():
        mark = "" if values["desired"] in (None, values["actual"]) else "   (differs)"
        lines.append(f"  {key}: {values['desired'] or '-'} -> {values['actual'] or '-'}{mark}")
    lines.append("the webhook now:")
    lines.extend(f"  {rule}" for rule in e.webhook)
    refusal = e.last_refusal
    lines.append(
        "last refusal by quota: "
        + (f"{refusal['time']} {refusal['object']}: {refusal['message']}" if refusal else "none")
    )
    lines.append(f"writes denied by Rancher: {len(e.rancher_denials) or 'none'}")
    lines.extend(f"  {d['time']} {d['message']}" for d in e.rancher_denials)
    lines.extend(_project_lines(e.rancher_project))
    lines.extend(f"warning: {w}" for w in e.warnings if e.managed)
    return "\n".join(lines) + "\n"


def _project_lines(project: Mapping[str, Any] | None) -> list[str]:
    if project is None:
        return []
    validated = {None: "no condition yet", True: "validated", False: "NOT validated"}
    state = validated[project["validated"]]
    if project["rancher_message"]:
        state += f" ({project['rancher_message']})"
    read = "" if project["readable"] else " (its Project object cannot be read here)"
    lines = [f"Rancher project {project['project']}{read}: {state}"]
    if project["no_room"]:
        lines.append(f"  {project['no_room']}")
    queued = project.get("queued_behind")
    if queued:
        lines.append(f"  the controller, {queued['time']}: {queued['message']}")
    return lines


def _pairs(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in values.items()) or "-"
