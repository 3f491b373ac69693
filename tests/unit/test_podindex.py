"""Store views and the PodIndex kept from them: after any sequence of pod adds, updates, deletes
and relists, each namespace's figures are exactly what summing its cached pods gives."""

from __future__ import annotations

import copy
import datetime
from collections.abc import Callable
from typing import Any

import pytest
from harvester_quota.generic.resource import Object
from harvester_quota.generic.store import NamespaceObjects, Store
from harvester_quota.util import resources
from harvester_quota.util.podusage import (
    pod_counts_against_quota,
    pod_quota_usage,
    pod_usage_inputs,
)
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.quotascope import (
    UNSCOPED,
    QuotaScope,
    ScopeRequirement,
    pod_scope_facts,
)
from harvester_quota.util.resourcequota import podindex
from harvester_quota.util.resourcequota.podindex import (
    NamespacePods,
    PodIndex,
    PodView,
    pod_view,
)
from harvester_quota.util.resourcequota.rooms import next_release
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.fakes import upsert

NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)


def pod(
    name: str,
    namespace: str = "ns",
    *,
    cpu: str = "100m",
    memory: str = "64Mi",
    phase: str = "Running",
    deleted_seconds_ago: int | None = None,
    grace: int = 30,
    priority_class: str = "",
    **labels: str,
) -> Object:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if deleted_seconds_ago is not None:
        moment = NOW - datetime.timedelta(seconds=deleted_seconds_ago)
        meta["deletionTimestamp"] = moment.strftime("%Y-%m-%dT%H:%M:%SZ")
        meta["deletionGracePeriodSeconds"] = grace
    limits = {"cpu": cpu, "memory": memory}
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"limits": limits}}]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def summed(
    pods: list[Object], excluded: frozenset[str] = frozenset(), scope: QuotaScope = UNSCOPED
) -> dict[str, str]:
    """What the plan computed before the index: the usage of every pod the scope charges,
    summed."""
    total = resources.total(
        pod_quota_usage(p, now=NOW)
        for p in pods
        if p["metadata"]["name"] not in excluded
        and pod_counts_against_quota(p, NOW)
        and scope.matches(pod_scope_facts(p))
    )
    return {key: str(value) for key, value in total.items()}


def indexed(
    pods: NamespacePods, excluded: frozenset[str] = frozenset(), scope: QuotaScope = UNSCOPED
) -> dict[str, str]:
    return {key: str(value) for key, value in pods.used_without(excluded, NOW, scope).items()}


BATCH_ONLY = QuotaScope((ScopeRequirement("PriorityClass", "In", ("batch",)),))
NOT_BATCH = QuotaScope((ScopeRequirement("PriorityClass", "NotIn", ("batch",)),))


def test_views_follow_every_write_of_the_store_and_are_heard_inside_it() -> None:
    heard: list[tuple[str, str | None]] = []
    store = Store()
    upsert(store, pod("before"))
    store.add_view(
        "name",
        lambda obj: obj["metadata"]["name"].upper(),
        lambda key, value: heard.append((key, value)),
    )
    assert heard == [("ns/before", "BEFORE")], "what is cached is viewed when added"
    upsert(store, pod("p1"))
    store.delete("ns/before")
    store.replace_prepared([store.prepare(pod("p2"))])
    assert heard[1:] == [("ns/p1", "P1"), ("ns/before", None), ("ns/p2", "P2"), ("ns/p1", None)]
    store.delete("ns/missing")
    assert heard[-1] == ("ns/p1", None), "nothing heard of what was never stored"


def test_namespace_objects_decode_only_what_is_looked_up() -> None:
    store = Store()
    for name in ("a", "b"):
        upsert(store, pod(name))
    upsert(store, pod("c", namespace="other"))
    objects = NamespaceObjects(store, "ns")
    assert sorted(objects) == ["a", "b"] and len(objects) == 2
    assert objects["a"]["metadata"]["name"] == "a" and objects.get("c") is None


def test_a_namespace_total_counts_steady_pods_and_asks_the_clock_for_terminating_ones() -> None:
    pods = [
        pod("steady", cpu="1"),
        pod("done", cpu="5", phase="Succeeded"),
        pod("grace-left", cpu="200m", deleted_seconds_ago=10),
        pod("grace-over", cpu="300m", deleted_seconds_ago=31),
        pod("target", cpu="2", **{"kubevirt.io/migrationJobUID": "m1"}),
    ]
    index = NamespacePods(pod_view(p) for p in pods)
    assert indexed(index) == summed(pods)
    assert indexed(index)["limits.cpu"] == "3200m"
    assert indexed(index, frozenset({"target"})) == summed(pods, frozenset({"target"}))
    assert [view.name for view in index.labelled_targets("m1")] == ["target"]
    assert next_release(index, NOW) == 20.0


def test_terminal_pods_cost_a_plan_nothing() -> None:
    """KubeVirt leaves every migration's source pod Completed: a namespace keeps thousands, and
    a plan must not walk them (they charge nothing, at any time)."""
    pods = [pod(f"done-{i}", cpu="5", phase="Succeeded") for i in range(50)]
    pods += [pod("steady", cpu="1"), pod("grace-left", cpu="200m", deleted_seconds_ago=10)]
    index = NamespacePods(pod_view(p) for p in pods)
    assert [view.name for view in index.changing()] == ["grace-left"]
    assert indexed(index) == summed(pods) and indexed(index)["limits.cpu"] == "1200m"
    assert indexed(index, frozenset({"done-3"})) == summed(pods, frozenset({"done-3"}))
    index.remove("done-7")
    assert indexed(index) == summed([p for p in pods if p["metadata"]["name"] != "done-7"])


def test_a_pod_that_cannot_be_read_is_listed_and_fails_no_plan() -> None:
    """One pod with a field the parser refuses (a quantity of over 1000 digits, which Go
    accepts) made every plan of its namespace fail, logged only: now what cannot be read charges
    nothing, the others are planned, and the plan names the pod in a Warning."""
    broken = pod("broken", deleted_seconds_ago=1)
    broken["metadata"]["deletionGracePeriodSeconds"] = "thirty"
    huge = pod("huge", cpu="1" * 1001)
    views = [pod_view(broken), pod_view(huge), pod_view(pod("fine", cpu="1"))]
    assert views[0].error is not None and "deletionGracePeriodSeconds" in views[0].error
    assert views[1].error is not None
    index = NamespacePods(views)
    assert [view.name for view in index.unreadable()] == ["broken", "huge"]
    assert index.used_without(frozenset(), NOW)["limits.cpu"] == Quantity.parse("1")
    assert views[0].counts(NOW), "whatever it holds up stays held while it exists"
    index.remove("huge")
    assert [view.name for view in index.unreadable()] == ["broken"]


def test_a_pod_with_one_unreadable_quantity_still_charges_its_readable_keys() -> None:
    """An unparsable quantity on a key no quota lists hid the whole pod's CPU and memory from
    `used` (and so from UsageAboveBase): now only that quantity is left out."""
    tenant = pod("slipped-in", cpu="2", memory="1Gi")
    tenant["spec"]["containers"][0]["resources"]["limits"]["example.com/x"] = "1" * 1001
    tenant["spec"]["containers"].append(
        {"name": "d", "resources": {"requests": {"cpu": "1" * 1001, "memory": "1Gi"}}}
    )
    view = pod_view(tenant)
    assert view.error is not None and "limits.example.com/x" in view.error
    assert "spec.containers[1].resources.requests.cpu" in view.error
    assert view.usage["limits.cpu"] == Quantity.parse("2")
    assert view.usage["requests.memory"] == Quantity.parse("2Gi")
    assert NamespacePods([view]).used_without(frozenset(), NOW)["limits.cpu"] == Quantity.parse("2")
    assert tenant["spec"]["containers"][0]["resources"]["limits"]["example.com/x"] == "1" * 1001


def test_a_pods_status_writes_that_leave_its_quantities_cost_no_parse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """KubeVirt's and the kubelet's status writes (conditions, IPs, container ids, states and
    readiness; the phase's next step aside) leave what a pod charges as it was: its next view
    reuses the usage, parsed once for it and held once for every pod of the same shape."""
    parses: list[str] = []

    def counted(pod: Object, **kwargs: Any) -> dict[str, Quantity]:
        parses.append(pod["metadata"]["name"])
        return pod_quota_usage(pod, **kwargs)

    monkeypatch.setattr(podindex, "pod_quota_usage", counted)
    first = pod("shape-a", cpu="317m")
    first["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    written = copy.deepcopy(first)
    written["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    written["status"]["podIP"] = "10.0.0.1"
    first["status"]["containerStatuses"] = [_running("c", "containerd://1", ready=False)]
    written["status"]["containerStatuses"] = [_running("c", "containerd://1", ready=True)]
    twin = pod("shape-a-twin", cpu="317m")
    twin["spec"]["nodeName"] = "elsewhere"
    twin["status"]["containerStatuses"] = [_running("c", "containerd://2", ready=True)]
    views = [pod_view(first), pod_view(written), pod_view(twin)]
    assert parses == ["shape-a"]
    assert views[0].usage is views[1].usage is views[2].usage
    assert views[2].usage == pod_quota_usage(first)


def _running(name: str, container_id: str, *, ready: bool) -> dict[str, Any]:
    """A container status as the kubelet writes it for a running container."""
    return {
        "name": name,
        "containerID": container_id,
        "ready": ready,
        "restartCount": 0,
        "state": {"running": {"startedAt": f"2026-01-01T00:00:0{container_id[-1]}Z"}},
    }


def _resized(pod: Object) -> None:
    pod["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "2"


def _resizing(pod: Object) -> None:
    pod["status"]["containerStatuses"] = [
        {"name": "c", "resources": {"requests": {"cpu": "3"}, "limits": {"cpu": "3"}}}
    ]


def _overhead(pod: Object) -> None:
    pod["spec"]["overhead"] = {"cpu": "250m"}


def _init_container(pod: Object) -> None:
    pod["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "4"}}}]


def _pod_level(pod: Object) -> None:
    pod["spec"]["resources"] = {"limits": {"cpu": "5"}}


@pytest.mark.parametrize("change", [_resized, _resizing, _overhead, _init_container, _pod_level])
def test_a_pod_seen_before_is_charged_anew_once_what_quota_reads_of_it_changed(
    change: Callable[[Object], None],
) -> None:
    """Every field the charge reads is part of what a reused usage is looked up by: an in-place
    resize (spec or status), an overhead, an init container, pod-level resources."""
    before = pod("resized", cpu="421m")
    old = pod_view(before).usage
    after = copy.deepcopy(before)
    change(after)
    assert pod_quota_usage(after) != old, "the change is one quota charges"
    assert pod_view(after).usage == pod_quota_usage(after)


def _with_statuses(name: str, statuses: list[Any]) -> Object:
    """A running pod of one container `c` (1 CPU requested) with `statuses` as its
    containerStatuses."""
    made = pod(name, cpu="1")
    made["spec"]["containers"][0]["name"] = "c"
    made["status"]["containerStatuses"] = statuses
    return made


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (
            {"name": "c", "resources": {"requests": {"cpu": "3"}}},
            {"name": "c", "resources": {"requests": {"cpu": "5"}}},
        ),
        (
            {
                "name": "c",
                "resources": {"requests": {"cpu": "1"}},
                "allocatedResources": {"cpu": "1"},
            },
            {
                "name": "c",
                "resources": {"requests": {"cpu": "1"}},
                "allocatedResources": {"cpu": "6"},
            },
        ),
        (
            {"name": "x", "resources": {"requests": {"cpu": "7"}}},
            {"name": "c", "resources": {"requests": {"cpu": "7"}}},
        ),
    ],
    ids=["resources", "allocated", "name"],
)
def test_a_container_status_change_the_charge_reads_is_charged_anew(
    before: dict[str, Any], after: dict[str, Any]
) -> None:
    """A second resize, the allocated resources, the status entry's name coming to match the
    container: each is read by the charge, so a pod seen before is charged anew."""
    first, second = _with_statuses("p", [before]), _with_statuses("p", [after])
    assert pod_quota_usage(first) != pod_quota_usage(second), "the change is one quota charges"
    pod_view(first)
    assert pod_view(second).usage == pod_quota_usage(second)


def test_container_statuses_the_charge_reads_apart_are_looked_up_apart() -> None:
    """An entry that is no object (skipped by the charge) and an object with the same values
    (read), or a status name absent and one set to null (charged as "" and as "None"), never
    share a usage; and a pod whose charge cannot be read is never handed another's success."""
    resources = {"requests": {"cpu": "4"}}
    as_list = _with_statuses("a", [["c", resources, None]])
    as_object = _with_statuses("b", [{"name": "c", "resources": resources}])
    assert pod_quota_usage(as_list) != pod_quota_usage(as_object)
    assert pod_usage_inputs(as_list) != pod_usage_inputs(as_object)
    null, absent = (
        _with_statuses(n, [dict(resources=resources, **named)])
        for n, named in (("n", {"name": None}), ("m", {}))
    )
    for named_none in (null, absent):
        named_none["spec"]["containers"][0]["name"] = "None"
    assert pod_quota_usage(null) != pod_quota_usage(absent)
    assert pod_usage_inputs(null) != pod_usage_inputs(absent)
    readable = _with_statuses("ok", [["c", "not-an-object", None]])
    unreadable = _with_statuses("bad", [{"name": "c", "resources": "not-an-object"}])
    assert pod_view(readable).error is None
    assert pod_view(unreadable).error is not None


def test_an_unreadable_pod_stops_counting_once_terminal_or_past_its_grace_period() -> None:
    """An unreadable pod counted whatever its phase: a Completed source launcher held a
    succeeded migration's room for its VMI's whole life."""
    for gone in (
        pod("done", cpu="1" * 1001, phase="Succeeded"),
        pod("deleted", cpu="1" * 1001, deleted_seconds_ago=60),
    ):
        gone["spec"]["containers"][0]["resources"]["limits"]["memory"] = "1" * 1001
        view = pod_view(gone)
        assert not view.counts(NOW), gone["metadata"]["name"]
    live = pod("live", cpu="1" * 1001)
    assert pod_view(live).error is not None and pod_view(live).counts(NOW)


OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["upsert", "delete", "relist"]),
        st.sampled_from(["p0", "p1", "p2", "p3", "p4"]),
        st.sampled_from(["ns", "other"]),
        st.sampled_from(["100m", "250m", "1", "0"]),
        st.sampled_from(["64Mi", "4797464313", "1Gi"]),
        st.sampled_from(["Running", "Pending", "Succeeded"]),
        st.sampled_from([None, 5, 45]),
        st.booleans(),
        st.sampled_from(["", "batch"]),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(OPERATIONS)
def test_the_index_always_equals_summing_the_cached_pods_a_quotas_scopes_charge(
    operations: list[Any],
) -> None:
    store = Store()
    index = PodIndex()
    store.add_view(PodIndex.VIEW, pod_view, index.changed)
    for action, name, namespace, cpu, memory, phase, deleted, target, priority in operations:
        labels = {"kubevirt.io/migrationJobUID": "m"} if target else {}
        obj = pod(
            name,
            namespace,
            cpu=cpu,
            memory=memory,
            phase=phase,
            deleted_seconds_ago=deleted,
            priority_class=priority,
            **labels,
        )
        if action == "upsert":
            upsert(store, obj)
        elif action == "delete":
            store.delete(f"{namespace}/{name}")
        else:
            kept = [o for o in store.objects() if o["metadata"]["name"] != name]
            store.replace_prepared([store.prepare(o) for o in [*kept, obj]])
    for namespace in ("ns", "other"):
        cached = store.by_index("namespace", namespace)
        views = index.namespace(namespace)
        assert sorted(v.name for v in views) == sorted(p["metadata"]["name"] for p in cached)
        excluded = frozenset({"p1"})
        assert indexed(views, excluded) == summed(cached, excluded)
        for scope in (BATCH_ONLY, NOT_BATCH):
            assert indexed(views, excluded, scope) == summed(cached, excluded, scope), scope
        assert next_release(views, NOW) == next_release(cached, NOW)


def test_a_view_is_small_and_keeps_no_object() -> None:
    view = pod_view(pod("p", **{"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": "v"}))
    assert isinstance(view, PodView) and view.launcher and view.created_by == "v"
    assert not hasattr(view, "__dict__"), "slots: no per-view dict"


def test_the_index_says_whether_a_pod_write_changed_what_the_plan_reads() -> None:
    """The controller reconciles a namespace only when this is true: kwok's and the kubelet's
    status writes leave a pod's view equal, and must cost no reconcile."""
    index = PodIndex()
    running = pod("a")
    assert index.changed("ns/a", pod_view(running)) is True
    with_condition = {**running, "status": {"phase": "Running", "conditions": [{"type": "Ready"}]}}
    assert index.changed("ns/a", pod_view(with_condition)) is False
    assert index.changed("ns/a", pod_view(pod("a", phase="Succeeded"))) is True
    assert index.changed("ns/a", None) is True
    assert index.changed("ns/a", None) is False
    assert len(index.namespace("ns")) == 0
