"""Scripted stand-ins for unit tests: a lister-watcher that plays watch streams, a recording sink."""

from __future__ import annotations

import asyncio
import copy
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from harvester_quota.generic.client import ListResult, WatchEvent
from harvester_quota.generic.reflector import ItemHook
from harvester_quota.generic.resource import Object
from harvester_quota.generic.store import Store
from harvester_quota.generic.views import NamespaceViews
from harvester_quota.testbench.codecs import JsonCodec
from harvester_quota.webhook.admission import Request
from harvester_quota.webhook.resources.common import Identities, Lookups
from harvester_quota.webhook.resources.pod.validator import PodCheck, check_rooms, rooms_question

HANG = "hang"


class CountingCodec(JsonCodec):
    """The JSON codec, counting the store's decodes."""

    def __init__(self) -> None:
        self.decoded = 0

    def decode(self, stored: Any) -> Object:
        self.decoded += 1
        return super().decode(stored)


def pod(name: str, rv: str, namespace: str = "ns", **extra: Any) -> Object:
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": rv, **extra}}


def event(kind: str, name: str, rv: str) -> WatchEvent:
    if kind == "BOOKMARK":
        return WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": rv}})
    return WatchEvent(kind, pod(name, rv))


def error_event(code: int, reason: str, message: str = "") -> WatchEvent:
    status = {"kind": "Status", "code": code, "reason": reason, "message": message or reason}
    return WatchEvent("ERROR", status)


class RequestRecorder:
    """A request observer (ApiClient.add_request_observer) that keeps (method, path, code)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def observe(self, method: str, path: str, params: object, code: str, seconds: float) -> None:
        assert seconds >= 0
        self.seen.append((method, path, code))


@dataclass
class ScriptedListerWatcher:
    """Answers list and watch calls from scripts, recording every call.

    A watch script is a list of steps: a WatchEvent is yielded, an Exception is raised (before
    any event if it is the first step: a refused watch), HANG waits forever (a silent connection).
    When the scripts run out, a list fails and a watch hangs.
    """

    lists: deque[ListResult | Exception] = field(default_factory=deque)
    watches: deque[list[Any]] = field(default_factory=deque)
    list_calls: list[tuple[str, int]] = field(default_factory=list)
    watch_calls: list[tuple[str, int]] = field(default_factory=list)
    active_watches: int = 0

    def add_list(self, *items: Object, rv: str, paginated: bool = False) -> None:
        self.lists.append(ListResult(list(items), rv, paginated))

    def add_list_error(self, error: Exception) -> None:
        self.lists.append(error)

    def add_watch(self, *steps: Any) -> None:
        self.watches.append(list(steps))

    async def list(
        self, *, resource_version: str, page_size: int, each: ItemHook | None = None
    ) -> ListResult:
        self.list_calls.append((resource_version, page_size))
        if not self.lists:
            raise ConnectionError("no scripted list left")
        answer = self.lists.popleft()
        if isinstance(answer, Exception):
            raise answer
        if each is None:
            return answer
        # As the client does: each item, a fresh copy as if just decoded, through ``each``.
        items = [each(copy.deepcopy(item)) for item in answer.items]
        return ListResult(items, answer.resource_version, answer.paginated)

    def watch(self, *, resource_version: str, timeout_seconds: int) -> AsyncIterator[WatchEvent]:
        self.watch_calls.append((resource_version, timeout_seconds))
        steps = self.watches.popleft() if self.watches else [HANG]
        return self._play(steps)

    async def _play(self, steps: list[Any]) -> AsyncIterator[WatchEvent]:
        self.active_watches += 1
        try:
            for step in steps:
                if step == HANG:
                    await asyncio.Future()
                elif isinstance(step, Exception):
                    raise step
                else:
                    yield step
        finally:
            self.active_watches -= 1


@dataclass
class RecordingSink:
    """Records what a reflector hands its sink."""

    lists: list[tuple[list[Object], str]] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)

    def prepare_listed(self, item: Object) -> Object:
        return item

    def on_list(self, items: list[Object], resource_version: str) -> None:
        self.lists.append((items, resource_version))

    def on_event(self, event_type: str, obj: Object) -> None:
        metadata = obj["metadata"]
        self.events.append((event_type, metadata["name"], metadata["resourceVersion"]))


class FakeApi:
    """An in-memory stand-in for ApiClient's object calls, with optimistic concurrency.

    Unit tests only: it knows nothing of admission, quotas or watches.
    """

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str | None, str], Object] = {}
        self.calls: list[tuple[str, str, str]] = []
        self.version = 0
        self.fail_next: list[Exception] = []

    def _key(self, resource: Any, namespace: str | None, name: str) -> tuple[str, str | None, str]:
        return (resource.name, namespace if resource.namespaced else None, name)

    def _bump(self, obj: Object) -> Object:
        self.version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        obj["metadata"].setdefault("uid", f"uid-{obj['metadata']['name']}")
        return obj

    def _maybe_fail(self) -> None:
        if self.fail_next:
            raise self.fail_next.pop(0)

    async def get(self, resource: Any, name: str, namespace: str | None = None) -> Object:
        from harvester_quota.generic import errors

        self.calls.append(("get", resource.name, name))
        self._maybe_fail()
        found = self.objects.get(self._key(resource, namespace, name))
        if found is None:
            raise errors.NotFound(f"{resource.name} {name} not found")
        return copy.deepcopy(found)

    async def create(self, resource: Any, obj: Object, namespace: str | None = None) -> Object:
        from harvester_quota.generic import errors

        self.calls.append(("create", resource.name, obj["metadata"]["name"]))
        self._maybe_fail()
        metadata = obj["metadata"]
        key = self._key(resource, namespace or metadata.get("namespace"), metadata["name"])
        if key in self.objects:
            raise errors.AlreadyExists(f"{metadata['name']} exists", reason="AlreadyExists")
        stored = self._bump(copy.deepcopy(obj))
        self.objects[key] = stored
        return copy.deepcopy(stored)

    async def update(self, resource: Any, obj: Object, *, subresource: str = "") -> Object:
        from harvester_quota.generic import errors

        metadata = obj["metadata"]
        self.calls.append(("update", resource.name, metadata["name"]))
        self._maybe_fail()
        key = self._key(resource, metadata.get("namespace"), metadata["name"])
        current = self.objects.get(key)
        if current is None:
            raise errors.NotFound(f"{metadata['name']} not found")
        if metadata.get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise errors.Conflict("the object has been modified", reason="Conflict")
        stored = self._bump(copy.deepcopy(obj))
        self.objects[key] = stored
        return copy.deepcopy(stored)

    async def list(
        self, resource: Any, namespace: str | None = None, *, label_selector: str | None = None
    ) -> Object:
        """Items of one kind (and namespace); `label_selector` only as one `key=value`."""
        self.calls.append(("list", resource.name, namespace or ""))
        self._maybe_fail()
        key, _, value = (label_selector or "").partition("=")
        items = [
            copy.deepcopy(obj)
            for (kind, ns, _name), obj in self.objects.items()
            if kind == resource.name
            and (namespace is None or ns == namespace)
            and (not key or (obj["metadata"].get("labels") or {}).get(key) == value)
        ]
        return {"items": items, "metadata": {"resourceVersion": str(self.version)}}

    async def delete(
        self,
        resource: Any,
        name: str,
        namespace: str | None = None,
        *,
        preconditions: dict[str, str] | None = None,
        **_: Any,
    ) -> Object:
        from harvester_quota.generic import errors

        self.calls.append(("delete", resource.name, name))
        self._maybe_fail()
        key = self._key(resource, namespace, name)
        current = self.objects.get(key)
        if current is None:
            raise errors.NotFound(f"{name} not found")
        wanted = (preconditions or {}).get("resourceVersion")
        if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
            raise errors.Conflict("precondition failed", reason="Conflict")
        return self.objects.pop(key)

    async def patch(
        self, resource: Any, name: str, patch: Object, namespace: str | None = None, **_: Any
    ) -> Object:
        from harvester_quota.generic import errors

        self.calls.append(("patch", resource.name, name))
        self._maybe_fail()
        key = self._key(resource, namespace, name)
        current = self.objects.get(key)
        if current is None:
            raise errors.NotFound(f"{name} not found")
        current.update(copy.deepcopy(patch))
        return copy.deepcopy(self._bump(current))


def pod_check(request: Request, lookups: Lookups, identities: Identities) -> PodCheck | None:
    """The check the webhook makes of a pod create or resize (webhook/pods.py), or None:
    `rooms_question`, then, where it asks, `check_rooms` (the costly part)."""
    question = rooms_question(request, lookups, identities)
    return None if question is None else check_rooms(request, lookups, question)


def upsert(store: Store, obj: Object) -> Object | None:
    """Adds or replaces `obj` in `store` as the informer's intake does (prepare, then put);
    returns the previous object, decoded, or None."""
    old = store.put(store.prepare(obj))
    return None if old is None else old.get()


def set_aside(views: NamespaceViews[Any], namespace: str) -> int:
    """How many of the namespace's views `views` has set aside."""
    return len(views._aside.get(namespace) or {})
