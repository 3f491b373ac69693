"""The QuotaWriter, both modes' one place for quota writes: what each write sends, what a failed
condition becomes, and the permission gates of the optional writes, on a recording fake client."""

from __future__ import annotations

from typing import Any, cast

import pytest
from harvester_quota.app import ControllerApp
from harvester_quota.config.management import Options
from harvester_quota.config.metrics import WRITE_KINDS, QuotaMetrics
from harvester_quota.controller.quotawriter import QuotaWriter
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.permission import FIRST_RETRY
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.util.annotations import LABEL_ROOM_HELD
from prometheus_client import CollectorRegistry


class Client:
    """Records each patch and answers with `answer`, or raises the next of `errors`."""

    def __init__(self, *raising: errors.ApiError) -> None:
        self.patches: list[tuple[str, str, Any, dict[str, Any]]] = []
        self.raising = list(raising)

    async def patch(
        self, resource: Any, name: str, body: Any, namespace: str = "", **kwargs: Any
    ) -> dict[str, Any]:
        self.patches.append((resource.plural, name, body, kwargs))
        if self.raising:
            raise self.raising.pop(0)
        return {"metadata": {"name": name, "resourceVersion": "99"}, "answer": True}


def quota(hard: dict[str, str], status_hard: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "q", "namespace": "ns", "uid": "u1", "resourceVersion": "7"},
        "spec": {"hard": hard},
        "status": {"hard": status_hard or {}},
    }


def writer(client: Client) -> tuple[QuotaWriter, FakeClock]:
    clock = FakeClock()
    return QuotaWriter(client, clock), clock  # type: ignore[arg-type]


async def test_a_planned_write_is_a_json_patch_whose_tests_carry_what_the_plan_read() -> None:
    client = Client()
    quota_writer, _ = writer(client)
    await quota_writer.patch_as_planned(
        quota({"limits.cpu": "3"}), {"spec": {"hard": {"limits.cpu": "5"}}}
    )
    ((plural, name, body, kwargs),) = client.patches
    assert (plural, name, kwargs["patch_type"]) == ("resourcequotas", "q", "json")
    assert {"op": "test", "path": "/metadata/uid", "value": "u1"} in body
    assert {"op": "test", "path": "/spec", "value": {"hard": {"limits.cpu": "3"}}} in body
    assert body[-1] == {"op": "add", "path": "/spec/hard/limits.cpu", "value": "5"}


async def test_a_failed_test_of_a_planned_write_is_a_conflict_and_other_refusals_stay_theirs() -> (
    None
):
    """422 without causes is the API server's answer to a failed test: the caller plans again.
    A 422 with causes (an invalid object) or a 403 is not a Conflict."""
    failed = errors.Invalid("the server rejected our request", status=422)
    invalid = errors.Invalid("spec.hard: Invalid value", status=422, details={"causes": [{}]})
    forbidden = errors.Forbidden("no", status=403)
    quota_writer, _ = writer(Client(failed, invalid, forbidden))
    patch = {"spec": {"hard": {"limits.cpu": "5"}}}
    with pytest.raises(errors.Conflict):
        await quota_writer.patch_as_planned(quota({"limits.cpu": "3"}), patch)
    with pytest.raises(errors.Invalid):
        await quota_writer.patch_as_planned(quota({"limits.cpu": "3"}), patch)
    with pytest.raises(errors.Forbidden):
        await quota_writer.patch_as_planned(quota({"limits.cpu": "3"}), patch)


async def test_a_write_at_version_sets_the_whole_hard_removing_keys_it_lacks() -> None:
    client = Client()
    quota_writer, _ = writer(client)
    read = quota({"limits.cpu": "3", "pods": "10"})
    await quota_writer.patch_hard_at_version("ns", "q", read, {"limits.cpu": "5"}, dry_run=True)
    ((_, name, body, kwargs),) = client.patches
    assert name == "q" and kwargs == {"dry_run": True}
    assert body == {
        "metadata": {"resourceVersion": "7"},
        "spec": {"hard": {"pods": None, "limits.cpu": "5"}},
    }


async def test_a_status_copy_refused_closes_its_gate_for_a_backoff_then_tries_again() -> None:
    """rancher-webhook's 400 "status is immutable" or RBAC's 403: kube-controller-manager's copy
    counts, and the next copies are not tried until the backoff is over."""
    immutable = errors.BadRequest("status is immutable", status=400)
    client = Client(immutable)
    quota_writer, clock = writer(client)
    raised = quota({"limits.cpu": "5"}, {"limits.cpu": "3"})
    assert await quota_writer.copy_hard_to_status(raised) is raised
    assert await quota_writer.copy_hard_to_status(raised) is raised
    assert len(client.patches) == 1, "not tried again during the backoff"
    clock.step(FIRST_RETRY)
    copied = await quota_writer.copy_hard_to_status(raised)
    assert copied["answer"] and len(client.patches) == 2
    (_, _, body, kwargs) = client.patches[1]
    assert kwargs == {"subresource": "status", "patch_type": "json"}
    assert body[0] == {"op": "test", "path": "/spec/hard", "value": {"limits.cpu": "5"}}


async def test_a_status_copy_of_what_status_hard_has_already_sends_nothing() -> None:
    client = Client()
    quota_writer, _ = writer(client)
    same = quota({"limits.cpu": "5"}, {"limits.cpu": "5"})
    assert await quota_writer.copy_hard_to_status(same) is same
    assert client.patches == []


async def test_the_room_held_label_is_written_only_when_it_differs_and_its_gate_is_open() -> None:
    client = Client(errors.Forbidden("no", status=403))
    quota_writer, clock = writer(client)
    bare = {"metadata": {"name": "ns", "resourceVersion": "3"}}
    labelled = {"metadata": {"name": "ns", "labels": {LABEL_ROOM_HELD: "true"}}}
    assert await quota_writer.label_room_held(labelled, True) is labelled
    assert await quota_writer.label_room_held(bare, False) is bare
    assert client.patches == [], "equal already: nothing sent"
    assert await quota_writer.label_room_held(bare, True) is bare, "refused: the namespace as read"
    assert quota_writer.label_retry_in() == FIRST_RETRY
    assert await quota_writer.label_room_held(bare, True) is bare
    assert len(client.patches) == 1, "the gate is closed"
    clock.step(FIRST_RETRY)
    written = await quota_writer.label_room_held(bare, True)
    assert written["answer"]
    assert client.patches[-1][2] == {"metadata": {"labels": {LABEL_ROOM_HELD: "true"}}}


async def test_a_raise_through_rancher_is_conditional_on_its_annotations_not_the_version() -> None:
    """Rancher's agent writes the namespace on every sync (conditions, its project's
    bookkeeping): a write conditional on the resourceVersion lost to it again and again. The
    patch tests the annotations the raise reads (an absent one still absent) and the uid."""
    client = Client()
    quota_writer, _ = writer(client)
    namespace = {
        "metadata": {
            "name": "ns",
            "uid": "n1",
            "resourceVersion": "3",
            "annotations": {"field.cattle.io/resourceQuota": '{"limit":{}}', "other": "x"},
        }
    }
    await quota_writer.patch_rancher_annotation(
        namespace,
        {"field.cattle.io/resourceQuota": "{}", "harvester-quota.io/rancher-base": '{"limit":{}}'},
    )
    ((plural, name, body, kwargs),) = client.patches
    assert (plural, name, kwargs.get("patch_type")) == ("namespaces", "ns", "json")
    tests = {op["path"]: op["value"] for op in body if op["op"] == "test"}
    assert tests == {
        "/metadata/uid": "n1",
        "/metadata/annotations/field.cattle.io~1resourceQuota": '{"limit":{}}',
        "/metadata/annotations/harvester-quota.io~1rancher-base": None,
        "/metadata/annotations/harvester-quota.io~1rancher-applied": None,
        "/metadata/annotations/harvester-quota.io~1rancher-given": None,
    }, "the other annotation and the version are no condition"
    assert [op for op in body if op["op"] != "test"] == [
        {
            "op": "add",
            "path": "/metadata/annotations/field.cattle.io~1resourceQuota",
            "value": "{}",
        },
        {
            "op": "add",
            "path": "/metadata/annotations/harvester-quota.io~1rancher-base",
            "value": '{"limit":{}}',
        },
    ]


async def test_a_raise_through_rancher_on_a_namespace_without_annotations_adds_the_map() -> None:
    """A namespace with no annotations has no map to test keys under (such a test fails whatever
    it expects) nor to add keys into: the patch tests that there are still none and adds the
    map whole, removals left out."""
    client = Client()
    quota_writer, _ = writer(client)
    namespace = {"metadata": {"name": "ns", "uid": "n1", "resourceVersion": "3"}}
    await quota_writer.patch_rancher_annotation(
        namespace,
        {"field.cattle.io/resourceQuota": "{}", "harvester-quota.io/rancher-applied": None},
    )
    ((_, _, body, _),) = client.patches
    assert body == [
        {"op": "test", "path": "/metadata/uid", "value": "n1"},
        {"op": "test", "path": "/metadata/annotations", "value": None},
        {
            "op": "add",
            "path": "/metadata/annotations",
            "value": {"field.cattle.io/resourceQuota": "{}"},
        },
    ]


async def test_a_raise_through_rancher_escapes_the_pointers_of_its_keys() -> None:
    """RFC 6901: "~" becomes "~0" before "/" becomes "~1", so a key holding both is one path
    segment, tested and written where it is."""
    client = Client()
    quota_writer, _ = writer(client)
    namespace = {"metadata": {"name": "ns", "uid": "n1", "annotations": {"a~1/b": "old"}}}
    await quota_writer.patch_rancher_annotation(namespace, {"a~1/b": "new"})
    ((_, _, body, _),) = client.patches
    assert {"op": "test", "path": "/metadata/annotations/a~01~1b", "value": "old"} in body
    assert body[-1] == {"op": "add", "path": "/metadata/annotations/a~01~1b", "value": "new"}


async def test_a_raise_through_rancher_whose_annotations_changed_is_a_conflict() -> None:
    client = Client(errors.Invalid("the server rejected our request: test failed", status=422))
    quota_writer, _ = writer(client)
    namespace = {"metadata": {"name": "ns", "uid": "n1", "annotations": {}}}
    with pytest.raises(errors.Conflict):
        await quota_writer.patch_rancher_annotation(
            namespace, {"field.cattle.io/resourceQuota": "{}"}
        )


def test_both_modes_write_through_one_writer_so_one_refusal_closes_one_gate() -> None:
    """rancher-webhook refuses every status write but kube-controller-manager's, on every quota,
    and RBAC is the one service account's: a refusal either mode meets holds for the other, so
    MTQ mode writes through the room mode's QuotaWriter (one gate, one warning, not two)."""
    app = ControllerApp(
        cast(ApiClient, object()), Options(), clock=FakeClock(), registry=CollectorRegistry()
    )
    assert app.mtq is not None
    assert app.mtq.writes.writer is app.reconciler.writer


def write_counts(registry: CollectorRegistry) -> dict[str, float]:
    return {
        kind: registry.get_sample_value("harvester_quota_api_writes_total", {"kind": kind}) or 0.0
        for kind in WRITE_KINDS
    }


async def test_each_write_request_is_counted_by_kind_as_sent_and_a_dry_run_or_no_op_is_not() -> (
    None
):
    """harvester_quota_api_writes_total, what the scale run reads as our writes per migration:
    one per request sent (a refused one too: it still cost quota admission a write to race),
    none for a dry run or for a status copy or label that would change nothing."""
    registry = CollectorRegistry()
    metrics = QuotaMetrics(registry)
    client = Client(errors.Conflict("modified", status=409))
    quota_writer = QuotaWriter(client, FakeClock(), metrics.count_write)  # type: ignore[arg-type]
    assert write_counts(registry) == dict.fromkeys(WRITE_KINDS, 0.0), "exported at 0"
    patch = {"spec": {"hard": {"limits.cpu": "5"}}}
    with pytest.raises(errors.Conflict):
        await quota_writer.patch_as_planned(quota({"limits.cpu": "3"}), patch)
    await quota_writer.patch_as_planned(quota({"limits.cpu": "3"}), patch)
    await quota_writer.patch_hard_at_version("ns", "q", quota({}), {"limits.cpu": "4"})
    await quota_writer.patch_hard_at_version("ns", "q", quota({}), {"a": "1"}, dry_run=True)
    await quota_writer.copy_hard_to_status(quota({"limits.cpu": "5"}, {"limits.cpu": "3"}))
    await quota_writer.copy_hard_to_status(quota({"limits.cpu": "5"}, {"limits.cpu": "5"}))
    namespace = {"metadata": {"name": "ns", "uid": "n1", "labels": {}, "annotations": {}}}
    await quota_writer.label_room_held(namespace, True)
    await quota_writer.label_room_held(namespace, False)  # equal already: nothing sent
    await quota_writer.patch_rancher_annotation(namespace, {"field.cattle.io/resourceQuota": "{}"})

    assert write_counts(registry) == {
        "spec": 3.0,
        "status": 1.0,
        "label": 1.0,
        "rancher": 1.0,
        "vmi": 0.0,
        "vm": 0.0,
    }
    assert len(client.patches) == 7, "every counted write was sent, and only those"


def test_the_controller_counts_its_quota_namespace_vmi_and_vm_writes_on_its_own_registry() -> None:
    app = ControllerApp(
        cast(ApiClient, object()),
        Options(harvester_annotations=True),
        clock=FakeClock(),
        registry=CollectorRegistry(),
    )
    assert app.reconciler.writer.count_write == app.reconciler.metrics.count_write
    assert app.vmim_controller is not None and app.vmi_controller is not None
    assert app.vmim_controller.annotator.count_write == app.reconciler.metrics.count_write
    assert app.vmi_controller.annotator is app.vmim_controller.annotator


def test_by_default_nothing_writes_harvesters_annotations_and_aborted_targets_are_cleaned() -> None:
    """Harvester's migration annotations are left to Harvester's own migration controller:
    no VMIM annotation handler and no annotator; the aborted target pod's cleanup stays."""
    app = ControllerApp(
        cast(ApiClient, object()), Options(), clock=FakeClock(), registry=CollectorRegistry()
    )
    assert app.vmim_controller is None
    assert app.vmi_controller is not None and app.vmi_controller.annotator is None
    bare = ControllerApp(
        cast(ApiClient, object()),
        Options(harvester_compat=False),
        clock=FakeClock(),
        registry=CollectorRegistry(),
    )
    assert bare.vmim_controller is None and bare.vmi_controller is None
