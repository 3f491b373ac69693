"""Webhook rules on fake caches, and the server's handling of bad reviews and certificates."""

from __future__ import annotations

import asyncio
import copy
import datetime
import json
import ssl
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from harvester_quota.apis.kubevirt import FINAL_PHASES
from harvester_quota.config.kubevirt import settings_from
from harvester_quota.generic.resource import Object
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.testbench.localcluster.pki import CertificateAuthority
from harvester_quota.util.annotations import migrating_vm_annotation_key
from harvester_quota.util.launcher import (
    LauncherSettings,
    launcher_pod_resources,
    launcher_quota_usage,
)
from harvester_quota.util.podusage import KUBERNETES_1_36, QuotaFeatures, pod_quota_usage
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.resourcequota.base import ANNOTATION_APPLIED, ANNOTATION_BASE, Mode
from harvester_quota.util.resourcequota.raises import ANNOTATION_ROOMS_SINCE
from harvester_quota.util.resources import ResourceList
from harvester_quota.webhook.admission import Denied, Request
from harvester_quota.webhook.metrics import WebhookMetrics
from harvester_quota.webhook.pods import PodAdmissions
from harvester_quota.webhook.resources.common import Identities
from harvester_quota.webhook.resources.namespace.validator import validate_namespace_update
from harvester_quota.webhook.resources.pod.ledger import AdmissionLedger
from harvester_quota.webhook.resources.pod.targets import QuotaChanges
from harvester_quota.webhook.resources.resourcequota.validator import validate_quota_update
from harvester_quota.webhook.resources.virtualmachine.validator import validate_vm_start
from harvester_quota.webhook.server import WebhookServer
from harvester_quota.webhook.serving import Listening
from harvester_quota.webhook.tls import ReloadingTLS
from prometheus_client import CollectorRegistry

from tests.objects import launcher_pod, managed_quota, migration, rancher_namespace, vmi

KUBEVIRT_CONTROLLER = "system:serviceaccount:harvester-system:kubevirt-controller"


@dataclass
class FakeLookups:
    quotas: dict[str, Object] = field(default_factory=dict)
    namespaces: dict[str, Object] = field(default_factory=dict)
    migration_list: list[Object] = field(default_factory=list)
    vmi_list: list[Object] = field(default_factory=list)
    pods: list[Object] = field(default_factory=list)
    ratio: str = "1.5"
    limit_range_list: list[Object] = field(default_factory=list)
    mode: Mode = "auto"
    features: QuotaFeatures = KUBERNETES_1_36

    def base_mode(self) -> Mode:
        return self.mode

    def quota_features(self) -> QuotaFeatures:
        return self.features

    def managed_quota(self, namespace: str) -> Object | None:
        return self.quotas.get(namespace)

    def namespace(self, name: str) -> Object | None:
        return self.namespaces.get(name)

    def migrations(self, namespace: str) -> Sequence[Object]:
        return self.migration_list

    def migration(self, namespace: str, uid: str) -> Object | None:
        return next((m for m in self.migration_list if m["metadata"].get("uid") == uid), None)

    def vmis(self, namespace: str) -> Mapping[str, Object]:
        return {v["metadata"]["name"]: v for v in self.vmi_list}

    def launcher_pods(self, namespace: str) -> Sequence[Object]:
        return self.pods

    def kubevirt_settings(self) -> LauncherSettings:
        return settings_from(None, {"value": self.ratio}, configured_version="1.6")

    def launcher_usage(self, vmi: Mapping[str, Any], settings: LauncherSettings) -> ResourceList:
        return launcher_quota_usage(vmi, settings)

    def migrations_under_way(self, namespace: str) -> bool:
        return any(
            m.get("status", {}).get("phase") not in FINAL_PHASES for m in self.migration_list
        )

    def limit_ranges(self, namespace: str) -> Sequence[Object]:
        return self.limit_range_list

    def now(self) -> datetime.datetime:
        return datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def request(
    kind: str,
    obj: Object | None,
    old: Object | None = None,
    *,
    user: str = "tenant",
    operation: str = "UPDATE",
    namespace: str = "ns",
) -> Request:
    meta = (obj or old or {}).get("metadata") or {}
    return Request(
        uid="u1",
        kind=kind,
        operation=operation,
        namespace=namespace,
        name=str(meta.get("name", "")),
        username=user,
        groups=(),
        obj=obj,
        old=old,
        dry_run=False,
    )


def quota_with(
    used: Mapping[str, str], hard: Mapping[str, str] | None = None, **annotations: str
) -> Object:
    quota = managed_quota("ns", hard or {"limits.cpu": "3", "limits.memory": "5000Mi"}, annotations)
    quota["status"] = {"used": dict(used), "hard": dict(hard or {})}
    return quota


def running_vm(lookups: FakeLookups, name: str = "vm1") -> Object:
    instance = vmi(name)
    lookups.vmi_list.append(instance)
    lookups.pods.append(launcher_pod(instance, f"{name}-src"))
    return instance


def test_lowering_the_base_below_usage_is_denied_with_numbers() -> None:
    lookups = FakeLookups(
        quotas={"ns": quota_with({"limits.memory": "4797464313", "limits.cpu": "2015m"})}
    )
    old = rancher_namespace("ns", {"limitsCpu": "3000m", "limitsMemory": "5000Mi"})
    new = rancher_namespace("ns", {"limitsCpu": "3000m", "limitsMemory": "4000Mi"})
    with pytest.raises(Denied) as denied:
        validate_namespace_update(request("Namespace", new, old, namespace=""), lookups)
    assert (
        "limitsMemory 4000Mi is lower than what the namespace uses now (4797464313)"
        in denied.value.message
    )


def test_lowering_while_a_migration_holds_room_is_denied_and_raising_is_allowed() -> None:
    lookups = FakeLookups(quotas={"ns": quota_with({"limits.memory": "1Gi"})})
    instance = running_vm(lookups)
    lookups.migration_list.append(migration("m", instance))
    old = rancher_namespace("ns", {"limitsMemory": "5000Mi"})
    lowered = rancher_namespace("ns", {"limitsMemory": "4900Mi"})
    with pytest.raises(
        Denied,
        match=r"can't lower limitsMemory from 5000Mi to 4900Mi while live migrations \(vm1\)",
    ):
        validate_namespace_update(request("Namespace", lowered, old), lookups)
    raised = rancher_namespace("ns", {"limitsMemory": "6000Mi"})
    validate_namespace_update(request("Namespace", raised, old), lookups)


def test_keys_left_by_an_earlier_controller_count_as_held_room() -> None:
    quota = quota_with(
        {"limits.memory": "1Gi"}, **{"harvesterhci.io/migratingUID-x": '{"limits.memory":"1Gi"}'}
    )
    lookups = FakeLookups(quotas={"ns": quota})
    with pytest.raises(Denied, match="hold room"):
        validate_namespace_update(
            request(
                "Namespace",
                rancher_namespace("ns", {"limitsMemory": "4Gi"}),
                rancher_namespace("ns", {"limitsMemory": "5Gi"}),
            ),
            lookups,
        )


def test_invalid_or_removed_annotations() -> None:
    lookups = FakeLookups(quotas={"ns": quota_with({})})
    old = rancher_namespace("ns", {"limitsMemory": "5000Mi"})
    with pytest.raises(Denied, match="10000m invalid"):
        validate_namespace_update(
            request("Namespace", rancher_namespace("ns", {"limitsCpu": "10000m invalid"}), old),
            lookups,
        )
    removed = {"metadata": {"name": "ns", "annotations": {}}}
    validate_namespace_update(request("Namespace", removed, old), lookups)


def test_negative_rancher_limits_are_denied() -> None:
    lookups = FakeLookups(quotas={"ns": quota_with({})})
    old = rancher_namespace("ns", {"limitsMemory": "5000Mi"})
    negative = rancher_namespace("ns", {"limitsCpu": "-1", "limitsMemory": "5000Mi"})
    with pytest.raises(Denied, match=r"negative limits \(limits.cpu\)"):
        validate_namespace_update(request("Namespace", negative, old), lookups)


def test_direct_quota_edits_follow_the_same_rules_except_for_the_controller() -> None:
    lookups = FakeLookups(quotas={"ns": quota_with({"limits.cpu": "2015m"})})
    instance = running_vm(lookups)
    lookups.migration_list.append(migration("m", instance))
    old = quota_with({}, {"limits.cpu": "5015m"})
    reset = quota_with({}, {"limits.cpu": "3"})
    with pytest.raises(Denied, match=r"can't lower limits\.cpu from 5015m to 3"):
        validate_quota_update(
            request("ResourceQuota", reset, old, user="rancher"), lookups, Identities()
        )
    validate_quota_update(
        request(
            "ResourceQuota",
            reset,
            old,
            user="system:serviceaccount:harvester-system:harvester-quota",
        ),
        lookups,
        Identities(),
    )
    validate_quota_update(
        request("ResourceQuota", quota_with({}, {"limits.cpu": "6"}), old, user="rancher"),
        lookups,
        Identities(),
    )


def vm_object(name: str, cores: int, memory: str, *, running: bool = True) -> Object:
    template = vmi(name, cores=cores, memory=memory)
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "runStrategy": "RerunOnFailure" if running else "Halted",
            "template": {"spec": template["spec"]},
        },
    }


@pytest.mark.parametrize(
    ("ratio", "base", "allowed"),
    [
        ("4.5", "5000Mi", False),  # seed v1.7.0 test 3: the VM cannot start
        ("4.5", "6000Mi", True),  # test 4: with the quota at 6000Mi it starts (5682461313 bytes)
        ("5.0", "5120Mi", False),  # scenario 10: 4 cores / 4Gi at ratio 5.0 refused ...
        ("2.5", "5120Mi", True),  # ... and at 2.5 allowed
    ],
    ids=["v170-test3", "v170-test4", "ratio-5.0", "ratio-2.5"],
)
def test_vm_start_check_includes_the_overhead(ratio: str, base: str, allowed: bool) -> None:
    lookups = FakeLookups(
        quotas={"ns": quota_with({}, {"limits.cpu": "8", "limits.memory": base})}, ratio=ratio
    )
    vm = vm_object("vm1", cores=2 if base != "5120Mi" else 4, memory="4Gi")
    if allowed:
        validate_vm_start(request("VirtualMachine", vm, operation="CREATE"), lookups)
        return
    with pytest.raises(Denied) as denied:
        validate_vm_start(request("VirtualMachine", vm, operation="CREATE"), lookups)
    assert "limits.memory insufficient resources due to resource quota" in denied.value.message
    assert f"of the base {Quantity.parse(base)}" in denied.value.message


def test_vm_start_check_counts_the_attachment_pod_of_hotplugged_volumes() -> None:
    """A VM started with a hotplugged volume gets virt-controller's attachment pod (100m CPU
    limit by default) beside its launcher: a base that fits the launcher alone refuses it."""
    plain = vm_object("vm1", 2, "4Gi")
    launcher_cpu = pod_quota_usage(launcher_pod_resources(vmi("vm1", cores=2, memory="4Gi")))[
        "limits.cpu"
    ]
    lookups = FakeLookups(quotas={"ns": quota_with({}, {"limits.cpu": str(launcher_cpu)})})
    validate_vm_start(request("VirtualMachine", plain, operation="CREATE"), lookups)
    with_disk = copy.deepcopy(plain)
    with_disk["spec"]["template"]["spec"].setdefault("volumes", []).append(
        {"name": "d", "persistentVolumeClaim": {"claimName": "d", "hotpluggable": True}}
    )
    with pytest.raises(Denied) as denied:
        validate_vm_start(request("VirtualMachine", with_disk, operation="CREATE"), lookups)
    assert "limits.cpu" in denied.value.message


def test_vm_start_ignores_halted_and_running_vms() -> None:
    lookups = FakeLookups(quotas={"ns": quota_with({"limits.memory": "5000Mi"})})
    validate_vm_start(request("VirtualMachine", vm_object("vm1", 2, "4Gi", running=False)), lookups)
    running_vm(lookups, "vm2")
    validate_vm_start(request("VirtualMachine", vm_object("vm2", 2, "4Gi")), lookups)


def test_a_vm_waiting_to_receive_a_migration_must_fit_the_base() -> None:
    """A VM created to receive a decentralized migration (runStrategy WaitAsReceiver) gets its
    pod for good when the migration lands, and no room is made for it: it is checked like a VM
    that starts, so a tenant cannot move a VM into a namespace its quota has no room for."""
    lookups = FakeLookups(quotas={"ns": quota_with({}, {"limits.memory": "5000Mi"})}, ratio="4.5")
    receiver = vm_object("vm1", 2, "4Gi")
    receiver["spec"]["runStrategy"] = "WaitAsReceiver"
    with pytest.raises(Denied) as denied:
        validate_vm_start(request("VirtualMachine", receiver, operation="CREATE"), lookups)
    assert "limits.memory insufficient resources due to resource quota" in denied.value.message
    roomy = FakeLookups(quotas={"ns": quota_with({}, {"limits.memory": "6000Mi"})}, ratio="4.5")
    validate_vm_start(request("VirtualMachine", receiver, operation="CREATE"), roomy)


def plain_pod(name: str, cpu: str, memory: str, **labels: str) -> Object:
    resources = {"cpu": cpu, "memory": memory}
    return {
        "metadata": {"name": name, "namespace": "ns", "labels": labels},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "x",
                    "resources": {"limits": resources, "requests": resources},
                }
            ]
        },
    }


def validate_pod(
    req: Request,
    lookups: FakeLookups,
    identities: Identities,
    ledger: AdmissionLedger | None = None,
) -> None:
    """The pods endpoint's rules as the server runs them (`PodAdmissions.validate`, decided in
    arrival order with no reservations across replicas), with a ledger of its own unless the
    test shares one. A migration's target pod from KubeVirt is run to its end (the room it
    waits for is not waited for: no wait is configured)."""
    clock = FakeClock()
    admissions = PodAdmissions(
        lookups=lookups,
        identities=identities,
        metrics=WebhookMetrics(CollectorRegistry()),
        clock=clock,
        quota_changes=QuotaChanges(clock),
        target_room_wait=0.0,
        ledger=ledger if ledger is not None else AdmissionLedger(clock),
        reservations=None,
        live=None,
    )
    deciding = admissions.validate(req)
    if deciding is not None:
        asyncio.run(_until_done(deciding))


async def _until_done(deciding: Awaitable[None]) -> None:
    await deciding


def room_held(lookups: FakeLookups) -> None:
    """The v1.7.0 namespace: vm1 (2015m/4797464313) migrating, hard raised by its room."""
    lookups.quotas["ns"] = quota_with(
        {"limits.cpu": "2015m", "limits.memory": "4797464313"},
        {"limits.cpu": "5015m", "limits.memory": "10040344313"},
        **{
            migrating_vm_annotation_key(
                "vm1"
            ): '{"limits.cpu":"2015m","limits.memory":"4797464313"}'
        },
    )
    lookups.migration_list.append(migration("m", running_vm(lookups)))


def test_pods_decided_on_the_same_cached_usage_do_not_share_the_free_room() -> None:
    """985m are free under the base; the cache does not learn of admitted pods in between: the
    ledger does, so 9 pods of 100m get in and the 10th is denied, never 10 or more."""
    lookups, clock = FakeLookups(), FakeClock()
    room_held(lookups)
    ledger = AdmissionLedger(clock, ttl=30)
    for index in range(9):
        validate_pod(create_pod(f"p{index}", "100m"), lookups, Identities(), ledger)
    with pytest.raises(Denied) as denied:
        validate_pod(create_pod("p9", "100m"), lookups, Identities(), ledger)
    assert "limits.cpu insufficient resources" in denied.value.message
    assert "in use 2915m" in denied.value.message


def test_a_pod_the_cache_already_shows_is_not_counted_twice() -> None:
    lookups, clock = FakeLookups(), FakeClock()
    room_held(lookups)
    ledger = AdmissionLedger(clock, ttl=30)
    validate_pod(create_pod("p0", "500m"), lookups, Identities(), ledger)
    # The cache catches up: p0 is in status.used now.
    lookups.quotas["ns"]["status"]["used"]["limits.cpu"] = "2515m"
    validate_pod(create_pod("p1", "450m"), lookups, Identities(), ledger)  # 2965m <= 3
    with pytest.raises(Denied):
        validate_pod(create_pod("p2", "100m"), lookups, Identities(), ledger)


def test_a_reservation_ends_its_ttl_after_the_last_admission() -> None:
    """A pod deleted after a burst is credited again once the reservation expires."""
    lookups, clock = FakeLookups(), FakeClock()
    ledger = after_a_burst(lookups, clock)
    clock.step(29)
    with pytest.raises(Denied):
        validate_pod(create_pod("p1", "900m"), lookups, Identities(), ledger)
    clock.step(1)
    validate_pod(create_pod("p1", "900m"), lookups, Identities(), ledger)  # p0 was deleted


def test_the_next_migrations_room_starts_from_the_cache() -> None:
    """A burst during one migration's room is not held against the next migration's: the tenant
    deleted those pods in between (the cache shows it)."""
    lookups, clock = FakeLookups(), FakeClock()
    ledger = after_a_burst(lookups, clock)
    lookups.migration_list[:] = [migration("m2", lookups.vmi_list[0])]
    validate_pod(create_pod("p1", "900m"), lookups, Identities(), ledger)


def after_a_burst(lookups: FakeLookups, clock: FakeClock) -> AdmissionLedger:
    """Room held, p0 (900m) admitted and p1 (900m) denied on the same cached usage; the ledger."""
    room_held(lookups)
    ledger = AdmissionLedger(clock, ttl=30)
    validate_pod(create_pod("p0", "900m"), lookups, Identities(), ledger)
    with pytest.raises(Denied):
        validate_pod(create_pod("p1", "900m"), lookups, Identities(), ledger)
    return ledger


def create_pod(name: str, cpu: str) -> Request:
    return request("Pod", plain_pod(name, cpu, "1Mi"), operation="CREATE")


def test_pods_may_not_take_the_room_a_migration_waits_for() -> None:
    lookups = FakeLookups(
        quotas={
            "ns": quota_with(
                {"limits.cpu": "2015m", "limits.memory": "4797464313"},
                {"limits.cpu": "5015m", "limits.memory": "10040344313"},
                **{
                    migrating_vm_annotation_key(
                        "vm1"
                    ): '{"limits.cpu":"2015m","limits.memory":"4797464313"}'
                },
            )
        }
    )
    instance = running_vm(lookups)
    lookups.migration_list.append(migration("m", instance))
    with pytest.raises(Denied) as denied:
        validate_pod(
            request("Pod", plain_pod("squatter", "1", "1Gi"), operation="CREATE"),
            lookups,
            Identities(),
        )
    assert "would take room reserved for the live migration of vm1" in denied.value.message
    assert "limits.memory insufficient resources" in denied.value.message
    small = plain_pod("small", "100m", "100Mi")
    validate_pod(request("Pod", small, operation="CREATE"), lookups, Identities())
    target = plain_pod("target", "2015m", "4797464313", **{"kubevirt.io/migrationJobUID": "x"})
    validate_pod(
        request("Pod", target, operation="CREATE", user=KUBEVIRT_CONTROLLER), lookups, Identities()
    )
    with pytest.raises(Denied):
        validate_pod(
            request("Pod", target, operation="CREATE", user="tenant"), lookups, Identities()
        )


def test_kubevirts_launcher_pod_of_a_new_vmi_is_held_to_the_base_while_room_is_held() -> None:
    """KubeVirt's own pods skipped every check while room was held: a migration, then a VMI of
    the same size, and the new VMI's launcher pod took the room. Only KubeVirt's migration
    targets pass; its other pods are held to the base like a tenant's."""
    lookups = FakeLookups()
    room_held(lookups)
    new_vm = vmi("vm2")
    launcher = launcher_pod(new_vm, "virt-launcher-vm2-abcde")
    with pytest.raises(Denied) as denied:
        validate_pod(
            request("Pod", launcher, operation="CREATE", user=KUBEVIRT_CONTROLLER),
            lookups,
            Identities(),
        )
    assert "would take room reserved for the live migration of vm1" in denied.value.message


def receive_target(lookups: FakeLookups, side: str = "receive") -> Object:
    """KubeVirt's target pod of a decentralized migration of vm2 into this namespace (the
    migration in the cache, `side` set), vm2 sized like vm1."""
    arriving = vmi("vm2")
    received = migration("r", arriving, phase="Pending")
    received["spec"][side] = {"migrationID": "x", "connectURL": "peer:9185"}
    lookups.migration_list.append(received)
    return launcher_pod(arriving, "virt-launcher-vm2-dst", migration=received)


@pytest.mark.parametrize("side", ["receive", "sendTo"])
def test_a_received_vms_target_pod_is_held_to_the_base_while_another_room_is_held(
    side: str,
) -> None:
    """Review of the receive rule: target pods skipped the pod rules, so a receive's target pod
    arriving while vm1's room was raised took it, and the VM stayed above the base for good. It
    is the VM arriving: held to the base like a launcher pod of a VM that starts."""
    lookups = FakeLookups()
    room_held(lookups)
    target = receive_target(lookups, side)
    with pytest.raises(Denied) as denied:
        validate_pod(
            request("Pod", target, operation="CREATE", user=KUBEVIRT_CONTROLLER),
            lookups,
            Identities(),
        )
    assert "would take room reserved for the live migration of vm1" in denied.value.message


def test_an_ordinary_migrations_target_pod_still_uses_its_room_beside_a_receive() -> None:
    """Only the pod's own migration decides (by its uid): a receive in the namespace takes
    nothing from an ordinary migration's target pod."""
    lookups = FakeLookups()
    room_held(lookups)
    mine = lookups.migration_list[0]
    receive_target(lookups)
    target = launcher_pod(vmi("vm1"), "virt-launcher-vm1-dst", migration=mine)
    validate_pod(
        request("Pod", target, operation="CREATE", user=KUBEVIRT_CONTROLLER), lookups, Identities()
    )


def test_a_received_vms_target_pod_that_fits_the_base_is_admitted_while_room_is_held() -> None:
    """Held to the base, not refused outright: with room held and a base it fits (vm2 next to
    vm1, vm1's room on top), the receive's target pod is admitted."""
    lookups = FakeLookups()
    room_held(lookups)
    vm1_used = {"limits.cpu": "2015m", "limits.memory": "4797464313"}
    base_for_two_plus_vm1s_room = {"limits.cpu": "6045m", "limits.memory": "14392392939"}
    lookups.quotas["ns"] = quota_with(
        vm1_used, base_for_two_plus_vm1s_room, **lookups.quotas["ns"]["metadata"]["annotations"]
    )
    target = receive_target(lookups)
    validate_pod(
        request("Pod", target, operation="CREATE", user=KUBEVIRT_CONTROLLER), lookups, Identities()
    )


def test_a_vmi_whose_hook_annotation_cannot_be_rendered_fails_no_admission() -> None:
    """A nested hooks annotation on a migrating VMI made every pod admission of its namespace
    a 500; its migration now gets no room and the namespace's pods are decided as before."""
    lookups = FakeLookups()
    room_held(lookups)
    lookups.vmi_list[0]["metadata"].setdefault("annotations", {})[
        "hooks.kubevirt.io/hookSidecars"
    ] = '[{"image":"x","x":' + "[" * 100_000 + "]" * 100_000 + "}]"
    validate_pod(create_pod("small", "100m"), lookups, Identities())
    with pytest.raises(Denied, match="would take room reserved"):
        validate_pod(create_pod("big", "3"), lookups, Identities())


def resize_pod(name: str, cpu_before: str, cpu_after: str, **labels: str) -> Request:
    return Request(
        uid="u1",
        kind="Pod",
        operation="UPDATE",
        namespace="ns",
        name=name,
        username="tenant",
        groups=(),
        obj=plain_pod(name, cpu_after, "1Mi", **labels),
        old=plain_pod(name, cpu_before, "1Mi", **labels),
        dry_run=False,
        sub_resource="resize",
    )


def test_a_pod_resized_in_place_into_the_room_is_denied_and_a_shrink_passes() -> None:
    """pods/resize let a pod grow into a held room, since only creates were checked: a resize
    is checked like a create of what it adds (985m free under the base here)."""
    lookups = FakeLookups()
    room_held(lookups)
    with pytest.raises(Denied) as denied:
        validate_pod(resize_pod("grower", "100m", "2"), lookups, Identities())
    assert "pod grower resized would take room reserved for the live migration of vm1" in (
        denied.value.message
    )
    assert "needs 1900m" in denied.value.message, "only what it adds is checked"
    validate_pod(resize_pod("grower", "100m", "900m"), lookups, Identities())
    validate_pod(resize_pod("shrinker", "2", "1"), lookups, Identities())


def test_a_target_label_exempts_no_resize_even_for_kubevirt() -> None:
    lookups = FakeLookups()
    room_held(lookups)
    grow = resize_pod("target", "2015m", "4", **{"kubevirt.io/migrationJobUID": "x"})
    grow = Request(**{**vars(grow), "username": KUBEVIRT_CONTROLLER})
    with pytest.raises(Denied):
        validate_pod(grow, lookups, Identities())


def test_pods_are_not_checked_while_no_room_is_held() -> None:
    lookups = FakeLookups(quotas={"ns": quota_with({"limits.cpu": "3", "limits.memory": "5000Mi"})})
    validate_pod(
        request("Pod", plain_pod("p", "1", "1Gi"), operation="CREATE"), lookups, Identities()
    )


BASE = {"limits.cpu": "3", "limits.memory": "5000Mi"}
RAISED = {"limits.cpu": "5015m", "limits.memory": "10000Mi"}
"""A 3-CPU base raised by one 2015m room, as the quota shows it until the raise is down."""


def test_a_pod_is_held_to_the_base_until_rancher_has_copied_the_lowered_annotation() -> None:
    """Rancher's protected path, just after the release: the migration is over and holds no
    room, our annotation is back at the base, but Rancher's agent has not yet lowered the quota
    (spec.hard and status.hard still raised). A pod that fits the raise but not the base was
    admitted there (review finding 1): it took the room being given back."""
    lookups = FakeLookups(
        quotas={"ns": quota_with({"limits.cpu": "3", "limits.memory": "4000Mi"}, RAISED)},
        namespaces={"ns": rancher_namespace("ns", {"limitsCpu": "3000m", "limitsMemory": "8Gi"})},
    )
    with pytest.raises(Denied) as denied:
        validate_pod(
            request("Pod", plain_pod("grab", "2", "1Gi"), operation="CREATE"), lookups, Identities()
        )
    assert "migrations whose raise is still being given back" in denied.value.message
    assert "0 left of the base 3" in denied.value.message
    # Once Rancher's agent has lowered the quota, quota admission at the base is enough.
    lookups.quotas["ns"] = quota_with({"limits.cpu": "3", "limits.memory": "4000Mi"}, BASE)
    validate_pod(
        request("Pod", plain_pod("grab", "2", "1Gi"), operation="CREATE"), lookups, Identities()
    )


def test_a_pod_is_held_to_the_base_while_status_hard_still_holds_a_lowered_raise() -> None:
    """The direct path: spec.hard is back at the base, status.hard (what quota admission
    enforces) not yet: a pod above the base would be admitted into the released room."""
    quota = quota_with({"limits.cpu": "3", "limits.memory": "4000Mi"}, BASE)
    quota["status"]["hard"] = dict(RAISED)
    lookups = FakeLookups(quotas={"ns": quota})
    with pytest.raises(Denied):
        validate_pod(
            request("Pod", plain_pod("grab", "2", "1Gi"), operation="CREATE"), lookups, Identities()
        )
    quota["status"]["used"] = {"limits.cpu": "1", "limits.memory": "1000Mi"}
    validate_pod(
        request("Pod", plain_pod("fits", "2", "1Gi"), operation="CREATE"), lookups, Identities()
    )


def release_window_quota(**records: str) -> Object:
    """The direct path between a migration's end and the release write: spec.hard and
    status.hard still at the raise, no migration holding room, status.used back at the base's
    3 CPU (the source pod gone), our base recorded and `records` on the quota (the raise we
    applied among them, as our controller writes it with every raise)."""
    quota = quota_with(
        {"limits.cpu": "3", "limits.memory": "4000Mi"},
        RAISED,
        **{ANNOTATION_BASE: json.dumps(BASE)},
        **records,
    )
    quota["status"]["hard"] = dict(RAISED)
    return quota


def test_no_pod_enters_a_raise_that_outlives_its_room_before_the_release_write() -> None:
    """The release window: no room is held any more, but quota admission still enforces the
    raise until the controller's release write (and kube-controller-manager's copy) lands. A
    2-CPU pod fits the raise and would leave the tenant above its base for good (and the floor
    would raise on top of it at its next migration); it is held to the base."""
    quota = release_window_quota(
        **{ANNOTATION_ROOMS_SINCE: "2026-11-27T10:00:00Z", ANNOTATION_APPLIED: json.dumps(RAISED)}
    )
    lookups = FakeLookups(quotas={"ns": quota})
    with pytest.raises(Denied) as denied:
        validate_pod(
            request("Pod", plain_pod("grab", "2", "1Gi"), operation="CREATE"), lookups, Identities()
        )
    assert "limits.cpu insufficient resources" in denied.value.message
    quota["status"]["used"] = {"limits.cpu": "1", "limits.memory": "1000Mi"}
    validate_pod(  # what fits under the base is left to quota admission
        request("Pod", plain_pod("fits", "2", "1Gi"), operation="CREATE"), lookups, Identities()
    )


def test_harvesters_own_room_keys_hold_pods_to_the_base_while_their_raise_stands() -> None:
    """A raise Harvester's own controllers made (their per-VM key, adopted) is a raise of ours:
    its key left on the quota after its migration ended holds pods to the base. No record of
    the spec.hard we applied is there, so the raise is not taken for an administrator's edit
    (which would make it the base)."""
    key = migrating_vm_annotation_key("vm1")
    quota = release_window_quota(**{key: json.dumps({"limits.cpu": "2015m"})})
    with pytest.raises(Denied):
        validate_pod(
            request("Pod", plain_pod("grab", "2", "1Gi"), operation="CREATE"),
            FakeLookups(quotas={"ns": quota}),
            Identities(),
        )


def test_an_administrators_edit_in_the_release_window_moves_the_base_as_the_controller_does() -> (
    None
):
    """One reader of the base: an administrator raises spec.hard by 1 CPU over the raise we
    applied, in the release window. The controller takes that as the base raised by 1 CPU; the
    webhook holds pods to that base, not to the recorded one, nor to the raise."""
    quota = release_window_quota(
        **{ANNOTATION_ROOMS_SINCE: "2026-11-27T10:00:00Z", ANNOTATION_APPLIED: json.dumps(RAISED)}
    )
    quota["spec"]["hard"] = {**RAISED, "limits.cpu": "6015m"}
    quota["status"]["hard"] = dict(quota["spec"]["hard"])
    lookups = FakeLookups(quotas={"ns": quota})
    validate_pod(
        request("Pod", plain_pod("fits", "1", "500Mi"), operation="CREATE"), lookups, Identities()
    )
    with pytest.raises(Denied) as denied:
        validate_pod(
            request("Pod", plain_pod("grab", "2", "500Mi"), operation="CREATE"),
            lookups,
            Identities(),
        )
    assert "of the base 4" in denied.value.message


def test_a_raise_without_our_records_is_the_administrators_new_limit() -> None:
    """The same quota once the release write removed our records, raised again by its
    administrator (spec.hard and status.hard both at it): the new limit, nothing held."""
    validate_pod(
        request("Pod", plain_pod("honest", "2", "1Gi"), operation="CREATE"),
        FakeLookups(quotas={"ns": release_window_quota()}),
        Identities(),
    )


def test_in_standalone_mode_rancher_s_annotation_holds_no_pod() -> None:
    """Review: the webhook read Rancher's annotation whatever the controller's mode, so in
    standalone mode a namespace whose quota stood above an annotation held every pod to the
    annotation for good, no migration in sight. With the controller's --mode it is no base."""
    hard = {"limits.cpu": "10", "limits.memory": "16Gi"}
    quota = quota_with({"limits.cpu": "2", "limits.memory": "2Gi"}, hard)
    quota["status"]["hard"] = dict(hard)
    namespaces = {"ns": rancher_namespace("ns", {"limitsCpu": "3000m", "limitsMemory": "4Gi"})}
    honest = request("Pod", plain_pod("honest", "2", "1Gi"), operation="CREATE")
    validate_pod(
        honest,
        FakeLookups(quotas={"ns": quota}, namespaces=namespaces, mode="standalone"),
        Identities(),
    )
    with pytest.raises(Denied):
        validate_pod(honest, FakeLookups(quotas={"ns": quota}, namespaces=namespaces), Identities())


def test_an_administrators_raise_of_spec_hard_holds_no_pod_to_the_old_base() -> None:
    """A quota raised by its administrator (spec.hard above status.hard for a moment, no room,
    no Rancher) is no raise of ours: pods are left to quota admission."""
    quota = quota_with({"limits.cpu": "3", "limits.memory": "4000Mi"}, RAISED)
    quota["status"]["hard"] = dict(BASE)
    validate_pod(
        request("Pod", plain_pod("p", "2", "1Gi"), operation="CREATE"),
        FakeLookups(quotas={"ns": quota}),
        Identities(),
    )


def review(kind: str, obj: Any, uid: str | None = "u1") -> bytes:
    req: dict[str, Any] = {
        "kind": {"group": "", "version": "v1", "kind": kind},
        "operation": "CREATE",
        "namespace": "ns",
        "userInfo": {"username": "tenant"},
        "object": obj,
    }
    if uid is not None:
        req["uid"] = uid
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}
    ).encode()


@pytest.fixture
def server() -> WebhookServer:
    return WebhookServer(FakeLookups(), registry=CollectorRegistry())


async def test_bad_reviews_get_clear_answers(server: WebhookServer) -> None:
    garbage = await server.review("pods", b"{not json")
    assert garbage.status == 400 and "not JSON" in str(garbage.text)
    no_uid = await server.review("pods", review("Pod", {}, uid=None))
    assert no_uid.status == 400 and "no uid" in str(no_uid.text)
    bad_object = await server.review("pods", review("Pod", ["not", "an", "object"]))
    body = json.loads(bad_object.body)  # type: ignore[arg-type]
    assert (
        body["response"]["allowed"] is False
        and "object is not an object" in body["response"]["status"]["message"]
    )
    wrong_kind = json.loads((await server.review("pods", review("Secret", {"metadata": {}}))).body)  # type: ignore[arg-type]
    assert "validates Pod objects, not Secret" in wrong_kind["response"]["status"]["message"]
    allowed = json.loads(
        (await server.review("pods", review("Pod", plain_pod("p", "1", "1Gi")))).body
    )  # type: ignore[arg-type]
    assert allowed["response"] == {"uid": "u1", "allowed": True}


@pytest.mark.parametrize("groups", [5, "system:masters", [1, 2], {"a": "b"}])
async def test_malformed_user_groups_get_a_clear_denial_not_a_500(
    server: WebhookServer, groups: Any
) -> None:
    body = json.loads(review("Pod", plain_pod("p", "1", "1Gi")))
    body["request"]["userInfo"]["groups"] = groups
    answer = await server.review("pods", json.dumps(body).encode())
    assert answer.status == 200
    response = json.loads(answer.body)["response"]  # type: ignore[arg-type]
    assert response["allowed"] is False and response["status"]["code"] == 400
    assert "userInfo.groups is not a list of strings" in response["status"]["message"]


async def test_a_validator_bug_becomes_http_500_for_the_failure_policy(
    server: WebhookServer,
) -> None:
    def broken(_request: Request) -> None:
        raise KeyError("spec")

    server.validators["pods"] = ("Pod", broken)
    answer = await server.review("pods", review("Pod", plain_pod("p", "1", "1Gi")))
    assert answer.status == 500


async def test_the_serving_certificate_is_reloaded_when_its_files_change(tmp_path: Path) -> None:
    ca = CertificateAuthority.create()
    ca.write(tmp_path / "ca.crt", tmp_path / "ca.key")
    ca.issue("first", ip_addresses=("127.0.0.1",), server=True).write(
        tmp_path / "tls.crt", tmp_path / "tls.key"
    )
    tls = ReloadingTLS(tmp_path / "tls.crt", tmp_path / "tls.key")
    server = WebhookServer(
        FakeLookups(), listening=Listening("127.0.0.1", 0, tls), registry=CollectorRegistry()
    )
    port = await server.start()
    try:
        assert await peer_common_name(port, tmp_path / "ca.crt") == "first"
        ca.issue("second", ip_addresses=("127.0.0.1",), server=True).write(
            tmp_path / "tls.crt", tmp_path / "tls.key"
        )
        import os

        os.utime(tmp_path / "tls.crt", (1e9, 2e9))
        assert tls.reload()
        assert await peer_common_name(port, tmp_path / "ca.crt") == "second"
        (tmp_path / "tls.key").write_text("garbage")
        os.utime(tmp_path / "tls.key", (1e9, 3e9))
        assert not tls.reload(), "a broken pair is refused and the old one kept"
        assert await peer_common_name(port, tmp_path / "ca.crt") == "second"
    finally:
        await server.stop()


def test_the_served_certificates_validity_is_exported_for_the_expiry_alert(tmp_path: Path) -> None:
    """HarvesterQuotaWebhookCertificateExpiring reads these two: 0 before a certificate is
    loaded, then the notBefore and notAfter of the one served."""
    ca = CertificateAuthority.create()
    ca.issue("first", ip_addresses=("127.0.0.1",), server=True).write(
        tmp_path / "tls.crt", tmp_path / "tls.key"
    )
    served = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    registry = CollectorRegistry()
    tls = ReloadingTLS(tmp_path / "tls.crt", tmp_path / "tls.key")
    WebhookServer(FakeLookups(), listening=Listening(tls=tls), registry=registry)
    expiry = registry.get_sample_value(
        "harvester_quota_webhook_certificate_expiry_timestamp_seconds"
    )
    start = registry.get_sample_value("harvester_quota_webhook_certificate_start_timestamp_seconds")
    assert expiry == served.not_valid_after_utc.timestamp()
    assert start == served.not_valid_before_utc.timestamp()
    bare = CollectorRegistry()
    WebhookServer(FakeLookups(), registry=bare)
    assert (
        bare.get_sample_value("harvester_quota_webhook_certificate_expiry_timestamp_seconds") == 0
    )


async def peer_common_name(port: int, ca_file: Path) -> str:
    context = ssl.create_default_context(cafile=str(ca_file))
    context.verify_flags |= ssl.VERIFY_X509_STRICT
    _reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    cert = writer.get_extra_info("peercert")
    writer.close()
    await writer.wait_closed()
    return str(dict(pair[0] for pair in cert["subject"])["commonName"])
