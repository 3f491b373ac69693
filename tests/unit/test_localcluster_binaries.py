"""Finding or building the cluster binaries, and the messages when that cannot be done."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from harvester_quota.testbench.localcluster import ClusterError, binaries


def test_override_directory_must_hold_every_binary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "etcd").write_text("#!/bin/sh\n")
    (tmp_path / "etcd").chmod(0o755)
    monkeypatch.setenv(binaries.ENV_BIN_DIR, str(tmp_path))
    with pytest.raises(ClusterError) as error:
        binaries.resolve_bin_dir()
    assert "kube-apiserver" in str(error.value)
    assert "etcd," not in str(error.value).split("lacks")[1].split(";")[0]


def test_override_directory_with_every_binary_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in binaries.BINARIES:
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv(binaries.ENV_BIN_DIR, str(tmp_path))
    assert binaries.resolve_bin_dir() == tmp_path
    assert binaries.build() == tmp_path


def test_cache_key_names_every_pinned_version() -> None:
    key = binaries.cache_key()
    for version in (binaries.K8S_VERSION, binaries.ETCD_VERSION, binaries.KWOK_VERSION):
        assert version in key


def test_unbuilt_cache_says_how_to_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(binaries.ENV_BIN_DIR, raising=False)
    monkeypatch.setenv(binaries.ENV_CACHE_DIR, str(tmp_path))
    with pytest.raises(ClusterError, match="harvester-quota-bench cluster build"):
        binaries.resolve_bin_dir()


def test_missing_go_toolchain_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(binaries.ENV_BIN_DIR, raising=False)
    monkeypatch.setenv(binaries.ENV_CACHE_DIR, str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ClusterError, match="Go toolchain is not on PATH"):
        binaries.build(progress=lambda _: None)


def test_old_go_toolchain_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "go"
    fake.write_text("#!/bin/sh\necho go1.20.3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ClusterError, match=r"Go 1\.20.*needs Go >= 1\.26"):
        binaries.find_go()


@pytest.mark.skipif(shutil.which("go") is None, reason="needs a Go toolchain")
def test_unreachable_module_proxy_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With an empty module cache and a proxy nobody listens on, the error names the proxy."""
    monkeypatch.delenv(binaries.ENV_BIN_DIR, raising=False)
    monkeypatch.setenv(binaries.ENV_CACHE_DIR, str(tmp_path / "cache"))
    monkeypatch.setenv("GOMODCACHE", str(tmp_path / "modcache"))
    monkeypatch.setenv("GOCACHE", str(tmp_path / "gocache"))
    monkeypatch.setenv("GOPROXY", "http://127.0.0.1:9")
    with pytest.raises(ClusterError) as error:
        binaries.build(progress=lambda _: None)
    message = str(error.value)
    assert "could not download the etcd modules from GOPROXY=http://127.0.0.1:9" in message
    assert "Full log:" in message
    assert not (tmp_path / "cache" / "cluster-bin" / binaries.cache_key()).exists()


def test_the_client_go_baseline_is_cached_by_its_version_and_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(binaries.ENV_CACHE_DIR, str(tmp_path / "cache"))
    path = binaries.clientgo_informer_path()
    assert path.parent.parent == tmp_path / "cache" / "gohelpers"
    assert path.parent.name.startswith(f"clientgo-informer-{binaries.CLIENT_GO_VERSION}_")
    copy = tmp_path / "gomod"
    shutil.copytree(binaries.GOMOD_DIR, copy)
    monkeypatch.setattr(binaries, "GOMOD_DIR", copy)
    main = copy / binaries.CLIENTGO_INFORMER / "main.go"
    main.write_text(main.read_text() + "\n// edited\n")
    assert binaries.clientgo_informer_path() != path, "an edited helper is built anew"


def test_the_client_go_baseline_pins_the_client_go_of_the_cluster_s_kubernetes() -> None:
    """The baseline measures the client-go that ships with the cluster's Kubernetes release."""
    minor = binaries.K8S_VERSION.removeprefix("v1.")
    assert f"v0.{minor}" == binaries.CLIENT_GO_VERSION
    module = (binaries.GOMOD_DIR / binaries.CLIENTGO_INFORMER / "go.mod").read_text()
    assert f"k8s.io/client-go {binaries.CLIENT_GO_VERSION}\n" in module
    kube = (binaries.GOMOD_DIR / "kube" / "go.mod").read_text()
    assert f"k8s.io/client-go => k8s.io/client-go {binaries.CLIENT_GO_VERSION}\n" in kube


def test_the_client_go_baseline_is_built_once_and_moved_into_place_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `go build` faked: a failed build leaves nothing a later run would trust, a build
    that succeeds lands at clientgo_informer_path() with its log, and a built baseline is not
    built again."""
    monkeypatch.setenv(binaries.ENV_CACHE_DIR, str(tmp_path / "cache"))
    monkeypatch.setattr(binaries, "find_go", lambda: "go")
    builds: list[str] = []

    def failing_go_build(go: str, component: binaries.Component, *_: Path) -> None:
        raise ClusterError("go build failed")

    def go_build(
        go: str, component: binaries.Component, workdir: Path, outdir: Path, log: Path
    ) -> None:
        builds.append(component.module_dir)
        (outdir / binaries.CLIENTGO_INFORMER).write_text("binary")

    target = binaries.clientgo_informer_path()
    monkeypatch.setattr(binaries, "_build_component", failing_go_build)
    with pytest.raises(ClusterError):
        binaries.build_clientgo_informer(progress=lambda _: None)
    assert not target.parent.exists()
    monkeypatch.setattr(binaries, "_build_component", go_build)
    said: list[str] = []
    assert binaries.build_clientgo_informer(progress=said.append) == target
    assert target.read_text() == "binary"
    assert (tmp_path / "cache" / f"build-{target.parent.name}.log").is_file()
    assert "client-go informer baseline" in said[0]
    assert binaries.build_clientgo_informer(progress=said.append) == target
    assert builds == [binaries.CLIENTGO_INFORMER]
