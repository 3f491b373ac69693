"""The API server calls a webhook served on 127.0.0.1 over TLS, and serves custom resources."""

from __future__ import annotations

import base64
import http.server
import json
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.localcluster.rest import ApiError, RestClient

from tests.helpers import wait_until
from tests.integration.test_optional_kinds import widget_crd

pytestmark = pytest.mark.integration


class _DenyPrefixed(http.server.BaseHTTPRequestHandler):
    """Denies ConfigMaps whose name starts with "deny-", allows the rest."""

    calls: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        review = json.loads(self.rfile.read(length))
        request = review["request"]
        name = request["object"]["metadata"]["name"]
        type(self).calls.append(name)
        allowed = not name.startswith("deny-")
        response: dict[str, Any] = {"uid": request["uid"], "allowed": allowed}
        if not allowed:
            response["status"] = {"code": 403, "message": f"test webhook refuses {name}"}
        body = json.dumps(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture
def webhook_server(cluster: ClusterInfo, tmp_path: Path) -> Iterator[int]:
    pair = cluster.certificate_authority().issue(
        "test-webhook", ip_addresses=("127.0.0.1",), server=True
    )
    pair.write(tmp_path / "tls.crt", tmp_path / "tls.key")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _DenyPrefixed)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_webhook_denial_reaches_the_client(
    rest: RestClient, namespace: str, cluster: ClusterInfo, webhook_server: int
) -> None:
    name = f"{namespace}-deny-prefixed"
    configuration = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "deny-prefixed.test.harvester-quota.io",
                "clientConfig": {
                    "url": f"https://127.0.0.1:{webhook_server}/validate",
                    "caBundle": _b64(cluster.ca_file.read_bytes()),
                },
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["configmaps"],
                    }
                ],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 5,
            }
        ],
    }
    path = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
    rest.post(path, configuration)
    try:
        configmaps = f"/api/v1/namespaces/{namespace}/configmaps"

        def denied() -> str | None:
            # A new webhook configuration reaches the API server through an informer: retry
            # until it is in force.
            try:
                rest.post(configmaps, {"metadata": {"name": "deny-me"}})
            except ApiError as error:
                return error.message
            rest.delete(f"{configmaps}/deny-me")
            return None

        message = wait_until(denied, what="the webhook to be called")
        assert "test webhook refuses deny-me" in message
        assert "deny-me" in _DenyPrefixed.calls
        created = rest.post(configmaps, {"metadata": {"name": "allow-me"}})
        assert created["metadata"]["name"] == "allow-me"
        assert "allow-me" in _DenyPrefixed.calls
    finally:
        rest.delete(f"{path}/{name}")


def test_custom_resources_can_be_created_and_listed(rest: RestClient, namespace: str) -> None:
    crd_name = "widgets.test.harvester-quota.io"
    crd = widget_crd("test.harvester-quota.io")
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    rest.post_unless_exists(crds, crd, f"creating CRD {crd_name}")

    def established() -> bool:
        conditions = (rest.get(f"{crds}/{crd_name}").get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    wait_until(established, what="the CRD to be Established")
    widgets = f"/apis/test.harvester-quota.io/v1/namespaces/{namespace}/widgets"
    wait_until(lambda: _served(rest, widgets), what="the new resource to be served")
    rest.post(
        widgets,
        {
            "apiVersion": "test.harvester-quota.io/v1",
            "kind": "Widget",
            "metadata": {"name": "w1"},
            "spec": {"size": 3},
        },
    )
    fetched = rest.get(f"{widgets}/w1")
    assert fetched["spec"] == {"size": 3}
    listed = rest.get(widgets)
    assert [item["metadata"]["name"] for item in listed["items"]] == ["w1"]


def _served(rest: RestClient, path: str) -> bool:
    try:
        rest.get(path)
    except ApiError:
        return False
    return True


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
