"""`HarvesterStrategy`: Harvester v1.9's controllers, started and stopped like our ControllerApp.

Ports the two `register.go` files: the VMI handler ("migrationTargetController"), the VMIM handler
("migrationAnnotationController") and the ResourceQuota handler ("resourceQuotaController"), each
on its own workqueue over shared informers, with no periodic resync, and with the retry backoff of
lasso (wrangler's controller library), which Harvester does not override.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Hashable
from typing import Final, Generic, TypeVar

from prometheus_client import CollectorRegistry

from ....apis.kubevirt import VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, VIRTUAL_MACHINE_INSTANCES
from ....config.management import Management, Options
from ....generic.client import ApiClient
from ....generic.clock import REAL_CLOCK, Clock
from ....generic.controller import Controller
from ....generic.resource import RESOURCE_QUOTAS, Resource
from ....generic.workqueue import RateLimitingQueue
from ....generic.workqueue.rate_limiters import (
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
)
from .cluster import InformerCluster
from .migration import MigrationHandler
from .resourcequota import ResourceQuotaHandler

__all__ = [
    "CACHE_SYNC_TIMEOUT",
    "HarvesterStrategy",
    "ItemFastSlowRateLimiter",
    "lasso_rate_limiter",
]

log = logging.getLogger(__name__)

T = TypeVar("T", bound=Hashable)

CACHE_SYNC_TIMEOUT: Final = 120.0
"""As ControllerApp: how long `start` waits for the caches before running with what it has."""

VMI_CONTROLLER: Final = "migrationTargetController"
VMIM_CONTROLLER: Final = "migrationAnnotationController"
RESOURCE_QUOTA_CONTROLLER: Final = "resourceQuotaController"


class ItemFastSlowRateLimiter(Generic[T]):
    """Per item: ``fast_delay`` seconds for the first ``max_fast_attempts`` failures, ``slow_delay``
    after (client-go's ``ItemFastSlowRateLimiter``, lasso's default with the exponential one)."""

    __slots__ = ("_failures", "_fast", "_max_fast_attempts", "_slow")

    def __init__(self, fast_delay: float, slow_delay: float, max_fast_attempts: int) -> None:
        if max_fast_attempts < 0:
            raise ValueError(f"max_fast_attempts must be >= 0, got {max_fast_attempts!r}")
        self._fast = fast_delay
        self._slow = slow_delay
        self._max_fast_attempts = max_fast_attempts
        self._failures: dict[T, int] = {}

    def when(self, item: T) -> float:
        failures = self._failures.get(item, 0) + 1
        self._failures[item] = failures
        return self._fast if failures <= self._max_fast_attempts else self._slow

    def forget(self, item: T) -> None:
        self._failures.pop(item, None)


def lasso_rate_limiter() -> MaxOfRateLimiter[str]:
    """lasso's default (applyDefaultOptions): the longer of 1 ms for 30 failures then 120 s, and
    5 ms * 2^n capped at 30 s. No global token bucket, unlike client-go's default."""
    return MaxOfRateLimiter(
        ItemFastSlowRateLimiter[str](0.001, 120.0, 30),
        ItemExponentialFailureRateLimiter[str](0.005, 30.0),
    )


class HarvesterStrategy:
    """Harvester v1.9's migration and ResourceQuota controllers on one cluster.

    Same shape as `harvester_quota.app.ControllerApp`: `await start()` (returns once the caches are synced, or
    after CACHE_SYNC_TIMEOUT), `ready()`, `await stop()`. `writes` counts ResourceQuota writes per
    namespace by both of Harvester's writers; `conflicts` counts the writes the API server refused
    because the other writer (or anyone) wrote first. Run it instead of ControllerApp, never next to
    it: two algorithms writing the same quotas compare nothing.

    `registry` defaults to a private one, so that its workqueue metrics never mix with the
    product's in the process-wide registry.

    `compensation=False` leaves out v1.9's compensation of a migration refused by quota, which is
    what Harvester v1.4.2 to v1.8.2 do about it (nothing): the v1.7.0 seed's stuck migration. The
    rest stays v1.9's (the resync flag included, so write counts are v1.9's, not v1.8's).
    """

    def __init__(
        self,
        client: ApiClient,
        options: Options,
        *,
        clock: Clock = REAL_CLOCK,
        registry: CollectorRegistry | None = None,
        compensation: bool = True,
    ) -> None:
        self.client = client
        self.options = options
        self.clock = clock
        self.management = Management(
            client, options, clock=clock, registry=registry or CollectorRegistry()
        )
        self.cluster = InformerCluster(self.management)
        self.migration = MigrationHandler(self.cluster, compensation=compensation)
        self.resource_quota = ResourceQuotaHandler(self.cluster)
        self._controller(VIRTUAL_MACHINE_INSTANCES).on_change(
            VMI_CONTROLLER, self.migration.on_vmi_changed
        )
        self._controller(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS).on_change(
            VMIM_CONTROLLER, self.migration.on_vmim_changed
        )
        self._controller(RESOURCE_QUOTAS).on_change(
            RESOURCE_QUOTA_CONTROLLER, self.resource_quota.on_resource_quota_changed
        )
        self.synced = False

    def _controller(self, resource: Resource) -> Controller:
        """The factory's controller for `resource`, its queue swapped for one with lasso's backoff
        (the Management is this strategy's own and has not started: nothing is queued yet)."""
        controller = self.management.controllers.for_resource(resource)
        controller.queue = RateLimitingQueue(
            lasso_rate_limiter(),
            name=controller.name,
            clock=self.clock,
            registry=self.management.registry,
        )
        return controller

    @property
    def writes(self) -> Counter[str]:
        """ResourceQuota writes per namespace, by both writers."""
        return self.cluster.writes

    @property
    def conflicts(self) -> Counter[str]:
        """ResourceQuota writes refused with a Conflict, per namespace."""
        return self.cluster.conflicts

    async def start(self, *, sync_timeout: float = CACHE_SYNC_TIMEOUT) -> bool:
        """Starts informers and workers; returns whether the caches synced in time."""
        self.synced = await self.management.start(sync_timeout=sync_timeout)
        if not self.synced:
            log.warning("harvester strategy: caches not synced after %.0fs", sync_timeout)
        log.info("harvester strategy started (KubeVirt %s)", self.cluster.kubevirt_version())
        return self.synced

    def ready(self) -> bool:
        """True once every informer has synced (as ControllerApp.ready)."""
        return self.management.informers.synced()

    async def stop(self) -> None:
        await self.management.stop()
