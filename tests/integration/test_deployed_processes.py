"""The product as it is deployed, on a KubeVirt cluster without Harvester.

`harvester-quota run` (leader-elected) and `harvester-quota webhook` run as their own processes,
each from a kubeconfig holding its service account's token (TokenRequest), under exactly the
RBAC in deploy/; Harvester's Settings CRD is not installed. A migration in a full namespace gets
its room, the room is given back, nobody meets a 403, and a verb deploy/ does not grant is
refused by the real authorizer.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Final

import aiohttp
import pytest
import yaml
from harvester_quota.apis.harvester import SETTINGS
from harvester_quota.apis.kubevirt import VIRTUAL_MACHINE_INSTANCES, VIRTUAL_MACHINES
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.discovery import serves
from harvester_quota.generic.resource import CRDS, NAMESPACES, PODS, RESOURCE_QUOTAS, Object
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.localcluster.cluster import CRDS_FILE, VIRT_CONTROLLER_USER
from harvester_quota.testbench.localcluster.deploy import (
    webhook_client_flags,
    write_token_kubeconfig,
)
from harvester_quota.testbench.localcluster.process import free_port
from harvester_quota.testbench.sim.kubevirt import Outcome, VMSpec
from harvester_quota.testbench.virtcontroller import VirtControllerDriver

from tests.helpers import eventually, succeed_migration
from tests.integration import deployment
from tests.integration.kubevirt_by_hand import KubeVirtByHand

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
V170_LIMIT = {"limitsCpu": "3000m", "limitsMemory": "5000Mi"}
V170_HARD = {"limits.cpu": "3", "limits.memory": "5000Mi"}
SETTINGS_CRD = f"{SETTINGS.plural}.{SETTINGS.group}"


def settings_crd() -> Object:
    (crd,) = [
        d
        for d in yaml.safe_load_all(CRDS_FILE.read_text())
        if d and d["metadata"]["name"] == SETTINGS_CRD
    ]
    return dict(crd)


@pytest.fixture
async def without_harvester(api: ApiClient) -> AsyncIterator[None]:
    """Harvester's Settings CRD removed for the test (a plain KubeVirt cluster), then restored."""
    with contextlib.suppress(errors.NotFound):
        await api.delete(CRDS, SETTINGS_CRD)
    await eventually(lambda: _not(serves(api, SETTINGS)), what="Settings no longer served")
    try:
        yield
    finally:
        with contextlib.suppress(errors.AlreadyExists):
            await api.create(CRDS, settings_crd())
        await eventually(lambda: serves(api, SETTINGS), what="Settings served again")


async def _not(check: object) -> bool:
    return not await check  # type: ignore[misc]


@contextlib.contextmanager
def process(args: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "harvester_quota.main", *args],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={k: v for k, v in os.environ.items() if k != "KUBECONFIG"},
        )
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


async def ready(url: str, serving: subprocess.Popen[bytes] | None = None) -> bool:
    """Whether `url` answers 200; fails at once if `serving`, the process behind it, has exited
    (a port taken, a flag refused), rather than after the caller's whole wait."""
    if serving is not None and serving.poll() is not None:
        raise AssertionError(f"{url}: the process serving it exited with {serving.returncode}")
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(url, ssl=False, timeout=aiohttp.ClientTimeout(total=2)) as response,
        ):
            return response.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


LOG_TAIL: Final = 4000
"""How much of each process's log a failed start tells (its end, where the cause is)."""


@contextlib.contextmanager
def logs_told_on_failure(logs: tuple[Path, Path]) -> Iterator[None]:
    """Re-raises an AssertionError of the block with the end of each of `logs` appended: a
    process that never became ready explains itself in the test's report (CI-49's webhook that
    was not ready in 60 s left no trace of why)."""
    try:
        yield
    except AssertionError as failure:
        tails = [f"--- {log.name}:\n{_tail(log)}" for log in logs]
        raise AssertionError("\n".join([str(failure), *tails])) from None


def _tail(log: Path) -> str:
    try:
        return log.read_text(errors="replace")[-LOG_TAIL:]
    except OSError as error:
        return f"(unreadable: {error})"


@contextlib.asynccontextmanager
async def deployed(
    api: ApiClient,
    cluster: ClusterInfo,
    namespace: str,
    tmp_path: Path,
    target_creator: str,
    *,
    controller_flags: tuple[str, ...] = (),
) -> AsyncIterator[tuple[Path, Path]]:
    """The controller and the webhook running as deployed (token kubeconfigs, deploy/'s RBAC,
    the shipped webhook configuration narrowed to `namespace`, the chart's default
    certificates: no Secret made by hand, the webhook fills the caBundle), ready; yields their
    log files.
    `controller_flags` are added to `run`'s."""
    await deployment.apply_rbac(api)
    controller_kubeconfig = await write_token_kubeconfig(
        api, cluster, "harvester-quota", tmp_path / "controller.kubeconfig"
    )
    webhook_kubeconfig = await write_token_kubeconfig(
        api, cluster, "harvester-quota-webhook", tmp_path / "webhook.kubeconfig"
    )
    # The chart's default certificates: its empty CA Secret; the webhook makes the rest.
    await deployment.reset_ca_secret(api)
    certificates = deployment.shipped_self_signed()
    health, webhook_port, webhook_metrics = free_port(), free_port(), free_port()
    controller_args = [
        "run",
        f"--kubeconfig={controller_kubeconfig}",
        f"--namespace={deployment.SYSTEM_NAMESPACE}",
        f"--lease-name=deployed-{namespace[-6:]}",
        f"--health-port={health}",
        "--kubevirt-version=1.6",
        *controller_flags,
    ]
    webhook_args = [
        "webhook",
        f"--kubeconfig={webhook_kubeconfig}",
        f"--cert-file={tmp_path / 'tls.crt'}",
        f"--key-file={tmp_path / 'tls.key'}",
        f"--self-signed-secret={certificates.secret_name}",
        f"--webhook-configuration={certificates.configuration}",
        "--cert-host=127.0.0.1",
        "--host=127.0.0.1",
        f"--port={webhook_port}",
        *webhook_client_flags(cluster),  # only the API server's calls are answered
        "--metrics-host=127.0.0.1",
        f"--metrics-port={webhook_metrics}",
        f"--controller-user={deployment.CONTROLLER_USER}",
        f"--target-creator={target_creator}",
        "--kubevirt-version=1.6",
    ]
    logs = tmp_path / "controller.log", tmp_path / "webhook.log"
    with process(controller_args, logs[0]) as controller, process(webhook_args, logs[1]) as hook:
        with logs_told_on_failure(logs):
            await eventually(
                lambda: ready(f"http://127.0.0.1:{health}/readyz", controller),
                timeout=60,
                what="controller ready",
            )
            await eventually(  # where the chart's probes ask: the admission port wants a cert
                lambda: ready(f"http://127.0.0.1:{webhook_metrics}/readyz", hook),
                timeout=60,
                what="webhook ready",
            )
            await eventually(
                lambda: ready(f"http://127.0.0.1:{webhook_metrics}/metrics", hook),
                timeout=60,
                what="the webhook's metrics port",
            )
        try:
            await deployment.register_self_certified(api, webhook_port, namespace)
            yield logs
        finally:
            await deployment.unregister_self_certified(api)


def assert_no_refusal_logged(logs: tuple[Path, Path]) -> None:
    for log in logs:
        text = log.read_text()
        # An API refusal prints as "403: ... is forbidden ..."; a bare 403 may be a timestamp's
        # milliseconds (",403"), which once failed this test.
        assert not re.search(r"\b403:|Forbidden|forbidden", text), f"{log.name}:\n{text[-3000:]}"


async def test_deployed_with_tokens_and_the_shipped_rbac_on_plain_kubevirt(
    api: ApiClient,
    cluster: ClusterInfo,
    namespace: str,
    tmp_path: Path,
    without_harvester: None,
) -> None:
    async with deployed(api, cluster, namespace, tmp_path, deployment.KUBEVIRT_USER) as logs:
        # deploy/'s RBAC (applied by `deployed`) creates KubeVirt's service account here.
        kubevirt_api = await deployment.client_as(api, cluster, "kubevirt-controller")
        try:
            await migrate_once(
                KubeVirtByHand(api, namespace), KubeVirtByHand(kubevirt_api, namespace)
            )
        finally:
            await kubevirt_api.close()
    assert_no_refusal_logged(logs)
    await assert_least_privilege(api, cluster, namespace)


async def test_deployed_beside_kubevirts_own_virt_controller(
    kubevirt_api: ApiClient,
    kubevirt_cluster: ClusterInfo,
    kubevirt_namespace: str,
    tmp_path: Path,
) -> None:
    """The same deployment on the cluster running KubeVirt's virt-controller (as its service
    account): its target pod is told from a tenant's by its creator, and three migrations of VMs
    in a full namespace go through, the room given back each time."""
    api, namespace = kubevirt_api, kubevirt_namespace
    tenant = KubeVirtByHand(api, namespace)
    await tenant.set_rancher_base(V170_LIMIT)
    await tenant.create_quota(V170_HARD)
    kubevirt = VirtControllerDriver(
        api,
        kubevirt_version=str(kubevirt_cluster.kubevirt_version),
        namespaces=frozenset({namespace}),
    )
    async with (
        deployed(api, kubevirt_cluster, namespace, tmp_path, VIRT_CONTROLLER_USER) as logs,
        kubevirt,
    ):
        assert (await kubevirt.create_vm(VMSpec("vm1", cores=2, memory="4Gi"))).started
        for _ in range(3):
            record = await kubevirt.wait_migration(await kubevirt.migrate("vm1"), timeout=180)
            assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
            gone = record.source_pod_gone is not None
            assert gone or await kubevirt.records.wait_for(
                lambda finished=record: finished.source_pod_gone is not None, 60
            ), "the source launcher exited"

            async def at_base() -> bool:
                hard = (await tenant.quota())["spec"]["hard"]
                return hard == V170_HARD

            await eventually(at_base, what="the room given back")
    assert_no_refusal_logged(logs)


async def migrate_once(tenant: KubeVirtByHand, kubevirt: KubeVirtByHand) -> None:
    await tenant.set_rancher_base(V170_LIMIT)
    await tenant.create_quota(V170_HARD)
    vmi, source = await kubevirt.start_vm("vm1")
    migration = await kubevirt.migrate(vmi)
    target = await eventually(
        lambda: kubevirt.try_create_target(vmi, migration), what="the target pod admitted"
    )
    await succeed_migration(kubevirt, migration, source, target, walk=False)
    await kubevirt.delete_pod(source["metadata"]["name"], grace=0)

    async def at_base() -> bool:
        hard = (await tenant.quota())["spec"]["hard"]
        return hard == {"limits.cpu": "3", "limits.memory": "5000Mi"}

    await eventually(at_base, what="the room given back")


async def assert_least_privilege(api: ApiClient, cluster: ClusterInfo, namespace: str) -> None:
    """The real authorizer refuses what deploy/ does not grant."""
    controller = await deployment.client_as(api, cluster, "harvester-quota")
    webhook = await deployment.client_as(api, cluster, "harvester-quota-webhook")
    try:
        with pytest.raises(errors.Forbidden):
            await controller.delete(NAMESPACES, namespace)
        with pytest.raises(errors.Forbidden):
            await controller.create(PODS, {"metadata": {"name": "x"}, "spec": {}}, namespace)
        # Harvester's annotations are off by default, and with them the VMI and VM patch.
        for kind in (VIRTUAL_MACHINE_INSTANCES, VIRTUAL_MACHINES):
            with pytest.raises(errors.Forbidden):
                await controller.patch(kind, "vm1", {"metadata": {"labels": {"x": "y"}}}, namespace)
        # The webhook writes nothing but its reservation Leases: no namespace, no quota.
        with pytest.raises(errors.Forbidden):
            await webhook.patch(NAMESPACES, namespace, {"metadata": {"labels": {"x": "y"}}})
        with pytest.raises(errors.Forbidden):
            await webhook.delete(NAMESPACES, namespace)
        raised = {"limits.cpu": "100"}
        with pytest.raises(errors.Forbidden):
            await webhook.patch(
                RESOURCE_QUOTAS, "default-quota", {"spec": {"hard": raised}}, namespace
            )
        with pytest.raises(errors.Forbidden):
            await webhook.patch(
                RESOURCE_QUOTAS,
                "default-quota",
                {"status": {"hard": raised}},
                namespace,
                subresource="status",
            )
        with pytest.raises(errors.Forbidden):
            await webhook.create(PODS, {"metadata": {"name": "x"}, "spec": {}}, namespace)
    finally:
        await controller.close()
        await webhook.close()
