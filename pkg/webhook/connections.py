"""Bounds on what callers can make the webhook hold: connections, per address and in all, from
their arrival, and connections that trickle their handshake or headers (ConnectionGuard), request
bodies (MAX_BODY), and admissions decided at once (AdmissionSlots)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass

from ..generic.clock import REAL_CLOCK, Clock
from .tls import RefusalLog

log = logging.getLogger(__name__)


HEADER_TIMEOUT = 10.0
"""Seconds a new connection has, once its handshake ended, to deliver its first request's
headers (the API server sends them at once; a client trickling them is holding a connection, not
asking a question)."""


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
"""Connections held at once, counted from their arrival (a TLS handshake under way holds a
socket and its buffers too). When they are all taken, a newcomer takes the place of a connection
nobody vouched for (`ConnectionGuard`); only if there is none is it closed."""


MAX_CONNECTIONS_PER_PEER = 32
"""Connections one address may have under way (in their handshake or open) that no client
certificate vouches for (all of its connections when the webhook checks no certificates); its
others wait their turn, unread, for at most HANDSHAKE_TIMEOUT (the API server dials a burst of
connections at once, and its certificate vouches for each within milliseconds), within
MAX_CONNECTIONS (where a newcomer finding all taken evicts the oldest connection of the address
holding the most). As many as
MAX_ADMISSIONS, since one API server never has more admissions answered at once than
the slots allow, and it dials a new connection only when every one it pools is busy; a
certificate's connections are not counted, so the API server's pool is bounded by
MAX_CONNECTIONS alone."""


HANDSHAKE_TIMEOUT = 5.0
"""Seconds a connection's TLS handshake may take, and a connection may wait its turn to begin it
(MAX_CONNECTIONS_PER_PEER). The API server's takes milliseconds; asyncio's default, 60 s, let a
silent client hold a socket and its 256 KiB TLS buffer that long."""


KEEPALIVE_TIMEOUT = 60.0
"""An idle kept-alive connection is closed after this. Only a connection that carried an
admission its client was allowed to ask for is kept alive; any other answer (a probe, 401, 403,
404) closes its connection."""


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
        self._since: dict[asyncio.Future[bool], float] = {}
        """When each waiting request began to wait (the clock's monotonic seconds)."""

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
        self._since[waiter] = self._clock.monotonic()
        timer = asyncio.ensure_future(self._expire(waiter))
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.result():
                self.release()  # handed a slot just as the request was cancelled
            raise
        finally:
            timer.cancel()
            self._since.pop(waiter, None)
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


LISTEN_BACKLOG = 128
"""Connections the kernel queues before they are accepted (accepting is cheap: the limits above
apply right after)."""


ACCEPT_RETRY = 0.1
"""Seconds to wait after accept() failed (out of file descriptors, say) before trying again."""


Vouch = Callable[[asyncio.BaseTransport], bool]
"""Whether the client certificate of a connection whose handshake just ended vouches for it."""


@dataclass(eq=False)
class Connection:
    """One accepted connection as the guard counts it, from its arrival to its end."""

    peer: str
    """The client's address, without its port."""
    arrival: int
    """Its place in the order of arrival (smaller is older)."""
    socket: socket.socket | None = None
    """The accepted socket until asyncio takes it over (then None)."""
    turn: asyncio.TimerHandle | None = None
    """While it waits its turn: when it is closed if its turn has not come."""
    opening: asyncio.Task[None] | None = None
    """The handshake under way, if any."""
    protocol: GuardedConnection | None = None
    transport: asyncio.BaseTransport | None = None
    """Both set once the handshake ended."""
    vouched: bool = False
    """A client certificate vouches for it: never evicted, not counted against its address."""
    admitted: bool = False
    """It carried an admission request its client may send: it may be kept alive."""

    @property
    def kept_alive(self) -> bool:
        return self.vouched or self.admitted

    def close(self) -> None:
        """Ends it whatever its stage: before, during or after its handshake."""
        if self.protocol is not None:
            self.protocol.close()
        elif self.opening is not None:
            self.opening.cancel()  # asyncio closes the socket it was given
        if self.turn is not None:
            self.turn.cancel()
            self.turn = None
        if self.socket is not None:
            self.socket.close()  # not yet handed to asyncio
            self.socket = None


class GuardedConnection(asyncio.Protocol):
    """One connection after its handshake: aiohttp's protocol behind a header deadline."""

    def __init__(self, guard: ConnectionGuard, counted: Connection, inner: asyncio.Protocol):
        self._guard, self._counted, self._inner = guard, counted, inner
        self._transport: asyncio.BaseTransport | None = None
        self._head = b""
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._counted.protocol = self
        if not self._guard.opened(self._counted, transport):
            transport.close()  # evicted while its handshake ended
            return
        timeout = self._guard.header_timeout
        self._timer = asyncio.get_running_loop().call_later(timeout, self._too_slow)
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._timer is not None:
            self._head = (self._head + data)[-4096:]
            if b"\r\n\r\n" in self._head:
                self._timer.cancel()
                self._timer, self._head = None, b""
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._guard.forget(self._counted)
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def _too_slow(self) -> None:
        self._timer = None
        self._guard.slow_headers += 1
        log.info(
            "closing a connection from %s that sent no complete request in %.0fs",
            self._counted.peer,
            self._guard.header_timeout,
        )
        self.close()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


class Listener:
    """A listening socket whose accepted connections go, with the peer's address, to
    `arrived`, on the event loop; an accept that fails (out of descriptors, a connection reset
    while queued) is logged and retried after ACCEPT_RETRY seconds, and a connection `arrived`
    fails on is logged and closed: nothing but `stop` ends accepting (the kubelet's probes ask
    the metrics port, so a dead accept loop would go unnoticed)."""

    def __init__(self, arrived: Callable[[socket.socket, str], None]) -> None:
        self._arrived = arrived
        self._socket: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None

    async def start(self, host: str, port: int) -> int:
        """Listens on the first address `host` resolves to; returns the port."""
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        listener = socket.create_server((host, port), family=family, backlog=LISTEN_BACKLOG)
        listener.setblocking(False)
        self._socket = listener
        self._accepting = asyncio.ensure_future(self._accept_loop(listener))
        return int(listener.getsockname()[1])

    async def stop(self) -> None:
        """Stops accepting; idempotent."""
        if self._accepting is not None:
            self._accepting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._accepting
            self._accepting = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    async def _accept_loop(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                accepted, address = await loop.sock_accept(listener)
            except OSError as error:
                log.error("cannot accept a connection: %s", error)
                await asyncio.sleep(ACCEPT_RETRY)
                continue
            try:
                self._arrived(accepted, str(address[0]))
            except Exception:  # one bad arrival must not end accepting for good
                log.exception("closing a connection from %s that could not be taken in", address)
                accepted.close()


class ConnectionGuard:
    """The admission port's listener: it accepts connections itself, so that each is counted
    from its arrival, before its TLS handshake, by the address it comes from.

    - At most `max_connections` at once. A newcomer that finds them all taken evicts a
      connection nobody vouched for and that carried no admission: one of the address holding
      the most such connections, its oldest (so a flood of one or a few addresses evicts itself,
      and the API server's connection, newest and alone from its address, goes last). If there
      is none, the newcomer is closed.
    - At most `max_per_peer` connections of one address under way (in their handshake or open)
      that no client certificate vouches for; its others wait their turn, unread, in order of
      arrival, for at most `handshake_timeout`.
    - A handshake ends within `handshake_timeout` of its start and the first request's headers
      arrive within `header_timeout` after it (aiohttp itself waits forever for them).
    - `vouch` (given when the webhook checks client certificates) decides, once the handshake
      ended, whether the connection's certificate vouches for it; the server marks a connection
      that carried an admission its client may send (`admit`). Only such connections are kept
      alive (`kept_alive`; the server closes the others after their answer).

    Called on the event loop only; `open` holds every connection counted now.
    """

    def __init__(
        self,
        *,
        tls: ssl.SSLContext | None = None,
        vouch: Vouch | None = None,
        header_timeout: float = HEADER_TIMEOUT,
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
        max_per_peer: int = MAX_CONNECTIONS_PER_PEER,
        clock: Clock = REAL_CLOCK,
    ) -> None:
        if max_connections < 1 or max_per_peer < 1:
            raise ValueError("at least one connection must be allowed")
        self._tls, self._vouch = tls, vouch
        self.header_timeout, self.handshake_timeout = header_timeout, handshake_timeout
        self.max_connections, self.max_per_peer = max_connections, max_per_peer
        self.refusals = RefusalLog(clock, what="a connection")
        self.open: set[Connection] = set()
        self._by_transport: dict[asyncio.BaseTransport, Connection] = {}
        self._waiting: dict[str, collections.deque[Connection]] = {}
        self._stopping = False
        self._arrivals = itertools.count()
        self._factory: Callable[[], asyncio.Protocol] | None = None
        self._listener = Listener(self._arrived)
        self.refused = 0
        """Newcomers closed on arrival: every connection taken, none of them evictable."""
        self.evicted = 0
        self.failed_handshakes = 0
        self.slow_headers = 0

    async def serve(self, factory: Callable[[], asyncio.Protocol], host: str, port: int) -> int:
        """Listens on host:port and hands each accepted connection, once its handshake ended,
        to a protocol of `factory`; returns the port (useful with port 0)."""
        self._factory = factory
        return await self._listener.start(host, port)

    async def stop(self) -> None:
        """Stops accepting and closes every connection."""
        self._stopping = True
        await self._listener.stop()
        self.close_all()

    def close_all(self) -> None:
        for connection in list(self.open):
            connection.close()
            self.forget(connection)

    def kept_alive(self, transport: asyncio.BaseTransport | None) -> bool:
        """Whether the connection of `transport` may stay open after an answer."""
        connection = self._by_transport.get(transport) if transport is not None else None
        return connection is not None and connection.kept_alive

    def admit(self, transport: asyncio.BaseTransport | None) -> None:
        """Marks the connection of `transport` as one that carried an admission request its
        client may send: it is kept alive and never evicted."""
        connection = self._by_transport.get(transport) if transport is not None else None
        if connection is not None:
            connection.admitted = True

    def unvouched(self, peer: str) -> int:
        """Connections of `peer` under way that no client certificate vouches for."""
        return sum(1 for c in self.open if c.peer == peer and not c.vouched and c.turn is None)

    def waiting(self, peer: str) -> int:
        """Connections of `peer` waiting their turn."""
        return len(self._waiting.get(peer, ()))

    def _arrived(self, accepted: socket.socket, peer: str) -> None:
        must_wait = self.unvouched(peer) >= self.max_per_peer
        if len(self.open) >= self.max_connections:
            victim = self._victim()
            if victim is None:
                self._refuse(accepted, peer, f"all {self.max_connections} connections are taken")
                return
            self.evicted += 1
            log.info("evicting a connection of %s for a newcomer from %s", victim.peer, peer)
            victim.close()
            self.forget(victim)
        connection = Connection(peer, next(self._arrivals), socket=accepted)
        self.open.add(connection)
        if must_wait:
            loop = asyncio.get_running_loop()
            connection.turn = loop.call_later(self.handshake_timeout, self._turn_missed, connection)
            self._waiting.setdefault(peer, collections.deque()).append(connection)
        else:
            connection.opening = asyncio.ensure_future(self._open(connection))

    def _turn_missed(self, connection: Connection) -> None:
        connection.turn = None
        connection.close()
        self.forget(connection)
        self.refusals.refused(
            connection.peer, f"its turn did not come within {self.handshake_timeout:.0f}s"
        )

    def _next_turn(self, peer: str) -> None:
        """Starts connections of `peer` waiting their turn while it has room under way."""
        queue = self._waiting.get(peer)
        while queue and not self._stopping and self.unvouched(peer) < self.max_per_peer:
            connection = queue.popleft()
            if connection.turn is not None:
                connection.turn.cancel()
                connection.turn = None
            connection.opening = asyncio.ensure_future(self._open(connection))
        if not queue:
            self._waiting.pop(peer, None)

    def _victim(self) -> Connection | None:
        """The oldest connection nobody vouched for that carried no admission, of the address
        holding the most of them; None if there is none."""
        candidates = [c for c in self.open if not c.kept_alive]
        if not candidates:
            return None
        counts = collections.Counter(c.peer for c in candidates)
        return min(candidates, key=lambda c: (-counts[c.peer], c.arrival))

    def _refuse(self, accepted: socket.socket, peer: str, reason: str) -> None:
        self.refused += 1
        accepted.close()
        self.refusals.refused(peer, reason)

    async def _open(self, connection: Connection) -> None:
        """The handshake (if TLS), after which the protocol takes the connection over."""
        assert connection.socket is not None and self._factory is not None
        accepted, connection.socket = connection.socket, None
        factory = self._factory

        def protocol() -> asyncio.Protocol:
            return GuardedConnection(self, connection, factory())

        loop = asyncio.get_running_loop()
        try:
            if self._tls is None:
                await loop.connect_accepted_socket(protocol, accepted)
            else:
                await loop.connect_accepted_socket(
                    protocol,
                    accepted,
                    ssl=self._tls,
                    ssl_handshake_timeout=self.handshake_timeout,
                )
        except OSError as error:  # ssl.SSLError, the handshake timeout, a reset
            self.failed_handshakes += 1
            self.forget(connection)
            self.refusals.refused(connection.peer, f"TLS handshake failed: {error}")
        except Exception:  # asyncio leaves the socket open if the protocol could not be made
            log.exception("closing a connection from %s that could not be opened", connection.peer)
            accepted.close()
            self.forget(connection)
        finally:
            connection.opening = None

    def opened(self, connection: Connection, transport: asyncio.BaseTransport) -> bool:
        """Called by the connection once its handshake ended: False if it was evicted meanwhile
        (the caller closes it). Records whether its certificate vouches for it."""
        if connection not in self.open:
            return False
        connection.transport = transport
        self._by_transport[transport] = connection
        connection.vouched = self._vouch is not None and self._vouch(transport)
        if connection.vouched:
            self._next_turn(connection.peer)
        return True

    def forget(self, connection: Connection) -> None:
        """It no longer counts (closed, or being closed); idempotent."""
        if connection not in self.open:
            return
        self.open.discard(connection)
        if connection.transport is not None:
            self._by_transport.pop(connection.transport, None)
        queue = self._waiting.get(connection.peer)
        if queue is not None and connection in queue:
            queue.remove(connection)
            if not queue:
                self._waiting.pop(connection.peer, None)
        elif not connection.vouched:
            self._next_turn(connection.peer)
