"""The shipped deploy/ manifests on the local cluster: apply them, and act as their identities.

The controllers and the webhook run in the test process, but as their own service accounts, with
exactly the permissions deploy/ grants, so a missing permission fails a test.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import itertools
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import yaml
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.clock import REAL_CLOCK
from harvester_quota.generic.config import ClientConfig
from harvester_quota.generic.resource import NAMESPACES, Object, Resource
from harvester_quota.localcluster import ClusterInfo
from harvester_quota.webhook.resources.common import Identities
from harvester_quota.webhook.resources.pod.ledger import AdmissionLedger
from harvester_quota.webhook.resources.pod.reservations import LeaseReservations
from harvester_quota.webhook.server import ReloadingTLS, WebhookCaches, WebhookServer
from prometheus_client import CollectorRegistry

MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "harvester-quota.yaml"
SYSTEM_NAMESPACE = "harvester-system"
CONTROLLER_USER = "system:serviceaccount:harvester-system:harvester-quota"
KUBEVIRT_USER = "system:serviceaccount:harvester-system:kubevirt-controller"

KINDS = {
    "ServiceAccount": Resource("", "v1", "serviceaccounts", "ServiceAccount"),
    "Service": Resource("", "v1", "services", "Service"),
    "ClusterRole": Resource(
        "rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False
    ),
    "ClusterRoleBinding": Resource(
        "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False
    ),
    "Role": Resource("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    "RoleBinding": Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    "Deployment": Resource("apps", "v1", "deployments", "Deployment"),
    "ValidatingWebhookConfiguration": Resource(
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        False,
    ),
}
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def documents() -> Iterator[Object]:
    for document in yaml.safe_load_all(MANIFEST.read_text()):
        if document:
            yield document


async def ensure_namespace(api: ApiClient, name: str = SYSTEM_NAMESPACE) -> None:
    with contextlib.suppress(errors.AlreadyExists):
        await api.create(NAMESPACES, {"metadata": {"name": name}})


async def apply(api: ApiClient, document: Object, *, dry_run: bool = False) -> Object:
    """Server-side apply of one manifest document."""
    resource = KINDS[document["kind"]]
    metadata = document["metadata"]
    return await api.patch(
        resource,
        metadata["name"],
        document,
        metadata.get("namespace"),
        patch_type="apply",
        field_manager="harvester-quota-tests",
        force=True,
        dry_run=dry_run,
    )


async def apply_rbac(api: ApiClient) -> None:
    await ensure_namespace(api)
    for document in documents():
        if document["kind"] in RBAC_KINDS:
            await apply(api, document)
    # KubeVirt's controller, for the tests that create migration target pods as it would.
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


async def client_as(api: ApiClient, cluster: ClusterInfo, service_account: str) -> ApiClient:
    """An ApiClient authenticated as a service account (a TokenRequest token)."""
    path = f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/serviceaccounts/{service_account}/token"
    answer = await api.request(
        "POST",
        path,
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    token = answer["status"]["token"]
    return ApiClient(ClientConfig.from_files(cluster.server, ca_file=cluster.ca_file, token=token))


def webhook_configuration(
    port: int, ca_pem: bytes, namespace: str, *, kubevirt_user: str = KUBEVIRT_USER
) -> Object:
    """The shipped ValidatingWebhookConfiguration, pointed at a server on 127.0.0.1 (as envtest
    does) and narrowed to one test namespace so that other tests never meet it; KubeVirt's
    controller is `kubevirt_user` in its match conditions (the chart's kubevirt.* values)."""
    (shipped,) = [d for d in documents() if d["kind"] == "ValidatingWebhookConfiguration"]
    configuration = copy.deepcopy(shipped)
    for webhook in configuration["webhooks"]:
        for condition in webhook.get("matchConditions") or []:
            condition["expression"] = condition["expression"].replace(KUBEVIRT_USER, kubevirt_user)
    configuration["metadata"]["name"] = f"harvester-quota-test-{uuid.uuid4().hex[:6]}"
    for webhook in configuration["webhooks"]:
        service = webhook["clientConfig"].pop("service")
        webhook["clientConfig"]["url"] = f"https://127.0.0.1:{port}{service['path']}"
        webhook["clientConfig"]["caBundle"] = base64.b64encode(ca_pem).decode()
        only: dict[str, Any] = {"kubernetes.io/metadata.name": namespace}
        if webhook["rules"][0]["resources"] == ["namespaces"]:
            webhook["objectSelector"] = {"matchLabels": only}
        else:  # the shipped selector (the pods rule's room-held label) narrowed further
            shipped_selector = webhook.get("namespaceSelector") or {}
            webhook["namespaceSelector"] = {**shipped_selector, "matchLabels": only}
    return configuration


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
        yield tuple(server for _, server in replica_set)
    finally:
        if created is not None:
            with contextlib.suppress(errors.ApiError):
                await api.delete(
                    KINDS["ValidatingWebhookConfiguration"], created["metadata"]["name"]
                )
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
        registry=CollectorRegistry(),
        quota_changes=caches.quota_changes,
        ledger=ledger,
        reservations=LeaseReservations(client, SYSTEM_NAMESPACE, REAL_CLOCK, ledger),
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
