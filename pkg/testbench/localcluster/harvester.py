"""Harvester's own controllers on the local cluster.

``harvester-controllers`` (built by ``binaries.build_harvester`` from ``gomod/harvester-v<version>``)
runs Harvester's migration and resourcequota controllers, unchanged, under Harvester's leader Lease
(``kube-system/harvester-controllers``). What they need from the cluster besides the CRDs `cluster
up` installs (settings.harvesterhci.io and KubeVirt's VMs, VMIs and migrations):

- Harvester's migration controller writes VMI annotations impersonating KubeVirt's service account
  (``util.VirtClientUpdateVmi``: ``Impersonate-User: system:serviceaccount:<its --namespace>:
  kubevirt-controller``), which bypasses KubeVirt's VMI update webhook on a real Harvester. Here that
  account must be allowed to get and update VMIs (``KUBEVIRT_CONTROLLER_VMI_ROLE``), and the
  identity the binary runs as must be allowed to impersonate it (the admin certificate is).
- Its handlers also update the VM of the VMI (``syncVM``: a timestamp annotation), so a migration
  made by hand needs a VirtualMachine of the VMI's name, or the handler fails and retries.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import process
from .cluster import ClusterInfo, _child_env, _post_unless_exists
from .process import ProcessRecord
from .rest import RestClient

HARVESTER_NAMESPACE = "harvester-system"
"""Harvester's --namespace: its management namespace, where KubeVirt runs on a Harvester."""
LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/harvester-controllers"
KUBEVIRT_CONTROLLER_ACCOUNT = "kubevirt-controller"
"""KubeVirt's controller service account (kubevirt.io/kubevirt components.ControllerServiceAccountName),
the identity Harvester's migration controller writes VMIs as."""
_ROLE_NAME = "harvester-quota-bench:kubevirt-controller-vmis"


def kubevirt_controller_vmi_role(namespace: str = HARVESTER_NAMESPACE) -> list[dict[str, Any]]:
    """A ClusterRole and its binding: KubeVirt's controller account in ``namespace`` may get and
    update VMIs (on a Harvester, KubeVirt's own ClusterRole grants that and more)."""
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
            {"kind": "ServiceAccount", "name": KUBEVIRT_CONTROLLER_ACCOUNT, "namespace": namespace}
        ],
    }
    return [role, binding]


def install_rbac(rest: RestClient, namespace: str = HARVESTER_NAMESPACE) -> None:
    """Creates ``kubevirt_controller_vmi_role`` unless it exists."""
    role, binding = kubevirt_controller_vmi_role(namespace)
    base = "/apis/rbac.authorization.k8s.io/v1"
    _post_unless_exists(rest, f"{base}/clusterroles", role, "creating Harvester's VMI role")
    _post_unless_exists(
        rest, f"{base}/clusterrolebindings", binding, "binding Harvester's VMI role"
    )


def controllers_args(kubeconfig: Path, namespace: str = HARVESTER_NAMESPACE) -> list[str]:
    """The command line of ``harvester-controllers`` against ``kubeconfig``."""
    return ["--kubeconfig", str(kubeconfig), "--namespace", namespace]


def start_controllers(
    info: ClusterInfo, binary: Path, log_path: Path, namespace: str = HARVESTER_NAMESPACE
) -> ProcessRecord:
    """Installs the RBAC they need and starts ``binary`` (``harvester-controllers``) against the
    cluster's admin kubeconfig; stop it with ``process.stop``. Returns at once: wait for
    ``lease_holder`` to know it leads."""
    install_rbac(info.rest(), namespace)
    argv = [str(binary), *controllers_args(info.kubeconfig, namespace)]
    return process.start("harvester-controllers", argv, log_path, env=_child_env())


def lease_holder(rest: RestClient) -> str | None:
    """The holder of Harvester's controllers' Lease, None while nobody holds it."""
    if not rest.exists(LEASE_PATH):
        return None
    holder = rest.get(LEASE_PATH).get("spec", {}).get("holderIdentity")
    return str(holder) if holder else None
