"""The pod caches keep only what quota reads: the quota model sees a stripped pod exactly as the
whole one (usage, phase, deletion deadline, and the error of a malformed pod)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from harvester_quota.util.podusage import strip_pod_to_quota_fields
from harvester_quota.util.resourcequota.podindex import pod_view

from tests.objects import launcher_pod, vmi
from tests.unit.test_podusage import SIDECAR, container, pod, resized


def launcher(**kwargs: Any) -> dict[str, Any]:
    the_pod = launcher_pod(vmi("vm1", cores=2, memory="4Gi"), "virt-launcher-vm1-abcde", **kwargs)
    the_pod["metadata"]["annotations"] = {"kubevirt.io/domain": "vm1", "pre.hook": "x" * 500}
    the_pod["spec"]["volumes"] = [{"name": f"v{i}", "emptyDir": {}} for i in range(8)]
    the_pod["spec"]["tolerations"] = [{"key": "node.kubernetes.io/unreachable"}]
    the_pod["status"].update(podIP="10.0.0.9", qosClass="Guaranteed", hostIP="10.0.0.1")
    return the_pod


PODS = {
    "launcher": launcher(),
    "launcher-terminating": launcher(deletion_timestamp="2026-01-01T00:00:00Z", grace=30),
    "launcher-succeeded": launcher(phase="Succeeded"),
    "resized": resized(False),
    "resize-infeasible": resized(True),
    "sidecar": pod(
        container("main", {"cpu": "1"}, {"cpu": "2"}),
        init=[container("log", {"memory": "35M"}, {"memory": "60M"}, **SIDECAR)],
        overhead={"cpu": "100m"},
    ),
    "pod-level": pod(container("a", {"cpu": "1"}), resources={"limits": {"cpu": "4"}}),
    "containers-not-a-list": {"metadata": {"name": "p"}, "spec": {"containers": "x"}},
    "resources-not-a-map": pod({"name": "a", "resources": ["cpu"]}),
    "status-not-a-map": {"metadata": {"name": "p"}, "spec": {"containers": []}, "status": 3},
}


@pytest.mark.parametrize("name", sorted(PODS))
def test_the_quota_model_sees_a_stripped_pod_as_the_whole_one(name: str) -> None:
    whole = PODS[name]
    stripped = strip_pod_to_quota_fields(copy.deepcopy(whole))
    assert pod_view(stripped) == pod_view(whole)


def test_a_launcher_pod_keeps_half_its_size_or_less() -> None:
    whole = launcher()
    stripped = strip_pod_to_quota_fields(copy.deepcopy(whole))
    assert len(json.dumps(stripped)) * 2 <= len(json.dumps(whole))
    assert stripped["metadata"]["labels"] == whole["metadata"]["labels"]
    assert "annotations" not in stripped["metadata"] and "volumes" not in stripped["spec"]
