"""Running one local cluster per state directory: up, down, status, env.

`up` starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok as detached
processes, waits until each is really usable (etcd /health, apiserver /readyz with the admin
certificate, the default service account that kube-controller-manager creates, kwok's fake nodes
Ready), writes an admin kubeconfig and records what it started in ``state.json``. With
``virt_controller=True`` it also runs KubeVirt's own virt-controller (ready once it holds its
Lease), on KubeVirt's generated CRDs instead of our hand-written ones; that is opt-in while the
test suite's KubeVirt simulator, which would fight it, plays virt-controller's part.

`up` is idempotent: on a healthy cluster it returns at once; on a stale state directory (a killed
run) it stops what is left and starts afresh. Any failure stops everything it started and raises
one ClusterError that names the cause and the log file, so there is never a half-started cluster
left behind.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import datetime
import json
import os
import shutil
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ...generic.config import ClientConfig, client_ssl_context
from . import audit, harvester, process
from .binaries import (
    HARVESTER_CONTROLLERS,
    KubeVirtBuild,
    build_harvester,
    build_kubevirt,
    harvester_kubevirt_version,
    harvester_version,
    kubevirt_version,
    resolve_bin_dir,
)
from .errors import ClusterError
from .nodes import DEFAULT_NODES, NODE_GRACE_MARGIN, node_lease_seconds
from .pki import (
    APISERVER_DNS_NAMES,
    APISERVER_IPS,
    CertificateAuthority,
    service_account_key,
    webhook_client_pki,
)
from .process import ProcessRecord
from .rest import ApiError, RestClient

ENV_STATE_DIR = "HARVESTER_QUOTA_STATE_DIR"
LOG_DIR = "logs"
"""The components' logs in the state directory (and the API server's audit log, `audit`)."""
STAGES_FILE = Path(__file__).parent / "stages" / "kwok-stages.yaml"
CRDS_FILE = Path(__file__).parent / "crds" / "kubevirt-harvester.yaml"
MTQ_CRDS_FILE = Path(__file__).parent / "crds" / "mtq.yaml"
USER_ROLES_FILE = Path(__file__).parent / "rbac" / "kubevirt-user-roles.yaml"
"""KubeVirt's ClusterRoles for its users (kubevirt.io:edit, kubevirt.io:migrate), which
virt-operator would install."""
"""MTQ's VirtualMachineMigrationResourceQuota: the chart's crds/ file, copied (a test keeps the
two equal), with MTQ's real schema."""
STATE_VERSION = 1
KCM_IDENTITY_FLAG = "--use-service-account-credentials=true"
"""Each of kube-controller-manager's controllers calls the API server as its own service account
(system:serviceaccount:kube-system:resourcequota-controller, ...:namespace-controller), as in
kubeadm, RKE2 and Harvester clusters: admission webhooks that exempt a controller by its user
(rancher-webhook) see it as in production."""
CONTEXT_NAME = "harvester-quota-local"
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"
START_ATTEMPTS = 3
# Budgets on a 2-core machine: the API server alone has been seen to take over 30 s to be ready.
APISERVER_READY_TIMEOUT = 120.0
STEP_TIMEOUT = 60.0

# Stop order: the reverse of start order, so nothing loses its API server before it exits.
START_ORDER = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "virt-controller",
    "harvester-controllers",
)

KUBEVIRT_NAMESPACE = "kubevirt"
VIRT_CONTROLLER_USER = "system:serviceaccount:kubevirt:kubevirt-controller"
"""Who virt-controller is to the API server, as in a KubeVirt install: webhooks and the
authorizer see its service account, not an administrator."""
VIRT_CONTROLLER_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:kubevirt")
VIRT_CONTROLLER_KUBECONFIG = "virt-controller.kubeconfig"
"""virt-controller's kubeconfig in the state directory (its client certificate: KubeVirt's
identity, for tests that act as KubeVirt's controller does)."""
# virt-controller's leader election Lease: it starts its controllers only once it holds it.
VIRT_CONTROLLER_LEASE = (
    f"/apis/coordination.k8s.io/v1/namespaces/{KUBEVIRT_NAMESPACE}/leases/virt-controller"
)
LAUNCHER_IMAGE_REPOSITORY = "harvester-quota.invalid/virt-launcher"
"""kwok runs the launcher pods, nothing pulls the image: any name does. Each KubeVirt version has
its own tag (`launcher_image`), as each release ships its own virt-launcher: after
`switch_virt_controller` the VMIs that started before it are outdated workloads to the new
virt-controller (its workload updater migrates them, as after a real upgrade)."""
# Device plugins virt-handler would announce on a real node; virt-controller's launcher pods
# request kvm (and tun, vhost-net for masquerade/bridge networking), so kwok nodes offer plenty.
KUBEVIRT_DEVICES = (
    "devices.kubevirt.io/kvm",
    "devices.kubevirt.io/tun",
    "devices.kubevirt.io/vhost-net",
)
KUBEVIRT_DEVICE_COUNT = "1000"
# Labels virt-handler's node labeller would set on a real node, which launcher pods select on:
# schedulable for VMIs, the q35 machine type (a defaulted VMI's), and one CPU model both as the
# node's host model and as a migration target for it (a host-model VMI's migration target pod
# selects `cpu-model-migration.node.kubevirt.io/<the source node's host model>`).
KWOK_CPU_MODEL = "Skylake-Client-IBRS"
KUBEVIRT_NODE_LABELS = {
    "kubevirt.io/schedulable": "true",
    "machine-type.node.kubevirt.io/q35": "true",
    f"host-model-cpu.node.kubevirt.io/{KWOK_CPU_MODEL}": "true",
    f"cpu-model-migration.node.kubevirt.io/{KWOK_CPU_MODEL}": "true",
    f"cpu-model.node.kubevirt.io/{KWOK_CPU_MODEL}": "true",
}


def kubeconfig_document(
    cluster: dict[str, str], user: str, credentials: dict[str, str]
) -> dict[str, Any]:
    """A kubeconfig of one cluster (``cluster``: its server and certificate authority fields)
    and one user ``user`` (``credentials``: a client certificate or a token, as files or
    inline), joined by the context CONTEXT_NAME, the current one."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT_NAME, "cluster": cluster}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": CONTEXT_NAME, "context": {"cluster": CONTEXT_NAME, "user": user}}],
        "current-context": CONTEXT_NAME,
    }


def launcher_image(kubevirt: str) -> str:
    """The virt-launcher image virt-controller of KubeVirt ``kubevirt`` renders launcher pods
    with."""
    return f"{LAUNCHER_IMAGE_REPOSITORY}:{kubevirt}"


def default_state_dir(name: str = "cluster", env_var: str = ENV_STATE_DIR) -> Path:
    """$``env_var``, else $XDG_STATE_HOME/harvester-quota/``name``.

    Each user of a local cluster (the CLI's, the demo's, the test session's, the benchmark's)
    names its own directory, so that none of them stops or reuses another's cluster.
    """
    explicit = os.environ.get(env_var)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(xdg) / "harvester-quota" / name


class _PortConflict(Exception):
    """A component could not bind its port: another program took it after we chose it."""


@dataclass
class Ports:
    """The loopback ports of one cluster, chosen free at start."""

    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    virt_controller: int | None = None

    @classmethod
    def pick(cls) -> Ports:
        """Distinct free ports for the five components that always run."""
        chosen: set[int] = set()
        values: list[int] = []
        while len(values) < 5:
            port = process.free_port()
            if port not in chosen:
                chosen.add(port)
                values.append(port)
        return cls(*values)

    def pick_virt_controller(self) -> int:
        """Chooses (and returns) a free port for virt-controller, distinct from the others."""
        port = process.free_port()
        while port in self.all():
            port = process.free_port()
        self.virt_controller = port
        return port

    def all(self) -> list[int]:
        """The ports in use by components (an unused virt-controller port is not one)."""
        return [port for port in asdict(self).values() if port is not None]


@dataclass
class ClusterInfo:
    """Where a running local cluster is and how to reach it."""

    state_dir: Path
    kubeconfig: Path
    server: str
    ca_file: Path
    client_cert: Path
    client_key: Path
    ports: Ports
    nodes: list[str] = field(default_factory=list)
    processes: list[ProcessRecord] = field(default_factory=list)
    kubevirt_version: str | None = None
    """The version of KubeVirt's virt-controller running here; None when it does not run."""
    harvester_version: str | None = None
    """The version of Harvester's own controllers running here; None when they do not run."""
    webhook_client_ca: Path | None = None
    """The CA of the client certificate (CN pki.WEBHOOK_CLIENT_NAME) the API server presents to
    every admission webhook (its AdmissionConfiguration's kubeconfig, user "*"): a webhook
    trusting it accepts the API server's calls only. None in the state of a cluster started
    before the API server had one; `up` starts such a cluster afresh."""
    node_ip: str | None = None
    """The host address a real node (realnode.py) runs beside the kwok nodes with: the API server
    listens on it too and gives it as the `kubernetes` Service's endpoint, so pods reach the API
    server; None (the default) where only kwok nodes run."""

    @property
    def audit_log(self) -> Path:
        """The API server's audit log (`audit.AuditLog` reads it): its accepted and refused writes
        to quotas, namespaces, pods and KubeVirt's objects."""
        return audit_log_path(self.state_dir)

    def rest(self, timeout: float = 10.0) -> RestClient:
        """A synchronous admin client for this cluster."""
        return RestClient(
            host="127.0.0.1",
            port=self.ports.apiserver,
            ca=self.ca_file,
            cert=self.client_cert,
            key=self.client_key,
            timeout=timeout,
        )

    def admin_config(self) -> ClientConfig:
        """The admin client's configuration (group system:masters) for the product's ApiClient."""
        return client_config_from_files(
            self.server, ca_file=self.ca_file, cert_file=self.client_cert, key_file=self.client_key
        )

    def certificate_authority(self) -> CertificateAuthority:
        """The cluster's CA, to sign serving certificates for webhooks the API server will call."""
        return CertificateAuthority.load(self.ca_file, self.ca_file.with_name("ca.key"))

    def webhook_client_authority(self) -> CertificateAuthority:
        """The CA of `webhook_client_ca`, to sign certificates that pass for the API server's."""
        if self.webhook_client_ca is None:
            raise ClusterError("this cluster's API server presents no webhook client certificate")
        return CertificateAuthority.load(
            self.webhook_client_ca, self.webhook_client_ca.with_suffix(".key")
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "state_dir": str(self.state_dir),
            "kubeconfig": str(self.kubeconfig),
            "server": self.server,
            "ca_file": str(self.ca_file),
            "client_cert": str(self.client_cert),
            "client_key": str(self.client_key),
            "ports": asdict(self.ports),
            "nodes": self.nodes,
            "processes": [asdict(record) for record in self.processes],
            "kubevirt_version": self.kubevirt_version,
            "harvester_version": self.harvester_version,
            "webhook_client_ca": str(self.webhook_client_ca) if self.webhook_client_ca else None,
            "node_ip": self.node_ip,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClusterInfo:
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"unknown state version {data.get('version')!r}")
        return cls(
            state_dir=Path(data["state_dir"]),
            kubeconfig=Path(data["kubeconfig"]),
            server=data["server"],
            ca_file=Path(data["ca_file"]),
            client_cert=Path(data["client_cert"]),
            client_key=Path(data["client_key"]),
            ports=Ports(**data["ports"]),
            nodes=list(data["nodes"]),
            processes=[
                ProcessRecord(**{**record, "argv": tuple(record.get("argv", ()))})
                for record in data["processes"]
            ],
            kubevirt_version=data.get("kubevirt_version"),
            harvester_version=data.get("harvester_version"),
            webhook_client_ca=(
                Path(data["webhook_client_ca"]) if data.get("webhook_client_ca") else None
            ),
            node_ip=data.get("node_ip"),
        )

    def is_current(self) -> bool:
        """Started as this version's `up` starts a cluster: its API server presents the webhook
        client certificate (a state written before that has none, or a state dir whose pki/
        lost the file) and writes the audit log (audit.POLICY_FLAG), and kube-controller-manager's
        controllers act as their own service accounts (KCM_IDENTITY_FLAG)."""
        if self.webhook_client_ca is None or not self.webhook_client_ca.exists():
            return False
        return self._ran_with("kube-controller-manager", KCM_IDENTITY_FLAG) and self._ran_with(
            "kube-apiserver", audit.POLICY_FLAG
        )

    def _ran_with(self, component: str, flag: str) -> bool:
        """A recorded process of ``component`` was started with ``flag`` (as is, or with a value
        after "=")."""
        return any(
            argument == flag or argument.startswith(f"{flag}=")
            for record in self.processes
            if record.name == component
            for argument in record.argv
        )


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    pid: int
    running: bool
    log: str


class LocalCluster:
    """One local cluster, identified by its state directory."""

    def __init__(self, state_dir: Path | None = None, *, bin_dir: Path | None = None) -> None:
        self.state_dir = (state_dir or default_state_dir()).resolve()
        self._bin_dir = bin_dir
        # What the state directory holds.
        self.state_file = self.state_dir / "state.json"
        self.pki_dir = self.state_dir / "pki"
        self.log_dir = self.state_dir / LOG_DIR
        self.kubeconfig_path = self.state_dir / "kubeconfig"
        self.etcd_dir = self.state_dir / "etcd-data"

    # Public operations -----------------------------------------------------------------------

    def up(
        self,
        *,
        nodes: int = DEFAULT_NODES,
        node_pods: int = 110,
        virt_controller: bool = False,
        kubevirt: str | None = None,
        harvester: str | None = None,
        node_ip: str | None = None,
    ) -> ClusterInfo:
        """Starts the cluster unless it already runs as asked; returns once it is ready to use.

        ``virt_controller`` adds KubeVirt's virt-controller of version ``kubevirt`` (default:
        ``binaries.kubevirt_version()``), built first if it is not in the cache: before anything is
        stopped, so a failed build leaves a running cluster alone. A healthy cluster started with
        another virt-controller choice is stopped and started afresh.

        ``harvester`` adds Harvester's own migration and resourcequota controllers of that version
        (``harvester.py``), built first like virt-controller; they act on every namespace. With
        them, virt-controller's default is the KubeVirt that Harvester version ships
        (``binaries.harvester_kubevirt_version``), not $HARVESTER_QUOTA_KUBEVIRT_VERSION.

        ``node_ip`` (a host address) makes room for a real node beside the kwok nodes
        (``realnode.RealNode`` starts it): the API server listens on every address, not on
        loopback only, and gives ``node_ip`` as the `kubernetes` Service's endpoint (pods reach it
        through that Service's ClusterIP), and kwok manages only the nodes it created (annotated
        ``kwok.x-k8s.io/node: fake``), leaving the others to their kubelet.
        """
        if kubevirt is not None and not virt_controller:
            raise ValueError(f"a KubeVirt version ({kubevirt}) is only used with virt_controller")
        if harvester and virt_controller and kubevirt is None:
            kubevirt = harvester_kubevirt_version(harvester)
        wanted = kubevirt_version(kubevirt) if virt_controller else None
        kubevirt_build = build_kubevirt(wanted) if wanted else None
        wanted_harvester = harvester_version(harvester) if harvester else None
        harvester_build = (
            (wanted_harvester, build_harvester(wanted_harvester)) if wanted_harvester else None
        )
        with self._locked():
            existing = self._read_state()
            if (
                existing is not None
                and existing.kubevirt_version == wanted
                and existing.harvester_version == wanted_harvester
                and existing.node_ip == node_ip
                and existing.is_current()
                and self._healthy(existing)
            ):
                return existing
            if existing is not None:
                self._stop_processes(existing.processes)
            self._reset_runtime()
            bin_dir = self._bin_dir or resolve_bin_dir()
            self._write_pki()
            audit.write_policy(self.audit_policy_path)
            for attempt in range(1, START_ATTEMPTS + 1):
                try:
                    info = self._start(
                        bin_dir,
                        nodes=nodes,
                        node_pods=node_pods,
                        kubevirt=kubevirt_build,
                        harvester=harvester_build,
                        node_ip=node_ip,
                    )
                except _PortConflict:
                    if attempt == START_ATTEMPTS:
                        raise ClusterError(
                            f"ports kept being taken by other programs in {START_ATTEMPTS} tries; "
                            f"logs: {self.log_dir}"
                        ) from None
                    self._reset_runtime()
                    continue
                self._write_state(info)
                return info
        raise AssertionError("unreachable")  # pragma: no cover

    def down(self) -> bool:
        """Stops the cluster and removes its data; False if nothing was recorded as running."""
        with self._locked():
            existing = self._read_state()
            if existing is None:
                return False
            self._stop_processes(existing.processes)
            still_open = [port for port in existing.ports.all() if process.port_in_use(port)]
            self._reset_runtime()
            if still_open:
                raise ClusterError(
                    f"stopped every recorded process, but ports {still_open} still accept "
                    "connections: another program holds them"
                )
            return True

    def restart_component(self, name: str) -> ClusterInfo:
        """Stops one component and starts it again with the same arguments (and port).

        Tests use it to restart the API server on the same etcd and watch clients recover.
        """
        with self._locked():
            info = self._read_state()
            if info is None:
                raise ClusterError("no local cluster is recorded in this state directory")
            record = next((r for r in info.processes if r.name == name), None)
            if record is None or not record.argv:
                raise ClusterError(f"no restartable component {name!r} in this cluster")
            process.stop(record)
            replacement = process.start(
                name, record.argv, Path(record.log), env=process.child_env(), cwd=self.state_dir
            )
            info.processes = [replacement if r is record else r for r in info.processes]
            if name == "kube-apiserver":
                self._await(info, name, info.rest(timeout=5.0).healthy, APISERVER_READY_TIMEOUT)
            self._write_state(info)
            return info

    def compact_etcd(self) -> int:
        """Compacts etcd's history up to its current revision; returns that revision.

        After this, a watch or list at any older resourceVersion that is not served from the API
        server's watch cache gets 410 Gone: the way to test an informer's relist path for real.
        """
        info = self._read_state()
        if info is None:
            raise ClusterError("no local cluster is recorded in this state directory")
        base = f"http://127.0.0.1:{info.ports.etcd_client}/v3/kv"
        probe = _etcd_post(f"{base}/range", {"key": base64.b64encode(b"/").decode(), "limit": 1})
        revision = int(probe["header"]["revision"])
        _etcd_post(f"{base}/compaction", {"revision": revision, "physical": True})
        return revision

    def switch_virt_controller(self, kubevirt: str) -> ClusterInfo:
        """Replaces the running virt-controller with KubeVirt ``kubevirt``'s, the rest of the
        cluster and every object kept: what virt-operator's update does to the control plane.

        In order: the old virt-controller is stopped; the new version's CRDs replace the installed
        ones (a CRD it adds is created); the KubeVirt CR's status names the new version, Deployed
        (what virt-operator writes once its rollout is done, and what the workload updater waits
        for); then the new virt-controller starts with its own launcher image
        (`launcher_image`), ready once it renewed the Lease (the same identity, its host name, so
        it needs not wait for the old one's to expire). The node side (the virt-handler stand-in,
        running launcher pods) is not touched. Built first, like `up`. Returns the recorded
        state; a no-op if that version runs already. Raises ClusterError if no virt-controller
        runs here, or if the new one fails to lead (the state then records it, for `down`)."""
        wanted = kubevirt_version(kubevirt)
        build = build_kubevirt(wanted)
        with self._locked():
            info = self._read_state()
            old = _virt_controller_record(info)
            if info is None or old is None:
                raise ClusterError("no virt-controller runs in this cluster: `up` it with one")
            if info.kubevirt_version == wanted:
                return info
            rest = info.rest(timeout=5.0)
            process.stop(old)
            info.processes = [record for record in info.processes if record is not old]
            info.kubevirt_version = None  # until the new one leads: `up` then starts afresh
            try:
                crds = _install_crds(rest, build.crds, replace=True)
                self._await(
                    info, "kube-apiserver", lambda: _crds_established(rest, crds), STEP_TIMEOUT
                )
                _set_kubevirt_status(rest, wanted)
                launched = datetime.datetime.now(datetime.UTC)
                port = info.ports.pick_virt_controller()
                args = self._virt_controller_args(port, wanted)
                self._launch(info, build.directory, "virt-controller", args)
                self._await(
                    info, "virt-controller", lambda: _lease_renewed(rest, launched), STEP_TIMEOUT
                )
                info.kubevirt_version = wanted
            finally:
                self._write_state(info)
            return info

    def info(self) -> ClusterInfo | None:
        """The recorded cluster, whether or not it is healthy; None if none is recorded."""
        return self._read_state()

    def status(self) -> tuple[ClusterInfo | None, list[ComponentStatus], bool]:
        """(recorded cluster, each component's process state, API server ready)."""
        info = self._read_state()
        if info is None:
            return None, [], False
        components = [
            ComponentStatus(record.name, record.pid, record.running(), record.log)
            for record in info.processes
        ]
        return info, components, info.rest().healthy("/readyz")

    # Starting ----------------------------------------------------------------------------------

    def _start(
        self,
        bin_dir: Path,
        *,
        nodes: int,
        node_pods: int,
        kubevirt: KubeVirtBuild | None,
        harvester: tuple[str, Path] | None = None,
        node_ip: str | None = None,
    ) -> ClusterInfo:
        ports = Ports.pick()
        info = ClusterInfo(
            state_dir=self.state_dir,
            kubeconfig=self.kubeconfig_path,
            server=f"https://127.0.0.1:{ports.apiserver}",
            ca_file=self.pki_dir / "ca.crt",
            client_cert=self.pki_dir / "admin.crt",
            client_key=self.pki_dir / "admin.key",
            ports=ports,
            kubevirt_version=kubevirt.version if kubevirt else None,
            harvester_version=harvester[0] if harvester else None,
            webhook_client_ca=self.pki_dir / "webhook-client-ca.crt",
            node_ip=node_ip,
        )
        try:
            self._launch(info, bin_dir, "etcd", self._etcd_args(ports))
            self._await(info, "etcd", lambda: _etcd_healthy(ports.etcd_client), STEP_TIMEOUT)
            self._launch(info, bin_dir, "kube-apiserver", self._apiserver_args(ports, node_ip))
            rest = info.rest(timeout=5.0)
            self._await(info, "kube-apiserver", rest.healthy, APISERVER_READY_TIMEOUT)
            self._write_kubeconfig(info)
            crds = _install_crds(rest, kubevirt.crds if kubevirt else None)
            _install_user_roles(rest)
            lease = node_lease_seconds(nodes)
            self._launch(info, bin_dir, "kube-controller-manager", self._kcm_args(ports, lease))
            self._launch(info, bin_dir, "kube-scheduler", self._scheduler_args(ports))
            self._launch(
                info, bin_dir, "kwok", self._kwok_args(lease, fake_only=node_ip is not None)
            )
            self._await(
                info,
                "kube-controller-manager",
                lambda: rest.exists("/api/v1/namespaces/default/serviceaccounts/default"),
                STEP_TIMEOUT,
            )
            info.nodes = self._create_nodes(rest, nodes, node_pods, kubevirt=kubevirt is not None)
            self._await(info, "kwok", lambda: _nodes_ready(rest, info.nodes), STEP_TIMEOUT)
            self._await(
                info, "kube-scheduler", lambda: _https_ok(ports.scheduler, "/healthz"), STEP_TIMEOUT
            )
            self._await(info, "kube-apiserver", lambda: _crds_established(rest, crds), STEP_TIMEOUT)
            if kubevirt is not None:
                self._start_virt_controller(info, kubevirt, rest)
            if harvester is not None:
                self._start_harvester(info, harvester[1], rest)
        except BaseException:
            self._stop_processes(info.processes)
            raise
        return info

    def _start_virt_controller(
        self, info: ClusterInfo, kubevirt: KubeVirtBuild, rest: RestClient
    ) -> None:
        """What virt-operator would have done, then virt-controller itself, ready once it leads.

        virt-controller reads its configuration from the KubeVirt CR in its namespace and ignores
        a CR without a status phase, so the CR is created as virt-operator leaves it: Deployed.
        """
        _create_kubevirt_cr(rest, kubevirt.version)
        self._virt_controller_identity(info, rest)
        port = info.ports.pick_virt_controller()
        args = self._virt_controller_args(port, kubevirt.version)
        self._launch(info, kubevirt.directory, "virt-controller", args)
        self._await(info, "virt-controller", lambda: _lease_held(rest), STEP_TIMEOUT)

    def _start_harvester(self, info: ClusterInfo, binary: Path, rest: RestClient) -> None:
        """Harvester's controllers as Harvester's service account (a client certificate naming it:
        x509 authentication takes the name as is), ready once they hold Harvester's Lease, and its
        namespace validator, registered once it listens."""
        harvester.install_rbac(rest)
        authority = info.certificate_authority()
        cert, key = self.pki_dir / "harvester.crt", self.pki_dir / "harvester.key"
        authority.issue(
            harvester.HARVESTER_USER, organizations=harvester.HARVESTER_GROUPS, client=True
        ).write(cert, key)
        serving = self.pki_dir / "harvester-webhook.crt", self.pki_dir / "harvester-webhook.key"
        authority.issue("harvester-webhook", ip_addresses=("127.0.0.1",), server=True).write(
            *serving
        )
        kubeconfig = self.state_dir / harvester.KUBECONFIG
        self._write_kubeconfig(info, path=kubeconfig, cert=cert, key=key, user="harvester")
        port = process.free_port()
        args = harvester.controllers_args(kubeconfig, port, *serving)
        self._launch(info, binary.parent, HARVESTER_CONTROLLERS, args)
        self._await(info, HARVESTER_CONTROLLERS, lambda: process.port_in_use(port), STEP_TIMEOUT)
        harvester.register_webhook(rest, port, info.ca_file.read_bytes())
        self._await(
            info,
            HARVESTER_CONTROLLERS,
            lambda: harvester.lease_holder(rest) is not None,
            STEP_TIMEOUT,
        )

    @property
    def virt_controller_kubeconfig(self) -> Path:
        return self.state_dir / VIRT_CONTROLLER_KUBECONFIG

    def _virt_controller_identity(self, info: ClusterInfo, rest: RestClient) -> None:
        """A client certificate naming KubeVirt's service account (x509 authentication takes the
        name as is), bound to cluster-admin: virt-operator's ClusterRole for it is narrower, and
        this cluster only needs the identity to be KubeVirt's."""
        binding = harvester.cluster_admin_binding(
            "harvester-quota-local-kubevirt-controller",
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": VIRT_CONTROLLER_USER},
        )
        rest.post_unless_exists(
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            binding,
            "binding virt-controller's identity",
        )
        cert, key = self.pki_dir / "virt-controller.crt", self.pki_dir / "virt-controller.key"
        info.certificate_authority().issue(
            VIRT_CONTROLLER_USER, organizations=VIRT_CONTROLLER_GROUPS, client=True
        ).write(cert, key)
        self._write_kubeconfig(
            info,
            path=self.virt_controller_kubeconfig,
            cert=cert,
            key=key,
            user="kubevirt-controller",
        )

    def _launch(self, info: ClusterInfo, bin_dir: Path, name: str, args: list[str]) -> None:
        argv = [str(bin_dir / name), *args]
        process.launch(info.processes, name, argv, self.log_dir, self.state_dir)

    def _await(
        self,
        info: ClusterInfo,
        name: str,
        ready: Any,
        timeout: float,
    ) -> None:
        """Waits for ``ready()``; fails fast, with the log tail, if any started process died."""
        process.await_ready(
            ready,
            name=name,
            log=self.log_dir / f"{name}.log",
            timeout=timeout,
            records=info.processes,
            starting="the cluster",
            died=_port_conflict,
        )

    # Component arguments -------------------------------------------------------------------------

    def _etcd_args(self, ports: Ports) -> list[str]:
        client = f"http://127.0.0.1:{ports.etcd_client}"
        peer = f"http://127.0.0.1:{ports.etcd_peer}"
        return [
            "--name=harvester-quota",
            f"--data-dir={self.etcd_dir}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=harvester-quota={peer}",
            # A throwaway test cluster: durability across power loss is not worth the fsyncs.
            "--unsafe-no-fsync",
            "--log-level=warn",
        ]

    def _apiserver_args(self, ports: Ports, node_ip: str | None = None) -> list[str]:
        pki = self.pki_dir
        # Without an explicit address the API server looks for a default route and refuses to
        # start on a machine that has none; a loopback address then needs the endpoint
        # reconciler off, since endpoints may not be loopback addresses. Beside a real node it
        # listens on every address and advertises the node's, which its pods can reach.
        if node_ip is None:
            listen = ["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1"]
            listen.append("--endpoint-reconciler-type=none")
        else:
            listen = ["--bind-address=0.0.0.0", f"--advertise-address={node_ip}"]
            listen.append("--endpoint-reconciler-type=lease")
            # The node's name resolves nowhere: logs and exec go to its address.
            listen.append("--kubelet-preferred-address-types=InternalIP")
        return [
            f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
            f"--secure-port={ports.apiserver}",
            *listen,
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--admission-control-config-file={self.admission_config_path}",
            "--authorization-mode=Node,RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            "--profiling=false",
            # PodTemplates (unused by anything here) bypass the watch cache, so tests can make
            # an etcd compaction turn an old resourceVersion into a real 410 for an informer.
            "--watch-cache-sizes=podtemplates#0",
            *audit.apiserver_flags(self.audit_policy_path, audit_log_path(self.state_dir)),
        ]

    def _client_component_args(self, port: int) -> list[str]:
        """What kube-controller-manager and kube-scheduler share: the admin kubeconfig for
        everything, no leader election (one replica), a private secure port on loopback."""
        kubeconfig = str(self.kubeconfig_path)
        return [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            "--profiling=false",
        ]

    def _kcm_args(self, ports: Ports, node_lease: int) -> list[str]:
        return [
            *self._client_component_args(ports.controller_manager),
            f"--node-monitor-grace-period={node_lease + NODE_GRACE_MARGIN}s",
            f"--service-account-private-key-file={self.pki_dir / 'sa.key'}",
            f"--root-ca-file={self.pki_dir / 'ca.crt'}",
            "--controllers=*",
            KCM_IDENTITY_FLAG,
        ]

    def _scheduler_args(self, ports: Ports) -> list[str]:
        return self._client_component_args(ports.scheduler)

    def _virt_controller_args(self, port: int, kubevirt: str) -> list[str]:
        return [
            f"--kubeconfig={self.virt_controller_kubeconfig}",
            f"--launcher-image={launcher_image(kubevirt)}",
            "--listen=127.0.0.1",
            f"--port={port}",
        ]

    def _kwok_args(self, node_lease: int, *, fake_only: bool = False) -> list[str]:
        """kwok's flags; ``fake_only`` leaves every node without its annotation (a real node's)
        to that node's kubelet."""
        manage = (
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake"
            if fake_only
            else "--manage-all-nodes=true"
        )
        return [
            f"--kubeconfig={self.kubeconfig_path}",
            manage,
            f"--cidr={POD_CIDR}",
            "--node-ip=10.0.0.1",
            f"--node-lease-duration-seconds={node_lease}",
            f"--config={STAGES_FILE}",
        ]

    # Files ------------------------------------------------------------------------------------

    def _write_pki(self) -> None:
        self.pki_dir.mkdir(parents=True, exist_ok=True)
        ca = CertificateAuthority.create()
        ca.write(self.pki_dir / "ca.crt", self.pki_dir / "ca.key")
        ca.issue(
            "kube-apiserver", dns_names=APISERVER_DNS_NAMES, ip_addresses=APISERVER_IPS, server=True
        ).write(self.pki_dir / "apiserver.crt", self.pki_dir / "apiserver.key")
        ca.issue("admin", organizations=("system:masters",), client=True).write(
            self.pki_dir / "admin.crt", self.pki_dir / "admin.key"
        )
        private, public = service_account_key()
        (self.pki_dir / "sa.key").touch(mode=0o600)
        (self.pki_dir / "sa.key").write_bytes(private)
        (self.pki_dir / "sa.pub").write_bytes(public)
        self._write_webhook_client()

    @property
    def admission_config_path(self) -> Path:
        return self.state_dir / "admission-configuration.yaml"

    @property
    def audit_policy_path(self) -> Path:
        return self.state_dir / "audit-policy.yaml"

    def _write_webhook_client(self) -> None:
        """The API server's credentials for calling admission webhooks: a client certificate
        from a CA of its own (pki/webhook-client-ca.crt, which webhooks trust), in a kubeconfig
        whose user "*" matches every webhook host, named by the AdmissionConfiguration that
        --admission-control-config-file loads (docs/operations.md, "Client authentication", shows
        the same files)."""
        ca, client = webhook_client_pki()
        ca.write(self.pki_dir / "webhook-client-ca.crt", self.pki_dir / "webhook-client-ca.key")
        kubeconfig = self.pki_dir / "webhook-client.kubeconfig"
        user = {
            "client-certificate-data": base64.b64encode(client.cert_pem).decode(),
            "client-key-data": base64.b64encode(client.key_pem).decode(),
        }
        kubeconfig.touch(mode=0o600)
        kubeconfig.write_text(
            yaml.safe_dump(
                {"apiVersion": "v1", "kind": "Config", "users": [{"name": "*", "user": user}]}
            )
        )
        webhooks = {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "WebhookAdmissionConfiguration",
            "kubeConfigFile": str(kubeconfig.resolve()),  # the API server wants an absolute path
        }
        self.admission_config_path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "apiserver.config.k8s.io/v1",
                    "kind": "AdmissionConfiguration",
                    "plugins": [
                        {"name": plugin, "configuration": webhooks}
                        for plugin in ("ValidatingAdmissionWebhook", "MutatingAdmissionWebhook")
                    ],
                },
                sort_keys=False,
            )
        )

    def _write_kubeconfig(
        self,
        info: ClusterInfo,
        *,
        path: Path | None = None,
        cert: Path | None = None,
        key: Path | None = None,
        user: str = "admin",
    ) -> None:
        """A kubeconfig for `user` with a client certificate (default: the admin's, at
        `kubeconfig_path`), readable by its owner only."""

        def b64(path: Path) -> str:
            return base64.b64encode(path.read_bytes()).decode()

        config = kubeconfig_document(
            {"server": info.server, "certificate-authority-data": b64(info.ca_file)},
            user,
            {
                "client-certificate-data": b64(cert or info.client_cert),
                "client-key-data": b64(key or info.client_key),
            },
        )
        target = path or self.kubeconfig_path
        target.touch(mode=0o600)
        target.write_text(yaml.safe_dump(config, sort_keys=False))

    def _create_nodes(
        self, rest: RestClient, count: int, pods: int, *, kubevirt: bool = False
    ) -> list[str]:
        names = [f"kwok-node-{index}" for index in range(count)]
        for name in names:
            node = _fake_node(name, pods)
            if kubevirt:
                node = _kubevirt_node(node)
            rest.post_unless_exists("/api/v1/nodes", node, f"creating fake node {name}")
        return names

    # State ------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """One `up`/`down` at a time per state directory, across processes."""
        with process.exclusive(self.state_dir / "lock"):
            yield

    def _read_state(self) -> ClusterInfo | None:
        try:
            data = json.loads(self.state_file.read_text())
            return ClusterInfo.from_json(data)
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError):
            # A state file we cannot read is a stale run of some other version: start afresh,
            # but stop nothing we cannot identify.
            return None

    def _write_state(self, info: ClusterInfo) -> None:
        temporary = self.state_file.with_suffix(".tmp")
        temporary.write_text(json.dumps(info.to_json(), indent=2))
        temporary.replace(self.state_file)

    def _healthy(self, info: ClusterInfo) -> bool:
        return all(record.running() for record in info.processes) and info.rest().healthy()

    def _stop_processes(self, records: list[ProcessRecord]) -> None:
        order = {name: index for index, name in enumerate(START_ORDER)}
        for record in sorted(records, key=lambda r: order.get(r.name, -1), reverse=True):
            process.stop(record)

    def _reset_runtime(self) -> None:
        """Removes everything a previous run left except the logs, which move to logs/previous."""
        for path in (self.state_file, self.kubeconfig_path):
            path.unlink(missing_ok=True)
        shutil.rmtree(self.etcd_dir, ignore_errors=True)
        if self.log_dir.exists():
            previous = self.state_dir / "logs.previous"
            shutil.rmtree(previous, ignore_errors=True)
            self.log_dir.rename(previous)
        self.log_dir.mkdir(parents=True, exist_ok=True)


def audit_log_path(state_dir: Path) -> Path:
    """The audit log of the cluster of ``state_dir``: beside the components' logs, so that a
    restart moves it to logs.previous with them."""
    return state_dir / LOG_DIR / audit.LOG_NAME


def _port_conflict(record: ProcessRecord, tail: str) -> None:
    """A component that exited because its port was taken: the start is retried on others."""
    if "address already in use" in tail:
        raise _PortConflict(record.name)


def _fake_node(name: str, pods: int) -> dict[str, Any]:
    capacity = {"cpu": "32", "memory": "256Gi", "pods": str(pods), "ephemeral-storage": "1Ti"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
        },
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "fake",
                "containerRuntimeVersion": "fake",
                "kernelVersion": "fake",
                "kubeProxyVersion": "fake",
                "osImage": "kwok",
                "bootID": "",
                "machineID": "",
                "systemUUID": "",
            },
        },
    }


def _kubevirt_node(node: dict[str, Any]) -> dict[str, Any]:
    """``node`` as virt-handler's node labeller and device plugins would leave it: schedulable for
    VMIs, with the devices a launcher pod requests."""
    node["metadata"]["labels"].update(KUBEVIRT_NODE_LABELS)
    for key in ("capacity", "allocatable"):
        node["status"][key] = {
            **node["status"][key],
            **dict.fromkeys(KUBEVIRT_DEVICES, KUBEVIRT_DEVICE_COUNT),
        }
    return node


_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML has it: KubeVirt's generated CRDs (4 MB) load in 0.5 s
instead of 5.5 s with the pure-Python one, at every `up` and switch of a virt-controller."""


def crd_documents(generated: Path | None) -> list[dict[str, Any]]:
    """The CRDs `up` installs: our hand-written ones and MTQ's VMMRQ, or with ``generated``
    (KubeVirt's own, as printed by crdgen) those, and ours for every other group (Harvester's
    Setting, MTQ's mtq.kubevirt.io, which crdgen does not print)."""
    ours = [
        doc for path in (CRDS_FILE, MTQ_CRDS_FILE) for doc in yaml.safe_load_all(path.read_text())
    ]
    ours = [doc for doc in ours if doc]
    if generated is None:
        return ours
    kubevirts = [doc for doc in yaml.load_all(generated.read_text(), Loader=_FAST_LOADER) if doc]
    if not kubevirts:
        raise ClusterError(f"{generated} holds no CRD")
    served = {doc["metadata"]["name"] for doc in kubevirts}
    others = [
        doc
        for doc in ours
        if doc["spec"]["group"] != "kubevirt.io" and doc["metadata"]["name"] not in served
    ]
    return kubevirts + others


CRDS_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def _install_crds(
    rest: RestClient, generated: Path | None = None, *, replace: bool = False
) -> list[str]:
    """Creates the KubeVirt and Harvester CRDs (see ``crd_documents``); returns their names.
    With ``replace``, one that exists already is replaced by this document (a KubeVirt
    update's new schema); else it is left as it is."""
    names = []
    for document in crd_documents(generated):
        name = document["metadata"]["name"]
        names.append(name)
        created = rest.post_unless_exists(CRDS_PATH, document, f"installing CRD {name}")
        if created is None and replace:
            _replace_crd(rest, document)
    return names


def _replace_crd(rest: RestClient, document: dict[str, Any]) -> None:
    """Puts ``document`` in place of the stored CRD of its name (`crd_replacement`; its
    resourceVersion as the precondition: nothing else writes CRDs here, a conflict is an
    error)."""
    name = document["metadata"]["name"]
    stored = rest.get(f"{CRDS_PATH}/{name}")
    body = crd_replacement(stored, document)
    try:
        rest.put(f"{CRDS_PATH}/{name}", body)
    except ApiError as error:
        raise ClusterError(f"replacing CRD {name} failed: {error}") from error


def crd_replacement(stored: dict[str, Any], document: dict[str, Any]) -> dict[str, Any]:
    """``document`` as the replacement of the ``stored`` CRD: with its resourceVersion, and
    with every version the API server has stored objects in (status.storedVersions) that
    ``document`` does not list kept from ``stored``, served but no longer the storage version.
    The API server refuses to drop such a version (objects in etcd would be unreadable): going
    back to an older KubeVirt, whose CRD lacks a version the newer one stored in, needs it.
    Pure: neither argument is changed."""
    body = copy.deepcopy(document)
    body["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
    versions = body["spec"]["versions"]
    listed = {version["name"] for version in versions}
    stored_versions = (stored.get("status") or {}).get("storedVersions") or []
    for version in (stored.get("spec") or {}).get("versions") or []:
        if version["name"] in stored_versions and version["name"] not in listed:
            versions.append({**copy.deepcopy(version), "served": True, "storage": False})
    return body


def _install_user_roles(rest: RestClient) -> None:
    """KubeVirt's ClusterRoles for its users (USER_ROLES_FILE), as virt-operator installs them
    beside the CRDs: a test can then bind a tenant to kubevirt.io:edit as on a real cluster."""
    for document in yaml.safe_load_all(USER_ROLES_FILE.read_text()):
        if document:
            _create(rest, "/apis/rbac.authorization.k8s.io/v1/clusterroles", document)


def _create_kubevirt_cr(rest: RestClient, version: str) -> None:
    """The namespace ``kubevirt`` and its KubeVirt CR ``kubevirt``, status as virt-operator
    leaves a finished install (the CRD has a status subresource: the status is a second write)."""
    _create(rest, "/api/v1/namespaces", {"metadata": {"name": KUBEVIRT_NAMESPACE}})
    path = f"/apis/kubevirt.io/v1/namespaces/{KUBEVIRT_NAMESPACE}/kubevirts"
    _create(
        rest,
        path,
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "KubeVirt",
            "metadata": {"name": "kubevirt", "namespace": KUBEVIRT_NAMESPACE},
            "spec": {"configuration": {"developerConfiguration": {}}},
        },
    )
    _set_kubevirt_status(rest, version)


KUBEVIRT_CR_PATH = f"/apis/kubevirt.io/v1/namespaces/{KUBEVIRT_NAMESPACE}/kubevirts/kubevirt"


def _set_kubevirt_status(rest: RestClient, version: str) -> None:
    """The KubeVirt CR's status as virt-operator leaves a finished install or update of
    ``version`` (a merge patch of the status subresource: the fields virt-controller writes
    there, such as the outdated workload count, are left alone)."""
    status = {
        "phase": "Deployed",
        "observedKubeVirtVersion": version,
        "targetKubeVirtVersion": version,
        "operatorVersion": version,
    }
    try:
        rest.patch(f"{KUBEVIRT_CR_PATH}/status", {"status": status})
    except ApiError as error:
        raise ClusterError(f"setting the KubeVirt CR's status failed: {error}") from error


def _create(rest: RestClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POSTs ``body``; if it already exists, returns the stored object instead."""
    name = body["metadata"]["name"]
    created = rest.post_unless_exists(path, body, f"creating {path}/{name}")
    return created if created is not None else rest.get(f"{path}/{name}")


def _virt_controller_record(info: ClusterInfo | None) -> ProcessRecord | None:
    if info is None:
        return None
    return next((record for record in info.processes if record.name == "virt-controller"), None)


def _lease_renewed(rest: RestClient, since: datetime.datetime) -> bool:
    """virt-controller's Lease was renewed at or after ``since`` (this host's clock, as the API
    server's): a virt-controller started then leads."""
    lease = _virt_controller_lease(rest)
    if lease is None:
        return False
    renewed = (lease.get("spec") or {}).get("renewTime")
    if not renewed:
        return False
    return datetime.datetime.fromisoformat(str(renewed).replace("Z", "+00:00")) >= since


def _lease_held(rest: RestClient) -> bool:
    """virt-controller leads: its Lease exists and names a holder."""
    lease = _virt_controller_lease(rest)
    return lease is not None and bool(lease.get("spec", {}).get("holderIdentity"))


def _virt_controller_lease(rest: RestClient) -> dict[str, Any] | None:
    """virt-controller's Lease, None where it does not exist (yet); other errors raise."""
    try:
        return rest.get(VIRT_CONTROLLER_LEASE)
    except ApiError as error:
        if error.status == 404:
            return None
        raise


def _crds_established(rest: RestClient, names: list[str]) -> bool:
    for name in names:
        crd = rest.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        conditions = (crd.get("status") or {}).get("conditions") or []
        if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return False
    return True


def _etcd_post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """One call to etcd's JSON gateway (no etcdctl needed)."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        result: dict[str, Any] = json.loads(response.read())
        return result


def _etcd_healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
            return bool(json.loads(response.read()).get("health") == "true")
    except (OSError, ValueError, urllib.error.URLError):
        return False


def _https_ok(port: int, path: str) -> bool:
    """A component's own health endpoint answers 200 (its serving cert is self-signed)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(
            f"https://127.0.0.1:{port}{path}", timeout=2, context=context
        ) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def _nodes_ready(rest: RestClient, names: list[str]) -> bool:
    try:
        listed = rest.get("/api/v1/nodes")
    except (ApiError, OSError):
        return False
    ready = {
        item["metadata"]["name"]
        for item in listed.get("items", [])
        for condition in (item.get("status") or {}).get("conditions") or []
        if condition.get("type") == "Ready" and condition.get("status") == "True"
    }
    return set(names) <= ready


def client_config_from_files(
    host: str,
    *,
    ca_file: str | Path | None,
    cert_file: str | Path | None = None,
    key_file: str | Path | None = None,
    token: str | None = None,
) -> ClientConfig:
    """A client config from plain files (a CA, a client certificate or a bearer token): what the
    bench and the tests connect to the local cluster with."""
    bearer = f"Bearer {token}" if token else None
    return ClientConfig(
        host=host.rstrip("/"),
        ssl_context=client_ssl_context(ca_file, cert_file, key_file, verify=True),
        authorization=lambda: bearer,
    )
