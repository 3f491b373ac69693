"""Generic controllers in wrangler's shape, and a factory with typed access per kind.

A controller watches one resource through a shared informer and runs named handlers for each changed
key, by a fixed number of workers fed from a rate-limited workqueue:

- ``on_change(name, handler)``: ``handler(key, obj)`` gets the cached object, or ``None`` once it
  is gone; it may return the object it wrote, which the next handler then receives (chaining).
- ``enqueue`` is a plain add, never rate-limited: counting events as failures inflates backoff to
  minutes (kubernetes/kubernetes#75577, rancher/lasso#5). ``enqueue_after`` delays one key;
  ``enqueue_soon`` queues one within the controller's soon window, a burst of changes read by
  one run (``soonruns``).
- A handler error re-queues the key through the rate limiter and re-runs every handler; a conflict
  (someone wrote the object first) does the same but is only logged at debug level, because it is
  routine; any exception is logged with the key and the handler name and never kills a worker.
  ``RetryAfter(seconds)`` asks for a specific delay instead; ``Ignore`` ends the run quietly.

As in wrangler, the controller is its run loop (workers over the queue) and the registration that
feeds it; its collaborators hold the rest: the handler list and one run of it
(``sharedhandler.SharedHandler``), the
callers of ``wait_pending_runs`` (``pendingruns``), and the client verbs and cache reads bound to its resource, which it inherits as wrangler's controller
embeds its client (``resourceclient.ResourceClient``, ``resourcecache.ResourceCache``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry

from .client import ApiClient
from .clock import REAL_CLOCK, Clock
from .frameworkmetrics import HandlerObserver
from .informer import ResourceEventHandler, SharedInformer, SharedInformerFactory
from .meta import namespace as namespace_of
from .pendingruns import PendingRuns
from .reconcileloop import RetryRateLimited, run_reconcile_loop
from .resource import (
    EVENTS,
    NAMESPACES,
    PODS,
    Object,
    Resource,
    key_of,
)
from .resourcecache import ResourceCache
from .resourceclient import ResourceClient
from .sharedhandler import Handler, Ignore, RetryAfter, SharedHandler
from .soonruns import SoonRuns
from .store import Tombstone
from .tasks import cancel_and_wait
from .workqueue import RateLimiter, RateLimitingQueue

__all__ = [
    "DEFAULT_WORKERS",
    "Controller",
    "ControllerFactory",
    "Handler",
    "Ignore",
    "RetryAfter",
]

log = logging.getLogger(__name__)

DEFAULT_WORKERS = 5


class Controller(ResourceClient, ResourceCache):
    """Handlers for one resource, run by workers over a rate-limited queue of keys.

    Ordering and concurrency are the queue's: a key is handled by one worker at a time, and a
    change that arrives during its run makes one more run after it. Event loop only, no lock.
    The client verbs (`get`, `update`, ...) and cache reads (`cached`, `by_index`, ...) come from
    `ResourceClient` and `ResourceCache`.
    """

    def __init__(
        self,
        client: ApiClient,
        informer: SharedInformer,
        resource: Resource,
        *,
        name: str | None = None,
        workers: int = DEFAULT_WORKERS,
        rate_limiter: RateLimiter[str] | None = None,
        clock: Clock = REAL_CLOCK,
        registry: CollectorRegistry | None = None,
        observer: HandlerObserver | None = None,
    ) -> None:
        ResourceClient.__init__(self, client, resource)
        ResourceCache.__init__(self, informer)
        self.name = name or resource.name
        self.workers = workers
        self.clock = clock
        self.queue: RateLimitingQueue[str] = RateLimitingQueue(
            rate_limiter, name=self.name, clock=clock, registry=registry
        )
        self._handlers = SharedHandler(self.name, log, observer)
        self._updates_wanted: list[Callable[[Object], bool] | None] = []  # None: wants all
        self._tasks: list[asyncio.Task[None]] = []
        self._watching = False
        self._held = False
        self._pending_runs = PendingRuns(self.queue, clock)
        self._soon = SoonRuns(clock, 0.0, self.enqueue_key, self.queue.queued)

    # Registration -------------------------------------------------------------------------------

    def on_change(
        self,
        name: str,
        handler: Handler,
        *,
        updates_wanted: Callable[[Object], bool] | None = None,
    ) -> None:
        """Runs ``handler(key, obj or None)`` for every change of every object of this kind.
        With `updates_wanted` (client-go's update filter), an update whose new object it refuses
        queues no run for this handler's sake; adds, deletes and updates another handler wants
        (or one without a filter) still do, and a run runs every handler: a handler must do
        nothing on what its filter refuses. A filter that raises counts as wanting the update."""
        self._watch_informer()  # first: a refused registration (informer.py) leaves nothing
        self._handlers.register(name, handler)
        self._updates_wanted.append(updates_wanted)
        if self._tasks:
            for key in self.informer.store.list_keys():
                self.queue.add(key)

    def _watch_informer(self) -> None:
        if self._watching:
            return

        def enqueue_object(obj: Object | Tombstone) -> None:
            self._add(obj.key if isinstance(obj, Tombstone) else key_of(obj))

        def wanted(obj: Object) -> bool:
            return any(_accepts(accepts, obj) for accepts in self._updates_wanted)

        handler = ResourceEventHandler.of_latest(enqueue_object, enqueue_object)
        handler.updates_wanted = wanted
        self.informer.add_event_handler(handler, name=f"controller {self.name}")
        self._watching = True  # only once registered: a refused registration is tried again

    def watch_related(
        self,
        informer: SharedInformer,
        resolve: Callable[[Object], Iterable[str]],
        *,
        name: str = "related",
        relevant: Callable[[Object, Object], bool] | None = None,
        updates_in: Callable[[str], bool] | None = None,
        may_wait: Callable[[Object, Object], bool] | None = None,
    ) -> None:
        """Enqueues this controller's keys for every change of another kind (wrangler's
        relatedresource.Watch): ``resolve(obj)`` names the keys an object of that kind affects.

        Deletes pass the last known object (or a tombstone's), so the keys it affected are
        re-reconciled when it goes away too. With `relevant`, an update enqueues only when
        ``relevant(old, new)`` is true (controller-runtime's update predicate): for kinds that
        change often in ways the reconcile never reads. Adds and deletes always enqueue. With
        `updates_in`, an update of an object whose namespace it refuses is dropped before its
        old object is decoded: for a `resolve` that names no key for such an object, old or new.
        With `may_wait`, an update for which ``may_wait(old, new)`` is true queues its keys by
        `enqueue_soon`, not at once.
        """
        handler = _related_handler(resolve, self, relevant=relevant, may_wait=may_wait)
        if updates_in is not None:
            handler.updates_wanted = lambda new: updates_in(namespace_of(new))
        informer.add_event_handler(handler, name=f"{self.name} {name}")

    # Enqueueing -----------------------------------------------------------------------------------

    def enqueue(self, namespace: str | None, name: str) -> None:
        """Queues the object's key now; a key already queued is not queued twice, and a key
        being handled is handled once more after the current run (never by two workers)."""
        self._add(f"{namespace}/{name}" if namespace else name)

    def enqueue_key(self, key: str) -> None:
        """`enqueue` by cache key (``namespace/name`` or ``name``)."""
        self._add(key)

    def enqueue_soon(self, key: str) -> None:
        """Queues `key` at most the soon window's seconds from now (`set_soon_window`; 0 by
        default: at once), for changes that need no run of their own: every change asked for
        until a run of the key starts is read by that one run (generic/soonruns.py)."""
        if not self._held:
            self._soon.ask(key)

    def set_soon_window(self, seconds: float | Callable[[str], float]) -> None:
        """How long `enqueue_soon` may hold a key back, the same for every key or by key (read
        at each ask); set before the controller starts (RuntimeError after)."""
        if self._tasks:
            raise RuntimeError(f"controller {self.name}: the soon window is set before start")
        self._soon = SoonRuns(self.clock, seconds, self.enqueue_key, self.queue.queued)

    def _add(self, key: str) -> None:
        if not self._held:
            self.queue.add(key)

    def hold(self) -> None:
        """Drops every key queued from now until `start` (a warm standby: its informers run,
        its queue stays empty however long it waits); `start` then queues every key of the
        cache, as a first list would have. Event loop only."""
        self._held = True

    def enqueue_after(self, namespace: str | None, name: str, delay: float) -> None:
        """Queues the key once `delay` seconds have passed on the controller's clock (an earlier
        pending time for the same key wins, as in client-go's delaying queue)."""
        self.queue.add_after(f"{namespace}/{name}" if namespace else name, delay)

    # Running --------------------------------------------------------------------------------------

    def start(self, workers: int | None = None) -> None:
        """Starts the workers (the informer is started by its factory); a held controller
        (`hold`) first queues every key its cache holds."""
        if self._tasks:
            return
        if self._held:
            self._held = False
            for key in self.informer.store.list_keys():
                self.queue.add(key)
        for index in range(workers or self.workers):
            self._tasks.append(asyncio.ensure_future(self._worker(index)))

    async def stop(self) -> None:
        """Shuts the queue down and waits for the workers to end; a handler in progress is
        cancelled. Idempotent."""
        self.queue.shut_down()
        self._soon.stop()
        await cancel_and_wait(self._tasks)
        self._tasks.clear()

    async def _worker(self, index: int) -> None:
        """One worker: the framework's one loop (reconcileloop.py) over `reconcile`. A failure
        of the cache itself (an undecodable stored object; handlers' errors are caught in
        `reconcile`) is logged with its traceback and the key retried, spaced."""
        await run_reconcile_loop(
            self.queue,
            self.reconcile,
            name=self.name,
            log=log,
            expected=(),
            ended=self._pending_runs.run_ended,
        )

    async def wait_pending_runs(self, key: str, seconds: float) -> bool:
        """Waits until the runs of ``key`` pending at the call have ended (the one a worker holds
        and the one queued), at most ``seconds`` by the controller's clock; True if they ended.
        Returns at once when none is pending.

        For writes that should not compete with this controller's: the caller lets the key's
        current work go first. Runs queued after the call are not waited for, so a key kept
        busy delays a caller by two runs at most; a retry waiting out its backoff is not queued
        and holds nobody. A run asked for soon (`enqueue_soon`) is queued at once by the call,
        so it is waited for too. Event loop only.
        """
        self._soon.now(key)
        return await self._pending_runs.wait(key, seconds)

    async def reconcile(self, key: str) -> float | None:
        """Runs every handler for ``key`` once; returns the seconds after which it runs again
        (the shortest any handler asked for with `RetryAfter`), or None for its next change.
        Raises `RetryRateLimited` when a handler failed (each failure is reported where it
        happened): the loop then retries the key rate limited, else forgets its failures."""
        self._soon.started(key)
        run = await self._handlers.on_change(key, self.informer.store.get(key))
        if run.failed:
            raise RetryRateLimited(key)
        return run.retry_after


def _accepts(accepts: Callable[[Object], bool] | None, obj: Object) -> bool:
    """Whether an update filter wants `obj`'s update: yes without a filter, or when the filter
    raises (an object it cannot read costs a run, never a lost update)."""
    try:
        return accepts is None or accepts(obj)
    except Exception:
        log.debug("update filter failed on %s: queued", key_of(obj), exc_info=True)
        return True


def _related_handler(
    resolve: Callable[[Object], Iterable[str]],
    controller: Controller,
    *,
    relevant: Callable[[Object, Object], bool] | None,
    may_wait: Callable[[Object, Object], bool] | None,
) -> ResourceEventHandler:
    """Controller.watch_related's handler: it queues keys through `controller`'s enqueue_key
    or enqueue_soon, looked up at each call."""

    def enqueue_for(obj: Object | Tombstone, soon: bool = False) -> None:
        subject = obj.obj if isinstance(obj, Tombstone) else obj
        add = controller.enqueue_soon if soon else controller.enqueue_key
        for key in resolve(subject):
            add(key)

    def enqueue_both(old: Object, new: Object) -> None:
        if relevant is not None and not relevant(old, new):
            return
        soon = may_wait is not None and may_wait(old, new)
        enqueue_for(old, soon)
        enqueue_for(new, soon)

    return ResourceEventHandler(
        on_add=lambda obj, _initial: enqueue_for(obj), on_update=enqueue_both, on_delete=enqueue_for
    )


class ControllerFactory:
    """One controller per resource over one informer factory, with typed accessors per kind.

    The accessors are one-line declarations over the same generic Controller: a kind is only
    the place it lives in the API.
    """

    def __init__(
        self,
        client: ApiClient,
        informers: SharedInformerFactory | None = None,
        *,
        clock: Clock = REAL_CLOCK,
        workers: int = DEFAULT_WORKERS,
        registry: CollectorRegistry | None = None,
        observer: HandlerObserver | None = None,
    ) -> None:
        """`observer`: told of every handler run of every controller, with its CPU (None:
        nothing is measured)."""
        self.client = client
        self.informers = informers or SharedInformerFactory(client, clock=clock)
        self._observer = observer
        self._clock = clock
        self._workers = workers
        self._registry = registry
        self._controllers: dict[Resource, Controller] = {}

    def for_resource(self, resource: Resource, *, workers: int | None = None) -> Controller:
        """The one controller for `resource` (created on first use, shared after): handlers of different components share its queue and cache."""
        controller = self._controllers.get(resource)
        if controller is None:
            controller = Controller(
                self.client,
                self.informers.informer(resource),
                resource,
                workers=workers or self._workers,
                clock=self._clock,
                registry=self._registry,
                observer=self._observer,
            )
            self._controllers[resource] = controller
        return controller

    @property
    def controllers(self) -> tuple[Controller, ...]:
        """Every controller made so far, in creation order."""
        return tuple(self._controllers.values())

    def pods(self) -> Controller:
        """The one shared controller of pods."""
        return self.for_resource(PODS)

    def namespaces(self) -> Controller:
        """The one shared controller of namespaces."""
        return self.for_resource(NAMESPACES)

    def events(self) -> Controller:
        """The one shared controller of events."""
        return self.for_resource(EVENTS)

    def warm(self) -> None:
        """Starts the informers and holds every controller (`Controller.hold`): caches fill,
        nothing is queued or run until `start`."""
        for controller in self._controllers.values():
            controller.hold()
        self.informers.start()

    async def start(self, *, sync_timeout: float | None = None) -> bool:
        """Starts informers, waits for their caches, then starts every controller's workers."""
        self.informers.start()
        synced = await self.informers.wait_for_cache_sync(sync_timeout)
        for controller in self._controllers.values():
            controller.start()
        return synced

    async def stop(self) -> None:
        """Stops every controller's workers, then the informers (handlers never see a stopped
        cache)."""
        await asyncio.gather(*(c.stop() for c in self._controllers.values()))
        await self.informers.stop()
