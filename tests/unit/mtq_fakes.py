"""An in-memory stand-in for the API server and the caches the MTQ reconcile reads, for unit tests
of its step order: merge patches with resourceVersion preconditions, status subresources,
finalizers, and a write budget after which every write fails (a controller killed mid-flight)."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

from harvester_quota.apis.kubevirt import LABEL_MIGRATION_JOB
from harvester_quota.apis.mtq import VMMRQS
from harvester_quota.config.management import Management, Options
from harvester_quota.controller.mtq.blocked import TARGET_INDEX
from harvester_quota.controller.mtq.vmmrq_controller import MtqReconciler
from harvester_quota.generic import errors
from harvester_quota.generic.pendingwrites import PendingWrites
from harvester_quota.generic.resource import NAMESPACES, Object, Resource
from harvester_quota.testbench.clock import FakeClock

Obj = dict[str, Any]


class Killed(Exception):
    """The controller process died at this write (nothing was written)."""


def merge(target: Obj, patch: Obj) -> Obj:
    """RFC 7386 JSON merge patch."""
    out = copy.deepcopy(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def key_of(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]


Admission = Callable[[Resource, Obj, str, bool], errors.ApiError | None]
"""(resource, the object as it is, subresource, dry run) -> the refusal to answer, or None."""


@dataclass
class FakeCluster:
    objects: dict[Resource, dict[str, Obj]] = field(default_factory=dict)
    writes: list[str] = field(default_factory=list)
    writes_left: int | None = None
    dry_runs: list[str] = field(default_factory=list)
    admission: Admission | None = None
    """A validating admission step every patch meets (dry runs too), as a webhook would."""
    _versions: itertools.count[int] = field(default_factory=lambda: itertools.count(100))

    def put(self, resource: Resource, obj: Obj) -> Obj:
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = str(next(self._versions))
        stored["metadata"].setdefault("uid", f"uid-{stored['metadata']['name']}")
        self.objects.setdefault(resource, {})[key_of(stored)] = stored
        return copy.deepcopy(stored)

    def get(self, resource: Resource, key: str) -> Obj | None:
        found = self.objects.get(resource, {}).get(key)
        return copy.deepcopy(found) if found is not None else None

    def _spend(self, what: str) -> None:
        if self.writes_left is not None:
            if self.writes_left <= 0:
                raise Killed(what)
            self.writes_left -= 1
        self.writes.append(what)

    # The client ------------------------------------------------------------------------------

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Obj | list[Obj],
        namespace: str | None = None,
        *,
        subresource: str = "",
        dry_run: bool = False,
        **_: Any,
    ) -> Obj:
        key = f"{namespace}/{name}" if namespace else name
        current = self.objects.get(resource, {}).get(key)
        if current is None:
            raise errors.NotFound(f"{key} not found", status=404)
        if dry_run:
            self.dry_runs.append(f"{resource.plural} {key}")
        refusal = (
            self.admission(resource, current, subresource, dry_run) if self.admission else None
        )
        if refusal is not None:
            raise refusal
        if dry_run:
            return copy.deepcopy(current)
        if isinstance(patch, list):
            return self._json_patch(resource, key, current, patch, subresource)
        wanted = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
            raise errors.Conflict(f"{key} changed", status=409)
        self._spend(f"{resource.plural}{'/' + subresource if subresource else ''} {key}")
        body = {k: v for k, v in patch.items() if k != "metadata"}
        meta = {k: v for k, v in (patch.get("metadata") or {}).items() if k != "resourceVersion"}
        if subresource == "status":
            body = {"status": body.get("status")}
        elif resource == VMMRQS:
            body.pop("status", None)
        updated = merge(current, {**body, "metadata": meta})
        return self._store(resource, updated)

    def _json_patch(
        self, resource: Resource, key: str, current: Obj, ops: list[Obj], subresource: str
    ) -> Obj:
        """RFC 6902 add, remove and test, as the API server applies them (a failed test: 422
        without causes); the status subresource keeps only the patched status."""
        patched = copy.deepcopy(current)
        for op in ops:
            *parents, last = [
                p.replace("~1", "/").replace("~0", "~") for p in op["path"][1:].split("/")
            ]
            parent: Any = patched
            for part in parents:
                parent = parent.get(part) if isinstance(parent, dict) else None
            if not isinstance(parent, dict):
                raise errors.Invalid("the server rejected our request", status=422)
            if op["op"] == "test" and parent.get(last) != op["value"]:
                raise errors.Invalid("the server rejected our request", status=422)
            if op["op"] == "add":
                parent[last] = copy.deepcopy(op["value"])
            elif op["op"] == "remove":
                parent.pop(last, None)
        self._spend(f"{resource.plural}{'/' + subresource if subresource else ''} {key}")
        if subresource == "status":
            patched = {**current, "status": patched.get("status")}
        return self._store(resource, patched)

    async def update_status(self, resource: Resource, obj: Obj) -> Obj:
        key = key_of(obj)
        current = self.objects.get(resource, {}).get(key)
        if current is None:
            raise errors.NotFound(f"{key} not found", status=404)
        if obj["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise errors.Conflict(f"{key} changed", status=409)
        self._spend(f"{resource.plural}/status {key}")
        return self._store(resource, {**current, "status": copy.deepcopy(obj.get("status"))})

    def delete_gracefully(self, resource: Resource, key: str) -> None:
        """A user's DELETE: gone at once without finalizers, else marked deleting."""
        current = self.objects[resource][key]
        if not current["metadata"].get("finalizers"):
            del self.objects[resource][key]
            return
        current["metadata"]["deletionTimestamp"] = "2026-11-23T09:00:00Z"
        self._store(resource, current)

    def _store(self, resource: Resource, obj: Obj) -> Obj:
        meta = obj["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            del self.objects[resource][key_of(obj)]
            return copy.deepcopy(obj)
        meta["resourceVersion"] = str(next(self._versions))
        self.objects.setdefault(resource, {})[key_of(obj)] = obj
        return copy.deepcopy(obj)


class FakeStore:
    """A cache that always shows the cluster as it is (the informers caught up)."""

    def __init__(self, cluster: FakeCluster, resource: Resource) -> None:
        self.cluster, self.resource = cluster, resource
        self.indexes: dict[str, Callable[[Obj], list[str]]] = {}

    def _all(self) -> list[Obj]:
        return [copy.deepcopy(o) for o in self.cluster.objects.get(self.resource, {}).values()]

    def objects(self) -> list[Obj]:
        return self._all()

    def get(self, key: str) -> Obj | None:
        return self.cluster.get(self.resource, key)

    def by_index(self, index: str, value: str) -> list[Obj]:
        if index == "namespace":
            return [o for o in self._all() if o["metadata"].get("namespace") == value]
        if index == TARGET_INDEX:
            labels = lambda o: o["metadata"].get("labels") or {}  # noqa: E731
            return [o for o in self._all() if labels(o).get(LABEL_MIGRATION_JOB) == value]
        if index in self.indexes:
            return [o for o in self._all() if value in self.indexes[index](o)]
        raise KeyError(index)

    def index_keys(self, index: str, value: str) -> list[str]:
        return sorted(
            f"{o['metadata'].get('namespace')}/{o['metadata']['name']}"
            for o in self.by_index(index, value)
        )

    def has_index(self, name: str) -> bool:
        return name in self.indexes or name in ("namespace", TARGET_INDEX)

    def add_indexers(self, indexers: dict[str, Callable[[Obj], list[str]]]) -> None:
        self.indexes.update(indexers)


class FakeNamespaces:
    """The namespace controller as the reconcile uses it: cached reads and delayed enqueues."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.delayed: list[tuple[str, float]] = []
        self.informer: Any = None
        """The namespaces' informer (its pending writes), set by the harness."""

    def watch_related(self, *_: Any, **__: Any) -> None:
        return None

    def on_change(self, *_: Any) -> None:
        return None

    def enqueue_after(self, _namespace: str | None, name: str, delay: float) -> None:
        self.delayed.append((name, delay))

    def cached(self, _namespace: str | None, name: str) -> Obj | None:
        return self.cluster.get(NAMESPACES, name)


@dataclass
class Harness:
    cluster: FakeCluster
    clock: FakeClock
    events: list[tuple[str, str, str]]
    namespaces: FakeNamespaces

    def reconciler(self, lock_seconds: float = 30.0, *, paused: bool = False) -> MtqReconciler:
        """A fresh controller process over the same cluster (a restart forgets everything);
        `paused`: run with the global switch on."""
        informers: dict[str, SimpleNamespace] = {}

        def informer(resource: Resource, **_: Any) -> SimpleNamespace:
            """One informer per kind, as the factory shares them, with its pending writes."""
            if resource.plural not in informers:
                store = FakeStore(self.cluster, resource)
                pending = PendingWrites(store, self.clock)  # type: ignore[arg-type]
                informers[resource.plural] = SimpleNamespace(
                    store=store, name=resource.plural, pending=pending
                )
            return informers[resource.plural]

        self.namespaces.informer = informer(NAMESPACES)
        management = SimpleNamespace(
            client=self.cluster,
            clock=self.clock,
            options=Options(paused=paused),
            informers=SimpleNamespace(informer=informer),
            controllers=SimpleNamespace(namespaces=lambda: self.namespaces),
            recorder=SimpleNamespace(
                event=lambda obj, kind, reason, message: self.events.append(
                    (obj["metadata"]["name"], reason, message)
                )
            ),
        )
        return MtqReconciler(cast(Management, management), lock_seconds=lock_seconds)

    async def reconcile(self, reconciler: MtqReconciler, namespace: str = "tenant") -> Object:
        result = await reconciler.reconcile(namespace, self.cluster.get(NAMESPACES, namespace))
        assert result is not None
        return result


def harness() -> Harness:
    cluster = FakeCluster()
    return Harness(cluster, FakeClock(), [], FakeNamespaces(cluster))
