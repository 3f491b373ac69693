"""Fills the benchmark cluster with virt-launcher-like pods on kwok nodes.

The pods look like what KubeVirt creates for a VM (labels, annotations, a compute container with
KubeVirt's device resources and one log sidecar, KubeVirt's volumes, an ownerReference to the
VirtualMachineInstance), and kwok writes their status, so every cached object carries the
managedFields of two managers and a realistic size (about 11 KB of JSON as served).

Population is idempotent and incremental: pod ``i`` has a fixed name, namespace and node, so the
1k, 10k and 50k runs of one session share the pods, and ``--reuse`` on a kept cluster creates only
what is missing.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from harvester_quota.apis.kubevirt import VIRTUAL_MACHINE_INSTANCES
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import NAMESPACES, PODS, Object, Resource

PODS_PER_NAMESPACE = 1000
"""A Harvester namespace with a thousand VMs is already large; it keeps 50k pods in 50 namespaces."""
CREATE_CONCURRENCY = 48
"""Requests in flight while creating: enough to keep the API server busy on two cores, few enough
that kwok's status writes are not starved."""
NAMESPACE_PREFIX = "bench-"
POPULATION_LABEL = "bench.harvester-quota.io/population"
IMAGE = "registry.suse.com/suse/sles/15.6/virt-launcher:1.3.2-150600.5.9.1"
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")


@dataclass(frozen=True)
class Owner:
    """The object a namespace's pods name in their ownerReference (GC deletes orphans)."""

    api_version: str
    kind: str
    name: str
    uid: str


def namespace_of(index: int) -> str:
    return f"{NAMESPACE_PREFIX}{index // PODS_PER_NAMESPACE:03d}"


def _suffix(index: int) -> str:
    """A stable five-letter suffix, like the one generateName would pick."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    digest = hashlib.blake2b(str(index).encode(), digest_size=8).digest()
    return "".join(alphabet[b % len(alphabet)] for b in digest[:5])


def pod_name(index: int) -> str:
    return f"virt-launcher-vm-{index:05d}-{_suffix(index)}"


def _fake_uid(index: int) -> str:
    digest = hashlib.blake2b(f"vmi-{index}".encode(), digest_size=16).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def launcher_pod(index: int, node: str, owner: Owner) -> Object:
    """A virt-launcher pod as KubeVirt 1.3 creates it for a small VM with one PVC disk."""
    vm = f"vm-{index:05d}"
    namespace = namespace_of(index)
    vmi_uid = _fake_uid(index)
    freeze = f'["/usr/bin/virt-freezer", "--{{}}", "--name", "{vm}", "--namespace", "{namespace}"]'
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(index),
            "namespace": namespace,
            "labels": {
                "kubevirt.io": "virt-launcher",
                "kubevirt.io/created-by": vmi_uid,
                "kubevirt.io/domain": vm,
                "kubevirt.io/size": "small",
                "vm.kubevirt.io/name": vm,
                "harvesterhci.io/vmName": vm,
                POPULATION_LABEL: "launcher",
            },
            "annotations": {
                "kubevirt.io/domain": vm,
                "kubectl.kubernetes.io/default-container": "compute",
                "kubevirt.io/migrationTransportUnix": "true",
                "descheduler.alpha.kubernetes.io/request-evict-only": "",
                "harvesterhci.io/sshNames": "[]",
                "post.hook.backup.velero.io/command": freeze.format("unfreeze"),
                "post.hook.backup.velero.io/container": "compute",
                "pre.hook.backup.velero.io/command": freeze.format("freeze"),
                "pre.hook.backup.velero.io/container": "compute",
            },
            "ownerReferences": [
                {
                    "apiVersion": owner.api_version,
                    "kind": owner.kind,
                    "name": owner.name,
                    "uid": owner.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "nodeName": node,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "hostname": vm,
            "terminationGracePeriodSeconds": 45,
            "readinessGates": [{"conditionType": "kubevirt.io/virtual-machine-unpaused"}],
            "nodeSelector": {
                "kubevirt.io/schedulable": "true",
                "cpu-model-migration.node.kubevirt.io/host-model": "true",
            },
            "securityContext": {
                "runAsUser": 107,
                "runAsGroup": 107,
                "fsGroup": 107,
                "runAsNonRoot": True,
                "seLinuxOptions": {"type": "virt_launcher.process"},
            },
            "containers": [_compute(vm, namespace, vmi_uid), _console_log(vmi_uid)],
            "volumes": _volumes(vm),
        },
    }


def _compute(vm: str, namespace: str, vmi_uid: str) -> Object:
    devices = {
        "devices.kubevirt.io/kvm": "1",
        "devices.kubevirt.io/tun": "1",
        "devices.kubevirt.io/vhost-net": "1",
    }
    return {
        "name": "compute",
        "image": IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": [
            "/usr/bin/virt-launcher-monitor",
            "--qemu-timeout",
            "291s",
            "--name",
            vm,
            "--uid",
            vmi_uid,
            "--namespace",
            namespace,
            "--kubevirt-share-dir",
            "/var/run/kubevirt",
            "--ephemeral-disk-dir",
            "/var/run/kubevirt-ephemeral-disks",
            "--container-disk-dir",
            "/var/run/kubevirt/container-disks",
            "--grace-period-seconds",
            "60",
            "--hook-sidecars",
            "0",
            "--ovmf-path",
            "/usr/share/OVMF",
            "--run-as-nonroot",
        ],
        "env": [
            {"name": "XDG_CACHE_HOME", "value": "/var/run/kubevirt-private"},
            {"name": "XDG_CONFIG_HOME", "value": "/var/run/kubevirt-private"},
            {"name": "XDG_RUNTIME_DIR", "value": "/var/run"},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "resources": {
            "requests": {
                "cpu": "125m",
                "memory": "2294762Ki",
                "ephemeral-storage": "50M",
                **devices,
            },
            "limits": {"cpu": "1", "memory": "2294762Ki", **devices},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
            "privileged": False,
            "runAsGroup": 107,
            "runAsNonRoot": True,
            "runAsUser": 107,
        },
        "volumeMounts": [
            {"name": "private", "mountPath": "/var/run/kubevirt-private"},
            {"name": "public", "mountPath": "/var/run/kubevirt"},
            {"name": "ephemeral-disks", "mountPath": "/var/run/kubevirt-ephemeral-disks"},
            {
                "name": "container-disks",
                "mountPath": "/var/run/kubevirt/container-disks",
                "mountPropagation": "HostToContainer",
            },
            {"name": "libvirt-runtime", "mountPath": "/var/run/libvirt"},
            {"name": "sockets", "mountPath": "/var/run/kubevirt/sockets"},
            {
                "name": "hotplug-disks",
                "mountPath": "/var/run/kubevirt/hotplug-disks",
                "mountPropagation": "HostToContainer",
            },
        ],
        "volumeDevices": [{"name": "disk-0", "devicePath": "/dev/disk-0"}],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }


def _console_log(vmi_uid: str) -> Object:
    return {
        "name": "guest-console-log",
        "image": IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/usr/bin/virt-tail"],
        "args": ["--logfile", f"/var/run/kubevirt-private/{vmi_uid}/virt-serial0-log"],
        "resources": {
            "requests": {"cpu": "5m", "memory": "35M"},
            "limits": {"cpu": "15m", "memory": "60M"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "runAsUser": 107,
        },
        "volumeMounts": [
            {"name": "private", "mountPath": "/var/run/kubevirt-private", "readOnly": True}
        ],
    }


def _volumes(vm: str) -> list[Object]:
    empty = ("private", "public", "sockets", "virt-bin-share-dir", "libvirt-runtime")
    volumes: list[Object] = [{"name": name, "emptyDir": {}} for name in empty]
    volumes += [
        {"name": "ephemeral-disks", "emptyDir": {}},
        {"name": "container-disks", "emptyDir": {}},
        {"name": "hotplug-disks", "emptyDir": {}},
        {"name": "disk-0", "persistentVolumeClaim": {"claimName": f"{vm}-disk-0-7kq2x"}},
    ]
    return volumes


# Creating ------------------------------------------------------------------------------------------


async def _ensure(client: ApiClient, resource: Resource, obj: Object) -> Object:
    """Creates ``obj`` or returns the existing one of the same name."""
    try:
        return await client.create(resource, obj)
    except errors.AlreadyExists:
        metadata = obj["metadata"]
        return await client.get(resource, metadata["name"], metadata.get("namespace"))


async def _has_vmi_kind(client: ApiClient) -> bool:
    try:
        await client.request("GET", "/apis/kubevirt.io/v1")
    except errors.NotFound:
        return False
    return True


async def _prepare_namespace(client: ApiClient, namespace: str, use_vmi: bool) -> Owner:
    """Creates the namespace and the owner its pods point at; waits for its service account."""
    await _ensure(client, NAMESPACES, {"metadata": {"name": namespace}})
    if use_vmi:
        # One VMI per namespace stands in for one per pod: the pods' size is the same, and the
        # garbage collector only needs the owner to exist.
        body: Object = {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": "bench-owner", "namespace": namespace},
            "spec": {"domain": {"devices": {}}},
        }
        created = await _ensure(client, VIRTUAL_MACHINE_INSTANCES, body)
        owner = Owner("kubevirt.io/v1", "VirtualMachineInstance", "bench-owner", "")
    else:
        body = {"metadata": {"name": "bench-owner", "namespace": namespace}}
        created = await _ensure(client, CONFIGMAPS, body)
        owner = Owner("v1", "ConfigMap", "bench-owner", "")
    # Pods need their namespace's default service account (created by kube-controller-manager).
    deadline = time.monotonic() + 60
    while True:
        try:
            await client.get(SERVICE_ACCOUNTS, "default", namespace)
            break
        except errors.NotFound:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
    return Owner(owner.api_version, owner.kind, owner.name, created["metadata"]["uid"])


async def existing_pod_names(client: ApiClient) -> set[str]:
    result = await client.list_all(
        PODS, label_selector=f"{POPULATION_LABEL}=launcher", page_size=5000, request_timeout=300
    )
    return {item["metadata"]["name"] for item in result.items}


async def _create_all(
    client: ApiClient, indices: Iterable[int], nodes: list[str], owners: dict[str, Owner]
) -> int:
    semaphore = asyncio.Semaphore(CREATE_CONCURRENCY)
    created = 0

    async def create(index: int) -> None:
        nonlocal created
        pod = launcher_pod(index, nodes[index % len(nodes)], owners[namespace_of(index)])
        async with semaphore:
            for attempt in range(5):
                try:
                    await client.create(PODS, pod)
                    created += 1
                    return
                except errors.AlreadyExists:
                    return
                except (errors.TooManyRequests, errors.ServerError, errors.ConnectionFailed):
                    if attempt == 4:
                        raise
                    await asyncio.sleep(0.5 * (attempt + 1))

    # Bounded batches keep the number of pending tasks (and their pod dicts) small at 50k.
    batch: list[int] = []
    for index in indices:
        batch.append(index)
        if len(batch) >= 2000:
            await asyncio.gather(*(create(i) for i in batch))
            batch.clear()
    await asyncio.gather(*(create(i) for i in batch))
    return created


async def _any_not_running(client: ApiClient) -> bool:
    """Whether some bench pod is not Running yet.

    One item is enough to know: asking for the pending pods themselves costs the API server one
    serialization of up to thousands of pods per poll, CPU that kwok needs to make them Running.
    """
    page = await client.list(
        PODS,
        label_selector=f"{POPULATION_LABEL}=launcher",
        field_selector="status.phase!=Running",
        limit=1,
        request_timeout=120,
    )
    return bool(page.get("items"))


@dataclass(frozen=True)
class PopulateResult:
    target: int
    created: int
    create_seconds: float
    running_seconds: float


async def populate(
    client: ApiClient, target: int, nodes: list[str], *, running_timeout: float = 1800.0
) -> PopulateResult:
    """Makes pods 0..target-1 exist and be Running; returns what it did and how long it took."""
    started = time.monotonic()
    namespaces = sorted({namespace_of(i) for i in range(target)})
    use_vmi = await _has_vmi_kind(client)
    owners = dict(
        zip(
            namespaces,
            await asyncio.gather(*(_prepare_namespace(client, ns, use_vmi) for ns in namespaces)),
            strict=True,
        )
    )
    existing = await existing_pod_names(client)
    missing = [i for i in range(target) if pod_name(i) not in existing]
    created = await _create_all(client, missing, nodes, owners)
    create_seconds = time.monotonic() - started
    deadline = time.monotonic() + running_timeout
    while await _any_not_running(client):
        if time.monotonic() > deadline:
            raise TimeoutError(f"bench pods still not Running after {running_timeout:.0f}s")
        await asyncio.sleep(2.0)
    return PopulateResult(target, created, create_seconds, time.monotonic() - started)


def node_names(count: int) -> list[str]:
    """The kwok node names ``LocalCluster.up`` creates."""
    return [f"kwok-node-{index}" for index in range(count)]


def sample_sizes(pod: dict[str, Any]) -> dict[str, int]:
    """Bytes of JSON of one served pod, whole and without managedFields (for the report)."""
    import orjson
    from harvester_quota.generic.store import strip_unread_fields

    whole = len(orjson.dumps(pod))
    stripped = len(orjson.dumps(strip_unread_fields(orjson.loads(orjson.dumps(pod)))))
    return {"json_bytes": whole, "json_bytes_transformed": stripped}


async def settle(client: ApiClient, *, quiet: float = 5.0, timeout: float = 900.0) -> float:
    """Waits until no bench pod changed for ``quiet`` seconds; returns the seconds waited.

    kwok writes the status of many pods a second time about a minute after the first (measured:
    ~50 % of them at 10k), so "all Running" is not yet "no more writes"; a run measured while
    kwok still patches would share two cores with it and see MODIFIED events.
    """
    started = time.monotonic()
    page = await client.list(PODS, label_selector=f"{POPULATION_LABEL}=launcher", limit=1)
    version = str(page["metadata"]["resourceVersion"])
    while time.monotonic() - started < timeout:
        stream = client.watch(
            PODS,
            resource_version=version,
            label_selector=f"{POPULATION_LABEL}=launcher",
            allow_bookmarks=False,
            timeout_seconds=int(timeout),
        ).__aiter__()
        try:
            while True:
                event = await asyncio.wait_for(stream.__anext__(), quiet)
                version = str(event.object["metadata"].get("resourceVersion") or version)
        except TimeoutError:
            return time.monotonic() - started
        except StopAsyncIteration:
            continue
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
    raise TimeoutError(f"bench pods still changing after {timeout:.0f}s")


async def count_pods(client: ApiClient) -> int:
    """Every pod in the cluster (what an all-namespaces informer caches)."""
    page = await client.list(PODS, limit=1, resource_version="")
    metadata = page.get("metadata") or {}
    return len(page.get("items") or []) + int(metadata.get("remainingItemCount") or 0)
