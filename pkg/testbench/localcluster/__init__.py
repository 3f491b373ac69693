"""A real local Kubernetes cluster for tests and the demo: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and kwok's fake nodes, run as plain processes.

Tests against a mock API server would prove nothing about quota admission, the quota controller
or webhook calls; this package runs the real ones, built from Go modules (see ``binaries``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import ClusterError

if TYPE_CHECKING:
    from .cluster import ClusterInfo, LocalCluster, default_state_dir

__all__ = ["ClusterError", "ClusterInfo", "LocalCluster", "default_state_dir"]


def __getattr__(name: str) -> Any:
    """`cluster` (and the PKI's cryptography, 10 MiB) is loaded on first use, so that a process
    that only names `binaries` or `ClusterError` (the controllers' `run`) does not carry it."""
    if name in ("ClusterInfo", "LocalCluster", "default_state_dir"):
        from . import cluster  # noqa: PLC0415

        return getattr(cluster, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
