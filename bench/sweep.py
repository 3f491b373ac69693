"""``python -m bench.sweep``: what one look of the stale-raise sweep costs (issue 44, item 3).

The safety net (controller/resourcequota/staleraise.py) looks at every cached namespace with a
managed quota every 30 s: a cheap pre-filter (`raise_shows`: records, the label, spec.hard off
its base) and a plan only for those that show a raise. This bench builds the namespace and quota
caches the controller would hold (zstd codec, the default), `--raised` of them holding a raise
with no migration left (stale), and times one sweep against the baseline an operator would
otherwise reach for, side by side in the same run: a full resync, planning every namespace.

    python -m bench.sweep                         # 100, 1,000 and 10,000 namespaces, 1% raised
    python -m bench.sweep --namespaces 10000 --raised 500

Plans here read no pods or migrations (an empty namespace): the baseline's cost is a lower bound
of a real resync's, whose reconciles cost 0.2-1 ms each (bench/SCALE.md), so the ratio flatters
the baseline, not the sweep.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import sys
from collections.abc import Iterator
from typing import cast

from harvester_quota.config.metrics import QuotaMetrics
from harvester_quota.controller.resourcequota.staleraise import (
    StaleRaiseSweep,
    left_to_give_back,
)
from harvester_quota.generic.events import EventRecorder
from harvester_quota.generic.resource import Object
from harvester_quota.generic.store import Store
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.util.annotations import LABEL_DEFAULT_RESOURCE_QUOTA
from harvester_quota.util.resourcequota.base import (
    ANNOTATION_APPLIED,
    ANNOTATION_BASE,
    managed_quota,
)
from harvester_quota.util.resourcequota.plan import NamespaceSnapshot, QuotaPlan, plan_quota
from prometheus_client import CollectorRegistry

from bench.reconcile import best_of

NOW = datetime.datetime(2026, 11, 26, tzinfo=datetime.UTC)
BASE = {"limits.cpu": "20", "limits.memory": "40Gi", "requests.cpu": "20"}
RAISED = {"limits.cpu": "22", "limits.memory": "44Gi", "requests.cpu": "22"}


def _compact(hard: dict[str, str]) -> str:
    return json.dumps(hard, separators=(",", ":"))


def _quota(namespace: str, raised: bool) -> Object:
    annotations = {ANNOTATION_BASE: _compact(BASE)}
    if raised:
        annotations |= {
            ANNOTATION_APPLIED: _compact(RAISED),
            "harvesterhci.io/migrating-vm-0": _compact({"limits.cpu": "2"}),
        }
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": "default-quota",
            "namespace": namespace,
            "uid": f"uid-{namespace}",
            "resourceVersion": "1",
            "labels": {LABEL_DEFAULT_RESOURCE_QUOTA: "true"},
            "annotations": annotations,
        },
        "spec": {"hard": RAISED if raised else BASE},
    }


class Caches:
    """The namespace and quota caches, and the sweep's planner over them."""

    def __init__(self, namespaces: int, raised: int) -> None:
        self.namespaces, self.quotas = Store(), Store()
        names = [f"tenant-{index:05d}" for index in range(namespaces)]
        self.namespaces.replace(
            [
                {"metadata": {"name": name, "uid": f"ns-{name}", "resourceVersion": "1"}}
                for name in names
            ]
        )
        self.quotas.replace([_quota(name, index < raised) for index, name in enumerate(names)])

    def candidates(self) -> Iterator[tuple[str, Object, Object]]:
        for namespace in self.namespaces.iter():
            key = namespace["metadata"]["name"]
            quota = managed_quota(self.quotas.by_index("namespace", key))
            if quota is not None:
                yield key, namespace, quota

    def plan(self, namespace: Object, quota: Object) -> QuotaPlan:
        return plan_quota(
            NamespaceSnapshot(
                namespace=namespace, quota=quota, migrations=[], vmis={}, pods=[], now=NOW
            )
        )

    def left_behind(self, key: str, namespace: Object, quota: Object) -> str | None:
        return left_to_give_back(
            quota, namespace, self.plan(namespace, quota), through_rancher=False, label_due=False
        )

    def resync(self) -> int:
        """The baseline: every namespace planned."""
        return sum(
            1
            for key, namespace, quota in self.candidates()
            if self.left_behind(key, namespace, quota)
        )


def measure_sweep(caches: Caches, repeat: int) -> float:
    """The fastest of `repeat` sweeps over `caches`, in seconds."""
    sweep = StaleRaiseSweep(
        caches.candidates,
        caches.left_behind,
        lambda _key: None,
        clock=FakeClock(),
        metrics=QuotaMetrics(CollectorRegistry()),
        recorder=cast(EventRecorder, None),
    )
    loop = asyncio.new_event_loop()
    try:
        return best_of(repeat, lambda: loop.run_until_complete(sweep.sweep()))
    finally:
        loop.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.sweep", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--namespaces", default="100,1000,10000")
    parser.add_argument("--raised", type=float, default=0.01, help="share (<1) or count raised")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    print("namespaces  raised  sweep ms  resync ms  sweep/resync  sweep CPU per 30 s")
    for size in (int(part) for part in args.namespaces.split(",")):
        raised = int(args.raised * size) if args.raised < 1 else int(args.raised)
        caches = Caches(size, raised)
        swept = measure_sweep(caches, args.repeat)
        assert caches.resync() == raised and len(list(caches.candidates())) == size
        resynced = best_of(args.repeat, caches.resync)
        print(
            f"{size:>10,}  {raised:>6,}  {swept * 1000:>8.1f}  {resynced * 1000:>9.1f}  "
            f"{swept / resynced:>12.2f}  {swept / 30 * 100:>17.3f}%"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
