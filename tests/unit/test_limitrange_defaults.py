"""LimitRange defaults as the LimitRanger admission plugin gives them to a launcher pod (after the
API server's own request defaulting), and MTQ mode sizing its target pod with them."""

from __future__ import annotations

from typing import Any

from harvester_quota.apis.kubevirt import (
    VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
    VIRTUAL_MACHINE_INSTANCES,
)
from harvester_quota.apis.mtq import VMMRQS
from harvester_quota.generic.resource import LIMIT_RANGES, NAMESPACES, RESOURCE_QUOTAS
from harvester_quota.util.launcher import LauncherSettings, launcher_quota_usage
from harvester_quota.util.launcher.limitrange import (
    ContainerDefaults,
    apply_defaults,
    container_defaults,
)
from harvester_quota.util.mtq import parse_lock
from harvester_quota.util.quantity import Quantity

from tests.objects import migration, plain_namespace, vmi
from tests.unit.mtq_fakes import harness


def limit_range(name: str, *items: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "tenant"}, "spec": {"limits": list(items)}}


def test_default_and_default_request_are_read_with_the_api_servers_defaulting() -> None:
    defaults = container_defaults(
        [
            limit_range(
                "lr",
                {"type": "Container", "default": {"cpu": "200m"}, "max": {"memory": "2Gi"}},
                {"type": "Container", "min": {"ephemeral-storage": "10Mi"}},
                {"type": "Pod", "max": {"cpu": "64"}},
            )
        ]
    )
    assert defaults == ContainerDefaults(
        limits=(("cpu", "200m"), ("memory", "2Gi")),
        requests=(("cpu", "200m"), ("ephemeral-storage", "10Mi"), ("memory", "2Gi")),
    )


def test_the_largest_default_wins_where_limit_ranges_disagree() -> None:
    defaults = container_defaults(
        [
            limit_range("a", {"type": "Container", "default": {"cpu": "200m"}}),
            limit_range("b", {"type": "Container", "default": {"cpu": "1"}}),
        ]
    )
    assert dict(defaults.limits) == {"cpu": "1"}


def test_defaults_fill_only_what_is_missing_after_requests_take_their_limits() -> None:
    pod = {
        "spec": {
            "containers": [
                {"name": "has-limit", "resources": {"limits": {"cpu": "1"}}},
                {"name": "bare"},
            ],
            "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "5m"}}}],
        }
    }
    defaults = ContainerDefaults(limits=(("cpu", "200m"),), requests=(("cpu", "100m"),))
    spec = apply_defaults(pod, defaults)["spec"]
    assert spec["containers"][0]["resources"] == {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}}
    assert spec["containers"][1]["resources"] == {
        "limits": {"cpu": "200m"},
        "requests": {"cpu": "100m"},
    }
    assert spec["initContainers"][0]["resources"] == {
        "limits": {"cpu": "200m"},
        "requests": {"cpu": "5m"},
    }


def test_a_launcher_is_charged_the_namespaces_defaults() -> None:
    """A VMI that asks for cpu but sets no cpu limit (MTQ's LimitRange e2e): the compute
    container gets the default limit, and so does every container without one."""
    instance = vmi("vm1", "tenant")
    del instance["spec"]["domain"]["resources"]["limits"]["cpu"]
    plain = LauncherSettings(kubevirt_version="1.6")
    defaulted = plain.for_namespace(
        [],
        plain_namespace("tenant"),
        [limit_range("lr", {"type": "Container", "default": {"cpu": "200m"}})],
    )
    before, after = launcher_quota_usage(instance, plain), launcher_quota_usage(instance, defaulted)
    assert "limits.cpu" in after
    assert after["limits.cpu"] > before.get("limits.cpu", Quantity())
    assert after["limits.memory"] == before["limits.memory"], "memory limits were all set"
    assert plain.for_namespace([], plain_namespace("tenant")) == plain, "no LimitRanges read"


async def test_mtq_sizes_the_target_pod_with_the_limit_range_defaults() -> None:
    """A full quota on limits.ephemeral-storage, which KubeVirt's launcher never limits: only
    the LimitRange's default limit makes the target pod blocked there, and releasable."""
    for with_limit_range in (False, True):
        h = harness()
        h.cluster.put(NAMESPACES, plain_namespace("tenant"))
        full = {"limits.ephemeral-storage": "10Gi"}
        h.cluster.put(
            RESOURCE_QUOTAS,
            {
                "metadata": {"name": "rq", "namespace": "tenant"},
                "spec": {"hard": full},
                "status": {"hard": full, "used": full},
            },
        )
        h.cluster.put(
            VMMRQS,
            {
                "metadata": {"name": "budget", "namespace": "tenant"},
                "spec": {"additionalMigrationResources": {"limits.ephemeral-storage": "20Gi"}},
            },
        )
        instance = h.cluster.put(VIRTUAL_MACHINE_INSTANCES, vmi("vm1", "tenant"))
        h.cluster.put(
            VIRTUAL_MACHINE_INSTANCE_MIGRATIONS,
            migration("mig0", instance, rejected=True, uid="mig-uid-0"),
        )
        if with_limit_range:
            storage = {"type": "Container", "default": {"ephemeral-storage": "1Gi"}}
            h.cluster.put(LIMIT_RANGES, limit_range("lr", storage))
        await h.reconcile(h.reconciler())
        locked = parse_lock(h.cluster.get(NAMESPACES, "tenant")) is not None
        assert locked is with_limit_range
