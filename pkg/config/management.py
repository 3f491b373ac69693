"""Options and the shared context controllers are registered on (Harvester's config.Management).

One API client, one informer factory, one controller factory and one event recorder per process,
so that every controller shares each list+watch and each cache.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from prometheus_client import REGISTRY, CollectorRegistry

from ..apis.harvester import HarvesterControllers
from ..apis.kubevirt import KubeVirtControllers
from ..generic.client import ApiClient
from ..generic.clock import REAL_CLOCK, Clock
from ..generic.controller import ControllerFactory
from ..generic.events import WARNING, EventRecorder
from ..generic.frameworkmetrics import FrameworkMetrics, SkipMetrics
from ..generic.informer import SharedInformerFactory
from ..generic.intake import SkippedObject
from ..util.podusage import KUBERNETES_1_36, QuotaFeatures
from ..util.resourcequota.base import Mode

COMPONENT = "harvester-quota"


@dataclass
class Options:
    """The controller process's settings, each with its default: the one settings object of
    `harvester-quota run`, whose flags (main.py) fill it. Every field has a flag of the same
    name but `leader_elect`, `harvester_compat`, `room_held_linger`, `release_gather` and
    `stale_raise_sweep`: fixed at their defaults for users, set in-process by tests and the
    test bench."""

    namespace: str = "harvester-system"
    """Where the leader-election Lease lives."""
    mode: Mode = "auto"
    """auto: Rancher's namespace annotation when present, else a recorded base; rancher or
    standalone force one of the two."""
    kubevirt_version: str | None = None
    """None: read status.observedKubeVirtVersion from the KubeVirt CR (default 1.6)."""
    quota_features: QuotaFeatures = KUBERNETES_1_36
    """The API server's feature gates that change what quota charges a pod (--quota-feature-gates):
    every pod's usage in the plan is computed with them. No server version implies them."""
    workers: int = 5
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}_{uuid.uuid4()}")
    """Unique per process (host name plus a UUID, as client-go's users do): two processes on one
    host must not mistake each other's Lease for their own."""
    lease_name: str = "harvester-quota"
    leader_elect: bool = True
    warm_standby: bool = True
    """A standby replica lists and watches everything the leader does while it waits for the
    Lease, its controllers held (nothing queued, run or written), so that it reconciles as soon
    as it wins instead of first filling its caches (at 10,000 VMs, 0.2 s from the takeover to the
    first raise instead of 8 s: bench/SCALE.md, "Leader failover"). False: it opens no watch
    until it leads (half the watches and memory, a slower takeover)."""
    health_port: int = 8080
    cpu_accounting: bool = False
    """Measure the CPU of each watch stream and handler run (harvester_quota_watch_cpu_seconds,
    harvester_quota_handler_cpu_seconds): two CPU-clock reads per coroutine step, 8-10 % of the
    controller's CPU in a scale run's profile, so off unless asked for."""
    harvester_compat: bool = True
    """Delete the target pod an aborted migration leaves (Harvester's VMI controller), and, with
    `harvester_annotations`, write Harvester's migration annotations. False: neither."""
    harvester_annotations: bool = False
    """Write Harvester's VMI migration annotations and touch the VM (Harvester's migration
    controller): off by default, because on Harvester its own migration controller, which no
    release can turn off, writes the same annotations for every migration, and without
    Harvester nothing reads them (6 requests a migration: bench/SCALE.md)."""
    mtq: bool = True
    """Managed-Tenant-Quota mode for namespaces with a VirtualMachineMigrationResourceQuota (the
    VMMRQ is the per-namespace opt-in; without its CRD nothing changes)."""
    mtq_lock_seconds: float = 30.0
    """The longest an MTQ lock (and the raise under it) lasts."""
    room_held_linger: float = 0.0
    """Seconds the room-held label stays after a namespace's room was given back (0, the default:
    removed with the room), so that the next migration of a drain is raised without labelling
    first. Measured, it saves label writes but no time a migration feels (bench/SCALE.md)."""
    release_gather: float = 3.0
    """The longest a release is held back while other migrations of the namespace hold room
    (controller/resourcequota/writes.py; 0: never held), so that several go back in one write:
    fewer writes meet quota admission's update of status.used for a target pod (a conflict), and
    each spares kube-controller-manager a recount."""
    stale_raise_sweep: float = 30.0
    """Seconds between the safety net's looks for a raise standing with no migration holding
    room (controller/resourcequota/staleraise.py): one that stood a whole interval is reported
    and planned again, so none stands longer than two intervals."""
    paused: bool = False
    """The global switch: every namespace's rooms are given back and none is raised (each plan
    is a release, plan.pause_of); reported on the leader Lease (for `explain`) and as the
    metric harvester_quota_paused. The per-namespace opt-out is the label
    harvester-quota.io/paused=true."""
    adopt_harvester_quotas: bool = False
    """Run beside Harvester's own controllers: every managed quota carries Harvester's skip
    annotation with our marker, so Harvester's resourcequota controller leaves it to us, and
    Harvester's live UID keys stay (resourcequota/plan.py). False gives adopted quotas
    back to Harvester."""
    rancher_direct_fail_closed: bool = True
    """Keep the room-held label for good on namespaces whose Rancher quota is raised directly
    (where no label may be written while a raise stands), so that the fail-closed pods rule
    covers their rooms; False leaves them on the rule that fails open."""


SKIPPED_REASON = "ObjectSkipped"
"""The reason of the Warning Event on an object an informer skipped."""


def skipped_event_target(obj: object) -> bool:
    """Whether an Event can refer to `obj`: an object with a kind and a name."""
    if not isinstance(obj, dict):
        return False
    meta = obj.get("metadata")
    return bool(obj.get("kind")) and isinstance(meta, dict) and bool(meta.get("name"))


def skipped_message(skipped: SkippedObject) -> str:
    """What the Event says: which cache, which stage, why, and that a change retries it."""
    return (
        f"harvester-quota's {skipped.resource} cache could not take this object "
        f"(stage {skipped.stage}: {skipped.reason}); it is left out of what the quota "
        "controller reads until the object changes"
    )


@dataclass
class Management:
    """The per-process context: client, factories, recorder, clock and options."""

    client: ApiClient
    options: Options
    clock: Clock = REAL_CLOCK
    registry: CollectorRegistry = REGISTRY
    framework_metrics: FrameworkMetrics | None = None
    """Watch events and handler CPU of the informers and controllers (None: not measured)."""
    skip_metrics: SkipMetrics | None = None
    """Objects the informers skipped (None: not counted; they are logged and get an Event)."""
    informers: SharedInformerFactory = field(init=False)
    controllers: ControllerFactory = field(init=False)
    recorder: EventRecorder = field(init=False)
    kubevirt: KubeVirtControllers = field(init=False)
    """Typed controllers of KubeVirt's kinds on `controllers`."""
    harvester: HarvesterControllers = field(init=False)
    """Typed controllers of Harvester's kinds on `controllers`."""

    def __post_init__(self) -> None:
        self._closers: list[Callable[[], Awaitable[None]]] = []
        self.informers = SharedInformerFactory(
            self.client,
            clock=self.clock,
            observer=self.framework_metrics,
            skips=self.object_skipped,
        )
        self.controllers = ControllerFactory(
            self.client,
            self.informers,
            clock=self.clock,
            workers=self.options.workers,
            registry=self.registry,
            observer=self.framework_metrics,
        )
        self.kubevirt = KubeVirtControllers(self.controllers)
        self.harvester = HarvesterControllers(self.controllers)
        self.recorder = EventRecorder(
            self.client, COMPONENT, host=self.options.identity, clock=self.clock
        )

    def object_skipped(self, skipped: SkippedObject) -> None:
        """An informer skipped an object (informer.py): counted, and a Warning Event on it
        when it can be referred to (it has a kind and a name)."""
        if self.skip_metrics is not None:
            self.skip_metrics.object_skipped(skipped.resource, skipped.stage)
        if skipped_event_target(skipped.obj):
            self.recorder.event(skipped.obj, WARNING, SKIPPED_REASON, skipped_message(skipped))

    async def start(self, sync_timeout: float | None = None) -> bool:
        """Starts the shared informers and every registered controller; True if the caches
        synced within `sync_timeout` seconds (None: wait as long as it takes)."""
        return await self.controllers.start(sync_timeout=sync_timeout)

    def on_stop(self, closer: Callable[[], Awaitable[None]]) -> None:
        """Has `closer` awaited by `stop`, after the controllers stopped (so nothing hands it
        work any more) and before the event recorder closes; closers run in the order added."""
        self._closers.append(closer)

    async def stop(self) -> None:
        """Stops controllers and informers, then the closers (`on_stop`), then closes the event
        recorder."""
        await self.controllers.stop()
        for closer in self._closers:
            await closer()
        await self.recorder.close()
