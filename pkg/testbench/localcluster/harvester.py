"""Harvester's own controllers on the local cluster.

``harvester-controllers`` (built by ``binaries.build_harvester`` from ``gomod/harvester-v<version>``)
runs Harvester's migration and resourcequota controllers, unchanged, under Harvester's leader Lease
(``kube-system/harvester-controllers``); `cluster up --harvester VERSION` starts it as Harvester's
service account (``harvester-system:harvester``, cluster-admin as Harvester's chart binds it). What
they need from the cluster besides the CRDs `cluster up` installs (settings.harvesterhci.io and
KubeVirt's VMs, VMIs and migrations):

- Harvester's migration controller writes VMI annotations impersonating KubeVirt's service account
  (``util.VirtClientUpdateVmi``: ``Impersonate-User: system:serviceaccount:<its --namespace>:
  kubevirt-controller``), which bypasses KubeVirt's VMI update webhook on a real Harvester. Here that
  account must be allowed to get and update VMIs (``kubevirt_controller_vmi_role``), and the
  identity the binary runs as must be allowed to impersonate it (cluster-admin is).
- Harvester's namespace validator (pkg/webhook/resources/namespace), served by the same binary
  over TLS and registered as Harvester's `harvester-validator` (namespaces, UPDATE, failure policy
  Fail), refuses changes of Rancher's quota annotation while the default quota carries a
  migrating key or below its usage.
- Its handlers also update the VM of the VMI (``syncVM``: a timestamp annotation), so a migration
  made by hand needs a VirtualMachine of the VMI's name, or the handler fails and retries.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from .rest import RestClient

HARVESTER_NAMESPACE = "harvester-system"
"""Harvester's --namespace: its management namespace, where KubeVirt runs on a Harvester."""
LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/harvester-controllers"
HARVESTER_ACCOUNT = "harvester"
"""The service account Harvester's chart runs its `harvester` Deployment as."""
HARVESTER_USER = f"system:serviceaccount:{HARVESTER_NAMESPACE}:{HARVESTER_ACCOUNT}"
HARVESTER_GROUPS = ("system:serviceaccounts", f"system:serviceaccounts:{HARVESTER_NAMESPACE}")
KUBECONFIG = "harvester.kubeconfig"
"""harvester-controllers' kubeconfig in the cluster's state directory (a client certificate naming
Harvester's service account)."""
VALIDATING_WEBHOOK_NAME = "harvester-validator"
VALIDATION_PATH = "/v1/webhook/validation"
KUBEVIRT_CONTROLLER_ACCOUNT = "kubevirt-controller"
"""KubeVirt's controller service account (kubevirt.io/kubevirt components.ControllerServiceAccountName),
the identity Harvester's migration controller writes VMIs as."""
HARVESTER_KUBEVIRT_USER = (
    f"system:serviceaccount:{HARVESTER_NAMESPACE}:{KUBEVIRT_CONTROLLER_ACCOUNT}"
)
"""The user Harvester's migration controller's VMI writes impersonate: KubeVirt's controller on a
Harvester, where KubeVirt runs in Harvester's namespace."""
_ROLE_NAME = "harvester-quota-bench:kubevirt-controller-vmis"


def kubevirt_controller_vmi_role() -> list[dict[str, Any]]:
    """A ClusterRole and its binding: KubeVirt's controller account in Harvester's namespace may
    get and update VMIs (on a Harvester, KubeVirt's own ClusterRole grants that and more)."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": _ROLE_NAME},
        "rules": [
            {
                "apiGroups": ["kubevirt.io"],
                "resources": ["virtualmachineinstances"],
                "verbs": ["get", "update"],
            }
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": _ROLE_NAME},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": _ROLE_NAME,
        },
        "subjects": [
            {
                "kind": "ServiceAccount",
                "name": KUBEVIRT_CONTROLLER_ACCOUNT,
                "namespace": HARVESTER_NAMESPACE,
            }
        ],
    }
    return [role, binding]


def cluster_admin_binding(name: str, subject: dict[str, Any]) -> dict[str, Any]:
    """The ClusterRoleBinding `name` that makes `subject` (a User or a ServiceAccount, as RBAC
    spells a subject) cluster-admin."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cluster-admin",
        },
        "subjects": [subject],
    }


def harvester_account_binding() -> dict[str, Any]:
    """Harvester's chart's ClusterRoleBinding `harvester`: its service account is cluster-admin."""
    return cluster_admin_binding(
        "harvester",
        {"kind": "ServiceAccount", "name": HARVESTER_ACCOUNT, "namespace": HARVESTER_NAMESPACE},
    )


POD_SECURITY_SETTING: dict[str, Any] = {
    "apiVersion": "harvesterhci.io/v1beta1",
    "kind": "Setting",
    "metadata": {"name": "cluster-pod-security-standard"},
    "default": '{"enabled":false,"whitelistedNamespacesList":"", "privilegedNamespacesList":"", '
    '"restrictedNamespacesList":""}',
}
"""Harvester's setting `cluster-pod-security-standard` at its default (pkg/settings), which
Harvester's own setting controller creates: its namespace validator fails every namespace update
(HTTP 500) while it is missing."""


def install_rbac(rest: RestClient) -> None:
    """Harvester's namespace and service account, its chart's binding, the VMI role of KubeVirt's
    account it impersonates, and the setting its namespace validator reads; what exists already is
    left as it is."""
    namespace = {"metadata": {"name": HARVESTER_NAMESPACE}}
    account = {"metadata": {"name": HARVESTER_ACCOUNT, "namespace": HARVESTER_NAMESPACE}}
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    role, binding = kubevirt_controller_vmi_role()
    bodies: tuple[tuple[str, dict[str, Any]], ...] = (
        ("/api/v1/namespaces", namespace),
        (f"/api/v1/namespaces/{HARVESTER_NAMESPACE}/serviceaccounts", account),
        (f"{rbac}/clusterrolebindings", harvester_account_binding()),
        (f"{rbac}/clusterroles", role),
        (f"{rbac}/clusterrolebindings", binding),
        ("/apis/harvesterhci.io/v1beta1/settings", POD_SECURITY_SETTING),
    )
    for path, body in bodies:
        rest.post_unless_exists(path, body, f"creating {path}/{body['metadata']['name']}")


def controllers_args(
    kubeconfig: Path, webhook_port: int, webhook_cert: Path, webhook_key: Path
) -> list[str]:
    """The command line of ``harvester-controllers`` against ``kubeconfig``, serving the namespace
    validator on 127.0.0.1:``webhook_port``."""
    return [
        "--kubeconfig",
        str(kubeconfig),
        "--namespace",
        HARVESTER_NAMESPACE,
        "--webhook-listen",
        f"127.0.0.1:{webhook_port}",
        "--webhook-cert",
        str(webhook_cert),
        "--webhook-key",
        str(webhook_key),
        "--webhook-controller-user",
        HARVESTER_USER,
    ]


def validating_webhook_configuration(port: int, ca_bundle: bytes) -> dict[str, Any]:
    """Harvester's ValidatingWebhookConfiguration `harvester-validator` (pkg/webhook/server) with
    the namespace validator's one rule (namespaces, UPDATE), failure policy Fail, as Harvester
    registers it; reached by URL on 127.0.0.1 instead of its Service."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": VALIDATING_WEBHOOK_NAME},
        "webhooks": [
            {
                "name": "validator.harvesterhci.io",
                "clientConfig": {
                    "url": f"https://127.0.0.1:{port}{VALIDATION_PATH}",
                    "caBundle": base64.b64encode(ca_bundle).decode(),
                },
                "rules": [
                    {
                        "operations": ["UPDATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["namespaces"],
                        "scope": "Cluster",
                    }
                ],
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1", "v1beta1"],
            }
        ],
    }


def register_webhook(rest: RestClient, port: int, ca_bundle: bytes) -> None:
    """Creates or replaces ``validating_webhook_configuration``."""
    path = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
    body = validating_webhook_configuration(port, ca_bundle)
    if rest.post_unless_exists(path, body, "registering Harvester's validator") is None:
        current = rest.get(f"{path}/{VALIDATING_WEBHOOK_NAME}")
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        rest.put(f"{path}/{VALIDATING_WEBHOOK_NAME}", body)


def lease_holder(rest: RestClient) -> str | None:
    """The holder of Harvester's controllers' Lease, None while nobody holds it."""
    if not rest.exists(LEASE_PATH):
        return None
    holder = rest.get(LEASE_PATH).get("spec", {}).get("holderIdentity")
    return str(holder) if holder else None
