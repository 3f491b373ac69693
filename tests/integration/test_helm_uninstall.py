"""A real `helm install` and `helm uninstall` of the chart with its defaults (issue 43, item 6).

On a cluster of its own (the chart's cluster-scoped objects would meet the other tests' deployed
copies), laid out as Harvester (KubeVirt's controller account in harvester-system, which the
chart's lookup finds). `helm uninstall` runs the chart's pre-delete hook as Helm does: its Role
and RoleBinding first (weight -10), then the Job, whose pod the API server admits, KCM's Job
controller creates and the scheduler places on a kwok node. kwok runs no container, so the test
plays the kubelet for that one pod: it runs the pod's own container arguments as a process, as
the pod's service account (a token from the TokenRequest API, as the kubelet mounts one; a
kubeconfig in place of the in-cluster files), and writes the container's exit into the pod's
status. Everything else is Helm's and Kubernetes': the Job completes or fails, Helm deletes the
release or stops, and the hooks' delete policies apply.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import NAMESPACES, RESOURCE_QUOTAS, Object, Resource
from harvester_quota.release import leftovers
from harvester_quota.testbench.localcluster import ClusterInfo, LocalCluster
from harvester_quota.testbench.localcluster.binaries import build_helm
from harvester_quota.testbench.localcluster.chart import CHART, NAMESPACE, RELEASE
from harvester_quota.testbench.localcluster.deploy import write_token_kubeconfig
from harvester_quota.util.annotations import migrating_vm_annotation_key

from tests.helpers import eventually
from tests.integration.conftest import session_state_dir
from tests.objects import managed_quota, rancher_namespace

pytestmark = pytest.mark.integration

PODS = Resource("", "v1", "pods", "Pod")
JOBS = Resource("batch", "v1", "jobs", "Job")
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
HOOK = "harvester-quota-release"
BASE = {"limitsCpu": "4000m", "limitsMemory": "8Gi"}
BASE_HARD = {"limits.cpu": "4", "limits.memory": "8Gi"}
RAISED_HARD = {"limits.cpu": "6", "limits.memory": "12Gi"}
RELEASE_VALUES = ["--set", "release.graceSeconds=5", "--set", "release.timeoutSeconds=15"]
"""Short bounds (the chart's defaults wait 60 s for rooms and 180 s for the give-back): no
migration runs here, and the failing case must fail in seconds."""
POLICIES = Resource(
    "admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy"
)
BINDINGS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingadmissionpolicybindings",
    "ValidatingAdmissionPolicyBinding",
)
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
STUCK = "tenant-helm-stuck"
CONTROLLER = f"system:serviceaccount:{NAMESPACE}:harvester-quota"


@pytest.fixture(scope="module")
def helm_cluster() -> Iterator[ClusterInfo]:
    state = session_state_dir()
    local = LocalCluster(state.with_name(f"{state.name}-helm"))
    info = local.up()
    try:
        yield info
    finally:
        local.down()


@pytest.fixture
async def api(helm_cluster: ClusterInfo) -> AsyncIterator[ApiClient]:
    async with ApiClient(helm_cluster.admin_config()) as client:
        yield client


async def helm(cluster: ClusterInfo, *args: str, timeout: float = 240) -> tuple[int, str]:
    """Runs helm against `cluster`; (exit code, output)."""
    process = await asyncio.create_subprocess_exec(
        str(build_helm()),
        *args,
        "--kubeconfig",
        str(cluster.kubeconfig),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout)
    return int(process.returncode or 0), output.decode()


async def harvester_layout(api: ApiClient) -> None:
    """harvester-system with KubeVirt's controller account, as on Harvester."""
    for kind, body in (
        (NAMESPACES, {"metadata": {"name": NAMESPACE}}),
        (SERVICE_ACCOUNTS, {"metadata": {"name": "kubevirt-controller", "namespace": NAMESPACE}}),
    ):
        with contextlib.suppress(errors.AlreadyExists):
            await api.create(kind, body, body["metadata"].get("namespace"))


async def left_raised(api: ApiClient, namespace: str) -> None:
    """A Rancher namespace whose quota a migration of ours left raised, its room key on it:
    what the pre-delete hook must give back."""
    await api.create(NAMESPACES, rancher_namespace(namespace, BASE))
    key = migrating_vm_annotation_key("vm1")
    quota = managed_quota(namespace, RAISED_HARD, {key: '{"limits.cpu":"2","limits.memory":"4Gi"}'})
    await api.create(RESOURCE_QUOTAS, quota, namespace)


async def play_kubelet_for_the_hook(api: ApiClient, cluster: ClusterInfo, workdir: Path) -> int:
    """Waits for the hook Job's pod, runs its container's arguments as a process as the pod's
    service account (a kubeconfig with a token from the TokenRequest API, as the kubelet mounts
    one), and writes the exit into the pod's status (the kubelet's part); returns the exit
    code. The pod's namespace is harvester-system, where `write_token_kubeconfig` asks."""

    async def hook_pod() -> Object | None:
        pods = await api.list(PODS, NAMESPACE, label_selector=f"job-name={HOOK}")
        running = [
            p for p in pods.get("items", []) if (p.get("status") or {}).get("phase") == "Running"
        ]
        return running[0] if running else None

    pod = await eventually(hook_pod, timeout=90, what="the pre-delete hook's pod running")
    assert pod is not None
    spec = pod["spec"]
    (container,) = spec["containers"]
    account = spec["serviceAccountName"]
    kubeconfig = await write_token_kubeconfig(api, cluster, account, workdir / "hook-kubeconfig")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "harvester_quota.main",
        *container["args"],
        f"--kubeconfig={kubeconfig}",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), 120)
    print(output.decode())  # the hook's log (pytest -rP)
    code = int(process.returncode or 0)
    await _terminated(api, pod, container["name"], code)
    return code


async def _terminated(api: ApiClient, pod: Object, container: str, code: int) -> None:
    """The pod's status as the kubelet writes it when its one container exited with `code`."""
    now = "2026-01-01T00:00:00Z"
    terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}
    terminated |= {"startedAt": now, "finishedAt": now}
    body = {
        "status": {
            "phase": "Succeeded" if code == 0 else "Failed",
            "containerStatuses": [
                {
                    "name": container,
                    "ready": False,
                    "restartCount": 0,
                    "image": pod["spec"]["containers"][0]["image"],
                    "imageID": "",
                    "state": {"terminated": terminated},
                }
            ],
        }
    }
    await api.patch(PODS, pod["metadata"]["name"], body, NAMESPACE, subresource="status")


async def hook_rbac_left(api: ApiClient) -> list[str]:
    roles = await api.list(ROLES, NAMESPACE)
    return [r["metadata"]["name"] for r in roles.get("items", []) if r["metadata"]["name"] == HOOK]


@contextlib.asynccontextmanager
async def controller_refused_in(api: ApiClient, namespace: str) -> AsyncIterator[None]:
    """A policy refusing the controller's quota writes in `namespace` (an administrator's, say):
    there the room cannot be given back. Removed on exit."""
    name = "test-helm-refuse-controller"
    await api.create(
        POLICIES,
        {
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["UPDATE"],
                            "resources": ["resourcequotas"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": f"request.userInfo.username != '{CONTROLLER}'",
                        "message": "an administrator keeps this quota as it is",
                    }
                ],
            },
        },
    )
    await api.create(
        BINDINGS,
        {
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
                },
            },
        },
    )
    try:
        yield
    finally:
        await api.delete(BINDINGS, name)
        await api.delete(POLICIES, name)


async def test_a_failed_hook_stops_the_uninstall_and_leaves_a_working_release_to_retry(
    api: ApiClient, helm_cluster: ClusterInfo, tmp_path: Path
) -> None:
    """A room the hook cannot give back (a policy refuses the controller's quota write): the
    release exits 1 after its timeout, the Job fails, `helm uninstall` fails and deletes
    nothing but the hook's Role and RoleBinding (hook-failed), keeping the Job for its log; the
    controller Deployment is scaled back to its replicas, every object of the release still
    there (Helm's status says "uninstalling"). Once the policy is gone, `helm uninstall` again
    runs the hook (before-hook-creation replaces the failed Job), whose release gives the room
    back (the quota at Rancher's base, no room key) and exits 0; the Job completes, Helm
    deletes the release and the hook's Job, Role and RoleBinding (hook-succeeded), and nothing
    of ours is left in the cluster."""
    await harvester_layout(api)
    await left_raised(api, STUCK)
    code, output = await helm(
        helm_cluster, "install", RELEASE, str(CHART), "--namespace", NAMESPACE, *RELEASE_VALUES
    )
    assert code == 0, output
    async with controller_refused_in(api, STUCK):
        uninstall = asyncio.create_task(
            helm(helm_cluster, "uninstall", RELEASE, "--namespace", NAMESPACE)
        )
        assert await play_kubelet_for_the_hook(api, helm_cluster, tmp_path) == 1
        code, output = await uninstall
    assert code != 0 and HOOK in output, output
    (job,) = (await api.list(JOBS, NAMESPACE))["items"]
    assert any(c["type"] == "Failed" for c in job["status"].get("conditions", [])), job
    assert await hook_rbac_left(api) == [], "hook-failed deletes the Role"
    deployment = await api.get(DEPLOYMENTS, RELEASE, NAMESPACE)
    assert deployment["spec"]["replicas"] == 2, "scaled back: a working release stays"
    code, output = await helm(helm_cluster, "status", RELEASE, "--namespace", NAMESPACE)
    # Helm marks the release before its pre-delete hooks and leaves the mark when one fails:
    # its objects all stand (the Deployment above), and `helm uninstall` may be run again.
    assert code == 0 and "STATUS: uninstalling" in output, output
    uninstall = asyncio.create_task(
        helm(helm_cluster, "uninstall", RELEASE, "--namespace", NAMESPACE)
    )
    assert await play_kubelet_for_the_hook(api, helm_cluster, tmp_path) == 0
    code, output = await uninstall
    assert code == 0, output
    quota = (await api.list(RESOURCE_QUOTAS, STUCK))["items"][0]
    assert quota["spec"]["hard"] == BASE_HARD, quota
    assert await leftovers(api) == []
    assert (await api.list(JOBS, NAMESPACE)).get("items") == [], "hook-succeeded deletes the Job"
    assert await hook_rbac_left(api) == [], "and its Role"
    code, output = await helm(helm_cluster, "status", RELEASE, "--namespace", NAMESPACE)
    assert code != 0 and "not found" in output, output
