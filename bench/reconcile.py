"""``python -m bench.reconcile``: what one namespace reconcile costs as the namespace grows.

The reconcile reads the namespace from the informer caches and plans its quota
(`QuotaReconciler.snapshot` + `plan_quota`), on every event of the namespace. This bench builds
the caches the controller would hold for a namespace of N running VMs (launcher pods rendered as
KubeVirt 1.6 renders them, one migration pending) without a cluster, and times the two halves,
reading and planning, for two paths side by side in the same run:

- ``decode-all``, the baseline (the controller before issue 12 part 2): every pod and VMI of the
  namespace decompressed and decoded, every pod's quota usage computed on each reconcile;
- ``index``, the controller now: pods as the PodIndex keeps them (each reduced once, when it
  changed, to its usage and a few labels, with running totals per namespace), VMIs decoded only
  when a migration names them.

It prints milliseconds per reconcile and microseconds per VM, the ratio against the smallest
namespace of the same path and codec, and the ratio of the index path against the baseline at the
same size, for the zlib codec the controller uses by default and for the plain-dict codec.

    python -m bench.reconcile                      # 100, 1000 and 3000 VMs
    python -m bench.reconcile --sizes 100,10000 --repeat 5
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from harvester_quota.config.kubevirt import settings_from
from harvester_quota.generic.resource import Object
from harvester_quota.generic.store import NamespaceObjects, Store
from harvester_quota.sim.kubevirt.objects import (
    MigrationRef,
    VMSpec,
    parse_version,
    render_launcher_pod,
    render_migration,
    render_vm,
    render_vmi,
    vm_resources,
)
from harvester_quota.util.resourcequota.plan import NamespaceSnapshot, plan_quota
from harvester_quota.util.resourcequota.podindex import PodIndex, pod_view

NAMESPACE = "tenant"
VERSION = "1.6"
DEFAULT_SIZES = (100, 1000, 3000)


@dataclass
class Caches:
    pods: Store
    vmis: Store
    migrations: Store
    index: PodIndex


def _uid(kind: str, index: int) -> str:
    return f"{kind}-{index:08d}-0000-0000-0000-000000000000"


def build_caches(vms: int, codec: str) -> Caches:
    """The caches of a namespace with `vms` running VMs and one pending migration."""
    settings = settings_from(None, None, configured_version=VERSION)
    version = parse_version(VERSION)
    caches = Caches(Store(codec=codec), Store(codec=codec), Store(codec=codec), PodIndex())
    caches.pods.add_view(PodIndex.VIEW, pod_view, caches.index.changed)
    pods: list[Object] = []
    vmis: list[Object] = []
    for index in range(vms):
        spec = VMSpec(f"vm-{index:05d}", cores=1 + index % 4, memory=f"{1 + index % 8}Gi")
        vm = render_vm(spec, NAMESPACE, vm_resources(spec, version, "1.5"), running=True)
        vmi = render_vmi(vm)
        vmi["metadata"].update(uid=_uid("vmi", index), resourceVersion=str(index + 1))
        vmi["metadata"]["creationTimestamp"] = "2026-11-22T10:00:00Z"
        pod = render_launcher_pod(vmi, node=f"node-{index % 50}", settings=settings)
        pod["metadata"].update(
            name=f"virt-launcher-{spec.name}-src00",
            uid=_uid("pod", index),
            resourceVersion=str(index + 1),
        )
        pod["status"] = {"phase": "Running"}
        vmis.append(vmi)
        pods.append(pod)
    migration = render_migration(NAMESPACE, "vm-00000", name="vm-00000-migration")
    migration["metadata"].update(uid=_uid("vmim", 0), resourceVersion="1")
    migration["metadata"]["creationTimestamp"] = "2026-11-22T11:00:00Z"
    migration["status"] = {"phase": "Pending"}
    target = render_launcher_pod(
        vmis[0],
        node="node-49",
        settings=settings,
        migration=MigrationRef(_uid("vmim", 0), "vm-00000-migration"),
    )
    target["metadata"].update(
        name="virt-launcher-vm-00000-dst00", uid=_uid("pod", vms), resourceVersion="1"
    )
    caches.pods.replace([*pods, target])
    caches.vmis.replace(vmis)
    caches.migrations.replace([migration])
    return caches


def quota_for(vms: int) -> Object:
    return {
        "metadata": {
            "name": "default-quota",
            "namespace": NAMESPACE,
            "uid": "quota",
            "resourceVersion": "1",
            "annotations": {"harvester-quota.io/base": '{"limits.cpu":"100000"}'},
        },
        "spec": {"hard": {"limits.cpu": str(4 * vms), "limits.memory": f"{16 * vms}Gi"}},
    }


NOW = datetime.datetime(2026, 11, 22, 12, tzinfo=datetime.UTC)


def read_all(caches: Caches, quota: Object) -> NamespaceSnapshot:
    """The baseline: every pod and VMI of the namespace decoded (the controller before)."""
    vmis = caches.vmis.by_index("namespace", NAMESPACE)
    return NamespaceSnapshot(
        namespace={"metadata": {"name": NAMESPACE}},
        quota=quota,
        migrations=caches.migrations.by_index("namespace", NAMESPACE),
        vmis={str(v["metadata"]["name"]): v for v in vmis},
        pods=caches.pods.by_index("namespace", NAMESPACE),
        now=NOW,
        launcher=settings_from(None, None, configured_version=VERSION),
    )


def read_index(caches: Caches, quota: Object) -> NamespaceSnapshot:
    """What `QuotaReconciler.snapshot` reads now."""
    return NamespaceSnapshot(
        namespace={"metadata": {"name": NAMESPACE}},
        quota=quota,
        migrations=caches.migrations.by_index("namespace", NAMESPACE),
        vmis=NamespaceObjects(caches.vmis, NAMESPACE),
        pods=caches.index.namespace(NAMESPACE),
        now=NOW,
        launcher=settings_from(None, None, configured_version=VERSION),
    )


PATHS: dict[str, Callable[[Caches, Object], NamespaceSnapshot]] = {
    "decode-all": read_all,
    "index": read_index,
}


def best_of(repeat: int, work: Callable[[], object]) -> float:
    """The fastest of `repeat` runs, in seconds (the least disturbed by the rest of the machine)."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


@dataclass
class Row:
    path: str
    codec: str
    vms: int
    read: float
    plan: float

    @property
    def total(self) -> float:
        return self.read + self.plan


def measure(caches: Caches, vms: int, codec: str, path: str, repeat: int) -> Row:
    quota = quota_for(vms)
    read = PATHS[path]
    snapshot = read(caches, quota)
    plan = plan_quota(snapshot)
    if not plan.rooms.rooms or len(caches.pods) != vms + 1:
        raise RuntimeError("the namespace is not what the bench means to measure")
    return Row(
        path,
        codec,
        vms,
        best_of(repeat, lambda: read(caches, quota)),
        best_of(repeat, lambda: plan_quota(snapshot)),
    )


def same_plan(caches: Caches, vms: int) -> bool:
    """Both paths plan the same quota (the bench compares equals)."""
    quota = quota_for(vms)
    baseline, indexed = (plan_quota(read(caches, quota)) for read in PATHS.values())
    return baseline.hard == indexed.hard and baseline.used == indexed.used


def table(rows: list[Row]) -> list[str]:
    lines = [
        "| path | codec | VMs | read ms | plan ms | reconcile ms | us per VM | x smallest "
        "| vs decode-all |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        smallest = next(r for r in rows if (r.path, r.codec) == (row.path, row.codec))
        baseline = next(
            r for r in rows if (r.path, r.codec, r.vms) == ("decode-all", row.codec, row.vms)
        )
        lines.append(
            f"| {row.path} | {row.codec} | {row.vms} | {row.read * 1e3:.2f} | "
            f"{row.plan * 1e3:.2f} | {row.total * 1e3:.2f} | {row.total / row.vms * 1e6:.1f} | "
            f"{row.total / smallest.total:.1f} | {row.total / baseline.total:.3f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    rows = []
    for codec in ("zlib", "dict"):
        for vms in sizes:
            caches = build_caches(vms, codec)
            if not same_plan(caches, vms):
                raise RuntimeError(f"the two paths plan differently at {vms} VMs")
            rows += [measure(caches, vms, codec, path, args.repeat) for path in PATHS]
    rows.sort(key=lambda r: (r.path, r.codec, r.vms))
    print("\n".join(table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
