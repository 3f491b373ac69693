"""The webhook's HTTP server against hostile clients: slow headers, slow bodies, too many
connections, huge bodies, disconnects, and malformed AdmissionReviews (hypothesis).

The server runs for real on 127.0.0.1 (plain HTTP: the guard sits below TLS, the same either
way); the timeouts are shortened so that the tests wait for what happens, not for ten seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from harvester_quota.webhook.connections import ConnectionGuard
from harvester_quota.webhook.server import WebhookServer
from harvester_quota.webhook.serving import Bounds, Listening
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from tests.helpers import eventually
from tests.unit.test_webhook import KUBEVIRT_CONTROLLER, FakeLookups, plain_pod, review, room_held

SHORT = 0.5


@pytest.fixture
async def server() -> AsyncIterator[WebhookServer]:
    webhook = WebhookServer(
        FakeLookups(),
        listening=Listening("127.0.0.1", 0),
        bounds=Bounds(header_timeout=SHORT, body_timeout=SHORT, max_connections=4),
        registry=CollectorRegistry(),
    )
    await webhook.start()
    yield webhook
    await webhook.stop()


async def closed_by_server(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection (bounded wait)."""
    return await asyncio.wait_for(reader.read(), 10)


async def answered_then_closed(reader: asyncio.StreamReader) -> bytes:
    """The head of the server's answer, read once the server has closed the connection
    (bounded waits). A client still sending when the server closes may meet a reset rather
    than an end of stream, since the server does not linger to read what is left of a body:
    either is the connection closed, and the answer arrives before it."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    with contextlib.suppress(ConnectionResetError):
        await asyncio.wait_for(reader.read(), 10)
    return head


async def test_headers_that_never_end_are_cut_off(server: WebhookServer) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"POST /validate/pods HTTP/1.1\r\nHost: x\r\n")
    await writer.drain()
    assert await closed_by_server(reader) == b""
    assert server.guard.slow_headers == 1
    writer.close()


async def test_a_body_trickling_in_is_answered_408_and_closed(server: WebhookServer) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(
        b"POST /validate/pods HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n"
        b"Content-Type: application/json\r\n\r\n{"
    )
    await writer.drain()

    async def trickle() -> None:
        for _ in range(100):
            await asyncio.sleep(0.1)  # the attack itself: one byte at a time
            writer.write(b" ")
            await writer.drain()

    dripping = asyncio.ensure_future(trickle())
    answer = await answered_then_closed(reader)
    dripping.cancel()
    await asyncio.gather(dripping, return_exceptions=True)
    assert answer.startswith(b"HTTP/1.1 408")
    writer.close()


async def test_connections_beyond_the_cap_are_closed_on_arrival_if_none_may_be_evicted(
    server: WebhookServer,
) -> None:
    """Four connections that each carried an admission (without client authentication, anyone's
    may): none of them is evicted for a fifth, which is closed at once."""
    body = review("Pod", plain_pod("p", "1", "1Gi"))
    held = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(4)]
    for reader, writer in held:
        writer.write(
            b"POST /validate/pods HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        assert (await asyncio.wait_for(reader.readline(), 10)).startswith(b"HTTP/1.1 200")
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    assert await closed_by_server(reader) == b""
    assert (server.guard.refused, server.guard.evicted) == (1, 0)
    for _, other in (*held, (reader, writer)):
        other.close()


async def test_a_body_over_the_limit_is_refused_413(server: WebhookServer) -> None:
    async with aiohttp.ClientSession() as session:
        body = b"x" * (8 * 1024 * 1024)
        async with session.post(
            f"http://127.0.0.1:{server.port}/validate/pods", data=body
        ) as response:
            assert response.status == 413


async def test_a_client_that_goes_away_is_not_an_error(
    server: WebhookServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    _reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b'POST /validate/pods HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n{"a"')
    await writer.drain()
    writer.close()
    await writer.wait_closed()

    await eventually(lambda: not server.guard.open, timeout=10, what="the connection gone")
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


def review_like() -> st.SearchStrategy[Any]:
    """AdmissionReviews with every field possibly missing, null, of the wrong type or odd."""
    scalars = st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)
    )
    values = st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
        ),
        max_leaves=10,
    )
    kinds = st.one_of(
        values,
        st.fixed_dictionaries(
            {"kind": st.sampled_from(["Pod", "Namespace", "ResourceQuota", "VirtualMachine"])}
        ),
    )
    request = st.fixed_dictionaries(
        {},
        optional={
            "uid": st.one_of(st.text(max_size=12), values),
            "kind": kinds,
            "operation": st.one_of(st.sampled_from(["CREATE", "UPDATE", "DELETE"]), values),
            "namespace": st.one_of(st.text(max_size=12), values),
            "name": st.one_of(st.text(max_size=12), values),
            "userInfo": st.one_of(
                values, st.fixed_dictionaries({"username": values, "groups": values})
            ),
            "object": st.one_of(
                values, st.fixed_dictionaries({"metadata": values, "spec": values})
            ),
            "oldObject": values,
            "dryRun": values,
        },
    )
    return st.one_of(
        values,
        st.fixed_dictionaries({"apiVersion": st.just("admission.k8s.io/v1"), "request": request}),
    )


ENDPOINTS = ["pods", "namespaces", "resourcequotas", "virtualmachines"]


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=review_like(), endpoint=st.sampled_from(ENDPOINTS), raw=st.booleans())
@example(  # found by this test in CI: an object whose metadata is not a map
    body={
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": "0",
            "operation": "CREATE",
            "kind": {"kind": "Pod"},
            "name": "",
            "object": {"metadata": True, "spec": None},
        },
    },
    endpoint="pods",
    raw=False,
)
@example(  # found by this test: a quota update whose spec is not a map (AttributeError, 500)
    body={
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": "0",
            "operation": "UPDATE",
            "kind": {"kind": "ResourceQuota"},
            "namespace": "ns",
            "name": "q",
            "object": {"metadata": {}, "spec": True},
            "oldObject": {"spec": 1},
        },
    },
    endpoint="resourcequotas",
    raw=False,
)
def test_malformed_reviews_never_get_a_5xx(
    running: tuple[asyncio.AbstractEventLoop, WebhookServer, aiohttp.ClientSession],
    body: Any,
    endpoint: str,
    raw: bool,
) -> None:
    loop, webhook, session = running
    data = json.dumps(body).encode()[:-1] if raw else json.dumps(body).encode()

    async def post() -> int:
        url = f"http://127.0.0.1:{webhook.port}/validate/{endpoint}"
        async with session.post(url, data=data) as response:
            await response.read()
            return response.status

    status = loop.run_until_complete(post())
    assert status < 500, (endpoint, body)


@pytest.fixture(scope="module")
def running() -> Any:
    """One server and session for all the generated cases (hypothesis runs them synchronously)."""
    loop = asyncio.new_event_loop()
    webhook = WebhookServer(
        FakeLookups(), listening=Listening("127.0.0.1", 0), registry=CollectorRegistry()
    )
    loop.run_until_complete(webhook.start())
    session = loop.run_until_complete(_session())
    tracemalloc.start()
    yield loop, webhook, session
    _current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    loop.run_until_complete(session.close())
    loop.run_until_complete(webhook.stop())
    loop.close()
    assert peak < 64 * 1024 * 1024, f"memory grew to {peak / 2**20:.0f} MiB"


async def _session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession()


async def test_a_connection_whose_protocol_cannot_be_made_is_closed_and_forgotten() -> None:
    """asyncio raises before it takes the socket over: the guard closes it and stops counting
    it (it held its address's share, and a place, for good)."""

    def broken() -> asyncio.Protocol:
        raise RuntimeError("no protocol")

    guard = ConnectionGuard(max_per_peer=1)
    port = await guard.serve(broken, "127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(reader.read(), SHORT * 4) == b"", "closed by the webhook"
        await eventually(lambda: not guard.open, what="the connection forgotten")
        writer.close()
    finally:
        await guard.stop()


@pytest.mark.parametrize(
    "vm_spec",
    [
        True,
        {"running": True, "template": 1},
        {"running": True, "template": {"spec": "x"}},
        {
            "runStrategy": "Always",
            "template": {"spec": {"domain": {"resources": {"requests": {"memory": "1e400"}}}}},
        },
    ],
    ids=["spec", "template", "template-spec", "huge-quantity"],  # "1e400" is a valid quantity
)
async def test_a_vm_whose_spec_is_malformed_is_answered_not_a_5xx(vm_spec: Any) -> None:
    """Found by fuzzing the validators with room held (a managed quota, so the VM is sized):
    AttributeError on a template that is no map, OverflowError on a quantity beyond a float."""
    lookups = FakeLookups()
    room_held(lookups)
    webhook = WebhookServer(lookups, registry=CollectorRegistry())
    answer = await webhook.review(
        "virtualmachines", review("VirtualMachine", {"metadata": {"name": "vm"}, "spec": vm_spec})
    )
    assert answer.status == 200, answer.text


@pytest.mark.parametrize(
    ("endpoint", "kind", "metadata", "user"),
    [
        (
            "namespaces",
            "Namespace",
            {"name": "ns", "annotations": {"field.cattle.io/resourceQuota": 1}},
            "tenant",
        ),
        (
            "pods",
            "Pod",
            {"name": "p", "labels": {"kubevirt.io/migrationJobUID": ["m1"]}},
            KUBEVIRT_CONTROLLER,
        ),
        ("pods", "Pod", {"name": "p", "labels": ["x"]}, "tenant"),
    ],
    ids=["annotation-not-a-string", "label-not-a-string", "labels-not-a-map"],
)
async def test_labels_or_annotations_that_are_not_strings_are_a_bad_review_not_a_5xx(
    endpoint: str, kind: str, metadata: dict[str, Any], user: str
) -> None:
    """Found by fuzzing the validators: they take labels and annotations for maps of strings
    (a .strip() of an int, a list label as a dict key), as every API server sends them."""
    webhook = WebhookServer(FakeLookups(), registry=CollectorRegistry())
    body = json.loads(review(kind, {"metadata": metadata}))
    body["request"]["operation"] = "UPDATE" if kind == "Namespace" else "CREATE"
    body["request"]["oldObject"] = {"metadata": {"name": metadata["name"]}}
    body["request"]["userInfo"]["username"] = user
    answer = await webhook.review(endpoint, json.dumps(body).encode())
    assert answer.status == 200, answer.text
    response = json.loads(answer.text)["response"]
    assert not response["allowed"] and response["status"]["code"] == 400
    assert "not a map of strings" in response["status"]["message"]
