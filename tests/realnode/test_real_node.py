"""The image and the chart, run for real: what a first install on a cluster executes.

The image is built from deploy/Containerfile (`make node-bin`, on a base made from Debian's
packages); the chart is installed with its defaults by docs/quickstart.md's own lines ("Try it
on the local cluster first", read from the file and run in bash, in order) on a local cluster
with one real node beside the kwok nodes (pkg/testbench/localcluster/realnode.py): a kubelet,
containerd and runc, a CNI bridge and kube-proxy. So the controller's and the webhook's pods run
from the image on a kubelet, with the chart's security context, probes and service-account
token; the API server calls the webhook through its Service's ClusterIP; a migration on the kwok
side is raised, admitted and given back by the controller in its pod; a killed webhook container
and a frozen one are restarted by the kubelet while admissions go on; `helm uninstall` runs the
pre-delete hook's Job on the real node, which waits out a migration holding room. Root only
(`make test`, `make test-realnode`; conftest.py skips otherwise).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from harvester_quota import release
from harvester_quota.generic import errors
from harvester_quota.generic.client import ApiClient
from harvester_quota.generic.resource import NAMESPACES, RESOURCE_QUOTAS, Resource
from harvester_quota.testbench.localcluster import (
    ClusterInfo,
    LocalCluster,
    binaries,
    deploy,
    image,
    realnode,
)
from harvester_quota.testbench.localcluster.cluster import ENV_STATE_DIR
from harvester_quota.testbench.localcluster.rest import RestClient

from tests.helpers import eventually, succeed_migration, wait_until
from tests.integration.conftest import session_state_dir
from tests.integration.kubevirt_by_hand import KubeVirtByHand

RBAC = "rbac.authorization.k8s.io"
CLUSTER_ROLE_BINDINGS = Resource(RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding", False)
REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "docs" / "quickstart.md"
NAMESPACE = "harvester-system"
SELECTOR = "app.kubernetes.io/name=harvester-quota"
WEBHOOK_SELECTOR = f"{SELECTOR},app.kubernetes.io/component=webhook"
BASE_HARD = {"limits.cpu": "3", "limits.memory": "5000Mi"}
"""The v1.7.0 seed's quota (KubeVirtByHand.v170_migration): room for vm1's launcher only."""
COMMAND_TIMEOUT = 600.0
"""The install's `cluster up --real-node` starts a cluster and a node (about 40 s on a loaded
2-core machine) and `helm install --wait` waits for four pods; the uninstall waits for the hook,
which waits up to the chart's release.graceSeconds (60 s) for migrations holding room."""


def quickstart_lines(marker: str) -> list[str]:
    """The command lines of docs/quickstart.md between ``<!-- {marker}: ... -->`` and the next
    ``<!-- end -->``, without the `make` lines (`make test-realnode` ran `make node-bin`)."""
    text = QUICKSTART.read_text()
    start = text.index(f"<!-- {marker}:")
    block = text[text.index("-->", start) + 3 : text.index("<!-- end -->", start)]
    lines = [line.strip() for line in block.splitlines() if line.startswith("    ")]
    return [line for line in lines if line and not line.startswith("make ")]


def run_lines(lines: list[str], env: dict[str, str]) -> str:
    """Runs ``lines`` as one bash script (so `eval` and `export` carry on) in the checkout;
    returns its output. Fails the test with the output when a line fails."""
    script = "set -euo pipefail\nset -x\n" + "\n".join(lines) + "\n"
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )
    output = done.stdout + done.stderr
    print(output)
    assert done.returncode == 0, (
        f"the quickstart's lines failed (exit {done.returncode}):\n{output}"
    )
    return done.stdout


@pytest.fixture(scope="module")
def state_dir() -> Path:
    state = session_state_dir()
    return state.with_name(f"{state.name}-realnode")


@pytest.fixture(scope="module")
def shell_env(state_dir: Path) -> dict[str, str]:
    """What the quickstart's shell has: the checkout's venv on PATH (the lines export it too)
    and the test's own state directory for the bench's cluster."""
    venv_bin = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": f"{venv_bin}:{os.environ['PATH']}", ENV_STATE_DIR: str(state_dir)}


@pytest.fixture(scope="module")
def installed(state_dir: Path, shell_env: dict[str, str]) -> Iterator[ClusterInfo]:
    """The quickstart's install, run as written; stops the node and the cluster at the end
    whatever happened (the uninstall test stops them the quickstart's way first)."""
    local = LocalCluster(state_dir)
    try:
        output = run_lines(quickstart_lines("real-node install"), shell_env)
        (state_dir / "quickstart-install.out").write_text(output)
        info = local.info()
        assert info is not None
        yield info
    finally:
        with contextlib.suppress(Exception):
            realnode.down_real_node(local)
        local.down()


@pytest.fixture(scope="module")
def rest(installed: ClusterInfo) -> RestClient:
    return installed.rest()


@pytest.fixture
async def api(installed: ClusterInfo) -> AsyncIterator[ApiClient]:
    async with ApiClient(installed.admin_config()) as client:
        yield client


def product_pods(rest: RestClient, selector: str = SELECTOR) -> list[dict[str, Any]]:
    return list(rest.get(f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=selector)["items"])


def container_pid(state_dir: Path, container_id: str) -> int:
    """The host pid of a container's first process, from the node's containerd."""
    socket = state_dir / realnode.NODE_STATE_DIR / "containerd.sock"
    argv = ["ctr", "--address", str(socket), "--namespace", "k8s.io", "tasks", "ls"]
    listed = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
    wanted = container_id.removeprefix("containerd://")
    for line in listed.splitlines()[1:]:
        task, pid, status = line.split()
        if task == wanted and status == "RUNNING":
            return int(pid)
    raise AssertionError(f"no running task {wanted} in:\n{listed}")


def proc_status(pid: int) -> dict[str, str]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def root_mount_options(pid: int) -> list[str]:
    """The mount options of the container's root, from its mountinfo."""
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == "/":
            return fields[5].split(",")
    raise AssertionError(f"no root mount for pid {pid}")


def webhook_calls(env: dict[str, str], webhook: str) -> dict[str, float]:
    """The API server's count of its calls to ``webhook``, by answer code (its /metrics)."""
    metrics = subprocess.run(
        ["kubectl", "get", "--raw", "/metrics"],
        env={**env, "KUBECONFIG": str(Path(env[ENV_STATE_DIR]) / "kubeconfig")},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    counts: dict[str, float] = {}
    pattern = re.compile(r"^apiserver_admission_webhook_request_total\{(.*)\} (\S+)$")
    for line in metrics.splitlines():
        match = pattern.match(line)
        if match and f'name="{webhook}"' in match.group(1):
            code = re.search(r'code="(\d+)"', match.group(1))
            key = code.group(1) if code else "?"
            counts[key] = counts.get(key, 0.0) + float(match.group(2))
    return counts


def kubectl_path_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with kubectl and helm of the binary cache on PATH (as `cluster env` exports)."""
    tools = f"{binaries.resolve_bin_dir()}:{binaries.helm_path().parent}"
    return {**env, "PATH": f"{tools}:{env['PATH']}"}


# The image ------------------------------------------------------------------------------------


IMAGE_CHECK = """
import importlib, os, pkgutil, subprocess, harvester_quota as p
names = [m.name for m in pkgutil.walk_packages(p.__path__, 'harvester_quota.')]
for name in names:
    importlib.import_module(name)
print('uid', os.getuid())
print('modules', len(names))
print('testbench', 'testbench' in os.listdir(p.__path__[0]))
for command in ('run', 'webhook', 'explain', 'preflight', 'release'):
    out = subprocess.run(['harvester-quota', command, '--help'], capture_output=True, text=True)
    print(command, out.returncode, out.stdout.startswith('usage: harvester-quota'))
"""
"""Run in the image by its own Python: every product module imported, the user, whether the
test bench came along, and each subcommand's start (its --help)."""


def test_the_image_runs_its_commands_as_uid_65532_on_a_read_only_root() -> None:
    """The wheel alone (install_requires, no test or bench extras) carries every module the
    product imports, and each subcommand starts, as the image's user on a read-only root (one
    container: IMAGE_CHECK)."""
    archive = image.build_image()
    assert archive.exists()
    argv = [*image.PODMAN, "run", "--rm", "--read-only", "--network", "none"]
    argv += [*image.PODMAN_LIMITS, "--entrypoint", "python", image.product_image()]
    done = subprocess.run(
        [*argv, "-c", IMAGE_CHECK], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    seen = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert seen.pop("uid") == "65532"
    assert int(seen.pop("modules")) > 20
    assert seen.pop("testbench") == "False"
    assert seen == dict.fromkeys(("run", "webhook", "explain", "preflight", "release"), "0 True")


# The install ------------------------------------------------------------------------------------


def test_the_chart_s_pods_run_from_the_image_on_the_real_node(
    installed: ClusterInfo, rest: RestClient, state_dir: Path
) -> None:
    """Two controllers and two webhooks, Running and ready on real-node-0 from the image, each
    container as uid 65532 with a read-only root, no capability, no privilege gain, the
    RuntimeDefault seccomp filter applied, and the projected service-account token mounted."""
    pods = product_pods(rest)
    assert len(pods) == 4, [p["metadata"]["name"] for p in pods]
    subnet = ipaddress.ip_network(realnode.POD_SUBNET)
    for pod in pods:
        name = pod["metadata"]["name"]
        assert pod["spec"]["nodeName"] == realnode.NODE_NAME, name
        assert pod["status"]["phase"] == "Running", name
        assert ipaddress.ip_address(pod["status"]["podIP"]) in subnet, name
        (container,) = pod["status"]["containerStatuses"]
        assert container["ready"], name
        assert container["image"].endswith(f"harvester-quota:{image.app_version()}"), container
        pid = container_pid(state_dir, container["containerID"])
        status = proc_status(pid)
        assert status["Uid"].split() == ["65532"] * 4, (name, status["Uid"])
        assert status["Seccomp"] == "2", (name, "the RuntimeDefault filter")
        assert status["NoNewPrivs"] == "1", name
        assert int(status["CapEff"], 16) == 0, name
        assert "ro" in root_mount_options(pid), name
        token = Path(f"/proc/{pid}/root/run/secrets/kubernetes.io/serviceaccount/token")
        assert token.read_text().count(".") == 2, "a JWT"


def test_the_api_server_calls_the_webhook_through_its_service(
    installed: ClusterInfo, rest: RestClient, shell_env: dict[str, str]
) -> None:
    """Every rule of the ValidatingWebhookConfiguration names the Service (no URL), whose
    endpoints are the webhook pods' addresses; a pod created on a kwok node is judged by the
    webhook (the API server's count of 200 answers from pods.harvester-quota.io grows), over a
    connection to the Service's ClusterIP that kube-proxy's rules sent to a webhook pod (the
    host's connection tracking shows the reply coming from a webhook pod's address)."""
    configs = rest.get("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations")
    (config,) = [c for c in configs["items"] if c["metadata"]["name"] == "harvester-quota"]
    for hook in config["webhooks"]:
        assert "url" not in hook["clientConfig"], hook["name"]
        assert hook["clientConfig"]["service"]["name"] == "harvester-quota-webhook"
        assert hook["clientConfig"].get("caBundle"), "filled by the webhook's own CA"
    webhook_ips = {p["status"]["podIP"] for p in product_pods(rest, WEBHOOK_SELECTOR)}
    slices = rest.get(
        f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices",
        labelSelector="kubernetes.io/service-name=harvester-quota-webhook",
    )["items"]
    addresses = {a for s in slices for e in s.get("endpoints") or [] for a in e["addresses"]}
    assert addresses == webhook_ips
    env = kubectl_path_env(shell_env)
    before = webhook_calls(env, "pods.harvester-quota.io").get("200", 0.0)
    tenant_namespace(rest)
    rest.post(f"/api/v1/namespaces/{TENANT}/pods", kwok_pod("p1"))
    after = webhook_calls(env, "pods.harvester-quota.io").get("200", 0.0)
    assert after > before, "the webhook answered the API server through its Service"
    service = rest.get(f"/api/v1/namespaces/{NAMESPACE}/services/harvester-quota-webhook")
    answered_by = nat_replies(service["spec"]["clusterIP"], service["spec"]["ports"][0]["port"])
    assert answered_by and answered_by <= webhook_ips, (answered_by, webhook_ips)


def nat_replies(address: str, port: int) -> set[str]:
    """The addresses that answered TCP connections to ``address:port`` on this host: the
    sources of their replies in the kernel's connection tracking (kube-proxy's DNAT of a
    ClusterIP shows there as a reply from the endpoint it chose)."""
    argv = ["conntrack", "-L", "-p", "tcp", "--orig-dst", address, "--dport", str(port)]
    listed = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
    print(f"$ {' '.join(argv)}\n{listed}")
    replies = set()
    for line in listed.splitlines():
        sources = re.findall(r"\bsrc=(\S+)", line)
        if len(sources) == 2:  # the original direction's source, then the reply's
            replies.add(sources[1])
    return replies


TENANT = "tenant-service"
"""Where the tests create plain pods on a kwok node, each one a call of the pods rule."""


def tenant_namespace(rest: RestClient) -> None:
    if not rest.exists(f"/api/v1/namespaces/{TENANT}"):
        rest.post("/api/v1/namespaces", {"metadata": {"name": TENANT}})


def kwok_pod(name: str, node: str = "kwok-node-0") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
    }


@pytest.fixture
async def kubevirt_api(api: ApiClient, installed: ClusterInfo) -> AsyncIterator[ApiClient]:
    """KubeVirt's controller as the chart's rules know it: the service account the quickstart
    created (harvester-system/kubevirt-controller), with a token from the TokenRequest API and,
    for this test, the rights of cluster-admin (virt-controller's own are as broad for pods)."""
    binding = {
        "metadata": {"name": "test-kubevirt-controller"},
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [
            {"kind": "ServiceAccount", "name": "kubevirt-controller", "namespace": NAMESPACE}
        ],
    }
    with contextlib.suppress(errors.AlreadyExists):
        await api.create(CLUSTER_ROLE_BINDINGS, binding)
    async with await deploy.client_as(api, installed, "kubevirt-controller") as client:
        yield client


async def test_a_migration_on_the_kwok_side_is_raised_admitted_and_given_back(
    api: ApiClient, kubevirt_api: ApiClient, shell_env: dict[str, str]
) -> None:
    """The controller in its pod raises the quota for a migration of a VM on a kwok node, the
    target pod KubeVirt's controller creates is admitted (the webhook's migration-target rule
    answered, then quota admission), and once the migration succeeded and the source pod is
    gone the quota is exactly its base again."""
    env = kubectl_path_env(shell_env)
    rule = "migration-targets.harvester-quota.io"
    before = (await asyncio.to_thread(webhook_calls, env, rule)).get("200", 0.0)
    namespace = "tenant-migrate"
    await api.create(NAMESPACES, {"metadata": {"name": namespace}})
    kv = KubeVirtByHand(api, namespace)
    vmi, source, migration = await kv.v170_migration()
    kubevirt = KubeVirtByHand(kubevirt_api, namespace)

    async def raised() -> bool:
        hard = (await kv.quota())["spec"]["hard"]
        return bool(hard != BASE_HARD)

    await eventually(raised, timeout=60, what="the controller raised the quota")
    target = await eventually(
        lambda: kubevirt.try_create_target(vmi, migration),
        timeout=60,
        what="the target pod admitted",
    )
    answered = (await asyncio.to_thread(webhook_calls, env, rule)).get("200", 0.0)
    assert answered > before, "the webhook judged the target pod (its migration-target rule)"
    await succeed_migration(kubevirt, migration, source, target)
    await kubevirt.delete_pod(source["metadata"]["name"], grace=0)

    async def at_base() -> bool:
        quota = await kv.quota()
        keys = [k for k in quota["metadata"].get("annotations") or {} if "migrating" in k]
        return bool(quota["spec"]["hard"] == BASE_HARD and not keys)

    await eventually(at_base, timeout=60, what="the quota back at its base")


# Restarts and probes -------------------------------------------------------------------------


def restart_count(rest: RestClient, name: str) -> int:
    pod = rest.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
    statuses = pod["status"].get("containerStatuses") or [{}]
    return int(statuses[0].get("restartCount", 0))


def ready(rest: RestClient, name: str) -> bool:
    pod = rest.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
    conditions = pod["status"].get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def admit_pods_while(
    rest: RestClient, prefix: str, until: Any, timeout: float, at_least: int = 0
) -> int:
    """Creates pods on a kwok node (each one a webhook call) until ``until()`` and at least
    ``at_least`` were created, or fails at ``timeout``; returns how many were created. Every
    create must succeed."""
    tenant_namespace(rest)
    created = 0
    deadline = time.monotonic() + timeout
    while created < at_least or not until():
        assert time.monotonic() < deadline, f"not done after {timeout:.0f}s"
        rest.post(f"/api/v1/namespaces/{TENANT}/pods", kwok_pod(f"{prefix}-{created}"))
        created += 1
        time.sleep(0.2)
    return created


def routed_to(address: str) -> bool:
    """Whether kube-proxy's rules send a Service's new connections to ``address``: a KUBE-SVC
    chain jumps to a KUBE-SEP chain that DNATs to it (the host's nat table)."""
    argv = ["iptables-save", "-t", "nat"]
    rules = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
    lines = rules.splitlines()
    endpoints = {
        line.split()[1]
        for line in lines
        if line.startswith("-A KUBE-SEP-") and f"--to-destination {address}:" in line
    }
    return any(line.startswith("-A KUBE-SVC-") and line.split()[-1] in endpoints for line in lines)


def test_a_killed_webhook_container_is_restarted_while_the_other_replica_answers(
    installed: ClusterInfo, rest: RestClient, state_dir: Path, shell_env: dict[str, str]
) -> None:
    """SIGKILL of one webhook container while pods keep being created: until kube-proxy takes
    the dead replica's address out of the Service's rules, calls that meet it fail (the pods
    rule fails open: they are admitted unjudged; counted and printed); from then on every call
    is answered by the other replica (the API server's count of 200 answers grows by exactly
    the pods created, no other answer), until the kubelet has restarted the killed container
    (exit 137 recorded) and it is ready again."""
    first, _second = sorted(p["metadata"]["name"] for p in product_pods(rest, WEBHOOK_SELECTOR))
    pod = rest.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{first}")
    restarts = restart_count(rest, first)
    env = kubectl_path_env(shell_env)
    before = webhook_calls(env, "pods.harvester-quota.io")
    assert routed_to(pod["status"]["podIP"])
    os.kill(container_pid(state_dir, pod["status"]["containerStatuses"][0]["containerID"]), 9)
    unrouted = admit_pods_while(
        rest, "before-removal", lambda: not routed_to(pod["status"]["podIP"]), timeout=60
    )
    middle = webhook_calls(env, "pods.harvester-quota.io")
    created = admit_pods_while(
        rest,
        "during-restart",
        lambda: restart_count(rest, first) > restarts and ready(rest, first),
        timeout=120,
        at_least=3,
    )
    after = webhook_calls(env, "pods.harvester-quota.io")
    judged = middle.get("200", 0.0) - before.get("200", 0.0)
    failed = sum(middle.values()) - sum(before.values()) - judged
    print(f"{unrouted} pods created before the dead replica left the rules: {failed:.0f} unjudged")
    grown = {code: after[code] - middle.get(code, 0.0) for code in after}
    assert grown == {**dict.fromkeys(middle, 0.0), "200": float(created)}, (middle, after)
    terminated = rest.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{first}")["status"][
        "containerStatuses"
    ][0]["lastState"]["terminated"]
    assert terminated["exitCode"] == 137, terminated


def test_a_frozen_webhook_fails_its_probes_as_the_chart_configures_them(
    installed: ClusterInfo, rest: RestClient, state_dir: Path
) -> None:
    """A webhook container that stops answering (SIGSTOP): its readiness probe takes it out of
    the Service's endpoints, its liveness probe has the kubelet restart it, as the chart's probes
    say (readiness every 5 s, liveness every 10 s, three failures each), and it is ready again."""
    _first, second = sorted(p["metadata"]["name"] for p in product_pods(rest, WEBHOOK_SELECTOR))
    pod = rest.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{second}")
    restarts = restart_count(rest, second)
    pid = container_pid(state_dir, pod["status"]["containerStatuses"][0]["containerID"])
    os.kill(pid, signal.SIGSTOP)
    wait_until(lambda: not ready(rest, second), timeout=60, what="the frozen replica not ready")
    wait_until(
        lambda: restart_count(rest, second) > restarts, timeout=150, what="the kubelet restarted it"
    )
    wait_until(lambda: ready(rest, second), timeout=60, what="the restarted replica ready")
    events = rest.get(
        f"/api/v1/namespaces/{NAMESPACE}/events", fieldSelector=f"involvedObject.name={second}"
    )["items"]
    messages = [e.get("message", "") for e in events if e.get("reason") == "Unhealthy"]
    assert any(m.startswith("Liveness probe failed") for m in messages), messages
    assert any(m.startswith("Readiness probe failed") for m in messages), messages


# The uninstall ----------------------------------------------------------------------------------


HOOK_SELECTOR = f"{SELECTOR},app.kubernetes.io/component=release"


def hook_running(rest: RestClient) -> bool:
    """The pre-delete hook's pod runs (on a node, its container started)."""
    return any(p["status"].get("phase") == "Running" for p in product_pods(rest, HOOK_SELECTOR))


async def test_helm_uninstall_s_hook_waits_out_a_migration_on_the_real_node_and_leaves_every_quota_at_its_base(
    installed: ClusterInfo, api: ApiClient, rest: RestClient, shell_env: dict[str, str]
) -> None:
    """A migration holds room when the quickstart's uninstall lines start: the pre-delete hook's
    Job runs on the real node (the kwok nodes cordoned) and waits in its grace while the room
    stands (the uninstall still under way); the migration fails meanwhile, the controller gives
    the room back, the hook finishes and Helm removes the release: every quota is exactly its
    base, no record of ours is left anywhere (release.leftovers), no product pod is left. Then
    `cluster down` leaves no bridge on the host."""
    namespace = "tenant-held"
    await api.create(NAMESPACES, {"metadata": {"name": namespace}})
    kv = KubeVirtByHand(api, namespace)
    _vmi, _source, migration = await kv.v170_migration()

    async def raised() -> bool:
        return bool((await kv.quota())["spec"]["hard"] != BASE_HARD)

    await eventually(raised, timeout=60, what="the controller raised the quota")
    lines = quickstart_lines("real-node uninstall")
    assert lines[-1].endswith("cluster down")
    setup = ['export PATH="$PWD/.venv/bin:$PATH"', 'eval "$(harvester-quota-bench cluster env)"']
    uninstall = asyncio.ensure_future(asyncio.to_thread(run_lines, setup + lines[:-1], shell_env))
    await eventually(
        lambda: asyncio.to_thread(hook_running, rest), timeout=120, what="the hook's pod running"
    )
    assert await raised() and not uninstall.done(), "the hook waits while the room stands"
    await kv.set_phase(migration, "Failed")
    await uninstall
    quotas = (await api.list_all(RESOURCE_QUOTAS)).items
    assert {q["metadata"]["namespace"] for q in quotas} >= {namespace, "tenant-migrate"}
    assert all(q["spec"]["hard"] == BASE_HARD for q in quotas), [q["spec"] for q in quotas]
    assert await release.leftovers(api) == []
    # Helm waits for the Deployments to go; their pods terminate after them.
    await eventually(
        lambda: asyncio.to_thread(lambda: not product_pods(rest)),
        timeout=90,
        what="no product pod left",
    )
    events = rest.get(f"/api/v1/namespaces/{NAMESPACE}/events", fieldSelector="reason=Scheduled")
    placed = [e["message"] for e in events["items"] if "harvester-quota-release" in e["message"]]
    assert placed and all(m.endswith(f"to {realnode.NODE_NAME}") for m in placed), placed
    await asyncio.to_thread(run_lines, setup + lines[-1:], shell_env)
    bridge = f"/sys/class/net/{realnode.BRIDGE}"
    assert not await asyncio.to_thread(os.path.exists, bridge), "the pod bridge is gone"
