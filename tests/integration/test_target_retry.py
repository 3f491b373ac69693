"""The target-pod retry beside KubeVirt's real virt-controller (issue 40, item 3).

The first test: a ValidatingAdmissionPolicy of the test's own denies migration target pods in the test's
namespace while the namespace carries a label: a plain denial, not a quota refusal, as quota
admission's Conflict or a webhook timeout would be. virt-controller fails the create, records
FailedCreate on the VMI and requeues the migration through its rate limiter, whose per-key backoff
doubles from 5 ms with every failure. Our controllers run as their service account with the
chart's RBAC. Once two of our retries have failed too, the denial is lifted: virt-controller's own
next try is then seconds away (5 ms times 2 to the number of failures), and our third retry, a
second later, must bring the target pod well before it.

The second: tenants allowed to create Events forge virt-controller's FailedCreate, on a VMI of
another namespace and as a flood on their own waiting migration (virt-controller's migration slots
closed, so it waits Pending with no target pod and no real failure): nothing is written for the
first (the API server itself refuses an Event naming an object of another namespace; our own
check of it is a second line), at most three retries for the second.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from collections.abc import AsyncIterator
from typing import Any

import pytest
from harvester_quota.apis.kubevirt import (
    KUBEVIRTS,
    LABEL_MIGRATION_JOB,
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
    VIRTUAL_MACHINE_INSTANCES,
)
from harvester_quota.app import ControllerApp
from harvester_quota.controller.migration.createfailures import (
    ANNOTATION_RETRIES,
    EVENT_SELECTOR,
    MAX_RETRIES,
)
from harvester_quota.controller.migration.targetretry import REASON_RETRIED
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import EVENTS, NAMESPACES, PODS, Object
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.sim.kubevirt import VMSpec
from harvester_quota.testbench.sim.kubevirt.handler import HandlerTimings
from harvester_quota.testbench.virtcontroller import (
    KUBEVIRT_NAME,
    KUBEVIRT_NAMESPACE,
    VirtControllerDriver,
)

from tests.helpers import eventually
from tests.integration import deployment
from tests.integration.conftest import fresh_namespace_async
from tests.integration.tenant import grant, small_pod, tenant

pytestmark = pytest.mark.integration

DENY_LABEL = "harvester-quota.io/test-deny-targets"
PER_KEY_BASE = 0.005
"""client-go's per-key backoff base in virt-controller's migration queue (5 ms, doubling)."""
MARGIN = 0.5
"""Seconds between our noticing a failure and virt-controller's making it, at most."""


def own_backoff(failures: int) -> float:
    """The least virt-controller waits after its `failures`-th failure in a row before trying
    the same migration again by itself (its per-key backoff; the shared bucket only adds)."""
    return PER_KEY_BASE * 2 ** (failures - 1)


def deny_policy(namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A policy denying pods labelled as migration targets, bound to `namespace` while it has
    DENY_LABEL."""
    name = f"test-deny-targets-{namespace}"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ]
            },
            "validations": [
                {
                    "expression": "!has(object.metadata.labels) || "
                    f"!('{LABEL_MIGRATION_JOB}' in object.metadata.labels)",
                    "message": "this test denies migration target pods for now",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": namespace, DENY_LABEL: "true"}
                }
            },
        },
    }
    return policy, binding


async def set_denial(api: ApiClient, namespace: str, on: bool) -> None:
    labels = {DENY_LABEL: "true" if on else None}
    await api.patch(NAMESPACES, namespace, {"metadata": {"labels": labels}})


async def denies_targets(api: ApiClient, namespace: str) -> bool:
    pod = small_pod("probe", "10m", "16Mi", {LABEL_MIGRATION_JOB: "probe"})
    try:
        await api.create(PODS, pod, namespace, dry_run=True)
    except errors.ApiError as denied:
        return "ValidatingAdmissionPolicy" in denied.message
    return False


@contextlib.asynccontextmanager
async def denial(api: ApiClient, namespace: str) -> AsyncIterator[None]:
    """The policy in force for `namespace` (its label set), removed on exit."""
    documents = deny_policy(namespace)
    for document in documents:
        await deployment.apply(api, document)
    try:
        await set_denial(api, namespace, True)
        await eventually(lambda: denies_targets(api, namespace), what="the test's policy in force")
        yield
    finally:
        for document in reversed(documents):
            with contextlib.suppress(errors.NotFound):
                await api.delete(deployment.KINDS[document["kind"]], document["metadata"]["name"])


@pytest.fixture
async def deployed_controllers(
    kubevirt_api: ApiClient, kubevirt_cluster: ClusterInfo
) -> AsyncIterator[ControllerApp]:
    """The controllers as their service account with the chart's RBAC, started."""
    await deployment.apply_rbac(kubevirt_api)
    async with deployment.controllers_as_account(kubevirt_api, kubevirt_cluster) as app:
        yield app


@pytest.fixture
async def kubevirt(
    kubevirt_api: ApiClient, kubevirt_cluster: ClusterInfo, kubevirt_namespace: str
) -> AsyncIterator[VirtControllerDriver]:
    driver = VirtControllerDriver(
        kubevirt_api,
        kubevirt_version=str(kubevirt_cluster.kubevirt_version),
        namespaces=frozenset({kubevirt_namespace}),
        timings=HandlerTimings(migration=0.3, source_shutdown=0.5, target_exit=0.5),
    )
    async with driver:
        yield driver


async def failures_on(api: ApiClient, namespace: str, vmi_uid: str) -> int:
    """virt-controller's failed creates on the VMI so far (each Event's count)."""
    listed = await api.list(EVENTS, namespace, field_selector=EVENT_SELECTOR)
    return sum(
        int(e.get("count") or 1)
        for e in listed["items"]
        if (e.get("involvedObject") or {}).get("uid") == vmi_uid
    )


async def target_pods(api: ApiClient, namespace: str, migration_uid: str) -> list[Any]:
    listed = await api.list(
        PODS, namespace, label_selector=f"{LABEL_MIGRATION_JOB}={migration_uid}"
    )
    return list(listed["items"])


async def test_a_target_pod_create_denied_for_a_reason_other_than_quota_is_retried_at_once(
    kubevirt_api: ApiClient,
    kubevirt_namespace: str,
    kubevirt: VirtControllerDriver,
    deployed_controllers: ControllerApp,
) -> None:
    api, namespace = kubevirt_api, kubevirt_namespace
    (await kubevirt.create_vm(VMSpec("vm1", cores=1, memory="1Gi"))).check()
    vmi_uid = (await api.get(VIRTUAL_MACHINE_INSTANCES, "vm1", namespace))["metadata"]["uid"]
    retry = deployed_controllers.target_retry
    async with denial(api, namespace):
        name = await kubevirt.migrate("vm1")
        key = f"{namespace}/{name}"

        def second_retry_failed() -> bool:
            state = retry.states.get(key)
            return state is not None and state.retries == 2 and bool(state.seen)

        await eventually(second_retry_failed, timeout=30, interval=0.01, what="retry 2 failed")
        noticed = asyncio.get_running_loop().time()
        failed = await failures_on(api, namespace, vmi_uid)
        await set_denial(api, namespace, False)

    migration = await api.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, name, namespace)
    uid = migration["metadata"]["uid"]
    pods = await eventually(
        lambda: target_pods(api, namespace, uid), timeout=30, interval=0.05, what="a target pod"
    )
    arrived = asyncio.get_running_loop().time() - noticed
    assert len(pods) == 1
    assert own_backoff(failed) >= 2.0, f"only {failed} failures: the limiter was not slow yet"
    assert arrived < own_backoff(failed) - MARGIN, (arrived, failed)
    print(
        f"target pod {arrived:.2f}s after retry 2 failed; virt-controller's own: {failed} failures"
    )
    migration = await api.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, name, namespace)
    assert migration["metadata"]["annotations"][ANNOTATION_RETRIES] == str(MAX_RETRIES)

    async def told() -> list[Any] | None:
        events = await api.list(
            EVENTS, namespace, field_selector=f"involvedObject.uid={uid},reason={REASON_RETRIED}"
        )
        count = sum(int(e.get("count") or 1) for e in events["items"])
        return list(events["items"]) if count == MAX_RETRIES else None

    events = await eventually(told, what=f"{MAX_RETRIES} {REASON_RETRIED} Events")
    assert all("ValidatingAdmissionPolicy" in e["message"] for e in events), events
    retried = deployed_controllers.registry.get_sample_value(
        "harvester_quota_target_pod_retries_total", {"outcome": "retried"}
    )
    assert retried == MAX_RETRIES


FORGED = 'Error creating pod: Operation cannot be fulfilled on resourcequotas "q": forged'
CREATE_EVENTS = [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]


def forged_failure(name: str, event_namespace: str, vmi: Object, message: str) -> Object:
    """A FailedCreate Event as virt-controller writes it, naming `vmi` (its real uid)."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    meta = vmi["metadata"]
    return {
        "metadata": {"name": name, "namespace": event_namespace},
        "involvedObject": {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
        },
        "reason": "FailedCreate",
        "message": message,
        "type": "Warning",
        "count": 1,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "source": {"component": "virtualmachine-controller"},
    }


async def annotated(api: ApiClient, namespace: str, name: str, retries: int) -> bool:
    migration = await api.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, name, namespace)
    return (migration["metadata"].get("annotations") or {}).get(ANNOTATION_RETRIES) == str(retries)


def counted(app: ControllerApp, outcome: str) -> float | None:
    return app.registry.get_sample_value(
        "harvester_quota_target_pod_retries_total", {"outcome": outcome}
    )


async def test_forged_failed_creates_cost_at_most_three_writes_and_cannot_cross_namespaces(
    kubevirt_api: ApiClient,
    kubevirt_cluster: ClusterInfo,
    kubevirt_namespace: str,
    kubevirt: VirtControllerDriver,
    deployed_controllers: ControllerApp,
) -> None:
    api, namespace = kubevirt_api, kubevirt_namespace
    slots = {"spec": {"configuration": {"migrations": {"parallelMigrationsPerCluster": 0}}}}
    await api.patch(KUBEVIRTS, KUBEVIRT_NAME, slots, KUBEVIRT_NAMESPACE)  # the driver restores it
    (await kubevirt.create_vm(VMSpec("vm1", cores=1, memory="1Gi"))).check()
    vmi = await api.get(VIRTUAL_MACHINE_INSTANCES, "vm1", namespace)
    name = await kubevirt.migrate("vm1")
    retry = deployed_controllers.target_retry

    async with (
        fresh_namespace_async(api, "attacker") as elsewhere,
        tenant(api, kubevirt_cluster, elsewhere) as attacker,
        tenant(api, kubevirt_cluster, namespace) as owner,
    ):
        await grant(api, attacker, "events", CREATE_EVENTS)
        await grant(api, owner, "events", CREATE_EVENTS)
        across = forged_failure("across", elsewhere, vmi, FORGED)
        with pytest.raises(errors.Invalid, match=r"does not match event\.namespace"):
            await attacker.api.create(EVENTS, across, elsewhere)  # refused before it reaches us

        for number in range(1, MAX_RETRIES + 2):  # one at a time: a burst is answered once
            forged = forged_failure(f"flood-{number}", namespace, vmi, FORGED)
            await owner.api.create(EVENTS, forged, namespace)
            if number <= MAX_RETRIES:
                await eventually(
                    lambda n=number: annotated(api, namespace, name, n), what=f"retry {number}"
                )
        await eventually(lambda: counted(deployed_controllers, "exhausted") == 1, what="told")
        extra = [
            await owner.api.create(
                EVENTS, forged_failure(f"more-{index}", namespace, vmi, FORGED), namespace
            )
            for index in range(10)
        ]
        state = retry.states[f"{namespace}/{name}"]
        extras = {(e["metadata"]["uid"], 1) for e in extra}

        async def rest_answered() -> bool:
            # A decision reads the newest FAILURES_READ failures (second review, M3): those,
            # the extras among them, are answered without a write.
            stored = await api.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, name, namespace)
            read = {f.ident for f in retry.failures_for(stored)}
            return bool(read & extras) and read <= state.answered

        await eventually(rest_answered, what="the rest answered, unwritten")
    assert await annotated(api, namespace, name, MAX_RETRIES)
    assert counted(deployed_controllers, "retried") == MAX_RETRIES
    assert counted(deployed_controllers, "exhausted") == 1
    migration = await api.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, name, namespace)
    assert migration["status"]["phase"] == "Pending", "it still waits: nothing else was changed"
