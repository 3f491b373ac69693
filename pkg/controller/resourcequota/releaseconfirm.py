"""A release is written only once the API server shows no migration the plan has not seen.

A migration holds room from the moment it exists (DESIGN.md, principle 3), but the plan reads the
controller's caches, which hear of a new migration a moment after the API server stored it. When
a migration's end and another migration's start meet (the second migration of a VM created as
the first one's source pod goes, or any migration of the namespace beside a release), a plan made
from the lagging cache gives the standing room back, and the new migration's target pod, which
virt-controller creates as soon as it sees the migration, can meet quota admission after that
release and before the raise that follows it: refused once, though our webhook had seen the
raise in place (its live read of the quota came before the release; webhook/resources/pod/
targets.py).

So before a plan that lowers some key of spec.hard is written, the namespace's migrations are
listed from the API server (one LIST, no resourceVersion: served from etcd). A migration there
that is not in a final phase, not being deleted, and that the plan did not read (neither planned
nor set aside as settled) means the cache lags: the release waits for the cache, which queues
the namespace again when it stores the migration (`RETRY_AFTER` as a backstop). The window
left: a migration created between that LIST and the release write whose target pod meets quota
admission within the same gap, a few milliseconds of this process's own time.

What holding a release keeps from a tenant: nothing. While room is held or a raise stands the
webhook holds the namespace's pods to the base (util/resourcequota/standing.py). A tenant can
delay its own release by creating migrations, which it may do anyway. Should the LIST fail,
the cache's plan is written (the release is never withheld on an error).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Final

from ...apis.kubevirt import FINAL_PHASES, VIRTUAL_MACHINE_INSTANCE_MIGRATIONS
from ...generic import errors
from ...generic.client import ApiClient
from ...generic.meta import metadata
from ...generic.resource import Object
from ...util.quantity import Quantity

log = logging.getLogger(__name__)

RETRY_AFTER: Final = 1.0
"""Seconds after which a release held for a migration the cache lacks is planned again, should
the cache's own event not queue the namespace first."""
RETRY_REASON: Final = "a release held for a migration the cache has not stored yet is planned then"

LiveMigrations = Callable[[str], Awaitable[list[Object]]]
"""namespace -> its migrations as the API server has them now. Raises errors.ApiError (or
TimeoutError) when they cannot be read."""


def live_migrations(client: ApiClient) -> LiveMigrations:
    """Lists a namespace's migrations from the API server (every page)."""

    async def read(namespace: str) -> list[Object]:
        items: list[Object] = []
        token: str | None = None
        while True:
            page = await client.list(
                VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, namespace, continue_token=token
            )
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue") or None
            if token is None:
                return items

    return read


def lowers(quota: Mapping[str, Any], hard: Mapping[str, str]) -> bool:
    """Whether writing `hard` lowers some key of the quota's spec.hard. A value that cannot be
    read counts as lowering (the release is confirmed: the side that costs one LIST)."""
    current = (quota.get("spec") or {}).get("hard") or {}
    try:
        return any(
            key in current and Quantity.parse(str(current[key])) > Quantity.parse(text)
            for key, text in hard.items()
        )
    except ValueError:
        return True


def unseen(live: Iterable[Object], known: Iterable[Object]) -> list[str]:
    """Names of the live migrations that may hold room and that are not among `known` (by uid):
    not in a final phase and not being deleted."""
    uids = {metadata(m).get("uid") for m in known}
    found = []
    for migration in live:
        meta = metadata(migration)
        phase = (migration.get("status") or {}).get("phase")
        if meta.get("uid") in uids or meta.get("deletionTimestamp") or phase in FINAL_PHASES:
            continue
        found.append(str(meta.get("name")))
    return found


async def release_waits(read: LiveMigrations, namespace: str, known: Iterable[Object]) -> list[str]:
    """The migrations (names) a release of `namespace` must wait for the cache to show: those
    the API server has and the plan did not read (`unseen`); [] when it cannot be read."""
    try:
        live = await read(namespace)
    except (errors.ApiError, TimeoutError) as error:
        log.debug("%s: migrations not listed (%s): the release is written", namespace, error)
        return []
    return unseen(live, known)
