"""The virt-handler stand-in's share of a VMI's deletion, on a fake clock and a fake API server's
pods: the launchers exit once the VMI's grace period is over, whether or not virt-controller has
deleted their pods yet."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from harvester_quota.generic import errors
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.testbench.sim.kubevirt.handler import (
    DEFAULT_VMI_GRACE_SECONDS,
    VirtHandler,
    vmi_grace_seconds,
)

from tests.unit.fakes import upsert

UID = "vmi-uid-1"


class PodsApi:
    """The pod calls the stand-in makes (a list by labels, a get, a status patch), answered from
    the pods kept here; each status patch is recorded."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = {pod["metadata"]["name"]: pod for pod in pods}
        self.patched: list[tuple[str, str]] = []

    async def list(
        self, _resource: Any, _namespace: str | None = None, *, label_selector: str = "", **_: Any
    ) -> dict[str, Any]:
        wanted = dict(term.split("=", 1) for term in label_selector.split(",") if term)
        items = [
            copy.deepcopy(pod)
            for pod in self.pods.values()
            if all(pod["metadata"]["labels"].get(k) == v for k, v in wanted.items())
        ]
        return {"items": items}

    async def get(self, _resource: Any, name: str, _namespace: str | None = None) -> dict[str, Any]:
        if name not in self.pods:
            raise errors.NotFound(f"pods {name} not found")
        return copy.deepcopy(self.pods[name])

    async def patch(
        self,
        _resource: Any,
        name: str,
        body: dict[str, Any],
        _namespace: str | None = None,
        *,
        subresource: str = "",
    ) -> dict[str, Any]:
        assert subresource == "status"
        if name not in self.pods:
            raise errors.NotFound(f"pods {name} not found")
        self.pods[name]["status"]["phase"] = body["status"]["phase"]
        self.patched.append((name, body["status"]["phase"]))
        return copy.deepcopy(self.pods[name])


def launcher(
    name: str, vmi_uid: str, *, deleting: bool = False, phase: str = "Running"
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "labels": {"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": vmi_uid},
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:30Z"
    return {
        "metadata": metadata,
        "spec": {"containers": [{"name": "compute", "image": "virt-launcher"}]},
        "status": {"phase": phase},
    }


def deleted_vmi(grace: object) -> dict[str, Any]:
    spec = {} if grace is None else {"terminationGracePeriodSeconds": grace}
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {
            "name": "vm1",
            "namespace": "ns",
            "uid": UID,
            "resourceVersion": "7",
            "deletionTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": ["kubevirt.io/foregroundDeleteVirtualMachine"],
        },
        "spec": spec,
        "status": {
            "phase": "Running",
            "migrationState": {"targetNode": "kwok-node-1", "sourcePod": "source"},
        },
    }


async def test_a_deleted_vmis_launchers_exit_once_its_grace_is_over() -> None:
    """Mid-migration, both launchers of the deleted VMI exit (Succeeded) when its grace period
    ends, the source whose pod virt-controller already deletes too: a launcher that exited no
    longer counts for quota admission, while a pod being deleted counts until its own grace,
    the VMI's padded by 30 s, is over. A launcher pod that never ran, and another VMI's
    launcher, are left alone; a second look writes nothing."""
    api = PodsApi(
        [
            launcher("source", UID, deleting=True),
            launcher("target", UID),
            launcher("unstarted", UID, deleting=True, phase="Pending"),
            launcher("other", "vmi-uid-2"),
        ]
    )
    clock = FakeClock()
    handler = VirtHandler(api, clock=clock)  # type: ignore[arg-type]
    upsert(handler.vmis.store, deleted_vmi(3))
    assert await handler.reconcile("ns/vm1") == pytest.approx(3.0)
    assert api.patched == [], "the domain still shuts down"
    clock.step(3.0)
    assert await handler.reconcile("ns/vm1") is None
    assert sorted(api.patched) == [("source", "Succeeded"), ("target", "Succeeded")]
    assert api.pods["other"]["status"]["phase"] == "Running"
    assert api.pods["unstarted"]["status"]["phase"] == "Pending"
    assert await handler.reconcile("ns/vm1") is None
    assert len(api.patched) == 2


async def test_a_launcher_pod_removed_before_it_exits_is_nothing_to_exit() -> None:
    api = PodsApi([launcher("source", UID, deleting=True)])

    async def gone(*_: Any, **__: Any) -> dict[str, Any]:
        raise errors.NotFound("pods source not found")

    api.patch = gone  # type: ignore[method-assign]
    handler = VirtHandler(api, clock=FakeClock())  # type: ignore[arg-type]
    upsert(handler.vmis.store, deleted_vmi(0))
    assert await handler.reconcile("ns/vm1") is None


@pytest.mark.parametrize(
    ("grace", "seconds"),
    [(0, 0.0), (5, 5.0), (None, DEFAULT_VMI_GRACE_SECONDS), ("soon", DEFAULT_VMI_GRACE_SECONDS)],
)
def test_the_vmis_grace_is_its_own_else_kubevirts_default(grace: object, seconds: float) -> None:
    assert vmi_grace_seconds(deleted_vmi(grace)) == seconds
