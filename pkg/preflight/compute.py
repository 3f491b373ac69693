"""The preflight as a pure computation: listed objects in, a PreflightReport out.

`preflight(ClusterState, Plan)` never reads the cluster: `read.py` lists the objects, and a test
can hand it any state. For each step (one drain of one or more nodes; `upgrade` is one step per
node, in order) it takes the running VMIs on the drained nodes in namespace/name order and decides
for each what KubeVirt's evacuation does with it (eviction strategy, LiveMigratable), whether its
target pod, rendered as KubeVirt would, passes quota admission with the chosen strategy's room
(admission.py), and where it lands, first fit on the nodes left (nodes.py). The migrations are
then cut into waves by KubeVirt's limits; those whose target fits alone may still wait
beside their namespace's other targets (delays.py) or, on Rancher's path, for their project's
room behind sibling namespaces' migrations earlier in KubeVirt's order (projectorder.py). In an
upgrade a VM that moved is counted on its new node from the next step on, and its old node gets
back what its source pod requested.

`upgrade` on a Harvester cluster also names what Harvester's own upgrade does with each VM
on the node it upgrades, beside its quota verdict (`note_upgrade_outcomes`).

Read in Harvester's `package/upgrade/upgrade_node.sh` (v1.7.0 to v1.8.2) and its upgrade
helper. A node's pre-drain:

1. shuts down the VMs Harvester's detector finds not live-migratable
   (`upgrade-helper vm-live-migrate-detector --shutdown`): every VM when one node that is not a
   witness is left, else a VMI with a nodeSelector, with host devices, or whose required node
   affinity no other schedulable node (other than the one its status names) meets;
2. taints the node `kubevirt.io/drain`, so that KubeVirt evacuates what it will;
3. waits, with no timeout, until no VMI is left on the node, looking every 5 s: an evacuation
   migration (`kubevirt-evacuation-*`) that Failed with a FailedMigration warning has its VM
   stopped (`virtctl stop`); a Pending or Scheduling one is only logged.

So a VM whose target pod quota admission refuses stalls the upgrade for good (its migration stays
Pending: KubeVirt's pending-pod timeouts start only once a target pod exists), and one whose
target pod is created but fits no node is shut down once KubeVirt fails the migration: it deletes
a target pod unschedulable for UNSCHEDULABLE_TIMEOUT seconds (its default; a migration may carry
its own in an annotation). A VM KubeVirt does not evacuate (eviction strategy None or External,
or LiveMigrate while not live-migratable) stays on the node, and the pre-drain waits for it.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

from ..apis.kubevirt import LABEL_CREATED_BY, LABEL_KUBEVIRT, LAUNCHER
from ..apis.mtq import Vmmrq, VmmrqError, decode_vmmrq
from ..config.kubevirt import settings_from
from ..controller.resourcequota.planner import NamespacePlanner
from ..generic.meta import labels, metadata, name, namespace, spec, status
from ..generic.resource import Object
from ..util.launcher import LauncherSettings, launcher_pod_resources
from ..util.launcher.parts import beside_parts
from ..util.migrationlimits import migration_limits
from ..util.migrationpriority import evacuation_priority
from ..util.podusage import KUBERNETES_1_36, QuotaFeatures, pod_quota_usage, pod_requests
from ..util.quantity import Quantity
from ..util.quotascope import launcher_scope_facts
from ..util.rancher.project import ProjectQuota, project_reference
from ..util.resourcequota.base import Mode, managed_quota, rancher_base_text
from ..util.resourcequota.plan import NamespaceSnapshot, QuotaPlan
from ..util.resourcequota.rancherpath import Step
from ..util.resources import to_json_dict
from ..util.screen import named, screened
from .admission import NamespaceContext, Strategy, TargetPod, harvester_ratio, quota_blockers
from .delays import (
    LAUNCHER_GRACE_PADDING,
    bandwidth_per_migration,
    estimate_seconds,
    grace_seconds,
    plan_delays,
    plan_waves,
    wave_starts,
)
from .nodes import (
    NodeRoom,
    first_fit,
    free_on_nodes,
    refusal_text,
    required_affinity_matches,
    target_side_requests,
)
from .projectorder import TIMESTAMP, describe, project_order
from .report import (
    UPGRADE_MIGRATES,
    UPGRADE_SHUTS_DOWN,
    UPGRADE_STALLS,
    Action,
    Blocker,
    Delay,
    DrainStep,
    PreflightReport,
    VmVerdict,
)

LIVE_MIGRATE: Final = "LiveMigrate"
LIVE_MIGRATE_IF_POSSIBLE: Final = "LiveMigrateIfPossible"
EXTERNAL: Final = "External"
NONE: Final = "None"
CONTROL_PLANE_LABELS: Final = (
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
)
ORDER_REASON: Final = (
    "control-plane nodes first, then the others, each by name, one at a time: the order of a "
    "rolling upgrade (Harvester's upgrade and RKE2's system-upgrade plans take the servers' plan "
    "before the agents', one node at a time)"
)
WITNESS_LABEL: Final = "node-role.harvesterhci.io/witness"
"""A Harvester witness node (etcd only, runs no VM): Harvester's detector leaves it out."""
UNSCHEDULABLE_TIMEOUT: Final = 300
"""Seconds KubeVirt's migration controller lets a target pod stay unschedulable before it
deletes it and the migration fails (defaultUnschedulablePendingTimeoutSeconds)."""


@dataclass
class ClusterState:
    """The objects a preflight reads, as the API returns them (cluster-wide lists)."""

    nodes: Sequence[Object]
    vmis: Sequence[Object]
    pods: Sequence[Object] = ()
    quotas: Sequence[Object] = ()
    limit_ranges: Sequence[Object] = ()
    namespaces: Sequence[Object] = ()
    kubevirt: Object | None = None
    vmmrqs: Sequence[Object] = ()
    projects: Sequence[Object] = ()
    harvester_ratio_setting: Object | None = None
    kubevirt_version: str | None = None
    harvester: bool = False
    """Whether this is a Harvester cluster (its Settings are served): an `upgrade` then says
    what Harvester's own upgrade does with each VM (`note_upgrade_outcomes`)."""
    migrations: Sequence[Object] = ()
    """VirtualMachineInstanceMigrations: those under way in a Rancher project's namespaces
    compete with a step's evacuations for the project's room (projectorder.py)."""
    now: datetime.datetime | None = None
    """When the state was read (which pods still count, when the step's evacuations are
    created); None: the latest creationTimestamp the state shows, else the Unix epoch."""


@dataclass
class Plan:
    """What to check: `drain` of `nodes` together, or `upgrade` (every node, one at a time)."""

    operation: str
    nodes: Sequence[str] = ()
    strategy: Strategy = "ours"
    strategy_reason: str = "asked for"
    mode: Mode = "auto"
    """The controller's --mode: where our strategy takes the base from."""
    quota_features: QuotaFeatures = KUBERNETES_1_36
    """The controller's --quota-feature-gates: what quota charges a pod (and what the
    scheduler sums of the pods on a node, the gates being the cluster's)."""


class UnknownNode(ValueError):
    """A node named on the command line that the cluster does not have."""


def upgrade_order(nodes: Sequence[Object]) -> list[str]:
    """Every node in the order a rolling upgrade takes them (ORDER_REASON)."""

    def control_plane(node: Object) -> bool:
        return any(key in labels(node) for key in CONTROL_PLANE_LABELS)

    return [name(n) for n in sorted(nodes, key=lambda n: (not control_plane(n), name(n)))]


def eviction_strategy(vmi: Object, kubevirt: Object | None) -> tuple[str, str]:
    """The VMI's eviction strategy and where it comes from: the VMI, the KubeVirt CR's
    spec.configuration.evictionStrategy, or KubeVirt's default (None)."""
    own = spec(vmi).get("evictionStrategy")
    if isinstance(own, str) and own:
        return own, "vmi"
    configured = (spec(kubevirt).get("configuration") or {}).get("evictionStrategy")
    if isinstance(configured, str) and configured:
        return configured, "kubevirt"
    return NONE, "default"


def live_migratable(vmi: Object) -> tuple[bool, str]:
    """KubeVirt's LiveMigratable condition: (True, "") or (False, its reason and message). A VMI
    without the condition is not migratable for virt-controller either."""
    for condition in status(vmi).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "LiveMigratable":
            if condition.get("status") == "True":
                return True, ""
            reason = str(condition.get("reason") or "")
            message = str(condition.get("message") or "")
            return False, ": ".join(p for p in (reason, message) if p) or "LiveMigratable=False"
    return False, "no LiveMigratable condition reported yet"


def _action(strategy: str, migratable: bool) -> Action:
    if strategy in (LIVE_MIGRATE, LIVE_MIGRATE_IF_POSSIBLE) and migratable:
        return "migrate"
    if strategy == LIVE_MIGRATE:
        return "blocks-drain"
    if strategy == EXTERNAL:
        return "external"
    return "shutdown"


GUEST_MEMORY_MAX: Final = 2**63 - 1
"""Go's int64: no guest KubeVirt can start has more bytes."""


def guest_memory_bytes(vmi: Object) -> int:
    """What a migration copies: the guest's memory (memory.guest, else requests.memory, else
    limits.memory); 0 when the VMI states none. At most GUEST_MEMORY_MAX: a tenant's "1e400"
    parses, and the copy-time estimate divided it into a float (OverflowError, the whole
    preflight failed); the estimate is all it sizes, no room."""
    domain = spec(vmi).get("domain") or {}
    resources = domain.get("resources") or {}
    for raw in (
        (domain.get("memory") or {}).get("guest"),
        (resources.get("requests") or {}).get("memory"),
        (resources.get("limits") or {}).get("memory"),
    ):
        if raw is not None:
            try:
                return min(Quantity.parse(str(raw)).value(), GUEST_MEMORY_MAX)
            except ValueError:
                continue
    return 0


def _by_namespace(objects: Sequence[Object]) -> dict[str, list[Object]]:
    grouped: dict[str, list[Object]] = {}
    for obj in objects:
        grouped.setdefault(namespace(obj), []).append(obj)
    return grouped


@dataclass
class _Cluster:
    """The state indexed for the steps, and what the steps change (VM locations, node rooms).

    The namespaced lists are grouped by namespace once, and each namespace's context and
    launcher settings are worked out once: the work per VM does not grow with the cluster."""

    state: ClusterState
    plan: Plan
    rooms: dict[str, NodeRoom]
    location: dict[str, str] = field(default_factory=dict)
    running: list[tuple[str, Object]] = field(default_factory=list)
    """The VMIs a drain of their node takes, by key (namespace/name): those with a running
    launcher pod whatever their status says, or a Running phase, and not being deleted."""
    warnings: list[str] = field(default_factory=list)
    contexts: dict[str, NamespaceContext] = field(default_factory=dict)
    settings: dict[str, LauncherSettings] = field(default_factory=dict)
    quotas: dict[str, list[Object]] = field(default_factory=dict)
    limit_ranges: dict[str, list[Object]] = field(default_factory=dict)
    vmmrqs: dict[str, list[Object]] = field(default_factory=dict)
    namespaces: dict[str, Object] = field(default_factory=dict)
    migrations: dict[str, list[Object]] = field(default_factory=dict)
    pods: dict[str, list[Object]] = field(default_factory=dict)
    vmis: dict[str, list[Object]] = field(default_factory=dict)
    """The pods and VMIs the screen kept, by namespace (a project's namespaces are planned)."""
    queued: list[tuple[VmVerdict, TargetPod]] = field(default_factory=list)
    """The current step's migrations whose target pod fits alone, each verdict with its target
    pod, in the step's order."""

    @classmethod
    def indexed(cls, state: ClusterState, plan: Plan) -> _Cluster:
        """The state indexed; a pod or VMI the per-object reads raise on is skipped and named
        in the warnings (util/screen.py), so one poisoned object never fails the preflight."""
        features = plan.quota_features
        pods, skipped_pods = screened(state.pods, partial(_read_pod, features=features), "Pod")
        kept_pods = [pod for pod, _ in pods]
        vmis, skipped_vmis = screened(state.vmis, _read_vmi, "VirtualMachineInstance")
        kept_vmis = [vmi for vmi, _ in vmis]
        launchers = running_launchers(kept_pods)
        return cls(
            state,
            plan,
            free_on_nodes(state.nodes, kept_pods, features),
            location=vmi_nodes(kept_vmis, launchers),
            running=running_vmis(kept_vmis, launched_vmis(kept_vmis, launchers)),
            warnings=[*skipped_pods, *skipped_vmis],
            quotas=_by_namespace(state.quotas),
            limit_ranges=_by_namespace(state.limit_ranges),
            vmmrqs=_by_namespace(state.vmmrqs),
            namespaces={name(n): n for n in state.namespaces},
            migrations=_by_namespace(state.migrations),
            pods=_by_namespace(kept_pods),
            vmis=_by_namespace(kept_vmis),
        )


def _read_pod(pod: Object, features: QuotaFeatures) -> object:
    """What the preflight reads of each pod (running_launchers, free_on_nodes), on its own."""
    running_launchers([pod])
    try:
        return pod_requests(pod, features=features)
    except ValueError:
        return None  # charged nothing, as free_on_nodes does


def _read_vmi(vmi: Object) -> object:
    """What the preflight reads of each VMI before judging it, on its own."""
    return vmi_nodes([vmi], {}), running_vmis([vmi], frozenset())


def preflight(state: ClusterState, plan: Plan) -> PreflightReport:
    """The report for `plan` on `state`; UnknownNode for a node the state does not have."""
    known = {name(n) for n in state.nodes}
    unknown = [n for n in plan.nodes if n not in known]
    if unknown:
        raise UnknownNode(f"no such node: {', '.join(unknown)} (nodes: {', '.join(sorted(known))})")
    limits = migration_limits(state.kubevirt)
    bandwidth = bandwidth_per_migration(state.kubevirt)
    report = PreflightReport(
        operation=plan.operation,
        strategy=plan.strategy,
        strategy_reason=plan.strategy_reason,
        order_reason=ORDER_REASON if plan.operation == "upgrade" else "",
        limits={
            "parallelMigrationsPerCluster": limits.per_cluster,
            "parallelOutboundMigrationsPerNode": limits.outbound_per_node,
            "bandwidthPerMigration": bandwidth,
        },
    )
    cluster = _Cluster.indexed(state, plan)
    steps = (
        [[n] for n in upgrade_order(state.nodes)]
        if plan.operation == "upgrade"
        else [list(plan.nodes)]
    )
    vmis = dict(cluster.running)
    for drained in steps:
        cluster.queued = []
        step = _step(cluster, drained)
        if plan.operation == "upgrade" and state.harvester:
            note_upgrade_outcomes(step.vms, vmis, state.nodes, cluster.warnings)
        movers = [vm for vm in step.vms if vm.action == "migrate" and not vm.blocked]
        waves = plan_waves(movers, limits)
        for number, wave in enumerate(waves, start=1):
            for mover in wave:
                mover.wave = number
        step.waves = [[m.key for m in wave] for wave in waves]
        copies = [[m.memory_bytes / bandwidth for m in wave] for wave in waves]
        plan_delays(plan.strategy, cluster.queued, cluster.contexts, bandwidth, wave_starts(copies))
        if plan.strategy == "ours":
            _project_waits(cluster, bandwidth)
        step.estimated_seconds = estimate_seconds(waves, bandwidth)
        report.steps.append(step)
    report.warnings = cluster.warnings
    return report


def running_launchers(pods: Sequence[Object]) -> dict[tuple[str, str], list[str]]:
    """The nodes of the running launcher pods of each VMI, by (namespace, VMI uid).

    A launcher belongs to the VMI of its `kubevirt.io/created-by` label in its own namespace, as
    KubeVirt finds a VMI's pods: a pod elsewhere that names the uid is none of its launchers (the
    labels policy guards the label where our chart runs, and a preflight may run where it does
    not)."""
    launchers: dict[tuple[str, str], list[str]] = {}
    for pod in pods:
        pod_labels = labels(pod)
        node = spec(pod).get("nodeName")
        if (
            pod_labels.get(LABEL_KUBEVIRT) == LAUNCHER
            and status(pod).get("phase") == "Running"
            and not metadata(pod).get("deletionTimestamp")
            and isinstance(node, str)
        ):
            owner = (namespace(pod), str(pod_labels.get(LABEL_CREATED_BY)))
            launchers.setdefault(owner, []).append(node)
    return launchers


def _launchers_of(vmi: Object, launchers: Mapping[tuple[str, str], list[str]]) -> list[str]:
    return sorted(launchers.get((namespace(vmi), str(metadata(vmi).get("uid"))), []))


def vmi_nodes(
    vmis: Sequence[Object], launchers: Mapping[tuple[str, str], list[str]]
) -> dict[str, str]:
    """Each VMI's node (by namespace/name): where its running launcher pod is bound.

    A VMI's status is not proof (its CRD has no status subresource, so a tenant with
    `kubevirt.io:edit` can write status.nodeName and move its VM out of a drain on paper); the
    launcher's binding is the scheduler's and its labels only KubeVirt may set (security.md).
    status.nodeName picks among several running launchers (a migration under way) and stands
    alone only for a VMI whose launcher is not listed (`launchers`: running_launchers)."""
    located: dict[str, str] = {}
    for vmi in vmis:
        stated = status(vmi).get("nodeName")
        bound = _launchers_of(vmi, launchers)
        if bound:
            located[_key(vmi)] = stated if stated in bound else bound[0]
        elif isinstance(stated, str) and stated:
            located[_key(vmi)] = stated
    return located


def launched_vmis(
    vmis: Sequence[Object], launchers: Mapping[tuple[str, str], list[str]]
) -> frozenset[str]:
    """The VMIs (namespace/name) whose launcher pod runs: a VMI's status.phase is the tenant's
    to write (no status subresource), so a phase other than Running takes no VM with a running
    launcher out of a drain; a Running phase without a listed launcher still counts (a
    conservative guess: a blocker too many, never one too few)."""
    return frozenset(_key(vmi) for vmi in vmis if _launchers_of(vmi, launchers))


def running_vmis(vmis: Sequence[Object], launched: frozenset[str]) -> list[tuple[str, Object]]:
    """(key, VMI) of the VMIs launched or in phase Running and not being deleted, by key."""
    keyed = ((_key(v), v) for v in vmis if not metadata(v).get("deletionTimestamp"))
    return sorted(
        ((k, v) for k, v in keyed if k in launched or status(v).get("phase") == "Running"),
        key=lambda pair: pair[0],
    )


def _key(vmi: Object) -> str:
    return f"{namespace(vmi)}/{name(vmi)}"


def _step(cluster: _Cluster, drained: list[str]) -> DrainStep:
    step = DrainStep(nodes=drained)
    leaving = frozenset(drained)
    candidates = [cluster.rooms[n] for n in sorted(cluster.rooms) if n not in leaving]
    for key, vmi in cluster.running:
        if cluster.location.get(key) in leaving:
            try:
                step.vms.append(_verdict(cluster, vmi, candidates))
            except Exception as error:  # one VMI never fails the preflight
                cluster.warnings.append(
                    f"skipped {named('VirtualMachineInstance', vmi)}: cannot judge it "
                    f"({type(error).__name__}: {error}); check it by hand"
                )
    return step


def _verdict(cluster: _Cluster, vmi: Object, candidates: list[NodeRoom]) -> VmVerdict:
    strategy, source = eviction_strategy(vmi, cluster.state.kubevirt)
    migratable, why = live_migratable(vmi)
    verdict = VmVerdict(
        namespace=namespace(vmi),
        name=name(vmi),
        node=cluster.location[_key(vmi)],
        eviction_strategy=strategy,
        eviction_strategy_from=source,
        live_migratable=migratable,
        migratable_reason=why,
        action=_action(strategy, migratable),
        memory_bytes=guest_memory_bytes(vmi),
    )
    if verdict.action == "blocks-drain":
        verdict.blockers.append(
            Blocker(
                "not-migratable",
                f"evictionStrategy {strategy} but not live-migratable ({why}): KubeVirt refuses "
                "the launcher's eviction and the drain waits for it",
                "make the VM migratable, or stop it (or set evictionStrategy None) before the "
                "drain",
            )
        )
    if verdict.action != "migrate":
        return verdict
    _judge_target(cluster, vmi, verdict, candidates)
    return verdict


def _judge_target(
    cluster: _Cluster, vmi: Object, verdict: VmVerdict, candidates: list[NodeRoom]
) -> None:
    context = _context(cluster, verdict.namespace)
    try:
        settings = _settings(cluster, context)
        pod = launcher_pod_resources(vmi, settings, migration_target=True)
        usage = pod_quota_usage(pod, features=cluster.plan.quota_features)
        beside = beside_parts(vmi, settings)
    except ValueError as error:
        cluster.warnings.append(f"{verdict.key}: cannot render its target pod: {error}")
        return
    target = TargetPod(vmi, pod, usage, launcher_scope_facts(vmi, usage), beside)
    verdict.target_usage = to_json_dict(target.total)
    verdict.target_parts = ["launcher", *(part.kind.name for part in beside)]
    verdict.migration_priority = evacuation_priority(settings.version, settings.feature_gates)
    verdict.blockers.extend(quota_blockers(cluster.plan.strategy, context, target))
    requests = target_side_requests(
        pod, (part.usage for part in beside), cluster.plan.quota_features
    )
    room, refusals = first_fit(candidates, vmi, requests)
    if room is None:
        figures = refusal_text(refusals) or "no node left"
        verdict.blockers.append(
            Blocker(
                "node-fit",
                f"its target side fits on no node left ({figures})",
                "free capacity on a node left that it may use, or let it use another (labels, "
                "taints, its selectors), or drain fewer nodes at once",
            )
        )
        return
    verdict.target_node = room.name
    if not verdict.blocked:
        cluster.queued.append((verdict, target))
        source = cluster.rooms.get(verdict.node)
        if source is not None:
            source.take({k: -v for k, v in requests.items()})
        cluster.location[verdict.key] = room.name
    else:
        room.take({k: -v for k, v in requests.items()})  # it stays where it is


def _settings(cluster: _Cluster, context: NamespaceContext) -> LauncherSettings:
    """The launcher settings KubeVirt renders this namespace's pods with (its quotas and
    LimitRanges), once per namespace."""
    ns_name = name(context.namespace)
    found = cluster.settings.get(ns_name)
    if found is None:
        found = settings_from(
            cluster.state.kubevirt,
            cluster.state.harvester_ratio_setting,
            configured_version=cluster.state.kubevirt_version,
        ).for_namespace(context.quotas, context.namespace, cluster.limit_ranges.get(ns_name, []))
        cluster.settings[ns_name] = found
    return found


def _context(cluster: _Cluster, ns_name: str) -> NamespaceContext:
    found = cluster.contexts.get(ns_name)
    if found is not None:
        return found
    state = cluster.state
    ns = cluster.namespaces.get(ns_name, {"metadata": {"name": ns_name}})
    vmmrqs: list[Vmmrq] = []
    for raw in cluster.vmmrqs.get(ns_name, []):
        try:
            vmmrqs.append(decode_vmmrq(raw))
        except VmmrqError as error:
            cluster.warnings.append(str(error))
    context = NamespaceContext(
        namespace=ns,
        quotas=cluster.quotas.get(ns_name, []),
        vmmrqs=vmmrqs,
        project=_project(state, ns),
        project_members=state.namespaces,
        mode=cluster.plan.mode,
        quota_features=cluster.plan.quota_features,
        harvester_ratio=harvester_ratio(state.harvester_ratio_setting),
        kubevirt_version=settings_from(
            state.kubevirt, None, configured_version=state.kubevirt_version
        ).kubevirt_version,
    )
    cluster.contexts[ns_name] = context
    return context


def _project(state: ClusterState, ns: Mapping[str, Any]) -> ProjectQuota | None:
    reference = project_reference(ns)
    if reference is None:
        return None
    cluster, project = reference
    for raw in state.projects:
        if name(raw) == project and namespace(raw) == cluster:
            return ProjectQuota.from_object(raw)
    return None


def _state_now(state: ClusterState) -> datetime.datetime:
    """`state.now`, else the latest creationTimestamp among its migrations, VMIs and pods (a
    state built by hand), else the Unix epoch."""
    if state.now is not None:
        return state.now
    stamps = [
        str(metadata(obj).get("creationTimestamp") or "")
        for obj in (*state.migrations, *state.vmis, *state.pods)
    ]
    latest = max((s for s in stamps if s), default="")
    try:
        return datetime.datetime.strptime(latest, TIMESTAMP).replace(tzinfo=datetime.UTC)
    except ValueError:
        return datetime.datetime.fromtimestamp(0, datetime.UTC)


def _project_waits(cluster: _Cluster, bandwidth: int) -> None:
    """The step's evacuations on Rancher's path judged in their projects' order across
    namespaces (projectorder.py): a Delay naming the migrations one waits behind, a note naming
    those it goes ahead of."""
    evacuations = [verdict for verdict, _target in cluster.queued]
    by_key = {verdict.key: verdict for verdict in evacuations}
    contexts = {e.namespace: _context(cluster, e.namespace) for e in evacuations}
    now = _state_now(cluster.state)
    try:
        order = project_order(
            evacuations, contexts, cluster.namespaces, partial(_plan_with, cluster, now), now
        )
    except Exception as error:  # a poisoned object never fails the preflight
        cluster.warnings.append(
            "cannot order the Rancher projects' room across their namespaces "
            f"({type(error).__name__}: {error}); each evacuation is judged alone"
        )
        return
    for (ns, vm), wait in order.items():
        verdict = by_key[f"{ns}/{vm}"]
        if wait.behind:
            _wait_behind(cluster, verdict, wait.behind, bandwidth)
        for step in wait.ahead_of:
            verdict.notes.append(
                f"its evacuation takes its Rancher project's room ahead of {describe(step)}, "
                "later in KubeVirt's order (priority, then creation), which waits for it"
            )


def _plan_with(
    cluster: _Cluster, now: datetime.datetime, ns: Object, evacuations: list[Object]
) -> QuotaPlan | None:
    """The controller's plan of `ns` (`NamespacePlanner`) from the state read, the step's
    `evacuations` beside its migrations under way, a namespace with a live VMMRQ deferred to
    MTQ mode as the controller defers (projectorder.PlanWith). None, its launcher settings not
    rendered, where no raise of ours could go through Rancher's annotation (no managed quota,
    no Rancher annotation). A member whose plan fails (an object of its own that cannot be read)
    is None with a warning: it claims nothing, as the controller's siblings_waiting skips it,
    and the rest of its project is still ordered."""
    ns_name = name(ns)
    quota = managed_quota(cluster.quotas.get(ns_name, []))
    if quota is None or rancher_base_text(ns) is None:
        return None
    try:
        return _member_plan(cluster, now, ns, quota, evacuations)
    except Exception as error:  # contained per member: one namespace never drops its project
        cluster.warnings.append(
            f"{ns_name}: not planned for its Rancher project's order "
            f"({type(error).__name__}: {error}); it claims none of the project's room"
        )
        return None


def _member_plan(
    cluster: _Cluster,
    now: datetime.datetime,
    ns: Object,
    quota: Object,
    evacuations: list[Object],
) -> QuotaPlan | None:
    """`_plan_with`'s plan of a member with a managed `quota` and Rancher's annotation."""
    ns_name = name(ns)
    source = NamespaceSnapshot(
        namespace=ns,
        quota=quota,
        migrations=[*cluster.migrations.get(ns_name, []), *evacuations],
        vmis={name(v): v for v in cluster.vmis.get(ns_name, [])},
        pods=list(cluster.pods.get(ns_name, [])),
        now=now,
        launcher=_settings(cluster, _context(cluster, ns_name)),
        mode=cluster.plan.mode,
    )
    mtq = _mtq_mode(cluster.vmmrqs.get(ns_name, []))
    return NamespacePlanner(source, defer_to=lambda _key: mtq).plan(ns)


def _mtq_mode(vmmrqs: Sequence[Object]) -> bool:
    """Whether a live VMMRQ puts the namespace in MTQ mode (the controller defers to it)."""
    for raw in vmmrqs:
        try:
            if not decode_vmmrq(raw).deleting:
                return True
        except VmmrqError:
            continue
    return False


def _wait_behind(
    cluster: _Cluster, verdict: VmVerdict, behind: Sequence[Step], bandwidth: int
) -> None:
    """`verdict` delayed behind `behind` (projectorder.project_order), named in KubeVirt's
    order, for up to the sum of their copies and source launchers' grace, combined with a
    quota delay it has already (the waits add up)."""
    ordered = sorted(behind, key=lambda step: step.order)
    named = [describe(step) for step in ordered]
    # One after the other where the project has room for one at a time: their sum bounds it.
    seconds = sum(_copy_and_exit(cluster, step, bandwidth) for step in ordered)
    message = (
        "fits its Rancher project alone, but the project's room goes first to "
        f"{', '.join(named)}, earlier in KubeVirt's order (priority, then creation): its "
        "raise is held back (the controller's WaitingForEarlierMigrationsInProject) until "
        "those have had their room and given it back"
    )
    earlier = verdict.delay
    verdict.delay = Delay(
        message=message if earlier is None else f"{message}; then {earlier.message}",
        quotas=sorted({*(earlier.quotas if earlier else ()), *_managed(cluster, verdict)}),
        rounds=1 + (earlier.rounds if earlier else 0),
        wait_seconds_at_most=round(seconds + (earlier.wait_seconds_at_most if earlier else 0.0), 1),
        cause="project",
        behind=named,
    )


def _managed(cluster: _Cluster, verdict: VmVerdict) -> list[str]:
    quota = managed_quota(cluster.quotas.get(verdict.namespace, []))
    return [name(quota)] if quota is not None else []


def _copy_and_exit(cluster: _Cluster, step: Step, bandwidth: int) -> float:
    """The longest `step`'s migration takes to give its room back once it has it: its guest's
    copy at `bandwidth` and its source launcher's grace (0 for a VMI no longer listed)."""
    vmi = next(
        (v for v in cluster.vmis.get(step.namespace, []) if name(v) == step.room.vm_name), None
    )
    if vmi is None:
        return 0.0
    copy = guest_memory_bytes(vmi) / bandwidth if bandwidth > 0 else 0.0
    return copy + grace_seconds(vmi) + LAUNCHER_GRACE_PADDING


def detector_shuts_down(vmi: Object, nodes: Sequence[Object], here: str) -> str | None:
    """Why Harvester's upgrade detector finds `vmi`, running on node `here`, not
    live-migratable (so the pre-drain shuts it down before the evacuation), or None. Harvester
    reads the node from the VMI's status, which is where the VM runs by then: the preflight's
    location of it, in an upgrade's later steps too."""
    others = [n for n in nodes if WITNESS_LABEL not in labels(n)]
    if len(others) == 1:
        return "one node that is not a witness: Harvester shuts every VM down"
    vmi_spec = spec(vmi)
    if vmi_spec.get("nodeSelector") is not None:
        return "it has a nodeSelector"
    devices = (vmi_spec.get("domain") or {}).get("devices") or {}
    if devices.get("hostDevices") is not None:
        return "it has host (PCIe or USB) devices"
    if not _another_node_meets_affinity(vmi, others, here):
        return "no other schedulable node meets its required node affinity"
    return None


def _another_node_meets_affinity(vmi: Object, nodes: Sequence[Object], here: str) -> bool:
    candidates = [n for n in nodes if name(n) != here]
    return any(
        not spec(n).get("unschedulable") and required_affinity_matches(spec(vmi).get("affinity"), n)
        for n in candidates
    )


def upgrade_outcome(verdict: VmVerdict, shut_down_because: str | None) -> tuple[str, str]:
    """(outcome, sentence): what Harvester's upgrade of `verdict.node` does with the VM, given
    the preflight's verdict and the detector's reason to shut it down (None: it does not)."""
    node = verdict.node
    if shut_down_because is not None:
        return (
            UPGRADE_SHUTS_DOWN,
            f"will be shut down by node {node}'s pre-drain: {shut_down_because}",
        )
    causes = {b.cause for b in verdict.blockers}
    if verdict.action == "migrate" and "quota" in causes:
        return UPGRADE_STALLS, (
            f"stalls node {node}'s pre-drain: quota admission refuses its target pod, so its "
            "evacuation stays Pending, and Harvester's upgrade waits for it without a timeout"
        )
    if verdict.action == "migrate" and "node-fit" in causes:
        return UPGRADE_SHUTS_DOWN, (
            f"will be shut down during node {node}'s pre-drain: its target pod fits no node, "
            f"KubeVirt fails the evacuation after {UNSCHEDULABLE_TIMEOUT} s unschedulable, and "
            "Harvester stops a VM whose evacuation failed (virtctl stop)"
        )
    if verdict.action == "migrate":
        return UPGRADE_MIGRATES, f"live-migrates off node {node}"
    return UPGRADE_STALLS, (
        f"stalls node {node}'s pre-drain: KubeVirt does not evacuate it ({_why_left(verdict)}) "
        "and Harvester's detector does not shut it down; stop it before the upgrade"
    )


def _why_left(verdict: VmVerdict) -> str:
    if verdict.action == "blocks-drain":
        return f"not live-migratable: {verdict.migratable_reason}"
    return f"eviction strategy {verdict.eviction_strategy}"


def note_upgrade_outcomes(
    verdicts: Sequence[VmVerdict],
    vmis: Mapping[str, Any],
    nodes: Sequence[Object],
    warnings: list[str],
) -> None:
    """Sets each verdict's Harvester upgrade outcome; `vmis` by key (namespace/name). A VMI whose
    fields cannot be read as Harvester's detector reads them (a tenant's odd spec) gets no
    outcome and a line in `warnings`: one VMI never fails the preflight."""
    for verdict in verdicts:
        vmi = vmis.get(verdict.key)
        try:
            reason = detector_shuts_down(vmi, nodes, verdict.node) if vmi is not None else None
        except (AttributeError, TypeError, ValueError) as error:
            warnings.append(
                f"{verdict.key}: cannot predict what Harvester's upgrade does with it "
                f"({type(error).__name__}: {error}); check it by hand"
            )
            continue
        verdict.harvester_upgrade, verdict.harvester_upgrade_says = upgrade_outcome(verdict, reason)
