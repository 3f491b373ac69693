"""Harvester's own controllers where a scale run expects the product (``scale --strategy
harvester``): Harvester v1.8.2's migration and resourcequota controllers, unchanged, as the
local cluster runs them (`LocalCluster.up(harvester=plan.HARVESTER_VERSION)`,
localcluster/harvester.py), with no webhook of ours.

`HarvesterRealProduct` has the shape `ScaleRun` uses of `product.Product` (`start`, `stop`,
`metrics`, `pids`) and runs no algorithm of its own: Harvester's controllers run for the
cluster's lifetime and act on every namespace. `start` waits until they hold their leader Lease;
`metrics` counts their write requests from the API server's audit log (localcluster/audit.py)
since `start`: every create, update, patch and delete the API server answered for Harvester's
service account (`HARVESTER_USER`, the authenticated user: its VMI writes impersonate KubeVirt's
account, and the audit log names the impersonator), by verb and resource, and by the kind the
arms table shows (`WRITE_KIND_OF`). Reads are not audited, so its requests are its writes only.
Its CPU and memory are the ``harvester-controllers`` process's (it also serves Harvester's
namespace validator).

Each `metrics` call reads the audit log from `start`'s mark (`AuditLog.since`); a log rotated
past that mark (a run of several hundred MB of audited writes) raises ClusterError rather than
reporting zero.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Final

from ..localcluster import ClusterInfo
from ..localcluster.audit import AuditLog, AuditMark, AuditRecord
from ..localcluster.binaries import HARVESTER_CONTROLLERS
from ..localcluster.harvester import HARVESTER_USER, lease_holder
from .observe import ProcessSample
from .product import Metrics

LEASE_TIMEOUT: Final = 60.0
"""Seconds `start` waits for Harvester's controllers to hold their Lease (the cluster starts them
and waits for it itself: this only covers a restart in between)."""
WRITE_KIND_OF: Final = {
    "resourcequotas": "spec",
    "resourcequotas/status": "status",
    "virtualmachineinstances": "vmi",
    "virtualmachines": "vm",
    "namespaces": "namespace",
}
"""The resource a write of Harvester's controllers goes to -> the kind the arms table counts it
as (our controller's harvester_quota_api_writes_total kinds): Harvester updates a quota whole
(its spec.hard and its annotations alike: `spec`), a VMI's migration annotations and its VM's
timestamp. It writes no quota status and no namespace: those kinds stay 0 unless it ever does."""


def harvester_writes(records: Iterable[AuditRecord]) -> Counter[tuple[str, str, int | None]]:
    """Harvester's write requests among `records`, by (verb, resource or resource/subresource,
    HTTP code of the answer); everyone else's are left out."""
    return Counter(
        (record.verb, record.target, record.code)
        for record in records
        if record.user == HARVESTER_USER
    )


def metrics_of(writes: Mapping[tuple[str, str, int | None], int], sample: ProcessSample) -> Metrics:
    """The scale run's `Metrics` of Harvester's writes (`harvester_writes`) and its process:
    requests by (verb, resource); quota writes by outcome (``written``: accepted, ``conflict``:
    answered 409, ``refused``: any other refusal); writes by kind (`WRITE_KIND_OF`), sent, whatever
    the answer."""
    requests: Counter[tuple[str, str]] = Counter()
    quota: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    for (verb, target, code), count in writes.items():
        requests[(verb, target)] += count
        kind = WRITE_KIND_OF.get(target)
        if kind is not None:
            kinds[kind] += count
        if target == "resourcequotas":
            quota[_outcome(code)] += count
    return Metrics(
        requests={key: float(n) for key, n in requests.items()},
        quota_writes={key: float(n) for key, n in quota.items()},
        cpu_seconds=sample.cpu_seconds,
        rss_bytes=float(sample.rss_bytes),
        writes={key: float(n) for key, n in kinds.items()},
    )


def _outcome(code: int | None) -> str:
    if code is not None and 200 <= code < 300:
        return "written"
    return "conflict" if code == 409 else "refused"


class HarvesterRealProduct:
    """Harvester's running controllers in the product's place (see the module docstring)."""

    def __init__(self, cluster: ClusterInfo) -> None:
        if cluster.harvester_version is None:
            raise ValueError(
                "--strategy harvester runs Harvester's own controllers: the cluster must run "
                "them (LocalCluster.up(harvester=...), `cluster up --harvester v1.8.2`)"
            )
        self.cluster = cluster
        self.audit = AuditLog(cluster.audit_log)
        self._mark: AuditMark | None = None
        pids = [p.pid for p in cluster.processes if p.name == HARVESTER_CONTROLLERS]
        self._pid = pids[0] if pids else None

    async def start(self) -> None:
        """Returns once Harvester's controllers hold their Lease (RuntimeError after
        LEASE_TIMEOUT), and marks the audit log: `metrics` counts from here."""
        rest = self.cluster.rest()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LEASE_TIMEOUT
        while await asyncio.to_thread(lease_holder, rest) is None:
            if loop.time() > deadline:
                raise RuntimeError(
                    f"Harvester's controllers did not hold their Lease within {LEASE_TIMEOUT:g}s"
                )
            await asyncio.sleep(0.5)
        self._mark = await asyncio.to_thread(self.audit.mark)

    async def stop(self) -> None:
        """Nothing to stop: Harvester's controllers run as long as the cluster."""

    async def metrics(self, *, standby: bool = False) -> Metrics:
        """Harvester's writes since `start`, and its process's CPU and memory now (`standby` is
        the scale run's Product signature: there is none)."""
        if self._mark is None:
            raise RuntimeError("metrics before start")
        records = await asyncio.to_thread(self.audit.since, self._mark)
        sample = ProcessSample.of(self._pid) if self._pid is not None else ProcessSample(0.0, 0)
        return metrics_of(harvester_writes(records), sample)

    @property
    def pids(self) -> dict[str, int]:
        """Harvester's controllers as the step's ``controller`` process."""
        return {"controller": self._pid} if self._pid is not None else {}
