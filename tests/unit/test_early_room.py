"""Early room: the model (util/resourcequota/early.py), the plan's use of it, and the webhook's
writer (webhook/resources/migration/early_room.py) on a fake client that applies JSON patches."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import datetime
import json
from typing import Any

import pytest
from harvester_quota.generic import errors
from harvester_quota.generic.clock import FakeClock, settle
from harvester_quota.generic.meta import annotations_of
from harvester_quota.generic.permission import FIRST_RETRY
from harvester_quota.generic.resource import RESOURCE_QUOTAS, Object, Resource
from harvester_quota.util import resources
from harvester_quota.util.annotations import LABEL_ROOM_HELD
from harvester_quota.util.launcher import LauncherSettings
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.resourcequota.base import ANNOTATION_APPLIED, ANNOTATION_BASE
from harvester_quota.util.resourcequota.early import (
    EARLY_ROOM_TTL,
    Admitted,
    EarlyRoom,
    early_room_key,
    early_room_patch,
    early_rooms,
)
from harvester_quota.util.resourcequota.plan import NamespaceSnapshot, patch_for, plan_quota
from harvester_quota.webhook.admission import Request
from harvester_quota.webhook.resources.common import view_of
from harvester_quota.webhook.resources.migration.early_room import (
    MAX_TRIES,
    EarlyRoomWriter,
    early_room_for,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.objects import launcher_pod, managed_quota, migration, plain_namespace, vmi
from tests.unit.test_conditional_patch import PatchTestFailed, apply
from tests.unit.test_webhook import FakeLookups

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
CREATED = "2026-01-01T00:00:00Z"
BASE = {"limits.cpu": "4", "limits.memory": "8Gi", "requests.memory": "8Gi", "pods": "10"}
SETTINGS = LauncherSettings(ratio="1.5", kubevirt_version="1.6")


def standalone_quota(hard: dict[str, str] | None = None, **annotations: str) -> Object:
    """A quota the controller adopted: its base recorded, at the base."""
    recorded = resources.dumps(resources.parse_resource_list(BASE))
    quota = managed_quota("ns", hard or BASE, {ANNOTATION_BASE: recorded, **annotations})
    quota["status"] = {"hard": dict(hard or BASE), "used": {}}
    return quota


def early(
    uid: str = "m-uid-1", *, vmi_name: str = "vm1", expires: datetime.datetime | None = None
) -> EarlyRoom:
    return EarlyRoom(
        uid, f"mig-{uid}", vmi_name, CREATED, expires or NOW + datetime.timedelta(seconds=30)
    )


def snapshot(
    quota: Object,
    *,
    migrations: list[Object],
    vmis: list[Object],
    pods: list[Object],
    now: datetime.datetime = NOW,
) -> NamespaceSnapshot:
    return NamespaceSnapshot(
        namespace=plain_namespace("ns"),
        quota=quota,
        migrations=migrations,
        vmis={v["metadata"]["name"]: v for v in vmis},
        pods=pods,
        now=now,
        launcher=SETTINGS,
    )


def merged(doc: Object, patch: dict[str, Any]) -> Object:
    """`doc` after a JSON merge patch (RFC 7386: None removes a key), as the API server stores it."""
    result = copy.deepcopy(doc)
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            inner = result.get(key)
            result[key] = merged(inner if isinstance(inner, dict) else {}, value)
        else:
            result[key] = value
    return result


def room_of(instance: Object) -> resources.ResourceList:
    """What the controller's plan gives a pending migration of `instance` in a quota at BASE."""
    pending = migration("probe", instance)
    plan = plan_quota(snapshot(standalone_quota(), migrations=[pending], vmis=[instance], pods=[]))
    return plan.rooms.rooms[0].room


# The model --------------------------------------------------------------------------------------


def test_an_early_room_reads_back_what_it_wrote() -> None:
    room = early()
    assert EarlyRoom.loads(room.migration_uid, room.dumps()) == room


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("not json", "not JSON"),
        ("[1]", "not a JSON object"),
        (json.dumps({"vmi": "v", "created": CREATED, "expires": CREATED}), "migration"),
        (
            json.dumps(
                {"migration": "m", "vmi": "v", "created": CREATED, "expires": "2026-01-01T00:00:00"}
            ),
            "time zone",
        ),
        (
            json.dumps({"migration": "m", "vmi": "v", "created": "yesterday", "expires": CREATED}),
            "created",
        ),
    ],
)
def test_a_malformed_early_room_is_refused_naming_what_is_wrong(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        EarlyRoom.loads("u", text)


def test_early_rooms_count_until_their_migration_shows_or_they_expire() -> None:
    instance = vmi("vm1")
    shown = migration("mig-a", instance, uid="a")
    rooms = [early("a"), early("b"), early("c", expires=NOW - datetime.timedelta(seconds=1))]
    quota = standalone_quota(**{r.key: r.dumps() for r in rooms}, **{early_room_key("d"): "{"})
    found = early_rooms(quota, [shown], NOW)
    assert [r.migration_uid for r in found.held] == ["b"]
    assert sorted(found.done) == [early_room_key("a"), early_room_key("c")]
    assert list(found.invalid) == [early_room_key("d")]
    assert found.next_expiry(NOW) == 30.0


# The plan ---------------------------------------------------------------------------------------


def test_the_controller_plans_the_early_room_as_the_pending_migration_it_stands_for() -> None:
    """The webhook's patch is the plan's: the controller, seeing the early room before the
    migration, and again once it sees the migration, writes nothing."""
    instance = vmi("vm1")
    source = launcher_pod(instance, "vm1-src")
    room = early("m1")
    quota = standalone_quota()
    patch = early_room_patch(quota, [Admitted(room, "vm1", room_of(instance))])
    assert patch is not None
    raised = merged(quota, patch)
    before = plan_quota(snapshot(raised, migrations=[], vmis=[instance], pods=[source]))
    assert before.holds_room
    assert patch_for(raised, before) is None, "the early room alone: nothing to write"
    stored = migration("mig-m1", instance, uid="m1")
    after = plan_quota(snapshot(raised, migrations=[stored], vmis=[instance], pods=[source]))
    assert after.remove_when_writing == [room.key]
    assert patch_for(raised, after) is None, "the migration shown: still nothing to write"
    assert (
        Quantity.parse(raised["spec"]["hard"]["limits.memory"])
        == Quantity.parse("8Gi") + room_of(instance)["limits.memory"]
    )


def test_an_early_room_whose_migration_never_came_is_given_back_at_its_expiry() -> None:
    instance = vmi("vm1")
    room = early("m1")
    quota = standalone_quota()
    patch = early_room_patch(quota, [Admitted(room, "vm1", room_of(instance))])
    assert patch is not None
    raised = merged(quota, patch)
    held = plan_quota(snapshot(raised, migrations=[], vmis=[instance], pods=[]))
    assert held.requeue_after == 30.0, "the controller comes back at the expiry"
    later = NOW + datetime.timedelta(seconds=30)
    expired = plan_quota(snapshot(raised, migrations=[], vmis=[instance], pods=[], now=later))
    back = merged(raised, patch_for(raised, expired) or {})
    assert back["spec"]["hard"] == BASE or resources.equal(
        resources.parse_resource_list(back["spec"]["hard"]), resources.parse_resource_list(BASE)
    )
    assert not [k for k in back["metadata"]["annotations"] if k != ANNOTATION_BASE]


@pytest.mark.parametrize("skew", [-120.0, 0.0, 29.0, 31.0, 600.0])
def test_clock_skew_between_webhook_and_controller_costs_writes_never_a_wrong_quota(
    skew: float,
) -> None:
    """The expiry is the webhook's wall clock, read on the controller's. Ahead by more than the
    TTL, the controller takes a fresh early room for expired and gives it back before its
    migration shows (an extra write, and the target pod may wait for the raise again); behind,
    a room whose migration never comes stands TTL + the lag. Either way, once the migration
    shows, the quota is its room over the base; given back early, it is exactly the base."""
    instance = vmi("vm1")
    source = launcher_pod(instance, "vm1-src")
    quota = standalone_quota()
    patch = early_room_patch(quota, [Admitted(early("m1"), "vm1", room_of(instance))])
    raised = merged(quota, patch or {})
    controller_now = NOW + datetime.timedelta(seconds=skew)

    def plan_at(doc: Object, migrations: list[Object], now: datetime.datetime) -> Any:
        return plan_quota(
            snapshot(doc, migrations=migrations, vmis=[instance], pods=[source], now=now)
        )

    unseen = plan_at(raised, [], controller_now)
    lowered = patch_for(raised, unseen)
    assert (lowered is None) == (skew < EARLY_ROOM_TTL), (
        "given back early only when ahead by the TTL"
    )
    current = merged(raised, lowered or {})
    stored = migration("mig-m1", instance, uid="m1")
    shown = patch_for(current, plan_at(current, [stored], controller_now))
    final = merged(current, shown or {})
    assert hard_of_quota(final) == hard_of_quota(raised), "its room over the base once it shows"
    if lowered is not None:
        assert resources.equal(hard_of_quota(current), resources.parse_resource_list(BASE))
        assert not [k for k in annotations_of(current) if k != ANNOTATION_BASE]


def test_a_done_early_room_is_removed_by_the_write_that_gives_the_room_back() -> None:
    instance = vmi("vm1")
    room = early("m1")
    quota = standalone_quota()
    raised = merged(
        quota, early_room_patch(quota, [Admitted(room, "vm1", room_of(instance))]) or {}
    )
    finished = migration("mig-m1", instance, uid="m1", phase="Succeeded", source_pod="vm1-src")
    plan = plan_quota(snapshot(raised, migrations=[finished], vmis=[instance], pods=[]))
    patch = patch_for(raised, plan)
    assert patch is not None
    assert patch["metadata"]["annotations"][room.key] is None


def test_two_early_rooms_of_one_batch_add_up_on_every_key() -> None:
    one, two = vmi("vm1"), vmi("vm2", cores=4, memory="8Gi")
    quota = standalone_quota()
    patch = early_room_patch(
        quota,
        [
            Admitted(early("a", vmi_name="vm1"), "vm1", room_of(one)),
            Admitted(early("b", vmi_name="vm2"), "vm2", room_of(two)),
        ],
    )
    assert patch is not None
    raised = merged(quota, patch)
    expected = resources.add(
        resources.parse_resource_list(BASE), resources.add(room_of(one), room_of(two))
    )
    assert resources.equal(
        resources.parse_resource_list(raised["spec"]["hard"]), resources.mask(expected, BASE)
    )
    assert resources.equal(
        resources.loads(raised["metadata"]["annotations"][ANNOTATION_APPLIED]),
        resources.mask(expected, BASE),
    )
    plan = plan_quota(snapshot(raised, migrations=[], vmis=[one, two], pods=[]))
    assert patch_for(raised, plan) is None


def test_no_early_room_without_a_recorded_base_or_twice_for_one_migration() -> None:
    instance = vmi("vm1")
    admitted = Admitted(early("m1"), "vm1", room_of(instance))
    assert early_room_patch(managed_quota("ns", BASE), [admitted]) is None
    raised = merged(standalone_quota(), early_room_patch(standalone_quota(), [admitted]) or {})
    assert early_room_patch(raised, [admitted]) is None


def test_the_pod_rules_keep_non_target_pods_out_of_an_early_room() -> None:
    instance = vmi("vm1")
    quota = standalone_quota()
    raised = merged(
        quota, early_room_patch(quota, [Admitted(early("m1"), "vm1", room_of(instance))]) or {}
    )
    lookups = FakeLookups(quotas={"ns": raised}, vmi_list=[instance])
    lookups.now = lambda: NOW  # type: ignore[method-assign]
    assert view_of(lookups, "ns", raised).holds_room


# The webhook's writer ---------------------------------------------------------------------------


def create_request(instance: Object, uid: str, *, dry_run: bool = False) -> Request:
    obj = migration(f"mig-{uid}", instance, uid=uid)
    obj["metadata"]["creationTimestamp"] = CREATED
    obj.pop("status")
    return Request(
        uid=f"review-{uid}",
        kind="VirtualMachineInstanceMigration",
        operation="CREATE",
        namespace="ns",
        name=obj["metadata"]["name"],
        username="tenant",
        groups=(),
        obj=obj,
        old=None,
        dry_run=dry_run,
    )


class PatchingApi:
    """A fake API server for one quota and one namespace: JSON patches applied whole or not at
    all (a failed test is 422 without causes), merge patches merged; `gate` holds every patch
    until set, so tests can pile admissions up behind a write."""

    def __init__(self, quota: Object, namespace: Object) -> None:
        self.objects: dict[str, Object] = {
            "quota": copy.deepcopy(quota),
            "namespace": copy.deepcopy(namespace),
        }
        self.version = 1
        self.patches: list[tuple[str, str]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.status_gate = asyncio.Event()
        self.status_gate.set()
        self.before_patch: list[Any] = []
        self.namespace_refusals = 0
        """The next this many namespace patches are Forbidden (as right after an API server
        restart, or without RBAC for them)."""

    def _which(self, resource: Resource, subresource: str = "") -> str:
        name = "quota" if resource == RESOURCE_QUOTAS else "namespace"
        return f"{name}/{subresource}" if subresource else name

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Object:
        return copy.deepcopy(self.objects[self._which(resource)])

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: str = "merge",
        subresource: str = "",
    ) -> Object:
        await self.gate.wait()
        if subresource == "status":
            await self.status_gate.wait()
        if self.before_patch:
            self.before_patch.pop(0)(self)
        which = self._which(resource)
        self.patches.append((self._which(resource, subresource), patch_type))
        if which == "namespace" and self.namespace_refusals:
            self.namespace_refusals -= 1
            raise errors.Forbidden('clusterrole "harvester-quota-webhook" not found')
        current = self.objects[which]
        if patch_type == "json":
            try:
                updated = apply(current, patch)
            except PatchTestFailed:
                raise errors.Invalid("the test failed") from None
        else:
            updated = merged(current, patch)
        self.version += 1
        updated["metadata"]["resourceVersion"] = str(self.version)
        self.objects[which] = updated
        return copy.deepcopy(updated)


def writer_on(api: PatchingApi, lookups: FakeLookups, clock: FakeClock) -> EarlyRoomWriter:
    return EarlyRoomWriter(api, lookups, clock, ttl=30.0)  # type: ignore[arg-type]


def lookups_for(quota: Object, *instances: Object) -> FakeLookups:
    lookups = FakeLookups(
        quotas={"ns": quota}, namespaces={"ns": plain_namespace("ns")}, vmi_list=list(instances)
    )
    for instance in instances:
        lookups.pods.append(launcher_pod(instance, f"{instance['metadata']['name']}-src"))
    return lookups


async def test_a_burst_of_creates_is_written_in_a_few_batches_and_labels_the_namespace_first() -> (
    None
):
    instances = [vmi(f"vm{i}") for i in range(10)]
    quota = standalone_quota(
        hard={**BASE, "limits.memory": "80Gi", "requests.memory": "80Gi", "limits.cpu": "40"}
    )
    quota["metadata"]["annotations"][ANNOTATION_BASE] = resources.dumps(
        resources.parse_resource_list(quota["spec"]["hard"])
    )
    lookups = lookups_for(quota, *instances)
    api = PatchingApi(quota, plain_namespace("ns"))
    api.gate.clear()
    writer = writer_on(api, lookups, FakeClock(wall=NOW))
    admissions = [
        asyncio.ensure_future(writer.admit(create_request(v, f"u{i}")))
        for i, v in enumerate(instances)
    ]
    await asyncio.sleep(0)
    api.status_gate.clear()
    api.gate.set()
    outcomes = await asyncio.gather(*admissions)
    assert outcomes == ["written"] * 10, "answered without waiting for the copy into status"
    stored_quota = api.objects["quota"]
    assert stored_quota["status"]["hard"] != stored_quota["spec"]["hard"]
    api.status_gate.set()
    await settle()
    stored_quota = api.objects["quota"]
    assert stored_quota["status"]["hard"] == stored_quota["spec"]["hard"], (
        "the copy follows, the newest spec.hard"
    )
    status_writes = [p for p in api.patches if p[0] == "quota/status"]
    assert 1 <= len(status_writes) <= 2, api.patches
    assert api.patches[0] == ("namespace", "merge"), "the room-held label before any raise"
    assert api.objects["namespace"]["metadata"]["labels"][LABEL_ROOM_HELD] == "true"
    quota_writes = [p for p in api.patches if p[0] == "quota"]
    assert len(quota_writes) <= 2, api.patches
    stored = api.objects["quota"]
    assert {early_room_key(f"u{i}") for i in range(10)} <= set(stored["metadata"]["annotations"])
    plan = plan_quota(snapshot(stored, migrations=[], vmis=instances, pods=lookups.pods))
    assert patch_for(stored, plan) is None, "the controller agrees with every room written"
    await writer.stop()


async def test_a_refused_label_is_skipped_then_tried_again_after_its_backoff() -> None:
    """The label guards the room, it never stands between a migration and its room: refused,
    the room is written without it, the next admissions within the backoff do not ask, and
    once it is over the label is written (a refusal is not taken as final)."""
    instances = [vmi(f"vm{i}") for i in range(3)]
    quota = standalone_quota(
        hard={**BASE, "limits.memory": "80Gi", "requests.memory": "80Gi", "limits.cpu": "40"}
    )
    lookups = lookups_for(quota, *instances)
    api = PatchingApi(quota, plain_namespace("ns"))
    api.namespace_refusals = 1
    clock = FakeClock(wall=NOW)
    writer = writer_on(api, lookups, clock)

    async def admit(index: int) -> str:
        return await writer.admit(create_request(instances[index], f"u{index}"))

    def namespace_patches() -> int:
        return sum(1 for which, _ in api.patches if which == "namespace")

    assert await admit(0) == "written"
    assert await admit(1) == "written"
    assert namespace_patches() == 1, "not asked again within the backoff"
    clock.step(FIRST_RETRY)
    assert await admit(2) == "written"
    assert namespace_patches() == 2
    assert api.objects["namespace"]["metadata"]["labels"][LABEL_ROOM_HELD] == "true"
    await writer.stop()


async def test_a_lost_race_reads_the_quota_again_and_keeps_the_other_writer_s_change() -> None:
    instance = vmi("vm1")
    quota = standalone_quota()
    lookups = lookups_for(quota, instance)
    api = PatchingApi(
        quota,
        {**plain_namespace("ns"), "metadata": {"name": "ns", "labels": {LABEL_ROOM_HELD: "true"}}},
    )
    lookups.namespaces["ns"] = api.objects["namespace"]

    def someone_else_writes(server: PatchingApi) -> None:
        server.objects["quota"]["spec"]["hard"]["pods"] = "12"

    api.before_patch.append(someone_else_writes)
    writer = writer_on(api, lookups, FakeClock(wall=NOW))
    assert await writer.admit(create_request(instance, "m1")) == "written"
    stored = api.objects["quota"]
    assert early_room_key("m1") in stored["metadata"]["annotations"]
    assert (
        Quantity.parse(stored["spec"]["hard"]["pods"])
        == Quantity.parse("12") + room_of(instance)["pods"]
    ), "the room is added to what the other writer wrote, not over it"
    assert [p for p in api.patches if p[0] == "quota"] == [("quota", "json")] * 2
    await writer.stop()


async def test_a_writer_that_keeps_losing_gives_up_and_the_migration_goes_through() -> None:
    instance = vmi("vm1")
    quota = standalone_quota()
    lookups = lookups_for(quota, instance)
    api = PatchingApi(quota, plain_namespace("ns"))
    counter = iter(range(100))

    def someone_else_writes(server: PatchingApi) -> None:
        server.objects["quota"]["spec"]["hard"]["pods"] = str(20 + next(counter))

    api.before_patch.extend([lambda s: None] + [someone_else_writes] * MAX_TRIES)
    writer = writer_on(api, lookups, FakeClock(wall=NOW))
    assert await writer.admit(create_request(instance, "m1")) == "lost-races", api.patches
    assert early_room_key("m1") not in api.objects["quota"]["metadata"]["annotations"]
    await writer.stop()


async def test_an_admission_waits_for_its_write_at_most_within_seconds() -> None:
    instance = vmi("vm1")
    quota = standalone_quota()
    clock = FakeClock(wall=NOW)
    api = PatchingApi(quota, plain_namespace("ns"))
    api.gate.clear()
    writer = writer_on(api, lookups_for(quota, instance), clock)
    admission = asyncio.ensure_future(writer.admit(create_request(instance, "m1")))
    await clock.advance(writer.within - 0.01)
    assert not admission.done()
    await clock.advance(0.01)
    assert await admission == "timed-out"
    await writer.stop()


@pytest.mark.parametrize(
    ("arrange", "outcome"),
    [
        (lambda lookups, req: setattr(req, "dry_run", True), "dry-run"),
        (lambda lookups, req: lookups.quotas.clear(), "no-managed-quota"),
        (
            lambda lookups, req: lookups.quotas["ns"]["metadata"]["annotations"].pop(
                ANNOTATION_BASE
            ),
            "no-recorded-base",
        ),
        (lambda lookups, req: lookups.vmi_list.clear(), "no-vmi"),
        (
            lambda lookups, req: lookups.migration_list.append(
                migration("running", lookups.vmi_list[0], phase="Running")
            ),
            "already-migrating",
        ),
        (
            lambda lookups, req: lookups.quotas["ns"]["metadata"]["annotations"].update(
                {early("refused-before").key: early("refused-before").dumps()}
            ),
            "already-migrating",
        ),
        (
            lambda lookups, req: lookups.namespaces.update(
                ns={
                    "metadata": {
                        "name": "ns",
                        "annotations": {
                            "field.cattle.io/resourceQuota": json.dumps(
                                {"limit": {"limitsCpu": "4"}}
                            )
                        },
                    }
                }
            ),
            "rancher",
        ),
        (
            lambda lookups, req: lookups.quotas["ns"]["metadata"]["annotations"].update(
                {"harvesterhci.io/skipResourceQuotaAutoScaling": "true"}
            ),
            "skipped",
        ),
    ],
)
def test_what_is_left_to_the_controller(arrange: Any, outcome: str) -> None:
    instance = vmi("vm1")
    lookups = lookups_for(standalone_quota(), instance)
    holder = _MutableRequest(create_request(instance, "m1"))
    arrange(lookups, holder)
    assert early_room_for(holder.request(), lookups, 30.0) == outcome


class _MutableRequest:
    """A request whose dry_run a parametrized arrange may set (Request is frozen)."""

    def __init__(self, request: Request) -> None:
        self._request = request
        self.dry_run = request.dry_run

    def request(self) -> Request:
        return dataclasses.replace(self._request, dry_run=self.dry_run)


def test_the_room_written_is_the_controller_s_room_for_the_vmi() -> None:
    instance = vmi("vm1", cores=4, memory="8Gi")
    lookups = lookups_for(standalone_quota(), instance)
    admitted = early_room_for(create_request(instance, "m1"), lookups, 30.0)
    assert isinstance(admitted, Admitted)
    assert resources.equal(resources.mask(admitted.room, BASE), room_of(instance))
    assert admitted.early.expires == lookups.now() + datetime.timedelta(seconds=30)
    assert admitted.vm_name == "vm1"


def test_the_skip_switch_gives_early_rooms_back_with_the_rest() -> None:
    instance = vmi("vm1")
    quota = standalone_quota()
    admitted = Admitted(early("m1"), "vm1", room_of(instance))
    raised = merged(quota, early_room_patch(quota, [admitted]) or {})
    raised["metadata"]["annotations"]["harvesterhci.io/skipResourceQuotaAutoScaling"] = "true"
    plan = plan_quota(snapshot(raised, migrations=[], vmis=[instance], pods=[]))
    patch = patch_for(raised, plan)
    assert patch is not None
    assert patch["metadata"]["annotations"][early("m1").key] is None
    back = merged(raised, patch)
    assert resources.equal(hard_of_quota(back), resources.parse_resource_list(BASE))


def hard_of_quota(quota: Object) -> resources.ResourceList:
    return resources.parse_resource_list(quota["spec"]["hard"])


@settings(max_examples=40, deadline=None)
@given(
    shapes=st.lists(
        st.tuples(st.integers(1, 8), st.sampled_from(["1Gi", "2Gi", "4Gi", "6Gi"]), st.booleans()),
        min_size=1,
        max_size=5,
    )
)
def test_whichever_rooms_the_caches_show_the_controller_agrees_with_the_webhook(
    shapes: list[tuple[int, str, bool]],
) -> None:
    """Any number of VMs of any shape, their rooms written early in one batch, each migration
    shown in the controller's caches or not yet: the controller's plan is the quota written."""
    instances = [vmi(f"vm{i}", cores=c, memory=m) for i, (c, m, _) in enumerate(shapes)]
    wide = {"limits.cpu": "100", "limits.memory": "100Gi", "requests.memory": "100Gi", "pods": "50"}
    quota = managed_quota(
        "ns", wide, {ANNOTATION_BASE: resources.dumps(resources.parse_resource_list(wide))}
    )
    admitted = [
        Admitted(early(f"u{i}", vmi_name=f"vm{i}"), f"vm{i}", room_of(v))
        for i, v in enumerate(instances)
    ]
    raised = merged(quota, early_room_patch(quota, admitted) or {})
    shown = [
        migration(f"mig-u{i}", v, uid=f"u{i}")
        for i, (v, (_, _, seen)) in enumerate(zip(instances, shapes, strict=True))
        if seen
    ]
    plan = plan_quota(snapshot(raised, migrations=shown, vmis=instances, pods=[]))
    assert patch_for(raised, plan) is None
