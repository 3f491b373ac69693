"""VMIs as Harvester builds them, and small helpers shared by the launcher and pod-usage tests."""

from __future__ import annotations

import copy
import datetime
from collections.abc import Iterable, Mapping
from typing import Any

from harvester_quota.testbench.harvestervm import (
    HARVESTER_DEFAULT_OVERCOMMIT,
    HARVESTER_V121_OVERCOMMIT,
    harvester_guest_memory,
    harvester_vm_requests,
)
from harvester_quota.util.quantity import Quantity

MI = 1024 * 1024
GI = 1024 * MI
UTC = datetime.UTC


def q(text: str) -> Quantity:
    return Quantity.parse(text)


def as_strings(values: Mapping[str, Quantity]) -> dict[str, str]:
    return {name: str(value) for name, value in values.items()}


def total(usages: Iterable[Mapping[str, Quantity]]) -> dict[str, Quantity]:
    """How the quota controller sums the usage of several pods."""
    result: dict[str, Quantity] = {}
    for usage in usages:
        for name, value in usage.items():
            result[name] = result[name] + value if name in result else value
    return result


def harvester_vmi(
    cores: int,
    limits_memory: str,
    *,
    overcommit: Mapping[str, int] = HARVESTER_V121_OVERCOMMIT,
    guest: str | None = None,
    **domain: Any,
) -> dict[str, Any]:
    """A VMI as Harvester's VM mutator leaves it (the v1.2.1 seed's VMI, resized).

    The guest memory is limits - 100Mi, as in Harvester v1.2.1 (no overhead-ratio setting), unless
    `guest` says otherwise.
    """
    guest_options = {"overhead_ratio_set": False}
    requests = harvester_vm_requests(str(cores), limits_memory, overcommit)
    spec_domain: dict[str, Any] = {
        "cpu": {"cores": cores, "model": "host-model", "sockets": 1, "threads": 1},
        "devices": {
            "disks": [
                {"bootOrder": 1, "disk": {"bus": "virtio"}, "name": "disk-0"},
                {"disk": {"bus": "virtio"}, "name": "cloudinitdisk"},
            ],
            "inputs": [{"bus": "usb", "name": "tablet", "type": "tablet"}],
            "interfaces": [{"masquerade": {}, "model": "virtio", "name": "default"}],
        },
        "features": {"acpi": {"enabled": True}},
        "machine": {"type": "q35"},
        "memory": {"guest": guest or str(harvester_guest_memory(limits_memory, **guest_options))},
        "resources": {
            "limits": {"cpu": str(cores), "memory": limits_memory},
            "requests": as_strings(requests),
        },
    }
    spec_domain.update(domain)
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "vm1", "namespace": "test-migration", "annotations": {}},
        "spec": {
            "domain": spec_domain,
            "evictionStrategy": "LiveMigrate",
            "networks": [{"name": "default", "pod": {}}],
            "terminationGracePeriodSeconds": 120,
            "volumes": [
                {"name": "disk-0", "persistentVolumeClaim": {"claimName": "vm1-disk-0"}},
                {"name": "cloudinitdisk", "cloudInitNoCloud": {"secretRef": {"name": "vm1"}}},
            ],
        },
    }


V121_VM = harvester_vmi(2, "4Gi")
V170_VM = harvester_vmi(2, "4Gi", overcommit=HARVESTER_DEFAULT_OVERCOMMIT, guest="4Gi")


def compute_container(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    container = pod["spec"]["containers"][0]
    assert container["name"] == "compute"
    return container


def strip_requests(vmi: dict[str, Any], *names: str) -> dict[str, Any]:
    result = copy.deepcopy(vmi)
    for name in names:
        result["spec"]["domain"]["resources"]["requests"].pop(name, None)
    return result
