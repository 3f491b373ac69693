"""Leader election on a Lease and the event recorder, against an in-memory API and a fake clock."""

from __future__ import annotations

import asyncio
import random
from typing import cast

import pytest
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.events import AGGREGATE_PREFIX, WARNING, EventRecorder
from harvester_quota.generic.leader import LeaderElectionConfig, LeaderElector
from harvester_quota.generic.resource import EVENTS, LEASES
from harvester_quota.testbench.clock import FakeClock, settle

from tests.unit.fakes import FakeApi


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def elector(
    api: FakeApi, clock: FakeClock, identity: str, leading: list[str], *, release: bool = True
) -> LeaderElector:
    async def lead() -> None:
        leading.append(identity)
        await asyncio.Future()

    return LeaderElector(
        cast(ApiClient, api),
        LeaderElectionConfig("kube-system", "harvester-quota", identity, release_on_cancel=release),
        on_started_leading=lead,
        clock=clock,
        rng=random.Random(5),
    )


def holder(api: FakeApi) -> str:
    return str(
        api.objects[(LEASES.name, "kube-system", "harvester-quota")]["spec"]["holderIdentity"]
    )


def test_lease_timings_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="lease_duration > renew_deadline"):
        LeaderElectionConfig("ns", "l", "me", lease_duration=10, renew_deadline=10)


async def test_one_leader_and_a_prompt_handover_on_release(clock: FakeClock) -> None:
    api, leading = FakeApi(), []
    first = asyncio.ensure_future(elector(api, clock, "a", leading).run())
    await settle()
    second = asyncio.ensure_future(elector(api, clock, "b", leading).run())
    await clock.advance(30)
    assert leading == ["a"], "the candidate waits while the leader renews"
    assert holder(api) == "a"
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    await settle()
    assert holder(api) == ""
    await clock.advance(3)
    assert leading == ["a", "b"], "a released lease is taken at the next retry"
    second.cancel()
    await asyncio.gather(second, return_exceptions=True)


async def test_a_release_after_a_renew_written_but_not_seen_reads_the_lease_again(
    clock: FakeClock,
) -> None:
    """Seen under `helm uninstall` on a loaded machine: a renew cancelled at its deadline had
    been written, the release from the lease last observed met a Conflict, and the successor
    waited out the lease. The release reads the lease once more and gives it up."""
    api, leading = FakeApi(), []
    first = asyncio.ensure_future(elector(api, clock, "a", leading).run())
    await settle()
    key = (LEASES.name, "kube-system", "harvester-quota")
    api._bump(api.objects[key])  # the renew the leader never saw answered
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    await settle()
    assert holder(api) == "", "released despite the Conflict"


async def test_a_release_never_touches_a_successors_lease(clock: FakeClock) -> None:
    api, leading = FakeApi(), []
    first = asyncio.ensure_future(elector(api, clock, "a", leading).run())
    await settle()
    lease = api.objects[(LEASES.name, "kube-system", "harvester-quota")]
    lease["spec"]["holderIdentity"] = "b"  # taken over meanwhile
    api._bump(lease)
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    await settle()
    assert holder(api) == "b"


async def test_a_dead_leader_is_replaced_after_the_lease_duration(clock: FakeClock) -> None:
    api, leading = FakeApi(), []
    first = asyncio.ensure_future(elector(api, clock, "a", leading, release=False).run())
    await settle()
    second = asyncio.ensure_future(elector(api, clock, "b", leading).run())
    await clock.advance(4)
    first.cancel()  # like SIGKILL: no release
    await asyncio.gather(first, return_exceptions=True)
    assert holder(api) == "a"
    await clock.advance(10)
    assert leading == ["a"], "15 s must pass since b last saw the record change"
    await clock.advance(8)
    assert leading == ["a", "b"]
    lease = api.objects[(LEASES.name, "kube-system", "harvester-quota")]
    assert lease["spec"]["leaseTransitions"] == 1
    second.cancel()
    await asyncio.gather(second, return_exceptions=True)


async def test_a_leader_that_cannot_renew_stops_leading(clock: FakeClock) -> None:
    api, leading = FakeApi(), []
    stopped: list[bool] = []
    candidate = elector(api, clock, "a", leading)
    candidate._on_stopped = lambda: stopped.append(True)
    task = asyncio.ensure_future(candidate.run())
    await clock.advance(1)
    assert leading == ["a"]
    api.fail_next = [errors.ServerError("etcd unavailable")] * 100
    await clock.advance(12)
    assert stopped == [True]
    assert task.done()


async def test_identical_events_are_counted_on_one_object(clock: FakeClock) -> None:
    api = FakeApi()
    recorder = EventRecorder(cast(ApiClient, api), "harvester-quota", clock=clock)
    vmim = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": "m1", "namespace": "ns", "uid": "u1"},
    }
    for _ in range(3):
        await recorder.record(vmim, WARNING, "MigrationBlocked", "exceeded quota: default")
        clock.step(1)
    events = [o for k, o in api.objects.items() if k[0] == EVENTS.name]
    assert len(events) == 1
    assert events[0]["count"] == 3
    assert events[0]["involvedObject"]["name"] == "m1"
    assert events[0]["source"]["component"] == "harvester-quota"


async def test_many_similar_events_are_combined(clock: FakeClock) -> None:
    api = FakeApi()
    recorder = EventRecorder(cast(ApiClient, api), "harvester-quota", clock=clock)
    obj = {"kind": "ResourceQuota", "metadata": {"name": "q", "namespace": "ns", "uid": "u"}}
    for index in range(12):
        await recorder.record(obj, WARNING, "InvalidAnnotation", f"bad value {index}")
    events = [o for k, o in api.objects.items() if k[0] == EVENTS.name]
    assert len(events) == 10, "nine single events, then one for all similar ones"
    combined = [e for e in events if e["message"].startswith(AGGREGATE_PREFIX)]
    assert len(combined) == 1
    assert combined[0]["count"] == 3
    assert combined[0]["message"] == AGGREGATE_PREFIX + "bad value 11", "it shows the latest"


async def test_event_spam_is_dropped_and_recovers_with_time(clock: FakeClock) -> None:
    api = FakeApi()
    recorder = EventRecorder(cast(ApiClient, api), "harvester-quota", clock=clock)
    obj = {"kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "u"}}
    written = [await recorder.record(obj, WARNING, "Flood", "same") for _ in range(30)]
    assert sum(1 for w in written if w is not None) == 25
    assert recorder.dropped == 5
    clock.step(300)
    assert await recorder.record(obj, WARNING, "Flood", "same") is not None


async def test_queued_events_are_written_in_the_background(clock: FakeClock) -> None:
    api = FakeApi()
    recorder = EventRecorder(cast(ApiClient, api), "harvester-quota", clock=clock)
    recorder.event(
        {"kind": "Namespace", "metadata": {"name": "n1", "uid": "u"}}, "Normal", "Seen", "hello"
    )
    await recorder.close()
    events = [o for k, o in api.objects.items() if k[0] == EVENTS.name]
    assert [e["metadata"]["namespace"] for e in events] == ["default"], "cluster-scoped → default"


class FreezingApi(FakeApi):
    """An API server that stops answering (SIGSTOP) while `frozen`: calls hang, never fail."""

    frozen = False

    async def get(self, resource: object, name: str, namespace: str | None = None) -> dict:  # type: ignore[override]
        while self.frozen:
            await asyncio.sleep(0)  # hangs without failing, as a stopped process does
            await asyncio.Future()
        return await super().get(resource, name, namespace)


async def test_a_hanging_renewal_stops_the_leader_before_the_lease_can_expire(
    clock: FakeClock,
) -> None:
    """Each renewal attempt is cut at the renew deadline (10 s) so the leader stops acting
    before another replica may take the Lease (15 s after it last saw a renewal)."""
    api, leading = FreezingApi(), []
    stopped_at: list[float] = []
    candidate = elector(api, clock, "a", leading)
    candidate._on_stopped = lambda: stopped_at.append(clock.monotonic())
    task = asyncio.ensure_future(candidate.run())
    await clock.advance(1)
    assert leading == ["a"]
    last_renewal = clock.monotonic()
    api.frozen = True
    await clock.advance(14)
    assert stopped_at, "stopped while the request still hangs"
    assert stopped_at[0] - last_renewal < candidate.config.lease_duration
    assert task.done()


class TerminatingNamespaceApi(FakeApi):
    """An API server whose namespace `going` is being deleted: creates there are refused with
    the NamespaceTerminating cause, as the NamespaceLifecycle admission plugin answers."""

    async def create(self, resource: object, body: dict, namespace: str | None = None) -> dict:  # type: ignore[override]
        if (namespace or body["metadata"].get("namespace")) == "going":
            raise errors.Forbidden(
                f"events is forbidden: unable to create new content in namespace {namespace} "
                "because it is being terminated",
                status=403,
                details={"causes": [{"reason": errors.NAMESPACE_TERMINATING}]},
            )
        if (namespace or body["metadata"].get("namespace")) == "locked":
            raise errors.Forbidden("events is forbidden: by a policy", status=403)
        return await super().create(resource, body, namespace)  # type: ignore[arg-type]


async def test_an_event_refused_in_a_namespace_being_deleted_is_dropped_quietly_any_other_refusal_warns(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    api = TerminatingNamespaceApi()
    recorder = EventRecorder(cast(ApiClient, api), "harvester-quota", clock=clock)
    going = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "q", "namespace": "going", "uid": "u1"},
    }
    with caplog.at_level("DEBUG", logger="harvester_quota.generic.events"):
        assert await recorder.record(going, WARNING, "ForeignQuotaWrite", "x") is None
        locked = {**going, "metadata": {**going["metadata"], "namespace": "locked"}}
        assert await recorder.record(locked, WARNING, "ForeignQuotaWrite", "x") is None
    levels = [r.levelname for r in caplog.records if "failed" in r.getMessage()]
    assert levels == ["DEBUG", "WARNING"]
