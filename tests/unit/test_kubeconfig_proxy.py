"""The way to the API server, as kubectl takes it: a kubeconfig cluster's proxy-url and
tls-server-name, the proxy environment (HTTPS_PROXY, HTTP_PROXY, NO_PROXY); and what the
commands say when the server cannot be reached."""

from __future__ import annotations

import base64
import socket
import tempfile
from pathlib import Path

import pytest
import yaml
from harvester_quota.generic import config
from harvester_quota.generic.rest import proxy_and_headers
from harvester_quota.main import main
from harvester_quota.testbench.localcluster.pki import CertificateAuthority

PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy")


@pytest.fixture(autouse=True)
def _no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def kubeconfig(tmp_path: Path, server: str, **cluster: str) -> Path:
    path = tmp_path / "kubeconfig"
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {"server": server, "insecure-skip-tls-verify": True, **cluster},
            }
        ],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    path.write_text(yaml.safe_dump(document))
    return path


def test_a_clusters_proxy_url_and_tls_server_name_are_read_from_the_kubeconfig(
    tmp_path: Path,
) -> None:
    loaded = config.load(
        kubeconfig(
            tmp_path,
            "https://10.0.0.1:6443",
            **{"proxy-url": "http://proxy.corp:3128", "tls-server-name": "api.corp"},
        )
    )
    assert (loaded.proxy, loaded.tls_server_name) == ("http://proxy.corp:3128", "api.corp")


def test_a_clusters_proxy_url_wins_over_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://env-proxy:8080")
    path = kubeconfig(tmp_path, "https://10.0.0.1:6443", **{"proxy-url": "http://mine:3128"})
    assert config.load(path).proxy == "http://mine:3128"


def test_without_proxy_url_the_environments_proxy_is_used_unless_no_proxy_names_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = kubeconfig(tmp_path, "https://api.corp.example:6443")
    assert config.load(path).proxy is None
    monkeypatch.setenv("https_proxy", "env-proxy:8080")
    assert config.load(path).proxy == "http://env-proxy:8080"
    monkeypatch.setenv("NO_PROXY", "corp.example")
    assert config.load(path).proxy is None


def test_a_socks_proxy_url_is_refused_by_name_rather_than_ignored(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path, "https://10.0.0.1:6443", **{"proxy-url": "socks5://p:1080"})
    with pytest.raises(config.ConfigError, match="socks5://p:1080"):
        config.load(path)


ENVIRONMENT = {"HTTPS_PROXY": "http://p:3128", "HTTP_PROXY": "http://plain:3128"}


@pytest.mark.parametrize(
    ("url", "no_proxy", "proxy"),
    [
        ("https://api.example:6443", "", "http://p:3128"),
        ("http://api.example:8080", "", "http://plain:3128"),
        ("https://127.0.0.1:6443", "", None),
        ("https://[::1]:6443", "", None),
        ("https://localhost:6443", "", None),
        ("https://api.example:6443", "*", None),
        ("https://api.example:6443", "other, api.example", None),
        ("https://x.api.example:6443", "api.example", None),
        ("https://api.example:6443", ".api.example", "http://p:3128"),
        ("https://x.api.example:6443", ".api.example", None),
        ("https://notapi.example:6443", "api.example", "http://p:3128"),
        ("https://10.1.2.3:6443", "10.0.0.0/8", None),
        ("https://11.1.2.3:6443", "10.0.0.0/8", "http://p:3128"),
        ("https://10.1.2.3:6443", "10.1.2.3", None),
        ("https://api.example:6443", "api.example:443", "http://p:3128"),
        ("https://api.example:6443", "api.example:6443", None),
        ("https://[fd00::1]:6443", "fd00::/8", None),
    ],
)
def test_the_environments_proxy_for_a_url_as_go_decides_it(
    url: str, no_proxy: str, proxy: str | None
) -> None:
    assert config.proxy_from_environment(url, {**ENVIRONMENT, "NO_PROXY": no_proxy}) == proxy


def test_a_proxy_urls_user_info_becomes_a_proxy_authorization_header() -> None:
    url, headers = proxy_and_headers("http://alice:s3cret@proxy:3128")
    assert url == "http://proxy:3128"
    assert headers == {"Proxy-Authorization": "Basic " + base64.b64encode(b"alice:s3cret").decode()}
    assert proxy_and_headers("http://proxy:3128") == ("http://proxy:3128", None)


def closed_port() -> int:
    """A port nothing listens on: bound, then closed (the kernel refuses connections to it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("command", [["explain", "tenant-a"], ["explain", "-n", "tenant-a"]])
def test_explain_against_a_closed_port_says_so_in_one_line_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    path = kubeconfig(tmp_path, f"https://127.0.0.1:{closed_port()}")
    assert main([*command, "--kubeconfig", str(path)]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith("harvester-quota explain: cannot reach the API server: GET ")
    assert "Traceback" not in captured.err and captured.out == ""


def test_explain_without_a_namespace_or_with_two_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(kubeconfig(tmp_path, f"https://127.0.0.1:{closed_port()}"))
    assert main(["explain", "--kubeconfig", path]) == 2
    assert "a namespace is needed" in capsys.readouterr().err
    assert main(["explain", "a", "-n", "b", "--kubeconfig", path]) == 2
    assert "two namespaces" in capsys.readouterr().err


def test_a_kubeconfigs_embedded_key_leaves_no_copy_in_the_temporary_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The `kubernetes` package copies embedded certificate data (the client's private key too)
    to temporary files and removes them only at a clean interpreter exit: a killed process left
    private keys in /tmp. Once loaded, none is left, and a second load still works."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    pair = CertificateAuthority.create().issue("someone", client=True)
    path = kubeconfig(tmp_path, "https://10.0.0.1:6443")
    document = yaml.safe_load(path.read_text())
    document["users"][0]["user"] = {
        "client-certificate-data": base64.b64encode(pair.cert_pem).decode(),
        "client-key-data": base64.b64encode(pair.key_pem).decode(),
    }
    path.write_text(yaml.safe_dump(document))
    for _ in range(2):
        loaded = config.load(path)
        assert loaded.ssl_context is not None
        assert list(temporary.iterdir()) == []
