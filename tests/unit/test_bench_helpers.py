"""The benchmark's own helpers: population naming, the baseline queue, result tables."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench import informer, populate, webhook, workqueue
from tests.unit.fakes import set_aside


def test_pod_identity_is_stable_and_spread() -> None:
    owner = populate.Owner("kubevirt.io/v1", "VirtualMachineInstance", "bench-owner", "uid-1")
    pod = populate.launcher_pod(1234, "kwok-node-3", owner)
    assert pod["metadata"]["name"] == populate.pod_name(1234)
    assert populate.pod_name(1234) == populate.pod_name(1234)
    assert populate.pod_name(1234) != populate.pod_name(1235)
    assert pod["metadata"]["namespace"] == populate.namespace_of(1234) == "bench-001"
    assert pod["spec"]["nodeName"] == "kwok-node-3"
    assert [c["name"] for c in pod["spec"]["containers"]] == ["compute", "guest-console-log"]
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


def test_dedupe_queue_collapses_waiting_duplicates() -> None:
    async def scenario() -> list[str]:
        queue = workqueue.DedupeAsyncioQueue()
        for key in ("a", "b", "a", "a"):
            queue.add(key)
        got = []
        for _ in range(2):
            item, _ = await queue.get()
            assert item is not None
            got.append(item)
            queue.done(item)
        return got

    assert asyncio.run(scenario()) == ["a", "b"]


def test_every_queue_processes_every_distinct_key() -> None:
    async def scenario() -> list[int]:
        factories = workqueue._factories()
        runs = [await workqueue.run_distinct(n, f, 4, 500) for n, f in factories.items()]
        return [run.reconciles for run in runs]

    assert asyncio.run(scenario()) == [500] * len(workqueue.CANDIDATES)


def _run(candidate: str, sync: float, rss: int) -> dict[str, object]:
    return {
        "candidate": candidate,
        "sync_seconds": sync,
        "cpu_seconds": sync,
        "rss_baseline": 1000,
        "rss_synced": 1000 + rss,
        "peak_rss": 1000 + 2 * rss,
        "store_payload_bytes": None,
    }


def test_informer_table_gives_ratios_against_the_official_client() -> None:
    result = informer.SizeResult(pods=10, served_bytes_per_pod=1000.0, populate_seconds=1.0)
    result.runs = {
        "ours-json": [_run("ours-json", 1.0, 100 << 20), _run("ours-json", 3.0, 100 << 20)],
        informer.OFFICIAL: [_run(informer.OFFICIAL, 8.0, 400 << 20)],
    }
    rows = {line.split("|")[1].strip(): line for line in informer.table(result) if "|" in line}
    cells = [cell.strip() for cell in rows["ours-json"].split("|")]
    assert cells[3] == "2.00"  # median sync
    assert cells[4] == "0.25"  # sync ratio
    assert cells[8] == "0.25"  # RSS ratio


def test_the_reconcile_bench_measures_every_path_on_the_same_namespace() -> None:
    from bench import reconcile

    rows = []
    for vms in (5, 20):
        caches = reconcile.build_caches(vms, "dict", pending=3, finished=4)
        assert reconcile.same_plan(caches, vms), "every path plans the same quota"
        assert len(caches.migrations) == 7
        assert set_aside(caches.settled_views, reconcile.NAMESPACE) == 4, (
            "the finished ones settled"
        )
        assert len(caches.settled_views.namespace(reconcile.NAMESPACE)) == 3
        rows += [reconcile.measure(caches, vms, "dict", path, repeat=1) for path in reconcile.PATHS]
    assert all(row.read >= 0 and row.plan > 0 for row in rows)
    rows.sort(key=lambda r: (r.path, r.codec, r.vms))
    lines = reconcile.table(rows)
    assert len(lines) == 10
    assert lines[2].endswith("| 1.0 | 1.000 |"), "the baseline's smallest is its own reference"
    assert lines[4].startswith("| index | dict | 5 |")
    assert lines[6].startswith("| settled | dict | 5 |")
    assert lines[8].startswith("| views | dict | 5 |")


def test_informer_table_gives_ratios_against_client_go_too() -> None:
    result = informer.SizeResult(pods=10, served_bytes_per_pod=1000.0, populate_seconds=1.0)
    client_go = {**_run(informer.CLIENT_GO, 2.0, 50 << 20), "heap_inuse_synced": 40 << 20}
    result.runs = {
        "ours-zlib": [_run("ours-zlib", 3.0, 10 << 20)],
        informer.CLIENT_GO: [client_go],
    }
    rows = {line.split("|")[1].strip(): line for line in informer.table(result) if "|" in line}
    ours = [cell.strip() for cell in rows["ours-zlib"].split("|")]
    assert ours[4] == "-", "no official run: no ratio against it"
    assert (ours[12], ours[13], ours[14]) == ("1.50", "0.20", "-")
    go = [cell.strip() for cell in rows[informer.CLIENT_GO].split("|")]
    assert (go[12], go[13], go[14]) == ("1.00", "1.00", "40")


def test_a_client_go_candidate_runs_the_go_helper_with_its_flags(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from harvester_quota.testbench.localcluster import ClusterError, binaries

    helper = tmp_path / "clientgo-informer"
    monkeypatch.setattr(binaries, "build_clientgo_informer", lambda: helper)
    info = SimpleNamespace(
        server="https://127.0.0.1:1",
        ca_file="ca",
        client_cert="crt",
        client_key="key",
        kubeconfig="kc",
    )
    command = informer.worker_command("client-go-protobuf-strip", info, 7)  # type: ignore[arg-type]
    assert command[0] == str(helper)
    assert "--expect=7" in command and "--cert-file=crt" in command
    assert command[-2:] == ["--content-type=protobuf", "--strip"]
    python = informer.worker_command("ours-zlib", info, 7)  # type: ignore[arg-type]
    assert python[1:4] == ["-m", "bench.informer_worker", "ours-zlib"]

    def no_go() -> Path:
        raise ClusterError("the Go toolchain is not on PATH")

    monkeypatch.setattr(binaries, "build_clientgo_informer", no_go)
    failed = informer.run_worker(informer.CLIENT_GO, info, 7)  # type: ignore[arg-type]
    assert failed == {
        "candidate": informer.CLIENT_GO,
        "error": "no client-go baseline: the Go toolchain is not on PATH",
    }


WEBHOOK_SECONDS = """\
# TYPE harvester_quota_webhook_seconds histogram
harvester_quota_webhook_seconds_bucket{endpoint="pods",le="0.005"} 50.0
harvester_quota_webhook_seconds_bucket{endpoint="pods",le="0.01"} 90.0
harvester_quota_webhook_seconds_bucket{endpoint="pods",le="0.025"} 100.0
harvester_quota_webhook_seconds_bucket{endpoint="pods",le="+Inf"} 100.0
harvester_quota_webhook_seconds_count{endpoint="pods"} 100.0
harvester_quota_webhook_seconds_sum{endpoint="pods"} 0.5
harvester_quota_webhook_seconds_bucket{endpoint="resourcequotas",le="0.005"} 7.0
harvester_quota_webhook_seconds_bucket{endpoint="resourcequotas",le="0.01"} 7.0
harvester_quota_webhook_seconds_bucket{endpoint="resourcequotas",le="0.025"} 7.0
harvester_quota_webhook_seconds_bucket{endpoint="resourcequotas",le="+Inf"} 7.0
harvester_quota_webhook_seconds_count{endpoint="resourcequotas"} 7.0
harvester_quota_webhook_seconds_sum{endpoint="resourcequotas"} 0.01
"""


def test_webhook_histogram_quantiles_interpolate_within_the_pods_buckets() -> None:
    buckets = webhook.histogram_buckets(
        WEBHOOK_SECONDS, webhook.WEBHOOK_METRIC, lambda labels: labels["endpoint"] == "pods"
    )
    assert buckets == {0.005: 50.0, 0.01: 90.0, 0.025: 100.0, float("inf"): 100.0}
    assert webhook.bucket_quantile(buckets, 0.5) == 0.005
    assert webhook.bucket_quantile(buckets, 0.7) == pytest.approx(0.0075)
    assert webhook.bucket_quantile(buckets, 0.99) == pytest.approx(0.0235)
    earlier = {0.005: 50.0, 0.01: 50.0, 0.025: 50.0, float("inf"): 50.0}
    later = webhook.bucket_delta(buckets, earlier)
    assert webhook.bucket_quantile(later, 0.5) == pytest.approx(0.008125)
    assert webhook.bucket_quantile(webhook.bucket_delta(buckets, buckets), 0.5) is None
    beyond = {0.005: 1.0, float("inf"): 2.0}
    assert webhook.bucket_quantile(beyond, 0.99) == 0.005, "+Inf: the last finite bound"


def test_webhook_table_pools_rounds_and_compares_each_namespace_with_the_unselected_one() -> None:
    result = webhook.WebhookBenchResult(rate=100.0, seconds=1.0, rounds=2)
    for round_index in range(2):
        for kind, trip in (("room", 0.02), ("plain", 0.012), ("none", 0.01)):
            phase = webhook.Phase(kind, round_index, sent=100, created=100)
            phase.round_trips = [trip] * 100
            phase.lateness = [0.001] * 100
            if kind != "none":
                phase.webhook = {0.005: 0.0, 0.01: 100.0, float("inf"): 100.0}
            result.phases.append(phase)
    result.phases[0].refused = {"403 exceeded quota": 1}
    rows = {line.split("|")[1].strip(): line for line in webhook.table(result) if "|" in line}
    room = [cell.strip() for cell in rows["room"].split("|")]
    assert room[2:7] == ["200 / 200", "20.0", "20.0", "20.0", "2.00"]
    assert room[9] == "20"
    none = [cell.strip() for cell in rows["none"].split("|")]
    assert (none[6], none[7], none[8]) == ("1.00", "-", "-")
    assert "- refused: room: 403 exceeded quota (1)" in webhook.table(result)


def test_the_webhook_s_admissions_in_flight_are_read_from_its_metrics() -> None:
    text = (
        "# TYPE harvester_quota_webhook_admissions_in_flight gauge\n"
        "harvester_quota_webhook_admissions_in_flight 3.0\n"
    )
    assert webhook.gauge_value(text, webhook.IN_FLIGHT_METRIC) == 3.0
    assert webhook.gauge_value(WEBHOOK_SECONDS, webhook.IN_FLIGHT_METRIC) is None
