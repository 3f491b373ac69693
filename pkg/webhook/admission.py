"""AdmissionReview in and out (admission.k8s.io/v1), and the denial every validator returns.

A request we cannot parse is never allowed silently and never crashes the server: if it has a
uid we answer with a denial that says what was wrong; if it has none there is nothing to answer
and we return HTTP 400 with the reason, which the API server reports (and its failurePolicy
decides about).

A review is decoded with deepjson's depth cut, never refused for its nesting: a tenant's JSON
deeper than orjson decodes in a field KubeVirt keeps unknown (a VM's clock) made the whole review
undecodable, the answer an HTTP 400, and the VM rule (failurePolicy Ignore) let the VM through
unchecked (security.md A2). What is cut lies deeper than any field a validator reads.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import orjson

from ..generic import deepjson
from ..generic.meta import metadata

log = logging.getLogger(__name__)


class Denied(Exception):
    """Raised by a validator: the request is refused with this message (HTTP 403 in the review)."""

    def __init__(self, message: str, code: int = 403) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class BadReview(ValueError):
    """The body is not an AdmissionReview we can answer."""

    def __init__(self, message: str, uid: str | None = None) -> None:
        super().__init__(message)
        self.uid = uid


@dataclass(frozen=True)
class Request:
    """The parts of an AdmissionRequest the validators use."""

    uid: str
    kind: str
    operation: str
    namespace: str
    name: str
    username: str
    groups: tuple[str, ...]
    obj: dict[str, Any] | None
    old: dict[str, Any] | None
    dry_run: bool
    sub_resource: str = ""
    """The request's subResource ("resize" for an in-place resize of a pod), "" for none."""


def parse_review(body: bytes) -> Request:
    """Parses an AdmissionReview; raises BadReview naming what is missing or malformed."""
    try:
        review, cut = deepjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise BadReview(f"the body is not JSON: {error}") from error
    if cut:
        log.warning(
            "an AdmissionReview: %d values nested deeper than %d levels cut before validating it",
            cut,
            deepjson.MAX_DEPTH,
        )
    if not isinstance(review, dict):
        raise BadReview("the body is not a JSON object")
    request = review.get("request")
    if not isinstance(request, dict):
        raise BadReview("the AdmissionReview has no request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("the AdmissionReview request has no uid")
    kind = request.get("kind")
    user_info = request.get("userInfo")
    user: dict[str, Any] = user_info if isinstance(user_info, dict) else {}
    obj, old = request.get("object"), request.get("oldObject")
    if not isinstance(kind, dict) or not isinstance(kind.get("kind"), str):
        raise BadReview("the request has no kind", uid)
    for label, value in (("object", obj), ("oldObject", old)):
        if value is not None and not isinstance(value, dict):
            raise BadReview(f"the request's {label} is not an object", uid)
        problem = _metadata_problem(value)
        if problem:
            raise BadReview(f"the request's {label} {problem}", uid)
    groups = user.get("groups") or []
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise BadReview("the request's userInfo.groups is not a list of strings", uid)
    return Request(
        uid=uid,
        kind=str(kind["kind"]),
        operation=str(request.get("operation", "")),
        namespace=str(request.get("namespace") or ""),
        name=str(request.get("name") or metadata(obj).get("name") or ""),
        username=str(user.get("username", "")),
        groups=tuple(groups),
        obj=obj,
        old=old,
        dry_run=bool(request.get("dryRun")),
        sub_resource=str(request.get("subResource") or ""),
    )


def _metadata_problem(obj: dict[str, Any] | None) -> str:
    """What makes an object's metadata one no API server sends ("" for none): the validators
    take labels and annotations for maps of strings (meta.labels, meta.annotations_of)."""
    meta = (obj or {}).get("metadata")
    if meta is None:
        return ""
    if not isinstance(meta, dict):
        return "has a metadata that is not an object"
    for field in ("labels", "annotations"):
        value = meta.get(field)
        if value is None:
            continue
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            return f"has a metadata.{field} that is not a map of strings"
    return ""


def review_response(
    uid: str, denied: Denied | None = None, warnings: list[str] | None = None
) -> bytes:
    response: dict[str, Any] = {"uid": uid, "allowed": denied is None}
    if denied is not None:
        response["status"] = {"code": denied.code, "reason": "Forbidden", "message": denied.message}
    if warnings:
        response["warnings"] = warnings[:10]
    return orjson.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
    )
