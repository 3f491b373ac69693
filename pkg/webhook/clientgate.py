"""Who may send admission reviews: the API server's client certificate, checked before a body is
read (docs/security.md, row 4).

Without client authentication every client is answered. With it, the TLS handshake already
requires a certificate from the configured CA (tls.ReloadingTLS.verify_clients); the gate then
accepts only the names `ClientAuth` accepts, refusing the others with the status it gives and a
log line that does not flood (RefusalLog). Called on the event loop only.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from ..generic.clock import Clock
from .connections import CLOSE_HEADERS
from .metrics import WebhookMetrics
from .tls import ClientAuth, RefusalLog, ReloadingTLS, common_name


class ClientGate:
    """The client check of the admission endpoints; `refusals` counts what it refused."""

    def __init__(
        self,
        tls: ReloadingTLS | None,
        client_auth: ClientAuth | None,
        metrics: WebhookMetrics,
        clock: Clock,
    ) -> None:
        """Raises ValueError for `client_auth` without `tls` (certificates need TLS)."""
        if client_auth is not None:
            if tls is None:
                raise ValueError("client certificates need TLS")
            tls.verify_clients(client_auth.ca_file)
        self.client_auth = client_auth
        self.metrics = metrics
        self.refusals = RefusalLog(clock)

    def vouches(self, transport: asyncio.BaseTransport) -> bool:
        """Whether the client certificate of a connection (verified by its handshake) is one
        the gate accepts."""
        assert self.client_auth is not None
        return self.client_auth.refusal(transport.get_extra_info("peercert")) is None

    def refuse(self, endpoint: str, http: web.Request) -> web.Response | None:
        """The answer to a client the gate does not accept (its body left unread, its
        connection closed), logged without flooding; None for an accepted one."""
        if self.client_auth is None:
            return None
        transport = http.transport
        peercert = transport.get_extra_info("peercert") if transport is not None else None
        refusal = self.client_auth.refusal(peercert)
        if refusal is None:
            return None
        status, reason = refusal
        self.metrics.requests.labels(
            endpoint, "unauthenticated" if status == 401 else "forbidden"
        ).inc()
        peername = transport.get_extra_info("peername") if transport is not None else None
        peer = f"{peername[0]}:{peername[1]}" if peername else "an unknown address"
        subject = f" (certificate CN {common_name(peercert)!r})" if peercert else ""
        self.refusals.refused(peer, f"{endpoint}: {reason}{subject}")
        return web.Response(status=status, text=reason, headers=CLOSE_HEADERS)
