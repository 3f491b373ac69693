"""Harvester's own algorithm in place of the product, for a scale run of its own (``scale
--strategy harvester``): what Harvester v1.9's migration and ResourceQuota controllers
(`harvester_quota.testbench.strategy.harvester.HarvesterStrategy`) make of the same steps, with no webhook (Harvester has
none for this), beside the same baseline namespaces without any quota.

`HarvesterProduct` has the shape `ScaleRun` uses of `product.Product`: `start`, `stop`,
`metrics` and `pids`. The strategy runs in the run's own process, on a client of its own, so its
API requests are counted exactly (by verb and resource, from that client's request observer) and
its quota writes from its own count; its writes by kind are its write requests by resource
(`WRITE_KIND_OF`); its CPU and memory are not told apart from the run's, so they are reported
as 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Final

from prometheus_client import CollectorRegistry

from ...config.management import Options
from ...generic.client import ApiClient
from ...generic.requestmetrics import request_info
from ..strategy.harvester import HarvesterStrategy
from .product import Metrics

WRITE_VERBS: Final = frozenset({"create", "update", "patch", "delete"})
WRITE_KIND_OF: Final = {
    "resourcequotas": "spec",
    "resourcequotas/status": "status",
    "virtualmachineinstances": "vmi",
    "virtualmachines": "vm",
}
"""The resource a write request of Harvester's controllers goes to -> the kind our controller
counts it as (harvester_quota_api_writes_total): Harvester updates a quota whole (its spec.hard
and annotations), a VMI's annotations and its VM's; it writes no status copy and no namespace
(so no kind maps to those)."""


def writes_by_kind(requests: Mapping[tuple[str, str], float]) -> dict[str, float]:
    """Write requests by kind (`WRITE_KIND_OF`) from requests by (verb, resource); writes to
    other resources are not counted."""
    kinds: dict[str, float] = {}
    for (verb, resource), count in requests.items():
        kind = WRITE_KIND_OF.get(resource)
        if verb in WRITE_VERBS and kind is not None:
            kinds[kind] = kinds.get(kind, 0.0) + count
    return kinds


class _RequestCounter:
    """A request observer: API requests by (verb, resource)."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()

    def observe(
        self, method: str, path: str, params: Mapping[str, str] | None, code: str, seconds: float
    ) -> None:
        info = request_info(method, path, params)
        self.counts[(info.verb, info.resource)] += 1


class HarvesterProduct:
    """Harvester's controllers where a scale run expects the product (see the module docstring)."""

    def __init__(self, api: ApiClient, *, kubevirt_version: str, workers: int = 5) -> None:
        self.api = ApiClient(api.config, timeout=60.0)
        self.requests = _RequestCounter()
        self.api.add_request_observer(self.requests)
        self.strategy = HarvesterStrategy(
            self.api,
            Options(leader_elect=False, kubevirt_version=kubevirt_version, workers=workers),
            registry=CollectorRegistry(),
        )

    async def start(self) -> None:
        """Starts Harvester's controllers; RuntimeError if their caches do not sync."""
        if not await self.strategy.start():
            await self.stop()
            raise RuntimeError("Harvester's controllers did not sync their caches")

    async def stop(self) -> None:
        await self.strategy.stop()
        await self.api.close()

    async def metrics(self, *, standby: bool = False) -> Metrics:
        """Requests and quota writes so far (CPU and memory 0: not told apart from the run's);
        there is no standby (`standby` is the scale run's Product signature)."""
        writes = float(sum(self.strategy.writes.values()))
        conflicts = float(sum(self.strategy.conflicts.values()))
        requests = {key: float(n) for key, n in self.requests.counts.items()}
        return Metrics(
            requests=requests,
            quota_writes={"written": writes, "conflict": conflicts},
            cpu_seconds=0.0,
            rss_bytes=0.0,
            writes=writes_by_kind(requests),
        )

    @property
    def pids(self) -> dict[str, int]:
        return {}
