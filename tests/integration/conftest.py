"""Fixtures for tests on the real local cluster.

One cluster is started per test session (in its own state directory, so a developer's own
`harvester-quota-bench cluster up` is left alone) and each test gets a fresh namespace. A session that was
killed leaves a stale state directory; the next session's `up` stops what is left and starts anew.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import NAMESPACES, Resource
from harvester_quota.testbench.localcluster import ClusterError, ClusterInfo, LocalCluster, binaries
from harvester_quota.testbench.localcluster.cluster import default_state_dir
from harvester_quota.testbench.localcluster.rest import ApiError, RestClient

from tests.helpers import eventually, wait_until
from tests.integration.kubevirt_by_hand import KubeVirtByHand

ENV_TEST_STATE_DIR = "HARVESTER_QUOTA_TEST_STATE_DIR"
REAL_KUBEVIRT_VERSION = "v1.6.0"
"""The KubeVirt of the session's second cluster: Harvester v1.7's, the version of the scenarios."""
HARVESTER_VERSION = "v1.8.2"
"""The Harvester whose own controllers the Harvester clusters run."""
HARVESTER_KUBEVIRT_VERSION = binaries.HARVESTER_KUBEVIRT[HARVESTER_VERSION]
"""The virt-controller beside them: the KubeVirt that Harvester ships (v1.7.0 for v1.8.2)."""


def session_state_dir() -> Path:
    return default_state_dir("pytest", ENV_TEST_STATE_DIR)


@pytest.fixture(scope="session")
def cluster() -> Iterator[ClusterInfo]:
    local = LocalCluster(session_state_dir())
    info = local.up()
    try:
        yield info
    finally:
        local.down()


@pytest.fixture(scope="session")
def session_kubevirt_cluster() -> Iterator[ClusterInfo]:
    """A second cluster, running KubeVirt's real virt-controller (REAL_KUBEVIRT_VERSION), for
    everything that migrates. virt-controller acts on every VMI and migration of its cluster, so
    the tests that play KubeVirt by hand keep the first one. Under a name no module rebinds
    (modules rebind `kubevirt_cluster`), so `versioned_kubevirt_cluster` can share it."""
    state = session_state_dir()
    local = LocalCluster(state.with_name(f"{state.name}-kubevirt"))
    info = local.up(virt_controller=True, kubevirt=REAL_KUBEVIRT_VERSION)
    try:
        yield info
    finally:
        local.down()


@pytest.fixture(scope="session")
def kubevirt_cluster(session_kubevirt_cluster: ClusterInfo) -> ClusterInfo:
    """The session's virt-controller cluster (`session_kubevirt_cluster`)."""
    return session_kubevirt_cluster


def _harvester_cluster(suffix: str, *, virt_controller: bool) -> Iterator[ClusterInfo]:
    """A cluster of its own running Harvester's own controllers (they act on every namespace,
    so they share no cluster with other tests); skipped where they are not built (a prebuilt
    HARVESTER_QUOTA_CLUSTER_BIN without them: `make test` builds them)."""
    try:
        binaries.resolve_harvester(HARVESTER_VERSION)
    except ClusterError as missing:
        pytest.skip(str(missing))
    state = session_state_dir()
    local = LocalCluster(state.with_name(f"{state.name}-{suffix}"))
    if virt_controller:
        info = local.up(
            virt_controller=True, kubevirt=HARVESTER_KUBEVIRT_VERSION, harvester=HARVESTER_VERSION
        )
    else:
        info = local.up(harvester=HARVESTER_VERSION)
    try:
        yield info
    finally:
        local.down()


@pytest.fixture(scope="session", params=binaries.supported_kubevirt_versions())
def versioned_kubevirt_cluster(request: pytest.FixtureRequest) -> Iterator[ClusterInfo]:
    """A cluster running virt-controller of one KubeVirt version, shared by the modules that
    bind `real_kubevirt.kubevirt_cluster` (see tests/integration/real_kubevirt.py). For
    REAL_KUBEVIRT_VERSION it is `session_kubevirt_cluster` (one cluster start less), left running
    for the tests after."""
    from tests.integration.real_kubevirt import cluster_of_version  # it imports this module

    if request.param == REAL_KUBEVIRT_VERSION:
        yield request.getfixturevalue("session_kubevirt_cluster")
        return
    yield from cluster_of_version(request.param)


@pytest.fixture(scope="session")
def harvester_cluster() -> Iterator[ClusterInfo]:
    """Harvester's own controllers and no virt-controller: tests and scenarios play KubeVirt."""
    yield from _harvester_cluster("harvester", virt_controller=False)


@pytest.fixture(scope="session")
def harvester_kubevirt_cluster() -> Iterator[ClusterInfo]:
    """Harvester's own controllers beside the virt-controller Harvester ships
    (HARVESTER_KUBEVIRT_VERSION), as on a Harvester node."""
    yield from _harvester_cluster("harvester-kubevirt", virt_controller=True)


@pytest.fixture
async def kubevirt_api(kubevirt_cluster: ClusterInfo) -> AsyncIterator[ApiClient]:
    """An admin client of the virt-controller cluster, for this test's event loop."""
    async with ApiClient(kubevirt_cluster.admin_config()) as client:
        yield client


@pytest.fixture
async def kubevirt_namespace(kubevirt_api: ApiClient) -> AsyncIterator[str]:
    """A fresh namespace on the virt-controller cluster, its default service account created
    (launcher pods need it)."""
    async with fresh_namespace_async(kubevirt_api, "real") as name:
        yield name


@contextlib.asynccontextmanager
async def fresh_namespace_async(api: ApiClient, prefix: str) -> AsyncIterator[str]:
    """`fresh_namespace` through the async client: a new namespace named `prefix`-<random>, once
    its default service account exists (launcher pods need it); deleted on exit."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    await api.create(NAMESPACES, {"metadata": {"name": name}})
    try:
        await eventually(
            lambda: _has_default_account(api, name), what=f"service account default in {name}"
        )
        yield name
    finally:
        await api.delete(NAMESPACES, name)


SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")


async def _has_default_account(api: ApiClient, namespace: str) -> bool:
    try:
        await api.get(SERVICE_ACCOUNTS, "default", namespace)
    except errors.NotFound:
        return False
    return True


@pytest.fixture
def rest(cluster: ClusterInfo) -> RestClient:
    return cluster.rest()


@pytest.fixture
def namespace(rest: RestClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A new namespace whose default service account exists (pods are admitted at once)."""
    with fresh_namespace(rest, request.node.name.lower().replace("_", "-")[:40]) as name:
        yield name


@contextlib.contextmanager
def fresh_namespace(rest: RestClient, stem: str) -> Iterator[str]:
    """A new namespace named `stem` plus a random suffix, whose default service account exists;
    deleted afterwards."""
    name = f"{stem.strip('-')}-{uuid.uuid4().hex[:6]}"
    rest.post("/api/v1/namespaces", {"metadata": {"name": name}})
    wait_until(
        lambda: rest.exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
        what=f"service account default in {name}",
    )
    yield name
    try:
        rest.delete(f"/api/v1/namespaces/{name}")
    except ApiError as error:
        if error.status != 404:
            raise


@pytest.fixture(scope="session")
def local_cluster(cluster: ClusterInfo) -> LocalCluster:
    """The session cluster as a LocalCluster, for tests that restart components or compact etcd."""
    return LocalCluster(session_state_dir())


@pytest.fixture
async def api(cluster: ClusterInfo) -> AsyncIterator[ApiClient]:
    """An asyncio client with the admin certificate, for this test's event loop."""
    async with ApiClient(cluster.admin_config()) as client:
        yield client


@pytest.fixture
async def kv(api: ApiClient, namespace: str) -> KubeVirtByHand:
    """KubeVirt's and the users' moves, made by hand in the test's own namespace."""
    return KubeVirtByHand(api, namespace)
