"""The virt-launcher pod KubeVirt renders for a VMI, reduced to what a ResourceQuota charges.

The compute container (compute.py) and every other container KubeVirt adds: container disks and
their init containers, the kernel-boot container, virtiofs, hook sidecars, the guest-console-log
sidecar (a native sidecar from v1.6), per KubeVirt version (template.go, renderresources.go).

With the ImageVolume gate on (featuregates.py; on by default from v1.9) a container disk is a
Kubernetes image volume: no container-disk or kernel-boot container and no container-disk-binary
init container. From v1.7 a launcher pod instead gets one small init container per container disk
(and kernel-boot image), `volume<name>`, that only pulls the image so its digest is recorded; a
migration target reuses the digests of its source pod (ExtractImageIDsFromSourcePod) and gets
none. v1.6 renders no init container for them at all.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from ..overhead import SpecSource, as_spec, dedicated_cpu, memory_overhead, wants_guaranteed_qos
from ..podusage import ResourceList, pod_quota_usage
from ..quantity import Quantity
from ..vmispecview import HOOK_SIDECARS_ANNOTATION, SpecView, VolumeView
from .compute import EPHEMERAL_STORAGE_OVERHEAD, compute_resources
from .featuregates import IMAGE_VOLUME
from .limitrange import apply_defaults
from .settings import DEFAULT_LAUNCHER_SETTINGS, LauncherSettings
from .vmiview import VmiView, spec_of

RESTARTABLE: Final = "Always"
"""restartPolicy of a native sidecar (an init container that keeps running)."""
_KERNEL_BOOT_VOLUME: Final = "kernel-boot-volume"
_IMAGE_VOLUME_INITS_SINCE: Final = (1, 7)
"""The first release that pulls an image volume's image in an init container (v1.6: none)."""
MAX_HOOK_SIDECARS: Final = 16
"""The most hook sidecars a VMI's annotation may ask for before the pod is not estimated.

KubeVirt sets no limit (it unmarshals the annotation into a list of sidecar objects), and the
annotation is the VMI owner's to write: unbounded, 18,000 entries made a room of 3,602 CPU. A
launcher with more than 16 hook sidecars is not a VM anyone runs, and 16 keeps the sidecars'
share of a room at 3.2 CPU and 1 GB at most (200m/64M each when dedicated)."""


def _resources_dict(limits: ResourceList, requests: ResourceList) -> dict[str, Any]:
    result: dict[str, Any] = {}
    if limits:
        result["limits"] = {name: str(q) for name, q in limits.items()}
    if requests:
        result["requests"] = {name: str(q) for name, q in requests.items()}
    return result


def _container(
    name: str, limits: ResourceList, requests: ResourceList, *, restartable: bool = False
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "resources": _resources_dict(limits, requests)}
    if restartable:
        container["restartPolicy"] = RESTARTABLE
    return container


def _support_resources(
    s: LauncherSettings,
    container_type: str,
    limits: Mapping[str, str],
    requests: Mapping[str, str],
) -> tuple[ResourceList, ResourceList]:
    """Defaults for a support container, each overridable by supportContainerResources."""

    def resolve(kind: str, defaults: Mapping[str, str]) -> ResourceList:
        values: ResourceList = {}
        for name, default in defaults.items():
            override = (
                s.support_value(container_type, kind, name) if name != "ephemeral-storage" else None
            )
            values[name] = override if override is not None else Quantity.parse(default)
        return values

    return resolve("limits", limits), resolve("requests", requests)


def _serial_console_log_enabled(vmi: SpecView, s: LauncherSettings) -> bool:
    if not s.version.at_least(1, 1):
        return False
    devices = vmi.devices
    if devices.autoattach_serial_console is False:
        return False
    log_serial = devices.log_serial_console
    if log_serial is not None:
        return log_serial
    return not s.serial_console_log_disabled


def _guest_console_log(
    s: LauncherSettings, wants_dedicated: bool
) -> tuple[ResourceList, ResourceList]:
    limits, requests = _support_resources(
        s, "guest-console-log", {"cpu": "15m", "memory": "60M"}, {"cpu": "5m", "memory": "35M"}
    )
    if wants_dedicated:
        requests = {"cpu": limits["cpu"], "memory": limits["memory"]}
    return limits, requests


def _container_disk_resources(
    s: LauncherSettings, wants_dedicated: bool
) -> tuple[ResourceList, ResourceList]:
    """The container-disk containers (one per containerDisk volume, plus kernel boot)."""
    eph = Quantity.parse(EPHEMERAL_STORAGE_OVERHEAD)
    if not s.version.at_least(1, 0):
        if wants_dedicated:
            return (
                {"memory": Quantity.parse("40M"), "cpu": Quantity.parse("10m")},
                {
                    "cpu": Quantity.parse("10m"),
                    "ephemeral-storage": eph,
                    "memory": Quantity.parse("40M"),
                },
            )
        return (
            {"memory": Quantity.parse("40M"), "cpu": Quantity.parse("100m")},
            {
                "cpu": Quantity.parse("10m"),
                "ephemeral-storage": eph,
                "memory": Quantity.parse("1M"),
            },
        )
    limits, requests = _support_resources(
        s, "container-disk", {"cpu": "10m", "memory": "40M"}, {"cpu": "1m", "memory": "1M"}
    )
    requests["ephemeral-storage"] = eph
    if wants_dedicated:
        requests["cpu"], requests["memory"] = limits["cpu"], limits["memory"]
    return limits, requests


def _container_disk_binary_resources(
    s: LauncherSettings, wants_dedicated: bool
) -> tuple[ResourceList, ResourceList]:
    """The `container-disk-binary` init container (initContainerResourceRequirementsForVMI)."""
    if wants_dedicated:
        limits, _ = _support_resources(s, "container-disk", {"cpu": "10m", "memory": "40M"}, {})
        return limits, dict(limits)
    return _support_resources(
        s, "container-disk", {"cpu": "100m", "memory": "40M"}, {"cpu": "10m", "memory": "1M"}
    )


def _virtiofs_resources(
    s: LauncherSettings, dedicated: bool, guaranteed: bool
) -> tuple[ResourceList, ResourceList]:
    """A virtiofsd container per shared filesystem (v0.58+; before, virtiofsd ran in compute).

    v0.58 to v1.0 always used the non-dedicated values (v0.5x with a 40M memory limit); v1.1 on
    raise the requests to the limits for dedicated CPUs / guaranteed QoS.
    """
    memory_limit = "80M" if s.version.at_least(1, 0) else "40M"
    if not s.version.at_least(1, 1):
        dedicated = guaranteed = False
    limits, requests = _support_resources(
        s, "virtiofs", {"memory": memory_limit, "cpu": "100m"}, {"cpu": "10m", "memory": "1M"}
    )
    if dedicated or guaranteed:
        requests["cpu"] = limits["cpu"]
    if guaranteed:
        requests["memory"] = limits["memory"]
    return limits, requests


def _sidecar_resources(
    s: LauncherSettings, wants_dedicated: bool
) -> tuple[ResourceList, ResourceList]:
    """Hook sidecars: nothing by default, 200m/64M (requests = limits) for dedicated/guaranteed."""
    requests: ResourceList = {}
    limits: ResourceList = {}
    for name in ("cpu", "memory"):
        request = s.support_value("sidecar", "requests", name)
        if request is not None:
            requests[name] = request
    if wants_dedicated:
        for name, default in (("cpu", "200m"), ("memory", "64M")):
            limit = s.support_value("sidecar", "limits", name)
            limits[name] = limit if limit is not None else Quantity.parse(default)
            requests[name] = limits[name]
    else:
        for name in ("cpu", "memory"):
            limit = s.support_value("sidecar", "limits", name)
            if limit is not None:
                limits[name] = limit
    return limits, requests


def _hook_sidecar_count(vmi: SpecView, s: LauncherSettings) -> int:
    """Sidecars from the hooks annotation, plus one per network binding plugin with an image."""
    count = 0
    raw = vmi.hook_sidecars
    if raw:
        count += _requested_hook_sidecars(raw)
    if s.version.at_least(1, 1) and s.network_bindings is not None:
        plugins: set[str] = set()
        for iface in vmi.devices.interfaces:
            if not iface.has_binding:
                continue
            name = iface.binding
            plugin = s.network_bindings.get(name) if name is not None else None
            if not isinstance(plugin, Mapping):
                raise ValueError(f"couldn't find configuration for network binding: {name}")
            if plugin.get("sidecarImage"):
                plugins.add(str(name))
        count += len(plugins)
    return count


def _requested_hook_sidecars(raw: str) -> int:
    """How many sidecars the hooks annotation asks for: a JSON list of sidecar objects, at most
    MAX_HOOK_SIDECARS of them. Raises ValueError for anything else, KubeVirt's refusals (not a
    list, an entry that is not an object) and ours (too many entries, nesting too deep to parse)
    alike."""
    try:
        sidecars = json.loads(raw)
    except (TypeError, ValueError, RecursionError):
        raise ValueError(f"annotation {HOOK_SIDECARS_ANNOTATION} is not valid JSON") from None
    if not isinstance(sidecars, list):
        raise ValueError(f"annotation {HOOK_SIDECARS_ANNOTATION} must be a JSON list")
    if not all(isinstance(sidecar, dict) for sidecar in sidecars):
        raise ValueError(f"annotation {HOOK_SIDECARS_ANNOTATION} must list sidecar objects")
    if len(sidecars) > MAX_HOOK_SIDECARS:
        raise ValueError(
            f"annotation {HOOK_SIDECARS_ANNOTATION} asks for {len(sidecars)} hook sidecars,"
            f" more than the {MAX_HOOK_SIDECARS} a room is sized for"
        )
    return len(sidecars)


RenderSource = VmiView | SpecSource
"""What the renderer takes: a VMI's view (its `spec` is read), its spec view, or the full object
(adapted by `as_spec`, ValueError for a malformed field)."""


def _spec(vmi: RenderSource) -> SpecView:
    return spec_of(vmi) if isinstance(vmi, VmiView) else as_spec(vmi)


def rendered_memory_overhead(
    vmi: RenderSource, settings: LauncherSettings = DEFAULT_LAUNCHER_SETTINGS
) -> int:
    """The memory overhead, in bytes, KubeVirt adds to the compute container of the launcher pod
    it renders for `vmi` with `settings`: the number virt-controller writes into that pod's
    annotation kubevirt.io/memory-overhead-bytes (gate VmiMemoryOverheadReport). Rooms use this,
    never the annotation, which a tenant may edit (docs/security.md)."""
    return memory_overhead(
        _spec(vmi),
        settings.ratio,
        settings.version,
        cluster_arch=settings.cluster_arch,
        network_bindings=settings.network_bindings,
    )


def launcher_pod_resources(
    vmi: RenderSource,
    settings: LauncherSettings = DEFAULT_LAUNCHER_SETTINGS,
    *,
    migration_target: bool = False,
) -> dict[str, Any]:
    """The virt-launcher pod KubeVirt renders for `vmi`, reduced to what quota looks at.

    Returns `{"spec": {"containers": [...], "initContainers": [...]}}`, each container with its
    `name`, `resources` (quantity strings) and, for native sidecars, `restartPolicy: Always`; feed
    it to `pod_quota_usage`. Requests are as KubeVirt writes them (the API server's defaulting of
    requests from limits is applied by `pod_quota_usage`), with the namespace's LimitRange
    defaults (`settings.container_defaults`) added as admission adds them. Raises ValueError,
    naming the field, for a VMI KubeVirt would not render.

    `migration_target`: the pod is a migration's target (RenderMigrationManifest), which differs
    only with ImageVolume on: it has no image-pulling init containers, as its source pod ran and
    recorded every image's digest (KubeVirt refuses to render a target otherwise).

    Not modelled: DRA claims, and on main the TDX and IOMMUFD devices.
    """
    render = _PodRender(_spec(vmi), settings, migration_target)
    render.compute()
    render.container_disks()
    render.console_log()
    render.virtiofs()
    render.hook_sidecars()
    render.console_log(native_sidecar=True)
    render.container_disk_inits()
    spec: dict[str, Any] = {"containers": render.containers}
    if render.init_containers:
        spec["initContainers"] = render.init_containers
    return apply_defaults({"spec": spec}, settings.container_defaults)


class _PodRender:
    """One rendering of a launcher pod: each step appends containers in KubeVirt's order."""

    def __init__(self, vmi: SpecView, settings: LauncherSettings, migration_target: bool) -> None:
        self.vmi, self.s, self.migration_target = vmi, settings, migration_target
        self.image_volume = settings.gate(IMAGE_VOLUME)
        self.dedicated = dedicated_cpu(vmi)
        self.wants_dedicated = self.dedicated or wants_guaranteed_qos(vmi, settings.version)
        self.containers: list[dict[str, Any]] = []
        self.init_containers: list[dict[str, Any]] = []
        self.volumes: tuple[VolumeView, ...] = vmi.volumes
        self.disk_volumes = [
            v for v in self.volumes if v.container_disk and v.name != _KERNEL_BOOT_VOLUME
        ]
        self.kernel_boot = vmi.kernel_boot_container

    def compute(self) -> None:
        overhead = Quantity.from_scaled(rendered_memory_overhead(self.vmi, self.s), 0)
        limits, requests = compute_resources(self.vmi, self.s, overhead)
        self.containers.append(_container("compute", limits, requests))

    def container_disks(self) -> None:
        if self.image_volume:
            return
        limits, requests = _container_disk_resources(self.s, self.wants_dedicated)
        for volume in self.disk_volumes:
            self.containers.append(_container(f"volume{volume.name}", limits, requests))
        if self.kernel_boot:
            self.containers.append(_container("kernel-boot", limits, requests))

    def console_log(self, *, native_sidecar: bool = False) -> None:
        """The guest-console-log container: a plain container before v1.6, a native sidecar
        (a restartable init container) from v1.6; each call adds it only in its own form."""
        if native_sidecar != self.s.version.at_least(1, 6):
            return
        if not _serial_console_log_enabled(self.vmi, self.s):
            return
        limits, requests = _guest_console_log(self.s, self.wants_dedicated)
        if native_sidecar:
            self.init_containers.append(
                _container("guest-console-log", limits, requests, restartable=True)
            )
        else:
            self.containers.append(_container("guest-console-log", limits, requests))

    def virtiofs(self) -> None:
        if not self.s.version.at_least(0, 58):
            return
        filesystems = self.vmi.devices.filesystems
        limits, requests = _virtiofs_resources(self.s, self.dedicated, self.wants_dedicated)
        for volume in self.volumes:
            if volume.name in filesystems and not volume.container_path:
                self.containers.append(_container(f"virtiofs-{volume.name}", limits, requests))

    def hook_sidecars(self) -> None:
        limits, requests = _sidecar_resources(self.s, self.wants_dedicated)
        for index in range(_hook_sidecar_count(self.vmi, self.s)):
            self.containers.append(_container(f"hook-sidecar-{index}", limits, requests))

    def container_disk_inits(self) -> None:
        if self.image_volume:
            self.image_volume_inits()
            return
        if not (self.disk_volumes or self.kernel_boot):
            return
        binary_limits, binary_requests = _container_disk_binary_resources(
            self.s, self.wants_dedicated
        )
        self.init_containers.append(
            _container("container-disk-binary", binary_limits, binary_requests)
        )
        limits, requests = _container_disk_resources(self.s, self.wants_dedicated)
        for volume in self.disk_volumes:
            self.init_containers.append(_container(f"volume{volume.name}-init", limits, requests))
        if self.kernel_boot:
            self.init_containers.append(_container("kernel-boot-init", limits, requests))

    def image_volume_inits(self) -> None:
        """One `volume<name>` init container per container disk and kernel-boot image (every
        containerDisk volume, whatever its name), v1.7 on, never for a migration target."""
        if self.migration_target or not self.s.version.at_least(*_IMAGE_VOLUME_INITS_SINCE):
            return
        limits, requests = _container_disk_resources(self.s, self.wants_dedicated)
        names = [v.name for v in self.volumes if v.container_disk]
        if self.kernel_boot:
            names.append(_KERNEL_BOOT_VOLUME)
        for name in names:
            self.init_containers.append(_container(f"volume{name}", limits, requests))


def launcher_quota_usage(
    vmi: RenderSource,
    settings: LauncherSettings = DEFAULT_LAUNCHER_SETTINGS,
    *,
    migration_target: bool = False,
) -> ResourceList:
    """The quota usage of the launcher pod KubeVirt would render for `vmi` with `settings` (a
    VMI's first launcher pod; with `migration_target`, a migration's target pod). Harvester's
    `calculateVMActualOverhead` estimates the memory overhead alone; this is the whole pod."""
    return pod_quota_usage(launcher_pod_resources(vmi, settings, migration_target=migration_target))


def target_quota_usage(
    vmi: RenderSource, settings: LauncherSettings = DEFAULT_LAUNCHER_SETTINGS
) -> ResourceList:
    """The quota usage of the migration target pod KubeVirt would render for `vmi`: the room one
    migration needs (launcher_quota_usage's contract otherwise)."""
    return launcher_quota_usage(vmi, settings, migration_target=True)
