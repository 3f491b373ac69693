"""The chart's default certificates on the real API server: no cert-manager, no Secret made by
hand. The webhook replicas make their CA and serving certificate, fill the configuration's
caBundle, and rotate both while the API server keeps calling them; no tenant can read the CA
key or change which CA is trusted."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import ssl
from dataclasses import replace
from pathlib import Path

import pytest
from cryptography import x509
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import RESOURCE_QUOTAS, SECRETS
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.webhook.certkeeper import BUNDLE, CA_CERT
from harvester_quota.webhook.selfsigned import signer, split_bundle

from tests.helpers import eventually
from tests.integration import deployment
from tests.integration.kubevirt_by_hand import KubeVirtByHand
from tests.integration.tenant import tenant

pytestmark = pytest.mark.integration

HARD = {"limits.cpu": "3", "limits.memory": "5000Mi"}
BELOW_USAGE = {"limits.cpu": "3", "limits.memory": "4000Mi"}  # the VM uses 4797464313
RAISED = {"limits.cpu": "4", "limits.memory": "6000Mi"}
SHORT_CA, SHORT_CERT = datetime.timedelta(seconds=20), datetime.timedelta(seconds=10)
"""The lifetimes an operator shortens to (--ca-lifetime, --cert-lifetime): the CA made at the
start is renewed 16 s after it was made, then every 16 s; the serving certificate every 8 s; a
new CA is served 0.5 s after it is published and the old one stays trusted 4 s more."""


async def quota_edit(api: ApiClient, namespace: str, hard: dict[str, str]) -> str:
    """A dry-run edit of the managed quota's spec.hard, which only the resourcequotas rule
    (failurePolicy Fail) decides: "allowed", "denied: ..." (our webhook's refusal) or
    "failed: ..." (anything else, e.g. the API server could not call the webhook)."""
    try:
        await api.patch(
            RESOURCE_QUOTAS, "default-quota", {"spec": {"hard": hard}}, namespace, dry_run=True
        )
    except errors.ApiError as error:
        if 'admission webhook "resourcequotas.harvester-quota.io" denied' in error.message:
            return f"denied: {error.message}"
        return f"failed: {error.message}"
    return "allowed"


async def served_certificate(port: int) -> x509.Certificate:
    """The certificate a new TLS connection to 127.0.0.1:`port` is served (not verified)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()
    return x509.load_der_x509_certificate(der)


async def trusted(api: ApiClient, name: str) -> set[bytes]:
    """The CAs (PEM) every webhook of configuration `name` trusts (their caBundles' common
    part; empty while any has none)."""
    configuration = await api.get(deployment.KINDS["ValidatingWebhookConfiguration"], name)
    bundles = [
        set(split_bundle(base64.b64decode(w["clientConfig"].get("caBundle") or "")))
        for w in configuration["webhooks"]
    ]
    return set.intersection(*bundles)


async def secret_data(api: ApiClient, name: str) -> dict[str, bytes]:
    secret = await api.get(SECRETS, name, deployment.SYSTEM_NAMESPACE)
    return {key: base64.b64decode(value) for key, value in (secret.get("data") or {}).items()}


async def test_the_default_install_certifies_itself_and_rotates_with_no_call_failing(
    api: ApiClient, cluster: ClusterInfo, namespace: str, tmp_path: Path
) -> None:
    """Two replicas with the chart's default certificate flags and RBAC make one CA between
    them; the API server calls them (a refusal is refused, an allowed edit allowed). Then the
    lifetimes are shortened: the CA and the serving certificate rotate, the configuration
    trusts the new CA beside the old, the replicas serve a certificate the new CA signed, and
    every edit sent through the API server meanwhile got its answer from the webhook."""
    await deployment.apply_rbac(api)
    async with deployment.running_self_certified_webhooks(
        api, cluster, namespace, tmp_path
    ) as hooks:
        name = hooks.keepers[0].configuration
        secret_name = hooks.keepers[0].secret_name
        by_hand = KubeVirtByHand(api, namespace)
        await by_hand.create_quota(HARD)
        await by_hand.start_vm("vm1")
        first = await secret_data(api, secret_name)
        assert split_bundle(first[BUNDLE]) == (first[CA_CERT],), "one CA for both replicas"
        assert {keeper.served for keeper in hooks.keepers} == {hooks.keepers[0].served}

        async def refused() -> str | None:
            answer = await quota_edit(api, namespace, BELOW_USAGE)
            return answer if answer.startswith("denied") else None

        assert "lower than what the namespace uses now" in await eventually(
            refused, what="the API server to call the webhook with the caBundle it filled"
        )
        assert await trusted(api, name) == {first[CA_CERT]}
        assert await quota_edit(api, namespace, RAISED) == "allowed"

        answers: list[str] = []
        stop = asyncio.Event()

        async def keep_editing() -> None:
            while not stop.is_set():
                answers.append(await quota_edit(api, namespace, BELOW_USAGE))
                answers.append(await quota_edit(api, namespace, RAISED))

        editing = asyncio.ensure_future(keep_editing())
        for keeper in hooks.keepers:  # the operator shortens the lifetimes
            keeper.policy = replace(keeper.policy, ca_lifetime=SHORT_CA, cert_lifetime=SHORT_CERT)

        async def rotated() -> tuple[dict[str, bytes], x509.Certificate] | None:
            data = await secret_data(api, secret_name)
            if data[CA_CERT] == first[CA_CERT]:
                return None
            cert = await served_certificate(hooks.port)
            if signer(cert, [data[CA_CERT]]) is None or await trusted(api, name) != set(
                split_bundle(data[BUNDLE])
            ):
                return None
            return data, cert

        data, cert = await eventually(rotated, timeout=60, what="a CA rotation to be served")
        before_switch = len(answers)
        await eventually(
            lambda: len(answers) >= before_switch + 20 or None, what="edits after the switch"
        )
        stop.set()
        await editing
        assert cert.not_valid_after_utc - cert.not_valid_before_utc < datetime.timedelta(
            minutes=6
        )  # the shortened lifetime (plus the 5 minutes back-dated)
        failed = [a for a in answers if not a.startswith(("allowed", "denied"))]
        assert not failed, failed
        assert before_switch > 0, "edits went through the API server before the switch too"
        assert first[CA_CERT] in split_bundle(data[BUNDLE]), "the old CA stays trusted"
        assert answers.count("allowed") == len(answers) // 2


async def test_no_tenant_can_read_the_ca_key_or_change_which_ca_is_trusted(
    api: ApiClient, cluster: ClusterInfo, namespace: str
) -> None:
    """A tenant with edit in its namespace cannot read or update the CA Secret nor patch the
    webhook configuration's caBundle; the webhook's own account can reach that one Secret and
    that one configuration only (resourceNames), no other Secret nor configuration."""
    await deployment.apply_rbac(api)
    options = deployment.shipped_self_signed()
    system = deployment.SYSTEM_NAMESPACE
    secrets = {
        name: await deployment.apply(
            api,
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name, "namespace": system},
                "data": {"ca.key": base64.b64encode(b"secret").decode()},
            },
        )
        for name in (options.secret_name, f"{options.secret_name}-other")
    }
    configurations = [options.configuration, f"{options.configuration}-other-test"]
    for name in configurations:
        await deployment.apply(
            api,
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": name},
                "webhooks": [],
            },
        )
    forged = [{"op": "add", "path": "/metadata/labels", "value": {"forged": "true"}}]
    webhook_api = await deployment.client_as(api, cluster, "harvester-quota-webhook")
    try:
        async with tenant(api, cluster, namespace, cluster_roles=("edit",)) as user:
            with pytest.raises(errors.Forbidden):
                await user.api.get(SECRETS, options.secret_name, system)
            with pytest.raises(errors.Forbidden):
                await user.api.update(SECRETS, secrets[options.secret_name])
            with pytest.raises(errors.Forbidden):
                await user.api.patch(
                    deployment.KINDS["ValidatingWebhookConfiguration"],
                    options.configuration,
                    forged,
                    patch_type="json",
                )
        assert (await webhook_api.get(SECRETS, options.secret_name, system))["data"]
        with pytest.raises(errors.Forbidden):
            await webhook_api.get(SECRETS, f"{options.secret_name}-other", system)
        with pytest.raises(errors.Forbidden):
            await webhook_api.create(
                SECRETS, {"metadata": {"name": "planted", "namespace": system}}
            )
        await webhook_api.patch(
            deployment.KINDS["ValidatingWebhookConfiguration"],
            options.configuration,
            forged,
            patch_type="json",
            dry_run=True,
        )
        with pytest.raises(errors.Forbidden):
            await webhook_api.patch(
                deployment.KINDS["ValidatingWebhookConfiguration"],
                configurations[1],
                forged,
                patch_type="json",
                dry_run=True,
            )
    finally:
        await webhook_api.close()
        for name in secrets:
            with contextlib.suppress(errors.NotFound):
                await api.delete(SECRETS, name, system)
        for name in configurations:
            with contextlib.suppress(errors.NotFound):
                await api.delete(deployment.KINDS["ValidatingWebhookConfiguration"], name)
