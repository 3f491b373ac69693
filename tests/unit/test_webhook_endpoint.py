"""The admission port as an attacker meets it: who may call /validate/*, how big a body may be,
how many are held at once, and that /metrics is not there.

The server runs for real on 127.0.0.1 with TLS; the API server is played by a client whose
certificate the webhook client CA signed (CN kube-apiserver-webhook-client), an attacker's pod by
a client with no certificate, with one from another CA, or with one from the right CA under
another name. Requests are written by hand where it matters what the server does before the
body arrives: a body that is never sent cannot have been read.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from harvester_quota.generic.clock import REAL_CLOCK, Clock
from harvester_quota.main import _client_auth, build_parser
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.testbench.localcluster.pki import CertificateAuthority
from harvester_quota.webhook.admission import Request
from harvester_quota.webhook.connections import (
    MAX_BODY,
    MAX_CONNECTIONS,
    MAX_CONNECTIONS_PER_PEER,
    AdmissionSlots,
    Listener,
)
from harvester_quota.webhook.metrics import METRICS_PORT, start_metrics_endpoint
from harvester_quota.webhook.server import WebhookServer
from harvester_quota.webhook.serving import Bounds, Listening
from harvester_quota.webhook.tls import ClientAuth, ReloadingTLS
from prometheus_client import CollectorRegistry

from tests.helpers import eventually
from tests.unit.test_webhook import FakeLookups, plain_pod, review

API_SERVER = "kube-apiserver-webhook-client"
PATIENT = 60.0
"""A body timeout no test waits for: an answer that comes sooner did not wait for the body."""
ANSWER_WITHIN = 10.0
"""How long a test waits for an answer that should come at once."""


@dataclass(frozen=True)
class Pki:
    """Files of one test: the serving pair and its CA, the webhook client CA, and client pairs."""

    root: Path
    server_ca: Path
    client_ca: Path

    def pair(self, name: str) -> tuple[Path, Path]:
        return self.root / f"{name}.crt", self.root / f"{name}.key"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    root = tmp_path_factory.mktemp("pki")
    server_ca = CertificateAuthority.create("serving-ca")
    server_ca.write(root / "serving-ca.crt", root / "serving-ca.key")
    server_ca.issue("webhook", ip_addresses=("127.0.0.1",), server=True).write(
        root / "tls.crt", root / "tls.key"
    )
    client_ca = CertificateAuthority.create("webhook-client-ca")
    client_ca.write(root / "client-ca.crt", root / "client-ca.key")
    pki = Pki(root, root / "serving-ca.crt", root / "client-ca.crt")
    client_ca.issue(API_SERVER, client=True).write(*pki.pair("apiserver"))
    client_ca.issue("tenant-pod", client=True).write(*pki.pair("other-name"))
    # The serving CA is a real CA of the cluster too: its certificates are not the API server's.
    server_ca.issue(API_SERVER, client=True).write(*pki.pair("other-ca"))
    return pki


class Recorder:
    """A pods validator that records what it was asked, optionally held until `release`."""

    def __init__(self, *, hold: bool = False) -> None:
        self.asked: list[str] = []
        self.gate = asyncio.Event()
        if not hold:
            self.gate.set()

    def __call__(self, request: Request) -> Awaitable[None]:
        self.asked.append(request.name)  # at once: the server calls validators synchronously
        return self._held()

    async def _held(self) -> None:
        await self.gate.wait()


@contextlib.asynccontextmanager
async def running(server: WebhookServer) -> AsyncIterator[WebhookServer]:
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def webhook(pki: Pki, clock: Clock = REAL_CLOCK, **bounds: Any) -> WebhookServer:
    """A TLS server that requires the API server's client certificate, bodies never timed out."""
    tls = ReloadingTLS(pki.root / "tls.crt", pki.root / "tls.key")
    return WebhookServer(
        FakeLookups(),
        listening=Listening(
            "127.0.0.1", 0, tls, ClientAuth(pki.client_ca, frozenset({API_SERVER}))
        ),
        bounds=Bounds(**{"body_timeout": PATIENT, **bounds}),
        clock=clock,
        registry=CollectorRegistry(),
    )


@pytest.fixture
async def server(pki: Pki) -> AsyncIterator[WebhookServer]:
    async with running(webhook(pki)) as started:
        yield started


def client_context(pki: Pki, as_: str | None) -> ssl.SSLContext:
    """A client's TLS context trusting the serving CA, presenting the pair `as_` if given."""
    context = ssl.create_default_context(cafile=str(pki.server_ca))
    if as_ is not None:
        context.load_cert_chain(*pki.pair(as_))
    return context


def outcomes(server: WebhookServer) -> dict[str, float]:
    return {
        sample.labels["outcome"]: sample.value
        for metric in server.metrics.requests.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    }


async def status_of(
    server: WebhookServer, pki: Pki, head: bytes, *, as_: str | None, body: bytes = b""
) -> str:
    """Writes `head` (and `body`) on a new TLS connection; the answer's status line, or "" if
    the server ends the connection without one."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", server.port, ssl=client_context(pki, as_)
    )
    try:
        writer.write(head + body)
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), ANSWER_WITHIN)
    except (ConnectionError, ssl.SSLError):
        return ""
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()
    return line.decode().strip()


def post_head(endpoint: str, length: int) -> bytes:
    return (
        f"POST /validate/{endpoint} HTTP/1.1\r\nHost: webhook\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def pod_review(name: str) -> bytes:
    return review("Pod", plain_pod(name, "1", "1Gi"))


async def post(
    server: WebhookServer, pki: Pki, body: bytes, *, as_: str | None = "apiserver"
) -> int:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"https://127.0.0.1:{server.port}/validate/pods",
            data=body,
            ssl=client_context(pki, as_),
        ) as response,
    ):
        await response.read()
        return response.status


# Who may call -------------------------------------------------------------------------------


def test_the_tls_context_asks_for_client_certificates_and_trusts_only_the_given_ca(
    pki: Pki,
) -> None:
    tls = ReloadingTLS(pki.root / "tls.crt", pki.root / "tls.key")
    assert tls.context.verify_mode == ssl.CERT_NONE, "no client CA: no client certificate asked"
    tls.verify_clients(pki.client_ca)
    # Required: a client without one gets no connection (the kubelet probes the metrics port).
    assert tls.context.verify_mode == ssl.CERT_REQUIRED
    trusted = [dict(rdn[0] for rdn in ca["subject"]) for ca in tls.context.get_ca_certs()]
    assert trusted == [{"commonName": "webhook-client-ca"}]


def test_client_auth_without_tls_is_refused() -> None:
    with pytest.raises(ValueError, match="client certificates need TLS"):
        WebhookServer(
            FakeLookups(),
            listening=Listening(client_auth=ClientAuth(Path("/nonexistent"))),
            registry=CollectorRegistry(),
        )


async def test_the_api_servers_certificate_is_answered(server: WebhookServer, pki: Pki) -> None:
    recorder = Recorder()
    server.validators["pods"] = ("Pod", recorder)
    assert await post(server, pki, pod_review("p1")) == 200
    assert recorder.asked == ["p1"]


async def test_a_client_without_a_certificate_gets_no_connection_past_the_handshake(
    server: WebhookServer, pki: Pki
) -> None:
    """Its request never reaches HTTP: no answer, nothing validated, no slot taken, and the
    guard holds nothing of it once the handshake failed."""
    recorder = Recorder()
    server.validators["pods"] = ("Pod", recorder)
    status = await status_of(server, pki, post_head("pods", 1024 * 1024), as_=None)
    assert status == ""
    await eventually(lambda: server.guard.failed_handshakes == 1, what="the handshake refused")
    assert not server.guard.open
    assert recorder.asked == []
    assert outcomes(server) == {}
    assert server.slots.peak == 0, "a refused client never takes an admission slot"


async def test_a_client_certificate_from_another_ca_gets_no_answer(
    server: WebhookServer, pki: Pki
) -> None:
    """Signed by a CA the cluster trusts, but not the webhook client CA: the handshake fails, so
    the request never reaches HTTP."""
    recorder = Recorder()
    server.validators["pods"] = ("Pod", recorder)
    body = pod_review("forged")
    assert (
        await status_of(server, pki, post_head("pods", len(body)), as_="other-ca", body=body) == ""
    )
    assert recorder.asked == []
    assert outcomes(server) == {}


async def test_a_client_certificate_with_another_name_is_refused_403(
    server: WebhookServer, pki: Pki
) -> None:
    recorder = Recorder()
    server.validators["pods"] = ("Pod", recorder)
    status = await status_of(server, pki, post_head("pods", 4096), as_="other-name")
    assert status == "HTTP/1.1 403 Forbidden"
    assert recorder.asked == []
    assert outcomes(server) == {"forbidden": 1}


async def test_a_flood_of_refused_requests_logs_one_warning_naming_the_peer(
    server: WebhookServer, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="harvester_quota.webhook")
    for _ in range(20):
        assert await status_of(server, pki, post_head("pods", 10), as_="other-name") == (
            "HTTP/1.1 403 Forbidden"
        )
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "refused an admission request from 127.0.0.1:" in warnings[0]
    assert (
        "pods: this client certificate is not accepted (certificate CN 'tenant-pod')"
        in (warnings[0])
    )
    assert server.refusals.unlogged == 19


async def test_a_flood_of_handshakes_without_a_certificate_logs_one_warning_naming_the_peer(
    server: WebhookServer, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="harvester_quota.webhook")
    for _ in range(20):
        assert await status_of(server, pki, post_head("pods", 10), as_=None) == ""
    await eventually(lambda: server.guard.failed_handshakes == 20, what="20 handshakes refused")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "refused a connection from 127.0.0.1: TLS handshake failed:" in warnings[0]
    assert "CERTIFICATE" in warnings[0]
    assert server.guard.refusals.unlogged == 19


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
async def test_probes_without_a_client_certificate_get_no_answer_on_the_admission_port(
    server: WebhookServer, pki: Pki, path: str
) -> None:
    """The kubelet probes the plain metrics port instead (the chart's probes; see
    test_metrics_and_probes_are_served_on_the_plain_metrics_port)."""
    head = f"GET {path} HTTP/1.1\r\nHost: webhook\r\n\r\n".encode()
    assert await status_of(server, pki, head, as_=None) == ""
    assert await status_of(server, pki, head, as_="apiserver") == "HTTP/1.1 200 OK"


async def test_metrics_are_not_served_on_the_admission_port(
    server: WebhookServer, pki: Pki
) -> None:
    head = b"GET /metrics HTTP/1.1\r\nHost: webhook\r\n\r\n"
    assert await status_of(server, pki, head, as_="apiserver") == "HTTP/1.1 404 Not Found"
    assert await status_of(server, pki, head, as_=None) == ""


async def test_a_replaced_client_ca_is_trusted_no_more(tmp_path: Path, pki: Pki) -> None:
    """The CA file is rewritten with a new CA: after the reload the old CA's certificate no
    longer gets through the handshake, and the new one's does."""
    ca_file = tmp_path / "client-ca.crt"
    ca_file.write_bytes(pki.client_ca.read_bytes())
    tls = ReloadingTLS(pki.root / "tls.crt", pki.root / "tls.key")
    server = WebhookServer(
        FakeLookups(),
        listening=Listening("127.0.0.1", 0, tls, ClientAuth(ca_file)),
        registry=CollectorRegistry(),
    )
    server.validators["pods"] = ("Pod", Recorder())
    body = pod_review("p")
    async with running(server):
        assert (
            await status_of(server, pki, post_head("pods", len(body)), as_="apiserver", body=body)
            == "HTTP/1.1 200 OK"
        )
        new_ca = CertificateAuthority.create("rotated-client-ca")
        new_ca.issue(API_SERVER, client=True).write(*pki.pair("rotated"))
        ca_file.write_bytes(new_ca.cert_pem)
        os.utime(ca_file, (1e9, 2e9))
        assert tls.reload()
        assert (
            await status_of(server, pki, post_head("pods", len(body)), as_="apiserver", body=body)
            == ""
        )
        assert (
            await status_of(server, pki, post_head("pods", len(body)), as_="rotated", body=body)
            == "HTTP/1.1 200 OK"
        )


# How big a body ------------------------------------------------------------------------------


async def test_a_body_announced_one_byte_over_max_body_is_refused_413_unread(
    server: WebhookServer, pki: Pki
) -> None:
    status = await status_of(server, pki, post_head("pods", MAX_BODY + 1), as_="apiserver")
    assert status == "HTTP/1.1 413 Request Entity Too Large"
    assert outcomes(server) == {"too-large": 1}


async def test_a_streamed_body_one_byte_over_max_body_is_refused_413(
    server: WebhookServer, pki: Pki
) -> None:
    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: chunked encoding
        sent = 0
        while sent <= MAX_BODY:
            size = min(256 * 1024, MAX_BODY + 1 - sent)
            sent += size
            yield b" " * size

    assert await post(server, pki, chunks()) == 413  # type: ignore[arg-type]


async def test_a_body_of_exactly_max_body_is_read(server: WebhookServer, pki: Pki) -> None:
    recorder = Recorder()
    server.validators["pods"] = ("Pod", recorder)
    body = pod_review("big")
    body = body + b" " * (MAX_BODY - len(body))  # JSON allows trailing whitespace
    assert await post(server, pki, body) == 200
    assert recorder.asked == ["big"]


def test_max_body_fits_two_objects_at_etcds_limit_and_an_envelope() -> None:
    etcd_request_limit = 1.5 * 1024 * 1024
    assert 2 * etcd_request_limit < MAX_BODY <= 2 * etcd_request_limit + 1024 * 1024


# How many connections -------------------------------------------------------------------------

ATTACKERS = [f"127.0.0.{n}" for n in range(2, 2 + MAX_CONNECTIONS // MAX_CONNECTIONS_PER_PEER)]
"""Addresses enough to fill MAX_CONNECTIONS with MAX_CONNECTIONS_PER_PEER each (all of
127.0.0.0/8 is loopback on Linux); the API server's calls come from 127.0.0.1."""


def open_webhook(pki: Pki, **bounds: Any) -> WebhookServer:
    """A TLS server that checks no client certificate (the chart's default)."""
    return WebhookServer(
        FakeLookups(),
        listening=Listening(
            "127.0.0.1", 0, ReloadingTLS(pki.root / "tls.crt", pki.root / "tls.key")
        ),
        bounds=Bounds(**{"body_timeout": PATIENT, **bounds}),
        registry=CollectorRegistry(),
    )


Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def connect(server: WebhookServer, source: str, tls: ssl.SSLContext | None = None) -> Stream:
    """A connection from `source`; without `tls`, one that never begins its handshake."""
    return await asyncio.open_connection("127.0.0.1", server.port, ssl=tls, local_addr=(source, 0))


async def hold_idle(server: WebhookServer, sources: list[str], each: int) -> list[Stream]:
    """`each` silent connections from every source, once the guard counts them all."""
    before = len(server.guard.open)
    held = [await connect(server, source) for source in sources for _ in range(each)]
    await eventually(
        lambda: len(server.guard.open) == before + len(held), what="the idle connections counted"
    )
    return held


async def hold_probe(server: WebhookServer, pki: Pki, source: str, held: list[Stream]) -> bool:
    """The reviewer's attack, one connection: a TLS client without a certificate asks for
    /healthz and keeps its connection (added to `held`). True if it was answered 200."""
    try:
        stream = await connect(server, source, client_context(pki, None))
        held.append(stream)
        reader, writer = stream
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: webhook\r\n\r\n")
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), ANSWER_WITHIN)
    except (ConnectionError, ssl.SSLError):
        return False
    return line.startswith(b"HTTP/1.1 200")


async def read_answer(reader: asyncio.StreamReader) -> tuple[str, dict[str, str]]:
    """One whole HTTP answer: its status line and headers (lower-case names); its body read."""
    status = (await asyncio.wait_for(reader.readline(), ANSWER_WITHIN)).decode().strip()
    headers = {}
    while (line := (await reader.readline()).decode().strip()) != "":
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers


async def admission_on(stream: Stream, name: str) -> str:
    """The status of a pod review sent on an open connection."""
    reader, writer = stream
    body = pod_review(name)
    writer.write(post_head("pods", len(body)) + body)
    await writer.drain()
    return (await read_answer(reader))[0]


async def closed(reader: asyncio.StreamReader) -> bool:
    """Whether the server ends the connection within ANSWER_WITHIN (what it still sends
    before, the rest of an answer, is read and dropped)."""
    try:
        await asyncio.wait_for(reader.read(), ANSWER_WITHIN)
    except (ConnectionError, ssl.SSLError):
        return True
    except TimeoutError:
        return False
    return True


def let_go(held: list[Stream]) -> None:
    for _, writer in held:
        writer.close()


async def test_held_probes_without_a_certificate_do_not_lock_the_api_server_out(pki: Pki) -> None:
    """The review's proof: MAX_CONNECTIONS TLS clients without a certificate each ask for
    /healthz and keep their connection. Before, each was answered and kept alive, and the API
    server's connection, one over the cap, was closed. Now none gets past its handshake."""
    recorder = Recorder()
    server = webhook(pki, handshake_timeout=PATIENT, header_timeout=PATIENT)
    server.validators["pods"] = ("Pod", recorder)
    async with running(server):
        held: list[Stream] = []
        per_address = MAX_CONNECTIONS // len(ATTACKERS)
        answered = [
            await hold_probe(server, pki, a, held) for a in ATTACKERS for _ in range(per_address)
        ]
        assert answered.count(True) == 0
        await eventually(lambda: not server.guard.open, what="every attacker's connection gone")
        assert await post(server, pki, pod_review("p")) == 200
        let_go(held)
    assert recorder.asked == ["p"]


async def test_held_probes_without_client_authentication_do_not_lock_the_api_server_out(
    pki: Pki,
) -> None:
    """The same attack on a webhook that checks no certificates (the chart's default): a
    probe's connection is closed after its answer, so holding it holds nothing."""
    recorder = Recorder()
    server = open_webhook(pki, handshake_timeout=PATIENT, header_timeout=PATIENT)
    server.validators["pods"] = ("Pod", recorder)
    async with running(server):
        held: list[Stream] = []
        per_address = MAX_CONNECTIONS // len(ATTACKERS)
        answered = [
            await hold_probe(server, pki, a, held) for a in ATTACKERS for _ in range(per_address)
        ]
        assert answered.count(True) == MAX_CONNECTIONS
        assert all([await closed(reader) for reader, _ in held])
        assert await post(server, pki, pod_review("p"), as_=None) == 200
        let_go(held)
    assert recorder.asked == ["p"]


async def test_with_every_connection_held_by_silent_clients_the_api_server_is_answered(
    pki: Pki,
) -> None:
    """MAX_CONNECTIONS connections that never begin their handshake, from enough addresses to
    fill the webhook within their share each: the API server's newcomer takes the place of the
    oldest of them (one address holding the most) instead of being closed."""
    recorder = Recorder()
    server = webhook(pki, handshake_timeout=PATIENT, header_timeout=PATIENT)
    server.validators["pods"] = ("Pod", recorder)
    async with running(server):
        held = await hold_idle(server, ATTACKERS, MAX_CONNECTIONS // len(ATTACKERS))
        assert len(server.guard.open) == MAX_CONNECTIONS
        assert await post(server, pki, pod_review("p")) == 200
        assert server.guard.evicted == 1
        assert await closed(held[0][0]), "the oldest connection of a fullest address went"
        assert len(server.guard.open) <= MAX_CONNECTIONS
        let_go(held)
    assert recorder.asked == ["p"]
    assert server.guard.refused == 0


async def test_one_address_has_at_most_its_share_under_way_and_others_still_connect(
    pki: Pki,
) -> None:
    """Four of its connections in their handshake, the others waiting their turn unread (no
    TLS work, no buffer); when the webhook is full, a newcomer from another address evicts the
    flooding address's oldest, and the API server is answered."""
    recorder = Recorder()
    server = webhook(
        pki,
        handshake_timeout=PATIENT,
        header_timeout=PATIENT,
        max_connections_per_peer=4,
        max_connections=10,
    )
    server.validators["pods"] = ("Pod", recorder)
    async with running(server):
        held = await hold_idle(server, ["127.0.0.2"], 10)
        assert (server.guard.unvouched("127.0.0.2"), server.guard.waiting("127.0.0.2")) == (4, 6)
        other = await connect(server, "127.0.0.3")
        assert await closed(held[0][0]), "the flooding address's oldest gave way"
        await eventually(lambda: server.guard.unvouched("127.0.0.3") == 1, what="its newcomer")
        assert await post(server, pki, pod_review("p")) == 200
        assert (server.guard.refused, server.guard.evicted) == (0, 2)
        let_go([*held, other])
    assert recorder.asked == ["p"]


async def test_a_connection_waiting_its_turn_is_closed_when_the_turn_does_not_come(
    pki: Pki,
) -> None:
    server = webhook(pki, handshake_timeout=0.5, header_timeout=PATIENT, max_connections_per_peer=1)
    async with running(server):
        (first,) = await hold_idle(server, ["127.0.0.2"], 1)
        (second,) = await hold_idle(server, ["127.0.0.2"], 1)
        assert server.guard.waiting("127.0.0.2") == 1
        assert await closed(first[0]) and await closed(second[0])
        await eventually(lambda: not server.guard.open, what="both gone")
        let_go([first, second])


async def test_a_burst_of_the_api_servers_connections_beyond_an_addresss_share_is_answered(
    pki: Pki,
) -> None:
    """The API server dials a burst of connections at once: beyond the share under way they
    wait their turn, which comes as soon as its certificate vouches for the earlier ones."""
    recorder = Recorder()
    server = webhook(pki, max_connections_per_peer=2)
    server.validators["pods"] = ("Pod", recorder)
    async with running(server):
        answers = await asyncio.gather(*(post(server, pki, pod_review(f"p{i}")) for i in range(12)))
    assert answers == [200] * 12
    assert sorted(recorder.asked) == sorted(f"p{i}" for i in range(12))
    assert server.guard.refused == 0


async def test_the_api_servers_connections_are_not_counted_against_its_address(
    pki: Pki,
) -> None:
    """Its certificate vouches for its connections: it keeps more than an address's share
    open (its pool, kept alive), and every one still answers."""
    server = webhook(pki, max_connections_per_peer=2)
    server.validators["pods"] = ("Pod", Recorder())
    async with running(server):
        pool = [
            await connect(server, "127.0.0.1", client_context(pki, "apiserver")) for _ in range(4)
        ]
        assert [await admission_on(stream, f"p{i}") for i, stream in enumerate(pool)] == [
            "HTTP/1.1 200 OK"
        ] * 4
        assert server.guard.unvouched("127.0.0.1") == 0
        assert [await admission_on(stream, "again") for stream in pool] == ["HTTP/1.1 200 OK"] * 4
        let_go(pool)


async def test_vouched_connections_are_never_evicted_and_a_newcomer_is_closed_instead(
    pki: Pki,
) -> None:
    server = webhook(pki, max_connections=2, handshake_timeout=PATIENT)
    server.validators["pods"] = ("Pod", Recorder())
    async with running(server):
        pool = [
            await connect(server, "127.0.0.1", client_context(pki, "apiserver")) for _ in range(2)
        ]
        assert [await admission_on(stream, "p") for stream in pool] == ["HTTP/1.1 200 OK"] * 2
        newcomer = await connect(server, "127.0.0.2")
        assert await closed(newcomer[0])
        assert (server.guard.refused, server.guard.evicted) == (1, 0)
        assert [await admission_on(stream, "q") for stream in pool] == ["HTTP/1.1 200 OK"] * 2
        let_go([*pool, newcomer])


async def test_a_newcomer_evicts_the_oldest_connection_of_the_address_holding_the_most(
    pki: Pki,
) -> None:
    server = webhook(pki, max_connections=6, handshake_timeout=PATIENT)
    async with running(server):
        fullest = await hold_idle(server, ["127.0.0.2"], 4)
        other = await hold_idle(server, ["127.0.0.3"], 2)
        newcomer = await connect(server, "127.0.0.4")
        assert await closed(fullest[0][0])
        peers = collections.Counter(c.peer for c in server.guard.open)
        assert peers == {"127.0.0.2": 3, "127.0.0.3": 2, "127.0.0.4": 1}
        let_go([*fullest, *other, newcomer])


async def test_only_a_connection_that_carried_an_admission_is_kept_alive(pki: Pki) -> None:
    """Without client authentication (anyone may ask for admissions): a probe's connection is
    closed after its answer, an admission's stays open for the next one."""
    server = open_webhook(pki)
    server.validators["pods"] = ("Pod", Recorder())
    async with running(server):
        probe = await connect(server, "127.0.0.2", client_context(pki, None))
        probe[1].write(b"GET /healthz HTTP/1.1\r\nHost: webhook\r\n\r\n")
        status, headers = await read_answer(probe[0])
        assert (status, headers.get("connection")) == ("HTTP/1.1 200 OK", "close")
        assert await closed(probe[0])
        unknown = await connect(server, "127.0.0.2", client_context(pki, None))
        unknown[1].write(b"GET /nothing HTTP/1.1\r\nHost: webhook\r\n\r\n")
        assert (await read_answer(unknown[0]))[0] == "HTTP/1.1 404 Not Found"
        assert await closed(unknown[0])
        admission = await connect(server, "127.0.0.3", client_context(pki, None))
        assert await admission_on(admission, "first") == "HTTP/1.1 200 OK"
        assert await admission_on(admission, "second") == "HTTP/1.1 200 OK"
        let_go([probe, unknown, admission])


async def test_a_silent_handshake_is_cut_off_after_the_handshake_timeout(pki: Pki) -> None:
    server = webhook(pki, handshake_timeout=0.2)
    async with running(server):
        silent = await connect(server, "127.0.0.2")
        assert await closed(silent[0])
        await eventually(lambda: not server.guard.open, what="the silent connection forgotten")
        assert server.guard.failed_handshakes == 1
        let_go([silent])


# How many at once ----------------------------------------------------------------------------


async def withheld(server: WebhookServer, pki: Pki, body: bytes) -> Any:
    """A connection of the API server's that sent a review's headers and withholds its body
    (until `send_rest`): it holds a read slot meanwhile."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", server.port, ssl=client_context(pki, "apiserver")
    )
    writer.write(post_head("pods", len(body)))
    await writer.drain()

    async def send_rest() -> str:
        writer.write(body)
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), ANSWER_WITHIN)
        writer.close()
        return line.decode().strip()

    return send_rest


async def test_bodies_beyond_the_read_slots_wait_then_get_429_unread(pki: Pki) -> None:
    """Two read slots, both held by requests whose bodies are withheld: a third request
    (headers only) waits for a slot, and when the wait is over gets 429 at once: its body was
    never awaited. The two held bodies, once sent, are read and answered."""
    clock = FakeClock()
    recorder = Recorder()
    server = webhook(pki, clock=clock, max_admissions=2, admission_wait=1.0)
    server.validators["pods"] = ("Pod", recorder)
    async with running(server):
        held = [await withheld(server, pki, pod_review(f"p{i}")) for i in range(2)]
        await eventually(lambda: server.slots.in_use == 2, what="two bodies being read")
        third = asyncio.ensure_future(
            status_of(server, pki, post_head("pods", 100), as_="apiserver")
        )
        await eventually(lambda: server.slots.waiting == 1, what="the third waiting for a slot")
        assert not third.done()
        clock.step(1.0)
        assert await third == "HTTP/1.1 429 Too Many Requests"
        assert [await send() for send in held] == ["HTTP/1.1 200 OK"] * 2
    assert recorder.asked == ["p0", "p1"]
    assert server.slots.peak == 2
    assert outcomes(server) == {"busy": 1, "allowed": 2}


async def test_a_read_slot_given_back_goes_to_the_request_waiting_for_it(pki: Pki) -> None:
    clock = FakeClock()
    recorder = Recorder()
    server = webhook(pki, clock=clock, max_admissions=1, admission_wait=1.0)
    server.validators["pods"] = ("Pod", recorder)
    async with running(server):
        first = await withheld(server, pki, pod_review("first"))
        await eventually(lambda: server.slots.in_use == 1, what="the first body being read")
        second = asyncio.ensure_future(post(server, pki, pod_review("second")))
        await eventually(lambda: server.slots.waiting == 1, what="the second waiting")
        assert await first() == "HTTP/1.1 200 OK"
        assert await second == 200
    assert recorder.asked == ["first", "second"]
    assert server.slots.peak == 1


async def test_a_review_being_decided_holds_no_read_slot(pki: Pki) -> None:
    """One read slot, and a review whose decision waits (a target pod waiting for its room):
    the next request is read and decided meanwhile. Before, a decision held its slot, so
    admissions waiting to be decided kept every other request unread."""
    recorder = Recorder(hold=True)
    server = webhook(pki, max_admissions=1, admission_wait=1.0)
    server.validators["pods"] = ("Pod", recorder)
    async with running(server):
        held = asyncio.ensure_future(post(server, pki, pod_review("held")))
        await eventually(lambda: recorder.asked == ["held"], what="the first decision waiting")
        second = asyncio.ensure_future(post(server, pki, pod_review("second")))
        await eventually(lambda: recorder.asked == ["held", "second"], what="the second read")
        recorder.gate.set()
        assert [await held, await second] == [200, 200]


async def test_a_request_cancelled_while_waiting_for_a_slot_leaves_the_slots_whole() -> None:
    clock = FakeClock()
    slots = AdmissionSlots(1, 5.0, clock)
    assert await slots.acquire()
    waiting = asyncio.ensure_future(slots.acquire())
    await eventually(lambda: slots.waiting == 1, what="a waiter")
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    slots.release()
    assert (slots.in_use, slots.waiting) == (0, 0)
    assert await slots.acquire(), "the slot is free again"


# Where /metrics is ---------------------------------------------------------------------------


async def test_metrics_and_probes_are_served_on_the_plain_metrics_port() -> None:
    ready = False
    endpoint = await start_metrics_endpoint(("127.0.0.1", 0), lambda: ready)
    base = f"http://127.0.0.1:{endpoint.port}"
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base}/metrics") as response:
                assert response.status == 200
                assert "# HELP" in await response.text()
            async with session.get(f"{base}/healthz") as response:
                assert response.status == 200
            async with session.get(f"{base}/readyz") as response:
                assert response.status == 503
            ready = True
            async with session.get(f"{base}/readyz") as response:
                assert response.status == 200
    finally:
        await endpoint.stop()


# The command line ----------------------------------------------------------------------------

WEBHOOK = ["webhook", "--cert-file", "c", "--key-file", "k"]


def test_the_webhook_flags_for_client_certificates_and_the_metrics_port() -> None:
    args = build_parser().parse_args(
        [*WEBHOOK, "--client-ca-file", "ca.crt", "--client-name", "a", "--client-name", "b"]
    )
    assert (args.client_ca_file, args.client_name) == ("ca.crt", ["a", "b"])
    defaults = build_parser().parse_args(WEBHOOK)
    assert (defaults.client_ca_file, defaults.metrics_host) == (None, "0.0.0.0")
    assert defaults.metrics_port == METRICS_PORT


def test_client_names_without_a_client_ca_are_a_usage_error() -> None:
    with pytest.raises(SystemExit, match="--client-name needs --client-ca-file"):
        _client_auth(build_parser().parse_args([*WEBHOOK, "--client-name", "a"]))


def test_a_client_ca_that_cannot_be_read_at_start_stops_the_server_from_starting(
    pki: Pki, tmp_path: Path
) -> None:
    """Fail fast: a webhook that silently did not ask for certificates would refuse the API
    server itself (it would present none)."""
    tls = ReloadingTLS(pki.root / "tls.crt", pki.root / "tls.key")
    with pytest.raises(FileNotFoundError):
        tls.verify_clients(tmp_path / "missing-ca.crt")
    (tmp_path / "not-a-ca.crt").write_text("garbage")
    with pytest.raises(ssl.SSLError):
        tls.verify_clients(tmp_path / "not-a-ca.crt")


async def test_a_connection_the_guard_fails_on_is_closed_and_accepting_goes_on() -> None:
    """Second review, finding 5: only OSError was caught around an arrival, so any other error
    ended the accept loop for good while the probes (on the metrics port) stayed green."""
    taken: list[str] = []
    second = asyncio.Event()

    def arrived(accepted: socket.socket, peer: str) -> None:
        if not taken:
            taken.append("failed")
            raise RuntimeError("a bug in taking a connection in")
        taken.append(peer)
        accepted.close()
        second.set()

    listener = Listener(arrived)
    port = await listener.start("127.0.0.1", 0)
    try:
        for _ in range(2):
            _reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
        await asyncio.wait_for(second.wait(), 10)
        assert taken == ["failed", "127.0.0.1"]
    finally:
        await listener.stop()
