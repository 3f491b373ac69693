"""Where the API server is and how to authenticate: kubeconfig or in-cluster.

The `kubernetes` package's loaders understand every kubeconfig variant (client certificates, tokens,
exec plugins, auth providers) and the in-cluster service-account files, including token rotation;
we reuse them for that alone and keep none of that package's model classes. Its `Configuration`
object stays behind the bearer-token callable, so an expiring token is refreshed the way the
official client does it.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"


class ConfigError(Exception):
    """No usable configuration: the message says which source was tried and why it failed."""


@dataclass
class ClientConfig:
    """Everything a request needs: the server URL, the TLS context and the Authorization header."""

    host: str
    ssl_context: ssl.SSLContext | bool
    authorization: Callable[[], str | None] = field(default=lambda: None)
    source: str = ""

    @classmethod
    def from_files(
        cls,
        host: str,
        *,
        ca_file: str | Path | None,
        cert_file: str | Path | None = None,
        key_file: str | Path | None = None,
        token: str | None = None,
        verify: bool = True,
    ) -> ClientConfig:
        """A config from plain files: what the local cluster and most tests use."""
        context = _ssl_context(ca_file, cert_file, key_file, verify)
        bearer = f"Bearer {token}" if token else None
        return cls(host=host.rstrip("/"), ssl_context=context, authorization=lambda: bearer)


def _ssl_context(
    ca_file: str | Path | None,
    cert_file: str | Path | None,
    key_file: str | Path | None,
    verify: bool,
) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert_file and key_file:
        context.load_cert_chain(str(cert_file), str(key_file))
    return context


def _from_kubernetes_configuration(configuration: Any, source: str) -> ClientConfig:
    """Turns the `kubernetes` package's Configuration into ours, keeping its token refresh."""
    context = _ssl_context(
        configuration.ssl_ca_cert,
        configuration.cert_file,
        configuration.key_file,
        bool(configuration.verify_ssl),
    )

    def authorization() -> str | None:
        header: str | None = configuration.get_api_key_with_prefix("authorization")
        return header or None

    return ClientConfig(
        host=str(configuration.host).rstrip("/"),
        ssl_context=context,
        authorization=authorization,
        source=source,
    )


def load(kubeconfig: str | Path | None = None, context: str | None = None) -> ClientConfig:
    """Loads the configuration the way kubectl looks for it.

    An explicit ``kubeconfig`` wins; then $KUBECONFIG; then the in-cluster service account when
    running in a pod; then ~/.kube/config.
    """
    from kubernetes import config as kube_config  # noqa: PLC0415 - heavy import, needed once
    from kubernetes.client import Configuration  # noqa: PLC0415

    configuration = Configuration()
    explicit = str(kubeconfig) if kubeconfig else os.environ.get("KUBECONFIG")
    in_cluster = not explicit and bool(os.environ.get(IN_CLUSTER_ENV))
    config_file = explicit or str(Path.home() / ".kube" / "config")
    try:
        if in_cluster:
            kube_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            return _from_kubernetes_configuration(configuration, "in-cluster service account")
        kube_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=config_file, context=context, client_configuration=configuration
        )
        return _from_kubernetes_configuration(configuration, f"kubeconfig {config_file}")
    except (kube_config.ConfigException, OSError, ValueError) as error:
        where = "the in-cluster service account" if in_cluster else config_file
        raise ConfigError(
            f"cannot load the API server configuration from {where}: {error}"
        ) from error
