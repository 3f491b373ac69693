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

So before a plan whose write lowers something (`lowers`: spec.hard, or on Rancher's path the
annotation as it stands) is written, the API server is asked (no resourceVersion: served from
etcd) for the namespace's migrations, first one of them (limit=1): when it holds no more than
the plan read (1 + metadata.remainingItemCount) and the plan read that one (its uid), the release
goes on. Only otherwise (or when the count is not told) are all of them listed, in pages of
`PAGE` so that no single decode blocks the event loop for long. A migration there that is not in
a final phase, not being deleted, and that the plan did not read (neither planned nor set aside
as settled) means the cache lags: the release waits for the cache, which queues the namespace
again when it stores the migration (`RETRY_AFTER` as a backstop). A migration the cache still
lacks `STALE_AFTER` after its creation is not lag (a stored object the informer skips, a wedged
watch): it is named in one WARNING and no longer holds the release. The windows left: a
migration created between the check and the release write whose target pod meets quota
admission within the same gap, a few milliseconds of this process's own time; and the count
check misses a migration created while another the plan read was deleted in the same gap
(equal counts): its target pod may be refused once, and KubeVirt retries it on the quota's next
update.

What holding a release keeps from a tenant: nothing. While room is held or a raise stands the
webhook holds the namespace's pods to the base (util/resourcequota/raises.py). A tenant can
delay its own release by creating migrations, which it may do anyway, for `STALE_AFTER` at most
each. Should the check fail, the cache's plan is written (the release is never withheld on an
error) and a WARNING says so, at most once per `WARN_EVERY`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from typing import Any, Final

from ...apis.kubevirt import FINAL_PHASES, VIRTUAL_MACHINE_INSTANCE_MIGRATIONS
from ...generic import errors
from ...generic.client import ApiClient
from ...generic.clock import Clock
from ...generic.meta import annotations_of, metadata
from ...generic.resource import Object
from ...util.annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA
from ...util.quantity import Quantity
from ...util.rancher.annotation import parse_namespace_resource_quota_details
from ...util.resourcequota.plan import QuotaPlan
from ...util.resourcequota.rancherpath import annotation_patch
from ...util.vmispec import parse_time

log = logging.getLogger(__name__)

RETRY_AFTER: Final = 1.0
"""Seconds after which a release held for a migration the cache lacks is planned again, should
the cache's own event not queue the namespace first."""
RETRY_REASON: Final = "a release held for a migration the cache has not stored yet is planned then"
PAGE: Final = 500
"""Migrations per page of the full listing."""
STALE_AFTER: Final = 30.0
"""Seconds after its creation from which a migration the cache lacks no longer holds a release
(the cache's real lag is under a second)."""
MAX_WARNED: Final = 4096
"""Stale migrations remembered as warned of; past that the memory starts afresh (a migration may
then be warned of again), so a tenant's stream of them cannot grow it."""
WARN_EVERY: Final = 60.0
"""Seconds between two warnings that the migrations could not be read."""

ListPage = Callable[[str, int, str | None], Awaitable[Object]]
"""(namespace, limit, continue token) -> that page of the namespace's migrations as the API server
has them now. Raises errors.ApiError (or TimeoutError) when they cannot be read."""


def list_page(client: ApiClient) -> ListPage:
    """One page of a namespace's migrations from the API server."""

    async def read(namespace: str, limit: int, token: str | None) -> Object:
        return await client.list(
            VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, namespace, limit=limit, continue_token=token
        )

    return read


def lowers(current: Mapping[str, Any], hard: Mapping[str, Any]) -> bool:
    """Whether writing `hard` lowers some key of `current` (spec.hard, or the limits of Rancher's
    annotation). A value that cannot be read counts as lowering (the release is confirmed: the
    side that costs a LIST)."""
    try:
        return any(
            key in current and Quantity.parse(str(current[key])) > Quantity.parse(str(text))
            for key, text in hard.items()
        )
    except ValueError:
        return True


def write_lowers(quota: Object, rancher: Object | None, plan: QuotaPlan) -> bool:
    """Whether the plan's write lowers something: the quota's spec.hard, or where it goes
    through Rancher (`rancher`: the namespace as last written) a limit of Rancher's annotation
    as it stands, which spec.hard lags until Rancher's agent copies it (unreadable text counts
    as lowering)."""
    if rancher is None:
        return lowers((quota.get("spec") or {}).get("hard") or {}, plan.hard)
    wanted = (annotation_patch(rancher, plan) or {}).get(CATTLE_ANNOTATION_RESOURCE_QUOTA)
    current = annotations_of(rancher).get(CATTLE_ANNOTATION_RESOURCE_QUOTA)
    if wanted is None or current is None:
        return False
    try:
        limits = parse_namespace_resource_quota_details
        return lowers(limits(current).raw_limit, limits(wanted).raw_limit)
    except ValueError:
        return True


def unseen(live: Iterable[Object], known: Iterable[Object]) -> list[Object]:
    """The live migrations that may hold room and that are not among `known` (by uid): not in
    a final phase and not being deleted."""
    uids = {metadata(m).get("uid") for m in known}
    found = []
    for migration in live:
        meta = metadata(migration)
        phase = (migration.get("status") or {}).get("phase")
        if meta.get("uid") in uids or meta.get("deletionTimestamp") or phase in FINAL_PHASES:
            continue
        found.append(migration)
    return found


class ReleaseCheck:
    """What a release of a namespace waits for (`waits`). Called by the namespace's reconcile,
    never twice at once for one namespace; its warning records are shared by all."""

    def __init__(self, read: ListPage, clock: Clock) -> None:
        self.read = read
        self.clock = clock
        self.warned: set[str] = set()
        """Uids of the stale migrations already warned of (at most MAX_WARNED)."""
        self.failed_at: float | None = None
        """When a failed read was last warned of (monotonic)."""

    async def waits(self, namespace: str, known: Collection[Object]) -> list[str]:
        """Names of the migrations a release of `namespace` must wait for the cache to show:
        those the API server has, the plan did not read (`unseen`) and are not stale; [] when
        they cannot be read."""
        try:
            live = await self._live(namespace, known)
        except (errors.ApiError, TimeoutError) as error:
            now = self.clock.monotonic()
            if self.failed_at is None or now - self.failed_at >= WARN_EVERY:
                self.failed_at = now
                log.warning("%s: migrations not listed (%s): release written", namespace, error)
            return []
        return [str(metadata(m).get("name")) for m in unseen(live, known) if self._fresh(m)]

    async def _live(self, namespace: str, known: Collection[Object]) -> list[Object]:
        """The namespace's migrations the API server has, or only its first when the count and
        the uid show the plan read them all (a first page without `continue` is all of them)."""
        page = await self.read(namespace, 1, None)
        items: list[Object] = list(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue") or None
        remaining = (page.get("metadata") or {}).get("remainingItemCount")
        uids = {metadata(m).get("uid") for m in known}
        counted = isinstance(remaining, int) and 1 + remaining <= len(uids)
        if counted and items and metadata(items[0]).get("uid") in uids:
            return items
        while token is not None:
            page = await self.read(namespace, PAGE, token)
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue") or None
        return items

    def _fresh(self, migration: Object) -> bool:
        """False for a migration created `STALE_AFTER` ago or more (warned of once)."""
        meta = metadata(migration)
        try:
            age = (
                self.clock.now() - parse_time(meta.get("creationTimestamp"), "created")
            ).total_seconds()
        except ValueError:
            return True
        if age < STALE_AFTER:
            return True
        if meta.get("uid") not in self.warned:
            if len(self.warned) >= MAX_WARNED:
                self.warned.clear()
            self.warned.add(str(meta.get("uid")))
            log.warning(
                "%s/%s: migration not in the cache %.0f s after its creation: a release is "
                "written without it",
                meta.get("namespace"),
                meta.get("name"),
                age,
            )
        return False
