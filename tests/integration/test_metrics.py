"""The domain metrics as an operator scrapes them, checked against what happened."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from harvester_quota.app import ControllerApp
from harvester_quota.config.management import Options
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.health import HealthServer
from harvester_quota.localcluster.process import free_port
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import eventually, succeed_migration
from tests.integration.kubevirt_by_hand import KubeVirtByHand

pytestmark = pytest.mark.integration


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class Scraper:
    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"

    async def samples(self) -> Samples:
        async with aiohttp.ClientSession() as session, session.get(self.url) as response:
            text = await response.text()
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }

    async def value(self, name: str, **labels: str) -> float | None:
        return (await self.samples()).get((name, tuple(sorted(labels.items()))))


@pytest.fixture
async def app_and_scraper(api: ApiClient) -> AsyncIterator[tuple[ControllerApp, Scraper]]:
    registry = CollectorRegistry()
    app = ControllerApp(
        api, Options(leader_elect=False, kubevirt_version="1.6", workers=2), registry=registry
    )
    port = free_port()
    health = HealthServer(host="127.0.0.1", port=port, registry=registry)
    await health.start()
    await app.start()
    yield app, Scraper(port)
    await app.stop()
    await health.stop()


async def test_room_and_writes_of_one_migration(
    app_and_scraper: tuple[ControllerApp, Scraper], kv: KubeVirtByHand
) -> None:
    _app, scraper = app_and_scraper
    ns = kv.namespace
    vmi, source, migration = await kv.v170_migration()

    async def room_cpu() -> float | None:
        return await scraper.value("harvester_quota_room", namespace=ns, resource="limits.cpu")

    assert await eventually(room_cpu, what="the room exported") == pytest.approx(2.015)
    assert await scraper.value("harvester_quota_migrations_holding_room", namespace=ns) == 1

    target = await eventually(lambda: kv.try_create_target(vmi, migration), what="target admitted")
    await succeed_migration(kv, migration, source, target, walk=False)
    await kv.delete_pod(source["metadata"]["name"], grace=0)

    async def released() -> bool:
        samples = await scraper.samples()
        return not any(
            name == "harvester_quota_room" and ("namespace", ns) in labels
            for name, labels in samples
        )

    await eventually(released, what="the room's series removed")
    assert await scraper.value("harvester_quota_migrations_holding_room", namespace=ns) is None

    async def two_writes() -> bool:
        # The room's series goes when the plan is made; the write that releases it follows.
        return await scraper.value("harvester_quota_quota_writes_total", outcome="written") == 2

    await eventually(two_writes, what="the raise and the release written")
    assert await scraper.value("harvester_quota_reconcile_duration_seconds_count") >= 2  # type: ignore[operator]
    assert await scraper.value("harvester_quota_target_pods_refused_total", namespace=ns) is None


async def test_a_refused_migration_is_counted_once_and_its_blocked_time_observed(
    app_and_scraper: tuple[ControllerApp, Scraper], kv: KubeVirtByHand
) -> None:
    """KubeVirt's condition on the VMIM is what counts, not our own bookkeeping."""
    _app, scraper = app_and_scraper
    ns = kv.namespace
    _vmi, _source, migration = await kv.v170_migration()
    refused = {"type": "migrationRejectedByResourceQuota", "status": "True"}
    migration = await kv.set_phase(migration, "Pending", conditions=[refused])
    await kv.set_phase(migration, "Pending", conditions=[refused, {"type": "x", "status": "True"}])

    async def counted() -> float | None:
        return await scraper.value("harvester_quota_target_pods_refused_total", namespace=ns)

    assert await eventually(counted, what="the refusal counted") == 1
    await kv.set_phase(migration, "Scheduling", conditions=[])

    async def observed() -> float | None:
        return await scraper.value("harvester_quota_migration_blocked_seconds_count")

    assert await eventually(observed, what="the blocked time observed") == 1
    assert await counted() == 1, "the same migration is counted once"
