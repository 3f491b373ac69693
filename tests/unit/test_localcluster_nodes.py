"""kwok's node leases: kubelet's pace up to 100 nodes, then as often in total as 100 nodes."""

from __future__ import annotations

import pytest
from harvester_quota.testbench.localcluster.nodes import node_lease_seconds


@pytest.mark.parametrize(
    ("nodes", "seconds"), [(1, 40), (4, 40), (100, 40), (101, 80), (250, 120), (1000, 400)]
)
def test_lease_duration_grows_with_the_nodes_past_a_hundred(nodes: int, seconds: int) -> None:
    assert node_lease_seconds(nodes) == seconds


def test_all_nodes_together_renew_no_more_often_than_a_hundred_nodes() -> None:
    for nodes in (100, 150, 999, 1000, 5000):
        assert nodes / node_lease_seconds(nodes) <= 100 / node_lease_seconds(100)
