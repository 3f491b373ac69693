"""Two replicas and a frozen API server (SIGSTOP): never two leaders acting at once.

The leader's renewal hangs on the stopped server; it must stop acting at its renew deadline,
before the other replica may take the Lease, which it does as soon as the server answers again.
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid

import pytest
from harvester_quota.generic.client import ApiClient
from harvester_quota.testbench.localcluster import ClusterInfo, LocalCluster

from tests.integration.test_framework import read_line, start_candidate, stop_candidates

pytestmark = pytest.mark.integration

FREEZE_SECONDS = 9.0
"""Longer than the candidates' lease (6 s) and renew deadline (4 s)."""


async def next_line(candidate: object, prefix: str, timeout: float = 60) -> list[str]:
    while True:
        line = await read_line(candidate, timeout)  # type: ignore[arg-type]
        if line.startswith(prefix):
            return line.split()


async def test_a_frozen_api_server_never_yields_two_acting_leaders(
    api: ApiClient, cluster: ClusterInfo, local_cluster: LocalCluster
) -> None:
    current = local_cluster.info()  # the API server may have been restarted by an earlier test
    assert current is not None
    (apiserver,) = [p for p in current.processes if p.name == "kube-apiserver"]
    lease = f"freeze-{uuid.uuid4().hex[:6]}"
    first = start_candidate(cluster, lease, "first")
    second = None
    frozen = False
    try:
        started_first = float((await next_line(first, "LEADING"))[2])
        second = start_candidate(cluster, lease, "second")
        assert (await next_line(second, "OBSERVED"))[1] == "first"
        os.kill(apiserver.pid, signal.SIGSTOP)
        frozen = True
        await asyncio.sleep(FREEZE_SECONDS)  # the fault itself lasts a fixed time
        os.kill(apiserver.pid, signal.SIGCONT)
        frozen = False
        stopped_first = float((await next_line(first, "STOPPED-LEADING"))[2])
        started_second = float((await next_line(second, "LEADING"))[2])
        print(
            f"first stopped acting {stopped_first - started_first:.1f}s after it began; "
            f"second began {started_second - stopped_first:.1f}s after that"
        )
        assert started_first < stopped_first < started_second, (
            f"first acted {started_first:.3f}-{stopped_first:.3f}, second from {started_second:.3f}"
        )
    finally:
        if frozen:
            os.kill(apiserver.pid, signal.SIGCONT)
        await stop_candidates(api, lease, first, second)
