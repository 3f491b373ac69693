"""Issue 25, "a tenant who lies gets nothing": a tenant with `edit` and `kubevirt.io:edit` (and
`kubevirt.io:migrate`) in its namespace, as its own service account, tries each way the issue
found past its base quota, against the product as deployed: the controllers and the webhook as
their service accounts with the chart's RBAC, the webhook called by the API server over TLS with
the shipped rules (and the shipped admission policies, where the chart has them), and KubeVirt's
real virt-controller creating every launcher and target pod (the virt-handler stand-in does the
node side). The cluster administrator only sets the quota and its base.

Each attack is met the same way: the tenant's usage never ends above its base (pod usage without
the targets of migrations in flight, as Kubernetes' quota evaluator charges it), spec.hard is
never raised beyond the base plus one room per VMI that really migrates (every spec.hard the
quota had, from a watch), KubeVirt's real target pod gets in and the migration completes, and the
attempt is refused with a message that says what happened.

Most attacks need a moment in which a migration holds its room and its target pod does not exist
yet: a migration queued behind others, as in a drain. Here virt-controller's migration slots are
closed (parallelMigrationsPerCluster 0) while the tenant's migration is created, so it waits
Pending with its room held, and opened again when the attack is over.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
from harvester_quota.apis.kubevirt import (
    FINAL_PHASES,
    KUBEVIRTS,
    LABEL_CREATED_BY,
    LABEL_KUBEVIRT,
    LABEL_MIGRATION_JOB,
    LAUNCHER,
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
    VIRTUAL_MACHINE_INSTANCES,
    VIRTUAL_MACHINES,
)
from harvester_quota.app import ControllerApp
from harvester_quota.generic import config as client_config
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import EVENTS, NAMESPACES, PODS, Object, Resource
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.localcluster.cluster import VIRT_CONTROLLER_KUBECONFIG
from harvester_quota.testbench.sim.kubevirt import Outcome, VMSpec
from harvester_quota.testbench.virtcontroller import (
    EXCEEDED_QUOTA,
    KUBEVIRT_NAME,
    KUBEVIRT_NAMESPACE,
    VirtControllerDriver,
)
from harvester_quota.util import resources
from harvester_quota.util.annotations import LABEL_ROOM_HELD
from harvester_quota.util.hotplug import hot_plugged
from harvester_quota.util.podusage import pod_quota_usage
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.resources import ResourceList, parse_resource_list_leniently
from harvester_quota.webhook.server import WebhookServer

from tests.helpers import caught_up, eventually
from tests.integration import deployment
from tests.integration.kubevirt_by_hand import KubeVirtByHand
from tests.integration.tenant import Access, Tenant, grant, small_pod, tenant
from tests.integration.tenant import vm_object as tenant_vm_object
from tests.integration.test_controllers_on_kubevirt import (
    MIGRATION_TIMEOUT,
    SpecHistory,
    kubevirt,
    kv,
)
from tests.integration.test_target_room import RejectionWatch

pytestmark = pytest.mark.integration
__all__ = ["kubevirt", "kv"]  # fixtures: the real virt-controller and the admin's quota helpers

BASE: Final = {"limits.cpu": "3", "limits.memory": "5000Mi"}
RANCHER_BASE: Final = {"limitsCpu": "3000m", "limitsMemory": "5000Mi"}
VM1: Final = VMSpec("vm1", cores=2, memory="4Gi")
"""The v1.7.0 seed's VM: its launcher pod uses 2015m / 4797464313 of the 3 / 5000Mi base."""
START_TIMEOUT: Final = 60.0
SLOTS: Final = 8
"""virt-controller's parallelMigrationsPerCluster as the `kubevirt` fixture configures it."""
NOWHERE: Final = {"harvester-quota.io/test-node": "none"}
"""A node selector no node matches: the pod stays Pending, unscheduled, charged by quota."""
ROOM_DENIAL: Final = "room reserved for the live migration of vm1"
"""What the webhook's denial of a pod that would take vm1's room says (pod/validator.py)."""


# The shipped admission policies ----------------------------------------------------------------


def ships_admission_policies() -> bool:
    """Whether the shipped manifest has ValidatingAdmissionPolicies (the webhook's stack applies
    them with the webhook configuration, narrowed to the test's namespace the same way)."""
    return any(d["kind"] == "ValidatingAdmissionPolicy" for d in deployment.documents())


async def policies_in_force(probe: Tenant) -> None:
    """Returns once the shipped policies deny what they are for (the API server compiles a new
    policy and learns of its binding a moment after they are stored): a dry run of `probe`'s
    pod labelled as a migration target. Nothing to wait for if none is shipped."""
    if ships_admission_policies():
        await eventually(lambda: _policy_denies(probe), what="the shipped policies in force")


async def _policy_denies(probe: Tenant) -> bool:
    pod = small_pod("policy-probe", "10m", "16Mi", {LABEL_MIGRATION_JOB: "probe"})
    try:
        await probe.api.create(PODS, pod, probe.namespace, dry_run=True)
    except errors.ApiError as denied:
        return "ValidatingAdmissionPolicy" in denied.message
    return False


# The stack -------------------------------------------------------------------------------------


@dataclass
class Stack:
    """Everyone in one test: the administrator (quota and base only), the tenant, the product as
    deployed, and KubeVirt (the real virt-controller, observed through the driver)."""

    admin: KubeVirtByHand
    tenant: Tenant
    controllers: ControllerApp
    webhook: WebhookServer
    kubevirt: VirtControllerDriver

    @property
    def api(self) -> ApiClient:
        """The administrator's client, for observing (never for the tenant's moves)."""
        return self.admin.api

    @property
    def namespace(self) -> str:
        return self.admin.namespace


@pytest.fixture
async def webhook(
    kubevirt_api: ApiClient, kubevirt_cluster: ClusterInfo, kubevirt_namespace: str, tmp_path: Path
) -> AsyncIterator[WebhookServer]:
    """The chart's RBAC, and one webhook replica as its service account, registered with the
    shipped configuration (narrowed to the test's namespace)."""
    async with deployment.webhook_for_virt_controller(
        kubevirt_api, kubevirt_cluster, kubevirt_namespace, tmp_path
    ) as server:
        yield server


@pytest.fixture
async def controllers(
    request: pytest.FixtureRequest,
    kubevirt_api: ApiClient,
    kubevirt_cluster: ClusterInfo,
    webhook: WebhookServer,
) -> AsyncIterator[ControllerApp]:
    """The controllers as their service account (the chart's RBAC, applied with the webhook);
    an indirect parameter gives Options fields to change."""
    told: dict[str, Any] = getattr(request, "param", {})
    async with deployment.controllers_as_account(kubevirt_api, kubevirt_cluster, **told) as app:
        yield app


@pytest.fixture
async def the_tenant(
    kubevirt_api: ApiClient, kubevirt_cluster: ClusterInfo, kubevirt_namespace: str
) -> AsyncIterator[Tenant]:
    async with tenant(kubevirt_api, kubevirt_cluster, kubevirt_namespace) as found:
        yield found


@pytest.fixture
async def stack(
    kv: KubeVirtByHand,
    the_tenant: Tenant,
    controllers: ControllerApp,
    webhook: WebhookServer,
    kubevirt: VirtControllerDriver,
) -> Stack:
    """The product as deployed around the tenant, the shipped admission policies in force."""
    await policies_in_force(the_tenant)
    return Stack(kv, the_tenant, controllers, webhook, kubevirt)


# virt-controller's migration slots ----------------------------------------------------------------


async def set_migration_slots(api: ApiClient, slots: int) -> None:
    """The KubeVirt CR's parallelMigrationsPerCluster: with 0, virt-controller leaves every new
    migration Pending without a target pod (it looks again every few seconds); the driver
    restores the CR's configuration when the test ends."""
    body = {"spec": {"configuration": {"migrations": {"parallelMigrationsPerCluster": slots}}}}
    await api.patch(KUBEVIRTS, KUBEVIRT_NAME, body, KUBEVIRT_NAMESPACE)


async def vm1_behind_closed_slots(stack: Stack) -> ResourceList:
    """virt-controller's migration slots closed, then the tenant's vm1 started (seconds in which
    virt-controller learns of the closed slots); returns vm1's room."""
    await set_migration_slots(stack.api, 0)
    _, source = await start_vm(stack)
    return room_of(source)


async def queued_migration(stack: Stack, vmi_name: str, room: ResourceList) -> Object:
    """The tenant migrates `vmi_name` while virt-controller's slots are closed (see
    vm1_behind_closed_slots): returns the migration once its room is in spec.hard, no target pod
    made yet."""
    migration = await stack.tenant.migrate(vmi_name)
    raised = resources.add(parse_resource_list_leniently(BASE), room)
    await eventually(lambda: hard_is(stack, raised), what=f"the room of {vmi_name} in spec.hard")
    assert await target_pods(stack) == [], "the migration waits: no target pod yet"
    return migration


async def release_migrations(stack: Stack) -> None:
    await set_migration_slots(stack.api, SLOTS)


# Reading the namespace ----------------------------------------------------------------------------


async def quota_hard(stack: Stack) -> ResourceList:
    return parse_resource_list_leniently(
        ((await stack.admin.quota()).get("spec") or {}).get("hard")
    )


async def hard_is(stack: Stack, expected: Mapping[str, Quantity]) -> bool:
    return resources.equal(resources.mask(await quota_hard(stack), expected), dict(expected))


async def settled(stack: Stack) -> str:
    """The quota and pods once the controllers have done all they will about the namespace as it
    is now: what a failure message shows."""
    await eventually(lambda: caught_up(stack.controllers, stack.namespace), what="caught up")
    quota = await stack.admin.quota()
    pods = (await stack.api.list(PODS, stack.namespace))["items"]
    shown = [
        f"{p['metadata']['name']}({(p.get('status') or {}).get('phase')}"
        f"{', target' if LABEL_MIGRATION_JOB in (p['metadata'].get('labels') or {}) else ''})"
        for p in pods
    ]
    return (
        f"spec.hard={quota['spec'].get('hard')} status.used={(quota.get('status') or {}).get('used')}"
        f" pods={shown}"
    )


async def target_pods(stack: Stack) -> list[str]:
    """Pods KubeVirt made as migration targets (labelled, not the tenant's)."""
    listed = await stack.api.list(PODS, stack.namespace, label_selector=LABEL_MIGRATION_JOB)
    return [
        p["metadata"]["name"]
        for p in listed["items"]
        if p["metadata"]["name"] not in stack.tenant.pods
    ]


async def in_flight_targets(stack: Stack) -> frozenset[str]:
    """KubeVirt's target pods of the migrations not finished yet: a room, not the tenant's."""
    migrations = (await stack.api.list(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, stack.namespace))[
        "items"
    ]
    in_flight = {
        m["metadata"]["uid"]
        for m in migrations
        if (m.get("status") or {}).get("phase") not in FINAL_PHASES
    }
    listed = await stack.api.list(PODS, stack.namespace, label_selector=LABEL_MIGRATION_JOB)
    return frozenset(
        p["metadata"]["name"]
        for p in listed["items"]
        if p["metadata"]["labels"][LABEL_MIGRATION_JOB] in in_flight
        and p["metadata"]["name"] not in stack.tenant.pods
    )


async def usage_above_base(stack: Stack) -> ResourceList:
    """What the namespace's pods are charged now beyond the base, key by key (nothing: within
    it), the targets of migrations in flight aside."""
    excluded = await in_flight_targets(stack)
    now = datetime.datetime.now(datetime.UTC)
    pods = (await stack.api.list(PODS, stack.namespace))["items"]
    used = resources.total(
        pod_quota_usage(p, now=now) for p in pods if p["metadata"]["name"] not in excluded
    )
    base = parse_resource_list_leniently(BASE)
    above = resources.subtract_non_negative(resources.mask(used, base), base)
    return {key: value for key, value in above.items() if not value.is_zero()}


async def within_base(stack: Stack) -> None:
    """Waits until the namespace is within its base (a finished migration's source pod exits a
    moment after); fails with what is above it."""
    try:
        await eventually(lambda: _none_above(stack), timeout=60, what="usage within the base")
    except AssertionError:
        above = resources.to_json_dict(await usage_above_base(stack))
        raise AssertionError(
            f"the tenant ended above its base by {above}: {await settled(stack)}"
        ) from None


async def _none_above(stack: Stack) -> bool:
    return not await usage_above_base(stack)


def room_of(pod: Object) -> ResourceList:
    """A migration's room: what its VM's launcher pod is charged, on the base's keys."""
    return resources.mask(pod_quota_usage(pod), BASE)


def raised_beyond(history: SpecHistory, ceiling: Mapping[str, Quantity]) -> list[dict[str, str]]:
    """Every spec.hard the quota had that exceeds `ceiling` on some key."""
    return [
        hard
        for hard in history.hards
        if not resources.less_or_equal(parse_resource_list_leniently(hard), dict(ceiling))[0]
    ]


def base_plus(*rooms: Mapping[str, Quantity]) -> ResourceList:
    return resources.total([parse_resource_list_leniently(BASE), *rooms])


# The tenant's VMs --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    """What became of the launcher pod virt-controller makes for a VMI: admitted (`pod`) or
    refused (`refusal`, the message of its FailedCreate event)."""

    pod: Object | None = None
    refusal: str | None = None


async def start_vm(stack: Stack, spec: VMSpec = VM1) -> tuple[Object, Object]:
    """The tenant creates a running VM; returns its VMI and launcher pod once it runs."""
    await stack.tenant.create_vm(spec, **await _rendering(stack))
    found = await eventually(
        lambda: _running(stack, spec.name), timeout=START_TIMEOUT, what=f"VM {spec.name} running"
    )
    vmi, pod = found
    return vmi, pod


async def _rendering(stack: Stack) -> dict[str, Any]:
    return {
        "kubevirt_version": stack.kubevirt.kubevirt_version,
        "ratio": await stack.kubevirt.overhead_ratio(),
    }


async def _running(stack: Stack, name: str) -> tuple[Object, Object] | None:
    try:
        vmi = await stack.api.get(VIRTUAL_MACHINE_INSTANCES, name, stack.namespace)
    except errors.NotFound:
        return None
    if (vmi.get("status") or {}).get("phase") != "Running":
        return None
    launch = await launch_of(stack, vmi["metadata"]["uid"])
    return (vmi, launch.pod) if launch.pod is not None else None


async def start_vmi(stack: Stack, spec: VMSpec) -> Object:
    """The tenant creates a VMI without a VM (no VM webhook on that path)."""
    return await stack.tenant.create_vmi(spec, **await _rendering(stack))


async def launch_of(stack: Stack, vmi_uid: str) -> Launch:
    """The VMI's launcher pod if one was admitted, else the last refusal virt-controller
    reported, else neither (yet)."""
    selector = f"{LABEL_CREATED_BY}={vmi_uid}"
    pods = (await stack.api.list(PODS, stack.namespace, label_selector=selector))["items"]
    if pods:
        return Launch(pod=pods[0])
    events = await stack.api.list(
        EVENTS, stack.namespace, field_selector=f"involvedObject.uid={vmi_uid},reason=FailedCreate"
    )
    messages = [str(e.get("message") or "") for e in events["items"]]
    return Launch(refusal=messages[-1]) if messages else Launch()


async def decided(stack: Stack, vmi_uid: str) -> Launch:
    """Waits until virt-controller's launcher pod for the VMI is admitted or refused."""
    return await eventually(
        lambda: _decided(stack, vmi_uid),
        timeout=START_TIMEOUT,
        what="virt-controller's launcher pod admitted or refused",
    )


async def _decided(stack: Stack, vmi_uid: str) -> Launch | None:
    launch = await launch_of(stack, vmi_uid)
    return launch if launch.pod is not None or launch.refusal is not None else None


async def refusal(action: Awaitable[object]) -> errors.ApiError | None:
    """The API server's refusal of the tenant's request, None if it was carried out."""
    try:
        await action
    except errors.ApiError as refused:
        if refused.status in (403, 422):
            return refused
        raise
    return None


async def completes(stack: Stack, migration: Object) -> None:
    name = migration["metadata"]["name"]
    record = await stack.kubevirt.wait_migration(name, timeout=MIGRATION_TIMEOUT)
    assert record.outcome is Outcome.SUCCEEDED, record.as_dict()


async def back_to_the_base(stack: Stack) -> None:
    base = parse_resource_list_leniently(BASE)
    await eventually(lambda: hard_is(stack, base), timeout=60, what="spec.hard back to the base")


def names_a_protected_label(message: str) -> bool:
    return LABEL_MIGRATION_JOB in message or LABEL_CREATED_BY in message


# The identity ------------------------------------------------------------------------------------


async def test_the_tenant_runs_vms_and_migrations_but_may_not_write_quotas_or_namespaces(
    the_tenant: Tenant,
) -> None:
    """The attacker of issue 25 as a real identity: its own service account, which may create
    pods, VMs, VMIs and migrations in its namespace and read events there, and may not touch a
    ResourceQuota or a Namespace. Kubernetes 1.36's `edit` has no pods/resize: the resize test
    grants it on its own."""
    whoami = await the_tenant.api.create(
        Resource("authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview", False),
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    assert whoami["status"]["userInfo"]["username"] == the_tenant.user
    may = [
        Access("create", "pods"),
        Access("patch", "pods"),
        Access("create", "virtualmachines", "kubevirt.io"),
        Access("create", "virtualmachineinstances", "kubevirt.io"),
        Access("create", "virtualmachineinstancemigrations", "kubevirt.io"),
        Access("delete", "virtualmachineinstancemigrations", "kubevirt.io"),
        Access("list", "events"),
    ]
    may_not = [
        Access("update", "resourcequotas"),
        Access("patch", "resourcequotas"),
        Access("patch", "namespaces"),
        Access("patch", "pods", subresource="resize"),
        Access("patch", "pods", subresource="status"),
    ]
    assert [str(a) for a in may if not await the_tenant.may(a)] == []
    assert [str(a) for a in may_not if await the_tenant.may(a)] == []


# The attacks -------------------------------------------------------------------------------------


async def test_a_new_vmis_launcher_pod_is_kept_out_of_a_held_room_and_the_real_migration_completes(
    stack: Stack,
) -> None:
    """Attack 1: while vm1's migration holds room (no target pod yet), the tenant creates a VMI of
    vm1's size. virt-controller's launcher pod for it is refused by the webhook (FailedCreate on
    the VMI, naming vm1's room) instead of taking the room; vm1's real target gets in, and the
    namespace never ends above its base."""
    await stack.admin.create_quota(BASE)
    room = await vm1_behind_closed_slots(stack)
    async with SpecHistory(stack.api, stack.namespace) as history:
        migration = await queued_migration(stack, "vm1", room)
        intruder = await start_vmi(stack, VMSpec("intruder", cores=2, memory="4Gi"))
        launch = await decided(stack, intruder["metadata"]["uid"])
        admitted = None if launch.pod is None else launch.pod["metadata"]["name"]
        assert admitted is None, (
            f"virt-controller's launcher pod {admitted} for the tenant's new VMI was admitted "
            f"into vm1's room: {await settled(stack)}"
        )
        assert ROOM_DENIAL in str(launch.refusal), launch.refusal
        await release_migrations(stack)
        await completes(stack, migration)
        await back_to_the_base(stack)
    assert raised_beyond(history, base_plus(room)) == [], history.hards
    await within_base(stack)


async def test_a_tenant_pod_labelled_as_a_migration_target_is_denied_and_the_real_migration_completes(
    stack: Stack,
) -> None:
    """Attack 2, at create: while vm1's migration holds room, the tenant creates a small pod
    labelled kubevirt.io/migrationJobUID with that migration's uid. The API server refuses it
    (the shipped admission policy: only KubeVirt's controller sets that label); the room stays
    vm1's, KubeVirt's real target gets in and the migration completes."""
    await forging_the_target_label_is_refused(
        stack,
        lambda labels: stack.tenant.create_pod("decoy", cpu="100m", memory="64Mi", labels=labels),
        "the tenant's pod labelled as vm1's target was admitted",
    )


async def test_relabelling_a_tenant_pod_as_a_migration_target_is_denied_and_the_real_migration_completes(
    stack: Stack,
) -> None:
    """Attack 2, by relabelling: an ordinary pod of the tenant (within the base, made before the
    migration) is given kubevirt.io/migrationJobUID with the uid of vm1's migration while it holds
    room. The API server refuses the update; KubeVirt's real target gets in."""
    await stack.tenant.create_pod("bystander", cpu="100m", memory="64Mi")
    await forging_the_target_label_is_refused(
        stack,
        lambda labels: stack.tenant.label_pod("bystander", labels),
        "the tenant relabelled its pod as vm1's target",
    )


async def forging_the_target_label_is_refused(
    stack: Stack, forge: Callable[[dict[str, str]], Awaitable[Any]], admitted: str
) -> None:
    """vm1's migration holds room; `forge` (given the forged labels) is refused by the API
    server naming the protected label; the migration completes, never raised beyond its room."""
    await stack.admin.create_quota(BASE)
    room = await vm1_behind_closed_slots(stack)
    async with SpecHistory(stack.api, stack.namespace) as history:
        migration = await queued_migration(stack, "vm1", room)
        denied = await refusal(forge({LABEL_MIGRATION_JOB: migration["metadata"]["uid"]}))
        assert denied is not None, f"{admitted}: {await settled(stack)}"
        print(f"the refusal: {denied}")
        assert names_a_protected_label(denied.message), denied.message
        await release_migrations(stack)
        await completes(stack, migration)
        await back_to_the_base(stack)
    assert raised_beyond(history, base_plus(room)) == [], history.hards
    await within_base(stack)


async def test_stripping_or_forging_the_launcher_label_is_denied_and_the_real_migration_completes(
    stack: Stack,
) -> None:
    """Review 25, finding 5: the label kubevirt.io=virt-launcher makes a pod a VMI's launcher for
    the controller and the webhook, and no rule protected it. Stripped from vm1's source pod, it
    left vm1's migration without room (the VMI no longer ran, as far as the plan could tell);
    from a target mid-migration it raised hard to the base plus two rooms. The tenant strips it
    from the source (before and while the migration holds room), changes it, and puts it on a pod
    of its own: the API server refuses each (the shipped admission policy); vm1's room is held,
    its real target gets in and the migration completes, never raised beyond one room."""
    await stack.admin.create_quota(BASE)
    await set_migration_slots(stack.api, 0)
    _, source = await start_vm(stack)
    room = room_of(source)
    name = source["metadata"]["name"]
    forged = await refusal(
        stack.tenant.create_pod("fake-launcher", cpu="100m", memory="64Mi", labels=LAUNCHER_LABEL)
    )
    assert forged is not None, "the tenant made a pod of its own a launcher"
    assert LAUNCHER_LABEL_TEXT in forged.message, forged.message
    for labels in ({LABEL_KUBEVIRT: None}, {LABEL_KUBEVIRT: "virt-handler"}):
        denied = await refusal(relabel(stack, name, labels))
        assert denied is not None, f"the tenant relabelled vm1's source {labels}"
        assert LAUNCHER_LABEL_TEXT in denied.message, denied.message
    async with SpecHistory(stack.api, stack.namespace) as history:
        migration = await queued_migration(stack, "vm1", room)
        denied = await refusal(relabel(stack, name, {LABEL_KUBEVIRT: None}))
        assert denied is not None, f"vm1's source stopped being a launcher: {await settled(stack)}"
        await release_migrations(stack)
        await completes(stack, migration)
        await back_to_the_base(stack)
    assert raised_beyond(history, base_plus(room)) == [], history.hards
    await within_base(stack)


LAUNCHER_LABEL: Final = {LABEL_KUBEVIRT: LAUNCHER}
LAUNCHER_LABEL_TEXT: Final = f"{LABEL_KUBEVIRT}={LAUNCHER}"
"""What the shipped policy's refusal names."""


async def relabel(stack: Stack, pod: str, labels: Mapping[str, str | None]) -> Object:
    """The tenant's merge patch of a pod's labels (None removes one)."""
    body = {"metadata": {"labels": dict(labels)}}
    return await stack.tenant.api.patch(PODS, pod, body, stack.namespace)


async def test_kubevirts_resize_of_a_pod_labelled_as_a_target_meets_the_pod_rules(
    stack: Stack, kubevirt_cluster: ClusterInfo
) -> None:
    """Review 25, finding 10: both pod rules left out every request of KubeVirt's identity for a
    pod labelled kubevirt.io/migrationJobUID, its in-place resizes (pods/resize) included, which
    migration-targets does not see: such a pod grew into a held room with no rule asked. While
    vm1's migration holds room, KubeVirt's identity grows a pod so labelled (a small one the
    administrator made, admitted within the base): the webhook refuses it naming vm1's room, and
    vm1's real target gets in."""
    await stack.admin.create_quota(BASE)
    room = await vm1_behind_closed_slots(stack)
    async with (
        SpecHistory(stack.api, stack.namespace) as history,
        kubevirts_client(kubevirt_cluster) as kubevirt_api,
    ):
        migration = await queued_migration(stack, "vm1", room)
        labelled = small_pod("labelled", "100m", "64Mi", {LABEL_MIGRATION_JOB: "elsewhere"})
        labelled["spec"]["nodeSelector"] = NOWHERE  # resizable on kwok (see the test above)
        await stack.api.create(PODS, labelled, stack.namespace)
        grown = [
            {"op": "replace", "path": f"/spec/containers/0/resources/{kind}/cpu", "value": "2"}
            for kind in ("requests", "limits")
        ]
        denied = await refusal(
            kubevirt_api.patch(
                PODS, "labelled", grown, stack.namespace, patch_type="json", subresource="resize"
            )
        )
        assert denied is not None, f"KubeVirt's resize grew into vm1's room: {await settled(stack)}"
        assert ROOM_DENIAL in denied.message, denied.message
        await stack.api.delete(PODS, "labelled", stack.namespace)
        await release_migrations(stack)
        await completes(stack, migration)
        await back_to_the_base(stack)
    assert raised_beyond(history, base_plus(room)) == [], history.hards
    await within_base(stack)


@contextlib.asynccontextmanager
async def kubevirts_client(cluster: ClusterInfo) -> AsyncIterator[ApiClient]:
    """A client with the identity the real virt-controller runs as (its client certificate)."""
    client = ApiClient(client_config.load(cluster.state_dir / VIRT_CONTROLLER_KUBECONFIG))
    try:
        yield client
    finally:
        await client.close()


async def test_a_forged_target_pod_from_before_the_policy_is_charged_to_the_base_and_the_real_target_gets_in(
    stack: Stack,
) -> None:
    """Attack 2 where the label got on anyway (a pod from before the admission policy, or one an
    administrator made): the controller counts as a migration's target only a pod KubeVirt made
    for that migration's VMI since the migration began. The forged pod is an ordinary pod charged
    to the base: vm1's room stays whole, KubeVirt's real target gets in and the migration
    completes. The administrator creates the pod here, standing for the one from before the
    policy (which does not apply to administrators): this is the controller's own rule."""
    await stack.admin.create_quota(BASE)
    room = await vm1_behind_closed_slots(stack)
    raised = base_plus(room)
    async with SpecHistory(stack.api, stack.namespace) as history:
        migration = await queued_migration(stack, "vm1", room)
        forged = {LABEL_MIGRATION_JOB: migration["metadata"]["uid"]}
        decoy = small_pod("decoy", "100m", "64Mi", forged)
        await stack.api.create(PODS, decoy, stack.namespace)
        state = await settled(stack)
        assert await hard_is(stack, raised), f"vm1's room is no longer whole: {state}"
        await release_migrations(stack)
        await completes(stack, migration)
        await back_to_the_base(stack)
    assert raised_beyond(history, raised) == [], history.hards
    await within_base(stack)


async def test_ten_migrations_of_one_vmi_hold_one_room_and_none_is_refused(
    stack: Stack,
) -> None:
    """Attack 3: the tenant creates ten migrations of vm1 at once (virt-api, which would
    refuse all but one, does not run here; created at once they race past it anyway). vm1 takes
    one room for the migrations under way however many name them: spec.hard never exceeds the
    base plus one room while they wait (ten rooms before), and plus two while KubeVirt runs
    them one after another (a finished one's source pod still shutting down beside the next
    one's target: two real pods beyond the VM's own); none is refused by quota, and the quota
    returns to its base. Ten, not the unit test's twenty (test_rooms_against_lies.py): KubeVirt
    runs them one after another, 5-8 s each here, and twenty took 158 s of the suite."""
    await stack.admin.create_quota(BASE)
    room = await vm1_behind_closed_slots(stack)
    async with (
        SpecHistory(stack.api, stack.namespace) as history,
        RejectionWatch(stack.api, stack.namespace) as rejections,
    ):
        created = await asyncio.gather(*(stack.tenant.migrate("vm1") for _ in range(10)))
        names = [m["metadata"]["name"] for m in created]
        # While they all wait (the slots closed: none runs, so none has finished and no second
        # real pod exists), vm1 holds one room. With the slots open the first could finish by
        # now and the next start beside its source pod: two rooms, rightly (failed once so).
        await eventually(lambda: hard_is(stack, base_plus(room)), what="vm1's one room")
        await settled(stack)
        assert raised_beyond(history, base_plus(room)) == [], (
            f"ten migrations of vm1: {history.hards}"
        )
        await release_migrations(stack)
        outcomes = await all_finished(stack, names)
        await back_to_the_base(stack)
        await eventually(lambda: rejections.seen >= set(names), what="every migration watched")
    print(f"outcomes of the ten: {sorted(str(o) for o in outcomes)}")
    assert Outcome.SUCCEEDED in outcomes, outcomes
    assert rejections.rejected == set(), "no migration was refused by quota"
    assert raised_beyond(history, base_plus(room, room)) == [], history.hards
    await within_base(stack)


async def all_finished(stack: Stack, names: list[str]) -> list[Outcome | None]:
    """Waits until KubeVirt has finished every one of the migrations (one after another: about
    five seconds each here, more on a loaded machine); returns their outcomes."""

    def outcomes() -> list[Outcome | None]:
        records = [stack.kubevirt.records.get(stack.namespace, name) for name in names]
        return [None if record is None else record.outcome for record in records]

    def done() -> bool:
        return None not in outcomes()

    finished = await stack.kubevirt.records.wait_for(done, MIGRATION_TIMEOUT * len(names) / 4)
    assert finished, f"not all finished: {outcomes()}"
    return outcomes()


async def test_a_migration_of_a_vmi_that_never_started_raises_nothing_and_the_vmi_stays_out(
    stack: Stack,
) -> None:
    """Attack 3, never started: the tenant creates a VMI too big for its base (4 cores, 8Gi; a VMI
    has no VM webhook), virt-controller's launcher pod is refused by quota, and the tenant then
    migrates it. A VMI without a launcher pod that counts gets no room: spec.hard stays at the
    base, so the VMI's launcher pod stays out."""
    await stack.admin.create_quota(BASE)
    big = await start_vmi(stack, VMSpec("big", cores=4, memory="8Gi"))
    uid = big["metadata"]["uid"]
    launch = await decided(stack, uid)
    assert launch.pod is None and EXCEEDED_QUOTA in str(launch.refusal), launch
    async with SpecHistory(stack.api, stack.namespace) as history:
        await stack.tenant.migrate("big")
        state = await settled(stack)
        assert raised_beyond(history, base_plus()) == [], f"a room for a VMI not running: {state}"
    assert (await launch_of(stack, uid)).pod is None, "the big VMI's launcher pod got in"
    assert raised_beyond(history, base_plus()) == [], history.hards
    await within_base(stack)


async def test_growing_a_pod_in_place_into_a_held_room_is_denied_and_the_real_migration_completes(
    stack: Stack,
) -> None:
    """Attack 5a: a tenant pod within the base grows in place (pods/resize, GA in Kubernetes
    1.35) while vm1's migration holds room. The webhook checks the resize like a create and
    denies it, naming vm1's room; vm1's real target gets in.

    Kubernetes 1.36's `edit` does not grant pods/resize, so the tenant gets it from a Role of its
    own here (the issue's "optionally pods/resize"). kwok reports a running container without
    the resources a resize-capable kubelet adds to its status, which the API server takes for a
    node that cannot resize ("Pod running on node without support for resize"); so the pod
    waits unscheduled (a node selector no node has), which the API server lets resize, and which
    quota charges as it would a running one."""
    await stack.admin.create_quota(BASE)
    resize = {"apiGroups": [""], "resources": ["pods/resize"], "verbs": ["patch", "update"]}
    await grant(stack.api, stack.tenant, "pod-resizer", [resize])
    room = await vm1_behind_closed_slots(stack)
    await stack.tenant.create_pod("grower", cpu="100m", memory="64Mi", node_selector=NOWHERE)
    async with SpecHistory(stack.api, stack.namespace) as history:
        migration = await queued_migration(stack, "vm1", room)
        denied = await refusal(stack.tenant.resize_pod("grower", cpu="2"))
        assert denied is not None, f"the tenant's pod grew into vm1's room: {await settled(stack)}"
        assert ROOM_DENIAL in denied.message, denied.message
        await release_migrations(stack)
        await completes(stack, migration)
        await back_to_the_base(stack)
    assert raised_beyond(history, base_plus(room)) == [], history.hards
    await within_base(stack)


async def test_with_the_webhook_down_no_tenant_pod_gets_into_a_rancher_namespaces_held_room(
    stack: Stack,
) -> None:
    """Attack 6: a Rancher namespace whose quota the controller raises directly, where no
    namespace write may be made while a raise stands (Rancher's agent would reset it). It was
    never labelled room-held, so its rooms met the pods rule that fails open: with the webhook
    down, each migration let a room's worth of tenant pods in and the next raise stood on them
    (+1 room per migration, period after period). Now the controller labels it between rooms and
    keeps the label: with the webhook down while vm1's migration holds room, every tenant pod is
    refused, vm1's real target gets in, and the quota comes back to the base with nothing above
    it."""
    await stack.admin.set_rancher_base(RANCHER_BASE)
    await stack.admin.create_quota(BASE)
    await eventually(lambda: _room_held_label_is(stack, "true"), what="labelled between rooms")
    room = await vm1_behind_closed_slots(stack)
    async with SpecHistory(stack.api, stack.namespace) as history:
        migration = await queued_migration(stack, "vm1", room)
        await stack.webhook.stop()
        for attempt in range(3):
            outcome = await _pod_attempt(stack, f"slipper-{attempt}")
            assert outcome == "webhook unreachable", f"{outcome}; {await settled(stack)}"
        await release_migrations(stack)
        await completes(stack, migration)
        await back_to_the_base(stack)
    assert raised_beyond(history, base_plus(room)) == [], history.hards
    assert await _room_held_label_is(stack, "true"), "the label stays between rooms"
    await within_base(stack)


async def _room_held_label_is(stack: Stack, value: str | None) -> bool:
    namespace = await stack.api.get(NAMESPACES, stack.namespace)
    return (namespace["metadata"].get("labels") or {}).get(LABEL_ROOM_HELD) == value


async def _pod_attempt(stack: Stack, name: str) -> str:
    """'admitted', 'webhook unreachable' (a fail-closed rule without its webhook) or why not."""
    try:
        await stack.tenant.create_pod(name, cpu="500m", memory="256Mi")
    except errors.ApiError as refused:
        if "failed calling webhook" in refused.message:
            return "webhook unreachable"
        return refused.message
    return "admitted"


@pytest.mark.parametrize("controllers", [{"rancher_direct_fail_closed": False}], indirect=True)
async def test_told_to_fail_open_pods_that_slip_into_a_held_room_never_raise_the_quota_further(
    stack: Stack,
) -> None:
    """Attack 6 where the operator chose availability (`--rancher-direct-fail-open`): the
    Rancher namespace stays unlabelled, so its pods rule fails open; the webhook goes down
    while vm1's migration holds room, and the tenant creates pods until quota admission
    refuses, again after each raise. The raise never follows them: spec.hard stays at most the
    base plus vm1's room, so what slipped in is at most that room; once the tenant gives the
    migration up, spec.hard is the base again."""
    await stack.admin.set_rancher_base(RANCHER_BASE)
    await stack.admin.create_quota(BASE)
    room = await vm1_behind_closed_slots(stack)
    assert await _room_held_label_is(stack, None), "told to fail open: never labelled"
    async with SpecHistory(stack.api, stack.namespace) as history:
        migration = await queued_migration(stack, "vm1", room)
        await stack.webhook.stop()
        slipped = await slip_in(stack)
        assert slipped, "with the webhook down and room held, pods got in (the attack's premise)"
        state = await settled(stack)
        print(f"{len(slipped)} pods slipped in; {state}")
        assert raised_beyond(history, base_plus(room)) == [], (
            f"{len(slipped)} pods slipped in and spec.hard followed them: {history.hards}; {state}"
        )
        assert resources.less_or_equal(await usage_above_base(stack), room)[0], state
        name = migration["metadata"]["name"]
        await stack.tenant.api.delete(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, name, stack.namespace)
        await back_to_the_base(stack)
    assert raised_beyond(history, base_plus(room)) == [], history.hards


async def slip_in(stack: Stack, *, most: int = 12) -> list[str]:
    """The tenant creates 500m / 256Mi pods until quota admission refuses one twice: once, and
    again after the controllers have done what they do about the pods in. Returns the pods
    admitted (at most `most`)."""
    admitted: list[str] = []
    refusals = 0
    for attempt in range(most + 2):
        name = f"slipper-{attempt}"
        try:
            await stack.tenant.create_pod(name, cpu="500m", memory="256Mi")
        except errors.Forbidden as refused:
            assert EXCEEDED_QUOTA in refused.message, refused.message
            refusals += 1
            if refusals == 2:
                break
            await settled(stack)
            continue
        admitted.append(name)
        if len(admitted) == most:
            break
    return admitted


async def test_hot_plugging_cpu_beyond_the_base_into_a_running_vm_is_denied(
    stack: Stack,
) -> None:
    """Review finding 4: with KubeVirt's LiveUpdate rollout, a tenant who raises a running VM's
    CPU sockets (within the maxSockets its VMI started with) makes KubeVirt migrate the VM into
    a larger target pod, a target like any other, so the VM came out above the base. The VM rule
    now checks the edit like an in-place resize. vm1 (2 cores, 1 socket; limits.cpu 2015m of
    the 3-CPU base) and a 500m pod leave 485m free; 1 -> 4 sockets adds 6 vCPUs, which KubeVirt
    adds to the VMI's CPU limit at 1000m / cpuAllocationRatio (10) each: +600m, which does not
    fit, and the API server refuses the edit with the webhook's reason; an edit that grows
    nothing passes. (A CPU hot-plug, not a memory one: KubeVirt hot-plugs memory only into a VMI
    whose status.memory virt-api's defaults wrote, and this cluster has no virt-api; and a
    Harvester VM's memory hot-plug grows its request, not its limit.)"""
    await stack.admin.create_quota(BASE)
    await stack.tenant.api.create(
        VIRTUAL_MACHINES, await hot_pluggable_vm(stack, VM1), stack.namespace
    )
    await eventually(lambda: _running(stack, VM1.name), timeout=START_TIMEOUT, what="vm1 running")
    vmi = await stack.api.get(VIRTUAL_MACHINE_INSTANCES, VM1.name, stack.namespace)
    assert vmi["spec"]["domain"]["cpu"].get("maxSockets") == 4, "the premise: hot-pluggable"
    await stack.tenant.create_pod("filler", cpu="500m", memory="64Mi")
    grow = {"spec": {"template": {"spec": {"domain": {"cpu": {"sockets": 4}}}}}}
    denied = await refusal(
        stack.tenant.api.patch(VIRTUAL_MACHINES, VM1.name, grow, stack.namespace)
    )
    assert denied is not None, "the tenant's VM grew past the base through a hot-plug"
    assert "hot-plugging its CPU or memory" in denied.message, denied.message
    assert "limits.cpu" in denied.message, denied.message
    label = {"metadata": {"labels": {"team": "b"}}}
    await stack.tenant.api.patch(VIRTUAL_MACHINES, VM1.name, label, stack.namespace)
    await within_base(stack)


async def hot_pluggable_vm(stack: Stack, spec: VMSpec) -> Object:
    """`spec` as the tenant's VM, its CPU sockets hot-pluggable up to 4 (maxSockets in the
    template: what virt-api's defaults set under LiveUpdate, which this cluster lacks)."""
    vm = tenant_vm_object(spec, stack.namespace, **await _rendering(stack))
    vm["spec"]["template"]["spec"]["domain"]["cpu"]["maxSockets"] = 4
    return vm


KUBEVIRT_FIRMWARE_UUIDS: Final = uuid.UUID("6a1a24a1-4061-4607-8bf4-a3963d0c5895")
"""virt-controller's firmware UUID namespace (CalculateLegacyUUID: a name-based SHA-1 UUID of
the VM's name). virt-controller writes that UUID into a VM's template once it has started it,
after recording the template it started from; on this cluster the two then differ, and v1.6.0
takes that difference for a change it cannot live-update (RestartRequired, so it never
hot-plugs). The VM is created with the UUID KubeVirt gives it, as any VM that ran before has it."""
SOCKET_ONLY: Final = VMSpec("vm1", cores=2, memory="4Gi")
"""Sized as vm1 (2 vCPUs, limits.cpu 2); its template then says 2 sockets and nothing of cores
or threads."""


async def socket_only_vm(stack: Stack) -> Object:
    """The tenant's VM whose template sets only sockets (2, hot-pluggable up to maxSockets 8),
    no cores and no threads: what a VM written by hand, not by Harvester's UI, may look like."""
    vm = tenant_vm_object(SOCKET_ONLY, stack.namespace, **await _rendering(stack))
    domain = vm["spec"]["template"]["spec"]["domain"]
    domain["cpu"] = {"sockets": 2, "maxSockets": 8, "model": "host-model"}
    domain["firmware"] = {"uuid": str(uuid.uuid5(KUBEVIRT_FIRMWARE_UUIDS, SOCKET_ONLY.name))}
    return vm


async def start_socket_only_vm(stack: Stack) -> tuple[Object, Object]:
    """The tenant starts `socket_only_vm`; returns its VMI and launcher pod once it runs,
    after checking what virt-controller made of the template: 2 sockets, cores and threads
    as the template left them (unset: no virt-api defaulting fills them in for a VMI that
    sets sockets, KubeVirt's SetDefaultGuestCPUTopology only fills an all-unset topology)."""
    await stack.tenant.api.create(VIRTUAL_MACHINES, await socket_only_vm(stack), stack.namespace)
    vmi, launcher = await eventually(
        lambda: _running(stack, SOCKET_ONLY.name), timeout=START_TIMEOUT, what="vm1 running"
    )
    cpu = vmi["spec"]["domain"]["cpu"]
    assert (cpu["sockets"], cpu.get("maxSockets")) == (2, 8), cpu
    assert "cores" not in cpu and "threads" not in cpu, cpu
    return vmi, launcher


async def cpu_allocation_ratio(stack: Stack) -> int:
    """KubeVirt's cpuAllocationRatio from its CR (10 unless set)."""
    cr = await stack.api.get(KUBEVIRTS, KUBEVIRT_NAME, KUBEVIRT_NAMESPACE)
    developer = ((cr.get("spec") or {}).get("configuration") or {}).get(
        "developerConfiguration"
    ) or {}
    return int(developer.get("cpuAllocationRatio") or 10)


def to_eight_sockets() -> Object:
    return {"spec": {"template": {"spec": {"domain": {"cpu": {"sockets": 8}}}}}}


async def test_kubevirt_hot_plugs_a_socket_only_vm_as_the_hot_plug_check_predicts(
    stack: Stack,
) -> None:
    """Issue 38 item 3 on KubeVirt's real virt-controller, where the quota has room: the tenant
    raises a socket-only VM (no cores, no threads in its template) from 2 to 8 sockets. The
    webhook admits the edit (it fits), and virt-controller hot-plugs it, no restart: it patches
    the VMI to 8 sockets and grows the CPU requests and limits the template sets by 6 vCPUs at
    1000m / cpuAllocationRatio each (+600m), exactly the VMI util/hotplug.py predicted from the
    template and the running VMI; the VM carries no RestartRequired condition."""
    await stack.admin.create_quota({"limits.cpu": "20", "limits.memory": "20Gi"})
    vmi, _ = await start_socket_only_vm(stack)
    vm = await stack.api.get(VIRTUAL_MACHINES, SOCKET_ONLY.name, stack.namespace)
    template = vm["spec"]["template"]["spec"]
    template["domain"]["cpu"]["sockets"] = 8
    predicted = hot_plugged(template, vmi, await cpu_allocation_ratio(stack))
    assert predicted is not None, "the check takes this edit for a restart"
    await stack.tenant.api.patch(
        VIRTUAL_MACHINES, SOCKET_ONLY.name, to_eight_sockets(), stack.namespace
    )

    async def hot_plugged_vmi() -> Object | None:
        found = await stack.api.get(VIRTUAL_MACHINE_INSTANCES, SOCKET_ONLY.name, stack.namespace)
        return found if found["spec"]["domain"]["cpu"]["sockets"] == 8 else None

    real = await eventually(hot_plugged_vmi, timeout=START_TIMEOUT, what="the VMI at 8 sockets")
    for kind in ("requests", "limits"):
        wanted = predicted["spec"]["domain"]["resources"][kind]["cpu"]
        got = real["spec"]["domain"]["resources"][kind]["cpu"]
        assert Quantity.parse(str(got)) == Quantity.parse(str(wanted)), (kind, got, wanted)
    before = Quantity.parse(str(vmi["spec"]["domain"]["resources"]["limits"]["cpu"]))
    grown = Quantity.parse(str(real["spec"]["domain"]["resources"]["limits"]["cpu"]))
    assert grown - before == Quantity.parse("600m"), (before, grown)
    vm = await stack.api.get(VIRTUAL_MACHINES, SOCKET_ONLY.name, stack.namespace)
    conditions = (vm.get("status") or {}).get("conditions") or []
    assert not [c for c in conditions if c.get("type") == "RestartRequired"], conditions


async def test_hot_plugging_a_socket_only_vm_beyond_the_base_is_denied(stack: Stack) -> None:
    """Issue 38 item 3 where the base has no room: the socket-only VM (limits.cpu 2015m of the
    3-CPU base) and a 500m pod leave 485m; 2 -> 8 sockets would hot-plug +600m (the previous
    test shows virt-controller does), so the webhook refuses the tenant's edit, naming
    limits.cpu; a relabel still passes and the namespace stays within its base."""
    await stack.admin.create_quota(BASE)
    await start_socket_only_vm(stack)
    await stack.tenant.create_pod("filler", cpu="500m", memory="64Mi")
    denied = await refusal(
        stack.tenant.api.patch(
            VIRTUAL_MACHINES, SOCKET_ONLY.name, to_eight_sockets(), stack.namespace
        )
    )
    assert denied is not None, "the socket-only VM grew past the base through a hot-plug"
    assert "hot-plugging its CPU or memory" in denied.message, denied.message
    assert "needs 600m" in denied.message and "limits.cpu" in denied.message, denied.message
    label = {"metadata": {"labels": {"team": "b"}}}
    await stack.tenant.api.patch(VIRTUAL_MACHINES, SOCKET_ONLY.name, label, stack.namespace)
    await within_base(stack)


async def test_only_kubevirt_may_write_a_vmis_status_so_a_tenant_forges_no_hot_plug_or_volume(
    stack: Stack,
) -> None:
    """A VMI has no status subresource, so `kubevirt.io:edit` let the tenant write its status,
    which KubeVirt acts on: a memory hot-plug is sized from status.memory.guestCurrent (the
    two-step bypass of the VM rule: edit the guest while the VMI reports none, then write the
    status KubeVirt reads next), and status.volumeStatus sizes the attachment part of a room.
    The shipped kubevirt-status policy refuses any status change but KubeVirt's (its
    controller here; virt-handler, played by the administrator, is trusted too); a label change
    still passes."""
    await stack.admin.create_quota(BASE)
    await start_vm(stack)
    forged_memory = {"status": {"memory": {"guestAtBoot": "4Gi", "guestCurrent": "4Gi"}}}
    forged_volume = {
        "status": {"volumeStatus": [{"name": "hp", "target": "", "hotplugVolume": {}}]}
    }

    async def refused(patch: Object) -> errors.ApiError | None:
        return await refusal(
            stack.tenant.api.patch(
                VIRTUAL_MACHINE_INSTANCES, VM1.name, patch, stack.namespace, dry_run=True
            )
        )

    async def policy_refuses() -> bool:
        denied = await refused(forged_memory)
        return denied is not None and "ValidatingAdmissionPolicy" in denied.message

    await eventually(policy_refuses, what="the kubevirt-status policy in force")
    for forged in (forged_memory, forged_volume):
        denied = await refused(forged)
        assert denied is not None, f"the tenant wrote the VMI's status: {forged}"
        assert "only KubeVirt may change a VirtualMachineInstance's status" in denied.message
    relabel = {"metadata": {"labels": {"team": "b"}}}
    await stack.tenant.api.patch(VIRTUAL_MACHINE_INSTANCES, VM1.name, relabel, stack.namespace)
    await within_base(stack)
