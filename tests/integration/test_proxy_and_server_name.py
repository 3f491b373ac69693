"""The way to the API server, on the local cluster: a kubeconfig's proxy-url sends every
request through an HTTP CONNECT proxy (a tiny one in this test, on 127.0.0.1), and a cluster's
tls-server-name is the name the server's certificate is checked against."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from harvester_quota.generic import config, errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.testbench.localcluster.cluster import ClusterInfo

pytestmark = pytest.mark.integration


class ConnectProxy:
    """An HTTP proxy that only tunnels (CONNECT host:port), recording each target it opened."""

    def __init__(self) -> None:
        self.tunnels: list[str] = []
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        method, target, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
        if method != "CONNECT":
            writer.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            writer.close()
            return
        host, _, port = target.rpartition(":")
        upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
        self.tunnels.append(target)
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await asyncio.gather(
            _pipe(reader, upstream_writer), _pipe(upstream_reader, writer), return_exceptions=True
        )


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    finally:
        with contextlib.suppress(Exception):
            writer.close()


@pytest.fixture
async def proxy() -> AsyncIterator[ConnectProxy]:
    found = ConnectProxy()
    server = await asyncio.start_server(found.handle, "127.0.0.1", 0)
    found.port = server.sockets[0].getsockname()[1]
    async with server:
        yield found
        server.close()


def _with_cluster_fields(source: Path, target: Path, **fields: str) -> Path:
    document = yaml.safe_load(source.read_text())
    for cluster in document["clusters"]:
        cluster["cluster"].update(fields)
    target.write_text(yaml.safe_dump(document))
    return target


async def test_a_kubeconfigs_proxy_url_carries_every_request_through_the_proxy(
    cluster: ClusterInfo, proxy: ConnectProxy, tmp_path: Path
) -> None:
    kubeconfig = _with_cluster_fields(
        cluster.kubeconfig,
        tmp_path / "kubeconfig",
        **{"proxy-url": f"http://127.0.0.1:{proxy.port}"},
    )
    async with ApiClient(config.load(kubeconfig)) as client:
        version = await client.request("GET", "/version")
    assert version.get("gitVersion")
    api_server = cluster.server.removeprefix("https://")
    assert proxy.tunnels and set(proxy.tunnels) == {api_server}


async def test_a_tls_server_name_is_what_the_certificate_is_checked_against(
    cluster: ClusterInfo,
) -> None:
    named = dataclasses.replace(cluster.admin_config(), tls_server_name="kubernetes.default.svc")
    async with ApiClient(named) as client:
        assert (await client.request("GET", "/version")).get("gitVersion")
    wrong = dataclasses.replace(named, tls_server_name="not-in-the-certificate.example")
    async with ApiClient(wrong) as client:
        with pytest.raises(errors.ConnectionFailed, match="not-in-the-certificate"):
            await client.request("GET", "/version")
