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
- Its handlers also update the VM of the VMI (``syncVM``: a timestamp annotation), so a migration
  made by hand needs a VirtualMachine of the VMI's name, or the handler fails and retries.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import ClusterError
from .rest import ApiError, RestClient

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
KUBEVIRT_CONTROLLER_ACCOUNT = "kubevirt-controller"
"""KubeVirt's controller service account (kubevirt.io/kubevirt components.ControllerServiceAccountName),
the identity Harvester's migration controller writes VMIs as."""
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


def harvester_account_binding() -> dict[str, Any]:
    """Harvester's chart's ClusterRoleBinding `harvester`: its service account is cluster-admin."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "harvester"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cluster-admin",
        },
        "subjects": [
            {"kind": "ServiceAccount", "name": HARVESTER_ACCOUNT, "namespace": HARVESTER_NAMESPACE}
        ],
    }


def install_rbac(rest: RestClient) -> None:
    """Harvester's namespace and service account, its chart's binding, and the VMI role of
    KubeVirt's account it impersonates; what exists already is left as it is."""
    namespace = {"metadata": {"name": HARVESTER_NAMESPACE}}
    account = {"metadata": {"name": HARVESTER_ACCOUNT, "namespace": HARVESTER_NAMESPACE}}
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    role, binding = kubevirt_controller_vmi_role()
    for path, body in (
        ("/api/v1/namespaces", namespace),
        (f"/api/v1/namespaces/{HARVESTER_NAMESPACE}/serviceaccounts", account),
        (f"{rbac}/clusterrolebindings", harvester_account_binding()),
        (f"{rbac}/clusterroles", role),
        (f"{rbac}/clusterrolebindings", binding),
    ):
        try:
            rest.post(path, body)
        except ApiError as error:
            if error.status != 409:
                raise ClusterError(
                    f"creating {path}/{body['metadata']['name']}: {error}"
                ) from error


def controllers_args(kubeconfig: Path) -> list[str]:
    """The command line of ``harvester-controllers`` against ``kubeconfig``."""
    return ["--kubeconfig", str(kubeconfig), "--namespace", HARVESTER_NAMESPACE]


def lease_holder(rest: RestClient) -> str | None:
    """The holder of Harvester's controllers' Lease, None while nobody holds it."""
    if not rest.exists(LEASE_PATH):
        return None
    holder = rest.get(LEASE_PATH).get("spec", {}).get("holderIdentity")
    return str(holder) if holder else None
