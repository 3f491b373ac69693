"""Finding, or building once, the binaries of the local test cluster.

No registry this project can reach ships kube-apiserver, but Kubernetes, etcd and kwok are Go modules.
We build them from the Go module proxy through three small wrapper modules (``gomod/``), each pinning
one upstream release, and cache the result in a per-user directory keyed by those versions, so the
cold build (tens of minutes on two cores) happens once per machine. Users who download prebuilt
binaries point ``HARVESTER_QUOTA_CLUSTER_BIN`` at them and never need Go.

KubeVirt's virt-controller is built the same way, in a cache directory of its own keyed by the
KubeVirt version (one wrapper module per supported version, ``gomod/kubevirt-v1-8-4`` for v1.8.4),
so choosing another KubeVirt never rebuilds Kubernetes. Next to it lies ``kubevirt-crds.yaml``: the
CRDs virt-operator installs for that version, printed by our ``crdgen`` (one source, ``gomod/crdgen``,
copied into each version's module) from the same module.

Harvester's own migration and resourcequota controllers (``harvester-controllers``, from
``gomod/harvester-v1-8-2``) are a build of the same kind, ``build_harvester``, with a cache
directory per Harvester version: `cluster build --harvester VERSION|all` asks for it (`make
cluster-bin` passes ``all``, so `make test` and `make demo` have every supported version), and
`cluster up --harvester VERSION` builds the one it runs if it is missing. ``build`` alone builds
neither it nor virt-controller.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from .errors import ClusterError
from .process import exclusive, run_logged

K8S_VERSION = "v1.36.5"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
MIN_GO = (1, 26)

ENV_BIN_DIR = "HARVESTER_QUOTA_CLUSTER_BIN"
ENV_CACHE_DIR = "HARVESTER_QUOTA_CACHE"
ENV_KUBEVIRT_VERSION = "HARVESTER_QUOTA_KUBEVIRT_VERSION"

# The version every test and `up` runs unless told otherwise. v1.9.0 builds too (its wrapper
# module carries stand-ins for the two virt-template modules the proxy does not serve) and the
# per-version tests run on it; the default stays the release the whole suite was measured on.
DEFAULT_KUBEVIRT_VERSION = "v1.8.4"
VIRT_CONTROLLER = "virt-controller"
KUBEVIRT_CRDS = "kubevirt-crds.yaml"
_KUBEVIRT_MODULE_PREFIX = "kubevirt-"
_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)$")

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
    """One `go build` invocation: a wrapper module and the packages it turns into binaries.

    ``shared`` names folders of GOMOD_DIR that the build copies into the module's copy under the
    same name, beside what the module has there (crdgen: one source for every KubeVirt module).
    """

    module_dir: str
    packages: tuple[str, ...]
    outputs: tuple[str, ...]
    ldflags: str
    tags: str = ""
    shared: tuple[str, ...] = ()

    def sources(self) -> dict[str, Path]:
        """The files the build compiles from, by their path in the module's copy, sorted by it;
        a shared file wins over a module file of the same path."""
        return _module_files(self.module_dir, self.shared)


def _module_files(module_dir: str, shared: tuple[str, ...] = ()) -> dict[str, Path]:
    """Every file of wrapper module ``module_dir`` and of the ``shared`` folders of GOMOD_DIR
    (under their own name), by that path, sorted by it; a shared file wins over a module one."""
    found: dict[str, Path] = {}
    roots = [(GOMOD_DIR / module_dir, "")] + [(GOMOD_DIR / s, s + "/") for s in shared]
    for root, prefix in roots:
        for path in root.rglob("*"):
            if path.is_file():
                found[prefix + path.relative_to(root).as_posix()] = path
    return dict(sorted(found.items()))


def _digest(files: Mapping[str, Path]) -> str:
    """Ten hex digits of a digest of `files` (each one's path and bytes, in the mapping's order):
    the part of a cache key that changes when a source does."""
    digest = hashlib.sha256()
    for relative, path in files.items():
        digest.update(relative.encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:10]


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


# KubeVirt's virt-controller ---------------------------------------------------------------------


@dataclass(frozen=True)
class KubeVirtBuild:
    """Where one KubeVirt version's virt-controller and generated CRDs are."""

    version: str
    directory: Path

    @property
    def virt_controller(self) -> Path:
        return self.directory / VIRT_CONTROLLER

    @property
    def crds(self) -> Path:
        return self.directory / KUBEVIRT_CRDS

    def missing(self) -> list[str]:
        """The files absent from ``directory`` (virt-controller must also be executable)."""
        missing = []
        if not self.virt_controller.is_file() or not os.access(self.virt_controller, os.X_OK):
            missing.append(VIRT_CONTROLLER)
        if not self.crds.is_file() or self.crds.stat().st_size == 0:
            missing.append(KUBEVIRT_CRDS)
        return missing


def _module_name(prefix: str, version: str) -> str:
    """The wrapper module folder of a version: dots become dashes, because setuptools skips
    folders with a dot in their name when it collects package data."""
    return prefix + version.replace(".", "-")


def _supported_versions(prefix: str) -> list[str]:
    """The versions that have a wrapper module named ``<prefix><version>``, newest first."""
    versions = []
    for folder in GOMOD_DIR.glob(f"{prefix}v*"):
        dotted = folder.name.removeprefix(prefix).replace("-", ".")
        if _VERSION.match(dotted) and (folder / "go.mod").is_file():
            versions.append(dotted)
    return sorted(versions, key=_version_tuple, reverse=True)


def _checked_version(what: str, chosen: str, supported: list[str], source: str = "") -> str:
    """``chosen`` normalised to ``vX.Y.Z``; ClusterError listing ``supported`` when it is not one
    of them (``what`` names the project, ``source`` where the choice came from)."""
    chosen = chosen.strip()
    normalised = chosen if chosen.startswith("v") else f"v{chosen}"
    if normalised not in supported:
        raise ClusterError(
            f"{what} {chosen!r}{source} cannot be built here; supported versions: "
            f"{', '.join(supported)}"
        )
    return normalised


def kubevirt_module_name(version: str) -> str:
    """The wrapper module folder of a KubeVirt version (``v1.8.4`` -> ``kubevirt-v1-8-4``)."""
    return _module_name(_KUBEVIRT_MODULE_PREFIX, version)


def supported_kubevirt_versions() -> list[str]:
    """The KubeVirt versions that have a wrapper module, newest first."""
    return _supported_versions(_KUBEVIRT_MODULE_PREFIX)


def kubevirt_version_for_minor(minor: str) -> str | None:
    """The newest supported KubeVirt version of release ``minor`` (``"1.6"`` -> ``"v1.6.0"``),
    or None when no wrapper module builds that release (then only a simulator can play it)."""
    wanted = minor.strip().removeprefix("v")
    for version in supported_kubevirt_versions():
        if version.removeprefix("v").startswith(f"{wanted}."):
            return version
    return None


def _version_tuple(version: str) -> tuple[int, ...]:
    match = _VERSION.match(version)
    if match is None:
        raise ValueError(f"not a release version: {version!r}")
    return tuple(int(part) for part in match.groups())


def kubevirt_version(explicit: str | None = None) -> str:
    """The KubeVirt version to run: ``explicit``, else $HARVESTER_QUOTA_KUBEVIRT_VERSION, else
    DEFAULT_KUBEVIRT_VERSION; normalised to ``vX.Y.Z``.

    Raises ClusterError for a version without a wrapper module, listing the supported ones: the
    module proxy serves only some exact versions, and each needs its own committed go.sum.
    """
    chosen = explicit or os.environ.get(ENV_KUBEVIRT_VERSION) or DEFAULT_KUBEVIRT_VERSION
    source = "" if explicit else f" (from {ENV_KUBEVIRT_VERSION})"
    return _checked_version("KubeVirt", chosen, supported_kubevirt_versions(), source)


def kubevirt_cache_key(version: str) -> str:
    """Names the cached virt-controller after the KubeVirt version and a digest of what its build
    compiles (the wrapper module's go.mod, go.sum and crdgen/, and the shared crdgen), so editing
    the module or the generator builds anew."""
    return f"kubevirt-{version}_{_digest(kubevirt_component(version).sources())}"


def kubevirt_dirs(version: str) -> list[Path]:
    """Where virt-controller for ``version`` is looked for, in order: a prebuilt
    ``$HARVESTER_QUOTA_CLUSTER_BIN/kubevirt-<version>/``, then the cache."""
    return _prebuilt_then_cached(f"kubevirt-{version}", kubevirt_cache_key(version))


def _prebuilt_then_cached(prebuilt: str, cache_key: str) -> list[Path]:
    """The folders a build is looked for in, in order: ``$HARVESTER_QUOTA_CLUSTER_BIN/<prebuilt>``
    when that variable is set, then the cache's ``cluster-bin/<cache_key>``."""
    candidates = []
    override = os.environ.get(ENV_BIN_DIR)
    if override:
        candidates.append(Path(override) / prebuilt)
    candidates.append(cache_root() / "cluster-bin" / cache_key)
    return candidates


def resolve_kubevirt(version: str) -> KubeVirtBuild:
    """The usable virt-controller and CRDs of ``version``, without building anything.

    Raises ClusterError naming the missing files and how to build them.
    """
    for directory in kubevirt_dirs(version):
        found = KubeVirtBuild(version, directory)
        if not found.missing():
            return found
    cached = KubeVirtBuild(version, kubevirt_dirs(version)[-1])
    raise ClusterError(
        f"KubeVirt {version} is not built yet ({', '.join(cached.missing())} missing in "
        f"{cached.directory}); run `harvester-quota-bench cluster build --kubevirt-version {version}`"
    )


def _kubevirt_ldflags(version: str) -> str:
    """Version stamps read by virt-controller's --version and its user agent."""
    stamps = {"gitVersion": version, "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z"}
    flags = ["-s", "-w"]
    flags += [f"-X kubevirt.io/client-go/version.{key}={value}" for key, value in stamps.items()]
    return " ".join(flags)


def kubevirt_component(version: str) -> Component:
    """The `go build` of virt-controller and crdgen for one KubeVirt version."""
    return Component(
        module_dir=kubevirt_module_name(version),
        packages=("kubevirt.io/kubevirt/cmd/virt-controller", "./crdgen"),
        outputs=(VIRT_CONTROLLER, "crdgen"),
        ldflags=_kubevirt_ldflags(version),
        shared=("crdgen",),
    )


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
            "run `harvester-quota-bench cluster build` (or `make cluster-bin`), "
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


def _build_component(
    go: str, component: Component, workdir: Path, outdir: Path, log_path: Path
) -> None:
    """Runs one `go build` in a private copy of the wrapper module (with its shared folders),
    logging to ``log_path``."""
    module_copy = workdir / component.module_dir
    for relative, path in component.sources().items():
        (module_copy / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, module_copy / relative)
    argv = [go, "build", "-trimpath", "-ldflags", component.ldflags, "-o"]
    # With one package, -o names the file; with several it must be a directory ending in '/'.
    if len(component.packages) == 1:
        argv.append(str(outdir / component.outputs[0]))
    else:
        argv.append(str(outdir) + "/")
    if component.tags:
        argv += ["-tags", component.tags]
    argv += list(component.packages)
    shown = f"(cd {component.module_dir}) {' '.join(argv)}"
    code = run_logged(argv, log_path, shown=shown, cwd=module_copy, env=build_env())
    if code != 0:
        tail = log_path.read_text(errors="replace")[-3000:]
        if _NETWORK_FAILURE.search(tail):
            proxy = build_env()["GOPROXY"]
            raise ClusterError(
                f"go could not download the {component.module_dir} modules from GOPROXY={proxy}; "
                f"check the network or GOPROXY. Full log: {log_path}"
            )
        raise ClusterError(
            f"go build of {', '.join(component.outputs)} failed (exit {code}). Full log: {log_path}"
        )


def _print(message: str) -> None:
    print(message, file=sys.stderr)


@dataclass(frozen=True)
class _Build:
    """One build under way: the Go toolchain, a private source tree, the output folder, the log."""

    go: str
    workdir: Path
    outdir: Path
    log_path: Path

    def compile(self, component: Component, what: str, progress: Callable[[str], None]) -> None:
        """Builds ``component`` into ``outdir``, telling ``progress`` what and how long."""
        started = time.monotonic()
        progress(f"building {what} (once per machine; log: {self.log_path})")
        _build_component(self.go, component, self.workdir, self.outdir, self.log_path)
        progress(f"  done in {time.monotonic() - started:.0f}s")


@contextlib.contextmanager
def _building_into(target: Path, key: str, go: str) -> Iterator[_Build]:
    """A build whose output folder becomes ``target`` (replacing it) only when the body returns;
    it runs in a temporary folder beside ``target`` and logs to ``build-<key>.log`` in the cache,
    so an interrupted build never leaves a half-populated folder that a later run would trust.
    The caller holds the build lock."""
    log_path = cache_root() / f"build-{key}.log"
    log_path.write_text(f"building {key} with {go}\n")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="build-", dir=target.parent) as tmp:
        build = _Build(go, Path(tmp) / "src", Path(tmp) / "bin", log_path)
        build.workdir.mkdir()
        build.outdir.mkdir()
        yield build
        if target.exists():
            shutil.rmtree(target)
        build.outdir.rename(target)


def build(
    progress: Callable[[str], None] = _print,
    *,
    force: bool = False,
) -> Path:
    """Builds every binary into the cache unless it is already there; returns its directory.

    One build at a time per machine, moved into place whole when it succeeded (``_building_into``).
    """
    if os.environ.get(ENV_BIN_DIR):
        return resolve_bin_dir()
    target = default_bin_dir()
    if not force and not missing_binaries(target):
        return target
    go = find_go()
    with exclusive(cache_root() / "build.lock"):
        if not force and not missing_binaries(target):
            return target
        with _building_into(target, cache_key(), go) as building:
            for component in COMPONENTS:
                building.compile(component, ", ".join(component.outputs), progress)
    return target


def build_kubevirt(
    version: str,
    progress: Callable[[str], None] = _print,
    *,
    force: bool = False,
) -> KubeVirtBuild:
    """Builds virt-controller of ``version`` and generates its CRDs into the cache unless they are
    already there (or prebuilt, see ``kubevirt_dirs``); returns where they are.

    Like ``build``: one build at a time per machine, moved into place whole when it succeeded.
    """
    if not force:
        with contextlib.suppress(ClusterError):
            return resolve_kubevirt(version)
    target = KubeVirtBuild(version, kubevirt_dirs(version)[-1])
    go = find_go()
    with exclusive(cache_root() / "build.lock"):
        if not force and not target.missing():
            return target
        with _building_into(target.directory, kubevirt_cache_key(version), go) as building:
            what = f"KubeVirt {version} virt-controller"
            building.compile(kubevirt_component(version), what, progress)
            crdgen = building.outdir / "crdgen"
            _generate_crds(crdgen, building.outdir / KUBEVIRT_CRDS, building.log_path)
            crdgen.unlink()
    return target


# Harvester's own controllers -------------------------------------------------------------------

HARVESTER_CONTROLLERS = "harvester-controllers"
_HARVESTER_MODULE_PREFIX = "harvester-"


def harvester_module_name(version: str) -> str:
    """The wrapper module folder of a Harvester version (``v1.8.2`` -> ``harvester-v1-8-2``)."""
    return _module_name(_HARVESTER_MODULE_PREFIX, version)


def supported_harvester_versions() -> list[str]:
    """The Harvester versions that have a wrapper module, newest first."""
    return _supported_versions(_HARVESTER_MODULE_PREFIX)


def harvester_version(explicit: str | None = None) -> str:
    """The Harvester version to build or run: ``explicit``, else the newest supported one;
    normalised to ``vX.Y.Z``. Raises ClusterError for a version without a wrapper module,
    listing the supported ones."""
    supported = supported_harvester_versions()
    return _checked_version("Harvester", explicit or supported[0], supported)


HARVESTER_KUBEVIRT = {"v1.8.2": "v1.7.0"}
"""The KubeVirt each supported Harvester ships: the ``kubevirt.io/kubevirt`` its go.mod requires
(Harvester's chart deploys that release's virt-operator). A Harvester cluster runs that
virt-controller beside Harvester's controllers unless told otherwise, as on a Harvester node; a
unit test holds this table to the wrapper modules' go.mod."""


def harvester_kubevirt_version(harvester: str) -> str:
    """The KubeVirt version ``harvester`` ships (``v1.8.2`` -> ``v1.7.0``), normalised and checked
    as ``kubevirt_version`` checks it. Raises ClusterError for a Harvester version without a
    wrapper module or without an entry in HARVESTER_KUBEVIRT."""
    version = harvester_version(harvester)
    shipped = HARVESTER_KUBEVIRT.get(version)
    if shipped is None:
        raise ClusterError(f"Harvester {version} has no entry in HARVESTER_KUBEVIRT")
    return kubevirt_version(shipped)


def harvester_component(version: str) -> Component:
    """The `go build` of ``harvester-controllers`` for one Harvester version: a main that runs
    Harvester's migration and resourcequota controllers, unchanged, under Harvester's Lease."""
    return Component(
        module_dir=harvester_module_name(version),
        packages=(".",),
        outputs=(HARVESTER_CONTROLLERS,),
        ldflags="-s -w",
    )


def harvester_cache_key(version: str) -> str:
    """Names the cached build after the Harvester version and a digest of its wrapper module
    (main.go, go.mod, go.sum), so an edit builds anew."""
    return f"harvester-{version}_{_digest(harvester_component(version).sources())}"


def harvester_paths(version: str) -> list[Path]:
    """Where ``harvester-controllers`` of ``version`` is looked for, in order: a prebuilt
    ``$HARVESTER_QUOTA_CLUSTER_BIN/harvester-<version>/``, then the cache."""
    folders = _prebuilt_then_cached(f"harvester-{version}", harvester_cache_key(version))
    return [folder / HARVESTER_CONTROLLERS for folder in folders]


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def resolve_harvester(version: str) -> Path:
    """The usable ``harvester-controllers`` of ``version``, without building anything.

    Raises ClusterError naming where it was looked for and how to build it.
    """
    for path in harvester_paths(version):
        if _executable(path):
            return path
    raise ClusterError(
        f"Harvester {version}'s controllers are not built yet ({harvester_paths(version)[-1]} "
        f"missing); run `harvester-quota-bench cluster build --harvester {version}`"
    )


def build_harvester(
    version: str,
    progress: Callable[[str], None] = _print,
    *,
    force: bool = False,
) -> Path:
    """Builds ``harvester-controllers`` of ``version`` into the cache unless it is there (or
    prebuilt, see ``harvester_paths``); returns its path. Not part of ``build``: `cluster build
    --harvester` calls it (`make cluster-bin` for every supported version); its cold build is
    measured in docs/operations.md ("Harvester's own controllers").

    Like ``build``: one build at a time per machine, moved into place whole when it succeeded.
    """
    if not force:
        with contextlib.suppress(ClusterError):
            return resolve_harvester(version)
    target = harvester_paths(version)[-1]
    go = find_go()
    with exclusive(cache_root() / "build.lock"):
        if not force and _executable(target):
            return target
        with _building_into(target.parent, harvester_cache_key(version), go) as building:
            what = f"Harvester {version}'s migration and resourcequota controllers"
            building.compile(harvester_component(version), what, progress)
    return target


HELM_VERSION = "v3.19.0"
HELM = "helm"


def helm_cache_key() -> str:
    """Names the cached helm after its version and a digest of its wrapper module."""
    module = GOMOD_DIR / "helm"
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        digest.update((module / name).read_bytes())
    return f"helm-{HELM_VERSION}_{digest.hexdigest()[:10]}"


def helm_path() -> Path:
    """Where helm is: a prebuilt ``$HARVESTER_QUOTA_CLUSTER_BIN/helm``, else the cache."""
    override = os.environ.get(ENV_BIN_DIR)
    if override and (Path(override) / HELM).exists():
        return Path(override) / HELM
    return cache_root() / "cluster-bin" / helm_cache_key() / HELM


def build_helm(progress: Callable[[str], None] = _print, *, force: bool = False) -> Path:
    """Builds helm (which renders deploy/chart; tests and `make manifest` use it) into the cache
    unless it is there; returns its path. One build at a time per machine, moved in whole."""
    target = helm_path()
    if target.exists() and not force:
        return target
    go = find_go()
    with exclusive(cache_root() / "build.lock"):
        if target.exists() and not force:
            return target
        with _building_into(target.parent, helm_cache_key(), go) as building:
            component = Component("helm", ("helm.sh/helm/v3/cmd/helm",), (HELM,), "-s -w")
            building.compile(component, f"helm {HELM_VERSION}", progress)
    return target


# The real node's kubelet and kube-proxy ---------------------------------------------------------

KUBELET = "kubelet"
KUBE_PROXY = "kube-proxy"
NODE_BINARIES = (KUBELET, KUBE_PROXY)


def node_component() -> Component:
    """The `go build` of the real node's kubelet and kube-proxy: the control plane's wrapper
    module (``gomod/kube``), version stamps and tags, so the node runs the very Kubernetes
    release the API server does."""
    return Component(
        module_dir="kube",
        packages=tuple(f"k8s.io/kubernetes/cmd/{name}" for name in NODE_BINARIES),
        outputs=NODE_BINARIES,
        ldflags=_kube_ldflags(),
        tags="selinux,notest",
    )


def node_cache_key() -> str:
    """Names the cached kubelet and kube-proxy after the Kubernetes version and a digest of the
    wrapper module (its go.sum grew their dependencies' sums), so an edit builds anew; a cache
    folder of their own, so that adding them never rebuilds the control plane."""
    return f"k8s-node-{K8S_VERSION}_{_digest(node_component().sources())}"


def node_bin_dir() -> Path:
    """Where kubelet and kube-proxy are: a prebuilt ``$HARVESTER_QUOTA_CLUSTER_BIN`` that holds
    both, else the cache."""
    override = os.environ.get(ENV_BIN_DIR)
    if override and all(_executable(Path(override) / name) for name in NODE_BINARIES):
        return Path(override)
    return cache_root() / "cluster-bin" / node_cache_key()


def build_node(progress: Callable[[str], None] = _print, *, force: bool = False) -> Path:
    """Builds kubelet and kube-proxy into the cache unless they are there; returns their folder.

    Not part of ``build`` nor of `make cluster-bin`: only the real-node tests and their `make`
    target need them (`cluster build --node`). Like ``build``: one build at a time per machine,
    moved into place whole when it succeeded. Raises ClusterError when Go or the module proxy
    fails.
    """
    target = node_bin_dir()
    if not force and all(_executable(target / name) for name in NODE_BINARIES):
        return target
    go = find_go()
    with exclusive(cache_root() / "build.lock"):
        if not force and all(_executable(target / name) for name in NODE_BINARIES):
            return target
        with _building_into(target, node_cache_key(), go) as building:
            building.compile(node_component(), f"kubelet and kube-proxy {K8S_VERSION}", progress)
    return target


PROMETHEUS_OPERATOR = "prometheus-operator"
PROMETHEUS_OPERATOR_CRDS = (
    "monitoring.coreos.com_podmonitors.yaml",
    "monitoring.coreos.com_prometheusrules.yaml",
)
"""The CRDs of the kinds the chart renders when monitoring is enabled, from the module's
example/prometheus-operator-crd/ (the release's own YAML)."""


def prometheus_operator_crds() -> list[Path]:
    """prometheus-operator's PodMonitor and PrometheusRule CRDs, at the version gomod/
    prometheus-operator pins (its go.sum verifies the download), copied into the cache once per
    machine; returns their paths. A download of the module's source (about 1 s on a good
    network), no build. ClusterError when Go or the module proxy fails."""
    module = GOMOD_DIR / PROMETHEUS_OPERATOR
    key = f"{PROMETHEUS_OPERATOR}-crds_{_digest(_module_files(PROMETHEUS_OPERATOR))}"
    target = cache_root() / "cluster-bin" / key
    paths = [target / name for name in PROMETHEUS_OPERATOR_CRDS]
    if all(p.exists() for p in paths):
        return paths
    argv = [
        find_go(),
        "mod",
        "download",
        "-json",
        "github.com/prometheus-operator/prometheus-operator",
    ]
    done = subprocess.run(
        argv, cwd=module, env=build_env(), capture_output=True, text=True, timeout=600, check=False
    )
    if done.returncode != 0:
        raise ClusterError(
            f"go mod download of prometheus-operator failed: {done.stdout}{done.stderr}"
        )
    source = Path(json.loads(done.stdout)["Dir"]) / "example" / "prometheus-operator-crd"
    with exclusive(cache_root() / "build.lock"):
        target.mkdir(parents=True, exist_ok=True)
        for path in paths:
            partial = path.with_suffix(".partial")
            shutil.copyfile(source / path.name, partial)
            partial.replace(path)
    return paths


def _generate_crds(crdgen: Path, output: Path, log_path: Path) -> None:
    """Runs crdgen, writing its YAML to ``output``; a failure names the log."""
    with output.open("wb") as out, log_path.open("a") as log:
        log.write(f"\n$ {crdgen} > {output}\n")
        log.flush()
        result = subprocess.run([str(crdgen)], stdout=out, stderr=log, timeout=120, check=False)
    if result.returncode != 0 or output.stat().st_size == 0:
        raise ClusterError(
            f"generating KubeVirt's CRDs failed (exit {result.returncode}). Full log: {log_path}"
        )


# The client-go informer baseline of `make bench` ------------------------------------------------

CLIENTGO_INFORMER = "clientgo-informer"
CLIENT_GO_VERSION = "v0.36.5"
"""client-go's release in gomod/clientgo-informer: the one of the cluster's Kubernetes."""


def clientgo_informer_path() -> Path:
    """Where the client-go informer baseline is cached: keyed by client-go's version and a digest
    of its wrapper module (main.go, go.mod, go.sum), so an edit builds anew."""
    key = f"{CLIENTGO_INFORMER}-{CLIENT_GO_VERSION}_{_digest(_module_files(CLIENTGO_INFORMER))}"
    return cache_root() / "gohelpers" / key / CLIENTGO_INFORMER


def build_clientgo_informer(progress: Callable[[str], None] = _print) -> Path:
    """Builds the client-go informer baseline (bench/informer.py runs it beside ours) into the
    cache unless it is there; returns its path. Like ``build_helm``: one build at a time per
    machine, moved into place whole. Raises ClusterError when Go or the module proxy fails."""
    target = clientgo_informer_path()
    if target.exists():
        return target
    go = find_go()
    with exclusive(cache_root() / "build.lock"):
        if target.exists():
            return target
        with _building_into(target.parent, target.parent.name, go) as building:
            component = Component(CLIENTGO_INFORMER, (".",), (CLIENTGO_INFORMER,), "-s -w")
            building.compile(component, "the client-go informer baseline", progress)
    return target
