"""Decentralized live migration (KubeVirt v1.6+) on KubeVirt's own virt-controller (issue 29).

A decentralized migration has one VirtualMachineInstanceMigration per side: `spec.sendTo` in
the sending namespace (a running VM), `spec.receive` in the receiving one (a VM with runStrategy
WaitAsReceiver, whose VMI virt-controller creates waiting for the sync). Neither namespace runs
the VM twice, so neither holds room (util/resourcequota/rooms.py): the sending side's source pod
leaves, and the receiving side's target pod is the VM arriving for good, charged to the base like
a VM that starts (the webhook checks the receiving VM against the base when it is created).

Both sides run here in one cluster. KubeVirt's synchronization controller, which carries each
side's state to the other's VMI, is not built here: `sync_receiving_side` and
`sync_sending_side` write what it would (the source's pod, node and node selectors into the
receiving VMI; the receiving migration's uid into the sending VMI), as an administrator. Every
other step, the receiving target pod included, is virt-controller's; the receiving tenant is a
real identity with a VM user's roles, and the webhook is the deployed one, called over TLS.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from harvester_quota.apis.kubevirt import (
    CONDITION_REJECTED_BY_QUOTA,
    KUBEVIRTS,
    LABEL_MIGRATION_JOB,
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
    VIRTUAL_MACHINE_INSTANCES,
    VIRTUAL_MACHINES,
)
from harvester_quota.app import ControllerApp
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.meta import has_condition
from harvester_quota.generic.resource import (
    EVENTS,
    NAMESPACES,
    NODES,
    PODS,
    RESOURCE_QUOTAS,
    Object,
)
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.sim.kubevirt import Outcome, VMSpec
from harvester_quota.testbench.sim.kubevirt.handler import SELINUX_NONE
from harvester_quota.testbench.virtcontroller import (
    KUBEVIRT_NAME,
    KUBEVIRT_NAMESPACE,
    VirtControllerDriver,
)
from harvester_quota.util import resources
from harvester_quota.util.launcher import launcher_quota_usage
from harvester_quota.util.podusage import pod_quota_usage
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.resources import ResourceList
from harvester_quota.webhook.server import WebhookServer

from tests.helpers import caught_up, eventually
from tests.integration import deployment
from tests.integration.conftest import fresh_namespace_async
from tests.integration.kubevirt_by_hand import KubeVirtByHand
from tests.integration.tenant import Tenant, tenant, vm_object
from tests.integration.test_attachment_differential import settings_now
from tests.integration.test_controllers_on_kubevirt import (
    MIGRATION_TIMEOUT,
    SpecHistory,
    as_quantities,
    hard_equals,
    kubevirt,
    kv,
)
from tests.integration.test_target_room import (
    KEYS,
    RejectionWatch,
    assert_never_refused,
    deployed_controllers,
    no_slack,
)

pytestmark = pytest.mark.integration
__all__ = ["deployed_controllers", "kubevirt", "kv"]  # fixtures

MIGRATION_ID = "vm1-across"
SYNC_ADDRESS = "sync.sending.example:9185"
HOST_MODEL_PREFIXES = (
    "host-model-cpu.node.kubevirt.io/",
    "host-model-required-features.node.kubevirt.io/",
)
"""The node labels KubeVirt's controller copies into a source state's node selectors."""


@pytest.fixture
async def receiving(kubevirt_api: ApiClient) -> AsyncIterator[str]:
    """The receiving namespace (the sending one is the driver's, `kubevirt_namespace`)."""
    async with fresh_namespace_async(kubevirt_api, "recv") as name:
        yield name


@pytest.fixture
async def webhook(
    kubevirt_api: ApiClient, kubevirt_cluster: ClusterInfo, receiving: str, tmp_path: Path
) -> AsyncIterator[WebhookServer]:
    """The deployed webhook, registered for the receiving namespace."""
    async with deployment.webhook_for_virt_controller(
        kubevirt_api, kubevirt_cluster, receiving, tmp_path
    ) as server:
        yield server


@pytest.fixture
async def receiver(
    kubevirt_api: ApiClient, kubevirt_cluster: ClusterInfo, receiving: str
) -> AsyncIterator[Tenant]:
    """The receiving namespace's tenant: `edit`, `kubevirt.io:edit` and `kubevirt.io:migrate`."""
    async with tenant(kubevirt_api, kubevirt_cluster, receiving) as found:
        yield found


# ----------------------------------------------------------------------------------------------
# What the synchronization controller would write


async def source_state(
    api: ApiClient, node: str, *, pod: str, migration_uid: str, selinux: str = SELINUX_NONE
) -> Object:
    """The source state KubeVirt's sending controller publishes: its migration's uid, the source
    pod and node, the node's host-model labels as node selectors, and the source VMI's SELinux
    context (the target pod takes its level; "none" where SELinux is off, as the virt-handler
    stand-in reports)."""
    labels = (await api.get(NODES, node))["metadata"].get("labels") or {}
    selectors = {k: v for k, v in labels.items() if k.startswith(HOST_MODEL_PREFIXES)}
    return {
        "migrationUID": migration_uid,
        "pod": pod,
        "node": node,
        "nodeSelectors": selectors,
        "syncAddress": SYNC_ADDRESS,
        "selinuxContext": selinux,
    }


async def waiting_for_sync(api: ApiClient, namespace: str, name: str) -> bool:
    """Whether virt-controller has created the receiving VM's VMI, waiting for the sync."""
    try:
        vmi = await api.get(VIRTUAL_MACHINE_INSTANCES, name, namespace)
    except errors.NotFound:
        return False
    return (vmi.get("status") or {}).get("phase") == "WaitingForSync"


async def create_receiving_vm(receiver: Tenant, vm: Object) -> None:
    """The tenant creates the receiving VM; returns once its VMI waits for the sync (a receive
    created before the VMI exists fails at once)."""
    await receiver.api.create(VIRTUAL_MACHINES, vm, receiver.namespace)
    name = vm["metadata"]["name"]
    await eventually(
        lambda: waiting_for_sync(receiver.api, receiver.namespace, name), what="the receiving VMI"
    )


async def migration_state(
    api: ApiClient, namespace: str, side: str, name: str = "vm1"
) -> dict[str, Any] | None:
    """`side` ("sourceState" or "targetState") of VMI `name` in `namespace`, once KubeVirt's
    controller has given it a migration uid."""
    try:
        vmi = await api.get(VIRTUAL_MACHINE_INSTANCES, name, namespace)
    except errors.NotFound:
        return None  # virt-controller has not created it yet
    state = ((vmi.get("status") or {}).get("migrationState") or {}).get(side) or {}
    return state if state.get("migrationUID") else None


async def sync_receiving_side(
    api: ApiClient, namespace: str, source: Object, name: str = "vm1"
) -> None:
    """Once virt-controller has set up the receiving VMI's target state (its migration waits
    for the sync), the source's state is written into it: virt-controller then creates the
    target pod."""
    await eventually(
        lambda: migration_state(api, namespace, "targetState", name),
        what="the receiving VMI's target state",
        timeout=MIGRATION_TIMEOUT,
    )
    body = {"status": {"migrationState": {"sourceState": source}}}
    await api.patch(VIRTUAL_MACHINE_INSTANCES, name, body, namespace)


async def sync_sending_side(api: ApiClient, namespace: str, receiving_uid: str) -> None:
    """Once virt-controller has set up the sending VMI's source state, the receiving
    migration's uid is written into its target state: the sending migration goes on."""
    await eventually(
        lambda: migration_state(api, namespace, "sourceState"),
        what="the sending VMI's source state",
        timeout=MIGRATION_TIMEOUT,
    )
    body = {"status": {"migrationState": {"targetState": {"migrationUID": receiving_uid}}}}
    await api.patch(VIRTUAL_MACHINE_INSTANCES, "vm1", body, namespace)


# ----------------------------------------------------------------------------------------------
# The two sides


def receiving_vm(
    namespace: str, kubevirt: VirtControllerDriver, ratio: str, name: str = "vm1"
) -> Object:
    """The VM as the receiving side creates it: the sender's spec, runStrategy WaitAsReceiver."""
    vm = vm_object(VMSpec(name, cores=1, memory="1Gi"), namespace, kubevirt.kubevirt_version, ratio)
    vm["spec"].pop("running", None)
    vm["spec"]["runStrategy"] = "WaitAsReceiver"
    return vm


async def vm_usage(api: ApiClient, namespace: str, vm: Object) -> ResourceList:
    """What the VM's launcher pod will use, as our renderer says (the differential below
    compares it with virt-controller's pod)."""
    settings = (await settings_now(api)).for_namespace([], await api.get(NAMESPACES, namespace))
    vmi = {
        "metadata": {"name": vm["metadata"]["name"], "namespace": namespace},
        "spec": vm["spec"]["template"]["spec"],
    }
    return launcher_quota_usage(vmi, settings)


def webhook_sees(webhook: WebhookServer, namespace: str, hard: dict[str, str]) -> bool:
    """Whether the webhook's cache holds the namespace's quota with `hard`."""
    quota = webhook.lookups.managed_quota(namespace) or {}
    return as_quantities((quota.get("spec") or {}).get("hard") or {}) == as_quantities(hard)


def quantities(hards: list[dict[str, str]]) -> list[dict[str, Quantity]]:
    return [as_quantities(hard) for hard in hards]


def base_for(usage: ResourceList, pods: int) -> dict[str, str]:
    """A quota's hard: exactly `usage` on every key of KEYS but pods."""
    return {k: str(pods) if k == "pods" else str(usage[k]) for k in KEYS}


async def receive(receiver: Tenant, vmi: str = "vm1") -> Object:
    body = migration_body(f"{vmi}-receive", vmi, receive={"migrationID": MIGRATION_ID})
    return await receiver.api.create(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, body, receiver.namespace)


def migration_body(name: str, vmi: str = "vm1", **side: Object) -> Object:
    """A VirtualMachineInstanceMigration of `vmi` with one side (sendTo or receive)."""
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": name},
        "spec": {"vmiName": vmi, **side},
    }


async def target_pod(api: ApiClient, namespace: str, migration_uid: str) -> Object | None:
    listed = await api.list(
        PODS, namespace, label_selector=f"{LABEL_MIGRATION_JOB}={migration_uid}"
    )
    return next(iter(listed.get("items", [])), None)


async def test_a_received_vm_lands_on_its_namespaces_base_and_neither_side_holds_room(
    *,
    webhook: WebhookServer,
    deployed_controllers: ControllerApp,
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
    receiving: str,
    receiver: Tenant,
) -> None:
    """vm1 runs in the sending namespace (quota without slack) and is received into a namespace
    whose quota holds exactly one such VM. virt-controller takes the sending migration to
    Scheduling and creates the receiving side's target pod: that pod matches our rendering on
    every key, quota admission takes it on the base, and neither quota is ever raised."""
    app, api = deployed_controllers, kv.api
    await app.start()
    await kv.create_quota({k: "1000Gi" if "memory" in k else "1000" for k in KEYS})
    (await kubevirt.create_vm(VMSpec("vm1", cores=1, memory="1Gi"), node="kwok-node-0")).check()
    sending_base = await no_slack(kv, app, 1)
    vm = receiving_vm(receiving, kubevirt, await kubevirt.overhead_ratio() or "1.5")
    needed = await vm_usage(api, receiving, vm)
    receiving_base = base_for(needed, pods=1)
    at_receiver = KubeVirtByHand(api, receiving)
    await at_receiver.create_quota(receiving_base)
    await eventually(lambda: webhook_sees(webhook, receiving, receiving_base), what="seen")
    await create_receiving_vm(receiver, vm)
    async with (
        SpecHistory(api, kv.namespace) as sending_history,
        SpecHistory(api, receiving) as receiving_history,
        RejectionWatch(api, receiving) as watch,
    ):
        sending = {"migrationID": MIGRATION_ID, "connectURL": SYNC_ADDRESS}
        send = await api.create(
            VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
            migration_body("vm1-send", sendTo=sending),
            kv.namespace,
        )
        received = await receive(receiver)
        uid = received["metadata"]["uid"]
        await sync_sending_side(api, kv.namespace, uid)
        source = await api.get(VIRTUAL_MACHINE_INSTANCES, "vm1", kv.namespace)
        (source_pod,) = await kubevirt_pods(api, kv.namespace)
        await sync_receiving_side(
            api,
            receiving,
            await source_state(
                api,
                source["status"]["nodeName"],
                pod=source_pod["metadata"]["name"],
                migration_uid=send["metadata"]["uid"],
                selinux=source["status"]["selinuxContext"],
            ),
        )
        target = await eventually(
            lambda: target_pod(api, receiving, uid),
            what="the receiving side's target pod",
            timeout=MIGRATION_TIMEOUT,
        )
        await eventually(
            lambda: sending_phase_is(api, kv.namespace, "Scheduling"),
            what="the sending migration under way",
            timeout=MIGRATION_TIMEOUT,
        )
        receiving_vmi = await api.get(VIRTUAL_MACHINE_INSTANCES, "vm1", receiving)
        settings = (await settings_now(api)).for_namespace([], await api.get(NAMESPACES, receiving))
        assert pod_quota_usage(target) == launcher_quota_usage(receiving_vmi, settings) == needed
        await eventually(lambda: caught_up(app, receiving), what="caught up (receiving)")
        await eventually(lambda: caught_up(app, kv.namespace), what="caught up (sending)")
        assert await hard_equals(at_receiver, receiving_base)
        used = ((await at_receiver.quota()).get("status") or {}).get("used") or {}
        on_keys = {k: str(used.get(k, "0")) for k in KEYS}
        assert as_quantities(on_keys) == as_quantities(receiving_base), "the VM on the base"
    assert quantities(receiving_history.hards) == [as_quantities(receiving_base)], (
        receiving_history.hards
    )
    assert quantities(sending_history.hards) == [as_quantities(sending_base)], sending_history.hards
    await assert_never_refused(kubevirt, at_receiver, watch, ["vm1-receive"])


async def kubevirt_pods(api: ApiClient, namespace: str) -> list[Object]:
    listed = await api.list(PODS, namespace, label_selector="kubevirt.io=virt-launcher")
    return list(listed.get("items", []))


async def sending_phase_is(api: ApiClient, namespace: str, phase: str) -> bool:
    send = await api.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, "vm1-send", namespace)
    return (send.get("status") or {}).get("phase") == phase


async def test_a_tenant_cannot_receive_a_vm_its_namespace_has_no_room_for(
    webhook: WebhookServer,
    deployed_controllers: ControllerApp,
    kubevirt: VirtControllerDriver,
    receiving: str,
    receiver: Tenant,
) -> None:
    """The attack: a tenant with two namespaces moves a VM into the one whose quota is full.
    A receiving VM that does not fit the base is refused when it is created. One created while
    it fit, with the namespace filled afterwards by a pod of the tenant's, gets its target pod
    refused by quota admission (KubeVirt reports the migration rejected by quota): the quota is
    never raised for it. With a room on the receiving side the target got in above the base,
    and the VM stayed there for good."""
    app, api = deployed_controllers, kubevirt.client
    await app.start()
    vm = receiving_vm(receiving, kubevirt, await kubevirt.overhead_ratio() or "1.5")
    needed = await vm_usage(api, receiving, vm)
    at_receiver = KubeVirtByHand(api, receiving)
    short = base_for(needed, pods=2) | {
        "limits.cpu": str(needed["limits.cpu"] - Quantity.parse("100m"))
    }
    await at_receiver.create_quota(short)
    await eventually(lambda: webhook_sees(webhook, receiving, short), what="the quota seen")
    with pytest.raises(errors.ApiError) as refused:
        await receiver.api.create(VIRTUAL_MACHINES, vm, receiving)
    assert "limits.cpu" in str(refused.value), refused.value

    fits = base_for(needed, pods=2)
    await api.patch(RESOURCE_QUOTAS, "default-quota", {"spec": {"hard": fits}}, receiving)
    await eventually(lambda: hard_equals(at_receiver, fits), what="room for one VM")
    await eventually(lambda: caught_up(app, receiving), what="the base recorded")
    await eventually(lambda: webhook_sees(webhook, receiving, fits), what="room seen")
    async with SpecHistory(api, receiving) as history:
        await create_receiving_vm(receiver, vm)
        await receiver.create_pod("filler", cpu="100m", memory="64Mi")
        received = await receive(receiver)
        uid = received["metadata"]["uid"]
        await sync_receiving_side(
            api,
            receiving,
            await source_state(api, "kwok-node-0", pod="virt-launcher-vm1-away", migration_uid="x"),
        )

        async def rejected() -> bool:
            mig = await api.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, "vm1-receive", receiving)
            return has_condition(mig, CONDITION_REJECTED_BY_QUOTA)

        await eventually(rejected, what="KubeVirt reports the target refused by quota", timeout=60)
        await eventually(lambda: caught_up(app, receiving), what="caught up")
        assert await target_pod(api, receiving, uid) is None
    assert quantities(history.hards) == [as_quantities(fits)], f"never raised: {history.hards}"


# ----------------------------------------------------------------------------------------------
# A receive beside migrations within the namespace


@pytest.fixture
async def webhook_here(
    kubevirt_api: ApiClient, kubevirt_cluster: ClusterInfo, kubevirt_namespace: str, tmp_path: Path
) -> AsyncIterator[WebhookServer]:
    """The deployed webhook, registered for the driver's namespace (whose VMs migrate)."""
    async with deployment.webhook_for_virt_controller(
        kubevirt_api, kubevirt_cluster, kubevirt_namespace, tmp_path
    ) as server:
        yield server


@pytest.fixture
async def tenant_here(
    kubevirt_api: ApiClient, kubevirt_cluster: ClusterInfo, kubevirt_namespace: str
) -> AsyncIterator[Tenant]:
    async with tenant(kubevirt_api, kubevirt_cluster, kubevirt_namespace) as found:
        yield found


async def set_outbound_slots(api: ApiClient, slots: int) -> None:
    """The KubeVirt CR's parallelOutboundMigrationsPerNode (the driver restores the CR's
    configuration when the test ends). A receiving VMI runs on no node, so the limit never
    holds a receive back."""
    body = {"spec": {"configuration": {"migrations": {"parallelOutboundMigrationsPerNode": slots}}}}
    await api.patch(KUBEVIRTS, KUBEVIRT_NAME, body, KUBEVIRT_NAMESPACE)


def plus(*lists: dict[str, str] | ResourceList) -> dict[str, str]:
    """The sum of resource lists, as a quota's hard."""
    total: ResourceList = {}
    for values in lists:
        total = resources.add(total, as_quantities({k: str(v) for k, v in values.items()}))
    return {k: str(v) for k, v in total.items()}


async def test_a_received_vms_target_pod_cannot_take_a_room_held_for_a_migration_here(
    *,
    webhook_here: WebhookServer,
    deployed_controllers: ControllerApp,
    kv: KubeVirtByHand,
    kubevirt: VirtControllerDriver,
    tenant_here: Tenant,
) -> None:
    """The attack the review of the receive rule found: target pods skipped the pod rules and
    counted in the floor, so a receive's target pod created while another migration's room was
    raised (that migration's own target held back by KubeVirt's outbound limit) took the room,
    the next plan raised for it too, and the VM stayed above the base for good. Here vmx and vm1
    run on one node, vm2 is received into the same namespace (created while it fit), a tenant pod
    then fills the namespace, vmx migrates slowly and vm1 waits behind the outbound limit with
    its room raised. vm2's target pod is refused by the webhook as any pod taking a held room;
    both migrations complete, and the quota is never raised beyond their two rooms."""
    app, api, namespace = deployed_controllers, kv.api, kv.namespace
    await app.start()
    await kv.create_quota({k: "1000Gi" if "memory" in k else "1000" for k in KEYS})
    slow = VMSpec("vmx", cores=1, memory="1Gi", migration_duration=120.0)
    for spec in (slow, VMSpec("vm1", cores=1, memory="1Gi")):
        (await kubevirt.create_vm(spec, node=SOURCE_NODE)).check()
    nodes = {
        (await api.get(VIRTUAL_MACHINE_INSTANCES, n, namespace))["status"]["nodeName"]
        for n in ("vmx", "vm1")
    }
    assert len(nodes) == 1, f"vmx and vm1 on one node: {nodes}"
    two_vms = await no_slack(kv, app, 2)
    vm2 = receiving_vm(namespace, kubevirt, await kubevirt.overhead_ratio() or "1.5", "vm2")
    one_vm = await vm_usage(api, namespace, vm2)
    base = plus(two_vms, {k: str(one_vm[k]) for k in KEYS if k != "pods"}, {"pods": "1"})
    await api.patch(RESOURCE_QUOTAS, "default-quota", {"spec": {"hard": base}}, namespace)
    await eventually(lambda: caught_up(app, namespace), what="the base recorded")
    await eventually(lambda: webhook_sees(webhook_here, namespace, base), what="the base seen")
    await create_receiving_vm(tenant_here, vm2)
    await tenant_here.create_pod("filler", cpu="100m", memory="64Mi")
    room = {k: str(one_vm[k]) for k in KEYS}
    two_rooms = plus(base, room, room)
    async with SpecHistory(api, namespace) as history:
        await set_outbound_slots(api, await outbound_from(api, nodes.pop()) + 1)
        slow_migration = await kubevirt.migrate("vmx")
        await eventually(
            lambda: vmx_under_way(api, namespace, slow_migration), what="vmx migrating"
        )
        held_back = await kubevirt.migrate("vm1")
        await eventually(lambda: hard_equals(kv, two_rooms), what="vm1's room raised")
        received = await receive(tenant_here, "vm2")
        await sync_receiving_side(
            api,
            namespace,
            await source_state(api, "kwok-node-1", pod="virt-launcher-vm2-away", migration_uid="x"),
            "vm2",
        )
        refusal = await eventually(
            lambda: room_refusal(api, namespace), what="vm2's target pod refused", timeout=60
        )
        assert await target_pod(api, namespace, received["metadata"]["uid"]) is None, refusal
        await set_outbound_slots(api, 4)
        kubevirt.end_migration_now("vmx")  # slow until now: it held vm1 back
        for name in (slow_migration, held_back):
            record = await kubevirt.wait_migration(name, timeout=MIGRATION_TIMEOUT)
            assert record.outcome is Outcome.SUCCEEDED, record.as_dict()
        await eventually(lambda: hard_equals(kv, base), what="back to the base")
        await eventually(lambda: caught_up(app, namespace), what="caught up")
        assert await target_pod(api, namespace, received["metadata"]["uid"]) is None
    beyond = [
        h
        for h in quantities(history.hards)
        if any(v > Quantity.parse(two_rooms[k]) for k, v in h.items() if k in two_rooms)
    ]
    assert beyond == [], history.hards


SOURCE_NODE = "kwok-node-3"
"""Where vmx and vm1 run: a node no other test prefers, so few other migrations leave it."""
NOT_RUNNING = frozenset({"", "Pending", "WaitingForSync", "Synchronizing", "Succeeded", "Failed"})
"""Phases KubeVirt's IsRunning says no to: the others take an outbound slot of the VMI's node."""


async def outbound_from(api: ApiClient, node: str) -> int:
    """How many migrations of the whole cluster KubeVirt counts against `node`'s outbound limit
    now (other tests' migrations may still be under way), as virt-controller's
    outboundMigrationsOnNode counts them: unfinished migrations that run, or wait with a target
    pod already made, whose VMI runs on `node` or names it as its migration's source."""
    migrations = (await api.list(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS)).get("items", [])
    vmis = (await api.list(VIRTUAL_MACHINE_INSTANCES)).get("items", [])
    targets = (await api.list(PODS, label_selector=LABEL_MIGRATION_JOB)).get("items", [])
    with_target = {p["metadata"]["labels"][LABEL_MIGRATION_JOB] for p in targets}
    on_node = {
        (v["metadata"]["namespace"], v["metadata"]["name"])
        for v in vmis
        if node
        in (
            (v.get("status") or {}).get("nodeName"),
            ((v.get("status") or {}).get("migrationState") or {}).get("sourceNode"),
        )
    }

    def counted(m: Object) -> bool:
        phase = str((m.get("status") or {}).get("phase") or "")
        if phase in ("Succeeded", "Failed"):
            return False
        return phase not in NOT_RUNNING or m["metadata"]["uid"] in with_target

    return sum(
        1
        for m in migrations
        if counted(m)
        and (m["metadata"]["namespace"], (m.get("spec") or {}).get("vmiName")) in on_node
    )


async def vmx_under_way(api: ApiClient, namespace: str, name: str) -> bool:
    """Whether vmx's migration runs (it takes an outbound slot of the node)."""
    mig = await api.get(VIRTUAL_MACHINE_INSTANCE_MIGRATIONS, name, namespace)
    return (mig.get("status") or {}).get("phase") in (
        "Scheduling",
        "Scheduled",
        "PreparingTarget",
        "TargetReady",
        "Running",
    )


async def room_refusal(api: ApiClient, namespace: str) -> str | None:
    """The message of virt-controller's FailedCreate Event for a pod our webhook refused for
    taking a held room, if any."""
    listed = await api.list(EVENTS, namespace, field_selector="reason=FailedCreate")
    return next(
        (
            e["message"]
            for e in listed.get("items", [])
            if "would take room reserved" in e.get("message", "")
        ),
        None,
    )
