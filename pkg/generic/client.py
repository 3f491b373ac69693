"""An asyncio client for any group/version/resource, speaking JSON parsed with orjson.

Objects are plain dicts. Every failure becomes a typed ``ApiError`` carrying the server's message.
Requests have a total timeout; watches have none in total (they last minutes by design) but the
reflector gives them an inactivity deadline, so a half-open connection never hangs an informer.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
import orjson

from .. import __version__
from . import errors
from .clock import REAL_CLOCK, Clock
from .config import ClientConfig
from .listdecode import ListDecodeError, ListSplitter
from .requestmetrics import TRANSPORT_ERROR, RequestObserver
from .resource import Object, Resource
from .retry import call_with_server_retries

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 30.0
LIST_READ_SIZE = 1 << 18
CONNECT_TIMEOUT = 10.0
USER_AGENT = f"harvester-quota/{__version__} (python; aiohttp)"
PATCH_CONTENT_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}
PatchType = Literal["merge", "json", "strategic", "apply"]
WATCH_EVENT_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"})


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One line of a watch stream: ADDED, MODIFIED, DELETED, BOOKMARK or ERROR (a Status)."""

    type: str
    object: Object


@dataclass(frozen=True)
class ListResult:
    """The items of a (possibly paginated) list and the resourceVersion it is consistent with."""

    items: list[Any]  # objects, or what the caller's ``each`` made of them
    resource_version: str
    paginated: bool


def decode_watch_line(line: bytes) -> WatchEvent:
    """Parses one watch event, refusing anything that is not a well-formed event.

    A truncated line, an unknown event type, or a Status where an object was expected raise
    DecodeError: the caller cannot trust the stream any more and must relist.
    """
    try:
        raw = orjson.loads(line)
    except orjson.JSONDecodeError as error:
        raise errors.DecodeError(
            f"watch event is not valid JSON ({error}): {line[:200]!r}"
        ) from error
    if not isinstance(raw, dict) or not isinstance(raw.get("object"), dict):
        raise errors.DecodeError(f"watch event has no object: {line[:200]!r}")
    event_type = raw.get("type")
    if event_type not in WATCH_EVENT_TYPES:
        raise errors.DecodeError(f"unknown watch event type {event_type!r}")
    obj: Object = raw["object"]
    if event_type != "ERROR" and (obj.get("kind") == "Status" or "metadata" not in obj):
        raise errors.DecodeError(f"{event_type} event carries a Status, not an object: {obj}")
    return WatchEvent(event_type, obj)


def status_error(status: Object) -> errors.ApiError:
    """The typed error an ERROR watch event stands for."""
    return errors.from_status(int(status.get("code") or 500), status)


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


@contextlib.contextmanager
def _transport_errors(what: str, *, timed_out: str = "timed out") -> Iterator[None]:
    """Turns aiohttp's transport failures into ApiErrors naming ``what`` ("GET /api/v1/pods"): a
    refused connection into ConnectionRefused, any other failure or a timeout (said as
    ``timed_out``) into ConnectionFailed."""
    try:
        yield
    except aiohttp.ClientConnectorError as error:
        raise errors.ConnectionRefused(f"{what}: {error}") from error
    except aiohttp.ClientError as error:
        raise errors.ConnectionFailed(f"{what}: {error}") from error
    except TimeoutError as error:
        raise errors.ConnectionFailed(f"{what}: {timed_out}") from error


class ApiClient:
    """Async HTTP to one API server. Create it inside the event loop; close it when done."""

    def __init__(
        self, config: ClientConfig, *, timeout: float = DEFAULT_TIMEOUT, clock: Clock = REAL_CLOCK
    ) -> None:
        self.config = config
        self.timeout = timeout
        self.clock = clock
        """Paces retries the server asks for (tests pass a FakeClock)."""
        self._session: aiohttp.ClientSession | None = None
        self._observers: list[RequestObserver] = []

    def add_request_observer(self, observer: RequestObserver) -> None:
        """Tells `observer` of every request from now on, once its response headers (or its
        transport failure) are in; observers are called in the order they were added, on the
        event loop, and must not block."""
        self._observers.append(observer)

    def remove_request_observer(self, observer: RequestObserver) -> None:
        """Stops telling `observer` (no error if it was not added)."""
        with contextlib.suppress(ValueError):
            self._observers.remove(observer)

    @contextlib.contextmanager
    def _observed(
        self, method: str, path: str, params: Mapping[str, str] | None
    ) -> Iterator[Callable[[int], None]]:
        """Around one request: yields `answered(status)`, to call when the response headers are
        in; a transport failure before that is observed with code TRANSPORT_ERROR. Observers
        hear of each request exactly once (never of one cancelled before its answer)."""
        started = self.clock.monotonic()
        answered = False

        def tell(code: str) -> None:
            seconds = self.clock.monotonic() - started
            for observer in self._observers:
                observer.observe(method, path, params, code, seconds)

        def answer(status: int) -> None:
            nonlocal answered
            answered = True
            tell(str(status))

        try:
            yield answer
        except (aiohttp.ClientError, TimeoutError):
            if not answered:
                tell(TRANSPORT_ERROR)
            raise

    # Lifecycle ----------------------------------------------------------------------------------

    @property
    def session(self) -> aiohttp.ClientSession:
        """The HTTP session, created on first use inside the running event loop."""
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=self.config.ssl_context, limit=100)
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
                json_serialize=lambda obj: orjson.dumps(obj).decode(),
            )
        return self._session

    async def close(self) -> None:
        """Closes the session; a later request opens a new one."""
        if self._session is not None and not self._session.closed:
            await self._session.close()

    async def __aenter__(self) -> ApiClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # Core -------------------------------------------------------------------------------------------

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {}
        authorization = self.config.authorization()
        if authorization:
            headers["Authorization"] = authorization
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    @contextlib.asynccontextmanager
    async def _exchange(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        data: bytes | None = None,
        content_type: str = "application/json",
        request_timeout: float | None = None,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """One request whose response the caller reads; transport failures become ApiErrors.
        Observers (add_request_observer) hear of it once the response headers are in."""
        with (
            _transport_errors(f"{method} {path}"),
            self._observed(method, path, params) as answered,
        ):
            async with self.session.request(
                method,
                self.config.host + path,
                params=params,
                data=data,
                headers=self._headers(content_type if data is not None else None),
                timeout=aiohttp.ClientTimeout(
                    total=request_timeout or self.timeout, sock_connect=CONNECT_TIMEOUT
                ),
            ) as response:
                answered(response.status)
                yield response

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        request_timeout: float | None = None,
    ) -> Object:
        """One request; returns the decoded JSON object or raises a typed ApiError.

        A 429 or 5xx with Retry-After is retried as client-go does (see retry.py); any other
        failure is raised at once.
        """
        data = orjson.dumps(body) if body is not None else None

        async def once() -> Object:
            async with self._exchange(
                method,
                path,
                params=params,
                data=data,
                content_type=content_type,
                request_timeout=request_timeout,
            ) as response:
                return self._decode(response, await response.read(), method, path)

        return await call_with_server_retries(once, clock=self.clock)

    async def _list_page(
        self,
        path: str,
        params: Mapping[str, str],
        each: Callable[[Object], Any] | None,
        request_timeout: float | None,
    ) -> tuple[Object, list[Any]]:
        """One page decoded item by item as it arrives (see listdecode for why)."""
        async with self._exchange(
            "GET", path, params=params, request_timeout=request_timeout
        ) as response:
            if response.status >= 400:
                self._decode(response, await response.read(), "GET", path)  # raises
            splitter = ListSplitter(each)
            try:
                async for chunk in response.content.iter_chunked(LIST_READ_SIZE):
                    splitter.feed(chunk)
                return splitter.finish(), splitter.items
            except ListDecodeError as error:
                raise errors.DecodeError(f"GET {path}: {error}", status=response.status) from error

    def _decode(
        self, response: aiohttp.ClientResponse, raw: bytes, method: str, path: str
    ) -> Object:
        try:
            decoded = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            decoded = None
        if response.status >= 400:
            body = (
                decoded
                if isinstance(decoded, dict)
                else {"message": raw[:500].decode("utf-8", "replace")}
            )
            raise errors.from_status(response.status, body, _retry_after(response.headers))
        if not isinstance(decoded, dict):
            raise errors.DecodeError(
                f"{method} {path}: expected a JSON object, got {raw[:200]!r}",
                status=response.status,
            )
        return decoded

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
        params = _list_params(
            resource_version, limit, continue_token, label_selector, field_selector
        )
        return await self.request(
            "GET", resource.path(namespace), params=params, request_timeout=request_timeout
        )

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

        Items are decoded one at a time as the response arrives; ``each`` maps every item as it
        is decoded (to the compact form a cache keeps, say) and ``items`` holds what it returns.
        """
        items: list[Any] = []
        token: str | None = None
        paginated = False
        path = resource.path(namespace)
        while True:
            params = _list_params(
                resource_version if token is None else None,
                page_size,
                token,
                label_selector,
                field_selector,
            )
            try:
                list_object, page_items = await self._list_page(path, params, each, request_timeout)
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

        Raises the typed error for a refused watch (e.g. 410 when resource_version is too old),
        DecodeError for a malformed line, ConnectionFailed when the connection breaks.
        """
        params = {"watch": "1", "allowWatchBookmarks": "true" if allow_bookmarks else "false"}
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        if timeout_seconds:
            params["timeoutSeconds"] = str(timeout_seconds)
        _add_selectors(params, label_selector, field_selector)
        path = resource.path(namespace)
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=CONNECT_TIMEOUT, sock_read=read_timeout
        )
        with (
            _transport_errors(f"WATCH {path}", timed_out=f"no data for {read_timeout}s"),
            self._observed("GET", path, params) as answered,
        ):
            async with self.session.get(
                self.config.host + path, params=params, headers=self._headers(), timeout=timeout
            ) as response:
                answered(response.status)
                if response.status >= 400:
                    self._decode(response, await response.read(), "WATCH", path)
                async for line in _lines(response.content):
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


def _list_params(
    resource_version: str | None,
    limit: int | None,
    continue_token: str | None,
    label_selector: str | None,
    field_selector: str | None,
) -> dict[str, str]:
    params: dict[str, str] = {}
    if resource_version is not None:
        params["resourceVersion"] = resource_version
    if limit:
        params["limit"] = str(limit)
    if continue_token:
        params["continue"] = continue_token
    _add_selectors(params, label_selector, field_selector)
    return params


def _add_selectors(
    params: dict[str, str], label_selector: str | None, field_selector: str | None
) -> None:
    """Lists and watches of one informer must select the same objects: one place sets both."""
    if label_selector:
        params["labelSelector"] = label_selector
    if field_selector:
        params["fieldSelector"] = field_selector


async def _lines(content: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """Splits a chunked stream into lines without a line-length limit.

    aiohttp's own readline refuses lines above its buffer limit, and one watch event (a large
    object) can exceed it; splitting chunks ourselves has no such limit and copies each byte once.
    """
    pending = bytearray()
    async for chunk in content.iter_any():
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                pending += chunk[start:]
                break
            if pending:
                pending += chunk[start:end]
                line = bytes(pending)
                pending.clear()
            else:
                line = chunk[start:end]
            start = end + 1
            if line.strip():
                yield line
    if pending.strip():
        # The stream ended in the middle of an event: hand the fragment on so that decoding
        # reports it as a truncated event instead of silently dropping it.
        yield bytes(pending)
