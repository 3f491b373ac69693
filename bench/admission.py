"""``python -m bench.admission``: what a pod admission costs the webhook as a tenant's namespace
grows, and what one tenant's flood of dry-run creates costs another namespace (issue 38, item 2).

In process, without a cluster: the webhook's own caches (`WebhookCaches`, never connected, their
stores written here as the informers would) and its server's review path behind its admission
slots (`WebhookServer.slots`, 32 at once, then 429 after 1 s, as `handle` does). Two arms side by
side on the same caches, interleaved round by round:

- ``before``: the webhook as it was: every pod create in a namespace with a managed quota plans
  every migration's room, rendering each launcher again, in arrival order (`Before` forces the
  room computation and renders without the cache; `fair=False`);
- ``after``: as shipped: rooms only where room may be held or raised (pod/quiet.py), launchers
  rendered once per VMI version (renders.py), fair turns per namespace (turns.py).

Part one, ``alone``: sequential creates in one namespace with 0, 50 and 500 pending migrations
(each of a running VM), the webhook's time per admission. With 0 the namespace holds nothing;
with pending migrations it holds room, so both arms compute the rooms there and "after" differs
by the render cache only.

Part two, ``flood``: a tenant namespace with 500 pending migrations sends ``--flood`` dry-run
creates at once while a victim namespace (5 pending migrations, room held) sends ``--victims``
creates among them, in turn with creates of a namespace holding nothing (``tenant-0``); each
request's time from its arrival to its answer (slot wait included); then the same flood with
half as many creates of the quiet namespace alone among it;
how many were refused (429 from the slots, or denied 429 by a refused turn), and how many were
answered after the API server's 5 s timeout (which then applies the rule's failure policy: the
fail-open rule passes the pod unchecked). The two arms' servers use the real clock.

    python -m bench.admission
    python -m bench.admission --pending 0,50,500 --admissions 100 --flood 96 --victims 16 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harvester_quota.config.kubevirt import settings_from
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.clock import FakeClock
from harvester_quota.generic.config import ClientConfig
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
from harvester_quota.webhook.server import WebhookServer
from harvester_quota.webhook.serving import Bounds
from prometheus_client import CollectorRegistry

from bench.report import machine

VERSION = "1.6"
VICTIM = "victim"
VICTIM_PENDING = 5
FLOODER_PENDING = 500
VICTIMS = (("victim", VICTIM), ("quiet victim", "tenant-0"))
"""The flood's victims, taking turns: a namespace holding room (its pods are checked, in turns)
and one holding nothing (answered without working out rooms)."""
QUIET_ONLY = ((("quiet victim, no other in turns", "tenant-0"),), "flood, quiet victim only")
"""A second flood whose only victim holds nothing: no other namespace waits for a turn, so only
the crowded slots (turns.CROWDED_AFTER) refuse the flood's share."""
FLOOD_ROWS = (*(who for who, _namespace in VICTIMS), "flood", QUIET_ONLY[0][0][0], QUIET_ONLY[1])
API_SERVER_TIMEOUT = 5.0
"""The chart's webhook.timeoutSeconds: an answer later than this never reaches the API server."""


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
    """`namespace` with an open managed quota and `pending` running VMs, each with a migration
    waiting for its target pod (labelled room-held when there is one)."""
    labels = {LABEL_ROOM_HELD: TRUE} if pending else {}
    caches.namespaces.store.upsert({"metadata": {"name": namespace, "labels": labels}})
    hard = {"limits.cpu": "100k", "limits.memory": "100Pi", "requests.memory": "100Pi"}
    caches.quotas.store.upsert(
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
    settings = settings_from(None, None, configured_version=VERSION)
    for index in range(pending):
        _running_vm_migrating(caches, namespace, index, settings)


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
    migration["metadata"].update(uid=f"{uid}-vmim", resourceVersion="1")
    migration["metadata"]["creationTimestamp"] = "2026-11-22T11:00:00Z"
    migration["status"] = {"phase": "Pending"}
    caches._vmis.store.upsert(vmi)
    caches.pods.store.upsert(pod)
    caches._migrations.store.upsert(migration)


def pod_review(namespace: str, name: str, *, dry_run: bool = False) -> bytes:
    resources = {"cpu": "100m", "memory": "64Mi"}
    pod = {
        "metadata": {"name": name, "namespace": namespace},
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


async def admit(
    server: WebhookServer, body: bytes, arrived: float | None = None
) -> tuple[float, bool]:
    """One admission as `WebhookServer`'s handler makes it (a slot, then the review): its time
    from `arrived` (perf_counter; default: now) to its answer, and whether it was refused (429
    from the slots or in the review)."""
    started = time.perf_counter() if arrived is None else arrived
    if not await server.slots.acquire():
        return time.perf_counter() - started, True
    try:
        answer = await server.review("pods", body)
    finally:
        server.slots.release()
    assert answer.body is not None and isinstance(answer.body, bytes)
    refused = answer.status != 200 or b'"code":429' in answer.body
    return time.perf_counter() - started, refused


@dataclass
class Arms:
    """The two servers on the same caches."""

    before: WebhookServer
    after: WebhookServer

    @classmethod
    def on(cls, caches: WebhookCaches) -> Arms:
        return cls(
            before=WebhookServer(
                Before(caches), bounds=Bounds(fair=False), registry=CollectorRegistry()
            ),
            after=WebhookServer(caches, registry=CollectorRegistry()),
        )

    def of(self, arm: str) -> WebhookServer:
        return self.before if arm == "before" else self.after


@dataclass
class Samples:
    seconds: dict[str, list[float]] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)

    def add(self, key: str, seconds: float, refused: bool) -> None:
        self.seconds.setdefault(key, []).append(seconds)
        self.refused[key] = self.refused.get(key, 0) + int(refused)

    def outcomes(self, key: str) -> str:
        """Refused, and answered later than the API server's timeout (the chart's 5 s: the
        API server would have applied the rule's failure policy), of all."""
        late = sum(1 for seconds in self.seconds.get(key, []) if seconds > API_SERVER_TIMEOUT)
        return f"{self.refused.get(key, 0)} / {late} of {len(self.seconds.get(key, []))}"

    def ms(self, key: str, fraction: float) -> float:
        value = percentile(self.seconds.get(key, []), fraction)
        return float("nan") if value is None else value * 1000


async def alone(arms: Arms, pending: list[int], admissions: int, samples: Samples) -> None:
    """Sequential creates in each namespace, both arms, the order of the arms alternated."""
    for arm in ("before", "after") if len(samples.seconds) % 2 == 0 else ("after", "before"):
        for count in pending:
            for index in range(admissions):
                body = pod_review(f"tenant-{count}", f"{arm}-{count}-{index}")
                seconds, refused = await admit(arms.of(arm), body)
                samples.add(f"{arm}/{count}", seconds, refused)


async def flood(
    arms: Arms,
    arm: str,
    creates: int,
    victims: int,
    samples: Samples,
    *,
    kinds: tuple[tuple[str, str], ...] = VICTIMS,
    flood_key: str = "flood",
) -> None:
    """`creates` dry-run creates of the flooder arrive at once, `victims` creates of `kinds`
    (row, namespace) spread among them, in turn; each one timed from its arrival."""
    server = arms.of(arm)
    every = max(1, creates // max(1, victims))
    tasks: list[tuple[str, asyncio.Future[tuple[float, bool]]]] = []
    for index in range(creates):
        name = f"flood-{arm}-{index}"
        body = pod_review(f"tenant-{FLOODER_PENDING}", name, dry_run=True)
        tasks.append((flood_key, asyncio.ensure_future(admit(server, body, time.perf_counter()))))
        if index % every == every - 1 and index // every < victims:
            who, namespace = kinds[(index // every) % len(kinds)]
            victim = pod_review(namespace, f"{who}-{arm}-{index}")
            arrived = time.perf_counter()
            tasks.append((who, asyncio.ensure_future(admit(server, victim, arrived))))
    for who, task in tasks:
        seconds, refused = await task
        samples.add(f"{arm}/{who}", seconds, refused)


def tables(pending: list[int], quiet: Samples, flooded: Samples) -> list[str]:
    lines = [
        "| pending migrations | before p50 / p99 ms | after p50 / p99 ms | p99 after / before |",
        "|---:|---:|---:|---:|",
    ]
    for count in pending:
        b, a = f"before/{count}", f"after/{count}"
        lines.append(
            f"| {count} | {quiet.ms(b, 0.5):.2f} / {quiet.ms(b, 0.99):.2f} | "
            f"{quiet.ms(a, 0.5):.2f} / {quiet.ms(a, 0.99):.2f} | "
            f"{quiet.ms(a, 0.99) / quiet.ms(b, 0.99):.3f} |"
        )
    lines += [
        "",
        "| flood | before p50 / p99 ms | before refused / over 5 s | after p50 / p99 ms | "
        "after refused / over 5 s | p99 after / before |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for who in FLOOD_ROWS:
        b, a = f"before/{who}", f"after/{who}"
        lines.append(
            f"| {who} | {flooded.ms(b, 0.5):.1f} / {flooded.ms(b, 0.99):.1f} | "
            f"{flooded.outcomes(b)} | "
            f"{flooded.ms(a, 0.5):.1f} / {flooded.ms(a, 0.99):.1f} | "
            f"{flooded.outcomes(a)} | "
            f"{flooded.ms(a, 0.99) / flooded.ms(b, 0.99):.3f} |"
        )
    return lines


async def run(args: argparse.Namespace) -> list[str]:
    caches = new_caches()
    for count in {*args.pending, FLOODER_PENDING}:
        populate(caches, f"tenant-{count}", count)
    populate(caches, VICTIM, VICTIM_PENDING)
    arms = Arms.on(caches)
    quiet, flooded = Samples(), Samples()
    for round_ in range(args.rounds):
        await alone(arms, args.pending, args.admissions, quiet)
        order = ("before", "after") if round_ % 2 == 0 else ("after", "before")
        for arm in order:
            await flood(arms, arm, args.flood, args.victims, flooded)
            kinds, key = QUIET_ONLY
            await flood(
                arms, arm, args.flood, args.victims // 2, flooded, kinds=kinds, flood_key=key
            )
    return tables(args.pending, quiet, flooded)


def _sizes(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.admission", description=__doc__)
    parser.add_argument("--pending", type=_sizes, default=[0, 50, 500])
    parser.add_argument("--admissions", type=int, default=100, help="per namespace and round")
    parser.add_argument("--flood", type=int, default=96, help="dry-run creates at once")
    parser.add_argument("--victims", type=int, default=16, help="victim creates among them")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {machine()}", flush=True)
    started = time.monotonic()
    lines = asyncio.run(run(args))
    print("\n".join(lines))
    print(f"\n{time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
