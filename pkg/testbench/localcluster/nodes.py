"""The kwok nodes of a local cluster: how many by default, and how often they renew their leases.

Kept apart from `cluster` (which needs the PKI and its cryptography) so that the command line
can name the defaults without loading it.
"""

from __future__ import annotations

DEFAULT_NODES = 4
NODE_LEASE_SECONDS = 40
"""kubelet's default node lease duration; kwok renews a lease about four times per duration."""
NODE_LEASE_NODES = 100
NODE_GRACE_MARGIN = 10
"""kube-controller-manager marks a node NotReady when its lease is this much older than the
lease duration (its --node-monitor-grace-period is 50 s for kubelet's 40 s)."""


def node_lease_seconds(nodes: int) -> int:
    """The node lease duration for a cluster of `nodes` kwok nodes: kubelet's 40 s up to 100
    nodes, then longer in proportion, so that all nodes together renew about as often as 100
    do. At 1,000 nodes kubelet's pace is 50 lease writes a second, which on two cores is most
    of the API server's time; a real cluster of that size has the cores for it. Nodes still
    go NotReady when kwok stops (after the lease plus NODE_GRACE_MARGIN)."""
    return NODE_LEASE_SECONDS * max(1, -(-nodes // NODE_LEASE_NODES))
