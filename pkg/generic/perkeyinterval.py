"""A per-key rate limit: at most one admission per key per interval, the refused ones counted
and handed to the next admission, for as many keys as a bound allows: what spaces out the Events
and log lines told of one object, each saying how many were left out since the last. Not
thread-safe: event loop only."""

from __future__ import annotations

from collections import OrderedDict

from .clock import Clock


class PerKeyInterval:
    """At most one admission per key per `interval` seconds of `clock`; the refused ones are
    counted and handed to the next admission of the key. Bounded to `max_keys` keys: past that
    the key admitted longest ago is forgotten (with the count it held; one whose interval ended
    is older than any whose did not), and an admission of it then is as if it were new."""

    def __init__(self, clock: Clock, interval: float, max_keys: int) -> None:
        self.clock = clock
        self.interval = interval
        self.max_keys = max_keys
        self._last: OrderedDict[str, tuple[float, int]] = OrderedDict()
        """Key -> (when it was last admitted, how many were refused since), in the order of
        their last admission: the first is the one to forget."""

    def admit(self, key: str) -> int | None:
        """The number of refusals of `key` since its last admission if it is admitted now
        (counted from then), else None (and this one is counted)."""
        now = self.clock.monotonic()
        last = self._last.get(key)
        if last is not None and now - last[0] < self.interval:
            self._last[key] = (last[0], last[1] + 1)
            return None
        self._last[key] = (now, 0)
        self._last.move_to_end(key)
        while len(self._last) > self.max_keys:
            self._last.popitem(last=False)
        return 0 if last is None else last[1]
