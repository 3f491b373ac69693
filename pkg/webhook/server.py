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
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest

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
MAX_BODY = 7 * 1024 * 1024
"""An AdmissionReview carries the object and the old object (etcd holds at most 3 MiB each)."""
MAX_CONNECTIONS = 256
"""Open connections at once; more are closed on arrival (the API server pools its connections,
two replicas of it need a handful)."""
KEEPALIVE_TIMEOUT = 60.0
"""An idle kept-alive connection is closed after this."""
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
    """A server TLS context whose certificate follows the files on disk."""

    def __init__(self, cert_file: Path, key_file: Path) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._stamp: tuple[float, float] | None = None
        self.reloads = 0
        self.reload()

    def _mtimes(self) -> tuple[float, float]:
        return os.stat(self.cert_file).st_mtime, os.stat(self.key_file).st_mtime

    def reload(self) -> bool:
        """Loads the files if they changed since last time; a bad pair keeps the old one."""
        try:
            stamp = self._mtimes()
        except OSError as error:
            log.error("cannot read the serving certificate: %s", error)
            return False
        if stamp == self._stamp:
            return False
        try:
            self.context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as error:
            if self._stamp is None:
                raise
            log.error("new serving certificate not loaded, keeping the old one: %s", error)
            return False
        self._stamp = stamp
        self.reloads += 1
        log.info("serving certificate loaded from %s", self.cert_file)
        return True


@dataclass
class WebhookMetrics:
    registry: CollectorRegistry = REGISTRY
    requests: Counter = field(init=False)
    latency: Histogram = field(init=False)
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
        quota_changes: QuotaChanges | None = None,
        target_room_wait: float = TARGET_ROOM_WAIT,
        ledger: AdmissionLedger | None = None,
        reservations: LeaseReservations | None = None,
    ) -> None:
        """`quota_changes` (WebhookCaches.quota_changes) wakes target pods waiting up to
        `target_room_wait` seconds for their room; without it they do not wait. With
        `reservations` (whose fallback is `ledger`), pods while room is held are decided on the
        reservation every replica shares; without, on this process's `ledger` alone."""
        self.lookups = lookups
        self.quota_changes = quota_changes or QuotaChanges(clock)
        self.target_room_wait = target_room_wait if quota_changes is not None else 0.0
        self._gave_up = GaveUp(clock)
        self.header_timeout, self.body_timeout = header_timeout, body_timeout
        self.max_connections = max_connections
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
        app.router.add_get("/metrics", self._metrics)
        return app

    async def _text(self, text: str, status: int = 200) -> web.Response:
        return web.Response(text=text, status=status)

    async def _healthz(self, _request: web.Request) -> web.Response:
        return await self._text("ok")

    async def _metrics(self, _request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry), content_type="text/plain")

    async def _readyz(self, _request: web.Request) -> web.Response:
        return (
            await self._text("ok") if self._ready() else await self._text("caches not synced", 503)
        )

    def _handler(self, endpoint: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(http: web.Request) -> web.StreamResponse:
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

        return handle

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
        ready=caches.factory.synced,
        quota_changes=caches.quota_changes,
        target_room_wait=target_room_wait,
        ledger=ledger,
        reservations=LeaseReservations(client, namespace, REAL_CLOCK, ledger),
    )
    await server.start()
    log.info("webhook listening on %s:%d", host, server.port)
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopped.set)
    await stopped.wait()
    await server.stop()
    await caches.factory.stop()
    return 0
