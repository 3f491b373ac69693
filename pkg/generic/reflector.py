"""The reflector: keeps a cache equal to the API server's view by listing, then watching.

It follows client-go's reflector rule for rule, because each rule answers a failure seen in
production:

- resourceVersion: the first list asks for "0" (served from the API server's watch cache), a relist
  asks for the last version seen (never going back in time), and only after the server said that
  version is gone (410 Expired/Gone, or "too large resource version") does a list ask for "", a
  consistent read from etcd. Paginate only where the server can serve pages cheaply.
- watch: from the last version seen, with bookmarks, for a random 5 to 10 minutes so that many
  clients do not reconnect in step; a normal end re-watches without relisting.
- failures: 429 and connection refused back off and re-watch without relisting (the versions are
  still good); an expired version, an ERROR event, or a stream we cannot decode relists. Between
  relists a jittered backoff grows from 0.8 s to 30 s, so an unhealthy server sees about 0.2
  requests a second from us instead of a hot loop. The backoff is for a server that keeps
  failing, not for one that restarted: it starts again from 0.8 s when a watch that had run for
  10 s ends, and while the server is not there or still starting (connections refused, 503 before
  its paths are installed, 429 while its storage initializes: cheap answers) we look again within
  2-4 s (or its Retry-After), so a restarted API server is watched again within seconds however
  many times it restarted before. These waits are relistwaits.py's.
- a watch that goes quiet past the inactivity timeout is abandoned and re-established: a half-open
  TCP connection would otherwise hang the informer forever (kopf and the official client both hit
  this). A watch that ends in under a second with no event counts as a failure, not a success.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from . import deepjson, errors
from .client import ApiClient, ListResult, WatchEvent, status_error
from .clock import REAL_CLOCK, Clock, wait_at_most
from .cputime import cpu_metered
from .frameworkmetrics import WatchObserver
from .relistwaits import RelistWaits, server_restarting
from .resource import Object, Resource

log = logging.getLogger(__name__)

MIN_WATCH_TIMEOUT = 300
DEFAULT_INACTIVITY_TIMEOUT = 90.0
VERY_SHORT_WATCH = 1.0
PAGE_SIZE = 500
ItemHook = Callable[[Object], Any]


class ListerWatcher(Protocol):
    """Where a reflector gets its data: the API server, or a scripted fake in unit tests."""

    async def list(
        self, *, resource_version: str, page_size: int, each: ItemHook | None = None
    ) -> ListResult:
        """All items at ``resource_version``, each mapped through ``each`` as it is decoded."""
        ...

    def watch(
        self, *, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[WatchEvent]: ...


@dataclass(frozen=True)
class ClientListerWatcher:
    """A ListerWatcher over ApiClient for one resource, optionally narrowed by namespace/selectors."""

    client: ApiClient
    resource: Resource
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None

    async def list(
        self, *, resource_version: str, page_size: int, each: ItemHook | None = None
    ) -> ListResult:
        api_version, kind = self.resource.api_version, self.resource.kind

        def fill_then_each(item: Object) -> Any:
            # List items carry no kind/apiVersion (watch events do); fill them so that every
            # cached object can be referred to (events, owner references) the same way.
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
            return each(item) if each else item

        return await self.client.list_all(
            self.resource,
            self.namespace,
            resource_version=resource_version,
            page_size=page_size,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            request_timeout=120.0,
            each=fill_then_each,
        )

    def watch(self, *, resource_version: str, timeout_seconds: int) -> AsyncIterator[WatchEvent]:
        return self.client.watch(
            self.resource,
            self.namespace,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
        )


class ReflectorSink(Protocol):
    """What a reflector feeds: the informer, which updates its store and notifies handlers."""

    def prepare_listed(self, item: Object) -> Any:
        """Called for each listed item as it arrives; what it returns is what on_list gets."""
        ...

    def on_list(self, items: list[Any], resource_version: str) -> None: ...

    def on_event(self, event_type: str, obj: Object) -> None: ...


class InactivityTimeout(Exception):
    """No event, not even a bookmark, arrived within the inactivity timeout."""


class VeryShortWatch(Exception):
    """The server ended a watch at once without sending anything: treat it as a failure."""


class StreamBroken(Exception):
    """A watch that had worked lost its connection: re-watch from the last version, no relist."""


class Reflector:
    """Lists and watches one resource into a sink, forever, until cancelled."""

    def __init__(
        self,
        name: str,
        lister_watcher: ListerWatcher,
        sink: ReflectorSink,
        *,
        clock: Clock = REAL_CLOCK,
        inactivity_timeout: float = DEFAULT_INACTIVITY_TIMEOUT,
        min_watch_timeout: int = MIN_WATCH_TIMEOUT,
        rng: random.Random | None = None,
        observer: WatchObserver | None = None,
    ) -> None:
        self.name = name
        self._observer = observer
        """Told of every watch event applied and of the watch streams' CPU (None: nothing is
        measured)."""
        self._lw = lister_watcher
        self._sink = sink
        self._clock = clock
        self._rng = rng or random.Random()
        self._waits = RelistWaits(clock, self._rng)
        self.inactivity_timeout = inactivity_timeout
        self.min_watch_timeout = min_watch_timeout
        self.last_sync_resource_version = ""
        self._version_unavailable = False
        self._paginated_result = False
        self._last_event_at = 0.0
        self._watch_started = 0.0
        self._events_this_watch = 0
        self.lists = 0
        self.watches = 0
        self.waits = self._waits.recent
        """The most recent waits before a relist or re-watch (relistwaits.py)."""

    # Resource-version policy --------------------------------------------------------------------

    def relist_resource_version(self) -> str:
        """The resourceVersion the next list asks for: "0" first, then the last one seen, "" after the server said it is gone."""
        if self._version_unavailable:
            return ""
        if not self.last_sync_resource_version:
            return "0"
        return self.last_sync_resource_version

    # Main loop --------------------------------------------------------------------------------

    async def run(self) -> None:
        """Runs list-and-watch forever; every return or failure is followed by a backoff."""
        while True:
            try:
                await self.list_and_watch()
            except asyncio.CancelledError:
                raise
            except (errors.ConnectionRefused, errors.TooManyRequests, errors.ServerError) as error:
                log.warning("%s: list/watch failed, will relist: %s", self.name, error)
                if server_restarting(error):
                    await self._waits.after_restart(error)
                    continue
            except errors.ApiError as error:
                log.warning("%s: list/watch failed, will relist: %s", self.name, error)
            except Exception:
                log.exception("%s: unexpected failure, will relist", self.name)
            await self._waits.after_failure()

    async def list_and_watch(self) -> None:
        """One list followed by watches until one of them needs a relist."""
        await self._list()
        await self._watch_until_relist()

    async def _list(self) -> None:
        resource_version = self.relist_resource_version()
        self.lists += 1
        try:
            result = await self._lw.list(
                resource_version=resource_version,
                page_size=page_size(resource_version, paginated=self._paginated_result),
                each=self._sink.prepare_listed,
            )
        except errors.ApiError as error:
            if not _version_unavailable(error):
                raise
            log.info(
                "%s: resourceVersion %r unavailable, listing from etcd", self.name, resource_version
            )
            self._version_unavailable = True
            resource_version = self.relist_resource_version()
            result = await self._lw.list(
                resource_version=resource_version,
                page_size=PAGE_SIZE,
                each=self._sink.prepare_listed,
            )
        if resource_version == "0" and result.paginated:
            self._paginated_result = True
        self._version_unavailable = False
        self._sink.on_list(result.items, result.resource_version)
        self.last_sync_resource_version = result.resource_version

    async def _watch_until_relist(self) -> None:
        while True:
            timeout = self._rng.randint(self.min_watch_timeout, 2 * self.min_watch_timeout)
            try:
                await self._watch_once(timeout)
            except (errors.TooManyRequests, errors.ConnectionRefused, StreamBroken) as error:
                self._waits.forget_failures(self._watch_started)
                if isinstance(error, errors.ApiError) and server_restarting(error):
                    log.info("%s: watch ended (%s), re-watching", self.name, error)
                    await self._waits.after_restart(error)
                    continue
                delay = self._waits.next_delay()
                log.info("%s: watch ended (%s), re-watching in %.1fs", self.name, error, delay)
                await self._waits.wait(delay)
            except InactivityTimeout:
                # Info, not warning: a quiet resource (Harvester's settings) gets here every
                # period with nothing wrong; a dead connection is what it guards against.
                log.info(
                    "%s: no watch event for %.0fs, re-watching from %s",
                    self.name,
                    self.inactivity_timeout,
                    self.last_sync_resource_version,
                )
            except errors.Gone as error:
                # The version is too old for a watch; a list at it may still succeed (it returns
                # data at least as fresh), so relist from it rather than jumping to "".
                log.info("%s: watch expired (%s), relisting", self.name, error)
                self._waits.reset()  # the server answered: it is there and working
                return
            except errors.DecodeError as error:
                log.error("%s: undecodable watch stream, relisting: %s", self.name, error)
                return

    async def _watch_once(self, timeout_seconds: int) -> None:
        self.watches += 1
        started = self._watch_started = self._clock.monotonic()
        self._last_event_at = started
        stream = self._lw.watch(
            resource_version=self.last_sync_resource_version, timeout_seconds=timeout_seconds
        )
        self._events_this_watch = 0
        try:
            consuming = _measured(
                functools.partial(self._consume, stream), self._observer, self.name
            )
            await _until_inactive(
                consuming, lambda: self._last_event_at, self.inactivity_timeout, self._clock
            )
        except errors.ConnectionFailed as error:
            if isinstance(error, errors.ConnectionRefused) or not self._watch_was_healthy(started):
                raise
            # As client-go: a stream that worked and then broke (a reset, a proxy's idle cut)
            # resumes from the last version seen; the cache is still right up to it.
            raise StreamBroken(str(error)) from error
        if not self._watch_was_healthy(started):
            raise VeryShortWatch(f"{self.name}: watch closed at once with no event")

    def _watch_was_healthy(self, started: float) -> bool:
        """It delivered something, or stayed open longer than a refused one would."""
        return self._events_this_watch > 0 or self._clock.monotonic() - started >= VERY_SHORT_WATCH

    async def _consume(self, stream: AsyncIterator[WatchEvent]) -> None:
        """Applies the stream's events in order, giving the event loop a turn after each.

        A stream whose events are already buffered (a burst: fifty pods created at once) never
        suspends on its own, so without the turn one informer held the loop for the whole
        burst. Measured in a scale run: stalls of 100-130 ms between a
        quota write's response and the next reconcile, while the loop applied buffered pod and
        VMI events. With the turn, other tasks wait for one event's work at most."""
        async for event in stream:
            self._last_event_at = self._clock.monotonic()
            self._events_this_watch += 1
            self._apply(event)
            await asyncio.sleep(0)

    def _apply(self, event: WatchEvent) -> None:
        if event.type == "ERROR":
            raise status_error(event.object)
        if self._observer is not None:
            self._observer.watch_event(self.name, event.type)
        version = (event.object.get("metadata") or {}).get("resourceVersion")
        if event.cut:
            log.warning(
                "%s: %s event of %s: %d values nested deeper than %d levels cut",
                self.name,
                event.type,
                deepjson.describe(event.object),
                event.cut,
                deepjson.MAX_DEPTH,
            )
        if event.type != "BOOKMARK":
            self._sink.on_event(event.type, event.object)
        if version:
            self.last_sync_resource_version = str(version)


def page_size(resource_version: str, *, paginated: bool) -> int:
    """The page size of a list at `resource_version` (0: unpaginated), `paginated` once the
    server paginated a list at "0" (then it cannot serve from its watch cache anyway)."""
    if paginated or resource_version in ("", "0"):
        return PAGE_SIZE
    # A list at a specific version is served from the watch cache only when unpaginated;
    # paginating it would send every relist of every client to etcd.
    return 0


async def _until_inactive(
    consuming: Awaitable[None], last_event_at: Callable[[], float], timeout: float, clock: Clock
) -> None:
    """Runs the consumer; cancels it and raises InactivityTimeout once `timeout` seconds pass on
    `clock` after `last_event_at()` (the consumer moves it at each event) with the consumer
    still running."""
    consumer = asyncio.ensure_future(consuming)
    try:
        while not consumer.done():
            remaining = last_event_at() + timeout - clock.monotonic()
            if remaining <= 0:
                consumer.cancel()
                raise InactivityTimeout()
            await wait_at_most(clock, consumer, remaining)
        consumer.result()
    finally:
        if not consumer.done():
            consumer.cancel()
        await asyncio.gather(consumer, return_exceptions=True)


async def _measured(
    consume: Callable[[], Coroutine[Any, Any, None]],
    observer: WatchObserver | None,
    resource: str,
) -> None:
    """Runs `consume()`, its CPU told to `observer` step by step if it measures CPU. The coroutine
    is made only once this runs, so a consumer cancelled before its first step leaves no
    coroutine that was never awaited."""
    if observer is None or not observer.measures_cpu:
        await consume()
        return
    await cpu_metered(consume(), functools.partial(observer.watch_cpu, resource))


def _version_unavailable(error: errors.ApiError) -> bool:
    return isinstance(error, errors.Gone) or errors.is_resource_version_too_large(error)
