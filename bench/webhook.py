"""The webhook on the tenant's path (issue 30, item 6): pod creates at a steady rate through the
real API server, in three namespaces side by side on one cluster:

- ``room``: a namespace whose quota holds room for a live migration in flight (the controller
  raised it, the namespace carries the room-held label), so every pod create goes through the
  room-held-pods webhook, which decides it on the reservation every replica shares (one Lease
  round trip per admitted pod);
- ``plain``: a namespace of the product (a managed quota, no room held): the pods webhook is
  called and answers at once;
- ``none``: a namespace the webhook configuration does not select, with the same quota: quota
  admission and the API server alone, the baseline.

The product runs as deployed (``pkg/testbench/scale/product.py``: the controller and the webhook
as their service accounts, the webhook over TLS with client authentication). The room is held by
a migration that never ends: the VM is started by the KubeVirt simulator, which is then stopped,
and the migration is created and set Pending by hand, so nothing ever creates its target pod.

Each round drives ``rate`` creates per second for ``seconds`` seconds into each namespace in turn
(the order rotated per round), open loop: create ``i`` is sent at ``start + i / rate`` whether or
not the earlier ones have answered. Per namespace it reports the creates' round trip (client
side, exact percentiles), the webhook's own ``harvester_quota_webhook_seconds{endpoint="pods"}``
and the API server's ``apiserver_admission_webhook_admission_duration_seconds`` for our pod
webhooks (both histograms: percentiles interpolated within buckets), and how late the client
sent its creates (a late client means the machine, not the webhook, set the pace). The pods are
gated (``schedulingGates``): no scheduler or kwok work follows a create, and between phases they
are deleted and awaited gone, and each phase starts once the webhook holds no admission.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import aiohttp
from harvester_quota.apis.kubevirt import VIRTUAL_MACHINE_INSTANCE_MIGRATIONS
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import NAMESPACES, PODS, RESOURCE_QUOTAS
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.localcluster.deploy import KINDS as DEPLOY_KINDS
from harvester_quota.testbench.scale.product import Product
from harvester_quota.testbench.scale.stats import percentile
from harvester_quota.testbench.sim.kubevirt.config import KubeVirtConfig
from harvester_quota.testbench.sim.kubevirt.objects import VMSpec, render_migration
from harvester_quota.testbench.sim.kubevirt.simulator import KubeVirtSimulator
from harvester_quota.util.annotations import LABEL_DEFAULT_RESOURCE_QUOTA, LABEL_ROOM_HELD, TRUE
from prometheus_client.parser import text_string_to_metric_families

from bench.report import median

KINDS: Final = ("room", "plain", "none")
DESCRIPTIONS: Final = {
    "room": "room held (a migration in flight): the room-held-pods webhook, a reservation each",
    "plain": "the product's namespace, no room held: the pods webhook, answered at once",
    "none": "not selected by the webhook configuration: API server and quota admission only",
}
BENCH_LABEL: Final = "bench.harvester-quota.io/webhook"
POD_LABEL: Final = "bench.harvester-quota.io/webhook-pod"
KUBEVIRT_VERSION: Final = "1.6"
OPEN_HARD: Final = {"limits.cpu": "100k", "limits.memory": "100Pi", "requests.memory": "100Pi"}
WEBHOOK_METRIC: Final = "harvester_quota_webhook_seconds"
APISERVER_METRIC: Final = "apiserver_admission_webhook_admission_duration_seconds"
OUR_POD_WEBHOOKS: Final = ("pods.harvester-quota.io", "room-held-pods.harvester-quota.io")
TARGETS_MS: Final = {"room": 20.0, "plain": 5.0}
"""Issue 30's p99 targets for the webhook's admission time."""
ROOM_TIMEOUT: Final = 120.0
IN_FLIGHT_METRIC: Final = "harvester_quota_webhook_admissions_in_flight"
IDLE_TIMEOUT: Final = 30.0


PREFIX: Final = "webhook-bench-"


def namespace_name(kind: str, prefix: str = PREFIX) -> str:
    return f"{prefix}{kind}"


# Histograms -----------------------------------------------------------------------------------


Buckets = dict[float, float]
"""Upper bound -> cumulative count (Prometheus ``le``), +Inf as math.inf."""


def histogram_buckets(text: str, metric: str, keep: Callable[[Mapping[str, str]], bool]) -> Buckets:
    """The cumulative buckets of `metric` in a Prometheus exposition, summed over the series
    `keep` accepts."""
    buckets: Buckets = {}
    for family in text_string_to_metric_families(text):
        if family.name != metric:
            continue
        for sample in family.samples:
            if sample.name != metric + "_bucket" or not keep(sample.labels):
                continue
            bound = float(sample.labels["le"])
            buckets[bound] = buckets.get(bound, 0.0) + sample.value
    return buckets


def gauge_value(text: str, metric: str) -> float | None:
    """The value of an unlabelled gauge in a Prometheus exposition (None if absent)."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == metric:
                return float(sample.value)
    return None


def bucket_delta(after: Buckets, before: Buckets) -> Buckets:
    return {bound: count - before.get(bound, 0.0) for bound, count in after.items()}


def bucket_quantile(buckets: Buckets, fraction: float) -> float | None:
    """The `fraction` quantile of cumulative `buckets`, linear within the bucket it falls in (as
    Prometheus' histogram_quantile); the last finite bound when it falls in +Inf; None if empty."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = fraction * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


# One phase ------------------------------------------------------------------------------------


@dataclass
class Phase:
    """One namespace driven for one round."""

    kind: str
    round_index: int
    sent: int = 0
    created: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    round_trips: list[float] = field(default_factory=list)
    lateness: list[float] = field(default_factory=list)
    webhook: Buckets = field(default_factory=dict)
    apiserver: Buckets = field(default_factory=dict)
    seconds: float = 0.0


def gated_pod(index: int) -> dict[str, Any]:
    """A pod quota charges (limits and requests on every closed key) that nothing schedules."""
    resources = {"cpu": "1m", "memory": "1Mi"}
    return {
        "metadata": {"name": f"wb-{index:06d}", "labels": {POD_LABEL: TRUE}},
        "spec": {
            "schedulingGates": [{"name": "bench.harvester-quota.io/never"}],
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {"limits": resources, "requests": resources},
                }
            ],
        },
    }


async def drive(api: ApiClient, namespace: str, rate: float, seconds: float, phase: Phase) -> None:
    """Creates ``rate * seconds`` pods in `namespace`, create ``i`` sent at ``i / rate`` seconds
    after the start (open loop); fills `phase` with each create's round trip and lateness."""
    total = round(rate * seconds)
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.05
    offset = phase.round_index * 100_000

    async def one(index: int) -> None:
        due = start + index / rate
        await asyncio.sleep(max(0.0, due - loop.time()))
        sent = loop.time()
        phase.lateness.append(sent - due)
        try:
            await api.create(PODS, gated_pod(offset + index), namespace)
        except errors.ApiError as error:
            reason = f"{error.status} {error.message[:80]}"
            phase.refused[reason] = phase.refused.get(reason, 0) + 1
            return
        finally:
            phase.sent += 1
        phase.round_trips.append(loop.time() - sent)
        phase.created += 1

    began = loop.time()
    await asyncio.gather(*(one(i) for i in range(total)))
    phase.seconds = loop.time() - began


async def delete_pods(api: ApiClient, namespace: str, timeout: float = 120.0) -> None:
    """Deletes the bench's pods of `namespace` and waits until they are gone."""
    selector = f"{POD_LABEL}={TRUE}"
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
    await api.request("DELETE", PODS.path(namespace), params={"labelSelector": selector}, body=body)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = await api.list(PODS, namespace, label_selector=selector, limit=1)
        if not left.get("items"):
            return
        await asyncio.sleep(0.5)
    raise TimeoutError(f"the bench's pods of {namespace} were not gone within {timeout:.0f}s")


# Setup ----------------------------------------------------------------------------------------


async def create_namespace(
    api: ApiClient, kind: str, run_label: Mapping[str, str], prefix: str = PREFIX
) -> str:
    """The namespace of `kind` (labelled for the product unless ``none``) with an open, managed
    quota whose status is filled (quota admission refuses pods until then)."""
    name = namespace_name(kind, prefix)
    labels = dict(run_label) if kind != "none" else {}
    with contextlib.suppress(errors.AlreadyExists):
        await api.create(NAMESPACES, {"metadata": {"name": name, "labels": labels}})
    quota = {
        "metadata": {"name": "default-quota", "labels": {LABEL_DEFAULT_RESOURCE_QUOTA: TRUE}},
        "spec": {"hard": dict(OPEN_HARD)},
    }
    with contextlib.suppress(errors.AlreadyExists):
        await api.create(RESOURCE_QUOTAS, quota, name)
    await _until(lambda: _quota_has_status(api, name), 60.0, f"the quota status of {name}")
    await _until(lambda: _service_account(api, name), 60.0, f"the service account of {name}")
    return name


async def _quota_has_status(api: ApiClient, namespace: str) -> bool:
    quota = await api.get(RESOURCE_QUOTAS, "default-quota", namespace)
    return "used" in (quota.get("status") or {})


async def _service_account(api: ApiClient, namespace: str) -> bool:
    try:
        await api.get(DEPLOY_KINDS["ServiceAccount"], "default", namespace)
    except errors.NotFound:
        return False
    return True


async def start_vm(api: ApiClient, namespace: str) -> None:
    """A running VM in `namespace`, started by the KubeVirt simulator, which is stopped again so
    that nothing plays the migration created later."""
    simulator = KubeVirtSimulator(
        api, namespace=namespace, config=KubeVirtConfig(kubevirt_version=KUBEVIRT_VERSION)
    )
    await simulator.start(sync_timeout=60)
    try:
        with contextlib.suppress(errors.AlreadyExists):
            await simulator.create_vm(VMSpec("vm1", cores=1, memory="1Gi"), namespace)
    finally:
        await simulator.stop(release_finalizers=True)


async def hold_room(api: ApiClient, namespace: str) -> None:
    """A migration of vm1 set Pending by hand, which nothing ever plays; returns once the
    controller raised the quota for it and labelled the namespace room-held."""
    migration = render_migration(namespace, "vm1", name="vm1-held")
    migration["metadata"].pop("finalizers", None)
    with contextlib.suppress(errors.AlreadyExists):
        await api.create(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, migration, namespace)
    current = await api.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, "vm1-held", namespace)
    current["status"] = {**(current.get("status") or {}), "phase": "Pending"}
    await api.update_status(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, current)
    await _until(lambda: _room_held(api, namespace), ROOM_TIMEOUT, f"room held in {namespace}")


async def _room_held(api: ApiClient, namespace: str) -> bool:
    labels = (await api.get(NAMESPACES, namespace))["metadata"].get("labels") or {}
    return labels.get(LABEL_ROOM_HELD) == TRUE


async def _until(check: Callable[[], Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.3)
    raise TimeoutError(f"no {what} within {timeout:.0f}s")


# The run --------------------------------------------------------------------------------------


@dataclass
class WebhookBenchResult:
    rate: float
    seconds: float
    rounds: int
    phases: list[Phase] = field(default_factory=list)


async def webhook_idle(
    session: aiohttp.ClientSession, product: Product, timeout: float = IDLE_TIMEOUT
) -> bool:
    """Waits until the webhook holds no admission (IN_FLIGHT_METRIC is 0): a phase that
    overran leaves admissions the API server gave up on, which the next phase must not share
    the webhook with. False if it was still busy after `timeout` seconds."""
    url = f"http://127.0.0.1:{product.webhook_metrics_port}/metrics"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        async with session.get(url, timeout=aiohttp.ClientTimeout(30)) as response:
            if gauge_value(await response.text(), IN_FLIGHT_METRIC) == 0:
                return True
        await asyncio.sleep(0.2)
    return False


async def scrape(
    api: ApiClient, session: aiohttp.ClientSession, product: Product
) -> tuple[Buckets, Buckets]:
    """(the webhook's pods endpoint histogram, the API server's for our pod webhooks) now."""
    url = f"http://127.0.0.1:{product.webhook_metrics_port}/metrics"
    async with session.get(url, timeout=aiohttp.ClientTimeout(30)) as response:
        webhook_text = await response.text()
    async with api.session.get(api.config.host + "/metrics") as response:
        apiserver_text = await response.text()
    webhook = histogram_buckets(
        webhook_text, WEBHOOK_METRIC, lambda labels: labels.get("endpoint") == "pods"
    )
    apiserver = histogram_buckets(
        apiserver_text,
        APISERVER_METRIC,
        lambda labels: (
            labels.get("operation") == "CREATE" and labels.get("name", "") in OUR_POD_WEBHOOKS
        ),
    )
    return webhook, apiserver


async def run(
    api: ApiClient,
    cluster: ClusterInfo,
    workdir: Path,
    *,
    rate: float,
    seconds: float,
    rounds: int,
    prefix: str = PREFIX,
    progress: Callable[[str], None] = print,
) -> WebhookBenchResult:
    """Sets the three namespaces (named `prefix` + kind) up, starts the product, holds room,
    then drives every namespace `rounds` times (order rotated per round). The product is stopped
    at the end; the namespaces stay (a rerun on a kept cluster reuses them)."""
    run_label = {BENCH_LABEL: prefix.rstrip("-")}
    namespaces = {kind: await create_namespace(api, kind, run_label, prefix) for kind in KINDS}
    await start_vm(api, namespaces["room"])
    product = Product(
        api,
        cluster,
        workdir,
        match_labels=run_label,
        kubevirt_version=KUBEVIRT_VERSION,
        lease_name=prefix.rstrip("-"),
    )
    result = WebhookBenchResult(rate, seconds, rounds)
    await product.start()
    try:
        progress(f"webhook: product running as deployed (logs in {workdir})")
        await hold_room(api, namespaces["room"])
        progress("webhook: room held in " + namespaces["room"])
        async with aiohttp.ClientSession() as session:
            for round_index in range(rounds):
                shift = round_index % len(KINDS)
                for kind in KINDS[shift:] + KINDS[:shift]:
                    phase = Phase(kind, round_index)
                    if not await webhook_idle(session, product):
                        progress(f"webhook: still busy after {IDLE_TIMEOUT:.0f}s; {kind} anyway")
                    before = await scrape(api, session, product)
                    await drive(api, namespaces[kind], rate, seconds, phase)
                    after = await scrape(api, session, product)
                    phase.webhook = bucket_delta(after[0], before[0])
                    phase.apiserver = bucket_delta(after[1], before[1])
                    await delete_pods(api, namespaces[kind])
                    result.phases.append(phase)
                    progress(f"webhook round {round_index + 1}/{rounds}: {phase_line(phase)}")
        if not await _room_held(api, namespaces["room"]):
            raise RuntimeError("the room was given back during the run: its figures are void")
    finally:
        await product.stop()
    return result


# Report ---------------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{1000 * value:.1f}"


def phase_line(phase: Phase) -> str:
    return (
        f"{phase.kind:5} {phase.created}/{phase.sent} created, round trip p50 "
        f"{_ms(percentile(phase.round_trips, 0.5))} p99 "
        f"{_ms(percentile(phase.round_trips, 0.99))} ms, webhook p99 "
        f"{_ms(bucket_quantile(phase.webhook, 0.99))} ms, sent late p99 "
        f"{_ms(percentile(phase.lateness, 0.99))} ms"
    )


def _merged(buckets: Iterable[Buckets]) -> Buckets:
    total: Buckets = {}
    for one in buckets:
        for bound, count in one.items():
            total[bound] = total.get(bound, 0.0) + count
    return total


def table(result: WebhookBenchResult) -> list[str]:
    """Markdown: per namespace kind, every round together (round trips pooled, histograms
    summed), with the median of the per-round p99s beside the pooled p99."""
    lines = [
        f"**{result.rate:g} pod creates/s for {result.seconds:g} s per namespace, "
        f"{result.rounds} rounds interleaved** (ms; round trip = the create request as the "
        "client saw it, exact; webhook = harvester_quota_webhook_seconds{endpoint=pods}; "
        "API server = its admission_webhook_admission_duration_seconds for our pod webhooks; "
        "histogram percentiles interpolated within buckets)",
        "",
        "| namespace | created / sent | round trip p50 | round trip p99 | p99 per round "
        "(median) | round trip p99 vs none | webhook p50 | webhook p99 | target p99 "
        "| API server's webhook call p99 | client sent late p99 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    by_kind = {kind: [p for p in result.phases if p.kind == kind] for kind in KINDS}
    pooled = {kind: [t for p in phases for t in p.round_trips] for kind, phases in by_kind.items()}
    baseline = percentile(pooled["none"], 0.99)
    for kind, phases in by_kind.items():
        if not phases:
            continue
        trips = pooled[kind]
        p99 = percentile(trips, 0.99)
        per_round = [q for p in phases if (q := percentile(p.round_trips, 0.99)) is not None]
        ratio = f"{p99 / baseline:.2f}" if p99 is not None and baseline else "-"
        webhook = _merged(p.webhook for p in phases)
        apiserver = _merged(p.apiserver for p in phases)
        target = TARGETS_MS.get(kind)
        lines.append(
            f"| {kind} | {sum(p.created for p in phases)} / {sum(p.sent for p in phases)} "
            f"| {_ms(percentile(trips, 0.5))} | {_ms(p99)} "
            f"| {_ms(median(per_round) if per_round else None)} | {ratio} "
            f"| {_ms(bucket_quantile(webhook, 0.5))} | {_ms(bucket_quantile(webhook, 0.99))} "
            f"| {'-' if target is None else f'{target:g}'} "
            f"| {_ms(bucket_quantile(apiserver, 0.99))} "
            f"| {_ms(percentile([t for p in phases for t in p.lateness], 0.99))} |"
        )
    refused: dict[str, int] = {}
    for phase in result.phases:
        for reason, count in phase.refused.items():
            key = f"{phase.kind}: {reason}"
            refused[key] = refused.get(key, 0) + count
    lines += [f"- refused: {reason} ({count})" for reason, count in sorted(refused.items())]
    return lines


def legend() -> list[str]:
    return [f"- `{kind}`: {text}" for kind, text in DESCRIPTIONS.items()]
