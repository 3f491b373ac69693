"""The real node's and the image's configuration, without running either (tests/realnode runs
them, as root)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from harvester_quota.testbench import cli
from harvester_quota.testbench.localcluster import binaries, cluster, image, realnode
from harvester_quota.testbench.localcluster.cluster import ClusterInfo, LocalCluster, Ports


def info(tmp_path: Path, node_ip: str | None = "192.0.2.2") -> ClusterInfo:
    return ClusterInfo(
        state_dir=tmp_path,
        kubeconfig=tmp_path / "kubeconfig",
        server="https://127.0.0.1:6443",
        ca_file=tmp_path / "ca.crt",
        client_cert=tmp_path / "admin.crt",
        client_key=tmp_path / "admin.key",
        ports=Ports(1, 2, 3, 4, 5),
        node_ip=node_ip,
    )


def test_beside_a_real_node_the_api_server_listens_everywhere_and_advertises_the_node(
    tmp_path: Path,
) -> None:
    local = LocalCluster(tmp_path)
    alone = local._apiserver_args(Ports(1, 2, 3, 4, 5))
    assert "--bind-address=127.0.0.1" in alone
    assert "--endpoint-reconciler-type=none" in alone
    beside = local._apiserver_args(Ports(1, 2, 3, 4, 5), "192.0.2.2")
    assert "--bind-address=0.0.0.0" in beside
    assert "--advertise-address=192.0.2.2" in beside
    assert "--endpoint-reconciler-type=lease" in beside


def test_kwok_leaves_nodes_without_its_annotation_to_their_kubelet(tmp_path: Path) -> None:
    local = LocalCluster(tmp_path)
    assert "--manage-all-nodes=true" in local._kwok_args(40)
    (selector,) = [a for a in local._kwok_args(40, fake_only=True) if a.startswith("--manage")]
    key, value = selector.split("=", 1)[1].split("=")
    assert cluster._fake_node("kwok-node-0", 110)["metadata"]["annotations"][key] == value


def test_the_node_address_is_recorded_with_the_cluster(tmp_path: Path) -> None:
    assert ClusterInfo.from_json(info(tmp_path).to_json()).node_ip == "192.0.2.2"
    assert ClusterInfo.from_json(info(tmp_path, None).to_json()).node_ip is None


def test_the_kubelet_runs_on_cgroup_v1_with_the_cgroupfs_driver(tmp_path: Path) -> None:
    node = realnode.RealNode(info(tmp_path), tmp_path / "node")
    config = node._kubelet_config()
    assert config["failCgroupV1"] is False
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["cgroupRoot"] == realnode.CGROUP_ROOT
    assert config["containerRuntimeEndpoint"] == f"unix://{node.socket}"
    assert str(config["podLogsDir"]).startswith(str(node.state_dir))


def test_containerd_keeps_its_state_and_namespaces_under_the_node_s_folder(
    tmp_path: Path,
) -> None:
    node = realnode.RealNode(info(tmp_path), tmp_path / "node")
    parsed = tomllib.loads(node._containerd_config(Path("/usr/lib/cni"), tmp_path / "net.d"))
    cri = parsed["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True
    assert cri["netns_mounts_under_state_dir"] is True
    assert cri["sandbox_image"] == image.SANDBOX_IMAGE
    runc = cri["containerd"]["runtimes"]["runc"]["options"]
    assert runc["SystemdCgroup"] is False
    for path in (parsed["root"], parsed["state"], parsed["grpc"]["address"], runc["Root"]):
        assert path.startswith(str(node.state_dir)), path


def test_without_root_no_real_node_runs_and_the_reason_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(realnode.os, "geteuid", lambda: 1000)
    reason = realnode.missing_requirements()
    assert reason is not None and "root" in reason


def test_node_bin_builds_nothing_as_root_without_apt_get_and_says_what_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(realnode.os, "geteuid", lambda: 0)
    monkeypatch.setattr(realnode.shutil, "which", lambda _command: None)
    reason = realnode.cannot_build()
    assert reason is not None and "containerd" in reason and "apt-get install" in reason


def test_node_bin_without_root_builds_nothing_and_says_why(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(realnode.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(binaries, "build_node", lambda *a, **k: pytest.fail("built"))
    assert cli.main(["cluster", "build-node"]) == 0
    assert "no real node here: a real node runs containers" in capsys.readouterr().err


def test_node_bin_builds_as_root_with_apt_get_though_packages_are_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(realnode.os, "geteuid", lambda: 0)
    monkeypatch.setattr(
        realnode.shutil, "which", lambda c: "/usr/bin/apt-get" if c == "apt-get" else None
    )
    assert realnode.missing_requirements() is not None
    assert realnode.cannot_build() is None


def test_the_image_is_rebuilt_for_the_product_s_files_only() -> None:
    inputs = image.build_inputs()
    assert "deploy/Containerfile" in inputs
    assert "pkg/main.py" in inputs
    assert not [name for name in inputs if name.startswith("pkg/testbench/")]
    assert not [name for name in inputs if "__pycache__" in name]


def test_the_image_carries_the_chart_s_default_name() -> None:
    assert image.product_image() == f"docker.io/library/harvester-quota:{image.app_version()}"


def test_kubelet_and_kube_proxy_come_from_the_control_plane_s_module() -> None:
    node = binaries.node_component()
    control_plane = next(c for c in binaries.COMPONENTS if c.module_dir == "kube")
    assert node.module_dir == control_plane.module_dir
    assert node.ldflags == control_plane.ldflags
    assert node.tags == control_plane.tags
    assert binaries.node_cache_key().startswith(f"k8s-node-{binaries.K8S_VERSION}_")


def test_the_scenario_timeline_ends_with_the_final_look() -> None:
    """The sampler stops between looks; the final look (the quota back at its base) is the
    picture's last point, not a sample taken while a room was still held."""
    from types import SimpleNamespace

    from harvester_quota.testbench.scenario.runner import RunResult, Sample, ScenarioRun

    result = RunResult.__new__(RunResult)
    result.samples = [Sample(1.0, "a", {"limits.cpu": "6"}, {}, {"limits.cpu": "4"})]
    result.final_at = 2.5
    run = SimpleNamespace(
        result=result,
        bases={"real-a": {}},
        scenario=SimpleNamespace(rancher=None),
        _last_namespace={},
    )
    quota = {"spec": {"hard": {"limits.cpu": "4"}}, "status": {"used": {"limits.cpu": "2"}}}
    ScenarioRun._sample_final(run, "a", "real-a", quota)  # type: ignore[arg-type]
    last = result.samples[-1]
    assert (last.at, last.hard, last.used) == (2.5, {"limits.cpu": "4"}, {"limits.cpu": "2"})
    assert last.base == {"limits.cpu": "4"}, "the base as sampled before: the panels stay"
