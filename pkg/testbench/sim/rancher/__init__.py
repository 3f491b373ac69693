"""Rancher's namespace resource-quota sync, simulated (see `simulator.RancherQuotaSync`)."""

from .derive import (
    Derived,
    Operation,
    Project,
    RancherFlavour,
    complete_quota,
    derive,
    is_quota_fit,
    operation,
)
from .simulator import RancherQuotaSync, SyncAction

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
