"""Rancher 2.14.6+/2.15.2+ protects its default quota: our raise goes through its annotation.

Rancher's write protection is the rancher-webhook twin, a real admission webhook answering as
rancher-webhook does (400 BadRequest, its messages, its status rule); Rancher's agent (the
simulator) writes quotas as rancher-webhook-sudo in system:masters; KubeVirt's own virt-controller
migrates; the controller runs as usual.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest
from harvester_quota.app import ControllerApp
from harvester_quota.config.management import Options
from harvester_quota.controller.resourcequota.resourcequota_controller import (
    RANCHER_DENIAL_REASON,
)
from harvester_quota.explain import explain
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import EVENTS, NAMESPACES, RESOURCE_QUOTAS
from harvester_quota.localcluster import ClusterInfo
from harvester_quota.sim.kubevirt import VMSpec
from harvester_quota.sim.kubevirt.real import RealKubeVirt
from harvester_quota.sim.rancher import RancherQuotaSync
from harvester_quota.sim.rancher.admission import QUOTA_CONTROLLER, STATUS_IMMUTABLE
from harvester_quota.sim.rancher.twin import RancherWebhookTwin
from harvester_quota.util.annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA
from harvester_quota.util.resourcequota.base import (
    ANNOTATION_RANCHER_APPLIED,
    ANNOTATION_RANCHER_BASE,
)
from prometheus_client import CollectorRegistry

from tests.helpers import eventually
from tests.integration.kubevirt_by_hand import KubeVirtByHand
from tests.integration.test_controllers_on_kubevirt import (
    LONG,
    MIGRATION_TIMEOUT,
    kubevirt,
    kv,
    started,
)
from tests.integration.test_sim_rancher import (
    SEED_ANNOTATION,
    SEED_HARD,
    default_quotas,
    hard_is,
    join_project,
    seed_project,
)

pytestmark = pytest.mark.integration
__all__ = ["kubevirt", "kv"]  # fixtures shared with test_controllers_on_kubevirt.py


@pytest.fixture
async def protected_rancher(
    kubevirt_api: ApiClient, kubevirt_namespace: str, kubevirt_cluster: ClusterInfo
) -> AsyncIterator[RancherWebhookTwin]:
    """Rancher's protected quota in the test's namespace of the virt-controller cluster."""
    api, namespace, cluster = kubevirt_api, kubevirt_namespace, kubevirt_cluster
    twin = await RancherWebhookTwin.install(api, cluster, [namespace])
    project = seed_project(namespace)
    try:
        async with RancherQuotaSync(api, projects=[project], quota_client=twin.sudo):
            await join_project(api, namespace, project, SEED_ANNOTATION)
            await eventually(lambda: hard_is(api, namespace, SEED_HARD), what="Rancher's quota")
            yield twin
    finally:
        await twin.remove()


async def annotations(api: ApiClient, namespace: str) -> dict[str, str]:
    return dict((await api.get(NAMESPACES, namespace))["metadata"].get("annotations") or {})


async def test_a_migration_in_a_full_namespace_is_raised_through_rancher_and_given_back(
    kubevirt_api: ApiClient,
    kv: KubeVirtByHand,
    kubevirt: RealKubeVirt,
    protected_rancher: RancherWebhookTwin,
) -> None:
    """KubeVirt's real virt-controller migrates a VM in a namespace whose quota only Rancher may
    write: our raise goes through Rancher's annotation, and comes back as its exact text."""
    api = kubevirt_api
    registry = CollectorRegistry()
    app = ControllerApp(
        api, Options(leader_elect=False, kubevirt_version="1.6", workers=2), registry=registry
    )
    await app.start()
    try:
        spec = VMSpec("vm1", cores=2, memory="4Gi", migration_duration=LONG)
        (await kubevirt.create_vm(spec, node="kwok-node-0")).check()
        name = await kubevirt.migrate("vm1")
        raised = {"limits.cpu": "5015m", "limits.memory": "10040344313"}
        await eventually(
            lambda: hard_is(api, kv.namespace, raised), what="the raise copied by Rancher"
        )
        during = await annotations(api, kv.namespace)
        assert during[ANNOTATION_RANCHER_BASE] == SEED_ANNOTATION
        assert during[CATTLE_ANNOTATION_RESOURCE_QUOTA] == during[ANNOTATION_RANCHER_APPLIED]

        await kubevirt.records.wait_for(lambda: started(kubevirt, kv.namespace, name), 60)
        await kubevirt.abort(name)
        await kubevirt.wait_migration(name, timeout=MIGRATION_TIMEOUT)
        await eventually(lambda: hard_is(api, kv.namespace, SEED_HARD), what="back to the base")
        after = await annotations(api, kv.namespace)
        assert after[CATTLE_ANNOTATION_RESOURCE_QUOTA] == SEED_ANNOTATION, "the exact text"
        assert ANNOTATION_RANCHER_BASE not in after and ANNOTATION_RANCHER_APPLIED not in after

        denials = registry.get_sample_value(
            "harvester_quota_rancher_denials_total", {"namespace": kv.namespace}
        )
        assert denials == 1, "refused once, then the annotation path is taken"

        async def denial_events() -> list[str]:
            listed = await api.list_all(EVENTS, kv.namespace)
            return [
                e["involvedObject"]["kind"]
                for e in listed.items
                if e.get("reason") == RANCHER_DENIAL_REASON
            ]

        kinds = await eventually(denial_events, what="the denial reported")
        assert "VirtualMachineInstanceMigration" in kinds and "ResourceQuota" in kinds
        found = await explain(api, kv.namespace, kubevirt_version="1.6")
        assert found.rancher_denials, "explain shows the denial"
    finally:
        await app.stop()


async def test_a_status_copy_rancher_refuses_is_expected_and_kube_controller_manager_copies(
    kubevirt_api: ApiClient,
    kubevirt_namespace: str,
    protected_rancher: RancherWebhookTwin,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """rancher-webhook refuses our copy of spec.hard into status.hard with 400 "status is
    immutable" (every quota, every requester but kube-controller-manager's quota controller and
    the API server): the controller takes it as an expected refusal (no error, one log line, a
    backoff), and kube-controller-manager, the exempt user, still copies status itself."""
    api, namespace = kubevirt_api, kubevirt_namespace
    app = ControllerApp(api, Options(leader_elect=False, kubevirt_version="1.6", workers=1))
    await app.start()
    try:
        (quota,) = await default_quotas(api, namespace)
        quota["spec"]["hard"] = {**quota["spec"]["hard"], "pods": "11"}
        written = await protected_rancher.sudo.update(RESOURCE_QUOTAS, quota)  # Rancher's write
        with caplog.at_level(logging.WARNING):
            app.reconciler.publisher.submit(namespace, written)
            await app.reconciler.publisher.idle(namespace)
        refusals = [r for r in caplog.records if "resourcequotas/status" in r.getMessage()]
        assert len(refusals) == 1, "one warning line"
        assert STATUS_IMMUTABLE in refusals[0].getMessage()
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        mine = [
            r
            for r in protected_rancher.reviewed
            if r.sub_resource == "status" and not r.verdict.allowed
        ]
        assert [r.verdict.message for r in mine] == [STATUS_IMMUTABLE]

        async def copied_by_kube_controller_manager() -> bool:
            current = await api.get(RESOURCE_QUOTAS, quota["metadata"]["name"], namespace)
            return (current.get("status") or {}).get("hard", {}).get("pods") == "11"

        await eventually(copied_by_kube_controller_manager, what="status.hard from KCM")
        assert any(
            r.user == QUOTA_CONTROLLER and r.verdict.allowed
            for r in protected_rancher.reviewed
            if r.sub_resource == "status"
        )
    finally:
        await app.stop()
