"""The quota controllers on the real cluster, with KubeVirt played by hand: only what KubeVirt's
real virt-controller cannot produce (test_controllers_on_kubevirt.py has every migration it can):
a source pod that terminates with a grace period instead of exiting (KubeVirt 0.54, the v1.2.1
seed), and the quota writer's own contracts, which need no migration."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from harvester_quota.apis.kubevirt import VIRTUAL_MACHINE_INSTANCES
from harvester_quota.apis.mtq import VMMRQS
from harvester_quota.app import ControllerApp
from harvester_quota.config.management import Options
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import EVENTS, NAMESPACES, RESOURCE_QUOTAS
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.resourcequota.plan import plan_quota
from prometheus_client import CollectorRegistry

from tests.helpers import caught_up, eventually, succeed_migration
from tests.integration.kubevirt_by_hand import KubeVirtByHand

pytestmark = pytest.mark.integration

V170_LIMIT = {"limitsCpu": "3000m", "limitsMemory": "5000Mi"}
V170_HARD = {"limits.cpu": "3", "limits.memory": "5000Mi"}


def new_app(api: ApiClient, *, harvester_annotations: bool = False) -> ControllerApp:
    """The controllers in this process; `harvester_annotations` for the tests that check the
    opt-in Harvester migration annotations are cleared when the migration ends."""
    options = Options(
        leader_elect=False,
        kubevirt_version="1.6",
        workers=2,
        harvester_annotations=harvester_annotations,
    )
    return ControllerApp(api, options, registry=CollectorRegistry())


@pytest.fixture
async def controllers(api: ApiClient) -> AsyncIterator[ControllerApp]:
    """The controllers with Harvester's migration annotations on (the opt-in path: written
    while a migration runs, cleared when it ends)."""
    app = new_app(api, harvester_annotations=True)
    await app.start()
    yield app
    await app.stop()


async def hard_equals(kv: KubeVirtByHand, expected: dict[str, str]) -> bool:
    hard = (await kv.quota()).get("spec", {}).get("hard", {})
    return set(hard) == set(expected) and all(
        Quantity.parse(hard[k]) == Quantity.parse(v) for k, v in expected.items()
    )


class RequestLog:
    """Every request's method, path and answer code (an ApiClient request observer)."""

    def __init__(self) -> None:
        self.answered: list[tuple[str, str, str]] = []

    def observe(self, method: str, path: str, params: Any, code: str, seconds: float) -> None:
        self.answered.append((method, path, code))

    @property
    def seen(self) -> list[tuple[str, str]]:
        """(method, path) of each request, in order sent."""
        return [(method, path) for method, path, _ in self.answered]

    def answers_to(self, path_end: str) -> list[tuple[str, str]]:
        """(method, code) of each request whose path ends with `path_end`, in order sent."""
        return [(m, code) for m, path, code in self.answered if path.endswith(path_end)]


def migrating_keys(quota: dict[str, Any]) -> list[str]:
    return [
        k
        for k in (quota["metadata"].get("annotations") or {})
        if k.startswith("harvesterhci.io/migrating")
    ]


async def test_room_is_held_while_the_source_pod_terminates_then_hard_is_exactly_the_base(
    controllers: ControllerApp, kv: KubeVirtByHand
) -> None:
    await kv.set_rancher_base(V170_LIMIT)
    await kv.create_quota(V170_HARD)
    vmi, source = await kv.start_vm("vm1")
    migration = await kv.migrate(vmi)
    target = await eventually(lambda: kv.try_create_target(vmi, migration), what="target admitted")

    async def annotated() -> bool:
        current = await kv.api.get(VIRTUAL_MACHINE_INSTANCES, "vm1", kv.namespace)
        return "harvesterhci.io/migrationState" in (current["metadata"].get("annotations") or {})

    await eventually(annotated, what="Harvester's migration annotation written (opt-in)")
    await succeed_migration(kv, migration, source, target)
    await kv.delete_pod(source["metadata"]["name"], grace=6)
    await eventually(lambda: caught_up(controllers, kv.namespace), what="controllers caught up")
    quota = await kv.quota()
    assert Quantity.parse(quota["spec"]["hard"]["limits.memory"]) > Quantity.parse("5000Mi"), (
        "the terminating source pod still counts, so the room is still held"
    )
    await eventually(
        lambda: kv.pod_gone(source["metadata"]["name"]), timeout=30, what="source pod gone"
    )
    await eventually(lambda: hard_equals(kv, V170_HARD), what="hard back to exactly the base")
    assert migrating_keys(await kv.quota()) == []
    vmi_now = await kv.api.get(VIRTUAL_MACHINE_INSTANCES, "vm1", kv.namespace)
    assert "harvesterhci.io/migrationState" not in (vmi_now["metadata"].get("annotations") or {})


async def test_a_budget_created_while_room_is_held_is_handed_over_only_after_the_raise_is_given_back(
    controllers: ControllerApp, kv: KubeVirtByHand
) -> None:
    """A VirtualMachineMigrationResourceQuota created while the room mode held room made it step
    away at once with its raise still in spec.hard (and the webhook's pod checks off): the
    tenant kept the raise. The room mode gives the raise back first; only then is the namespace
    MTQ mode's."""
    await kv.set_rancher_base(V170_LIMIT)
    await kv.create_quota(V170_HARD)
    vmi, _source = await kv.start_vm("vm1")
    await kv.migrate(vmi)
    await eventually(lambda: raised(kv), what="the room raised")
    assert controllers.mtq is not None and not controllers.mtq.manages(kv.namespace)
    await kv.api.create(
        VMMRQS,
        {
            "apiVersion": "mtq.kubevirt.io/v1alpha1",
            "kind": "VirtualMachineMigrationResourceQuota",
            "metadata": {"name": "budget"},
            "spec": {"additionalMigrationResources": {"limits.cpu": "3", "limits.memory": "6Gi"}},
        },
        kv.namespace,
    )
    await eventually(lambda: hard_equals(kv, V170_HARD), what="the raise given back")
    assert migrating_keys(await kv.quota()) == []
    await eventually(
        lambda: controllers.mtq is not None and controllers.mtq.manages(kv.namespace),
        what="MTQ mode's once the raise is gone",
    )


async def raised(kv: KubeVirtByHand) -> bool:
    hard = (await kv.quota())["spec"]["hard"]
    return Quantity.parse(hard["limits.cpu"]) > Quantity.parse(V170_HARD["limits.cpu"])


async def test_invalid_annotations_leave_the_quota_alone_with_a_warning_event(
    controllers: ControllerApp, kv: KubeVirtByHand
) -> None:
    await kv.create_quota(V170_HARD)
    await kv.set_rancher_base({"limitsCpu": "10000m invalid"})

    async def warning() -> str | None:
        listed = await kv.api.list(EVENTS, kv.namespace)
        for item in listed["items"]:
            if item["reason"] == "QuotaNotScaled":
                return str(item["message"])
        return None

    message = await eventually(warning, what="a Warning event")
    assert "10000m invalid" in message
    assert await hard_equals(kv, V170_HARD)


async def test_a_quota_write_never_overwrites_an_edit_made_after_the_plan(
    controllers: ControllerApp, kv: KubeVirtByHand
) -> None:
    """The write tests the spec it was planned from: a user's edit in between is kept
    (Conflict), and the namespace is planned again from it."""
    await kv.set_rancher_base(V170_LIMIT)
    await kv.create_quota(V170_HARD)
    await eventually(lambda: caught_up(controllers, kv.namespace), what="controllers caught up")
    planned_from = await kv.quota()
    # A key outside the base: the controller passes it through, so only our stale write could
    # change it.
    user_edit = {"spec": {"hard": {"pods": "20"}}}
    await kv.api.patch(RESOURCE_QUOTAS, planned_from["metadata"]["name"], user_edit, kv.namespace)
    stale_patch = {"spec": {"hard": {"pods": "11"}}}
    plan = plan_quota(
        controllers.reconciler.inputs.snapshot(
            await kv.api.get(NAMESPACES, kv.namespace), planned_from, [planned_from]
        )
    )
    with pytest.raises(errors.Conflict):
        await controllers.reconciler.spec_writes.write(planned_from, stale_patch, plan)
    await eventually(lambda: caught_up(controllers, kv.namespace), what="controllers caught up")
    assert (await kv.quota())["spec"]["hard"]["pods"] == "20"


async def hands_off(controllers: ControllerApp, namespace: str) -> None:
    """Has the reconciler leave `namespace` alone from now on (as a namespace another mode
    handles), once its reconciles and status copies under way are done: the test's direct
    calls are then the only writes of ours on its quota, not racing the running controller's."""
    planner = controllers.reconciler.planner
    others = planner.defer_to
    planner.defer_to = lambda key: key == namespace or others(key)
    assert await controllers.reconciler.settled(namespace, 30)
    await controllers.reconciler.publisher.idle(namespace)


async def planned_write(
    controllers: ControllerApp, kv: KubeVirtByHand
) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """The quota as a plan reads it, a write of a key outside the base, and that plan; the
    reconciler then leaves the namespace to the test (`hands_off`)."""
    await kv.set_rancher_base(V170_LIMIT)
    await kv.create_quota(V170_HARD)
    await eventually(lambda: caught_up(controllers, kv.namespace), what="controllers caught up")
    await hands_off(controllers, kv.namespace)
    planned_from = await kv.quota()
    plan = plan_quota(
        controllers.reconciler.inputs.snapshot(
            await kv.api.get(NAMESPACES, kv.namespace), planned_from, [planned_from]
        )
    )
    return planned_from, {"spec": {"hard": {"pods": "11"}}}, plan


async def test_a_quota_write_is_not_refused_for_a_status_change_made_after_the_plan(
    controllers: ControllerApp, kv: KubeVirtByHand
) -> None:
    """kube-controller-manager rewrites the status after every spec change and pod admission;
    the plan never reads it, so a write planned before it still goes through (a write
    conditional on the resourceVersion lost to it in most bursts of migrations)."""
    planned_from, patch, plan = await planned_write(controllers, kv)
    name = planned_from["metadata"]["name"]
    status_write = {"status": {"hard": V170_HARD, "used": {"limits.cpu": "1"}}}
    after = await kv.api.patch(
        RESOURCE_QUOTAS, name, status_write, kv.namespace, subresource="status"
    )
    assert after["metadata"]["resourceVersion"] != planned_from["metadata"]["resourceVersion"]
    await controllers.reconciler.spec_writes.write(planned_from, patch, plan)
    assert (await kv.quota())["spec"]["hard"]["pods"] == "11"


@pytest.mark.parametrize(
    "edit",
    [
        {"metadata": {"annotations": {"harvesterhci.io/skipResourceQuotaAutoScaling": "true"}}},
        {"metadata": {"annotations": {"harvester-quota.io/base": '{"limits.cpu":"4"}'}}},
        {
            "metadata": {
                "labels": {"resourcequota.management.cattle.io/default-resource-quota": None}
            }
        },
    ],
    ids=["skip-annotation-added", "base-annotation-changed", "managed-label-removed"],
)
async def test_a_quota_write_is_refused_for_a_metadata_change_the_plan_read(
    controllers: ControllerApp, kv: KubeVirtByHand, edit: dict[str, Any]
) -> None:
    """Annotations and labels a plan reads are part of the write's condition: an edit of one
    after the plan refuses the write (Conflict) and leaves the quota as the user made it."""
    planned_from, patch, plan = await planned_write(controllers, kv)
    name = planned_from["metadata"]["name"]
    await kv.api.patch(RESOURCE_QUOTAS, name, edit, kv.namespace)
    with pytest.raises(errors.Conflict):
        await controllers.reconciler.spec_writes.write(planned_from, patch, plan)
    assert "pods" not in (await kv.quota())["spec"]["hard"]


async def test_a_raise_is_in_status_hard_when_the_write_returns(
    controllers: ControllerApp, kv: KubeVirtByHand
) -> None:
    """Quota admission reads status.hard: the controller copies its spec.hard there itself
    instead of leaving a target pod to meet the old value until kube-controller-manager copies
    it. (If kube-controller-manager was quicker, the stored quota already has it.)"""
    quota = await kv.create_quota(V170_HARD)
    name = quota["metadata"]["name"]
    raised = await kv.api.patch(
        RESOURCE_QUOTAS, name, {"spec": {"hard": {"limits.cpu": "9"}}}, kv.namespace
    )
    assert raised["status"].get("hard", {}).get("limits.cpu") != "9", "the spec write alone"
    published = await controllers.reconciler.writer.copy_hard_to_status(raised)
    assert published["status"]["hard"]["limits.cpu"] == "9"


async def test_a_raise_is_published_over_a_status_written_since_and_never_over_a_new_spec(
    controllers: ControllerApp, kv: KubeVirtByHand
) -> None:
    """kube-controller-manager writes the status right after our spec write; the copy goes
    through it in one request. Someone else's spec.hard written since is theirs to publish."""
    quota = await kv.create_quota(V170_HARD)
    name = quota["metadata"]["name"]
    await eventually(lambda: caught_up(controllers, kv.namespace), what="controllers caught up")
    await hands_off(controllers, kv.namespace)
    raised = await kv.api.patch(
        RESOURCE_QUOTAS, name, {"spec": {"hard": {"limits.cpu": "9"}}}, kv.namespace
    )
    recount = {"status": {"hard": V170_HARD, "used": {"limits.cpu": "1"}}}
    await kv.api.patch(RESOURCE_QUOTAS, name, recount, kv.namespace, subresource="status")
    requests = RequestLog()
    client = controllers.management.client
    client.add_request_observer(requests)
    try:
        published = await controllers.reconciler.writer.copy_hard_to_status(raised)
    finally:
        client.remove_request_observer(requests)
    assert [m for m, path in requests.seen if path.endswith(f"/{name}/status")] == ["PATCH"]
    assert published["status"]["hard"]["limits.cpu"] == "9"
    assert published["metadata"]["resourceVersion"] != raised["metadata"]["resourceVersion"]

    raised = await kv.api.patch(
        RESOURCE_QUOTAS, name, {"spec": {"hard": {"limits.cpu": "10"}}}, kv.namespace
    )
    theirs = {"spec": {"hard": {"limits.cpu": "11"}}}
    await kv.api.patch(RESOURCE_QUOTAS, name, theirs, kv.namespace)
    # Reading status.hard afterwards cannot tell: kube-controller-manager may itself have
    # copied the short-lived "10" by then. The answer to our copy can: refused by its test.
    requests = RequestLog()
    client.add_request_observer(requests)
    try:
        assert await controllers.reconciler.writer.copy_hard_to_status(raised) is raised
    finally:
        client.remove_request_observer(requests)
    assert requests.answers_to(f"/{name}/status") == [("PATCH", "422")]
