"""The benchmarks' baselines on the real cluster: client-go's informer (bench/informer.py) and the
webhook on the tenant's path (bench/webhook.py). Counts only: `make bench` measures."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from pathlib import Path

import pytest
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import NAMESPACES, PODS
from harvester_quota.testbench.localcluster import ClusterError, ClusterInfo, binaries

from bench import webhook

pytestmark = pytest.mark.integration

PODS_IN_NAMESPACE = 25


def _client_go_helper() -> Path:
    try:
        return binaries.build_clientgo_informer(progress=lambda _: None)
    except ClusterError as error:
        pytest.skip(f"no client-go baseline here: {error}")


async def test_the_client_go_baseline_syncs_every_pod_and_reports_its_memory(
    api: ApiClient, cluster: ClusterInfo, namespace: str
) -> None:
    helper = _client_go_helper()
    for index in range(PODS_IN_NAMESPACE):
        await api.create(PODS, webhook.gated_pod(index), namespace)
    process = await asyncio.create_subprocess_exec(
        str(helper),
        "--candidate=client-go-protobuf",
        f"--server={cluster.server}",
        f"--ca-file={cluster.ca_file}",
        f"--cert-file={cluster.client_cert}",
        f"--key-file={cluster.client_key}",
        f"--namespace={namespace}",
        f"--expect={PODS_IN_NAMESPACE}",
        "--timeout=60s",
        stdout=asyncio.subprocess.PIPE,
    )
    stdout, _ = await process.communicate()
    assert process.returncode == 0, stdout
    result = json.loads(stdout.decode().strip().splitlines()[-1])
    assert result["candidate"] == "client-go-protobuf"
    assert result["content_type"] == "protobuf"
    assert result["cached"] == result["expected"] == PODS_IN_NAMESPACE
    assert result["rss_synced"] > 0 and result["heap_inuse_synced"] > 0
    assert result["peak_rss"] >= result["rss_synced"] or not result["peak_reset"]


async def test_the_client_go_baseline_says_why_it_cannot_sync(cluster: ClusterInfo) -> None:
    helper = _client_go_helper()
    process = await asyncio.create_subprocess_exec(
        str(helper), f"--server={cluster.server}", stdout=asyncio.subprocess.PIPE
    )
    stdout, _ = await process.communicate()
    assert process.returncode == 1
    assert json.loads(stdout) == {"error": "--server and a positive --expect are required"}


async def test_the_webhook_bench_drives_every_namespace_and_the_room_holds(
    api: ApiClient, cluster: ClusterInfo, tmp_path: Path
) -> None:
    """A short run: every create of every phase answered and admitted; the pods webhook called
    for each create in the product's two namespaces (room held or not) and never in the third;
    the room still held at the end (the run checks it)."""
    prefix = f"wb-{uuid.uuid4().hex[:6]}-"
    try:
        result = await webhook.run(
            api,
            cluster,
            tmp_path,
            rate=20.0,
            seconds=1.0,
            rounds=1,
            prefix=prefix,
            progress=lambda _: None,
        )
    finally:
        for kind in webhook.KINDS:
            with contextlib.suppress(errors.ApiError):
                await api.delete(NAMESPACES, webhook.namespace_name(kind, prefix))
    assert sorted(phase.kind for phase in result.phases) == sorted(webhook.KINDS)
    for phase in result.phases:
        assert (phase.sent, phase.created, phase.refused) == (20, 20, {}), phase.kind
        assert len(phase.round_trips) == 20
        called = phase.webhook.get(float("inf"), 0.0)
        assert called == (0 if phase.kind == "none" else 20), phase.kind
    assert len(webhook.table(result)) == 4 + len(webhook.KINDS), "title, blank, head, rule, rows"
