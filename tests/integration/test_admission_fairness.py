"""One tenant's flood of admissions, from a namespace with pending migrations, leaves another
namespace's admissions answered and admitted, on the local cluster as users deploy it.

The deployed stack (controllers and webhook as their service accounts, the webhook over TLS,
the shipped configuration), both tenants real identities with the edit and migrate roles.
Each flood admission works out every room of its namespace; a denied create costs the tenant
nothing, and a dry run leaves nothing behind. With the admission slots held across the decision
(the webhook before its admission limiter), a flood from three times as many clients as the 32
slots held them all while it was alone in the turns, and a victim's admission waited in the
slots' line behind the flood's 68 queued ones, unread, until it got 429 after 1 s or the API
server gave up after 5 s (on b6d4d36: the victim's first pod, at the first flood). Now each
namespace has its share of the limiter's places whoever else waits, and KubeVirt's target pods
places of their own.

The flood's clients run in a process of their own, as a tenant's run on machines of their own
(in the test's process they would share the webhook's one event loop), and the victim starts
once every flood client has had an answer: the API server's connections to the webhook are then
up, whose handshakes the limiter does not bound (connections.py). No time is asserted: only that
every victim admission is decided by the webhook (not passed by a fail-open rule past its
timeout, nor refused by a fail-closed one) and admitted, no victim request is answered 429 or
5xx, and the flood is still being decided after the victim's target pod was admitted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from harvester_quota.apis.kubevirt import VIRTUAL_MACHINES
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import NAMESPACES, PODS, Object
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.localcluster.cluster import client_config_from_files
from harvester_quota.testbench.localcluster.deploy import KINDS, apply
from harvester_quota.testbench.localcluster.deploy import (
    webhook_configuration as shipped_webhook_configuration,
)
from harvester_quota.testbench.sim.kubevirt import VMSpec
from harvester_quota.util.annotations import LABEL_ROOM_HELD
from harvester_quota.webhook.admission import Request
from harvester_quota.webhook.server import Validator, WebhookServer

from tests.helpers import eventually
from tests.integration.conftest import fresh_namespace_async
from tests.integration.kubevirt_by_hand import KubeVirtByHand
from tests.integration.tenant import Tenant, small_pod, tenant, token_for, vm_object
from tests.integration.test_webhook_deployed import Stack, stack

pytestmark = pytest.mark.integration
REPOSITORY = Path(__file__).resolve().parents[2]
"""Where the flood's process imports this module from."""
__all__ = ["stack"]  # the deployed controllers and webhook, from test_webhook_deployed.py

FLOODER_VMS = 60
"""Pending migrations in the flooding namespace: each flood admission works out their rooms (about
15 ms of the event loop idle), so the 68 queued ahead of a victim on the code before take longer
than the slots' 1 s, while the few turns a victim's own admission needs now stay well within the
API server's 5 s on a loaded machine (with 150, each turn took a second at load 20)."""
FLOOD_CLIENTS = 100
"""Flood requests in flight at once, each sent again as soon as it is answered (after
REFUSED_PAUSE when refused): three times the webhook's 32 slots, so on the code before 68 of the
flood's wait in the slots' line ahead of any victim."""
OPEN = {"limits.cpu": "1000", "limits.memory": "4000Gi"}
OVER_BASE_CPU = "2000"
"""A denied-create flood pod's CPU limit: twice OPEN's, so the pod rule denies it (room held)."""
KUBEVIRT_VERSION = "1.6"
RATIO = "1.5"
REFUSED = "too many admissions"
"""In the answer to an admission the webhook refused for being one too many (429)."""
REFUSED_PAUSE = 1.0
"""Seconds a flood client waits after a refusal before it sends again; after any other answer
it sends again at once. Sent again at once, the refusals alone kept the webhook's event loop
reading and parsing bodies, a cost the limiter does not bound (limiter.py), and on a loaded
machine the victim's answers then came past the API server's 5 s."""
FLOOD_NICENESS = 5
"""The flood's process runs this much nicer than the test's, as clients elsewhere would not take
the webhook's CPU."""


# The flood's own process ----------------------------------------------------------------------


@dataclass(frozen=True)
class Flood:
    """What the flood's clients send: `body` (named afresh each time) to `resource`."""

    name: str
    resource: str
    body: Object
    dry_run: bool
    expected: str
    """An answer the flood must have had (a substring)."""


def floods(namespace: str) -> tuple[Flood, ...]:
    vm = vm_object(VMSpec("flood", cores=1, memory="1Gi"), namespace, KUBEVIRT_VERSION, RATIO)
    return (
        Flood("denied-creates", "pods", small_pod("flood", OVER_BASE_CPU, "8Mi"), False, "room"),
        Flood("dry-run-vms", "virtualmachines", vm, True, "admitted"),
    )


class FloodRun:
    """One flood in the flood's process: FLOOD_CLIENTS clients sending `flood` with `api` until
    `stop` is set, the answers they had counted by text (the flood's names left out)."""

    def __init__(self, api: ApiClient, namespace: str, flood: Flood) -> None:
        self.api, self.namespace, self.flood = api, namespace, flood
        self.stop = asyncio.Event()
        self.outcomes: Counter[str] = Counter()
        self.answered = 0
        """Clients that had their first answer."""

    async def client(self, index: int) -> None:
        """Sends again as soon as answered (after REFUSED_PAUSE when refused); prints "ready"
        when it is the last client to have its first answer."""
        resource = {"pods": PODS, "virtualmachines": VIRTUAL_MACHINES}[self.flood.resource]
        sent = 0
        while not self.stop.is_set():
            body = {**self.flood.body, "metadata": {"name": f"flood-{index}-{sent}"}}
            answer = await answer_of(
                self.api.create(resource, body, self.namespace, dry_run=self.flood.dry_run)
            )
            self.outcomes[re.sub(r"flood-\d+-\d+", "flood-*", answer)[:160]] += 1
            if sent == 0:
                self.answered += 1
                if self.answered == FLOOD_CLIENTS:
                    print("ready", flush=True)
            sent += 1
            if REFUSED in answer:
                await asyncio.sleep(REFUSED_PAUSE)


async def _flood_main(server: str, ca_file: str, token: str, namespace: str) -> None:
    """The flood process: for each JSON Flood line on stdin, a FloodRun until the next line
    ("stop"); prints "ready" once every client had its first answer (the flood at full
    strength: every connection it needs is up), and at the stop the answers as one JSON line
    (the requests still in flight are not waited for)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    config = client_config_from_files(server, ca_file=ca_file, token=token)
    async with ApiClient(config) as api:
        while line := await reader.readline():
            run = FloodRun(api, namespace, Flood(**json.loads(line)))
            clients = [asyncio.ensure_future(run.client(i)) for i in range(FLOOD_CLIENTS)]
            await reader.readline()
            run.stop.set()
            for sending in clients:
                sending.cancel()
            await asyncio.gather(*clients, return_exceptions=True)
            print(json.dumps(run.outcomes), flush=True)


class FloodProcess:
    """The flood's process, driven from the test: `flooding` runs one Flood while its block
    runs, from the moment every client of it had an answer (the transport's connections, which
    the limiter does not bound, are all up by then), and yields the answers it had once the
    block ended."""

    def __init__(self, process: asyncio.subprocess.Process, namespace: str) -> None:
        self.process = process
        self.namespace = namespace
        """The flooding namespace."""

    @contextlib.asynccontextmanager
    async def flooding(self, flood: Flood) -> AsyncIterator[Counter[str]]:
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps(flood.__dict__).encode() + b"\n")
        await stdin.drain()
        assert await stdout.readline() == b"ready\n", "the flood's process ended"
        outcomes: Counter[str] = Counter()
        try:
            yield outcomes
        finally:
            stdin.write(b"stop\n")
            await stdin.drain()
            line = await stdout.readline()
            assert line, "the flood's process ended"
            outcomes.update(json.loads(line))


@contextlib.asynccontextmanager
async def flood_process(
    cluster: ClusterInfo, token: str, namespace: str
) -> AsyncIterator[FloodProcess]:
    """The flood's process for `namespace`, its clients authenticated by `token`, FLOOD_NICENESS
    nicer than this one; ended (its stdin closed) on exit."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        f"import os; os.nice({FLOOD_NICENESS}); import asyncio; "
        f"from {__name__} import _flood_main; "
        f"asyncio.run(_flood_main(*{[cluster.server, str(cluster.ca_file), token, namespace]!r}))",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        cwd=REPOSITORY,
        env={**os.environ, "PYTHONPATH": str(REPOSITORY)},
    )
    try:
        yield FloodProcess(process, namespace)
    finally:
        if process.stdin is not None:
            process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), 30)
        except TimeoutError:
            process.kill()
            await process.wait()


async def answer_of(create: Awaitable[object]) -> str:
    try:
        await create
    except errors.ApiError as error:
        return error.message
    return "admitted"


# The flooding namespace -----------------------------------------------------------------------


async def migrating_vms(kv: KubeVirtByHand, count: int) -> None:
    """`count` running VMs, each with a pending migration, ten at a time (call it before the
    namespace has a quota: ten launcher pods at once meet quota admission's conflicts with the
    controller's raise, 409)."""

    async def one(index: int) -> None:
        vmi, _source = await kv.start_vm(f"vm{index}", cores=1, memory="1Gi")
        await kv.migrate(vmi)

    for start in range(0, count, 10):
        await asyncio.gather(*(one(i) for i in range(start, min(count, start + 10))))


@contextlib.asynccontextmanager
async def flooder(
    api: ApiClient, cluster: ClusterInfo, server: WebhookServer
) -> AsyncIterator[FloodProcess]:
    """A namespace with FLOODER_VMS pending migrations (room held) under OPEN, the webhook's
    shipped configuration registered for it too, once the webhook's cache has every migration;
    yields the flood process of its tenant (a real identity with the edit roles)."""
    async with fresh_namespace_async(api, "flooder") as flooder_ns:
        kv = KubeVirtByHand(api, flooder_ns)
        await migrating_vms(kv, FLOODER_VMS)
        await kv.create_quota(OPEN)
        await eventually(
            lambda: len(server.lookups.migrations(flooder_ns)) == FLOODER_VMS,
            what="the webhook's cache has the flooder's migrations",
        )
        configuration = shipped_webhook_configuration(
            f"https://127.0.0.1:{server.port}",
            cluster.certificate_authority().cert_pem,
            {"kubernetes.io/metadata.name": flooder_ns},
            name=f"harvester-quota-flooder-{uuid.uuid4().hex[:6]}",
        )
        created = await apply(api, configuration)
        try:
            async with tenant(api, cluster, flooder_ns) as attacker:
                token = await token_for(api, flooder_ns, attacker.name)
                async with flood_process(cluster, token, flooder_ns) as process:
                    yield process
        finally:
            await api.delete(KINDS["ValidatingWebhookConfiguration"], created["metadata"]["name"])


# The victim -----------------------------------------------------------------------------------


@dataclass
class Decisions:
    """What the webhook's rules decided (allowed or denied), as they returned: a spy on the
    server's validators. An admission the API server passed unanswered (a fail-open rule past
    its timeout) or that was refused with 429 never reaches them."""

    names: set[tuple[str, str, str]] = field(default_factory=set)
    """(endpoint, namespace, name) of each admission decided."""
    per_namespace: Counter[str] = field(default_factory=Counter)

    def watch(self, server: WebhookServer, *endpoints: str) -> None:
        for endpoint in endpoints:
            kind, validate = server.validators[endpoint]
            server.validators[endpoint] = (kind, self._watched(endpoint, validate))

    def _watched(self, endpoint: str, validate: Validator) -> Validator:
        def watched(request: Request) -> Awaitable[None] | None:
            try:
                waiting = validate(request)
            except BaseException:
                self._decided(endpoint, request)
                raise
            if waiting is None:
                self._decided(endpoint, request)
                return None
            return self._after(endpoint, request, waiting)

        return watched

    async def _after(self, endpoint: str, request: Request, waiting: Awaitable[None]) -> None:
        try:
            await waiting
        finally:
            self._decided(endpoint, request)

    def _decided(self, endpoint: str, request: Request) -> None:
        self.names.add((endpoint, request.namespace, request.name))
        self.per_namespace[request.namespace] += 1


@dataclass
class Refusals:
    """Every answer of 429 or 5xx a client had, retries included (a request observer: the
    client retries a 429 that carries Retry-After, which would hide a refusal)."""

    seen: list[tuple[str, str, str]] = field(default_factory=list)

    def observe(
        self, method: str, path: str, _params: Mapping[str, str] | None, code: str, _s: float
    ) -> None:
        if code == "429" or code.startswith("5"):
            self.seen.append((method, path, code))


@dataclass
class Victim:
    """The victim namespace's tenant (a real identity) and KubeVirt (its controller's identity)."""

    tenant: Tenant
    kubevirt: KubeVirtByHand
    decisions: Decisions

    async def starts_and_migrates(self, name: str) -> None:
        """The tenant creates a running VM, KubeVirt its VMI and launcher pod (under the pod
        rule that fails closed: room is held), the tenant a migration, KubeVirt the target pod:
        every admission decided by the webhook before the API server answered, and admitted."""
        await self.tenant.create_vm(
            VMSpec(name, cores=1, memory="1Gi"), kubevirt_version=KUBEVIRT_VERSION, ratio=RATIO
        )
        self.answered("virtualmachines", name)
        vmi, source = await self.kubevirt.start_vm(name, cores=1, memory="1Gi")
        self.answered("pods", source["metadata"]["name"])
        migration = await self.tenant.migrate(name, name=f"{name}-mig")
        migration = await self.kubevirt.set_phase(migration, "Pending")
        target = await self.kubevirt.create_target(vmi, migration)
        self.answered("pods", target["metadata"]["name"])

    def answered(self, endpoint: str, name: str) -> None:
        found = (endpoint, self.tenant.namespace, name)
        assert found in self.decisions.names, f"{found} passed without the webhook's answer"


async def victim_labelled(api: ApiClient, namespace: str) -> bool:
    found = await api.get(NAMESPACES, namespace)
    return (found["metadata"].get("labels") or {}).get(LABEL_ROOM_HELD) == "true"


async def test_floods_of_denied_creates_then_dry_run_vm_creates_leave_a_victims_vm_started_and_migrated(
    api: ApiClient, cluster: ClusterInfo, stack: Stack
) -> None:
    """A tenant whose namespace holds room for its pending migrations floods the webhook from a
    hundred clients, first with pod creates over its base (each denied, each free for it), then
    with dry-run creates of running VMs (each rendering the VM and working out every room; a
    dry-run pod create costs the webhook less, and the limiter counts both alike).
    During each, a victim namespace holding room has a VM created, started and migrated: every
    admission of it decided by the webhook and admitted, no request of it refused (429) or
    failed, and KubeVirt's target pod admitted while the flood goes on."""
    admin, kubevirt, _controllers, server = stack
    namespace = admin.namespace
    decisions = Decisions()
    decisions.watch(server, "pods", "virtualmachines")
    await admin.create_quota(OPEN)
    refusals = Refusals()
    async with tenant(api, cluster, namespace) as owner:
        victim = Victim(owner, kubevirt, decisions)
        for client in (owner.api, kubevirt.api):
            client.add_request_observer(refusals)
        await kubevirt.start_vm("resident", cores=1, memory="1Gi")
        resident = await owner.migrate("resident", name="resident-mig")
        await kubevirt.set_phase(resident, "Pending")
        await eventually(
            lambda: victim_labelled(api, namespace), what="the victim namespace holds room"
        )
        async with flooder(api, cluster, server) as process:
            await flood_beside(process, decisions, victim)
    assert not refusals.seen, f"the victim's requests refused or failed: {refusals.seen}"


async def flood_beside(process: FloodProcess, decisions: Decisions, victim: Victim) -> None:
    """Each flood in turn, with the victim's VM started and migrated while it goes on."""
    flooding_ns = process.namespace
    for flood in floods(flooding_ns):
        async with process.flooding(flood) as outcomes:
            before = decisions.per_namespace[flooding_ns]
            await eventually(
                lambda before=before: decisions.per_namespace[flooding_ns] > before,
                interval=0.01,
                what=f"the {flood.name} flood being decided",
            )
            await victim.starts_and_migrates(f"during-{flood.name}")
            decided = decisions.per_namespace[flooding_ns]
            await eventually(
                lambda decided=decided: decisions.per_namespace[flooding_ns] > decided,
                interval=0.01,
                what=f"the {flood.name} flood going on after the victim's target pod",
            )
        assert any(flood.expected in answer for answer in outcomes), (flood.name, outcomes)
