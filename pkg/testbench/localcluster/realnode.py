"""One real node beside the kwok nodes: a kubelet that runs containers, and kube-proxy.

kwok runs no container, so on the kwok nodes a Deployment's pods show Running without anything
serving. This node runs the pods placed on it for real: the kubelet built from the control
plane's own Kubernetes module (``binaries.build_node``), Debian's containerd and runc (runc
linked with libseccomp, so the RuntimeDefault seccomp profile the chart asks for is applied), the
reference CNI plugins (a bridge, host-local addresses) and kube-proxy in iptables mode, so the API
server, a host process, reaches a Service's pods through its ClusterIP.

This machine mounts cgroup v1 (with an empty unified hierarchy beside it). Kubernetes v1.36's
kubelet refuses cgroup v1 by default (its ``failCgroupV1`` setting defaults to true since v1.35);
the node sets it false, the only way it runs here, and uses the cgroupfs driver (there is no
systemd), under a cgroup root of its own.

Host-wide, and so one node per machine (``MACHINE_CLAIM``): kube-proxy's iptables rules, the
bridge ``BRIDGE`` with the pod range ``POD_SUBNET`` (outside kwok's and podman's), and the
sysctls a bridge CNI needs (IP forwarding, bridged traffic through iptables). Everything else
lives in the node's state directory. ``stop`` removes what ``start`` made: the pods' containers,
their network namespaces and addresses, the bridge, kube-proxy's rules, the node's cgroups.

Needs root and the commands of ``REQUIRED_COMMANDS`` (`make node-bin` installs their Debian
packages when run as root on Debian); ``missing_requirements`` says what is absent, so tests skip
with that reason.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from . import process
from .binaries import KUBE_PROXY, KUBELET, build_node, node_bin_dir
from .cluster import ClusterInfo, LocalCluster, kubeconfig_document
from .errors import ClusterError
from .image import SANDBOX_IMAGE, build_image
from .process import ProcessRecord
from .rest import RestClient

NODE_NAME: Final = "real-node-0"
POD_SUBNET: Final = "10.245.0.0/24"
"""The real node's pod addresses: outside kwok's (cluster.POD_CIDR) and podman's 10.88.0.0/16."""
BRIDGE: Final = "hqreal0"
CGROUP_ROOT: Final = "/harvester-quota-real-node"
MACHINE_CLAIM: Final = Path("/run/harvester-quota-real-node")
"""The state directory of the machine's one real node, while it runs."""
CNI_BIN_DIRS: Final = (Path("/usr/lib/cni"), Path("/opt/cni/bin"))
REQUIRED_COMMANDS: Final = {
    "containerd": "containerd",
    "ctr": "containerd",
    "runc": "runc",
    "iptables": "iptables",
    "conntrack": "conntrack",
    "podman": "podman",
    "debootstrap": "debootstrap",
}
"""Each command the node and its image build run, and the Debian package that has it."""
CNI_PACKAGE: Final = "containernetworking-plugins"
READY_TIMEOUT: Final = 120.0
"""The kubelet registers and turns Ready in 10-20 s on a loaded 2-core machine."""
STOP_TIMEOUT: Final = 30.0


def missing_requirements() -> str | None:
    """Why no real node can run here (not root, a command or the CNI plugins missing, with how
    to get them), or None when one can."""
    if os.geteuid() != 0:
        return "a real node runs containers and sets up their network: it needs root"
    missing = sorted({pkg for cmd, pkg in REQUIRED_COMMANDS.items() if shutil.which(cmd) is None})
    if _cni_bin_dir() is None:
        missing.append(CNI_PACKAGE)
    if missing:
        return (
            f"missing Debian packages {', '.join(missing)}: run `make node-bin` as root "
            f"(or apt-get install {' '.join(missing)})"
        )
    return None


def cannot_build() -> str | None:
    """Why `make node-bin` builds nothing on this machine (not root; or packages missing and no
    apt-get to install them), which ``missing_requirements`` then tells the tests too; None when
    it can install and build what the node needs."""
    reason = missing_requirements()
    if os.geteuid() != 0 or (reason is not None and shutil.which("apt-get") is None):
        return reason
    return None


def debian_packages() -> list[str]:
    """The Debian packages the node and the image build need."""
    return sorted({*REQUIRED_COMMANDS.values(), CNI_PACKAGE})


def install_packages(progress: Callable[[str], None]) -> None:
    """Installs ``debian_packages`` that are missing with apt-get (root on Debian only);
    ClusterError elsewhere, naming them."""
    if missing_requirements() is None:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ClusterError(
            f"the real node needs the Debian packages {', '.join(debian_packages())} "
            "and root; install them (apt-get as root) or skip the real-node tests"
        )
    progress(f"installing Debian packages: {', '.join(debian_packages())}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", *debian_packages()],
    ):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise ClusterError(f"{' '.join(argv[:2])} failed: {done.stdout}{done.stderr}")


def _cni_bin_dir() -> Path | None:
    for directory in CNI_BIN_DIRS:
        if (directory / "bridge").exists() and (directory / "host-local").exists():
            return directory
    return None


def host_address() -> str:
    """The machine's first global IPv4 address: the node's address, on which pods reach the
    API server (``LocalCluster.up(node_ip=...)``)."""
    done = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "scope", "global"],
        capture_output=True,
        text=True,
        check=False,
    )
    for line in done.stdout.splitlines():
        fields = line.split()
        if fields[1].startswith(BRIDGE):
            continue
        address = fields[3].split("/")[0]
        if not ipaddress.ip_address(address).is_loopback:
            return address
    raise ClusterError(f"no global IPv4 address on this machine: {done.stdout or done.stderr}")


@dataclass
class RealNode:
    """The real node of the cluster ``cluster``, its files under ``state_dir``."""

    cluster: ClusterInfo
    state_dir: Path
    name: str = NODE_NAME
    processes: list[ProcessRecord] = field(default_factory=list)

    @property
    def socket(self) -> Path:
        """containerd's CRI socket."""
        return self.state_dir / "containerd.sock"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def state_file(self) -> Path:
        """The processes of a started node, so that another process (`cluster down`) stops it."""
        return self.state_dir / "node.json"

    @classmethod
    def load(cls, cluster: ClusterInfo, state_dir: Path) -> RealNode:
        """The node recorded in ``state_dir`` (none running: no processes)."""
        node = cls(cluster, state_dir)
        with contextlib.suppress(FileNotFoundError, ValueError, KeyError, TypeError):
            data = json.loads(node.state_file.read_text())
            node.name = data["name"]
            node.processes = [
                ProcessRecord(**{**record, "argv": tuple(record.get("argv", ()))})
                for record in data["processes"]
            ]
        return node

    def _save(self) -> None:
        records = [asdict(record) for record in self.processes]
        self.state_file.write_text(json.dumps({"name": self.name, "processes": records}))

    # Starting ----------------------------------------------------------------------------------

    def start(self, images: list[Path], progress: Callable[[str], None] = print) -> None:
        """Starts containerd (with ``images``, `podman save` archives, imported), the kubelet and
        kube-proxy; returns once the node is Ready and kube-proxy serves its health check.
        Builds kubelet and kube-proxy first if they are not cached. On any failure everything
        started is stopped again and ClusterError raised, naming the log to read."""
        reason = missing_requirements()
        if reason is not None:
            raise ClusterError(reason)
        binaries = build_node(progress)
        self._claim_machine()
        try:
            self._clean()
            self.state_dir.mkdir(parents=True, exist_ok=True)
            self._host_settings()
            self._start_containerd()
            for archive in images:
                self.ctr("images", "import", str(archive))
            self._start_kubelet(binaries / KUBELET)
            self._await(self._node_ready, "kubelet", READY_TIMEOUT)
            self._start_kube_proxy(binaries / KUBE_PROXY)
        except BaseException:
            self.stop()
            raise

    def _claim_machine(self) -> None:
        """Records this node as the machine's one real node in MACHINE_CLAIM; ClusterError if
        another state directory's node is recorded there and still runs a process."""
        with process.exclusive(MACHINE_CLAIM.with_suffix(".lock")):
            with contextlib.suppress(FileNotFoundError):
                holder = Path(MACHINE_CLAIM.read_text().strip())
                if holder != self.state_dir.resolve():
                    other = RealNode.load(self.cluster, holder)
                    if any(record.running() for record in other.processes):
                        raise ClusterError(
                            f"another real node runs on this machine (state directory {holder}, "
                            f"recorded in {MACHINE_CLAIM}): kube-proxy's rules and the pod bridge "
                            "are host-wide, so only one at a time; stop it first"
                        )
            MACHINE_CLAIM.write_text(f"{self.state_dir.resolve()}\n")

    def _release_machine(self) -> None:
        with process.exclusive(MACHINE_CLAIM.with_suffix(".lock")), contextlib.suppress(OSError):
            if Path(MACHINE_CLAIM.read_text().strip()) == self.state_dir.resolve():
                MACHINE_CLAIM.unlink()

    def _host_settings(self) -> None:
        """What a bridge CNI and kube-proxy need of the host: forwarding, and bridged traffic
        through iptables (so that a pod reaches a Service whose endpoint is on its bridge)."""
        modprobe = shutil.which("modprobe")
        if modprobe is not None:  # a kernel with the module built in has no modprobe to call
            subprocess.run([modprobe, "br_netfilter"], capture_output=True, check=False)
        for key in ("net/ipv4/ip_forward", "net/bridge/bridge-nf-call-iptables"):
            path = Path("/proc/sys") / key
            if not path.exists():
                raise ClusterError(f"{path} is missing: the kernel lacks bridge netfilter")
            path.write_text("1\n")

    def _start_containerd(self) -> None:
        cni = _cni_bin_dir()
        conf_dir = self.state_dir / "cni" / "net.d"
        conf_dir.mkdir(parents=True, exist_ok=True)
        (conf_dir / "10-real-node.conflist").write_text(json.dumps(self._cni_config(), indent=1))
        config = self.state_dir / "containerd.toml"
        config.write_text(self._containerd_config(cni or CNI_BIN_DIRS[0], conf_dir))
        self._launch("containerd", [shutil.which("containerd") or "containerd", "-c", str(config)])
        self._await(lambda: self.ctr("version", check=False) == 0, "containerd", 60.0)

    def _cni_config(self) -> dict[str, Any]:
        ipam = {
            "type": "host-local",
            "ranges": [[{"subnet": POD_SUBNET}]],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": str(self.state_dir / "cni" / "ipam"),
        }
        bridge = {
            "type": "bridge",
            "bridge": BRIDGE,
            "isGateway": True,
            "ipMasq": True,
            "hairpinMode": True,
            "ipam": ipam,
        }
        return {
            "cniVersion": "1.0.0",
            "name": "harvester-quota-real-node",
            "plugins": [bridge, {"type": "portmap", "capabilities": {"portMappings": True}}],
        }

    def _containerd_config(self, cni_bin: Path, conf_dir: Path) -> str:
        """containerd's configuration: every path under the state directory (network
        namespaces and runc's state too, so that ``stop`` finds them and no other containerd on
        the machine shares them), Debian's runc without the systemd cgroup driver, the sandbox
        image the image build made (image.SANDBOX_IMAGE)."""
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        runc = shutil.which("runc") or "runc"
        unused = ("btrfs", "aufs", "zfs", "devmapper")
        disabled = [f"io.containerd.snapshotter.v1.{name}" for name in unused]
        disabled.append("io.containerd.tracing.processor.v1.otlp")
        return "\n".join(
            [
                "version = 2",
                f'root = "{self.state_dir / "containerd" / "root"}"',
                f'state = "{self.state_dir / "containerd" / "state"}"',
                f"disabled_plugins = {json.dumps(disabled)}",
                "[grpc]",
                f'  address = "{self.socket}"',
                f"[{cri}]",
                f'  sandbox_image = "{SANDBOX_IMAGE}"',
                '  stream_server_address = "127.0.0.1"',
                '  stream_server_port = "0"',
                "  netns_mounts_under_state_dir = true",
                # No container may ask for a lower oom_score_adj than containerd's own: lowering
                # it needs CAP_SYS_RESOURCE, which some machines (this one) withhold from root,
                # and runc then fails to start every pod sandbox (the kubelet gives sandboxes
                # -998).
                "  restrict_oom_score_adj = true",
                f"[{cri}.containerd]",
                '  snapshotter = "overlayfs"',
                '  default_runtime_name = "runc"',
                f"[{cri}.containerd.runtimes.runc]",
                '  runtime_type = "io.containerd.runc.v2"',
                f"[{cri}.containerd.runtimes.runc.options]",
                f'  BinaryName = "{runc}"',
                f'  Root = "{self.state_dir / "runc"}"',
                "  SystemdCgroup = false",
                f"[{cri}.cni]",
                f'  bin_dir = "{cni_bin}"',
                f'  conf_dir = "{conf_dir}"',
                "",
            ]
        )

    def _kubeconfig(self, user: str, groups: tuple[str, ...]) -> Path:
        """A kubeconfig for ``user`` in ``groups`` with a client certificate from the cluster's
        CA (the node's identity for the Node authorizer, kube-proxy's for its bootstrap role)."""
        cert = self.state_dir / f"{user.replace(':', '-')}.crt"
        key = cert.with_suffix(".key")
        authority = self.cluster.certificate_authority()
        authority.issue(user, organizations=groups, client=True).write(cert, key)
        path = cert.with_suffix(".kubeconfig")
        config = kubeconfig_document(
            {"server": self.cluster.server, "certificate-authority": str(self.cluster.ca_file)},
            user,
            {"client-certificate": str(cert), "client-key": str(key)},
        )
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
        return path

    def _start_kubelet(self, binary: Path) -> None:
        _make_cgroups(CGROUP_ROOT)
        kubeconfig = self._kubeconfig(f"system:node:{self.name}", ("system:nodes",))
        config = self.state_dir / "kubelet.yaml"
        config.write_text(yaml.safe_dump(self._kubelet_config(), sort_keys=False))
        args = [
            f"--config={config}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={self.state_dir / 'kubelet'}",
            f"--cert-dir={self.state_dir / 'kubelet-pki'}",
            f"--hostname-override={self.name}",
            f"--node-ip={self.cluster.node_ip or host_address()}",
            "--v=1",
        ]
        self._launch("kubelet", [str(binary), *args])

    def _kubelet_config(self) -> dict[str, Any]:
        """The kubelet's configuration. ``failCgroupV1: false``: v1.36 refuses cgroup v1 unless
        told otherwise. The API server calls the kubelet (logs, exec) without a client
        certificate, so the kubelet lets anonymous calls in: a test node on this machine only.
        Eviction and image garbage collection are held off: a shared disk filling up must not
        evict the pods under test nor remove images no registry can give back."""
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": CGROUP_ROOT,
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "address": "0.0.0.0",
            "port": process.free_port(),
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": process.free_port(),
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "failSwapOn": False,
            "podLogsDir": str(self.state_dir / "pod-logs"),
            "resolvConf": "/etc/resolv.conf",
            "maxPods": 30,
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "nodeStatusUpdateFrequency": "5s",
            "syncFrequency": "10s",
        }

    def _start_kube_proxy(self, binary: Path) -> None:
        kubeconfig = self._kubeconfig("system:kube-proxy", ())
        health = process.free_port()
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "iptables",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "hostnameOverride": self.name,
            "clusterCIDR": POD_SUBNET,
            "bindAddress": "0.0.0.0",
            "healthzBindAddress": f"127.0.0.1:{health}",
            "metricsBindAddress": f"127.0.0.1:{process.free_port()}",
            # Leave the host's conntrack sysctls alone: other work shares this machine.
            "conntrack": {"maxPerCore": 0, "min": 0},
        }
        path = self.state_dir / "kube-proxy.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        self._launch("kube-proxy", [str(binary), f"--config={path}", "--v=1"])
        self._await(lambda: _http_ok(f"http://127.0.0.1:{health}/healthz"), "kube-proxy", 60.0)

    # Running ---------------------------------------------------------------------------------

    def ctr(self, *args: str, check: bool = True) -> int:
        """Runs ``ctr`` against the node's containerd in the kubelet's namespace (k8s.io)."""
        argv = ["ctr", "--address", str(self.socket), "--namespace", "k8s.io", *args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
        if check and done.returncode != 0:
            raise ClusterError(f"{' '.join(argv)} failed: {done.stdout}{done.stderr}")
        return done.returncode

    def _launch(self, name: str, argv: list[str]) -> None:
        process.launch(self.processes, name, argv, self.log_dir, self.state_dir)
        self._save()

    def _await(self, ready: Callable[[], bool], name: str, timeout: float) -> None:
        log = self.log_dir / f"{name}.log"
        process.await_ready(
            ready,
            name=name,
            log=log,
            timeout=timeout,
            records=self.processes,
            starting="the real node",
        )

    def _node_ready(self) -> bool:
        rest = RestClient(
            host="127.0.0.1",
            port=self.cluster.ports.apiserver,
            ca=self.cluster.ca_file,
            cert=self.cluster.client_cert,
            key=self.cluster.client_key,
            timeout=5.0,
        )
        if not rest.exists(f"/api/v1/nodes/{self.name}"):
            return False
        node = rest.get(f"/api/v1/nodes/{self.name}")
        conditions = node.get("status", {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    # Stopping --------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stops kube-proxy, the kubelet and containerd and removes what they left on the host.
        Safe to call more than once, after a failed start, and from another process than the
        one that started the node (``load``)."""
        for record in reversed(self.processes):
            if record.name != "containerd":
                process.stop(record, timeout=STOP_TIMEOUT)
        self._kill_containers()
        for record in self.processes:
            if record.name == "containerd":
                process.stop(record, timeout=STOP_TIMEOUT)
        self.processes = []
        self._clean()
        self._release_machine()

    def _kill_containers(self) -> None:
        """Kills every container of the node's containerd (its shims outlive containerd)."""
        if not self.socket.exists() or self.ctr("version", check=False) != 0:
            return
        argv = ["ctr", "--address", str(self.socket), "--namespace", "k8s.io", "tasks", "ls", "-q"]
        listed = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        for task in listed.stdout.split():
            self.ctr("tasks", "kill", "--signal", "SIGKILL", task, check=False)
        time.sleep(1)
        for task in listed.stdout.split():
            self.ctr("tasks", "delete", "--force", task, check=False)

    def _clean(self) -> None:
        """Removes what a node of this state directory left: containerd's shims (found by their
        socket argument), mounts under the state directory (network namespaces, root file
        systems), kube-proxy's rules, the bridge, the node's cgroups and its files (not its logs)."""
        self._kill_shims()
        self._unmount_under(self.state_dir)
        binary = build_node_path(KUBE_PROXY)
        if binary is not None:
            subprocess.run([str(binary), "--cleanup"], capture_output=True, timeout=60, check=False)
        _remove_kubelet_chains()
        subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True, check=False)
        _remove_cgroups(CGROUP_ROOT)
        _remove_links_into(Path("/var/log/containers"), self.state_dir)
        if self.state_dir.exists():
            for entry in self.state_dir.iterdir():
                if entry.name == "logs":
                    continue
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)

    def _kill_shims(self) -> None:
        marker = str(self.socket).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                if argv and argv[0].endswith(b"containerd-shim-runc-v2") and marker in argv:
                    os.kill(int(entry.name), signal.SIGKILL)

    def _unmount_under(self, root: Path) -> None:
        """Unmounts every mount at or below ``root``, deepest first."""
        prefix = str(root.resolve())
        mounts = []
        with contextlib.suppress(OSError):
            for line in Path("/proc/self/mounts").read_text().splitlines():
                point = line.split()[1].replace("\\040", " ")
                if point == prefix or point.startswith(prefix + "/"):
                    mounts.append(point)
        for point in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def build_node_path(name: str) -> Path | None:
    """``name`` (kubelet or kube-proxy) if it is built, without building it."""
    path = node_bin_dir() / name
    return path if path.exists() else None


NODE_STATE_DIR: Final = "real-node"
"""The real node's folder in its cluster's state directory."""


def up_with_real_node(
    local: LocalCluster, progress: Callable[[str], None] = print, **up: Any
) -> tuple[ClusterInfo, RealNode]:
    """``local.up(**up)`` with room for a real node (``node_ip``), then the real node, running
    the product's image (built first if it is not cached, as are kubelet and kube-proxy). A node
    already running there is left as it is. ClusterError with the reason when this machine
    cannot run one (``missing_requirements``)."""
    reason = missing_requirements()
    if reason is not None:
        raise ClusterError(reason)
    archive = build_image(progress)
    build_node(progress)
    info = local.up(node_ip=host_address(), **up)
    node = RealNode.load(info, local.state_dir / NODE_STATE_DIR)
    if node.processes and all(record.running() for record in node.processes):
        return info, node
    node.start([archive], progress)
    return info, node


def down_real_node(local: LocalCluster) -> bool:
    """Stops the real node of ``local``'s cluster, if one was started; True if one was."""
    info = local.info()
    folder = local.state_dir / NODE_STATE_DIR
    if info is None or not (folder / "node.json").exists():
        return False
    RealNode.load(info, folder).stop()
    return True


KUBELET_CHAINS: Final = {
    "filter": ("KUBE-FIREWALL", "KUBE-KUBELET-CANARY"),
    "nat": ("KUBE-KUBELET-CANARY",),
    "mangle": ("KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"),
}
"""The iptables chains the kubelet makes (kube-proxy's --cleanup removes only its own)."""


def _remove_kubelet_chains() -> None:
    """Removes the kubelet's chains and the jumps to them; absent ones are no error."""

    def iptables(*args: str) -> None:
        subprocess.run(["iptables", "-w", *args], capture_output=True, timeout=60, check=False)

    for parent in ("INPUT", "OUTPUT"):
        iptables("-t", "filter", "-D", parent, "-j", "KUBE-FIREWALL")
    for table, chains in KUBELET_CHAINS.items():
        for chain in chains:
            iptables("-t", table, "-F", chain)
            iptables("-t", table, "-X", chain)


def _remove_links_into(folder: Path, target: Path) -> None:
    """Removes the symbolic links in ``folder`` that point below ``target``: the kubelet links
    each container's log into /var/log/containers, wherever its pod logs are."""
    prefix = str(target.resolve()) + "/"
    for link in folder.glob("*") if folder.is_dir() else []:
        with contextlib.suppress(OSError):
            if link.is_symlink() and os.readlink(link).startswith(prefix):
                link.unlink()


def _cgroup_hierarchies() -> list[Path]:
    """The mounted cgroup hierarchies (each v1 controller's, the named systemd one, the unified
    one), from /proc/self/mounts."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] in ("cgroup", "cgroup2"):
            found.append(Path(fields[1]))
    return found


def _make_cgroups(root: str) -> None:
    """Creates the cgroup ``root`` in every hierarchy: the kubelet's cgroup root must exist in
    each before it starts (with the cgroupfs driver it creates only what lies below)."""
    for hierarchy in _cgroup_hierarchies():
        (hierarchy / root.lstrip("/")).mkdir(exist_ok=True)


def _remove_cgroups(root: str) -> None:
    """Removes the cgroup ``root`` and everything below it in every cgroup v1 hierarchy (and the
    unified one), deepest first; a cgroup that still has a process stays."""
    for hierarchy in _cgroup_hierarchies():
        top = hierarchy / root.lstrip("/")
        if not top.is_dir():
            continue
        for directory in sorted(top.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if directory.is_dir():
                with contextlib.suppress(OSError):
                    directory.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


def _http_ok(url: str) -> bool:
    """A GET of ``url`` (on loopback: never through a proxy) answers 200."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


__all__ = [
    "BRIDGE",
    "NODE_NAME",
    "POD_SUBNET",
    "RealNode",
    "cannot_build",
    "debian_packages",
    "down_real_node",
    "host_address",
    "install_packages",
    "missing_requirements",
    "up_with_real_node",
]
