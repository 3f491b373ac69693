"""A tenant as a real identity: a service account of one namespace, bound there to the roles a
namespace's VM user has, acting through its own TokenRequest token.

Issue 25's attacker holds Kubernetes' `edit` and KubeVirt's `kubevirt.io:edit` in one namespace:
pods, VMs and VMIs, and no write to ResourceQuotas or Namespaces. KubeVirt v1.5 moved creating
migrations out of `kubevirt.io:edit` into `kubevirt.io:migrate` (`cluster up` installs both, as
virt-operator would), so a tenant that migrates its VMs is bound to that one too. Everything such
a tenant does goes through `Tenant.api`, so the API server authorizes it as the tenant, every
admission plugin and webhook sees the tenant's user name, and a permission the tenant lacks fails
the test instead of being silently granted.

`tenant(admin, cluster, namespace)` makes one; `grant(admin, tenant, rules)` adds what a role
does not give (e.g. `pods/resize`, not in Kubernetes 1.36's `edit`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from harvester_quota.apis.kubevirt import (
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
    VIRTUAL_MACHINE_INSTANCES,
    VIRTUAL_MACHINES,
)
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import PODS, Object, Resource
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.localcluster.cluster import client_config_from_files
from harvester_quota.testbench.localcluster.deploy import KINDS, service_account_token
from harvester_quota.testbench.sim.kubevirt import VMSpec, vm_resources
from harvester_quota.testbench.sim.kubevirt.objects import (
    LABEL_VMI_NAME,
    render_migration,
    render_vm,
    render_vmi,
)
from harvester_quota.util.kubevirtversion import parse_kubevirt_version

from tests.helpers import eventually

TENANT: Final = "tenant"
TENANT_CLUSTER_ROLES: Final = ("edit", "kubevirt.io:edit", "kubevirt.io:migrate")
"""What a namespace's VM user is bound to: Kubernetes' bootstrap `edit`, KubeVirt's
`kubevirt.io:edit` (VMs, VMIs) and `kubevirt.io:migrate` (migrations, KubeVirt v1.5 on)."""
SELF_SUBJECT_ACCESS_REVIEWS: Final = Resource(
    "authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", False
)
SERVICE_ACCOUNTS: Final = KINDS["ServiceAccount"]
ROLES: Final = KINDS["Role"]
ROLE_BINDINGS: Final = KINDS["RoleBinding"]


@dataclass(frozen=True)
class Access:
    """One request a subject may or may not make (a SelfSubjectAccessReview's attributes)."""

    verb: str
    resource: str
    group: str = ""
    subresource: str = ""

    def __str__(self) -> str:
        where = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        return f"{self.verb} {where}.{self.group}" if self.group else f"{self.verb} {where}"


ROLE_PROBES: Final[Mapping[str, Access]] = {
    "edit": Access("create", "pods"),
    "kubevirt.io:edit": Access("create", "virtualmachineinstances", "kubevirt.io"),
    "kubevirt.io:migrate": Access("create", "virtualmachineinstancemigrations", "kubevirt.io"),
}
"""For each role a tenant is bound to, one thing it grants: the binding is in force (the
authorizer's caches have it) once the tenant may do that."""


@dataclass
class Tenant:
    """A namespace's tenant: its service account's client, and what it created there."""

    api: ApiClient
    namespace: str
    name: str = TENANT
    pods: set[str] = field(default_factory=set)
    """Names of the pods this tenant created (not those KubeVirt created for its VMs)."""

    @property
    def user(self) -> str:
        """The user name the API server and the webhooks see."""
        return f"system:serviceaccount:{self.namespace}:{self.name}"

    async def may(self, access: Access) -> bool:
        """Whether the API server authorizes `access` for this tenant in its namespace."""
        return await allowed(self.api, self.namespace, access)

    # Pods ---------------------------------------------------------------------------------------

    async def create_pod(
        self,
        name: str,
        *,
        cpu: str,
        memory: str,
        labels: Mapping[str, str] | None = None,
        node_selector: Mapping[str, str] | None = None,
    ) -> Object:
        """A one-container pod whose limits (and so requests) are `cpu` and `memory`."""
        pod = small_pod(name, cpu, memory, labels)
        if node_selector:
            pod["spec"]["nodeSelector"] = dict(node_selector)
        created = await self.api.create(PODS, pod, self.namespace)
        self.pods.add(name)
        return created

    async def label_pod(self, name: str, labels: Mapping[str, str]) -> Object:
        return await self.api.patch(
            PODS, name, {"metadata": {"labels": dict(labels)}}, self.namespace
        )

    async def resize_pod(self, name: str, *, cpu: str) -> Object:
        """Grows (or shrinks) the pod's one container in place, through the pods/resize
        subresource (requests and limits together: a Guaranteed pod stays Guaranteed)."""
        patch = [
            {"op": "replace", "path": f"/spec/containers/0/resources/{kind}/cpu", "value": cpu}
            for kind in ("requests", "limits")
        ]
        return await self.api.patch(
            PODS, name, patch, self.namespace, patch_type="json", subresource="resize"
        )

    # KubeVirt -----------------------------------------------------------------------------------

    async def create_vm(self, spec: VMSpec, *, kubevirt_version: str, ratio: str | None) -> Object:
        """A running VM as Harvester's UI makes it (its mutator's requests and guest memory),
        defaulted as virt-api would: KubeVirt's VM controller then starts its VMI."""
        return await self.api.create(
            VIRTUAL_MACHINES,
            vm_object(spec, self.namespace, kubevirt_version, ratio),
            self.namespace,
        )

    async def create_vmi(self, spec: VMSpec, *, kubevirt_version: str, ratio: str | None) -> Object:
        """A VMI without a VM (what `kubevirt.io:edit` allows as well): virt-controller renders
        and creates its launcher pod, as for a VM's."""
        vmi = render_vmi(vm_object(spec, self.namespace, kubevirt_version, ratio))
        vmi["metadata"].pop("ownerReferences", None)
        return await self.api.create(VIRTUAL_MACHINE_INSTANCES, vmi, self.namespace)

    async def migrate(self, vmi_name: str, name: str | None = None) -> Object:
        """A VirtualMachineInstanceMigration as virtctl makes it (virt-api's label on it)."""
        body = render_migration(self.namespace, vmi_name, name=name)
        body["metadata"].setdefault("labels", {})[LABEL_VMI_NAME] = vmi_name
        return await self.api.create(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, body, self.namespace)


def small_pod(name: str, cpu: str, memory: str, labels: Mapping[str, str] | None = None) -> Object:
    metadata: Object = {"name": name}
    if labels:
        metadata["labels"] = dict(labels)
    return {
        "metadata": metadata,
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {"limits": {"cpu": cpu, "memory": memory}},
                }
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }


def vm_object(spec: VMSpec, namespace: str, kubevirt_version: str, ratio: str | None) -> Object:
    version = parse_kubevirt_version(kubevirt_version)
    vm = render_vm(spec, namespace, vm_resources(spec, version, ratio), running=True)
    vm["spec"]["template"]["spec"]["domain"]["cpu"]["model"] = "host-model"  # virt-api's default
    return vm


# The identity ---------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def tenant(
    admin: ApiClient,
    cluster: ClusterInfo,
    namespace: str,
    *,
    name: str = TENANT,
    cluster_roles: Sequence[str] = TENANT_CLUSTER_ROLES,
) -> AsyncIterator[Tenant]:
    """The service account `name` of `namespace`, bound there (RoleBindings) to each of
    `cluster_roles`; yields it as a Tenant, its client authenticated by a TokenRequest token,
    once the API server authorizes what the roles grant. The client is closed on exit; the
    account and bindings go with the namespace."""
    await _create_or_keep(admin, SERVICE_ACCOUNTS, {"metadata": {"name": name}}, namespace)
    for role in cluster_roles:
        await _bind(admin, namespace, name, "ClusterRole", role)
    token = await token_for(admin, namespace, name)
    client = ApiClient(
        client_config_from_files(cluster.server, ca_file=cluster.ca_file, token=token)
    )
    try:
        found = Tenant(client, namespace, name)
        await wait_allowed(found, [ROLE_PROBES[r] for r in cluster_roles if r in ROLE_PROBES])
        yield found
    finally:
        await client.close()


async def grant(admin: ApiClient, tenant_: Tenant, role_name: str, rules: Iterable[Object]) -> None:
    """A Role `role_name` of the tenant's namespace with `rules`, bound to the tenant; returns
    once the first verb of every rule is authorized."""
    rules = list(rules)
    role = {"metadata": {"name": role_name}, "rules": rules}
    await _create_or_keep(admin, ROLES, role, tenant_.namespace)
    await _bind(admin, tenant_.namespace, tenant_.name, "Role", role_name)
    await wait_allowed(tenant_, [_first_access(rule) for rule in rules])


async def token_for(admin: ApiClient, namespace: str, service_account: str) -> str:
    """A TokenRequest token for a service account of `namespace`."""
    return await service_account_token(admin, service_account, namespace)


async def allowed(api: ApiClient, namespace: str, access: Access) -> bool:
    """Whether `api`'s own identity may make `access` in `namespace` (SelfSubjectAccessReview,
    which every authenticated user may create)."""
    attributes: dict[str, Any] = {
        "namespace": namespace,
        "verb": access.verb,
        "group": access.group,
        "resource": access.resource,
    }
    if access.subresource:
        attributes["subresource"] = access.subresource
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    }
    answer = await api.create(SELF_SUBJECT_ACCESS_REVIEWS, review)
    return bool((answer.get("status") or {}).get("allowed"))


async def wait_allowed(tenant_: Tenant, accesses: Iterable[Access]) -> None:
    """Returns once every access is authorized (the RBAC authorizer learns of new bindings
    through its caches, a moment after they are stored)."""
    for access in accesses:
        await eventually(
            lambda access=access: tenant_.may(access), what=f"{tenant_.user} may {access}"
        )


def _first_access(rule: Object) -> Access:
    resource, _, subresource = str(rule["resources"][0]).partition("/")
    return Access(str(rule["verbs"][0]), resource, str(rule["apiGroups"][0]), subresource)


async def _bind(
    admin: ApiClient, namespace: str, service_account: str, kind: str, role: str
) -> None:
    binding = {
        "metadata": {"name": f"{service_account}-{role.replace(':', '-')}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
    }
    await _create_or_keep(admin, ROLE_BINDINGS, binding, namespace)


async def _create_or_keep(
    admin: ApiClient, resource: Resource, obj: Object, namespace: str
) -> None:
    with contextlib.suppress(errors.AlreadyExists):
        await admin.create(resource, obj, namespace)
