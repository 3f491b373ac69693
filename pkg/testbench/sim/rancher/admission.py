"""rancher-webhook's answers for ResourceQuotas and LimitRanges, as a pure function of the review.

The test bench's twin of rancher-webhook (its module cannot be built here: docs/rancher-webhook-
twin.md) decides with `decide`, which follows rancher-webhook's resourcequota and limitrange
validators (pkg/resources/core/v1/{resourcequota,limitrange}/validator.go) and its request handler
(pkg/admission/admission.go) rule for rule:

- a request from Rancher's own sudo identity, the user `BYPASS_USER` *in* the group
  `BYPASS_GROUP`, is allowed before any rule (Rancher's agent impersonates exactly that);
- creating an object that carries the marker label, changing or deleting one that carries it, or
  adding the label to one that did not, is refused;
- the namespace controller may delete any (it empties a namespace being deleted);
- a ResourceQuota's status may be written only by kube-controller-manager's quota controller and
  by the API server itself (its quota admission records usage on every pod create); anyone else
  is told the status is immutable, on every quota, labelled or not (a LimitRange's status write,
  registered too though the API server has none to send, is refused only a marker change);
- every refusal is HTTP 400 BadRequest in the review's status; an object that cannot be read or
  an operation the validator does not handle is an error (the handler's HTTP 500).

The messages are rancher-webhook's exact words: callers (our controller among them) recognise a
refusal by them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ....util.annotations import LABEL_DEFAULT_RESOURCE_QUOTA

MARKER_LABEL: Final = LABEL_DEFAULT_RESOURCE_QUOTA
"""The label that makes a ResourceQuota or LimitRange Rancher's (the same label on both)."""
BYPASS_USER: Final = "system:serviceaccount:cattle-system:rancher-webhook-sudo"
BYPASS_GROUP: Final = "system:masters"
NAMESPACE_CONTROLLER: Final = "system:serviceaccount:kube-system:namespace-controller"
QUOTA_CONTROLLER: Final = "system:serviceaccount:kube-system:resourcequota-controller"
API_SERVER: Final = "system:apiserver"
STATUS_WRITERS: Final = frozenset({QUOTA_CONTROLLER, API_SERVER})
"""Who may write a ResourceQuota's status (rancher/webhook#1880 added the API server)."""

CREATING: Final = (
    "users are forbidden from creating resources managed by Rancher. Remove the marker label"
)
CHANGING: Final = "users are forbidden from changing resources managed by Rancher"
PROMOTING: Final = (
    "users are forbidden from promoting resources to Rancher management. Remove the marker label"
)
DELETING: Final = "users are forbidden from deleting resources managed by Rancher"
STATUS_IMMUTABLE: Final = "status is immutable"

BAD_REQUEST: Final = 400
INTERNAL_ERROR: Final = 500


class Kind(enum.StrEnum):
    """The resources the twin validates, by their plural (the path segment it serves)."""

    RESOURCE_QUOTAS = "resourcequotas"
    LIMIT_RANGES = "limitranges"


@dataclass(frozen=True)
class Verdict:
    """One answer: allowed, or refused with an HTTP code and rancher-webhook's message."""

    allowed: bool
    code: int = 200
    message: str = ""

    @property
    def reason(self) -> str:
        """The Status reason the API server passes on (BadRequest, InternalError)."""
        if self.allowed:
            return ""
        return "BadRequest" if self.code == BAD_REQUEST else "InternalError"


ALLOWED: Final = Verdict(True)


def refused(message: str) -> Verdict:
    return Verdict(False, BAD_REQUEST, message)


def failed(message: str) -> Verdict:
    return Verdict(False, INTERNAL_ERROR, message)


def bypasses(user_info: Mapping[str, Any]) -> bool:
    """Rancher's own requests: the sudo user, and only together with the group system:masters
    (a service account token of that name alone does not pass)."""
    groups = user_info.get("groups") or []
    return user_info.get("username") == BYPASS_USER and BYPASS_GROUP in groups


def decide(kind: Kind, request: Mapping[str, Any]) -> Verdict:
    """rancher-webhook's answer to an AdmissionRequest (the review's `request`) for `kind`."""
    operation = str(request.get("operation") or "")
    rule = _RULES.get(operation)
    if rule is None:
        return failed(f"can not handle {operation!r} for {kind}: unsupported operation")
    user_info = request.get("userInfo") or {}
    if bypasses(user_info):
        return ALLOWED
    try:
        old, new = _marked(request.get("oldObject")), _marked(request.get("object"))
    except TypeError as error:
        return failed(f"failed to decode {kind} from request: {error}")
    if request.get("subResource") == "status":
        rule = _STATUS_RULES[kind]
    return rule(str(user_info.get("username") or ""), old, new)


def _create(_user: str, _old: bool, new: bool) -> Verdict:
    return refused(CREATING) if new else ALLOWED


def _update(_user: str, old: bool, new: bool) -> Verdict:
    """Changing a labelled object (its label included) or labelling one: refused."""
    if old:
        return refused(CHANGING)
    return refused(PROMOTING) if new else ALLOWED


def _delete(user: str, old: bool, _new: bool) -> Verdict:
    """The namespace controller may delete anything (it empties a namespace being deleted)."""
    if user == NAMESPACE_CONTROLLER:
        return ALLOWED
    return refused(DELETING) if old else ALLOWED


def _label_change(old: bool, new: bool) -> Verdict | None:
    """The refusal of a status write that drops or adds the marker; None if it keeps it."""
    if old and not new:
        return refused(CHANGING)
    if new and not old:
        return refused(PROMOTING)
    return None


def _quota_status_update(user: str, old: bool, new: bool) -> Verdict:
    """A ResourceQuota status write: the marker may not come or go this way either; otherwise
    only the status writers pass, labelled quota or not."""
    changed = _label_change(old, new)
    if changed is not None:
        return changed
    return ALLOWED if user in STATUS_WRITERS else refused(STATUS_IMMUTABLE)


def _limit_range_status_update(_user: str, old: bool, new: bool) -> Verdict:
    """A LimitRange status write (registered as upstream does, though a LimitRange has no status
    subresource for the API server to send): only the marker is guarded."""
    changed = _label_change(old, new)
    return ALLOWED if changed is None else changed


_RULES: Final = {"CREATE": _create, "UPDATE": _update, "DELETE": _delete}
_STATUS_RULES: Final = {
    Kind.RESOURCE_QUOTAS: _quota_status_update,
    Kind.LIMIT_RANGES: _limit_range_status_update,
}


def _marked(obj: object) -> bool:
    """Whether the object (absent for a create's old, a delete's new) carries the marker label
    set to "true"; TypeError for something that is not an object."""
    if obj is None:
        return False
    if not isinstance(obj, Mapping):
        raise TypeError(f"expected an object, got {type(obj).__name__}")
    meta = obj.get("metadata") or {}
    if not isinstance(meta, Mapping):
        raise TypeError("metadata is not an object")
    labels = meta.get("labels") or {}
    if not isinstance(labels, Mapping):
        raise TypeError("metadata.labels is not a map")
    return labels.get(MARKER_LABEL) == "true"


def review_response(uid: str, verdict: Verdict) -> dict[str, Any]:
    """The AdmissionReview answering request `uid` with `verdict`."""
    response: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
    if not verdict.allowed:
        response["status"] = {
            "status": "Failure",
            "message": verdict.message,
            "reason": verdict.reason,
            "code": verdict.code,
        }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
