"""The REST layer under ApiClient, as client-go's rest.RESTClient and its Request/Result.

`RestClient` owns the HTTP session and turns one request (method, path, query, JSON body) into a
response: the authorization header and the content type set, a total timeout for ordinary
requests and an idle-read deadline for streams (watches), transport failures raised as typed
ApiErrors, every request told to the `RequestObservers` (metrics) once. `decode_response` is
client-go's Result: a JSON object, or the typed ApiError the server's Status stands for. What is
built on it lives beside it: the verbs (client.py), the paging of lists (pager.py), the decoding
of watch streams (watchstream.py).

Everything here runs on one event loop and is not thread-safe, as the session it holds.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any, TypedDict

import aiohttp
import orjson
import yarl

from .. import __version__
from . import deepjson, errors
from .clock import REAL_CLOCK, Clock
from .config import ClientConfig
from .requestmetrics import TRANSPORT_ERROR, RequestObserver
from .resource import Object
from .retry import call_with_server_retries

DEFAULT_TIMEOUT = 30.0
CONNECT_TIMEOUT = 10.0
USER_AGENT = f"harvester-quota/{__version__} (python; aiohttp)"
FIELD_MANAGER = USER_AGENT.split("/", 1)[0]
"""The field manager the API server records for our writes ("harvester-quota"): a write that
names none gets its user agent's part before the first "/" (the API server's
prefixFromUserAgent), and ours name none."""


class RestOptions(TypedDict, total=False):
    """RestClient's keyword options, for a class that builds one from its own keywords (ApiClient):
    the defaults are RestClient's alone."""

    timeout: float
    clock: Clock
    user_agent: str


class RequestObservers:
    """Who hears of every request: observers are called in the order they were added, on the
    event loop, and must not block. Each request is told exactly once: with its HTTP status
    once the response headers are in, or with TRANSPORT_ERROR if the transport failed before
    that; a request cancelled before its answer is never told."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._observers: list[RequestObserver] = []

    def add(self, observer: RequestObserver) -> None:
        """Tells `observer` of every request from now on."""
        self._observers.append(observer)

    def remove(self, observer: RequestObserver) -> None:
        """Stops telling `observer` (no error if it was not added)."""
        with contextlib.suppress(ValueError):
            self._observers.remove(observer)

    @contextlib.contextmanager
    def observed(
        self, method: str, path: str, params: Mapping[str, str] | None
    ) -> Iterator[Callable[[int], None]]:
        """Around one request: yields `answered(status)`, to call when the response headers are
        in; a transport failure before that is observed with code TRANSPORT_ERROR. The seconds
        told run from entering this context to the answer (or the failure)."""
        started = self._clock.monotonic()
        answered = False

        def tell(code: str) -> None:
            seconds = self._clock.monotonic() - started
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


class RestClient:
    """HTTP to one API server over one lazily created session. Create it inside the event loop;
    close it when done (a later request opens a new session)."""

    def __init__(
        self,
        config: ClientConfig,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        clock: Clock = REAL_CLOCK,
        user_agent: str = USER_AGENT,
    ) -> None:
        self.config = config
        self.user_agent = user_agent
        """Sent with every request; the API server names writes' field manager by its first part."""
        self.timeout = timeout
        """The total timeout of a request that names none (streams have none in total)."""
        self.clock = clock
        """Paces retries the server asks for (tests pass a FakeClock)."""
        self.observers = RequestObservers(clock)
        self._session: aiohttp.ClientSession | None = None
        self._proxy, self._proxy_headers = proxy_and_headers(config.proxy)

    @property
    def session(self) -> aiohttp.ClientSession:
        """The HTTP session, created on first use inside the running event loop."""
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=self.config.ssl_context, limit=100)
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers={"User-Agent": self.user_agent, "Accept": "application/json"},
                json_serialize=lambda obj: orjson.dumps(obj).decode(),
            )
        return self._session

    async def close(self) -> None:
        """Closes the session; a later request opens a new one."""
        if self._session is not None and not self._session.closed:
            await self._session.close()

    @contextlib.asynccontextmanager
    async def exchange(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        data: bytes | None = None,
        content_type: str = "application/json",
        request_timeout: float | None = None,
        stream: bool = False,
        read_timeout: float | None = None,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """One request whose response the caller reads; transport failures, while the request
        is sent and while the caller reads, become ApiErrors. Observers hear of it once the
        response headers are in.

        A request has a total timeout (`request_timeout`, else the client's); a `stream` (a
        watch, which lasts minutes by design) has none in total, but fails when no data came
        for `read_timeout` seconds (None: never).
        """
        if stream:
            timeout = aiohttp.ClientTimeout(
                total=None, sock_connect=CONNECT_TIMEOUT, sock_read=read_timeout
            )
            failing = _transport_errors(f"WATCH {path}", timed_out=f"no data for {read_timeout}s")
        else:
            timeout = aiohttp.ClientTimeout(
                total=request_timeout or self.timeout, sock_connect=CONNECT_TIMEOUT
            )
            failing = _transport_errors(f"{method} {path}")
        with failing, self.observers.observed(method, path, params) as answered:
            async with self.session.request(
                method,
                self.config.host + path,
                params=params,
                data=data,
                headers=self._headers(content_type if data is not None else None),
                timeout=timeout,
                server_hostname=self.config.tls_server_name,
                proxy=self._proxy,
                proxy_headers=self._proxy_headers,
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
        failure is raised at once. Each attempt is a request of its own to the observers.
        """
        data = orjson.dumps(body) if body is not None else None

        async def once() -> Object:
            async with self.exchange(
                method,
                path,
                params=params,
                data=data,
                content_type=content_type,
                request_timeout=request_timeout,
            ) as response:
                return decode_response(response, await response.read(), method, path)

        return await call_with_server_retries(once, clock=self.clock)

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {}
        authorization = self.config.authorization()
        if authorization:
            headers["Authorization"] = authorization
        if content_type:
            headers["Content-Type"] = content_type
        return headers


def proxy_and_headers(proxy: str | None) -> tuple[str | None, dict[str, str] | None]:
    """The proxy URL without its user info, and the Proxy-Authorization header that user info
    stands for (None without one): a kubeconfig's ``proxy-url: http://user:pass@host:3128``
    authenticates to the proxy as kubectl's does, and the password is in no URL aiohttp logs."""
    if not proxy:
        return None, None
    url = yarl.URL(proxy)
    if url.user is None:
        return proxy, None
    pair = f"{url.user}:{url.password or ''}".encode()
    credentials = base64.b64encode(pair).decode("ascii")
    return str(url.with_user(None)), {"Proxy-Authorization": f"Basic {credentials}"}


def decode_response(response: aiohttp.ClientResponse, raw: bytes, method: str, path: str) -> Object:
    """The JSON object a response's body `raw` holds (an empty body is ``{}``); for a status of
    400 or more the typed ApiError it stands for; DecodeError for a success that is not a JSON
    object."""
    decoded = _loads(raw)
    if response.status >= 400:
        raise _status_error(response, raw, decoded)
    if not isinstance(decoded, dict):
        raise errors.DecodeError(
            f"{method} {path}: expected a JSON object, got {raw[:200]!r}",
            status=response.status,
        )
    return decoded


async def raise_for_status(response: aiohttp.ClientResponse) -> None:
    """Raises the typed ApiError of a response whose status is 400 or more (its body read
    whole); a response the caller streams (a list page, a watch) is checked so first."""
    if response.status >= 400:
        raw = await response.read()
        raise _status_error(response, raw, _loads(raw))


def list_params(
    resource_version: str | None,
    limit: int | None,
    continue_token: str | None,
    label_selector: str | None,
    field_selector: str | None,
) -> dict[str, str]:
    """The query of one list request (ListOptions); empty options are left out."""
    params: dict[str, str] = {}
    if resource_version is not None:
        params["resourceVersion"] = resource_version
    if limit:
        params["limit"] = str(limit)
    if continue_token:
        params["continue"] = continue_token
    add_selectors(params, label_selector, field_selector)
    return params


def add_selectors(
    params: dict[str, str], label_selector: str | None, field_selector: str | None
) -> None:
    """Lists and watches of one informer must select the same objects: one place sets both."""
    if label_selector:
        params["labelSelector"] = label_selector
    if field_selector:
        params["fieldSelector"] = field_selector


def _loads(raw: bytes) -> Any:
    """The JSON value of a body; ``{}`` for an empty one, None for one that is not JSON; nested
    deeper than orjson decodes, what lies beyond deepjson.MAX_DEPTH is cut (a tenant's VMI)."""
    try:
        return deepjson.loads(raw)[0] if raw else {}
    except orjson.JSONDecodeError:
        return None


def _status_error(response: aiohttp.ClientResponse, raw: bytes, decoded: Any) -> errors.ApiError:
    """The typed error of a failed response: its Status, or the start of whatever it sent."""
    body = (
        decoded if isinstance(decoded, dict) else {"message": raw[:500].decode("utf-8", "replace")}
    )
    return errors.from_status(response.status, body, _retry_after(response.headers))


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
