"""The target-pod retry (controller/migration/createfailures.py, targetretry.py), with fakes.

The decision alone (each condition, each bound, the clock), then the controller on a
Management whose caches the test fills and whose patches and Events are recorded, including what
a tenant who may create Events tries: a forged failure on a VMI uid that does not exist, on
another namespace's VMI, a flood on its own waiting migration.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from harvester_quota.apis.kubevirt import LABEL_MIGRATION_JOB
from harvester_quota.config.management import Management, Options
from harvester_quota.config.metrics import QuotaMetrics
from harvester_quota.controller.migration import targetretry
from harvester_quota.controller.migration.createfailures import (
    ANNOTATION_RETRIES,
    FAILURE_INDEX,
    FAILURES_READ,
    MAX_RETRIES,
    MESSAGE_LIMIT,
    QUIET,
    CreateFailure,
    Exhausted,
    Nothing,
    Retry,
    RetryState,
    Wait,
    decide,
    failure_index,
    failure_of,
    newest,
    strip_event,
)
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.clock import FakeClock
from harvester_quota.generic.config import ClientConfig
from harvester_quota.generic.resource import Object
from prometheus_client import CollectorRegistry

CONFLICT = (
    'Error creating pod: Operation cannot be fulfilled on resourcequotas "default-quota": '
    "the object has been modified; please apply your changes to the latest version and try again"
)
REFUSED = 'Error creating pod: pods "virt-launcher-vm1-x" is forbidden: exceeded quota: q'
CREATED = "2026-01-01T00:00:00Z"
LATER = "2026-01-01T00:00:05Z"


def migration(
    name: str = "mig", phase: str = "Pending", ns: str = "ns", **annotations: str
) -> Object:
    return {
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "creationTimestamp": CREATED,
            "annotations": dict(annotations),
        },
        "spec": {"vmiName": "vm1"},
        "status": {"phase": phase},
    }


def vmi(ns: str = "ns", uid: str = "vmi-uid") -> Object:
    return {"metadata": {"name": "vm1", "namespace": ns, "uid": uid, "resourceVersion": "1"}}


def event(
    name: str = "e1",
    *,
    message: str = CONFLICT,
    count: int = 1,
    at: str = LATER,
    ns: str = "ns",
    involved_ns: str = "ns",
    involved_uid: str = "vmi-uid",
    kind: str = "VirtualMachineInstance",
) -> Object:
    return {
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "resourceVersion": "1"},
        "involvedObject": {
            "kind": kind,
            "namespace": involved_ns,
            "name": "vm1",
            "uid": involved_uid,
        },
        "reason": "FailedCreate",
        "message": message,
        "count": count,
        "lastTimestamp": at,
    }


def failure(**kwargs: Any) -> CreateFailure:
    found = failure_of(event(**kwargs))
    assert found is not None
    return found


def decided(
    failures: list[CreateFailure],
    *,
    subject: Object | None = None,
    has_target: bool = False,
    state: RetryState | None = None,
    seen_at: float = 0.0,
    now: float = 10.0,
) -> Any:
    state = state or RetryState("uid-mig")
    state.observe(failures, seen_at)
    return decide(subject or migration(), failures, has_target=has_target, state=state, now=now)


# The decision --------------------------------------------------------------------------------


def test_a_conflict_left_alone_for_the_quiet_time_is_retried_as_the_first_retry() -> None:
    found = failure()
    assert decided([found]) == Retry(found, 1)


def test_a_failure_seen_less_than_the_quiet_time_ago_waits_for_the_rest_of_it() -> None:
    assert decided([failure()], seen_at=10.0, now=10.25) == Wait(QUIET - 0.25)


def test_a_newer_failure_restarts_the_quiet_time() -> None:
    state = RetryState("uid-mig")
    state.observe([failure(count=1)], 0.0)
    assert decided([failure(count=1), failure(count=2)], state=state, seen_at=9.5, now=10.0) == (
        Wait(QUIET - 0.5)
    )


def test_a_quota_refusal_is_left_to_virt_controllers_own_requeue() -> None:
    assert isinstance(decided([failure(message=REFUSED)]), Nothing)


@pytest.mark.parametrize("phase", ["", "Scheduling", "Running", "Succeeded", "Failed"])
def test_a_migration_not_pending_is_not_retried(phase: str) -> None:
    assert isinstance(decided([failure()], subject=migration(phase=phase)), Nothing)


def test_a_migration_whose_target_pod_exists_is_not_retried() -> None:
    assert isinstance(decided([failure()], has_target=True), Nothing)


def test_a_failure_from_before_the_migration_was_created_is_not_its_own() -> None:
    assert isinstance(decided([failure(at="2025-12-31T23:59:00Z")]), Nothing)
    assert isinstance(decided([failure(at="2025-12-31T23:59:55Z")]), Retry), "within the skew"


def test_an_answered_failure_is_not_retried_again_but_its_repetition_is() -> None:
    state = RetryState("uid-mig", retries=1)
    state.answer([failure(count=1)])
    assert isinstance(decided([failure(count=1)], state=state), Nothing)
    assert decided([failure(count=2)], state=state) == Retry(failure(count=2), 2)


def test_after_the_last_retry_a_failure_is_told_exhausted_not_retried() -> None:
    state = RetryState("uid-mig", retries=MAX_RETRIES)
    assert decided([failure(count=4)], state=state) == Exhausted(failure(count=4))


def test_a_tenant_lowering_the_annotation_does_not_give_more_retries() -> None:
    state = RetryState("uid-mig", retries=MAX_RETRIES)
    lowered = migration(**{ANNOTATION_RETRIES: "0"})
    assert isinstance(decided([failure()], subject=lowered, state=state), Exhausted)


def test_the_annotation_carries_the_count_to_a_new_leader() -> None:
    written = migration(**{ANNOTATION_RETRIES: "2"})
    assert decided([failure()], subject=written) == Retry(failure(), 3)
    spent = migration(**{ANNOTATION_RETRIES: str(MAX_RETRIES)})
    assert isinstance(decided([failure()], subject=spent), Exhausted)


# Reading Events --------------------------------------------------------------------------------


def test_an_event_in_another_namespace_than_the_vmi_it_names_is_nobodys_failure() -> None:
    assert failure_index(event(ns="tenant-a", involved_ns="tenant-b")) == []
    assert failure_index(event()) == ["ns/vmi-uid"]


def test_an_event_about_another_kind_or_without_a_uid_is_not_indexed() -> None:
    assert failure_index(event(kind="Pod")) == []
    assert failure_index(event(involved_uid="")) == []


def test_the_cache_keeps_a_forged_megabyte_message_cut_short() -> None:
    stripped = strip_event(event(message="x" * 1_000_000) | {"source": {"host": "y" * 1000}})
    assert len(stripped["message"]) == MESSAGE_LIMIT
    assert "source" not in stripped


def test_an_event_without_a_time_is_no_failure() -> None:
    assert failure_of(event(at="")) is None
    assert failure_of(event(at="yesterday")) is None


# The controller ------------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def event(self, obj: Object, kind: str, reason: str, message: str) -> None:
        self.events.append((obj["metadata"]["name"], kind, reason))


class Harness:
    """A TargetPodRetry on a Management whose client only patches (recorded)."""

    def __init__(self) -> None:
        client = ApiClient(ClientConfig(host="https://127.0.0.1:1", ssl_context=False))
        self.clock = FakeClock()
        self.registry = CollectorRegistry()
        self.management = Management(
            client=client, options=Options(), clock=self.clock, registry=self.registry
        )
        self.recorder = Recorder()
        self.management.recorder = self.recorder  # type: ignore[assignment]
        self.patches: list[tuple[str, str, Any]] = []
        self.refuse: Exception | None = None
        client.patch = self._patch  # type: ignore[method-assign]
        self.retry = targetretry.TargetPodRetry(self.management, QuotaMetrics(self.registry))

    async def _patch(self, resource: Any, name: str, body: Any, namespace: str) -> Object:
        if self.refuse is not None:
            raise self.refuse
        self.patches.append((namespace, name, copy.deepcopy(body)))
        stored = self.retry.migrations.informer.store.get(f"{namespace}/{name}")
        assert stored is not None
        stored["metadata"]["annotations"].update(body["metadata"]["annotations"])
        self.retry.migrations.informer.store.upsert(stored)
        return stored

    def add(self, *objects: Object) -> None:
        for obj in objects:
            kind = (obj.get("reason") and "event") or ("spec" in obj and "migration") or "vmi"
            store = {
                "event": self.retry.events.store,
                "migration": self.retry.migrations.informer.store,
                "vmi": self.retry.vmis.store,
            }[kind]
            store.upsert(strip_event(obj) if kind == "event" else obj)

    async def run(self, key: str = "ns/mig") -> None:
        await self.retry.on_changed(key, self.retry.migrations.informer.store.get(key))

    def counted(self, outcome: str) -> float:
        value = self.registry.get_sample_value(
            "harvester_quota_target_pod_retries_total", {"outcome": outcome}
        )
        return value or 0.0


async def test_a_failed_create_is_answered_by_one_patch_an_event_and_a_count() -> None:
    harness = Harness()
    harness.add(migration(), vmi(), event())
    await harness.run()
    assert harness.patches == [], "virt-controller may still retry by itself"
    harness.clock.step(QUIET)
    await harness.run()
    (patch,) = harness.patches
    assert patch[2]["metadata"] == {"uid": "uid-mig", "annotations": {ANNOTATION_RETRIES: "1"}}
    assert harness.recorder.events == [("mig", "Normal", targetretry.REASON_RETRIED)]
    assert harness.counted("retried") == 1
    await harness.run()
    assert len(harness.patches) == 1, "the same failure is answered once"


async def test_a_flood_of_forged_failures_costs_at_most_the_bound_in_patches() -> None:
    harness = Harness()
    harness.add(migration(), vmi())
    for index in range(50):
        harness.add(event(f"forged-{index}"))
        await harness.run()
        harness.clock.step(QUIET)
        await harness.run()
    assert [p[2]["metadata"]["annotations"][ANNOTATION_RETRIES] for p in harness.patches] == [
        str(n) for n in range(1, MAX_RETRIES + 1)
    ]
    assert harness.counted("exhausted") == 1, "told once"
    assert [e[2] for e in harness.recorder.events].count(targetretry.REASON_EXHAUSTED) == 1


async def test_a_forged_failure_naming_a_uid_no_vmi_has_is_ignored() -> None:
    harness = Harness()
    harness.add(migration(), vmi(uid="real"), event(involved_uid="forged"))
    harness.clock.step(QUIET)
    await harness.run()
    harness.clock.step(QUIET)
    await harness.run()
    assert harness.patches == []
    assert harness.retry.states == {}


async def test_a_failure_forged_in_another_namespace_patches_nothing_there() -> None:
    harness = Harness()
    victim = migration(ns="victim")
    harness.add(victim, vmi(ns="victim"), event(ns="attacker", involved_ns="victim"))
    harness.clock.step(QUIET)
    await harness.run("victim/mig")
    harness.clock.step(QUIET)
    await harness.run("victim/mig")
    assert harness.patches == []
    assert harness.retry.migrations_of(event(ns="attacker", involved_ns="victim")) == []


async def test_a_migration_with_its_target_pod_is_not_patched() -> None:
    harness = Harness()
    harness.add(migration(), vmi(), event())
    pod = {"metadata": {"name": "t", "namespace": "ns", "labels": {LABEL_MIGRATION_JOB: "uid-mig"}}}
    harness.retry.pods.store.upsert(pod)
    await harness.run()
    harness.clock.step(QUIET)
    await harness.run()
    assert harness.patches == []


async def test_without_patch_rights_the_gate_closes_and_nothing_is_tried_until_it_opens() -> None:
    harness = Harness()
    harness.refuse = errors.Forbidden("forbidden")
    harness.add(migration(), vmi(), event())
    await harness.run()
    harness.clock.step(QUIET)
    for _ in range(5):
        await harness.run()
    assert harness.counted("refused") == 1, "one refused request, then the gate holds"
    harness.refuse = None
    harness.clock.step(harness.retry.permission.retry_in())
    await harness.run()
    assert len(harness.patches) == 1


async def test_a_finished_or_deleted_migration_forgets_its_state() -> None:
    harness = Harness()
    harness.add(migration(), vmi(), event())
    await harness.run()
    assert "ns/mig" in harness.retry.states
    await harness.retry.on_changed("ns/mig", None)
    assert harness.retry.states == {}


def test_the_events_store_is_indexed_by_the_vmi_uid() -> None:
    harness = Harness()
    harness.add(event())
    assert harness.retry.events.store.by_index(FAILURE_INDEX, "ns/vmi-uid")


def test_an_event_queues_the_unfinished_migrations_of_the_vmi_it_names() -> None:
    harness = Harness()
    harness.add(migration(), migration("done", phase="Succeeded"), vmi())
    assert harness.retry.migrations_of(strip_event(event())) == ["ns/mig"]


def test_the_state_forgets_failures_no_longer_reported() -> None:
    state = RetryState("uid-mig")
    old, new = failure(count=1), failure(count=2)
    state.observe([old], 0.0)
    state.answer([old])
    state.forget_gone([new])
    state.observe([new], 1.0)
    assert state.answered == set()
    assert state.seen == {new.ident: 1.0}


async def test_an_event_in_the_attackers_namespace_naming_the_victims_vmi_uid_retries_nothing() -> (
    None
):
    """Second review, M2: the Event's namespace and involvedObject agree (the API server's own
    check), but the uid is another namespace's VMI's. Keyed by namespace and uid, it is found
    only under the attacker's namespace: the victim's migration is never patched."""
    harness = Harness()
    harness.add(migration(ns="victim"), vmi(ns="victim", uid="victim-vmi-uid"))
    for index in range(MAX_RETRIES + 1):
        forged = event(f"f{index}", ns="attacker", involved_ns="attacker")
        forged["involvedObject"]["uid"] = "victim-vmi-uid"
        harness.add(forged)
        await harness.run("victim/mig")
        harness.clock.step(QUIET)
        await harness.run("victim/mig")
    assert harness.patches == [] and harness.recorder.events == []


def test_a_decision_reads_the_newest_failures_only_however_many_are_forged() -> None:
    """Second review, M3: a flood of Events on one VMI costs a decision one scan, and the
    decision reads FAILURES_READ of them, the newest."""
    stamps = [f"2026-01-01T0{i // 3600}:{i // 60 % 60:02d}:{i % 60:02d}Z" for i in range(500)]
    failures = [failure(name=f"e{i}", at=stamp) for i, stamp in enumerate(stamps)]
    kept = newest(failures)
    assert len(kept) == FAILURES_READ
    assert kept[0].at == max(f.at for f in failures)


def test_a_forged_message_cannot_forge_log_lines() -> None:
    stripped = strip_event(event(message="Error creating pod: x\n2026-01-01 INFO forged line"))
    assert "\n" not in stripped["message"]


def test_a_failure_in_a_namespace_being_deleted_is_not_retried_nor_told() -> None:
    """Run I of stop 48: a test's namespace being deleted left a FailedCreate ("unable to create
    new content in namespace ... because it is being terminated"); a controller started later
    told it exhausted, in a Warning the API server refused there too."""
    gone = (
        'Error creating pod: pods "virt-launcher-vm2-" is forbidden: unable to create new content '
        "in namespace ns because it is being terminated"
    )
    assert isinstance(decided([failure(message=gone)]), Nothing)
    spent = migration(**{ANNOTATION_RETRIES: str(MAX_RETRIES)})
    assert isinstance(decided([failure(message=gone)], subject=spent), Nothing)


async def test_a_migration_in_a_namespace_being_deleted_is_left_alone() -> None:
    """Run I of stop 48: a controller started after a namespace's deletion began told that
    namespace's migration exhausted, in an Event the API server refused there."""
    harness = Harness()
    harness.add(migration(), vmi(), event())
    going = {"metadata": {"name": "ns", "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    harness.retry.namespaces.upsert(going)
    for _ in range(MAX_RETRIES + 2):
        await harness.run()
        harness.clock.step(QUIET)
    assert harness.patches == [] and harness.recorder.events == []
    assert harness.retry.states == {}
