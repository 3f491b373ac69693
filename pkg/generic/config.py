"""Where the API server is and how to authenticate: kubeconfig or in-cluster.

The `kubernetes` package's loaders understand every kubeconfig variant (client certificates, tokens,
exec plugins, auth providers) and the in-cluster service-account files, including token rotation;
we reuse them for that alone and keep none of that package's model classes. Its `Configuration`
object stays behind the bearer-token callable, so an expiring token is refreshed the way the
official client does it. The package keeps the token under ``api_key["BearerToken"]`` (an
earlier release of ours read "authorization" and so sent no token at all); a kubeconfig
``tokenFile`` is re-read every minute, as kubectl does, which the package does not do.

The way to the server is kubectl's too: a cluster's ``proxy-url`` wins, else the proxy
environment (HTTPS_PROXY, HTTP_PROXY, NO_PROXY, upper or lower case) read as Go's net/http
reads it (`proxy_from_environment`); a cluster's ``tls-server-name`` is the name the serving
certificate is checked against (and sent as SNI) instead of the URL's host.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import os
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .clock import REAL_CLOCK, Clock

log = logging.getLogger(__name__)

IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"


class ConfigError(Exception):
    """No usable configuration: the message says which source was tried and why it failed."""


@dataclass
class ClientConfig:
    """Everything a request needs: the server URL, the TLS context, the Authorization header,
    and how to get there: `proxy` (an http:// or https:// proxy URL; None: straight) and
    `tls_server_name` (the name the server's certificate must carry; None: the URL's host)."""

    host: str
    ssl_context: ssl.SSLContext | bool
    authorization: Callable[[], str | None] = field(default=lambda: None)
    source: str = ""
    proxy: str | None = None
    tls_server_name: str | None = None


def client_ssl_context(
    ca_file: str | Path | None,
    cert_file: str | Path | None,
    key_file: str | Path | None,
    verify: bool,
) -> ssl.SSLContext:
    """A TLS 1.2+ client context trusting ``ca_file`` (the system's CAs when None), presenting
    the client certificate when both files are given; ``verify=False`` checks no server."""
    context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert_file and key_file:
        context.load_cert_chain(str(cert_file), str(key_file))
    return context


TOKEN_FILE_REREAD = 60.0
"""Seconds a token read from a file is used before the file is read again (client-go's cached
file token source reads at most once a minute): a rotated service-account token is picked up."""


class TokenFile:
    """A bearer token kept in a file and re-read periodically, as kubectl does with `tokenFile`.

    Safe to call from one event loop; a file that cannot be read keeps the last good token (and
    says so once per failure), so a rotation in progress never logs the process out.
    """

    def __init__(
        self, path: str | Path, *, period: float = TOKEN_FILE_REREAD, clock: Clock = REAL_CLOCK
    ) -> None:
        self.path = Path(path)
        self._period = period
        self._clock = clock
        self._token: str | None = None
        self._read_at = -math.inf

    def header(self) -> str | None:
        """``Bearer <token>``, from a read at most `period` seconds old."""
        now = self._clock.monotonic()
        if now - self._read_at >= self._period:
            self._read_at = now
            try:
                text = self.path.read_text().strip()
            except OSError as error:
                log.warning(
                    "cannot read token file %s (%s); keeping the last token", self.path, error
                )
            else:
                if text:
                    self._token = text
        return f"Bearer {self._token}" if self._token else None


def _bearer(value: str | None) -> str | None:
    """The `kubernetes` package keeps "Bearer x" (kubeconfig) or "bearer x" (in-cluster) under
    api_key["BearerToken"], and "Basic x" for username/password: one canonical header."""
    if not value:
        return None
    scheme, _, credentials = value.partition(" ")
    if not credentials:
        return f"Bearer {value}"
    return f"{scheme.capitalize()} {credentials}"


def _from_kubernetes_configuration(
    configuration: Any, source: str, token_file: TokenFile | None = None
) -> ClientConfig:
    """Turns the `kubernetes` package's Configuration into ours, keeping its token refresh
    (exec plugins, auth providers and the in-cluster token file refresh through its hook)."""
    context = client_ssl_context(
        configuration.ssl_ca_cert,
        configuration.cert_file,
        configuration.key_file,
        bool(configuration.verify_ssl),
    )

    def authorization() -> str | None:
        if token_file is not None:
            return token_file.header()
        return _bearer(configuration.get_api_key_with_prefix("BearerToken"))

    host = str(configuration.host).rstrip("/")
    return ClientConfig(
        host=host,
        ssl_context=context,
        authorization=authorization,
        source=source,
        proxy=_proxy(configuration.proxy, host, os.environ),
        tls_server_name=getattr(configuration, "tls_server_name", None) or None,
    )


PROXY_SCHEMES = ("http", "https")
"""The proxies aiohttp speaks (a CONNECT tunnel through an HTTP or HTTPS proxy); kubectl also
takes socks5://, which is refused here by name rather than ignored."""


def _proxy(proxy_url: str | None, host: str, environ: Mapping[str, str]) -> str | None:
    """The kubeconfig's proxy-url if it names one (checked), else the environment's for `host`;
    ConfigError for a proxy-url we cannot use."""
    if not proxy_url:
        return proxy_from_environment(host, environ)
    scheme = urlsplit(proxy_url).scheme
    if scheme not in PROXY_SCHEMES or not urlsplit(proxy_url).hostname:
        raise ConfigError(
            f"proxy-url {proxy_url!r}: only http:// and https:// proxies are supported"
        )
    return proxy_url


def _env(environ: Mapping[str, str], name: str) -> str:
    """An environment variable by its upper-case name, else its lower-case one (Go's order)."""
    return environ.get(name) or environ.get(name.lower()) or ""


def proxy_from_environment(url: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The proxy a request to `url` goes through per the environment, as Go's net/http decides
    it for kubectl: HTTPS_PROXY for an https URL, HTTP_PROXY for http (a value without a
    scheme is http://); None when the variable is unset, the host is localhost or a loopback
    address (never proxied), or NO_PROXY names it. `environ` defaults to os.environ."""
    environ = os.environ if environ is None else environ
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    proxy = _env(environ, "HTTPS_PROXY" if parts.scheme == "https" else "HTTP_PROXY").strip()
    if not proxy or not host or _is_loopback(host):
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if no_proxy_matches(_env(environ, "NO_PROXY"), host, port):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def no_proxy_matches(no_proxy: str, host: str, port: int) -> bool:
    """Whether NO_PROXY's list (comma separated) exempts `host`:`port`: ``*`` exempts all; an
    IP address or a CIDR block matches the host's address; a name matches itself and its
    subdomains (``.name``: subdomains only); an entry with ``:port`` only that port."""
    for raw in no_proxy.split(","):
        entry = raw.strip().lower()
        if entry == "*":
            return True
        if entry and _entry_matches(entry, host, port):
            return True
    return False


def _entry_matches(entry: str, host: str, port: int) -> bool:
    if "/" in entry:
        return _in_network(entry, host)
    name, entry_port = _split_port(entry)
    if entry_port is not None and entry_port != port:
        return False
    if name.startswith("."):
        return host.endswith(name)
    return host == name or host.endswith("." + name)


def _split_port(entry: str) -> tuple[str, int | None]:
    """``name:port``, ``[v6]:port`` or a bare name or address (an IPv6 one has several colons)."""
    if entry.startswith("["):
        address, _, rest = entry[1:].partition("]")
        return address, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    name, colon, port = entry.rpartition(":")
    if colon and port.isdigit() and ":" not in name:
        return name, int(port)
    return entry, None


def _in_network(cidr: str, host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")) in ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return False


def _kubeconfig_token_file(config_file: str, context: str | None) -> TokenFile | None:
    """The active user's `tokenFile`, if the kubeconfig names one (and no inline `token`, which
    kubectl prefers), resolved against the kubeconfig's folder."""
    from kubernetes import config as kube_config  # noqa: PLC0415

    try:
        loader = kube_config.kube_config._get_kube_config_loader(  # type: ignore[no-untyped-call]
            filename=config_file, active_context=context
        )
        user = loader._user
        if not user or user.safe_get("token") or not user.safe_get("tokenFile"):
            return None
        path = Path(str(user.safe_get("tokenFile")))
        if not path.is_absolute():
            path = Path(loader._get_base_path(user.path)) / path
    except (kube_config.ConfigException, AttributeError, OSError, ValueError) as error:
        log.debug("no tokenFile found in %s: %s", config_file, error)
        return None
    return TokenFile(path)


def load(kubeconfig: str | Path | None = None, context: str | None = None) -> ClientConfig:
    """Loads the configuration the way kubectl looks for it.

    An explicit ``kubeconfig`` wins; then $KUBECONFIG; then the in-cluster service account when
    running in a pod; then ~/.kube/config.
    """
    from kubernetes import config as kube_config  # noqa: PLC0415 - heavy import, needed once

    configuration = _configuration_without_proxy()
    explicit = str(kubeconfig) if kubeconfig else os.environ.get("KUBECONFIG")
    in_cluster = not explicit and bool(os.environ.get(IN_CLUSTER_ENV))
    config_file = explicit or str(Path.home() / ".kube" / "config")
    try:
        if in_cluster:
            return load_in_cluster()
        try:
            kube_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=config_file, context=context, client_configuration=configuration
            )
            return _from_kubernetes_configuration(
                configuration,
                f"kubeconfig {config_file}",
                _kubeconfig_token_file(config_file, context),
            )
        finally:
            _remove_key_copies(kube_config)
    except (kube_config.ConfigException, OSError, ValueError) as error:
        where = "the in-cluster service account" if in_cluster else config_file
        raise ConfigError(
            f"cannot load the API server configuration from {where}: {error}"
        ) from error


def _remove_key_copies(kube_config: Any) -> None:
    """Removes the files the `kubernetes` package wrote a kubeconfig's embedded data to
    (certificate-authority-data, client-certificate-data, client-key-data: a copy of the private
    key in the temporary folder), once our TLS context holds them: the package removes them only
    when the interpreter exits normally, so a process killed, or a test session, left private
    keys behind in /tmp. Its cache of those files goes with them (a later load writes afresh).
    A release of the package without that (private) function leaves them, as before, rather than
    failing the load."""
    cleanup = getattr(kube_config.kube_config, "_cleanup_temp_files", None)
    if callable(cleanup):
        cleanup()
    else:
        log.debug("the kubernetes package has no _cleanup_temp_files: its temporary files stay")


def _configuration_without_proxy() -> Any:
    """The `kubernetes` package's Configuration with its proxy unset: recent releases fill it
    from the environment (by urllib's rules, not Go's), which would hide whether the kubeconfig
    named one; `_proxy` decides between the kubeconfig's proxy-url and the environment."""
    from kubernetes.client import Configuration  # noqa: PLC0415

    configuration = Configuration()
    configuration.proxy = None
    return configuration


SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def load_in_cluster(
    token_file: str | Path = SERVICE_ACCOUNT_DIR / "token",
    ca_file: str | Path = SERVICE_ACCOUNT_DIR / "ca.crt",
) -> ClientConfig:
    """The in-cluster configuration: $KUBERNETES_SERVICE_HOST/PORT, the pod's service-account
    token (re-read every minute: projected tokens rotate) and CA. The paths are parameters so a
    test can stand in for a pod."""
    from kubernetes import config as kube_config  # noqa: PLC0415
    from kubernetes.config import incluster_config  # noqa: PLC0415

    configuration = _configuration_without_proxy()
    loader = incluster_config.InClusterConfigLoader(  # type: ignore[no-untyped-call]
        token_filename=str(token_file), cert_filename=str(ca_file)
    )
    try:
        loader.load_and_set(configuration)  # type: ignore[no-untyped-call]
    except (kube_config.ConfigException, OSError) as error:
        raise ConfigError(f"cannot load the in-cluster configuration: {error}") from error
    return _from_kubernetes_configuration(configuration, "in-cluster service account")
