"""The product's image, built from deploy/Containerfile as users build it, for the real node.

No image registry is reachable from every machine that runs the tests, so the Containerfile's
base (its ``BASE`` build argument, python:3.11-slim by default) is replaced by a stand-in made
here: Debian bookworm's minimal system with its Python 3.11 and pip (``debootstrap``), the
machine's own CA bundle (pip reaches PyPI through whatever this machine trusts), ``python`` and
``pip`` on PATH as in the official image, and pip allowed to install into the system (Debian
marks its Python externally managed; python:3.11-slim does not). Everything after FROM is the
Containerfile's: the wheel built from the source tree, installed with its ``install_requires``
alone, uid 65532.

Both are built once per machine and cached under ``<cache>/images/``: the base by a digest of its
recipe, the product's archive by a digest of everything the build reads (the Containerfile, the
packaging files and the product's modules; never the test bench, which the wheel leaves out).
The archive (``podman save``, docker format) holds the product image under the name the chart's
defaults give it (``harvester-quota:<appVersion>``, which a container runtime reads as
``docker.io/library/harvester-quota:<appVersion>``) and the pod sandbox image the real node's
containerd runs (the base with ``sleep infinity`` as its entrypoint: no registry serves
registry.k8s.io/pause either).

Needs root, ``podman`` (run with runc: crun refuses a machine that mounts cgroup v1 beside an
empty unified hierarchy) and ``debootstrap``; ``realnode.missing_requirements`` says what is
absent.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import yaml

from .binaries import cache_root
from .errors import ClusterError
from .process import exclusive, run_logged

REPO: Final = Path(__file__).resolve().parents[3]
CONTAINERFILE: Final = REPO / "deploy" / "Containerfile"
CHART_FILE: Final = REPO / "deploy" / "chart" / "harvester-quota" / "Chart.yaml"
SUITE: Final = "bookworm"
MIRROR: Final = "http://deb.debian.org/debian"
BASE_PACKAGES: Final = ("python3", "python3-pip")
"""Python 3.11 (bookworm's), as in python:3.11-slim, and pip; useradd comes with the minimal
system."""
SANDBOX_IMAGE: Final = "localhost/harvester-quota-pause:bookworm"
"""The pod sandbox image of the real node's containerd: holds each pod's namespaces."""
PODMAN: Final = ("podman", "--runtime", "runc")
"""podman with runc, whatever its default runtime: crun refuses a machine that mounts cgroup v1
beside an empty unified hierarchy."""
PODMAN_LIMITS: Final = ("--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4096:4096")
"""Explicit limits for podman's containers: its defaults (a million open files) exceed the hard
limits of some machines (20,000 here), and runc then refuses to start the container."""
BUILD_TIMEOUT: Final = 1200.0
"""debootstrap downloads about 120 packages and the wheel build downloads the product's
dependencies: about 1½ minutes and 30 s on a good network; ten times that is a failure."""

IMAGE_REPOSITORY: Final = "harvester-quota"
"""The chart's default image.repository (values.yaml)."""


def app_version() -> str:
    """The chart's appVersion: the tag its default image carries."""
    return str(yaml.safe_load(CHART_FILE.read_text())["appVersion"])


def product_image() -> str:
    """The product image as a container runtime names the chart's default one."""
    return f"docker.io/library/{IMAGE_REPOSITORY}:{app_version()}"


def _base_recipe() -> bytes:
    """What the stand-in base is made from: a change to any of it makes a new base."""
    ca_bundle = _ca_bundle().read_bytes()
    return "\n".join([SUITE, MIRROR, *BASE_PACKAGES]).encode() + b"\0" + ca_bundle


def _ca_bundle() -> Path:
    """The machine's CA bundle (Debian's path; $SSL_CERT_FILE where set)."""
    explicit = os.environ.get("SSL_CERT_FILE")
    return Path(explicit) if explicit else Path("/etc/ssl/certs/ca-certificates.crt")


def base_image() -> str:
    """The name of the stand-in base, keyed by a digest of its recipe."""
    return f"localhost/harvester-quota-base:{SUITE}-{_digest_bytes(_base_recipe())}"


def _digest_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:10]


def build_inputs() -> dict[str, Path]:
    """Every file the Containerfile's build reads that can change the image, by its path in the
    repository, sorted: the Containerfile, the packaging files and the product's modules (the
    test bench and caches excluded: the wheel leaves them out)."""
    found = {name: REPO / name for name in ("setup.cfg", "setup.py", "pyproject.toml", "README.md")}
    found["deploy/Containerfile"] = CONTAINERFILE
    for path in (REPO / "pkg").rglob("*"):
        relative = path.relative_to(REPO).as_posix()
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        if relative.startswith("pkg/testbench/"):
            continue
        found[relative] = path
    return dict(sorted(found.items()))


def image_cache_key() -> str:
    """Names the cached archive after the app version and a digest of the build's inputs and
    the base it builds on."""
    digest = hashlib.sha256(base_image().encode() + b"\0")
    for relative, path in build_inputs().items():
        digest.update(relative.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"harvester-quota-{app_version()}_{digest.hexdigest()[:10]}"


def archive_path() -> Path:
    """Where the archive of the product and sandbox images is cached."""
    return cache_root() / "images" / f"{image_cache_key()}.tar"


def _run(argv: list[str], log: Path, *, stdin: int | None = None, cwd: Path | None = None) -> None:
    """Runs ``argv`` with its output appended to ``log``; ClusterError naming the log on failure."""
    code = run_logged(argv, log, stdin=stdin, cwd=cwd, timeout=BUILD_TIMEOUT)
    if code != 0:
        shown = " ".join(argv[:6])
        raise ClusterError(f"`{shown} ...` failed (exit {code}); log: {log}")


def _image_exists(name: str) -> bool:
    done = subprocess.run(
        [*PODMAN, "image", "exists", name], capture_output=True, timeout=60, check=False
    )
    return done.returncode == 0


def _print(message: str) -> None:
    print(message, file=sys.stderr)


@contextlib.contextmanager
def _logging(name: str) -> Iterator[Path]:
    log = cache_root() / f"build-{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"building {name}\n")
    yield log


def _make_base(log: Path, progress: Callable[[str], None]) -> None:
    """debootstrap's minimal bookworm with Python and pip, adjusted to stand in for
    python:3.11-slim, imported into podman as ``base_image()``; the pod sandbox image from the
    same tree."""
    progress(f"making the stand-in base {base_image()} with debootstrap (log: {log})")
    with tempfile.TemporaryDirectory(prefix="base-", dir=cache_root()) as tmp:
        rootfs = Path(tmp) / "rootfs"
        argv = ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}"]
        _run([*argv, SUITE, str(rootfs), MIRROR], log)
        (rootfs / "usr/lib/python3.11/EXTERNALLY-MANAGED").unlink(missing_ok=True)
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (rootfs / cache).glob("*"):
                if entry.is_file():
                    entry.unlink()
        for name, target in (("python", "/usr/bin/python3"), ("pip", "/usr/bin/pip3")):
            link = rootfs / "usr/local/bin" / name
            link.unlink(missing_ok=True)
            link.symlink_to(target)
        shutil.copyfile(_ca_bundle(), rootfs / "etc/ssl/certs/ca-certificates.crt")
        tarball = Path(tmp) / "rootfs.tar"
        _run(["tar", "-C", str(rootfs), "-cf", str(tarball), "."], log)
        for name, change in (
            (base_image(), 'CMD ["python3"]'),
            (SANDBOX_IMAGE, 'ENTRYPOINT ["/bin/sleep", "infinity"]'),
        ):
            with tarball.open("rb") as source:
                _run([*PODMAN, "import", "--change", change, "-", name], log, stdin=source.fileno())


def build_image(progress: Callable[[str], None] = _print, *, force: bool = False) -> Path:
    """Builds the product image from deploy/Containerfile on the stand-in base (made first if
    podman lacks it) and saves it, with the sandbox image, to ``archive_path()`` unless that is
    there; returns the archive. One image build at a time per machine; the archive appears
    whole or not at all. ClusterError (naming the log) when a step fails."""
    target = archive_path()
    if target.exists() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(cache_root() / "image.lock"):
        if target.exists() and not force:
            return target
        with _logging(target.stem) as log:
            if force or not (_image_exists(base_image()) and _image_exists(SANDBOX_IMAGE)):
                _make_base(log, progress)
            progress(f"building {product_image()} from deploy/Containerfile (log: {log})")
            argv = [*PODMAN, "build", "--network", "host", *PODMAN_LIMITS]
            argv += ["--build-arg", f"BASE={base_image()}", "-f", str(CONTAINERFILE)]
            _run([*argv, "-t", product_image(), str(REPO)], log, cwd=REPO)
            partial = target.with_suffix(".partial")
            partial.unlink(missing_ok=True)
            save = [*PODMAN, "save", "--format", "docker-archive", "-m", "-o", str(partial)]
            _run([*save, product_image(), SANDBOX_IMAGE], log)
            partial.replace(target)
            for stale in target.parent.glob(f"{IMAGE_REPOSITORY}-*.tar"):
                if stale != target:
                    stale.unlink(missing_ok=True)
    return target
