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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harvester_quota.app import ControllerApp
from harvester_quota.config.management import Options
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.clock import REAL_CLOCK
from harvester_quota.generic.resource import Object
from harvester_quota.main import build_parser, self_signed_options
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
from harvester_quota.testbench.localcluster.pki import KeyPair
from harvester_quota.webhook.caches import WebhookCaches
from harvester_quota.webhook.certkeeper import CertificateKeeper, SelfSigned
from harvester_quota.webhook.resources.common import Identities
from harvester_quota.webhook.resources.pod.ledger import AdmissionLedger
from harvester_quota.webhook.resources.pod.reservations import LeaseReservations
from harvester_quota.webhook.resources.pod.targets import live_quotas
from harvester_quota.webhook.server import WebhookServer
from harvester_quota.webhook.serving import Listening, RoomSharing
from harvester_quota.webhook.tls import ClientAuth, ReloadingTLS
from prometheus_client import CollectorRegistry

from tests.helpers import eventually

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
    "register_self_certified",
    "reset_ca_secret",
    "round_robin_proxy",
    "running_self_certified_webhooks",
    "running_webhook",
    "running_webhooks",
    "shipped_self_signed",
    "unregister_self_certified",
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
    kubevirt_version: str | None = "1.6",
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
    kubevirt_version: str | None = "1.6",
) -> AsyncIterator[tuple[WebhookServer, ...]]:
    """`replicas` webhook processes' worth of servers in this process, each with its own caches
    and ledger, as the webhook's service account with deploy/'s RBAC (apply_rbac first), sharing
    admissions through Leases in harvester-system as deployed; TLS on 127.0.0.1, behind one
    round-robin TCP proxy (a Service) when more than one, registered with the shipped
    configuration for `namespace` only; unregistered and stopped on exit."""
    webhook_api = await client_as(api, cluster, "harvester-quota-webhook")
    # The API server's webhook client CA, where the replicas read it (the chart mounts it).
    shutil.copyfile(webhook_client_ca(cluster), workdir / CLIENT_CA)
    ca_pem, serving = serving_pair(cluster)
    serving.write(workdir / "tls.crt", workdir / "tls.key")
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
            ports[0], ca_pem, namespace, kubevirt_user=kubevirt_user
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


_SERVING_PAIRS: dict[bytes, tuple[bytes, KeyPair]] = {}
"""Per cluster CA file's content: what `serving_pair` returned for it."""


def serving_pair(cluster: ClusterInfo) -> tuple[bytes, KeyPair]:
    """The cluster CA's certificate (PEM) and a serving certificate for 127.0.0.1 it signed,
    issued once per CA in this process: loading the CA's key and making a new RSA key took
    0.4 s of CPU for every webhook a test started, and no test tells one webhook's
    certificate from another's."""
    key = cluster.ca_file.read_bytes()
    if key not in _SERVING_PAIRS:
        ca = cluster.certificate_authority()
        pair = ca.issue("webhook", ip_addresses=("127.0.0.1",), server=True)
        _SERVING_PAIRS[key] = (ca.cert_pem, pair)
    return _SERVING_PAIRS[key]


def _replica(
    client: ApiClient,
    workdir: Path,
    kubevirt_user: str,
    kubevirt_version: str | None,
    *,
    tls_dir: Path | None = None,
) -> tuple[WebhookCaches, WebhookServer]:
    caches = WebhookCaches(client, kubevirt_version=kubevirt_version)
    ledger = AdmissionLedger(REAL_CLOCK)
    tls_dir = tls_dir or workdir
    server = WebhookServer(
        caches,
        identities=Identities(target_creators=frozenset({kubevirt_user})),
        listening=Listening(
            "127.0.0.1",
            0,
            ReloadingTLS(tls_dir / "tls.crt", tls_dir / "tls.key"),
            ClientAuth(workdir / CLIENT_CA, API_SERVER_CLIENT_NAMES),
        ),
        sharing=RoomSharing(
            quota_changes=caches.quota_changes,
            ledger=ledger,
            reservations=LeaseReservations(client, SYSTEM_NAMESPACE, REAL_CLOCK, ledger),
            live=live_quotas(client),
        ),
        registry=CollectorRegistry(),
    )
    return caches, server


@dataclass
class SelfCertified:
    """Webhook replicas that make their own certificates (running_self_certified_webhooks)."""

    servers: tuple[WebhookServer, ...]
    keepers: tuple[CertificateKeeper, ...]
    port: int
    """The one address the configuration calls (a proxy over the replicas)."""


@contextlib.asynccontextmanager
async def running_self_certified_webhooks(
    api: ApiClient, cluster: ClusterInfo, namespace: str, workdir: Path, *, replicas: int = 2
) -> AsyncIterator[SelfCertified]:
    """`replicas` webhook servers as deployed with the chart's default certificate values: the
    Secret the chart creates (empty), the configuration with no caBundle under its shipped
    name (the one the webhook's RBAC names), each replica's certificates made and kept by a
    CertificateKeeper built from the shipped Deployment's flags (their host name replaced by
    127.0.0.1, where the servers listen), as the webhook's service account. The configuration
    is narrowed to `namespace`. Everything made is deleted on exit."""
    webhook_api = await client_as(api, cluster, "harvester-quota-webhook")
    shutil.copyfile(webhook_client_ca(cluster), workdir / CLIENT_CA)
    options = shipped_self_signed()
    options = replace(options, policy=replace(options.policy, hosts=("127.0.0.1",)))
    await reset_ca_secret(api)
    replica_set: list[tuple[WebhookCaches, WebhookServer]] = []
    keepers: list[CertificateKeeper] = []
    tasks: list[asyncio.Future[None]] = []
    for index in range(replicas):
        tls_dir = workdir / f"replica-{index}"
        tls_dir.mkdir()
        keeper = CertificateKeeper(
            webhook_api,
            namespace=SYSTEM_NAMESPACE,
            secret_name=options.secret_name,
            configuration=options.configuration,
            cert_file=tls_dir / "tls.crt",
            key_file=tls_dir / "tls.key",
            policy=options.policy,
            clock=REAL_CLOCK,
        )
        keepers.append(keeper)
    proxy: asyncio.Server | None = None
    try:
        # As each pod does: its first certificate, then it listens, then keeps them current.
        await asyncio.gather(*(keeper.first() for keeper in keepers))
        ports = []
        for keeper in keepers:
            caches, server = _replica(
                webhook_api, workdir, KUBEVIRT_USER, "1.6", tls_dir=keeper.cert_file.parent
            )
            replica_set.append((caches, server))
            caches.factory.start()
            await caches.factory.wait_for_cache_sync(30)
            ports.append(await server.start())
            assert server.tls is not None
            keeper.changed = server.tls.reload
            tasks.append(asyncio.ensure_future(keeper.run()))
        proxy = await round_robin_proxy(ports)
        port = proxy.sockets[0].getsockname()[1]
        await register_self_certified(api, port, namespace)
        yield SelfCertified(tuple(s for _, s in replica_set), tuple(keepers), port)
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await unregister_self_certified(api)
        if proxy is not None:
            proxy.close()
        for caches, server in replica_set:
            await server.stop()
            await caches.factory.stop()
        await webhook_api.close()


async def reset_ca_secret(api: ApiClient) -> None:
    """The webhook's CA Secret as the chart creates it: empty (one left by a test before is
    deleted first)."""
    name = shipped_self_signed().secret_name
    (secret,) = [d for d in documents() if (d["kind"], d["metadata"]["name"]) == ("Secret", name)]
    with contextlib.suppress(errors.NotFound):
        await api.delete(KINDS["Secret"], name, SYSTEM_NAMESPACE)
    await apply(api, secret)


async def register_self_certified(api: ApiClient, port: int, namespace: str) -> Object:
    """The shipped configuration under its shipped name (the one the webhook's RBAC lets it
    patch), without a caBundle as shipped, for a webhook on 127.0.0.1:`port` and `namespace`
    only; returns it once the webhook has filled every caBundle."""
    name = shipped_self_signed().configuration
    configuration = shipped_webhook_configuration(
        f"https://127.0.0.1:{port}", b"", {"kubernetes.io/metadata.name": namespace}, name=name
    )
    for webhook in configuration["webhooks"]:
        del webhook["clientConfig"]["caBundle"]  # as shipped: the webhook fills it
    with contextlib.suppress(errors.NotFound):
        await api.delete(KINDS["ValidatingWebhookConfiguration"], name)
    await apply(api, configuration)

    async def filled() -> Object | None:
        found = await api.get(KINDS["ValidatingWebhookConfiguration"], name)
        hooks = found["webhooks"]
        return found if all(w["clientConfig"].get("caBundle") for w in hooks) else None

    filled_in: Object = await eventually(filled, what="the webhook to fill its caBundle")
    return filled_in


async def unregister_self_certified(api: ApiClient) -> None:
    """Deletes what register_self_certified and reset_ca_secret made (gone is fine)."""
    options = shipped_self_signed()
    with contextlib.suppress(errors.NotFound):
        await api.delete(KINDS["ValidatingWebhookConfiguration"], options.configuration)
    with contextlib.suppress(errors.NotFound):
        await api.delete(KINDS["Secret"], options.secret_name, SYSTEM_NAMESPACE)


def shipped_self_signed() -> SelfSigned:
    """The self-managed certificate options the shipped webhook Deployment's flags give."""
    (deployment,) = [
        d
        for d in documents()
        if (d["kind"], d["metadata"]["name"]) == ("Deployment", "harvester-quota-webhook")
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = build_parser().parse_args(container["args"])
    options = self_signed_options(args)
    assert options is not None, "the shipped webhook makes its own certificates"
    return options


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


@contextlib.asynccontextmanager
async def controllers_as_account(
    api: ApiClient, cluster: ClusterInfo, *, start: bool = True, **options: Any
) -> AsyncIterator[ControllerApp]:
    """The controllers in this process as their service account (harvester-quota, the chart's
    RBAC as last applied), without leader election, `options` over the defaults (the KubeVirt
    version the cluster runs; `kubevirt_version=None`: read from the KubeVirt CR, as deployed);
    started unless `start` is False (the caller starts them); stopped and their client closed on
    exit."""
    client = await client_as(api, cluster, "harvester-quota")
    chosen = {"leader_elect": False, "kubevirt_version": str(cluster.kubevirt_version), **options}
    app = ControllerApp(client, Options(**chosen), registry=CollectorRegistry())
    try:
        if start:
            await app.start()
        yield app
    finally:
        await app.stop()
        await client.close()
