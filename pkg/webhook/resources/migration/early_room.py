"""Migration creates: the migration's room written into its namespace's quota before the
migration is stored (early room; the model is util/resourcequota/early.py).

At a VirtualMachineInstanceMigration's create the API server has already given it its name, uid
and creation time when it asks us; the migration is stored only once we answer. Here the room
the controller's plan will give it (the launcher pod KubeVirt would render for its VMI now) is
written first: the namespace labelled room-held (the fail-closed pods rule's selector, as the
controller does before a raise), then the quota raised by the room, with the VM's
``harvesterhci.io/migrating-<vm>`` annotation and the early-room annotation, in one JSON patch
conditional on the quota as read (conditional.py), and its copy into status.hard, which quota
admission checks. So when virt-controller creates the target pod, its room is there; the controller, seeing the early room, plans the same quota and writes
nothing until the room is given back.

Concurrency: within one process, the admissions of a namespace queue up and are written
together, one write at a time per namespace (a burst of 50 migrations costs a few writes, not
50 conflicting ones). Across replicas and with the controller, the conditional patch decides:
a lost race reads the quota again and adds what is still missing, at most MAX_TRIES times.

Never a denial: the migration is allowed in every case, also when the room could not be written
(the controller raises it as before, on the migration's watch event). An admission waits for its
write at most `within` seconds (below the rule's timeout). Skipped, and left to the controller:
dry runs, namespaces without a managed quota, with the skip switch, with a Rancher base (Rancher's
agent resets the quota on namespace events and may forbid our writes: the controller's
Rancher path handles them), quotas the controller has not recorded a base for yet, a VMI this
replica does not know, a VMI with a migration already under way (KubeVirt refuses the second).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from ....apis.kubevirt import FINAL_PHASES
from ....generic import errors
from ....generic.client import ApiClient
from ....generic.clock import Clock
from ....generic.meta import annotations_of, labels, metadata, status
from ....generic.newest import NewestPerKey
from ....generic.ownwrites import OwnWrites
from ....generic.permission import Permission
from ....generic.resource import NAMESPACES, RESOURCE_QUOTAS, Object
from ....util.annotations import LABEL_ROOM_HELD, parse_migration_annotations
from ....util.podusage import parse_time
from ....util.resourcequota.base import ANNOTATION_BASE, BaseError, rancher_base
from ....util.resourcequota.conditional import (
    conditional_patch,
    copy_hard_to_status,
    failed_test,
)
from ....util.resourcequota.early import (
    Admitted,
    EarlyRoom,
    early_room_patch,
    parse_early_rooms,
)
from ....util.resourcequota.rooms import RoomInputs, plan_rooms
from ...admission import Request
from ..common import Lookups

log = logging.getLogger(__name__)

EARLY_ROOM_WITHIN = 3.0
"""Seconds an admission waits for its room's write (the rule gives the webhook 5 s)."""
MAX_TRIES = 4
"""Writes of one batch before it gives up on lost races (the controller raises then)."""

Outcome = Literal[
    "written",
    "dry-run",
    "no-managed-quota",
    "skipped",
    "rancher",
    "no-recorded-base",
    "no-vmi",
    "already-migrating",
    "no-room",
    "lost-races",
    "error",
    "timed-out",
]
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)


def early_room_for(request: Request, lookups: Lookups, ttl: float) -> Admitted | Outcome:
    """The room to write for a migration being created, or why none is written here."""
    namespace = request.namespace
    vmi_name = str(((request.obj or {}).get("spec") or {}).get("vmiName") or "")
    quota = lookups.managed_quota(namespace)
    skipped = _why_not_here(request, lookups, vmi_name, quota)
    if skipped is not None or quota is None:
        return skipped or "no-managed-quota"
    try:
        early = _early_room(request, vmi_name, lookups.now(), ttl)
    except ValueError as error:
        log.warning("migration %s/%s: %s; left to the controller", namespace, request.name, error)
        return "no-room"
    rooms = plan_rooms(
        RoomInputs(
            migrations=[early.as_migration(namespace)],
            vmis=lookups.vmis(namespace),
            pods=lookups.launcher_pods(namespace),
            now=lookups.now(),
            launcher=lookups.kubevirt_settings().for_namespace(
                [quota], lookups.namespace(namespace)
            ),
        )
    )
    if not rooms.rooms:
        return "no-room"
    return Admitted(early=early, vm_name=rooms.rooms[0].vm_name, room=rooms.rooms[0].room)


def _why_not_here(
    request: Request, lookups: Lookups, vmi_name: str, quota: Object | None
) -> Outcome | None:
    """Why the migration's room is left to the controller (the module docstring), or None.
    Checked in order, each only if those before it passed."""
    namespace = request.namespace
    quota_annotations = annotations_of(quota or {})
    checks: tuple[tuple[Outcome, Callable[[], bool]], ...] = (
        ("dry-run", lambda: request.dry_run),
        ("no-managed-quota", lambda: quota is None),
        ("skipped", lambda: parse_migration_annotations(quota_annotations).skip_auto_scaling),
        ("rancher", lambda: _has_rancher_base(lookups.namespace(namespace))),
        ("no-recorded-base", lambda: not quota_annotations.get(ANNOTATION_BASE)),
        ("no-vmi", lambda: not vmi_name or lookups.vmis(namespace).get(vmi_name) is None),
        ("already-migrating", lambda: _migrating(lookups, namespace, quota or {}, vmi_name)),
    )
    return next((outcome for outcome, applies in checks if applies()), None)


def _has_rancher_base(namespace: Object | None) -> bool:
    if namespace is None:
        return False
    try:
        return rancher_base(namespace) is not None
    except BaseError:
        return True  # Rancher's, if unreadable: the controller says why


def _migrating(lookups: Lookups, namespace: str, quota: Object, vmi_name: str) -> bool:
    """Whether a migration of the VMI is already under way (not finished, not deleted), or
    has an early room standing: KubeVirt refuses a second one, and a tenant repeating refused
    creates must not cost a quota write each. Reads only the VMI's migrations."""
    for migration in lookups.migrations_of_vmi(namespace, vmi_name):
        if str(status(migration).get("phase") or "") in FINAL_PHASES:
            continue
        if metadata(migration).get("deletionTimestamp"):
            continue
        return True
    now = lookups.now()
    return any(
        room.vmi == vmi_name and room.expires > now and not _stored(lookups, namespace, room)
        for room in parse_early_rooms(quota)[0]
    )


def _stored(lookups: Lookups, namespace: str, room: EarlyRoom) -> bool:
    """Whether the caches show the migration an early room was written for."""
    migration = lookups.migration(namespace, room.migration)
    return migration is not None and metadata(migration).get("uid") == room.migration_uid


def _early_room(request: Request, vmi_name: str, now: datetime.datetime, ttl: float) -> EarlyRoom:
    meta = metadata(request.obj or {})
    uid, name = str(meta.get("uid") or ""), str(meta.get("name") or request.name or "")
    if not uid or not name:
        raise ValueError("the request carries no name or uid for the migration")
    created = meta.get("creationTimestamp")
    parse_time(created, "metadata.creationTimestamp")
    return EarlyRoom(
        migration_uid=uid,
        migration=name,
        vmi=vmi_name,
        created=str(created),
        expires=now + datetime.timedelta(seconds=ttl),
    )


@dataclass
class _Batch:
    """Admissions of one namespace waiting for the next write."""

    quota_name: str
    admitted: list[Admitted] = field(default_factory=list)
    done: asyncio.Future[Outcome] | None = None


class EarlyRoomWriter:
    """Writes early rooms, batched per namespace (see the module docstring).

    Event loop only. `admit` may be called concurrently for any namespaces; each namespace has at
    most one write in flight, and the admissions that arrive meanwhile are the next write.
    """

    def __init__(
        self,
        client: ApiClient,
        lookups: Lookups,
        clock: Clock,
        *,
        ttl: float,
        within: float = EARLY_ROOM_WITHIN,
        counted: Callable[[Outcome], None] = lambda _outcome: None,
        wrote: Callable[[str], None] = lambda _result: None,
    ) -> None:
        """`counted` is told each admission's outcome, `wrote` each quota write's result
        (written, conflict, error): the server's metrics."""
        self._client = client
        self._lookups = lookups
        self._clock = clock
        self.ttl = ttl
        self.within = within
        self.counted = counted
        self.wrote = wrote
        self._waiting: dict[str, _Batch] = {}
        self._writers: dict[str, asyncio.Task[None]] = {}
        self._quota_writes = OwnWrites()
        self._labelled = OwnWrites()
        self._label_permission = Permission(
            "label namespaces",
            "early rooms are written without the room-held label; grant the webhook patch on "
            "namespaces",
            clock,
        )
        self._publisher: NewestPerKey[Object] = NewestPerKey(
            "copying an early room into status.hard", self._publish
        )
        """Copies each raise into status.hard beside the namespace's next writes (`_publish`)."""
        self._status_permission = Permission(
            "write resourcequotas/status",
            "quota admission sees an early room once kube-controller-manager copies it; grant "
            "the webhook patch on resourcequotas/status",
            clock,
        )

    async def admit(self, request: Request) -> Outcome:
        """Writes the migration's room, or says why not; never raises (but for cancellation)."""
        found = early_room_for(request, self._lookups, self.ttl)
        if isinstance(found, str):
            self.counted(found)
            return found
        quota = self._lookups.managed_quota(request.namespace)
        assert quota is not None  # early_room_for found it
        done = self._enqueue(request.namespace, str(metadata(quota).get("name")), found)
        timer: asyncio.Future[Any] = asyncio.ensure_future(self._clock.sleep(self.within))
        waiting: set[asyncio.Future[Any]] = {done, timer}
        try:
            finished, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
        outcome: Outcome = done.result() if done in finished else "timed-out"
        self.counted(outcome)
        if outcome != "written":
            log.warning(
                "migration %s/%s: its room was not written at admission (%s); the controller "
                "raises it when it sees the migration",
                request.namespace,
                request.name,
                outcome,
            )
        return outcome

    def _enqueue(
        self, namespace: str, quota_name: str, admitted: Admitted
    ) -> asyncio.Future[Outcome]:
        batch = self._waiting.get(namespace)
        if batch is None or batch.quota_name != quota_name:
            batch = self._waiting[namespace] = _Batch(quota_name)
            batch.done = asyncio.get_running_loop().create_future()
        batch.admitted.append(admitted)
        if namespace not in self._writers:
            self._writers[namespace] = asyncio.ensure_future(self._drain(namespace))
        assert batch.done is not None
        return asyncio.shield(batch.done)

    async def _drain(self, namespace: str) -> None:
        """Writes the namespace's batches one after the other until none waits."""
        try:
            while (batch := self._waiting.pop(namespace, None)) is not None:
                assert batch.done is not None
                outcome = await self._write_batch(namespace, batch)
                if not batch.done.done():
                    batch.done.set_result(outcome)
        finally:
            del self._writers[namespace]

    async def _write_batch(self, namespace: str, batch: _Batch) -> Outcome:
        try:
            await self._label(namespace)
            for _ in range(MAX_TRIES):
                if await self._try_write(namespace, batch):
                    return "written"
            return "lost-races"
        except errors.ApiError as error:
            log.warning("%s: early room not written: %s", namespace, error)
            return "error"
        except (ValueError, OSError, TimeoutError) as error:
            log.warning("%s: early room not written: %s", namespace, error)
            return "error"

    async def _try_write(self, namespace: str, batch: _Batch) -> bool:
        """One conditional write of the batch's rooms into the quota as last known; False if
        the quota changed meanwhile (it is read again for the next try)."""
        quota = self._current_quota(namespace, batch.quota_name)
        if quota is None:
            quota = await self._client.get(RESOURCE_QUOTAS, batch.quota_name, namespace)
        patch = early_room_patch(quota, self._not_yet_stored(namespace, batch.admitted))
        if patch is None:
            return True  # every room is there already (another replica, an earlier try)
        try:
            written = await self._client.patch(
                RESOURCE_QUOTAS,
                batch.quota_name,
                conditional_patch(quota, patch),
                namespace,
                patch_type="json",
            )
        except errors.ApiError as error:
            if not isinstance(error, errors.Conflict) and not failed_test(error):
                self.wrote("error")
                raise
            self.wrote("conflict")
            fresh = await self._client.get(RESOURCE_QUOTAS, batch.quota_name, namespace)
            self._quota_writes.wrote(namespace, "", fresh)
            return False
        self.wrote("written")
        meta = metadata(quota)
        self._quota_writes.wrote(namespace, str(meta.get("resourceVersion", "")), written)
        log.info(
            "%s/%s: early room for %s",
            namespace,
            batch.quota_name,
            ", ".join(f"{a.vm_name} ({a.early.migration})" for a in batch.admitted),
        )
        if "spec" in patch:
            self._publisher.submit(namespace, written)
        return True

    def _not_yet_stored(self, namespace: str, admitted: list[Admitted]) -> list[Admitted]:
        """The admissions whose migration the caches do not show yet: one that does (its
        admission timed out and the API server stored it) is the controller's to raise."""
        return [a for a in admitted if not _stored(self._lookups, namespace, a.early)]

    def _current_quota(self, namespace: str, name: str) -> Object | None:
        cached = self._lookups.managed_quota(namespace)
        if cached is None or metadata(cached).get("name") != name:
            return None
        return self._quota_writes.newest(namespace, cached)

    async def _label(self, namespace: str) -> None:
        """Labels the namespace room-held before its quota is raised (as the controller does),
        unless it is already. Refused (no RBAC for it, or an API server just restarted), it
        goes on without it and tries again after a backoff (permission.py): the label guards
        the room, it never stands between a migration and its room."""
        cached = self._lookups.namespace(namespace)
        if cached is None or not self._label_permission.allowed():
            return
        current = self._labelled.newest(namespace, cached)
        if labels(current).get(LABEL_ROOM_HELD) == "true":
            return
        patch = {"metadata": {"labels": {LABEL_ROOM_HELD: "true"}}}
        try:
            written = await self._client.patch(NAMESPACES, namespace, patch)
        except errors.Forbidden as error:
            self._label_permission.refused(error)
            return
        self._label_permission.granted()
        self._labelled.wrote(namespace, str(metadata(current).get("resourceVersion", "")), written)

    async def _publish(self, written: Object) -> None:
        """Copies the raise into status.hard, run by `_publisher` once the spec write is in:
        quota admission checks status.hard, and kube-controller-manager's own copy comes only
        a moment later. Made beside the answers and the namespace's next batch, not before
        them: a target pod comes only after its migration is stored and virt-controller has
        seen it, and one that arrives before this copy waits for it in the target-room rule
        (pod/targets.py). One copy of a namespace's at a time, the newest written after it
        (NewestPerKey); each tests its own spec.hard, so an older one never lands over a
        newer spec. A failed copy is logged and left to kube-controller-manager."""
        if not self._status_permission.allowed():
            return
        try:
            await copy_hard_to_status(self._client, written)
        except errors.Forbidden as error:
            self._status_permission.refused(error)
            return
        except errors.ApiError as error:
            log.info("early room not copied into status.hard: %s", error)
            return
        self._status_permission.granted()

    async def stop(self) -> None:
        """Ends the writes and copies under way (their admissions answer as timed out)."""
        await self._publisher.stop()
        for task in list(self._writers.values()):
            task.cancel()
        await asyncio.gather(*self._writers.values(), return_exceptions=True)
