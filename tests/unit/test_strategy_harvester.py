"""Harvester v1.9's algorithm, ported (harvester_quota.testbench.strategy.harvester): its own Go unit tests, replayed
case by case with their numbers, then the failure scenarios of the reference notes
(shared/reference/rancher-and-harvester-issues.md, part 2), which a faithful port must reproduce.

The handlers run against `FakeCluster`, where the caches read what the clients wrote (as with
Harvester's `fakeclients`). Failure scenarios add real quota admission arithmetic: launcher pods are
rendered by KubeVirt's rules (harvester_quota.util.podusage) and admitted only if used + requested <= hard on
every key the quota limits, exactly as the API server's quota admission decides.
"""

from __future__ import annotations

import copy
import datetime
import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from harvester_quota.apis.kubevirt import (
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
    VIRTUAL_MACHINE_INSTANCES,
)
from harvester_quota.config.management import Options
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.config import ClientConfig
from harvester_quota.generic.resource import RESOURCE_QUOTAS, Object
from harvester_quota.generic.workqueue.rate_limiters import MaxOfRateLimiter
from harvester_quota.testbench.strategy.harvester import HarvesterStrategy, rqutils
from harvester_quota.testbench.strategy.harvester.calculator import (
    InsufficientResourceError,
    additional_guest_memory_overhead_ratio,
    calculate_compensation_resource_quota_with_vmi,
    contains_enough_resource_quota_to_start_vm,
    launcher_memory_overhead,
    namespace_resource_quota,
)
from harvester_quota.testbench.strategy.harvester.cluster import (
    HARVESTER_VENDORED_KUBEVIRT,
    RATIO_SETTING,
)
from harvester_quota.testbench.strategy.harvester.migration import (
    MigrationHandler,
    NamespaceNotFound,
)
from harvester_quota.testbench.strategy.harvester.resourcequota import (
    ResourceQuotaHandler,
    SkipScaling,
    scale_resource_quota_on_demand,
)
from harvester_quota.testbench.strategy.harvester.strategy import lasso_rate_limiter
from harvester_quota.util import resources
from harvester_quota.util.annotations import (
    ANNOTATION_MIGRATING_COMPENSATION,
    ANNOTATION_MIGRATING_SCALING_RESYNC_NEEDED,
    ANNOTATION_MIGRATION_STATE,
    ANNOTATION_MIGRATION_UID,
    ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING,
    ANNOTATION_TIMESTAMP,
    CATTLE_ANNOTATION_RESOURCE_QUOTA,
    LABEL_DEFAULT_RESOURCE_QUOTA,
    legacy_migrating_vm_annotation_key,
    migrating_uid_annotation_key,
)
from harvester_quota.util.podusage import pod_quota_usage
from harvester_quota.util.quantity import Quantity

from tests import objects

GI = 1 << 30
MI = 1 << 20
FLAG = ANNOTATION_MIGRATING_SCALING_RESYNC_NEEDED
COMPENSATION = ANNOTATION_MIGRATING_COMPENSATION
SKIP = ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING

# vmim_controller_test.go's constants
RS = "rs"
RQ1 = "rq1"
UID = "6afcf4d9-b8a7-464a-a4e9-abe81fc7eacd"
VMIM_UID = "8afcf4d9-b8a7-464a-a4e9-abe81fc7eacd"
LONG_VMI_NAME = "a-very-long-name-exceeds-the-63-length-and-it-reports-error-in-old-version"
# resourcequota_controller_test.go's
TEST = "test"
RQ_UID = "8afcf4d9-b8a7-464a-a4e9-abe81fc7eacf"

UID_KEY = migrating_uid_annotation_key(UID)


# --- the fake cluster --------------------------------------------------------------------------


class FakeCluster:
    """`HarvesterCluster` in memory: reads see every write at once (Harvester's fakeclients)."""

    def __init__(self, *stored: Object, kubevirt_version: str = HARVESTER_VENDORED_KUBEVIRT):
        self.store: dict[tuple[str, str, str], Object] = {}
        for obj in stored:
            self.put(obj)
        self.version = kubevirt_version
        self.writes: Counter[str] = Counter()
        self.calls: list[tuple[str, str, str]] = []
        self.enqueued: list[tuple[str, str, float]] = []
        self.clock = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)

    @staticmethod
    def _key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
        meta = obj["metadata"]
        return (str(obj["kind"]), str(meta.get("namespace") or ""), str(meta["name"]))

    def put(self, obj: Object) -> Object:
        self.store[self._key(obj)] = copy.deepcopy(obj)
        return obj

    def get(self, kind: str, namespace: str, name: str) -> Object | None:
        found = self.store.get((kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def remove(self, kind: str, namespace: str, name: str) -> None:
        del self.store[(kind, namespace, name)]

    def _list(self, kind: str, namespace: str) -> list[Object]:
        return [
            copy.deepcopy(obj)
            for (k, ns, _), obj in sorted(self.store.items())
            if k == kind and ns == namespace
        ]

    # reads
    def vmi(self, namespace: str, name: str) -> Object | None:
        return self.get("VirtualMachineInstance", namespace, name)

    def vm(self, namespace: str, name: str) -> Object | None:
        return self.get("VirtualMachine", namespace, name)

    def namespace(self, name: str) -> Object | None:
        return self.get("Namespace", "", name)

    def resource_quotas(self, namespace: str) -> list[Object]:
        return self._list("ResourceQuota", namespace)

    def pods(self, namespace: str) -> list[Object]:
        return self._list("Pod", namespace)

    def setting(self, name: str) -> Object | None:
        return self.get("Setting", "", name)

    def kubevirt_version(self) -> str:
        return self.version

    def now(self) -> datetime.datetime:
        return self.clock

    # writes
    async def _update(self, obj: Object) -> Object:
        kind, namespace, name = self._key(obj)
        self.calls.append(("update", kind, name))
        if (kind, namespace, name) not in self.store:
            raise errors.NotFound(f"{kind} {name} not found")
        return copy.deepcopy(self.put(obj))

    async def update_resource_quota(self, rq: Object) -> Object:
        written = await self._update(rq)
        self.writes[rq["metadata"]["namespace"]] += 1
        return written

    async def update_vmi(self, vmi: Object) -> Object:
        return await self._update(vmi)

    async def update_vm(self, vm: Object) -> Object:
        return await self._update(vm)

    async def delete_pod(self, namespace: str, name: str) -> None:
        self.calls.append(("delete", "Pod", name))
        if ("Pod", namespace, name) not in self.store:
            raise errors.NotFound(f"pod {name} not found")
        self.remove("Pod", namespace, name)

    def enqueue_migration_after(self, namespace: str, name: str, seconds: float) -> None:
        self.enqueued.append((namespace, name, seconds))

    # helpers for tests
    def quota(self, namespace: str, name: str = RQ1) -> Object:
        found = self.get("ResourceQuota", namespace, name)
        assert found is not None
        return found

    def rq_calls(self) -> int:
        return sum(
            1 for verb, kind, _ in self.calls if verb == "update" and kind == "ResourceQuota"
        )


# --- builders --------------------------------------------------------------------------------------


def quota(
    namespace: str,
    hard: Mapping[str, str | int],
    *,
    annotations: Mapping[str, str] | None = None,
    labelled: bool = True,
    name: str = RQ1,
    used: Mapping[str, str | int] | None = None,
) -> Object:
    obj: Object = {
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"hard": {k: str(v) for k, v in hard.items()}},
    }
    if labelled:
        obj["metadata"]["labels"] = {LABEL_DEFAULT_RESOURCE_QUOTA: "true"}
    if annotations is not None:
        obj["metadata"]["annotations"] = dict(annotations)
    if used is not None:
        obj["status"] = {"used": {k: str(v) for k, v in used.items()}}
    return obj


def namespace(name: str, annotation: str | None) -> Object:
    obj: Object = {"kind": "Namespace", "metadata": {"name": name}}
    if annotation is not None:
        obj["metadata"]["annotations"] = {CATTLE_ANNOTATION_RESOURCE_QUOTA: annotation}
    return obj


def vmi(
    name: str = "vm1",
    ns: str = RS,
    *,
    uid: str = UID,
    limits: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> Object:
    obj: Object = {
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "domain": {"resources": {"limits": dict(limits or {"cpu": "1", "memory": "1Gi"})}}
        },
    }
    if uid:
        obj["metadata"]["uid"] = uid
    if annotations is not None:
        obj["metadata"]["annotations"] = dict(annotations)
    return obj


PENDING_ANNOTATIONS = {
    ANNOTATION_MIGRATION_UID: VMIM_UID,
    ANNOTATION_MIGRATION_STATE: "Pending migration",
}
"""Go's tests set these on the VMI "to bypass vmi migration state updating"."""


def vmim(
    vmi_name: str = "vm1",
    ns: str = RS,
    *,
    phase: str = "Pending",
    uid: str = VMIM_UID,
    name: str = "vmim1",
    rejected: str | None = None,
    abort: bool = False,
) -> Object:
    conditions = []
    if rejected is not None:
        conditions.append({"type": "migrationRejectedByResourceQuota", "status": rejected})
    if abort:
        conditions.append({"type": "migrationAbortRequested", "status": "True"})
    status: Object = {"phase": phase}
    if conditions:
        status["conditions"] = conditions
    return {
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": name, "namespace": ns, "uid": uid},
        "spec": {"vmiName": vmi_name},
        "status": status,
    }


def mem_with_overhead(
    memory: int, ratio: str = "1.5", version: str = HARVESTER_VENDORED_KUBEVIRT
) -> int:
    """Go's test helper getMemWithOverhead: limits + GetMemoryOverhead of a VMI holding only a
    memory limit, at the default ratio."""
    bare = {"spec": {"domain": {"resources": {"limits": {"memory": str(memory)}}}}}
    return memory + launcher_memory_overhead(bare, ratio, version).value()


def vm_room(memory: int) -> str:
    """vmim_controller_test.go's vmResourceLimitStr."""
    return json.dumps(
        {"limits.cpu": "1", "limits.memory": str(mem_with_overhead(memory))}, separators=(",", ":")
    )


def hard(rq: Mapping[str, Any]) -> dict[str, Quantity]:
    return resources.parse_resource_list(rq["spec"]["hard"])


def quantities(values: Mapping[str, str | int]) -> dict[str, Quantity]:
    return {k: Quantity.parse(str(v)) for k, v in values.items()}


def annotations(rq: Mapping[str, Any]) -> dict[str, str]:
    return dict(rqutils.annotations_of(rq))


# ==================================================================================================
# vmim_controller_test.go
# ==================================================================================================

RS_NAMESPACE = namespace(RS, '{"limit":{"limitsCpu":"1", "limitsMemory":"1Gi"}}')


@dataclass
class VmimCase:
    name: str
    rq: Object
    vmi: Object
    vmim: Object
    want_annotations: dict[str, str] | None
    """None: the quota keeps no annotations at all."""
    want_hard: dict[str, str | int]


def _scaled_rq(key: str) -> Object:
    return quota(
        RS,
        {"limits.cpu": 2, "limits.memory": 2 * GI + mem_with_overhead(GI)},
        annotations={key: vm_room(GI)},
    )


VMIM_CASES = [
    VmimCase(
        "In Pending",
        quota(RS, {"limits.cpu": 1, "limits.memory": "2Gi"}),
        vmi(annotations=PENDING_ANNOTATIONS),
        vmim(),
        {UID_KEY: vm_room(GI), FLAG: "true"},
        {"limits.cpu": 1, "limits.memory": "2Gi"},  # "will be updated by rq controller later"
    ),
    VmimCase(
        "In Pending with a long VMI name, the UID based key is used in newer version",
        quota(RS, {"limits.cpu": 1, "limits.memory": "2Gi"}),
        vmi(LONG_VMI_NAME, annotations=PENDING_ANNOTATIONS),
        vmim(LONG_VMI_NAME),
        {UID_KEY: vm_room(GI), FLAG: "true"},
        {"limits.cpu": 1, "limits.memory": "2Gi"},
    ),
    VmimCase(
        "Succeeded, name based annotation key is deleted from ResourceQuota",
        _scaled_rq(legacy_migrating_vm_annotation_key("vm1")),
        vmi(annotations={}),
        vmim(phase="Succeeded"),
        {FLAG: "true"},
        {"limits.cpu": 2, "limits.memory": 2 * GI + mem_with_overhead(GI)},
    ),
    VmimCase(
        "Succeeded, UID based annotation key is deleted from ResourceQuota",
        _scaled_rq(UID_KEY),
        vmi(annotations={}),
        vmim(phase="Succeeded"),
        {FLAG: "true"},
        {"limits.cpu": 2, "limits.memory": 2 * GI + mem_with_overhead(GI)},
    ),
    # The Go table has this case twice, verbatim.
    VmimCase(
        "RQ is not in the target namespace, skip scaling",
        quota("random", {"limits.cpu": 1, "limits.memory": "2Gi"}, labelled=False),
        vmi(uid="", annotations=PENDING_ANNOTATIONS),
        vmim(),
        None,
        {"limits.cpu": 1, "limits.memory": "2Gi"},
    ),
    VmimCase(
        "Not the default RQ, skip scaling",
        quota(RS, {"limits.cpu": 1, "limits.memory": "2Gi"}, labelled=False),
        vmi(uid="", annotations=PENDING_ANNOTATIONS),
        vmim(),
        None,
        {"limits.cpu": 1, "limits.memory": "2Gi"},
    ),
    VmimCase(
        "RQ has zero quantity, skip scaling",
        quota(RS, {}),
        vmi(uid="", annotations=PENDING_ANNOTATIONS),
        vmim(),
        None,
        {},
    ),
]


@pytest.mark.parametrize("case", VMIM_CASES, ids=lambda c: c.name)
async def test_go_on_vmim_changed_with_resource_quota(case: VmimCase) -> None:
    """TestHandler_OnVmimChanged_WithResourceQuota."""
    cluster = FakeCluster(case.rq, case.vmi, case.vmim, RS_NAMESPACE)
    await MigrationHandler(cluster).on_vmim_changed("", case.vmim)

    rq = cluster.quota(case.rq["metadata"]["namespace"])
    if case.want_annotations is None:
        assert "annotations" not in rq["metadata"]
    else:
        assert annotations(rq) == case.want_annotations
    assert hard(rq) == quantities(case.want_hard)
    assert rq["spec"]["hard"] == case.rq["spec"]["hard"], "the VMIM handler never writes spec"
    assert ("update", "VirtualMachineInstance", case.vmi["metadata"]["name"]) not in cluster.calls


async def test_go_in_pending_room_is_exactly_the_one_go_computes() -> None:
    """The number behind vm_room(GI): 1Gi + the v1.8.3 KVM overhead at ratio 1.5."""
    assert mem_with_overhead(GI) == 1073741824 + 421527368
    cluster = FakeCluster(VMIM_CASES[0].rq, VMIM_CASES[0].vmi, RS_NAMESPACE)
    await MigrationHandler(cluster).on_vmim_changed("", vmim())
    assert (
        annotations(cluster.quota(RS))[UID_KEY] == '{"limits.cpu":"1","limits.memory":"1495269192"}'
    )


def _compensation_rq(*, hard_values: Mapping[str, str | int] | None = None) -> Object:
    return quota(
        RS,
        hard_values or {"limits.cpu": 1, "limits.memory": "2Gi"},
        annotations={
            UID_KEY: vm_room(2 * GI),
            FLAG: "false",
        },  # "to bypass controller EnqueueAfter"
    )


TWO_GI_VMI = vmi(limits={"cpu": "1", "memory": "2Gi"}, annotations=PENDING_ANNOTATIONS)


@pytest.mark.parametrize(
    ("name", "ns_annotation", "rq", "has_compensation"),
    [
        (
            "VMIM is in Pending and with RQ Rejected status, RQ is compensated",
            '{"limit":{"limitsCpu":"1", "limitsMemory":"1Gi"}}',
            _compensation_rq(),
            True,
        ),
        (
            "... but namespace has no annotation CattleAnnotationResourceQuota, RQ is not compensated",
            None,
            _compensation_rq(),
            False,
        ),
        (
            "... but namespace has annotation CattleAnnotationResourceQuota but zero memory limit",
            '{"limit":{"limitsCpu":"1", "limitsMemory":"0Gi"}}',
            _compensation_rq(),
            False,
        ),
        (
            "... but the default rq has no memory limits, RQ is not compensated",
            '{"limit":{"limitsCpu":"1", "limitsMemory":"1Gi"}}',
            _compensation_rq(hard_values={"limits.cpu": 1}),
            False,
        ),
    ],
)
async def test_go_on_vmim_changed_with_compensation_result(
    name: str, ns_annotation: str | None, rq: Object, has_compensation: bool
) -> None:
    """TestHandler_OnVmimChanged_WithResourceQuota_WithCompensationResult."""
    cluster = FakeCluster(rq, TWO_GI_VMI, namespace(RS, ns_annotation))
    await MigrationHandler(cluster).on_vmim_changed("", vmim(rejected="True"))
    written = cluster.quota(RS)
    assert rqutils.has_migrating_compensation(written) is has_compensation, name
    if has_compensation:
        # Go's test log: "compensate ... vm1 : map[limits.memory:{{555745096 0} ...}]", i.e.
        # used (none) + 2Gi + overhead - 2Gi + 128Mi.
        assert annotations(written)[COMPENSATION] == '{"limits.memory":"555745096"}'
        assert annotations(written)[FLAG] == "true"
        assert cluster.enqueued == []


async def test_without_compensation_a_refused_migration_is_left_as_it_is() -> None:
    """Harvester before v1.9 (the v1.7.0 seed): nothing answers migrationRejectedByResourceQuota,
    so the quota keeps the scale-up alone and the target pod stays refused."""
    rq = _compensation_rq()
    cluster = FakeCluster(
        rq, TWO_GI_VMI, namespace(RS, '{"limit":{"limitsCpu":"1", "limitsMemory":"1Gi"}}')
    )
    await MigrationHandler(cluster, compensation=False).on_vmim_changed("", vmim(rejected="True"))
    written = cluster.quota(RS)
    assert not rqutils.has_migrating_compensation(written)
    assert annotations(written)[FLAG] == "false"


COMPENSATED = {UID_KEY: vm_room(2 * GI), COMPENSATION: '{"limits.memory":"555745096"}'}


@pytest.mark.parametrize(
    ("name", "rq", "vmim_phase", "want_annotations", "want_hard"),
    [
        (
            "VMIM is in Pending and with RQ Rejected status, RQ auto-scaling is disabled, no op",
            quota(RS, {"limits.cpu": 1, "limits.memory": "2Gi"}, annotations={SKIP: "true"}),
            "Pending",
            {SKIP: "true"},
            {"limits.cpu": 1, "limits.memory": "2Gi"},
        ),
        (
            "Migration is finished(succeeded), RQ auto-scaling and compensation are both restored",
            quota(RS, {"limits.cpu": 2, "limits.memory": "4Gi"}, annotations=COMPENSATED),
            "Succeeded",
            {FLAG: "true"},
            {"limits.cpu": 2, "limits.memory": "4Gi"},
        ),
        (
            "Migration is failed (aborted), RQ auto-scaling and compensation restored",
            quota(RS, {"limits.cpu": 2, "limits.memory": "4Gi"}, annotations=COMPENSATED),
            "Failed",
            {FLAG: "true"},
            {"limits.cpu": 2, "limits.memory": "4Gi"},
        ),
    ],
)
async def test_go_on_vmim_changed_with_compensation(
    name: str,
    rq: Object,
    vmim_phase: str,
    want_annotations: dict[str, str],
    want_hard: dict[str, str | int],
) -> None:
    """TestHandler_OnVmimChanged_WithResourceQuota_WithCompensation."""
    the_vmi = vmi(
        limits={"cpu": "1", "memory": "2Gi"},
        annotations=PENDING_ANNOTATIONS if vmim_phase == "Pending" else {},
    )
    cluster = FakeCluster(rq, the_vmi, RS_NAMESPACE)
    await MigrationHandler(cluster).on_vmim_changed(
        "", vmim(phase=vmim_phase, rejected="True" if vmim_phase == "Pending" else None)
    )
    written = cluster.quota(RS)
    assert annotations(written) == want_annotations, name
    assert hard(written) == quantities(want_hard)


# ==================================================================================================
# resourcequota_controller_test.go
# ==================================================================================================


@dataclass
class OnDemandCase:
    name: str
    hard: dict[str, str | int]
    ns_annotation: str
    rq_annotations: dict[str, str] | None = None
    want_error: bool = False
    want_hard: dict[str, str | int] = field(default_factory=dict)


ROOM_1_2GI = '{"limits.cpu":"1","limits.memory":"2Gi"}'
NAME_KEYS = {
    legacy_migrating_vm_annotation_key("vm1"): ROOM_1_2GI,
    legacy_migrating_vm_annotation_key("vm2"): ROOM_1_2GI,
}
RQ_UID_KEY = migrating_uid_annotation_key(RQ_UID)

ON_DEMAND_CASES = [
    OnDemandCase(
        "ResourceQuota has all zero CPU and memory limits value, skip scaling",
        {"limits.cpu": 0, "limits.memory": 0},
        "",
        want_error=True,
    ),
    OnDemandCase(
        "ResourceQuota has no or empty CattleAnnotationResourceQuota on namespace annotation",
        {"limits.cpu": 1, "limits.memory": "10Gi"},
        "",
        want_error=True,
    ),
    OnDemandCase(
        "ResourceQuota has invalid CattleAnnotationResourceQuota on namespace annotation",
        {"limits.cpu": 1, "limits.memory": "10Gi"},
        '{"limit":{"limitsCpu":"10000m invalid"}}',
        want_error=True,
    ),
    OnDemandCase(
        "ResourceQuota has invalid Harvester VM migration annotation, skip scaling",
        {"limits.cpu": 1, "limits.memory": 10 * GI},
        '{"limit":{"limitsCpu":"1", "limitsMemory":"10240Mi"}}',
        {RQ_UID_KEY: '{"limits.cpu":"1","limits.memory":"2Gi invalid"}'},
        want_error=True,
    ),
    OnDemandCase(
        "ResourceQuota has no Harvester VM migration annotation, based on the namespace annotation",
        {"limits.cpu": 1, "limits.memory": 10 * GI},
        '{"limit":{"limitsCpu":"1", "limitsMemory":"10240Mi"}}',
        {},
        want_hard={"limits.cpu": 1, "limits.memory": 10 * GI},
    ),
    OnDemandCase(
        "ResourceQuota is scaled up per Harvester VM migration annotation",
        {"limits.cpu": 1, "limits.memory": "10Gi"},
        '{"limit":{"limitsCpu":"1", "limitsMemory":"10Gi"}}',
        {RQ_UID_KEY: ROOM_1_2GI},
        want_hard={"limits.cpu": 2, "limits.memory": "12Gi"},
    ),
    OnDemandCase(
        "ResourceQuota is scaled up only CPU limits per Harvester VM migration annotation",
        {"limits.cpu": 1},
        '{"limit":{"limitsCpu":"1"}}',
        {RQ_UID_KEY: ROOM_1_2GI},
        want_hard={"limits.cpu": 2},
    ),
    OnDemandCase(
        "ResourceQuota is scaled up only memory limits per Harvester VM migration annotation",
        {"limits.memory": "10Gi"},
        '{"limit":{"limitsMemory":"10Gi"}}',
        {RQ_UID_KEY: ROOM_1_2GI},
        want_hard={"limits.memory": "12Gi"},
    ),
    OnDemandCase(
        "ResourceQuota is further scaled up only memory limits (name based keys still work)",
        {"limits.cpu": 2, "limits.memory": "12Gi"},
        '{"limit":{"limitsCpu":"1", "limitsMemory":"10Gi"}}',
        NAME_KEYS,
        want_hard={"limits.cpu": 3, "limits.memory": "14Gi"},
    ),
    OnDemandCase(
        "ResourceQuota is scaled down per Harvester VM migration annotation",
        {"limits.cpu": 1, "limits.memory": "12Gi"},
        '{"limit":{"limitsCpu":"1", "limitsMemory":"10Gi"}}',
        {},
        want_hard={"limits.cpu": 1, "limits.memory": "10Gi"},
    ),
    OnDemandCase(
        "ResourceQuota scaling is finished per Harvester VM migration annotation",
        {"limits.cpu": 3, "limits.memory": "14Gi"},
        '{"limit":{"limitsCpu":"1", "limitsMemory":"10Gi"}}',
        NAME_KEYS,
        want_hard={"limits.cpu": 3, "limits.memory": "14Gi"},
    ),
    OnDemandCase(
        "Rancher resets ResourceQuota per namespace annotation, Harvester scales it up accordingly",
        {"limits.cpu": 1, "limits.memory": "20Gi"},
        '{"limit":{"limitsCpu":"1", "limitsMemory":"20Gi"}}',
        NAME_KEYS,
        want_hard={"limits.cpu": 3, "limits.memory": "24Gi"},
    ),
]


@pytest.mark.parametrize("case", ON_DEMAND_CASES, ids=lambda c: c.name)
def test_go_scale_resource_quota_on_demand(case: OnDemandCase) -> None:
    """TestHandler_OnResourceQuotaChanged (scaleResourceQuotaOnDemand)."""
    rq = quota(TEST, case.hard, annotations=case.rq_annotations)
    before = copy.deepcopy(rq)
    if case.want_error:
        with pytest.raises((SkipScaling, ValueError)):
            scale_resource_quota_on_demand(rq, case.ns_annotation)
        assert rq == before
        return
    changed = scale_resource_quota_on_demand(rq, case.ns_annotation)
    assert hard(rq) == quantities(case.want_hard)
    assert changed is (hard(before) != hard(rq))
    assert rq["metadata"] == before["metadata"], "only spec.hard changes"


def test_go_scaled_values_are_written_as_go_prints_them() -> None:
    rq = quota(
        TEST, {"limits.cpu": 1, "limits.memory": "10Gi"}, annotations={RQ_UID_KEY: ROOM_1_2GI}
    )
    scale_resource_quota_on_demand(rq, '{"limit":{"limitsCpu":"1000m", "limitsMemory":"10Gi"}}')
    assert rq["spec"]["hard"] == {"limits.cpu": "2", "limits.memory": "12Gi"}


@pytest.mark.parametrize(
    ("name", "rq_annotations", "hard_before", "want_annotations", "want_hard"),
    [
        (
            "ResourceQuota is scaled up per Harvester VM migration annotation, flag is cleared",
            {RQ_UID_KEY: ROOM_1_2GI, FLAG: "true"},
            {"limits.cpu": 1, "limits.memory": "10Gi"},
            {RQ_UID_KEY: ROOM_1_2GI, FLAG: "false"},
            {"limits.cpu": 2, "limits.memory": "12Gi"},
        ),
        (
            "ResourceQuota is scaled up per Harvester VM migration annotation, no flag is set by legacy controller",
            {RQ_UID_KEY: ROOM_1_2GI},
            {"limits.cpu": 1, "limits.memory": "10Gi"},
            {RQ_UID_KEY: ROOM_1_2GI},
            {"limits.cpu": 2, "limits.memory": "12Gi"},
        ),
        (
            "ResourceQuota has sync requests but no real changes, the flag is cleared when it is set",
            {RQ_UID_KEY: ROOM_1_2GI, FLAG: "true"},
            {"limits.cpu": 1, "limits.memory": "12Gi"},
            {RQ_UID_KEY: ROOM_1_2GI, FLAG: "false"},
            {"limits.cpu": 2, "limits.memory": "12Gi"},
        ),
        (
            "ResourceQuota is processed, no quota annotation change, no sync flag; then no change",
            {RQ_UID_KEY: ROOM_1_2GI},
            {"limits.cpu": 1, "limits.memory": "12Gi"},
            {RQ_UID_KEY: ROOM_1_2GI},
            {"limits.cpu": 2, "limits.memory": "12Gi"},
        ),
        (
            "ResourceQuota auto scaling is disabled",
            {**NAME_KEYS, FLAG: "true", SKIP: "true"},
            {"limits.cpu": 3, "limits.memory": "10Gi"},
            {**NAME_KEYS, FLAG: "true", SKIP: "true"},
            {"limits.cpu": 3, "limits.memory": "10Gi"},
        ),
    ],
)
async def test_go_on_resource_quota_changed_by_controller(
    name: str,
    rq_annotations: dict[str, str],
    hard_before: dict[str, str | int],
    want_annotations: dict[str, str],
    want_hard: dict[str, str | int],
) -> None:
    """TestHandler_OnResourceQuotaChanged_ByController."""
    rq = quota(TEST, hard_before, annotations=rq_annotations)
    cluster = FakeCluster(rq, namespace(TEST, '{"limit":{"limitsCpu":"1", "limitsMemory":"10Gi"}}'))
    await ResourceQuotaHandler(cluster).on_resource_quota_changed("rq1", rq)
    written = cluster.quota(TEST)
    assert annotations(written) == want_annotations, name
    assert hard(written) == quantities(want_hard)


# ==================================================================================================
# calculator_test.go (the VM-start check)
# ==================================================================================================


@pytest.mark.parametrize(
    ("annotation", "want"),
    [
        (
            '{"limit":{"limitsCpu":"2000m","limitsMemory":"3000Mi"}}',
            {"limitsCpu": "2000m", "limitsMemory": "3000Mi"},
        ),
        ('{"limit":{"limitsCpu":"2000m"}}', {"limitsCpu": "2000m"}),
        ('{"limit":{"limitsMemory":"3000Mi"}}', {"limitsMemory": "3000Mi"}),
        (None, None),
    ],
    ids=["both exist", "cpu exist", "memory exist", "none exist"],
)
def test_go_vm_validator_check_resource_quota(
    annotation: str | None, want: dict[str, str] | None
) -> None:
    """Test_vmValidator_checkResourceQuota (getNamespaceResourceQuota)."""
    found = namespace_resource_quota(namespace("ns", annotation))
    assert (found.fields if found is not None else None) == want


def test_go_namespace_resource_quota_quirks() -> None:
    """An annotation with none of the three fields is "no quota"; a present but empty one is
    not JSON, so the VM-start check fails with a decoding error."""
    assert namespace_resource_quota(namespace("ns", '{"limit":{"pods":"3"}}')) is None
    with pytest.raises(ValueError, match="not valid JSON"):
        namespace_resource_quota(namespace("ns", ""))


def start_vm(cores: int, memory_gi: int) -> Object:
    """calculator_test.go generateRQ: limits with DecimalSI quantities."""
    limits = {"cpu": str(cores), "memory": str(memory_gi * GI)}
    return {"spec": {"template": {"spec": {"domain": {"resources": {"limits": limits}}}}}}


START_NRQ = rqutils.RancherQuotaLimit({"limitsCpu": "4000m", "limitsMemory": "10240Mi"})
TWO_UIDS = {
    migrating_uid_annotation_key("1afcf4d9-b8a7-464a-a4e9-abe81fc7eacd"): ROOM_1_2GI,
    migrating_uid_annotation_key("2afcf4d9-b8a7-464a-a4e9-abe81fc7eacd"): ROOM_1_2GI,
}
TWO_NAMES = {
    legacy_migrating_vm_annotation_key("vminmigration1"): ROOM_1_2GI,
    legacy_migrating_vm_annotation_key("vminmigration2"): ROOM_1_2GI,
}


@pytest.mark.parametrize(
    ("name", "rq_annotations", "hard_values", "used", "want_error"),
    [
        ("VM can start as quota is enough", {}, (4, 10 * GI), (1, 2 * GI), None),
        ("VM can't start due to insufficient memory", {}, (4, 10 * GI), (2, 9 * GI), "memory"),
        ("VM can't start due to insufficient cpu", {}, (4, 10 * GI), (4, 2 * GI), "cpu"),
        ("VM can start and RQ is also scaled", TWO_UIDS, (6, int(14.5 * GI)), (4, 8 * GI), None),
        (
            "VM can't start and RQ is also scaled",
            TWO_UIDS,
            (6, int(14.5 * GI)),
            (3, 13 * GI),
            "memory",
        ),
        (
            "VM can start and RQ is also scaled (name keys)",
            TWO_NAMES,
            (6, int(14.5 * GI)),
            (3, 12 * GI),
            None,
        ),
    ],
)
def test_go_contains_enough_resource_quota_to_start_vm(
    name: str,
    rq_annotations: dict[str, str],
    hard_values: tuple[int, int],
    used: tuple[int, int],
    want_error: str | None,
) -> None:
    """Test_vmValidator_containsEnoughResourceQuotaToStartVM (default ratio: the setting cache is
    nil in Go's test)."""
    rq = quota(
        "default",
        {"limits.cpu": hard_values[0], "limits.memory": hard_values[1]},
        annotations=rq_annotations,
        used={"limits.cpu": used[0], "limits.memory": used[1]},
    )
    ratio = additional_guest_memory_overhead_ratio(None)
    if want_error is None:
        contains_enough_resource_quota_to_start_vm(
            start_vm(1, 1), START_NRQ, rq, ratio, HARVESTER_VENDORED_KUBEVIRT
        )
        return
    with pytest.raises(InsufficientResourceError, match=f"^{want_error} insufficient resources"):
        contains_enough_resource_quota_to_start_vm(
            start_vm(1, 1), START_NRQ, rq, ratio, HARVESTER_VENDORED_KUBEVIRT
        )


@pytest.mark.parametrize(
    ("name", "memory_gi", "ratio", "fits"),
    [
        ("VM can start as quota is enough with default overhead-ratio 1.5", 4, "1.5", True),
        ("VM can start as quota is enough with customized overhead-ratio 2.5", 4, "2.5", True),
        (
            "VM can't start as quota is not enough with customized overhead-ratio 5.0",
            4,
            "5.0",
            False,
        ),
        ("VM can start as quota is enough with customized overhead-ratio 5.0", 3, "5.0", True),
    ],
)
def test_go_contains_enough_resource_quota_with_changed_overhead_ratio(
    name: str, memory_gi: int, ratio: str, fits: bool
) -> None:
    """Test_vmValidator_containsEnoughResourceQuotaToStartVM_WithChangedOverheadRatio: scenario 10
    (cold start after a ratio change): quota 5120Mi, a 4-core VM."""
    nrq = rqutils.RancherQuotaLimit({"limitsCpu": "5000m", "limitsMemory": "5120Mi"})
    rq = quota("default", {"limits.cpu": 4, "limits.memory": 10 * GI})
    setting = {"metadata": {"name": RATIO_SETTING}, "value": ratio}
    effective = additional_guest_memory_overhead_ratio(setting)
    vm = start_vm(4, memory_gi)
    if fits:
        contains_enough_resource_quota_to_start_vm(
            vm, nrq, rq, effective, HARVESTER_VENDORED_KUBEVIRT
        )
    else:
        with pytest.raises(InsufficientResourceError, match=r"^memory"):
            contains_enough_resource_quota_to_start_vm(
                vm, nrq, rq, effective, HARVESTER_VENDORED_KUBEVIRT
            )


# ==================================================================================================
# The ratio setting, the annotation reader, the helpers
# ==================================================================================================


@pytest.mark.parametrize(
    ("setting", "want"),
    [
        (None, "1.5"),
        ({"value": "4.5"}, "4.5"),
        ({"value": "", "default": "2.0"}, "2.0"),
        ({"value": "", "default": ""}, "1.5"),
        ({"value": "0"}, "1.5"),  # "0" tells KubeVirt: no ratio; Harvester still scales for 1.5
        ({"value": "0.0"}, "1.5"),
        ({"value": "0.5"}, "1.5"),
        ({"value": "10.5"}, "1.5"),
        ({"value": "abc"}, "1.5"),
        ({"value": " 2"}, "1.5"),  # strconv.ParseFloat does not trim
        ({"value": "10"}, "10"),
        ({"value": "1"}, "1"),
    ],
)
def test_additional_guest_memory_overhead_ratio(setting: Object | None, want: str) -> None:
    assert additional_guest_memory_overhead_ratio(setting) == want


def test_namespace_annotation_read_as_harvester_reads_it() -> None:
    """Only limitsCpu/limitsMemory are parsed: an invalid requestsStorage does not stop scaling;
    Rancher v2.14's `extended` is ignored (scenario 21); keys fold case; null is a nil pointer."""
    rq = quota(
        TEST, {"limits.cpu": 1, "limits.memory": "10Gi"}, annotations={RQ_UID_KEY: ROOM_1_2GI}
    )
    text = '{"limit":{"LimitsCpu":"1","limitsMemory":"10Gi","requestsStorage":"bad","extended":{"x":1}}}'
    assert scale_resource_quota_on_demand(rq, text)
    assert hard(rq) == quantities({"limits.cpu": 2, "limits.memory": "12Gi"})
    assert rqutils.decode_namespace_resource_quota("null") is None
    rq2 = quota(TEST, {"limits.cpu": 1}, annotations={RQ_UID_KEY: ROOM_1_2GI})
    assert scale_resource_quota_on_demand(rq2, "null") is False
    with pytest.raises(ValueError, match="not a string"):
        rqutils.decode_namespace_resource_quota('{"limit":{"limitsCpu":3}}')


def test_annotation_helpers_keep_go_semantics() -> None:
    rq = quota(TEST, {"limits.cpu": 1})
    rqutils.clear_migrating_scaling_resync_needed(rq)
    assert "annotations" not in rq["metadata"], "clearing an absent flag writes nothing"
    rqutils.set_migrating_scaling_resync_needed(rq)
    rqutils.clear_migrating_scaling_resync_needed(rq)
    assert annotations(rq) == {FLAG: "false"}
    rq["metadata"]["annotations"][COMPENSATION] = ""
    assert not rqutils.has_migrating_compensation(rq)
    assert rqutils.delete_migrating_compensation(rq), "an empty value is still a key to delete"
    rq["metadata"]["annotations"][SKIP] = "True"
    assert not rqutils.is_auto_scaling_disabled(rq), "only exactly 'true' counts"
    rqutils.add_migrating_vm(rq, "vm1", UID, {})
    assert annotations(rq)[UID_KEY] == "{}"


# ==================================================================================================
# The VMI handler and the VMI annotations
# ==================================================================================================


def vm(name: str = "vm1", ns: str = RS) -> Object:
    return {"kind": "VirtualMachine", "metadata": {"name": name, "namespace": ns}}


def target_pod(name: str, migration_uid: str, ns: str = RS) -> Object:
    return {
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"kubevirt.io/migrationJobUID": migration_uid},
        },
    }


def completed_vmi(
    *, migration_uid: str, abort_status: str | None, annotations: Mapping[str, str]
) -> Object:
    obj = vmi(annotations=annotations)
    state: Object = {"migrationUid": migration_uid, "completed": True}
    if abort_status is not None:
        state["abortStatus"] = abort_status
    obj["status"] = {"migrationState": state}
    return obj


async def test_vmim_phases_set_the_vmi_annotations_and_touch_the_vm() -> None:
    the_vmi = vmi()
    cluster = FakeCluster(the_vmi, vm(), RS_NAMESPACE)
    handler = MigrationHandler(cluster)
    expected = {
        "": "Pending migration",
        "Scheduling": "Migrating",
        "Running": "Migrating",
    }
    for phase, state in expected.items():
        await handler.on_vmim_changed("", vmim(phase=phase))
        current = cluster.vmi(RS, "vm1")
        assert current is not None
        assert current["metadata"]["annotations"][ANNOTATION_MIGRATION_STATE] == state
        assert current["metadata"]["annotations"][ANNOTATION_MIGRATION_UID] == VMIM_UID
    await handler.on_vmim_changed("", vmim(phase="Running", abort=True))
    current = cluster.vmi(RS, "vm1")
    assert current is not None
    assert current["metadata"]["annotations"][ANNOTATION_MIGRATION_STATE] == "Aborting migration"
    the_vm = cluster.vm(RS, "vm1")
    assert the_vm is not None
    assert the_vm["metadata"]["annotations"][ANNOTATION_TIMESTAMP] == "2026-01-01T12:00:00Z"
    # A phase not in Harvester's switch (newer KubeVirt phases) changes nothing.
    calls = len(cluster.calls)
    await handler.on_vmim_changed("", vmim(phase="WaitingForSync"))
    assert len(cluster.calls) == calls


async def test_finished_vmim_touches_the_vm_every_time_it_is_processed() -> None:
    cluster = FakeCluster(vmi(annotations={}), vm(), RS_NAMESPACE)
    handler = MigrationHandler(cluster)
    for _ in range(3):
        await handler.on_vmim_changed("", vmim(phase="Succeeded"))
    assert cluster.calls.count(("update", "VirtualMachine", "vm1")) == 3
    assert ("update", "VirtualMachineInstance", "vm1") not in cluster.calls


async def test_vmi_handler_resets_annotations_when_its_migration_completed() -> None:
    annotated = {
        ANNOTATION_MIGRATION_UID: VMIM_UID,
        ANNOTATION_MIGRATION_STATE: "Migrating",
        "other": "x",
    }
    the_vmi = completed_vmi(migration_uid=VMIM_UID, abort_status=None, annotations=annotated)
    cluster = FakeCluster(the_vmi, vm(), target_pod("virt-launcher-vm1-target", VMIM_UID))
    await MigrationHandler(cluster).on_vmi_changed("", the_vmi)
    current = cluster.vmi(RS, "vm1")
    assert current is not None
    assert current["metadata"]["annotations"] == {"other": "x"}
    assert cluster.get("Pod", RS, "virt-launcher-vm1-target") is not None, "not aborted: kept"


async def test_vmi_handler_deletes_the_first_leftover_target_pod_after_an_abort() -> None:
    """kubevirt/kubevirt#5373 (scenario 14)."""
    the_vmi = completed_vmi(
        migration_uid=VMIM_UID, abort_status="Succeeded", annotations={"a": "b"}
    )
    cluster = FakeCluster(
        the_vmi,
        target_pod("virt-launcher-vm1-a", VMIM_UID),
        target_pod("virt-launcher-vm1-b", VMIM_UID),
        target_pod("virt-launcher-vm1-other", "another-migration"),
    )
    await MigrationHandler(cluster).on_vmi_changed("", the_vmi)
    assert cluster.get("Pod", RS, "virt-launcher-vm1-a") is None
    assert cluster.get("Pod", RS, "virt-launcher-vm1-b") is not None, "only the first one"
    assert cluster.get("Pod", RS, "virt-launcher-vm1-other") is not None


async def test_vmi_handler_ignores_a_vmi_without_annotations() -> None:
    the_vmi = completed_vmi(migration_uid=VMIM_UID, abort_status="Succeeded", annotations={})
    del the_vmi["metadata"]["annotations"]
    cluster = FakeCluster(the_vmi, target_pod("virt-launcher-vm1-a", VMIM_UID))
    await MigrationHandler(cluster).on_vmi_changed("", the_vmi)
    assert cluster.get("Pod", RS, "virt-launcher-vm1-a") is not None


async def test_a_missing_namespace_is_an_error_to_retry() -> None:
    cluster = FakeCluster(quota(RS, {"limits.cpu": 1, "limits.memory": "2Gi"}), vmi())
    with pytest.raises(NamespaceNotFound):
        await MigrationHandler(cluster).on_vmim_changed("", vmim())
    with pytest.raises(NamespaceNotFound):
        await ResourceQuotaHandler(cluster).on_resource_quota_changed("", cluster.quota(RS))


# ==================================================================================================
# Failure scenarios, end to end on the fake cluster with quota admission arithmetic
# ==================================================================================================


class Namespace:
    """One namespace played by hand: KubeVirt's launcher pods admitted (or not) by quota, Harvester's
    handlers run as their controllers would, kube-controller-manager's status.used kept current."""

    def __init__(
        self,
        name: str,
        base: Mapping[str, str],
        hard_values: Mapping[str, str],
        *,
        kubevirt_version: str,
        ratio: str = "1.5",
    ) -> None:
        self.name = name
        self.version = kubevirt_version
        self.ratio = ratio
        self.cluster = FakeCluster(
            namespace(name, json.dumps({"limit": dict(base)})),
            quota(name, hard_values, annotations={}),
            {
                "kind": "Setting",
                "metadata": {"name": RATIO_SETTING},
                "value": ratio,
                "default": "1.5",
            },
            kubevirt_version=kubevirt_version,
        )
        self.migrations = MigrationHandler(self.cluster)
        self.quotas = ResourceQuotaHandler(self.cluster)
        self.vmis: dict[str, Object] = {}
        self.vmims: dict[str, Object] = {}
        self.pod_of: dict[str, str] = {}
        self.targets: dict[str, str] = {}
        self.refresh_used()

    # KubeVirt's part
    def set_ratio(self, ratio: str) -> None:
        self.ratio = ratio
        self.cluster.put({"kind": "Setting", "metadata": {"name": RATIO_SETTING}, "value": ratio})

    def start_vm(self, name: str, *, cores: int, memory: str, **vmi_options: Any) -> None:
        spec = objects.vmi(name, self.name, cores=cores, memory=memory, **vmi_options)
        spec["kind"] = "VirtualMachineInstance"
        self.vmis[name] = spec
        self.cluster.put(spec)
        self.pod_of[name] = f"virt-launcher-{name}-src"
        refused = self.create_pod(name, self.pod_of[name])
        assert refused is None, refused

    def launcher(self, vm_name: str, pod_name: str, migration: Object | None = None) -> Object:
        pod = objects.launcher_pod(
            self.vmis[vm_name],
            pod_name,
            ratio=self.ratio,
            kubevirt_version=self.version,
            migration=migration,
        )
        pod["kind"] = "Pod"
        return pod

    def create_pod(
        self, vm_name: str, pod_name: str, migration: Object | None = None
    ) -> str | None:
        """Quota admission: None if admitted, else the API server's "exceeded quota" message."""
        pod = self.launcher(vm_name, pod_name, migration)
        rq = self.cluster.quota(self.name)
        limits = hard(rq)
        used = resources.parse_resource_list((rq.get("status") or {}).get("used"))
        requested = {k: v for k, v in pod_quota_usage(pod).items() if k in limits}
        exceeded = [k for k, v in requested.items() if used.get(k, Quantity()) + v > limits[k]]
        if exceeded:
            return (
                f"exceeded quota: {RQ1}, requested: {_pretty(requested, exceeded)}, "
                f"used: {_pretty(used, exceeded)}, limited: {_pretty(limits, exceeded)}"
            )
        self.cluster.put(pod)
        self.refresh_used()
        return None

    def delete_pod(self, pod_name: str) -> None:
        self.cluster.remove("Pod", self.name, pod_name)
        self.refresh_used()

    def refresh_used(self) -> None:
        rq = self.cluster.quota(self.name)
        keys = set(rq["spec"]["hard"])
        total = resources.total(pod_quota_usage(p) for p in self.cluster.pods(self.name))
        rq["status"] = {"used": {k: str(total.get(k, Quantity())) for k in sorted(keys)}}
        self.cluster.put(rq)  # a status write: not one of Harvester's writes

    # Harvester's part
    async def vmim_event(self, vm_name: str, phase: str, *, rejected: bool = False) -> None:
        migration = self.vmims.get(vm_name) or vmim(
            vm_name, self.name, uid=f"mig-{vm_name}-{len(self.vmims)}", name=f"{vm_name}-mig"
        )
        migration["status"]["phase"] = phase
        if rejected:
            migration["status"]["conditions"] = [
                {"type": "migrationRejectedByResourceQuota", "status": "True"}
            ]
        self.vmims[vm_name] = migration
        await self.migrations.on_vmim_changed("", migration)
        await self.settle()

    async def settle(self) -> None:
        """Runs the ResourceQuota handler on each new version of the quota until it stops writing
        (each write is a new event of the quota)."""
        for _ in range(5):
            before = self.cluster.rq_calls()
            await self.quotas.on_resource_quota_changed("", self.cluster.quota(self.name))
            if self.cluster.rq_calls() == before:
                return
        raise AssertionError("the ResourceQuota handler never settled")

    async def migrate_to_target(self, vm_name: str) -> str | None:
        """Pending (Harvester scales), then the target pod; None if it was admitted."""
        if vm_name not in self.vmims:
            await self.vmim_event(vm_name, "Pending")
        migration = self.vmims[vm_name]
        target = f"virt-launcher-{vm_name}-{migration['metadata']['uid']}"
        refused = self.create_pod(vm_name, target, migration)
        if refused is None:
            self.targets[vm_name] = target
        return refused

    def source_pod_gone(self, vm_name: str) -> None:
        """The finished migration's source pod completes: the target is now the VM's pod, and
        the next migration of the VM is a new VMIM."""
        self.delete_pod(self.pod_of[vm_name])
        self.pod_of[vm_name] = self.targets.pop(vm_name)
        del self.vmims[vm_name]

    # reading
    def hard(self) -> dict[str, Quantity]:
        return hard(self.cluster.quota(self.name))

    def annotations(self) -> dict[str, str]:
        return annotations(self.cluster.quota(self.name))


def _pretty(values: Mapping[str, Quantity], keys: list[str]) -> str:
    return ",".join(f"{k}={values.get(k, Quantity())}" for k in sorted(keys))


V121_SHARE = 2372577281
"""KubeVirt 0.54's launcher pod for a 1-core/2Gi VM (the v1.2.1 seed's annotation value): the
compute container only, no sidecar on 0.54, so Harvester's share is the whole pod."""


async def test_scenario_6_room_released_at_succeeded_while_the_source_pod_still_counts() -> None:
    """The v1.2.1 seed: four 1-core/2Gi VMs fill the quota; four migrations are Pending at once.
    Harvester removes a VM's key at Succeeded, but its source pod still counts for ~31 s, so the
    last target pod is refused until the earlier source pods are gone."""
    full = {"limits.cpu": "4", "limits.memory": str(4 * V121_SHARE)}
    ns = Namespace(
        "v121",
        {"limitsCpu": "4", "limitsMemory": str(4 * V121_SHARE)},
        full,
        kubevirt_version="0.54",
    )
    for name in ("vm1", "vm2", "vm3", "vm4"):
        ns.start_vm(name, cores=1, memory="2Gi")
    for name in ("vm1", "vm2", "vm3", "vm4"):
        await ns.vmim_event(name, "Pending")
    assert ns.annotations()[migrating_uid_annotation_key(ns.vmis["vm1"]["metadata"]["uid"])] == (
        '{"limits.cpu":"1","limits.memory":"2372577281"}'
    )
    assert ns.hard() == quantities({"limits.cpu": 8, "limits.memory": 8 * V121_SHARE})

    # parallelOutboundMigrationsPerNode = 2: vm1 and vm2 go first.
    assert await ns.migrate_to_target("vm1") is None
    assert await ns.migrate_to_target("vm2") is None
    await ns.vmim_event("vm1", "Succeeded")  # vm1's source pod has not completed yet
    assert ns.hard() == quantities({"limits.cpu": 7, "limits.memory": 7 * V121_SHARE})
    assert await ns.migrate_to_target("vm3") is None  # 4 sources + 3 targets = 7 fits in 7
    await ns.vmim_event("vm2", "Succeeded")
    assert ns.hard() == quantities({"limits.cpu": 6, "limits.memory": 6 * V121_SHARE})

    refusal = await ns.migrate_to_target("vm4")
    assert refusal == (
        "exceeded quota: rq1, requested: limits.cpu=1,limits.memory=2372577281, "
        "used: limits.cpu=7,limits.memory=16608040967, limited: limits.cpu=6,limits.memory=14235463686"
    )
    # ~31 s later the source pods complete; only then does vm4's target fit.
    ns.source_pod_gone("vm1")
    ns.source_pod_gone("vm2")
    assert await ns.migrate_to_target("vm4") is None
    for name in ("vm3", "vm4"):
        await ns.vmim_event(name, "Succeeded")
    assert ns.hard() == quantities(full), "back to the base, never below it"


async def test_scenario_7_requests_memory_and_pods_are_never_scaled() -> None:
    """The v1.2.1 reproduction: three 1-core/1Gi VMs, requests.memory 4200Mi. Harvester scales
    limits.* for both migrations; the second target pod is refused on requests.memory, which
    Harvester never touches (nor pods)."""
    hard_values = {
        "limits.cpu": "3",
        "limits.memory": "4404019200",
        "requests.cpu": "3",
        "requests.memory": "4200Mi",
        "pods": "50",
    }
    ns = Namespace(
        "v121r",
        {"limitsCpu": "3", "limitsMemory": "4404019200"},
        hard_values,
        kubevirt_version="0.54",
    )
    for name in ("vm1", "vm2", "vm3"):
        ns.start_vm(name, cores=1, memory="1Gi")
    assert ns.cluster.quota("v121r")["status"]["used"]["requests.memory"] == "2750460Ki"
    assert await ns.migrate_to_target("vm1") is None
    refusal = await ns.migrate_to_target("vm2")
    assert refusal == (
        "exceeded quota: rq1, requested: requests.memory=916820Ki, "
        "used: requests.memory=3667280Ki, limited: requests.memory=4200Mi"
    )
    assert ns.hard()["limits.cpu"] == Quantity.parse("5"), "limits.* are scaled for both"
    for key in ("requests.cpu", "requests.memory", "pods"):
        assert ns.hard()[key] == Quantity.parse(hard_values[key]), f"{key} never scaled"

    full_pods = Namespace(
        "pods",
        {"limitsCpu": "10", "limitsMemory": "20Gi"},
        {"limits.cpu": "10", "limits.memory": "20Gi", "pods": "1"},
        kubevirt_version="1.6",
    )
    full_pods.start_vm("vm1", cores=1, memory="1Gi")
    refusal = await full_pods.migrate_to_target("vm1")
    assert refusal is not None and "requested: pods=1" in refusal


V170_SHARE = 4737464313
V170_POD = 4797464313
"""Seed v1.7.0 (KubeVirt 1.6, ratio 1.5, 2 cores/4Gi): Harvester's share (compute container) and
the pod's real usage (+60M for the guest-console-log sidecar)."""


async def test_scenario_8_sidecar_gap_blocks_a_namespace_at_100_percent() -> None:
    """The share leaves out the guest-console-log sidecar (+15m, +60M). At 100 % CPU the target
    pod is 15m short; compensation is memory-only. At 100 % memory the compensation formula sees
    used + share == hard ("fits") and adds nothing, while the pod is 60M short: stuck for good."""
    cpu_full = Namespace(
        "cpu-full",
        {"limitsCpu": "2015m", "limitsMemory": "20Gi"},
        {"limits.cpu": "2015m", "limits.memory": "20Gi"},
        kubevirt_version="1.6",
    )
    cpu_full.start_vm("vm1", cores=2, memory="4Gi")
    refusal = await cpu_full.migrate_to_target("vm1")
    assert refusal == (
        "exceeded quota: rq1, requested: limits.cpu=2015m, used: limits.cpu=2015m, limited: limits.cpu=4015m"
    )
    await cpu_full.vmim_event("vm1", "Pending", rejected=True)
    assert COMPENSATION not in cpu_full.annotations()
    assert await cpu_full.migrate_to_target("vm1") is not None, "still refused"

    memory_full = Namespace(
        "memory-full",
        {"limitsCpu": "10", "limitsMemory": str(V170_POD)},
        {"limits.cpu": "10", "limits.memory": str(V170_POD)},
        kubevirt_version="1.6",
    )
    memory_full.start_vm("vm1", cores=2, memory="4Gi")
    refusal = await memory_full.migrate_to_target("vm1")
    assert memory_full.hard()["limits.memory"] == Quantity.from_int(V170_POD + V170_SHARE)
    assert refusal == (
        "exceeded quota: rq1, requested: limits.memory=4797464313, "
        "used: limits.memory=4797464313, limited: limits.memory=9534928626"
    )
    await memory_full.vmim_event("vm1", "Pending", rejected=True)
    assert memory_full.cluster.enqueued == []
    assert COMPENSATION not in memory_full.annotations(), "used + share == hard: 'no need'"
    assert await memory_full.migrate_to_target("vm1") is not None, "60M short, forever"


async def test_scenario_9_ratio_raised_second_migration_is_compensated_in_v19() -> None:
    """Seed v1.7.0, tests 2 and 3, on Harvester v1.9. At ratio 4.5 the first migration fits in the
    spare room (hard 5/10865341313), then the VM uses 5682461313 of 5000Mi. The second target pod
    is refused exactly as in the seed; v1.9 then compensates used + share - hard + 128Mi =
    573799041 and the pod fits. The VM stays above the base and cannot cold-start again."""
    base = {"limitsCpu": "3000m", "limitsMemory": "5000Mi"}
    ns = Namespace(
        "v170", base, {"limits.cpu": "3", "limits.memory": "5000Mi"}, kubevirt_version="1.6"
    )
    ns.start_vm("vm1", cores=2, memory="4Gi")
    used = ns.cluster.quota("v170")["status"]["used"]
    assert used == {"limits.cpu": "2015m", "limits.memory": "4797464313"}
    ns.set_ratio("4.5")

    assert await ns.migrate_to_target("vm1") is None
    assert ns.hard() == quantities({"limits.cpu": 5, "limits.memory": 10865341313})
    assert ns.cluster.quota("v170")["status"]["used"]["limits.memory"] == "10479925626"
    await ns.vmim_event("vm1", "Succeeded")
    ns.source_pod_gone("vm1")
    assert ns.cluster.quota("v170")["status"]["used"]["limits.memory"] == "5682461313"  # 105.8 %
    assert ns.hard() == quantities({"limits.cpu": 3, "limits.memory": "5000Mi"})

    refusal = await ns.migrate_to_target("vm1")
    assert refusal == (
        "exceeded quota: rq1, requested: limits.memory=5682461313, "
        "used: limits.memory=5682461313, limited: limits.memory=10865341313"
    )
    writes_before = ns.cluster.writes["v170"]
    await ns.vmim_event("vm1", "Pending", rejected=True)  # KubeVirt flagged it
    assert ns.annotations()[COMPENSATION] == '{"limits.memory":"573799041"}'
    assert ns.annotations()[FLAG] == "false"
    assert ns.hard() == quantities(
        {"limits.cpu": 5, "limits.memory": 5242880000 + 5622461313 + 573799041}
    )
    assert ns.cluster.writes["v170"] - writes_before == 2, "compensation, then spec.hard"
    assert await ns.migrate_to_target("vm1") is None, "v1.9: the second migration goes through"
    await ns.vmim_event("vm1", "Succeeded")
    assert COMPENSATION not in ns.annotations()
    assert ns.hard() == quantities({"limits.cpu": 3, "limits.memory": "5000Mi"})

    # Scenario 10: the same VM cannot start again at 4.5 (Harvester's VM-start check).
    rq = ns.cluster.quota("v170")
    rq["status"]["used"] = {"limits.cpu": "0", "limits.memory": "0"}
    limit = namespace_resource_quota(namespace("v170", json.dumps({"limit": base})))
    assert limit is not None
    vm_spec = {
        "spec": {
            "template": {
                "spec": {"domain": {"resources": {"limits": {"cpu": "2", "memory": "4Gi"}}}}
            }
        }
    }
    with pytest.raises(InsufficientResourceError, match="memory"):
        contains_enough_resource_quota_to_start_vm(vm_spec, limit, rq, "4.5", "1.6")


async def test_compensation_is_recomputed_against_itself_and_replaced() -> None:
    """A second rejection after a compensation computes against a hard that already holds the
    first one, and replaces it: here it shrinks (still 128Mi over the need)."""
    rq = quota(
        RS,
        {"limits.cpu": 2, "limits.memory": 2 * GI + mem_with_overhead(2 * GI) + 555745096},
        annotations={
            UID_KEY: vm_room(2 * GI),
            COMPENSATION: '{"limits.memory":"555745096"}',
            FLAG: "false",
        },
        used={"limits.memory": 2 * GI + 700 * MI},
    )
    before_hard = hard(rq)["limits.memory"].value()
    cluster = FakeCluster(rq, TWO_GI_VMI, namespace(RS, '{"limit":{"limitsMemory":"2Gi"}}'))
    needed, room = calculate_compensation_resource_quota_with_vmi(
        rq, TWO_GI_VMI, "1.5", HARVESTER_VENDORED_KUBEVIRT
    )
    assert needed and room is not None
    await MigrationHandler(cluster).on_vmim_changed("", vmim(rejected="True"))
    new = Quantity.parse(json.loads(annotations(cluster.quota(RS))[COMPENSATION])["limits.memory"])
    assert new.value() == 2 * GI + 700 * MI + mem_with_overhead(2 * GI) - before_hard + 128 * MI
    assert new < Quantity.from_int(555745096), "replaced, smaller than the first"


async def test_compensation_waits_for_the_scale_up_and_the_flag() -> None:
    """The ping-pong: no key in the cached quota yet, or the flag still "true": re-queue in 1 s."""
    rq = quota(
        RS,
        {"limits.cpu": 1, "limits.memory": "2Gi"},
        annotations={UID_KEY: vm_room(2 * GI), FLAG: "true"},
    )
    cluster = FakeCluster(rq, TWO_GI_VMI, RS_NAMESPACE)
    await MigrationHandler(cluster).compensate_pending_migration(vmim(rejected="True"), TWO_GI_VMI)
    assert cluster.enqueued == [(RS, "vmim1", 1.0)]
    assert COMPENSATION not in annotations(cluster.quota(RS))

    bare = quota(RS, {"limits.cpu": 1, "limits.memory": "2Gi"})
    cluster = FakeCluster(bare, TWO_GI_VMI, RS_NAMESPACE)
    await MigrationHandler(cluster).compensate_pending_migration(vmim(rejected="True"), TWO_GI_VMI)
    assert cluster.enqueued == [(RS, "vmim1", 1.0)]
    # A condition that is there but False stops at once, whatever follows.
    cluster.enqueued.clear()
    await MigrationHandler(cluster).compensate_pending_migration(vmim(rejected="False"), TWO_GI_VMI)
    assert cluster.enqueued == []


async def test_scenario_2_rancher_reset_is_rescaled_and_completion_never_goes_below_base() -> None:
    """Handled since v1.4.2: the next event of the quota recomputes base + keys; on completion the
    quota is exactly the base (old Harvester subtracted: 30 - 4 = 26 cores)."""
    base = {"limitsCpu": "30", "limitsMemory": "60Gi"}
    ns = Namespace(
        "reset", base, {"limits.cpu": "30", "limits.memory": "60Gi"}, kubevirt_version="1.6"
    )
    ns.start_vm("vm1", cores=4, memory="8Gi")
    await ns.vmim_event("vm1", "Pending")
    scaled = ns.hard()
    assert scaled["limits.cpu"] == Quantity.parse("34")
    rq = ns.cluster.quota("reset")
    rq["spec"]["hard"] = {"limits.cpu": "30", "limits.memory": "60Gi"}  # Rancher's reset
    ns.cluster.put(rq)
    await ns.settle()
    assert ns.hard() == scaled
    rq = ns.cluster.quota("reset")
    rq["spec"]["hard"] = {
        "limits.cpu": "30",
        "limits.memory": "60Gi",
    }  # and again, just before the end
    ns.cluster.put(rq)
    await ns.vmim_event("vm1", "Succeeded")
    assert ns.hard() == quantities({"limits.cpu": "30", "limits.memory": "60Gi"})


async def test_an_isolated_migration_costs_four_quota_writes() -> None:
    """Two writers and the flag: key + flag, spec.hard + flag cleared, key removed + flag, spec.hard
    + flag cleared. (Our controllers: two.)"""
    ns = Namespace(
        "writes",
        {"limitsCpu": "3000m", "limitsMemory": "5000Mi"},
        {"limits.cpu": "3", "limits.memory": "5000Mi"},
        kubevirt_version="1.6",
    )
    ns.start_vm("vm1", cores=2, memory="4Gi")
    assert await ns.migrate_to_target("vm1") is None
    assert ns.hard() == quantities({"limits.cpu": 5, "limits.memory": 5242880000 + V170_SHARE})
    await ns.vmim_event("vm1", "Succeeded")
    assert ns.cluster.writes["writes"] == 4
    assert ns.annotations() == {FLAG: "false"}


async def test_scenario_13_skip_keeps_the_inflated_hard() -> None:
    ns = Namespace(
        "skip",
        {"limitsCpu": "3000m", "limitsMemory": "5000Mi"},
        {"limits.cpu": "3", "limits.memory": "5000Mi"},
        kubevirt_version="1.6",
    )
    ns.start_vm("vm1", cores=2, memory="4Gi")
    await ns.vmim_event("vm1", "Pending")
    scaled = ns.hard()
    rq = ns.cluster.quota("skip")
    rq["metadata"]["annotations"][SKIP] = "true"
    ns.cluster.put(rq)
    await ns.vmim_event("vm1", "Succeeded")
    assert migrating_uid_annotation_key(ns.vmis["vm1"]["metadata"]["uid"]) not in ns.annotations()
    assert ns.annotations()[FLAG] == "true", "nobody clears it while skip is set"
    assert ns.hard() == scaled, "spec.hard stays inflated"
    assert ns.hard() != quantities({"limits.cpu": 3, "limits.memory": "5000Mi"})

    # With skip set, a new migration is neither scaled nor compensated.
    ns.start_vm("vm2", cores=1, memory="1Gi")
    writes = ns.cluster.writes["skip"]
    await ns.vmim_event("vm2", "Pending", rejected=True)
    assert ns.cluster.writes["skip"] == writes


async def test_scenario_15_vmi_deleted_mid_migration_leaks_the_key_forever() -> None:
    ns = Namespace(
        "leak",
        {"limitsCpu": "3000m", "limitsMemory": "5000Mi"},
        {"limits.cpu": "3", "limits.memory": "5000Mi"},
        kubevirt_version="1.6",
    )
    ns.start_vm("vm1", cores=2, memory="4Gi")
    await ns.vmim_event("vm1", "Pending")
    key = migrating_uid_annotation_key(ns.vmis["vm1"]["metadata"]["uid"])
    scaled = ns.hard()
    ns.cluster.remove("VirtualMachineInstance", "leak", "vm1")
    await ns.vmim_event("vm1", "Failed")
    assert key in ns.annotations()
    await ns.settle()
    assert ns.hard() == scaled, "base + the leaked share, on every later event"

    # A restarted VM has a new VMI UID: its old key is not found either.
    ns.start_vm("vm1", cores=2, memory="4Gi", uid="new-uid")
    await ns.vmim_event("vm1", "Failed")
    assert key in ns.annotations()
    assert rqutils.has_migrating_vm(ns.cluster.quota("leak"))


async def test_scenario_16_an_old_finished_vmim_deletes_the_new_migrations_key() -> None:
    ns = Namespace(
        "old",
        {"limitsCpu": "3000m", "limitsMemory": "5000Mi"},
        {"limits.cpu": "3", "limits.memory": "5000Mi"},
        kubevirt_version="1.6",
    )
    ns.start_vm("vm1", cores=2, memory="4Gi")
    old = vmim("vm1", "old", phase="Succeeded", uid="old-migration", name="vm1-old")
    new = vmim("vm1", "old", phase="Pending", uid="new-migration", name="vm1-new")
    await ns.migrations.on_vmim_changed("", new)
    await ns.settle()
    key = migrating_uid_annotation_key(ns.vmis["vm1"]["metadata"]["uid"])
    assert key in ns.annotations()
    new["status"]["phase"] = "Scheduling"  # the target pod exists; the new key is not re-added
    await ns.migrations.on_vmim_changed("", new)

    await ns.migrations.on_vmim_changed("", old)  # a resync, a restart, any event of the old one
    await ns.settle()
    assert key not in ns.annotations()
    assert ns.hard() == quantities({"limits.cpu": 3, "limits.memory": "5000Mi"})
    current = ns.cluster.vmi("old", "vm1")
    assert current is not None
    assert ANNOTATION_MIGRATION_UID not in current["metadata"].get("annotations", {}), (
        "the new migration's VMI annotations are cleared too"
    )
    await ns.migrations.on_vmim_changed("", new)
    assert key not in ns.annotations(), "only a Pending VMIM scales"


async def test_scenario_17_any_quota_event_forces_limits_to_the_annotation() -> None:
    """Rancher zeroed limits.cpu of an oversubscribed namespace and left out limits.memory; the
    next event of the quota sets both from the annotation."""
    rq = quota(TEST, {"limits.cpu": "0", "requests.memory": "1Gi", "pods": "10"})
    rq["spec"]["hard"]["limits.memory"] = "1"
    cluster = FakeCluster(rq, namespace(TEST, '{"limit":{"limitsCpu":"8","limitsMemory":"16Gi"}}'))
    await ResourceQuotaHandler(cluster).on_resource_quota_changed("", rq)
    assert hard(cluster.quota(TEST)) == quantities(
        {"limits.cpu": 8, "limits.memory": "16Gi", "requests.memory": "1Gi", "pods": 10}
    )
    assert annotations(cluster.quota(TEST)) == {}, "no flag was set: none is written"


async def test_scenario_18_invalid_inputs_skip_but_invalid_json_is_retried_forever() -> None:
    for text, rq_annotations in [
        ('{"limit":{"limitsCpu":"10000m invalid"}}', {FLAG: "true"}),
        (
            '{"limit":{"limitsCpu":"1"}}',
            {RQ_UID_KEY: '{"limits.memory":"2Gi invalid"}', FLAG: "true"},
        ),
        ("", {FLAG: "true"}),
    ]:
        rq = quota(TEST, {"limits.cpu": 1, "limits.memory": "10Gi"}, annotations=rq_annotations)
        cluster = FakeCluster(rq, namespace(TEST, text))
        await ResourceQuotaHandler(cluster).on_resource_quota_changed("", rq)
        written = cluster.quota(TEST)
        assert annotations(written)[FLAG] == "false", text
        assert hard(written) == hard(rq)
    rq = quota(TEST, {"limits.cpu": 1, "limits.memory": "10Gi"})
    cluster = FakeCluster(rq, namespace(TEST, "{not json"))
    with pytest.raises(ValueError, match="not valid JSON"):
        await ResourceQuotaHandler(cluster).on_resource_quota_changed("", rq)


async def test_any_resource_quota_makes_the_namespace_managed() -> None:
    """isNamespaceManagedByResourceQuota: Hard.Cpu() is never nil. An unlabelled quota that limits
    only pods is enough; the labelled one is what gets scaled."""
    other = quota(RS, {"pods": 5}, labelled=False, name="aaa-other")
    labelled = quota(RS, {"limits.cpu": 1, "limits.memory": "2Gi"}, name="zzz-default")
    cluster = FakeCluster(other, labelled, vmi(), RS_NAMESPACE)
    handler = MigrationHandler(cluster)
    assert handler.namespace_managed_by_resource_quota(RS)
    await handler.on_vmim_changed("", vmim())
    assert UID_KEY in annotations(cluster.quota(RS, "zzz-default"))
    assert not MigrationHandler(FakeCluster()).namespace_managed_by_resource_quota(RS)


async def test_share_is_frozen_at_the_first_pending_sighting() -> None:
    """The ratio changes while the VMIM is Pending: the key is already there, nothing changes."""
    ns = Namespace(
        "frozen",
        {"limitsCpu": "3000m", "limitsMemory": "5000Mi"},
        {"limits.cpu": "3", "limits.memory": "5000Mi"},
        kubevirt_version="1.6",
    )
    ns.start_vm("vm1", cores=2, memory="4Gi")
    await ns.vmim_event("vm1", "Pending")
    first = ns.annotations()
    ns.set_ratio("4.5")
    await ns.vmim_event("vm1", "Pending")
    assert ns.annotations() == first


# ==================================================================================================
# The strategy's wiring
# ==================================================================================================


def test_lasso_backoff_is_what_harvester_retries_with() -> None:
    """1 ms for 30 failures (or 5 ms * 2^n, whichever is longer), 30 s cap, then 120 s flat."""
    limiter = lasso_rate_limiter()
    delays = [limiter.when("ns/vmim") for _ in range(32)]
    assert delays[0] == pytest.approx(0.005)
    assert delays[3] == pytest.approx(0.04)
    assert delays[12] == pytest.approx(20.48)
    assert delays[13] == 30.0, "5 ms * 2^13 would pass the 30 s cap"
    assert delays[29] == 30.0
    assert delays[30] == 120.0
    limiter.forget("ns/vmim")
    assert limiter.when("ns/vmim") == pytest.approx(0.005)


async def test_the_strategy_registers_harvesters_three_handlers() -> None:
    client = ApiClient(ClientConfig(host="https://127.0.0.1:1", ssl_context=False))
    strategy = HarvesterStrategy(client, Options(leader_elect=False, kubevirt_version="1.6"))
    controllers = strategy.management.controllers
    registered = {
        resource.plural: [name for name, _ in controllers.for_resource(resource)._handlers]
        for resource in (
            RESOURCE_QUOTAS,
            VIRTUAL_MACHINE_INSTANCES,
            VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
        )
    }
    assert registered == {
        "resourcequotas": ["resourceQuotaController"],
        "virtualmachineinstances": ["migrationTargetController"],
        "virtualmachineinstancemigrations": ["migrationAnnotationController"],
    }
    for resource in (RESOURCE_QUOTAS, VIRTUAL_MACHINE_INSTANCES):
        assert isinstance(controllers.for_resource(resource).queue._rate_limiter, MaxOfRateLimiter)
    assert strategy.writes == Counter()
    assert strategy.cluster.kubevirt_version() == "1.6"
    assert not strategy.ready()
    await client.close()
