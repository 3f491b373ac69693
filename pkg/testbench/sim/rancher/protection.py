"""Rancher 2.14.6+ / 2.15.2+ write protection of the default quota, on a real API server.

rancher-webhook denies create, update and delete of a ResourceQuota labelled
``resourcequota.management.cattle.io/default-resource-quota`` unless the request comes from
Rancher's own ``system:serviceaccount:cattle-system:rancher-webhook-sudo`` (rancher/rancher#54690,
rancher/webhook #1797 and #1798); the namespace controller may still delete. The API server
enforces the same rule natively as a ValidatingAdmissionPolicy, so the simulation needs no extra
server: `RancherProtection.install` creates the policy, a binding limited to the given
namespaces, and the sudo service account, and hands out a client that acts as it (the
simulated Rancher agent writes its quotas with it, as the real one does).

Rancher's annotation on the namespace (``field.cattle.io/resourceQuota``) stays writable: it is
Rancher's source of truth, validated against the project's limits, and copied to the quota by the
agent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ....generic import errors
from ....generic.client import ApiClient
from ....generic.config import ClientConfig
from ....generic.resource import NAMESPACES, RESOURCE_QUOTAS, Object, Resource
from ....util.annotations import LABEL_DEFAULT_RESOURCE_QUOTA

ENFORCE_TIMEOUT: Final = 15.0
ENFORCE_POLL: Final = 0.1
SUDO_NAMESPACE: Final = "cattle-system"
SUDO_ACCOUNT: Final = "rancher-webhook-sudo"
SUDO_USER: Final = f"system:serviceaccount:{SUDO_NAMESPACE}:{SUDO_ACCOUNT}"
NAMESPACE_CONTROLLER: Final = "system:serviceaccount:kube-system:namespace-controller"
DENIAL_MESSAGE: Final = "users are forbidden from changing resources managed by Rancher"
"""rancher-webhook's own words for this refusal (pkg/resources/core/v1/resourcequota)."""

POLICIES: Final = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingadmissionpolicies",
    "ValidatingAdmissionPolicy",
    namespaced=False,
)
BINDINGS: Final = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingadmissionpolicybindings",
    "ValidatingAdmissionPolicyBinding",
    namespaced=False,
)
SERVICE_ACCOUNTS: Final = Resource("", "v1", "serviceaccounts", "ServiceAccount")
CLUSTER_ROLE_BINDINGS: Final = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False
)

_LABELLED: Final = (
    "has({o}.metadata.labels) && "
    f"'{LABEL_DEFAULT_RESOURCE_QUOTA}' in {{o}}.metadata.labels && "
    f"{{o}}.metadata.labels['{LABEL_DEFAULT_RESOURCE_QUOTA}'] == 'true'"
)


def policy(name: str) -> Object:
    """The ValidatingAdmissionPolicy: Rancher's rule as CEL."""
    is_default_quota = " || ".join(
        f"({o} != null && {_LABELLED.format(o=o)})" for o in ("object", "oldObject")
    )
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE", "DELETE"],
                        "resources": ["resourcequotas"],
                    }
                ]
            },
            "matchConditions": [{"name": "default-resource-quota", "expression": is_default_quota}],
            "validations": [
                {
                    "expression": (
                        f"request.userInfo.username == '{SUDO_USER}' || "
                        f"(request.operation == 'DELETE' && "
                        f"request.userInfo.username == '{NAMESPACE_CONTROLLER}')"
                    ),
                    "message": DENIAL_MESSAGE,
                    "reason": "Forbidden",
                }
            ],
        },
    }


def binding(name: str, namespaces: Iterable[str]) -> Object:
    """Binds the policy to the given namespaces only (the local cluster is shared by tests)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "In",
                            "values": sorted(namespaces),
                        }
                    ]
                }
            },
        },
    }


@dataclass
class RancherProtection:
    """An installed protection; `sudo` is a client acting as rancher-webhook-sudo."""

    admin: ApiClient
    name: str
    sudo: ApiClient

    @classmethod
    async def install(
        cls,
        admin: ApiClient,
        namespaces: Iterable[str],
        *,
        ca_file: str | Path,
        name: str = "rancher-default-quota",
    ) -> RancherProtection:
        """Creates (or replaces) the policy, its binding, and Rancher's sudo account.

        ``ca_file`` verifies the API server for the sudo client, which authenticates with its
        token alone (a client certificate would win over the token and make it the admin).
        """
        await _ensure(admin, NAMESPACES, {"metadata": {"name": SUDO_NAMESPACE}})
        await _ensure(
            admin,
            SERVICE_ACCOUNTS,
            {"metadata": {"name": SUDO_ACCOUNT, "namespace": SUDO_NAMESPACE}},
            SUDO_NAMESPACE,
        )
        await _ensure(admin, CLUSTER_ROLE_BINDINGS, _sudo_binding())
        await _replace(admin, POLICIES, policy(name))
        await _replace(admin, BINDINGS, binding(name, namespaces))
        token = await _token(admin)
        sudo = ApiClient(ClientConfig.from_files(admin.config.host, ca_file=ca_file, token=token))
        protection = cls(admin, name, sudo)
        await protection._wait_enforced(sorted(namespaces)[0])
        return protection

    async def _wait_enforced(self, namespace: str, timeout: float = ENFORCE_TIMEOUT) -> None:
        """Returns once the API server refuses a (dry-run) write of a default quota by the admin:
        the API server takes up a new policy asynchronously, within about a second."""
        probe = {
            "metadata": {"name": "probe", "labels": {LABEL_DEFAULT_RESOURCE_QUOTA: "true"}},
            "spec": {"hard": {"pods": "1"}},
        }
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                await self.admin.request(
                    "POST",
                    RESOURCE_QUOTAS.path(namespace),
                    params={"dryRun": "All"},
                    body=probe,
                )
            except errors.Forbidden:
                return
            if loop.time() > deadline:
                raise TimeoutError(f"policy {self.name} not enforced after {timeout:.0f}s")
            await asyncio.sleep(ENFORCE_POLL)

    async def remove(self) -> None:
        """Deletes the policy and its binding; closes the sudo client."""
        for resource in (BINDINGS, POLICIES):
            with contextlib.suppress(errors.NotFound):
                await self.admin.delete(resource, self.name)
        await self.sudo.close()


def _sudo_binding() -> Object:
    return {
        "metadata": {"name": f"{SUDO_ACCOUNT}-quotas"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cluster-admin",
        },
        "subjects": [{"kind": "ServiceAccount", "name": SUDO_ACCOUNT, "namespace": SUDO_NAMESPACE}],
    }


async def _token(admin: ApiClient) -> str:
    answer: dict[str, Any] = await admin.request(
        "POST",
        f"/api/v1/namespaces/{SUDO_NAMESPACE}/serviceaccounts/{SUDO_ACCOUNT}/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    return str(answer["status"]["token"])


async def _ensure(
    admin: ApiClient, resource: Resource, obj: Object, namespace: str | None = None
) -> None:
    with contextlib.suppress(errors.AlreadyExists):
        await admin.create(resource, obj, namespace)


async def _replace(admin: ApiClient, resource: Resource, obj: Object) -> None:
    with contextlib.suppress(errors.NotFound):
        await admin.delete(resource, obj["metadata"]["name"])
    await admin.create(resource, obj)
