"""Kubernetes Events, recorded the way client-go's recorder does: deduplicated and aggregated.

A controller that hits the same problem on every retry must not flood the API server with Events,
nor bury the first occurrence. As in client-go's EventCorrelator:
- an identical event (same object, type, reason, message) bumps ``count`` and ``lastTimestamp`` on
  the existing Event (a patch) instead of creating a new one;
- from the 10th event of the same object, type and reason within 10 minutes that differs only in
  its message on, they are folded into one Event "(combined from similar events): <latest>";
- a token bucket per object (burst 25, one token per 5 minutes) drops the rest.
Recording never blocks the caller: events go through a bounded queue to a background task, served
round-robin per namespace with a share per namespace (fairqueue.py), so one namespace's flood of
Warnings (a tenant's objects) neither drops nor delays another namespace's events.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TypeVar

from . import errors
from .client import ApiClient
from .clock import REAL_CLOCK, Clock
from .fairqueue import FairQueue
from .resource import EVENTS, Object
from .tasks import cancel_and_wait

log = logging.getLogger(__name__)
K = TypeVar("K")
V = TypeVar("V")

NORMAL = "Normal"
WARNING = "Warning"
MAX_MESSAGE = 1024
SIMILAR_LIMIT = 10
SIMILAR_WINDOW = 600.0
SPAM_BURST = 25
SPAM_REFILL_SECONDS = 300.0
CACHE_SIZE = 4096
QUEUE_SIZE = 1000
AGGREGATE_PREFIX = "(combined from similar events): "


def _timestamp(clock: Clock) -> str:
    return clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")


def object_reference(obj: Object) -> Object:
    metadata = obj.get("metadata") or {}
    reference = {
        "apiVersion": obj.get("apiVersion", ""),
        "kind": obj.get("kind", ""),
        "name": metadata.get("name", ""),
        "uid": metadata.get("uid", ""),
        "resourceVersion": metadata.get("resourceVersion", ""),
    }
    if metadata.get("namespace"):
        reference["namespace"] = metadata["namespace"]
    return reference


@dataclass
class _Bucket:
    tokens: float
    updated: float


@dataclass
class _Recorded:
    name: str
    namespace: str
    count: int
    first_timestamp: str


@dataclass
class _Similar:
    window_start: float
    messages: set[str] = field(default_factory=set)


class EventRecorder:
    """Writes Events for a component; ``event`` returns at once, ``record`` waits for the write."""

    def __init__(
        self,
        client: ApiClient,
        component: str,
        *,
        host: str = "",
        clock: Clock = REAL_CLOCK,
    ) -> None:
        self._client = client
        self.component = component
        self.host = host
        self._clock = clock
        self._recorded: OrderedDict[tuple[str, ...], _Recorded] = OrderedDict()
        self._similar: OrderedDict[tuple[str, ...], _Similar] = OrderedDict()
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self._queue: FairQueue[tuple[Object, str, str, str]] = FairQueue(QUEUE_SIZE)
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0
        self._last_suffix = 0

    # Public -------------------------------------------------------------------------------------

    def event(self, obj: Object, event_type: str, reason: str, message: str) -> None:
        """Queues an event for ``obj``; when its namespace's share or the queue is full, an
        event of the namespace holding the most (this one, if none holds more) is dropped, with
        a log line."""
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._drain())
        namespace = str((obj.get("metadata") or {}).get("namespace") or "")
        dropped = self._queue.put(namespace, (obj, event_type, reason, message))
        if dropped is not None:
            self.dropped += 1
            _obj, kind, why, text = dropped
            log.warning("event queue full, dropped %s %s: %s", kind, why, text)

    async def record(
        self, obj: Object, event_type: str, reason: str, message: str
    ) -> Object | None:
        """Writes (or folds) one event now; returns the Event written, None if it was dropped."""
        reference = object_reference(obj)
        if not self._allow(reference):
            self.dropped += 1
            return None
        message, combined = self._aggregate(reference, event_type, reason, message[:MAX_MESSAGE])
        # A combined event is one Event for all similar ones, whatever their message.
        key = (
            reference.get("uid", ""),
            reference["name"],
            reference.get("namespace", ""),
            event_type,
            reason,
            "" if combined else message,
        )
        previous = self._recorded.get(key)
        try:
            if previous is not None:
                written = await self._bump(previous, message)
                if written is not None:
                    self._remember(
                        key,
                        previous.name,
                        previous.namespace,
                        previous.count + 1,
                        previous.first_timestamp,
                    )
                    return written
            return await self._create(key, reference, event_type, reason, message)
        except errors.ApiError as error:
            # As client-go's recorder: a namespace being deleted takes no new Events; the
            # event is dropped quietly (the object it is about is going with it).
            terminating = error.has_cause(errors.NAMESPACE_TERMINATING)
            log.log(
                logging.DEBUG if terminating else logging.WARNING,
                "writing event %s %s for %s failed: %s",
                event_type,
                reason,
                reference["name"],
                error,
            )
            return None

    async def close(self) -> None:
        """Writes what is queued, then stops the background task."""
        if self._task is not None:
            await self._queue.join()
            await cancel_and_wait([self._task])
            self._task = None

    # Internals ----------------------------------------------------------------------------------

    async def _drain(self) -> None:
        while True:
            obj, event_type, reason, message = await self._queue.get()
            try:
                await self.record(obj, event_type, reason, message)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("recording event %s failed", reason)
            finally:
                self._queue.task_done()

    def _allow(self, reference: Object) -> bool:
        key = f"{reference.get('namespace', '')}/{reference['kind']}/{reference['name']}/{reference.get('uid', '')}"
        now = self._clock.monotonic()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = _Bucket(tokens=SPAM_BURST, updated=now)
            self._buckets[key] = bucket
            _trim(self._buckets)
        bucket.tokens = min(
            SPAM_BURST, bucket.tokens + (now - bucket.updated) / SPAM_REFILL_SECONDS
        )
        bucket.updated = now
        if bucket.tokens < 1:
            return False
        bucket.tokens -= 1
        return True

    def _aggregate(
        self, reference: Object, event_type: str, reason: str, message: str
    ) -> tuple[str, bool]:
        """(message to write, whether it is the combined event of many similar ones)."""
        key = (reference.get("uid", ""), reference["name"], event_type, reason)
        now = self._clock.monotonic()
        similar = self._similar.get(key)
        if similar is None or now - similar.window_start > SIMILAR_WINDOW:
            similar = _Similar(window_start=now)
            self._similar[key] = similar
            _trim(self._similar)
        similar.messages.add(message)
        if len(similar.messages) >= SIMILAR_LIMIT:
            return (AGGREGATE_PREFIX + message)[:MAX_MESSAGE], True
        return message, False

    async def _bump(self, previous: _Recorded, message: str) -> Object | None:
        patch = {
            "count": previous.count + 1,
            "lastTimestamp": _timestamp(self._clock),
            "message": message,
        }
        try:
            return await self._client.patch(EVENTS, previous.name, patch, previous.namespace)
        except errors.NotFound:
            return None

    async def _create(
        self, key: tuple[str, ...], reference: Object, event_type: str, reason: str, message: str
    ) -> Object:
        now = _timestamp(self._clock)
        namespace = reference.get("namespace") or "default"
        # client-go names events <object>.<unix nanos>; two events in one clock tick must not
        # collide, so the suffix strictly increases within this recorder.
        self._last_suffix = max(int(self._clock.now().timestamp() * 1e9), self._last_suffix + 1)
        name = f"{reference['name']}.{self._last_suffix:x}"
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": reference,
            "reason": reason,
            "message": message,
            "type": event_type,
            "source": {"component": self.component, **({"host": self.host} if self.host else {})},
            "reportingComponent": self.component,
            "reportingInstance": self.host or self.component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        written = await self._client.create(EVENTS, event)
        self._remember(key, name, namespace, 1, now)
        return written

    def _remember(
        self, key: tuple[str, ...], name: str, namespace: str, count: int, first: str
    ) -> None:
        self._recorded[key] = _Recorded(name, namespace, count, first)
        self._recorded.move_to_end(key)
        _trim(self._recorded)


def _trim(cache: OrderedDict[K, V]) -> None:
    """Keeps a cache to CACHE_SIZE entries, dropping the oldest (an LRU, as client-go's)."""
    while len(cache) > CACHE_SIZE:
        cache.popitem(last=False)
