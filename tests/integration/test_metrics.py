"""The domain metrics as an operator scrapes them, checked against what happened: migrations of
KubeVirt's real virt-controller (the virt-handler stand-in does the node side)."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator

import aiohttp
import pytest
from harvester_quota.app import ControllerApp
from harvester_quota.config.management import Options
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.health import HealthServer
from harvester_quota.generic.resource import RESOURCE_QUOTAS
from harvester_quota.testbench.localcluster.process import free_port
from harvester_quota.testbench.sim.kubevirt import Outcome, VMSpec
from harvester_quota.testbench.virtcontroller import VirtControllerDriver
from harvester_quota.webhook.metrics import WebhookMetrics
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import eventually
from tests.integration.kubevirt_by_hand import KubeVirtByHand
from tests.integration.test_controllers_on_kubevirt import (
    LONG,
    MIGRATION_TIMEOUT,
    V170_HARD,
    V170_LIMIT,
    kubevirt,
    kv,
    refusals,
    started,
)
from tests.integration.test_monitoring import alerts, rendered

pytestmark = pytest.mark.integration


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


class Scraper:
    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"

    async def samples(self) -> Samples:
        async with aiohttp.ClientSession() as session, session.get(self.url) as response:
            return parse(await response.text())

    async def value(self, name: str, **labels: str) -> float | None:
        return (await self.samples()).get((name, tuple(sorted(labels.items()))))


__all__ = ["kubevirt", "kv"]  # fixtures shared with test_controllers_on_kubevirt.py


@pytest.fixture
async def app_and_scraper(
    kubevirt_api: ApiClient,
) -> AsyncIterator[tuple[ControllerApp, Scraper]]:
    registry = CollectorRegistry()
    app = ControllerApp(
        kubevirt_api,
        Options(leader_elect=False, kubevirt_version="1.6", workers=2),
        registry=registry,
    )
    port = free_port()
    health = HealthServer(host="127.0.0.1", port=port, registry=registry)
    await health.start()
    leading = asyncio.ensure_future(app.lead())  # as `run` does without leader election
    await eventually(app.ready, what="the controller's caches synced")
    yield app, Scraper(port)
    leading.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await leading
    await health.stop()


async def test_room_and_writes_of_one_migration(
    app_and_scraper: tuple[ControllerApp, Scraper],
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
) -> None:
    """The room is exported while the migration holds it and its series goes with it; two quota
    writes; a refusal is counted only if KubeVirt itself recorded one (on a loaded machine its
    first try may beat the raise)."""
    _app, scraper = app_and_scraper
    ns = kv.namespace
    await kv.set_rancher_base(V170_LIMIT)
    await kv.create_quota(V170_HARD)
    spec = VMSpec("vm1", cores=2, memory="4Gi", migration_duration=LONG)
    (await kubevirt.create_vm(spec, node="kwok-node-0")).check()
    name = await kubevirt.migrate("vm1")
    await kubevirt.records.wait_for(lambda: started(kubevirt, ns, name), 60)

    async def room_cpu() -> float | None:
        return await scraper.value("harvester_quota_room", namespace=ns, resource="limits.cpu")

    assert await eventually(room_cpu, what="the room exported") == pytest.approx(2.015)
    assert await scraper.value("harvester_quota_migrations_holding_room", namespace=ns) == 1
    await kubevirt.abort(name)
    record = await kubevirt.wait_migration(name, timeout=MIGRATION_TIMEOUT)

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
    refused = await scraper.value("harvester_quota_target_pods_refused_total", namespace=ns)
    assert refused == (1 if record.refusals else None), record.as_dict()
    # The API server's view of the same work: the two writes, and the caches' lists and watches.
    patches = await scraper.value(
        "harvester_quota_api_requests_total", verb="patch", resource="resourcequotas", code="200"
    )
    assert patches is not None and patches >= 2
    for verb in ("list", "watch"):
        assert await scraper.value(
            "harvester_quota_api_requests_total", verb=verb, resource="pods", code="200"
        ), verb


async def test_a_refused_migration_is_counted_once_and_its_blocked_time_observed(
    app_and_scraper: tuple[ControllerApp, Scraper],
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
) -> None:
    """KubeVirt's condition on the VMIM is what counts, not our own bookkeeping: a quota the
    controller may not scale refuses virt-controller's target pod again and again (each retry a
    FailedCreate), and the migration is counted once; once scaling is allowed it goes through and
    its blocked time is observed."""
    _app, scraper = app_and_scraper
    ns = kv.namespace
    await kv.set_rancher_base(V170_LIMIT)
    await kv.create_quota(V170_HARD)
    skip = {"metadata": {"annotations": {"harvesterhci.io/skipResourceQuotaAutoScaling": "true"}}}
    await kv.api.patch(RESOURCE_QUOTAS, "default-quota", skip, ns)
    (await kubevirt.create_vm(VMSpec("vm1", cores=2, memory="4Gi"), node="kwok-node-0")).check()
    name = await kubevirt.migrate("vm1")

    async def counted() -> float | None:
        return await scraper.value("harvester_quota_target_pods_refused_total", namespace=ns)

    assert await eventually(counted, timeout=60, what="the refusal counted") == 1
    await kubevirt.records.wait_for(lambda: refusals(kubevirt, ns, name) >= 2, 60)
    assert await counted() == 1, "KubeVirt's retries are the same migration"
    unskip = {"metadata": {"annotations": {"harvesterhci.io/skipResourceQuotaAutoScaling": None}}}
    await kv.api.patch(RESOURCE_QUOTAS, "default-quota", unskip, ns)
    record = await kubevirt.wait_migration(name, timeout=MIGRATION_TIMEOUT)
    assert record.outcome is Outcome.SUCCEEDED, record.as_dict()

    async def observed() -> float | None:
        return await scraper.value("harvester_quota_migration_blocked_seconds_count")

    assert await eventually(observed, what="the blocked time observed") == 1
    assert await counted() == 1, "the same migration is counted once"


SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}")
MATCHER = re.compile(r'\s*([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')
PROMETHEUS_OWN = {"up"}
"""Series Prometheus writes itself for every target, never on /metrics."""


def selected(samples: Samples, name: str, matchers: str) -> list[dict[str, str]]:
    """The label sets of `samples` an instant selector picks, its job matcher aside (the job is
    the target's label, which Prometheus adds)."""
    wanted = [
        (label, op, value.replace("\\\\", "\\"))
        for label, op, value in MATCHER.findall(matchers)
        if label != "job"
    ]
    found = []
    for (sample_name, labels), _value in samples.items():
        have = dict(labels)
        if sample_name == name and all(matches(have.get(k, ""), op, v) for k, op, v in wanted):
            found.append(have)
    return found


def matches(actual: str, op: str, value: str) -> bool:
    hit = actual == value if op in ("=", "!=") else re.fullmatch(value, actual) is not None
    return hit if op in ("=", "=~") else not hit


async def test_every_alert_selects_series_the_controller_and_the_webhook_really_export(
    app_and_scraper: tuple[ControllerApp, Scraper],
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
) -> None:
    """Instead of promtool's rule tests (building promtool costs more than half the cold
    cluster-bin: bench/CLUSTER.md): every instant selector of every alert the
    chart renders, job aside, picks series from the real /metrics of a leading controller that
    saw a migration refused by quota (or from the webhook's, for the webhook's job), and every
    by() label is on them; NoLeader's sum is 1 while it leads."""
    _app, scraper = app_and_scraper
    ns = kv.namespace
    await kv.set_rancher_base(V170_LIMIT)
    await kv.create_quota(V170_HARD)
    skip = {"metadata": {"annotations": {"harvesterhci.io/skipResourceQuotaAutoScaling": "true"}}}
    await kv.api.patch(RESOURCE_QUOTAS, "default-quota", skip, ns)
    (await kubevirt.create_vm(VMSpec("vm1", cores=2, memory="4Gi"), node="kwok-node-0")).check()
    await kubevirt.migrate("vm1")

    async def counted() -> float | None:
        return await scraper.value("harvester_quota_target_pods_refused_total", namespace=ns)

    await eventually(counted, timeout=60, what="the refusal counted")
    controller = await scraper.samples()
    webhook_registry = CollectorRegistry()
    WebhookMetrics(webhook_registry)
    webhook = parse(generate_latest(webhook_registry).decode())
    documents = rendered({"monitoring": {"prometheusRule": {"enabled": True}}})
    rules = alerts(documents)
    assert len(rules) >= 6
    for rule in rules:
        expr = rule["expr"]
        selectors = SELECTOR.findall(expr)
        assert {n for n, _ in selectors} >= set(re.findall(r"harvester_quota_\w+", expr)), expr
        grouped = {g.strip() for by in re.findall(r"by \(([^)]*)\)", expr) for g in by.split(",")}
        for name, matchers in selectors:
            if name in PROMETHEUS_OWN:
                continue
            source = webhook if name.startswith("harvester_quota_webhook_") else controller
            found = selected(source, name, matchers)
            assert found, f"{rule['alert']}: {name}{{{matchers}}} selects nothing on /metrics"
            assert all(grouped <= labels.keys() for labels in found), (rule["alert"], grouped)
    leader = rules[0]
    assert leader["alert"] == "HarvesterQuotaNoLeader"
    (name, matchers), *_ = SELECTOR.findall(leader["expr"])

    def leaders(samples: Samples) -> float:
        return sum(
            samples[(name, tuple(sorted(labels.items())))]
            for labels in selected(samples, name, matchers)
        )

    assert leaders(controller) == 1, "NoLeader's sum while this replica leads"
