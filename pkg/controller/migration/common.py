"""What the VMIM and VMI controllers share: Harvester's migration annotations on a VMI, and the
touch of its VM that makes Harvester's UI refresh.

Ported from Harvester (pkg/controller/master/migration), whose UI reads them, and written only
with `run --harvester-annotations` (on Harvester, its own migration controller writes them for
every migration; without Harvester nothing reads them): the VMI annotations ``harvesterhci.io/migrationUID`` and ``harvesterhci.io/migrationState``
("Pending migration", "Migrating", "Aborting migration"), cleared when the migration ends, and the
VM's ``harvesterhci.io/timestamp``. Changed: these controllers never write a ResourceQuota (the
room mode's and MTQ mode's namespace reconciles do, through controller/quotawriter.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Final

from ...apis.kubevirt import VIRTUAL_MACHINE_INSTANCES, VIRTUAL_MACHINES
from ...config.management import Management
from ...generic import errors
from ...generic.meta import annotations_of, name, namespace
from ...generic.pendingwrites import PendingWrites
from ...generic.resource import Object
from ...util.annotations import (
    ANNOTATION_MIGRATION_STATE,
    ANNOTATION_MIGRATION_UID,
    ANNOTATION_TIMESTAMP,
)
from ..informers import QuotaInformers

ANNOTATION_MIGRATION_TARGET = "harvesterhci.io/migrationTargetNodeName"
MIGRATION_ANNOTATIONS = (
    ANNOTATION_MIGRATION_UID,
    ANNOTATION_MIGRATION_STATE,
    ANNOTATION_MIGRATION_TARGET,
)
"""Every annotation a migration leaves on its VMI; all are removed together when it ends (what
Harvester's `resetHarvesterMigrationStateInVmiAndSyncVM` and `resetHarvesterMigrationStateInVMI`
clear)."""

QuotaFirst = Callable[[str, float], Awaitable[object]]
"""Waits, at most the given seconds, until the namespace's quota reconciles queued or running at
the call have ended (QuotaReconciler.settled)."""

QUOTA_FIRST_SECONDS: Final = 1.0
"""How long an annotation waits for its namespace's raise. Harvester's annotations are for its UI
and nothing waits on them, while a raise is what a migration waits for: measured, 20 migrations
created at once in one namespace raised in 229 ms p50 with their 40 annotation and VM writes
racing the raise, 51 ms without them (bench/SCALE.md)."""


def annotation_changes(current: Mapping[str, str], wanted: Mapping[str, Any]) -> dict[str, Any]:
    """The part of `wanted` (None = remove) that differs from `current`: a no-op patch is never
    sent, so re-processing a VMIM costs no write."""
    return {
        key: value
        for key, value in wanted.items()
        if current.get(key) != value and not (value is None and key not in current)
    }


class VmiAnnotator:
    """Writes Harvester's migration annotations on VMIs, once per change.

    Both the VMIM and the VMI controller write them, and a VMI changes many times a second during
    a migration (virt-controller and virt-handler write its status), so the VMI cache often lags
    behind our own last patch: judged from the cache alone, each VMIM phase change re-sent the
    same annotations and touched the VM again (measured: 8 VMI and 8 VM patches per migration in
    a 100-migration drain, 3 when idle). Each VMI our patch returned is recorded in the VMIs'
    pending writes (`pending`, the VMI informer's by default: generic/pendingwrites.py) until the
    cache has caught up with it, and a change is compared with the newest VMI we know.

    With `quota_first`, a write first lets the namespace's queued and running quota reconciles
    end (at most QUOTA_FIRST_SECONDS): a burst of migrations would otherwise send two writes
    each to the API server ahead of, or beside, the raise they all wait for.

    Share one instance between the controllers that write VMIs (app.py does). Not thread-safe:
    call it from the event loop. The two controllers may call it for one VMI at once (both clear
    a finished migration's annotations, and both wait for the same release): the writes of one
    VMI are made one at a time, each judged against the other's returned patch, so the second
    sends nothing when the first already wrote its changes (measured without it: 3.3-4 VMI and VM
    patches per migration in quota namespaces, 3 without a quota, where nothing waits).

    `count_write` is told "vmi" and "vm" as each VMI patch and VM touch is sent
    (harvester_quota_api_writes_total).
    """

    def __init__(
        self,
        management: Management,
        quota_first: QuotaFirst | None = None,
        count_write: Callable[[str], None] | None = None,
        pending: PendingWrites | None = None,
    ) -> None:
        self.management = management
        self.count_write = count_write or _uncounted
        """Told "vmi" and "vm" as each write is sent (harvester_quota_api_writes_total)."""
        self._pending = (
            pending if pending is not None else QuotaInformers.of(management).vmis.pending
        )
        self._quota_first = quota_first
        self._writing = _OneAtATime()

    async def set(self, vmi: Object, changes: Mapping[str, Any]) -> None:
        """Patches the VMI's annotations if they differ, then touches its VM (Harvester's
        syncVM): Harvester's `setVmiMigrationUIDAnnotation`, `resetHarvesterMigrationStateInVMI`
        and `resetHarvesterMigrationStateInVmiAndSyncVM` in one, the changes saying which.

        A VMI or VM that went away since the cache saw it is not an error: there is nothing left
        to annotate. Other API errors propagate, so the controller re-queues the key with backoff.
        """
        vmi_name, vmi_namespace = name(vmi), namespace(vmi)
        key = f"{vmi_namespace}/{vmi_name}"
        wanted = self._wanted(vmi, changes)
        if wanted and self._quota_first is not None:
            await self._quota_first(vmi_namespace, QUOTA_FIRST_SECONDS)
        if not wanted:
            return
        async with self._writing.hold(key):
            # Judged again in turn: the other controller may have written it meanwhile.
            wanted = self._wanted(vmi, changes)
            if wanted:
                await self._write(key, vmi, wanted)

    async def _write(self, key: str, vmi: Object, wanted: Mapping[str, Any]) -> None:
        """Patches `wanted` onto the VMI, records the VMI it returned, touches its VM."""
        vmi_name, vmi_namespace = name(vmi), namespace(vmi)
        self.count_write("vmi")
        try:
            written = await self.management.client.patch(
                VIRTUAL_MACHINE_INSTANCES,
                vmi_name,
                {"metadata": {"annotations": wanted}},
                vmi_namespace,
            )
        except errors.NotFound:
            self._pending.forget(key)
            return
        self._pending.wrote(written)
        self.count_write("vm")
        await touch_vm(self.management, vmi_namespace, vmi_name)

    def _wanted(self, vmi: Object, changes: Mapping[str, Any]) -> dict[str, Any]:
        """The changes the newest VMI we know (the cache's or our last patch's) lacks."""
        return annotation_changes(annotations_of(self._pending.newest(vmi)), changes)


def _uncounted(kind: str) -> None:
    """No count (an annotator whose caller keeps no metrics)."""


class _OneAtATime:
    """One asyncio.Lock per key, dropped once nobody holds or awaits it (VMIs come and go)."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (None, 0))
        lock = lock or asyncio.Lock()
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            _, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)


async def touch_vm(management: Management, vm_namespace: str, vm_name: str) -> None:
    """Sets the VM's ``harvesterhci.io/timestamp`` to now (a VMI without a VM is skipped):
    Harvester's `syncVM`, so that Harvester's UI refreshes the VM's actions."""
    stamp = management.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        await management.client.patch(
            VIRTUAL_MACHINES,
            vm_name,
            {"metadata": {"annotations": {ANNOTATION_TIMESTAMP: stamp}}},
            vm_namespace,
        )
    except errors.NotFound:
        return
