"""The webhook's TLS: serving certificate and key re-read when they change on disk, and the
client certificate check that lets only the API server connect and call /validate/*
(ReloadingTLS.verify_clients, ClientAuth)."""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509

from ..generic.clock import Clock

log = logging.getLogger(__name__)


CERT_RELOAD_INTERVAL = 10.0


REFUSAL_LOG_INTERVAL = 10.0
"""Seconds between two warnings about clients refused for their certificate (a flood logs one
line per interval, with the count of the others)."""


class ReloadingTLS:
    """A server TLS context whose certificate, and the CA that client certificates are verified
    against once `verify_clients` was called, follow the files on disk.

    `context` is the one the server listens with. A reload builds a whole new context from the
    files, and `context` hands every new connection over to the newest one during its handshake
    (its SNI callback, which OpenSSL calls for every ClientHello, with or without a server name):
    a CA loaded into a context can never be taken out of it, so a replaced client CA is trusted by
    no connection made after the reload. Open connections keep the context they began with.
    """

    def __init__(self, cert_file: Path, key_file: Path) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self.client_ca_file: Path | None = None
        self.context = self._new_context()
        self.context.sni_callback = self._hand_over
        self._current = self.context
        self._stamp: tuple[float, ...] | None = None
        self.not_before = self.not_after = 0.0
        """When the certificate being served became valid and expires (Unix seconds); 0 if it
        cannot be read."""
        self.reload()

    def verify_clients(self, ca_file: Path) -> None:
        """From now on every client must present a certificate that verifies against `ca_file`,
        else its handshake fails: a client without one never holds a connection past the
        handshake (the kubelet's probes go to the plain metrics port). Raises if `ca_file` cannot
        be loaded now; later changes to it are reloaded like the serving pair."""
        self.client_ca_file = ca_file
        self._stamp = None
        self.reload()

    def _mtimes(self) -> tuple[float, ...]:
        files = [self.cert_file, self.key_file]
        if self.client_ca_file is not None:
            files.append(self.client_ca_file)
        return tuple(os.stat(path).st_mtime for path in files)

    def reload(self) -> bool:
        """Loads the files if they changed since last time; a bad set keeps the old one (at the
        first load, it raises)."""
        first = self._stamp is None
        try:
            stamp = self._mtimes()
        except OSError as error:
            if first:
                raise
            log.error("cannot read the serving certificate or the client CA: %s", error)
            return False
        if stamp == self._stamp:
            return False
        try:
            # The first load fills the listening context itself, the later ones a fresh context.
            context = self.context if first else self._new_context()
            self._load(context)
        except (OSError, ssl.SSLError) as error:
            if first:
                raise
            log.error("new certificate files not loaded, keeping the old ones: %s", error)
            return False
        self._current = context
        self._stamp = stamp
        self.not_before, self.not_after = _validity(self.cert_file)
        log.info(
            "serving certificate loaded from %s%s",
            self.cert_file,
            f", client CA from {self.client_ca_file}" if self.client_ca_file else "",
        )
        return True

    @staticmethod
    def _new_context() -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context

    def _load(self, context: ssl.SSLContext) -> None:
        context.load_cert_chain(self.cert_file, self.key_file)
        if self.client_ca_file is not None:
            context.load_verify_locations(cafile=str(self.client_ca_file))
            context.verify_mode = ssl.CERT_REQUIRED

    def _hand_over(
        self, connection: ssl.SSLObject, _server_name: str | None, _context: ssl.SSLContext
    ) -> None:
        if self._current is not self.context:
            connection.context = self._current


@dataclass(frozen=True)
class ClientAuth:
    """Who may ask for admissions: a client whose TLS handshake presented a certificate that
    verified against `ca_file` (ReloadingTLS.verify_clients: without one there is no
    connection), with a subject common name among `names` when names are given. The API server
    presents one when its AdmissionConfiguration gives it a kubeconfig user for the webhook
    (docs/operations.md, "Client authentication"); no tenant pod has its key."""

    ca_file: Path
    names: frozenset[str] = frozenset()

    def refusal(self, peercert: Mapping[str, Any] | None) -> tuple[int, str] | None:
        """None if a client with this verified certificate (None: it presented none) may be
        answered; else the HTTP status (401 without a certificate, which the handshake already
        refuses; 403 for a name not accepted) and a short reason."""
        if not peercert:
            return 401, "a client certificate is required"
        if self.names and common_name(peercert) not in self.names:
            return 403, "this client certificate is not accepted"
        return None


def common_name(peercert: Mapping[str, Any]) -> str:
    """The subject's common name of a certificate as ssl's getpeercert() returns it ("" if none)."""
    for rdn in peercert.get("subject") or ():
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return ""


class RefusalLog:
    """Warns about refused clients without flooding the log: the first refusal at once, then at
    most one line per `interval` seconds of `clock`, counting the refusals it did not log.
    `what` names what is refused in the line ("an admission request", "a connection")."""

    def __init__(
        self,
        clock: Clock,
        interval: float = REFUSAL_LOG_INTERVAL,
        *,
        what: str = "an admission request",
    ) -> None:
        self._clock, self.interval, self.what = clock, interval, what
        self._last: float | None = None
        self.unlogged = 0

    def refused(self, peer: str, reason: str) -> bool:
        """Records one refusal of `peer`; True if it was logged."""
        now = self._clock.monotonic()
        if self._last is not None and now - self._last < self.interval:
            self.unlogged += 1
            return False
        log.warning(
            "refused %s from %s: %s%s",
            self.what,
            peer,
            reason,
            f" ({self.unlogged} more refused since the last such line)" if self.unlogged else "",
        )
        self._last, self.unlogged = now, 0
        return True


def _validity(cert_file: Path) -> tuple[float, float]:
    """notBefore and notAfter of the first certificate in `cert_file` (Unix seconds), zeros if
    it cannot be read."""
    try:
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    except (OSError, ValueError):
        return 0.0, 0.0
    return cert.not_valid_before_utc.timestamp(), cert.not_valid_after_utc.timestamp()
