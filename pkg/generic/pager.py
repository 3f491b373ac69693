"""Whole lists in pages, as client-go's tools/pager.ListPager, each page decoded as it arrives.

A list of 50k pods is fetched `page_size` items at a time, following the continue token the
server hands back; every item is decoded on its own as the page's bytes arrive (listdecode.py),
so a page never exists as one large parsed document.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from . import errors
from .listdecode import ListDecodeError, ListSplitter
from .resource import Object, Resource
from .rest import RestClient, list_params, raise_for_status

LIST_READ_SIZE = 1 << 18


@dataclass(frozen=True)
class ListResult:
    """The items of a (possibly paginated) list and the resourceVersion it is consistent with."""

    items: list[Any]  # objects, or what the caller's ``each`` made of them
    resource_version: str
    paginated: bool


class ListPager:
    """Lists over a RestClient, page by page. Holds no state between calls: concurrent lists on
    one event loop are independent."""

    def __init__(self, rest: RestClient) -> None:
        self.rest = rest

    async def list_all(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        page_size: int = 500,
        label_selector: str | None = None,
        field_selector: str | None = None,
        request_timeout: float | None = None,
        each: Callable[[Object], Any] | None = None,
    ) -> ListResult:
        """Every item, following continue tokens; an expired token restarts as one full list.

        Items come in the server's order, pages in turn. The first page is asked for at
        ``resource_version``, the following ones by their token only: the result is one
        consistent snapshot, at the resourceVersion of the last page's metadata. When that
        snapshot was compacted before the last page (410 Gone on a continued page), the list
        restarts as one unpaginated request (``paginated`` is then False); a 410 on the first
        page is raised. A repeated continue token or list metadata that is not an object raise
        DecodeError.

        Items are decoded one at a time as the response arrives; ``each`` maps every item as it
        is decoded (to the compact form a cache keeps, say) and ``items`` holds what it returns.
        """
        items: list[Any] = []
        token: str | None = None
        paginated = False
        path = resource.path(namespace)
        while True:
            params = list_params(
                resource_version if token is None else None,
                page_size,
                token,
                label_selector,
                field_selector,
            )
            try:
                list_object, page_items = await self.page(path, params, each, request_timeout)
            except errors.Gone:
                if token is None:
                    raise
                # The snapshot the pages came from was compacted: take one unpaginated list.
                return await self.list_all(
                    resource,
                    namespace,
                    resource_version=resource_version,
                    page_size=0,
                    label_selector=label_selector,
                    field_selector=field_selector,
                    request_timeout=request_timeout,
                    each=each,
                )
            items.extend(page_items)
            metadata = list_object.get("metadata") or {}
            if not isinstance(metadata, dict):
                raise errors.DecodeError(
                    f"GET {path}: list metadata is not an object: {metadata!r}"
                )
            previous, token = token, metadata.get("continue") or None
            if token is None:
                return ListResult(items, str(metadata.get("resourceVersion", "")), paginated)
            if token == previous:
                # Following it would fetch the same page forever, growing ``items`` each time.
                raise errors.DecodeError(
                    f"GET {path}: the server repeated continue token {token!r}"
                )
            paginated = True

    async def page(
        self,
        path: str,
        params: Mapping[str, str],
        each: Callable[[Object], Any] | None,
        request_timeout: float | None,
    ) -> tuple[Object, list[Any]]:
        """One page: the List object without its items, and the items (each through ``each``),
        decoded item by item as the response arrives (see listdecode for why). A page is one
        request: server-asked retries (retry.py) are not made here, the caller relists."""
        async with self.rest.exchange(
            "GET", path, params=params, request_timeout=request_timeout
        ) as response:
            await raise_for_status(response)
            splitter = ListSplitter(each)
            try:
                async for chunk in response.content.iter_chunked(LIST_READ_SIZE):
                    splitter.feed(chunk)
                return splitter.finish(), splitter.items
            except ListDecodeError as error:
                raise errors.DecodeError(f"GET {path}: {error}", status=response.status) from error
