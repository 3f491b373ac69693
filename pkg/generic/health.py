"""The process's /healthz, /readyz and /metrics endpoints.

/healthz answers while the event loop runs (a liveness probe that restarts a wedged process);
/readyz answers 200 only when every readiness check passes, e.g. informer caches synced, and lists
the failing ones otherwise; /metrics serves the Prometheus registry (workqueue metrics and ours).
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

ReadinessCheck = Callable[[], bool]


class HealthServer:
    """A small aiohttp server; add readiness checks by name before or after starting."""

    def __init__(
        self,
        *,
        host: str = "0.0.0.0",  # probes come from the kubelet, off-host
        port: int = 8080,
        registry: CollectorRegistry = REGISTRY,
    ) -> None:
        self.host = host
        self.port = port
        self._registry = registry
        self._checks: dict[str, ReadinessCheck] = {}
        self._runner: web.AppRunner | None = None

    def add_readiness_check(self, name: str, check: ReadinessCheck) -> None:
        """Adds a named check to /readyz: ready only while every check returns True."""
        self._checks[name] = check

    def application(self) -> web.Application:
        """The aiohttp application: /healthz, /readyz, /metrics."""
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/livez", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        return app

    async def start(self) -> int:
        """Starts listening; returns the bound port (useful with port 0)."""
        self._runner = web.AppRunner(self.application(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            self.port = sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        """Stops serving; idempotent."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, _request: web.Request) -> web.Response:
        failing = []
        for name, check in self._checks.items():
            try:
                if not check():
                    failing.append(name)
            except Exception as error:  # a broken check means not ready, with the reason
                failing.append(f"{name} ({error})")
        if failing:
            return web.Response(status=503, text="not ready: " + ", ".join(failing))
        return web.Response(text="ok")

    async def _metrics(self, _request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(self._registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )
