"""The one admission limiter: how many admissions are decided at once, fairly per namespace.

Every admission of every endpoint is read and parsed first (its body under the transport's
bounds, connections.py), then takes a place here under its namespace's key before its rules run,
and gives it back when answered. The limiter never looks at what an admission is: a create the
rules deny, a dry run, a VM update and a pod create all count alike, because a denied request
costs its sender nothing and can be sent again at once.

- At most `size` admissions are decided at once, at most `share` of them of one namespace,
  whether or not another namespace is waiting: a namespace alone cannot take every place, so a
  newcomer from elsewhere finds one free unless `size / share` namespaces are busy at once.
- Admissions beyond those wait in their namespace's line, at most `line` of them alone, and
  while another namespace waits too at most `crowded_line` where its line is the longest: the next of that namespace is refused at once, and when another namespace's
  admission arrives, longer lines are cut to the longer of `crowded_line` and its line (their
  newest refused), so a flood's queued work is shed rather than decided, while a burst no
  longer than another namespace's line waits on. A place that comes free goes to the oldest
  admission of the namespace with the fewest in decision among those under their share (round
  robin among equals).
- At most `queue` admissions wait at once in all lines. A newcomer finding them full refuses
  the newest waiting admission of the namespace holding the most (in decision and waiting), or
  is itself refused when that is its own namespace: a flood is refused from its own end.
- A waiting admission is refused after `wait` seconds of the clock while its line is longer
  than every other namespace's (a flood's own line is cut down to the next longest; a burst no
  longer than another's beside it waits on),
  and after `deadline` seconds in any case: an answer must reach the API server within its
  webhook timeout (the chart's 5 s), or a rule whose failure policy is Ignore would let the
  request through unchecked.
- The requests the product's own users make (`priority`: KubeVirt's migration target pods, our
  controller's writes) never wait behind a tenant: they take a place of their own at once, up
  to `priority_size` at a time, beyond which they are refused.

Places are handed out from the event loop's queue, one a turn of the loop, never within
`acquire`: the admissions read meanwhile are in the lines by then, so the order of grants, which
is the order in which the rules' costly parts run (they run without awaiting), is the round
robin's, not arrival order, and every request's I/O is served between two costly parts.

What one namespace can cost another, whatever it sends (creates, dry runs, VM edits): the
other's admission is granted at the next hand-out, ahead of any namespace with more in decision,
while fewer than `size / share` namespaces are busy (otherwise at the first place that comes
free); its costly part then runs after at most `share` costly parts of each busy namespace
(those granted before it). Its burst of up to `line` admissions is refused only where
`queue / line` namespaces fill their lines at once, and a wait of its ends in a refusal beside a
flood only where its own line is the longest. What the limiter cannot bound: reading and parsing
a body, before its namespace is known (the transport's bounds, connections.py).

Event loop only; not thread-safe.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections import Counter
from typing import Final

from ..generic.clock import Clock

SIZE: Final = 32
"""Admissions decided at once: the admission slots of before, one API server's usual number of
concurrent calls to a webhook under load."""
SHARE: Final = 4
"""Admissions of one namespace decided at once: an eighth of `SIZE`, so eight namespaces at their
share are needed before anyone else waits, and another namespace's admission runs after at most
four costly parts of each busy one; enough for one namespace's honest burst to have its pods
decided in batches on the reservation's Lease writes."""
LINE: Final = 64
"""Admissions of one namespace waiting at once: an honest burst of 68 racing creates of one
namespace (`SHARE` of them in decision) is decided without a refusal."""
CROWDED_LINE: Final = 16
"""Admissions of one namespace waiting at once while another namespace waits too, where its line
is the longest: a flood beside others keeps a few admissions ready and sheds the rest at once
(each admission decided costs the event loop its rooms' computation, and all namespaces share
the loop), while a burst beside them keeps four times its share waiting."""
QUEUE: Final = 256
"""Admissions waiting at once in all lines: four namespaces' full lines. Each holds its parsed
body (at most connections.MAX_BODY read); connections.MAX_CONNECTIONS bounds them too."""
WAIT: Final = 2.0
"""Seconds after which a waiting admission whose line is longer than any other is refused."""
DEADLINE: Final = 3.0
"""Seconds after which any waiting admission is refused (429, retry): the rules then still have
2 s before the chart's 5 s webhook timeout, past which an Ignore rule passes the request."""
PRIORITY_SIZE: Final = 32
"""Priority admissions decided at once: KubeVirt creates a few target pods at once (its parallel
migration limits: 5 per cluster by default), each waiting up to its room's wait (8 s)."""


class AdmissionLimiter:
    """See the module docstring. `acquire` answers True once the caller holds a place (given
    back with `release` in a `finally`, with the same key and priority), or False if refused."""

    def __init__(
        self,
        clock: Clock,
        *,
        size: int = SIZE,
        share: int = SHARE,
        line: int = LINE,
        crowded_line: int = CROWDED_LINE,
        queue: int = QUEUE,
        wait: float = WAIT,
        deadline: float = DEADLINE,
        priority_size: int = PRIORITY_SIZE,
    ) -> None:
        if not 1 <= share <= size:
            raise ValueError(f"a namespace's share must be within 1..{size}, not {share}")
        if min(line, queue, priority_size) < 0 or not 0 < wait <= deadline:
            raise ValueError("negative lines or places, or a wait beyond the deadline")
        self.size, self.share, self.line, self.queue = size, share, line, queue
        self.crowded_line = crowded_line
        self.wait, self.deadline = wait, deadline
        self.priority_size = priority_size
        self._clock = clock
        self._deciding: Counter[str] = Counter()
        self._priority = 0
        self._dispatching = False
        """A dispatch is scheduled on the event loop."""
        self._lines: dict[str, collections.deque[asyncio.Future[bool]]] = {}
        """Waiting admissions per namespace, oldest first; the dict's order is the round robin's."""
        self.refused = 0
        """Admissions refused (queue full, out of time, or priority places taken)."""
        self.peak = 0
        """The most admissions ever decided at once (priority ones aside)."""

    @property
    def deciding(self) -> int:
        return sum(self._deciding.values())

    @property
    def waiting(self) -> int:
        return sum(len(line) for line in self._lines.values())

    def waiting_in(self, key: str) -> int:
        return len(self._lines.get(key, ()))

    async def acquire(self, key: str, *, priority: bool = False) -> bool:
        """True once an admission of namespace `key` may be decided; False when refused (see
        the module docstring). A priority admission never waits. Any other is granted from the
        event loop's queue, never within this call: the admissions read meanwhile are in the
        lines by then, and the round robin chooses among them all (the rules' costly part runs
        without awaiting, so the order of grants is the order of the costly parts)."""
        if priority:
            if self._priority >= self.priority_size:
                self.refused += 1
                return False
            self._priority += 1
            return True
        if self._over_its_line(key) or (self.waiting >= self.queue and not self._make_room(key)):
            self.refused += 1
            return False
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._lines.setdefault(key, collections.deque()).append(waiter)
        self._trim_beside(key)
        self._schedule_dispatch(loop)
        timer = asyncio.ensure_future(self._expire(key, waiter))
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.result():
                self.release(key)  # granted just as the request was cancelled
            raise
        finally:
            timer.cancel()
            self._forget(key, waiter)

    def release(self, key: str, *, priority: bool = False) -> None:
        """Gives back a place `acquire` granted; it goes to the next waiting admission."""
        if priority:
            self._priority -= 1
            return
        self._deciding[key] -= 1
        if self._deciding[key] <= 0:
            del self._deciding[key]
        if self._lines:
            self._schedule_dispatch(asyncio.get_running_loop())

    def _schedule_dispatch(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._dispatching:
            self._dispatching = True
            loop.call_soon(self._dispatch)

    def _over_its_line(self, key: str) -> bool:
        """Whether `key`'s next admission finds its line full: `line` long, or, while another
        namespace waits too, `crowded_line` long and longer than every other line (a flood's
        newcomers are refused at once; a burst no longer than another's goes on)."""
        waiting = self.waiting_in(key)
        if waiting >= self.line:
            return True
        others = self._other_lines(key)
        if waiting < self.crowded_line or not others:
            return False
        return waiting > max(others)

    def _trim_beside(self, key: str) -> None:
        """With `key`'s admission just in the lines: every other line longer than both
        `crowded_line` and `key`'s is cut down to the longer of those two, its newest refused
        now (a flood's queued work is shed as soon as another namespace waits, not decided)."""
        keep = max(self.crowded_line, self.waiting_in(key))
        for other, line in list(self._lines.items()):
            while other != key and len(line) > keep:
                evicted = line.pop()
                if not evicted.done():
                    self.refused += 1
                    evicted.set_result(False)
            if not line:
                del self._lines[other]

    def _other_lines(self, key: str) -> list[int]:
        return [len(line) for other, line in self._lines.items() if other != key]

    def _grant(self, key: str) -> None:
        self._deciding[key] += 1
        self.peak = max(self.peak, self.deciding)

    def _dispatch(self) -> None:
        """Hands one free place to a waiting admission, of the namespace with the fewest in
        decision among those under their share (the first in the lines among equals; a
        namespace served goes to the end of them), and schedules the next hand-out on the
        event loop: one grant a turn of the loop, so the I/O of every request (a victim's body,
        a Lease's answer) is served between two costly parts, not after all of them."""
        self._dispatching = False
        while self.deciding < self.size:
            eligible = [k for k in self._lines if self._deciding[k] < self.share]
            if not eligible:
                return
            key = min(eligible, key=lambda k: self._deciding[k])  # the first of equals
            line = self._lines.pop(key)
            waiter = line.popleft()
            if line:
                self._lines[key] = line
            if not waiter.done():  # one cancelled meanwhile is skipped
                self._grant(key)
                waiter.set_result(True)
                if self._lines:
                    self._schedule_dispatch(asyncio.get_running_loop())
                return

    def _make_room(self, newcomer: str) -> bool:
        """With the queue full: refuses the newest waiting admission of the namespace holding
        the most, unless that is `newcomer`'s own (then False: the newcomer is refused)."""
        held = {key: self._deciding[key] + len(line) for key, line in self._lines.items()}
        largest = max(held, key=lambda key: held[key])
        if held.get(newcomer, self._deciding[newcomer]) + 1 >= held[largest]:
            return False
        line = self._lines[largest]
        while line:
            evicted = line.pop()
            if not evicted.done():  # one cancelled meanwhile goes without a refusal
                self.refused += 1
                evicted.set_result(False)
                break
        if not line:
            del self._lines[largest]
        return True

    async def _expire(self, key: str, waiter: asyncio.Future[bool]) -> None:
        """Refuses `waiter` after `wait` seconds while its line is longer than every other
        namespace's waiting, and after `deadline` seconds in any case."""
        waited = 0.0
        while not waiter.done():
            step = min(self.wait, self.deadline - waited)
            await self._clock.sleep(step)
            waited += step
            if waiter.done():
                return
            if waited >= self.deadline or self._longest_beside_others(key):
                self._forget(key, waiter)
                self.refused += 1
                waiter.set_result(False)

    def _longest_beside_others(self, key: str) -> bool:
        """Whether another namespace waits too, every one with a shorter line than `key`'s."""
        others = self._other_lines(key)
        return bool(others) and self.waiting_in(key) > max(others)

    def _forget(self, key: str, waiter: asyncio.Future[bool]) -> None:
        line = self._lines.get(key)
        if line is None:
            return
        with contextlib.suppress(ValueError):
            line.remove(waiter)
        if not line:
            del self._lines[key]
