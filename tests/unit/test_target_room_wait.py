"""A migration target pod's admission waits for the controller's raise, and only for that
(pkg/webhook/resources/pod/targets.py), on a fake clock."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.config import ClientConfig
from harvester_quota.generic.resource import Object
from harvester_quota.testbench.clock import FakeClock, settle
from harvester_quota.util.annotations import (
    ANNOTATION_ROOM_MIGRATIONS,
    ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING,
    LABEL_DEFAULT_RESOURCE_QUOTA,
    migrating_vm_annotation_key,
)
from harvester_quota.util.quantity import Quantity
from harvester_quota.util.quotascope import applies_to
from harvester_quota.util.resourcequota.base import shortfalls
from harvester_quota.util.resources import parse_resource_list
from harvester_quota.webhook.caches import WebhookCaches
from harvester_quota.webhook.resources.common import Identities
from harvester_quota.webhook.resources.pod.targets import (
    LISTER_GRACE,
    LIVE_READ_TIMEOUT,
    GaveUp,
    LiveQuotas,
    QuotaChanges,
    TargetAdmission,
    admit_target,
    quota_copy,
)
from harvester_quota.webhook.server import WebhookServer
from harvester_quota.webhook.serving import RoomSharing
from prometheus_client import CollectorRegistry

from tests.unit.test_webhook import (
    FakeLookups,
    plain_pod,
    receive_target,
    request,
    review,
    room_held,
)

KUBEVIRT = "system:serviceaccount:kubevirt:kubevirt-controller"
KEY = "ns/default-quota"
"""The store key of the namespace's managed quota (`quota`)."""
BASE = {"limits.cpu": "3", "limits.memory": "5000Mi"}
RAISED = {"limits.cpu": "5015m", "limits.memory": "10039344313"}
USED = {"limits.cpu": "2015m", "limits.memory": "4797464313"}


def target(vm: str = "vm1") -> Object:
    return plain_pod(
        "virt-launcher-vm1-target",
        "2015m",
        "4797464313",
        **{"kubevirt.io/migrationJobUID": "m1", "vm.kubevirt.io/name": vm},
    )


def quota(
    spec: dict[str, str], status: dict[str, str], *, room: bool = False, version: str = "1"
) -> Object:
    annotations = {migrating_vm_annotation_key("vm1"): json.dumps(USED)} if room else {}
    return {
        "metadata": {
            "name": "default-quota",
            "namespace": "ns",
            "annotations": annotations,
            "resourceVersion": version,
        },
        "spec": {"hard": spec},
        "status": {"hard": status, "used": USED},
    }


async def admitting(
    lookups: FakeLookups,
    clock: FakeClock,
    changes: QuotaChanges,
    wait: float = 8.0,
    gave_up: GaveUp | None = None,
    *,
    live: LiveQuotas | None = None,
) -> asyncio.Task[TargetAdmission]:
    task = asyncio.ensure_future(
        admit_target(
            request("Pod", target(), operation="CREATE", user=KUBEVIRT),
            lookups,
            changes,
            clock,
            wait=wait,
            gave_up=gave_up,
            live=live,
        )
    )
    await settle()
    return task


class TickingClock(FakeClock):
    """A clock that, like a real one, reads a little later each time it is read."""

    def monotonic(self) -> float:
        self.step(1e-6)
        return super().monotonic()


async def test_a_target_pod_that_fits_on_a_real_clock_is_not_held_for_the_grace() -> None:
    """Two readings of a real clock differ: a pod that fitted on the first look was taken for
    one that had waited, and held LISTER_GRACE (every target pod of a scale run's burst)."""
    clock = TickingClock()
    lookups = FakeLookups(quotas={"ns": quota(RAISED, RAISED, room=True)})
    task = await admitting(lookups, clock, QuotaChanges(clock))
    assert task.done(), "held for the grace although it fitted at once"
    assert task.result().outcome == "fits"


async def test_a_target_pod_that_fits_is_let_through_at_once() -> None:
    clock = FakeClock()
    lookups = FakeLookups(quotas={"ns": quota(RAISED, RAISED, room=True)})
    task = await admitting(lookups, clock, QuotaChanges(clock))
    assert task.done() and task.result().outcome == "fits"


def with_used(copy: Object, **used: str) -> Object:
    changed = json.loads(json.dumps(copy))
    changed["status"]["used"] = {**USED, **used}
    return changed


async def test_a_target_pod_is_held_only_while_quota_admission_may_read_a_copy_it_does_not_fit() -> (
    None
):
    """Quota admission's cache may lag ours by LISTER_GRACE: a pod is held while a copy our cache
    held within that window leaves it no room, and only until that copy is out of the window."""
    clock = FakeClock()
    changes = QuotaChanges(clock)
    raised = quota(RAISED, RAISED, room=True)
    lookups = FakeLookups(quotas={"ns": raised})
    changes.stored(KEY, quota(BASE, BASE))
    await clock.advance(LISTER_GRACE)
    changes.stored(KEY, raised)  # the raise
    await clock.advance(LISTER_GRACE / 2)
    counted = with_used(raised, **{"limits.cpu": "2100m"})
    changes.stored(KEY, counted)  # another pod counted just after it
    lookups.quotas["ns"] = counted
    task = await admitting(lookups, clock, changes)
    assert not task.done(), "quota admission may still read the copy before the raise"
    await clock.advance(LISTER_GRACE / 2)
    await settle()
    assert task.done() and task.result().waited == pytest.approx(LISTER_GRACE / 2), (
        "held until the copy without room is out of the window, not since the last change"
    )
    task = await admitting(lookups, clock, changes)
    assert task.done() and task.result().waited == 0, "the copy without room is out of it"


async def test_a_target_pod_whose_room_every_recent_copy_holds_is_not_held() -> None:
    """A change that raised room for other migrations, or gave none (another pod counted, our
    status copy), leaves the pod fitting every copy quota admission may read."""
    clock = FakeClock()
    changes = QuotaChanges(clock)
    raised = quota(RAISED, RAISED, room=True)
    more = {"limits.cpu": "8", "limits.memory": "20Gi"}
    raised_more = quota(more, more, room=True)
    changes.stored(KEY, raised)
    await clock.advance(LISTER_GRACE)
    changes.stored(KEY, raised_more)
    changes.stored(KEY, with_used(raised_more, **{"limits.cpu": "2500m"}))
    lookups = FakeLookups(quotas={"ns": with_used(raised_more, **{"limits.cpu": "2500m"})})
    task = await admitting(lookups, clock, changes)
    assert task.done() and task.result().waited == 0


async def test_a_copy_whose_scopes_do_not_charge_the_pod_does_not_hold_it() -> None:
    """The copy before is judged as quota admission would judge it: scoped to terminating pods,
    it charges no launcher pod, so its lower limits hold nothing."""
    clock = FakeClock()
    changes = QuotaChanges(clock)
    scoped = quota(BASE, BASE)
    scoped["spec"]["scopes"] = ["Terminating"]
    changes.stored(KEY, scoped)
    await clock.advance(LISTER_GRACE)
    raised = quota(RAISED, RAISED, room=True)
    changes.stored(KEY, raised)
    task = await admitting(FakeLookups(quotas={"ns": raised}), clock, changes)
    assert task.done() and task.result().waited == 0


async def test_a_quota_first_seen_holds_a_fitting_pod_for_the_whole_grace() -> None:
    """Before the first copy this process saw (the initial list, a new quota) nothing is known:
    the pod is taken not to fit it, as every target pod was before the copies were kept."""
    clock = FakeClock()
    changes = QuotaChanges(clock)
    lookups = FakeLookups(quotas={"ns": quota(RAISED, RAISED, room=True)})
    changes.stored(KEY, quota(RAISED, RAISED, room=True))
    task = await admitting(lookups, clock, changes)
    assert not task.done()
    await clock.advance(LISTER_GRACE)
    await settle()
    assert task.done() and task.result().waited == pytest.approx(LISTER_GRACE)


def test_the_webhooks_quota_store_tells_each_copy_inside_its_write() -> None:
    """What a reader of the store sees is never newer than the copies kept: the view's listener
    runs inside the write, before any task could read the store."""
    clock = FakeClock()
    client = ApiClient(ClientConfig(host="https://127.0.0.1:1", ssl_context=False))
    caches = WebhookCaches(client, clock=clock)
    base = {**quota(BASE, BASE), "apiVersion": "v1", "kind": "ResourceQuota"}
    base["metadata"]["labels"] = {LABEL_DEFAULT_RESOURCE_QUOTA: "true"}
    caches.quotas.on_event("ADDED", base)
    clock.step(LISTER_GRACE)
    raised = json.loads(json.dumps(base))
    raised["status"]["hard"], raised["metadata"]["resourceVersion"] = RAISED, "2"
    caches.quotas.on_event("MODIFIED", raised)
    assert caches.managed_quota("ns") is not None

    def fits_raised(copy: Object) -> bool:
        return bool(copy["status"]["hard"] == RAISED)

    assert caches.quota_changes.settling(KEY, fits_raised) == pytest.approx(LISTER_GRACE)
    clock.step(LISTER_GRACE)
    assert caches.quota_changes.settling(KEY, fits_raised) == 0
    caches.quotas.on_event("DELETED", raised)
    caches.quotas.on_event("ADDED", raised)
    assert caches.quota_changes.settling(KEY, fits_raised) == pytest.approx(LISTER_GRACE), (
        "back at once: quota admission may still hold the deletion's state, taken as no room"
    )


async def test_a_copy_it_does_not_fit_that_comes_during_the_hold_makes_the_pod_wait() -> None:
    """The hold ends with another look: a release or another pod counted meanwhile is what
    quota admission will read, so the pod waits for its room again."""
    clock = FakeClock()
    changes = QuotaChanges(clock)
    raised = quota(RAISED, RAISED, room=True)
    changes.stored(KEY, quota(BASE, BASE))
    await clock.advance(LISTER_GRACE)
    changes.stored(KEY, raised)
    lookups = FakeLookups(quotas={"ns": raised})
    task = await admitting(lookups, clock, changes)
    await clock.advance(LISTER_GRACE / 2)
    lookups.quotas["ns"] = quota(BASE, BASE)  # released meanwhile
    changes.stored(KEY, lookups.quotas["ns"])
    await clock.advance(LISTER_GRACE / 2)
    await settle()
    assert not task.done(), "let through on a copy quota admission no longer has"
    lookups.quotas["ns"] = raised
    changes.stored(KEY, raised)
    await clock.advance(LISTER_GRACE)
    await settle()
    assert task.done() and task.result().outcome == "fitted-after-wait"


def store_event(caches: WebhookCaches, kind: str, found: Object, version: str) -> None:
    """The quota informer's watch event of `found` (labelled managed, at `version`)."""
    event = json.loads(json.dumps({**found, "apiVersion": "v1", "kind": "ResourceQuota"}))
    event["metadata"]["labels"] = {LABEL_DEFAULT_RESOURCE_QUOTA: "true"}
    event["metadata"]["resourceVersion"] = version
    caches.quotas.on_event(kind, event)


def test_the_kept_copy_holds_what_quota_admission_reads_usage_and_scopes() -> None:
    """Through the store's view: a copy whose usage leaves no room holds the pod, and one whose
    scopes do not charge it does not."""
    clock = FakeClock()
    caches = WebhookCaches(
        ApiClient(ClientConfig(host="https://127.0.0.1:1", ssl_context=False)), clock=clock
    )
    pod, needed = (
        target(),
        {"limits.cpu": Quantity.parse("2015m"), "limits.memory": Quantity.parse("4797464313")},
    )

    def fits(copy: Object) -> bool:
        return not applies_to(copy, pod) or not shortfalls(
            needed,
            parse_resource_list(copy["status"]["hard"]),
            parse_resource_list(copy["status"]["used"]),
        )

    store_event(caches, "ADDED", with_used(quota(RAISED, RAISED), **{"limits.cpu": "4"}), "1")
    clock.step(LISTER_GRACE)
    store_event(caches, "MODIFIED", quota(RAISED, RAISED), "2")  # a pod's usage given back
    assert caches.quota_changes.settling(KEY, fits) == pytest.approx(LISTER_GRACE)
    scoped = with_used(quota(RAISED, RAISED), **{"limits.cpu": "4"})
    scoped["spec"]["scopes"] = ["Terminating"]
    clock.step(LISTER_GRACE)
    store_event(caches, "MODIFIED", scoped, "3")
    clock.step(LISTER_GRACE)
    store_event(caches, "MODIFIED", quota(RAISED, RAISED), "4")
    assert caches.quota_changes.settling(KEY, fits) == 0, "the scoped copy charges no launcher"


def test_a_malformed_quota_is_copied_as_the_fit_reads_it_and_never_refused() -> None:
    """A view that raised would keep the whole quota out of the webhook's cache: fields of the
    wrong type read as absent, as `_short` reads them."""
    odd: Object = {"spec": ["not", "a", "spec"], "status": {"hard": "abc", "used": 7}}
    assert quota_copy(odd) == {"spec": {}, "status": {"hard": {}, "used": {}}}
    assert quota_copy({"status": None}) == {"spec": {}, "status": {}}
    scoped = json.loads(json.dumps(quota(RAISED, RAISED)))  # dicts of its own, not RAISED
    scoped["spec"]["scopes"] = ["NotTerminating"]
    kept = quota_copy(scoped)
    scoped["spec"]["scopes"].append("Terminating")
    scoped["status"]["hard"]["limits.cpu"] = "1"
    assert kept["spec"]["scopes"] == ["NotTerminating"] and kept["status"]["hard"] == RAISED, (
        "the copy is its own: a later change of the stored object's dicts does not reach it"
    )


async def test_a_quota_deleted_and_back_within_the_grace_holds_its_pods() -> None:
    """A deletion (or its label removed) is kept as a copy no pod fits: quota admission may
    still enforce the quota as it was."""
    clock = FakeClock()
    changes = QuotaChanges(clock)
    raised = quota(RAISED, RAISED, room=True)
    changes.stored(KEY, raised)
    await clock.advance(LISTER_GRACE)
    changes.stored(KEY, None)
    changes.stored(KEY, raised)
    assert changes.settling(KEY, lambda _copy: True) == pytest.approx(LISTER_GRACE)


async def test_copies_are_kept_per_quota_not_per_namespace() -> None:
    """Another labelled quota's changes in the namespace neither hide the managed one's copy
    before its raise nor hold a pod the managed one has room for."""
    clock = FakeClock()
    changes = QuotaChanges(clock)
    small = quota(BASE, BASE)
    changes.stored(KEY, small)
    changes.stored("ns/other", small)
    await clock.advance(LISTER_GRACE)
    changes.stored("ns/other", with_used(small, **{"limits.cpu": "2500m"}))
    changes.stored(KEY, quota(RAISED, RAISED, room=True))

    def fits(copy: Object) -> bool:
        return bool(copy["status"]["hard"] == RAISED)

    assert changes.settling(KEY, fits) == pytest.approx(LISTER_GRACE)
    assert changes.settling("ns/other", lambda _copy: True) == 0


async def test_a_target_pod_waits_for_the_raise_to_reach_status_and_no_longer() -> None:
    clock = FakeClock()
    changes = QuotaChanges(clock)
    lookups = FakeLookups(quotas={"ns": quota(BASE, BASE)})
    task = await admitting(lookups, clock, changes)
    assert not task.done() and changes.waiting() == 1

    await clock.advance(0.3)
    lookups.quotas["ns"] = quota(RAISED, BASE, room=True)  # spec raised, status not yet
    changes.stored(KEY, lookups.quotas["ns"])
    await settle()
    assert not task.done(), "status.hard is what quota admission checks"

    await clock.advance(0.2)
    lookups.quotas["ns"] = quota(RAISED, RAISED, room=True)
    changes.stored(KEY, lookups.quotas["ns"])
    await settle()
    assert not task.done(), "held a moment for the API server's own cache"
    await clock.advance(LISTER_GRACE)
    await settle()
    assert task.done()
    admission = task.result()
    assert admission.outcome == "fitted-after-wait"
    assert admission.waited == pytest.approx(0.5 + LISTER_GRACE)
    assert changes.waiting() == 0


async def test_a_target_pod_is_let_through_after_the_wait_even_without_room() -> None:
    """Also when the quota already carries a raise for the VM: the controller may re-plan. A
    migration that waited in vain does not wait again for as long, then does."""
    clock = FakeClock()
    changes = QuotaChanges(clock)
    gave_up = GaveUp(clock)
    too_small = {"limits.cpu": "4", "limits.memory": "6000Mi"}
    lookups = FakeLookups(quotas={"ns": quota(too_small, too_small, room=True)})
    task = await admitting(lookups, clock, changes, wait=8.0, gave_up=gave_up)
    await clock.advance(7.9)
    assert not task.done()
    await clock.advance(0.1)
    await settle()
    admission = task.result()
    assert admission.outcome == "timed-out" and admission.waited == 8.0
    assert [s.key for s in admission.short] == ["limits.cpu", "limits.memory"]
    assert changes.waiting() == 0

    retry = await admitting(lookups, clock, changes, wait=8.0, gave_up=gave_up)
    assert retry.done() and retry.result().outcome == "timed-out", "no second wait at once"
    await clock.advance(8.0)
    later = await admitting(lookups, clock, changes, wait=8.0, gave_up=gave_up)
    assert not later.done(), "waits again once the pause is over"
    later.cancel()


async def test_no_wait_when_no_raise_will_come() -> None:
    """The skip switch is on, or the namespace has no managed quota: nothing to wait for."""
    clock = FakeClock()
    skipped = quota(BASE, BASE)
    skipped["metadata"]["annotations"][ANNOTATION_SKIP_RESOURCE_QUOTA_AUTO_SCALING] = "true"
    for outcome, managed in [("no-raise-coming", skipped), ("no-managed-quota", None)]:
        lookups = FakeLookups(quotas={} if managed is None else {"ns": managed})
        task = await admitting(lookups, clock, QuotaChanges(clock))
        assert task.done() and task.result().outcome == outcome, outcome


def server_with(lookups: FakeLookups, clock: FakeClock, wait: float) -> WebhookServer:
    return WebhookServer(
        lookups,
        identities=Identities(target_creators=frozenset({KUBEVIRT})),
        clock=clock,
        registry=CollectorRegistry(),
        sharing=RoomSharing(quota_changes=QuotaChanges(clock), target_room_wait=wait),
    )


def pod_review(obj: Object, user: str) -> bytes:
    body: dict[str, Any] = json.loads(review("Pod", obj))
    body["request"]["userInfo"]["username"] = user
    body["request"]["operation"] = "CREATE"
    return json.dumps(body).encode()


async def test_the_server_answers_a_waiting_target_pod_once_its_room_is_there() -> None:
    """Through WebhookServer.review: the target waits and is allowed, counted by outcome; a
    tenant's pod carrying the same label is decided at once, as a tenant's."""
    clock = FakeClock()
    lookups = FakeLookups(quotas={"ns": quota(BASE, BASE)})
    server = server_with(lookups, clock, wait=8.0)
    answer = asyncio.ensure_future(server.review("pods", pod_review(target(), KUBEVIRT)))
    await settle()
    assert not answer.done()
    tenant = await server.review("pods", pod_review(target(), "tenant"))
    assert json.loads(tenant.body)["response"]["allowed"] is True  # type: ignore[arg-type]

    await clock.advance(1.0)
    lookups.quotas["ns"] = quota(RAISED, RAISED, room=True)
    server.quota_changes.stored(KEY, lookups.quotas["ns"])
    await settle()
    await clock.advance(LISTER_GRACE)
    assert json.loads((await answer).body)["response"]["allowed"] is True  # type: ignore[arg-type]
    counted = server.metrics.target_pods.labels("fitted-after-wait")._value.get()
    assert counted == 1


async def test_without_quota_changes_the_server_never_waits() -> None:
    clock = FakeClock()
    lookups = FakeLookups(quotas={"ns": quota(BASE, BASE)})
    server = WebhookServer(
        lookups,
        identities=Identities(target_creators=frozenset({KUBEVIRT})),
        clock=clock,
        registry=CollectorRegistry(),
    )
    answer = await server.review("pods", pod_review(target(), KUBEVIRT))
    assert json.loads(answer.body)["response"]["allowed"] is True  # type: ignore[arg-type]
    assert server.metrics.target_pods.labels("timed-out")._value.get() == 1


async def test_a_waiter_that_gives_up_does_not_leave_the_others_deaf() -> None:
    """Two target pods wait on one namespace; the first gives up, the second still hears the
    quota's change."""
    clock = FakeClock()
    changes = QuotaChanges(clock)
    short = asyncio.ensure_future(changes.next_change("ns", 1.0))
    long = asyncio.ensure_future(changes.next_change("ns", 8.0))
    await settle()
    await clock.advance(1.0)
    await settle()
    assert short.done() and short.result() is False
    assert not long.done() and changes.waiting() == 1
    changes.stored(KEY, quota(RAISED, RAISED))
    await settle()
    assert long.done() and long.result() is True
    assert changes.waiting() == 0


async def test_an_unreadable_target_pod_is_let_through_at_once_and_named() -> None:
    """Not ours to refuse (the API server validates pods): counted apart, no wait."""
    clock = FakeClock()
    broken = target()
    broken["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "lots"
    admission = await admit_target(
        request("Pod", broken, operation="CREATE", user=KUBEVIRT),
        FakeLookups(quotas={"ns": quota(BASE, BASE)}),
        QuotaChanges(clock),
        clock,
        wait=8.0,
    )
    assert admission.outcome == "unreadable" and admission.waited == 0.0


class LiveQuota:
    """The API server's quota, as a GET would read it now (a fake of targets.live_quotas)."""

    def __init__(self, quota: Object | None, *, fail: Exception | None = None) -> None:
        self.quota = quota
        self.fail = fail
        self.reads = 0
        self.answer: asyncio.Future[None] | None = None

    async def __call__(self, namespace: str, name: str) -> Object | None:
        self.reads += 1
        if self.answer is not None:
            await self.answer
        if self.fail is not None:
            raise self.fail
        return self.quota


async def test_a_release_our_cache_hears_of_during_the_live_read_makes_the_pod_wait() -> None:
    """The live read answers the copy the pod fits, but meanwhile our cache stored the release:
    the pod looks again after the read, and waits for room."""
    clock = FakeClock()
    changes = QuotaChanges(clock)
    raised = quota(RAISED, RAISED, room=True, version="7")
    changes.stored(KEY, raised)
    await clock.advance(LISTER_GRACE)  # raised long ago: nothing holds the pod but the release
    lookups = FakeLookups(quotas={"ns": raised})
    slow = LiveQuota(raised)
    slow.answer = asyncio.get_running_loop().create_future()
    task = await admitting(lookups, clock, changes, live=slow)
    lookups.quotas["ns"] = quota(BASE, BASE, version="8")
    changes.stored(KEY, lookups.quotas["ns"])
    slow.answer.set_result(None)
    await settle()
    assert not task.done(), "let through on the copy before the release"
    task.cancel()


async def test_a_target_pod_that_fits_only_on_a_stale_cache_waits_for_the_next_raise() -> None:
    """v170-test4 in CI: vm1's second migration was created as its first one's source pod went.
    The controller gave the first room back (its cache did not show the second migration yet);
    ours still showed the first raise, so the target pod was let through at once and quota
    admission, which had the release, refused it. Judged on the live quota it waits for the
    raise that follows, then pays the lister grace."""
    clock = FakeClock()
    changes = QuotaChanges(clock)
    lookups = FakeLookups(quotas={"ns": quota(RAISED, RAISED, room=True, version="7")})
    released = LiveQuota(quota(BASE, BASE, version="8"))
    task = await admitting(lookups, clock, changes, live=released)
    assert released.reads == 1
    assert not task.done(), "let through on a raise the API server no longer has"

    lookups.quotas["ns"] = quota(BASE, BASE, version="8")  # our cache catches up: the release
    changes.stored(KEY, lookups.quotas["ns"])
    await settle()
    assert not task.done()
    lookups.quotas["ns"] = quota(RAISED, RAISED, room=True, version="9")  # the second raise
    changes.stored(KEY, lookups.quotas["ns"])
    await settle()
    await clock.advance(LISTER_GRACE)
    await settle()
    assert task.done() and task.result().outcome == "fitted-after-wait"
    assert released.reads == 1, "the live quota is read on the first look only"


async def test_a_target_pod_that_fits_the_live_quota_as_cached_is_let_through_at_once() -> None:
    clock = FakeClock()
    lookups = FakeLookups(quotas={"ns": quota(RAISED, RAISED, room=True, version="7")})
    same = LiveQuota(quota(RAISED, RAISED, room=True, version="7"))
    task = await admitting(lookups, clock, QuotaChanges(clock), live=same)
    assert task.done() and task.result().outcome == "fits"


async def test_a_live_quota_newer_than_the_cache_that_fits_costs_the_lister_grace() -> None:
    """Quota admission's cache may lag the live object as ours did."""
    clock = FakeClock()
    lookups = FakeLookups(quotas={"ns": quota(RAISED, RAISED, room=True, version="7")})
    newer = LiveQuota(quota(RAISED, RAISED, room=True, version="8"))
    task = await admitting(lookups, clock, QuotaChanges(clock), live=newer)
    assert not task.done()
    await clock.advance(LISTER_GRACE)
    await settle()
    assert task.done() and task.result().outcome == "fits", "held, but it waited for no change"
    assert task.result().waited == pytest.approx(LISTER_GRACE)


def naming(quota_copy: Object, *migrations: str) -> Object:
    """`quota_copy` as the controller's raise records it: holding room for `migrations`."""
    quota_copy["metadata"]["annotations"][ANNOTATION_ROOM_MIGRATIONS] = ",".join(migrations)
    return quota_copy


async def test_a_cached_raise_that_names_the_pods_migration_is_not_read_live() -> None:
    """The raise was written on a plan that read m1, and m1's room goes only once m1 is done:
    no release of it can be newer than the cached copy, so the pod is let through at once
    without a GET (here the live read would even answer a release, to show it is not asked)."""
    clock = FakeClock()
    cached = naming(quota(RAISED, RAISED, room=True, version="7"), "m0", "m1")
    lookups = FakeLookups(quotas={"ns": cached})
    released = LiveQuota(quota(BASE, BASE, version="8"))
    task = await admitting(lookups, clock, QuotaChanges(clock), live=released)
    assert task.done() and task.result().outcome == "fits"
    assert released.reads == 0


async def test_a_cached_raise_for_another_migration_of_the_vm_is_still_read_live() -> None:
    """v170-test4's second migration: the cache names the first one (m0), whose room the
    controller may just have given back, so the pod is judged on the live quota and waits."""
    clock = FakeClock()
    cached = naming(quota(RAISED, RAISED, room=True, version="7"), "m0")
    lookups = FakeLookups(quotas={"ns": cached})
    released = LiveQuota(quota(BASE, BASE, version="8"))
    task = await admitting(lookups, clock, QuotaChanges(clock), live=released)
    assert released.reads == 1
    assert not task.done(), "let through on a raise the API server no longer has"
    task.cancel()


async def test_a_tenants_pod_labelled_as_a_named_migrations_target_is_held_to_the_base() -> None:
    """The skip trusts the record only for KubeVirt's own target pods: a tenant that labels
    its pod (or calls the webhook) as the target of the migration the raise names is decided by
    the pod rules, and refused where it would take that room."""
    clock = FakeClock()
    lookups = FakeLookups()
    room_held(lookups)
    held = lookups.migration_list[0]["metadata"]["uid"]
    naming(lookups.quotas["ns"], held)
    server = server_with(lookups, clock, wait=8.0)
    pod = plain_pod("tenant-pod", "2015m", "4797464313", **{"kubevirt.io/migrationJobUID": held})
    answer = await server.review("pods", pod_review(pod, "tenant"))
    response = json.loads(answer.body)["response"]  # type: ignore[arg-type]
    assert response["allowed"] is False
    assert "would take room reserved for the live migration of vm1" in response["status"]["message"]


@pytest.mark.parametrize("broken", ["refused", "slow"])
async def test_when_the_live_quota_cannot_be_read_the_cached_decision_stands(broken: str) -> None:
    """A target pod is never denied here, nor held longer than the read's bound."""
    clock = FakeClock()
    lookups = FakeLookups(quotas={"ns": quota(RAISED, RAISED, room=True, version="7")})
    live = LiveQuota(None, fail=errors.Forbidden("no get", status=403))
    if broken == "slow":
        live = LiveQuota(quota(BASE, BASE, version="8"))
        live.answer = asyncio.get_running_loop().create_future()
    task = await admitting(lookups, clock, QuotaChanges(clock), live=live)
    if broken == "slow":
        assert not task.done()
        await clock.advance(LIVE_READ_TIMEOUT)
        await settle()
    assert task.done() and task.result().outcome == "fits"


async def test_the_pods_endpoint_holds_a_received_vms_target_pod_to_the_base() -> None:
    """The dispatcher itself (PodAdmissions.validate): a receive's target pod from KubeVirt's
    controller is answered by the pod rules, refused while vm1's room is held, at once (no wait
    for a raise that never comes: the fake clock never moves, so a wait would time out here)."""
    clock = FakeClock()
    lookups = FakeLookups()
    room_held(lookups)
    server = server_with(lookups, clock, wait=8.0)
    answer = await asyncio.wait_for(
        server.review("pods", pod_review(receive_target(lookups), KUBEVIRT)), timeout=10
    )
    response = json.loads(answer.body)["response"]  # type: ignore[arg-type]
    assert response["allowed"] is False
    assert "would take room reserved for the live migration of vm1" in response["status"]["message"]


async def test_a_target_pod_that_fits_just_after_its_quota_changed_is_held_for_what_is_left_of_the_grace() -> (
    None
):
    """The raise reached our cache a moment before virt-controller sent the pod: quota
    admission's own cache may not have it yet (a loaded drain refused such a pod once, against
    the base, though the webhook had found it fitting on the first look)."""
    clock = FakeClock()
    changes = QuotaChanges(clock)
    lookups = FakeLookups(quotas={"ns": quota(RAISED, RAISED, room=True)})
    changes.stored(KEY, lookups.quotas["ns"])
    await clock.advance(0.03)
    task = await admitting(lookups, clock, changes)
    assert not task.done(), "let through while quota admission's cache may still lag"
    await clock.advance(LISTER_GRACE - 0.03)
    await settle()
    assert task.done() and task.result().outcome == "fits"
    assert task.result().waited == pytest.approx(LISTER_GRACE - 0.03)


async def test_a_target_pod_whose_quota_changed_longer_ago_than_the_grace_is_not_held() -> None:
    clock = FakeClock()
    changes = QuotaChanges(clock)
    lookups = FakeLookups(quotas={"ns": quota(RAISED, RAISED, room=True)})
    changes.stored(KEY, lookups.quotas["ns"])
    changes.stored("other/default-quota", lookups.quotas["ns"])
    await clock.advance(LISTER_GRACE)
    task = await admitting(lookups, clock, changes)
    assert task.done() and task.result().outcome == "fits"
    assert changes.settling("other/default-quota", lambda _copy: False) == 0.0


async def test_quota_changes_forget_each_namespace_once_its_grace_has_passed() -> None:
    """A cluster's churn of namespaces (each quota seen once, then deleted) leaves nothing kept,
    and a quota that stopped changing keeps its current copy alone: a change cuts down every
    quota whose grace has passed."""
    clock = FakeClock()
    changes = QuotaChanges(clock)
    changes.stored("kept/q", {"n": 1})
    changes.stored("kept/q", {"n": 2})
    for index in range(1000):
        changes.stored(f"gone-{index}/q", {})
        changes.stored(f"gone-{index}/q", None)
    assert len(changes._seen) == 1001, "all changed within the grace"
    await clock.advance(LISTER_GRACE)
    changes.stored("live/q", {})
    assert list(changes._seen) == ["live/q"]
    assert sorted(changes._copies) == ["kept/q", "live/q"], "no deleted quota's copies are kept"
    assert [copy for _, copy in changes._copies["kept/q"]] == [{"n": 2}], "the current one"
    assert changes.settling("live/q", lambda _copy: False) == pytest.approx(LISTER_GRACE)
    changes.stored("kept/q", {"n": 3})
    assert changes.settling("kept/q", lambda copy: copy != {"n": 2}) == pytest.approx(
        LISTER_GRACE
    ), "the copy before its next change is the one it kept"


async def test_a_quota_that_never_stops_changing_keeps_only_the_copies_of_the_grace() -> None:
    clock = FakeClock()
    changes = QuotaChanges(clock)
    for index in range(1000):
        changes.stored("busy/q", {"n": index})
        await clock.advance(LISTER_GRACE / 10)
    kept = [copy["n"] for _, copy in changes._copies["busy/q"] if copy is not None]
    assert kept == list(range(kept[0], 1000)) and 10 <= len(kept) <= 12, (
        "the copies current within the last LISTER_GRACE (ten changes), and the one before"
    )
