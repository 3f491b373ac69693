"""No namespace's flood makes another namespace's admissions wait or be refused
(webhook/limiter.py, the one admission limiter in front of every endpoint's rules).

A denied request costs its sender nothing, so the limiter counts every admission alike (dry
runs, creates the rules deny, VM creates): a namespace has at most its share of the places in
decision whether or not another waits, a full queue is trimmed from the largest holder's end,
and KubeVirt's migration target pods take places of their own."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from harvester_quota.generic.clock import REAL_CLOCK
from harvester_quota.generic.resource import Object
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.util.annotations import LABEL_ROOM_HELD, TRUE
from harvester_quota.webhook.admission import parse_review
from harvester_quota.webhook.limiter import AdmissionLimiter
from harvester_quota.webhook.resources.common import Identities
from harvester_quota.webhook.server import WebhookServer
from harvester_quota.webhook.serving import Bounds, Listening
from harvester_quota.webhook.tls import ClientAuth, ReloadingTLS
from prometheus_client import CollectorRegistry

from bench.admission import vm_review
from tests.helpers import eventually
from tests.objects import migration, plain_namespace
from tests.unit.test_webhook import FakeLookups, plain_pod, quota_with, running_vm
from tests.unit.test_webhook_endpoint import API_SERVER, Pki, client_context, pki, running

__all__ = ["pki"]  # the fixture, from test_webhook_endpoint.py

BASE = {"limits.cpu": "3", "limits.memory": "5000Mi"}


async def test_a_namespace_alone_holds_at_most_its_share_and_a_newcomer_is_decided_at_once() -> (
    None
):
    """The share holds whether or not another namespace waits: a flood alone has `share`
    places, the rest of its admissions wait, and another namespace's admission takes a free
    place without waiting."""
    limiter = AdmissionLimiter(FakeClock(), size=4, share=2, queue=10)
    assert await limiter.acquire("flood") and await limiter.acquire("flood")
    third = asyncio.ensure_future(limiter.acquire("flood"))
    await eventually(lambda: limiter.waiting_in("flood") == 1, what="the flood's third waits")
    assert await asyncio.wait_for(limiter.acquire("victim"), 1.0), "a free place, at once"
    assert not third.done()
    limiter.release("flood")
    assert await third
    for key in ("flood", "flood", "victim"):
        limiter.release(key)
    assert (limiter.deciding, limiter.waiting) == (0, 0)


async def test_a_free_place_goes_to_the_namespace_with_the_fewest_in_decision() -> None:
    limiter = AdmissionLimiter(FakeClock(), size=2, share=2, queue=10)
    assert await limiter.acquire("flood") and await limiter.acquire("flood")
    flood = [asyncio.ensure_future(limiter.acquire("flood")) for _ in range(3)]
    await eventually(lambda: limiter.waiting_in("flood") == 3)
    victim = asyncio.ensure_future(limiter.acquire("victim"))
    await eventually(lambda: limiter.waiting_in("victim") == 1)
    limiter.release("flood")
    assert await victim, "before the flood's older waiters: it has none in decision"
    assert not any(f.done() for f in flood)
    limiter.release("victim")
    assert await flood[0]
    for waiting in flood[1:]:
        limiter.release("flood")
        assert await waiting
    limiter.release("flood")
    limiter.release("flood")


async def test_a_full_queue_refuses_the_flood_from_its_own_end_never_the_newcomer() -> None:
    """The queue full of one namespace's admissions: its newest waiter is refused to make room
    for another namespace's; the flood's own newcomer is refused at once."""
    limiter = AdmissionLimiter(FakeClock(), size=1, share=1, queue=3)
    assert await limiter.acquire("holder")
    flood = [asyncio.ensure_future(limiter.acquire("flood")) for _ in range(3)]
    await eventually(lambda: limiter.waiting == 3)
    assert await limiter.acquire("flood") is False, "the flood's fourth: its own end"
    victim = asyncio.ensure_future(limiter.acquire("victim"))
    await eventually(flood[2].done, what="the flood's newest waiter refused for the victim")
    assert flood[2].result() is False
    assert limiter.waiting_in("victim") == 1 and limiter.refused == 2
    limiter.release("holder")
    assert await flood[0], "the first in the lines among equals"
    limiter.release("flood")
    assert await victim, "round robin: before the flood's second"
    limiter.release("victim")
    assert await flood[1]
    limiter.release("flood")


async def steps(clock: FakeClock, count: int, seconds: float = 1.0) -> None:
    for _ in range(count):
        clock.step(seconds)
        for _ in range(5):
            await asyncio.sleep(0)


async def test_a_wait_beside_a_longer_line_goes_on_and_the_longest_line_is_refused() -> None:
    """A victim's two waiting admissions beside a flood's four: after `wait` the flood's line is
    cut down to the victim's (its oldest first), the victim's wait on; a namespace alone
    waits past `wait` too."""
    clock = FakeClock()
    limiter = AdmissionLimiter(clock, size=1, share=1, wait=1.0, deadline=10.0)
    assert await limiter.acquire("holder")
    burst = [asyncio.ensure_future(limiter.acquire("burst")) for _ in range(2)]
    await eventually(lambda: limiter.waiting_in("burst") == 2)
    await steps(clock, 2)
    assert not any(b.done() for b in burst), "alone in the lines: it waits"
    flood = [asyncio.ensure_future(limiter.acquire("flood")) for _ in range(4)]
    await eventually(lambda: limiter.waiting_in("flood") == 4)
    await steps(clock, 1)
    await eventually(lambda: limiter.waiting_in("flood") == 2, what="the longest line cut")
    assert sum(f.done() and not f.result() for f in flood) == 2
    assert not any(b.done() for b in burst), "a line no longer than another's waits on"
    limiter.release("holder")
    for _ in range(4):
        await eventually(lambda: limiter.deciding == 1, what="the next grant")
        limiter.release(next(iter(limiter._deciding)))
    assert all(b.result() for b in burst)


async def test_a_floods_queued_work_is_shed_when_another_namespace_waits() -> None:
    """Thirty admissions of a flood wait alone (a namespace alone may queue its burst); a victim's
    admission arrives: the flood's line is cut to `crowded_line` at once (its newest refused,
    never decided: each decision costs the shared event loop), its newcomers are refused while
    its line is the longest, and the victim's is granted before the flood's second."""
    limiter = AdmissionLimiter(FakeClock(), size=1, share=1, crowded_line=4)
    assert await limiter.acquire("holder")
    flood = [asyncio.ensure_future(limiter.acquire("flood")) for _ in range(30)]
    await eventually(lambda: limiter.waiting_in("flood") == 30, what="a burst alone queues")
    victim = asyncio.ensure_future(limiter.acquire("victim"))
    await eventually(lambda: limiter.waiting_in("flood") == 4, what="the flood's line cut")
    assert sum(f.done() and not f.result() for f in flood) == 26
    assert await limiter.acquire("flood") is False, "a newcomer of the longest line"
    limiter.release("holder")
    assert await flood[0], "round robin among equals: the flood's line came first"
    limiter.release("flood")
    assert await victim, "then the victim's, before the flood's second"
    limiter.release("victim")
    for waiting in flood[1:4]:
        assert await waiting
        limiter.release("flood")


async def test_every_wait_ends_by_the_deadline_so_an_ignore_rule_never_times_out() -> None:
    """Alone in the lines too: a wait past the API server's timeout would let a request through
    unchecked on a rule whose failure policy is Ignore (a running VM's hot-plug)."""
    clock = FakeClock()
    limiter = AdmissionLimiter(clock, size=1, share=1, wait=1.0, deadline=3.0)
    assert await limiter.acquire("holder")
    alone = asyncio.ensure_future(limiter.acquire("alone"))
    await eventually(lambda: limiter.waiting_in("alone") == 1)
    await steps(clock, 2)
    assert not alone.done()
    await steps(clock, 1)
    await eventually(alone.done, what="refused at the deadline")
    assert alone.result() is False
    limiter.release("holder")


async def test_a_namespace_past_its_line_is_refused_and_a_victims_burst_beside_it_is_not() -> None:
    """A flood fills its own line and is refused beyond it; a victim's burst of as many waits
    in a line of its own, none refused."""
    limiter = AdmissionLimiter(FakeClock(), size=1, share=1, line=5, queue=100)
    assert await limiter.acquire("holder")
    flood = [asyncio.ensure_future(limiter.acquire("flood")) for _ in range(8)]
    await eventually(lambda: sum(f.done() for f in flood) == 3, what="the flood's overflow")
    assert limiter.waiting_in("flood") == 5
    victims = [asyncio.ensure_future(limiter.acquire("victim")) for _ in range(5)]
    await eventually(lambda: limiter.waiting_in("victim") == 5)
    assert limiter.refused == 3
    limiter.release("holder")
    granted = 0
    while granted < 10:
        await eventually(lambda: limiter.deciding == 1, what="the next grant")
        key = next(iter(limiter._deciding))
        limiter.release(key)
        granted += 1
    assert all(v.done() and v.result() for v in victims)


async def test_kubevirts_target_pods_take_places_of_their_own_and_never_wait() -> None:
    limiter = AdmissionLimiter(FakeClock(), size=1, share=1, queue=1, priority_size=2)
    assert await limiter.acquire("flood")
    assert await asyncio.wait_for(limiter.acquire("victim", priority=True), 1.0)
    assert await asyncio.wait_for(limiter.acquire("victim", priority=True), 1.0)
    assert await limiter.acquire("victim", priority=True) is False, "beyond its places: refused"
    limiter.release("victim", priority=True)
    assert await limiter.acquire("victim", priority=True)


async def test_an_admission_cancelled_while_waiting_leaves_the_places_whole() -> None:
    limiter = AdmissionLimiter(FakeClock(), size=1, share=1, queue=5)
    assert await limiter.acquire("a")
    waiting = asyncio.ensure_future(limiter.acquire("b"))
    await eventually(lambda: limiter.waiting == 1)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    limiter.release("a")
    assert (limiter.deciding, limiter.waiting) == (0, 0)
    assert await limiter.acquire("b"), "the place is free again"
    limiter.release("b")


@dataclass
class ObservedLookups(FakeLookups):
    """Two namespaces, each holding room; records which namespace's rooms were worked out."""

    per_namespace: dict[str, FakeLookups] = field(default_factory=dict)
    worked_out: list[str] = field(default_factory=list)

    def migrations(self, namespace: str) -> Sequence[Object]:
        self.worked_out.append(namespace)
        return self.per_namespace[namespace].migrations(namespace)

    def managed_quota(self, namespace: str) -> Object | None:
        return self.per_namespace[namespace].managed_quota(namespace)

    def namespace(self, name: str) -> Object | None:
        return self.per_namespace[name].namespace(name)

    def vmis(self, namespace: str) -> Any:
        return self.per_namespace[namespace].vmis(namespace)

    def launcher_pods(self, namespace: str) -> Any:
        return self.per_namespace[namespace].launcher_pods(namespace)

    def migrations_under_way(self, namespace: str) -> bool:
        return self.per_namespace[namespace].migrations_under_way(namespace)


def holding_room(name: str) -> FakeLookups:
    lookups = FakeLookups(quotas={name: quota_with({"limits.cpu": "1"}, BASE)})
    lookups.quotas[name]["metadata"]["namespace"] = name
    namespace = plain_namespace(name)
    namespace["metadata"]["labels"] = {LABEL_ROOM_HELD: TRUE}
    lookups.namespaces[name] = namespace
    instance = running_vm(lookups)
    lookups.migration_list.append(migration("m", instance))
    return lookups


def pod_review(namespace: str, name: str, *, dry_run: bool) -> bytes:
    pod = plain_pod(name, "100m", "1Mi")
    pod["metadata"]["namespace"] = namespace
    request = {
        "uid": name,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "operation": "CREATE",
        "namespace": namespace,
        "name": name,
        "userInfo": {"username": "tenant"},
        "object": pod,
        "dryRun": dry_run,
    }
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "request": request}).encode()


async def test_a_flood_of_dry_run_creates_does_not_put_another_namespace_behind_it() -> None:
    """Forty dry-run creates of one tenant arrive just before one create of another namespace,
    both holding room: the victim's rooms are worked out after at most one of the flood's (in
    arrival order, before: after all forty)."""
    lookups = ObservedLookups(
        per_namespace={"flood": holding_room("flood"), "victim": holding_room("victim")}
    )
    server = WebhookServer(lookups, registry=CollectorRegistry(), clock=FakeClock())
    flood = [
        asyncio.ensure_future(server.review("pods", pod_review("flood", f"f{i}", dry_run=True)))
        for i in range(40)
    ]
    victim = asyncio.ensure_future(server.review("pods", pod_review("victim", "v", dry_run=False)))
    answers = await asyncio.gather(*flood, victim)
    assert all(answer.status == 200 for answer in answers)
    assert lookups.worked_out.index("victim") <= 1, lookups.worked_out


@dataclass
class CostlyLookups(ObservedLookups):
    """`ObservedLookups` whose `costly` namespace takes `cost` seconds of the event loop to work
    out its rooms, as a namespace with hundreds of pending migrations does."""

    costly: str = "flood"
    cost: float = 0.02

    def migrations(self, namespace: str) -> Sequence[Object]:
        if namespace == self.costly:
            time.sleep(self.cost)  # the rooms' computation: the loop is busy, not waiting
        return super().migrations(namespace)


def over_base_review(namespace: str, name: str) -> bytes:
    """A real create the pod rule denies: 5 CPU over a 3-CPU base while room is held."""
    body = json.loads(pod_review(namespace, name, dry_run=False))
    pod = body["request"]["object"]
    for container in pod["spec"]["containers"]:
        container["resources"] = {"limits": {"cpu": "5", "memory": "1Mi"}}
    return json.dumps(body).encode()


async def answer(
    session: aiohttp.ClientSession, server: WebhookServer, pki: Pki, endpoint: str, body: bytes
) -> tuple[int, dict[str, Any]]:
    """The HTTP status and the review's response of one call as the API server makes it."""
    async with session.post(
        f"https://127.0.0.1:{server.port}/validate/{endpoint}",
        data=body,
        ssl=client_context(pki, "apiserver"),
    ) as response:
        text = await response.read()
        found = json.loads(text)["response"] if response.status == 200 else {}
        return response.status, found


def refused(reply: tuple[int, dict[str, Any]]) -> bool:
    """An HTTP 429, or a denial with code 429 ("retry"), as the API server would get it."""
    status, response = reply
    return status == 429 or (response.get("status") or {}).get("code") == 429


async def flood_beside_a_victim(
    pki: Pki, endpoint: str, flood_review: Any
) -> tuple[list[tuple[int, dict[str, Any]]], list[tuple[int, dict[str, Any]]]]:
    """One hundred admissions of the `flood` namespace (each working out costly rooms) sent at
    once through the webhook's HTTPS port as the API server sends them, then nine pod creates
    of a `victim` namespace that holds room too; both answered lists."""
    lookups = CostlyLookups(
        per_namespace={"flood": holding_room("flood"), "victim": holding_room("victim")}
    )
    tls = ReloadingTLS(pki.root / "tls.crt", pki.root / "tls.key")
    server = WebhookServer(
        lookups,
        listening=Listening(
            "127.0.0.1", 0, tls, ClientAuth(pki.client_ca, frozenset({API_SERVER}))
        ),
        bounds=Bounds(body_timeout=60.0),
        clock=REAL_CLOCK,
        registry=CollectorRegistry(),
    )
    async with (
        running(server),
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
    ):
        flood = [
            asyncio.ensure_future(answer(session, server, pki, endpoint, flood_review(f"f{i}")))
            for i in range(100)
        ]
        await eventually(lambda: "flood" in lookups.worked_out, what="the flood being decided")
        victims = await asyncio.gather(
            *(
                answer(session, server, pki, "pods", pod_review("victim", f"v{i}", dry_run=False))
                for i in range(9)
            )
        )
        return list(await asyncio.gather(*flood)), list(victims)


async def test_a_flood_of_denied_creates_leaves_another_namespaces_pods_answered_and_admitted(
    pki: Pki,
) -> None:
    """A tenant whose namespace holds room sends a hundred pod creates over its base at once
    (each denied, each free for it). Before, they held every admission slot while their rooms
    were worked out one after another, and the victim namespace's creates waited unread, then
    got 429 (its fail-closed rule: refused). Now the flood has its share of the places; every
    victim create is answered and admitted, and only the flood's own are refused."""
    flood, victims = await flood_beside_a_victim(
        pki, "pods", lambda n: over_base_review("flood", n)
    )
    assert [status for status, _ in victims] == [200] * 9
    assert all(response["allowed"] for _, response in victims), victims
    assert all(status == 200 and not response["allowed"] for status, response in flood)


async def test_a_flood_of_dry_run_vm_creates_leaves_another_namespaces_pods_answered(
    pki: Pki,
) -> None:
    """The same flood as dry-run creates of running VMs, whose rule works every room out: the
    VM endpoint takes its places in the same limiter, so the victim's pods are not refused."""
    flood, victims = await flood_beside_a_victim(
        pki, "virtualmachines", lambda n: vm_review("flood", n)
    )
    assert not any(refused(reply) for reply in victims), victims
    assert all(response["allowed"] for _, response in victims)
    assert all(status == 200 for status, _ in flood), "refused in the review, never passed"


def target_review(namespace: str, name: str, username: str) -> bytes:
    """A migration target pod's create as KubeVirt's controller sends it (or a tenant forging)."""
    body = json.loads(pod_review(namespace, name, dry_run=False))
    body["request"]["userInfo"] = {"username": username}
    body["request"]["object"]["metadata"]["labels"] = {"kubevirt.io/migrationJobUID": "m-uid"}
    return json.dumps(body).encode()


async def test_a_refused_priority_admission_gets_http_429_and_a_tenants_a_denial() -> None:
    """KubeVirt's target pods are never denied: one refused a place (its places all taken) gets
    HTTP 429, so its rule's failure policy decides (Ignore: quota admission judges it). A
    tenant's refused admission is a denial with code 429, never a pass; a tenant forging the
    target's label without KubeVirt's identity is a tenant."""
    lookups = ObservedLookups(per_namespace={"ns": holding_room("ns")})
    server = WebhookServer(lookups, registry=CollectorRegistry(), clock=FakeClock())
    server.admissions = AdmissionLimiter(FakeClock(), line=0, priority_size=0)
    kubevirt = next(iter(Identities().target_creators))
    answer = await server.review("pods", target_review("ns", "t", kubevirt))
    assert answer.status == 429
    forged = await server.review("pods", target_review("ns", "f", "tenant"))
    assert forged.status == 200 and forged.body is not None
    response = json.loads(forged.body)["response"]  # type: ignore[arg-type]
    assert response["allowed"] is False and response["status"]["code"] == 429
    assert server.is_priority("pods", parse_review(target_review("ns", "t", kubevirt)))
    controller = next(iter(Identities().controllers))
    assert server.is_priority("namespaces", parse_review(target_review("ns", "c", controller)))
    assert not server.is_priority("pods", parse_review(target_review("ns", "f", "tenant")))
