"""How the room mode's writes of a namespace are made: the plan written into the quota (and its
copy into status.hard), the room-held label set before a raise and removed after the release,
and the two waits a release passes before it is written (gathered with the next releases,
confirmed against the API server's migrations).

Every write goes through the QuotaWriter (controller/quotawriter.py) and is recorded in the
pending writes of its kind (generic/pendingwrites.py); nothing here plans. Not thread-safe:
event loop only, per namespace from one worker at a time (the workqueue's guarantee).

The plan written into the quota (`SpecWrites`): the write is the QuotaWriter's conditional JSON
patch (controller/quotawriter.py): if anyone (a user, Rancher) changed what the plan read since, it
is a Conflict, nothing of theirs is overwritten, and the namespace is planned again. Here each
write is counted (metrics, `writes`), logged and told in an Event on the quota, recorded in the
quotas' pending writes (generic/pendingwrites.py), and a new spec.hard that raises a key handed to
`publisher`, which copies it into status.hard beside the namespace's reconciles (a release while
rooms are still held is left to kube-controller-manager: `raise_waits_on_status`; the last one,
which takes our records off, is copied).

The room-held label (`RoomHeldLabel`): when it is set, how long it lingers. LABEL_ROOM_HELD puts a
namespace under the webhook's fail-closed pods rule. The reconcile sets it before a raise is
written and removes it after the room is given back and a linger is over, so the rule covers the
whole time a raised quota could admit a pod, and a drain's next wave is raised without the label's
round trip on its path. A namespace whose Rancher quota we raise directly, where no namespace write
may be made while a raise stands, keeps it for good instead (planner.py's label policy). The write
itself, and its permission gate, are the QuotaWriter's (controller/quotawriter.py); this keeps the
linger and records each label write in the namespaces' pending writes (generic/pendingwrites.py).

A release held back a moment while the namespace still holds room (`ReleaseGathering`), so
that the ends of a drain's migrations are given back several in one write. Each spec.hard
write makes kube-controller-manager recount the namespace (300 pods cost it 60-80 ms on the
bench's machine), and one landing as KubeVirt creates the next target pod (a migration's end
frees a slot of its parallel limits) can make that pod's quota admission conflict: admission
updates the quota's status.used and, on a conflict, retries three times at once against its own
cache; a release of ours landing in the same milliseconds used those retries up, the target pod
create failed with a Conflict, and KubeVirt's rate limiter held the migration for up to minutes
(bench/SCALE.md). So a plan that only gives room back while another migration still holds room
(`QuotaPlan.gathers`) is held back, at most `window` seconds from the first hold, and written
then with every release due meanwhile; a plan that raises, or the last release (no room held
after it), ends the hold and is written at once.

What a hold keeps from a tenant: nothing. Room is held while a release waits, so the webhook
holds the namespace's pods to the base and the room-held label stays (docs/security.md, 1c).

A release is written only once the API server shows no migration the plan has not seen
(`ReleaseCheck`). A migration holds room from the moment it exists (DESIGN.md, principle 3), but
the plan reads the controller's caches, which hear of a new migration a moment after the API server
stored it. When a migration's end and another migration's start meet (the second migration of a VM
created as the first one's source pod goes, or any migration of the namespace beside a release), a
plan made from the lagging cache gives the standing room back, and the new migration's target pod,
which virt-controller creates as soon as it sees the migration, can meet quota admission after that
release and before the raise that follows it: refused once, though our webhook had seen the raise
in place (its live read of the quota came before the release; webhook/resources/pod/ targets.py).

So before a plan whose write lowers something (`lowers`: spec.hard, or on Rancher's path the
annotation as it stands) is written, the API server is asked (no resourceVersion: served from etcd)
for the namespace's migrations, first one of them (limit=1): when it holds no more than the plan
read (1 + metadata.remainingItemCount) and the plan read that one (its uid), the release goes on.
Only otherwise (or when the count is not told) are all of them listed, in pages of `PAGE` so that
no single decode blocks the event loop for long. A migration there that is not in a final phase,
not being deleted, and that the plan did not read (neither planned nor set aside as settled) means
the cache lags: the release waits for the cache, which queues the namespace again when it stores
the migration (`RELEASE_RETRY_AFTER` as a backstop). A migration the cache still lacks
`STALE_AFTER` after its creation is not lag (a stored object the informer skips, a wedged watch):
it is named in one WARNING and no longer holds the release. The windows left: a migration created
between the check and the release write whose target pod meets quota admission within the same gap,
a few milliseconds of this process's own time; and the count check misses a migration created while
another the plan read was deleted in the same gap (equal counts): its target pod may be refused
once, and KubeVirt retries it on the quota's next update.

What holding a release keeps from a tenant: nothing. While room is held or a raise stands the
webhook holds the namespace's pods to the base (util/resourcequota/raises.py). A tenant can
delay its own release by creating migrations, which it may do anyway, for `STALE_AFTER` at most
each. Should the check fail, the cache's plan is written (the release is never withheld on an
error) and a WARNING says so, at most once per `WARN_EVERY`.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from typing import Any, Final

from ...apis.kubevirt import FINAL_PHASES, VIRTUAL_MACHINE_INSTANCE_MIGRATIONS
from ...config.metrics import QuotaMetrics
from ...generic import errors
from ...generic.client import ApiClient
from ...generic.clock import Clock
from ...generic.controller import RetryAfter
from ...generic.events import NORMAL, EventRecorder
from ...generic.logformat import fields
from ...generic.meta import annotations_of, labels, metadata
from ...generic.newest import NewestPerKey
from ...generic.pendingwrites import PendingWrites
from ...generic.resource import Object, key_of
from ...util.annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA, LABEL_ROOM_HELD
from ...util.quantity import Quantity
from ...util.rancher.annotation import parse_namespace_resource_quota_details
from ...util.resourcequota.plan import QuotaPlan
from ...util.resourcequota.rancherpath import annotation_patch
from ...util.vmispec import parse_time
from ..quotawriter import QuotaWriter

log = logging.getLogger(__name__)

UNLABEL_RETRY: Final = "the room-held label's removal may be tried again then"


# The plan written into the quota ------------------------------------------------------------------


def raise_waits_on_status(written: Object) -> bool:
    """Whether a pod waits on the copy of `written`'s spec.hard into status.hard: some key of
    spec.hard stands above status.hard (or status.hard lacks it), so quota admission would
    refuse what the raise makes room for until kube-controller-manager copies it.

    A release alone (every key at or below status.hard) waits on nothing: while status.hard
    stands above spec.hard the webhook holds the namespace's pods to the base
    (util/resourcequota/raises.py `raise_enforced`) and the room-held label stays (`raise_down`), and
    kube-controller-manager lowers status.hard a moment later. Not copying it saves a quota
    write at the moment a migration's end makes KubeVirt create the next target pod, whose
    quota admission (an update of status.used) our write would make conflict. A value that
    cannot be read counts as waiting (the copy is made: it only publishes what spec.hard says)."""
    spec = (written.get("spec") or {}).get("hard") or {}
    status = (written.get("status") or {}).get("hard") or {}
    try:
        return any(
            key not in status or Quantity.parse(str(value)) > Quantity.parse(str(status[key]))
            for key, value in spec.items()
        )
    except ValueError:
        return True


class SpecWrites:
    """Writes plans into quotas through `writer`, each recorded in `pending` (the quotas' pending
    writes); `publisher` copies each new spec.hard."""

    def __init__(
        self,
        writer: QuotaWriter,
        metrics: QuotaMetrics,
        recorder: EventRecorder,
        pending: PendingWrites,
    ) -> None:
        self.writer = writer
        self.pending = pending
        self.metrics = metrics
        self.recorder = recorder
        self.writes: Counter[str] = Counter()
        """Quota writes per namespace (tests and the scenario report read it)."""
        self.publisher: NewestPerKey[Object] = NewestPerKey(
            "copying spec.hard into status.hard", writer.copy_hard_to_status
        )
        """Copies each spec.hard we write that raises a key into status.hard beside the
        namespace's reconciles (`raise_waits_on_status`), so the next raise of a burst does not
        wait for it; and the release that leaves no room held, so that the room-held label and
        the webhook's hold on the namespace's pods, which last while status.hard stands above
        spec.hard (util/resourcequota/raises.py), end at once (traced: 100-170 ms a raise on
        a 3,000-VM namespace, bench/SCALE.md). One copy of a namespace's at a time, the newest
        written after it; each tests its own spec.hard, so an older one never lands over a newer
        spec. API errors other than a refusal are logged and dropped: kube-controller-manager's
        copy follows anyway."""

    async def write(self, quota: Object, patch: Mapping[str, Any], plan: QuotaPlan) -> None:
        """Applies `patch` to the quota only if it is still as the plan read it.

        The patch goes as a JSON patch whose tests carry the condition: the quota's uid, spec,
        labels and the annotations the plan read (QuotaWriter.patch_as_planned). Status writes
        (kube-controller-manager's, after every spec change and pod admission) do not make it
        fail: the plan never reads the status. A failed condition raises errors.Conflict, which
        re-queues the namespace to plan again from what is there.
        """
        meta = metadata(quota)
        namespace = str(meta["namespace"])
        try:
            written = await self.writer.patch_as_planned(quota, patch)
        except errors.Conflict:
            self.metrics.quota_writes.labels("conflict").inc()
            self.pending.forget(key_of(quota))
            log.info(
                "%s/%s changed since it was read; planning again",
                namespace,
                meta["name"],
                extra=fields(namespace=namespace),
            )
            raise
        except errors.ApiError:
            self.metrics.quota_writes.labels("error").inc()
            raise
        self.metrics.quota_writes.labels("written").inc()
        if "spec" in patch and (raise_waits_on_status(written) or not plan.holds_room):
            self.publisher.submit(namespace, written)
        self.pending.wrote(written)
        self.writes[namespace] += 1
        self._tell(quota, patch, plan)

    def _tell(self, quota: Object, patch: Mapping[str, Any], plan: QuotaPlan) -> None:
        """The write in the log and, when spec.hard changed, in an Event on the quota."""
        meta = metadata(quota)
        changes = ", ".join(
            f"{k} {(quota.get('spec') or {}).get('hard', {}).get(k, '-')} -> {v if v is not None else '-'}"
            for k, v in sorted((patch.get("spec") or {}).get("hard", {}).items())
        )
        holders = ", ".join(f"{r.vm_name} ({r.reason})" for r in plan.rooms.rooms) or "none"
        log.info(
            "%s/%s: %s; migrations holding room: %s",
            meta["namespace"],
            meta["name"],
            changes or "annotations only",
            holders,
            extra=fields(
                namespace=meta["namespace"], migrations=[r.vm_name for r in plan.rooms.rooms]
            ),
        )
        if changes:
            reason = "MigrationRoomReserved" if plan.holds_room else "MigrationRoomReleased"
            self.recorder.event(
                quota, NORMAL, reason, f"spec.hard {changes}; migrations holding room: {holders}"
            )


# The room-held label ------------------------------------------------------------------------------


def is_labelled(namespace: Object) -> bool:
    """Whether the namespace carries LABEL_ROOM_HELD=true."""
    return labels(namespace).get(LABEL_ROOM_HELD) == "true"


class RoomHeldLabel:
    """Sets and removes the label through `writer`, each write recorded in `pending` (the
    namespaces' pending writes); `linger` seconds after room was last held."""

    def __init__(
        self, writer: QuotaWriter, clock: Clock, linger: float, pending: PendingWrites
    ) -> None:
        self.writer = writer
        self.pending = pending
        self.clock = clock
        self.linger = linger
        self._last_held: dict[str, float] = {}
        """Namespace -> the monotonic moment a plan of it last held room, while its label
        lingers (`lingers`)."""

    def held_now(self, key: str) -> None:
        """A plan of namespace `key` holds room now (the linger counts from here)."""
        self._last_held[key] = self.clock.monotonic()

    async def set(self, namespace: Object, held: bool) -> Object:
        """Sets or removes the label, if it differs; returns the namespace as stored after (or
        `namespace`, when nothing was written: equal already, or the write's gate closed)."""
        written = await self.writer.label_room_held(namespace, held)
        if written is not namespace:
            self.pending.wrote(written)
        return written

    def lingers(self, key: str, namespace: Object, holds_room: bool) -> float | None:
        """Seconds the label stays on a namespace whose room was given back, or None when it
        goes now. It stays `linger` seconds after a plan last held room (counted from now for a
        label this process did not set); a plan that holds room where the label may not be
        removes it at once. The moment is forgotten only once the label is seen gone, so a
        removal that failed is tried again at once, not after another linger."""
        if holds_room or not is_labelled(namespace):
            self._last_held.pop(key, None)
            return None
        now = self.clock.monotonic()
        held_at = self._last_held.setdefault(key, now)
        left = held_at + self.linger - now
        return left if left > 0 else None

    def due(self, key: str, namespace: Object, holds_room: bool) -> bool:
        """Whether a label on `namespace` outstayed its room: room is not held and its linger
        (counted from the last plan that held room, as `lingers` counts it) is over, or no plan
        of this process ever saw it held. Pure: the linger's moment is not started here."""
        if holds_room or not is_labelled(namespace):
            return False
        held_at = self._last_held.get(key)
        return held_at is None or held_at + self.linger <= self.clock.monotonic()

    async def remove(self, namespace: Object) -> Object:
        """Removes the label from a namespace no longer ours (no managed quota, or handed
        over); returns the namespace as stored after. Raises RetryAfter while the removal is
        refused (`retry_removal`), so the namespace is run again."""
        namespace = await self.set(namespace, False)
        retry = self.retry_removal(namespace)
        if retry is not None:
            raise RetryAfter(retry, UNLABEL_RETRY)
        return namespace

    def retry_removal(self, namespace: Object) -> float | None:
        """After a removal of the label: None if it is gone; else the seconds until label writes
        may be tried again (at least 1 s), since a label left on would keep the fail-closed pods
        rule on the namespace and nothing else runs it again."""
        if not is_labelled(namespace):
            return None
        return max(self.writer.label_retry_in(), 1.0)

    def retry_labelling(self, namespace: Object) -> float | None:
        """For a namespace labelled for good: None if it carries the label; else the seconds
        until label writes may be tried again while the write's gate is closed (a raise still
        standing is not retried from here: giving it back runs the reconcile again)."""
        if is_labelled(namespace):
            return None
        wait = self.writer.label_retry_in()
        return max(wait, 1.0) if wait > 0 else None

    def forget(self, key: str) -> None:
        """The namespace is no longer ours (deleted, or without a managed quota)."""
        self._last_held.pop(key, None)


# A release gathered with the next ones -----------------------------------------------------------

GATHER_RETRY = "a release held back while other migrations of the namespace hold room goes then"


class ReleaseGathering:
    """Per namespace, since when a release has been held back (monotonic seconds)."""

    def __init__(
        self, clock: Clock, window: float, on_hold: Callable[[], None] = lambda: None
    ) -> None:
        if window < 0:
            raise ValueError(f"the release-gathering window must be >= 0 s, not {window!r}")
        self.clock = clock
        self.window = window
        self.on_hold = on_hold
        """Called when a hold begins (the controller counts it in a metric)."""
        self._held_since: dict[str, float] = {}

    def hold(self, namespace: str, gathers: bool) -> float | None:
        """Seconds to hold the namespace's release back for, or None to write it now.

        `gathers` is the plan's `QuotaPlan.gathers`. A plan that does not gather ends the
        namespace's hold (its write goes now); one that gathers is held until `window` seconds
        after its namespace's first hold, then written, again at once while it still gathers
        and its write failed; the next hold starts afresh once a plan did not gather or the
        namespace's plan was written (`written`)."""
        if not gathers or self.window == 0:
            self._held_since.pop(namespace, None)
            return None
        now = self.clock.monotonic()
        since = self._held_since.get(namespace)
        if since is None:
            since = self._held_since[namespace] = now
            self.on_hold()
        left = since + self.window - now
        # Past the window the release is written; the hold's start stays until a plan no
        # longer gathers, so a write that failed (a Conflict) is tried again at once, never
        # held for a new window.
        return left if left > 0 else None

    def forget(self, namespace: str) -> None:
        """The namespace is no longer ours."""
        self._held_since.pop(namespace, None)

    def written(self, namespace: str) -> None:
        """The namespace's plan was written (or had nothing to write): its hold, if any, is
        over, and the next release that gathers starts a hold of a whole window. (A write that
        raised never gets here: it is tried again at once.)"""
        self._held_since.pop(namespace, None)


# A release confirmed against the API server -------------------------------------------------------

RELEASE_RETRY_AFTER: Final = 1.0
"""Seconds after which a release held for a migration the cache lacks is planned again, should
the cache's own event not queue the namespace first."""
RELEASE_RETRY: Final = "a release held for a migration the cache has not stored yet is planned then"
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
        return lowers(limits(current).fixed, limits(wanted).fixed)
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
                log.warning(
                    "%s: migrations not listed (%s): release written",
                    namespace,
                    error,
                    extra=fields(namespace=namespace),
                )
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
                extra=fields(namespace=meta.get("namespace")),
            )
        return False
