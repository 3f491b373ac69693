"""`explain` and `preflight` with a poisoned object (issue 38, gap 5): an object their
per-object computation raises on is skipped and named in the output; the command completes
with the others."""

from __future__ import annotations

from typing import Any, cast

import pytest
from harvester_quota import explain as explain_module
from harvester_quota.explain import explain, render_text
from harvester_quota.generic.client import ApiClient
from harvester_quota.preflight import Plan, compute, preflight
from harvester_quota.preflight.report import render_text as render_preflight
from harvester_quota.util.podusage import KUBERNETES_1_36, QuotaFeatures
from harvester_quota.util.resourcequota import podindex
from harvester_quota.util.resourcequota.podindex import PodView, pod_view

from tests.objects import launcher_pod, managed_quota, migration, rancher_namespace, vmi
from tests.unit.test_preflight import running, state
from tests.unit.test_quota_plan import V170_HARD, V170_LIMIT
from tests.unit.test_quota_scopes_in_fit_checks import ReadOnlyCluster

NS = "quota-test"


def poisoned_pod_view(pod: Any, features: QuotaFeatures = KUBERNETES_1_36) -> PodView:
    """The pod view, raising on one pod (as pod_view did on an int64 grace period)."""
    if pod["metadata"].get("labels", {}).get("poison"):
        raise OverflowError("date value out of range")
    return pod_view(pod, features)


async def test_explain_skips_a_pod_its_view_raises_on_and_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Abuse: one pod the view raises on. Before, the whole command failed with its exception."""
    monkeypatch.setattr(explain_module, "pod_view", poisoned_pod_view, raising=False)
    monkeypatch.setattr(podindex, "pod_view", poisoned_pod_view)  # where the plan derives it
    vm = vmi("vm1", NS)
    poison = launcher_pod(vmi("vm2", NS), "poisoned")
    poison["metadata"]["labels"]["poison"] = "yes"
    cluster = ReadOnlyCluster(
        {
            "namespaces": [rancher_namespace(NS, V170_LIMIT)],
            "resourcequotas": [managed_quota(NS, V170_HARD)],
            "virtualmachineinstancemigrations": [migration("vm1-mig", vm)],
            "virtualmachineinstances": [vm],
            "pods": [launcher_pod(vm, "virt-launcher-vm1-src"), poison],
        }
    )
    found = await explain(cast(ApiClient, cluster), NS, kubevirt_version="1.6")
    assert [room["migration"] for room in found.rooms] == ["vm1-mig"], "the others flow"
    skipped = [w for w in found.warnings if w.startswith("skipped")]
    assert skipped == [f"skipped Pod {NS}/poisoned: OverflowError: date value out of range"]
    assert f"warning: skipped Pod {NS}/poisoned" in render_text(found)


def test_preflight_skips_a_vmi_it_cannot_judge_and_names_it() -> None:
    """Abuse: a VMI whose domain is no object (its verdict raises AttributeError). Before, the
    whole preflight failed."""
    good, good_pod = running("good")
    bad, bad_pod = running("bad")
    bad["spec"]["domain"] = ["not", "an object"]
    report = preflight(state([good, bad], [good_pod, bad_pod]), Plan("drain", ("n1",)))
    assert [vm.key for vm in report.vms] == ["ns/good"]
    [warning] = [w for w in report.warnings if w.startswith("skipped")]
    assert warning.startswith("skipped VirtualMachineInstance ns/bad: cannot judge it")
    assert "AttributeError" in warning
    assert "skipped VirtualMachineInstance ns/bad" in render_preflight(report)


def test_preflight_skips_a_pod_it_cannot_read_and_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Abuse: a pod the per-pod reads raise on (the reads are tolerant of every shape found,
    so the raise is planted in running_launchers for one pod). Before, the preflight failed."""
    real = compute.running_launchers

    def poisoned(pods: Any) -> Any:
        if any(pod["metadata"]["name"] == "odd" for pod in pods):
            raise RuntimeError("cannot read this pod")
        return real(pods)

    monkeypatch.setattr(compute, "running_launchers", poisoned)
    good, good_pod = running("good")
    odd = {"metadata": {"name": "odd", "namespace": "ns"}, "spec": {"nodeName": "n1"}}
    report = preflight(state([good], [good_pod, odd]), Plan("drain", ("n1",)))
    assert [vm.key for vm in report.vms] == ["ns/good"]
    assert [w for w in report.warnings if w.startswith("skipped")] == [
        "skipped Pod ns/odd: RuntimeError: cannot read this pod"
    ]


def test_preflight_a_guest_memory_too_large_for_a_float_is_capped() -> None:
    """Abuse: memory.guest "1e400" (it parses). Before, the copy-time estimate divided it into
    a float and the whole preflight failed with OverflowError."""
    huge, huge_pod = running("huge")
    huge["spec"]["domain"]["memory"]["guest"] = "1e400"
    report = preflight(state([huge], [huge_pod]), Plan("drain", ("n1",)))
    assert [vm.key for vm in report.vms] == ["ns/huge"]
    assert report.vms[0].memory_bytes == 2**63 - 1
