"""The API client bound to one resource, as wrangler's generic controllers embed it."""

from __future__ import annotations

from typing import Any

from .client import ApiClient, PatchType
from .resource import Object, Resource


class ResourceClient:
    """The client's verbs for one resource: wrangler's embedded client (Get, Create, Update,
    UpdateStatus, Patch, Delete), which its ``Controller`` exposes as its own methods.

    Every call goes to the API server (never the cache) and raises the client's typed ApiErrors;
    consistency is the server's: a write is conditional exactly when the object carries a
    metadata.resourceVersion (Conflict if stale).
    """

    def __init__(self, client: ApiClient, resource: Resource) -> None:
        self.client = client
        self.resource = resource

    async def get(self, namespace: str | None, name: str) -> Object:
        """GET from the API server (not the cache); typed ApiErrors as the client raises them."""
        return await self.client.get(self.resource, name, namespace)

    async def create(self, obj: Object) -> Object:
        """POST `obj` (its metadata.namespace decides where); returns the stored object."""
        return await self.client.create(self.resource, obj)

    async def update(self, obj: Object) -> Object:
        """PUT `obj`; its metadata.resourceVersion makes it conditional (Conflict if stale)."""
        return await self.client.update(self.resource, obj)

    async def update_status(self, obj: Object) -> Object:
        """PUT `obj` to the status subresource (conditional like `update`)."""
        return await self.client.update_status(self.resource, obj)

    async def patch(
        self, namespace: str | None, name: str, patch: Any, patch_type: PatchType = "merge"
    ) -> Object:
        """PATCH the object (merge patch by default); conditional only if `patch` carries a
        metadata.resourceVersion."""
        return await self.client.patch(self.resource, name, patch, namespace, patch_type=patch_type)

    async def delete(self, namespace: str | None, name: str, **options: Any) -> Object:
        """DELETE the object; `options` become DeleteOptions (gracePeriodSeconds, ...)."""
        return await self.client.delete(self.resource, name, namespace, **options)
