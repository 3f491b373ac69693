"""The simulator's view of the cluster: informer caches of VMIMs, VMIs, launcher pods,
ResourceQuotas and nodes, with the questions virt-controller asks of them."""

from __future__ import annotations

from collections.abc import Iterable

from ....apis.kubevirt import VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, VIRTUAL_MACHINE_INSTANCES
from ....generic.client import ApiClient
from ....generic.clock import Clock
from ....generic.informer import SharedInformer, SharedInformerFactory
from ....generic.resource import NODES, PODS, RESOURCE_QUOTAS, Object
from ....generic.store import IndexFunc
from .objects import (
    HOSTNAME_LABEL,
    LABEL_APP,
    LABEL_CREATED_BY,
    LABEL_MIGRATION_JOB_UID,
    LAUNCHER,
    meta,
    status,
)

INDEX_VMI = "vmi"
INDEX_UID = "uid"
INDEX_CREATED_BY = "created-by"
INDEX_MIGRATION = "migration"
INDEX_NAMESPACE = "namespace"
TERMINAL_POD_PHASES = frozenset({"Succeeded", "Failed"})


def _vmi_of_migration(obj: Object) -> list[str]:
    name = (obj.get("spec") or {}).get("vmiName")
    return [f"{meta(obj).get('namespace')}/{name}"] if name else []


def _uid(obj: Object) -> list[str]:
    uid = meta(obj).get("uid")
    return [str(uid)] if uid else []


def _label_index(label: str) -> IndexFunc:
    def index(obj: Object) -> list[str]:
        value = (meta(obj).get("labels") or {}).get(label)
        return [str(value)] if value else []

    return index


def pod_is_ready(pod: Object | None) -> bool:
    """Running and Ready, not being deleted."""
    if pod is None or meta(pod).get("deletionTimestamp"):
        return False
    if status(pod).get("phase") != "Running":
        return False
    conditions = status(pod).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def pod_is_down(pod: Object) -> bool:
    """Terminated or being deleted (KubeVirt's podIsDown plus a deletion in progress)."""
    return bool(meta(pod).get("deletionTimestamp")) or (
        status(pod).get("phase") in TERMINAL_POD_PHASES
    )


def node_is_ready(node: Object) -> bool:
    conditions = status(node).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


class ClusterView:
    """Shared informers for the simulator (one namespace, or all)."""

    def __init__(self, client: ApiClient, *, namespace: str | None, clock: Clock) -> None:
        self.namespace = namespace
        self.factory = SharedInformerFactory(client, clock=clock, namespace=namespace)
        self.migrations: SharedInformer = self.factory.informer(
            VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
            indexers={INDEX_VMI: _vmi_of_migration, INDEX_UID: _uid},
        )
        self.vmis: SharedInformer = self.factory.informer(VIRTUAL_MACHINE_INSTANCES)
        self.pods: SharedInformer = self.factory.informer(
            PODS,
            label_selector=f"{LABEL_APP}={LAUNCHER}",
            indexers={
                INDEX_CREATED_BY: _label_index(LABEL_CREATED_BY),
                INDEX_MIGRATION: _label_index(LABEL_MIGRATION_JOB_UID),
            },
        )
        self.quotas: SharedInformer = self.factory.informer(RESOURCE_QUOTAS)
        self.nodes: SharedInformer = self.factory.informer(NODES)

    # Lifecycle ----------------------------------------------------------------------------------

    async def start(self, timeout: float | None) -> bool:
        self.factory.start()
        return await self.factory.wait_for_cache_sync(timeout)

    async def stop(self) -> None:
        await self.factory.stop()

    # Migrations ---------------------------------------------------------------------------------

    def migration(self, key: str) -> Object | None:
        return self.migrations.store.get(key)

    def migration_by_uid(self, uid: str) -> Object | None:
        found = self.migrations.store.by_index(INDEX_UID, uid)
        return found[0] if found else None

    def migrations_of_vmi(self, namespace: str, vmi_name: str) -> list[Object]:
        return self.migrations.store.by_index(INDEX_VMI, f"{namespace}/{vmi_name}")

    def all_migrations(self) -> list[Object]:
        return self.migrations.store.objects()

    def migrations_in(self, namespace: str) -> list[Object]:
        return self.migrations.store.by_index(INDEX_NAMESPACE, namespace)

    # VMIs -----------------------------------------------------------------------------------------

    def vmi(self, namespace: str, name: str) -> Object | None:
        return self.vmis.store.get(f"{namespace}/{name}")

    # Pods -----------------------------------------------------------------------------------------

    def pod(self, namespace: str, name: str) -> Object | None:
        return self.pods.store.get(f"{namespace}/{name}")

    def pods_of_vmi(self, vmi_uid: str) -> list[Object]:
        return self.pods.store.by_index(INDEX_CREATED_BY, vmi_uid)

    def target_pods(self, migration_uid: str) -> list[Object]:
        return self.pods.store.by_index(INDEX_MIGRATION, migration_uid)

    def active_pod_count(self, vmi_uid: str) -> int:
        """KubeVirt's VMIActivePodsCount: the VMI's pods not yet terminated (terminating included)."""
        return sum(
            1
            for pod in self.pods_of_vmi(vmi_uid)
            if status(pod).get("phase") not in TERMINAL_POD_PHASES
        )

    def current_pod(self, vmi: Object) -> Object | None:
        """The VMI's launcher pod on its current node, not being deleted (the migration source)."""
        node = status(vmi).get("nodeName")
        candidates = [
            pod
            for pod in self.pods_of_vmi(str(meta(vmi).get("uid", "")))
            if not pod_is_down(pod) and (pod.get("spec") or {}).get("nodeName") == node
        ]
        candidates.sort(key=lambda pod: str(meta(pod).get("creationTimestamp", "")))
        return candidates[-1] if candidates else None

    # Quotas ----------------------------------------------------------------------------------------

    def quota_limits_keys(self, namespace: str) -> tuple[bool, bool]:
        """Whether some ResourceQuota of the namespace limits limits.cpu / limits.memory."""
        has_cpu = has_memory = False
        for quota in self.quotas.store.by_index(INDEX_NAMESPACE, namespace):
            hard = (quota.get("spec") or {}).get("hard") or {}
            has_cpu = has_cpu or "limits.cpu" in hard
            has_memory = has_memory or "limits.memory" in hard
        return has_cpu, has_memory

    # Nodes -----------------------------------------------------------------------------------------

    def launcher_count_by_node(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for pod in self.pods.store.objects():
            if pod_is_down(pod):
                continue
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                counts[node] = counts.get(node, 0) + 1
        return counts

    def schedulable_nodes(self, allowed: Iterable[str] | None = None) -> list[str]:
        """Ready, schedulable nodes (optionally only `allowed` ones), least loaded first."""
        allowed_set = None if allowed is None else set(allowed)
        counts = self.launcher_count_by_node()
        names = []
        for node in self.nodes.store.objects():
            name = str(meta(node).get("name", ""))
            if allowed_set is not None and name not in allowed_set:
                continue
            if (node.get("spec") or {}).get("unschedulable") or not node_is_ready(node):
                continue
            names.append(name)
        return sorted(names, key=lambda name: (counts.get(name, 0), name))

    def node_by_hostname(self, hostname: str) -> str | None:
        for node in self.nodes.store.objects():
            labels = meta(node).get("labels") or {}
            if labels.get(HOSTNAME_LABEL) == hostname or meta(node).get("name") == hostname:
                return str(meta(node).get("name"))
        return None
