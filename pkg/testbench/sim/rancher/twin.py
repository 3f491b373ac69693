"""A twin of rancher-webhook on the local cluster: Rancher 2.14.6+/2.15.2+'s write protection of
its default quota and LimitRange, answered by a real admission webhook.

rancher-webhook's module cannot be built here (docs/rancher-webhook-twin.md), so
`RancherWebhookTwin` serves its ResourceQuota and LimitRange validators' answers (`admission.decide`)
over TLS on 127.0.0.1 and registers them with the cluster's API server as rancher-webhook does
(webhooks ``rancher.cattle.io.resourcequotas``, which also sees ``resourcequotas/status``, and
``rancher.cattle.io.limitranges``; failurePolicy Fail, matchPolicy Equivalent, paths under
``/v1/webhook/validation/``). It answers only the API server: the client certificate that the
local API server presents to webhooks, verified against its own CA.

Two things differ from a Rancher install, both because tests share one cluster: the webhooks are
narrowed to the given namespaces (rancher-webhook registers them for every namespace), and the
configuration's name has a suffix. `sudo` is a client acting as Rancher does to pass: the user
rancher-webhook-sudo in the group system:masters (Rancher impersonates that pair; a client
certificate from the cluster's CA names the same user and group). The simulated Rancher agent
writes its quotas with it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import socket
import ssl
import tempfile
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from aiohttp import web

from ....generic import errors
from ....generic.client import ApiClient
from ....generic.resource import RESOURCE_QUOTAS, VALIDATING_WEBHOOK_CONFIGURATIONS
from ...localcluster import ClusterInfo
from ...localcluster.cluster import client_config_from_files
from ...localcluster.deploy import webhook_client_ca
from .admission import (
    BYPASS_GROUP,
    BYPASS_USER,
    CREATING,
    MARKER_LABEL,
    Kind,
    Verdict,
    decide,
    review_response,
)

log = logging.getLogger(__name__)

VALIDATION_PATH: Final = "/v1/webhook/validation"
WEBHOOK_QUALIFIER: Final = "rancher.cattle.io"
ENFORCE_TIMEOUT: Final = 15.0
ENFORCE_POLL: Final = 0.1
MAX_BODY: Final = 4 * 1024 * 1024


def webhook_name(kind: Kind) -> str:
    """rancher-webhook's name for a validator's webhook, which the API server quotes in every
    refusal ('admission webhook "rancher.cattle.io.resourcequotas" denied the request: ...')."""
    return f"{WEBHOOK_QUALIFIER}.{kind}"


def configuration(name: str, url: str, ca_pem: bytes, namespaces: Iterable[str]) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration: one webhook per validator, as rancher-webhook
    registers them, calling `url`, narrowed to `namespaces`."""
    selector = {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": sorted(namespaces)}
        ]
    }
    webhooks = []
    for kind in Kind:
        resources = [str(kind), f"{kind}/status"]
        webhooks.append(
            {
                "name": webhook_name(kind),
                "clientConfig": {
                    "url": f"{url.rstrip('/')}{VALIDATION_PATH}/{kind}",
                    "caBundle": base64.b64encode(ca_pem).decode(),
                },
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE", "DELETE"],
                        "resources": resources,
                        "scope": "Namespaced",
                    }
                ],
                "failurePolicy": "Fail",
                "matchPolicy": "Equivalent",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1", "v1beta1"],
                "namespaceSelector": selector,
            }
        )
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": webhooks,
    }


@dataclass(frozen=True)
class Reviewed:
    """One review the twin answered (for tests: who asked what, and the answer)."""

    kind: Kind
    operation: str
    sub_resource: str
    namespace: str
    name: str
    user: str
    dry_run: bool
    verdict: Verdict


@dataclass
class RancherWebhookTwin:
    """A running twin: its server, its registration, and Rancher's sudo client."""

    admin: ApiClient
    name: str
    sudo: ApiClient
    reviewed: list[Reviewed] = field(default_factory=list)
    _runner: web.AppRunner | None = None
    _workdir: tempfile.TemporaryDirectory[str] | None = None

    @classmethod
    async def install(
        cls,
        admin: ApiClient,
        cluster: ClusterInfo,
        namespaces: Iterable[str],
        *,
        name: str | None = None,
    ) -> RancherWebhookTwin:
        """Starts the server, registers it for `namespaces`, and returns once the API server
        refuses a (dry-run) write of a labelled quota by the admin."""
        chosen = sorted(namespaces)
        if not chosen:
            raise ValueError("the twin needs at least one namespace to protect")
        workdir = tempfile.TemporaryDirectory(prefix="rancher-webhook-twin-")
        root = Path(workdir.name)
        sudo = _sudo_client(cluster, root)
        twin = cls(admin, name or f"{WEBHOOK_QUALIFIER}-{uuid.uuid4().hex[:6]}", sudo)
        twin._workdir = workdir
        try:
            port = await twin._serve(cluster, root)
            ca_pem = cluster.certificate_authority().cert_pem
            document = configuration(twin.name, f"https://127.0.0.1:{port}", ca_pem, chosen)
            await admin.create(VALIDATING_WEBHOOK_CONFIGURATIONS, document)
            await twin._wait_enforced(chosen[0])
        except BaseException:
            await twin.remove()
            raise
        return twin

    async def _serve(self, cluster: ClusterInfo, root: Path) -> int:
        """Listens on 127.0.0.1 with a serving certificate of the cluster's CA, asking every
        client for a certificate of the API server's webhook client CA; returns the port."""
        pair = cluster.certificate_authority().issue(
            "rancher-webhook", ip_addresses=("127.0.0.1",), server=True
        )
        pair.write(root / "tls.crt", root / "tls.key")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(root / "tls.crt", root / "tls.key")
        context.load_verify_locations(cafile=str(webhook_client_ca(cluster)))
        context.verify_mode = ssl.CERT_REQUIRED
        app = web.Application(client_max_size=MAX_BODY)
        for kind in Kind:
            app.router.add_post(f"{VALIDATION_PATH}/{kind}", self._handler(kind))
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        await web.SockSite(self._runner, listener, ssl_context=context).start()
        return int(listener.getsockname()[1])

    def _handler(self, kind: Kind) -> Any:
        async def handle(http: web.Request) -> web.Response:
            return self.answer(kind, await http.read())

        return handle

    def answer(self, kind: Kind, body: bytes) -> web.Response:
        """The HTTP answer to one AdmissionReview body: the verdict in a review, HTTP 500 for
        what rancher-webhook's handler treats as an error."""
        try:
            review = json.loads(body)
            request = review["request"]
            uid = str(request["uid"])
        except (ValueError, KeyError, TypeError) as error:
            return web.Response(status=500, text=f"invalid request: {error}")
        verdict = decide(kind, request)
        self._record(kind, request, verdict)
        if verdict.code == 500:
            log.warning("rancher-webhook twin: %s", verdict.message)
        return web.json_response(
            review_response(uid, verdict), status=500 if verdict.code == 500 else 200
        )

    def _record(self, kind: Kind, request: dict[str, Any], verdict: Verdict) -> None:
        user_info = request.get("userInfo") or {}
        self.reviewed.append(
            Reviewed(
                kind=kind,
                operation=str(request.get("operation") or ""),
                sub_resource=str(request.get("subResource") or ""),
                namespace=str(request.get("namespace") or ""),
                name=str(request.get("name") or ""),
                user=str(user_info.get("username") or ""),
                dry_run=bool(request.get("dryRun")),
                verdict=verdict,
            )
        )

    async def _wait_enforced(self, namespace: str, timeout: float = ENFORCE_TIMEOUT) -> None:
        """Returns once a dry-run create of a labelled quota by the admin is refused in the twin's
        words: the API server takes up a new webhook configuration asynchronously."""
        probe = {
            "metadata": {"name": "probe", "labels": {MARKER_LABEL: "true"}},
            "spec": {"hard": {"pods": "1"}},
        }
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                await self.admin.create(RESOURCE_QUOTAS, probe, namespace, dry_run=True)
            except errors.BadRequest as error:
                if CREATING in error.message:
                    return
            if loop.time() > deadline:
                raise TimeoutError(f"webhook {self.name} not enforced after {timeout:.0f}s")
            await asyncio.sleep(ENFORCE_POLL)

    def reviews_by(self, user: str) -> list[Reviewed]:
        return [r for r in self.reviewed if r.user == user]

    async def remove(self) -> None:
        """Unregisters the webhooks, stops the server, closes the sudo client."""
        with contextlib.suppress(errors.NotFound):
            await self.admin.delete(VALIDATING_WEBHOOK_CONFIGURATIONS, self.name)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.sudo.close()
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None


def _sudo_client(cluster: ClusterInfo, root: Path) -> ApiClient:
    """A client that is rancher-webhook-sudo in system:masters to the API server."""
    pair = cluster.certificate_authority().issue(
        BYPASS_USER, organizations=(BYPASS_GROUP,), client=True
    )
    pair.write(root / "sudo.crt", root / "sudo.key")
    return ApiClient(
        client_config_from_files(
            cluster.server,
            ca_file=cluster.ca_file,
            cert_file=root / "sudo.crt",
            key_file=root / "sudo.key",
        )
    )
