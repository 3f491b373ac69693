"""Leader failover during a drain, for the scale run (``harvester-quota-bench scale --failover``).

The run starts a second controller process beside the leader (`product.Product` with a
standby), and as its first drain wave starts SIGKILLs whichever process holds the Lease, then
creates the wave's migrations: the leader dies without releasing the Lease, as on a lost node,
and every room the wave needs is the standby's to raise (killed a moment later, the leader would
raise some of them itself, and how many would depend on the race). `FailoverTimes` then
measures, from the kill:

- ``takeover``: until the Lease names the standby (polled every `LEASE_POLL` s);
- ``first_raise``: until the run's quota watch first saw a room raised for a migration of the
  wave (only the standby can write it: the leader is dead and the webhook writes no quota), the
  standby's first correct quota write;

and the wave's own figures say whether a migration was refused meanwhile (KubeVirt's
FailedCreate) and whether every quota came back to its base. The target: the
first raise within the lease duration plus one second.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from ...generic import errors
from ...generic.client import ApiClient
from ...generic.clock import Clock
from ...generic.resource import LEASES

LEASE_POLL: Final = 0.05
TAKEOVER_TIMEOUT: Final = 120.0
LEASE_SECONDS: Final = 15.0
"""The controller's lease duration (generic/leader.py's default, what the chart runs)."""


@dataclass(frozen=True)
class FailoverTimes:
    """Seconds from the leader's SIGKILL (see the module docstring); None: never seen."""

    standby_caches: str
    """``warm`` or ``cold``: what the standby held when it won."""
    takeover: float | None
    first_raise: float | None
    raised_after_kill: int
    """Rooms of the wave raised after the kill (by the standby)."""
    lease_seconds: float = LEASE_SECONDS

    @property
    def met(self) -> bool:
        """The issue's target: the first raise within the lease duration plus one second."""
        return self.first_raise is not None and self.first_raise <= self.lease_seconds + 1.0

    @property
    def after_takeover(self) -> float | None:
        """From the takeover to the first raise: the new leader's own share. The takeover's
        moment depends on where in the leader's 2 s renewal cycle it died and on the standby's
        2-2.4 s retries (13-20 s after the kill), not on the standby's caches."""
        if self.first_raise is None or self.takeover is None:
            return None
        return self.first_raise - self.takeover

    def line(self) -> str:
        def seconds(value: float | None) -> str:
            return "never" if value is None else f"{value:.2f} s"

        return (
            f"failover ({self.standby_caches} standby): Lease taken over after "
            f"{seconds(self.takeover)}, first raise after {seconds(self.first_raise)} "
            f"({seconds(self.after_takeover)} after the takeover; target "
            f"{self.lease_seconds + 1:.0f} s from the kill: {'met' if self.met else 'missed'}); "
            f"{self.raised_after_kill} rooms raised by the standby"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "standby_caches": self.standby_caches,
            "takeover_seconds": _rounded(self.takeover),
            "first_raise_seconds": _rounded(self.first_raise),
            "after_takeover_seconds": _rounded(self.after_takeover),
            "raised_after_kill": self.raised_after_kill,
            "lease_seconds": self.lease_seconds,
            "met": self.met,
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


async def await_holder(
    api: ApiClient, namespace: str, name: str, identity: str, clock: Clock
) -> float | None:
    """Monotonic time at which the Lease was first seen held by `identity` (None: not within
    TAKEOVER_TIMEOUT). Reads the Lease every LEASE_POLL seconds; a failed read is retried."""
    deadline = clock.monotonic() + TAKEOVER_TIMEOUT
    while clock.monotonic() < deadline:
        try:
            lease = await api.get(LEASES, name, namespace)
        except errors.ApiError:
            lease = {}
        if (lease.get("spec") or {}).get("holderIdentity") == identity:
            return clock.monotonic()
        await clock.sleep(LEASE_POLL)
    return None


def first_after(moments: Iterable[float | None], since: float) -> tuple[float | None, int]:
    """The earliest of `moments` at or after `since`, as seconds after it, and how many there
    are (None moments are ignored)."""
    after = [m - since for m in moments if m is not None and m >= since]
    return (min(after) if after else None), len(after)
