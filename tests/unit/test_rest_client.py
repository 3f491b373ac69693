"""The API client's layers against a scripted HTTP server on localhost: requests and decoding
(rest.py), request observers, list paging (pager.py) and watch streams (watchstream.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import orjson
import pytest
from aiohttp import web
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.config import ClientConfig
from harvester_quota.generic.requestmetrics import TRANSPORT_ERROR
from harvester_quota.generic.resource import PODS
from harvester_quota.generic.rest import RequestObservers
from harvester_quota.testbench.clock import FakeClock

from tests.unit.fakes import RequestRecorder, pod

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
POD_PATH = "/api/v1/namespaces/ns/pods/p"
PODS_PATH = "/api/v1/namespaces/ns/pods"


class Server:
    """Answers each request with the next handler scripted for its path; records requests."""

    def __init__(self) -> None:
        self.scripts: dict[str, list[Handler]] = {}
        self.requests: list[web.Request] = []
        self.port = 0

    def script(self, path: str, *handlers: Handler) -> None:
        self.scripts.setdefault(path, []).extend(handlers)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(request)
        return await self.scripts[request.path].pop(0)(request)


def answer(body: object, status: int = 200, **headers: str) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        raw = body if isinstance(body, bytes) else orjson.dumps(body)
        return web.Response(body=raw, status=status, headers=headers)

    return handler


def status(code: int, reason: str, **headers: str) -> Handler:
    return answer(
        {"kind": "Status", "code": code, "reason": reason, "message": reason}, code, **headers
    )


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    scripted = Server()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", scripted.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    scripted.port = runner.addresses[0][1]
    yield scripted
    await runner.cleanup()


@pytest.fixture
async def client(server: Server) -> AsyncIterator[ApiClient]:
    config = ClientConfig(
        f"http://127.0.0.1:{server.port}", False, authorization=lambda: "Bearer t0ken"
    )
    async with ApiClient(config, clock=FakeClock()) as api:
        yield api


async def test_a_write_carries_auth_and_content_type_and_is_observed(
    server: Server, client: ApiClient
) -> None:
    server.script(POD_PATH, answer(pod("p", "2")))
    recorder = RequestRecorder()
    client.add_request_observer(recorder)

    patched = await client.patch(PODS, "p", {"metadata": {"labels": {"a": "b"}}}, "ns")

    assert patched == pod("p", "2")
    sent = server.requests[0]
    assert sent.headers["Authorization"] == "Bearer t0ken"
    assert sent.headers["Content-Type"] == "application/merge-patch+json"
    assert sent.headers["User-Agent"].startswith("harvester-quota/")
    assert recorder.seen == [("PATCH", POD_PATH, "200")]


@pytest.mark.parametrize(
    ("handler", "error", "message"),
    [
        (status(409, "Conflict"), errors.Conflict, "Conflict"),
        (answer(b"upstream broke", 502), errors.ServerError, "upstream broke"),
        (answer([1, 2]), errors.DecodeError, "expected a JSON object"),
    ],
    ids=["status", "not-json-error", "not-an-object"],
)
async def test_failures_become_typed_errors_with_the_servers_message(
    server: Server, client: ApiClient, handler: Handler, error: type[Exception], message: str
) -> None:
    server.script(POD_PATH, handler)
    with pytest.raises(error, match=message):
        await client.get(PODS, "p", "ns")


async def test_an_empty_success_is_an_empty_object(server: Server, client: ApiClient) -> None:
    server.script(POD_PATH, answer(b""))
    assert await client.get(PODS, "p", "ns") == {}


async def test_a_429_with_retry_after_is_sent_again_and_each_attempt_observed(
    server: Server, client: ApiClient
) -> None:
    server.script(
        POD_PATH, status(429, "TooManyRequests", **{"Retry-After": "3"}), answer(pod("p", "1"))
    )
    recorder = RequestRecorder()
    client.add_request_observer(recorder)
    clock = client.rest.clock
    assert isinstance(clock, FakeClock)

    task = asyncio.ensure_future(client.get(PODS, "p", "ns"))
    for _ in range(500):  # the 429 comes over a real socket: wait for the retry's sleep
        if clock.sleepers:
            break
        await asyncio.sleep(0.01)
    await clock.advance(10)

    assert await task == pod("p", "1")
    assert recorder.seen == [("GET", POD_PATH, "429"), ("GET", POD_PATH, "200")]


async def test_list_all_pages_with_continue_and_maps_each_item(
    server: Server, client: ApiClient
) -> None:
    server.script(
        PODS_PATH,
        answer({"metadata": {"continue": "t1"}, "items": [pod("a", "1")]}),
        answer({"metadata": {"resourceVersion": "9"}, "items": [pod("b", "2")]}),
    )

    result = await client.list_all(
        PODS, "ns", resource_version="0", page_size=1, each=lambda o: o["metadata"]["name"]
    )

    assert (result.items, result.resource_version, result.paginated) == (["a", "b"], "9", True)
    assert [dict(r.query) for r in server.requests] == [
        {"resourceVersion": "0", "limit": "1"},
        {"limit": "1", "continue": "t1"},
    ]


async def test_an_expired_continue_token_restarts_as_one_unpaginated_list(
    server: Server, client: ApiClient
) -> None:
    server.script(
        PODS_PATH,
        answer({"metadata": {"continue": "t1"}, "items": [pod("a", "1")]}),
        status(410, "Expired"),
        answer({"metadata": {"resourceVersion": "9"}, "items": [pod("a", "1"), pod("b", "2")]}),
    )

    result = await client.list_all(PODS, "ns", resource_version="0", page_size=1)

    assert [o["metadata"]["name"] for o in result.items] == ["a", "b"]
    assert (result.resource_version, result.paginated) == ("9", False)
    assert dict(server.requests[-1].query) == {"resourceVersion": "0"}


async def test_an_expired_first_page_is_raised(server: Server, client: ApiClient) -> None:
    server.script(PODS_PATH, status(410, "Expired"))
    with pytest.raises(errors.Gone):
        await client.list_all(PODS, "ns", resource_version="5")
    assert len(server.requests) == 1


async def test_a_truncated_list_page_is_a_decode_error(server: Server, client: ApiClient) -> None:
    server.script(PODS_PATH, answer(b'{"metadata":{},"items":[{"metadata":{"name":"a"'))
    with pytest.raises(errors.DecodeError, match=f"GET {PODS_PATH}"):
        await client.list_all(PODS, "ns")


def stream(*chunks: bytes, then_wait: float = 0.0) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for chunk in chunks:
            await response.write(chunk)
        # The server's silence is the subject (a read timeout): it lasts a fixed time.
        await asyncio.sleep(then_wait)
        return response

    return handler


async def test_a_watch_yields_the_servers_events_in_order(
    server: Server, client: ApiClient
) -> None:
    added = orjson.dumps({"type": "ADDED", "object": pod("a", "1")})
    deleted = orjson.dumps({"type": "DELETED", "object": pod("a", "2")})
    server.script(PODS_PATH, stream(added + b"\n" + deleted[:10], deleted[10:] + b"\n"))
    recorder = RequestRecorder()
    client.add_request_observer(recorder)

    events = [
        e async for e in client.watch(PODS, "ns", resource_version="1", label_selector="app=x")
    ]

    assert [(e.type, e.object["metadata"]["resourceVersion"]) for e in events] == [
        ("ADDED", "1"),
        ("DELETED", "2"),
    ]
    assert dict(server.requests[0].query) == {
        "watch": "1",
        "allowWatchBookmarks": "true",
        "resourceVersion": "1",
        "labelSelector": "app=x",
    }
    assert recorder.seen == [("GET", PODS_PATH, "200")]


async def test_a_refused_watch_raises_the_typed_error(server: Server, client: ApiClient) -> None:
    server.script(PODS_PATH, status(410, "Expired"))
    with pytest.raises(errors.Gone):
        async for _ in client.watch(PODS, "ns", resource_version="1"):
            pass


async def test_a_silent_watch_fails_after_its_read_timeout(
    server: Server, client: ApiClient
) -> None:
    server.script(PODS_PATH, stream(then_wait=5.0))
    # aiohttp's read timeout is a ClientError too, so its own words name it.
    with pytest.raises(errors.ConnectionFailed, match=f"WATCH {PODS_PATH}: Timeout on reading"):
        async for _ in client.watch(PODS, "ns", read_timeout=0.2):
            pass


async def test_a_closed_client_opens_a_new_session_on_the_next_request(
    server: Server, client: ApiClient
) -> None:
    server.script(POD_PATH, answer(pod("p", "1")), answer(pod("p", "1")))
    await client.get(PODS, "p", "ns")
    first = client.session
    await client.close()
    assert first.closed
    await client.get(PODS, "p", "ns")
    assert client.session is not first and not client.session.closed


def test_observers_hear_each_request_once_in_the_order_they_were_added() -> None:
    clock = FakeClock()
    observers = RequestObservers(clock)
    first, second, removed = RequestRecorder(), RequestRecorder(), RequestRecorder()
    for recorder in (first, removed, second):
        observers.add(recorder)
    observers.remove(removed)
    observers.remove(removed)  # no error when it is not there
    order: list[str] = []
    first.observe = lambda *a: order.append("first")  # type: ignore[method-assign]
    second.observe = lambda *a: order.append("second")  # type: ignore[method-assign]

    with observers.observed("GET", POD_PATH, None) as answered:
        answered(200)

    assert order == ["first", "second"] and removed.seen == []


@pytest.mark.parametrize(
    ("answered_first", "failure", "expected"),
    [
        (False, aiohttp.ClientPayloadError("cut"), [TRANSPORT_ERROR]),
        (False, TimeoutError(), [TRANSPORT_ERROR]),
        (True, aiohttp.ClientPayloadError("cut"), ["200"]),  # told already, not again
        (False, asyncio.CancelledError(), []),  # cancelled before its answer: never told
    ],
    ids=["transport-error", "timeout", "after-the-answer", "cancelled"],
)
def test_a_failure_is_observed_only_when_the_request_had_no_answer(
    answered_first: bool, failure: BaseException, expected: list[str]
) -> None:
    observers = RequestObservers(FakeClock())
    recorder = RequestRecorder()
    observers.add(recorder)

    with pytest.raises(type(failure)), observers.observed("GET", POD_PATH, None) as answered:
        if answered_first:
            answered(200)
        raise failure

    assert [code for _, _, code in recorder.seen] == expected
