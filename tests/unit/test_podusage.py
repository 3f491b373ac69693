"""Pod quota usage: Kubernetes v1.36's pod evaluator."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from harvester_quota.util.launcher import (
    LauncherSettings,
    launcher_pod_resources,
)
from harvester_quota.util.podusage import (
    QuotaFeatures,
    pod_counts_against_quota,
    pod_limits,
    pod_quota_usage,
    pod_requests,
    quota_constraint_violations,
)

from tests.unit.vmis import (
    UTC,
    V170_VM,
    q,
    strip_requests,
)

# --------------------------------------------------------------------------------------------
# pod_quota_usage: the Kubernetes v1.36 pod evaluator


def container(
    name: str,
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "resources": resources, **extra}


def pod(
    *containers: dict[str, Any], init: list[dict[str, Any]] | None = None, **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": list(containers), **spec}
    if init is not None:
        body["initContainers"] = init
    return {"metadata": {"name": "p"}, "spec": body, "status": {"phase": "Running"}}


SIDECAR = {"restartPolicy": "Always"}


@pytest.mark.parametrize(
    ("the_pod", "expected"),
    [
        pytest.param(
            pod(container("a", {"cpu": "100m", "memory": "1Gi"}, {"cpu": "1", "memory": "2Gi"})),
            {
                "count/pods": "1",
                "pods": "1",
                "cpu": "100m",
                "requests.cpu": "100m",
                "limits.cpu": "1",
                "memory": "1Gi",
                "requests.memory": "1Gi",
                "limits.memory": "2Gi",
            },
            id="one-container",
        ),
        pytest.param(
            pod(container("a", limits={"cpu": "1", "memory": "2Gi"})),
            {
                "count/pods": "1",
                "pods": "1",
                "cpu": "1",
                "requests.cpu": "1",
                "limits.cpu": "1",
                "memory": "2Gi",
                "requests.memory": "2Gi",
                "limits.memory": "2Gi",
            },
            id="requests-defaulted-from-limits",
        ),
        pytest.param(
            pod(container("a", {"cpu": "100m"}), container("b", {"cpu": "200m"})),
            {"count/pods": "1", "pods": "1", "cpu": "300m", "requests.cpu": "300m"},
            id="containers-add-up",
        ),
        pytest.param(
            pod(
                container("a", {"cpu": "100m"}),
                init=[
                    container("log", {"cpu": "50m"}, **SIDECAR),
                    container("init", {"cpu": "500m"}),
                ],
            ),
            {"count/pods": "1", "pods": "1", "cpu": "550m", "requests.cpu": "550m"},
            id="init-after-sidecar-runs-beside-it",
        ),
        pytest.param(
            pod(
                container("a", {"cpu": "100m"}),
                init=[
                    container("init", {"cpu": "500m"}),
                    container("log", {"cpu": "50m"}, **SIDECAR),
                ],
            ),
            {"count/pods": "1", "pods": "1", "cpu": "500m", "requests.cpu": "500m"},
            id="init-before-sidecar",
        ),
        pytest.param(
            pod(
                container("a", {"cpu": "1"}),
                init=[
                    container("log", {"cpu": "50m"}, **SIDECAR),
                    container("init", {"cpu": "500m"}),
                ],
            ),
            {"count/pods": "1", "pods": "1", "cpu": "1050m", "requests.cpu": "1050m"},
            id="sidecar-adds-to-app-containers",
        ),
        pytest.param(
            pod(
                container("a", {"cpu": "1", "memory": "1Gi"}, {"cpu": "2"}),
                overhead={"cpu": "250m", "memory": "120Mi"},
            ),
            {
                "count/pods": "1",
                "pods": "1",
                "cpu": "1250m",
                "requests.cpu": "1250m",
                "limits.cpu": "2250m",
                "memory": "1144Mi",
                "requests.memory": "1144Mi",
            },
            id="pod-overhead-only-on-set-limits",
        ),
        pytest.param(
            pod(
                container(
                    "a",
                    {"hugepages-2Mi": "1Gi", "ephemeral-storage": "1G"},
                    {"hugepages-2Mi": "1Gi", "ephemeral-storage": "2G"},
                )
            ),
            {
                "count/pods": "1",
                "pods": "1",
                "hugepages-2Mi": "1Gi",
                "requests.hugepages-2Mi": "1Gi",
                "ephemeral-storage": "1G",
                "requests.ephemeral-storage": "1G",
                "limits.ephemeral-storage": "2G",
            },
            id="hugepages-and-ephemeral-storage",
        ),
        pytest.param(
            pod(
                container(
                    "a",
                    limits={
                        "nvidia.com/gpu": "1",
                        "example.com/dongle": "2",
                        "kubernetes.io/native-thing": "1",
                        "deviceclass.resource.kubernetes.io/gpu": "1",
                    },
                )
            ),
            {
                "count/pods": "1",
                "pods": "1",
                "requests.nvidia.com/gpu": "1",
                "requests.example.com/dongle": "2",
                "requests.deviceclass.resource.kubernetes.io/gpu": "1",
            },
            id="extended-resources",
        ),
        pytest.param(
            pod(container("a", {"cpu": "100m", "memory": "1Gi"})),
            {
                "count/pods": "1",
                "pods": "1",
                "cpu": "100m",
                "requests.cpu": "100m",
                "memory": "1Gi",
                "requests.memory": "1Gi",
            },
            id="no-limits",
        ),
        pytest.param(
            pod(
                container("a", {"cpu": "100m", "memory": "1Gi"}),
                resources={"requests": {"cpu": "1"}, "limits": {"cpu": "2", "memory": "4Gi"}},
            ),
            {
                "count/pods": "1",
                "pods": "1",
                "cpu": "1",
                "requests.cpu": "1",
                "limits.cpu": "2",
                "memory": "1Gi",
                "requests.memory": "1Gi",
                "limits.memory": "4Gi",
            },
            id="pod-level-resources",
        ),
        pytest.param(
            pod(container("a", {"memory": "1Gi"}), resources={"limits": {"cpu": "2"}}),
            {
                "count/pods": "1",
                "pods": "1",
                "cpu": "2",
                "requests.cpu": "2",
                "limits.cpu": "2",
                "memory": "1Gi",
                "requests.memory": "1Gi",
            },
            id="pod-level-requests-defaulted-from-pod-limits",
        ),
    ],
)
def test_pod_quota_usage(the_pod: dict[str, Any], expected: dict[str, str]) -> None:
    assert pod_quota_usage(the_pod) == {name: q(value) for name, value in expected.items()}


def resized(infeasible: bool) -> dict[str, Any]:
    the_pod = pod(container("a", {"cpu": "1"}, {"cpu": "1"}))
    the_pod["status"]["containerStatuses"] = [
        {
            "name": "a",
            "allocatedResources": {"cpu": "1500m"},
            "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "3"}},
        }
    ]
    if infeasible:
        the_pod["status"]["conditions"] = [{"type": "PodResizePending", "reason": "Infeasible"}]
        the_pod["spec"]["containers"][0]["resources"] = {
            "requests": {"cpu": "8"},
            "limits": {"cpu": "8"},
        }
    return the_pod


@pytest.mark.parametrize(
    ("the_pod", "requests_cpu", "limits_cpu"),
    [
        pytest.param(resized(False), "2", "3", id="in-place-resize-max-of-spec-and-status"),
        pytest.param(resized(True), "2", "3", id="infeasible-resize-uses-status"),
    ],
)
def test_in_place_resize_status(
    the_pod: dict[str, Any], requests_cpu: str, limits_cpu: str
) -> None:
    assert pod_requests(the_pod)["cpu"] == q(requests_cpu)
    assert pod_limits(the_pod)["cpu"] == q(limits_cpu)


NOW = datetime.datetime(2024, 12, 13, 12, 40, 0, tzinfo=UTC)


def terminating(deleted_at: str, grace: int | None) -> dict[str, Any]:
    the_pod = pod(container("a", {"cpu": "1"}))
    the_pod["metadata"]["deletionTimestamp"] = deleted_at
    if grace is not None:
        the_pod["metadata"]["deletionGracePeriodSeconds"] = grace
    return the_pod


def in_phase(phase: str) -> dict[str, Any]:
    the_pod = pod(container("a", {"cpu": "1"}))
    the_pod["status"]["phase"] = phase
    return the_pod


@pytest.mark.parametrize(
    ("the_pod", "now", "counts"),
    [
        pytest.param(in_phase("Running"), NOW, True, id="running"),
        pytest.param(in_phase("Pending"), NOW, True, id="pending"),
        pytest.param(in_phase("Succeeded"), NOW, False, id="succeeded"),
        pytest.param(in_phase("Failed"), NOW, False, id="failed"),
        pytest.param(terminating("2024-12-13T12:39:00Z", 30), NOW, False, id="grace-expired"),
        pytest.param(terminating("2024-12-13T12:39:30Z", 30), NOW, True, id="at-deadline"),
        pytest.param(terminating("2024-12-13T12:39:45Z", 30), NOW, True, id="within-grace"),
        pytest.param(terminating("2024-12-13T12:00:00Z", None), NOW, True, id="no-grace-period"),
        pytest.param(terminating("2024-12-13T12:00:00Z", 30), None, True, id="no-clock"),
        pytest.param(in_phase("Succeeded"), None, False, id="no-clock-still-sees-phase"),
    ],
)
def test_pod_counts_against_quota(
    the_pod: dict[str, Any], now: datetime.datetime | None, counts: bool
) -> None:
    assert pod_counts_against_quota(the_pod, now) is counts
    usage = pod_quota_usage(the_pod, now=now)
    assert ("pods" in usage) is counts
    assert usage["count/pods"] == q("1")


def test_naive_clock_is_rejected() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        pod_counts_against_quota(
            terminating("2024-12-13T12:39:00Z", 30), datetime.datetime(2024, 1, 1)
        )


@pytest.mark.parametrize(
    "the_pod",
    [
        pytest.param(
            {"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "x"}}}]}},
            id="bad-quantity",
        ),
        pytest.param({"spec": {"containers": "a"}}, id="containers-not-a-list"),
        pytest.param(
            {"spec": {"containers": [{"name": "a", "resources": []}]}}, id="resources-not-an-object"
        ),
    ],
)
def test_malformed_pod(the_pod: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        pod_quota_usage(the_pod)


@pytest.mark.parametrize(
    ("vmi", "version", "kwargs", "hard", "expected"),
    [
        pytest.param(V170_VM, "1.6", {}, ["limits.cpu", "limits.memory"], {}, id="limits-set"),
        pytest.param(
            strip_requests(V170_VM, "cpu"),
            "1.6",
            {},
            ["requests.cpu"],
            {},
            id="cpu-request-calculated",
        ),
        pytest.param(
            {"spec": {"domain": {"resources": {"requests": {"memory": "1Gi"}}}}},
            "0.54",
            {},
            ["limits.cpu"],
            {"limits.cpu": ["compute"]},
            id="v0.54-no-auto-cpu-limit",
        ),
        pytest.param(
            {"spec": {"domain": {"resources": {"requests": {"memory": "1Gi"}}}}},
            "1.6",
            {"quota_has_limits_cpu": True},
            ["limits.cpu"],
            {},
            id="v1.6-auto-cpu-limit",
        ),
    ],
)
def test_quota_constraints_on_launcher_pods(
    vmi: dict[str, Any],
    version: str,
    kwargs: dict[str, Any],
    hard: list[str],
    expected: dict[str, list[str]],
) -> None:
    the_pod = launcher_pod_resources(vmi, LauncherSettings(kubevirt_version=version, **kwargs))
    assert quota_constraint_violations(the_pod, hard) == expected


def test_quota_constraints_checks_init_containers_and_skips_pod_level() -> None:
    the_pod = pod(
        container("a", {"cpu": "1"}, {"cpu": "1"}),
        init=[container("init", {"memory": "1Gi"})],
    )
    assert quota_constraint_violations(the_pod, ["cpu", "limits.cpu", "pods"]) == {
        "cpu": ["init"],
        "limits.cpu": ["init"],
    }
    the_pod["spec"]["resources"] = {"limits": {"cpu": "2"}}
    assert quota_constraint_violations(the_pod, ["limits.cpu"]) == {}


# --------------------------------------------------------------------------------------------
# PodLevelResourcesEphemeralStorage (KEP-6386, alpha in Kubernetes v1.38): modelled from the KEP,
# not checked against a real API server (the bench runs v1.36, which has no such gate)

EPHEMERAL_ON = QuotaFeatures(pod_level_ephemeral_storage=True)


def two_containers_with_scratch(**spec: Any) -> dict[str, Any]:
    return pod(
        container("a", {"cpu": "1", "ephemeral-storage": "1Gi"}),
        container("b", {"cpu": "1", "ephemeral-storage": "1Gi"}),
        **spec,
    )


def test_pod_level_ephemeral_storage_replaces_the_containers_sum_only_behind_its_gate() -> None:
    the_pod = two_containers_with_scratch(
        resources={"requests": {"ephemeral-storage": "5Gi"}, "limits": {"ephemeral-storage": "8Gi"}}
    )
    on = pod_quota_usage(the_pod, features=EPHEMERAL_ON)
    assert on["ephemeral-storage"] == on["requests.ephemeral-storage"] == q("5Gi")
    assert on["limits.ephemeral-storage"] == q("8Gi")
    assert on["requests.cpu"] == q("2"), "cpu stays the containers' sum"
    off = pod_quota_usage(the_pod)
    assert off["requests.ephemeral-storage"] == q("2Gi")
    assert "limits.ephemeral-storage" not in off


def test_a_pod_level_ephemeral_storage_limit_defaults_its_request_like_memory() -> None:
    """SetDefaults_Pod as for cpu and memory: the containers' requests if any, else the limit."""
    with_requests = two_containers_with_scratch(resources={"limits": {"ephemeral-storage": "8Gi"}})
    usage = pod_quota_usage(with_requests, features=EPHEMERAL_ON)
    assert usage["requests.ephemeral-storage"] == q("2Gi")
    assert usage["limits.ephemeral-storage"] == q("8Gi")
    bare = pod(container("a", {"cpu": "1"}), resources={"limits": {"ephemeral-storage": "8Gi"}})
    assert pod_quota_usage(bare, features=EPHEMERAL_ON)["requests.ephemeral-storage"] == q("8Gi")


def test_pod_level_ephemeral_storage_waives_the_container_constraints_only_behind_its_gate() -> (
    None
):
    """A tenant's pod with pod-level ephemeral-storage alone: with the gate it counts as
    pod-level resources set (the API server skips the per-container check); without it, the
    containers must still name limits.cpu."""
    the_pod = pod(
        container("a", {"ephemeral-storage": "1Gi"}),
        container("b"),
        resources={"limits": {"ephemeral-storage": "8Gi"}},
    )
    assert quota_constraint_violations(the_pod, ["limits.cpu"], features=EPHEMERAL_ON) == {}
    assert quota_constraint_violations(the_pod, ["limits.cpu"]) == {"limits.cpu": ["a", "b"]}
