"""The named handlers of one controller and how one run of them ends (lasso's SharedHandler).

wrangler's controllers keep their handlers in a ``SharedHandler`` apart from the run loop: the
loop takes a key from the queue, the shared handler runs every registered handler for it, and
the loop turns the outcome into the queue's next step. Here the outcome is a `HandlersRun`
(failed, or a retry asked for) that `Controller.process` applies to its rate-limited queue.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass

from . import errors
from .cputime import cpu_timed
from .frameworkmetrics import HandlerObserver
from .resource import Object

Handler = Callable[[str, Object | None], Awaitable[Object | None]]
"""``handler(key, obj)``: `obj` is the cached object, or None once it is gone; a handler may
return the object it wrote, which the next handler then receives (chaining)."""


class RetryAfter(Exception):
    """Raised by a handler: run this key again after ``seconds``, without counting a failure."""

    def __init__(self, seconds: float, reason: str = "") -> None:
        super().__init__(reason or f"retry after {seconds}s")
        self.seconds = seconds


class Ignore(Exception):
    """Raised by a handler: stop this run without error (wrangler's ErrSkip)."""


@dataclass(frozen=True, slots=True)
class HandlersRun:
    """How one run of every handler for a key ended."""

    failed: bool = False
    """A handler failed (a conflict or any other error): the key is retried, rate limited."""
    retry_after: float | None = None
    """The shortest delay a handler asked for with `RetryAfter`, if any."""


class SharedHandler:
    """The handlers of one controller, by name, run in the order they were registered.

    `on_change` runs each handler once per key; what one returns (an object with a uid) is what
    the next one receives. A handler registered during a run takes part from the next run on.
    Errors never escape a run: `RetryAfter`, `Ignore`, a conflict and any other exception become
    its `HandlersRun` (cancellation aside, which propagates). Event loop only, no lock.
    """

    __slots__ = ("_handlers", "_log", "_name", "_observer")

    def __init__(
        self, name: str, log: logging.Logger, observer: HandlerObserver | None = None
    ) -> None:
        """`observer`: told of every handler run, with its CPU if it measures CPU (None:
        nothing is counted)."""
        self._name = name
        self._log = log
        self._observer = observer
        self._handlers: list[tuple[str, Handler]] = []

    def __iter__(self) -> Iterator[tuple[str, Handler]]:
        """``(name, handler)`` pairs, in registration order."""
        return iter(list(self._handlers))

    def register(self, name: str, handler: Handler) -> None:
        """Adds `handler` after those registered before (names need not be unique)."""
        self._handlers.append((name, handler))

    async def on_change(self, key: str, obj: Object | None) -> HandlersRun:
        """Runs every handler for `key`, starting from the cached `obj`.

        ``Ignore`` ends the run (what earlier handlers asked for stands); ``RetryAfter`` asks for
        a delay (the shortest of the run wins); a conflict is a failure logged at debug level,
        because it is routine; any other exception is a failure logged with the key and the
        handler's name (its traceback unless it is an API error). The other handlers still run.
        """
        failed = False
        retry_after: float | None = None
        for name, handler in list(self._handlers):
            try:
                result = await self._run(name, handler, key, obj)
            except Ignore:
                break
            except RetryAfter as request:
                retry_after = (
                    request.seconds if retry_after is None else min(retry_after, request.seconds)
                )
            except errors.Conflict as conflict:
                self._log.debug(
                    "%s: %s %s: conflict, requeuing: %s", self._name, name, key, conflict
                )
                failed = True
            except asyncio.CancelledError:
                raise
            except Exception as error:
                self._log.error(
                    "%s: handler %s failed for %s, requeuing: %s",
                    self._name,
                    name,
                    key,
                    error,
                    exc_info=not isinstance(error, errors.ApiError),
                )
                failed = True
            else:
                if isinstance(result, dict) and (result.get("metadata") or {}).get("uid"):
                    obj = result
        return HandlersRun(failed, retry_after)

    def _run(
        self, name: str, handler: Handler, key: str, obj: Object | None
    ) -> Awaitable[Object | None]:
        """One handler's run, counted by the observer as it starts and its CPU told when it
        ends if the observer measures CPU."""
        run = handler(key, obj)
        observer = self._observer
        if observer is None:
            return run
        observer.handler_started(self._name, name)
        if not observer.measures_cpu:
            return run
        coro = run if isinstance(run, Coroutine) else _coroutine(run)
        return cpu_timed(coro, functools.partial(observer.handler_ran, self._name, name))


async def _coroutine(awaitable: Awaitable[Object | None]) -> Object | None:
    """`awaitable` as a coroutine (a handler may return any awaitable)."""
    return await awaitable
