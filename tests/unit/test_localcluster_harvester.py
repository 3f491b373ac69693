"""Harvester's own controllers in the local cluster: the build (version choice, prebuilt binaries,
`cluster build --harvester`, `make cluster-bin` building every version), the committed wrapper
module, and the RBAC they need."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from harvester_quota.testbench.cli import main
from harvester_quota.testbench.localcluster import ClusterError, binaries, harvester
from harvester_quota.testbench.localcluster import cluster as cluster_module
from harvester_quota.testbench.localcluster.cluster import ClusterInfo, Ports

RANCHER_PSEUDO_VERSION = "github.com/rancher/rancher v0.0.0-20250828140533-07a90f09a491"
MAKEFILE = Path(__file__).resolve().parents[2] / "Makefile"


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(binaries.ENV_BIN_DIR, raising=False)
    monkeypatch.setenv(binaries.ENV_CACHE_DIR, str(tmp_path / "cache"))


def test_versions_are_the_wrapper_modules_and_are_normalised() -> None:
    assert binaries.supported_harvester_versions() == ["v1.8.2"]
    assert binaries.harvester_version() == "v1.8.2"
    assert binaries.harvester_version("1.8.2") == "v1.8.2"
    with pytest.raises(
        ClusterError, match=r"'v1\.9\.0' cannot be built here; supported versions: v1\.8\.2"
    ):
        binaries.harvester_version("v1.9.0")


def test_the_wrapper_module_carries_harvesters_replace_block_and_go_sum() -> None:
    module = binaries.GOMOD_DIR / binaries.harvester_module_name("v1.8.2")
    go_mod = (module / "go.mod").read_text()
    go_sum = (module / "go.sum").read_text()
    assert "require github.com/harvester/harvester v1.8.2" in go_mod
    assert f"github.com/rancher/rancher => {RANCHER_PSEUDO_VERSION}" in go_mod
    assert "=> ./" not in go_mod, "a replace into a local folder cannot build from the proxy"
    # The pseudo-version is not in the checksum database: Harvester's go.sum vouches for it.
    assert f"{RANCHER_PSEUDO_VERSION} h1:" in go_sum
    assert "github.com/harvester/harvester v1.8.2 h1:" in go_sum
    assert binaries.harvester_component("v1.8.2").outputs == (binaries.HARVESTER_CONTROLLERS,)


@pytest.mark.parametrize("version", binaries.supported_harvester_versions())
def test_each_harvester_runs_the_kubevirt_its_go_mod_requires(version: str) -> None:
    module = binaries.GOMOD_DIR / binaries.harvester_module_name(version)
    required = re.search(
        r"^\s*kubevirt\.io/kubevirt (v\S+)$", (module / "go.mod").read_text(), re.M
    )
    assert required is not None, "the wrapper module pins kubevirt.io/kubevirt"
    assert binaries.harvester_kubevirt_version(version) == required.group(1)
    assert required.group(1) in binaries.supported_kubevirt_versions(), "its virt-controller builds"


def test_a_harvester_without_a_kubevirt_entry_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(binaries, "HARVESTER_KUBEVIRT", {})
    with pytest.raises(ClusterError, match=r"Harvester v1\.8\.2 has no entry"):
        binaries.harvester_kubevirt_version("1.8.2")


class _Chosen(Exception):
    """Stops `up` at the virt-controller build, carrying the version it was asked for."""


def _stop_at_the_build(monkeypatch: pytest.MonkeyPatch) -> None:
    def build_kubevirt(version: str) -> binaries.KubeVirtBuild:
        raise _Chosen(version)

    monkeypatch.setattr(cluster_module, "build_kubevirt", build_kubevirt)


def test_a_harvester_cluster_runs_harvesters_kubevirt_unless_told_otherwise(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _stop_at_the_build(monkeypatch)
    monkeypatch.setenv(binaries.ENV_KUBEVIRT_VERSION, "v1.8.4")
    local = cluster_module.LocalCluster(tmp_path / "state")
    with pytest.raises(_Chosen, match=r"^v1\.7\.0$"):
        local.up(virt_controller=True, harvester="v1.8.2")
    with pytest.raises(_Chosen, match=r"^v1\.6\.0$"):
        local.up(virt_controller=True, kubevirt="v1.6.0", harvester="v1.8.2")
    with pytest.raises(_Chosen, match=r"^v1\.8\.4$"):
        local.up(virt_controller=True)


def test_an_unbuilt_binary_names_the_command_that_builds_it() -> None:
    with pytest.raises(ClusterError, match=r"cluster build --harvester v1\.8\.2"):
        binaries.resolve_harvester("v1.8.2")


def test_a_prebuilt_binary_is_used(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    prebuilt = tmp_path / "bin" / "harvester-v1.8.2" / binaries.HARVESTER_CONTROLLERS
    prebuilt.parent.mkdir(parents=True)
    prebuilt.write_text("#!/bin/sh\n")
    prebuilt.chmod(0o755)
    monkeypatch.setenv(binaries.ENV_BIN_DIR, str(tmp_path / "bin"))
    assert binaries.resolve_harvester("v1.8.2") == prebuilt
    assert binaries.build_harvester("v1.8.2", progress=lambda _: None) == prebuilt


def test_cluster_build_builds_harvester_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    built: list[str] = []
    monkeypatch.setattr(binaries, "build", lambda force=False: tmp_path)
    monkeypatch.setattr(binaries, "build_helm", lambda force=False: tmp_path / "helm")

    def build_harvester(version: str, force: bool = False) -> Path:
        built.append(version)
        return tmp_path / version / binaries.HARVESTER_CONTROLLERS

    monkeypatch.setattr(binaries, "build_harvester", build_harvester)
    assert main(["cluster", "build", "--no-virt-controller"]) == 0
    assert built == []
    assert main(["cluster", "build", "--no-virt-controller", "--harvester", "1.8.2"]) == 0
    assert built == ["v1.8.2"]
    assert main(["cluster", "build", "--no-virt-controller", "--harvester", "all"]) == 0
    assert built[1:] == binaries.supported_harvester_versions()
    assert "Harvester v1.8.2 migration and resourcequota controllers" in capsys.readouterr().out


def _cluster_bin_arguments() -> list[str]:
    """The bench arguments of the Makefile's `cluster-bin` recipe (after `$(BENCH)`)."""
    recipe = re.search(r"^cluster-bin:.*\n\t\$\(BENCH\) (.*)$", MAKEFILE.read_text(), re.M)
    assert recipe is not None, "the Makefile has no `cluster-bin` recipe running $(BENCH)"
    return shlex.split(recipe.group(1))


def test_make_cluster_bin_builds_every_virt_controller_and_harvester_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make test` and `make demo` depend on `make cluster-bin`: it must leave every supported
    KubeVirt and Harvester version built, so no test skips for want of a binary."""
    built: list[str] = []
    monkeypatch.setattr(binaries, "build", lambda force=False: tmp_path)
    monkeypatch.setattr(binaries, "build_helm", lambda force=False: tmp_path / "helm")

    def build_kubevirt(version: str, force: bool = False) -> binaries.KubeVirtBuild:
        built.append(f"kubevirt {version}")
        return binaries.KubeVirtBuild(version, tmp_path / version)

    def build_harvester(version: str, force: bool = False) -> Path:
        built.append(f"harvester {version}")
        return tmp_path / version / binaries.HARVESTER_CONTROLLERS

    monkeypatch.setattr(binaries, "build_kubevirt", build_kubevirt)
    monkeypatch.setattr(binaries, "build_harvester", build_harvester)
    assert main(_cluster_bin_arguments()) == 0
    assert built == [f"kubevirt {v}" for v in binaries.supported_kubevirt_versions()] + [
        f"harvester {v}" for v in binaries.supported_harvester_versions()
    ]


@pytest.mark.parametrize("version", binaries.supported_harvester_versions())
def test_the_kubevirt_each_harvester_version_ships_has_a_virt_controller(version: str) -> None:
    """Harvester's go.mod names the KubeVirt it ships (v1.8.2: v1.7.0); the local cluster can run
    that virt-controller beside Harvester's controllers."""
    module = binaries.GOMOD_DIR / binaries.harvester_module_name(version)
    shipped = re.search(r"^\s*kubevirt\.io/kubevirt (v\S+)$", (module / "go.mod").read_text(), re.M)
    assert shipped is not None
    assert shipped.group(1) in binaries.supported_kubevirt_versions()


def test_kubevirts_controller_account_may_update_vmis() -> None:
    role, binding = harvester.kubevirt_controller_vmi_role()
    assert role["rules"] == [
        {
            "apiGroups": ["kubevirt.io"],
            "resources": ["virtualmachineinstances"],
            "verbs": ["get", "update"],
        }
    ]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "kubevirt-controller", "namespace": "harvester-system"}
    ]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


def test_harvesters_account_is_cluster_admin_as_its_chart_binds_it() -> None:
    binding = harvester.harvester_account_binding()
    assert binding["metadata"]["name"] == "harvester"
    assert binding["roleRef"]["name"] == "cluster-admin"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "harvester", "namespace": "harvester-system"}
    ]
    assert harvester.HARVESTER_USER == "system:serviceaccount:harvester-system:harvester"


def test_the_state_remembers_harvesters_version() -> None:
    info = ClusterInfo(
        state_dir=Path("/s"),
        kubeconfig=Path("/s/k"),
        server="https://127.0.0.1:1",
        ca_file=Path("/s/ca"),
        client_cert=Path("/s/c"),
        client_key=Path("/s/k"),
        ports=Ports(1, 2, 3, 4, 5),
        harvester_version="v1.8.2",
    )
    assert ClusterInfo.from_json(info.to_json()).harvester_version == "v1.8.2"
    info.harvester_version = None
    assert ClusterInfo.from_json(info.to_json()).harvester_version is None


def test_the_namespace_validator_is_registered_as_harvester_registers_it() -> None:
    config = harvester.validating_webhook_configuration(4443, b"CA")
    assert config["metadata"]["name"] == "harvester-validator"
    (hook,) = config["webhooks"]
    assert hook["name"] == "validator.harvesterhci.io"
    assert hook["failurePolicy"] == "Fail"
    assert hook["clientConfig"]["url"] == "https://127.0.0.1:4443/v1/webhook/validation"
    assert hook["rules"] == [
        {
            "operations": ["UPDATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["namespaces"],
            "scope": "Cluster",
        }
    ]
