"""Typed API errors, built from the API server's Status object.

Callers branch on the type (NotFound, Conflict, ...) rather than on numbers, and every error keeps
the API server's own message, because that message ("exceeded quota: ..., requested: ...") is often
exactly what an operator needs to read in an Event or a log line.
"""

from __future__ import annotations

from typing import Any, Final

NAMESPACE_TERMINATING = "NamespaceTerminating"
"""The Status cause the API server gives for a create refused in a namespace being deleted."""


class ApiError(Exception):
    """An error answer from the API server (or the failure to get one)."""

    status: int = 0

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str = "",
        details: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        self.reason = reason
        self.details = details or {}
        self.retry_after = retry_after

    def __str__(self) -> str:
        reason = f" {self.reason}" if self.reason else ""
        return f"{self.status}{reason}: {self.message}"

    def has_cause(self, cause_type: str) -> bool:
        """Whether the Status lists a cause of this type (e.g. ResourceVersionTooLarge)."""
        causes = self.details.get("causes") or []
        return any(isinstance(c, dict) and c.get("reason") == cause_type for c in causes)


class BadRequest(ApiError):
    status = 400


class Unauthorized(ApiError):
    status = 401


class Forbidden(ApiError):
    status = 403


class NotFound(ApiError):
    status = 404


class MethodNotAllowed(ApiError):
    status = 405


class Conflict(ApiError):
    """409 with reason Conflict: the object changed since it was read (optimistic concurrency)."""

    status = 409


class AlreadyExists(ApiError):
    """409 with reason AlreadyExists: a create found an object of that name."""

    status = 409


class Gone(ApiError):
    """410 Gone / reason Expired: the resourceVersion asked for has been compacted away."""

    status = 410


class Invalid(ApiError):
    status = 422


class TooManyRequests(ApiError):
    """429: back off for ``retry_after`` seconds (the Retry-After header) before trying again."""

    status = 429


class ServerError(ApiError):
    """5xx: the API server (or something before it) failed; usually worth retrying."""

    status = 500


class ServerTimeout(ApiError):
    """504, or a Status with reason Timeout."""

    status = 504


class ConnectionFailed(ApiError):
    """No answer at all: refused, reset, DNS, TLS, or a client-side timeout."""

    status = 0


class ConnectionRefused(ConnectionFailed):
    """The connection could not be opened at all (the API server is down or restarting)."""


class DecodeError(ApiError):
    """The server sent something that is not the JSON we expected (truncated, wrong shape)."""

    status = 0


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
    504: ServerTimeout,
}


def from_status(
    status: int, body: dict[str, Any] | None, retry_after: float | None = None
) -> ApiError:
    """The typed error for an HTTP status and its (possibly absent) Status body."""
    body = body or {}
    reason = str(body.get("reason") or "")
    message = str(body.get("message") or f"HTTP {status}")
    details = body.get("details") if isinstance(body.get("details"), dict) else None
    code = int(body.get("code") or status)
    cls: type[ApiError]
    if code == 409 and reason == "AlreadyExists":
        cls = AlreadyExists
    elif reason == "Expired" or code == 410:
        cls = Gone
    elif reason == "Timeout" and code != 429:
        cls = ServerTimeout
    elif code >= 500 and code != 504:
        cls = ServerError
    else:
        cls = _BY_STATUS.get(code, ApiError)
    return cls(message, status=code, reason=reason, details=details, retry_after=retry_after)


def is_resource_version_too_large(error: ApiError) -> bool:
    """The server has not yet seen the resourceVersion asked for (a lagging watch cache)."""
    if error.has_cause("ResourceVersionTooLarge"):
        return True
    return isinstance(error, ServerTimeout) and "Too large resource version" in error.message


RANCHER_DENIAL: Final = "managed by Rancher"
"""What rancher-webhook says when it refuses a write to a quota it protects ("users are
forbidden from changing resources managed by Rancher")."""


def denied_by_rancher(error: BaseException) -> bool:
    """Whether Rancher's webhook refused the write: rancher-webhook answers 400 BadRequest (a
    ValidatingAdmissionPolicy in its place would answer 403), saying the object is managed by
    Rancher. Any other refusal (RBAC, another policy) is not Rancher's and must not change how
    we write."""
    return isinstance(error, Forbidden | BadRequest) and RANCHER_DENIAL in str(error)
