"""``python -m bench.admission``: what one tenant's flood of admissions costs another namespace,
before and after the one admission limiter (pkg/webhook/limiter.py), side by side in one run.

In process, without a cluster: the webhook's own caches (`WebhookCaches`, never connected, their
stores written here as the informers would) and its server's review path, the real clock. Two
arms on the same caches, their order alternated round by round:

- ``after``: the server as shipped (`WebhookServer(caches)`, default `Bounds`) behind its
  handler as it runs now: a read slot (`WebhookServer.slots`) held for the read only, then
  `WebhookServer.review`, which decides each admission holding a place of the limiter under its
  namespace (at most its share of them per namespace, KubeVirt's target pods in places of
  their own);
- ``before (model)``: a model of the webhook before the limiter, not its code (the per-namespace
  turns it had are gone from the tree): the handler's old shape, a read slot held across the
  whole decision, so the slots are taken in arrival order; `Bounds(fair=False)`, so one
  namespace may take every place of the limiter; and the `Before` caches, which plan every room
  on every admission, render every launcher again and derive the cluster settings again (the
  costs before the quiet check and the render cache).

Part one, ``alone`` (skipped with ``--admissions 0``): sequential pod creates in one namespace
with 0, 50 and 500 pending migrations (each of a running VM): the webhook's time per admission.

Part two, the floods: a tenant namespace with 0, 50 or 500 pending migrations floods the
webhook from ``--flood`` clients, each sending again as soon as it is answered (a refusal
included), with one of three kinds of admission:

- ``dry-run pods``: dry-run pod creates (/validate/pods), admitted;
- ``over-base pods``: real pod creates over the namespace's base, which the pod rule denies
  where room is held (with 0 pending migrations nothing is held: the webhook passes them and
  quota admission refuses them);
- ``dry-run VMs``: dry-run creates of running VMs (/validate/virtualmachines), whose rule works
  every room out.

Once the flood has had its first answer (it holds what it can of the webhook), ``--victims``
admissions of other namespaces arrive, at once or one every ``--every`` seconds (of a loop the
flood may keep busy), in turn: a pod create of a
namespace holding room (`victim`, 5 pending migrations), KubeVirt's target pod of one of that
namespace's migrations, and a pod create of a namespace holding nothing (`quiet`); the flood
goes on until the last is answered (what it still has in flight then is cancelled, as from a
client that gave up). Each is timed from its arrival to its answer (the slot's wait included);
refused counts the 429s (from the slots, or denied with 429 by the limiter), over 5 s the
answers later than the API server's timeout (which then applies the rule's failure policy: a
fail-open rule passes the admission unchecked, a fail-closed one refuses it). The flood's own
answers are counted too (how many depends on how long its victims took).

    python -m bench.admission
    python -m bench.admission --pending 0,50,500 --flood 96 --victims 15 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from harvester_quota.apis.kubevirt import LABEL_MIGRATION_JOB
from harvester_quota.config.kubevirt import settings_from
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.config import ClientConfig
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.testbench.scale.stats import percentile
from harvester_quota.testbench.sim.kubevirt.objects import (
    VMSpec,
    parse_version,
    render_launcher_pod,
    render_migration,
    render_vm,
    render_vmi,
    vm_resources,
)
from harvester_quota.util.annotations import LABEL_DEFAULT_RESOURCE_QUOTA, LABEL_ROOM_HELD, TRUE
from harvester_quota.util.launcher import LauncherSettings, launcher_quota_usage
from harvester_quota.util.resources import ResourceList
from harvester_quota.webhook.caches import WebhookCaches
from harvester_quota.webhook.resources.common import DEFAULT_TARGET_CREATORS
from harvester_quota.webhook.server import WebhookServer
from harvester_quota.webhook.serving import Bounds
from prometheus_client import CollectorRegistry

from bench.report import machine

VERSION: Final = "1.6"
VICTIM: Final = "victim"
VICTIM_PENDING: Final = 5
QUIET: Final = "quiet"
"""A namespace with a managed quota and nothing held: its pods need no rooms worked out."""
ARMS: Final = ("before", "after")
ARM_LABELS: Final = {
    "before": "before (model: slot held across the decision, arrival order, Before caches)",
    "after": "after (as shipped: slot for the read, then the limiter)",
}
API_SERVER_TIMEOUT: Final = 5.0
"""The chart's webhook.timeoutSeconds: an answer later than this never reaches the API server."""
OVER_BASE_CPU: Final = "200k"
"""A flood pod's CPU limit: twice the namespaces' 100k base, so it never fits."""
KUBEVIRT: Final = DEFAULT_TARGET_CREATORS[1]
"""The identity KubeVirt's controller creates target pods as (an accepted target creator)."""


class Before:
    """The caches as the webhook read them before: every admission plans every room (no
    namespace looks quiet), renders every launcher and derives the cluster settings again."""

    def __init__(self, caches: WebhookCaches) -> None:
        self._caches = caches

    def __getattr__(self, name: str) -> Any:
        return getattr(self._caches, name)

    def migrations_under_way(self, _namespace: str) -> bool:
        return True

    def launcher_usage(self, vmi: Mapping[str, Any], settings: LauncherSettings) -> ResourceList:
        return launcher_quota_usage(vmi, settings)

    def kubevirt_settings(self) -> LauncherSettings:
        return settings_from(None, None, configured_version=VERSION)


def new_caches() -> WebhookCaches:
    client = ApiClient(ClientConfig(host="https://127.0.0.1:1", ssl_context=False))
    return WebhookCaches(client, clock=FakeClock(), kubevirt_version=VERSION)


def populate(caches: WebhookCaches, namespace: str, pending: int) -> None:
    """`namespace` with an open managed quota (its base: 100k CPU) and `pending` running VMs,
    each with a migration waiting for its target pod (labelled room-held when there is one)."""
    labels = {LABEL_ROOM_HELD: TRUE} if pending else {}
    caches.namespaces.store.put(
        caches.namespaces.store.prepare({"metadata": {"name": namespace, "labels": labels}})
    )
    hard = {"limits.cpu": "100k", "limits.memory": "100Pi", "requests.memory": "100Pi"}
    caches.quotas.store.put(
        caches.quotas.store.prepare(
            {
                "metadata": {
                    "name": "default-quota",
                    "namespace": namespace,
                    "uid": f"quota-{namespace}",
                    "resourceVersion": "1",
                    "labels": {LABEL_DEFAULT_RESOURCE_QUOTA: "true"},
                },
                "spec": {"hard": hard},
                "status": {"hard": hard, "used": {"limits.cpu": "1"}},
            }
        )
    )
    settings = settings_from(None, None, configured_version=VERSION)
    for index in range(pending):
        _running_vm_migrating(caches, namespace, index, settings)


def migration_uid(namespace: str, index: int) -> str:
    return f"{namespace}-vmi-{index:06d}-vmim"


def _running_vm_migrating(
    caches: WebhookCaches, namespace: str, index: int, settings: LauncherSettings
) -> None:
    spec = VMSpec(f"vm-{index:05d}", cores=1 + index % 4, memory=f"{1 + index % 8}Gi")
    vm = render_vm(spec, namespace, vm_resources(spec, parse_version(VERSION), "1.5"), running=True)
    vmi = render_vmi(vm)
    uid = f"{namespace}-vmi-{index:06d}"
    vmi["metadata"].update(uid=uid, resourceVersion=str(index + 1))
    vmi["metadata"]["creationTimestamp"] = "2026-11-22T10:00:00Z"
    pod = render_launcher_pod(vmi, node=f"node-{index % 50}", settings=settings)
    pod["metadata"].update(name=f"virt-launcher-{spec.name}-src", uid=f"{uid}-pod")
    pod["metadata"]["creationTimestamp"] = "2026-11-22T10:00:00Z"
    pod["status"] = {"phase": "Running"}
    migration = render_migration(namespace, spec.name, name=f"{spec.name}-migration")
    migration["metadata"].update(uid=migration_uid(namespace, index), resourceVersion="1")
    migration["metadata"]["creationTimestamp"] = "2026-11-22T11:00:00Z"
    migration["status"] = {"phase": "Pending"}
    caches._vmis.store.put(caches._vmis.store.prepare(vmi))
    caches.pods.store.put(caches.pods.store.prepare(pod))
    caches._migrations.store.put(caches._migrations.store.prepare(migration))


def _review(request: dict[str, Any]) -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "request": request}).encode()


def pod_review(
    namespace: str,
    name: str,
    *,
    dry_run: bool = False,
    cpu: str = "100m",
    username: str = "tenant",
    labels: Mapping[str, str] | None = None,
) -> bytes:
    resources = {"cpu": cpu, "memory": "64Mi"}
    pod = {
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "x",
                    "resources": {"limits": resources, "requests": resources},
                }
            ]
        },
    }
    return _review(
        {
            "uid": name,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": namespace,
            "name": name,
            "userInfo": {"username": username},
            "object": pod,
            "dryRun": dry_run,
        }
    )


def target_pod_review(namespace: str, name: str) -> bytes:
    """KubeVirt's target pod for the first pending migration of `namespace`, as its controller
    creates it (its identity, the migration's label)."""
    return pod_review(
        namespace,
        name,
        username=KUBEVIRT,
        labels={LABEL_MIGRATION_JOB: migration_uid(namespace, 0)},
    )


def vm_review(namespace: str, name: str) -> bytes:
    """A dry-run create of a running VM (no instance yet): the VM rule works every room out."""
    vm = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "running": True,
            "template": {
                "spec": {
                    "domain": {
                        "cpu": {"cores": 1},
                        "resources": {"requests": {"memory": "64Mi"}},
                    }
                }
            },
        },
    }
    return _review(
        {
            "uid": name,
            "kind": {"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachine"},
            "operation": "CREATE",
            "namespace": namespace,
            "name": name,
            "userInfo": {"username": "tenant"},
            "object": vm,
            "dryRun": True,
        }
    )


@dataclass(frozen=True)
class Kind:
    """One kind of admission: its endpoint and its body for (namespace, name)."""

    endpoint: str
    body: Callable[[str, str], bytes]


FLOODS: Final = {
    "dry-run pods": Kind("pods", lambda ns, name: pod_review(ns, name, dry_run=True)),
    "over-base pods": Kind("pods", lambda ns, name: pod_review(ns, name, cpu=OVER_BASE_CPU)),
    "dry-run VMs": Kind("virtualmachines", vm_review),
}
VICTIMS: Final = (
    ("victim pod", Kind("pods", lambda _ns, name: pod_review(VICTIM, name))),
    ("victim target pod", Kind("pods", lambda _ns, name: target_pod_review(VICTIM, name))),
    ("quiet pod", Kind("pods", lambda _ns, name: pod_review(QUIET, name))),
)
"""The flood's victims, in turn: a pod create where room is held (checked against the base),
KubeVirt's target pod of a migration there (never denied; a place of its own after), and a pod
create where nothing is held (answered without working out rooms)."""


@dataclass(frozen=True)
class Answer:
    seconds: float
    refused: bool
    """Answered 429: by the read slots, or denied with code 429 by the limiter."""
    allowed: bool


Handler = Callable[[WebhookServer, str, bytes], Awaitable[tuple[bool, bytes]]]
"""Serves one admission body at an endpoint as a handler does: (refused by the slots, answer)."""


async def holding_the_slot(server: WebhookServer, endpoint: str, body: bytes) -> tuple[bool, bytes]:
    """The handler's old shape: a read slot held across the whole decision."""
    if not await server.slots.acquire():
        return True, b""
    try:
        answer = await server.review(endpoint, body)
    finally:
        server.slots.release()
    assert isinstance(answer.body, bytes)
    return answer.status != 200, answer.body


async def reading_in_a_slot(
    server: WebhookServer, endpoint: str, body: bytes
) -> tuple[bool, bytes]:
    """The handler as shipped: a read slot for the read only (the body is in memory here), then
    the review, which takes a place of the limiter."""
    if not await server.slots.acquire():
        return True, b""
    server.slots.release()
    answer = await server.review(endpoint, body)
    assert isinstance(answer.body, bytes)
    return answer.status != 200, answer.body


@dataclass
class Arm:
    server: WebhookServer
    handler: Handler


async def admit(arm: Arm, endpoint: str, body: bytes, arrived: float | None = None) -> Answer:
    """One admission through `arm`'s handler, timed from `arrived` (perf_counter; default now)."""
    started = time.perf_counter() if arrived is None else arrived
    refused, text = await arm.handler(arm.server, endpoint, body)
    seconds = time.perf_counter() - started
    if refused:
        return Answer(seconds, True, False)
    response = json.loads(text)["response"]
    code = (response.get("status") or {}).get("code")
    return Answer(seconds, code == 429, bool(response.get("allowed")))


def arms_on(caches: WebhookCaches) -> dict[str, Arm]:
    """The two arms on the same caches (see the module docstring)."""
    return {
        "before": Arm(
            WebhookServer(Before(caches), bounds=Bounds(fair=False), registry=CollectorRegistry()),
            holding_the_slot,
        ),
        "after": Arm(WebhookServer(caches, registry=CollectorRegistry()), reading_in_a_slot),
    }


@dataclass
class Samples:
    answers: dict[tuple[str, ...], list[Answer]] = field(default_factory=dict)

    def add(self, key: tuple[str, ...], answer: Answer) -> None:
        self.answers.setdefault(key, []).append(answer)

    def ms(self, key: tuple[str, ...], fraction: float) -> float:
        value = percentile([a.seconds for a in self.answers.get(key, [])], fraction)
        return float("nan") if value is None else value * 1000

    def outcomes(self, key: tuple[str, ...]) -> str:
        """Refused, and answered later than the API server's timeout, of all."""
        found = self.answers.get(key, [])
        late = sum(1 for a in found if a.seconds > API_SERVER_TIMEOUT)
        return f"{sum(a.refused for a in found)} / {late} of {len(found)}"

    def verdicts(self, key: tuple[str, ...]) -> str:
        """Allowed / denied / refused, of all (the flood's own)."""
        found = self.answers.get(key, [])
        refused = sum(a.refused for a in found)
        allowed = sum(a.allowed for a in found)
        return f"{allowed} / {len(found) - refused - allowed} / {refused}"


async def alone(arms: dict[str, Arm], pending: list[int], admissions: int, s: Samples) -> None:
    """Sequential creates in each namespace, both arms, the order of the arms alternated."""
    order = ARMS if len(s.answers) % 2 == 0 else ARMS[::-1]
    for arm in order:
        for count in pending:
            for index in range(admissions):
                body = pod_review(f"tenant-{count}", f"{arm}-{count}-{index}")
                s.add((arm, str(count)), await admit(arms[arm], "pods", body))


@dataclass(frozen=True)
class Flood:
    """`clients` flood clients, each sending again as soon as it is answered; `victims`
    admissions of the victims, one every `every` seconds, once the flood is in the webhook."""

    clients: int
    victims: int
    every: float


async def flood(arm: Arm, name: str, kind: str, pending: int, *, plan: Flood, s: Samples) -> None:
    """`plan`'s flood of `kind` from the namespace with `pending` migrations, and its victims
    (in turn, each timed from its arrival), until every victim is answered."""
    flooding = FLOODS[kind]
    namespace = f"tenant-{pending}"
    stop, answered = asyncio.Event(), asyncio.Event()

    async def client(index: int) -> None:
        sent = 0
        while not stop.is_set():
            body = flooding.body(namespace, f"flood-{name}-{kind[:7]}-{pending}-{index}-{sent}")
            s.add((name, kind, str(pending), "flood"), await admit(arm, flooding.endpoint, body))
            answered.set()
            sent += 1
            await asyncio.sleep(0)  # the round trip: a refusal here never waits on anything

    clients = [asyncio.ensure_future(client(index)) for index in range(plan.clients)]
    await answered.wait()  # the flood has taken what it can of the webhook
    victims: list[tuple[str, asyncio.Future[Answer]]] = []
    for index in range(plan.victims):
        who, victim = VICTIMS[index % len(VICTIMS)]
        body = victim.body(VICTIM, f"{who.replace(' ', '-')}-{name}-{kind[:7]}-{pending}-{index}")
        arrived = time.perf_counter()  # its wait for the loop's first turn counts too
        victims.append((who, asyncio.ensure_future(admit(arm, victim.endpoint, body, arrived))))
        await asyncio.sleep(plan.every)
    for who, task in victims:
        s.add((name, kind, str(pending), who), await task)
    stop.set()
    for task in clients:  # what is still in flight goes, as from a client that gave up
        task.cancel()
    await asyncio.gather(*clients, return_exceptions=True)


async def warm(arms: dict[str, Arm], pending: list[int]) -> None:
    """One admission of each kind in each namespace through each arm, untimed: the caches'
    indexes and the render cache filled before anything is measured."""
    for arm in arms.values():
        for count in pending:
            for kind in FLOODS.values():
                await admit(arm, kind.endpoint, kind.body(f"tenant-{count}", f"warm-{count}"))
        for who, victim in VICTIMS:
            await admit(arm, victim.endpoint, victim.body(VICTIM, f"warm-{who.replace(' ', '-')}"))


def _ratio(after: float, before: float) -> str:
    return f"{after / before:.3f}" if before > 0 else "n/a"


def alone_table(pending: list[int], s: Samples) -> list[str]:
    lines = [
        "| pending migrations | before p50 / p99 ms | after p50 / p99 ms | p99 after / before |",
        "|---:|---:|---:|---:|",
    ]
    for count in pending:
        b, a = ("before", str(count)), ("after", str(count))
        lines.append(
            f"| {count} | {s.ms(b, 0.5):.2f} / {s.ms(b, 0.99):.2f} | "
            f"{s.ms(a, 0.5):.2f} / {s.ms(a, 0.99):.2f} | "
            f"{_ratio(s.ms(a, 0.99), s.ms(b, 0.99))} |"
        )
    return lines


def flood_table(kind: str, pending: list[int], s: Samples) -> list[str]:
    lines = [
        f"Flood of {kind}:",
        "",
        "| pending | who | before p50 / p99 ms | before refused / over 5 s | "
        "after p50 / p99 ms | after refused / over 5 s | p99 after / before |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for count in pending:
        for who in (*(who for who, _kind in VICTIMS), "flood"):
            b, a = ("before", kind, str(count), who), ("after", kind, str(count), who)
            lines.append(
                f"| {count} | {who} | {s.ms(b, 0.5):,.1f} / {s.ms(b, 0.99):,.1f} | "
                f"{s.outcomes(b)} | {s.ms(a, 0.5):,.1f} / {s.ms(a, 0.99):,.1f} | "
                f"{s.outcomes(a)} | {_ratio(s.ms(a, 0.99), s.ms(b, 0.99))} |"
            )
    lines += ["", "The flood's own answers, allowed / denied / refused:", ""]
    lines += ["| pending | before | after |", "|---:|---:|---:|"]
    for count in pending:
        b, a = ("before", kind, str(count), "flood"), ("after", kind, str(count), "flood")
        lines.append(f"| {count} | {s.verdicts(b)} | {s.verdicts(a)} |")
    return lines


async def run(args: argparse.Namespace) -> list[str]:
    caches = new_caches()
    for count in args.pending:
        populate(caches, f"tenant-{count}", count)
    populate(caches, VICTIM, VICTIM_PENDING)
    populate(caches, QUIET, 0)
    arms = arms_on(caches)
    await warm(arms, args.pending)
    quiet, flooded = Samples(), Samples()
    plan = Flood(args.flood, args.victims, args.every)
    for round_ in range(args.rounds):
        if args.admissions:
            await alone(arms, args.pending, args.admissions, quiet)
        for count in args.pending:
            for kind in FLOODS:
                order = ARMS if round_ % 2 == 0 else ARMS[::-1]
                for arm in order:
                    await flood(arms[arm], arm, kind, count, plan=plan, s=flooded)
        print(f"round {round_ + 1} of {args.rounds} done", flush=True)
    lines = [f"arms: {ARM_LABELS['before']}; {ARM_LABELS['after']}", ""]
    if args.admissions:
        lines += ["One namespace alone, sequential pod creates:", ""]
        lines += [*alone_table(args.pending, quiet), ""]
    for kind in FLOODS:
        lines += [*flood_table(kind, args.pending, flooded), ""]
    return lines


def _sizes(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.admission",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--pending", type=_sizes, default=[0, 50, 500])
    parser.add_argument(
        "--admissions", type=int, default=0, help="sequential creates per namespace and round"
    )
    parser.add_argument(
        "--flood", type=int, default=96, help="flood clients, each sending again when answered"
    )
    parser.add_argument("--victims", type=int, default=15, help="victim admissions per flood")
    parser.add_argument(
        "--every", type=float, default=0.0, help="seconds between two victim admissions"
    )
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(f"machine: {machine()}", flush=True)
    started = time.monotonic()
    lines = asyncio.run(run(args))
    print("\n".join(lines))
    print(f"{time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
