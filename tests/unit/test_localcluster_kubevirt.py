"""KubeVirt's virt-controller in the local cluster: version choice, cache key, prebuilt binaries,
the CRDs installed, the nodes, the recorded state; and the committed wrapper modules themselves."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from harvester_quota.testbench.cli import main
from harvester_quota.testbench.localcluster import ClusterError, LocalCluster, binaries
from harvester_quota.testbench.localcluster import cluster as cluster_module
from harvester_quota.testbench.localcluster.cluster import (
    CRDS_FILE,
    KUBEVIRT_DEVICES,
    MTQ_CRDS_FILE,
    USER_ROLES_FILE,
    ClusterInfo,
    Ports,
    _fake_node,
    _kubevirt_node,
    crd_documents,
    crd_replacement,
    launcher_image,
)


@pytest.fixture(autouse=True)
def _no_version_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(binaries.ENV_KUBEVIRT_VERSION, raising=False)
    monkeypatch.delenv(binaries.ENV_BIN_DIR, raising=False)


def test_supported_versions_are_the_wrapper_modules_newest_first() -> None:
    versions = binaries.supported_kubevirt_versions()
    assert versions == ["v1.9.0", "v1.8.4", "v1.7.0", "v1.6.0"]
    assert binaries.DEFAULT_KUBEVIRT_VERSION == "v1.8.4"


def test_version_defaults_then_environment_then_explicit(monkeypatch: pytest.MonkeyPatch) -> None:
    assert binaries.kubevirt_version() == "v1.8.4"
    monkeypatch.setenv(binaries.ENV_KUBEVIRT_VERSION, "1.6.0")
    assert binaries.kubevirt_version() == "v1.6.0"
    assert binaries.kubevirt_version("v1.8.4") == "v1.8.4"


@pytest.mark.parametrize("asked", ["v1.9.1", "1.7.1", "latest", "v1.8"])
def test_unsupported_version_lists_the_supported_ones(asked: str) -> None:
    with pytest.raises(ClusterError) as error:
        binaries.kubevirt_version(asked)
    assert repr(asked) in str(error.value)
    assert "v1.9.0, v1.8.4, v1.7.0, v1.6.0" in str(error.value)


def test_unsupported_version_from_the_environment_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(binaries.ENV_KUBEVIRT_VERSION, "v1.5.0")
    with pytest.raises(ClusterError, match=binaries.ENV_KUBEVIRT_VERSION):
        binaries.kubevirt_version()


def test_cache_key_names_the_version_and_follows_the_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert binaries.kubevirt_cache_key("v1.8.4").startswith("kubevirt-v1.8.4_")
    assert binaries.kubevirt_cache_key("v1.8.4") != binaries.kubevirt_cache_key("v1.6.0")
    assert binaries.kubevirt_cache_key("v1.8.4") == binaries.kubevirt_cache_key("v1.8.4")
    copy = tmp_path / "gomod"
    shutil.copytree(binaries.GOMOD_DIR, copy)
    monkeypatch.setattr(binaries, "GOMOD_DIR", copy)
    before = binaries.kubevirt_cache_key("v1.8.4")
    own = copy / binaries.kubevirt_module_name("v1.8.4") / "crdgen" / "version.go"
    own.write_text(own.read_text() + "\n// edited\n")
    after_own_edit = binaries.kubevirt_cache_key("v1.8.4")
    assert after_own_edit != before
    shared = copy / "crdgen" / "generators.go"
    shared.write_text(shared.read_text() + "\n// edited\n")
    assert binaries.kubevirt_cache_key("v1.8.4") != after_own_edit


def _fake_build(directory: Path) -> None:
    directory.mkdir(parents=True)
    (directory / binaries.VIRT_CONTROLLER).write_text("#!/bin/sh\n")
    (directory / binaries.VIRT_CONTROLLER).chmod(0o755)
    (directory / binaries.KUBEVIRT_CRDS).write_text("kind: CustomResourceDefinition\n")


def test_prebuilt_virt_controller_is_used_without_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_build(tmp_path / "bin" / "kubevirt-v1.6.0")
    monkeypatch.setenv(binaries.ENV_BIN_DIR, str(tmp_path / "bin"))
    monkeypatch.setenv(binaries.ENV_CACHE_DIR, str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    found = binaries.build_kubevirt("v1.6.0", progress=lambda _: None)
    assert found.directory == tmp_path / "bin" / "kubevirt-v1.6.0"
    assert found.virt_controller.name == "virt-controller"


def test_cached_virt_controller_is_found_by_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(binaries.ENV_CACHE_DIR, str(tmp_path))
    _fake_build(tmp_path / "cluster-bin" / binaries.kubevirt_cache_key("v1.8.4"))
    assert binaries.resolve_kubevirt("v1.8.4").crds.is_file()


def test_unbuilt_virt_controller_says_how_to_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(binaries.ENV_CACHE_DIR, str(tmp_path))
    directory = tmp_path / "cluster-bin" / binaries.kubevirt_cache_key("v1.6.0")
    directory.mkdir(parents=True)
    (directory / binaries.VIRT_CONTROLLER).write_text("not executable")
    with pytest.raises(ClusterError) as error:
        binaries.resolve_kubevirt("v1.6.0")
    message = str(error.value)
    assert "virt-controller, kubevirt-crds.yaml missing" in message
    assert "cluster build --kubevirt-version v1.6.0" in message


def test_kubevirt_component_builds_virt_controller_and_crdgen_stamped() -> None:
    component = binaries.kubevirt_component("v1.6.0")
    assert component.module_dir == "kubevirt-v1-6-0"
    assert "kubevirt.io/kubevirt/cmd/virt-controller" in component.packages
    assert "-X kubevirt.io/client-go/version.gitVersion=v1.6.0" in component.ldflags


@pytest.mark.parametrize("version", binaries.supported_kubevirt_versions())
def test_wrapper_module_replaces_staging_with_the_published_modules(version: str) -> None:
    module = binaries.GOMOD_DIR / binaries.kubevirt_module_name(version)
    go_mod = (module / "go.mod").read_text()
    assert re.search(rf"^\s*kubevirt\.io/kubevirt {re.escape(version)}\b", go_mod, re.M)
    for published in ("kubevirt.io/api", "kubevirt.io/client-go"):
        assert f"{published} => {published} {version}\n" in go_mod
    for local in re.findall(r"=> \./(\S+)", go_mod):
        # A local replace builds only if the folder ships inside the wrapper module (v1.9.0's
        # stand-ins for modules the proxy does not serve); a replace into KubeVirt's staging
        # tree would not.
        assert (module / local / "go.mod").is_file(), local
        assert not local.startswith("staging"), local
    assert "tool kubevirt.io/kubevirt/cmd/virt-controller" in go_mod
    assert (module / "go.sum").stat().st_size > 0


@pytest.mark.parametrize("version", binaries.supported_kubevirt_versions())
def test_crdgen_is_built_from_the_shared_source_plus_the_versions_own_list(version: str) -> None:
    sources = binaries.kubevirt_component(version).sources()
    module = binaries.GOMOD_DIR / binaries.kubevirt_module_name(version)
    assert sources["crdgen/main.go"] == binaries.GOMOD_DIR / "crdgen" / "main.go"
    assert sources["crdgen/generators.go"] == binaries.GOMOD_DIR / "crdgen" / "generators.go"
    assert sources["crdgen/version.go"] == module / "crdgen" / "version.go"
    assert "var versionGenerators" in sources["crdgen/version.go"].read_text()


def test_build_compiles_the_module_with_the_shared_crdgen_copied_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiled: list[str] = []

    def fake_run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        if argv[1:2] == ["build"]:
            tree = Path(kwargs["cwd"])
            compiled.extend(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file())
            outdir = Path(argv[argv.index("-o") + 1])
            for name in (binaries.VIRT_CONTROLLER, "crdgen"):
                (outdir / name).write_text("")
        else:
            kwargs["stdout"].write(b"kind: CustomResourceDefinition\n")
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.delenv(binaries.ENV_BIN_DIR, raising=False)
    monkeypatch.setenv(binaries.ENV_CACHE_DIR, str(tmp_path))
    monkeypatch.setattr(binaries, "find_go", lambda: "go")
    monkeypatch.setattr(binaries.subprocess, "run", fake_run)
    built = binaries.build_kubevirt("v1.6.0", progress=lambda _: None)
    assert sorted(compiled) == list(binaries.kubevirt_component("v1.6.0").sources())
    assert built.crds.read_text() == "kind: CustomResourceDefinition\n"


def _crd(name: str, group: str) -> dict[str, object]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {"group": group},
    }


def test_generated_crds_replace_every_hand_written_kubevirt_one(tmp_path: Path) -> None:
    generated = tmp_path / "kubevirt-crds.yaml"
    generated.write_text(
        yaml.safe_dump_all(
            [
                _crd("virtualmachineinstances.kubevirt.io", "kubevirt.io"),
                _crd("migrationpolicies.migrations.kubevirt.io", "migrations.kubevirt.io"),
            ]
        )
    )
    names = [doc["metadata"]["name"] for doc in crd_documents(generated)]
    assert names == [
        "virtualmachineinstances.kubevirt.io",
        "migrationpolicies.migrations.kubevirt.io",
        "settings.harvesterhci.io",
        "virtualmachinemigrationresourcequotas.mtq.kubevirt.io",
    ]
    hand_written = [doc["metadata"]["name"] for doc in yaml.safe_load_all(CRDS_FILE.read_text())]
    hand_written.append("virtualmachinemigrationresourcequotas.mtq.kubevirt.io")
    assert [doc["metadata"]["name"] for doc in crd_documents(None)] == hand_written


def test_empty_generated_crds_are_refused(tmp_path: Path) -> None:
    generated = tmp_path / "kubevirt-crds.yaml"
    generated.write_text("---\n")
    with pytest.raises(ClusterError, match="holds no CRD"):
        crd_documents(generated)


def test_kubevirt_node_is_schedulable_with_devices_and_keeps_its_capacity() -> None:
    node = _kubevirt_node(_fake_node("kwok-node-0", 110))
    labels = node["metadata"]["labels"]
    assert labels["kubevirt.io/schedulable"] == "true"
    assert labels["machine-type.node.kubevirt.io/q35"] == "true"
    assert labels["kubernetes.io/hostname"] == "kwok-node-0"
    for key in ("capacity", "allocatable"):
        assert node["status"][key]["pods"] == "110"
        for device in KUBEVIRT_DEVICES:
            assert node["status"][key][device] == "1000"
    plain = _fake_node("kwok-node-0", 110)
    assert "kubevirt.io/schedulable" not in plain["metadata"]["labels"]
    assert not set(KUBEVIRT_DEVICES) & set(plain["status"]["capacity"])


def test_ports_for_virt_controller_only_when_it_runs() -> None:
    plain = Ports.pick()
    assert plain.virt_controller is None
    assert len(plain.all()) == 5
    with_vc = Ports.pick()
    with_vc.pick_virt_controller()
    assert with_vc.virt_controller is not None
    assert len(set(with_vc.all())) == 6


def test_state_of_an_older_run_reads_as_without_virt_controller(tmp_path: Path) -> None:
    info = ClusterInfo(
        state_dir=tmp_path,
        kubeconfig=tmp_path / "kubeconfig",
        server="https://127.0.0.1:1",
        ca_file=tmp_path / "ca.crt",
        client_cert=tmp_path / "admin.crt",
        client_key=tmp_path / "admin.key",
        ports=Ports(1, 2, 3, 4, 5),
    )
    older = info.to_json()
    del older["kubevirt_version"]
    del older["ports"]["virt_controller"]
    restored = ClusterInfo.from_json(older)
    assert restored.kubevirt_version is None
    assert restored.ports.all() == [1, 2, 3, 4, 5]
    info.kubevirt_version = "v1.6.0"
    assert ClusterInfo.from_json(info.to_json()).kubevirt_version == "v1.6.0"


def test_a_kubevirt_version_without_virt_controller_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ValueError, match="only used with virt_controller"):
        LocalCluster(tmp_path / "state").up(kubevirt="v1.6.0")
    assert not (tmp_path / "state").exists()
    argv = ["up", "--no-virt-controller", "--kubevirt-version", "1.6.0"]
    assert main(["cluster", "--state-dir", str(tmp_path), *argv]) == 2
    assert "drop --no-virt-controller" in capsys.readouterr().err
    assert not (tmp_path / "state.json").exists()


def test_an_unsupported_version_is_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="supported versions"):
        LocalCluster(tmp_path / "state").up(virt_controller=True, kubevirt="v1.9.1")
    assert not (tmp_path / "state").exists()


def test_cluster_build_builds_virt_controller_unless_told_not_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    built: list[str] = []
    monkeypatch.setattr(binaries, "build", lambda force=False: tmp_path)

    def build_kubevirt(version: str, force: bool = False) -> binaries.KubeVirtBuild:
        built.append(version)
        return binaries.KubeVirtBuild(version, tmp_path / version)

    monkeypatch.setattr(binaries, "build_kubevirt", build_kubevirt)
    assert main(["cluster", "build"]) == 0
    assert main(["cluster", "build", "--kubevirt-version", "1.6.0"]) == 0
    assert main(["cluster", "build", "--no-virt-controller"]) == 0
    assert built == ["v1.8.4", "v1.6.0"]
    assert main(["cluster", "build", "--kubevirt-version", "all"]) == 0
    assert built[2:] == binaries.supported_kubevirt_versions()
    assert built[2:] == ["v1.9.0", "v1.8.4", "v1.7.0", "v1.6.0"]
    assert "KubeVirt v1.6.0 virt-controller and CRDs" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("minor", "version"),
    [
        ("1.6", "v1.6.0"),
        ("1.7", "v1.7.0"),
        ("v1.8", "v1.8.4"),
        ("1.9", "v1.9.0"),
        ("0.54", None),
        ("1.3", None),
        ("1.1", None),
    ],
)
def test_a_scenarios_release_maps_to_the_built_virt_controller_of_that_release(
    minor: str, version: str | None
) -> None:
    """1.1 must not match 1.10+ nor 1.6 match 1.60: a release matches on whole components."""
    assert binaries.kubevirt_version_for_minor(minor) == version


def test_the_local_cluster_installs_the_chart_s_vmmrq_crd_unchanged() -> None:
    """One definition of MTQ's CRD: the chart's crds/ file, copied for `cluster up`."""
    chart = CRDS_FILE.parents[4] / "deploy/chart/harvester-quota/crds"
    assert (chart / "virtualmachinemigrationresourcequotas.yaml").read_text() == (
        MTQ_CRDS_FILE.read_text()
    )
    crd = yaml.safe_load(MTQ_CRDS_FILE.read_text())
    assert crd["spec"]["names"]["shortNames"] == ["vmmrq", "vmmrqs"]
    assert crd["spec"]["scope"] == "Namespaced"
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v1alpha1"]
    assert crd["spec"]["versions"][0]["subresources"] == {"status": {}}


def _rules_for(role: dict[str, object], group: str, resource: str) -> set[str]:
    rules = role["rules"]
    assert isinstance(rules, list)
    return {
        verb
        for rule in rules
        if group in rule["apiGroups"] and resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_kubevirts_user_roles_are_v1_8_4_s_edit_and_migrate() -> None:
    """`cluster up` installs what virt-operator gives KubeVirt's users: kubevirt.io:edit
    aggregates into `edit` and runs VMs and VMIs, but since KubeVirt v1.5 only reads migrations;
    creating them is kubevirt.io:migrate's, which aggregates into nothing."""
    roles = {d["metadata"]["name"]: d for d in yaml.safe_load_all(USER_ROLES_FILE.read_text()) if d}
    assert set(roles) == {"kubevirt.io:edit", "kubevirt.io:migrate"}
    edit, migrate = roles["kubevirt.io:edit"], roles["kubevirt.io:migrate"]
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert "rbac.authorization.k8s.io/aggregate-to-edit" not in migrate["metadata"]["labels"]
    writes = {"create", "update", "patch", "delete"}
    for resource in ("virtualmachines", "virtualmachineinstances"):
        assert writes <= _rules_for(edit, "kubevirt.io", resource), resource
    migrations = "virtualmachineinstancemigrations"
    assert _rules_for(edit, "kubevirt.io", migrations) == {"get", "list", "watch"}
    assert writes <= _rules_for(migrate, "kubevirt.io", migrations)
    assert _rules_for(migrate, "subresources.kubevirt.io", "virtualmachines/migrate") == {"update"}
    assert _rules_for(edit, "kubevirt.io", "kubevirts") == {"get", "list"}


def _versioned_crd(
    versions: list[tuple[str, bool]], stored: list[str] | None = None
) -> dict[str, Any]:
    """A CRD serving `versions` (name, storage), with status.storedVersions if given."""
    crd: dict[str, Any] = {
        "metadata": {"name": "things.example.io", "resourceVersion": "41"},
        "spec": {
            "versions": [
                {"name": name, "served": True, "storage": storage, "schema": {"v": name}}
                for name, storage in versions
            ]
        },
    }
    if stored is not None:
        crd["status"] = {"storedVersions": stored}
    return crd


def test_a_replaced_crd_keeps_a_version_objects_are_stored_in_as_served_not_storage() -> None:
    """Back to an older KubeVirt: its CRD lacks v1, which the newer one stored objects in; the
    API server refuses a CRD without it, so v1 stays, served, no longer the storage version."""
    stored = _versioned_crd([("v1", True), ("v1beta1", False)], stored=["v1beta1", "v1"])
    older = _versioned_crd([("v1beta1", True), ("v1alpha1", False)])
    del older["metadata"]["resourceVersion"]
    replacement = crd_replacement(stored, older)
    versions = {v["name"]: (v["served"], v["storage"]) for v in replacement["spec"]["versions"]}
    assert versions == {"v1beta1": (True, True), "v1alpha1": (True, False), "v1": (True, False)}
    kept = next(v for v in replacement["spec"]["versions"] if v["name"] == "v1")
    assert kept["schema"] == {"v": "v1"}
    assert replacement["metadata"]["resourceVersion"] == "41"
    assert "resourceVersion" not in older["metadata"]
    assert [v["name"] for v in older["spec"]["versions"]] == ["v1beta1", "v1alpha1"]


def test_a_replaced_crd_drops_a_version_no_object_was_stored_in() -> None:
    stored = _versioned_crd([("v1", True), ("v1alpha1", False)], stored=["v1"])
    newer = _versioned_crd([("v1", True)])
    names = [v["name"] for v in crd_replacement(stored, newer)["spec"]["versions"]]
    assert names == ["v1"]


def test_switching_a_cluster_without_virt_controller_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        cluster_module, "build_kubevirt", lambda version: binaries.KubeVirtBuild(version, tmp_path)
    )
    with pytest.raises(ClusterError, match="no virt-controller runs"):
        LocalCluster(tmp_path / "state").switch_virt_controller("v1.9.0")


def test_each_kubevirt_version_renders_with_its_own_launcher_image(tmp_path: Path) -> None:
    """After a switch the new virt-controller finds every VMI started before it outdated (its
    workload updater compares the VMI's launcher image with its own), as after an upgrade."""
    local = LocalCluster(tmp_path)
    images = {
        version: next(a for a in local._virt_controller_args(1, version) if "launcher-image" in a)
        for version in ("v1.8.4", "v1.9.0")
    }
    assert images["v1.8.4"] != images["v1.9.0"]
    assert images["v1.9.0"].endswith(launcher_image("v1.9.0"))
