"""Running one scenario on a cluster with one strategy, and what it observed.

The runner plays everyone else in the incident: KubeVirt (harvester_quota.testbench.sim.kubevirt), Rancher's quota sync
(harvester_quota.testbench.sim.rancher) when the scenario has one, and the users (a separate client identity, so the
webhook validates them as tenants). It samples every managed quota twice a second for the
timeline, applies the steps in order, waits for the migrations, lets the quotas settle, and
checks the invariants and the file's expectations.

Each run uses its own namespaces (the file's names plus a run id), so two runs never share
anything but the cluster; cluster-wide state it touches (the overhead-ratio setting, cordoned
nodes) is restored when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ...apis.harvester import SETTINGS
from ...generic import errors
from ...generic.client import ApiClient
from ...generic.meta import annotations_of
from ...generic.resource import NAMESPACES, NODES, RESOURCE_QUOTAS, Object
from ...generic.tasks import cancel_and_wait
from ...preflight import Plan, Strategy, preflight
from ...preflight.read import read_cluster
from ...preflight.report import summary
from ...util import resources
from ...util.annotations import (
    ANNOTATION_MIGRATING_SCALING_RESYNC_NEEDED,
    CATTLE_ANNOTATION_RESOURCE_QUOTA,
    LABEL_DEFAULT_RESOURCE_QUOTA,
    parse_migration_annotations,
)
from ...util.overhead import kubevirt_ratio_from_harvester_setting
from ...util.quantity import Quantity
from ...util.rancher.annotation import LIMIT_FIELDS, parse_namespace_resource_quota
from ...util.resourcequota.base import ANNOTATION_RANCHER_BASE, rancher_base_text
from ...util.resources import ResourceList
from ..localcluster import ClusterInfo
from ..localcluster.cluster import client_config_from_files
from ..sim.kubevirt.config import KubeVirtConfig, VMStart
from ..sim.kubevirt.handler import HandlerTimings
from ..sim.kubevirt.limits import ParallelLimits
from ..sim.kubevirt.objects import VMSpec
from ..sim.kubevirt.phases import MigrationTimings, StepTimings
from ..sim.kubevirt.record import MigrationRecord, Outcome
from ..sim.kubevirt.simulator import KubeVirtSimulator
from ..sim.rancher.derive import Project
from ..sim.rancher.simulator import RancherQuotaSync
from ..sim.rancher.twin import RancherWebhookTwin
from ..virtcontroller import VirtControllerDriver
from .evidence import LogCapture, Look, facts_of
from .schema import Scenario, Step
from .strategies import HARVESTER_STRATEGIES, HarvesterRealStrategy, HarvesterStrategy, OurStrategy
from .versions import check_plays_on
from .writers import RunWriters, WriterMarks

log = logging.getLogger(__name__)

Paced = TypeVar("Paced", bound=StepTimings)

RATIO_SETTING = "additional-guest-memory-overhead-ratio"
SAMPLE_INTERVAL = 0.5
SETTLE_TIMEOUT = 20.0
FINAL_WAIT = 600.0
FINAL_WAIT_EXPECTING_UNFINISHED = 5.0
"""When the scenario says a migration stays stuck, the end waits only this long for the others,
and the settle as long: the room a strategy raised for the stuck one stays raised, so its quota
never settles and a full SETTLE_TIMEOUT would be waited out in vain."""
STALE_PREFIXES = ("harvesterhci.io/migrating", "harvester-quota.io/applied")
SETTLED_FLAGS = {ANNOTATION_MIGRATING_SCALING_RESYNC_NEEDED: "false"}
"""Keys under STALE_PREFIXES whose value here records no raise: Harvester v1.9's resync flag stays
on the quota at "false" once its scale-up is applied (the port's every run ends with it), so the
settle would otherwise wait out SETTLE_TIMEOUT after every run of the port. The report still
lists the key among those left (`stale_annotations`: what is on the quota, not what it means)."""
RANCHER_TO_HARD = dict(LIMIT_FIELDS)


@dataclass
class Sample:
    """One look at one quota."""

    at: float
    namespace: str
    hard: dict[str, str]
    used: dict[str, str]
    base: dict[str, str]


@dataclass
class RunResult:
    """Everything a report is made of."""

    scenario: Scenario
    strategy: str
    run_id: str
    namespaces: dict[str, str]
    started: float
    seconds: float = 0.0
    samples: list[Sample] = field(default_factory=list)
    migrations: list[MigrationRecord] = field(default_factory=list)
    vm_starts: dict[str, str | None] = field(default_factory=dict)
    """VM -> None if it started, else the refusal."""
    writes: dict[str, int] = field(default_factory=dict)
    """Scenario namespace -> ResourceQuota writes by the strategy from the first step on."""
    setup_writes: dict[str, int] = field(default_factory=dict)
    """Scenario namespace -> the strategy's writes before the first step: once per quota, not
    per migration (adopting it from Harvester's controllers, recording a standalone base)."""
    final_quotas: dict[str, Object] = field(default_factory=dict)
    events: list[tuple[float, str]] = field(default_factory=list)
    step_errors: list[str] = field(default_factory=list)
    looks: list[Look] = field(default_factory=list)
    """Who raised what, at every sample (evidence.facts_of): the report keeps the changes."""
    final_namespaces: dict[str, Object] = field(default_factory=dict)
    final_at: float = 0.0
    """Seconds into the run of the final look."""
    log: list[dict[str, Any]] = field(default_factory=list)
    """Our controllers' and the bench Rancher agent's log lines about the run's namespaces."""
    rancher_actions: list[dict[str, Any]] = field(default_factory=list)
    """The bench Rancher agent's writes of the run's quotas."""
    kubevirt: dict[str, str | None] = field(default_factory=dict)
    """Who played KubeVirt and beside which Harvester (``played_by``)."""
    preflights: list[dict[str, Any]] = field(default_factory=list)
    """The JSON form of each preflight run before a drain (this run's namespaces only)."""
    metrics: str | None = None
    """Strategy ``ours``: the Prometheus text of its controllers and webhook after the run
    (exposition.py), namespaces by their scenario names; None for the other strategies."""
    writers: RunWriters | None = None
    """Everyone's quota and namespace writes, and Harvester's error lines, on a local cluster
    (writers.py); None elsewhere."""

    def original(self, namespace: str) -> str:
        """The scenario's name for a run namespace."""
        for name, real in self.namespaces.items():
            if real == namespace:
                return name
        return namespace


ProgressHook = Callable[["ScenarioRun"], None]


class ScenarioRun:
    """One scenario, one strategy, one cluster."""

    def __init__(
        self,
        scenario: Scenario,
        api: ApiClient,
        cluster: ClusterInfo | None,
        *,
        strategy: str = "ours",
        workdir: Path,
        progress: ProgressHook | None = None,
    ) -> None:
        self.scenario = scenario
        self.api = api
        self.cluster = cluster
        self.strategy_name = strategy
        self.workdir = workdir
        self.progress = progress
        self.run_id = uuid.uuid4().hex[:5]
        self.namespaces = {
            ns.name: _run_namespace(ns.name, self.run_id) for ns in scenario.namespaces
        }
        self.result = RunResult(
            scenario, strategy, self.run_id, self.namespaces, started=time.monotonic()
        )
        self.result.kubevirt = played_by(scenario, cluster)
        self.bases: dict[str, ResourceList] = {}
        self.kubevirt: KubeVirtSimulator | VirtControllerDriver | None = None
        self.rancher: RancherQuotaSync | None = None
        self.protection: RancherWebhookTwin | None = None
        self.strategy: OurStrategy | HarvesterStrategy | HarvesterRealStrategy | None = None
        self.tenant: ApiClient | None = None
        self._sampler: asyncio.Task[None] | None = None
        self._previous_ratio: Object | None = None
        self._cordoned: set[str] = set()
        self._last_namespace: dict[str, Object] = {}
        self._log = LogCapture(list(self.namespaces.values()), self.now)
        self._created: set[tuple[str, str]] = set()
        """(namespace, name) of every migration this run made or a drain made."""
        self._writer_marks = WriterMarks.take(cluster) if cluster is not None else None
        self._writes_before_steps: Counter[str] = Counter()

    # Lifecycle ----------------------------------------------------------------------------------

    async def run(self) -> RunResult:
        self._log.attach()
        try:
            await self._setup()
            for step in self.scenario.steps:
                await self._apply(step)
            await self._finish()
        finally:
            try:
                await self._teardown()
                if isinstance(self.strategy, OurStrategy):
                    rename = {real: name for name, real in self.namespaces.items()}
                    self.result.metrics = self.strategy.exposition(rename)
            finally:
                self._log.detach()
                self.result.log = self._log.as_report()
                self.result.rancher_actions = self._rancher_actions()
        self.result.seconds = time.monotonic() - self.result.started
        return self.result

    def now(self) -> float:
        return time.monotonic() - self.result.started

    def note(self, text: str) -> None:
        self.result.events.append((self.now(), text))
        log.info("[%s %s] %s", self.scenario.name, self.strategy_name, text)

    async def _setup(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.tenant = self._tenant_client()
        self.kubevirt = self._new_kubevirt()
        await self.kubevirt.start()
        await self._set_ratio(self.scenario.ratio, remember=True)
        await self._create_namespaces()
        self.strategy = self._new_strategy()
        await self.strategy.start()
        self._sampler = asyncio.ensure_future(self._sample_loop())
        await self._create_vms()
        await self._await_adoption()
        self._writes_before_steps = Counter(self.strategy.writes())

    async def _await_adoption(self) -> None:
        """Beside Harvester's controllers, until our strategy has adopted every quota: its one
        write per quota belongs to the setup, not to a migration. Not where Rancher's write
        protection is on: there only Rancher's agent writes the quota (ours nor Harvester's)."""
        if not isinstance(self.strategy, OurStrategy) or not self.strategy.adopt_harvester:
            return
        if self.protection is not None:
            return
        deadline = time.monotonic() + SETTLE_TIMEOUT
        for real in self.namespaces.values():
            while not await self._adopted(real):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the quota of namespace {real} was never adopted")
                await asyncio.sleep(SAMPLE_INTERVAL / 5)

    async def _adopted(self, namespace: str) -> bool:
        quota = await self.quota(namespace)
        return quota is not None and parse_migration_annotations(annotations_of(quota)).adopted

    def _new_kubevirt(self) -> KubeVirtSimulator | VirtControllerDriver:
        """KubeVirt's real virt-controller when the cluster runs it (of the scenario's version),
        else the simulator; see `uses_real_kubevirt`."""
        limits = ParallelLimits(self.scenario.parallel_cluster, self.scenario.parallel_per_node)
        namespaces = frozenset(self.namespaces.values())
        if uses_real_kubevirt(self.scenario, self.cluster):
            assert self.cluster is not None and self.cluster.kubevirt_version is not None
            return VirtControllerDriver(
                self.api,
                kubevirt_version=self.cluster.kubevirt_version,
                namespaces=namespaces,
                timings=self._handler_timings(),
                limits=limits,
            )
        return KubeVirtSimulator(
            self.api,
            config=KubeVirtConfig(
                kubevirt_version=self.scenario.kubevirt_version,
                limits=limits,
                timings=self._sim_timings(),
                namespaces=namespaces,
            ),
        )

    def _sim_timings(self) -> MigrationTimings:
        """The simulator's pace; the scenario's source_pod_grace is the source pod's grace."""
        seed, default = MigrationTimings.like_v121_seed(), MigrationTimings()
        return self._paced(seed, default, grace_field="source_pod_grace_seconds")

    def _handler_timings(self) -> HandlerTimings:
        """The node side's pace; the scenario's source_pod_grace is how long the source launcher
        takes to exit after its migration succeeded."""
        seed, default = HandlerTimings.like_v121_seed(), HandlerTimings()
        return self._paced(seed, default, grace_field="source_shutdown")

    def _paced(self, seed: Paced, default: Paced, *, grace_field: str) -> Paced:
        """`seed` when the scenario asks for the seed's pace (timings: seed), else `default`; with
        the scenario's source_pod_grace, if it sets one, in `grace_field` (as that field's type)."""
        timings = seed if self.scenario.timings == "seed" else default
        grace = self.scenario.source_pod_grace
        if grace is None:
            return timings
        as_field_type = type(getattr(timings, grace_field))
        return dataclasses.replace(timings, **{grace_field: as_field_type(grace)})

    def _kubevirt_release(self) -> str:
        """The KubeVirt the strategies are told of: the virt-controller playing the scenario,
        else the release the simulator plays."""
        return self.result.kubevirt.get("virt_controller") or self.scenario.kubevirt_version

    def _new_strategy(self) -> OurStrategy | HarvesterStrategy | HarvesterRealStrategy:
        if self.strategy_name == "harvester":
            return HarvesterRealStrategy(self.cluster)
        if self.strategy_name == "harvester-port":
            return HarvesterStrategy(
                self.api,
                kubevirt_version=self._kubevirt_release(),
                compensation=self.scenario.harvester_compensation,
            )
        return OurStrategy(
            self.api,
            self.cluster,
            kubevirt_version=self._kubevirt_release(),
            namespaces=list(self.namespaces.values()),
            workdir=self.workdir,
            users=frozenset({"admin"}),
        )

    def _tenant_client(self) -> ApiClient:
        """Users act with their own identity, so the webhook validates them as tenants (on a
        cluster whose CA we do not hold, they act with the runner's own identity)."""
        if self.cluster is None:
            return ApiClient(self.api.config)
        pair = self.cluster.certificate_authority().issue(
            "scenario-tenant", organizations=("system:masters",), client=True
        )
        cert, key = self.workdir / "tenant.crt", self.workdir / "tenant.key"
        pair.write(cert, key)
        return ApiClient(
            client_config_from_files(
                self.cluster.server, ca_file=self.cluster.ca_file, cert_file=cert, key_file=key
            )
        )

    async def _create_namespaces(self) -> None:
        project = scenario_project(self.scenario, self.run_id)
        if self.scenario.rancher is not None:
            self.rancher = RancherQuotaSync(
                self.api,
                projects=[project],
                version=self.scenario.rancher["version"],
            )
        for spec in self.scenario.namespaces:
            real = self.namespaces[spec.name]
            if spec.quota is not None:
                hard = {RANCHER_TO_HARD[k]: v for k, v in spec.quota.items()}
                annotations = project.namespace_annotations(hard)
                await self.api.create(
                    NAMESPACES, {"metadata": {"name": real, "annotations": annotations}}
                )
            else:
                await self.api.create(NAMESPACES, {"metadata": {"name": real}})
                await self.api.create(
                    RESOURCE_QUOTAS,
                    {
                        "metadata": {
                            "name": "default-quota",
                            "labels": {LABEL_DEFAULT_RESOURCE_QUOTA: "true"},
                        },
                        "spec": {"hard": dict(spec.hard or {})},
                    },
                    real,
                )
                self.bases[real] = resources.parse_resource_list(spec.hard or {})
        if self.rancher is not None:
            self.rancher.quota_client = await self._rancher_protection() or self.api
            await self.rancher.start()
        for real in self.namespaces.values():
            await self._wait_quota_ready(real)

    async def _rancher_protection(self) -> ApiClient | None:
        """Installs Rancher's write protection (the rancher-webhook twin) if the scenario asks
        for it; returns the client Rancher's agent then writes its quotas with (its sudo
        identity)."""
        if self.scenario.rancher is None or not self.scenario.rancher.get("protection"):
            return None
        if self.cluster is None:
            raise ValueError("rancher.protection needs the local cluster (its CAs)")
        self.protection = await RancherWebhookTwin.install(
            self.api,
            self.cluster,
            list(self.namespaces.values()),
            name=f"rancher.cattle.io-{self.run_id}",
        )
        return self.protection.sudo

    async def _wait_quota_ready(self, namespace: str) -> None:
        """Until the quota exists and its status is filled (admission refuses pods before)."""
        for _ in range(300):
            quota = await self.quota(namespace)
            if quota is not None and "used" in (quota.get("status") or {}):
                return
            await asyncio.sleep(0.1)
        raise RuntimeError(f"the quota of namespace {namespace} never became ready")

    async def _create_vms(self) -> None:
        for vm in self.scenario.vms:
            spec = VMSpec(
                name=vm.name,
                cores=vm.cores,
                memory=vm.memory,
                overcommit=self.scenario.overcommit,
                migration_duration=vm.migration_seconds,
                termination_grace_period_seconds=self.scenario.source_pod_grace or 1,
            )
            await self._start_vm(
                vm.name, self._creator(spec, self.namespaces[vm.namespace], vm.node)
            )

    def _creator(
        self, spec: VMSpec, namespace: str, node: str | None
    ) -> Callable[[], Awaitable[VMStart]]:
        kubevirt = self._sim()
        return lambda: kubevirt.create_vm(spec, namespace, node=node)

    def _sim(self) -> KubeVirtSimulator | VirtControllerDriver:
        if self.kubevirt is None:
            raise RuntimeError("KubeVirt is not running")
        return self.kubevirt

    async def _start_vm(self, name: str, start: Callable[[], Awaitable[VMStart]]) -> None:
        try:
            started = await start()
            refusal = started.refusal
        except errors.ApiError as error:
            refusal = error.message
        self.result.vm_starts[name] = refusal
        self.note(f"VM {name} " + ("started" if refusal is None else f"refused: {refusal}"))

    async def _finish(self) -> None:
        """Waits for every migration, then for the quotas to settle, then takes the final look."""
        assert self.kubevirt is not None
        stuck = self.scenario.expects_unfinished(self.strategy_name)
        await self._wait_migrations(FINAL_WAIT_EXPECTING_UNFINISHED if stuck else FINAL_WAIT)
        await self._settle(FINAL_WAIT_EXPECTING_UNFINISHED if stuck else SETTLE_TIMEOUT)
        self.result.final_at = self.now()
        for name, real in self.namespaces.items():
            quota = await self.quota(real)
            if quota is not None:
                self.result.final_quotas[name] = quota
                self._sample_final(name, real, quota)
            with contextlib.suppress(errors.ApiError):
                self.result.final_namespaces[name] = await self.api.get(NAMESPACES, real)
        writes = self.strategy.writes() if self.strategy is not None else Counter()
        before = self._writes_before_steps
        self.result.writes = {
            name: int(writes.get(real, 0) - before.get(real, 0))
            for name, real in self.namespaces.items()
        }
        self.result.setup_writes = {
            name: int(before.get(real, 0)) for name, real in self.namespaces.items()
        }
        self.result.migrations = self.kubevirt.records.all()
        if self._writer_marks is not None:
            self.result.writers = self._writer_marks.count(self.namespaces)

    async def _wait_migrations(self, timeout: float) -> None:
        """Until every migration this run created or saw has finished and, if it succeeded, its
        source pod is gone (one KubeVirt has not picked up yet counts as unfinished), and no VM
        waits on a drained node for its evacuation migration."""
        kubevirt = self._sim()
        records = kubevirt.records

        def finished() -> bool:
            seen = {(r.namespace, r.name) for r in records.all()}
            for namespace, name in self._created | seen:
                record = records.get(namespace, name)
                if record is None or not record.done:
                    return False
                if record.outcome is Outcome.SUCCEEDED and record.source_pod_gone is None:
                    return False
            return True

        deadline = time.monotonic() + timeout
        while await records.wait_for(finished, max(0.0, deadline - time.monotonic())):
            if not isinstance(kubevirt, VirtControllerDriver) or not await kubevirt.evacuating():
                return
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(SAMPLE_INTERVAL)
        self.note(f"migrations still unfinished after {timeout:.0f}s")

    async def _settle(self, timeout: float) -> None:
        """Lets the strategy bring quotas back (ours should; Harvester's may not)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            settled = []
            for real in self.namespaces.values():
                quota = await self.quota(real)
                await self._look_at_namespace(real)  # the base as it is now, not as sampled
                settled.append(self.at_base(real, quota))
            if all(settled):
                return
            await asyncio.sleep(0.5)

    async def _teardown(self) -> None:
        if self._sampler is not None:
            await cancel_and_wait([self._sampler])
        if self.strategy is not None:
            await self.strategy.stop()
        if self.kubevirt is not None:
            await self.kubevirt.stop()
        if self.rancher is not None:
            await self.rancher.stop()
        if self.protection is not None:
            await self.protection.remove()
        for node in self._cordoned:
            with contextlib.suppress(errors.ApiError):
                await self.api.patch(NODES, node, {"spec": {"unschedulable": None}})
        await self._restore_ratio()
        for real in self.namespaces.values():
            with contextlib.suppress(errors.ApiError):
                await self.api.delete(NAMESPACES, real)
        if self.tenant is not None:
            await self.tenant.close()

    # Quotas -------------------------------------------------------------------------------------

    async def quota(self, namespace: str) -> Object | None:
        listed = await self.api.list(
            RESOURCE_QUOTAS, namespace, label_selector=f"{LABEL_DEFAULT_RESOURCE_QUOTA}=true"
        )
        items = sorted(listed.get("items", []), key=lambda q: str(q["metadata"]["name"]))
        return items[0] if items else None

    async def base(self, namespace: str) -> ResourceList:
        """Rancher's annotation when the scenario has Rancher (the text recorded before our
        raise, while the annotation is the raise we wrote through it), else the hard the file
        (and the user's edits) set. With Rancher, from the namespace as last looked at."""
        if self.scenario.rancher is not None:
            return rancher_base_of(self._last_namespace.get(namespace))
        return self.bases.get(namespace, {})

    def at_base(self, namespace: str, quota: Object | None) -> bool:
        """Whether `quota` is back at its base, with no record of a raise left on it or (a raise
        through Rancher's annotation) on the namespace as last looked at. With Rancher the base
        is the one the namespace's annotation gives (`rancher_base_of`): during a raise through
        that annotation the annotation itself is the raise, so a quota copied from it is not
        at its base."""
        if quota is None:
            return False
        hard = (quota.get("spec") or {}).get("hard") or {}
        last_namespace = self._last_namespace.get(namespace)
        base = (
            self.bases.get(namespace)
            if self.scenario.rancher is None
            else rancher_base_of(last_namespace)
        )
        if not base:
            return False
        try:
            current = resources.parse_resource_list(hard)
        except ValueError:
            return False
        same = all(key in current and current[key] == value for key, value in base.items())
        stale = any(raise_record(k, v) for k, v in annotations_of(quota).items())
        raised_through_rancher = ANNOTATION_RANCHER_BASE in annotations_of(last_namespace)
        return same and not stale and not raised_through_rancher

    def _sample_final(self, name: str, real: str, quota: Object) -> None:
        """The final look as the timeline's last sample: the sampler stops when the last
        migration ends, and a picture drawn from its samples alone ended while a room could
        still be held (the give-back comes once the source pod is gone)."""
        base = self.bases.get(real, {})
        if self.scenario.rancher is not None:
            base = rancher_base_of(self._last_namespace.get(real))
        earlier = [s.base for s in self.result.samples if s.namespace == name]
        status = quota.get("status") or {}
        self.result.samples.append(
            Sample(
                at=self.result.final_at,
                namespace=name,
                hard=dict((quota.get("spec") or {}).get("hard") or {}),
                used=dict(status.get("used") or {}),
                # The picture draws the keys of the last sample's base: never an empty one.
                base=resources.to_json_dict(base) if base else (earlier[-1] if earlier else {}),
            )
        )

    async def _sample_loop(self) -> None:
        while True:
            for name, real in self.namespaces.items():
                try:
                    quota = await self.quota(real)
                    await self._look_at_namespace(real)
                    base = await self.base(real)
                except errors.ApiError:
                    continue
                self.result.looks.append(
                    Look(self.now(), name, facts_of(self._last_namespace.get(real), quota))
                )
                if quota is None:
                    continue
                status = quota.get("status") or {}
                self.result.samples.append(
                    Sample(
                        at=self.now(),
                        namespace=name,
                        hard=dict((quota.get("spec") or {}).get("hard") or {}),
                        used=dict(status.get("used") or {}),
                        base=resources.to_json_dict(base),
                    )
                )
            if self.progress is not None:
                self.progress(self)
            await asyncio.sleep(SAMPLE_INTERVAL)

    def _rancher_actions(self) -> list[dict[str, Any]]:
        """The bench Rancher agent's quota writes in this run's namespaces, to the end."""
        if self.rancher is None:
            return []
        return [
            {
                "at": round(action.at - self.result.started, 2),
                "namespace": self.result.original(action.namespace),
                "operation": action.operation.value,
                "hard": action.hard,
            }
            for action in self.rancher.actions
            if action.namespace in self.namespaces.values()
        ]

    async def _look_at_namespace(self, namespace: str) -> None:
        """Keeps the namespace as it is now (its annotations say who raised what)."""
        self._last_namespace[namespace] = await self.api.get(NAMESPACES, namespace)

    # Steps --------------------------------------------------------------------------------------

    async def _apply(self, step: Step) -> None:
        handler = getattr(self, "_step_" + step.kind.replace("-", "_"))
        self.note(f"step {step.kind}: {step.value if step.value is not None else ''}".rstrip(": "))
        try:
            await handler(step.value)
        except errors.ApiError as error:
            message = f"line {step.line}: {step.kind} failed: {error}"
            self.result.step_errors.append(message)
            self.note(message)

    def _vm(self, name: str) -> tuple[str, str]:
        vm = self.scenario.vm(name)
        return vm.name, self.namespaces[vm.namespace]

    async def _step_migrate(self, names: list[str]) -> None:
        kubevirt = self._sim()
        for name in names:
            vm, namespace = self._vm(name)
            self._created.add((namespace, await kubevirt.migrate(vm, namespace)))

    async def _step_drain(self, node: str) -> None:
        assert self.kubevirt is not None
        await self._preflight(node)
        self._cordoned.add(node)
        keys = await self.kubevirt.drain(node)
        for key in keys:
            namespace, _, name = key.partition("/")
            self._created.add((namespace, name))
        self.note(f"drain of {node}: {len(keys)} migrations")

    async def _preflight(self, node: str) -> None:
        """`harvester-quota preflight drain NODE` with this run's strategy, before the drain:
        its summary and blockers, for this run's namespaces, as notes (the report's events)."""
        strategy: Strategy = "harvester" if self.strategy_name in HARVESTER_STRATEGIES else "ours"
        try:
            state, _ = await read_cluster(self.api)
            report = preflight(state, Plan("drain", [node], strategy, "the scenario's strategy"))
        except (ValueError, errors.ApiError) as error:
            self.note(f"preflight drain {node}: could not run: {error}")
            return
        mine = set(self.namespaces.values())
        for step in report.steps:
            step.vms = [vm for vm in step.vms if vm.namespace in mine]
        self.note(summary(report))
        self.result.preflights.append(report.as_dict())
        for vm in report.blocked:
            for blocker in vm.blockers:
                self.note(f"preflight: {vm.key}: {blocker.message}")
        for vm in report.vms:
            if vm.delay is not None:
                self.note(f"preflight: {vm.key} delayed: {vm.delay.message}")

    async def _step_set_ratio(self, value: str) -> None:
        await self._set_ratio(value)

    async def _step_rancher_agent_restart(self, _value: None) -> None:
        if self.rancher is None:
            raise RuntimeError("rancher-agent-restart needs a rancher section")
        await self.rancher.agent_restart()

    async def _step_controller_restart(self, _value: None) -> None:
        assert self.strategy is not None
        await self.strategy.restart()

    async def _step_controller_stop(self, _value: None) -> None:
        assert self.strategy is not None
        await self.strategy.pause()

    async def _step_controller_start(self, _value: None) -> None:
        assert self.strategy is not None
        await self.strategy.start()

    async def _step_edit_quota(self, value: dict[str, Any]) -> None:
        assert self.tenant is not None
        real = self.namespaces[value["namespace"]]
        quota = await self.quota(real)
        if quota is None:
            raise RuntimeError(f"namespace {value['namespace']} has no managed quota")
        try:
            await self.tenant.patch(
                RESOURCE_QUOTAS, quota["metadata"]["name"], {"spec": {"hard": value["hard"]}}, real
            )
        except (errors.Forbidden, errors.BadRequest) as denied:
            self.note(f"edit of spec.hard denied: {denied.message}")
            return
        edited = resources.parse_resource_list(value["hard"])
        self.bases[real] = {**self.bases.get(real, {}), **edited}

    async def _step_edit_namespace_quota(self, value: dict[str, Any]) -> None:
        assert self.tenant is not None
        real = self.namespaces[value["namespace"]]
        hard = {RANCHER_TO_HARD[k]: v for k, v in value["quota"].items()}
        annotation = Project(id="x").namespace_annotations(hard)[CATTLE_ANNOTATION_RESOURCE_QUOTA]
        try:
            await self.tenant.patch(
                NAMESPACES,
                real,
                {"metadata": {"annotations": {CATTLE_ANNOTATION_RESOURCE_QUOTA: annotation}}},
            )
        except errors.Forbidden as denied:
            self.note(f"edit of the namespace quota denied: {denied.message}")

    async def _step_delete_vmi(self, name: str) -> None:
        await self._sim().delete_vmi(*self._vm(name))

    async def _step_restart_vm(self, name: str) -> None:
        kubevirt, (vm, namespace) = self._sim(), self._vm(name)
        await self._start_vm(name, lambda: kubevirt.restart_vm(vm, namespace))

    async def _step_start_vm(self, name: str) -> None:
        kubevirt, (vm, namespace) = self._sim(), self._vm(name)
        await self._start_vm(name, lambda: kubevirt.start_vm(vm, namespace))

    async def _step_stop_vm(self, name: str) -> None:
        await self._sim().stop_vm(*self._vm(name))

    async def _step_abort(self, name: str) -> None:
        kubevirt, (vm, namespace) = self._sim(), self._vm(name)
        running = [
            r
            for r in kubevirt.records.all()
            if r.vmi == vm and r.namespace == namespace and not r.done
        ]
        if not running:
            raise RuntimeError(f"abort: VM {name} has no migration in progress")
        await kubevirt.abort(running[-1].name, namespace)

    async def _step_wait(self, value: dict[str, Any]) -> None:
        if "seconds" in value:
            await asyncio.sleep(value["seconds"])
        elif value["for"] == "migrations":
            await self._wait_migrations(value["timeout"])
        else:
            await self._settle(value["timeout"])

    # Cluster-wide state -------------------------------------------------------------------------

    async def _set_ratio(self, value: str | None, *, remember: bool = False) -> None:
        try:
            current: Object | None = await self.api.get(SETTINGS, RATIO_SETTING)
        except errors.NotFound:
            current = None
        if remember:
            self._previous_ratio = current
        setting = {
            "apiVersion": "harvesterhci.io/v1beta1",
            "kind": "Setting",
            "metadata": {"name": RATIO_SETTING},
            "default": "1.5",
            "value": value if value is not None else "0",
        }
        if current is None:
            await self.api.create(SETTINGS, setting)
        else:
            await self.api.update(SETTINGS, {**current, "value": setting["value"]})
        if isinstance(self.kubevirt, VirtControllerDriver):
            # Harvester's setting controller copies the setting into the KubeVirt CR.
            ratio = value if value is not None else "0"
            await self.kubevirt.set_ratio(kubevirt_ratio_from_harvester_setting(ratio))

    async def _restore_ratio(self) -> None:
        with contextlib.suppress(errors.ApiError):
            current = await self.api.get(SETTINGS, RATIO_SETTING)
            if self._previous_ratio is None:
                await self.api.delete(SETTINGS, RATIO_SETTING)
            else:
                await self.api.update(
                    SETTINGS, {**current, "value": self._previous_ratio.get("value", "")}
                )


def uses_real_kubevirt(scenario: Scenario, cluster: ClusterInfo | None) -> bool:
    """Whether `scenario` runs on KubeVirt's real virt-controller: when `cluster` runs one of
    the scenario's KubeVirt release, or of a release in its ``kubevirt.also_on`` that renders
    its launcher pods alike (versions.check_plays_on). The simulator plays KubeVirt on a cluster
    without one (it would fight a real virt-controller, so a cluster running another version is
    an error, ValueError)."""
    if cluster is None or cluster.kubevirt_version is None:
        return False
    check_plays_on(scenario, cluster.kubevirt_version)
    return True


def played_by(scenario: Scenario, cluster: ClusterInfo | None) -> dict[str, str | None]:
    """For the report: the scenario's KubeVirt release, the virt-controller that played it (None:
    the simulator played the scenario's release) and the Harvester whose controllers ran."""
    real = uses_real_kubevirt(scenario, cluster)
    return {
        "scenario": scenario.kubevirt_version,
        "virt_controller": cluster.kubevirt_version if real and cluster is not None else None,
        "harvester": cluster.harvester_version if cluster is not None else None,
    }


def _run_namespace(name: str, run_id: str) -> str:
    return f"{name[: 62 - len(run_id)]}-{run_id}"


PROJECT_HEADROOM = 3
"""A scenario's project limit, unless it gives one: its namespaces' quotas added up, times this
(room for every namespace's raise through Rancher's annotation)."""


def raise_record(key: str, value: str) -> bool:
    """Whether a quota annotation records a raise still standing (a migration's room, our applied
    record): a key under STALE_PREFIXES, unless SETTLED_FLAGS gives its value as the settled one."""
    return key.startswith(STALE_PREFIXES) and SETTLED_FLAGS.get(key) != value


def rancher_base_of(namespace: Object | None) -> ResourceList:
    """The base Rancher's annotation gives `namespace` (evidence: the text recorded before a
    raise through it while that raise stands, rancher_base_text), {} without a valid one. The
    annotation itself would be the raise: a run that looked at it would settle the moment a
    raise through Rancher's annotation was copied into the quota."""
    text = rancher_base_text(namespace or {}) or ""
    try:
        return parse_namespace_resource_quota(text)
    except ValueError:
        return {}


def scenario_project(scenario: Scenario, run_id: str) -> Project:
    """The Rancher project of a scenario's namespaces, as Rancher's project webhook accepts one:
    a limit (`rancher.project_limit`, or PROJECT_HEADROOM times the namespaces' quotas) and a
    namespace default on the same keys (each key's largest namespace quota, within the limit)."""
    quotas = [
        resources.parse_resource_list({RANCHER_TO_HARD[k]: v for k, v in ns.quota.items()})
        for ns in scenario.namespaces
        if ns.quota is not None
    ]
    given = (scenario.rancher or {}).get("project_limit")
    if given is not None:
        limit = resources.parse_resource_list({RANCHER_TO_HARD[k]: v for k, v in given.items()})
    else:
        summed = resources.total(quotas)
        limit = {key: value * PROJECT_HEADROOM for key, value in summed.items()}
    default: dict[str, Quantity] = {}
    for quota in quotas:
        default = resources.maximum(default, quota)
    default = {key: min(default.get(key, limit[key]), limit[key]) for key in limit}
    return Project(
        id=f"p-{run_id}",
        limit={key: str(value) for key, value in limit.items()},
        namespace_default={key: str(value) for key, value in default.items()},
    )
