"""Rancher 2.14.6+/2.15.2+ protects its default quota: our raise goes through its annotation.

Rancher's write protection is the rancher-webhook twin, a real admission webhook answering as
rancher-webhook does (400 BadRequest, its messages, its status rule); Rancher's agent (the
simulator) writes quotas as rancher-webhook-sudo in system:masters; KubeVirt's own virt-controller
migrates; the controller runs as usual.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from harvester_quota.controller.resourcequota.rancher import (
    PROJECT_NO_ROOM_REASON,
    RANCHER_DENIAL_REASON,
)
from harvester_quota.explain import explain
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import EVENTS, NAMESPACES, RESOURCE_QUOTAS
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.sim.kubevirt import Outcome, VMSpec
from harvester_quota.testbench.sim.rancher import Project, RancherQuotaSync
from harvester_quota.testbench.sim.rancher.admission import QUOTA_CONTROLLER, STATUS_IMMUTABLE
from harvester_quota.testbench.sim.rancher.twin import RancherWebhookTwin
from harvester_quota.testbench.virtcontroller import VirtControllerDriver
from harvester_quota.util.annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA, LABEL_ROOM_HELD
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.rancher.project import NO_ROOM, QUOTA_PROJECT_ID_ANNOTATION
from harvester_quota.util.resourcequota.base import (
    ANNOTATION_RANCHER_APPLIED,
    ANNOTATION_RANCHER_BASE,
)
from prometheus_client import CollectorRegistry

from tests.helpers import caught_up, eventually, running_controllers
from tests.integration.kubevirt_by_hand import KubeVirtByHand
from tests.integration.test_controllers_on_kubevirt import (
    LONG,
    MIGRATION_TIMEOUT,
    SpecHistory,
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
    used_is_now,
    validated,
)

RAISED = {"limits.cpu": "5015m", "limits.memory": "10040344313"}
"""The seed's quota with room for vm1's target pod (2 cores, 4Gi at ratio 1.5)."""
SEED_USED = {"limitsCpu": "3", "limitsMemory": "5000Mi"}
"""The project's usedLimit with the seed's namespace counted (Rancher's canonical quantities)."""

pytestmark = pytest.mark.integration
__all__ = ["kubevirt", "kv"]  # fixtures shared with test_controllers_on_kubevirt.py


@dataclass(frozen=True)
class ProtectedRancher:
    """Rancher 2.15.2 as a test meets it: rancher-webhook's twin and Rancher's agent."""

    twin: RancherWebhookTwin
    agent: RancherQuotaSync


@contextlib.asynccontextmanager
async def rancher_protected(
    api: ApiClient, cluster: ClusterInfo, namespace: str, project: Project
) -> AsyncIterator[ProtectedRancher]:
    """Rancher 2.15.2 around `namespace`: rancher-webhook's twin, and Rancher's agent with
    `project`, the namespace joined to it at the seed's quota."""
    twin = await RancherWebhookTwin.install(api, cluster, [namespace])
    try:
        async with RancherQuotaSync(
            api, projects=[project], quota_client=twin.sudo, version="2.15.2"
        ) as agent:
            await join_project(api, namespace, project, SEED_ANNOTATION)
            await eventually(lambda: hard_is(api, namespace, SEED_HARD), what="Rancher's quota")
            yield ProtectedRancher(twin, agent)
    finally:
        await twin.remove()


@pytest.fixture
async def protected_rancher(
    kubevirt_api: ApiClient, kubevirt_namespace: str, kubevirt_cluster: ClusterInfo
) -> AsyncIterator[ProtectedRancher]:
    """Rancher's protected quota in the test's namespace of the virt-controller cluster, in a
    project with room for ten such namespaces."""
    project = seed_project(kubevirt_namespace)
    async with rancher_protected(
        kubevirt_api, kubevirt_cluster, kubevirt_namespace, project
    ) as protected:
        yield protected


async def annotations(api: ApiClient, namespace: str) -> dict[str, str]:
    return dict((await api.get(NAMESPACES, namespace))["metadata"].get("annotations") or {})


async def test_a_migration_in_a_full_namespace_is_raised_through_rancher_and_given_back(
    kubevirt_api: ApiClient,
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
    protected_rancher: ProtectedRancher,
) -> None:
    """KubeVirt's real virt-controller migrates a VM in a namespace whose quota only Rancher may
    write: our raise goes through Rancher's annotation, and comes back as its exact text."""
    api = kubevirt_api
    registry = CollectorRegistry()
    async with running_controllers(api, registry=registry):
        spec = VMSpec("vm1", cores=2, memory="4Gi", migration_duration=LONG)
        (await kubevirt.create_vm(spec, node="kwok-node-0")).check()
        name = await kubevirt.migrate("vm1")
        await eventually(
            lambda: hard_is(api, kv.namespace, RAISED), what="the raise copied by Rancher"
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
        # The project had room: Rancher validated the raise and the release, and counts the
        # namespace at its base in the project's usedLimit.
        assert await validated(api, kv.namespace) == (True, "")
        assert after[QUOTA_PROJECT_ID_ANNOTATION] == f"local:p-{kv.namespace[-6:]}"
        project = seed_project(kv.namespace)
        await eventually(
            lambda: used_is_now(api, project, SEED_USED), what="the namespace counted at its base"
        )

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


async def test_a_status_copy_rancher_refuses_is_expected_and_kube_controller_manager_copies(
    kubevirt_api: ApiClient,
    kubevirt_namespace: str,
    protected_rancher: ProtectedRancher,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """rancher-webhook refuses our copy of spec.hard into status.hard with 400 "status is
    immutable" (every quota, every requester but kube-controller-manager's quota controller and
    the API server): the controller takes it as an expected refusal (no error, one log line, a
    backoff), and kube-controller-manager, the exempt user, still copies status itself."""
    api, namespace = kubevirt_api, kubevirt_namespace
    twin = protected_rancher.twin
    async with running_controllers(api, workers=1) as app:
        # The controller labels the namespace room-held when it first plans it, and Rancher's
        # agent then re-derives the quota from its annotation (dropping the hand-made "pods"
        # below if it came later): both done before the edit.
        await eventually(lambda: caught_up(app, namespace), what="the controllers caught up")
        assert await protected_rancher.agent.wait_idle(30), "the agent synced every event"
        (quota,) = await default_quotas(api, namespace)
        quota["spec"]["hard"] = {**quota["spec"]["hard"], "pods": "11"}
        written = await twin.sudo.update(RESOURCE_QUOTAS, quota)  # Rancher's write
        with caplog.at_level(logging.WARNING):
            app.reconciler.publisher.submit(namespace, written)
            await app.reconciler.publisher.idle(namespace)
        refusals = [r for r in caplog.records if "resourcequotas/status" in r.getMessage()]
        assert len(refusals) == 1, "one warning line"
        assert STATUS_IMMUTABLE in refusals[0].getMessage()
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        mine = [r for r in twin.reviewed if r.sub_resource == "status" and not r.verdict.allowed]
        # One request of ours (one log line); the API server may review it more than once (it
        # retries a patch that met kube-controller-manager's concurrent status write).
        assert mine and {r.verdict.message for r in mine} == {STATUS_IMMUTABLE}
        assert len({r.user for r in mine}) == 1 and mine[0].user != QUOTA_CONTROLLER

        async def copied_by_kube_controller_manager() -> bool:
            current = await api.get(RESOURCE_QUOTAS, quota["metadata"]["name"], namespace)
            return (current.get("status") or {}).get("hard", {}).get("pods") == "11"

        await eventually(copied_by_kube_controller_manager, what="status.hard from KCM")
        assert any(
            r.user == QUOTA_CONTROLLER and r.verdict.allowed
            for r in twin.reviewed
            if r.sub_resource == "status"
        )


def shortfall(limit: dict[str, str], siblings: dict[str, str] | None = None) -> str:
    """What the project lacks for the raise (RAISED plus `siblings` beyond `limit`), in the
    words of the Warning."""
    parts = []
    for key in sorted(RAISED):
        total = Quantity.parse(RAISED[key]) + Quantity.parse((siblings or {}).get(key, "0"))
        short = total - Quantity.parse(limit[key])
        if short.sign() > 0:
            parts.append(f"{key} {short}")
    return f"{NO_ROOM}: raise the project limit by {', '.join(parts)}"


async def no_room_events(api: ApiClient, namespace: str, *, names: bool = False) -> list[Any]:
    """The ProjectHasNoRoom events in `namespace`: (kind, message), or with `names` (kind,
    message, involved object's name)."""
    listed = await api.list_all(EVENTS, namespace)
    return [
        (e["involvedObject"]["kind"], e["message"], e["involvedObject"]["name"])
        if names
        else (e["involvedObject"]["kind"], e["message"])
        for e in listed.items
        if e.get("reason") == PROJECT_NO_ROOM_REASON
    ]


async def held_back_then_released(
    api: ApiClient,
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
    project: Project,
    *,
    expected: str,
    used: dict[str, str],
) -> None:
    """vm1 migrates in a project without room for its raise: the controller writes no raise,
    warns on the quota, the namespace and the migration with the amount the project lacks (also
    in explain), and once the migration is given up the namespace is as it was: its base
    annotation, validated, counted in the project's usedLimit."""
    async with running_controllers(api):
        spec = VMSpec("vm1", cores=2, memory="4Gi", migration_duration=LONG)
        (await kubevirt.create_vm(spec, node="kwok-node-0")).check()
        name = await kubevirt.migrate("vm1")

        async def warned() -> list[tuple[str, str]]:
            events = await no_room_events(api, kv.namespace)
            # A Namespace's events go to "default" (it has no namespace of its own).
            on_namespace = [
                (kind, message)
                for kind, message, name in await no_room_events(api, "default", names=True)
                if name == kv.namespace
            ]
            kinds = {kind for kind, _ in events + on_namespace}
            wanted = {"ResourceQuota", "Namespace", "VirtualMachineInstanceMigration"}
            return events + on_namespace if wanted <= kinds else []

        events = await eventually(warned, what="the project's lack of room reported")
        assert {message for _, message in events} == {expected}

        async def blocked_with_cause() -> bool:
            listed = await api.list_all(EVENTS, kv.namespace)
            return any(
                e.get("reason") == "MigrationBlockedByQuota" and f"({expected})" in e["message"]
                for e in listed.items
            )

        await eventually(blocked_with_cause, what="the refused target pod explained")
        found = await explain(api, kv.namespace, kubevirt_version="1.6")
        assert found.rancher_project is not None
        assert found.rancher_project["no_room"] == expected
        assert found.rancher_project["validated"] is True

        during = await annotations(api, kv.namespace)
        assert during[CATTLE_ANNOTATION_RESOURCE_QUOTA] == SEED_ANNOTATION, "no raise written"
        assert ANNOTATION_RANCHER_BASE not in during
        assert await validated(api, kv.namespace) == (True, ""), "never marked by Rancher"
        assert await hard_is(api, kv.namespace, SEED_HARD)

        await kubevirt.abort(name)
        await kubevirt.wait_migration(name, timeout=MIGRATION_TIMEOUT)
        await eventually(
            lambda: explain_no_room_gone(api, kv.namespace), what="explain without the raise"
        )
        after = await annotations(api, kv.namespace)
        assert after[CATTLE_ANNOTATION_RESOURCE_QUOTA] == SEED_ANNOTATION
        assert await validated(api, kv.namespace) == (True, "")
        await eventually(lambda: used_is_now(api, project, used), what="the namespace counted")


async def explain_no_room_gone(api: ApiClient, namespace: str) -> bool:
    found = await explain(api, namespace, kubevirt_version="1.6")
    return found.rancher_project is not None and not found.rancher_project["no_room"]


async def test_a_project_without_room_holds_the_raise_back_and_says_by_how_much(
    kubevirt_api: ApiClient,
    kubevirt_cluster: ClusterInfo,
    kubevirt_namespace: str,
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
) -> None:
    """A project whose limit is the namespace's own quota: Rancher would refuse the raise (and
    mark the namespace not validated, out of its usedLimit, for good: it checks again only when
    the quota changes), so the controller holds it back and says what the project lacks."""
    project = seed_project(kubevirt_namespace, dict(SEED_HARD))
    async with rancher_protected(kubevirt_api, kubevirt_cluster, kubevirt_namespace, project):
        expected = shortfall(dict(SEED_HARD))
        await held_back_then_released(
            kubevirt_api, kv, kubevirt, project, expected=expected, used=SEED_USED
        )


async def test_siblings_that_fill_the_project_hold_the_raise_back_on_their_keys(
    kubevirt_api: ApiClient,
    kubevirt_cluster: ClusterInfo,
    kubevirt_namespace: str,
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
) -> None:
    """Room enough for the namespace alone, but a sibling namespace of the project takes the
    rest of limits.cpu: the raise is held back, and the Warning names limits.cpu only."""
    limit = {"limits.cpu": "6", "limits.memory": "15000Mi"}
    project = seed_project(kubevirt_namespace, limit)
    sibling = f"{kubevirt_namespace}-sib"
    await kubevirt_api.create(NAMESPACES, {"metadata": {"name": sibling}})
    try:
        async with rancher_protected(kubevirt_api, kubevirt_cluster, kubevirt_namespace, project):
            await join_project(kubevirt_api, sibling, project, SEED_ANNOTATION)
            await eventually(
                lambda: hard_is(kubevirt_api, sibling, SEED_HARD), what="the sibling's quota"
            )
            expected = shortfall(limit, SEED_HARD)
            assert "limits.memory" not in expected
            both = {"limitsCpu": "6", "limitsMemory": "10000Mi"}
            await held_back_then_released(
                kubevirt_api, kv, kubevirt, project, expected=expected, used=both
            )
    finally:
        await kubevirt_api.delete(NAMESPACES, sibling)


async def test_where_rancher_does_not_protect_its_quota_the_label_is_kept_and_each_room_raised_once(
    kubevirt_api: ApiClient, kv: KubeVirtByHand, kubevirt: VirtControllerDriver
) -> None:
    """Rancher before 2.14.6: our raise goes straight into spec.hard, and Rancher's agent resets
    the quota from its annotation on every namespace event, here a second after it (a busy
    agent's queue). A room-held label written per room is such an event while the raise is
    being written: the agent reset the raise and the controller raised again. The label is
    written once, before any room, and kept (issue 25, item 6): each of two migrations of vm1
    raises spec.hard exactly once, the quota comes back to the base, and the label stays."""
    api, namespace = kubevirt_api, kv.namespace
    project = seed_project(namespace)
    async with RancherQuotaSync(api, projects=[project], version="2.12", sync_delay=1.0) as agent:
        await join_project(api, namespace, project, SEED_ANNOTATION)
        await eventually(lambda: hard_is(api, namespace, SEED_HARD), what="Rancher's quota")
        async with running_controllers(api) as app:
            await eventually(lambda: caught_up(app, namespace), what="the controllers caught up")
            assert await agent.wait_idle(30), "the agent has synced every namespace event"
            spec = VMSpec("vm1", cores=2, memory="4Gi")
            (await kubevirt.create_vm(spec, node="kwok-node-0")).check()
            async with SpecHistory(api, namespace) as history:
                for _ in range(2):
                    name = await kubevirt.migrate("vm1")
                    record = await kubevirt.wait_migration(name, timeout=MIGRATION_TIMEOUT)
                    assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
                    await eventually(
                        lambda: hard_is(api, namespace, SEED_HARD), what="back to the base"
                    )
            raises = [hard for hard in history.hards if hard != SEED_HARD]
            assert raises == [RAISED, RAISED], f"one raise per room: {history.hards}"
            assert await _room_held(api, namespace), "the label stays between rooms"


async def _room_held(api: ApiClient, namespace: str) -> bool:
    labels = (await api.get(NAMESPACES, namespace))["metadata"].get("labels") or {}
    return labels.get(LABEL_ROOM_HELD) == "true"


async def test_adopting_a_quota_rancher_protects_is_refused_once_quietly_then_rooms_go_through_rancher(
    kubevirt_api: ApiClient,
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
    protected_rancher: ProtectedRancher,
) -> None:
    """Beside Harvester (--adopt-harvester-quotas), the first plan of a protected quota is an
    annotation-only adoption: Rancher refuses it, which raised nothing, so no denial is counted
    nor told in a Warning (at 10,000 namespaces, each leader start would tell 10,000); the
    namespace is known protected, and the migration's raise goes through Rancher's annotation at
    its first try."""
    api = kubevirt_api
    registry = CollectorRegistry()
    async with running_controllers(api, registry=registry, adopt_harvester_quotas=True) as app:
        protected = app.reconciler.rancher.protected
        await eventually(
            lambda: kv.namespace in protected, what="the adoption refused, the namespace protected"
        )
        spec = VMSpec("vm1", cores=2, memory="4Gi", migration_duration=LONG)
        (await kubevirt.create_vm(spec, node="kwok-node-0")).check()
        name = await kubevirt.migrate("vm1")
        await eventually(
            lambda: hard_is(api, kv.namespace, RAISED), what="the raise copied by Rancher"
        )
        await kubevirt.abort(name)
        await kubevirt.wait_migration(name, timeout=MIGRATION_TIMEOUT)
        await eventually(lambda: hard_is(api, kv.namespace, SEED_HARD), what="back to the base")
    denials = registry.get_sample_value(
        "harvester_quota_rancher_denials_total", {"namespace": kv.namespace}
    )
    assert denials is None, "no raise was refused"
    listed = await api.list_all(EVENTS, kv.namespace)
    assert not [e for e in listed.items if e.get("reason") == RANCHER_DENIAL_REASON]
