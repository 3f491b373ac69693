"""The shipped deploy/ manifest on the local cluster: apply it, act as its service accounts, and
register its webhook configuration for a server on loopback.

Used by the scale run (`harvester_quota.testbench.scale`) and by the integration tests, so that both run
the product exactly as deployed: with service-account tokens, the RBAC of deploy/, and the
webhook called by the API server over TLS. Nothing here runs a process; callers do.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import functools
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import yaml

from ...generic import errors
from ...generic.client import ApiClient
from ...generic.resource import (
    CRDS,
    NAMESPACES,
    SECRETS,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
    Object,
    Resource,
)
from .chart import MANIFEST
from .cluster import ClusterInfo, client_config_from_files, kubeconfig_document
from .errors import ClusterError
from .pki import WEBHOOK_CLIENT_NAME

SYSTEM_NAMESPACE: Final = "harvester-system"
CONTROLLER_SERVICE_ACCOUNT: Final = "harvester-quota"
WEBHOOK_SERVICE_ACCOUNT: Final = "harvester-quota-webhook"
CONTROLLER_USER: Final = f"system:serviceaccount:{SYSTEM_NAMESPACE}:{CONTROLLER_SERVICE_ACCOUNT}"
KUBEVIRT_USER: Final = f"system:serviceaccount:{SYSTEM_NAMESPACE}:kubevirt-controller"
"""KubeVirt's controller as the shipped webhook rules name it (the chart's kubevirt.* values)."""
FIELD_MANAGER: Final = "harvester-quota-local"

KINDS: Final = {
    "ServiceAccount": Resource("", "v1", "serviceaccounts", "ServiceAccount"),
    "Service": Resource("", "v1", "services", "Service"),
    "Secret": SECRETS,
    "ClusterRole": Resource(
        "rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False
    ),
    "ClusterRoleBinding": Resource(
        "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False
    ),
    "Role": Resource("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    "RoleBinding": Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    "Deployment": Resource("apps", "v1", "deployments", "Deployment"),
    "Job": Resource("batch", "v1", "jobs", "Job"),
    "NetworkPolicy": Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy"),
    "CustomResourceDefinition": CRDS,
    "ValidatingAdmissionPolicy": Resource(
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicies",
        "ValidatingAdmissionPolicy",
        False,
    ),
    "ValidatingAdmissionPolicyBinding": Resource(
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicybindings",
        "ValidatingAdmissionPolicyBinding",
        False,
    ),
    "ValidatingWebhookConfiguration": VALIDATING_WEBHOOK_CONFIGURATIONS,
}
RBAC_KINDS: Final = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
API_SERVER_CLIENT_NAMES: Final = frozenset({WEBHOOK_CLIENT_NAME})
"""The client certificate names a webhook run as deployed accepts (--client-name): the API
server's, whose CA is `webhook_client_ca`."""
TOKEN_SECONDS: Final = 24 * 3600
"""Lifetime asked of a TokenRequest: longer than any run that uses it."""


def documents(manifest: Path = MANIFEST) -> Iterator[Object]:
    """The documents of the shipped manifest, in order, each a copy of its own (a caller may
    change it). A text is parsed once per process: most tests ask for the manifest several
    times, and each parse took 0.16 s of CPU."""
    for document in _parsed(manifest.read_text()):
        yield copy.deepcopy(document)


@functools.lru_cache(maxsize=4)
def _parsed(text: str) -> tuple[Object, ...]:
    return tuple(document for document in yaml.safe_load_all(text) if document)


async def ensure_namespace(api: ApiClient, name: str = SYSTEM_NAMESPACE) -> None:
    with contextlib.suppress(errors.AlreadyExists):
        await api.create(NAMESPACES, {"metadata": {"name": name}})


async def apply(
    api: ApiClient, document: Object, *, dry_run: bool = False, field_manager: str = FIELD_MANAGER
) -> Object:
    """Server-side apply of one manifest document (forced: this manager owns what it sets)."""
    resource = KINDS[document["kind"]]
    metadata = document["metadata"]
    return await api.patch(
        resource,
        metadata["name"],
        document,
        metadata.get("namespace"),
        patch_type="apply",
        field_manager=field_manager,
        force=True,
        dry_run=dry_run,
    )


async def apply_shipped_rbac(api: ApiClient) -> None:
    """The service accounts, roles and bindings of deploy/ (and their namespace), and the
    admission policy that fences the webhook's Leases (part of what its Role may do)."""
    await ensure_namespace(api)
    for document in documents():
        if document["kind"] in RBAC_KINDS:
            await apply(api, document)
    for document in documents():
        if (
            document["kind"].startswith("ValidatingAdmissionPolicy")
            and document["metadata"]["name"] not in KUBEVIRT_POLICIES
        ):
            await apply(api, document)


KUBEVIRT_LABELS_POLICY: Final = "harvester-quota-kubevirt-labels"
"""The shipped policy that lets only KubeVirt's controller set KubeVirt's pod labels."""

KUBEVIRT_STATUS_POLICY: Final = "harvester-quota-kubevirt-status"
"""The shipped policy that lets only KubeVirt change a VMI's status."""

KUBEVIRT_PRIORITY_POLICY: Final = "harvester-quota-kubevirt-migration-priority"
"""The shipped policy that lets only KubeVirt's controller set a migration's spec.priority."""

KUBEVIRT_POLICIES: Final = (
    KUBEVIRT_LABELS_POLICY,
    KUBEVIRT_STATUS_POLICY,
    KUBEVIRT_PRIORITY_POLICY,
)
"""The shipped policies naming KubeVirt's controller, which a test or a run binds to its own
namespaces with the user its cluster's KubeVirt runs as (kubevirt_policies): applied cluster-wide
as shipped, they would name Harvester's account and refuse the local cluster's real
virt-controller (its evacuations carry spec.priority from KubeVirt v1.9). The other shipped
policy (the webhook's Leases) is cluster-wide as shipped (apply_shipped_rbac)."""


def kubevirt_policies(
    match_labels: Mapping[str, str],
    *,
    kubevirt_user: str = KUBEVIRT_USER,
    name: str,
    also_kubevirt: Sequence[str] = (),
) -> list[Object]:
    """The shipped KUBEVIRT_POLICIES and their bindings, each named `name` and a suffix, with
    `kubevirt_user` as KubeVirt's controller, bound only to the namespaces labelled
    `match_labels` (as webhook_configuration narrows the webhook), so that a test's or a run's
    policies never meet another's namespaces; each policy before its binding. `also_kubevirt`
    names more identities taken for KubeVirt's controller: on a Harvester KubeVirt runs in
    Harvester's namespace and Harvester's migration controller writes VMIs impersonating its
    account, which the local cluster runs virt-controller under another name than."""
    documents_out: list[Object] = []
    for shipped in KUBEVIRT_POLICIES:
        policy, binding = (
            copy.deepcopy(d)
            for d in documents()
            if d["kind"].startswith("ValidatingAdmissionPolicy")
            and d["metadata"]["name"] == shipped
        )
        policy["metadata"]["name"] = binding["metadata"]["name"] = _policy_name(name, shipped)
        binding["spec"]["policyName"] = policy["metadata"]["name"]
        for condition in policy["spec"]["matchConditions"]:
            condition["expression"] = _as_kubevirt(
                condition["expression"], (kubevirt_user, *also_kubevirt)
            )
        selector = binding["spec"]["matchResources"].get("namespaceSelector") or {}
        binding["spec"]["matchResources"]["namespaceSelector"] = {
            **selector,
            "matchLabels": dict(match_labels),
        }
        documents_out += [policy, binding]
    return documents_out


def _as_kubevirt(expression: str, users: Sequence[str]) -> str:
    """A policy's condition with `users` in the place of the shipped KubeVirt controller's
    account: one user in its place; several as a list (``!= 'u'`` becomes ``not in [...]``)."""
    if len(users) == 1:
        return expression.replace(KUBEVIRT_USER, users[0])
    single = f"request.userInfo.username != '{KUBEVIRT_USER}'"
    expression = expression.replace(single, f"!(request.userInfo.username in ['{KUBEVIRT_USER}'])")
    return expression.replace(f"'{KUBEVIRT_USER}'", ", ".join(f"'{user}'" for user in users))


def _policy_name(name: str, shipped: str) -> str:
    """`name` for the labels policy (as before there were more), `name`-status and
    `name`-priority for the others."""
    return name if shipped == KUBEVIRT_LABELS_POLICY else f"{name}-{shipped.rsplit('-', 1)[-1]}"


async def service_account_token(
    api: ApiClient, service_account: str, namespace: str = SYSTEM_NAMESPACE
) -> str:
    """A TokenRequest token for a service account of `namespace` (the system namespace)."""
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token"
    answer = await api.request(
        "POST",
        path,
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": TOKEN_SECONDS},
        },
    )
    return str(answer["status"]["token"])


async def client_as(api: ApiClient, cluster: ClusterInfo, service_account: str) -> ApiClient:
    """An ApiClient authenticated as a service account of the system namespace."""
    token = await service_account_token(api, service_account)
    return ApiClient(client_config_from_files(cluster.server, ca_file=cluster.ca_file, token=token))


def webhook_client_ca(cluster: ClusterInfo) -> Path:
    """The CA of the client certificate `cluster`'s API server presents to admission webhooks:
    a webhook run as deployed (webhook.clientAuth) trusts it and nothing else."""
    if cluster.webhook_client_ca is None:
        raise ClusterError("this cluster's API server presents no webhook client certificate")
    return cluster.webhook_client_ca


def webhook_client_flags(cluster: ClusterInfo) -> list[str]:
    """The webhook's flags that admit the API server of `cluster` only (as the chart passes
    them with webhook.clientAuth.required)."""
    names = [f"--client-name={name}" for name in sorted(API_SERVER_CLIENT_NAMES)]
    return [f"--client-ca-file={webhook_client_ca(cluster)}", *names]


async def write_token_kubeconfig(
    api: ApiClient, cluster: ClusterInfo, service_account: str, path: Path
) -> Path:
    """A kubeconfig at `path` (owner-readable only) that authenticates as the service account
    through a token file beside it, as a pod's projected token would; returns `path`."""
    token = await service_account_token(api, service_account)
    token_kubeconfig(cluster, service_account, token, path)
    return path


def token_kubeconfig(cluster: ClusterInfo, user: str, token: str, path: Path) -> None:
    """Writes `path` and its token file ``<path stem>.token``, both owner-readable only. The
    kubeconfig names the token file by its absolute path: a relative one is read relative to
    the kubeconfig's own folder, not the working directory (`make scale`'s relative --report
    doubled it, and the controller could not start)."""
    token_file = path.with_suffix(".token")
    token_file.touch(mode=0o600)
    token_file.write_text(token)
    ca = base64.b64encode(cluster.ca_file.read_bytes()).decode()
    config = kubeconfig_document(
        {"server": cluster.server, "certificate-authority-data": ca},
        user,
        {"tokenFile": str(token_file.resolve())},
    )
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(config))


def webhook_configuration(
    url: str,
    ca_pem: bytes,
    match_labels: Mapping[str, str],
    *,
    kubevirt_user: str = KUBEVIRT_USER,
    name: str | None = None,
) -> Object:
    """The shipped ValidatingWebhookConfiguration, its Service replaced by `url` (as envtest
    does), narrowed to the namespaces labelled `match_labels` so that nothing else meets it,
    with `kubevirt_user` as KubeVirt's controller in its match conditions."""
    (shipped,) = [d for d in documents() if d["kind"] == "ValidatingWebhookConfiguration"]
    configuration = copy.deepcopy(shipped)
    configuration["metadata"]["name"] = name or f"harvester-quota-local-{uuid.uuid4().hex[:6]}"
    for webhook in configuration["webhooks"]:
        for condition in webhook.get("matchConditions") or []:
            condition["expression"] = condition["expression"].replace(KUBEVIRT_USER, kubevirt_user)
        service = webhook["clientConfig"].pop("service")
        webhook["clientConfig"]["url"] = f"{url.rstrip('/')}{service['path']}"
        webhook["clientConfig"]["caBundle"] = base64.b64encode(ca_pem).decode()
        only: dict[str, Any] = dict(match_labels)
        if webhook["rules"][0]["resources"] == ["namespaces"]:
            webhook["objectSelector"] = {"matchLabels": only}
        else:  # the shipped selector (the pods rule's room-held label) narrowed further
            shipped_selector = webhook.get("namespaceSelector") or {}
            webhook["namespaceSelector"] = {**shipped_selector, "matchLabels": only}
    return configuration


async def register_kubevirt_policies(
    api: ApiClient,
    match_labels: Mapping[str, str],
    *,
    kubevirt_user: str,
    name: str,
    also_kubevirt: Sequence[str] = (),
) -> None:
    """Applies kubevirt_policies (each policy first, then its binding)."""
    for document in kubevirt_policies(
        match_labels, kubevirt_user=kubevirt_user, name=name, also_kubevirt=also_kubevirt
    ):
        await apply(api, document)


async def unregister_kubevirt_policies(api: ApiClient, name: str) -> None:
    """Deletes what register_kubevirt_policies applied (bindings first); gone is fine."""
    for shipped in KUBEVIRT_POLICIES:
        for kind in ("ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy"):
            with contextlib.suppress(errors.NotFound):
                await api.delete(KINDS[kind], _policy_name(name, shipped))
