"""One scale run on a local cluster with KubeVirt's real virt-controller (see `plan`).

`ScaleRun.run` does, in order:

1. setup: the namespaces (labelled with the run), each with a managed quota wide open; every VM
   of the plan created in parallel (`ScalePlan.create_concurrency` requests in flight) through
   virt-controller, awaited until all VMIs run; then each quota closed to exactly what its
   namespace uses, so that every migration target needs room: the quota's ``spec.hard`` then is
   the base the run checks drift against;
2. the product started as deployed (`product.Product`: controller and webhook processes, service
   account tokens, deploy/'s RBAC, the webhook over TLS);
3. each step of the plan: wait until the cluster is quiet, create the step's migrations at once,
   wait until all have an outcome, wait until every quota is back at its base with no migration
   annotation (settled), and measure (`StepResult`);
4. teardown: the product stopped; the namespaces deleted if asked.

With `baseline` (the default), every namespace has a twin without any ResourceQuota, outside the
product's webhook selector, with the same VMs (`ScalePlan.baseline_namespace`); each step then
runs in the quota namespaces and in their twins, one after the other on the same cluster (which
one first alternates from step to step), so that what users feel (the target pod
admitted, the migration Succeeded, the drain's wall time) is compared with no quota at all
(`stats.baseline_table`).

With `ScaleOptions.headroom` (the default, with a baseline) a third arm of twins joins
(`ScalePlan.headroom_namespace`): each namespace's ResourceQuota on the same keys, opened wide
(OPEN_HARD) and not labelled as managed, in a namespace outside the run's label: no controller
of ours nor Harvester's writes it, and kube-controller-manager's status writes and quota
admission are its only writers, so what it costs is what any quota costs. Each step runs in
every arm, one after the other, the order rotated by one from step to step
(`stats.arms_table`).

Per step and arm the run counts the target pod creates that failed on quota admission's Conflict
(virt-controller's FailedCreate events, per migration, in that arm's namespaces), the API
server's own count of pod creates it answered 409 over the step (`observe.pod_create_conflicts`,
all namespaces: the arms' steps never overlap, so the delta is the arm's), and the controller's
write requests by kind (harvester_quota_api_writes_total; Harvester's from its client).

With ``strategy="harvester"`` Harvester v1.8.2's own controllers, which the cluster runs
(`LocalCluster.up(harvester=...)`), take the product's place (`harvester.HarvesterRealProduct`):
no webhook, no algorithm in this process, their writes counted from the API server's audit log.
They act on every namespace of their cluster: the twins' VMIs and VMs get their migration
annotations as on any Harvester, and no twin quota is theirs to raise (the no-quota twins have
none; the headroom twins' quota lacks Rancher's label, which both of their controllers look for).
A run of ours on such a cluster is ours as installed on a Harvester: the controller adopts its
quotas (``--adopt-harvester-quotas``), and Harvester's migration controller still records its
key on them. The two quota arms are runs of their own on one kept cluster (two writers of the
same quotas would compare nothing).

Latency is measured from the moment a migration's create request returned (the VMIM exists) to
the moment the run's own quota watch saw that VM's room on the quota (watch delay included); how
long the create requests themselves took is reported apart. Refusals are KubeVirt's:
``FailedCreate`` events on the VMI while the migration waits (`VirtControllerDriver.records`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

from ...apis.kubevirt import FINAL_PHASES, VIRTUAL_MACHINE_INSTANCE_MIGRATIONS
from ...generic import errors
from ...generic.client import ApiClient
from ...generic.clock import REAL_CLOCK, Clock
from ...generic.resource import NAMESPACES, RESOURCE_QUOTAS
from ...util import resources
from ...util.annotations import (
    ANNOTATION_ADOPTED,
    ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING,
    CATTLE_ANNOTATION_RESOURCE_QUOTA,
    LABEL_DEFAULT_RESOURCE_QUOTA,
    MIGRATING_PREFIX,
)
from ...util.resources import ResourceList
from ..localcluster import ClusterInfo
from ..localcluster.audit import WRITE_VERBS, AuditLog, AuditMark, AuditRecord
from ..localcluster.deploy import CONTROLLER_USER, KINDS, SYSTEM_NAMESPACE
from ..localcluster.errors import ClusterError
from ..localcluster.harvester import HARVESTER_KUBEVIRT_USER
from ..sim.kubevirt.handler import HandlerTimings
from ..sim.kubevirt.limits import ParallelLimits
from ..sim.kubevirt.objects import VMSpec
from ..sim.kubevirt.record import MigrationRecord, Outcome
from ..sim.rancher.derive import format_namespace_resource_quota
from ..virtcontroller import VirtControllerDriver
from . import failover, timeline
from .harvester import HarvesterRealProduct
from .observe import ProcessSample, QuotaWatch, pod_create_conflicts, room_keys
from .plan import BASELINE_INFIX, HEADROOM_INFIX, STRATEGIES, ScalePlan, Step
from .product import NO_PROCESS_ARGS, ProcessArgs, Product
from .stats import (
    ARM_HARVESTER,
    ARM_HEADROOM,
    ARM_NONE,
    ARM_OURS,
    StepResult,
    arm_rows,
    baseline_ratios,
    migration_times,
    summarize_step,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

RUN_LABEL: Final = "scale.harvester-quota.io/run"
QUOTA_NAME: Final = "default-quota"
CLOSED_KEYS: Final = ("limits.cpu", "limits.memory", "requests.memory")
HARVESTER_CLOSED_KEYS: Final = ("limits.cpu", "limits.memory")
"""Harvester's controllers raise limits.cpu and limits.memory only: on a quota closed on
requests.memory too, every target pod is refused for good (measured: no migration of the first
step ever left Pending), so its runs close the limits and leave requests.memory open."""
"""The keys each namespace's quota is closed on (Harvester's and Rancher's usual ones)."""
OPEN_HARD: Final = {"limits.cpu": "100k", "limits.memory": "100Pi", "requests.memory": "100Pi"}
MEASURED: Final = ("kube-apiserver", "kube-controller-manager", "virt-controller", "etcd")
QUIET_CORES: Final = 0.3
QUIET_WINDOW: Final = 3.0
POLL: Final = 0.2
SERVICE_ACCOUNTS: Final = KINDS["ServiceAccount"]


def step_wall_seconds(
    started: float, waited_until: float, records: Iterable[MigrationRecord | None]
) -> float:
    """A step's wall time: from its start (`started`) until the step saw every outcome, which is
    when its wait for them ended (`waited_until`) unless that wait timed out: an outcome that
    came later, while the step waited for its quotas to settle, then ends the wall, so that a
    stalled migration lengthens it instead of hiding behind the timeout. While some migration
    still has no outcome, the wait's end."""
    ends = [r.finished.mono if r is not None and r.finished else None for r in records]
    if not ends or None in ends:
        return waited_until - started
    return max(waited_until, *(end for end in ends if end is not None)) - started


def is_quota_drain_wave(step: Step, plan: ScalePlan) -> bool:
    """Whether `step` is a drain wave (migrations over many namespaces) of the quota namespaces,
    not of their twins (baseline or headroom), which no product serves: the only kind of step a
    failover run kills the leader in."""
    twins = (plan.prefix + BASELINE_INFIX, plan.prefix + HEADROOM_INFIX)
    return step.namespace_size == 0 and not step.migrations[0][0].startswith(twins)


@dataclass(frozen=True)
class _Created:
    """One migration of a step: its VM, when its create was sent and when it returned
    (monotonic)."""

    vm: str
    asked: float
    exists: float


@dataclass
class ScaleReport:
    """What a run measured: the setup, each step, and the end state."""

    plan: ScalePlan
    strategy: str = "ours"
    harvester_version: str | None = None
    """The version of Harvester's controllers the cluster ran (None: none): the Harvester arm's
    writer, and beside our arm, the Harvester ours was installed on."""
    setup_seconds: float = 0.0
    vms_running: int = 0
    steps: list[StepResult] = field(default_factory=list)
    baseline_steps: list[StepResult] = field(default_factory=list)
    """The same steps in the twin namespaces without a quota (empty without a baseline), in
    the order of `steps`."""
    headroom_steps: list[StepResult] = field(default_factory=list)
    """The same steps in the headroom twins (a quota no controller writes; empty without that
    arm), in the order of `steps`."""
    drift: dict[str, dict[str, str]] = field(default_factory=dict)
    stale: dict[str, list[str]] = field(default_factory=dict)
    controller_rss_bytes: float = 0.0
    failover: failover.FailoverTimes | None = None
    """The leader's SIGKILL in the first drain wave (ScaleOptions.failover)."""
    cpu_accounting: bool = True
    """Our controller ran with its CPU accounting (ScaleOptions.cpu_accounting)."""

    @property
    def has_breakdown(self) -> bool:
        """Whether the steps' CPU breakdown was measured: our controller's accounting, on (none
        of Harvester's controllers has it)."""
        return self.strategy != "harvester" and self.cpu_accounting

    @property
    def all_done(self) -> bool:
        return all(
            step.succeeded == step.migrations
            for step in (*self.steps, *self.baseline_steps, *self.headroom_steps)
        )

    def arms(self) -> dict[str, list[StepResult]]:
        """Each arm's steps, by arm name (stats.ARM_*; the quota arm named after the strategy),
        the arms this run had only."""
        quota = ARM_HARVESTER if self.strategy == "harvester" else ARM_OURS
        arms = {quota: self.steps, ARM_NONE: self.baseline_steps, ARM_HEADROOM: self.headroom_steps}
        return {arm: steps for arm, steps in arms.items() if steps}

    def to_json(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "harvester_controllers": self.harvester_version,
            "cpu_accounting": self.cpu_accounting,
            "plan": {
                "nodes": self.plan.nodes,
                "namespaces": list(self.plan.namespaces),
                "vms": self.plan.vms,
                "per_size": self.plan.per_size,
                "in_flight": self.plan.in_flight,
                "waves": self.plan.waves,
            },
            "setup_seconds": round(self.setup_seconds, 1),
            "vms_running": self.vms_running,
            "steps": [step.to_json() for step in self.steps],
            "baseline_steps": [step.to_json() for step in self.baseline_steps],
            "headroom_steps": [step.to_json() for step in self.headroom_steps],
            "baseline_ratios": baseline_ratios(self.steps, self.baseline_steps),
            "arms": arm_rows(self.arms()),
            "drift": self.drift,
            "stale_annotations": self.stale,
            "controller_rss_mib": round(self.controller_rss_bytes / 2**20, 1),
            "failover": None if self.failover is None else self.failover.to_json(),
            "all_done": self.all_done,
        }


def step_wait_seconds(options: ScaleOptions, migrations: int) -> float:
    """How long a step of `migrations` waits at most for their outcomes, and again for the quotas
    to settle: `options.step_timeout`, or 120 s plus 2 s a migration."""
    chosen = options.step_timeout
    return chosen if chosen is not None else 120.0 + 2.0 * migrations


@dataclass(frozen=True)
class ScaleOptions:
    """How a `ScaleRun` runs its plan; the defaults are the command line's. ValueError for a
    strategy not in `plan.STRATEGIES`."""

    baseline: bool = True
    """Run each step again in twin namespaces without any quota (see the module docstring);
    without it, only the quota arm runs."""
    headroom: bool = True
    """With `baseline`, run each step a third time in twins whose quota no controller writes
    (see the module docstring)."""
    strategy: str = "ours"
    """Whose quota writer runs: ours as deployed, or Harvester's own controllers."""
    process_args: ProcessArgs = NO_PROCESS_ARGS
    """Flags added to our controller's and webhook's command lines."""
    quiet_timeout: float = 60.0
    """Seconds a step waits at most for the cluster to go quiet before it starts."""
    delete_namespaces: bool = False
    """Delete the run's namespaces at teardown."""
    failover: bool = False
    """A standby controller beside the leader, and the leader SIGKILLed in the first drain wave
    (failover.py); ours only."""
    step_timeout: float | None = None
    """Seconds a step waits at most for every migration's outcome, and again at most for the
    quotas to settle; None: 120 s plus 2 s a migration of the step. A run whose arm leaves
    migrations Pending for good (Harvester's, see bench/SCALE.md) waits both out in every step."""
    arm_offset: int = 0
    """How far the arms' order is rotated before the first step (`rotated`): the step's index
    plus this. Runs made one after the other (bench/arms_runs.py) give each its own, so that
    over the runs each arm takes each place in every step, not the same place in all of them."""
    cpu_accounting: bool = True
    """Run our controller with `--cpu-accounting`, for the breakdown of its CPU (breakdown.py);
    off, it runs as the chart deploys it by default, and the run has no breakdown (an A/B of the
    product's CPU without the accounting's own cost)."""
    say: Callable[[str], None] = print
    """Where the run's progress lines go."""
    clock: Clock = REAL_CLOCK

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy {self.strategy!r}: choose one of {', '.join(STRATEGIES)}")
        if self.failover and self.strategy != "ours":
            raise ValueError("a failover run needs our controller (--strategy ours)")


class ScaleRun:
    """See the module docstring. One event loop; `run` once per instance."""

    def __init__(
        self,
        api: ApiClient,
        cluster: ClusterInfo,
        plan: ScalePlan,
        workdir: Path,
        options: ScaleOptions = ScaleOptions(),
    ) -> None:
        if cluster.kubevirt_version is None:
            raise ValueError(
                "the scale run needs the cluster's virt-controller (cluster up --virt-controller)"
            )
        self.api = api
        self.cluster = cluster
        self.plan = plan
        self.workdir = workdir
        self.options = options
        self.say = options.say
        self.clock = options.clock
        self.run_id = uuid.uuid4().hex[:6]
        self.namespaces = [plan.namespace(i) for i in range(len(plan.namespaces))]
        self.baseline_namespaces = (
            [plan.baseline_namespace(i) for i in range(len(plan.namespaces))]
            if options.baseline
            else []
        )
        self.headroom_namespaces = (
            [plan.headroom_namespace(i) for i in range(len(plan.namespaces))]
            if options.baseline and options.headroom
            else []
        )
        self.bases: dict[str, ResourceList] = {}
        self.report = ScaleReport(
            plan,
            strategy=options.strategy,
            harvester_version=cluster.harvester_version,
            cpu_accounting=options.cpu_accounting,
        )
        self.audit = AuditLog(cluster.audit_log)
        """The API server's audit log: our writes per step by namespace (`_run_namespace_writes`)."""
        in_run = frozenset(self.namespaces)
        self.kubevirt = VirtControllerDriver(
            api,
            kubevirt_version=cluster.kubevirt_version,
            namespaces=in_run | frozenset(self.baseline_namespaces + self.headroom_namespaces),
            timings=HandlerTimings(
                preparing_target=0.2,
                target_ready=0.2,
                migration=plan.migration_seconds,
                source_shutdown=1.0,
                target_exit=1.0,
            ),
            limits=ParallelLimits(
                per_cluster=max(plan.in_flight, plan.per_size) + 5,
                outbound_per_node=max(2, plan.in_flight // max(1, plan.nodes // 2) + 2),
            ),
            handler_workers=16,
            clock=self.clock,
        )
        self.quotas = QuotaWatch(api, in_run.__contains__, self.clock)
        self.beside = (
            HarvesterRealProduct(cluster)
            if options.strategy != "harvester" and cluster.harvester_version
            else None
        )
        """Harvester's own controllers beside ours: their writes counted per step too."""
        self.product: Product | HarvesterRealProduct = (
            HarvesterRealProduct(cluster)
            if options.strategy == "harvester"
            else Product(
                api,
                cluster,
                workdir,
                match_labels={RUN_LABEL: self.run_id},
                kubevirt_version=cluster.kubevirt_version,
                lease_name=f"scale-{self.run_id}",
                process_args=process_args_on(cluster, options.process_args),
                standby=options.failover,
                cpu_accounting=options.cpu_accounting,
                also_kubevirt=(HARVESTER_KUBEVIRT_USER,) if cluster.harvester_version else (),
            )
        )

    async def run(self) -> ScaleReport:
        try:
            await self.kubevirt.start(sync_timeout=120)
            await self.quotas.start()
            await self._setup()
            await self.product.start()
            if self.beside is not None:
                await self.beside.start()
            if isinstance(self.product, HarvesterRealProduct):
                self.say(
                    f"Harvester {self.cluster.harvester_version}'s controllers lead, no webhook "
                    "of ours; their writes counted from the audit log"
                )
            else:
                beside = (
                    f", beside Harvester {self.cluster.harvester_version}'s controllers "
                    "(quotas adopted)"
                    if self.cluster.harvester_version
                    else ""
                )
                self.say(
                    f"controller and webhook running as deployed{beside} (logs in {self.workdir})"
                )
            for index, step in enumerate(self.plan.steps()):
                await self._step_and_baseline(index, step)
            self.report.drift = self.quotas.drift(self.bases)
            self.report.stale = self.quotas.stale()
            self.report.controller_rss_bytes = (await self.product.metrics()).rss_bytes
            return self.report
        finally:
            await self._teardown()

    async def _step_and_baseline(self, index: int, step: Step) -> None:
        """`step` in the quota namespaces and, with a baseline, in their twins (and headroom
        twins); the order is rotated by one each step, from `ScaleOptions.arm_offset`
        (`rotated`), so that no arm always runs on another's tail."""
        arms: list[tuple[list[StepResult], Step, str]] = [(self.report.steps, step, "")]
        if self.options.baseline:
            arms.append((self.report.baseline_steps, self.plan.baseline_of(step), "no quota: "))
        if self.headroom_namespaces:
            label = f"{ARM_HEADROOM}: "
            arms.append((self.report.headroom_steps, self.plan.headroom_of(step), label))
        for results, arm, label in rotated(arms, index + self.options.arm_offset):
            results.append(await self._step(arm, index))
            self.say(label + results[-1].line())
            if self.report.has_breakdown:
                self.say(results[-1].breakdown_line())

    # Setup --------------------------------------------------------------------------------------

    @property
    def vms(self) -> int:
        """The VMs of the run: the plan's, once per arm."""
        return self.plan.vms * (1 + bool(self.baseline_namespaces) + bool(self.headroom_namespaces))

    async def _setup(self) -> None:
        started = self.clock.monotonic()
        for namespace in self.namespaces:
            await self._create_namespace(namespace)
        for namespace in self.baseline_namespaces:
            await self._create_baseline_namespace(namespace)
        for namespace in self.headroom_namespaces:
            await self._create_headroom_namespace(namespace)
        for namespace in self._all_namespaces:
            await self._await_service_account(namespace)
            await self._delete_unfinished_migrations(namespace)
        self.say(f"{len(self._all_namespaces)} namespaces; creating {self.vms} VMs")
        await self._create_vms()
        await self._await_running(started)
        for namespace in self.namespaces:
            self.bases[namespace] = await self._close_quota(namespace)
            if self.report.strategy == "harvester":
                await self._annotate_rancher_base(namespace, self.bases[namespace])
                # Harvester's resourcequota controller may have set the quota to a Rancher base
                # a kept cluster's earlier run left, between the two writes: closed again, it
                # finds the quota at the new base and has nothing to write.
                await self._close_quota(namespace)
        self.report.setup_seconds = self.clock.monotonic() - started
        self.report.vms_running = self.kubevirt.running_vmis()
        self.say(
            f"{self.report.vms_running} VMs running, quotas closed, in "
            f"{self.report.setup_seconds:.0f}s"
        )

    async def _create_namespace(self, namespace: str) -> None:
        """Creates the namespace and its open quota; a namespace a kept cluster has from an
        earlier run is taken over (`_takeover`) with its quota and VMs, so a rerun with
        ``--keep`` skips the VMs' creation."""
        labels = {RUN_LABEL: self.run_id}
        try:
            await self.api.create(NAMESPACES, {"metadata": {"name": namespace, "labels": labels}})
        except errors.AlreadyExists:
            await self.api.patch(NAMESPACES, namespace, self._takeover())
        quota = {
            "metadata": {"name": QUOTA_NAME, "labels": {LABEL_DEFAULT_RESOURCE_QUOTA: "true"}},
            "spec": {"hard": dict(OPEN_HARD)},
        }
        with contextlib.suppress(errors.AlreadyExists):
            await self.api.create(RESOURCE_QUOTAS, quota, namespace)

    def _takeover(self) -> dict[str, Any]:
        """The patch that makes a kept namespace this run's: its label and, for our controller,
        no Rancher base annotation left by a Harvester run on the same cluster (with it, our
        controller would take Rancher's text, at Harvester's closed keys, for the base)."""
        meta: dict[str, Any] = {"labels": {RUN_LABEL: self.run_id}}
        if self.report.strategy != "harvester":
            meta["annotations"] = {CATTLE_ANNOTATION_RESOURCE_QUOTA: None}
        return {"metadata": meta}

    async def _create_baseline_namespace(self, namespace: str) -> None:
        """A twin namespace: no quota, not labelled with the run (the webhook never sees it)."""
        with contextlib.suppress(errors.AlreadyExists):
            await self.api.create(NAMESPACES, {"metadata": {"name": namespace}})

    async def _create_headroom_namespace(self, namespace: str) -> None:
        """A headroom twin: not labelled with the run (no webhook of ours), its quota on the
        same keys as the run's, open (OPEN_HARD) and without the managed label: no controller
        raises or restores it."""
        with contextlib.suppress(errors.AlreadyExists):
            await self.api.create(NAMESPACES, {"metadata": {"name": namespace}})
        quota = {"metadata": {"name": QUOTA_NAME}, "spec": {"hard": dict(OPEN_HARD)}}
        with contextlib.suppress(errors.AlreadyExists):
            await self.api.create(RESOURCE_QUOTAS, quota, namespace)

    async def _delete_unfinished_migrations(self, namespace: str) -> None:
        """Deletes the migrations an earlier run on a kept cluster left unfinished (Harvester's
        raise falls 15m short of a target pod, which then stays refused for good): they would
        hold their VMs and KubeVirt's parallel-migration slots through this run's steps."""
        listed = await self.api.list(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, namespace)
        for migration in listed.get("items") or []:
            if str((migration.get("status") or {}).get("phase") or "") in FINAL_PHASES:
                continue
            name = str(migration["metadata"]["name"])
            self.say(f"  deleting {namespace}/{name}, left unfinished by an earlier run")
            with contextlib.suppress(errors.NotFound):
                await self.api.delete(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, name, namespace)

    @property
    def _all_namespaces(self) -> list[str]:
        return [*self.namespaces, *self.baseline_namespaces, *self.headroom_namespaces]

    async def _await_service_account(self, namespace: str) -> None:
        """Launcher pods need the namespace's default service account, which
        kube-controller-manager creates a moment after the namespace."""
        for _ in range(600):
            with contextlib.suppress(errors.NotFound):
                await self.api.get(SERVICE_ACCOUNTS, "default", namespace)
                return
            await self.clock.sleep(POLL)
        raise TimeoutError(f"no default service account in {namespace}")

    async def _create_vms(self) -> None:
        gate = asyncio.Semaphore(self.plan.create_concurrency)

        async def create(namespace: str, name: str) -> None:
            spec = VMSpec(
                name,
                cores=self.plan.vm_cores,
                memory=self.plan.vm_memory,
                termination_grace_period_seconds=1,
                migration_duration=self.plan.migration_seconds,
            )
            async with gate:
                with contextlib.suppress(errors.AlreadyExists):  # a retried create that landed
                    await _retrying(lambda: self.kubevirt.create_vm(spec, namespace, wait=False))

        everything = [
            *self.plan.all_vms(),
            *(self.plan.baseline_vms() if self.baseline_namespaces else ()),
            *(self.plan.headroom_vms() if self.headroom_namespaces else ()),
        ]
        await asyncio.gather(*(create(ns, vm) for ns, vm in everything))

    async def _await_running(self, started: float) -> None:
        timeout = 300.0 + self.vms * 0.5
        last = -1
        while (running := self.kubevirt.running_vmis()) < self.vms:
            elapsed = self.clock.monotonic() - started
            if elapsed > timeout:
                raise TimeoutError(f"only {running} of {self.vms} VMs ran in {timeout:.0f}s")
            if running // 500 != last // 500:
                self.say(f"  {running}/{self.vms} VMs running after {elapsed:.0f}s")
            last = running
            await self.clock.sleep(1.0)

    async def _close_quota(self, namespace: str) -> ResourceList:
        """Sets the quota's hard to what the namespace uses on the closed keys (CLOSED_KEYS, or
        HARVESTER_CLOSED_KEYS for Harvester's run; the others stay open); returns that base."""
        closed = HARVESTER_CLOSED_KEYS if self.report.strategy == "harvester" else CLOSED_KEYS
        for _ in range(20):
            quota = await self.api.get(RESOURCE_QUOTAS, QUOTA_NAME, namespace)
            used = (quota.get("status") or {}).get("used") or {}
            hard = {key: str(used.get(key, "0")) for key in closed}
            hard.update({key: OPEN_HARD[key] for key in CLOSED_KEYS if key not in closed})
            quota["spec"]["hard"] = hard
            _drop_rooms(quota)
            if self.report.strategy == "harvester":
                drop_adoption(quota)
            try:
                await self.api.update(RESOURCE_QUOTAS, quota)
            except errors.Conflict:
                continue
            return resources.parse_resource_list(hard)
        raise RuntimeError(f"could not close the quota of {namespace}: conflicts")

    async def _annotate_rancher_base(self, namespace: str, base: ResourceList) -> None:
        """Rancher's base annotation on the namespace, at the closed quota: Harvester's
        controllers raise and restore a quota only in a namespace Rancher manages."""
        text = format_namespace_resource_quota(base)
        patch = {"metadata": {"annotations": {CATTLE_ANNOTATION_RESOURCE_QUOTA: text}}}
        await self.api.patch(NAMESPACES, namespace, patch)

    # Steps --------------------------------------------------------------------------------------

    async def _create_migration(self, namespace: str, vm: str, name: str) -> str:
        """Creates migration `name` of `vm`, retried on throttling and server errors (see
        `_retrying`); returns `name`. The name is fixed, not generated, so that a retry of a create
        the API server carried out before it failed finds that migration (AlreadyExists) instead
        of making the VM a second one."""

        async def once() -> str:
            try:
                return await self.kubevirt.migrate(vm, namespace, name=name)
            except errors.AlreadyExists:
                return name

        return await _retrying(once)

    def _fails_over(self, step: Step) -> bool:
        """True for the step whose leader is killed: the first drain wave of a failover run."""
        return (
            self.options.failover
            and self.report.failover is None
            and is_quota_drain_wave(step, self.plan)
        )

    async def _step(self, step: Step, index: int) -> StepResult:
        """Runs `step` (the run's `index`-th: it names the step's migrations)."""
        await self._quiet()
        fails_over = self._fails_over(step)
        # In the failover step the counters are the standby's: it leads by the step's end.
        metrics_before = await self.product.metrics(standby=fails_over)
        beside_before = await self._beside_writes()
        audit_before = await self._audit_mark()
        conflicts_before = await self._pod_create_conflicts()
        procs_before = self._processes()
        started = self.clock.monotonic()
        step_began = self.clock.now()
        created: dict[tuple[str, str], _Created] = {}
        create_seconds: list[float] = []
        # A failover step kills the leader first: every room of the wave is the standby's.
        killing = await self._kill_leader() if fails_over else None

        async def migrate(namespace: str, vm: str) -> None:
            asked = self.clock.monotonic()
            name = await self._create_migration(namespace, vm, f"{vm}-{self.run_id}-{index}")
            exists = self.clock.monotonic()
            created[(namespace, name)] = _Created(vm, asked, exists)
            create_seconds.append(exists - asked)

        await asyncio.gather(*(migrate(ns, vm) for ns, vm in step.migrations))
        done_timeout = step_wait_seconds(self.options, len(step.migrations))
        if not await self.kubevirt.records.wait_for(lambda: self._all_done(created), done_timeout):
            self.say(f"  {step.name}: not every migration had an outcome after {done_timeout:.0f}s")
        finished = self.clock.monotonic()
        settled = await self._settle(done_timeout)
        if killing is not None:
            self.report.failover = self._failover_times(await killing, created)
            self.say(self.report.failover.line())
        metrics = (await self.product.metrics()).minus(metrics_before)
        beside_after = await self._beside_writes()
        audited = await self._audited(audit_before)
        conflicts_after = await self._pod_create_conflicts()
        api_409 = (
            None
            if conflicts_before is None or conflicts_after is None
            else conflicts_after - conflicts_before
        )
        procs = {
            k: v.cpu_seconds - procs_before[k].cpu_seconds for k, v in self._processes().items()
        }
        records = {key: self.kubevirt.records.get(*key) for key in created}
        raised = {
            key: moment
            for key, one in created.items()
            if (moment := self._raised(key[0], one)) is not None
        }
        latencies = [max(0.0, moment - created[key].exists) for key, moment in raised.items()]
        since_request = [moment - created[key].asked for key, moment in raised.items()]
        target_admitted = [
            record.admitted.mono - created[key].asked
            for key, record in records.items()
            if record is not None and record.admitted is not None
        ]
        succeeded_after = [
            record.finished.mono - created[key].asked
            for key, record in records.items()
            if record is not None
            and record.outcome is Outcome.SUCCEEDED
            and record.finished is not None
        ]
        return summarize_step(
            step,
            records=[r for r in records.values() if r is not None],
            latencies=latencies,
            create_seconds=create_seconds,
            since_request=since_request,
            target_admitted=target_admitted,
            succeeded_after=succeeded_after,
            metrics=metrics,
            cpu=procs,
            seconds=step_wall_seconds(started, finished, records.values()),
            settle_seconds=settled,
            drift=len(self.quotas.drift(self.bases)),
            stale=len(self.quotas.stale()),
            pod_create_409=api_409,
            beside_writes={k: v - beside_before.get(k, 0.0) for k, v in beside_after.items()},
            run_namespace_writes=self._run_namespace_writes(audited),
            **self._timeline(created, records, audited, step_began),
            by_twin=migration_times(
                (self.plan.twin_key(key[0], one.vm), records[key], one.asked)
                for key, one in created.items()
            ),
        )

    async def _audit_mark(self) -> AuditMark | None:
        """Where the audit log ends now, for our arm (Harvester's writes are counted otherwise);
        None (logged) where the cluster keeps no audit log (a kept cluster started without
        one): the step's count is then unknown, never a silent 0."""
        if not isinstance(self.product, Product):
            return None
        mark = await asyncio.to_thread(self.audit.mark)
        if mark.inode is None:
            log.warning("no audit log at %s: our writes per step are not counted", self.audit.path)
            return None
        return mark

    async def _audited(self, mark: AuditMark | None) -> list[AuditRecord] | None:
        """The audit log's records since `mark`; None without a mark, or (logged) if the log
        rotated past it."""
        if mark is None:
            return None
        try:
            return await asyncio.to_thread(self.audit.since, mark)
        except ClusterError as error:
            log.warning("the step's audited writes are not counted: %s", error)
            return None

    def _run_namespace_writes(self, records: list[AuditRecord] | None) -> int | None:
        """Our controller's accepted writes among `records` (the step's audit log) in the run's
        quota namespaces; None without them."""
        if records is None:
            return None
        ours = frozenset(self.namespaces)
        return sum(
            1
            for record in records
            if record.user == CONTROLLER_USER
            and record.namespace in ours
            and record.verb in WRITE_VERBS
            and record.accepted
        )

    def _timeline(
        self,
        created: Mapping[tuple[str, str], _Created],
        records: Mapping[tuple[str, str], MigrationRecord | None],
        audited: list[AuditRecord] | None,
        began: datetime.datetime,
    ) -> dict[str, Any]:
        """`summarize_step`'s ``timeline`` (timeline.hop_seconds) and ``timeline_counts``
        (timeline.counts) from the step's audit `records` and the webhook's log since the step
        `began`; neither without the audit log."""
        if audited is None or not isinstance(self.product, Product):
            return {}
        quota = frozenset(self.namespaces)
        migrations = [
            timeline.Migration(
                namespace,
                one.vm,
                name,
                room_keys=room_keys(one.vm),
                succeeded=_succeeded_at(records.get((namespace, name))),
                webhook=namespace in quota,
            )
            for (namespace, name), one in created.items()
        ]
        answers = timeline.webhook_answers(self.product.workdir / "webhook.log", began)
        found = timeline.assemble(migrations, audited, answers)
        return {"timeline": timeline.hop_seconds(found), "timeline_counts": timeline.counts(found)}

    async def _beside_writes(self) -> dict[str, float]:
        """Harvester's own controllers' writes so far by kind, when they run beside ours."""
        if self.beside is None:
            return {}
        return dict((await self.beside.metrics()).writes)

    async def _pod_create_conflicts(self) -> float | None:
        """The API server's count of pod creates answered 409 so far; None (logged) if its
        /metrics cannot be read: the step's other figures stand without it."""
        try:
            return await pod_create_conflicts(self.api)
        except (errors.ApiError, ValueError) as error:
            log.warning("cannot read the API server's /metrics: %s", error)
            return None

    async def _kill_leader(self) -> asyncio.Future[tuple[float, float | None]]:
        """Kills the leader; returns a future of (the kill's moment, the moment the Lease named
        the standby or None), which awaits the takeover meanwhile."""
        product = self.product
        assert isinstance(product, Product)
        survivor, moment = await product.kill_leader(self.clock)
        self.say(f"  SIGKILLed the leading controller; awaiting {survivor}")

        async def takeover() -> tuple[float, float | None]:
            taken = await failover.await_holder(
                self.api, SYSTEM_NAMESPACE, product.lease_name, survivor, self.clock
            )
            return moment, taken

        return asyncio.ensure_future(takeover())

    def _failover_times(
        self,
        killing: tuple[float, float | None],
        created: Mapping[tuple[str, str], _Created],
    ) -> failover.FailoverTimes:
        moment, taken = killing
        raises = (self.quotas.raised_at(ns, one.vm, moment) for (ns, _), one in created.items())
        first, count = failover.first_after(raises, moment)
        cold = "--cold-standby" in self.options.process_args.controller
        return failover.FailoverTimes(
            standby_caches="cold" if cold else "warm",
            takeover=None if taken is None else taken - moment,
            first_raise=first,
            raised_after_kill=count,
        )

    def _raised(self, namespace: str, created: _Created) -> float | None:
        """When the run saw the VM's room appear for a migration created as `created` says. A
        room may appear before the create's response reaches us (the controller may see the
        migration first): one that appeared after the request was sent counts, as latency 0 (a
        step starts only when no room is held, so it cannot be another migration's)."""
        return self.quotas.raised_at(
            namespace,
            created.vm,
            created.asked,
            vmi_uid=self.kubevirt.vmi_uid(namespace, created.vm),
            harvester=self.report.strategy == "harvester",
        )

    def _all_done(self, created: Mapping[tuple[str, str], _Created]) -> bool:
        for key in created:
            record = self.kubevirt.records.get(*key)
            if record is None or not record.done:
                return False
        return True

    async def _settle(self, timeout: float) -> float:
        """Seconds until every quota is back at its base with no migration annotation (the
        timeout if never)."""
        started = self.clock.monotonic()
        while self.clock.monotonic() - started < timeout:
            if not self.quotas.drift(self.bases) and not self.quotas.stale():
                return self.clock.monotonic() - started
            await self.clock.sleep(POLL)
        return timeout

    def _processes(self) -> dict[str, ProcessSample]:
        pids = {p.name: p.pid for p in self.cluster.processes if p.name in MEASURED}
        pids.update(self.product.pids)
        return {name: ProcessSample.of(pid) for name, pid in pids.items()}

    async def _quiet(self) -> None:
        """Waits (at most `quiet_timeout`) until the cluster and the product together use under
        QUIET_CORES, so that a step's CPU is its own and not the previous step's tail."""
        deadline = self.clock.monotonic() + self.options.quiet_timeout
        while self.clock.monotonic() < deadline:
            before = self._processes()
            await self.clock.sleep(QUIET_WINDOW)
            after = self._processes()
            used = sum(after[k].cpu_seconds - before[k].cpu_seconds for k in after if k in before)
            if used / QUIET_WINDOW < QUIET_CORES:
                return

    # Teardown -----------------------------------------------------------------------------------

    async def _teardown(self) -> None:
        await self.product.stop()
        await self.quotas.stop()
        await self.kubevirt.stop()
        if self.options.delete_namespaces:
            for namespace in self._all_namespaces:
                with contextlib.suppress(errors.ApiError):
                    await self.api.delete(NAMESPACES, namespace)


def _succeeded_at(record: MigrationRecord | None) -> datetime.datetime | None:
    """When the run's KubeVirt watch saw the migration Succeeded (None: it did not)."""
    if record is None or record.outcome is not Outcome.SUCCEEDED or record.finished is None:
        return None
    return record.finished.at


def drop_adoption(quota: dict[str, Any]) -> None:
    """Gives a quota our controller adopted on a kept cluster (a run of ours beside Harvester's
    controllers: the skip annotation with our marker) back to Harvester, as the controller does
    when adoption is turned off: with the skip annotation Harvester's resourcequota controller
    would never raise it. A skip annotation without our marker is left: not ours."""
    annotations = (quota.get("metadata") or {}).get("annotations") or {}
    if annotations.get(ANNOTATION_ADOPTED) is not None:
        annotations.pop(ANNOTATION_ADOPTED)
        annotations.pop(ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING, None)


def process_args_on(cluster: ClusterInfo, args: ProcessArgs) -> ProcessArgs:
    """Our processes' flags on `cluster`: on a cluster running Harvester's controllers the
    controller adopts its quotas (``--adopt-harvester-quotas``, the chart's default on a
    Harvester), unless the flags say so already."""
    flag = "--adopt-harvester-quotas"
    if cluster.harvester_version is None or flag in args.controller:
        return args
    return ProcessArgs((*args.controller, flag), args.webhook)


def _drop_rooms(quota: dict[str, Any]) -> None:
    """Removes every migration room annotation (``harvesterhci.io/migrating*``: ours and
    Harvester's) from `quota`: closed, a quota holds no room, and one an earlier run on a kept
    cluster left (Harvester's raise that is never given back) would be adopted as held."""
    annotations = (quota.get("metadata") or {}).get("annotations") or {}
    for key in [k for k in annotations if k.startswith(MIGRATING_PREFIX)]:
        del annotations[key]


def rotated(items: list[T], index: int) -> list[T]:
    """`items` rotated left by `index` (modulo their count): with two arms, the second goes
    first on odd steps; with three, each arm goes first, second and last in turn."""
    if not items:
        return items
    shift = index % len(items)
    return items[shift:] + items[:shift]


async def _retrying(call: Callable[[], Awaitable[T]], attempts: int = 5) -> T:
    """`call`, retried on throttling and server errors (the API server under load answers 429
    and 5xx, never a reason to lose a VM or a migration)."""
    for attempt in range(1, attempts + 1):
        try:
            return await call()
        except errors.ApiError as error:
            if attempt == attempts or not (error.status == 429 or error.status >= 500):
                raise
            await asyncio.sleep(0.5 * attempt)
    raise AssertionError("unreachable")
