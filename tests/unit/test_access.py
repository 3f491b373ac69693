"""access.readable: an informer's presence that is the authorizer's answer, not discovery's."""

from __future__ import annotations

from typing import Any

from harvester_quota.generic.access import SELF_SUBJECT_ACCESS_REVIEWS, readable
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.config import ClientConfig
from harvester_quota.generic.informer import SharedInformerFactory
from harvester_quota.generic.resource import EVENTS


class Authorizer:
    """Answers SelfSubjectAccessReviews: allowed for the verbs given, and records the asks."""

    def __init__(self, *allowed: str) -> None:
        self.allowed = set(allowed)
        self.asked: list[dict[str, Any]] = []

    async def create(self, resource: Any, review: dict[str, Any]) -> dict[str, Any]:
        assert resource == SELF_SUBJECT_ACCESS_REVIEWS
        attributes = review["spec"]["resourceAttributes"]
        self.asked.append(attributes)
        return {"status": {"allowed": attributes["verb"] in self.allowed}}


async def test_readable_needs_every_verb_cluster_wide() -> None:
    authorizer = Authorizer("list")
    assert not await readable(authorizer, EVENTS)()  # type: ignore[arg-type]
    assert [a["verb"] for a in authorizer.asked] == ["list", "watch"]
    assert all("namespace" not in a and a["resource"] == "events" for a in authorizer.asked)
    assert await readable(Authorizer("list", "watch"), EVENTS)()  # type: ignore[arg-type]


async def test_an_informer_with_its_own_presence_is_optional_and_never_reported_unserved() -> None:
    client = ApiClient(ClientConfig(host="https://127.0.0.1:1", ssl_context=False))
    factory = SharedInformerFactory(client)

    async def never() -> bool:
        return False

    informer = factory.informer(EVENTS, field_selector="reason=FailedCreate", presence=never)
    assert informer.optional
    assert await factory.unserved_required() == []
    await client.close()
