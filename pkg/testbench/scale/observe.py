"""What the scale run watches besides KubeVirt: the managed quotas, and the processes it measures.

`QuotaWatch` keeps the managed ResourceQuota of every namespace of the run, the moments each
migration room annotation (``harvesterhci.io/migrating*``) appeared on it and the moments its
``spec.hard`` rose. It answers, for a migration created at a moment, when its room was raised,
and, once a step settled, which quotas drifted from their base and which still carry a migration
annotation. Our controller writes a VM's room key (``migrating-<vm>``, or on a quota adopted
from Harvester its digest form) in the same update as the raised ``spec.hard``: the key's
appearance is the raise. Harvester's migration controller writes its key
(``migratingUID-<vmi uid>``) alone and its resourcequota controller raises ``spec.hard`` in a
second write: for Harvester the raise is the first rise of ``spec.hard`` after the key appeared
(`raised_at`'s ``harvester``).

`ProcessSample` reads a process's CPU seconds and resident memory from /proc (Linux).
`pod_create_conflicts` scrapes the API server's own count of pod creates it answered 409.
All run on one event loop; not thread-safe.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ...generic.client import ApiClient
from ...generic.clock import REAL_CLOCK, Clock
from ...generic.informer import ResourceEventHandler, SharedInformerFactory
from ...generic.meta import annotations_of
from ...generic.resource import RESOURCE_QUOTAS, Object, key_of
from ...generic.rest import raise_for_status
from ...generic.store import Tombstone
from ...util import resources
from ...util.annotations import (
    LABEL_DEFAULT_RESOURCE_QUOTA,
    MIGRATING_PREFIX,
    adopted_migrating_vm_annotation_key,
    legacy_migrating_vm_annotation_key,
    migrating_uid_annotation_key,
    migrating_vm_annotation_key,
)
from ...util.resourcequota.base import ANNOTATION_APPLIED
from ...util.resources import ResourceList

APISERVER_REQUESTS: Final = "apiserver_request_total{"
CREATE_VERBS: Final = frozenset({"POST", "create"})
"""How apiserver_request_total names a create: the HTTP method its metrics keep for it (POST), or
the Kubernetes verb, should a version name it so."""
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
STALE_PREFIXES: Final = (MIGRATING_PREFIX, ANNOTATION_APPLIED)
"""Annotations that must be gone from a quota once no migration holds room in its namespace."""


def room_keys(vm: str) -> frozenset[str]:
    """The quota annotation keys any of which holds `vm`'s room as our controller writes it: its
    name key (and the older form), or the digest form it writes on an adopted quota."""
    return frozenset(
        {
            legacy_migrating_vm_annotation_key(vm),
            migrating_vm_annotation_key(vm),
            adopted_migrating_vm_annotation_key(vm),
        }
    )


class QuotaWatch:
    """The run's managed quotas and when each VM's room appeared (see the module docstring)."""

    def __init__(
        self, client: ApiClient, in_run: Callable[[str], bool], clock: Clock = REAL_CLOCK
    ) -> None:
        self.clock = clock
        self._in_run = in_run
        self._factory = SharedInformerFactory(client, clock=clock)
        self._quotas = self._factory.informer(
            RESOURCE_QUOTAS, label_selector=f"{LABEL_DEFAULT_RESOURCE_QUOTA}=true"
        )
        self._rooms: dict[tuple[str, str], set[str]] = {}
        """(namespace, quota key) -> its room annotation keys when last seen."""
        self._hard: dict[tuple[str, str], ResourceList] = {}
        """(namespace, quota key) -> its spec.hard when last seen."""
        self._appeared: dict[tuple[str, str], list[float]] = {}
        """(namespace, room annotation key) -> monotonic times it appeared, oldest first."""
        self._rises: dict[str, list[float]] = {}
        """namespace -> monotonic times its quota's spec.hard rose on some key, oldest first."""
        self._quotas.add_event_handler(
            ResourceEventHandler.of_latest(self._seen, self._gone),
            name="scale run: quota rooms",
        )

    async def start(self, sync_timeout: float = 60.0) -> None:
        self._factory.start()
        if not await self._factory.wait_for_cache_sync(sync_timeout):
            await self._factory.stop()
            raise TimeoutError(f"the quota watch did not sync within {sync_timeout}s")

    async def stop(self) -> None:
        await self._factory.stop()

    def _seen(self, quota: Object) -> None:
        namespace, _ = _split(key_of(quota))
        if not self._in_run(namespace):
            return
        now = self.clock.monotonic()
        key = (namespace, key_of(quota))
        rooms = {k for k in annotations_of(quota) if k.startswith(MIGRATING_PREFIX)}
        for room in rooms - self._rooms.get(key, set()):
            self._appeared.setdefault((namespace, room), []).append(now)
        self._rooms[key] = rooms
        hard = _hard(quota)
        before = self._hard.get(key)
        if before is not None and any(v > before.get(k, v) for k, v in hard.items()):
            self._rises.setdefault(namespace, []).append(now)
        self._hard[key] = hard

    def _gone(self, obj: Object | Tombstone) -> None:
        quota = obj.obj if isinstance(obj, Tombstone) else obj
        namespace, _ = _split(key_of(quota))
        self._rooms.pop((namespace, key_of(quota)), None)
        self._hard.pop((namespace, key_of(quota)), None)

    def raised_at(
        self,
        namespace: str,
        vm: str,
        since: float,
        *,
        vmi_uid: str | None = None,
        harvester: bool = False,
    ) -> float | None:
        """When the VM's room was raised at or after `since` (monotonic), if it was: the first
        appearance of one of our keys for the VM (its name key, or the digest form we write on
        an adopted quota); with `harvester`, the first rise of the namespace's ``spec.hard`` at
        or after the appearance of Harvester's key for the VMI (`vmi_uid`; None: never)."""
        if not harvester:
            keys = room_keys(vm)
            found = [t for k in keys if (t := self._first(namespace, k, since)) is not None]
            return min(found, default=None)
        if vmi_uid is None:
            return None
        recorded = self._first(namespace, migrating_uid_annotation_key(vmi_uid), since)
        if recorded is None:
            return None
        return next((t for t in self._rises.get(namespace, []) if t >= recorded), None)

    def _first(self, namespace: str, key: str, since: float) -> float | None:
        return next((t for t in self._appeared.get((namespace, key), []) if t >= since), None)

    def quotas(self) -> list[Object]:
        return [q for q in self._quotas.store.iter() if self._in_run(_split(key_of(q))[0])]

    def drift(self, bases: Mapping[str, ResourceList]) -> dict[str, dict[str, str]]:
        """Per namespace, the keys whose ``spec.hard`` differs from the base, with their
        difference (hard - base); a namespace whose quota is missing drifts on every key."""
        drifted: dict[str, dict[str, str]] = {}
        by_namespace = {_split(key_of(q))[0]: q for q in self.quotas()}
        for namespace, base in bases.items():
            quota = by_namespace.get(namespace)
            hard = _hard(quota) if quota is not None else {}
            diff = {
                k: str(hard[k] - v) if k in hard else "missing"
                for k, v in base.items()
                if hard.get(k) != v
            }
            if diff:
                drifted[namespace] = diff
        return drifted

    def stale(self) -> dict[str, list[str]]:
        """Per namespace, the migration annotations still on its quota."""
        found: dict[str, list[str]] = {}
        for quota in self.quotas():
            keys = sorted(k for k in annotations_of(quota) if k.startswith(STALE_PREFIXES))
            if keys:
                found[_split(key_of(quota))[0]] = keys
        return found


def _split(key: str) -> tuple[str, str]:
    namespace, _, name = key.partition("/")
    return namespace, name


def _hard(quota: Object) -> ResourceList:
    try:
        return resources.parse_resource_list((quota.get("spec") or {}).get("hard") or {})
    except ValueError:
        return {}


@dataclass(frozen=True)
class ProcessSample:
    """CPU seconds (user + system) and resident bytes of one process at one moment."""

    cpu_seconds: float
    rss_bytes: int

    @classmethod
    def of(cls, pid: int) -> ProcessSample:
        """Read from /proc; a process that is gone reads as zeros."""
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return cls(0.0, 0)
        ticks = os.sysconf("SC_CLK_TCK")
        pages = int(stat[21])
        return cls((int(stat[11]) + int(stat[12])) / ticks, pages * os.sysconf("SC_PAGE_SIZE"))


def count_pod_create_conflicts(exposition: str) -> float:
    """Pod creates the API server answered 409 (Conflict: quota admission lost its status update
    to another write of the quota, or the pod existed), summed over the other labels of
    apiserver_request_total, from its /metrics text. Only that metric's lines are parsed: the
    whole exposition is megabytes the scrape would otherwise decode."""
    total = 0.0
    for line in exposition.splitlines():
        if not line.startswith(APISERVER_REQUESTS):
            continue
        labels_text, _, value = line[len(APISERVER_REQUESTS) :].rpartition("} ")
        labels = dict(_LABEL.findall(labels_text))
        if (
            labels.get("resource") == "pods"
            and not labels.get("subresource")
            and labels.get("verb") in CREATE_VERBS
            and labels.get("code") == "409"
        ):
            total += float(value.split()[0])
    return total


async def pod_create_conflicts(api: ApiClient) -> float:
    """The API server's count of pod creates it answered 409 so far (its /metrics, read with
    `api`'s credentials; `count_pod_create_conflicts`). A step's delta is its own when steps run
    one after the other."""
    async with api.rest.exchange("GET", "/metrics", request_timeout=60.0) as response:
        await raise_for_status(response)
        return count_pod_create_conflicts(await response.text())
