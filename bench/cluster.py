"""The benchmark's own local cluster: its state directory, start, stop, and a client for it."""

from __future__ import annotations

import time
from pathlib import Path

from harvester_quota.generic.client import ApiClient
from harvester_quota.testbench import localcluster
from harvester_quota.testbench.localcluster import ClusterInfo, LocalCluster
from harvester_quota.testbench.scale.observe import ProcessSample

ENV_STATE_DIR = "HARVESTER_QUOTA_BENCH_STATE_DIR"
NODES = 50
NODE_PODS = 1100
"""50 kwok nodes of 1,100 pods hold the 50k population (kubelet's default is 110 pods a node)."""


ENV_WEBHOOK_STATE_DIR = "HARVESTER_QUOTA_BENCH_WEBHOOK_STATE_DIR"


def default_state_dir() -> Path:
    """Never the default cluster's or the test session's directory: other work uses those."""
    return localcluster.default_state_dir("bench", ENV_STATE_DIR)


def default_webhook_state_dir() -> Path:
    """The webhook part's own cluster (two kwok nodes, no pod population)."""
    return localcluster.default_state_dir("bench-webhook", ENV_WEBHOOK_STATE_DIR)


def start(state_dir: Path, *, reuse: bool) -> tuple[LocalCluster, ClusterInfo]:
    """A running cluster with NODES kwok nodes: the kept one if ``reuse``, else a fresh one."""
    local = LocalCluster(state_dir)
    if not reuse:
        local.down()
    return local, local.up(nodes=NODES, node_pods=NODE_PODS)


def api_client(info: ClusterInfo, timeout: float = 60.0) -> ApiClient:
    return ApiClient(info.admin_config(), timeout=timeout)


def _cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (0 if it is gone)."""
    return ProcessSample.of(pid).cpu_seconds


def wait_until_idle(
    info: ClusterInfo,
    *,
    cores: float = 0.3,
    window: float = 5.0,
    timeout: float = 600.0,
) -> tuple[float, dict[str, float]]:
    """Waits until the cluster's processes together use under ``cores`` over ``window`` seconds.

    After a burst of pod writes kube-controller-manager (its garbage collector builds the owner
    graph of every pod), the scheduler and kwok keep working for a while after the pods stopped
    changing; a run measured then shares the two cores with them. Returns the seconds waited and
    the last window's CPU use per component (in cores).
    """
    started = time.monotonic()
    pids = {record.name: record.pid for record in info.processes}
    while True:
        before = {name: _cpu_seconds(pid) for name, pid in pids.items()}
        time.sleep(window)
        usage = {name: (_cpu_seconds(pid) - before[name]) / window for name, pid in pids.items()}
        if sum(usage.values()) < cores or time.monotonic() - started > timeout:
            return time.monotonic() - started, usage
