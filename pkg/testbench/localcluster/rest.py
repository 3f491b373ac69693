"""A small synchronous JSON client for the local cluster's API server.

Bootstrapping the cluster (readiness, fake nodes) and the first demo need a handful of requests made
with the admin client certificate before any controller runs; this is all they need. Controllers use
the asynchronous client in ``harvester_quota.generic``.
"""

from __future__ import annotations

import functools
import http.client
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson

from .errors import ClusterError

DEFAULT_TIMEOUT = 10.0


class ApiError(Exception):
    """A non-2xx answer; ``message`` is the API server's own Status message."""

    def __init__(self, status: int, reason: str, message: str, body: dict[str, Any]) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body


@functools.lru_cache(maxsize=32)
def _context_of(ca: str, cert: str, key: str, versions: tuple[int, ...]) -> ssl.SSLContext:
    """The client context of `ca`, `cert` and `key` as they were at `versions` (their
    modification times); a context is safe to share between connections and threads."""
    del versions  # part of the cache key only
    context = ssl.create_default_context(cafile=ca)
    context.load_cert_chain(cert, key)
    return context


@dataclass
class RestClient:
    """HTTPS to one API server with a client certificate, verifying the server against ``ca``."""

    host: str
    port: int
    ca: Path
    cert: Path
    key: Path
    timeout: float = DEFAULT_TIMEOUT

    def _context(self) -> ssl.SSLContext:
        """A TLS context of the three files as they are now: made again only when one of them
        changed (a context took 2.5 ms of CPU, and tests poll with a request every 0.2 s)."""
        files = tuple(path.stat().st_mtime_ns for path in (self.ca, self.cert, self.key))
        return _context_of(str(self.ca), str(self.cert), str(self.key), files)

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        query: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """Sends one request and returns the decoded JSON; raises ApiError on an error status."""
        if query:
            path = f"{path}?{urlencode(query)}"
        connection = http.client.HTTPSConnection(
            self.host, self.port, context=self._context(), timeout=self.timeout
        )
        try:
            payload = orjson.dumps(body) if body is not None else None
            headers = {"Accept": "application/json"}
            if payload is not None:
                headers["Content-Type"] = content_type
            connection.request(method, path, body=payload, headers=headers)
            response = connection.getresponse()
            raw = response.read()
        finally:
            connection.close()
        decoded = _decode(raw)
        if response.status >= 300:
            message = str(decoded.get("message") or raw[:500].decode(errors="replace"))
            raise ApiError(response.status, str(decoded.get("reason", "")), message, decoded)
        return decoded

    def get(self, path: str, **query: str) -> dict[str, Any]:
        return self.request("GET", path, query=query or None)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", path, body)

    def put(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("PUT", path, body)

    def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("PATCH", path, body, content_type="application/merge-patch+json")

    def delete(self, path: str, **query: str) -> dict[str, Any]:
        return self.request("DELETE", path, query=query or None)

    def post_unless_exists(
        self, path: str, body: dict[str, Any], what: str
    ) -> dict[str, Any] | None:
        """POSTs ``body`` to ``path``: the created object, or None if it exists already (409). Any
        other refusal raises ClusterError("<what> failed: ...")."""
        try:
            return self.post(path, body)
        except ApiError as error:
            if error.status != 409:
                raise ClusterError(f"{what} failed: {error}") from error
        return None

    def exists(self, path: str) -> bool:
        """True if GET ``path`` succeeds, False on 404 (other errors propagate)."""
        try:
            self.get(path)
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    def healthy(self, path: str = "/readyz") -> bool:
        """True if the health endpoint answers 200; any error, including refusal, is False."""
        try:
            connection = http.client.HTTPSConnection(
                self.host, self.port, context=self._context(), timeout=2.0
            )
            try:
                connection.request("GET", path)
                return connection.getresponse().status == 200
            finally:
                connection.close()
        except (OSError, http.client.HTTPException):
            return False


def _decode(raw: bytes) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        decoded = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}
    return decoded if isinstance(decoded, dict) else {"items": decoded}
