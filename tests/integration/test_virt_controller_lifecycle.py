"""`cluster up` from the command line, which runs virt-controller by default: switching a running
cluster to it and back, status and env, and a `down` that leaves no virt-controller behind.

In a module of its own, so that it runs after test_virt_controller.py's clusters are stopped.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from harvester_quota.testbench.cli import main
from harvester_quota.testbench.localcluster import ClusterError, LocalCluster, binaries, process
from harvester_quota.testbench.localcluster.cluster import KUBEVIRT_NAMESPACE, VIRT_CONTROLLER_LEASE

from tests.integration.test_cluster_lifecycle import processes_in

pytestmark = pytest.mark.integration


def test_up_switches_virt_controller_on_and_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`status` before `up` says there is no cluster; `up` switches a running plain cluster to
    virt-controller (new processes) and `--no-virt-controller` back; `env` and `status` report
    the running cluster; `down` leaves no process and no port behind."""
    state = tmp_path / "state"
    local = LocalCluster(state)
    cli = ["cluster", "--state-dir", str(state)]
    assert main([*cli, "status"]) == 1
    assert "no local cluster" in capsys.readouterr().out
    try:
        plain = local.up(nodes=1)
        assert plain.kubevirt_version is None
        assert not plain.rest().exists(f"/api/v1/namespaces/{KUBEVIRT_NAMESPACE}")

        assert main([*cli, "up", "--nodes", "1"]) == 0
        assert f"KubeVirt {binaries.DEFAULT_KUBEVIRT_VERSION} virt-controller running" in (
            capsys.readouterr().out
        )
        with_vc = local.info()
        assert with_vc is not None
        assert with_vc.kubevirt_version == binaries.DEFAULT_KUBEVIRT_VERSION
        assert {r.pid for r in with_vc.processes}.isdisjoint({r.pid for r in plain.processes})
        assert with_vc.rest().get(VIRT_CONTROLLER_LEASE)["spec"]["holderIdentity"]
        assert main([*cli, "env"]) == 0
        assert capsys.readouterr().out.strip().endswith(f"export KUBECONFIG={state}/kubeconfig")
        assert main([*cli, "status"]) == 0
        status = capsys.readouterr().out
        for name in (
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kwok",
            "virt-controller",
        ):
            assert f"{name} " in status
        assert "ready: yes" in status

        assert main([*cli, "up", "--nodes", "1", "--no-virt-controller"]) == 0
        again = local.info()
        assert again is not None and again.kubevirt_version is None
        assert "virt-controller" not in {r.name for r in again.processes}
        assert not any(record.running() for record in with_vc.processes)
    finally:
        assert main([*cli, "down"]) == 0
    assert processes_in(local.state_dir) == []
    assert not any(process.port_in_use(port) for port in with_vc.ports.all())


def test_a_virt_controller_that_exits_is_named_and_nothing_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prebuilt directory whose virt-controller fails at once: `up` stops every component and
    its error shows virt-controller's own last words and log."""
    version = binaries.DEFAULT_KUBEVIRT_VERSION
    real_bin = binaries.resolve_bin_dir()
    real_crds = binaries.build_kubevirt(version).crds
    prebuilt = tmp_path / "bin"
    prebuilt.mkdir()
    for name in binaries.BINARIES:
        (prebuilt / name).symlink_to(real_bin / name)
    kubevirt = prebuilt / f"kubevirt-{version}"
    kubevirt.mkdir()
    broken = kubevirt / binaries.VIRT_CONTROLLER
    broken.write_text("#!/bin/sh\necho 'refusing to start: broken on purpose'\nexit 3\n")
    broken.chmod(0o755)
    (kubevirt / binaries.KUBEVIRT_CRDS).symlink_to(real_crds)
    monkeypatch.setenv(binaries.ENV_BIN_DIR, str(prebuilt))

    local = LocalCluster(tmp_path / "state")
    with pytest.raises(ClusterError) as error:
        local.up(nodes=1, virt_controller=True)
    message = str(error.value)
    assert "virt-controller" in message
    assert "broken on purpose" in message
    assert str(local.log_dir / "virt-controller.log") in message
    assert processes_in(local.state_dir) == []
    assert local.info() is None
