"""A local cluster running KubeVirt's own virt-controller, shared by the modules that test against it.

One extra cluster per KubeVirt version, in a state directory beside the session's, shared by
every module that tests against it: `versioned_kubevirt_cluster` (tests/integration/conftest.py)
is session-scoped and parametrized by version, so pytest runs the tests of one version together,
across modules, and stops that version's cluster before it starts the next one's (one cluster at
a time, one start per version: three modules used to start twelve). The version of the session's
`kubevirt_cluster` (REAL_KUBEVIRT_VERSION) plays on that cluster, started no second time and
shared with every test on it. It never runs the KubeVirt simulator, which would fight the real
controller. Every version with a wrapper module is a parameter; one that is not built yet is
skipped with the command that builds it (the default version is built on demand, as `up` does).
A module that changes the cluster's KubeVirt CR or nodes puts them back before it ends: the next
module of that version shares them.

A module uses the fixtures by binding them at module level, e.g.
`kubevirt_cluster = real_kubevirt.kubevirt_cluster` (module scope over the session's cluster of
the version).

virt-api does not run here, so VMIs are created the way virt-api's defaulting would leave them:
CPU topology and model, machine type, guest memory, requests and limits all set.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from harvester_quota.apis.kubevirt import (
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
    VIRTUAL_MACHINE_INSTANCES,
    is_finished,
)
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.meta import metadata, status
from harvester_quota.generic.resource import NODES as NODE_RESOURCE
from harvester_quota.generic.resource import Object
from harvester_quota.testbench.localcluster import ClusterError, ClusterInfo, LocalCluster, binaries
from harvester_quota.testbench.localcluster.rest import ApiError, RestClient

from tests.helpers import eventually, wait_until
from tests.integration.conftest import session_state_dir

VMIS = "/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances"
VMS = "/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachines"
# A launcher pod starts in seconds; the budget covers a loaded 2-core machine.
START_TIMEOUT = 60.0
NODES = 3
"""A drained node, a user's VM's and one for the targets (test_mtq_priority_competition.py)."""
OUTBOUND_PER_NODE = 2
"""KubeVirt's parallelOutboundMigrationsPerNode as these clusters leave it (its default)."""
PER_CLUSTER = 5
"""KubeVirt's parallelMigrationsPerCluster as these clusters leave it (its default)."""
POLL = 1.0
"""Seconds between two looks for a free node: three cluster-wide lists each."""
LEFTOVERS_TIMEOUT = 240.0
"""Seconds a test waits for an earlier test's namespace deletion to take its VMIs off a node:
about two minutes on a loaded 2-core machine (virt-controller deletes the launchers with their
grace, kwok then removes them)."""


def state_dir(version: str) -> Path:
    session = session_state_dir()
    return session.with_name(f"{session.name}-virt-controller-{version}")


def require_built(version: str) -> None:
    """The default version is built on demand by `up`; others only if someone built them."""
    if version == binaries.DEFAULT_KUBEVIRT_VERSION:
        return
    try:
        binaries.resolve_kubevirt(version)
    except ClusterError:
        pytest.skip(
            f"KubeVirt {version} is not built: "
            f"`harvester-quota-bench cluster build --kubevirt-version {version}`"
        )


def virt_controller(info: ClusterInfo) -> Any:
    """The process record of the cluster's virt-controller."""
    return next(record for record in info.processes if record.name == "virt-controller")


def cluster_of_version(version: str) -> Iterator[ClusterInfo]:
    """A cluster running virt-controller of KubeVirt `version` (the body of the session fixture
    `versioned_kubevirt_cluster`); stopped, and checked to leave no virt-controller behind,
    when the session's tests of that version are done."""
    require_built(version)
    local = LocalCluster(state_dir(version))
    info = local.up(nodes=NODES, virt_controller=True, kubevirt=version)
    try:
        yield info
    finally:
        local.down()
    assert not virt_controller(info).running()


def switch(info: ClusterInfo, version: str) -> ClusterInfo:
    """Replaces the virt-controller of the session's cluster `info` with KubeVirt `version`'s
    (`LocalCluster.switch_virt_controller`) and keeps `info`, which every module of its version
    shares, true: its processes and version are the switched cluster's. Returns `info`."""
    switched = LocalCluster(info.state_dir).switch_virt_controller(version)
    info.processes = switched.processes
    info.kubevirt_version = switched.kubevirt_version
    return info


@pytest.fixture(scope="module")
def kubevirt_cluster(versioned_kubevirt_cluster: ClusterInfo) -> ClusterInfo:
    """The session's cluster of the version the test runs for."""
    return versioned_kubevirt_cluster


@pytest.fixture
def kv_rest(kubevirt_cluster: ClusterInfo) -> RestClient:
    return kubevirt_cluster.rest()


def create_namespace(rest: RestClient, labels: dict[str, str] | None = None) -> str:
    """A fresh namespace whose default service account exists (launcher pods use it)."""
    name = f"vc-{uuid.uuid4().hex[:8]}"
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = labels
    rest.post("/api/v1/namespaces", {"metadata": metadata})
    wait_until(
        lambda: rest.exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
        what=f"service account default in {name}",
    )
    return name


def delete_namespace(rest: RestClient, name: str) -> None:
    try:
        rest.delete(f"/api/v1/namespaces/{name}")
    except ApiError as error:
        if error.status != 404:
            raise


@pytest.fixture
def kv_namespace(kv_rest: RestClient) -> Iterator[str]:
    """A fresh namespace whose default service account exists (launcher pods use it)."""
    name = create_namespace(kv_rest)
    yield name
    delete_namespace(kv_rest, name)


def defaulted_vmi_spec(cores: int = 1, memory: str = "1Gi") -> dict[str, Any]:
    """A VMI spec as virt-api's defaulting leaves it: virt-controller renders the launcher pod's
    resources and node selectors from these fields."""
    return {
        "domain": {
            "cpu": {"cores": cores, "sockets": 1, "threads": 1, "model": "host-model"},
            "memory": {"guest": memory},
            "machine": {"type": "q35"},
            "resources": {
                "requests": {"cpu": "100m", "memory": memory},
                "limits": {"cpu": str(cores), "memory": memory},
            },
            "devices": {},
        },
        "terminationGracePeriodSeconds": 0,
    }


def launcher_pods(rest: RestClient, namespace: str, vmi_uid: str) -> list[dict[str, Any]]:
    """The launcher pods virt-controller created for the VMI with `vmi_uid`."""
    selector = f"kubevirt.io/created-by={vmi_uid}"
    listed = rest.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector=selector)
    pods: list[dict[str, Any]] = listed.get("items", [])
    return pods


async def _kwok_nodes(client: ApiClient) -> list[str]:
    nodes = (await client.list_all(NODE_RESOURCE)).items
    return sorted(str(metadata(n).get("name")) for n in nodes if _is_kwok(n))


def _is_kwok(node: Object) -> bool:
    return str(metadata(node).get("name", "")).startswith("kwok-node-")


def _foreign(obj: Object, namespace: str) -> bool:
    return metadata(obj).get("namespace") != namespace


async def _foreign_vmis(client: ApiClient, namespace: str) -> list[Object]:
    vmis = (await client.list_all(VIRTUAL_MACHINE_INSTANCES)).items
    return [v for v in vmis if _foreign(v, namespace)]


async def node_to_drain(client: ApiClient, namespace: str) -> str:
    """The first kwok node no VMI of another namespace is on, waited for. KubeVirt's evacuation
    drains a node's VMIs in every namespace: an earlier test's VMI left on the drained node
    while its namespace is deleted would get a migration no virt-handler stand-in plays, and
    hold one of the node's outbound migration slots until the deletion takes it away."""

    async def found() -> str | None:
        busy = set().union(*map(_nodes_of, await _foreign_vmis(client, namespace)))
        return next((n for n in await _kwok_nodes(client) if n not in busy), None)

    return await _first_node(found, "a kwok node with no other namespace's VMI")


async def node_to_migrate_from(client: ApiClient, namespace: str) -> str:
    """The kwok node with the fewest migrations of other namespaces under way from it, waited
    for until fewer than OUTBOUND_PER_NODE are there and fewer than PER_CLUSTER in all, so a
    migration of `namespace` from it starts at once. An earlier test's namespace, deleted
    mid-migration, keeps its migrations counted against their node's outbound slots until the
    deletion has taken their VMIs away; a test whose VM landed there waited out its grace for a
    slot. Counts every migration not finished whose VMI is on the node or leaving it (more than
    KubeVirt, which leaves out a pending one with no target pod yet)."""

    async def found() -> str | None:
        vmis = {
            (metadata(v).get("namespace"), metadata(v).get("name")): v
            for v in await _foreign_vmis(client, namespace)
        }
        under_way: Counter[str] = Counter()
        total = 0
        for migration in (await client.list_all(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS)).items:
            if is_finished(migration):
                continue
            key = (
                metadata(migration).get("namespace"),
                (migration.get("spec") or {}).get("vmiName"),
            )
            vmi = vmis.get(key)
            if vmi is not None:
                total += 1
                under_way.update(_nodes_of(vmi))
        nodes = await _kwok_nodes(client)
        best = min(nodes, key=under_way.__getitem__)
        free = under_way[best] < OUTBOUND_PER_NODE and total < PER_CLUSTER
        return best if free else None

    return await _first_node(found, "a kwok node with an outbound migration slot free")


async def _first_node(found: Callable[[], Awaitable[str | None]], what: str) -> str:
    """The node `found` gives first, polled every POLL s for up to LEFTOVERS_TIMEOUT s."""
    node = await eventually(found, timeout=LEFTOVERS_TIMEOUT, interval=POLL, what=what)
    return str(node)


def _nodes_of(vmi: Object) -> set[str]:
    """The nodes KubeVirt counts a migration of `vmi` against: where it runs, and the source
    its migration state names."""
    state = status(vmi).get("migrationState") or {}
    return {str(n) for n in (status(vmi).get("nodeName"), state.get("sourceNode")) if n}
