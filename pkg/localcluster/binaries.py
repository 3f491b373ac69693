"""Finding, or building once, the binaries of the local test cluster.

No registry this project can reach ships kube-apiserver, but Kubernetes, etcd and kwok are Go modules.
We build them from the Go module proxy through three small wrapper modules (``gomod/``), each pinning
one upstream release, and cache the result in a per-user directory keyed by those versions, so the
cold build (tens of minutes on two cores) happens once per machine. Users who download prebuilt
binaries point ``HARVESTER_QUOTA_CLUSTER_BIN`` at them and never need Go.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .errors import ClusterError

K8S_VERSION = "v1.36.5"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
MIN_GO = (1, 26)

ENV_BIN_DIR = "HARVESTER_QUOTA_CLUSTER_BIN"
ENV_CACHE_DIR = "HARVESTER_QUOTA_CACHE"

BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
)

GOMOD_DIR = Path(__file__).parent / "gomod"

# Output of `go build` that means the module proxy could not be reached, as opposed to a compile error.
_NETWORK_FAILURE = re.compile(
    r"dial tcp|no such host|connection refused|i/o timeout|proxyconnect|TLS handshake timeout"
    r"|server response: (?:not found|gone)|unrecognized import path|Get \"https?://",
)


@dataclass(frozen=True)
class Component:
    """One `go build` invocation: a wrapper module and the packages it turns into binaries."""

    module_dir: str
    packages: tuple[str, ...]
    outputs: tuple[str, ...]
    ldflags: str
    tags: str = ""


def _kube_ldflags() -> str:
    """Version stamps for both places Kubernetes reads them; kwok and /version parse them."""
    minor = K8S_VERSION.split(".")[1]
    stamps = {
        "gitVersion": K8S_VERSION,
        "gitMajor": "1",
        "gitMinor": minor,
        "gitCommit": "0" * 40,
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
    }
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {pkg}.{key}={value}" for key, value in stamps.items()]
    return " ".join(flags)


COMPONENTS = (
    Component(
        module_dir="etcd",
        packages=("go.etcd.io/etcd/server/v3",),
        outputs=("etcd",),
        ldflags=f"-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA={ETCD_VERSION}",
    ),
    Component(
        module_dir="kwok",
        packages=("sigs.k8s.io/kwok/cmd/kwok",),
        outputs=("kwok",),
        ldflags=f"-s -w -X sigs.k8s.io/kwok/pkg/consts.Version={KWOK_VERSION.lstrip('v')}",
    ),
    Component(
        module_dir="kube",
        packages=tuple(
            f"k8s.io/kubernetes/cmd/{name}"
            for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
        ),
        outputs=("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"),
        ldflags=_kube_ldflags(),
        tags="selinux,notest",
    ),
)


def cache_root() -> Path:
    """The per-user cache directory: $HARVESTER_QUOTA_CACHE, else $XDG_CACHE_HOME/harvester-quota."""
    explicit = os.environ.get(ENV_CACHE_DIR)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "harvester-quota"


def cache_key() -> str:
    """Names the cached build after every pinned version, so a version bump builds anew."""
    return f"k8s-{K8S_VERSION}_etcd-{ETCD_VERSION}_kwok-{KWOK_VERSION}"


def default_bin_dir() -> Path:
    return cache_root() / "cluster-bin" / cache_key()


def missing_binaries(directory: Path) -> list[str]:
    """The binaries absent from, or not executable in, ``directory``."""
    return [
        name
        for name in BINARIES
        if not (directory / name).is_file() or not os.access(directory / name, os.X_OK)
    ]


def resolve_bin_dir() -> Path:
    """The directory holding usable binaries, without building anything.

    Raises ClusterError naming what is missing, so a caller can tell the user how to get them.
    """
    override = os.environ.get(ENV_BIN_DIR)
    if override:
        directory = Path(override)
        missing = missing_binaries(directory)
        if missing:
            raise ClusterError(
                f"{ENV_BIN_DIR}={override} lacks executable {', '.join(missing)}; "
                f"it must hold all of: {', '.join(BINARIES)}"
            )
        return directory
    directory = default_bin_dir()
    missing = missing_binaries(directory)
    if missing:
        raise ClusterError(
            f"local cluster binaries are not built yet ({', '.join(missing)} missing in {directory}); "
            "run `harvester-quota cluster build` (or `make cluster-bin`), "
            f"or set {ENV_BIN_DIR} to a directory of prebuilt binaries"
        )
    return directory


def go_version(go: str) -> tuple[int, int]:
    """The (major, minor) of the Go toolchain at ``go``."""
    out = subprocess.run(
        [go, "env", "GOVERSION"], capture_output=True, text=True, timeout=60, check=False
    )
    match = re.match(r"go(\d+)\.(\d+)", out.stdout.strip())
    if out.returncode != 0 or not match:
        raise ClusterError(f"`{go} env GOVERSION` failed: {(out.stderr or out.stdout).strip()}")
    return int(match.group(1)), int(match.group(2))


def find_go() -> str:
    """The Go toolchain to build with, checked to be new enough for Kubernetes 1.36."""
    go = shutil.which("go")
    if go is None:
        raise ClusterError(
            "the Go toolchain is not on PATH: building the local cluster needs Go "
            f">= {MIN_GO[0]}.{MIN_GO[1]} (https://go.dev/doc/install), "
            f"or set {ENV_BIN_DIR} to a directory of prebuilt binaries"
        )
    version = go_version(go)
    if version < MIN_GO:
        raise ClusterError(
            f"{go} is Go {version[0]}.{version[1]}; Kubernetes {K8S_VERSION} needs "
            f"Go >= {MIN_GO[0]}.{MIN_GO[1]} (GOTOOLCHAIN=local: no toolchain is downloaded)"
        )
    return go


def build_env() -> dict[str, str]:
    """The environment of every `go` call: static binaries, no toolchain download, pinned go.sum.

    GOSUMDB is off because the checksum database is not reachable from every network that reaches
    a module proxy; the committed go.sum files still verify every module that is downloaded.
    """
    env = dict(os.environ)
    env.update(
        {
            "CGO_ENABLED": "0",
            "GOTOOLCHAIN": "local",
            "GOFLAGS": "-mod=readonly -buildvcs=false",
            "GOSUMDB": "off",
        }
    )
    env.setdefault("GOPROXY", "https://proxy.golang.org,direct")
    return env


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """Serialises builds on one machine, so two `make test` runs do not compile twice."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build_component(
    go: str, component: Component, workdir: Path, outdir: Path, log_path: Path
) -> None:
    """Runs one `go build` in a private copy of the wrapper module, logging to ``log_path``."""
    module_copy = workdir / component.module_dir
    shutil.copytree(GOMOD_DIR / component.module_dir, module_copy)
    argv = [go, "build", "-trimpath", "-ldflags", component.ldflags, "-o"]
    # With one package, -o names the file; with several it must be a directory ending in '/'.
    if len(component.packages) == 1:
        argv.append(str(outdir / component.outputs[0]))
    else:
        argv.append(str(outdir) + "/")
    if component.tags:
        argv += ["-tags", component.tags]
    argv += list(component.packages)
    with log_path.open("a") as log:
        log.write(f"\n$ (cd {component.module_dir}) {' '.join(argv)}\n")
        log.flush()
        result = subprocess.run(
            argv,
            cwd=module_copy,
            env=build_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if result.returncode != 0:
        tail = log_path.read_text(errors="replace")[-3000:]
        if _NETWORK_FAILURE.search(tail):
            proxy = build_env()["GOPROXY"]
            raise ClusterError(
                f"go could not download the {component.module_dir} modules from GOPROXY={proxy}; "
                f"check the network or GOPROXY. Full log: {log_path}"
            )
        raise ClusterError(
            f"go build of {', '.join(component.outputs)} failed (exit {result.returncode}). "
            f"Full log: {log_path}"
        )


def build(
    progress: Callable[[str], None] = lambda message: print(message, file=sys.stderr),
    *,
    force: bool = False,
) -> Path:
    """Builds every binary into the cache unless it is already there; returns its directory.

    The binaries are built in a temporary directory and moved into place whole, so an interrupted
    build never leaves a half-populated cache that a later run would trust.
    """
    if os.environ.get(ENV_BIN_DIR):
        return resolve_bin_dir()
    target = default_bin_dir()
    if not force and not missing_binaries(target):
        return target
    go = find_go()
    root = cache_root()
    with _exclusive(root / "build.lock"):
        if not force and not missing_binaries(target):
            return target
        log_path = root / f"build-{cache_key()}.log"
        log_path.write_text(f"building {cache_key()} with {go}\n")
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="build-", dir=target.parent) as tmp:
            workdir, outdir = Path(tmp) / "src", Path(tmp) / "bin"
            workdir.mkdir()
            outdir.mkdir()
            for component in COMPONENTS:
                started = time.monotonic()
                progress(
                    f"building {', '.join(component.outputs)} (once per machine; log: {log_path})"
                )
                _build_component(go, component, workdir, outdir, log_path)
                progress(f"  done in {time.monotonic() - started:.0f}s")
            if target.exists():
                shutil.rmtree(target)
            outdir.rename(target)
    return target
