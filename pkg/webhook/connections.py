"""Bounds on what callers can make the webhook hold: connections that trickle their headers
(ConnectionGuard), request bodies (MAX_BODY), and admissions decided at once (AdmissionSlots)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable

from ..generic.clock import Clock

log = logging.getLogger(__name__)


HEADER_TIMEOUT = 10.0
"""Seconds a new connection has to deliver its request headers (the API server sends them at
once; a client trickling them is holding a connection, not asking a question)."""


BODY_TIMEOUT = 10.0
"""Seconds to read a request body once its headers are in (the API server's default webhook
timeout is 10 s: an answer after that is not waited for anyway)."""


MAX_BODY = 7 * 1024 * 1024 // 2
"""3.5 MiB: the largest AdmissionReview body read. An update's review carries the object and the
old object; neither can be stored above etcd's request limit (--max-request-bytes, 1.5 MiB by
default), so the two take at most 3 MiB, and the envelope around them (uid, kind, resource,
userInfo, options) is far below the 0.5 MiB left. A bigger review holds an object that etcd would
refuse anyway (or, rarely, one whose JSON is much larger than its stored protobuf): it is refused
with 413 before it is read (by its Content-Length) or as soon as it passes the limit, and the API
server applies the rule's failurePolicy."""


MAX_CONNECTIONS = 256
"""Open connections at once; more are closed on arrival (the API server pools its connections,
two replicas of it need a handful)."""


KEEPALIVE_TIMEOUT = 60.0
"""An idle kept-alive connection is closed after this."""


MAX_ADMISSIONS = 32
"""Admissions handled at once, from reading their body to writing their answer: the bodies in
memory are at most MAX_ADMISSIONS x MAX_BODY = 112 MiB (plus what their parsed form takes while
they are decided; a real Kubernetes object's is a few times its JSON), well under the webhook
container's 512Mi limit. A connection waiting for a slot has sent at most its headers and the
first chunk of its body (aiohttp stops reading a socket at 128 KiB of unread body). The API
server's own traffic needs a handful: most answers take milliseconds, a migration target pod's
up to --target-room-wait, and KubeVirt runs a few migrations at a time."""


ADMISSION_SLOT_WAIT = 1.0
"""Seconds a request waits for a slot before it is answered 429 (the API server then applies the
rule's failurePolicy): a short bound, never an unbounded queue."""


class AdmissionSlots:
    """At most `size` admissions at once. A request that finds every slot taken waits for one,
    in arrival order, up to `wait` seconds of `clock`, and is then turned away; a slot a request
    gives back goes straight to the first one waiting. Called on the event loop only."""

    def __init__(self, size: int, wait: float, clock: Clock) -> None:
        if size < 1:
            raise ValueError("at least one admission must be allowed at a time")
        self.size, self.wait = size, wait
        self._clock = clock
        self.in_use = 0
        self.peak = 0
        """The most slots ever held at once."""
        self._waiters: collections.deque[asyncio.Future[bool]] = collections.deque()

    @property
    def waiting(self) -> int:
        return sum(1 for waiter in self._waiters if not waiter.done())

    async def acquire(self) -> bool:
        """True once a slot is held (give it back with `release`), False after `wait` seconds
        without one."""
        if self.in_use < self.size and not self.waiting:
            self.in_use += 1
            self.peak = max(self.peak, self.in_use)
            return True
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        timer = asyncio.ensure_future(self._expire(waiter))
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.result():
                self.release()  # handed a slot just as the request was cancelled
            raise
        finally:
            timer.cancel()
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)

    async def _expire(self, waiter: asyncio.Future[bool]) -> None:
        await self._clock.sleep(self.wait)
        if not waiter.done():
            waiter.set_result(False)

    def release(self) -> None:
        """Gives a slot back: to the first request still waiting, else to the pool."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(True)
                return
        self.in_use -= 1


CLOSE_HEADERS = {"Connection": "close"}


class GuardedConnection(asyncio.Protocol):
    """One connection: aiohttp's protocol behind a header deadline, counted by the guard."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol | None) -> None:
        self._guard, self._inner = guard, inner
        self._header_timeout = guard.header_timeout
        self._transport: asyncio.BaseTransport | None = None
        self._head = b""
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        if self._inner is None:  # over the cap
            transport.close()
            return
        self._guard.open.add(self)
        self._timer = asyncio.get_running_loop().call_later(self._header_timeout, self._too_slow)
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._timer is not None:
            self._head = (self._head + data)[-4096:]
            if b"\r\n\r\n" in self._head:
                self._timer.cancel()
                self._timer, self._head = None, b""
        if self._inner is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._guard.open.discard(self)
        if self._inner is not None:
            self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def _too_slow(self) -> None:
        self._timer = None
        self._guard.slow_headers += 1
        log.info(
            "closing a connection that sent no complete request in %.0fs", self._header_timeout
        )
        if self._transport is not None:
            self._transport.close()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


class ConnectionGuard:
    """Wraps aiohttp's protocol factory: at most MAX_CONNECTIONS open connections, and each must
    deliver its request headers within HEADER_TIMEOUT (aiohttp itself waits forever for them).

    Called by the event loop only; `open` is the set of live connections.
    """

    def __init__(
        self,
        factory: Callable[[], asyncio.Protocol] | None,
        *,
        header_timeout: float = HEADER_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self._factory = factory
        self.header_timeout = header_timeout
        self.max_connections = max_connections
        self.open: set[GuardedConnection] = set()
        self.refused = 0
        self.slow_headers = 0

    def __call__(self) -> asyncio.Protocol:
        if self._factory is None or len(self.open) >= self.max_connections:
            self.refused += 1
            return GuardedConnection(self, None)
        return GuardedConnection(self, self._factory())

    def close_all(self) -> None:
        for connection in list(self.open):
            connection.close()
