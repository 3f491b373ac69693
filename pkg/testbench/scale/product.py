"""harvester-quota as deployed, for the scale run: the controller and the webhook as their own
processes, each with its service account's token and deploy/'s RBAC, the webhook registered with
the shipped configuration and called by the API server over TLS, with the client certificate the
webhook requires (webhook.clientAuth).

`Product.start` applies the RBAC, writes the two token kubeconfigs and the webhook's serving
certificate (signed by the cluster's CA) into `workdir`, starts both processes and returns once
both answer /readyz and the webhook configuration is registered. `stop` unregisters it and
terminates both (SIGTERM, then SIGKILL after 10 s). `metrics` scrapes the controller's /metrics
and the webhook's, on its plain-HTTP metrics port.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import ssl
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Final, TypeVar

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from ...generic import errors
from ...generic.client import ApiClient
from ...generic.clock import Clock
from ...generic.resource import LEASES
from ..localcluster import ClusterInfo
from ..localcluster.cluster import VIRT_CONTROLLER_USER
from ..localcluster.deploy import (
    CONTROLLER_SERVICE_ACCOUNT,
    KINDS,
    SYSTEM_NAMESPACE,
    WEBHOOK_SERVICE_ACCOUNT,
    apply,
    apply_shipped_rbac,
    register_kubevirt_policies,
    unregister_kubevirt_policies,
    webhook_client_flags,
    webhook_configuration,
    write_token_kubeconfig,
)
from ..localcluster.process import free_port
from .breakdown import Breakdown, breakdown_of

K = TypeVar("K")
LEADER: Final = "a"
STANDBY: Final = "b"
"""The two controller processes' leader-election identities, after the Lease's name."""
READY_TIMEOUT: Final = 120.0
STOP_GRACE: Final = 10.0


@dataclass(frozen=True)
class Metrics:
    """The counters of the controller's /metrics the scale run reads, summed over labels it
    does not keep."""

    requests: Mapping[tuple[str, str], float]
    """(verb, resource) -> API requests."""
    quota_writes: Mapping[str, float]
    """outcome -> quota writes."""
    cpu_seconds: float
    rss_bytes: float
    reconciles: float = 0.0
    reconcile_seconds: float = 0.0
    targets_waited: float = 0.0
    """The webhook's: migration target pods whose admission waited for their room."""
    target_wait_seconds: float = 0.0
    """The webhook's: the seconds target pod admissions waited, all of them together."""
    breakdown: Breakdown = field(default_factory=Breakdown)
    """The controller's: where its CPU goes (watch events, handler runs, its own requests)."""
    writes: Mapping[str, float] = field(default_factory=dict)
    """The controller's: kind -> write requests sent (harvester_quota_api_writes_total: spec,
    status, label, rancher, vmi, vm)."""

    def with_webhook(self, webhook: Metrics) -> Metrics:
        """These (the controller's) with the webhook's API requests added and its target pod
        counts; quota writes, CPU, memory, reconciles and the breakdown stay the controller's
        (the webhook writes no quota)."""
        return dataclasses.replace(
            self,
            requests=_plus(self.requests, webhook.requests),
            targets_waited=webhook.targets_waited,
            target_wait_seconds=webhook.target_wait_seconds,
        )

    def minus(self, earlier: Metrics) -> Metrics:
        """What happened between `earlier` and this scrape (RSS is this scrape's)."""
        return Metrics(
            _minus(self.requests, earlier.requests),
            _minus(self.quota_writes, earlier.quota_writes),
            self.cpu_seconds - earlier.cpu_seconds,
            self.rss_bytes,
            self.reconciles - earlier.reconciles,
            self.reconcile_seconds - earlier.reconcile_seconds,
            self.targets_waited - earlier.targets_waited,
            self.target_wait_seconds - earlier.target_wait_seconds,
            self.breakdown.minus(earlier.breakdown),
            _minus(self.writes, earlier.writes),
        )


def _plus(a: Mapping[K, float], b: Mapping[K, float]) -> dict[K, float]:
    return {k: a.get(k, 0.0) + b.get(k, 0.0) for k in {*a, *b}}


def _minus(now: Mapping[K, float], before: Mapping[K, float]) -> dict[K, float]:
    return {k: v - before.get(k, 0.0) for k, v in now.items() if v - before.get(k, 0.0)}


def parse_metrics(text: str) -> Metrics:
    """The scale run's share of a Prometheus text exposition."""
    requests: dict[tuple[str, str], float] = {}
    writes: dict[str, float] = {}
    by_kind: dict[str, float] = {}
    cpu = rss = reconciles = reconcile_seconds = waited = wait_seconds = 0.0
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    for sample in samples:
        if sample.name == "harvester_quota_api_requests_total":
            key = (sample.labels.get("verb", ""), sample.labels.get("resource", ""))
            requests[key] = requests.get(key, 0.0) + sample.value
        elif sample.name == "harvester_quota_quota_writes_total":
            outcome = sample.labels.get("outcome", "")
            writes[outcome] = writes.get(outcome, 0.0) + sample.value
        elif sample.name == "harvester_quota_api_writes_total":
            kind = sample.labels.get("kind", "")
            by_kind[kind] = by_kind.get(kind, 0.0) + sample.value
        elif sample.name == "process_cpu_seconds_total":
            cpu = sample.value
        elif sample.name == "process_resident_memory_bytes":
            rss = sample.value
        elif sample.name == "harvester_quota_reconcile_duration_seconds_count":
            reconciles = sample.value
        elif sample.name == "harvester_quota_reconcile_duration_seconds_sum":
            reconcile_seconds = sample.value
        elif sample.name == "harvester_quota_webhook_target_pods_total" and (
            sample.labels.get("outcome") in WAITED
        ):
            waited += sample.value
        elif sample.name == "harvester_quota_webhook_target_wait_seconds_sum":
            wait_seconds = sample.value
    return Metrics(
        requests,
        writes,
        cpu,
        rss,
        reconciles,
        reconcile_seconds,
        waited,
        wait_seconds,
        breakdown_of(samples),
        by_kind,
    )


WAITED: Final = ("fitted-after-wait", "timed-out")
"""Outcomes of a target pod's admission that waited for its room (pod/targets.py)."""


@dataclass(frozen=True)
class ProcessArgs:
    """Flags added to the controller's and the webhook's command lines, as deployed."""

    controller: tuple[str, ...] = ()
    webhook: tuple[str, ...] = ()


NO_PROCESS_ARGS = ProcessArgs()


@dataclass(eq=False)
class Product:
    """The controller and webhook processes of one scale run (see the module docstring)."""

    api: ApiClient
    cluster: ClusterInfo
    workdir: Path
    """Where `start` writes the kubeconfigs, the webhook's certificate and both processes' logs."""
    _: KW_ONLY
    match_labels: Mapping[str, str]
    """The labels of the run's namespaces: the webhook configuration and the KubeVirt policies
    reach only namespaces labelled so."""
    kubevirt_version: str
    lease_name: str
    """The controller's leader-election Lease; also names the webhook configuration."""
    process_args: ProcessArgs = NO_PROCESS_ARGS
    standby: bool = False
    """Start a second controller process as a standby (the failover run, failover.py)."""
    cpu_accounting: bool = True
    """Run the controller with `--cpu-accounting` (its CPU breakdown, breakdown.py)."""
    also_kubevirt: tuple[str, ...] = ()
    """More identities the KubeVirt policies take for KubeVirt's controller (beside Harvester's
    controllers: the KubeVirt account their VMI writes impersonate, deploy.kubevirt_policies)."""
    controller: subprocess.Popen[bytes] | None = field(default=None, init=False)
    """The controller process that leads (after `kill_leader`, the former standby)."""
    webhook: subprocess.Popen[bytes] | None = field(default=None, init=False)
    health_port: int = field(default=0, init=False)
    """The leading controller's /metrics and /readyz port."""
    standby_process: subprocess.Popen[bytes] | None = field(default=None, init=False)
    standby_health_port: int = field(default=0, init=False)
    killed: subprocess.Popen[bytes] | None = field(default=None, init=False)
    webhook_port: int = field(default=0, init=False)
    webhook_metrics_port: int = field(default=0, init=False)
    _configuration: str | None = field(default=None, init=False)
    _session: aiohttp.ClientSession | None = field(default=None, init=False)

    async def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        await apply_shipped_rbac(self.api)
        controller_config = await write_token_kubeconfig(
            self.api,
            self.cluster,
            CONTROLLER_SERVICE_ACCOUNT,
            self.workdir / "controller.kubeconfig",
        )
        webhook_config = await write_token_kubeconfig(
            self.api, self.cluster, WEBHOOK_SERVICE_ACCOUNT, self.workdir / "webhook.kubeconfig"
        )
        ca = self.cluster.certificate_authority()
        cert, key = self.workdir / "webhook.crt", self.workdir / "webhook.key"
        ca.issue("webhook", ip_addresses=("127.0.0.1",), server=True).write(cert, key)
        self.health_port, self.webhook_port = free_port(), free_port()
        self.webhook_metrics_port = free_port()
        self.controller = self._spawn(
            "controller", self._controller_args(controller_config, LEADER, self.health_port)
        )
        self.webhook = self._spawn("webhook", self._webhook_args(webhook_config, cert, key))
        self._session = aiohttp.ClientSession()
        await self._await_ready(f"http://127.0.0.1:{self.health_port}/readyz", "controller")
        if self.standby:
            # Started once the Lease names the first (its readiness says its caches synced, not
            # that it leads), so that the standby is the one waiting; the standby's readiness
            # then says its caches are synced (warm) or that it reaches the Lease (cold).
            await self._await_holder(f"{self.lease_name}-{LEADER}")
            self.standby_health_port = free_port()
            args = self._controller_args(controller_config, STANDBY, self.standby_health_port)
            self.standby_process = self._spawn("standby", args)
            await self._await_ready(
                f"http://127.0.0.1:{self.standby_health_port}/readyz", "standby"
            )
        # Where the chart's probes ask: the admission port completes no handshake without the
        # API server's client certificate.
        await self._await_ready(f"http://127.0.0.1:{self.webhook_metrics_port}/readyz", "webhook")
        configuration = webhook_configuration(
            f"https://127.0.0.1:{self.webhook_port}",
            ca.cert_pem,
            self.match_labels,
            kubevirt_user=VIRT_CONTROLLER_USER,
            name=f"harvester-quota-{self.lease_name}",
        )
        await apply(self.api, configuration)
        self._configuration = configuration["metadata"]["name"]
        await register_kubevirt_policies(
            self.api,
            self.match_labels,
            kubevirt_user=VIRT_CONTROLLER_USER,
            name=self._configuration,
            also_kubevirt=self.also_kubevirt,
        )

    async def stop(self) -> None:
        if self._configuration is not None:
            with contextlib.suppress(errors.ApiError):
                await self.api.delete(KINDS["ValidatingWebhookConfiguration"], self._configuration)
                await unregister_kubevirt_policies(self.api, self._configuration)
            self._configuration = None
        for process in (self.webhook, self.controller, self.standby_process):
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    await asyncio.to_thread(process.wait, STOP_GRACE)
                except subprocess.TimeoutExpired:
                    process.kill()
                    await asyncio.to_thread(process.wait)
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _controller_args(self, kubeconfig: Path, identity: str, health_port: int) -> list[str]:
        return [
            "run",
            f"--kubeconfig={kubeconfig}",
            f"--namespace={SYSTEM_NAMESPACE}",
            f"--lease-name={self.lease_name}",
            f"--identity={self.lease_name}-{identity}",
            f"--kubevirt-version={self.kubevirt_version}",
            f"--health-port={health_port}",
            *(("--cpu-accounting",) if self.cpu_accounting else ()),  # breakdown.py's split
            *self.process_args.controller,
        ]

    async def kill_leader(self, clock: Clock) -> tuple[str, float]:
        """SIGKILLs the leading controller process (it releases nothing); the standby leads
        from then on as far as `metrics` and `pids` go. Returns the standby's leader-election
        identity and the moment of the kill on `clock`. RuntimeError without a standby, or if
        the Lease does not name the leading process (the figures would be another process's)."""
        if self.standby_process is None or self.controller is None:
            raise RuntimeError("no standby to fail over to")
        holder = await self._holder()
        if holder != f"{self.lease_name}-{LEADER}":
            raise RuntimeError(f"the Lease names {holder!r}, not the leading process")
        self.controller.kill()
        moment = clock.monotonic()
        await asyncio.to_thread(self.controller.wait)
        self.killed = self.controller
        self.controller, self.standby_process = self.standby_process, None
        self.health_port = self.standby_health_port
        return f"{self.lease_name}-{STANDBY}", moment

    async def _holder(self) -> str:
        lease = await self.api.get(LEASES, self.lease_name, SYSTEM_NAMESPACE)
        return str((lease.get("spec") or {}).get("holderIdentity") or "")

    async def _await_holder(self, identity: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READY_TIMEOUT
        while loop.time() < deadline:
            with contextlib.suppress(errors.ApiError):
                if await self._holder() == identity:
                    return
            await asyncio.sleep(0.2)
        raise TimeoutError(f"the Lease did not name {identity} within {READY_TIMEOUT:g}s")

    def _webhook_args(self, kubeconfig: Path, cert: Path, key: Path) -> list[str]:
        return [
            "webhook",
            "--log-format=json",  # the migration timelines read its answers (timeline.py)
            f"--kubeconfig={kubeconfig}",
            f"--cert-file={cert}",
            f"--key-file={key}",
            "--host=127.0.0.1",
            f"--port={self.webhook_port}",
            *webhook_client_flags(self.cluster),
            "--metrics-host=127.0.0.1",
            f"--metrics-port={self.webhook_metrics_port}",
            f"--namespace={SYSTEM_NAMESPACE}",
            f"--kubevirt-version={self.kubevirt_version}",
            *self.process_args.webhook,
        ]

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = (self.workdir / f"{name}.log").open("ab")
        try:
            return subprocess.Popen(
                [sys.executable, "-m", "harvester_quota.main", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        finally:
            log.close()

    async def _await_ready(self, url: str, what: str) -> None:
        assert self._session is not None
        context = ssl.create_default_context(cafile=str(self.cluster.ca_file))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READY_TIMEOUT
        while loop.time() < deadline:
            self._check_alive()
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                async with self._session.get(
                    url, ssl=context, timeout=aiohttp.ClientTimeout(5)
                ) as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.2)
        raise TimeoutError(f"the {what} was not ready within {READY_TIMEOUT:g}s ({self.workdir})")

    def _check_alive(self) -> None:
        processes = (
            ("controller", self.controller),
            ("webhook", self.webhook),
            ("standby", self.standby_process),
        )
        for name, process in processes:
            if process is not None and process.poll() is not None:
                log_file = self.workdir / f"{name}.log"
                raise RuntimeError(
                    f"the {name} exited with {process.returncode}; see {log_file}; it ended:\n"
                    + _tail(log_file)
                )

    async def metrics(self, *, standby: bool = False) -> Metrics:
        """The leading controller's /metrics now (with `standby`, the standby's), with the
        webhook's requests and target pods."""
        assert self._session is not None
        self._check_alive()
        port = self.standby_health_port if standby else self.health_port
        controller = await self._scrape(f"http://127.0.0.1:{port}/metrics")
        webhook = await self._scrape(f"http://127.0.0.1:{self.webhook_metrics_port}/metrics")
        return controller.with_webhook(webhook)

    async def _scrape(self, url: str) -> Metrics:
        assert self._session is not None
        context = ssl.create_default_context(cafile=str(self.cluster.ca_file))
        async with self._session.get(
            url, ssl=context, timeout=aiohttp.ClientTimeout(30)
        ) as response:
            return parse_metrics(await response.text())

    @property
    def pids(self) -> dict[str, int]:
        processes = (
            ("controller", self.controller),
            ("webhook", self.webhook),
            ("standby", self.standby_process),
        )
        return {name: process.pid for name, process in processes if process is not None}


def _tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of `path` (a failure's story, kept in the error itself: pytest's
    temporary directories are gone a few sessions later), or why it cannot be read."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as error:
        return f"(cannot read it: {error})"
