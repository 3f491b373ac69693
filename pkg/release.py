"""`harvester-quota release`: give every room back before an uninstall, then say what is left.

What the chart's pre-delete hook runs (and what an operator runs by hand before deleting the
plain manifest). In order:

1. **Grace** (only while the controller Deployment runs): wait, at most `grace` seconds, until
   no migration holds room, so that a migration under way keeps its room to the end (the
   controller gives a room back only once the source pod is gone). New migrations may start
   meanwhile: the grace is a bound, not a promise; a room still standing after it is given back
   in step 3 (its migration then meets the quota as without this product).
2. **Stop the controllers:** the Deployment is scaled to 0 (its former replica count kept in
   memory). A Deployment already gone is no error: nobody else plans the quotas then.
3. **Give back:** this process runs the controllers itself, paused (`run --paused`) and without
   adoption, under the same leader Lease (so it never plans beside a replica still stopping: it
   leads only once that one released the Lease or let it expire, <= 20 s): every room comes down
   with its annotations in one write per quota, adopted quotas go back to Harvester, Rancher's
   annotation back to its own text. MTQ mode is not paused by the switch: a namespace with a
   VMMRQ keeps its raise until its migrations end (<= `--mtq-lock-seconds`), then is restored
   and its finalizer removed.
4. **Check** every `poll` seconds, until nothing is left or `timeout` has passed: `leftovers`
   lists every record of ours still in the cluster (room keys, raise records, adoption markers,
   Rancher records, room-held labels, MTQ locks and finalizers); a room-held label where nothing
   else of ours is left (its quota gone, which the controllers then never plan) is removed here.

Nothing left: exit 0, the Deployment stays at 0 (Helm deletes it next). Something left: the
Deployment is scaled back to its former replicas (the product goes on as before, unpaused) and
the command exits 1 listing what is left, so a failed hook leaves a working release behind, never
a half-removed one. Exit 2: bad input or an API server that cannot be reached.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Final

from . import app
from .apis.mtq import VMMRQS
from .config.management import Options
from .generic import errors
from .generic.client import ApiClient
from .generic.clock import REAL_CLOCK, Clock
from .generic.discovery import list_if_served
from .generic.leader import LeaderElectionConfig, LeaderElector
from .generic.meta import annotations_of, labels, metadata
from .generic.resource import NAMESPACES, RESOURCE_QUOTAS, Object, Resource
from .generic.tasks import cancel_and_wait
from .util.annotations import (
    ANNOTATION_ADOPTED,
    ANNOTATION_MIGRATING_NAME_PREFIX,
    ANNOTATION_PAUSED,
    ANNOTATION_ROOM_MIGRATIONS,
    LABEL_ROOM_HELD,
    TRUE,
)
from .util.mtq import ANNOTATION_LOCK, ANNOTATION_RAISED, FINALIZER, LABEL_LOCKED
from .util.resourcequota.base import (
    ANNOTATION_APPLIED,
    ANNOTATION_RANCHER_APPLIED,
    ANNOTATION_RANCHER_BASE,
    ANNOTATION_RANCHER_GIVEN,
)
from .util.resourcequota.raises import ANNOTATION_ROOMS_SINCE

log = logging.getLogger(__name__)

__all__ = ["DEPLOYMENTS", "Leftover", "ReleaseConfig", "ReleaseResult", "leftovers", "release"]

DEPLOYMENTS: Final = Resource("apps", "v1", "deployments", "Deployment")

ROOM: Final = "room"
"""The Leftover kind of a room still standing on a quota (what the grace waits out)."""

QUOTA_RECORDS: Final[Mapping[str, str]] = {
    ANNOTATION_APPLIED: "record of a raise (harvester-quota.io/applied)",
    ANNOTATION_ROOMS_SINCE: "record of a raise (harvester-quota.io/rooms-since)",
    ANNOTATION_ROOM_MIGRATIONS: "record of a raise (harvester-quota.io/room-migrations)",
    ANNOTATION_ADOPTED: "adopted from Harvester (Harvester's controllers do not raise it)",
    ANNOTATION_RAISED: "raised by MTQ mode (mtq.harvester-quota.io/raised-from)",
}
"""Annotations of ours on a quota that must be gone once every room is given back. The recorded
base (harvester-quota.io/base) may stay: it is spec.hard's own value, read by nobody else."""

NAMESPACE_ANNOTATIONS: Final[Mapping[str, str]] = {
    ANNOTATION_RANCHER_BASE: "Rancher's annotation still raised (harvester-quota.io/rancher-base)",
    ANNOTATION_RANCHER_APPLIED: "Rancher's annotation still raised "
    "(harvester-quota.io/rancher-applied)",
    ANNOTATION_RANCHER_GIVEN: "Rancher's annotation still raised (harvester-quota.io/rancher-given)",
    ANNOTATION_LOCK: "MTQ lock (mtq.harvester-quota.io/lock)",
}
ROOM_HELD: Final = "room-held label (the webhook's fail-closed pods rule)"
NAMESPACE_LABELS: Final[Mapping[str, str]] = {
    LABEL_ROOM_HELD: ROOM_HELD,
    LABEL_LOCKED: "MTQ lock label (mtq.harvester-quota.io/locked)",
}


@dataclass(frozen=True)
class Leftover:
    """One record of ours still in the cluster: which object, and what it says."""

    kind: str
    namespace: str
    name: str
    what: str

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where}: {self.what}"


def quota_leftovers(quota: Object) -> list[Leftover]:
    """A quota's rooms (our `harvesterhci.io/migrating-*` keys; Harvester's own
    `migratingUID-*` keys are its migration controller's, which removes them) and our records."""
    meta = metadata(quota)
    at = (str(meta.get("namespace", "")), str(meta.get("name", "")))
    found = [
        Leftover(ROOM, *at, f"room {key} still in spec.hard")
        for key in sorted(annotations_of(quota))
        if key.startswith(ANNOTATION_MIGRATING_NAME_PREFIX)
    ]
    found += [
        Leftover("ResourceQuota", *at, what)
        for key, what in QUOTA_RECORDS.items()
        if key in annotations_of(quota)
    ]
    return found


def namespace_leftovers(namespace: Object) -> list[Leftover]:
    """A namespace's Rancher records (its `field.cattle.io/resourceQuota` still raised), room-held
    label and MTQ lock."""
    name = str(metadata(namespace).get("name", ""))
    annotations, its_labels = annotations_of(namespace), labels(namespace)
    found = [
        Leftover("Namespace", "", name, w)
        for k, w in NAMESPACE_ANNOTATIONS.items()
        if k in annotations
    ]
    found += [
        Leftover("Namespace", "", name, w) for k, w in NAMESPACE_LABELS.items() if k in its_labels
    ]
    return found


def vmmrq_leftovers(vmmrq: Object) -> list[Leftover]:
    """A VMMRQ carrying our finalizer (deleting it would wait for a controller that is gone)."""
    meta = metadata(vmmrq)
    if FINALIZER not in (meta.get("finalizers") or []):
        return []
    at = (str(meta.get("namespace", "")), str(meta.get("name", "")))
    return [Leftover(VMMRQS.kind, *at, f"finalizer {FINALIZER} (original quotas recorded)")]


async def leftovers(client: ApiClient) -> list[Leftover]:
    """Every record of ours in the cluster, from three cluster-wide lists (quotas, namespaces,
    VMMRQs), read at about the same moment (not one snapshot: a write between the lists may be
    seen half, and the next look sees it whole). Namespaces being deleted are left out, with
    everything in them but our finalizers: their records go with them, and a namespace that
    admits no new object can have no pod let into a raise (the controllers need not plan it, and
    in a full test run one took 108 s to go). A VMMRQ's finalizer of ours does not go with its
    namespace, it holds the namespace's deletion until a controller of ours removes it, so it
    counts wherever it is."""
    quotas, namespaces, vmmrqs = await asyncio.gather(
        list_if_served(client, RESOURCE_QUOTAS),
        list_if_served(client, NAMESPACES),
        list_if_served(client, VMMRQS),
    )
    found = [leftover for quota in quotas for leftover in quota_leftovers(quota)]
    found += [leftover for ns in namespaces for leftover in namespace_leftovers(ns)]
    found += [leftover for vmmrq in vmmrqs for leftover in vmmrq_leftovers(vmmrq)]
    going = {str(metadata(ns).get("name")) for ns in namespaces if terminating(ns)}
    return [
        left
        for left in found
        if left.kind == VMMRQS.kind or (left.namespace or left.name) not in going
    ]


def terminating(namespace: Object) -> bool:
    """Whether the namespace is being deleted (its deletionTimestamp set)."""
    return bool(metadata(namespace).get("deletionTimestamp"))


async def sweep_stray_labels(client: ApiClient, found: list[Leftover]) -> list[Leftover]:
    """Removes the room-held label from namespaces where nothing else of ours is left, and
    returns the leftovers that remain. The controllers plan only namespaces with a managed
    quota, so a label whose quota went (deleted, its namespace terminating) would stay for good;
    with no room key and no raise record of ours there, no raise of ours stands, so removing it
    lets no pod into one. A namespace gone meanwhile is no leftover; a refused write keeps it."""
    busy = {left.namespace for left in found if left.namespace}
    busy |= {left.name for left in found if left.kind == "Namespace" and left.what != ROOM_HELD}
    stray = {left.name for left in found if left.what == ROOM_HELD} - busy
    removed: set[str] = set()
    for name in sorted(stray):
        body = {"metadata": {"labels": {LABEL_ROOM_HELD: None}}}
        try:
            await client.patch(NAMESPACES, name, body)
        except errors.NotFound:
            pass
        except errors.ApiError as error:
            log.warning("release: the room-held label of %s could not be removed: %s", name, error)
            continue
        log.info("release: removed the room-held label of %s (no raise of ours there)", name)
        removed.add(name)
    return [left for left in found if not (left.what == ROOM_HELD and left.name in removed)]


async def leftovers_swept(client: ApiClient) -> list[Leftover]:
    """`leftovers`, with stray room-held labels removed (`sweep_stray_labels`)."""
    return await sweep_stray_labels(client, await leftovers(client))


@dataclass(frozen=True)
class ReleaseConfig:
    """What `release` is told: where the controllers run and how long to wait."""

    options: Options = field(default_factory=Options)
    """The controllers' own (namespace, Lease, mode, KubeVirt version, MTQ): this process plans
    with them, paused and without adoption."""
    deployment: str = "harvester-quota"
    grace: float = 60.0
    timeout: float = 180.0
    poll: float = 2.0


@dataclass
class ReleaseResult:
    """What `release` did and what is left (empty: every room given back)."""

    left: list[Leftover]
    controller_replicas: int | None
    """The controller Deployment's replicas before the release; None when it was gone."""
    waited_for_migrations: float = 0.0

    @property
    def released(self) -> bool:
        return not self.left

    def as_dict(self) -> dict[str, Any]:
        return {
            "released": self.released,
            "left": [asdict(leftover) for leftover in self.left],
            "controller_replicas": self.controller_replicas,
            "waited_for_migrations": round(self.waited_for_migrations, 1),
        }


async def scale(client: ApiClient, namespace: str, name: str, replicas: int) -> None:
    """Sets the Deployment's replicas through its scale subresource."""
    body = {"spec": {"replicas": replicas}}
    await client.patch(DEPLOYMENTS, name, body, namespace, subresource="scale")


async def replicas_of(client: ApiClient, namespace: str, name: str) -> int | None:
    """The Deployment's spec.replicas, or None when it is gone."""
    try:
        deployment = await client.get(DEPLOYMENTS, name, namespace)
    except errors.NotFound:
        return None
    return int((deployment.get("spec") or {}).get("replicas", 1))


async def _until(
    clock: Clock,
    seconds: float,
    poll: float,
    check: Callable[[], Awaitable[list[Leftover]]],
    what: str,
) -> tuple[list[Leftover], float]:
    """Polls `check` (-> leftovers) until it finds none or `seconds` pass; what it last found
    and the seconds spent. A failed look (the API server briefly away) is logged and retried."""
    start = clock.monotonic()
    found: list[Leftover] = []
    while True:
        try:
            found = await check()
        except errors.ApiError as error:
            log.warning("release: looking for %s failed (%s); trying again", what, error)
        else:
            if not found:
                return [], clock.monotonic() - start
        if clock.monotonic() - start >= seconds:
            return found, clock.monotonic() - start
        await clock.sleep(poll)


async def _wait_for_migrations(client: ApiClient, config: ReleaseConfig, clock: Clock) -> float:
    """Step 1: while the controllers still run, at most `grace` seconds for no room to stand."""

    async def rooms() -> list[Leftover]:
        return [left for left in await leftovers(client) if left.kind == ROOM]

    standing, waited = await _until(clock, config.grace, config.poll, rooms, "rooms")
    if standing:
        log.warning(
            "release: %d room(s) still standing after %.0f s of grace; giving them back now",
            len(standing),
            waited,
        )
    return waited


def paused_options(options: Options) -> Options:
    """The controllers' options for the give-back: paused, no adoption, one cold process, and
    the room-held label not kept for good where a Rancher quota is raised directly (it covers
    rooms, and no room will stand again)."""
    return replace(
        options,
        paused=True,
        adopt_harvester_quotas=False,
        warm_standby=False,
        leader_elect=True,
        rancher_direct_fail_closed=False,
    )


@contextlib.asynccontextmanager
async def paused_controllers(
    client: ApiClient, options: Options, clock: Clock
) -> AsyncIterator[LeaderElector]:
    """Step 3: the controllers in this process, paused, leading under the controllers' Lease
    (released on exit), for the block."""
    paused = paused_options(options)
    controllers = app.ControllerApp(client, paused, clock=clock)
    elector = LeaderElector(
        client,
        LeaderElectionConfig(
            paused.namespace,
            paused.lease_name,
            paused.identity,
            annotations={ANNOTATION_PAUSED: TRUE},
        ),
        on_started_leading=controllers.lead,
        on_new_leader=lambda holder: log.info("release: the Lease is held by %s", holder),
        clock=clock,
    )
    task = asyncio.ensure_future(elector.run())
    try:
        yield elector
    finally:
        await cancel_and_wait([task])
        with contextlib.suppress(Exception):
            await controllers.stop()


async def release(
    client: ApiClient, config: ReleaseConfig, clock: Clock = REAL_CLOCK
) -> ReleaseResult:
    """Steps 1-4 of the module's contract; the Deployment is scaled back when something is left.
    Raises ApiError only for a Deployment that cannot be read or scaled (RBAC, the API server
    away): then nothing was changed, or the replicas are as they were."""
    namespace, name = config.options.namespace, config.deployment
    replicas = await replicas_of(client, namespace, name)
    waited = 0.0
    if replicas:
        waited = await _wait_for_migrations(client, config, clock)
    if replicas is not None:
        await scale(client, namespace, name, 0)
        log.info("release: Deployment %s/%s scaled from %d to 0", namespace, name, replicas)
    try:
        async with paused_controllers(client, config.options, clock):
            left, _ = await _until(
                clock, config.timeout, config.poll, lambda: leftovers_swept(client), "leftovers"
            )
    except BaseException:  # cancelled too (the hook's Job past its deadline: SIGTERM)
        if replicas:  # never leave the product stopped by a release that did not finish
            with contextlib.suppress(ScaleBackFailed):
                await scale_back(client, namespace, name, replicas, clock)
        raise
    if left and replicas:
        await scale_back(client, namespace, name, replicas, clock)
        log.warning("release: something is left; Deployment %s scaled back to %d", name, replicas)
    return ReleaseResult(left, replicas, waited)


SCALE_BACK_TRIES: Final = 5
"""Tries to scale the controllers back, a second apart, before the release says it could not."""


class ScaleBackFailed(Exception):
    """The controllers were stopped by the release and could not be scaled back: the operator
    must (the message says the command)."""


async def scale_back(
    client: ApiClient, namespace: str, name: str, replicas: int, clock: Clock
) -> None:
    """Scales the Deployment back to `replicas`, retrying an API error SCALE_BACK_TRIES times a
    second apart (the API server briefly away); ScaleBackFailed, naming the command that does it
    by hand, if it never took. A Deployment gone meanwhile is nothing to scale back."""
    for attempt in range(SCALE_BACK_TRIES):
        try:
            await scale(client, namespace, name, replicas)
            return
        except errors.NotFound:
            return
        except errors.ApiError as error:
            log.warning("release: scaling %s/%s back failed (%s)", namespace, name, error)
            if attempt == SCALE_BACK_TRIES - 1:
                raise ScaleBackFailed(
                    f"the controllers are stopped and could not be scaled back ({error}): "
                    f"kubectl -n {namespace} scale deployment {name} --replicas={replicas}"
                ) from error
            await clock.sleep(1.0)


def render_text(result: ReleaseResult) -> str:
    """The command's report: one line, then one line per leftover."""
    before = result.controller_replicas
    controllers = "gone" if before is None else f"scaled from {before} to 0"
    if result.released:
        return f"released: every room given back, nothing of ours left (controllers {controllers})"
    lines = [f"NOT released: {len(result.left)} record(s) of ours left"]
    if before:
        lines[0] += f"; the controllers are scaled back to {before}"
    lines += [f"  {leftover}" for leftover in result.left]
    return "\n".join(lines)
