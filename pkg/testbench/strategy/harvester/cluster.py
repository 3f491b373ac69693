"""What Harvester's migration and ResourceQuota handlers read and write, behind one interface.

Harvester's handlers read wrangler caches (`nsCache`, `rqCache`, `vmiCache`, `vmCache`, `podCache`,
`settingCache`) and write through clients (`rqs.Update`, `vms.Update`, `pods.Delete`, a PUT of
the VMI impersonating virt-controller), and `vmimController.EnqueueAfter`. `HarvesterCluster`
names exactly those operations, so the handlers can be driven by informers on a real cluster
(`InformerCluster`, what `register.go` wires up) or by an in-memory fake in unit tests, as
Harvester's own tests drive them with `fakeclients`.

Reads come from caches and may be stale; writes are full updates carrying the cached
resourceVersion, so a stale cache ends in a Conflict and a retry, as with Harvester.
"""

from __future__ import annotations

import datetime
import logging
from collections import Counter
from typing import Final, Protocol

from ....apis.harvester import SETTINGS
from ....apis.kubevirt import (
    KUBEVIRTS,
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
    VIRTUAL_MACHINE_INSTANCES,
    VIRTUAL_MACHINES,
)
from ....config.management import Management
from ....generic import errors
from ....generic.controller import Controller
from ....generic.informer import SharedInformer
from ....generic.resource import NAMESPACES, PODS, RESOURCE_QUOTAS, Object

__all__ = [
    "HARVESTER_VENDORED_KUBEVIRT",
    "RATIO_SETTING",
    "HarvesterCluster",
    "InformerCluster",
    "keep_everything_but_managed_fields",
]

log = logging.getLogger(__name__)

RATIO_SETTING: Final = "additional-guest-memory-overhead-ratio"
HARVESTER_VENDORED_KUBEVIRT: Final = "1.8.3"
"""The KubeVirt whose GetMemoryOverhead Harvester v1.9 compiles in (go.mod kubevirt.io/kubevirt):
the formula used when neither the options nor the KubeVirt CR name the cluster's version."""


class HarvesterCluster(Protocol):
    """The caches Harvester's handlers read and the clients they write with."""

    def vmi(self, namespace: str, name: str) -> Object | None: ...

    def vm(self, namespace: str, name: str) -> Object | None: ...

    def namespace(self, name: str) -> Object | None: ...

    def resource_quotas(self, namespace: str) -> list[Object]:
        """Every ResourceQuota of the namespace, in a stable order (by name)."""
        ...

    def pods(self, namespace: str) -> list[Object]:
        """Every pod of the namespace, in a stable order (by name)."""
        ...

    def setting(self, name: str) -> Object | None: ...

    def kubevirt_version(self) -> str:
        """The KubeVirt whose overhead formula the scale-up uses."""
        ...

    def now(self) -> datetime.datetime: ...

    async def update_resource_quota(self, rq: Object) -> Object: ...

    async def update_vmi(self, vmi: Object) -> Object: ...

    async def update_vm(self, vm: Object) -> Object: ...

    async def delete_pod(self, namespace: str, name: str) -> None:
        """Deletes the pod; NotFound is the caller's to ignore."""
        ...

    def enqueue_migration_after(self, namespace: str, name: str, seconds: float) -> None: ...


def keep_everything_but_managed_fields(obj: Object) -> Object:
    """The cache transform for objects Harvester writes back whole (PUT): managedFields may go
    (an update without them keeps the server's), every annotation must stay, including kubectl's
    last-applied one that the default transform drops."""
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    return obj


def _by_name(objects: list[Object]) -> list[Object]:
    return sorted(objects, key=lambda o: str((o.get("metadata") or {}).get("name", "")))


def _key(namespace: str | None, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


class InformerCluster:
    """`HarvesterCluster` on a Management's shared informers and API client.

    `writes` counts ResourceQuota writes per namespace (both of Harvester's writers), `conflicts`
    the ResourceQuota writes refused because another write came first.
    """

    def __init__(self, management: Management) -> None:
        self.management = management
        self.client = management.client
        factory = management.informers
        # Created before any controller asks for them, so that the transform sticks: these objects
        # are written back whole.
        written_back = {
            resource: factory.informer(resource, transform=keep_everything_but_managed_fields)
            for resource in (RESOURCE_QUOTAS, VIRTUAL_MACHINE_INSTANCES, VIRTUAL_MACHINES)
        }
        self._quotas = written_back[RESOURCE_QUOTAS]
        self._vmis = written_back[VIRTUAL_MACHINE_INSTANCES]
        self._vms = written_back[VIRTUAL_MACHINES]
        self._namespaces = factory.informer(NAMESPACES)
        self._pods = factory.informer(PODS)
        self._settings = factory.informer(SETTINGS, field_selector=f"metadata.name={RATIO_SETTING}")
        self._configured_version = management.options.kubevirt_version
        self._kubevirts: SharedInformer | None = (
            None if self._configured_version else factory.informer(KUBEVIRTS)
        )
        self._migrations: Controller = management.controllers.for_resource(
            VIRTUAL_MACHINE_INSTANCE_MIGRATIONS
        )
        self.writes: Counter[str] = Counter()
        self.conflicts: Counter[str] = Counter()

    # Reads (caches) ------------------------------------------------------------------------------

    def vmi(self, namespace: str, name: str) -> Object | None:
        return self._vmis.store.get(_key(namespace, name))

    def vm(self, namespace: str, name: str) -> Object | None:
        return self._vms.store.get(_key(namespace, name))

    def namespace(self, name: str) -> Object | None:
        return self._namespaces.store.get(name)

    def resource_quotas(self, namespace: str) -> list[Object]:
        return _by_name(self._quotas.store.by_index("namespace", namespace))

    def pods(self, namespace: str) -> list[Object]:
        return _by_name(self._pods.store.by_index("namespace", namespace))

    def setting(self, name: str) -> Object | None:
        return self._settings.store.get(name)

    def kubevirt_version(self) -> str:
        if self._configured_version:
            return self._configured_version
        for kubevirt in self._kubevirts.store.objects() if self._kubevirts else []:
            observed = (kubevirt.get("status") or {}).get("observedKubeVirtVersion")
            if observed:
                return str(observed)
        return HARVESTER_VENDORED_KUBEVIRT

    def now(self) -> datetime.datetime:
        return self.management.clock.now()

    # Writes (clients) ----------------------------------------------------------------------------

    async def update_resource_quota(self, rq: Object) -> Object:
        namespace = str(rq["metadata"].get("namespace"))
        try:
            written = await self.client.update(RESOURCE_QUOTAS, rq)
        except errors.Conflict:
            self.conflicts[namespace] += 1
            raise
        self.writes[namespace] += 1
        return written

    async def update_vmi(self, vmi: Object) -> Object:
        return await self.client.update(VIRTUAL_MACHINE_INSTANCES, vmi)

    async def update_vm(self, vm: Object) -> Object:
        return await self.client.update(VIRTUAL_MACHINES, vm)

    async def delete_pod(self, namespace: str, name: str) -> None:
        await self.client.delete(PODS, name, namespace)

    def enqueue_migration_after(self, namespace: str, name: str, seconds: float) -> None:
        self._migrations.enqueue_after(namespace, name, seconds)
