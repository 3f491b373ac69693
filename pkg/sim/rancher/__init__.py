"""Rancher's namespace resource-quota sync, simulated (see `simulator.RancherQuotaSync`)."""

from pkg.sim.rancher.derive import (
    Derived,
    Operation,
    Project,
    RancherFlavour,
    complete_quota,
    derive,
    is_quota_fit,
    operation,
)
from pkg.sim.rancher.simulator import RancherQuotaSync, SyncAction

__all__ = [
    "Derived",
    "Operation",
    "Project",
    "RancherFlavour",
    "RancherQuotaSync",
    "SyncAction",
    "complete_quota",
    "derive",
    "is_quota_fit",
    "operation",
]
