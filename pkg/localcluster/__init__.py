"""A real local Kubernetes cluster for tests and the demo: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and kwok's fake nodes, run as plain processes.

Tests against a mock API server would prove nothing about quota admission, the quota controller
or webhook calls; this package runs the real ones, built from Go modules (see ``binaries``).
"""

from .cluster import ClusterInfo, LocalCluster, default_state_dir
from .errors import ClusterError

__all__ = ["ClusterError", "ClusterInfo", "LocalCluster", "default_state_dir"]
