"""The ways a scenario can be run: our controllers and webhook (``ours``), Harvester's own
controllers running in the cluster (``harvester``: `cluster up --harvester`), or our port of
Harvester v1.9's algorithm (``harvester-port``).

Each presents the same small face to the runner: start, stop, and the ResourceQuota writes made
per namespace. On a cluster running Harvester's controllers, ``ours`` runs beside them, as it
would be installed on a Harvester; the audit log then counts both (writers.py).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections import Counter
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from ...app import ControllerApp
from ...config.management import Options
from ...generic import errors
from ...generic.client import ApiClient
from ...generic.resource import VALIDATING_WEBHOOK_CONFIGURATIONS, Object
from ...webhook.caches import WebhookCaches
from ...webhook.resources.common import DEFAULT_TARGET_CREATORS, Identities
from ...webhook.resources.pod.targets import live_quotas
from ...webhook.server import WebhookServer
from ...webhook.serving import Listening, RoomSharing
from ...webhook.tls import ClientAuth, ReloadingTLS
from ..localcluster import ClusterInfo
from ..localcluster.cluster import client_config_from_files
from ..localcluster.deploy import API_SERVER_CLIENT_NAMES, webhook_client_ca
from ..localcluster.harvester import lease_holder
from .exposition import exposition
from .schema import HARVESTER_STRATEGY_NAMES
from .writers import OURS_IN_SCENARIOS

STRATEGIES = ("ours", "harvester", "harvester-port")
HARVESTER_STRATEGIES = HARVESTER_STRATEGY_NAMES


class Strategy(Protocol):
    """What the runner needs of a strategy."""

    name: str

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def writes(self) -> Counter[str]:
        """ResourceQuota writes so far, per namespace."""
        ...


class OurStrategy:
    """Our controllers plus our webhook, the webhook registered for the scenario's namespaces."""

    name = "ours"

    def __init__(
        self,
        api: ApiClient,
        cluster: ClusterInfo | None,
        *,
        kubevirt_version: str,
        namespaces: list[str],
        workdir: Path,
        users: frozenset[str],
    ) -> None:
        """On a cluster running Harvester's own controllers, ours runs beside them as on a
        Harvester: adopting the quotas it manages (`run --adopt-harvester-quotas`)."""
        self.api, self.cluster = api, cluster
        self.adopt_harvester = cluster is not None and cluster.harvester_version is not None
        self.kubevirt_version = kubevirt_version
        self.namespaces, self.workdir, self.users = namespaces, workdir, users
        self._apps: list[ControllerApp] = []
        self._earlier: Counter[str] = Counter()
        self._own: ApiClient | None = None
        self._webhook: WebhookServer | None = None
        self._caches: WebhookCaches | None = None
        self._configuration: str | None = None
        self._registries: list[tuple[str, CollectorRegistry]] = []
        """Every process's registry, in start order (the webhook's first): kept past the
        process's stop, so the run's metrics.prom has them all."""

    def exposition(self, rename: dict[str, str]) -> str:
        """The Prometheus text of every controller this strategy started and of its webhook,
        each sample labelled with its process (exposition.py); `rename` maps the run's
        namespaces to the scenario's names."""
        return exposition(self._registries, rename)

    def writes(self) -> Counter[str]:
        total = Counter(self._earlier)
        if self._apps:
            total.update(self._apps[-1].reconciler.writes)
        return total

    async def start(self) -> None:
        # The webhook runs in this process: the API server can call it only if it is local.
        if self._webhook is None and self.cluster is not None:
            await self._start_webhook()
        registry = CollectorRegistry()
        started = sum(1 for name, _ in self._registries if name.startswith("controller"))
        self._registries.append((f"controller-{started + 1}", registry))
        app = ControllerApp(
            self._controller_client(),
            Options(
                leader_elect=False,
                kubevirt_version=self.kubevirt_version,
                workers=3,
                adopt_harvester_quotas=self.adopt_harvester,
            ),
            registry=registry,
        )
        await app.start()
        self._apps.append(app)

    def _controller_client(self) -> ApiClient:
        """The controllers' client: on the local cluster an identity of their own
        (OURS_IN_SCENARIOS, an administrator, as the deployed service account is for the quotas
        it manages), so the audit log tells their writes from the runner's and Rancher's agent's;
        elsewhere the runner's."""
        if self.cluster is None:
            return self.api
        if self._own is None:
            pair = self.cluster.certificate_authority().issue(
                OURS_IN_SCENARIOS, organizations=("system:masters",), client=True
            )
            cert, key = self.workdir / "ours.crt", self.workdir / "ours.key"
            pair.write(cert, key)
            self._own = ApiClient(
                client_config_from_files(
                    self.cluster.server, ca_file=self.cluster.ca_file, cert_file=cert, key_file=key
                )
            )
        return self._own

    async def pause(self) -> None:
        """The controllers are down (the webhook stays): nothing reconciles until resume."""
        if self._apps:
            old = self._apps.pop()
            self._earlier.update(old.reconciler.writes)
            await old.stop()

    async def restart(self) -> None:
        """A controller restart: the old process's memory is gone, only the cluster remains."""
        await self.pause()
        await self.start()

    async def _start_webhook(self) -> None:
        assert self.cluster is not None
        self._caches = WebhookCaches(self.api, kubevirt_version=self.kubevirt_version)
        ca = self.cluster.certificate_authority()
        cert, key = self.workdir / "webhook.crt", self.workdir / "webhook.key"
        ca.issue("harvester-quota-webhook", ip_addresses=("127.0.0.1",), server=True).write(
            cert, key
        )
        registry = CollectorRegistry()
        self._registries.append(("webhook", registry))
        self._webhook = WebhookServer(
            self._caches,
            # The simulator creates target pods as the runner's users; KubeVirt's real
            # virt-controller as its own service account.
            identities=Identities(
                controllers=self.users | {OURS_IN_SCENARIOS},
                target_creators=frozenset(self.users) | frozenset(DEFAULT_TARGET_CREATORS),
            ),
            # As deployed: only the API server's calls (its webhook client certificate).
            listening=Listening(
                "127.0.0.1",
                0,
                ReloadingTLS(cert, key),
                ClientAuth(webhook_client_ca(self.cluster), API_SERVER_CLIENT_NAMES),
            ),
            sharing=RoomSharing(
                quota_changes=self._caches.quota_changes, live=live_quotas(self.api)
            ),
            registry=registry,
        )
        self._caches.factory.start()
        await self._caches.factory.wait_for_cache_sync(60)
        port = await self._webhook.start()
        configuration = _webhook_configuration(port, ca.cert_pem, self.namespaces)
        created = await self.api.create(VALIDATING_WEBHOOK_CONFIGURATIONS, configuration)
        self._configuration = str(created["metadata"]["name"])

    async def stop(self) -> None:
        for app in self._apps:
            self._earlier.update(app.reconciler.writes)
            await app.stop()
        self._apps.clear()
        if self._configuration is not None:
            with contextlib.suppress(errors.ApiError):
                await self.api.delete(VALIDATING_WEBHOOK_CONFIGURATIONS, self._configuration)
        if self._webhook is not None:
            await self._webhook.stop()
        if self._caches is not None:
            await self._caches.factory.stop()
        if self._own is not None:
            await self._own.close()


def _webhook_configuration(port: int, ca_pem: bytes, namespaces: list[str]) -> Object:
    """Our four validators, reached on 127.0.0.1, for the scenario's namespaces only."""
    selector = {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": sorted(namespaces)}
        ]
    }

    def webhook(resource: str, group: str, operations: list[str], scope: str) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "name": f"{resource}.harvester-quota.io",
            "clientConfig": {
                "url": f"https://127.0.0.1:{port}/validate/{resource}",
                "caBundle": base64.b64encode(ca_pem).decode(),
            },
            "rules": [
                {
                    "apiGroups": [group],
                    "apiVersions": ["v1"],
                    "operations": operations,
                    "resources": [resource],
                    "scope": scope,
                }
            ],
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            # Target pods may wait for their room (webhook/resources/pod/targets.py).
            "timeoutSeconds": 10 if resource == "pods" else 5,
        }
        entry["objectSelector" if resource == "namespaces" else "namespaceSelector"] = selector
        return entry

    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"generateName": "harvester-quota-scenario-"},
        "webhooks": [
            webhook("namespaces", "", ["UPDATE"], "Cluster"),
            webhook("resourcequotas", "", ["UPDATE"], "Namespaced"),
            webhook("virtualmachines", "kubevirt.io", ["CREATE", "UPDATE"], "Namespaced"),
            webhook("pods", "", ["CREATE"], "Namespaced"),
        ],
    }


class HarvesterRealStrategy:
    """Harvester's own migration and resourcequota controllers, unchanged, as the cluster runs
    them (`cluster up --harvester VERSION`, localcluster/harvester.py): they act on every
    namespace from the cluster's start to its end, so start and stop only check that they lead;
    their writes are counted from the audit log (writers.py), not here."""

    name = "harvester"

    def __init__(self, cluster: ClusterInfo | None) -> None:
        if cluster is None or cluster.harvester_version is None:
            raise ValueError(
                "strategy harvester runs Harvester's own controllers: it needs a local cluster "
                "started with them (`harvester-quota-bench cluster up --harvester v1.8.2`); "
                "strategy harvester-port runs our port of Harvester's algorithm anywhere"
            )
        self.cluster = cluster

    def writes(self) -> Counter[str]:
        """Nothing of its own: the audit log counts Harvester's writes (writers.py)."""
        return Counter()

    async def start(self) -> None:
        if await asyncio.to_thread(lease_holder, self.cluster.rest()) is None:
            raise RuntimeError(
                "Harvester's controllers do not hold their Lease: they are not running"
            )

    async def pause(self) -> None:
        raise NotImplementedError("Harvester's own controllers run for the cluster's lifetime")

    async def restart(self) -> None:
        await self.pause()

    async def stop(self) -> None:
        return None


class HarvesterStrategy:
    """Our port of Harvester v1.9's migration and resourcequota controllers
    (testbench/strategy/harvester.py), for clusters and scenarios Harvester's own code cannot run
    on (KubeVirt's simulator of 0.54 and 1.3, Harvester's Go test tables)."""

    name = "harvester-port"

    def __init__(self, api: ApiClient, *, kubevirt_version: str, compensation: bool = True) -> None:
        self.api = api
        self.kubevirt_version = kubevirt_version
        self.compensation = compensation
        self._runs: list[Any] = []
        self._earlier: Counter[str] = Counter()

    def writes(self) -> Counter[str]:
        total = Counter(self._earlier)
        if self._runs:
            total.update(self._runs[-1].writes)
        return total

    def _new(self) -> Any:
        from ..strategy.harvester import HarvesterStrategy as Port  # noqa: PLC0415

        return Port(
            self.api,
            Options(leader_elect=False, kubevirt_version=self.kubevirt_version, workers=3),
            registry=CollectorRegistry(),
            compensation=self.compensation,
        )

    async def start(self) -> None:
        run = self._new()
        await run.start()
        self._runs.append(run)

    async def pause(self) -> None:
        if self._runs:
            old = self._runs.pop()
            self._earlier.update(old.writes)
            await old.stop()

    async def restart(self) -> None:
        await self.pause()
        await self.start()

    async def stop(self) -> None:
        for run in self._runs:
            self._earlier.update(run.writes)
            await run.stop()
        self._runs.clear()
