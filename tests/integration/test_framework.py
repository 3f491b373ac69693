"""The controller framework against the real API server: informers through every way a watch
fails, controllers with finalizers, events, and leader election between processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient, ListResult, WatchEvent
from harvester_quota.generic.controller import Controller
from harvester_quota.generic.events import WARNING, EventRecorder
from harvester_quota.generic.informer import (
    ResourceEventHandler,
    SharedInformer,
    SharedInformerFactory,
)
from harvester_quota.generic.reflector import ClientListerWatcher, ItemHook
from harvester_quota.generic.resource import CONFIG_MAPS, EVENTS, LEASES, Object, Resource
from harvester_quota.generic.store import Tombstone
from harvester_quota.testbench.localcluster import ClusterInfo, LocalCluster

from tests.helpers import eventually

pytestmark = pytest.mark.integration

PODTEMPLATES = Resource("", "v1", "podtemplates", "PodTemplate")
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Seen:
    """What an informer's handler was told, as (kind, name) pairs."""

    entries: list[tuple[str, str]] = field(default_factory=list)

    def handler(self) -> ResourceEventHandler:
        def name(obj: Object | Tombstone) -> str:
            return obj.key.split("/")[-1] if isinstance(obj, Tombstone) else obj["metadata"]["name"]

        return ResourceEventHandler(
            on_add=lambda obj, _i: self.entries.append(("add", name(obj))),
            on_update=lambda _o, new: self.entries.append(("update", name(new))),
            on_delete=lambda obj: self.entries.append(
                ("tombstone" if isinstance(obj, Tombstone) else "delete", name(obj))
            ),
        )

    def has(self, kind: str, name: str) -> bool:
        return (kind, name) in self.entries


def configmap(name: str, **data: str) -> Object:
    return {"metadata": {"name": name}, "data": data}


async def test_informer_follows_creates_updates_and_deletes(api: ApiClient, namespace: str) -> None:
    factory = SharedInformerFactory(api, namespace=namespace)
    informer = factory.informer(CONFIG_MAPS)
    seen = Seen()
    informer.add_event_handler(seen.handler())
    factory.start()
    assert await factory.wait_for_cache_sync(30)
    await api.create(CONFIG_MAPS, configmap("one", v="1"), namespace)
    await eventually(lambda: seen.has("add", "one"), what="the add")
    await api.patch(CONFIG_MAPS, "one", {"data": {"v": "2"}}, namespace)
    await eventually(lambda: seen.has("update", "one"), what="the update")
    cached = informer.store.get(f"{namespace}/one")
    assert cached is not None and cached["data"] == {"v": "2"}
    await api.delete(CONFIG_MAPS, "one", namespace)
    await eventually(lambda: seen.has("delete", "one"), what="the delete")
    assert f"{namespace}/one" not in informer.store
    await factory.stop()


async def test_informer_survives_watches_closed_by_the_server(
    api: ApiClient, namespace: str
) -> None:
    lister = ClientListerWatcher(api, CONFIG_MAPS, namespace)
    informer = SharedInformer(lister, name="configmaps")
    informer.reflector.min_watch_timeout = 1  # the server ends each watch after 1 to 2 s
    seen = Seen()
    informer.add_event_handler(seen.handler())
    informer.start()
    assert await informer.wait_for_sync(30)
    for index in range(4):
        await api.create(CONFIG_MAPS, configmap(f"cm-{index}"), namespace)
        watches = informer.reflector.watches
        # The next object is created on the next watch: every add crosses a watch the server ended.
        await eventually(lambda w=watches: informer.reflector.watches > w, what="a new watch")
    await eventually(lambda: all(seen.has("add", f"cm-{i}") for i in range(4)), what="all adds")
    assert informer.reflector.watches >= 3
    assert informer.reflector.lists == 1, "a watch the server ends is resumed, not relisted"
    await informer.stop()


async def test_informer_survives_an_api_server_restart(
    api: ApiClient, namespace: str, local_cluster: LocalCluster
) -> None:
    factory = SharedInformerFactory(api, namespace=namespace)
    informer = factory.informer(CONFIG_MAPS)
    seen = Seen()
    informer.add_event_handler(seen.handler())
    factory.start()
    assert await factory.wait_for_cache_sync(30)
    await api.create(CONFIG_MAPS, configmap("before"), namespace)
    await eventually(lambda: seen.has("add", "before"), what="the add before the restart")
    await asyncio.to_thread(local_cluster.restart_component, "kube-apiserver")
    await eventually_create(api, CONFIG_MAPS, configmap("after"), namespace)
    await eventually(lambda: seen.has("add", "after"), timeout=60, what="the add after the restart")
    assert seen.entries.count(("add", "before")) == 1
    await factory.stop()


async def eventually_create(
    api: ApiClient, resource: Resource, obj: Object, namespace: str
) -> None:
    for _ in range(100):
        try:
            await api.create(resource, obj, namespace)
            return
        except (errors.ConnectionFailed, errors.ServerError):
            await asyncio.sleep(0.3)
    raise AssertionError("the API server did not come back")


@dataclass
class Partition:
    """Cuts an informer off from the API server, like a network partition: the open watch
    breaks and new watches are refused until ``heal``; lists wait."""

    inner: ClientListerWatcher
    connected: asyncio.Event = field(default_factory=asyncio.Event)
    cut: asyncio.Event = field(default_factory=asyncio.Event)
    list_versions: list[str] = field(default_factory=list)
    watch_errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.connected.set()

    def partition(self) -> None:
        self.connected.clear()
        self.cut.set()

    def heal(self) -> None:
        self.cut.clear()
        self.connected.set()

    async def list(
        self, *, resource_version: str, page_size: int, each: ItemHook | None = None
    ) -> ListResult:
        self.list_versions.append(resource_version)
        await self.connected.wait()
        return await self.inner.list(
            resource_version=resource_version, page_size=page_size, each=each
        )

    def watch(self, *, resource_version: str, timeout_seconds: int) -> AsyncIterator[WatchEvent]:
        return self._watch(resource_version, timeout_seconds)

    async def _watch(
        self, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[WatchEvent]:
        if not self.connected.is_set():
            raise errors.ConnectionRefused("partitioned")
        stream = self.inner.watch(
            resource_version=resource_version, timeout_seconds=timeout_seconds
        )
        iterator = stream.__aiter__()
        try:
            while True:
                following = asyncio.ensure_future(anext(iterator))
                cutting = asyncio.ensure_future(self.cut.wait())
                done, _ = await asyncio.wait(
                    {following, cutting}, return_when=asyncio.FIRST_COMPLETED
                )
                cutting.cancel()
                if following not in done:
                    following.cancel()
                    await asyncio.gather(following, return_exceptions=True)
                    raise errors.ConnectionRefused("partitioned")
                try:
                    event = following.result()
                    if event.type == "ERROR":
                        self.watch_errors.append(str(event.object.get("code")))
                    yield event
                except StopAsyncIteration:
                    return
                except errors.ApiError as error:
                    self.watch_errors.append(str(error.status))
                    raise
        finally:
            with contextlib.suppress(Exception):
                await stream.aclose()  # type: ignore[attr-defined]


def podtemplate(name: str, **labels: str) -> Object:
    return {
        "metadata": {"name": name, "labels": labels},
        "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
    }


async def test_compaction_while_disconnected_relists_from_etcd_with_tombstones(
    api: ApiClient, namespace: str, local_cluster: LocalCluster
) -> None:
    """PodTemplates bypass the watch cache on the local cluster, so after an etcd compaction the
    old resourceVersion is really gone: the resumed watch gets 410 Gone, the reflector relists
    from its last version (a "not older than" list, which etcd can still answer) and reports the
    delete it missed as a tombstone. (A list that itself gets 410 falls back to "": unit-tested.)"""
    for name in ("a", "b", "c"):
        await api.create(PODTEMPLATES, podtemplate(name), namespace)
    partition = Partition(ClientListerWatcher(api, PODTEMPLATES, namespace))
    informer = SharedInformer(partition, name="podtemplates")
    seen = Seen()
    informer.add_event_handler(seen.handler())
    informer.start()
    assert await informer.wait_for_sync(30)
    assert sorted(informer.store.list_keys()) == [f"{namespace}/{n}" for n in "abc"]
    version_before = informer.reflector.last_sync_resource_version

    partition.partition()
    await api.delete(PODTEMPLATES, "b", namespace)
    await api.patch(PODTEMPLATES, "a", {"metadata": {"labels": {"changed": "yes"}}}, namespace)
    await api.create(PODTEMPLATES, podtemplate("d"), namespace)
    compacted = await asyncio.to_thread(local_cluster.compact_etcd)
    assert compacted > int(version_before)
    partition.heal()

    await eventually(lambda: seen.has("tombstone", "b"), timeout=60, what="the missed delete")
    await eventually(lambda: seen.has("add", "d") and seen.has("update", "a"), what="the rest")
    assert sorted(informer.store.list_keys()) == [f"{namespace}/{n}" for n in "acd"]
    assert "410" in partition.watch_errors, "the resumed watch was refused with 410"
    assert partition.list_versions == ["0", version_before], (
        "then one relist, from the last version"
    )
    await informer.stop()


async def test_controller_runs_handlers_on_a_change_and_on_the_deletion(
    api: ApiClient, namespace: str
) -> None:
    factory = SharedInformerFactory(api, namespace=namespace)
    controller = Controller(api, factory.informer(CONFIG_MAPS), CONFIG_MAPS, name="cm")
    removed: list[str] = []

    async def stamp(key: str, obj: Object | None) -> Object | None:
        if obj is None or (obj["metadata"].get("annotations") or {}).get("stamped"):
            return obj
        obj["metadata"].setdefault("annotations", {})["stamped"] = "yes"
        return await controller.update(obj)

    async def gone(key: str, obj: Object | None) -> None:
        if obj is None:
            removed.append(key)

    controller.on_change("stamp", stamp)
    controller.on_change("gone", gone)
    factory.start()
    await factory.wait_for_cache_sync(30)
    controller.start()
    await api.create(CONFIG_MAPS, configmap("watched"), namespace)

    async def stamped() -> bool:
        current = await api.get(CONFIG_MAPS, "watched", namespace)
        return bool((current["metadata"].get("annotations") or {}).get("stamped"))

    await eventually(stamped, what="the handler's stamp")
    assert removed == []
    await api.delete(CONFIG_MAPS, "watched", namespace)
    await eventually(lambda: removed == [f"{namespace}/watched"], what="the deletion's run")
    await controller.stop()
    await factory.stop()


async def test_events_are_written_and_counted(api: ApiClient, namespace: str) -> None:
    target = await api.create(CONFIG_MAPS, configmap("subject"), namespace)
    target.setdefault("apiVersion", "v1")
    target.setdefault("kind", "ConfigMap")
    recorder = EventRecorder(api, "harvester-quota-test")
    first = await recorder.record(target, WARNING, "Blocked", "exceeded quota: default")
    again = await recorder.record(target, WARNING, "Blocked", "exceeded quota: default")
    assert first is not None and again is not None
    assert again["metadata"]["name"] == first["metadata"]["name"]
    stored = await api.get(EVENTS, first["metadata"]["name"], namespace)
    assert stored["count"] == 2
    assert stored["involvedObject"]["uid"] == target["metadata"]["uid"]


def start_candidate(cluster: ClusterInfo, lease: str, identity: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.integration.leader_candidate",
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--lease",
            lease,
            "--identity",
            identity,
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


async def stop_candidates(
    api: ApiClient, lease: str, *candidates: subprocess.Popen[str] | None
) -> None:
    """Kills the candidate processes still running and deletes their Lease."""
    for candidate in candidates:
        if candidate is not None and candidate.poll() is None:
            candidate.kill()
            candidate.wait(10)
    with contextlib.suppress(errors.ApiError):
        await api.delete(LEASES, lease, "default")


async def read_line(candidate: subprocess.Popen[str], timeout: float) -> str:
    assert candidate.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(candidate.stdout.readline), timeout)
    return line.strip()


async def read_leading(candidate: subprocess.Popen[str], timeout: float) -> str:
    """The candidate's next LEADING line (without its time), past the OBSERVED lines."""
    while (line := await read_line(candidate, timeout)).startswith("OBSERVED"):
        continue
    return " ".join(line.split()[:2])


@pytest.mark.parametrize(
    "stop_signal", [signal.SIGTERM, signal.SIGKILL], ids=["graceful", "killed"]
)
async def test_leadership_hands_over_when_the_leader_process_stops(
    api: ApiClient, cluster: ClusterInfo, stop_signal: signal.Signals
) -> None:
    lease = f"candidates-{uuid.uuid4().hex[:6]}"
    first = start_candidate(cluster, lease, "first")
    second: subprocess.Popen[str] | None = None
    try:
        assert await read_leading(first, 30) == "LEADING first"
        second = start_candidate(cluster, lease, "second")
        # The second candidate is campaigning and sees the first as the leader, not itself.
        assert await read_line(second, 30) == "OBSERVED first"
        assert second.poll() is None
        started = asyncio.get_running_loop().time()
        first.send_signal(stop_signal)
        assert await read_leading(second, 30) == "LEADING second"
        handover = asyncio.get_running_loop().time() - started
        if stop_signal == signal.SIGTERM:
            assert handover < 4, "a released lease is taken at the next retry"
        else:
            assert handover >= 3, "a dead leader's lease must run out first"
        record = await api.get(LEASES, lease, "default")
        assert record["spec"]["holderIdentity"] == "second"
    finally:
        await stop_candidates(api, lease, first, second)
