"""Whether this process may read a kind: the authorizer's answer to a SelfSubjectAccessReview.

An informer of a kind that helps but is not required (the Events the target-pod retry watches)
must not hold the process unready when the RBAC for it is missing (an older deploy/): it asks
first, and while the answer is no its cache is synced and empty (informer.py's `presence`),
asked again periodically, so a permission granted later is used within that period. Every
authenticated identity may create SelfSubjectAccessReviews (the system:basic-user role).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from .client import ApiClient
from .resource import Resource

SELF_SUBJECT_ACCESS_REVIEWS = Resource(
    "authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", False
)


async def may(client: ApiClient, resource: Resource, verb: str) -> bool:
    """True if the authorizer allows `verb` on `resource` in every namespace (cluster-wide).

    An API error propagates (the caller keeps what it knew and asks again later)."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {
                "group": resource.group,
                "version": resource.version,
                "resource": resource.plural,
                "verb": verb,
            }
        },
    }
    answer = await client.create(SELF_SUBJECT_ACCESS_REVIEWS, review)
    return bool((answer.get("status") or {}).get("allowed"))


def readable(
    client: ApiClient, resource: Resource, verbs: Iterable[str] = ("list", "watch")
) -> Callable[[], Awaitable[bool]]:
    """A presence check for an informer (SharedInformerFactory.informer's `presence`): True
    while every one of `verbs` is allowed cluster-wide on `resource`."""
    wanted = tuple(verbs)

    async def check() -> bool:
        for verb in wanted:
            if not await may(client, resource, verb):
                return False
        return True

    return check
