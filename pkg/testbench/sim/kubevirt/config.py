"""The simulator's knobs: KubeVirt version, parallel limits, timings, where the ratio comes from."""

from __future__ import annotations

from dataclasses import dataclass, field

from ....util.kubevirtversion import KubeVirtVersion, parse_kubevirt_version
from ....util.overhead import HARVESTER_RATIO_DEFAULT
from .limits import ParallelLimits
from .phases import MigrationTimings

DEFAULT_WORKERS = 3
"""virt-controller's migration controller threads (KubeVirt's default --migration-controller-threads)."""


@dataclass(frozen=True)
class KubeVirtConfig:
    """How the simulated KubeVirt behaves.

    - `kubevirt_version`: the cluster's KubeVirt ("0.54" for the Harvester v1.2.1 seed, "1.6" for
      v1.7.0). It renders every migration target pod and gates version-dependent behaviour: the
      `migrationRejectedByResourceQuota` condition and the prompt retry on ResourceQuota changes
      exist from v0.59 (kubevirt/kubevirt#9738, backported to 0.59); the VMIM's own
      phaseTransitionTimestamps and migrationState from v1.0 (the v0.54 seed's VMIM has neither).
    - `limits`: parallelMigrationsPerCluster / parallelOutboundMigrationsPerNode. With `namespace`
      set on the simulator, "cluster" means that namespace.
    - `timings`: step durations (see MigrationTimings).
    - `ratio_from_setting`: read the overhead ratio from the Harvester setting
      `additional-guest-memory-overhead-ratio` at each VM start and each target pod (default "1.5"
      when the setting does not exist); when False, `ratio` is used (None: no ratio).
    - `nodes`: the only nodes to place launcher pods on (None: every Ready, schedulable node).
    - `workers`: concurrent migration reconciles.
    - `record_events`: write Kubernetes Events as virt-controller does (FailedCreate, ...).
    - `namespaces`: when the simulator is cluster-wide, the only namespaces whose migrations it
      plays (None: all); a scenario run leaves other runs' and other users' migrations alone.
    """

    kubevirt_version: str = "1.6"
    limits: ParallelLimits = field(default_factory=ParallelLimits)
    timings: MigrationTimings = field(default_factory=MigrationTimings)
    ratio_from_setting: bool = True
    ratio: str | None = HARVESTER_RATIO_DEFAULT
    nodes: tuple[str, ...] | None = None
    workers: int = DEFAULT_WORKERS
    record_events: bool = True
    namespaces: frozenset[str] | None = None

    def __post_init__(self) -> None:
        parse_kubevirt_version(self.kubevirt_version)  # ValueError naming the text
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, not {self.workers!r}")

    @property
    def version(self) -> KubeVirtVersion:
        return parse_kubevirt_version(self.kubevirt_version)

    @property
    def quota_condition(self) -> bool:
        """KubeVirt flags quota-refused migrations and retries them on ResourceQuota changes."""
        return self.version.at_least(0, 59)

    @property
    def migration_status_details(self) -> bool:
        """The VMIM carries phaseTransitionTimestamps and a copy of the migration state."""
        return self.version.at_least(1, 0)


@dataclass(frozen=True)
class VMStart:
    """The result of starting a VM: its VMI, and its launcher pod and node, or why the pod was
    refused (the API server's message, e.g. "exceeded quota: default-xxxxx, requested: ...")."""

    namespace: str
    name: str
    vmi_uid: str
    pod: str | None
    node: str | None
    refusal: str | None = None

    @property
    def started(self) -> bool:
        return self.refusal is None and self.pod is not None

    def check(self) -> VMStart:
        """Itself if the VM started, else StartRefused carrying the refusal."""
        if not self.started:
            raise StartRefused(self.namespace, self.name, self.refusal or "no launcher pod")
        return self


class StartRefused(Exception):
    """A VM's launcher pod was refused (by quota, usually)."""

    def __init__(self, namespace: str, name: str, message: str) -> None:
        super().__init__(f"VM {namespace}/{name} could not start: {message}")
        self.namespace = namespace
        self.name = name
        self.message = message
