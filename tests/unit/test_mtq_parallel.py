"""MTQ mode and KubeVirt's parallel-migration limits (MTQ's e2e "max parallel migration is being
considered"): a refused migration KubeVirt holds back for its limits gets no target pod whatever
the quota says, so no lock is taken for it, and it is looked at again 5 s later."""

from __future__ import annotations

from typing import Any

from harvester_quota.apis.kubevirt import (
    KUBEVIRTS,
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
    VIRTUAL_MACHINE_INSTANCES,
)
from harvester_quota.controller.mtq.blocked import UNFINISHED, UNFINISHED_INDEX, unfinished_index
from harvester_quota.generic.resource import NAMESPACES
from harvester_quota.generic.store import Store
from harvester_quota.util.migrationlimits import (
    RECHECK_SECONDS,
    MigrationLimits,
    held_back,
    migration_limits,
)
from harvester_quota.util.mtq import parse_lock

from tests.objects import migration, vmi
from tests.unit.fakes import upsert
from tests.unit.mtq_fakes import Harness, harness
from tests.unit.test_mtq_controller import setup


def kubevirt_cr(**migrations: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
        "spec": {"configuration": {"migrations": migrations}},
    }


def migrating_elsewhere(h: Harness, node: str, phase: str = "Running") -> dict[str, Any]:
    """A migration of another namespace's VM on `node`, in `phase`."""
    busy = h.cluster.put(VIRTUAL_MACHINE_INSTANCES, vmi("busy", "other", node=node))
    return h.cluster.put(
        VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, migration("busy-mig", busy, phase=phase)
    )


def locked(h: Harness) -> bool:
    return parse_lock(h.cluster.get(NAMESPACES, "tenant")) is not None


def test_the_limits_are_read_from_the_kubevirt_cr_with_kubevirts_defaults() -> None:
    assert migration_limits(None) == MigrationLimits(5, 2)
    cr = kubevirt_cr(parallelMigrationsPerCluster=8, parallelOutboundMigrationsPerNode=0)
    assert migration_limits(cr) == MigrationLimits(8, 2), "0 is not a limit KubeVirt takes"


def test_held_back_by_the_cluster_limit_or_the_source_nodes() -> None:
    limits = MigrationLimits(per_cluster=3, outbound_per_node=2)
    assert held_back("n1", ["n1", "n1"], limits)
    assert not held_back("n1", ["n1", "n2"], limits)
    assert held_back("n9", ["n1", "n2", "n3"], limits)


async def test_a_migration_held_back_by_the_outbound_limit_takes_no_lock_until_a_slot_frees() -> (
    None
):
    h = harness()
    setup(h)
    h.cluster.put(KUBEVIRTS, kubevirt_cr(parallelOutboundMigrationsPerNode=1))
    busy = migrating_elsewhere(h, node="kwok-node-0")
    reconciler = h.reconciler()
    await h.reconcile(reconciler)
    assert not locked(h) and ("tenant", RECHECK_SECONDS) in h.namespaces.delayed
    busy["status"] = {"phase": "Succeeded"}
    h.cluster.put(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, busy)
    await h.reconcile(reconciler)
    assert locked(h), "the slot is free: KubeVirt will create the target pod once raised"


async def test_a_migration_from_another_node_is_not_held_back_by_the_outbound_limit() -> None:
    h = harness()
    setup(h)
    h.cluster.put(KUBEVIRTS, kubevirt_cr(parallelOutboundMigrationsPerNode=1))
    migrating_elsewhere(h, node="kwok-node-1")
    await h.reconcile(h.reconciler())
    assert locked(h)


async def test_the_cluster_limit_counts_pending_migrations_only_once_their_target_exists() -> None:
    h = harness()
    setup(h)
    h.cluster.put(KUBEVIRTS, kubevirt_cr(parallelMigrationsPerCluster=1))
    migrating_elsewhere(h, node="kwok-node-1", phase="Pending")  # no target pod: no slot
    reconciler = h.reconciler()
    await h.reconcile(reconciler)
    assert locked(h)


def test_the_slots_are_counted_from_the_unfinished_migrations_alone() -> None:
    """A namespace keeps thousands of finished migrations: the slot count reads an index of the
    unfinished ones (a finished one takes no slot), which a migration leaves when it finishes,
    instead of decoding the whole migration cache per reconcile."""
    store = Store(indexers={UNFINISHED_INDEX: unfinished_index})
    running = migration("running", vmi("a", "tenant"), phase="Running")
    upsert(store, running)
    upsert(store, migration("pending", vmi("b", "tenant"), phase="Pending"))
    upsert(store, migration("new", vmi("c", "tenant")))  # no phase yet: Pending
    upsert(store, migration("done", vmi("d", "tenant"), phase="Succeeded"))
    upsert(store, migration("failed", vmi("e", "tenant"), phase="Failed"))

    def names() -> list[str]:
        return sorted(m["metadata"]["name"] for m in store.by_index(UNFINISHED_INDEX, UNFINISHED))

    assert names() == ["new", "pending", "running"]
    running["status"] = {"phase": "Succeeded"}
    upsert(store, running)
    assert names() == ["new", "pending"], "a migration that finished leaves the index"


async def test_a_finished_migration_elsewhere_takes_no_slot() -> None:
    h = harness()
    setup(h)
    h.cluster.put(KUBEVIRTS, kubevirt_cr(parallelOutboundMigrationsPerNode=1))
    migrating_elsewhere(h, node="kwok-node-0", phase="Succeeded")
    await h.reconcile(h.reconciler())
    assert locked(h)
