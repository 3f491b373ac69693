"""Migration target pods wait, briefly, for the room the controller is raising for them.

KubeVirt's virt-controller creates a migration's target pod as soon as it sees the
VirtualMachineInstanceMigration; our controller raises the quota on that same event. Quota
admission (the API server's ResourceQuota plugin, which runs after every validating webhook)
checks `status.hard`: a target pod that arrives before the raise reaches `status.hard` is refused,
virt-controller records FailedCreate and `migrationRejectedByResourceQuota`, and retries only on
the next quota update. On a busy control plane the target pod wins that race most of the time.

This webhook sees the target pod's admission before quota admission does. While the namespace's
managed quota, as the cache shows it, leaves no room for the pod (`status.used` plus the pod's
usage above `status.hard` on some key), the admission waits for the quota's next change in the
cache, at most `wait` seconds in all, and then allows the pod either way. It waits even when the
quota already carries a raise for the VM: the controller re-plans as its caches catch up (under
load a raise was once computed on a floor that a moment later proved too low, measured on the
v170-test2 scenario), and only the skip switch says no raise will come. (A decentralized
migration's target pod comes here only if the cache does not hold its migration yet: it is the
VM arriving and meets the pod rules, pod/validator.py `is_room_target`.) So the controller stays
the only writer of the quota, a target pod is never denied here, and with the webhook down
(failurePolicy Ignore on the rules that carry target pods) nothing waits. A migration whose pod
waited the whole time in vain does not wait again for `wait` seconds more (GaveUp): a namespace
the raise cannot cover (another quota, a key outside the base) must not hold one of
virt-controller's workers on each retry.

A pod that fits on the first look is judged once more by what quota admission will see: the quota
as the API server has it now (`LiveQuotas`, one GET). Our cache can lag a write the controller has
just made, and the write that matters here is a release: the second migration of a VM created as
the first one's source pod went, whose room the controller briefly gave back before its cache
showed the new migration. The cache still showed the first raise, the pod was let through at once,
and quota admission, which had the release, refused it (seen once in a CI run of the v170-test4
scenario). Now the pod waits for the next change as any pod that does not fit; if the live quota is
newer than the cache and fits, the pod pays the lister grace, since quota admission's own cache may
lag the live object as ours did. The read is skipped when the cached copy itself names the pod's
migration among those whose room it holds (ANNOTATION_ROOM_MIGRATIONS, written with the raise): the
controller had read that migration when it wrote the raise, and gives its room back only once the
migration is done, so no release of it can be newer than the copy (the second migration's pod above
finds the first one named, not its own, and is read live). The record is trusted because a tenant
cannot write a quota (administrators and controllers only), and only for a pod virt-controller
creates (`is_room_target`); a target pod is allowed here in every case, so the skip changes when a
pod is answered, never whether: quota admission still judges it on the API server's quota. The
window between that GET and quota admission is closed on the controller's side: it writes a release
only once the API server shows no migration its plan did not read
(controller/resourcequota/writes.py, ReleaseCheck). Should the GET fail, the cached decision stands
(the webhook never denies a target pod).
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import logging
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ....apis.kubevirt import LABEL_MIGRATION_JOB, LABEL_VM_NAME
from ....generic import errors
from ....generic.client import ApiClient
from ....generic.clock import Clock, wait_at_most
from ....generic.logformat import migration_fields
from ....generic.meta import annotations_of, as_mapping, labels, metadata
from ....generic.meta import name as name_of
from ....generic.meta import namespace as namespace_of
from ....generic.resource import RESOURCE_QUOTAS, Object
from ....util.annotations import opted_out, parse_migration_annotations, room_migrations
from ....util.podusage import pod_quota_usage
from ....util.quotascope import applies_to
from ....util.resourcequota.base import Shortfall, shortfalls
from ....util.resources import ResourceList, parse_resource_list_leniently
from ...admission import Request
from ..common import Lookups

log = logging.getLogger(__name__)

TARGET_ROOM_WAIT = 8.0
"""Default seconds a target pod's admission may wait for its room. With two CPU burners beside the
local cluster the waits measured 0.01-0.2 s a pod (tests/integration/test_target_room.py); 8 s
leaves room for a far busier control plane and stays below the 10 s the rules carrying target
pods give the webhook (deploy/) before the API server stops waiting for it."""

LISTER_GRACE = 0.1
"""Seconds quota admission's cache may lag ours: it reads the API server's own cache of quotas,
which hears of the same change from the same watch cache as ours, usually first, but on a loaded
machine not always (seen once in seven runs of the loaded test without a grace, and in a loaded
drain of 20 VMs for a pod that fitted on its first look, the quota's raise having reached our
cache just before virt-controller sent the pod). A pod that waited is held this long once it
fits; a pod that fits on its first look is held only while a copy it does not fit may still be
quota admission's (`QuotaChanges.settling`): not after a change that gave room to other
migrations only, nor after one that gave none (another pod counted, a release, our status copy).
A pod whose room showed earlier pays nothing."""

SHORTEST_HOLD = 0.001
"""A hold shorter than this is none: it is the rounding of the clock's readings, and a loop
that slept it would look again at the same moment."""

Outcome = Literal[
    "fits", "fitted-after-wait", "no-raise-coming", "timed-out", "no-managed-quota", "unreadable"
]
OUTCOMES: tuple[Outcome, ...] = (
    "fits",
    "fitted-after-wait",
    "no-raise-coming",
    "timed-out",
    "no-managed-quota",
    "unreadable",
)


COPY_VIEW = "target-room-copy"
"""The name of the quota store's view `QuotaChanges.stored` listens to (`quota_copy`)."""


def quota_copy(quota: Object) -> Object:
    """What a target pod's fit reads of a quota (its scopes and status), as a quota object of
    its own (deep enough that no handler of the stored object can change it). Never raises: a
    field of the wrong type reads as absent, as the fit itself reads it (`_short`), since a
    store view that raised would keep the whole quota out of the webhook's cache."""
    spec, status = as_mapping(quota.get("spec")), as_mapping(quota.get("status"))
    return {
        "spec": {k: copy.deepcopy(spec[k]) for k in ("scopes", "scopeSelector") if k in spec},
        "status": {k: dict(as_mapping(status[k])) for k in ("hard", "used") if k in status},
    }


class QuotaChanges:
    """Wakes whoever waits on a namespace when one of its managed quotas changes in the webhook's
    cache, and keeps the copies of each quota that quota admission may still read (`settling`).

    `stored` is the listener of the quota store's view `COPY_VIEW`: it is told each quota's copy
    inside the store's write, so what it keeps is never behind what a reader of the store sees.
    Event loop only; a waiter that starts after a change waits for the next one. Per quota
    (store key "namespace/name") that changed within the last LISTER_GRACE it keeps each copy that
    was current in the cache at some moment of that window, and the one before (None before the
    first this process saw, and for a deletion: taken as one no pod fits); each change cuts the
    quotas whose last change is older down to their current copy, and forgets the deleted ones,
    so what is kept is one small copy a quota (`quota_copy`) and a cluster's churn of namespaces
    leaves nothing behind. Copies a broken watch never delivered are not known (the relist goes
    from the last copy to the new one); a relist tells every quota again, unchanged ones too,
    which keeps a copy equal to the current one and wakes the waiters to look again.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._events: dict[str, asyncio.Event] = {}
        self._waiters: Counter[str] = Counter()
        self._seen: OrderedDict[str, float] = OrderedDict()
        """Quota key -> when it last changed, oldest change first."""
        self._copies: dict[str, list[tuple[float, Object | None]]] = {}
        """Quota key -> (when it became current, copy) in order, the current copy last."""

    def stored(self, key: str, value: Object | None) -> None:
        """The quota under `key` ("namespace/name") is now `value` in the cache (None: deleted,
        its label removed, or the store's listener isolation: kept as a copy no pod fits, so a
        quota back within LISTER_GRACE holds its pods that long): wakes the namespace's waiters
        and keeps the copy for `settling`. Never raises."""
        now = self._clock.monotonic()
        self._forget_settled(now)
        copies = self._copies.setdefault(key, [(float("-inf"), None)])
        copies.append((now, value))
        del copies[: _superseded(copies, now)]
        self._seen[key] = now
        self._seen.move_to_end(key)
        event = self._events.pop(key.partition("/")[0], None)
        if event is not None:
            event.set()

    def settling(self, key: str, fits: Callable[[Object], bool]) -> float:
        """Seconds a pod that `fits` the quota `key`'s current copy is held so that quota
        admission, whose cache may lag ours by up to LISTER_GRACE, holds a copy it fits too:
        until LISTER_GRACE after the last copy it does not fit was replaced in ours (0 when it
        fits every copy of the window, or the quota did not change within it)."""
        copies = self._copies.get(key)
        if not copies:
            return 0.0
        now = self._clock.monotonic()
        left = 0.0
        for (_, kept), (replaced, _) in itertools.pairwise(copies):
            until = replaced + LISTER_GRACE - now
            if until > left and (kept is None or not fits(kept)):
                left = until
        return left

    def waiting(self) -> int:
        """Namespaces someone waits on now."""
        return len(self._waiters)

    def _forget_settled(self, now: float) -> None:
        """Each quota whose last change is LISTER_GRACE old or more keeps its current copy alone
        (the one before its next change), and a deleted one nothing."""
        while self._seen:
            oldest = next(iter(self._seen))
            if now - self._seen[oldest] < LISTER_GRACE:
                return  # the rest changed later still
            del self._seen[oldest]
            current = self._copies.pop(oldest)[-1][1]
            if current is not None:
                self._copies[oldest] = [(float("-inf"), current)]

    async def next_change(self, namespace: str, seconds: float) -> bool:
        """Waits for the namespace's next quota change, at most `seconds` (by the clock); True
        if it came. Waiters of one namespace share its event until the last of them leaves."""
        event = self._events.setdefault(namespace, asyncio.Event())
        self._waiters[namespace] += 1
        changed = asyncio.ensure_future(event.wait())
        try:
            came = await wait_at_most(self._clock, changed, seconds)
        finally:
            changed.cancel()
            self._waiters[namespace] -= 1
            if self._waiters[namespace] == 0:
                del self._waiters[namespace]
                if self._events.get(namespace) is event:
                    del self._events[namespace]
        return came


def _superseded(copies: list[tuple[float, Object | None]], now: float) -> int:
    """How many of the oldest `copies` were replaced in our cache before the last LISTER_GRACE
    began: quota admission's cache, no further behind, can hold none of them."""
    count = 0
    while count + 1 < len(copies) and copies[count + 1][0] <= now - LISTER_GRACE:
        count += 1
    return count


LIVE_READ_TIMEOUT = 2.0
"""Seconds the live read of a quota may take before the cached decision stands: a target pod's
admission has 10 s in all (deploy/), and a GET that slow means an API server too busy to trust
with more."""

LiveQuotas = Callable[[str, str], Awaitable[Object | None]]
"""(namespace, name) -> the ResourceQuota as the API server has it now; None if it is gone.
Raises errors.ApiError (or TimeoutError) when it cannot be read."""


def live_quotas(client: ApiClient) -> LiveQuotas:
    """Reads a quota from the API server: a GET without resourceVersion, served from etcd."""

    async def read(namespace: str, name: str) -> Object | None:
        try:
            return await client.get(RESOURCE_QUOTAS, name, namespace)
        except errors.NotFound:
            return None

    return read


class GaveUp:
    """Migrations (by uid) whose target pod waited `wait` seconds in vain, until `wait` seconds
    after that: their pods go through at once meanwhile. Event loop only; entries expire."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._until: dict[str, float] = {}

    def note(self, migration_uid: str, seconds: float) -> None:
        now = self._clock.monotonic()
        self._until = {uid: t for uid, t in self._until.items() if t > now}
        self._until[migration_uid] = now + seconds

    def recently(self, migration_uid: str) -> bool:
        until = self._until.get(migration_uid)
        return until is not None and until > self._clock.monotonic()


@dataclass(frozen=True)
class TargetAdmission:
    """How a target pod's admission ended: it is allowed in every case."""

    outcome: Outcome
    waited: float
    short: list[Shortfall] = field(default_factory=list)
    """The keys it still did not fit on, when it was let through without room."""


async def admit_target(
    request: Request,
    lookups: Lookups,
    changes: QuotaChanges,
    clock: Clock,
    *,
    wait: float,
    gave_up: GaveUp | None = None,
    live: LiveQuotas | None = None,
) -> TargetAdmission:
    """Returns once the target pod fits under the managed quota's `status.hard` as the cache
    shows it (at once if its scopes do not charge the pod; on the first look, as `live` shows it
    too, when given and the cached quota is not `raised_for` the pod's migration) and every copy
    quota admission may still read (`QuotaChanges.settling`), at once if no raise will come, or
    after `wait` seconds (see module docstring). After each await it looks at the cache again."""
    pod = request.obj or {}
    try:
        needed = pod_quota_usage(pod, features=lookups.quota_features())
    except ValueError as error:
        log.warning(
            "migration target pod %s/%s cannot be read: %s",
            request.namespace,
            request.name,
            error,
            extra=migration_fields(request.namespace, labels(pod).get(LABEL_VM_NAME)),
        )
        return TargetAdmission("unreadable", 0.0)  # not ours to refuse: the API server will
    migration = labels(pod).get(LABEL_MIGRATION_JOB, "")
    if gave_up is not None and gave_up.recently(migration):
        wait = 0.0

    def fits(copy: Object) -> bool:
        return not applies_to(copy, pod) or not _short(copy, needed)

    look = _Look(clock.monotonic())
    while True:
        waited = clock.monotonic() - look.started
        quota = lookups.managed_quota(request.namespace)
        if quota is None:
            return TargetAdmission("no-managed-quota", waited)
        short = _short(quota, needed) if applies_to(quota, pod) else []
        if not short:
            if live is not None and look.reads_live(quota, pod, migration):
                seen = await _live_view(live, quota, needed, clock)
                if seen == "stale":
                    await changes.next_change(request.namespace, max(wait - waited, 0.0))
                    look.changes_awaited += 1
                elif seen == "newer":  # quota admission may lag it as ours did: the grace
                    look.live_grace_until = clock.monotonic() + LISTER_GRACE
                continue  # the cache may have changed meanwhile: look again
            hold = max(
                changes.settling(f"{request.namespace}/{name_of(quota)}", fits),
                look.live_grace_until - clock.monotonic(),
            )
            if hold < SHORTEST_HOLD or waited >= wait + LISTER_GRACE:
                return look.fitted(clock)
            await clock.sleep(hold)
            continue  # a copy it does not fit may have come meanwhile: look again
        if no_raise_coming(quota, lookups.namespace(request.namespace)):
            return TargetAdmission("no-raise-coming", waited, short)
        if waited >= wait:
            if gave_up is not None and wait > 0:
                gave_up.note(migration, wait)
            return TargetAdmission("timed-out", waited, short)
        await changes.next_change(request.namespace, wait - waited)
        look.changes_awaited += 1


@dataclass
class _Look:
    """What one target pod's admission has done so far (`admit_target`)."""

    started: float
    changes_awaited: int = 0
    live_read: bool = False
    live_grace_until: float = float("-inf")
    """Until when quota admission may still lag a live copy newer than our cache."""

    def reads_live(self, quota: Object, pod: Object, migration: str) -> bool:
        """Whether the quota is read live now: once, on the first look, where it charges the
        pod and does not name the pod's migration (`raised_for`); marks it read."""
        if self.live_read or self.changes_awaited or not applies_to(quota, pod):
            return False
        self.live_read = True
        return not raised_for(quota, migration)

    def fitted(self, clock: Clock) -> TargetAdmission:
        """The pod fits, and every copy quota admission may still read does too."""
        outcome: Outcome = "fits" if self.changes_awaited == 0 else "fitted-after-wait"
        return TargetAdmission(outcome, clock.monotonic() - self.started)


def raised_for(quota: Object, migration_uid: str) -> bool:
    """Whether `quota`, as this copy shows it, was written by a plan that held the room of the
    migration `migration_uid` (ANNOTATION_ROOM_MIGRATIONS names it; written whenever the plan
    holds that room, raised above the base or not): no release of that room can be newer than
    this copy while the migration's target pod is being created, so the live read has nothing
    to add (module docstring)."""
    return migration_uid in room_migrations(annotations_of(quota))


def no_raise_coming(quota: Object, namespace: Object | None) -> bool:
    """Whether the controller will not raise `quota` for a migration: Harvester's skip
    annotation on it, or the namespace's opt-out label (plan.opted_out). The controller's
    global switch is not known here: its target pods wait as for a raise that is late."""
    return parse_migration_annotations(annotations_of(quota)).skip_auto_scaling or opted_out(
        namespace
    )


LiveView = Literal["same", "newer", "stale", "unread"]


async def _live_view(
    live: LiveQuotas, cached: Object, needed: ResourceList, clock: Clock
) -> LiveView:
    """How the quota as the API server has it now compares with the cached one the pod fits:
    the same object, a newer one the pod fits too, one it does not fit (or gone: "stale"), or
    unread (the cached decision stands)."""
    namespace, name = namespace_of(cached), name_of(cached)
    reading = asyncio.ensure_future(live(namespace, name))
    if not await wait_at_most(clock, reading, LIVE_READ_TIMEOUT):
        reading.cancel()
        log.debug("quota %s/%s not read live in time: the cache decides", namespace, name)
        return "unread"
    try:
        current = reading.result()
    except errors.ApiError as error:
        log.debug("quota %s/%s not read live (%s): the cache decides", namespace, name, error)
        return "unread"
    if current is None or _short(current, needed):
        return "stale"
    same = metadata(current).get("resourceVersion") == metadata(cached).get("resourceVersion")
    return "same" if same else "newer"


def _short(quota: Mapping[str, Any], needed: ResourceList) -> list[Shortfall]:
    """What quota admission would refuse the pod for now, by the cached status."""
    status = quota.get("status") or {}
    hard = parse_resource_list_leniently(status.get("hard"))
    used = parse_resource_list_leniently(status.get("used"))
    return shortfalls(needed, hard, used)
