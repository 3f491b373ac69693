"""Playing KubeVirt's part by hand in integration tests: VMIs, launcher pods, migrations.

Every pod goes through the real API server, so quota admission accepts or refuses it for real.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from harvester_quota.apis.harvester import SETTINGS
from harvester_quota.apis.kubevirt import (
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
    VIRTUAL_MACHINE_INSTANCES,
)
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import NAMESPACES, PODS, RESOURCE_QUOTAS, Object
from harvester_quota.util.annotations import (
    CATTLE_ANNOTATION_RESOURCE_QUOTA,
    LABEL_DEFAULT_RESOURCE_QUOTA,
)

from tests import objects
from tests.helpers import eventually

T = TypeVar("T")


def launcher_name(vm_name: str, suffix: str) -> str:
    """A pod name that stays within 63 characters however long the VM name is."""
    return f"virt-launcher-{vm_name}"[:58] + f"-{suffix}"


def strip_server_fields(obj: Object) -> Object:
    """What a client sends to create: no uid, resourceVersion or status."""
    metadata = {k: v for k, v in obj["metadata"].items() if k not in ("uid", "resourceVersion")}
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": metadata}


class KubeVirtByHand:
    """The steps virt-controller would take, one call each."""

    def __init__(self, api: ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace

    async def set_rancher_base(self, limit: dict[str, str]) -> None:
        patch = {
            "metadata": {
                "annotations": {CATTLE_ANNOTATION_RESOURCE_QUOTA: json.dumps({"limit": limit})}
            }
        }
        await self.api.patch(NAMESPACES, self.namespace, patch)

    async def create_quota(self, hard: dict[str, str], name: str = "default-quota") -> Object:
        """The labelled quota Rancher would create; returns once its status is filled (admission
        refuses pods with "status unknown" until then)."""
        quota = {
            "metadata": {"name": name, "labels": {LABEL_DEFAULT_RESOURCE_QUOTA: "true"}},
            "spec": {"hard": hard},
        }
        await self.api.create(RESOURCE_QUOTAS, quota, self.namespace)
        return await eventually(
            lambda: self._quota_with_status(name), what=f"status of quota {name}"
        )

    async def _quota_with_status(self, name: str) -> Object | None:
        quota = await self.api.get(RESOURCE_QUOTAS, name, self.namespace)
        return quota if "used" in (quota.get("status") or {}) else None

    async def quota(self, name: str = "default-quota") -> Object:
        return await self.api.get(RESOURCE_QUOTAS, name, self.namespace)

    async def start_vm(
        self,
        name: str,
        *,
        cores: int = 2,
        memory: str = "4Gi",
        ratio: str | None = "1.5",
        version: str = "1.6",
        node: str = "kwok-node-0",
        **vmi_options: Any,
    ) -> tuple[Object, Object]:
        """Creates the VMI and its launcher pod (which quota admission may refuse)."""
        spec = objects.vmi(
            name, self.namespace, cores=cores, memory=memory, node=node, **vmi_options
        )
        vmi = await self.api.create(
            VIRTUAL_MACHINE_INSTANCES, strip_server_fields(spec), self.namespace
        )
        vmi = await self.api.update_status(
            VIRTUAL_MACHINE_INSTANCES, {**vmi, "status": spec["status"]}
        )
        pod = objects.launcher_pod(
            vmi, launcher_name(name, "src"), ratio=ratio, kubevirt_version=version, node=node
        )
        created = await self.api.create(PODS, strip_server_fields(pod), self.namespace)
        return vmi, created

    async def migrate(
        self, vmi: Object, name: str | None = None, *, dry_run: bool = False
    ) -> Object:
        """Creates `vmi`'s migration and sets it Pending; with `dry_run`, only asks the API
        server (every admission runs, nothing is stored) and returns its answer."""
        migration = objects.migration(name or f"{vmi['metadata']['name']}-mig"[:63], vmi)
        created = await self.api.create(
            VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
            strip_server_fields(migration),
            self.namespace,
            dry_run=dry_run,
        )
        return created if dry_run else await self.set_phase(created, "Pending")

    async def v170_migration(self) -> tuple[Object, Object, Object]:
        """The v1.7.0 seed's namespace (Rancher base 3 CPU / 5000Mi, a quota at it) with vm1
        (2 cores, 4Gi) started and migrating: returns (vmi, source pod, migration)."""
        await self.set_rancher_base({"limitsCpu": "3000m", "limitsMemory": "5000Mi"})
        await self.create_quota({"limits.cpu": "3", "limits.memory": "5000Mi"})
        vmi, source = await self.start_vm("vm1")
        return vmi, source, await self.migrate(vmi)

    async def set_phase(self, migration: Object, phase: str, **status: Any) -> Object:
        current = await self.api.get(
            VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, migration["metadata"]["name"], self.namespace
        )
        current["status"] = {**(current.get("status") or {}), "phase": phase, **status}
        return await self.api.update_status(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, current)

    async def create_target(
        self,
        vmi: Object,
        migration: Object,
        *,
        ratio: str | None = "1.5",
        version: str = "1.6",
        node: str = "kwok-node-1",
        suffix: str = "dst",
    ) -> Object:
        """The migration target pod; raises errors.Forbidden with "exceeded quota" if refused."""
        pod = objects.launcher_pod(
            vmi,
            launcher_name(vmi["metadata"]["name"], suffix),
            ratio=ratio,
            kubevirt_version=version,
            node=node,
            migration=migration,
        )
        return await self.api.create(PODS, strip_server_fields(pod), self.namespace)

    async def try_create_target(
        self, vmi: Object, migration: Object, **options: Any
    ) -> Object | None:
        try:
            return await self.create_target(vmi, migration, **options)
        except errors.Forbidden as refused:
            assert "exceeded quota" in refused.message, refused.message
            return None

    async def delete_pod(self, name: str, grace: int | None = None) -> None:
        await self.api.delete(PODS, name, self.namespace, grace_period_seconds=grace)

    async def pod_gone(self, name: str) -> bool:
        try:
            await self.api.get(PODS, name, self.namespace)
        except errors.NotFound:
            return True
        return False

    async def set_ratio(self, value: str) -> None:
        """Harvester's additional-guest-memory-overhead-ratio setting (cluster-wide)."""
        setting = {
            "apiVersion": "harvesterhci.io/v1beta1",
            "kind": "Setting",
            "metadata": {"name": "additional-guest-memory-overhead-ratio"},
            "default": "1.5",
            "value": value,
        }
        try:
            current = await self.api.get(SETTINGS, "additional-guest-memory-overhead-ratio")
        except errors.NotFound:
            await self.api.create(SETTINGS, setting)
            return
        await self.api.update(SETTINGS, {**current, "value": value})
