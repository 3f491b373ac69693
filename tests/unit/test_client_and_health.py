"""Watch-stream decoding and splitting, typed errors, the health server, and informer resync."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

import aiohttp
import pytest
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient, decode_watch_line
from harvester_quota.generic.config import ClientConfig
from harvester_quota.generic.health import HealthServer
from harvester_quota.generic.informer import ResourceEventHandler, SharedInformer
from harvester_quota.generic.resource import PODS, Object
from harvester_quota.generic.watchstream import split_lines
from harvester_quota.testbench.clock import FakeClock, settle
from prometheus_client import CollectorRegistry, Counter

from tests.unit.fakes import HANG, ScriptedListerWatcher, pod


class FakeContent:
    """Stands in for aiohttp's StreamReader: hands out scripted chunks."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def iter_any(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


async def lines(chunks: list[bytes]) -> list[bytes]:
    return [line async for line in split_lines(FakeContent(chunks))]  # type: ignore[arg-type]


async def test_lines_are_split_across_chunks_without_a_length_limit() -> None:
    big = b'{"type":"ADDED","object":{"metadata":{"name":"' + b"x" * 300_000 + b'"}}}'
    chunks = [b'{"a":1}\n{"b"', b":2}\n" + big[:1000], big[1000:] + b"\n", b"\n\n"]
    assert await lines(chunks) == [b'{"a":1}', b'{"b":2}', big]


async def test_a_stream_cut_mid_event_hands_the_fragment_on() -> None:
    fragment = b'{"type":"ADDED","obj'
    assert await lines([b'{"a":1}\n', fragment]) == [b'{"a":1}', fragment]
    with pytest.raises(errors.DecodeError, match="not valid JSON"):
        decode_watch_line(fragment)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b'{"type":"EXPLODED","object":{"metadata":{}}}', "unknown watch event type"),
        (b'{"type":"ADDED","object":{"kind":"Status","code":500}}', "carries a Status"),
        (b'{"type":"ADDED"}', "has no object"),
        (b"[1,2,3]", "has no object"),
    ],
    ids=["unknown-type", "status-as-object", "no-object", "not-an-object"],
)
def test_garbage_watch_events_are_refused(line: bytes, reason: str) -> None:
    with pytest.raises(errors.DecodeError, match=reason):
        decode_watch_line(line)


def test_error_events_and_statuses_become_typed_errors() -> None:
    event = decode_watch_line(
        b'{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old"}}'
    )
    assert event.type == "ERROR"
    assert isinstance(errors.from_status(410, event.object), errors.Gone)
    assert isinstance(errors.from_status(409, {"reason": "AlreadyExists"}), errors.AlreadyExists)
    assert isinstance(errors.from_status(409, {"reason": "Conflict"}), errors.Conflict)
    limited = errors.from_status(429, {"message": "slow down"}, retry_after=7.0)
    assert isinstance(limited, errors.TooManyRequests) and limited.retry_after == 7.0
    forbidden = errors.from_status(403, {"message": "exceeded quota: q, requested: limits.cpu=3"})
    assert isinstance(forbidden, errors.Forbidden) and forbidden.message.startswith(
        "exceeded quota"
    )
    assert isinstance(errors.from_status(503, None), errors.ServerError)


def _paging_client(pages: list[Object]) -> tuple[ApiClient, list[dict[str, str]]]:
    """A client whose list pages are ``pages`` in turn (the last one repeated); records params."""
    client = ApiClient(ClientConfig(host="https://127.0.0.1:1", ssl_context=False))
    requests: list[dict[str, str]] = []

    async def list_page(
        path: str, params: dict[str, str], each: object, request_timeout: object
    ) -> tuple[Object, list[object]]:
        await asyncio.sleep(0)  # a real page is read from the network
        requests.append(dict(params))
        page = pages[min(len(requests), len(pages)) - 1]
        return {"metadata": page["metadata"]}, list(page["items"])

    client.pager.page = list_page  # type: ignore[method-assign,assignment]
    return client, requests


async def test_list_all_follows_continue_tokens() -> None:
    client, requests = _paging_client(
        [
            {"metadata": {"continue": "t1"}, "items": [1]},
            {"metadata": {"continue": "t2"}, "items": [2]},
            {"metadata": {"resourceVersion": "7"}, "items": [3]},
        ]
    )

    result = await client.list_all(PODS, resource_version="0")

    assert (result.items, result.resource_version, result.paginated) == ([1, 2, 3], "7", True)
    assert [request.get("continue") for request in requests] == [None, "t1", "t2"]


async def test_a_repeated_continue_token_is_an_error_not_an_endless_list() -> None:
    client, requests = _paging_client(
        [
            {"metadata": {"continue": "t1"}, "items": [1]},
            {"metadata": {"continue": "t1"}, "items": [1]},
        ]
    )

    with pytest.raises(errors.DecodeError, match="continue token"):
        await asyncio.wait_for(client.list_all(PODS), 5)

    assert len(requests) == 2


async def test_list_metadata_that_is_not_an_object_is_a_decode_error() -> None:
    client, _ = _paging_client([{"metadata": "odd", "items": []}])

    with pytest.raises(errors.DecodeError, match="metadata"):
        await client.list_all(PODS)


async def test_health_endpoints() -> None:
    registry = CollectorRegistry()
    Counter("harvester_quota_test_total", "a test counter", registry=registry).inc()
    ready = {"caches": False}
    server = HealthServer(host="127.0.0.1", port=0, registry=registry)
    server.add_readiness_check("caches", lambda: ready["caches"])
    port = await server.start()
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                assert response.status == 200
            async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                assert response.status == 503 and "caches" in await response.text()
            ready["caches"] = True
            async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                assert response.status == 200
            async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                assert "harvester_quota_test_total 1.0" in await response.text()
    finally:
        await server.stop()


async def test_resync_replays_the_cache_to_handlers_that_asked_for_it() -> None:
    clock = FakeClock()
    lw = ScriptedListerWatcher()
    lw.add_list(pod("a", "1"), pod("b", "2"), rv="2")
    lw.add_watch(HANG)
    informer = SharedInformer(lw, name="pods", clock=clock, resync_period=30, rng=random.Random(1))
    replayed: list[str] = []
    quiet: list[str] = []

    def on_update(old: Object, new: Object) -> None:
        replayed.append(new["metadata"]["name"])

    informer.add_event_handler(ResourceEventHandler(on_update=on_update), resync=True)
    informer.add_event_handler(ResourceEventHandler(on_update=lambda o, n: quiet.append("x")))
    informer.start()
    await settle(100)
    await clock.advance(29)
    assert replayed == []
    await clock.advance(2)
    await settle(100)
    assert sorted(replayed) == ["a", "b"]
    assert quiet == [], "only handlers that asked for resync get it"
    await informer.stop()
    await asyncio.sleep(0)
