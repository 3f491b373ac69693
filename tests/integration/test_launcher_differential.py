"""Differential test: the launcher pod the REAL virt-controller renders against our computation.

For each KubeVirt version built locally, a matrix of VMIs is created (already defaulted, as virt-api
would leave them) under several KubeVirt CR configurations. Each launcher pod's quota usage, as the
Kubernetes pod quota evaluator charges it, must equal exactly what production computes: settings
from `settings_from(<the KubeVirt CR as read>, None).for_namespace(<its quotas>, <namespace>)`, then
`launcher_quota_usage`. The pods need not run: what quota charges is fixed at creation.

Cases are grouped by CR configuration. Each configuration carries its own cpuAllocationRatio, a
marker: a fresh probe VMI without a cpu request shows requests.cpu = 1/ratio once virt-controller's
informer has the new CR, and only then are the group's VMIs created (all at once). The groups:

- default (no ratio): topologies 1x1x1 to 4x2x1 and 4x1x2, 1Gi to 64Gi, with requests, requests
  and limits, neither, limits only; dedicated CPUs, no graphics device, downward metrics,
  masquerade, bridge (virtio and e1000), no serial-console log, no spec.architecture;
- ratio 1.5, two network binding plugins (one with a sidecar), supportContainerResources for the
  console log and sidecars, an autoCPULimitNamespaceLabelSelector;
- ratio 4.5, useEmulation, defaultArchitecture arm64 (VMIs with and without spec.architecture);
- memoryOvercommit 150, disableSerialConsoleLog, feature gates, container disks, virtiofs, hook
  sidecars, isolated emulator thread, IOThreads, hugepages, overcommitGuestOverhead, TPM, VSOCK,
  GPUs and host devices (permitted in the CR), supportContainerResources for the rest;
- ImageVolume enabled in featureGates, then ImageVolume and ExternalNetResourceInjection in
  disabledFeatureGates (read from v1.8; v1.9 turns both Beta gates on by default, so the other
  groups run with them on there): container disks (one by tag, one by digest) and a kernel-boot
  image, with limits, dedicated CPUs and in the quota's namespace;
- ratio 1.0.

Each group also puts VMIs in a namespace with the auto-memory-limits-ratio label and a quota with
limits.cpu and limits.memory, and in one the CR's selector matches.

Where virt-controller reports the overhead it added (the launcher pod's annotation
kubevirt.io/memory-overhead-bytes: VmiMemoryOverheadReport, on by default from v1.9, where every
pod must carry it), that number must equal ours (`rendered_memory_overhead`) too: a room sized
from KubeVirt's report would be the room we size, without trusting an annotation a tenant may edit.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from harvester_quota.config.kubevirt import settings_from
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.localcluster.cluster import KUBEVIRT_NAMESPACE
from harvester_quota.testbench.localcluster.rest import ApiError, RestClient
from harvester_quota.util.kubevirtversion import parse_kubevirt_version
from harvester_quota.util.launcher import (
    LauncherSettings,
    launcher_quota_usage,
    rendered_memory_overhead,
)
from harvester_quota.util.launcher.settings import AUTO_MEMORY_LIMITS_RATIO_LABEL
from harvester_quota.util.podusage import ResourceList, pod_quota_usage
from harvester_quota.util.quantity import Quantity

from tests.helpers import wait_until
from tests.integration import real_kubevirt
from tests.integration.real_kubevirt import VMIS, create_namespace, launcher_pods

pytestmark = pytest.mark.integration

kubevirt_cluster = real_kubevirt.kubevirt_cluster
kv_rest = real_kubevirt.kv_rest

KUBEVIRT_CR = f"/apis/kubevirt.io/v1/namespaces/{KUBEVIRT_NAMESPACE}/kubevirts/kubevirt"
POD_TIMEOUT = 90.0
"""Every launcher pod of a group (up to ~30 at once) on a loaded 2-core machine."""

OVERHEAD_ANNOTATION = "kubevirt.io/memory-overhead-bytes"
AUTO_CPU_LABEL = "diff.harvesterhci.io/auto-cpu"
PLUGIN_WITH_SIDECAR = "sidecar-plugin"
PLUGIN_OVERHEAD_ONLY = "overhead-plugin"


# ------------------------------------------------------------------------------------------------
# VMIs, as virt-api's defaulting would leave them


def vmi_spec(
    cores: int = 1,
    sockets: int = 1,
    threads: int = 1,
    memory: str = "1Gi",
    *,
    requests: bool = True,
    limits: bool = False,
    interface: str | None = None,
    model: str | None = None,
    dedicated: bool = False,
    devices: Mapping[str, Any] | None = None,
    architecture: str | None = "amd64",
) -> dict[str, Any]:
    """A defaulted VMI spec: topology, model, machine, guest memory; requests (cpu 100m and the
    guest memory, as virt-api sets them) and limits (vCPUs and guest memory) on demand; one pod
    network interface with `interface` as its binding (a KubeVirt binding or a plugin name)."""
    vcpus = cores * sockets * threads
    cpu: dict[str, Any] = {
        "cores": cores,
        "sockets": sockets,
        "threads": threads,
        "model": "host-model",
    }
    if dedicated:
        cpu["dedicatedCpuPlacement"] = True
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = {"memory": memory}
        if not dedicated:
            resources["requests"]["cpu"] = "100m"
    if limits:
        resources["limits"] = {"cpu": str(vcpus), "memory": memory}
    spec: dict[str, Any] = {
        "domain": {
            "cpu": cpu,
            "memory": {"guest": memory},
            "machine": {"type": "q35"},
            "resources": resources,
            "devices": dict(devices or {}),
        },
        "terminationGracePeriodSeconds": 0,
    }
    if architecture is not None:
        spec["architecture"] = architecture
    if interface is not None:
        iface: dict[str, Any] = {"name": "default"}
        if interface in ("masquerade", "bridge"):
            iface[interface] = {}
        else:
            iface["binding"] = {"name": interface}
        if model is not None:
            iface["model"] = model
        spec["domain"]["devices"]["interfaces"] = [iface]
        spec["networks"] = [{"name": "default", "pod": {}}]
    else:
        spec["domain"]["devices"].setdefault("autoattachPodInterface", False)
    return spec


@dataclass(frozen=True)
class Case:
    name: str
    spec: dict[str, Any]
    namespace: str = "plain"
    """plain (no label, no quota), limits (the ratio label and a quota with limits.cpu and
    limits.memory) or selected (matches the CR's autoCPULimitNamespaceLabelSelector)."""
    annotations: Mapping[str, str] = field(default_factory=dict)


def _topology_cases(prefix: str, namespace: str = "plain") -> list[Case]:
    """Topologies and memory sizes, each with and without requests and limits."""
    topologies = [
        (1, 1, 1, "1Gi"),
        (2, 1, 1, "2Gi"),
        (4, 2, 1, "8Gi"),
        (2, 2, 2, "16Gi"),
        (4, 1, 2, "64Gi"),
    ]
    resources = [("req", True, False), ("req-lim", True, True), ("none", False, False)]
    cases = []
    for cores, sockets, threads, memory in topologies:
        for label, requests, limits in resources:
            cases.append(
                Case(
                    f"{prefix}-{cores}c{sockets}s{threads}t-{memory.lower()}-{label}",
                    vmi_spec(cores, sockets, threads, memory, requests=requests, limits=limits),
                    namespace,
                )
            )
    cases.append(
        Case(
            f"{prefix}-lim-only", vmi_spec(2, memory="3Gi", requests=False, limits=True), namespace
        )
    )
    return cases


def _feature_cases(prefix: str, namespace: str = "plain") -> list[Case]:
    return [
        Case(f"{prefix}-dedicated", vmi_spec(2, memory="4Gi", dedicated=True), namespace),
        Case(
            f"{prefix}-dedicated-lim",
            vmi_spec(4, memory="4Gi", dedicated=True, limits=True, interface="masquerade"),
            namespace,
        ),
        Case(
            f"{prefix}-no-graphics",
            vmi_spec(2, memory="2Gi", devices={"autoattachGraphicsDevice": False}),
            namespace,
        ),
        Case(
            f"{prefix}-downward-metrics",
            vmi_spec(1, memory="2Gi", devices={"downwardMetrics": {}}),
            namespace,
        ),
        Case(f"{prefix}-masquerade", vmi_spec(2, memory="4Gi", interface="masquerade"), namespace),
        Case(
            f"{prefix}-bridge-e1000",
            vmi_spec(1, memory="1Gi", interface="bridge", model="e1000"),
            namespace,
        ),
        Case(f"{prefix}-bridge", vmi_spec(2, memory="6Gi", interface="bridge"), namespace),
        Case(
            f"{prefix}-no-serial-log",
            vmi_spec(1, memory="1Gi", devices={"logSerialConsole": False}),
            namespace,
        ),
    ]


# ------------------------------------------------------------------------------------------------
# KubeVirt CR configurations


@dataclass(frozen=True)
class Config:
    name: str
    cpu_allocation_ratio: int
    """A marker as well: distinct per configuration, it shows when virt-controller has the CR."""
    configuration: dict[str, Any]
    cases: list[Case] = field(default_factory=list)

    def spec_configuration(self) -> dict[str, Any]:
        configuration = copy.deepcopy(self.configuration)
        developer = configuration.setdefault("developerConfiguration", {})
        developer["cpuAllocationRatio"] = self.cpu_allocation_ratio
        return configuration


BINDINGS = {
    PLUGIN_WITH_SIDECAR: {
        "sidecarImage": "registry.example/binding-sidecar:v1",
        "computeResourceOverhead": {"requests": {"memory": "300Mi"}},
    },
    PLUGIN_OVERHEAD_ONLY: {
        "domainAttachmentType": "tap",
        "computeResourceOverhead": {"requests": {"memory": "150Mi"}},
    },
}

SUPPORT_CONTAINERS = [
    {
        "type": "guest-console-log",
        "resources": {
            "requests": {"cpu": "20m", "memory": "50M"},
            "limits": {"cpu": "40m", "memory": "90M"},
        },
    },
    {
        "type": "sidecar",
        "resources": {
            "requests": {"cpu": "30m", "memory": "40Mi"},
            "limits": {"cpu": "120m", "memory": "100Mi"},
        },
    },
]


GPU = "nvidia.com/TU104GL_Tesla_T4"
HOST_DEVICE = "intel.com/qat"


def _with(spec: dict[str, Any], **domain: Any) -> dict[str, Any]:
    """`spec` with more spec.domain fields (merged one level deep) and spec.volumes, if given as
    `volumes`."""
    volumes = domain.pop("volumes", None)
    spec = copy.deepcopy(spec)
    for key, value in domain.items():
        if isinstance(value, Mapping) and isinstance(spec["domain"].get(key), dict):
            spec["domain"][key].update(value)
        else:
            spec["domain"][key] = value
    if volumes is not None:
        spec["volumes"] = volumes
    return spec


def _extra_cases() -> list[Case]:
    container_disk = {
        "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
        "volumes": [{"name": "root", "containerDisk": {"image": "registry.example/os:1"}}],
    }
    virtiofs = {
        "devices": {"filesystems": [{"name": "cfg", "virtiofs": {}}]},
        "volumes": [{"name": "cfg", "configMap": {"name": "cfg"}}],
    }
    return [
        Case("x-no-requests", vmi_spec(2, memory="4Gi", requests=False)),
        Case("x-requests", vmi_spec(2, memory="4Gi")),
        Case("x-limits-only", vmi_spec(2, memory="4Gi", requests=False, limits=True)),
        Case("x-serial-log-on", vmi_spec(1, devices={"logSerialConsole": True})),
        Case("x-container-disk", _with(vmi_spec(2, memory="2Gi"), **container_disk)),
        Case(
            "x-container-disk-dedicated",
            _with(vmi_spec(2, memory="2Gi", dedicated=True), **container_disk),
        ),
        Case("x-virtiofs", _with(vmi_spec(1, memory="2Gi"), **virtiofs)),
        Case(
            "x-hook-sidecar",
            vmi_spec(1, memory="1Gi"),
            annotations={"hooks.kubevirt.io/hookSidecars": '[{"image": "registry.example/h:1"}]'},
        ),
        Case(
            "x-isolate-emulator",
            _with(vmi_spec(2, memory="2Gi", dedicated=True), cpu={"isolateEmulatorThread": True}),
        ),
        Case(
            "x-io-threads",
            _with(
                vmi_spec(2, memory="2Gi"),
                ioThreadsPolicy="supplementalPool",
                ioThreads={"supplementalPoolThreadCount": 2},
            ),
        ),
        Case(
            "x-io-threads-dedicated",
            _with(
                vmi_spec(2, memory="2Gi", dedicated=True),
                ioThreadsPolicy="supplementalPool",
                ioThreads={"supplementalPoolThreadCount": 2},
            ),
        ),
        Case(
            "x-hugepages",
            _with(vmi_spec(2, memory="2Gi"), memory={"hugepages": {"pageSize": "2Mi"}}),
        ),
        Case(
            "x-overcommit-guest-overhead",
            _with(vmi_spec(2, memory="2Gi"), resources={"overcommitGuestOverhead": True}),
        ),
        Case("x-tpm", vmi_spec(1, memory="2Gi", devices={"tpm": {}})),
        Case("x-vsock", vmi_spec(1, memory="2Gi", devices={"autoattachVSOCK": True})),
        Case(
            "x-gpu",
            vmi_spec(2, memory="8Gi", devices={"gpus": [{"name": "g1", "deviceName": GPU}]}),
        ),
        Case(
            "x-host-devices",
            vmi_spec(
                2,
                memory="4Gi",
                devices={
                    "hostDevices": [
                        {"name": "h1", "deviceName": HOST_DEVICE},
                        {"name": "h2", "deviceName": HOST_DEVICE},
                    ]
                },
            ),
        ),
        Case("x-limits-no-requests", vmi_spec(2, memory="4Gi", requests=False), "limits"),
        Case("x-selected", vmi_spec(2, memory="4Gi"), "selected"),
    ]


IMAGE_VOLUME = "ImageVolume"
V19_LAUNCHER_GATES = [IMAGE_VOLUME, "ExternalNetResourceInjection"]
"""The Beta gates that change the launcher pod and that v1.9 turns on by default."""


def _image_cases(prefix: str) -> list[Case]:
    """Container disks and a kernel-boot image: what the ImageVolume gate renders differently."""
    disks = {
        "devices": {
            "disks": [
                {"name": "root", "disk": {"bus": "virtio"}},
                {"name": "data", "disk": {"bus": "virtio"}},
            ]
        },
        "volumes": [
            {"name": "root", "containerDisk": {"image": "registry.example/os:1"}},
            {
                "name": "data",
                "containerDisk": {"image": "registry.example/data@sha256:" + "a" * 64},
            },
        ],
    }
    kernel = {
        "firmware": {
            "kernelBoot": {
                "container": {"image": "registry.example/kernel:1", "kernelPath": "/vmlinuz"}
            }
        }
    }
    return [
        Case(f"{prefix}-disks", _with(vmi_spec(2, memory="2Gi"), **disks)),
        Case(f"{prefix}-disks-limits", _with(vmi_spec(2, memory="2Gi", limits=True), **disks)),
        Case(
            f"{prefix}-disks-dedicated", _with(vmi_spec(2, memory="2Gi", dedicated=True), **disks)
        ),
        Case(f"{prefix}-kernel-boot", _with(vmi_spec(1, memory="1Gi"), **kernel)),
        Case(f"{prefix}-disks-quota-limits", _with(vmi_spec(1, memory="1Gi"), **disks), "limits"),
    ]


def configs() -> list[Config]:
    return [
        Config(
            "default",
            10,
            {},
            [
                *_topology_cases("d"),
                *_feature_cases("d"),
                Case("d-no-arch", vmi_spec(2, memory="2Gi", architecture=None)),
                Case("d-limits-req", vmi_spec(2, memory="2Gi"), "limits"),
                Case("d-limits-req-lim", vmi_spec(2, memory="2Gi", limits=True), "limits"),
                Case("d-limits-dedicated", vmi_spec(2, memory="2Gi", dedicated=True), "limits"),
                Case("d-selected-req", vmi_spec(2, memory="2Gi"), "selected"),
            ],
        ),
        Config(
            "ratio-1.5-plugins-support",
            8,
            {
                "additionalGuestMemoryOverheadRatio": "1.5",
                "network": {"binding": BINDINGS},
                "supportContainerResources": SUPPORT_CONTAINERS,
                "autoCPULimitNamespaceLabelSelector": {"matchLabels": {AUTO_CPU_LABEL: "yes"}},
            },
            [
                Case("p-sidecar", vmi_spec(2, memory="2Gi", interface=PLUGIN_WITH_SIDECAR)),
                Case(
                    "p-sidecar-dedicated",
                    vmi_spec(2, memory="2Gi", interface=PLUGIN_WITH_SIDECAR, dedicated=True),
                ),
                Case("p-overhead", vmi_spec(1, memory="1Gi", interface=PLUGIN_OVERHEAD_ONLY)),
                Case(
                    "p-overhead-16g",
                    vmi_spec(4, 2, memory="16Gi", limits=True, interface=PLUGIN_OVERHEAD_ONLY),
                ),
                Case("p-masquerade", vmi_spec(2, memory="4Gi", interface="masquerade")),
                Case("p-dedicated", vmi_spec(2, memory="4Gi", dedicated=True)),
                Case("p-selected-req", vmi_spec(2, memory="2Gi"), "selected"),
                Case("p-selected-req-lim", vmi_spec(2, memory="2Gi", limits=True), "selected"),
                Case("p-selected-none", vmi_spec(4, memory="8Gi", requests=False), "selected"),
                Case("p-limits-req", vmi_spec(2, memory="2Gi"), "limits"),
                Case("p-limits-none", vmi_spec(1, memory="5Gi", requests=False), "limits"),
                Case("p-plain-req", vmi_spec(2, 2, memory="8Gi")),
            ],
        ),
        Config(
            "ratio-4.5-emulation-arch",
            5,
            {
                "additionalGuestMemoryOverheadRatio": "4.5",
                "developerConfiguration": {"useEmulation": True},
                "architectureConfiguration": {"defaultArchitecture": "arm64"},
            },
            [
                *_topology_cases("e")[::3],
                Case("e-masquerade", vmi_spec(2, memory="4Gi", interface="masquerade")),
                Case("e-no-arch", vmi_spec(2, memory="2Gi", architecture=None)),
                Case("e-arm64", vmi_spec(2, memory="2Gi", architecture="arm64")),
                Case("e-limits-req", vmi_spec(2, memory="2Gi"), "limits"),
                Case("e-dedicated", vmi_spec(2, memory="4Gi", dedicated=True)),
            ],
        ),
        Config(
            "overcommit-extras",
            2,
            {
                "developerConfiguration": {
                    "memoryOvercommit": 150,
                    "featureGates": ["AutoResourceLimitsGate", "HostDevices", "GPU"],
                },
                "virtualMachineOptions": {"disableSerialConsoleLog": {}},
                "supportContainerResources": [
                    {
                        "type": "container-disk",
                        "resources": {"limits": {"cpu": "50m", "memory": "70M"}},
                    },
                    {"type": "virtiofs", "resources": {"requests": {"cpu": "20m"}}},
                ],
                "permittedHostDevices": {
                    "pciHostDevices": [
                        {"pciVendorSelector": "10DE:1EB8", "resourceName": GPU},
                        {"pciVendorSelector": "8086:4940", "resourceName": HOST_DEVICE},
                    ]
                },
            },
            _extra_cases(),
        ),
        Config(
            "image-volume-enabled",
            20,
            {"developerConfiguration": {"featureGates": [IMAGE_VOLUME]}},
            _image_cases("iv-on"),
        ),
        Config(
            "gates-disabled",
            25,
            {"developerConfiguration": {"disabledFeatureGates": V19_LAUNCHER_GATES}},
            _image_cases("iv-off"),
        ),
        Config(
            "ratio-1.0",
            4,
            {"additionalGuestMemoryOverheadRatio": "1.0"},
            [
                *_topology_cases("o")[1::3],
                Case("o-masquerade", vmi_spec(2, memory="4Gi", interface="masquerade")),
                Case("o-limits-none", vmi_spec(4, memory="64Gi", requests=False), "limits"),
            ],
        ),
    ]


# ------------------------------------------------------------------------------------------------
# The cluster side


@dataclass
class Namespaces:
    plain: str
    limits: str
    selected: str

    def __getitem__(self, key: str) -> str:
        name: str = getattr(self, key)
        return name


@pytest.fixture(scope="module")
def namespaces(kubevirt_cluster: ClusterInfo) -> Iterator[Namespaces]:
    """The three kinds of namespace, with the quota virt-controller's informer has seen."""
    rest = kubevirt_cluster.rest()
    names = Namespaces(
        plain=create_namespace(rest),
        limits=create_namespace(rest, {AUTO_MEMORY_LIMITS_RATIO_LABEL: "1.7"}),
        selected=create_namespace(rest, {AUTO_CPU_LABEL: "yes"}),
    )
    rest.post(
        f"/api/v1/namespaces/{names.limits}/resourcequotas",
        {
            "metadata": {"name": "limits"},
            "spec": {"hard": {"limits.memory": "100Ti", "limits.cpu": "10k", "pods": "1k"}},
        },
    )
    # virt-controller's quota informer decides automatic limits: a probe shows it has the quota.
    _probe(
        rest,
        names.limits,
        vmi_spec(1, memory="1Gi"),
        lambda pod: "memory" in _compute(pod)["resources"].get("limits", {}),
        what="automatic limits in the quota's namespace",
    )
    saved = (rest.get(KUBEVIRT_CR)["spec"].get("configuration") or {}).copy()
    yield names
    _restore_config(rest, saved, names.plain)
    for name in (names.plain, names.limits, names.selected):
        real_kubevirt.delete_namespace(rest, name)


def _restore_config(rest: RestClient, saved: dict[str, Any], plain: str) -> None:
    """Puts the CR's configuration back as the module found it (the cluster is the session's,
    shared with the next module of its version), its CPU allocation ratio (10 unless the CR
    set one) the marker."""
    ratio = int((saved.get("developerConfiguration") or {}).get("cpuAllocationRatio") or 10)
    _set_configuration(rest, saved, ratio, plain, "the configuration the module found")


def _compute(pod: Mapping[str, Any]) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == "compute")


_counter = iter(range(1_000_000))


def _create_vmi(
    rest: RestClient,
    namespace: str,
    name: str,
    spec: Mapping[str, Any],
    annotations: Mapping[str, str] | None = None,
) -> str:
    metadata: dict[str, Any] = {"name": name}
    if annotations:
        metadata["annotations"] = dict(annotations)
    created = rest.post(
        VMIS.format(ns=namespace),
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": metadata,
            "spec": copy.deepcopy(dict(spec)),
        },
    )
    uid: str = created["metadata"]["uid"]
    return uid


def _one_pod(rest: RestClient, namespace: str, uid: str) -> dict[str, Any] | None:
    pods = launcher_pods(rest, namespace, uid)
    return pods[0] if len(pods) == 1 else None


def _probe(
    rest: RestClient,
    namespace: str,
    spec: Mapping[str, Any],
    check: Any,
    *,
    what: str,
    timeout: float = POD_TIMEOUT,
) -> dict[str, Any]:
    """Creates fresh probe VMIs until one's launcher pod passes `check` (virt-controller renders
    from informer caches that may lag an API write); returns that pod."""
    deadline = time.monotonic() + timeout

    def attempt() -> dict[str, Any] | None:
        name = f"probe-{next(_counter)}"
        uid = _create_vmi(rest, namespace, name, spec)
        pod = wait_until(
            lambda: _one_pod(rest, namespace, uid),
            timeout=max(1.0, deadline - time.monotonic()),
            what=f"the launcher pod of {name}",
        )
        return pod if check(pod) else None

    return wait_until(attempt, timeout=timeout, interval=0.5, what=what)


def _apply_config(rest: RestClient, config: Config, plain: str) -> None:
    """Replaces the CR's spec.configuration with `config`'s (`_set_configuration`)."""
    configuration = config.spec_configuration()
    ratio = config.cpu_allocation_ratio
    _set_configuration(rest, configuration, ratio, plain, f"configuration {config.name}")


def _set_configuration(
    rest: RestClient, configuration: dict[str, Any], ratio: int, plain: str, name: str
) -> None:
    """Replaces the CR's spec.configuration; waits until a fresh VMI's pod shows its CPU
    allocation `ratio` (the marker that virt-controller renders by it)."""
    _replace_configuration(rest, configuration)
    expected = Quantity.parse(f"{1000 // ratio}m")
    _probe(
        rest,
        plain,
        vmi_spec(1, memory="1Gi", requests=False),
        lambda pod: Quantity.parse(_compute(pod)["resources"]["requests"]["cpu"]) == expected,
        what=f"virt-controller to use {name}",
    )


CONFLICT_RETRIES = 5
"""Tries of a read-modify-write of the KubeVirt CR that another writer raced (run L: a 409)."""


def _replace_configuration(rest: RestClient, configuration: dict[str, Any]) -> None:
    """Replaces the CR's spec.configuration, read again and retried on a Conflict (as
    client-go's RetryOnConflict): anything else writing the CR meanwhile wins its write."""
    for attempt in range(CONFLICT_RETRIES):
        cr = rest.get(KUBEVIRT_CR)
        cr["spec"]["configuration"] = configuration
        try:
            rest.put(KUBEVIRT_CR, cr)
            return
        except ApiError as error:
            if error.status != 409 or attempt == CONFLICT_RETRIES - 1:
                raise


def _production_settings(rest: RestClient, namespace: str) -> LauncherSettings:
    """Production's settings: from the CR as read, per namespace."""
    kubevirt = rest.get(KUBEVIRT_CR)
    quotas = rest.get(f"/api/v1/namespaces/{namespace}/resourcequotas").get("items", [])
    ns = rest.get(f"/api/v1/namespaces/{namespace}")
    return settings_from(kubevirt, None).for_namespace(quotas, ns)


def _production_usage(rest: RestClient, vmi: Mapping[str, Any], namespace: str) -> ResourceList:
    """What production computes for the VMI's launcher pod."""
    return launcher_quota_usage(vmi, _production_settings(rest, namespace))


def _reported_overhead_differs(
    rest: RestClient, pod: Mapping[str, Any], vmi: Mapping[str, Any], namespace: str
) -> str | None:
    """KubeVirt's own report of the overhead (the pod annotation virt-controller writes with
    VmiMemoryOverheadReport on) against ours; None when equal or not reported."""
    reported = (pod["metadata"].get("annotations") or {}).get(OVERHEAD_ANNOTATION)
    if reported is None:
        return None
    ours = rendered_memory_overhead(vmi, _production_settings(rest, namespace))
    return None if int(reported) == ours else f"    overhead: reported {reported} != ours {ours}"


def _diff(real: ResourceList, ours: ResourceList) -> list[str]:
    lines = []
    for key in sorted(set(real) | set(ours)):
        a, b = real.get(key), ours.get(key)
        if a is None or b is None or a.nanos != b.nanos:
            lines.append(f"    {key}: real {a} ({a and a.nanos}) != ours {b} ({b and b.nanos})")
    return lines


def _containers(pod: Mapping[str, Any]) -> str:
    spec = pod["spec"]
    parts = [
        f"      {c['name']}: {c.get('resources', {})}"
        for c in [*spec.get("initContainers", []), *spec["containers"]]
    ]
    return "\n".join(parts)


def _run_group(rest: RestClient, names: Namespaces, config: Config) -> tuple[list[str], int]:
    """Creates the group's VMIs at once, waits for every launcher pod; returns the mismatches
    (usage, and the overhead KubeVirt reports where it does) and how many pods reported one."""
    created = []
    for case in config.cases:
        namespace = names[case.namespace]
        created.append(
            (case, namespace, _create_vmi(rest, namespace, case.name, case.spec, case.annotations))
        )
    failures = []
    reports = 0
    for case, namespace, uid in created:
        pod = wait_until(
            lambda n=namespace, u=uid: _one_pod(rest, n, u),
            timeout=POD_TIMEOUT,
            what=f"the launcher pod of {case.name}",
        )
        vmi = rest.get(f"{VMIS.format(ns=namespace)}/{case.name}")
        real = pod_quota_usage(pod)
        try:
            ours = _production_usage(rest, vmi, namespace)
        except ValueError as error:
            failures.append(f"  {config.name}/{case.name}: ours raised {error}")
            continue
        lines = _diff(real, ours)
        overhead = _reported_overhead_differs(rest, pod, vmi, namespace)
        reports += OVERHEAD_ANNOTATION in (pod["metadata"].get("annotations") or {})
        if overhead:
            lines.append(overhead)
        if lines:
            failures.append(
                f"  {config.name}/{case.name} ({case.namespace}):\n"
                + "\n".join(lines)
                + "\n    real pod:\n"
                + _containers(pod)
            )
    return failures, reports


@pytest.mark.parametrize("config", configs(), ids=lambda c: c.name)
def test_launcher_pod_quota_usage_matches_production(
    kubevirt_cluster: ClusterInfo, kv_rest: RestClient, namespaces: Namespaces, config: Config
) -> None:
    _apply_config(kv_rest, config, namespaces.plain)
    failures, reports = _run_group(kv_rest, namespaces, config)
    if parse_kubevirt_version(kubevirt_cluster.kubevirt_version or "").at_least(1, 9):
        # VmiMemoryOverheadReport is Beta, so on, from v1.9: every pod carries KubeVirt's number.
        assert reports == len(config.cases), f"{reports} of {len(config.cases)} pods report"
    assert not failures, (
        f"KubeVirt {kubevirt_cluster.kubevirt_version}: {len(failures)} of {len(config.cases)} "
        "launcher pods differ from production's computation:\n" + "\n".join(failures)
    )


def test_cases_have_unique_names() -> None:
    names = [case.name for config in configs() for case in config.cases]
    assert len(names) == len(set(names))
