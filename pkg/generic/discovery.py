"""Which resources the API server serves: the discovery client's one question, asked per group.

`list_if_served` reads an optional kind in one go, a kind not served being an empty list. An
optional kind (a CRD that may not be installed: Harvester's Settings on a plain KubeVirt
cluster, the KubeVirt CR where KubeVirt runs without its operator) is looked up here before an
informer lists it, and again periodically, so a CRD installed or removed later is noticed.
"""

from __future__ import annotations

from . import errors
from .client import ApiClient
from .resource import Object, Resource


async def serves(client: ApiClient, resource: Resource) -> bool:
    """True if the API server serves ``resource`` (its group/version lists its plural).

    A group/version the server does not know is a 404: False. Any other error (the server is
    down, forbidden to read discovery) propagates, so the caller can keep what it knew.
    """
    path = f"/apis/{resource.group}/{resource.version}" if resource.group else "/api/v1"
    try:
        document = await client.request("GET", path)
    except errors.NotFound:
        return False
    listed = document.get("resources")
    if not isinstance(listed, list):
        return False
    return any(isinstance(r, dict) and r.get("name") == resource.plural for r in listed)


async def list_if_served(
    client: ApiClient, resource: Resource, namespace: str | None = None
) -> list[Object]:
    """Every object of `resource` in `namespace` (None: cluster-wide), page by page; [] when the
    API server does not serve the kind (the list is a 404: an optional CRD not installed). Any
    other error propagates."""
    try:
        return list((await client.list_all(resource, namespace)).items)
    except errors.NotFound:
        return []
