"""The shipped deploy/ manifests on the local cluster: apply them, and act as their identities.

The controllers and the webhook run in the test process, but as their own service accounts, with
exactly the permissions deploy/ grants, so a missing permission fails a test. The manifest helpers
themselves live in `harvester_quota.testbench.localcluster.deploy` (the scale run uses them too).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.clock import REAL_CLOCK
from harvester_quota.generic.resource import Object
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.localcluster.cluster import VIRT_CONTROLLER_USER
from harvester_quota.testbench.localcluster.deploy import (
    API_SERVER_CLIENT_NAMES,
    CONTROLLER_USER,
    KINDS,
    KUBEVIRT_USER,
    MANIFEST,
    SYSTEM_NAMESPACE,
    apply,
    apply_shipped_rbac,
    client_as,
    documents,
    ensure_namespace,
    register_kubevirt_policies,
    unregister_kubevirt_policies,
    webhook_client_ca,
)
from harvester_quota.testbench.localcluster.deploy import (
    webhook_configuration as shipped_webhook_configuration,
)
from harvester_quota.webhook.caches import WebhookCaches
from harvester_quota.webhook.resources.common import Identities
from harvester_quota.webhook.resources.pod.ledger import AdmissionLedger
from harvester_quota.webhook.resources.pod.reservations import LeaseReservations
from harvester_quota.webhook.resources.pod.targets import live_quotas
from harvester_quota.webhook.server import WebhookServer
from harvester_quota.webhook.tls import ClientAuth, ReloadingTLS
from prometheus_client import CollectorRegistry

__all__ = [  # the manifest helpers, for the tests that use them through this module
    "CONTROLLER_USER",
    "KINDS",
    "KUBEVIRT_USER",
    "MANIFEST",
    "SYSTEM_NAMESPACE",
    "apply",
    "apply_rbac",
    "client_as",
    "documents",
    "ensure_namespace",
    "round_robin_proxy",
    "running_webhook",
    "running_webhooks",
    "webhook_configuration",
]


CLIENT_CA = "client-ca.crt"
"""The webhook client CA in a running_webhooks workdir: only the API server gets through."""


async def apply_rbac(api: ApiClient) -> None:
    """deploy/'s RBAC, and a stand-in for KubeVirt's controller (cluster-admin) for the tests
    that create migration target pods as it would."""
    await apply_shipped_rbac(api)
    await apply(
        api,
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "kubevirt-controller", "namespace": SYSTEM_NAMESPACE},
        },
    )
    await apply(
        api,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "test-kubevirt-controller"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [
                {
                    "kind": "ServiceAccount",
                    "name": "kubevirt-controller",
                    "namespace": SYSTEM_NAMESPACE,
                }
            ],
        },
    )


def webhook_configuration(
    port: int, ca_pem: bytes, namespace: str, *, kubevirt_user: str = KUBEVIRT_USER
) -> Object:
    """The shipped configuration for a server on 127.0.0.1:`port`, narrowed to one test
    namespace so that other tests never meet it."""
    return shipped_webhook_configuration(
        f"https://127.0.0.1:{port}",
        ca_pem,
        {"kubernetes.io/metadata.name": namespace},
        kubevirt_user=kubevirt_user,
        name=f"harvester-quota-test-{uuid.uuid4().hex[:6]}",
    )


@contextlib.asynccontextmanager
async def running_webhook(
    api: ApiClient,
    cluster: ClusterInfo,
    namespace: str,
    workdir: Path,
    *,
    kubevirt_user: str = KUBEVIRT_USER,
    kubevirt_version: str = "1.6",
) -> AsyncIterator[WebhookServer]:
    """One replica of running_webhooks."""
    async with running_webhooks(
        api,
        cluster,
        namespace,
        workdir,
        kubevirt_user=kubevirt_user,
        kubevirt_version=kubevirt_version,
    ) as (server,):
        yield server


@contextlib.asynccontextmanager
async def webhook_for_virt_controller(
    api: ApiClient, cluster: ClusterInfo, namespace: str, workdir: Path
) -> AsyncIterator[WebhookServer]:
    """deploy/'s RBAC applied, then one webhook replica that knows the cluster's real
    virt-controller (its user and version) as KubeVirt."""
    await apply_rbac(api)
    async with running_webhook(
        api,
        cluster,
        namespace,
        workdir,
        kubevirt_user=VIRT_CONTROLLER_USER,
        kubevirt_version=str(cluster.kubevirt_version),
    ) as server:
        yield server


@contextlib.asynccontextmanager
async def running_webhooks(
    api: ApiClient,
    cluster: ClusterInfo,
    namespace: str,
    workdir: Path,
    *,
    replicas: int = 1,
    kubevirt_user: str = KUBEVIRT_USER,
    kubevirt_version: str = "1.6",
) -> AsyncIterator[tuple[WebhookServer, ...]]:
    """`replicas` webhook processes' worth of servers in this process, each with its own caches
    and ledger, as the webhook's service account with deploy/'s RBAC (apply_rbac first), sharing
    admissions through Leases in harvester-system as deployed; TLS on 127.0.0.1, behind one
    round-robin TCP proxy (a Service) when more than one, registered with the shipped
    configuration for `namespace` only; unregistered and stopped on exit."""
    webhook_api = await client_as(api, cluster, "harvester-quota-webhook")
    # The API server's webhook client CA, where the replicas read it (the chart mounts it).
    shutil.copyfile(webhook_client_ca(cluster), workdir / CLIENT_CA)
    ca = cluster.certificate_authority()
    ca.issue("webhook", ip_addresses=("127.0.0.1",), server=True).write(
        workdir / "tls.crt", workdir / "tls.key"
    )
    replica_set = [
        _replica(webhook_api, workdir, kubevirt_user, kubevirt_version) for _ in range(replicas)
    ]
    created: Object | None = None
    proxy: asyncio.Server | None = None
    try:
        ports = []
        for caches, server in replica_set:
            caches.factory.start()
            await caches.factory.wait_for_cache_sync(30)
            ports.append(await server.start())
        if replicas > 1:
            proxy = await round_robin_proxy(ports)
            ports = [proxy.sockets[0].getsockname()[1]]
        configuration = webhook_configuration(
            ports[0], ca.cert_pem, namespace, kubevirt_user=kubevirt_user
        )
        created = await apply(api, configuration)
        await register_kubevirt_policies(
            api,
            {"kubernetes.io/metadata.name": namespace},
            kubevirt_user=kubevirt_user,
            name=created["metadata"]["name"],
        )
        yield tuple(server for _, server in replica_set)
    finally:
        if created is not None:
            with contextlib.suppress(errors.ApiError):
                await api.delete(
                    KINDS["ValidatingWebhookConfiguration"], created["metadata"]["name"]
                )
                await unregister_kubevirt_policies(api, created["metadata"]["name"])
        if proxy is not None:
            proxy.close()
        for caches, server in replica_set:
            await server.stop()
            await caches.factory.stop()
        await webhook_api.close()


def _replica(
    client: ApiClient, workdir: Path, kubevirt_user: str, kubevirt_version: str
) -> tuple[WebhookCaches, WebhookServer]:
    caches = WebhookCaches(client, kubevirt_version=kubevirt_version)
    ledger = AdmissionLedger(REAL_CLOCK)
    server = WebhookServer(
        caches,
        identities=Identities(target_creators=frozenset({kubevirt_user})),
        tls=ReloadingTLS(workdir / "tls.crt", workdir / "tls.key"),
        host="127.0.0.1",
        port=0,
        client_auth=ClientAuth(workdir / CLIENT_CA, API_SERVER_CLIENT_NAMES),
        registry=CollectorRegistry(),
        quota_changes=caches.quota_changes,
        ledger=ledger,
        reservations=LeaseReservations(client, SYSTEM_NAMESPACE, REAL_CLOCK, ledger),
        live=live_quotas(client),
    )
    return caches, server


async def round_robin_proxy(ports: list[int]) -> asyncio.Server:
    """A TCP proxy on 127.0.0.1 handing each new connection to the next of `ports`, as a
    Service spreads the API server's connections over the webhook's pods."""
    turn = itertools.cycle(ports)

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(
                "127.0.0.1", next(turn)
            )
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    return await asyncio.start_server(connect, "127.0.0.1", 0)
