"""A virt-controller simulator: VMs, launcher pods, live migrations and node drains on a real API
server (see `simulator.KubeVirtSimulator`)."""

from .config import KubeVirtConfig, StartRefused, VMStart
from .limits import InFlight, ParallelLimits, limit_reached
from .objects import VMSpec, render_launcher_pod, vm_resources
from .phases import MigrationTimings, Phase, next_step
from .record import MigrationLog, MigrationRecord, Outcome
from .simulator import KubeVirtSimulator, set_overhead_ratio_setting

__all__ = [
    "InFlight",
    "KubeVirtConfig",
    "KubeVirtSimulator",
    "MigrationLog",
    "MigrationRecord",
    "MigrationTimings",
    "Outcome",
    "ParallelLimits",
    "Phase",
    "StartRefused",
    "VMSpec",
    "VMStart",
    "limit_reached",
    "next_step",
    "render_launcher_pod",
    "set_overhead_ratio_setting",
    "vm_resources",
]
