"""Shared informers: one list+watch per resource, however many controllers use it.

The contract is client-go's SharedInformer contract:
- the cache is updated first, then handlers are told; each handler sees the notifications of every
  object in the order they happened (per-object ordering), never two at once;
- a handler added late first receives the current cache as adds;
- handlers are plain functions that must be quick (hand the key to a workqueue): each is called
  in the watch's own turn, after the store took the change (a watch event's, or a whole list),
  so what a handler spends the watch and the other handlers wait for; a handler that must
  await starts its own task;
- an object that vanished while the watch was down is reported as a delete with a Tombstone.

One object never stops an informer (otherwise a tenant's pod or VMI that raises on the way into
the cache reaches the reflector, which relists, meets it again, and the cache stays stale for
good while fresh replicas never sync). The per-object contract:
- an object that fails a stage on its way in (``transform``, ``key``, ``encode``, ``index``,
  ``view``: the transform, its key, the store's codec, an index function, a view's derive) is
  *skipped*: kept out of the store and so of every index and view; if an earlier version was
  cached, it is removed and handlers are told of a delete (a Tombstone of what was cached), so
  that the cache is what a fresh replica's list makes of the same objects. A list completes
  with the object skipped, so a fresh replica syncs;
- a skipped object is retried when it changes: the next watch event for it, or the next relist,
  goes through every stage again; a delete of it drops whatever is cached;
- a view's listener that raises (stage ``listener``) never leaves a write half-applied: the
  store isolates it (storeviews.py), the object is cached and that listener forgets its key;
- a handler that raises on a notification (stage ``handler``) is logged, and the handler gets
  the next notification as usual: it never stops delivery, to itself or to others;
- every skip is logged at WARNING naming the object (kind, namespace/name, uid) and the stage,
  and told to the informer's `skips` callback (intake.SkippedObject; intake.py does the taking in): the controller counts it
  (`harvester_quota_informer_objects_skipped_total`, frameworkmetrics.SkipMetrics) and records a
  Warning Event on the object; the webhook counts it;
- decoding is not a stage that skips: JSON nested deeper than orjson takes is decoded with what
  lies beyond deepjson.MAX_DEPTH cut (watchstream.py, listdecode.py), as is an object too deep
  for the store's codec (Store.prepare), and each cut is logged naming the object; a watch line
  that does not decode even so is a broken stream (truncated, not JSON), which is relisted with
  the reflector's backoff, as client-go does. The API server writes no other JSON orjson
  refuses (numbers it cannot hold and invalid strings are refused at write).

Unlike client-go, a relist does not report unchanged objects (same resourceVersion) as updates,
the behaviour lasso offers as SyncOnlyChangedObjects: level-triggered controllers gain nothing
from thousands of no-op updates after every reconnect. Periodic resync, if asked for, does report
every object.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import random
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .client import ApiClient
from .clock import REAL_CLOCK, Clock
from .discovery import serves
from .frameworkmetrics import WatchObserver
from .intake import Intake, SkipReporter
from .pendingwrites import PendingWrites
from .presence import PRESENCE_RECHECK_PERIOD, Presence, PresenceFollower
from .reflector import (
    DEFAULT_INACTIVITY_TIMEOUT,
    ClientListerWatcher,
    ListerWatcher,
    Reflector,
)
from .resource import Object, Resource, key_of
from .store import (
    Codec,
    Encoded,
    IndexFunc,
    Prepared,
    Store,
    Tombstone,
    Transform,
    strip_unread_fields,
)
from .tasks import cancel_and_wait

log = logging.getLogger(__name__)


@dataclass
class ResourceEventHandler:
    """Callbacks for one consumer; any may be None. Plain functions: one that returns an
    awaitable (a coroutine function's coroutine) is reported as a failed handler, its coroutine
    closed; any other value returned is ignored.

    An update goes to `on_update_new` when it is set (the new object alone: the old one, which
    the store holds encoded, is then never decoded for this consumer), else to `on_update`;
    with `updates_wanted`, only an update whose new object it accepts goes to either (the old
    object of one it refuses is never decoded). Adds and deletes are always told."""

    on_add: Callable[[Object, bool], None] | None = None
    on_update: Callable[[Object, Object], None] | None = None
    on_delete: Callable[[Object | Tombstone], None] | None = None
    on_update_new: Callable[[Object], None] | None = None
    updates_wanted: Callable[[Object], bool] | None = None

    @classmethod
    def of_latest(
        cls,
        changed: Callable[[Object], None],
        deleted: Callable[[Object | Tombstone], None] | None = None,
    ) -> ResourceEventHandler:
        """Handlers for a consumer that reads only the object as it is now: ``changed`` gets it on
        every add (initial list or not) and update (the old object never decoded); ``deleted``
        gets the deleted object or its Tombstone."""
        return cls(
            on_add=lambda obj, _initial: changed(obj), on_delete=deleted, on_update_new=changed
        )


@dataclass(slots=True)
class _Notification:
    """What a listener is told. ``old``/``new`` are objects, Tombstones, or Encoded store values
    decoded only when delivered (see Encoded)."""

    kind: str  # "add" | "update" | "delete" | "synced"
    old: Any = None
    new: Any = None
    initial: bool = False

    def old_object(self) -> Any:
        return self.old.get() if isinstance(self.old, Encoded) else self.old

    def new_object(self) -> Any:
        return self.new.get() if isinstance(self.new, Encoded) else self.new


@dataclass
class Registration:
    """Returned by add_event_handler: remove() detaches; has_synced() once initial adds ran."""

    listener: _Listener
    informer: SharedInformer

    def remove(self) -> None:
        """Stops this handler's notifications; the others are unaffected."""
        self.informer._remove_listener(self.listener)

    def has_synced(self) -> bool:
        """True once this handler has been told every object of the initial list."""
        return self.listener.synced


@dataclass(eq=False)
class _Listener:
    handler: ResourceEventHandler
    name: str
    resync: bool = False
    synced: bool = False
    removed: bool = False
    failed: Callable[[Any, Exception], None] | None = None
    """Told when the handler raised on a notification (the informer reports it as a skip)."""

    def deliver(self, notification: _Notification) -> None:
        """Calls the handler for `notification`; what it raises is logged and told to
        `failed`, never raised."""
        if notification.kind == "synced":
            self.synced = True
            return
        try:
            returned = self._call(notification)
            if returned is not None and inspect.isawaitable(returned):
                if inspect.iscoroutine(returned):
                    returned.close()  # never run: closed, so that no "never awaited" warning
                raise TypeError("an informer's handler is a plain function: nothing awaits it")
        except Exception as error:
            key, subject = _told_about(notification)
            log.exception("%s: %s handler failed for %s", self.name, notification.kind, key)
            if self.failed is not None:
                try:
                    self.failed(subject, error)
                except Exception:
                    log.exception("%s: reporting a handler's failure failed", self.name)

    def _call(self, notification: _Notification) -> object:
        """Calls the handler's callback for `notification`; what it returned (None from a
        plain function)."""
        handler = self.handler
        if notification.kind == "add":
            on_add: Callable[[Object, bool], object] | None = handler.on_add
            return (
                None if on_add is None else on_add(notification.new_object(), notification.initial)
            )
        if notification.kind == "update":
            return self._updated(notification)
        on_delete: Callable[[Object | Tombstone], object] | None = handler.on_delete
        return None if on_delete is None else on_delete(notification.old_object())

    def _updated(self, notification: _Notification) -> object:
        """An update told to the handler: the old object decoded only for `on_update`."""
        handler = self.handler
        wanted = handler.updates_wanted
        if wanted is not None and not wanted(notification.new_object()):
            return None
        on_update_new: Callable[[Object], object] | None = handler.on_update_new
        if on_update_new is not None:
            return on_update_new(notification.new_object())
        on_update: Callable[[Object, Object], object] | None = handler.on_update
        if on_update is not None:
            return on_update(notification.old_object(), notification.new_object())
        return None


def _told_about(notification: _Notification) -> tuple[str, Any]:
    """The key and the object a notification a handler failed on was about, for the log line
    and the skip report; never raises (an object whose stored bytes do not decode is named by
    what is known of it: nothing, so no Event is recorded on it)."""
    try:
        return _key(notification), _subject(notification)
    except Exception:
        return "an object that does not decode", {}


def _subject(notification: _Notification) -> Any:
    """The object a notification is about, decoded (a Tombstone's last known state)."""
    subject = notification.new if notification.new is not None else notification.old
    if isinstance(subject, Tombstone):
        return subject.obj
    return subject.get() if isinstance(subject, Encoded) else subject


def _key(notification: _Notification) -> str:
    subject = notification.new if notification.new is not None else notification.old
    if isinstance(subject, Tombstone):
        return subject.key
    if isinstance(subject, Encoded):
        subject = subject.get()
    return key_of(subject or {})


class _Listeners:
    """The handlers of one informer, in the order they were added, and the delivery of their
    notifications: each delivered to every handler before the next. A handler must not make
    its informer notify again (take a watch event or a list into its store, add a handler to
    it): that would tell one handler of a later change before another heard of the earlier
    one. `refuse_inside_delivery`, called by each before it changes anything, raises
    RuntimeError, which the handler's delivery reports as its failure. Event loop only."""

    def __init__(self) -> None:
        self._all: list[_Listener] = []
        self._delivering = False

    def __iter__(self) -> Iterator[_Listener]:
        return iter(list(self._all))

    def add(self, listener: _Listener) -> None:
        self._all.append(listener)

    def remove(self, listener: _Listener) -> None:
        """`listener` is told nothing more, not even the rest of a delivery under way."""
        listener.removed = True
        if listener in self._all:
            self._all.remove(listener)

    def refuse_inside_delivery(self) -> None:
        """RuntimeError while a notification is being delivered (a handler is running)."""
        if self._delivering:
            raise RuntimeError("an informer's handler made its informer notify again")

    def broadcast(self, notification: _Notification) -> None:
        """Delivers `notification` to every listener, in order."""
        self.tell(tuple(self._all), notification)

    def tell(self, listeners: tuple[_Listener, ...], notification: _Notification) -> None:
        """Delivers `notification` to each of `listeners` still added, in order."""
        self.refuse_inside_delivery()
        self._delivering = True
        try:
            for listener in listeners:
                if not listener.removed:
                    listener.deliver(notification)
        finally:
            self._delivering = False


class SharedInformer:
    """A cache of one resource kept by a reflector, fanning notifications out to handlers.

    Ordering, for each object the reflector delivers (a list's items, a watch event): the
    transform, then the store's write, and inside that write its indexes and its views
    (`Store.add_view`, storeviews.py) with their listeners, synchronously, before the write
    returns; only then is each handler called with the notification (`add_event_handler`), in
    the order they were added: a watch event's before the next event is taken, a list's once
    the whole list is stored, change by change. Unlike client-go's processorListener, a
    handler has no goroutine (task) and no buffer of its own: handlers are plain functions
    that hand keys to workqueues, so a task hop per handler and event would cost more than the
    handler; a slow handler therefore stalls the watch (its CPU shows in the watch's). A
    handler must not make this informer notify again (write into its store, add a handler):
    `_Listeners` refuses it. So a view's listener has seen every write before any handler is
    told of it, and every handler is told of the changes in the order the store took them. A
    view's listener that raises is isolated and reported as a skip: the store keeps the object
    and the handlers are still told. Event loop only (not thread-safe).
    """

    def __init__(
        self,
        lister_watcher: ListerWatcher,
        *,
        name: str,
        clock: Clock = REAL_CLOCK,
        transform: Transform | None = strip_unread_fields,
        indexers: dict[str, IndexFunc] | None = None,
        codec: Codec | None = None,
        resync_period: float = 0.0,
        inactivity_timeout: float = DEFAULT_INACTIVITY_TIMEOUT,
        rng: random.Random | None = None,
        presence: Presence | None = None,
        presence_period: float = PRESENCE_RECHECK_PERIOD,
        observer: WatchObserver | None = None,
        skips: SkipReporter | None = None,
    ) -> None:
        """`skips`: told of every object skipped or failed by a handler (None: logged only)."""
        self.name = name
        self.store = Store(
            indexers=indexers,
            codec=codec,
            # the intake is made after the store it fills, so it is looked up when called
            view_failed=lambda view, key, error: self._intake.listener_failed(  # noqa: PLW0108
                view, key, error
            ),
        )
        """A view's listener that raises is isolated by the store and reported as a skip."""
        self.pending = PendingWrites(self.store, clock)
        """Our writes of this kind the store does not show yet: every writer of the kind records
        into it, every reader that must see them reads through it (pendingwrites.py)."""
        self._intake = Intake(name, self.store, transform, skips)
        """Takes objects into the store, each on its own (intake.py)."""
        self._clock = clock
        self._resync_period = resync_period
        self._listeners = _Listeners()
        self._synced = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.reflector = Reflector(
            name,
            lister_watcher,
            self,
            clock=clock,
            inactivity_timeout=inactivity_timeout,
            rng=rng,
            observer=observer,
        )
        self._follower = None if presence is None else self._follow(presence, presence_period)
        """None: a required kind. Otherwise `presence` is asked before listing and every
        `presence_period` seconds: while it says False the informer is synced and empty."""

    def _follow(self, presence: Presence, period: float) -> PresenceFollower:
        absent = functools.partial(self.on_list, [], "")
        return PresenceFollower(
            self.name, presence, self.reflector.run, absent, self._clock, period
        )

    @property
    def optional(self) -> bool:
        """True for an optional kind (an empty cache while the server does not serve it)."""
        return self._follower is not None

    @property
    def present(self) -> bool | None:
        """For an optional kind: whether the server served it at the last look (None: not
        looked yet, or the look failed before any answer; always None for a required kind)."""
        return None if self._follower is None else self._follower.present

    # Handlers -----------------------------------------------------------------------------------

    def add_event_handler(
        self, handler: ResourceEventHandler, *, resync: bool = False, name: str = ""
    ) -> Registration:
        """Registers ``handler``; if the cache is already filled it first gets it all as adds,
        before this returns. Not from inside a handler of this informer (RuntimeError, nothing
        registered)."""
        self._listeners.refuse_inside_delivery()
        listener = _Listener(handler, name=f"{self.name}/{name or 'handler'}", resync=resync)
        listener.failed = self._intake.handler_failed
        if self._synced.is_set():
            for stored in self.store.encoded():
                self._listeners.tell((listener,), _Notification("add", new=stored, initial=True))
            self._listeners.tell((listener,), _Notification("synced"))
        if not listener.removed:  # a handler may remove itself while told the cache
            self._listeners.add(listener)
        return Registration(listener, self)

    def _remove_listener(self, listener: _Listener) -> None:
        self._listeners.remove(listener)

    def _broadcast(self, notification: _Notification) -> None:
        self._listeners.broadcast(notification)

    # ReflectorSink ------------------------------------------------------------------------------

    def prepare_listed(self, item: Object) -> Prepared | None:
        """Transforms and encodes each listed item as it arrives, so its dicts can go at once;
        None for an item skipped (reported; the list goes on without it)."""
        return self._intake.prepared(item)

    def on_list(self, items: list[Prepared | None], resource_version: str) -> None:
        """A (re)list from the reflector: replaces the store, notifying adds, updates of objects whose resourceVersion changed, and deletes; the first list marks the informer synced. Skipped items (None) are left out, so a version of them cached before is deleted."""
        self._listeners.refuse_inside_delivery()
        first = not self._synced.is_set()
        kept = [item for item in items if item is not None]
        changes = deque(self.store.replace_prepared(kept))
        while changes:  # each change dropped once told: one decoded object at a time
            change = changes.popleft()
            if change.new is None:
                assert change.old is not None
                tombstone = Tombstone(change.key, change.old.get())
                self._broadcast(_Notification("delete", old=tombstone))
            elif change.old is None:
                self._broadcast(_Notification("add", new=change.new, initial=first))
            elif not change.unchanged:
                self._broadcast(_Notification("update", old=change.old, new=change.new))
        if first:
            self._broadcast(_Notification("synced"))
            self._synced.set()

    def on_event(self, event_type: str, obj: Object) -> None:
        """One watch event from the reflector: applied to the store, then notified in order.
        An object skipped (see the module docstring) is removed from the store instead, its
        cached version, if any, notified as deleted."""
        self._listeners.refuse_inside_delivery()
        change = self._intake.applied(event_type, obj)
        if change is not None:
            kind, old, new = change
            self._broadcast(_Notification(kind, old=old, new=new))

    # Lifecycle ----------------------------------------------------------------------------------

    def has_synced(self) -> bool:
        """True once the first list (or, for an absent optional kind, the first look) is in the store."""
        return self._synced.is_set()

    async def wait_for_sync(self, timeout: float | None = None) -> bool:
        """Waits until synced; False if `timeout` seconds pass first (None: no limit)."""
        try:
            await asyncio.wait_for(self._synced.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def start(self) -> None:
        """Starts the reflector (idempotent)."""
        if self._tasks:
            return
        if self._follower is None:
            self._tasks.append(asyncio.ensure_future(self.reflector.run()))
        else:
            self._tasks.append(asyncio.ensure_future(self._follower.run()))
        if self._resync_period > 0:
            self._tasks.append(asyncio.ensure_future(self._resync_loop()))

    async def stop(self) -> None:
        """Stops the reflector; the store keeps its contents. Idempotent."""
        await cancel_and_wait(self._tasks)
        self._tasks.clear()

    async def _resync_loop(self) -> None:
        while True:
            await self._clock.sleep(self._resync_period)
            if not self._synced.is_set():
                continue
            for stored in self.store.encoded():
                for listener in self._listeners:
                    if listener.resync:
                        self._listeners.tell(
                            (listener,), _Notification("update", old=stored, new=stored)
                        )


@dataclass(frozen=True)
class InformerKey:
    resource: Resource
    namespace: str | None
    label_selector: str | None
    field_selector: str | None


class SharedInformerFactory:
    """Hands out one SharedInformer per (resource, namespace, selectors) and runs them all."""

    def __init__(
        self,
        client: ApiClient,
        *,
        clock: Clock = REAL_CLOCK,
        namespace: str | None = None,
        resync_period: float = 0.0,
        inactivity_timeout: float = DEFAULT_INACTIVITY_TIMEOUT,
        presence_period: float = PRESENCE_RECHECK_PERIOD,
        observer: WatchObserver | None = None,
        skips: SkipReporter | None = None,
    ) -> None:
        """`observer`: told of every informer's watch events and watch CPU (None: nothing is
        measured); `skips`: of every object an informer skips (None: logged only)."""
        self.client = client
        self._namespace = namespace
        self._new_informer = functools.partial(
            SharedInformer,
            clock=clock,
            resync_period=resync_period,
            inactivity_timeout=inactivity_timeout,
            presence_period=presence_period,
            observer=observer,
            skips=skips,
        )
        """SharedInformer with this factory's settings for every informer."""
        self._informers: dict[InformerKey, SharedInformer] = {}
        self._started = False

    def informer(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        indexers: dict[str, IndexFunc] | None = None,
        transform: Transform | None = strip_unread_fields,
        codec: Codec | None = None,
        optional: bool = False,
        presence: Presence | None = None,
    ) -> SharedInformer:
        """The shared informer for this resource; indexers asked for later are added to it.

        ``optional``: the kind may not be installed (a CRD); while the server does not serve it,
        the informer is synced and empty, and it is looked for again every `presence_period`
        seconds (30 by default). ``presence``: another look than discovery's, making the kind
        optional the same way (e.g. access.readable: while this process may not list it). The
        first caller's choice stands for a shared informer."""
        key = InformerKey(resource, namespace or self._namespace, label_selector, field_selector)
        informer = self._informers.get(key)
        if informer is None:
            lister_watcher = ClientListerWatcher(
                self.client, resource, key.namespace, label_selector, field_selector
            )
            informer = self._new_informer(
                lister_watcher,
                name=resource.name,
                transform=transform,
                indexers=indexers,
                codec=codec,
                presence=presence or (self._presence_of(resource) if optional else None),
            )
            self._informers[key] = informer
            if self._started:
                informer.start()
        elif indexers:
            missing = {n: f for n, f in indexers.items() if not informer.store.has_index(n)}
            if missing:
                informer.store.add_indexers(missing)
        return informer

    async def unserved_required(self) -> list[Resource]:
        """The required (not optional) kinds of this factory's informers that the server does not
        serve now, by discovery; raises ApiError if discovery itself fails."""
        missing: dict[Resource, None] = {}
        for key, informer in self._informers.items():
            if informer.optional or key.resource in missing:
                continue
            if not await serves(self.client, key.resource):
                missing[key.resource] = None
        return list(missing)

    def _presence_of(self, resource: Resource) -> Presence:
        async def present() -> bool:
            return await serves(self.client, resource)

        return present

    @property
    def informers(self) -> list[SharedInformer]:
        """Every informer handed out so far."""
        return list(self._informers.values())

    def start(self) -> None:
        """Starts every informer, and any informer asked for later at once. Idempotent."""
        self._started = True
        for informer in self._informers.values():
            informer.start()

    async def wait_for_cache_sync(self, timeout: float | None = None) -> bool:
        """Waits for every informer to sync; False if one has not within `timeout` seconds."""
        results = await asyncio.gather(
            *(informer.wait_for_sync(timeout) for informer in self._informers.values())
        )
        return all(results)

    def synced(self) -> bool:
        """True when every informer has synced (absent optional kinds count as synced)."""
        return all(informer.has_synced() for informer in self._informers.values())

    async def stop(self) -> None:
        """Stops every informer; a later start() starts them again."""
        await asyncio.gather(*(informer.stop() for informer in self._informers.values()))
        self._started = False
