"""What a `WebhookServer` is built with, in three small groups instead of twenty keywords.

- `Listening`: where the API server calls it and how the connection is secured;
- `Bounds`: the limits that keep one slow or hostile client from holding the process
  (connections.py explains each number);
- `RoomSharing`: what the pods endpoint shares with the rest of the process to decide target pods
  and pods while room is held (pods.py): the caches' quota changes, the ledger, the reservations
  the replicas share, the live quota reads.

Each group is plain, frozen data with the defaults a unit test wants; `server._server` fills
them from `WebhookOptions` (the command line) for the process as deployed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from .connections import (
    ADMISSION_SLOT_WAIT,
    BODY_TIMEOUT,
    HANDSHAKE_TIMEOUT,
    HEADER_TIMEOUT,
    MAX_ADMISSIONS,
    MAX_CONNECTIONS,
    MAX_CONNECTIONS_PER_PEER,
)
from .resources.pod.ledger import AdmissionLedger
from .resources.pod.reservations import LeaseReservations
from .resources.pod.targets import TARGET_ROOM_WAIT, LiveQuotas, QuotaChanges
from .tls import ClientAuth, ReloadingTLS


@dataclass(frozen=True)
class Listening:
    """The admission port: with `client_auth` (which needs `tls`) only clients with a
    certificate from its CA get past the handshake, and /validate/* answers only the ones it
    accepts, before reading their body."""

    host: str = "0.0.0.0"  # the API server calls in through a Service
    port: int = 8443
    """0: any free port (`WebhookServer.start` returns it)."""
    tls: ReloadingTLS | None = None
    client_auth: ClientAuth | None = None


@dataclass(frozen=True)
class Bounds:
    """Connections are bounded as ConnectionGuard says; at most `max_admissions` bodies are read
    at once, the others wait up to `admission_wait` seconds to be read and are then answered
    429. Once parsed, admissions are decided within the admission limiter's places
    (limiter.py): with `fair`, at most its share of them per namespace; without, any one
    namespace may take every place (the limiter's size as its share)."""

    header_timeout: float = HEADER_TIMEOUT
    body_timeout: float = BODY_TIMEOUT
    handshake_timeout: float = HANDSHAKE_TIMEOUT
    max_connections: int = MAX_CONNECTIONS
    max_connections_per_peer: int = MAX_CONNECTIONS_PER_PEER
    max_admissions: int = MAX_ADMISSIONS
    admission_wait: float = ADMISSION_SLOT_WAIT
    fair: bool = True


@dataclass(frozen=True)
class RoomSharing:
    """`quota_changes` (WebhookCaches.quota_changes) wakes target pods waiting up to
    `target_room_wait` seconds for their room; without it they do not wait. With
    `reservations` (whose fallback is `ledger`), pods while room is held are decided on the
    reservation every replica shares; without, on this process's `ledger` alone (a new one when
    None). With `live` (targets.live_quotas), a target pod that fits on the cached quota is
    judged once more on the quota as the API server has it now."""

    quota_changes: QuotaChanges | None = None
    target_room_wait: float = TARGET_ROOM_WAIT
    ledger: AdmissionLedger | None = None
    reservations: LeaseReservations | None = None
    live: LiveQuotas | None = None


LOCAL: Final = Listening()
"""The defaults: 0.0.0.0:8443, plain HTTP (the unit tests' server, which they call in process)."""
DEFAULT_BOUNDS: Final = Bounds()
UNSHARED: Final = RoomSharing()
"""Nothing shared: target pods do not wait, a ledger of the server's own, no replicas."""
