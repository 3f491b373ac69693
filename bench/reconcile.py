"""``python -m bench.reconcile``: what one namespace reconcile costs as the namespace grows.

The reconcile reads the namespace from the informer caches and plans its quota
(`QuotaReconciler.snapshot` + `plan_quota`), on every event of the namespace. This bench builds
the caches the controller would hold for a namespace of N running VMs (launcher pods rendered as
KubeVirt 1.6 renders them, one migration pending) without a cluster, and times the two halves,
reading and planning, for two paths side by side in the same run:

- ``decode-all``, the baseline (the controller before issue 12 part 2): every pod and VMI of the
  namespace decompressed and decoded, every pod's quota usage computed on each reconcile;
- ``index``, the controller after issue 12 part 2: pods as the PodIndex keeps them (each reduced
  once, when it changed, to its usage and a few labels, with running totals per namespace), every
  migration and the VMI of each decoded from the store, each pending room rendered;
- ``views``, the controller of sessions 13-15: migrations and VMIs as the plan's views keep
  them (planviews.py: narrow, kept as they change), a launcher pod rendered once per VM shape;
- ``settled``, the controller now: the same views, with the finished migrations set aside once
  their grace has passed (planviews.SettledMigrations; the bench sets them aside at once).

``--pending`` migrations wait for their target pod (the first has one) and ``--finished`` ones
succeeded with their source pod gone, as a namespace looks in a burst (KubeVirt keeps finished
migrations).

It prints milliseconds per reconcile and microseconds per VM, the ratio against the smallest
namespace of the same path and codec, and the ratio of the index path against the baseline at the
same size, for the zstd codec the controller uses by default, the zlib one it used before, and
the plain-dict codec. ``--updates`` measures instead one watch update of a launcher pod, a VMI
and a migration into the zstd caches of a 100-VM namespace, with and without the old object
decoded (`update_costs`).

    python -m bench.reconcile                      # 100, 1000 and 3000 VMs
    python -m bench.reconcile --sizes 100,10000 --repeat 5
    python -m bench.reconcile --pending 50 --finished 250   # a burst in a busy namespace
    python -m bench.reconcile --updates --repeat 5          # a watch update, stored
"""

from __future__ import annotations

import argparse
import datetime
import functools
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from harvester_quota.config.kubevirt import settings_from
from harvester_quota.generic.resource import Object
from harvester_quota.generic.store import NamespaceObjects, Store
from harvester_quota.generic.views import NamespaceViews
from harvester_quota.testbench.codecs import BY_NAME
from harvester_quota.testbench.sim.kubevirt.objects import (
    MigrationRef,
    VMSpec,
    parse_version,
    render_launcher_pod,
    render_migration,
    render_vm,
    render_vmi,
    vm_resources,
)
from harvester_quota.util.launcher import VmiView
from harvester_quota.util.resourcequota.plan import NamespaceSnapshot, plan_quota
from harvester_quota.util.resourcequota.planviews import (
    RenderedUsages,
    SettledMigrations,
    migration_plan_view,
    vmi_facts,
)
from harvester_quota.util.resourcequota.podindex import PodIndex, pod_view

NAMESPACE = "tenant"
VERSION = "1.6"
DEFAULT_SIZES = (100, 1000, 3000)


class Caches:
    """A namespace's caches with the views QuotaReconciler keeps over them."""

    def __init__(self, codec: str) -> None:
        self.pods, self.vmis, self.migrations = (
            Store(codec=BY_NAME[codec]()),
            Store(codec=BY_NAME[codec]()),
            Store(codec=BY_NAME[codec]()),
        )
        self.index = PodIndex()
        self.pods.add_view(PodIndex.VIEW, pod_view, self.index.changed)
        self.migration_views: NamespaceViews[Object] = NamespaceViews()
        self.migrations.add_view("plan", migration_plan_view, self.migration_views.changed)
        self.settled_views: NamespaceViews[Object] = NamespaceViews()
        """The same views, where `settle` sets the settled finished migrations aside."""
        self.migrations.add_view("settled", migration_plan_view, self.settled_views.changed)
        self.facts: NamespaceViews[VmiView] = NamespaceViews()
        self.vmis.add_view("plan", vmi_facts, self.facts.changed)
        self.usages = RenderedUsages(self.vmis.get)


def _uid(kind: str, index: int) -> str:
    return f"{kind}-{index:08d}-0000-0000-0000-000000000000"


def build_caches(vms: int, codec: str, pending: int = 1, finished: int = 0) -> Caches:
    """The caches of a namespace with `vms` running VMs, `pending` migrations waiting (the first
    with its target pod) and `finished` ones whose source pod is gone."""
    settings = settings_from(None, None, configured_version=VERSION)
    version = parse_version(VERSION)
    caches = Caches(codec)
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
    migrations = [_migration(index, "Pending") for index in range(min(pending, vms))]
    migrations += [
        _migration(vms - 1 - index % vms, "Succeeded", index) for index in range(finished)
    ]
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
    caches.migrations.replace(migrations)
    settle(caches)
    return caches


def settle(caches: Caches) -> None:
    """Sets aside what the controller would once the grace has passed (a grace of 0 here)."""
    snapshot = read_views(caches, quota_for(1))
    settled = SettledMigrations(after=0.0).settled(
        NAMESPACE, snapshot.migrations, plan_quota(snapshot).rooms, 0.0, NOW
    )
    for name in settled:
        caches.settled_views.set_aside(NAMESPACE, name)


def _migration(vm: int, phase: str, number: int = 0) -> Object:
    name = f"vm-{vm:05d}-migration" if phase == "Pending" else f"vm-{vm:05d}-done-{number}"
    migration = render_migration(NAMESPACE, f"vm-{vm:05d}", name=name)
    uid = _uid("vmim", vm) if phase == "Pending" else _uid("done", number)
    migration["metadata"].update(uid=uid, resourceVersion="1")
    migration["metadata"]["creationTimestamp"] = "2026-11-22T11:00:00Z"
    migration["status"] = {"phase": phase}
    if phase == "Succeeded":
        migration["status"]["migrationState"] = {"sourcePod": f"virt-launcher-gone-{number}"}
    return migration


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
    """What `QuotaReconciler.snapshot` read before the plan's views."""
    return NamespaceSnapshot(
        namespace={"metadata": {"name": NAMESPACE}},
        quota=quota,
        migrations=caches.migrations.by_index("namespace", NAMESPACE),
        vmis=NamespaceObjects(caches.vmis, NAMESPACE),
        pods=caches.index.namespace(NAMESPACE),
        now=NOW,
        launcher=settings_from(None, None, configured_version=VERSION),
    )


def read_views(caches: Caches, quota: Object) -> NamespaceSnapshot:
    """What `QuotaReconciler.snapshot` reads now."""
    return NamespaceSnapshot(
        namespace={"metadata": {"name": NAMESPACE}},
        quota=quota,
        migrations=caches.migration_views.namespace(NAMESPACE),
        vmis=caches.facts.by_name(NAMESPACE),
        pods=caches.index.namespace(NAMESPACE),
        now=NOW,
        launcher=settings_from(None, None, configured_version=VERSION),
        usage=caches.usages.usage,
    )


def read_settled(caches: Caches, quota: Object) -> NamespaceSnapshot:
    """What `QuotaReconciler.snapshot` reads now, once the finished migrations settled."""
    snapshot = read_views(caches, quota)
    snapshot.migrations = caches.settled_views.namespace(NAMESPACE)
    return snapshot


PATHS: dict[str, Callable[[Caches, Object], NamespaceSnapshot]] = {
    "decode-all": read_all,
    "index": read_index,
    "views": read_views,
    "settled": read_settled,
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
    """Every path plans the same quota (the bench compares equals)."""
    quota = quota_for(vms)
    plans = [plan_quota(read(caches, quota)) for read in PATHS.values()]
    return all(p.hard == plans[0].hard and p.used == plans[0].used for p in plans)


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


UPDATED = {
    "launcher pod": ("pods", f"{NAMESPACE}/virt-launcher-vm-00000-src00"),
    "VMI": ("vmis", f"{NAMESPACE}/vm-00000"),
    "migration": ("migrations", f"{NAMESPACE}/vm-00000-migration"),
}
"""The objects `update_costs` writes again: (Caches attribute, key)."""
UPDATES = 1000


def update_costs(caches: Caches, repeat: int) -> list[str]:
    """One watch update of each kind into its store (Store.prepare and put, the plan's views
    told), in µs, side by side: as the informer stores it (the old object left encoded unless a
    handler reads it) and with the old object decoded too, as every update was before."""
    lines = [
        "| object | put µs | put + old decoded µs | ratio |",
        "|---|---|---|---|",
    ]
    for kind, (attribute, key) in UPDATED.items():
        store: Store = getattr(caches, attribute)
        obj = store.get(key)
        if obj is None:
            raise RuntimeError(f"no {key} in the {attribute} cache")

        def put(decode: bool, store: Store = store, obj: Object = obj) -> None:
            for _ in range(UPDATES):
                old = store.put(store.prepare(obj))
                if decode and old is not None:
                    old.get()

        put(True)  # warm: the codec's dictionary, the views' first sight of the object
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(repeat):  # alternated, so that neither always runs on a quieter machine
            for decode, spent in times.items():
                spent.append(best_of(1, functools.partial(put, decode)) / UPDATES)
        kept, decoded = min(times[False]), min(times[True])
        lines.append(f"| {kind} | {kept * 1e6:.1f} | {decoded * 1e6:.1f} | {kept / decoded:.2f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pending", type=int, default=1, help="migrations waiting for room")
    parser.add_argument("--finished", type=int, default=0, help="succeeded migrations kept")
    parser.add_argument(
        "--updates", action="store_true", help="instead: one watch update of each kind, stored"
    )
    args = parser.parse_args(argv)
    if args.updates:
        print("\n".join(update_costs(build_caches(100, "zstd", args.pending), args.repeat)))
        return 0
    sizes = sorted(int(s) for s in args.sizes.split(","))
    rows = []
    for codec in ("zstd", "zlib", "dict"):
        for vms in sizes:
            caches = build_caches(vms, codec, args.pending, args.finished)
            if not same_plan(caches, vms):
                raise RuntimeError(f"the two paths plan differently at {vms} VMs")
            rows += [measure(caches, vms, codec, path, args.repeat) for path in PATHS]
    rows.sort(key=lambda r: (r.path, r.codec, r.vms))
    print("\n".join(table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
