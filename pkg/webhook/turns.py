"""Fair turns at the costly part of pod admissions: no namespace makes another's wait.

Working out a namespace's rooms (pod/validator.py `check_rooms`) runs on the one event loop
without awaiting, so admissions take it one at a time whatever their number. Taken in arrival
order, one tenant's flood of creates (dry runs included: they are decided like real ones) put
every other namespace's admission behind all of its own, past the API server's timeout or the
admission slots' 429, and the fail-open rules then passed them unchecked.

`NamespaceTurns` gives the turns round robin among the namespaces with an admission waiting (in
arrival order within a namespace), so an admission waits for at most one turn of each other
namespace that has one waiting; none waits longer than `wait` seconds of its clock while
another namespace has admissions waiting (alone in the turns, a namespace's admissions wait for
them as they would without turns); and while
another namespace is waiting, a namespace already holding `share` waiting admissions has its
next ones refused at once, which gives the admission slots back at the pace they are parsed
instead of the pace they are decided. Dry runs more so: while admissions not yet read have
waited `CROWDED_AFTER` for an admission slot (their namespace is not known yet: the admissions
waiting for turns hold the slots), a namespace's dry runs past its share are refused, those
already waiting too. Real creates are not refused for crowding: one namespace's honest burst
(forty racing creates, decided on the reservation's Lease writes while they hold their slots)
crowds the slots as well, and leaves real pods behind where a dry-run flood leaves nothing. A refused admission is denied with 429 ("retry"), never passed unchecked
(pods.py), whatever the rule's failure policy.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable
from typing import Final

from ..generic.clock import Clock

TURN_WAIT: Final = 1.0
"""Seconds an admission waits for its turn, while other namespaces' wait too, before it is
refused. The chart gives the webhook 5 s
(`webhook.timeoutSeconds`); with the admission slots' own 1 s wait before it and the turn itself
(milliseconds), an answer comes well within that."""

NAMESPACE_SHARE: Final = 16
"""Admissions of one namespace waiting for a turn past which, while another namespace waits too
(or, for dry runs, the slots are crowded), the next are refused at once: half the admission slots
(32), so a flooding namespace holds at most half of them waiting, and a burst of one namespace
alone (forty racing creates) is never refused for being many."""

CROWDED_AFTER: Final = 0.25
"""Seconds a request may wait for an admission slot (of the slots' 1 s) before the slots count as
crowded, and dry runs past their namespace's share are refused: a quarter of the slots' wait, so
a request that needs no rooms is read well within it."""


class NamespaceTurns:
    """One turn at a time, round robin among namespaces (see the module docstring). `take`
    answers True once the caller holds the turn, which it gives back with `release` (in a
    `finally`), or False when it is refused. Every turn is handed on from the event loop's
    queue, never within `take`: admissions that became ready in the meantime (read, parsed)
    are queued by then and take part in the round robin. Event loop only."""

    def __init__(
        self,
        clock: Clock,
        *,
        wait: float = TURN_WAIT,
        share: int = NAMESPACE_SHARE,
        crowded: Callable[[], bool] = lambda: False,
    ) -> None:
        """`crowded`: whether admissions not yet read are kept waiting too long (the server
        passes its admission slots' `longest_wait() >= CROWDED_AFTER`)."""
        if share < 1:
            raise ValueError(f"a namespace's share of turns must be at least 1, not {share}")
        self.wait, self.share = wait, share
        self._clock = clock
        self._crowded = crowded
        self._held = False
        self._queues: dict[str, collections.deque[asyncio.Future[bool]]] = {}
        self._dry_runs: set[asyncio.Future[bool]] = set()
        """The waiting admissions that are dry runs (the only ones crowded slots refuse)."""
        """Waiting admissions per namespace; the dict's order is the round robin's."""
        self.refused = 0
        """Admissions refused (over the share, or out of time)."""

    def waiting(self, namespace: str) -> int:
        return sum(1 for w in self._queues.get(namespace, ()) if not w.done())

    async def take(self, namespace: str, *, dry_run: bool = False) -> bool:
        """True once `namespace`'s admission holds the turn; False (refused) at once when the
        namespace already has `share` waiting while another namespace waits (or, for a
        `dry_run`, while the slots are crowded), or after `wait` seconds without a turn while
        another namespace waits too."""
        self._trim_crowded()
        if self.waiting(namespace) >= self.share and (
            self._others_wait(namespace) or (dry_run and self._crowded())
        ):
            self.refused += 1
            return False
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._queues.setdefault(namespace, collections.deque()).append(waiter)
        if dry_run:
            self._dry_runs.add(waiter)
        if not self._held:
            # Handed on only once what is ready to run has run: the admissions read meanwhile
            # queue first, so the round robin chooses among them all.
            self._held = True
            loop.call_soon(self.release)
        timer = asyncio.ensure_future(self._expire(namespace, waiter))
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.result():
                self.release()  # handed the turn just as the request was cancelled
            raise
        finally:
            timer.cancel()
            self._dry_runs.discard(waiter)
            self._forget(namespace, waiter)

    def release(self) -> None:
        """Gives the turn back: to the first waiting admission of the next namespace in the
        round robin (which goes to the end of it), else to no one; first, while the slots are
        crowded, trims every namespace to its share (`_trim_crowded`)."""
        self._held = False
        self._trim_crowded()
        while self._queues:
            namespace = next(iter(self._queues))
            queue = self._queues.pop(namespace)
            waiter = queue.popleft() if queue else None
            if queue:
                self._queues[namespace] = queue  # to the end: the others go first
            if waiter is not None and not waiter.done():
                self._held = True
                waiter.set_result(True)
                return

    def _trim_crowded(self) -> None:
        """While the slots are crowded, each namespace keeps its `share` oldest waiting
        admissions and the newer dry runs are refused now: their slots come back at once, not
        one a turn, to the requests not yet read behind them."""
        if not self._dry_runs or not self._crowded():
            return
        for queue in self._queues.values():
            for waiter in [w for w in queue if not w.done()][self.share :]:
                if waiter in self._dry_runs:
                    self.refused += 1
                    waiter.set_result(False)

    def _others_wait(self, namespace: str) -> bool:
        return any(ns != namespace and self.waiting(ns) for ns in self._queues)

    async def _expire(self, namespace: str, waiter: asyncio.Future[bool]) -> None:
        """Refuses `waiter` once it has waited `wait` seconds while another namespace has
        admissions waiting too. A namespace alone in the turns waits for them as it would
        without turns (its own burst, or a busy machine, is no one else's doing)."""
        while not waiter.done():
            await self._clock.sleep(self.wait)
            if not waiter.done() and self._others_wait(namespace):
                self.refused += 1
                waiter.set_result(False)

    def _forget(self, namespace: str, waiter: asyncio.Future[bool]) -> None:
        queue = self._queues.get(namespace)
        if queue is None:
            return
        with contextlib.suppress(ValueError):
            queue.remove(waiter)
        if not queue:
            del self._queues[namespace]
