"""`harvester-quota webhook`: the HTTPS AdmissionReview server.

Five validating endpoints (/validate/namespaces, /validate/resourcequotas,
/validate/virtualmachines, /validate/pods, and /validate/mtq-lock for pods, quotas and VMMRQs in
namespaces MTQ mode locks) over the rules in resources/, answered from informer caches (no API
call per request); a migration target pod's answer may wait for its room to show in them
(resources/pod/targets.py). TLS 1.2 or newer; the certificate and key files are re-read when
they change on disk (a rotated Secret mounted in the pod), without a restart. A request that
cannot be parsed gets a clear denial (or HTTP 400 when it has no uid to answer); a bug in a
validator gets HTTP 500, so the API server applies the webhook's failurePolicy, chosen per
endpoint in deploy/.

Only the API server is meant to call /validate/*, and answers have side effects (reservation
Leases, held waits), so with a client CA (ClientAuth) a request without a client certificate
from that CA, or from a name not accepted, is refused before its body is read. Bodies are capped
at MAX_BODY and at most MAX_ADMISSIONS are read and decided at once (AdmissionSlots), so the
memory that requests can take is bounded. /metrics, which names every namespace, is served on a
separate plain-HTTP port (`serve`'s metrics_address) meant to be reachable by monitoring only.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime
import logging
import os
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from ..apis.harvester import RATIO_SETTING, SETTINGS
from ..apis.kubevirt import (
    KUBEVIRTS,
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
    VIRTUAL_MACHINE_INSTANCES,
)
from ..apis.mtq import VMMRQS
from ..config.kubevirt import settings_from
from ..generic import errors
from ..generic.client import ApiClient
from ..generic.clock import REAL_CLOCK, Clock
from ..generic.health import HealthServer
from ..generic.informer import ResourceEventHandler, SharedInformerFactory
from ..generic.resource import NAMESPACES, PODS, RESOURCE_QUOTAS, Object
from ..generic.store import NamespaceObjects
from ..util.annotations import LABEL_DEFAULT_RESOURCE_QUOTA
from ..util.launcher import LauncherSettings
from ..util.podusage import strip_pod_to_quota_fields
from ..util.resourcequota.handover import room_raise_left
from ..util.resourcequota.managed import managed_quota
from ..util.resourcequota.podindex import NamespacePods, PodIndex, pod_view
from .admission import BadReview, Denied, Request, parse_review, review_response
from .resources.common import Identities, Lookups
from .resources.mtq.validator import active_lock, is_lock_target, validate_locked
from .resources.namespace.validator import validate_namespace_update
from .resources.pod.ledger import AdmissionLedger
from .resources.pod.reservations import COLLECT_AFTER, LeaseReservations
from .resources.pod.targets import (
    OUTCOMES,
    TARGET_ROOM_WAIT,
    GaveUp,
    QuotaChanges,
    admit_target,
)
from .resources.pod.validator import admit_locally, is_migration_target, pod_check
from .resources.resourcequota.validator import validate_quota_update
from .resources.virtualmachine.validator import validate_vm_start

log = logging.getLogger(__name__)

CERT_RELOAD_INTERVAL = 10.0
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
REFUSAL_LOG_INTERVAL = 10.0
"""Seconds between two warnings about clients refused for their certificate (a flood logs one
line per interval, with the count of the others)."""
METRICS_PORT = 8081
"""The plain-HTTP port of /metrics, /healthz and /readyz (never the admission port)."""
Validator = Callable[[Request], Awaitable[None] | None]
"""Raises Denied to deny. A validator that needs to wait returns an awaitable; the others run to
the end without awaiting, so their decisions are serialized on the event loop."""


class WebhookCaches:
    """The informer caches the validators read (implements resources.common.Lookups)."""

    def __init__(
        self,
        client: ApiClient,
        *,
        clock: Clock = REAL_CLOCK,
        kubevirt_version: str | None = None,
        mtq: bool = True,
    ) -> None:
        """`mtq`: namespaces with a VirtualMachineMigrationResourceQuota are MTQ mode's, and
        their quotas are no managed quota here (no room rules, no target wait), as the
        controller's --no-mtq decides."""
        self._clock = clock
        self._kubevirt_version = kubevirt_version
        self.factory = SharedInformerFactory(client, clock=clock)
        self.quotas = self.factory.informer(
            RESOURCE_QUOTAS, label_selector=f"{LABEL_DEFAULT_RESOURCE_QUOTA}=true"
        )
        self.namespaces = self.factory.informer(NAMESPACES)
        self._migrations = self.factory.informer(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS)
        self._vmis = self.factory.informer(VIRTUAL_MACHINE_INSTANCES)
        self.pods = self.factory.informer(
            PODS, label_selector="kubevirt.io=virt-launcher", transform=strip_pod_to_quota_fields
        )
        self.pod_index = PodIndex()
        """The launcher pods as the room plan reads them, kept as they change (podindex.py)."""
        self.pods.store.add_view(PodIndex.VIEW, pod_view, self.pod_index.changed)
        self.settings = self.factory.informer(
            SETTINGS, field_selector=f"metadata.name={RATIO_SETTING}", optional=True
        )
        self.kubevirts = self.factory.informer(KUBEVIRTS, optional=True)
        self.vmmrqs = self.factory.informer(VMMRQS, optional=True) if mtq else None
        self.quota_changes = QuotaChanges(clock)
        """Wakes target pods waiting for their room (pod/targets.py)."""
        self.quotas.add_event_handler(
            ResourceEventHandler(
                on_add=lambda quota, _initial: self._quota_changed(quota),
                on_update=lambda _old, quota: self._quota_changed(quota),
            ),
            name="target-room",
        )

    def _quota_changed(self, quota: Object) -> None:
        self.quota_changes.changed(str((quota.get("metadata") or {}).get("namespace")))

    def managed_quota(self, namespace: str) -> Object | None:
        quota = managed_quota(self.quotas.store.by_index("namespace", namespace))
        if (
            self.vmmrqs is not None
            and self.vmmrqs.store.by_index("namespace", namespace)
            and not room_raise_left(quota, self.namespace(namespace))
        ):
            return None  # MTQ mode's namespace: the room mode does not manage its quota
        return quota

    def namespace(self, name: str) -> Object | None:
        return self.namespaces.store.get(name)

    def migrations(self, namespace: str) -> Sequence[Object]:
        return self._migrations.store.by_index("namespace", namespace)

    def vmis(self, namespace: str) -> Mapping[str, Object]:
        return NamespaceObjects(self._vmis.store, namespace)

    def launcher_pods(self, namespace: str) -> NamespacePods:
        return self.pod_index.namespace(namespace)

    def kubevirt_settings(self) -> LauncherSettings:
        kubevirts, settings = self.kubevirts.store.objects(), self.settings.store.objects()
        return settings_from(
            kubevirts[0] if kubevirts else None,
            settings[0] if settings else None,
            configured_version=self._kubevirt_version,
        )

    def now(self) -> datetime.datetime:
        return self._clock.now()


class ReloadingTLS:
    """A server TLS context whose certificate, and the CA that client certificates are verified
    against once `verify_clients` was called, follow the files on disk.

    `context` is the one the server listens with. A reload builds a whole new context from the
    files, and `context` hands every new connection over to the newest one during its handshake
    (its SNI callback, which OpenSSL calls for every ClientHello, with or without a server name):
    a CA loaded into a context can never be taken out of it, so a replaced client CA is trusted by
    no connection made after the reload. Open connections keep the context they began with.
    """

    def __init__(self, cert_file: Path, key_file: Path) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self.client_ca_file: Path | None = None
        self.context = self._new_context()
        self.context.sni_callback = self._hand_over
        self._current = self.context
        self._stamp: tuple[float, ...] | None = None
        self.reloads = 0
        self.reload()

    def verify_clients(self, ca_file: Path) -> None:
        """From now on every client is asked for a certificate, and one it presents must verify
        against `ca_file` (else the handshake fails); a client may still present none (kubelet's
        probes), and the server decides what such a client may do. Raises if `ca_file` cannot be
        loaded now; later changes to it are reloaded like the serving pair."""
        self.client_ca_file = ca_file
        self._stamp = None
        self.reload()

    def _mtimes(self) -> tuple[float, ...]:
        files = [self.cert_file, self.key_file]
        if self.client_ca_file is not None:
            files.append(self.client_ca_file)
        return tuple(os.stat(path).st_mtime for path in files)

    def reload(self) -> bool:
        """Loads the files if they changed since last time; a bad set keeps the old one (at the
        first load, it raises)."""
        first = self._stamp is None
        try:
            stamp = self._mtimes()
        except OSError as error:
            if first:
                raise
            log.error("cannot read the serving certificate or the client CA: %s", error)
            return False
        if stamp == self._stamp:
            return False
        try:
            # The first load fills the listening context itself, the later ones a fresh context.
            context = self.context if first else self._new_context()
            self._load(context)
        except (OSError, ssl.SSLError) as error:
            if first:
                raise
            log.error("new certificate files not loaded, keeping the old ones: %s", error)
            return False
        self._current = context
        self._stamp = stamp
        self.reloads += 1
        log.info(
            "serving certificate loaded from %s%s",
            self.cert_file,
            f", client CA from {self.client_ca_file}" if self.client_ca_file else "",
        )
        return True

    @staticmethod
    def _new_context() -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context

    def _load(self, context: ssl.SSLContext) -> None:
        context.load_cert_chain(self.cert_file, self.key_file)
        if self.client_ca_file is not None:
            context.load_verify_locations(cafile=str(self.client_ca_file))
            context.verify_mode = ssl.CERT_OPTIONAL

    def _hand_over(
        self, connection: ssl.SSLObject, _server_name: str | None, _context: ssl.SSLContext
    ) -> None:
        if self._current is not self.context:
            connection.context = self._current


@dataclass(frozen=True)
class ClientAuth:
    """Who may ask for admissions: a client whose TLS handshake presented a certificate that
    verified against `ca_file` (ReloadingTLS.verify_clients), with a subject common name among
    `names` when names are given. The API server presents one when its AdmissionConfiguration
    gives it a kubeconfig user for the webhook (README "Deploying"); no tenant pod has its key.
    /healthz and /readyz stay open to clients without a certificate (kubelet's probes)."""

    ca_file: Path
    names: frozenset[str] = frozenset()

    def refusal(self, peercert: Mapping[str, Any] | None) -> tuple[int, str] | None:
        """None if a client with this verified certificate (None: it presented none) may be
        answered; else the HTTP status (401 without a certificate, 403 for a name not accepted)
        and a short reason."""
        if not peercert:
            return 401, "a client certificate is required"
        if self.names and common_name(peercert) not in self.names:
            return 403, "this client certificate is not accepted"
        return None


def common_name(peercert: Mapping[str, Any]) -> str:
    """The subject's common name of a certificate as ssl's getpeercert() returns it ("" if none)."""
    for rdn in peercert.get("subject") or ():
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return ""


class RefusalLog:
    """Warns about refused clients without flooding the log: the first refusal at once, then at
    most one line per `interval` seconds of `clock`, counting the refusals it did not log."""

    def __init__(self, clock: Clock, interval: float = REFUSAL_LOG_INTERVAL) -> None:
        self._clock, self.interval = clock, interval
        self._last: float | None = None
        self.unlogged = 0

    def refused(self, peer: str, reason: str) -> bool:
        """Records one refusal of `peer`; True if it was logged."""
        now = self._clock.monotonic()
        if self._last is not None and now - self._last < self.interval:
            self.unlogged += 1
            return False
        log.warning(
            "refused an admission request from %s: %s%s",
            peer,
            reason,
            f" ({self.unlogged} more refused since the last such line)" if self.unlogged else "",
        )
        self._last, self.unlogged = now, 0
        return True


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


@dataclass
class WebhookMetrics:
    registry: CollectorRegistry = REGISTRY
    requests: Counter = field(init=False)
    latency: Histogram = field(init=False)
    in_flight: Gauge = field(init=False)
    target_pods: Counter = field(init=False)
    target_wait: Histogram = field(init=False)

    def __post_init__(self) -> None:
        self.target_pods = Counter(
            "harvester_quota_webhook_target_pods",
            "Migration target pods admitted, by how their room was found (pod/targets.py).",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in OUTCOMES:
            self.target_pods.labels(outcome)
        self.target_wait = Histogram(
            "harvester_quota_webhook_target_wait_seconds",
            "Time a migration target pod's admission waited for its room.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16),
            registry=self.registry,
        )
        self.requests = Counter(
            "harvester_quota_webhook_requests",
            "Admission requests answered, by endpoint and outcome.",
            ["endpoint", "outcome"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "harvester_quota_webhook_seconds",
            "Time to answer one admission request.",
            ["endpoint"],
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "harvester_quota_webhook_admissions_in_flight",
            f"Admissions holding one of the slots (at most {MAX_ADMISSIONS} by default) between "
            "reading their body and answering.",
            registry=self.registry,
        )


_CLOSE = {"Connection": "close"}


class _GuardedConnection(asyncio.Protocol):
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
        self.open: set[_GuardedConnection] = set()
        self.refused = 0
        self.slow_headers = 0

    def __call__(self) -> asyncio.Protocol:
        if self._factory is None or len(self.open) >= self.max_connections:
            self.refused += 1
            return _GuardedConnection(self, None)
        return _GuardedConnection(self, self._factory())

    def close_all(self) -> None:
        for connection in list(self.open):
            connection.close()


class WebhookServer:
    """Routes AdmissionReviews to validators; serves /healthz and /readyz too."""

    def __init__(
        self,
        lookups: Lookups,
        *,
        identities: Identities | None = None,
        tls: ReloadingTLS | None = None,
        host: str = "0.0.0.0",  # the API server calls in through a Service
        port: int = 8443,
        ready: Callable[[], bool] = lambda: True,
        clock: Clock = REAL_CLOCK,
        registry: CollectorRegistry = REGISTRY,
        header_timeout: float = HEADER_TIMEOUT,
        body_timeout: float = BODY_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
        client_auth: ClientAuth | None = None,
        max_admissions: int = MAX_ADMISSIONS,
        admission_wait: float = ADMISSION_SLOT_WAIT,
        quota_changes: QuotaChanges | None = None,
        target_room_wait: float = TARGET_ROOM_WAIT,
        ledger: AdmissionLedger | None = None,
        reservations: LeaseReservations | None = None,
    ) -> None:
        """With `client_auth` (which needs `tls`), /validate/* answers only the clients it
        accepts, before reading their body; at most `max_admissions` bodies are read and decided
        at once, the others wait up to `admission_wait` seconds and are then answered 429.
        `quota_changes` (WebhookCaches.quota_changes) wakes target pods waiting up to
        `target_room_wait` seconds for their room; without it they do not wait. With
        `reservations` (whose fallback is `ledger`), pods while room is held are decided on the
        reservation every replica shares; without, on this process's `ledger` alone."""
        self.lookups = lookups
        self.quota_changes = quota_changes or QuotaChanges(clock)
        self.target_room_wait = target_room_wait if quota_changes is not None else 0.0
        self._gave_up = GaveUp(clock)
        self.header_timeout, self.body_timeout = header_timeout, body_timeout
        self.max_connections = max_connections
        self._set_up_admission_gate(tls, client_auth, max_admissions, admission_wait, clock)
        self.identities = identities or Identities()
        self.tls = tls
        self.host, self.port = host, port
        self._ready = ready
        self._clock = clock
        self.metrics = WebhookMetrics(registry)
        self.ledger = ledger or AdmissionLedger(clock)
        """Pods admitted while room is held, until the caches show them (pod/ledger.py)."""
        self.reservations = reservations
        self._collector: asyncio.Task[None] | None = None
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None
        self.guard = ConnectionGuard(None)
        self._reloader: asyncio.Task[None] | None = None
        self.validators: dict[str, tuple[str, Validator]] = {
            "namespaces": ("Namespace", lambda r: validate_namespace_update(r, self.lookups)),
            "resourcequotas": (
                "ResourceQuota",
                lambda r: validate_quota_update(r, self.lookups, self.identities),
            ),
            "virtualmachines": ("VirtualMachine", lambda r: validate_vm_start(r, self.lookups)),
            "pods": ("Pod", self._validate_pod),
            "mtq-lock": ("", lambda r: validate_locked(r, self.lookups, self.identities)),
        }
        """Endpoint -> (the kind it validates, "" for any; its validator)."""

    def _validate_pod(self, request: Request) -> Awaitable[None] | None:
        """Target pods may wait for their room (never denied); the others are decided at once."""
        lock = active_lock(self.lookups, request.namespace)
        if lock is not None and is_lock_target(request, self.identities, lock):
            return None  # MTQ raised the quota for it: nothing to wait for, nothing to check
        if is_migration_target(request, self.identities):
            return self._admit_target(request)
        check = pod_check(request, self.lookups, self.identities)
        if check is None:
            return None
        if self.reservations is None or request.dry_run:
            # A dry run is decided as this replica sees it and reserves nothing, anywhere.
            admit_locally(check, self.ledger, dry_run=request.dry_run)
            return None
        return self.reservations.admit(check)

    async def _admit_target(self, request: Request) -> None:
        admission = await admit_target(
            request,
            self.lookups,
            self.quota_changes,
            self._clock,
            wait=self.target_room_wait,
            gave_up=self._gave_up,
        )
        self.metrics.target_pods.labels(admission.outcome).inc()
        self.metrics.target_wait.observe(admission.waited)
        subject = f"{request.namespace}/{request.name or '(generated name)'}"
        if admission.short:
            missing = "; ".join(
                f"{s.key} needs {s.needed}, {s.free} left of {s.limit}" for s in admission.short
            )
            log.warning(
                "migration target pod %s let through after %.2fs without room (%s): %s; "
                "quota admission decides",
                subject,
                admission.waited,
                admission.outcome,
                missing,
            )
        elif admission.waited > 0:
            log.info("migration target pod %s fitted after %.2fs", subject, admission.waited)

    def application(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        for endpoint in self.validators:
            app.router.add_post(f"/validate/{endpoint}", self._handler(endpoint))
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        return app

    async def _text(self, text: str, status: int = 200) -> web.Response:
        return web.Response(text=text, status=status)

    async def _healthz(self, _request: web.Request) -> web.Response:
        return await self._text("ok")

    async def _readyz(self, _request: web.Request) -> web.Response:
        return (
            await self._text("ok") if self._ready() else await self._text("caches not synced", 503)
        )

    def _set_up_admission_gate(
        self,
        tls: ReloadingTLS | None,
        client_auth: ClientAuth | None,
        max_admissions: int,
        admission_wait: float,
        clock: Clock,
    ) -> None:
        """What stands between a request and its body: the client check and the slots."""
        if client_auth is not None:
            if tls is None:
                raise ValueError("client certificates need TLS")
            tls.verify_clients(client_auth.ca_file)
        self.client_auth = client_auth
        self.refusals = RefusalLog(clock)
        self.slots = AdmissionSlots(max_admissions, admission_wait, clock)

    def _handler(self, endpoint: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(http: web.Request) -> web.StreamResponse:
            refused = self._refuse_client(endpoint, http)
            if refused is not None:
                return refused
            if http.content_length is not None and http.content_length > MAX_BODY:
                self.metrics.requests.labels(endpoint, "too-large").inc()
                return web.Response(
                    status=413, text=f"the body is over {MAX_BODY} bytes", headers=_CLOSE
                )
            if not await self.slots.acquire():
                self.metrics.requests.labels(endpoint, "busy").inc()
                log.info(
                    "%s: no admission slot within %.1fs; answering 429", endpoint, self.slots.wait
                )
                return web.Response(status=429, text="too many admissions at once", headers=_CLOSE)
            self.metrics.in_flight.inc()
            try:
                return await self._answer(endpoint, http)
            finally:
                self.metrics.in_flight.dec()
                self.slots.release()

        return handle

    def _refuse_client(self, endpoint: str, http: web.Request) -> web.Response | None:
        """The answer to a client `client_auth` does not accept (its body left unread, its
        connection closed), logged without flooding; None for an accepted one."""
        if self.client_auth is None:
            return None
        transport = http.transport
        peercert = transport.get_extra_info("peercert") if transport is not None else None
        refusal = self.client_auth.refusal(peercert)
        if refusal is None:
            return None
        status, reason = refusal
        self.metrics.requests.labels(
            endpoint, "unauthenticated" if status == 401 else "forbidden"
        ).inc()
        peername = transport.get_extra_info("peername") if transport is not None else None
        peer = f"{peername[0]}:{peername[1]}" if peername else "an unknown address"
        subject = f" (certificate CN {common_name(peercert)!r})" if peercert else ""
        self.refusals.refused(peer, f"{endpoint}: {reason}{subject}")
        return web.Response(status=status, text=reason, headers=_CLOSE)

    async def _answer(self, endpoint: str, http: web.Request) -> web.StreamResponse:
        """Reads the body (within body_timeout) and answers the review in it."""
        started = time.perf_counter()
        try:
            body = await asyncio.wait_for(http.read(), self.body_timeout)
        except TimeoutError:
            self.metrics.requests.labels(endpoint, "timeout").inc()
            log.info("%s: body not received within %.0fs; closing", endpoint, self.body_timeout)
            return web.Response(status=408, text="request body too slow", headers=_CLOSE)
        except (ConnectionError, aiohttp.ClientConnectionError) as error:
            self.metrics.requests.labels(endpoint, "disconnected").inc()
            log.debug("%s: client went away while sending: %s", endpoint, error)
            return web.Response(status=400, text="connection lost", headers=_CLOSE)
        try:
            return await self.review(endpoint, body)
        finally:
            self.metrics.latency.labels(endpoint).observe(time.perf_counter() - started)

    async def review(self, endpoint: str, body: bytes) -> web.Response:
        """Answers one AdmissionReview body for an endpoint."""
        kind, validate = self.validators[endpoint]
        try:
            request = parse_review(body)
            if kind and request.kind != kind:
                raise Denied(
                    f"this endpoint validates {kind} objects, not {request.kind}", code=400
                )
            waiting = validate(request)
            if waiting is not None:
                await waiting
        except BadReview as error:
            log.warning("%s: unparseable AdmissionReview: %s", endpoint, error)
            self.metrics.requests.labels(endpoint, "bad-request").inc()
            if error.uid is None:
                return web.Response(status=400, text=f"cannot parse the AdmissionReview: {error}")
            denial = Denied(f"cannot parse the AdmissionReview: {error}", code=400)
            return self._json(review_response(error.uid, denial))
        except Denied as denial:
            log.info(
                "%s: denied %s %s/%s for %s: %s",
                endpoint,
                request.operation,
                request.namespace,
                request.name,
                request.username,
                denial.message,
            )
            self.metrics.requests.labels(endpoint, "denied").inc()
            return self._json(review_response(request.uid, denial))
        except Exception:
            log.exception(
                "%s: validator failed; the API server applies the failure policy", endpoint
            )
            self.metrics.requests.labels(endpoint, "error").inc()
            return web.Response(status=500, text="internal error in the validator")
        self.metrics.requests.labels(endpoint, "allowed").inc()
        return self._json(review_response(request.uid))

    @staticmethod
    def _json(body: bytes) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    async def start(self) -> int:
        """Listens (TLS if configured); returns the port (useful with port 0)."""
        self._runner = web.AppRunner(
            self.application(),
            access_log=None,
            keepalive_timeout=KEEPALIVE_TIMEOUT,
            lingering_time=0,  # after a 408 or 413, do not keep reading what is left of the body
        )
        await self._runner.setup()
        assert self._runner.server is not None
        self.guard = ConnectionGuard(
            self._runner.server,
            header_timeout=self.header_timeout,
            max_connections=self.max_connections,
        )
        self._server = await asyncio.get_running_loop().create_server(
            self.guard, self.host, self.port, ssl=self.tls.context if self.tls else None
        )
        sockets = list(self._server.sockets or ())
        if sockets:
            self.port = sockets[0].getsockname()[1]
        if self.tls is not None:
            self._reloader = asyncio.ensure_future(self._reload_loop())
        if self.reservations is not None:
            self._collector = asyncio.ensure_future(self._collect_loop(self.reservations))
        return self.port

    async def _reload_loop(self) -> None:
        assert self.tls is not None
        while True:
            await self._clock.sleep(CERT_RELOAD_INTERVAL)
            self.tls.reload()

    async def _collect_loop(self, reservations: LeaseReservations) -> None:
        """Deletes expired reservation Leases now and then; a failure is logged and retried."""
        while True:
            await self._clock.sleep(COLLECT_AFTER)
            try:
                await reservations.collect()
            except errors.ApiError as error:
                log.warning("could not delete expired reservation Leases: %s", error)

    async def stop(self) -> None:
        if self._collector is not None:
            self._collector.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._collector
        if self._reloader is not None:
            self._reloader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reloader
        if self._server is not None:
            self._server.close()
            self.guard.close_all()
            await self._server.wait_closed()
            self._server = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


async def serve(
    client: ApiClient,
    *,
    cert_file: Path,
    key_file: Path,
    host: str,
    port: int,
    client_auth: ClientAuth | None = None,
    metrics_address: tuple[str, int] = ("0.0.0.0", METRICS_PORT),
    identities: Identities,
    kubevirt_version: str | None,
    target_room_wait: float = TARGET_ROOM_WAIT,
    namespace: str = "harvester-system",
    mtq: bool = True,
) -> int:
    """Runs the webhook until SIGTERM/SIGINT; reservations shared by the replicas live as
    Leases in `namespace` (its own). `mtq`: see WebhookCaches."""
    import signal  # noqa: PLC0415 - only the CLI entry point needs signals

    caches = WebhookCaches(client, kubevirt_version=kubevirt_version, mtq=mtq)
    caches.factory.start()
    ledger = AdmissionLedger(REAL_CLOCK)
    server = WebhookServer(
        caches,
        identities=identities,
        tls=ReloadingTLS(cert_file, key_file),
        host=host,
        port=port,
        client_auth=client_auth,
        ready=caches.factory.synced,
        quota_changes=caches.quota_changes,
        target_room_wait=target_room_wait,
        ledger=ledger,
        reservations=LeaseReservations(client, namespace, REAL_CLOCK, ledger),
    )
    await server.start()
    log.info("webhook listening on %s:%d", host, server.port)
    metrics = await start_metrics_endpoint(metrics_address, caches.factory.synced)
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopped.set)
    await stopped.wait()
    await metrics.stop()
    await server.stop()
    await caches.factory.stop()
    return 0


async def start_metrics_endpoint(
    address: tuple[str, int], ready: Callable[[], bool]
) -> HealthServer:
    """/metrics (the default registry: every namespace's usage), /healthz and /readyz (`ready`)
    over plain HTTP on `address`, apart from the admission port: the chart's NetworkPolicy lets
    only monitoring reach it. Returns the started server."""
    host, port = address
    endpoint = HealthServer(host=host, port=port)
    endpoint.add_readiness_check("caches", ready)
    await endpoint.start()
    log.info("metrics on http://%s:%d/metrics", host, endpoint.port)
    return endpoint
