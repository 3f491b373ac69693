"""Rancher's Project objects on the local cluster, for the simulated agent's projects.

Rancher keeps a project as a management.cattle.io/v3 Project in the namespace named after its
cluster (``local`` for Harvester's embedded Rancher), which is where Harvester's own cluster has
them. The simulator publishes each of its projects there (`ProjectObjects.publish`): its quota
and namespace default as Rancher's JSON fields, and the ``usedLimit`` its agent computes
(`write_used_limit`), so that the product, `explain` and tests read a project as on a real
cluster. The CustomResourceDefinition is a minimal one (Rancher's schema is not needed: the
fields are stored as sent).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Final

from ....generic import errors
from ....generic.client import ApiClient
from ....generic.resource import CRDS, NAMESPACES, Object
from ....util.rancher.annotation import RancherLimit
from ....util.rancher.project import PROJECTS
from .derive import Project, as_fields

CRD_NAME: Final = f"{PROJECTS.plural}.{PROJECTS.group}"
ESTABLISH_TIMEOUT: Final = 30.0
ESTABLISH_POLL: Final = 0.1


def project_crd() -> Object:
    """management.cattle.io/v3 Project, namespaced, fields kept as written."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": PROJECTS.group,
            "names": {"kind": PROJECTS.kind, "plural": PROJECTS.plural, "singular": "project"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": PROJECTS.version,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def project_object(project: Project, used: RancherLimit | None = None) -> Object:
    """The Project object of `project`, with `used` as its usedLimit."""
    spec: dict[str, Any] = {"clusterName": project.cluster_id, "displayName": project.id}
    quota, default = project.quota_limit, project.default_limit
    if quota is not None:
        spec["resourceQuota"] = {
            "limit": as_fields(quota),
            "usedLimit": as_fields(used or RancherLimit()),
        }
    if default is not None:
        spec["namespaceDefaultResourceQuota"] = {"limit": as_fields(default)}
    return {
        "apiVersion": f"{PROJECTS.group}/{PROJECTS.version}",
        "kind": PROJECTS.kind,
        "metadata": {"name": project.id, "namespace": project.cluster_id},
        "spec": spec,
    }


PUBLISH_TRIES: Final = 5
"""Reads and writes of a project object before a Conflict is the caller's."""


class ProjectObjects:
    """The simulator's projects as Project objects (the CRD installed on first use)."""

    def __init__(self, client: ApiClient) -> None:
        self.client = client
        self._ready = False

    async def ensure_crd(self) -> None:
        if self._ready:
            return
        with contextlib.suppress(errors.AlreadyExists):
            await self.client.create(CRDS, project_crd())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ESTABLISH_TIMEOUT
        while not await self._established():
            if loop.time() > deadline:
                raise TimeoutError(f"CRD {CRD_NAME} not established after {ESTABLISH_TIMEOUT}s")
            await asyncio.sleep(ESTABLISH_POLL)
        self._ready = True

    async def _established(self) -> bool:
        crd = await self.client.get(CRDS, CRD_NAME)
        conditions = (crd.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

    async def publish(self, project: Project) -> None:
        """Creates or replaces the project's object (its usedLimit kept). A Conflict with the
        sync's own usedLimit write (write_used_limit) is read again and retried, as Rancher's
        clients retry, PUBLISH_TRIES times at most."""
        await self.ensure_crd()
        with contextlib.suppress(errors.AlreadyExists):
            await self.client.create(NAMESPACES, {"metadata": {"name": project.cluster_id}})
        for attempt in range(PUBLISH_TRIES):
            try:
                await self._publish_once(project)
                return
            except errors.Conflict:
                if attempt == PUBLISH_TRIES - 1:
                    raise

    async def _publish_once(self, project: Project) -> None:
        wanted = project_object(project)
        try:
            current = await self.client.get(PROJECTS, project.id, project.cluster_id)
        except errors.NotFound:
            await self.client.create(PROJECTS, wanted, project.cluster_id)
            return
        used = ((current.get("spec") or {}).get("resourceQuota") or {}).get("usedLimit")
        if used is not None and "resourceQuota" in wanted["spec"]:
            wanted["spec"]["resourceQuota"]["usedLimit"] = used
        current["spec"] = wanted["spec"]
        await self.client.update(PROJECTS, current)

    async def write_used_limit(self, project: Project, used: RancherLimit) -> bool:
        """Sets the project's usedLimit if it differs (Rancher's calculateProjectResourceQuota);
        True if it was written. A project without quota, or whose object is gone, is left."""
        try:
            current = await self.client.get(PROJECTS, project.id, project.cluster_id)
        except errors.NotFound:
            return False
        quota = (current.get("spec") or {}).get("resourceQuota")
        if quota is None or quota.get("usedLimit") == as_fields(used):
            return False
        quota["usedLimit"] = as_fields(used)
        await self.client.update(PROJECTS, current)
        return True
