"""Releases held back a moment while a namespace's next target pod is being created, so that
our write does not make that pod's quota admission conflict.

A migration's end is when KubeVirt creates the next target pod of the namespace (its parallel
limits free a slot) and when the room mode gives the ended migration's room back. Quota
admission updates the quota's status.used for the pod and, on a conflict, retries three times at
once against its own cache; a release of ours landing in the same milliseconds used those
retries up, the target pod create failed with a Conflict, and KubeVirt's rate limiter held the
migration for up to minutes (bench/SCALE.md). So a plan that only gives room back while a room
is still waiting for its target pod (`QuotaPlan.gathers`) is held back: the target pod's
creation queues the namespace again and the release is written then, with every release due
meanwhile, in one write. At most `window` seconds after the first hold, the release is written
whatever still waits (a migration queued behind KubeVirt's limits waits for minutes).

What a hold keeps from a tenant: nothing. Room is held while a release waits, so the webhook
holds the namespace's pods to the base and the room-held label stays (docs/security.md, 1c).

Not thread-safe: event loop only, per namespace from one worker at a time (the reconcile's).
"""

from __future__ import annotations

from collections.abc import Callable

from ...generic.clock import Clock

GATHER_RETRY = "a release held back for the namespace's target pods is written then"


class ReleaseGathering:
    """Per namespace, since when a release has been held back (monotonic seconds)."""

    def __init__(
        self, clock: Clock, window: float, on_hold: Callable[[], None] = lambda: None
    ) -> None:
        if window < 0:
            raise ValueError(f"the release-gathering window must be >= 0 s, not {window!r}")
        self.clock = clock
        self.window = window
        self.on_hold = on_hold
        """Called when a hold begins (the controller counts it in a metric)."""
        self._held_since: dict[str, float] = {}

    def hold(self, namespace: str, gathers: bool) -> float | None:
        """Seconds to hold the namespace's release back for, or None to write it now.

        `gathers` is the plan's `QuotaPlan.gathers`. A plan that does not gather ends the
        namespace's hold (its write goes now); one that gathers is held until `window` seconds
        after its namespace's first hold, then written, again at once while it still gathers
        (its write failed); the next hold starts afresh once a plan did not gather."""
        if not gathers or self.window == 0:
            self._held_since.pop(namespace, None)
            return None
        now = self.clock.monotonic()
        since = self._held_since.get(namespace)
        if since is None:
            since = self._held_since[namespace] = now
            self.on_hold()
        left = since + self.window - now
        # Past the window the release is written; the hold's start stays until a plan no
        # longer gathers, so a write that failed (a Conflict) is tried again at once, never
        # held for a new window.
        return left if left > 0 else None

    def holding(self, namespace: str) -> bool:
        """Whether a release of the namespace is held back now."""
        return namespace in self._held_since

    def forget(self, namespace: str) -> None:
        """The namespace is no longer ours."""
        self._held_since.pop(namespace, None)
