"""The benchmark's own helpers: population naming, the baseline queue, result tables."""

from __future__ import annotations

import asyncio

from bench import informer, populate, workqueue


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
        assert caches.settled_views.aside(reconcile.NAMESPACE) == 4, "the finished ones settled"
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
