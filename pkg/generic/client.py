"""An asyncio client for any group/version/resource, speaking JSON parsed with orjson.

Objects are plain dicts. Every failure becomes a typed ``ApiError`` carrying the server's message.
Requests have a total timeout; watches have none in total (they last minutes by design) but the
reflector gives them an inactivity deadline, so a half-open connection never hangs an informer.

As client-go, the verbs are one layer and what they stand on another: `ApiClient` (here) is the
dynamic client, a Resource and names in, one request out; `RestClient` (rest.py) owns the session,
sends requests, decodes responses and tells observers; `ListPager` (pager.py) pages lists;
watchstream.py decodes watch streams. `WatchEvent` and `ListResult` are importable from here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal, Unpack

import aiohttp

from .config import ClientConfig
from .pager import ListPager, ListResult
from .resource import Object, Resource
from .rest import (
    RestClient,
    RestOptions,
    add_selectors,
    list_params,
    raise_for_status,
)
from .watchstream import WatchEvent, decode_watch_line, split_lines, status_error

__all__ = [
    "PATCH_CONTENT_TYPES",
    "ApiClient",
    "ListResult",
    "PatchType",
    "WatchEvent",
    "decode_watch_line",
    "status_error",
]

PATCH_CONTENT_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}
PatchType = Literal["merge", "json", "strategic", "apply"]


class ApiClient:
    """The verbs of client-go's dynamic client over one API server: get, list, list_all, watch,
    create, update, update_status, patch, delete, and `request` for any other path.

    Create it inside the event loop and close it when done (`async with` does both ends); it is
    not thread-safe, and concurrent calls on one loop are independent requests. A write is
    conditional when the object carries metadata.resourceVersion (Conflict if stale); reads
    return fresh dicts the caller owns. Every request sent, whichever verb sent it (and each
    retry the server asked for), is told once to the request observers (metrics), in the order
    they were added. The collaborators are public: `rest` (RestClient) and `pager` (ListPager).

    `request`, `list_all`, `close`, `add_request_observer` and `remove_request_observer` are the
    collaborators' own methods, bound at construction as attributes: a subclass that wants to
    change them replaces the collaborator (`rest`, `pager`), since a method of the same name
    defined on the subclass would be shadowed by the attribute.
    """

    def __init__(self, config: ClientConfig, **options: Unpack[RestOptions]) -> None:
        self.rest = RestClient(config, **options)
        """The session, request sending and decoding, made with `options` (RestClient's keywords
        and defaults): `clock` paces the retries the server asks for, `timeout` is a request's
        total timeout unless it names one; `user_agent` is sent with every request (the
        product's own unless a test bench's simulator names another)."""
        self.pager = ListPager(self.rest)
        self.config = self.rest.config
        self.request = self.rest.request
        """One request to any path (RestClient.request): the decoded JSON object, or a typed
        ApiError; a 429 or 5xx with Retry-After is retried as the server asks."""
        self.list_all = self.pager.list_all
        """Every item of a list, page by page (ListPager.list_all)."""
        self.add_request_observer = self.rest.observers.add
        """Tells an observer of every request from now on (RequestObservers.add)."""
        self.remove_request_observer = self.rest.observers.remove
        """Stops telling an observer; no error if it was not added."""
        self.close = self.rest.close
        """Closes the session; a later request opens a new one."""

    @property
    def session(self) -> aiohttp.ClientSession:
        """The HTTP session, created on first use inside the running event loop."""
        return self.rest.session

    async def __aenter__(self) -> ApiClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # Reads --------------------------------------------------------------------------------------

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Object:
        """GET one object; NotFound if it does not exist."""
        return await self.request("GET", resource.path(namespace, name))

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        request_timeout: float | None = None,
    ) -> Object:
        """One page of a list (the raw List object, with metadata.continue when there is more)."""
        params = list_params(
            resource_version, limit, continue_token, label_selector, field_selector
        )
        return await self.request(
            "GET", resource.path(namespace), params=params, request_timeout=request_timeout
        )

    async def watch(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        timeout_seconds: int | None = None,
        allow_bookmarks: bool = True,
        label_selector: str | None = None,
        field_selector: str | None = None,
        read_timeout: float | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """Streams watch events until the server ends the watch (normally after timeout_seconds).

        Events come in the server's order (watchstream.py decodes them). The request is sent
        when iteration starts and is never retried; it is one request to the observers. The
        stream has no total timeout: `read_timeout` seconds without data raise ConnectionFailed
        (None: wait for ever).

        Raises the typed error for a refused watch (e.g. 410 when resource_version is too old),
        DecodeError for a malformed line, ConnectionFailed when the connection breaks.
        """
        params = {"watch": "1", "allowWatchBookmarks": "true" if allow_bookmarks else "false"}
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        if timeout_seconds:
            params["timeoutSeconds"] = str(timeout_seconds)
        add_selectors(params, label_selector, field_selector)
        path = resource.path(namespace)
        async with self.rest.exchange(
            "GET", path, params=params, stream=True, read_timeout=read_timeout
        ) as response:
            await raise_for_status(response)
            async for line in split_lines(response.content):
                yield decode_watch_line(line)

    # Writes -------------------------------------------------------------------------------------

    async def create(
        self,
        resource: Resource,
        obj: Object,
        namespace: str | None = None,
        *,
        dry_run: bool = False,
    ) -> Object:
        """POST `obj` into `namespace` (or its own metadata.namespace); AlreadyExists if it does."""
        namespace = namespace or (obj.get("metadata") or {}).get("namespace")
        params = {"dryRun": "All"} if dry_run else None
        return await self.request("POST", resource.path(namespace), params=params, body=obj)

    async def update(self, resource: Resource, obj: Object, *, subresource: str = "") -> Object:
        """PUT the whole object; its metadata.resourceVersion makes it conditional (409 if stale)."""
        metadata = obj.get("metadata") or {}
        path = resource.path(metadata.get("namespace"), metadata["name"], subresource)
        return await self.request("PUT", path, body=obj)

    async def update_status(self, resource: Resource, obj: Object) -> Object:
        """PUT `obj` to its status subresource; Conflict if its resourceVersion is stale."""
        return await self.update(resource, obj, subresource="status")

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: PatchType = "merge",
        subresource: str = "",
        field_manager: str | None = None,
        force: bool = False,
        dry_run: bool = False,
    ) -> Object:
        """PATCH one object (merge patch by default; `apply` for server-side apply); a metadata.resourceVersion in a merge patch makes it conditional (Conflict if stale)."""
        params: dict[str, str] = {}
        if dry_run:
            params["dryRun"] = "All"
        if field_manager:
            params["fieldManager"] = field_manager
        if force:
            params["force"] = "true"
        return await self.request(
            "PATCH",
            resource.path(namespace, name, subresource),
            params=params or None,
            body=patch,
            content_type=PATCH_CONTENT_TYPES[patch_type],
        )

    async def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
        preconditions: Mapping[str, str] | None = None,
    ) -> Object:
        """DELETE one object; `options` become DeleteOptions (gracePeriodSeconds, propagationPolicy, ...)."""
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        if propagation_policy:
            body["propagationPolicy"] = propagation_policy
        if preconditions:
            body["preconditions"] = dict(preconditions)
        return await self.request("DELETE", resource.path(namespace, name), body=body)
