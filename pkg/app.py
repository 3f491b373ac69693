"""`harvester-quota run`: the controllers, leader-elected, with health and metrics endpoints.

Only the leader runs the controllers' workers, so every quota write is the leader's (one planner
per namespace, conditional writers, all through controller/quotawriter.py). Standby
replicas keep /healthz answering and campaign for the Lease; by default (`Options.warm_standby`)
they also run the informers, so their caches are warm when they win: a standby's controllers are
held (their informer handlers queue nothing, no worker runs) until it leads, and then queue every
key of their caches, as a first list would. When the leader stops (a node drain evicts it, an
upgrade replaces it), it releases the Lease and a standby takes over at its next try (within a
retry period, 2-2.4 s); when it dies without releasing (SIGKILL, a lost node), once the lease
duration has passed since the standby last saw it renewed (15-20 s after the death). Either way
the new leader recomputes every namespace from the cluster: nothing is lost in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from dataclasses import dataclass, field

from prometheus_client import REGISTRY, CollectorRegistry, Gauge

from .config.management import Management, Options
from .controller.migration import vmi_controller as vmi
from .controller.migration import vmim_controller as vmim
from .controller.migration.common import VmiAnnotator
from .controller.mtq import leftover_lock
from .controller.mtq import vmmrq_controller as mtq
from .controller.resourcequota import resourcequota_controller as resourcequota
from .generic import errors
from .generic.client import ApiClient
from .generic.clock import REAL_CLOCK, Clock
from .generic.frameworkmetrics import FrameworkMetrics, SkipMetrics
from .generic.health import HealthServer
from .generic.leader import LeaderElectionConfig, LeaderElector
from .generic.metrics import MetricFactory
from .generic.requestmetrics import ApiRequestMetrics
from .util.annotations import ANNOTATION_PAUSED, TRUE

log = logging.getLogger(__name__)

CACHE_SYNC_TIMEOUT = 120.0


@dataclass
class ControllerApp:
    """The controllers of one process: build, start, stop.

    Harvester's `Register` functions (register.go of its migration and resourcequota
    controllers) are this wiring: building it calls each controller's `register`."""

    client: ApiClient
    options: Options
    clock: Clock = REAL_CLOCK
    registry: CollectorRegistry = REGISTRY
    management: Management = field(init=False)
    reconciler: resourcequota.QuotaReconciler = field(init=False)
    vmim_controller: vmim.VmimController | None = field(init=False, default=None)
    vmi_controller: vmi.VmiController | None = field(init=False, default=None)
    mtq: mtq.MtqReconciler | None = field(init=False, default=None)
    """Managed-Tenant-Quota mode (namespaces with a VMMRQ), unless --no-mtq."""
    leftover_locks: leftover_lock.LeftoverLockReporter = field(init=False)
    """Reports KubeVirt MTQ's namespace locks left behind (with or without MTQ mode)."""
    request_metrics: ApiRequestMetrics = field(init=False)
    """API requests by verb and resource, counted from warm() or start() to stop()."""
    leading: Gauge = field(init=False)
    """`harvester_quota_leader`: 1 while this process runs the controllers (`lead`), else 0;
    summed over the replicas it is the number of leaders (the NoLeader alert fires on 0 or on
    no replica scraped at all)."""
    _observing: bool = field(init=False, default=False)
    _stopped: bool = field(init=False, default=False)
    _unserved_report: asyncio.Future[None] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.request_metrics = ApiRequestMetrics(self.registry)
        self.leading = MetricFactory(self.registry).gauge(
            "leader", "1 while this replica leads (runs the controllers' workers), else 0."
        )
        self.management = Management(
            self.client,
            self.options,
            clock=self.clock,
            registry=self.registry,
            framework_metrics=FrameworkMetrics(self.registry, cpu=self.options.cpu_accounting),
            skip_metrics=SkipMetrics(self.registry),
        )
        self.reconciler = resourcequota.register(self.management)
        if self.options.mtq:
            self.mtq = mtq.register(
                self.management,
                lock_seconds=self.options.mtq_lock_seconds,
                writer=self.reconciler.writer,
            )
            self.reconciler.planner.defer_to = self.mtq.has_budget
            self.reconciler.inputs.also_queued = self.mtq.has_budget
        self.leftover_locks = leftover_lock.register(self.management)
        if self.options.harvester_compat:
            annotator = None
            if self.options.harvester_annotations:
                annotator = VmiAnnotator(
                    self.management,
                    quota_first=self.reconciler.settled,
                    count_write=self.reconciler.metrics.count_write,
                )
                self.vmim_controller = vmim.register(self.management, annotator)
            self.vmi_controller = vmi.register(self.management, annotator)

    def warm(self) -> None:
        """Starts the informers only (a warm standby): the caches fill, the controllers are held
        (nothing is queued, no worker runs, nothing is written) and refusals are noted only
        while they stand, writes of quotas by others not at all; the kinds the API server does
        not serve are reported now, not once the replica leads. Returns at once; `start` later
        finds the informers running and queues every cached key. Event loop only."""
        self._observe_requests()
        self.reconciler.inputs.refusals.standby = True
        self.reconciler.foreign_writes.standby = True
        self._unserved_report = asyncio.ensure_future(self._report_unserved_kinds())
        self.management.controllers.warm()

    def _observe_requests(self) -> None:
        if not self._observing:
            self.client.add_request_observer(self.request_metrics)
            self._observing = True

    async def start(self) -> None:
        """Starts informers and controllers; returns once the caches are synced (or after
        CACHE_SYNC_TIMEOUT, with a warning: reconciling what is known beats waiting forever).

        A required kind the API server does not serve (KubeVirt not installed) is reported once,
        clearly; its informer keeps retrying with backoff and the process stays unready."""
        self._observe_requests()
        if self._unserved_report is None:
            await self._report_unserved_kinds()
        self.reconciler.inputs.refusals.standby = False
        self.reconciler.foreign_writes.standby = False
        synced = await self.management.start(sync_timeout=CACHE_SYNC_TIMEOUT)
        if not synced:
            log.warning(
                "caches not synced after %.0fs; reconciling what is known", CACHE_SYNC_TIMEOUT
            )
        self.reconciler.stale_raises.start()
        log.info("controllers started")

    async def _report_unserved_kinds(self) -> None:
        try:
            missing = await self.management.informers.unserved_required()
        except errors.ApiError as error:
            log.warning("cannot check which kinds the API server serves: %s", error)
            return
        if missing:
            log.error(
                "the API server does not serve %s, which this controller needs (is KubeVirt "
                "installed?); not ready until it does",
                ", ".join(f"{r.kind} ({r.api_version})" for r in missing),
            )

    def ready(self) -> bool:
        """True once every informer has synced."""
        return self.management.informers.synced()

    async def stop(self) -> None:
        """Stops controllers, informers and the event recorder (pending events are flushed).
        Once: a later call returns at once."""
        if self._stopped:
            return
        self._stopped = True
        if self._unserved_report is not None:
            self._unserved_report.cancel()
        await self.management.stop()
        if self._observing:
            self.client.remove_request_observer(self.request_metrics)
            self._observing = False

    async def lead(self) -> None:
        """Runs the controllers until cancelled (what a leader does); `leading` is 1 from the
        moment it is called (the Lease is ours, the caches may still be syncing) until it
        returns."""
        self.leading.set(1)
        try:
            await self.start()
            try:
                await asyncio.Future()
            finally:
                await self.stop()
        finally:
            self.leading.set(0)


def readiness(app: ControllerApp, elector: LeaderElector | None) -> bool:
    """Ready: the leader (or the only replica, without leader election) once its required
    caches are synced; a standby while it can reach the API server (it can take over) and, warm,
    once its caches are synced too (it can take over at once).

    Readiness gates nothing of the controllers' own (they serve no traffic); it tells a rollout
    when the next replica may be replaced, and an operator which replica is stuck.
    """
    if elector is None or elector.leading:
        return app.ready()
    return elector.healthy() and (not app.options.warm_standby or app.ready())


async def run(client: ApiClient, options: Options) -> int:
    """Runs until SIGTERM/SIGINT; returns the exit code."""
    app = ControllerApp(client, options)
    health = HealthServer(port=options.health_port)
    elector = LeaderElector(
        client,
        LeaderElectionConfig(
            options.namespace,
            options.lease_name,
            options.identity,
            annotations={ANNOTATION_PAUSED: TRUE if options.paused else None},
        ),
        on_started_leading=app.lead,
        on_new_leader=lambda holder: log.info("leader is now %s", holder),
    )
    health.add_readiness_check(
        "caches-synced-or-healthy-standby",
        lambda: readiness(app, elector if options.leader_elect else None),
    )
    await health.start()
    if options.leader_elect and options.warm_standby:
        app.warm()
    work = asyncio.ensure_future(elector.run() if options.leader_elect else app.lead())
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, work.cancel)
    try:
        await work
    except asyncio.CancelledError:
        log.info("shutting down")
        return 0
    finally:
        if options.leader_elect and options.warm_standby:
            with contextlib.suppress(Exception):
                await app.stop()  # a standby's informers; a leader's stopped as it ended
        with contextlib.suppress(Exception):
            await health.stop()
    # The elector returned by itself: leadership was lost. Exit, as client-go's users do, so
    # that a fresh process campaigns again with empty caches.
    log.error("lost leadership; exiting")
    return 1
