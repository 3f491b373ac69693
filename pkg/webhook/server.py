"""`harvester-quota webhook`: the HTTPS AdmissionReview server.

Five validating endpoints (/validate/namespaces, /validate/resourcequotas,
/validate/virtualmachines, /validate/pods, and /validate/mtq-lock for pods, quotas and VMMRQs in
namespaces MTQ mode locks) over the rules in resources/, answered from informer caches (no API
call per request); a migration target pod's answer may wait for its room to show in them
(resources/pod/targets.py). TLS 1.2 or newer; the certificate and key files are re-read when
they change on disk (a rotated Secret mounted in the pod), without a restart. A request that
cannot be parsed gets a clear denial (or HTTP 400 when it has no uid to answer); a bug in a
validator gets HTTP 500, so the API server applies the webhook's failurePolicy, chosen per
endpoint in deploy/, except on the endpoints in FAIL_CLOSED, where it is a denial in the review.

Only the API server is meant to call /validate/*, and answers have side effects (reservation
Leases, held waits), so with a client CA (ClientAuth) a client without a certificate from that
CA gets no connection past the TLS handshake, and a request from a name not accepted is refused
before its body is read. Connections are counted from their arrival, per address and in all
(ConnectionGuard): an address may hold only a few that no certificate vouches for, a newcomer
finding all taken evicts such a connection rather than being refused, and a connection that
carried no admission its client may send is closed after its answer. Bodies are capped at
MAX_BODY and at most MAX_ADMISSIONS are read at once (AdmissionSlots), so the memory that
requests can take is bounded; once parsed, each is decided holding a place of the one admission
limiter under its namespace (limiter.py), so no namespace's flood makes another's wait. /metrics, which names every namespace, and the kubelet's
probes are served on a separate plain-HTTP port (`serve`'s metrics_address) that the chart's
NetworkPolicy opens to monitoring only.

Its collaborators, one concern each: caches.py (what the validators read), tls.py (certificates
and the client check), certkeeper.py and selfsigned.py (the webhook's own CA, `serve`'s
self_signed), connections.py (bounds on connections, bodies and admissions at once),
metrics.py (the metrics and their endpoint), pods.py (which rule a pod meets, a target pod's
wait), limiter.py (admissions decided at once, fairly per namespace), housekeeping.py
(certificate reloads, expired reservations collected); `read_body` reads a request's body
within the bounds, `answer_request` turns a validator's verdict into the AdmissionReview answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web
from prometheus_client import REGISTRY, CollectorRegistry

from ..generic.client import ApiClient
from ..generic.clock import REAL_CLOCK, Clock
from .admission import BadReview, Denied, Request, parse_review, review_response
from .caches import WebhookCaches, counted_skips
from .certkeeper import CertificateKeeper
from .clientgate import ClientGate
from .connections import (
    CLOSE_HEADERS,
    KEEPALIVE_TIMEOUT,
    MAX_BODY,
    AdmissionSlots,
    ConnectionGuard,
)
from .housekeeping import Housekeeping
from .limiter import SHARE, SIZE, AdmissionLimiter
from .metrics import WebhookMetrics, start_metrics_endpoint
from .options import WebhookOptions
from .pods import PodAdmissions
from .resources.common import Identities, Lookups
from .resources.mtq.validator import validate_locked
from .resources.namespace.validator import validate_namespace_update
from .resources.pod.ledger import AdmissionLedger
from .resources.pod.reservations import LeaseReservations
from .resources.pod.targets import QuotaChanges, live_quotas
from .resources.pod.validator import is_migration_target
from .resources.resourcequota.validator import validate_quota_update
from .resources.virtualmachine.validator import validate_vm
from .serving import DEFAULT_BOUNDS, LOCAL, UNSHARED, Bounds, Listening, RoomSharing
from .tls import ReloadingTLS

log = logging.getLogger(__name__)

Validator = Callable[[Request], Awaitable[None] | None]
"""Raises Denied to deny. A validator that needs to wait returns an awaitable; the others run to
the end without awaiting, so their decisions are serialized on the event loop."""


FAIL_CLOSED: frozenset[str] = frozenset({"virtualmachines"})
"""Endpoints where a validator that fails on a review with a uid denies it (allowed false, in the
review) instead of answering HTTP 500. The VM rule is failurePolicy Ignore (a webhook outage must
not stop tenants' VMs), but an error there is not an outage: a tenant who can make the validator
fail on its own VM (security.md A2) would have the API server admit it unchecked, hot-plug past
the base included, for as long as the VM exists. The pod rules keep HTTP 500: pods and
migration-targets are Ignore so that a migration's target is never refused by a webhook fault
(design.md, "The webhook down"), room-held-pods is Fail anyway."""


class WebhookServer:
    """Routes AdmissionReviews to validators; serves /healthz and /readyz too (the kubelet's
    probes use the metrics port's: with client certificates required, they could not connect
    here). Its routes are what Harvester's validators declare with `NewValidator` and
    `Resource`: the kind and the operations each rule admits."""

    def __init__(
        self,
        lookups: Lookups,
        *,
        identities: Identities | None = None,
        listening: Listening = LOCAL,
        bounds: Bounds = DEFAULT_BOUNDS,
        sharing: RoomSharing = UNSHARED,
        ready: Callable[[], bool] = lambda: True,
        clock: Clock = REAL_CLOCK,
        registry: CollectorRegistry = REGISTRY,
    ) -> None:
        """Serves `lookups` on `listening` within `bounds`, deciding pods with what `sharing`
        gives (serving.py says what each group does); `ready` answers /readyz."""
        tls, client_auth = listening.tls, listening.client_auth
        self.lookups = lookups
        self.body_timeout = bounds.body_timeout
        self.metrics = WebhookMetrics(registry)
        if tls is not None:
            self.metrics.certificate_expiry.set_function(lambda: tls.not_after)
            self.metrics.certificate_start.set_function(lambda: tls.not_before)
        self.gate = ClientGate(tls, client_auth, self.metrics, clock)
        self.refusals = self.gate.refusals
        self.slots = AdmissionSlots(bounds.max_admissions, bounds.admission_wait, clock)
        """Bodies read at once (bounded before anyone knows whose they are)."""
        self.admissions = AdmissionLimiter(clock, share=SHARE if bounds.fair else SIZE)
        """Admissions decided at once, fairly per namespace (limiter.py)."""
        self.guard = ConnectionGuard(
            tls=tls.context if tls is not None else None,
            vouch=self.gate.vouches if client_auth is not None else None,
            header_timeout=bounds.header_timeout,
            handshake_timeout=bounds.handshake_timeout,
            max_connections=bounds.max_connections,
            max_per_peer=bounds.max_connections_per_peer,
            clock=clock,
        )
        self.identities = identities or Identities()
        self.tls = tls
        self.host, self.port = listening.host, listening.port
        self._ready = ready
        self.reservations = sharing.reservations
        self.pods = self._pod_admissions(sharing, clock)
        """The pods endpoint's rules and target pods' waits (pods.py)."""
        self.quota_changes = self.pods.quota_changes
        self.housekeeping = Housekeeping(clock, tls, sharing.reservations)
        """Certificate reloads and the collection of expired reservations (housekeeping.py)."""
        self._runner: web.AppRunner | None = None
        self.validators: dict[str, tuple[str, Validator]] = {
            "namespaces": ("Namespace", lambda r: validate_namespace_update(r, self.lookups)),
            "resourcequotas": (
                "ResourceQuota",
                lambda r: validate_quota_update(r, self.lookups, self.identities),
            ),
            "virtualmachines": ("VirtualMachine", lambda r: validate_vm(r, self.lookups)),
            "pods": ("Pod", self.pods.validate),
            "mtq-lock": ("", lambda r: validate_locked(r, self.lookups, self.identities)),
        }
        """Endpoint -> (the kind it validates, "" for any; its validator)."""

    def _pod_admissions(self, sharing: RoomSharing, clock: Clock) -> PodAdmissions:
        changes = sharing.quota_changes
        return PodAdmissions(
            lookups=self.lookups,
            identities=self.identities,
            metrics=self.metrics,
            clock=clock,
            quota_changes=changes or QuotaChanges(clock),
            target_room_wait=sharing.target_room_wait if changes is not None else 0.0,
            ledger=sharing.ledger or AdmissionLedger(clock),
            reservations=sharing.reservations,
            live=sharing.live,
        )

    def application(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY, middlewares=[self._close_unless_kept])
        for endpoint in self.validators:
            app.router.add_post(f"/validate/{endpoint}", self._handler(endpoint))
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        return app

    @web.middleware
    async def _close_unless_kept(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """A connection that carried no admission its client may send (a probe, a refused or
        unknown request) is closed after its answer: only the API server's are kept alive."""
        try:
            response = await handler(request)
        except web.HTTPException as error:  # aiohttp's own answers (404, 405) are raised
            if not self.guard.kept_alive(request.transport):
                error.force_close()
            raise
        if not self.guard.kept_alive(request.transport):
            response.force_close()
        return response

    async def _text(self, text: str, status: int = 200) -> web.Response:
        return web.Response(text=text, status=status)

    async def _healthz(self, _request: web.Request) -> web.Response:
        return await self._text("ok")

    async def _readyz(self, _request: web.Request) -> web.Response:
        return (
            await self._text("ok") if self._ready() else await self._text("caches not synced", 503)
        )

    def _handler(self, endpoint: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(http: web.Request) -> web.StreamResponse:
            refused = self.gate.refuse(endpoint, http)
            if refused is not None:
                return refused
            self.guard.admit(http.transport)  # the API server's (or, without client_auth, anyone's)
            if http.content_length is not None and http.content_length > MAX_BODY:
                self.metrics.requests.labels(endpoint, "too-large").inc()
                return web.Response(
                    status=413, text=f"the body is over {MAX_BODY} bytes", headers=CLOSE_HEADERS
                )
            started = time.perf_counter()
            body = await read_body(endpoint, http, self.slots, self.body_timeout, self.metrics)
            if isinstance(body, web.Response):
                return body
            self.metrics.in_flight.inc()
            try:
                return await self.review(endpoint, body)
            finally:
                self.metrics.in_flight.dec()
                self.metrics.latency.labels(endpoint).observe(time.perf_counter() - started)

        return handle

    async def review(self, endpoint: str, body: bytes) -> web.Response:
        """Answers one AdmissionReview body for an endpoint: parsed, then decided holding a
        place of the admission limiter under its namespace (limiter.py), or refused one: a
        tenant's admission with a denial whose code is 429 (never passed unchecked), a priority
        one (`is_priority`) with HTTP 429, so that its rule's failure policy decides (a
        migration target pod is never denied)."""
        kind, validate = self.validators[endpoint]
        try:
            request = parse_review(body)
        except BadReview as error:
            return answer_bad_review(endpoint, error, self.metrics)
        key = request.namespace or request.name
        priority = self.is_priority(endpoint, request)
        if not await self.admissions.acquire(key, priority=priority):
            self.metrics.requests.labels(endpoint, "busy").inc()
            if priority:
                return web.Response(status=429, text="too many admissions at once")
            refusal = Denied(f"too many admissions at once from namespace {key}; retry", code=429)
            return _json(review_response(request.uid, refusal))
        try:
            return await answer_request(
                endpoint, kind, validate, request, self.metrics, fail_closed=endpoint in FAIL_CLOSED
            )
        finally:
            self.admissions.release(key, priority=priority)

    def is_priority(self, endpoint: str, request: Request) -> bool:
        """Whether the admission is one the product's own users make, which never waits behind
        a tenant's: KubeVirt's migration target pods (on the pod rules and MTQ's lock) and our
        controller's writes, by the API server's userInfo."""
        if request.username in self.identities.controllers:
            return True
        return endpoint in ("pods", "mtq-lock") and is_migration_target(request, self.identities)

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
        self.port = await self.guard.serve(self._runner.server, self.host, self.port)
        self.housekeeping.start()
        return self.port

    async def stop(self) -> None:
        await self.housekeeping.stop()
        await self.guard.stop()
        if self.reservations is not None:
            await self.reservations.watch.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


async def read_body(
    endpoint: str,
    http: web.Request,
    slots: AdmissionSlots,
    timeout: float,
    metrics: WebhookMetrics,
) -> bytes | web.Response:
    """The request's body, read holding one of the reading `slots` (bodies in memory are
    bounded before anyone knows whose they are), or the answer that ends the request, counted
    in `metrics`: 429 without a slot within its wait, 408 for a body not received within
    `timeout` seconds, 400 for a client gone."""
    if not await slots.acquire():
        metrics.requests.labels(endpoint, "busy").inc()
        log.info("%s: no slot to read within %.1fs; answering 429", endpoint, slots.wait)
        return web.Response(status=429, text="too many admissions at once", headers=CLOSE_HEADERS)
    try:
        return await asyncio.wait_for(http.read(), timeout)
    except TimeoutError:
        metrics.requests.labels(endpoint, "timeout").inc()
        log.info("%s: body not received within %.0fs; closing", endpoint, timeout)
        return web.Response(status=408, text="request body too slow", headers=CLOSE_HEADERS)
    except (ConnectionError, aiohttp.ClientConnectionError) as error:
        metrics.requests.labels(endpoint, "disconnected").inc()
        log.debug("%s: client went away while sending: %s", endpoint, error)
        return web.Response(status=400, text="connection lost", headers=CLOSE_HEADERS)
    finally:
        slots.release()


def answer_bad_review(endpoint: str, error: BadReview, metrics: WebhookMetrics) -> web.Response:
    """A body that cannot be parsed: a denial naming why, or HTTP 400 when it has no uid."""
    log.warning("%s: unparseable AdmissionReview: %s", endpoint, error)
    metrics.requests.labels(endpoint, "bad-request").inc()
    if error.uid is None:
        return web.Response(status=400, text=f"cannot parse the AdmissionReview: {error}")
    denial = Denied(f"cannot parse the AdmissionReview: {error}", code=400)
    return _json(review_response(error.uid, denial))


async def answer_request(
    endpoint: str,
    kind: str,
    validate: Validator,
    request: Request,
    metrics: WebhookMetrics,
    *,
    fail_closed: bool = False,
) -> web.Response:
    """Answers one parsed admission `request` for `endpoint`, which validates `kind` objects
    ("" for any) with `validate`: allowed, denied with the validator's reason, 500 for a
    validator that failed (the API server applies the endpoint's failure policy), or with
    `fail_closed` a denial naming the failure."""
    try:
        if kind and request.kind != kind:
            raise Denied(f"this endpoint validates {kind} objects, not {request.kind}", code=400)
        waiting = validate(request)
        if waiting is not None:
            await waiting
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
        metrics.requests.labels(endpoint, "denied").inc()
        return _json(review_response(request.uid, denial))
    except Exception as error:
        metrics.requests.labels(endpoint, "error").inc()
        if fail_closed:
            log.exception("%s: validator failed; the review is denied", endpoint)
            failure = f"{type(error).__name__}: {error}"[:300]
            refusal = Denied(f"internal error validating this request, denied: {failure}")
            return _json(review_response(request.uid, refusal))
        log.exception("%s: validator failed; the API server applies the failure policy", endpoint)
        return web.Response(status=500, text="internal error in the validator")
    metrics.requests.labels(endpoint, "allowed").inc()
    return _json(review_response(request.uid))


def _json(body: bytes) -> web.Response:
    return web.Response(body=body, content_type="application/json")


async def serve(client: ApiClient, options: WebhookOptions) -> int:
    """Runs the webhook with `options` until SIGTERM/SIGINT; reservations shared by the replicas
    live as Leases in options.namespace (its own). With options.self_signed, the serving files
    are made and kept current by a CertificateKeeper (certkeeper.py), the first time before the
    server listens."""
    import signal  # noqa: PLC0415 - only the CLI entry point needs signals

    caches = WebhookCaches(
        client,
        kubevirt_version=options.kubevirt_version,
        mtq=options.mtq,
        mode=options.mode,
        quota_features=options.quota_features,
        skips=counted_skips(REGISTRY),
    )
    caches.factory.start()
    listening = asyncio.Event()
    # The probes' port first: while the first certificate is being made (its Secret unreachable,
    # say), the pod is alive but not ready, rather than restarted over and over.
    metrics = await start_metrics_endpoint(
        options.metrics_address, lambda: listening.is_set() and caches.factory.synced()
    )
    keeper = _certificate_keeper(client, options)
    if keeper is not None:
        await keeper.first()
    tls = ReloadingTLS(options.cert_file, options.key_file)
    server = _server(client, caches, tls, options)
    await server.start()
    listening.set()
    log.info("webhook listening on %s:%d", options.host, server.port)
    keeping = None
    if keeper is not None:
        keeper.changed = tls.reload
        keeping = asyncio.ensure_future(keeper.run())
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopped.set)
    await stopped.wait()
    if keeping is not None:
        keeping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeping
    await metrics.stop()
    await server.stop()
    await caches.factory.stop()
    return 0


def _certificate_keeper(client: ApiClient, options: WebhookOptions) -> CertificateKeeper | None:
    """The keeper of the serving files, with options.self_signed (else None: given files)."""
    self_signed = options.self_signed
    if self_signed is None:
        return None
    return CertificateKeeper(
        client,
        namespace=options.namespace,
        secret_name=self_signed.secret_name,
        configuration=self_signed.configuration,
        cert_file=options.cert_file,
        key_file=options.key_file,
        policy=self_signed.policy,
        clock=REAL_CLOCK,
    )


def _server(
    client: ApiClient, caches: WebhookCaches, tls: ReloadingTLS, options: WebhookOptions
) -> WebhookServer:
    """The admission server as the process runs it: the caches' lookups and quota changes,
    reservations shared by the replicas, target pods judged once more on the live quota."""
    ledger = AdmissionLedger(REAL_CLOCK)
    return WebhookServer(
        caches,
        identities=options.identities,
        listening=Listening(options.host, options.port, tls, options.client_auth),
        sharing=RoomSharing(
            quota_changes=caches.quota_changes,
            target_room_wait=options.target_room_wait,
            ledger=ledger,
            reservations=LeaseReservations(client, options.namespace, REAL_CLOCK, ledger),
            live=live_quotas(client),
        ),
        ready=caches.factory.synced,
    )
