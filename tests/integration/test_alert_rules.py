"""The chart's alert rules evaluated, instead of by promtool's rule tests (building promtool costs
more than half the cold cluster-bin: bench/CLUSTER.md), by the test bench's PromQL evaluator
(harvester_quota.testbench.promql) over scrapes of the real processes.

One recording per module: `harvester-quota run` (leader-elected) and `harvester-quota webhook` as
deployed (test_deployed_processes.py's token kubeconfigs and RBAC, the webhook registered for
one namespace with its self-managed certificate), their /metrics scraped back to back and each
round stamped 30 s after the last (the chart's scrape interval: the moments are a virtual
clock's, the texts are real), under the jobs the chart's PodMonitors give. On that timeline:
healthy, then a migration really refused by quota (KubeVirt's condition on the VMIM, set as
virt-controller sets it) for 7 minutes, then admitted, 16 minutes after the refusal, then the
webhook stopped, then the controller stopped. The timeline is shifted so that the refusal's
scrape falls at the real moment it was taken, so the real timestamps the controller exports
(when a refusal began) stand where they belong on it. Conditions too costly to make real (a
write error, a timed-out target pod, a certificate near its end, a standby's leader gauge) are
the recorded texts with one value moved as the real process moves it; each test says which.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from harvester_quota.apis.kubevirt import (
    CONDITION_REJECTED_BY_QUOTA,
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
)
from harvester_quota.generic.client import ApiClient
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.localcluster.deploy import (
    webhook_client_flags,
    write_token_kubeconfig,
)
from harvester_quota.testbench.localcluster.process import free_port
from harvester_quota.testbench.promql import Evaluator, SeriesDatabase, Target, parse_duration
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import eventually
from tests.integration import deployment
from tests.integration.conftest import fresh_namespace
from tests.integration.kubevirt_by_hand import KubeVirtByHand
from tests.integration.test_deployed_processes import process, ready
from tests.integration.test_monitoring import alerts, rendered

pytestmark = pytest.mark.integration

INTERVAL = 30.0
"""Seconds between two scrapes of the timeline, and between two rule evaluations: the chart's
PodMonitor interval (prometheus-operator evaluates rules every 30 s by default too)."""
HEALTHY = 12
"""Scrapes before anything happens: 6 minutes, longer than any rule's `for`."""
BLOCKED = 14
"""Scrapes while the refusal stands: 7 minutes, past the blocked rule's 5."""
LATER = 32
"""Scrapes after the refusal (cleared after BLOCKED of them): 16 minutes, past the refusal
rule's 15-minute window."""
DOWN = 5
"""Failed scrapes of a stopped process: 2 minutes from the first, the down rules' `for`."""
MONITORING = {"monitoring": {"podMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}}
NAMESPACE = deployment.SYSTEM_NAMESPACE
V170_LIMIT = {"limitsCpu": "3000m", "limitsMemory": "5000Mi"}
V170_HARD = {"limits.cpu": "3", "limits.memory": "5000Mi"}
REFUSED = "harvester_quota_target_pods_refused_total"
REFUSED_SINCE = "harvester_quota_migration_refused_since_timestamp_seconds"
FIRED_BY = {
    "HarvesterQuotaNoLeader": "test_no_leader_fires_two_minutes_after_the_controller_stops",
    "HarvesterQuotaWebhookDown": "test_webhook_down_fires_two_minutes_after_its_scrapes_fail",
    "HarvesterQuotaWebhookCertificateExpiring": (
        "test_certificate_expiring_fires_with_a_tenth_of_its_lifetime_left_and_not_before"
    ),
    "HarvesterQuotaTargetPodsRefused": (
        "test_target_pods_refused_fires_for_a_real_refusal_in_its_namespace_for_15_minutes"
    ),
    "HarvesterQuotaTargetPodTimedOut": "test_target_pod_timed_out_fires_on_one_timed_out_admission",
    "HarvesterQuotaMigrationBlocked": (
        "test_migration_blocked_fires_while_a_real_refusal_stands_past_5_minutes_in_its_namespace"
    ),
    "HarvesterQuotaWriteErrors": "test_write_errors_fire_on_one_failed_quota_write_for_10_minutes",
}
"""Every alert the chart renders -> the test here that makes it fire."""


Scrape = tuple[float, str, str | None]
"""(moment, component, exposition text or None when the scrape failed)."""


@functools.cache
def monitoring() -> list[dict[str, Any]]:
    """The chart rendered with its PodMonitors and PrometheusRule (helm runs once)."""
    return rendered(MONITORING)


def rules() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for r in alerts(monitoring())}


def targets() -> dict[str, Target]:
    """The controller's and the webhook's targets as their PodMonitors name their jobs
    (<namespace>/<PodMonitor name>), with the target labels prometheus-operator adds."""
    found = {}
    for monitor in monitoring():
        if monitor["kind"] != "PodMonitor":
            continue
        component = monitor["metadata"]["labels"]["app.kubernetes.io/component"]
        job = f"{monitor['metadata']['namespace']}/{monitor['metadata']['name']}"
        pod = {"namespace": NAMESPACE, "pod": f"harvester-quota-{component}-0"}
        found[component] = Target(job, f"10.0.0.1:{component}", pod)
    assert set(found) == {"controller", "webhook"}
    return found


@dataclass
class Recording:
    """The real scrapes on their timeline, and its named moments."""

    start: float
    namespace: str
    """The tenant namespace of the refused migration."""
    scrapes: list[Scrape] = field(default_factory=list)
    marks: dict[str, float] = field(default_factory=dict)

    @property
    def now(self) -> float:
        return self.scrapes[-1][0] if self.scrapes else self.start

    def texts(self, component: str, until: str) -> list[str]:
        """The component's scrape texts up to mark `until` (all answered)."""
        found = [t for at, c, t in self.scrapes if c == component and at <= self.marks[until]]
        assert all(t is not None for t in found)
        return [t for t in found if t is not None]

    def database(
        self, until: str, moved: Callable[[int, str, str], str | None] = lambda i, c, t: t
    ) -> SeriesDatabase:
        """The scrapes up to mark `until` in a fresh database, each answered text through
        `moved`(round, component, text) (None: that scrape failed)."""
        db = SeriesDatabase()
        components = targets()
        for at, component, text in self.scrapes:
            if at <= self.marks[until]:
                round_ = round((at - self.start) / INTERVAL)
                db.record(
                    at,
                    components[component],
                    None if text is None else moved(round_, component, text),
                )
        return db

    def moment(self, round_: int) -> float:
        return self.start + round_ * INTERVAL

    def round_of(self, mark: str) -> int:
        return round((self.marks[mark] - self.start) / INTERVAL)

    def shift(self, seconds: float) -> None:
        """Moves the whole timeline (its start, every scrape and mark) by `seconds`."""
        self.start += seconds
        self.scrapes = [(at + seconds, c, t) for at, c, t in self.scrapes]
        self.marks = {name: at + seconds for name, at in self.marks.items()}


@dataclass
class Product:
    controller: subprocess.Popen[bytes]
    webhook: subprocess.Popen[bytes]
    ports: dict[str, int]


async def scrape(port: int) -> str | None:
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(
                f"http://127.0.0.1:{port}/metrics", timeout=aiohttp.ClientTimeout(total=5)
            ) as response,
        ):
            return await response.text() if response.status == 200 else None
    except (aiohttp.ClientError, TimeoutError):
        return None


async def scrape_round(recording: Recording, product: Product) -> None:
    at = recording.now + INTERVAL if recording.scrapes else recording.start
    for component, port in product.ports.items():
        recording.scrapes.append((at, component, await scrape(port)))


@contextlib.asynccontextmanager
async def running_product(
    api: ApiClient, cluster: ClusterInfo, namespace: str, workdir: Path
) -> AsyncIterator[Product]:
    """test_deployed_processes.deployed's controller and webhook, their metrics ports kept."""
    await deployment.apply_rbac(api)
    kubeconfigs = [
        await write_token_kubeconfig(api, cluster, account, workdir / f"{account}.kubeconfig")
        for account in ("harvester-quota", "harvester-quota-webhook")
    ]
    await deployment.reset_ca_secret(api)
    certificates = deployment.shipped_self_signed()
    health, webhook_port, metrics = free_port(), free_port(), free_port()
    controller_args = [
        "run",
        f"--kubeconfig={kubeconfigs[0]}",
        f"--namespace={NAMESPACE}",
        f"--lease-name=alerts-{namespace[-6:]}",
        f"--health-port={health}",
        "--kubevirt-version=1.6",
    ]
    webhook_args = [
        "webhook",
        f"--kubeconfig={kubeconfigs[1]}",
        f"--cert-file={workdir / 'tls.crt'}",
        f"--key-file={workdir / 'tls.key'}",
        f"--self-signed-secret={certificates.secret_name}",
        f"--webhook-configuration={certificates.configuration}",
        "--cert-host=127.0.0.1",
        "--host=127.0.0.1",
        f"--port={webhook_port}",
        *webhook_client_flags(cluster),
        "--metrics-host=127.0.0.1",
        f"--metrics-port={metrics}",
        f"--controller-user={deployment.CONTROLLER_USER}",
        f"--target-creator={deployment.KUBEVIRT_USER}",
        "--kubevirt-version=1.6",
    ]
    with (
        process(controller_args, workdir / "controller.log") as controller,
        process(webhook_args, workdir / "webhook.log") as webhook,
    ):
        for what, url in (("controller", health), ("webhook", metrics)):
            await eventually(
                lambda u=url: ready(f"http://127.0.0.1:{u}/readyz"),
                timeout=60,
                what=f"{what} ready",
            )
        try:
            await deployment.register_self_certified(api, webhook_port, namespace)
            yield Product(controller, webhook, {"controller": health, "webhook": metrics})
        finally:
            await deployment.unregister_self_certified(api)


def value(text: str | None, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(text or ""):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return None


async def exported(port: int, name: str, **labels: str) -> float | None:
    return value(await scrape(port), name, **labels)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(20)


async def refuse_a_migration(api: ApiClient, cluster: ClusterInfo, namespace: str) -> None:
    """A VM migrating in a full namespace, its VMIM carrying KubeVirt's quota refusal as
    virt-controller sets it when quota admission refuses the target pod."""
    tenant = KubeVirtByHand(api, namespace)
    await tenant.set_rancher_base(V170_LIMIT)
    await tenant.create_quota(V170_HARD)
    kubevirt_api = await deployment.client_as(api, cluster, "kubevirt-controller")
    try:
        kubevirt = KubeVirtByHand(kubevirt_api, namespace)
        vmi, _source = await kubevirt.start_vm("vm1")
        migration = await kubevirt.migrate(vmi)
        refused = {
            "type": CONDITION_REJECTED_BY_QUOTA,
            "status": "True",
            "reason": "FailedCreate",
            "lastProbeTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        await kubevirt.set_phase(migration, "Pending", conditions=[refused])
    finally:
        await kubevirt_api.close()


async def clear_the_refusal(api: ApiClient, cluster: ClusterInfo, namespace: str) -> None:
    """What virt-controller does once a target pod is admitted: the migration leaves Pending
    for Scheduling with the condition still on, then the condition is dropped."""
    kubevirt_api = await deployment.client_as(api, cluster, "kubevirt-controller")
    try:
        kubevirt = KubeVirtByHand(kubevirt_api, namespace)
        (migration,) = (await kubevirt_api.list(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, namespace))[
            "items"
        ]
        still = migration["status"]["conditions"]
        migration = await kubevirt.set_phase(migration, "Scheduling", conditions=still)
        await kubevirt.set_phase(migration, "Scheduling", conditions=[])
    finally:
        await kubevirt_api.close()


async def record(cluster: ClusterInfo, namespace: str, workdir: Path) -> Recording:
    async with (
        ApiClient(cluster.admin_config()) as api,
        running_product(api, cluster, namespace, workdir) as product,
    ):
        ports = product.ports

        async def leads() -> bool:
            return await exported(ports["controller"], "harvester_quota_leader") == 1.0

        await eventually(leads, timeout=60, what="the controller leads")
        recording = Recording(start=float(int(time.time())), namespace=namespace)
        for _ in range(HEALTHY):
            await scrape_round(recording, product)
        recording.marks["healthy"] = recording.now
        await refuse_a_migration(api, cluster, namespace)

        async def counted() -> float | None:
            return await exported(ports["controller"], REFUSED, namespace=namespace)

        async def refused_since() -> float | None:
            return await exported(ports["controller"], REFUSED_SINCE, namespace=namespace)

        await eventually(counted, timeout=60, what="the refusal counted")
        await eventually(refused_since, timeout=60, what="the standing refusal exported")
        recording.shift(time.time() - (recording.now + INTERVAL))
        await scrape_round(recording, product)
        recording.marks["refused"] = recording.now
        for _ in range(BLOCKED):
            await scrape_round(recording, product)
        await clear_the_refusal(api, cluster, namespace)

        async def cleared() -> bool:
            return await refused_since() is None

        await eventually(cleared, timeout=60, what="the cleared refusal no longer exported")
        recording.marks["blocked"] = recording.now
        for _ in range(LATER - BLOCKED):
            await scrape_round(recording, product)
        recording.marks["refusal-old"] = recording.now
        stop(product.webhook)
        for _ in range(DOWN):
            await scrape_round(recording, product)
        recording.marks["webhook-down"] = recording.now
        stop(product.controller)
        for _ in range(DOWN):
            await scrape_round(recording, product)
        recording.marks["no-leader"] = recording.now
        return recording


@pytest.fixture(scope="module")
def recording(
    cluster: ClusterInfo, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Recording]:
    with fresh_namespace(cluster.rest(), "alert-rules") as namespace:
        workdir = tmp_path_factory.mktemp("alert-rules")
        yield asyncio.run(record(cluster, namespace, workdir))


def firing(db: SeriesDatabase, at: float) -> dict[str, list[dict[str, str]]]:
    """Every rule's firing elements at `at` (rules with none left out), `for` honoured."""
    evaluator = Evaluator(db)
    found = {}
    for name, rule in rules().items():
        hold = parse_duration(rule["for"]) if "for" in rule else 0.0
        elements = evaluator.firing(rule["expr"], at, hold=hold, interval=INTERVAL)
        if elements:
            found[name] = [dict(s.labels) for s in elements]
    return found


def moved_line(text: str, series: str, change: Callable[[float], float]) -> str:
    """`text` with the sample line of `series` (name{labels} as exported) changed; the series
    must be there, so a renamed metric fails here instead of never firing."""
    pattern = re.compile(rf"^{re.escape(series)} (\S+)$", re.MULTILINE)
    assert pattern.search(text), f"{series} not on /metrics"
    return pattern.sub(lambda m: f"{series} {change(float(m.group(1)))}", text)


def observed(text: str, histogram: str, seconds: float) -> str:
    """`text` after one observation of `seconds` in `histogram`, as prometheus_client makes it:
    every bucket whose bound is at least `seconds`, the count and the sum."""
    for bound in re.findall(rf'^{histogram}_bucket{{le="([^"]+)"}}', text, flags=re.MULTILINE):
        if float(bound) >= seconds:
            text = moved_line(text, f'{histogram}_bucket{{le="{bound}"}}', lambda v: v + 1)
    text = moved_line(text, f"{histogram}_count", lambda v: v + 1)
    return moved_line(text, f"{histogram}_sum", lambda v: v + seconds)


def from_round(
    first: int, component: str, change: Callable[[str], str]
) -> Callable[[int, str, str], str]:
    """A `moved` for Recording.database: `change` on `component`'s texts from round `first`."""
    return lambda round_, c, text: change(text) if c == component and round_ >= first else text


def test_every_alert_is_silent_while_the_controller_leads_and_the_webhook_answers(
    recording: Recording,
) -> None:
    """Six minutes of a healthy pair (longer than any `for`): no alert fires, and the series
    the rules read are there (so the silence is not that of an empty database)."""
    assert set(rules()) == set(FIRED_BY), "each alert needs a test that makes it fire"
    assert all(callable(globals().get(test)) for test in FIRED_BY.values())
    db = recording.database("healthy")
    at = recording.marks["healthy"]
    assert firing(db, at) == {}
    evaluator = Evaluator(db)
    jobs = {c: t.job for c, t in targets().items()}
    assert (
        evaluator.vector(f'sum(harvester_quota_leader{{job="{jobs["controller"]}"}})', at)[0].value
        == 1
    )
    assert evaluator.vector(f'up{{job="{jobs["webhook"]}"}} == 1', at)
    expiry = f'harvester_quota_webhook_certificate_expiry_timestamp_seconds{{job="{jobs["webhook"]}"}} - time()'
    assert evaluator.vector(expiry, at)[0].value > 0


def test_target_pods_refused_fires_for_a_real_refusal_in_its_namespace_for_15_minutes(
    recording: Recording,
) -> None:
    """Real: the controller counted KubeVirt's refusal condition; the counter is born at 1,
    which increase() cannot see: the rule's "present now, absent 15m ago" branch fires, for
    the tenant namespace (kept by honorLabels), and nothing else fires; 16 minutes later it is
    silent again."""
    db = recording.database("refusal-old")
    at = recording.marks["refused"]
    fired = firing(db, at)
    assert set(fired) == {"HarvesterQuotaTargetPodsRefused"}
    (element,) = fired["HarvesterQuotaTargetPodsRefused"]
    assert element["namespace"].startswith("alert-rules-")
    assert firing(db, recording.marks["refusal-old"]) == {}


def test_target_pods_refused_is_silent_15_minutes_after_one_failed_scrape(
    recording: Recording,
) -> None:
    """Moved: one controller scrape after the real refusal fails (a network blip, a slow
    answer), which ends every series for a moment; 15 minutes later the refusal counter must
    not look newly born (it was, for one evaluation, with `unless ... offset 15m`)."""
    born = round((recording.marks["refused"] - recording.start) / INTERVAL)

    def blip(round_: int, component: str, text: str) -> str | None:
        return None if (round_, component) == (born + 1, "controller") else text

    db = recording.database("refusal-old", blip)
    for round_ in (born + 31, born + 32):
        assert "HarvesterQuotaTargetPodsRefused" not in firing(db, recording.moment(round_))


def test_webhook_down_fires_two_minutes_after_its_scrapes_fail(recording: Recording) -> None:
    """Real: the webhook process stopped, its scrapes fail (up 0, its series stale): pending at
    first, firing once it held for the rule's 2 minutes; the controller still leads."""
    db = recording.database("webhook-down")
    at = recording.marks["webhook-down"]
    assert set(firing(db, at)) == {"HarvesterQuotaWebhookDown"}
    assert firing(db, at - INTERVAL) == {}, "pending, not firing, before its `for`"


def test_no_leader_fires_two_minutes_after_the_controller_stops(recording: Recording) -> None:
    """Real: the controller process stopped too; its leader gauge goes stale with its failed
    scrapes and absent() answers."""
    db = recording.database("no-leader")
    at = recording.marks["no-leader"]
    assert set(firing(db, at)) == {"HarvesterQuotaNoLeader", "HarvesterQuotaWebhookDown"}
    assert "HarvesterQuotaNoLeader" not in firing(db, at - INTERVAL)


def test_no_leader_fires_while_the_only_replica_exports_leader_0(recording: Recording) -> None:
    """Moved: the real controller text with `harvester_quota_leader 0.0`, what a standby (or
    a replica that lost its lease) exports; the rule's `sum < 1` branch, after 2 minutes."""
    standby = from_round(
        4, "controller", lambda t: moved_line(t, "harvester_quota_leader", lambda v: 0.0)
    )
    db = recording.database("healthy", standby)
    assert set(firing(db, recording.moment(8))) == {"HarvesterQuotaNoLeader"}
    assert firing(db, recording.moment(7)) == {}


def test_certificate_expiring_fires_with_a_tenth_of_its_lifetime_left_and_not_before(
    recording: Recording,
) -> None:
    """Moved in time: the real webhook's expiry and start gauges (its self-managed certificate,
    renewed with a fifth of its lifetime left) as a replica whose renewals stopped keeps
    exporting them, scraped late in the certificate's life: silent with 11 % left, firing
    5 minutes after a tenth is left (its `for`)."""
    text = recording.texts("webhook", "healthy")[-1]
    expiry = value(text, "harvester_quota_webhook_certificate_expiry_timestamp_seconds")
    start = value(text, "harvester_quota_webhook_certificate_start_timestamp_seconds")
    assert expiry and start and expiry > recording.start
    lifetime = expiry - start
    crossing = expiry - 0.1 * lifetime
    db = SeriesDatabase()
    late = targets()
    controller = recording.texts("controller", "healthy")[-1]
    at = crossing - 0.01 * lifetime - 10 * INTERVAL
    while at <= crossing + 10 * 60:
        db.record(at, late["webhook"], text)
        db.record(at, late["controller"], controller)
        at += INTERVAL
    assert firing(db, crossing - 0.01 * lifetime) == {}
    assert firing(db, crossing + 4 * 60) == {}, "pending for its 5 minutes"
    assert set(firing(db, crossing + 6 * 60)) == {"HarvesterQuotaWebhookCertificateExpiring"}


def test_target_pod_timed_out_fires_on_one_timed_out_admission(recording: Recording) -> None:
    """Moved: the webhook's real counter `outcome="timed-out"`, exported at 0 from the start,
    one higher from round 6 (what one target pod whose room never came adds)."""
    series = 'harvester_quota_webhook_target_pods_total{outcome="timed-out"}'
    timed_out = from_round(6, "webhook", lambda t: moved_line(t, series, lambda v: v + 1))
    db = recording.database("refusal-old", timed_out)
    assert firing(db, recording.moment(5)) == {}
    assert set(firing(db, recording.moment(6))) == {"HarvesterQuotaTargetPodTimedOut"}
    assert "HarvesterQuotaTargetPodTimedOut" not in firing(db, recording.moment(6 + 31))


def test_migration_blocked_fires_while_a_real_refusal_stands_past_5_minutes_in_its_namespace(
    recording: Recording,
) -> None:
    """Real: the controller exports when the standing refusal began (the real wall time, on
    the shifted timeline). Every round while it stands: the rule fires, for the tenant's
    namespace, exactly when more than 300 s have passed since that moment; from the first
    scrape after the migration left Pending (KubeVirt then drops the condition) it is
    silent."""
    db = recording.database("refusal-old")
    refused, cleared = recording.round_of("refused"), recording.round_of("blocked")
    texts = [t for _, c, t in recording.scrapes if c == "controller"]
    standing = {value(t, REFUSED_SINCE, namespace=recording.namespace) for t in texts}
    assert standing == {None, value(texts[refused], REFUSED_SINCE, namespace=recording.namespace)}
    moments = {
        value(t, REFUSED_SINCE, namespace=recording.namespace) for t in texts[refused : cleared + 1]
    }
    assert len(moments) == 1, "one moment, in every scrape while the refusal stood"
    (began,) = moments
    assert began is not None and began <= recording.marks["refused"]
    fired_rounds = 0
    for round_ in range(refused, cleared + 1):
        fired = firing(db, recording.moment(round_))
        blocked = fired.get("HarvesterQuotaMigrationBlocked")
        assert (blocked is not None) is (recording.moment(round_) - began > 300), round_
        if blocked is not None:
            fired_rounds += 1
            assert [element["namespace"] for element in blocked] == [recording.namespace]
        assert set(fired) <= {"HarvesterQuotaMigrationBlocked", "HarvesterQuotaTargetPodsRefused"}
    assert fired_rounds >= 3, "the refusal stood 7 minutes"
    for round_ in range(cleared + 1, recording.round_of("refusal-old") + 1):
        assert "HarvesterQuotaMigrationBlocked" not in firing(db, recording.moment(round_))


def test_write_errors_fire_on_one_failed_quota_write_for_10_minutes(recording: Recording) -> None:
    """Moved: the controller's real `outcome="error"` write counter, exported at 0, one higher
    from round 6 (one failed write): firing at once, silent 11 minutes later."""
    series = 'harvester_quota_quota_writes_total{outcome="error"}'
    failed = from_round(6, "controller", lambda t: moved_line(t, series, lambda v: v + 1))
    db = recording.database("refusal-old", failed)
    assert firing(db, recording.moment(5)) == {}
    assert set(firing(db, recording.moment(6))) == {"HarvesterQuotaWriteErrors"}
    assert "HarvesterQuotaWriteErrors" not in firing(db, recording.moment(6 + 22))
