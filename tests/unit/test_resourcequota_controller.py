"""The room mode's namespace reconcile and its collaborators: the explanation of migrations refused
by quota, the room-held label and its linger, the writes and their copies into status.hard, the
Rancher path's choice, on fakes of the API server and a recording recorder."""

from __future__ import annotations

import asyncio
import datetime
from collections import Counter
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from harvester_quota.config.metrics import QuotaMetrics
from harvester_quota.controller.quotawriter import QuotaWriter
from harvester_quota.controller.resourcequota.planner import (
    NamespacePlanner,
    label_policy,
)
from harvester_quota.controller.resourcequota.rancher import RancherPath
from harvester_quota.controller.resourcequota.reports import NamespaceReports, RefusalTracker
from harvester_quota.controller.resourcequota.resourcequota_controller import (
    QuotaReconciler,
    requeue,
)
from harvester_quota.controller.resourcequota.writes import (
    ReleaseCheck,
    ReleaseGathering,
    RoomHeldLabel,
    SpecWrites,
)
from harvester_quota.generic import errors
from harvester_quota.generic.controller import RetryAfter
from harvester_quota.generic.pendingwrites import PendingWrites
from harvester_quota.generic.permission import FIRST_RETRY
from harvester_quota.generic.store import Store
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.util.annotations import LABEL_ROOM_HELD, migrating_vm_annotation_key
from harvester_quota.util.launcher import DEFAULT_LAUNCHER_SETTINGS, LauncherSettings
from harvester_quota.util.resourcequota.plan import NamespaceSnapshot, plan_quota
from prometheus_client import CollectorRegistry

from tests.objects import (
    bare_launcher,
    launcher_pod,
    managed_quota,
    migration,
    rancher_namespace,
    vmi,
)
from tests.unit.test_pause import ROOM
from tests.unit.test_quota_plan import V170_HARD, V170_LIMIT

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


class RecordingRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def event(self, obj: dict[str, Any], kind: str, reason: str, message: str) -> None:
        self.events.append((str(obj["metadata"]["name"]), kind, reason, message))


def reports(recorder: RecordingRecorder) -> NamespaceReports:
    metrics = QuotaMetrics(CollectorRegistry())
    return NamespaceReports(metrics, recorder, RefusalTracker(FakeClock()))  # type: ignore[arg-type]


def test_an_unsizable_vmi_does_not_fail_the_explanation_of_the_others() -> None:
    quota = managed_quota(
        "ns",
        {"limits.cpu": "3", "limits.memory": "5000Mi"},
        {"harvesterhci.io/skipResourceQuotaAutoScaling": "true"},
    )
    quota["status"] = {"used": {"limits.cpu": "3", "limits.memory": "5000Mi"}}
    broken = vmi("broken")
    broken["spec"]["domain"]["resources"]["limits"]["memory"] = "4Gi invalid"
    fine = vmi("fine")
    snapshot = NamespaceSnapshot(
        namespace=rancher_namespace("ns", {"limitsCpu": "3", "limitsMemory": "5000Mi"}),
        quota=quota,
        migrations=[
            migration("m-broken", broken, rejected=True),
            migration("m-fine", fine, rejected=True),
        ],
        vmis={"broken": broken, "fine": fine},
        pods=[bare_launcher(broken, "src-broken"), bare_launcher(fine, "src-fine")],
        now=NOW,
        launcher=LauncherSettings(ratio="1.5", kubevirt_version="1.6"),
    )
    plan = plan_quota(snapshot)
    assert any("m-broken" in w and "4Gi invalid" in w for w in plan.warnings)
    recorder = RecordingRecorder()
    reports(recorder).explain_blocked(snapshot, quota, plan)
    assert [(name, reason) for name, _kind, reason, _ in recorder.events] == [
        ("m-fine", "MigrationBlockedByQuota")
    ]
    assert "skipResourceQuotaAutoScaling" in recorder.events[0][3]


def test_a_receive_refused_by_quota_is_told_to_fit_the_quota_as_it_is() -> None:
    """The receiving side of a decentralized migration holds no room: the Warning says the VM
    must fit the quota as it is, not that the keys are outside the base."""
    quota = managed_quota("ns", {"limits.cpu": "3", "limits.memory": "5000Mi"})
    quota["status"] = {"used": {"limits.cpu": "3", "limits.memory": "5000Mi"}}
    arriving = vmi("arriving")
    received = migration("m-receive", arriving, phase="Pending", rejected=True)
    received["spec"]["receive"] = {"migrationID": "x"}
    snapshot = NamespaceSnapshot(
        namespace=rancher_namespace("ns", {"limitsCpu": "3", "limitsMemory": "5000Mi"}),
        quota=quota,
        migrations=[received],
        vmis={"arriving": arriving},
        pods=[],
        now=NOW,
        launcher=LauncherSettings(ratio="1.5", kubevirt_version="1.6"),
    )
    plan = plan_quota(snapshot)
    assert not plan.rooms.rooms
    recorder = RecordingRecorder()
    reports(recorder).explain_blocked(snapshot, quota, plan)
    ((name, _kind, reason, message),) = recorder.events
    assert (name, reason) == ("m-receive", "MigrationBlockedByQuota")
    assert "must fit the quota as it is" in message and "limits.cpu: needs" in message


class RefusingClient:
    """An API server that refuses every namespace write, as without deploy/'s RBAC for it."""

    def __init__(self) -> None:
        self.patches = 0

    async def patch(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        from harvester_quota.generic import errors

        self.patches += 1
        raise errors.Forbidden('namespaces "ns" is forbidden: cannot patch', status=403)


async def test_a_refused_label_write_never_stands_between_a_migration_and_its_raise() -> None:
    """The room-held label is a guard, not a prerequisite: refused once, it is not tried again
    and the reconcile goes on to the raise."""
    client, clock = RefusingClient(), FakeClock()
    pending = PendingWrites(Store(), clock)
    label = RoomHeldLabel(QuotaWriter(client, clock), clock, 30.0, pending)  # type: ignore[arg-type]
    namespace = rancher_namespace("ns", {"limitsCpu": "3"})
    assert await label.set(namespace, True) is namespace
    assert await label.set(namespace, True) is namespace
    assert client.patches == 1, "not retried on every reconcile"
    clock.step(FIRST_RETRY)
    assert await label.set(namespace, True) is namespace
    assert client.patches == 2, (
        "tried again after the backoff (an API server restart's refusals end)"
    )


class StatusClient:
    """Answers our quota writes as the API server would store them, and records status patches
    (the copy of spec.hard); while `hold` is clear, a status patch waits for it."""

    def __init__(self) -> None:
        self.status_patches: list[dict[str, Any]] = []
        self.spec_changed_to: dict[str, str] | None = None
        """Someone else's spec.hard, written after ours: the copy's test fails (422)."""
        self.hold = asyncio.Event()
        self.hold.set()
        self.copying = asyncio.Event()
        """Set once a status patch has arrived."""
        self.gone = False
        """The quota was deleted after our spec write: the copy finds nothing (404)."""
        self.status_immutable = False
        """rancher-webhook is installed: every status write but kube-controller-manager's is
        refused with 400."""

    async def patch(
        self, resource: Any, name: str, body: list[dict[str, Any]], namespace: str, **kwargs: Any
    ) -> dict[str, Any]:
        assert kwargs.get("patch_type") == "json"
        if kwargs.get("subresource") != "status":
            return self._spec_written(name, namespace, body)
        test, copy = body
        assert test["op"] == "test" and test["path"] == "/spec/hard"
        assert copy == {"op": "add", "path": "/status/hard", "value": test["value"]}
        self.status_patches.append(copy["value"])
        self.copying.set()
        await self.hold.wait()
        if self.gone:
            raise errors.NotFound('resourcequotas "q" not found', status=404)
        if self.spec_changed_to is not None:
            raise errors.Invalid("the server rejected our request", status=422)
        if self.status_immutable:
            raise errors.BadRequest(
                'admission webhook "rancher.cattle.io.resourcequotas" denied the request: '
                "status is immutable",
                status=400,
            )
        return {
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": "11"},
            "spec": {"hard": copy["value"]},
            "status": {"hard": copy["value"]},
        }

    @staticmethod
    def _spec_written(name: str, namespace: str, body: list[dict[str, Any]]) -> dict[str, Any]:
        hard = {
            op["path"].removeprefix("/spec/hard/"): op["value"]
            for op in body
            if op["op"] != "test" and op["path"].startswith("/spec/hard/")
        }
        return {
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": "12"},
            "spec": {"hard": hard},
            "status": {"hard": {"limits.cpu": "3"}},
        }


def raised_quota(cpu: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "q", "namespace": "ns", "resourceVersion": "10"},
        "spec": {"hard": {"limits.cpu": cpu}},
        "status": {"hard": {"limits.cpu": "3"}},
    }


def publishing_writes() -> tuple[SpecWrites, StatusClient]:
    client = StatusClient()
    writer = QuotaWriter(client, FakeClock())  # type: ignore[arg-type]
    metrics = QuotaMetrics(CollectorRegistry())
    pending = PendingWrites(Store())
    return SpecWrites(writer, metrics, RecordingRecorder(), pending), client  # type: ignore[arg-type]


RAISING = SimpleNamespace(rooms=SimpleNamespace(rooms=[]), holds_room=True)
"""What `SpecWrites.write` reads of a plan: the rooms it names in its log line and Event."""


async def test_a_raise_does_not_wait_for_its_copy_into_status_hard() -> None:
    """The next raise of a burst waits for the namespace's reconcile to end: that must not
    include the status copy (traced: 100-170 ms a raise on a 3,000-VM namespace). The copy
    follows beside it."""
    instance, client = publishing_writes()
    client.hold.clear()
    spec = {"spec": {"hard": {"limits.cpu": "5"}}}
    await asyncio.wait_for(instance.write(raised_quota("3"), spec, RAISING), timeout=5)  # type: ignore[arg-type]
    assert instance.publisher.busy("ns"), "the copy is under way, not done in the reconcile"
    client.hold.set()
    await instance.publisher.idle("ns")
    assert client.status_patches == [{"limits.cpu": "5"}]


async def test_copies_of_one_namespace_run_one_at_a_time_the_newest_after() -> None:
    """Raises written while a copy is under way: only the newest is copied after it (an older
    one would fail its test against the newer spec anyway)."""
    instance, client = publishing_writes()
    client.hold.clear()
    for cpu in ("5", "6", "7"):
        spec = {"spec": {"hard": {"limits.cpu": cpu}}}
        await instance.write(raised_quota("3"), spec, RAISING)  # type: ignore[arg-type]
        await client.copying.wait()  # the first copy under way before the next raise
    client.hold.set()
    await instance.publisher.idle("ns")
    assert client.status_patches == [{"limits.cpu": "5"}, {"limits.cpu": "7"}]


async def test_a_publish_after_someone_elses_spec_write_leaves_it_to_them() -> None:
    """The copy tests that spec.hard is still ours: if another writer changed it since, their
    value is theirs to publish, and the write we made stands as returned (no error, no retry)."""
    instance, client = publishing_writes()
    client.spec_changed_to = {"limits.cpu": "4"}
    ours = raised_quota("5")
    assert await instance.writer.copy_hard_to_status(ours) is ours
    assert client.status_patches == [{"limits.cpu": "5"}], "one request, not retried"


async def test_a_copy_into_a_quota_deleted_since_is_nothing_to_do() -> None:
    """The copy runs beside the reconciles: the namespace may have gone since the write. That
    is no failure to report (the publisher would log it as one)."""
    instance, client = publishing_writes()
    client.gone = True
    ours = raised_quota("5")
    assert await instance.writer.copy_hard_to_status(ours) is ours
    assert client.status_patches == [{"limits.cpu": "5"}]


async def test_a_status_copy_rancher_refuses_is_left_to_kube_controller_manager_after_one_try() -> (
    None
):
    """rancher-webhook refuses every quota status write but kube-controller-manager's with 400
    "status is immutable": an expected refusal, not an error. The copy is skipped, and not tried
    again on every raise (a backoff), while the raise itself stands."""
    instance, client = publishing_writes()
    client.status_immutable = True
    ours = raised_quota("5")
    assert await instance.writer.copy_hard_to_status(ours) is ours
    assert await instance.writer.copy_hard_to_status(raised_quota("6")) is not None
    assert client.status_patches == [{"limits.cpu": "5"}], "one try, then the backoff"


async def test_a_raise_after_the_room_held_label_covers_migrations_seen_during_that_write() -> None:
    """The label write is a round trip before the first raise of a burst; the burst's other
    migrations arrive meanwhile, so the raise is planned again from the caches after it (one
    write covering them instead of another run behind it)."""
    namespace = rancher_namespace("ns", {"limitsCpu": "3000m"})
    labelled = {**namespace, "metadata": {**namespace["metadata"], "resourceVersion": "2"}}
    plans = iter(["one migration", "three migrations"])
    written: list[str] = []

    def plan(_key: str, ns: dict[str, Any], **_options: Any) -> Any:
        return stub_plan(ns, holds_room=True, labels_room=True, name=next(plans))

    async def label(_ns: dict[str, Any], held: bool) -> dict[str, Any]:
        assert held
        return labelled

    async def write(plan: Any) -> None:
        written.append(plan.name)

    instance = bare_reconciler(FakeClock())
    instance.room_label = SimpleNamespace(held_now=lambda _key: None, set=label)  # type: ignore[assignment]
    plans_with(instance, plan)
    instance._write_plan = write  # type: ignore[method-assign, assignment]
    assert await instance._reconcile("ns", namespace) is labelled
    assert written == ["three migrations"]


class LabelClient:
    """Answers namespace patches as the API server would, recording each label value written;
    the next `failures` patches fail with a server error instead, and the next `refusals`
    after those with Forbidden (as right after an API server restart)."""

    def __init__(self) -> None:
        self.labels: list[str | None] = []
        self.failures = 0
        self.refusals = 0
        self.patches = 0

    async def patch(self, _resource: Any, _name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.patches += 1
        if self.failures:
            self.failures -= 1
            raise errors.ServerError("etcdserver: request timed out", status=500)
        if self.refusals:
            self.refusals -= 1
            raise errors.Forbidden('clusterrole "harvester-quota" not found', status=403)
        value = patch["metadata"]["labels"][LABEL_ROOM_HELD]
        self.labels.append(value)
        return labelled_namespace(value, version=1 + self.patches)


def room_held(namespace: dict[str, Any] | None) -> str | None:
    """The namespace's LABEL_ROOM_HELD value (None: unlabelled)."""
    assert namespace is not None
    return (namespace["metadata"].get("labels") or {}).get(LABEL_ROOM_HELD)


def labelled_namespace(value: str | None, version: int = 1) -> dict[str, Any]:
    """The namespace labelled `value` (None: unlabelled) at resourceVersion `version`."""
    namespace = rancher_namespace("ns", {"limitsCpu": "3000m"})
    namespace["metadata"]["resourceVersion"] = str(version)
    if value is not None:
        namespace["metadata"]["labels"] = {LABEL_ROOM_HELD: value}
    return namespace


def bare_reconciler(clock: FakeClock, client: Any = None, linger: float = 30.0) -> QuotaReconciler:
    """A reconciler with its room-held label on `client` and `clock`, whose reports, inputs and
    Rancher path do nothing (tests give it the plans and writes they need)."""
    instance = object.__new__(QuotaReconciler)
    instance.management = SimpleNamespace(clock=clock)  # type: ignore[assignment]
    namespaces = PendingWrites(Store(), clock)
    instance.room_label = RoomHeldLabel(QuotaWriter(client, clock), clock, linger, namespaces)
    instance.planner = NamespacePlanner(
        NamespaceSnapshot(
            {"metadata": {"name": "ns"}}, {}, [], {}, [], NOW, DEFAULT_LAUNCHER_SETTINGS
        )
    )
    nothing = SimpleNamespace(
        warnings=lambda *_: None,
        export=lambda *_: None,
        set_aside_settled=lambda *_: None,
        forget=lambda _key: None,
        through=lambda *_: False,
        namespaces=namespaces,
        quotas=PendingWrites(Store(), clock),
    )
    instance.reports = instance.inputs = instance.rancher = nothing  # type: ignore[assignment]
    instance.stale_raises = nothing  # type: ignore[assignment]
    instance.gathering = ReleaseGathering(clock, 0.0)

    async def no_migrations(*_: Any) -> dict[str, Any]:
        return {"items": []}

    instance.release_check = ReleaseCheck(no_migrations, clock)
    return instance


def stub_plan(
    ns: dict[str, Any], quota: dict[str, Any] | None = None, **fields: Any
) -> SimpleNamespace:
    """A plan of `ns` and `quota` (a managed quota of no migration, no room, no label write
    unless `fields` say otherwise: `holds_room`, `labels_room`, `hard`, ...) as the reconcile
    reads one."""
    defaults: dict[str, Any] = {
        "holds_room": False,
        "requeue_after": None,
        "hard": {},
        "gathers": False,
        "skipped": False,
        "labels_room": False,
        "labelled_for_good": False,
        "label_writes_wait": False,
    }
    snapshot = SimpleNamespace(namespace=ns, quota=quota or {}, migrations=[], settled=[])
    return SimpleNamespace(snapshot=snapshot, **{**defaults, **fields})


def plans_with(instance: QuotaReconciler, plan: Callable[..., Any]) -> None:
    """Has `instance`'s planner answer `plan(key, namespace)`."""
    instance.planner.plan = lambda ns: plan(ns["metadata"]["name"], ns)  # type: ignore[method-assign]


def lingering_reconciler(
    linger: float, quota: dict[str, Any] | None = None, hard: dict[str, str] | None = None
) -> tuple[QuotaReconciler, LabelClient, FakeClock, list[bool]]:
    """A reconciler whose plans hold room while `holding[0]` is true (of `hard`, on `quota` as
    the cache holds it), its label writes on a LabelClient, its clock fake, `room_held_linger`
    = `linger`."""
    client, clock, holding = LabelClient(), FakeClock(), [True]
    instance = bare_reconciler(clock, client, linger)

    def plan(_key: str, ns: dict[str, Any], **_options: Any) -> Any:
        held = holding[0]
        return stub_plan(ns, quota, holds_room=held, labels_room=held, hard=hard or {})

    async def write(*_: Any) -> None:
        return None

    plans_with(instance, plan)
    instance._write_plan = write  # type: ignore[method-assign, assignment]
    return instance, client, clock, holding


async def test_the_room_held_label_lingers_after_the_room_then_goes() -> None:
    """Given back, the room leaves the label for `room_held_linger` seconds (the namespace run
    again when they end), so the next wave is raised without the label's round trip; after
    them, the label goes."""
    instance, client, clock, holding = lingering_reconciler(30.0)
    namespace = await instance._reconcile("ns", labelled_namespace(None))
    assert client.labels == ["true"]
    holding[0] = False
    await clock.advance(10)
    with pytest.raises(RetryAfter) as retry:
        await instance._reconcile("ns", namespace)
    assert retry.value.seconds == 20.0, "30 s from the last plan that held room"
    holding[0] = True
    await clock.advance(5)
    assert await instance._reconcile("ns", namespace) is namespace, "no second label write"
    holding[0] = False
    await clock.advance(29.5)
    with pytest.raises(RetryAfter) as retry:
        await instance._reconcile("ns", namespace)
    assert retry.value.seconds == 0.5, "counted from the last plan that held room"
    await clock.advance(0.5)
    await instance._reconcile("ns", namespace)
    assert client.labels == ["true", None]


async def test_a_linger_of_zero_removes_the_label_with_the_room() -> None:
    instance, client, _clock, holding = lingering_reconciler(0.0)
    namespace = await instance._reconcile("ns", labelled_namespace(None))
    holding[0] = False
    await instance._reconcile("ns", namespace)
    assert client.labels == ["true", None]


async def test_a_label_this_process_did_not_set_lingers_from_when_it_is_first_seen() -> None:
    """After a restart, or a new leader: the label found without room lingers, counted from
    now, and then goes (never kept for good, never a hot loop)."""
    instance, client, clock, holding = lingering_reconciler(30.0)
    holding[0] = False
    found = labelled_namespace("true")
    with pytest.raises(RetryAfter) as retry:
        await instance._reconcile("ns", found)
    assert retry.value.seconds == 30.0
    await clock.advance(30)
    await instance._reconcile("ns", found)
    assert client.labels == [None]


async def test_a_terminating_pod_earlier_than_the_linger_ends_runs_the_namespace_first() -> None:
    plan = SimpleNamespace(requeue_after=2.0)
    with pytest.raises(RetryAfter) as retry:
        requeue({}, plan, 30.0)  # type: ignore[arg-type]
    assert retry.value.seconds == 2.5
    with pytest.raises(RetryAfter) as retry:
        requeue({}, SimpleNamespace(requeue_after=None), 7.0)  # type: ignore[arg-type]
    assert retry.value.seconds == 7.0


async def test_a_failed_removal_after_the_linger_is_tried_again_at_once() -> None:
    """The controller retries the failed run; the label's moment is still known, so the retry
    removes the label instead of lingering 30 s more."""
    instance, client, clock, holding = lingering_reconciler(30.0)
    namespace = await instance._reconcile("ns", labelled_namespace(None))
    holding[0] = False
    await clock.advance(30)
    client.failures = 1
    with pytest.raises(errors.ServerError):
        await instance._reconcile("ns", namespace)
    assert room_held(await instance._reconcile("ns", namespace)) is None
    assert client.labels == ["true", None]


async def test_a_refused_removal_runs_the_namespace_again_when_labels_may_be_written() -> None:
    """Right after an API server restart its authorizer refuses everything for a moment: the
    label's removal is refused, the namespace is run again once the backoff is over, and the
    label goes then (left on, it would keep the fail-closed pods rule on the namespace)."""
    instance, client, clock, holding = lingering_reconciler(0.0)
    namespace = await instance._reconcile("ns", labelled_namespace(None))
    holding[0] = False
    client.refusals = 2
    with pytest.raises(RetryAfter) as first:
        await instance._reconcile("ns", namespace)
    assert first.value.seconds == FIRST_RETRY
    with pytest.raises(RetryAfter) as waiting:
        await instance._reconcile("ns", namespace)  # an event meanwhile: no request
    assert client.patches == 2 and waiting.value.seconds == FIRST_RETRY
    clock.step(FIRST_RETRY)
    with pytest.raises(RetryAfter) as second:
        await instance._reconcile("ns", namespace)
    assert second.value.seconds == 2 * FIRST_RETRY, "the backoff doubles"
    clock.step(2 * FIRST_RETRY)
    assert room_held(await instance._reconcile("ns", namespace)) is None
    assert client.labels == ["true", None]


@pytest.mark.parametrize(
    ("holds_room", "raise_stands", "fail_closed", "expected"),
    [
        (False, False, True, (False, True, False)),
        (True, True, True, (False, True, True)),
        (False, True, True, (False, True, True)),
        (False, False, False, (False, False, False)),
        (True, False, False, (False, False, True)),
    ],
)
def test_the_label_policy_keeps_rancher_direct_labels_and_removes_none_under_a_raise(
    holds_room: bool, raise_stands: bool, fail_closed: bool, expected: tuple[bool, bool, bool]
) -> None:
    """A Rancher quota raised directly (no namespace write while a raise stands): the label is
    never set for a room, never written while room is held or our raise still stands, and kept
    for good unless the operator chose the fail-open rule. Elsewhere it is set per room."""
    policy = label_policy(
        managed=True,
        holds_room=holds_room,
        may_label=False,
        raise_stands=raise_stands,
        fail_closed=fail_closed,
    )
    assert (
        policy["labels_room"],
        policy["labelled_for_good"],
        policy["label_writes_wait"],
    ) == expected
    assert len(policy) == 3
    elsewhere = label_policy(
        managed=True, holds_room=True, may_label=True, raise_stands=True, fail_closed=True
    )
    assert elsewhere == {
        "labels_room": True,
        "labelled_for_good": False,
        "label_writes_wait": False,
    }


def rancher_direct_reconciler(
    *, fail_closed: bool = True, linger: float = 30.0
) -> tuple[QuotaReconciler, LabelClient, FakeClock, dict[str, bool]]:
    """A reconciler of a namespace whose Rancher quota it raises directly: its plans hold room
    while `state["room"]`, its raise stands while `state["raise"]`; label writes on a
    LabelClient."""
    client, clock = LabelClient(), FakeClock()
    state = {"room": False, "raise": False}
    instance = bare_reconciler(clock, client, linger)

    def plan(_key: str, ns: dict[str, Any], **_options: Any) -> Any:
        policy = label_policy(
            managed=True,
            holds_room=state["room"],
            may_label=False,
            raise_stands=state["raise"],
            fail_closed=fail_closed,
        )
        return stub_plan(ns, holds_room=state["room"], **policy)

    async def write(*_: Any) -> None:
        return None

    plans_with(instance, plan)
    instance._write_plan = write  # type: ignore[method-assign, assignment]
    return instance, client, clock, state


async def test_a_rancher_direct_namespace_keeps_the_label_through_rooms_and_past_any_linger() -> (
    None
):
    """Review finding 3 (issue 25, item 6): such a namespace was never labelled, so with the
    webhook down its rooms met the fail-open pods rule. Now it is labelled when first planned,
    and the label stays through the next room and past any linger: one write in all."""
    instance, client, clock, state = rancher_direct_reconciler()
    namespace = await instance._reconcile("ns", labelled_namespace(None))
    assert client.labels == ["true"]
    state.update({"room": True, "raise": True})
    namespace = await instance._reconcile("ns", namespace)
    state.update({"room": False, "raise": False})
    await clock.advance(120)
    assert room_held(await instance._reconcile("ns", namespace)) == "true"
    assert client.labels == ["true"], "never removed, never written again"


async def test_a_rancher_direct_namespace_found_unlabelled_under_a_raise_is_labelled_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """After an upgrade from a version that did not keep the label, a room already held there
    would stay on the fail-open rule for as long as the tenant keeps migrations going. The label
    is written all the same (Rancher's agent may reset the raise once; the next plan raises it
    again), and the log says so."""
    instance, client, _clock, state = rancher_direct_reconciler()
    state.update({"room": True, "raise": True})
    with caplog.at_level("INFO"):
        await instance._reconcile("ns", labelled_namespace(None))
    assert client.labels == ["true"]
    assert "labelled room-held for good while our raise stands" in caplog.text


def real_planner(quota: dict[str, Any], *, fail_closed: bool = True) -> NamespacePlanner:
    """A planner of one namespace's `quota` with no migration, on the direct Rancher path
    (Rancher has refused nothing)."""
    return NamespacePlanner(
        NamespaceSnapshot(
            {"metadata": {"name": "ns"}}, quota, [], {}, [], NOW, DEFAULT_LAUNCHER_SETTINGS
        ),
        through=lambda _ns, _plan: False,
        fail_closed=fail_closed,
    )


def test_the_plan_of_a_rancher_direct_namespace_keeps_the_label_and_knows_a_standing_raise() -> (
    None
):
    """The planner on the real inputs: a Rancher namespace whose quota we raise directly is never
    labelled for a room (a write per room would have Rancher's agent reset each raise), is kept
    labelled for good, and knows when our raise's records still stand on the quota; told to
    fail open, it is neither."""
    namespace = rancher_namespace("ns", {"limitsCpu": "3000m"})
    raised = managed_quota("ns", {"limits.cpu": "5"}, {"harvesterhci.io/migrating-vm1": "{}"})
    planned = real_planner(raised).plan(namespace)
    assert planned is not None and planned.managed
    assert (planned.labels_room, planned.labelled_for_good, planned.label_writes_wait) == (
        False,
        True,
        True,
    )
    at_base = managed_quota("ns", {"limits.cpu": "3"})
    planned = real_planner(at_base).plan(namespace)
    assert planned is not None and not planned.label_writes_wait
    told = real_planner(raised, fail_closed=False).plan(namespace)
    assert told is not None and not told.labelled_for_good and told.label_writes_wait


def test_a_handed_over_namespace_labelled_for_good_gets_no_raise() -> None:
    """A Rancher namespace raised directly (fail-closed: labelled for good) that MTQ mode takes
    over while vm1 migrates and our raise for it stands: the plan (the one made again once the
    label is written too) gives the room back to the base and raises nothing for vm1; not
    handed over, the same inputs raise."""
    vm = vmi("vm1")
    namespace = rancher_namespace("ns", V170_LIMIT)
    namespace["metadata"]["labels"] = {LABEL_ROOM_HELD: "true"}
    raised = managed_quota(
        "ns",
        {"limits.cpu": "5015m", "limits.memory": "10040344313"},
        {migrating_vm_annotation_key("vm1"): ROOM},
    )
    source = NamespaceSnapshot(
        namespace,
        raised,
        [migration("m", vm)],
        {"vm1": vm},
        [launcher_pod(vm, "src")],
        NOW,
        DEFAULT_LAUNCHER_SETTINGS,
    )

    def planner(handed_over: bool) -> NamespacePlanner:
        return NamespacePlanner(
            source,
            through=lambda _ns, _plan: False,
            defer_to=lambda _key: handed_over,
            fail_closed=True,
        )

    planned = planner(True).plan(namespace)
    assert planned is not None and planned.labelled_for_good
    assert planned.hard == V170_HARD and not planned.holds_room
    kept = planner(False).plan(namespace)
    assert kept is not None and kept.holds_room and kept.hard != V170_HARD


async def test_a_refused_label_of_a_rancher_direct_namespace_is_tried_again_after_the_backoff() -> (
    None
):
    instance, client, clock, _state = rancher_direct_reconciler()
    client.refusals = 1
    with pytest.raises(RetryAfter) as retry:
        await instance._reconcile("ns", labelled_namespace(None))
    assert retry.value.seconds == FIRST_RETRY
    clock.step(FIRST_RETRY)
    assert room_held(await instance._reconcile("ns", labelled_namespace(None))) == "true"
    assert client.labels == ["true"]


async def test_told_to_fail_open_a_rancher_direct_label_goes_only_once_no_raise_stands() -> None:
    """`--rancher-direct-fail-open` after the label was kept for good: the label goes after
    its linger, but never while a raise of ours stands (the write would reset it)."""
    instance, client, _clock, state = rancher_direct_reconciler(fail_closed=False, linger=0.0)
    state.update({"room": True, "raise": True})
    namespace = await instance._reconcile("ns", labelled_namespace("true"))
    state.update({"room": False})
    namespace = await instance._reconcile("ns", namespace)
    assert client.labels == []
    state.update({"raise": False})
    await instance._reconcile("ns", namespace)
    assert client.labels == [None]


def test_only_rancher_own_refusal_sends_only_that_namespace_through_its_annotation() -> None:
    """Any admission denial of a write to a Rancher-based quota (a Kyverno policy, say) sent
    every namespace through Rancher's annotation for the process's life. Now only Rancher's own
    refusal (400 from rancher-webhook, 403 from a policy twin) counts, for its namespace only."""
    from harvester_quota.util.resourcequota.base import Base

    instance = RancherPath(
        QuotaWriter(None, FakeClock()),  # type: ignore[arg-type]
        PendingWrites(Store()),
        metrics=QuotaMetrics(CollectorRegistry()),
        recorder=RecordingRecorder(),  # type: ignore[arg-type]
        project_room=None,  # type: ignore[arg-type]
        reports=None,  # type: ignore[arg-type]
        writes=Counter(),
    )
    plan = SimpleNamespace(base=Base(hard={}, source="rancher"))
    rancher = errors.BadRequest(
        'admission webhook "rancher.cattle.io.resourcequotas" denied the request: users are '
        "forbidden from changing resources managed by Rancher",
        status=400,
    )
    other = errors.Forbidden(
        'admission webhook "validate.kyverno.svc" denied the request: no quota edits', status=403
    )
    assert instance.refused(rancher, plan)  # type: ignore[arg-type]
    assert not instance.refused(other, plan)  # type: ignore[arg-type]
    tenant_a, tenant_b = rancher_namespace("a", {"limitsCpu": "3"}), rancher_namespace("b", {})
    instance.protected.add("a")
    assert instance.through(tenant_a, plan)  # type: ignore[arg-type]
    assert not instance.through(tenant_b, plan)  # type: ignore[arg-type]


async def test_a_namespace_handed_over_to_mtq_mode_loses_its_room_held_label() -> None:
    """Review of issue 25's label kept for good: a namespace that gets a VMMRQ is MTQ mode's
    once our raise is given back; a room-held label left on it (kept for good, or lingering)
    would keep its pods on the fail-closed rule for good, so it goes then."""
    client, clock = LabelClient(), FakeClock()
    instance = bare_reconciler(clock, client)
    instance.planner.defer_to = lambda _key: True
    assert room_held(await instance._reconcile("ns", labelled_namespace("true"))) is None
    assert client.labels == [None]


async def test_a_quota_gone_while_the_label_was_written_lets_the_labelled_namespace_go() -> None:
    """The plan after the label's write finds no managed quota (deleted in that round trip):
    the namespace is no longer ours, and the label just written is removed, not left on."""
    instance, client, _clock, _state = rancher_direct_reconciler()
    first_plan = instance.planner.plan
    calls = [0]

    def plan(_key: str, ns: dict[str, Any]) -> Any:
        calls[0] += 1
        return first_plan(ns) if calls[0] == 1 else None

    plans_with(instance, plan)
    assert room_held(await instance._reconcile("ns", labelled_namespace(None))) is None
    assert client.labels == ["true", None]


@pytest.mark.parametrize(
    ("spec", "status"),
    [("5", "5"), ("3", "5")],
    ids=["annotation-lowered-quota-not-yet", "spec-lowered-status-not-yet"],
)
async def test_the_room_held_label_stays_until_spec_and_status_hard_are_down(
    spec: str, status: str
) -> None:
    """Issue 38, item 4: a release through Rancher's annotation removed the label in the pass
    that lowered the annotation, while spec.hard and status.hard stayed raised until Rancher's
    agent copied it: the namespace reopened to pods the label's rule refuses, with the raise
    still there for them to take. The label now stays until both are down (a direct release's
    status.hard too, a moment behind its spec.hard); the quota's events run it again."""
    quota = {
        "metadata": {"name": "default-q", "namespace": "ns"},
        "spec": {"hard": {"limits.cpu": spec}},
        "status": {"hard": {"limits.cpu": status}},
    }
    instance, client, _clock, holding = lingering_reconciler(0.0, quota, {"limits.cpu": "3"})
    namespace = await instance._reconcile("ns", labelled_namespace(None))
    holding[0] = False
    namespace = await instance._reconcile("ns", namespace)
    assert client.labels == ["true"], "no removal while the raise stands in the quota"
    quota["spec"]["hard"]["limits.cpu"] = "3"
    quota["status"]["hard"]["limits.cpu"] = "3"
    await instance._reconcile("ns", namespace)
    assert client.labels == ["true", None]
