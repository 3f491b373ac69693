"""Which real virt-controller may play a scenario (scenario/versions.py): its own release, or one
it lists in `kubevirt.also_on` only where the launcher pods its quotas are tuned to render alike;
beside Harvester, the local cluster runs the KubeVirt that Harvester ships."""

from __future__ import annotations

from pathlib import Path

import pytest
from harvester_quota.testbench.cli import main
from harvester_quota.testbench.localcluster import ClusterInfo, binaries
from harvester_quota.testbench.localcluster.cluster import Ports
from harvester_quota.testbench.scenario.cli import kubevirt_for
from harvester_quota.testbench.scenario.runner import played_by, uses_real_kubevirt
from harvester_quota.testbench.scenario.schema import Scenario, load
from harvester_quota.testbench.scenario.versions import check_plays_on, launcher_differences

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
EVACUATION = SCENARIOS / "v121-evacuation-kubevirt-1.6.yaml"
SIMULATED_ONLY = SCENARIOS / "v121-evacuation.yaml"


def with_also_on(tmp_path: Path, release: str) -> Path:
    """The evacuation scenario claiming it plays unchanged on `release`."""
    text = EVACUATION.read_text().replace('also_on: ["1.7"]', f'also_on: ["{release}"]')
    assert f'also_on: ["{release}"]' in text
    path = tmp_path / "claim.yaml"
    path.write_text(text)
    return path


def cluster(kubevirt: str | None, harvester: str | None = None) -> ClusterInfo:
    return ClusterInfo(
        state_dir=Path("/s"),
        kubeconfig=Path("/s/k"),
        server="https://127.0.0.1:1",
        ca_file=Path("/s/ca"),
        client_cert=Path("/s/c"),
        client_key=Path("/s/k"),
        ports=Ports(1, 2, 3, 4, 5),
        kubevirt_version=kubevirt,
        harvester_version=harvester,
    )


def test_every_shipped_also_on_claim_holds() -> None:
    claims = [
        (path.name, r) for path in SCENARIOS.glob("*.yaml") for r in load(path).kubevirt_also_on
    ]
    assert ("v121-evacuation-kubevirt-1.6.yaml", "1.7") in claims
    for name, release in claims:
        assert launcher_differences(load(SCENARIOS / name), release) == [], (name, release)


def test_a_listed_release_plays_the_scenario_and_the_report_says_which() -> None:
    scenario = load(EVACUATION)
    check_plays_on(scenario, "v1.6.0")
    check_plays_on(scenario, "v1.7.0")
    beside_harvester = cluster("v1.7.0", "v1.8.2")
    assert uses_real_kubevirt(scenario, beside_harvester)
    assert played_by(scenario, beside_harvester) == {
        "scenario": "1.6",
        "virt_controller": "v1.7.0",
        "harvester": "v1.8.2",
    }
    assert played_by(scenario, cluster(None)) == {
        "scenario": "1.6",
        "virt_controller": None,
        "harvester": None,
    }


def test_a_release_the_scenario_does_not_list_is_refused() -> None:
    with pytest.raises(ValueError, match=r"needs KubeVirt 1\.6; the cluster runs .* v1\.8\.4"):
        check_plays_on(load(EVACUATION), "v1.8.4")


def test_a_false_also_on_claim_is_refused_naming_the_figures(tmp_path: Path) -> None:
    """KubeVirt v1.5 reserves 16Mi for video where v1.6 reserves 32Mi: a scenario claiming v1.5
    plays it unchanged would run with other launcher pods than its quotas were tuned to."""
    scenario = load(with_also_on(tmp_path, "1.5"))
    found = launcher_differences(scenario, "1.5")
    assert found and all("requests.memory" in line for line in found), found
    with pytest.raises(ValueError, match=r"lists KubeVirt v1\.5\.0 in kubevirt\.also_on, but"):
        check_plays_on(scenario, "v1.5.0")


def test_scenario_check_refuses_a_false_also_on_claim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = with_also_on(tmp_path, "1.5")
    assert main(["scenario", "check", str(path)]) == 1
    assert "kubevirt.also_on 1.5: vm1 launcher pod" in capsys.readouterr().err
    assert main(["scenario", "check", str(EVACUATION)]) == 0


def test_beside_harvester_the_cluster_runs_harvesters_kubevirt_or_the_simulator() -> None:
    shipped = binaries.harvester_kubevirt_version("v1.8.2")
    assert shipped == "v1.7.0"
    assert kubevirt_for(load(EVACUATION), "v1.8.2") == shipped
    assert kubevirt_for(load(EVACUATION), None) == "v1.6.0"
    assert kubevirt_for(load(SIMULATED_ONLY), "v1.8.2") is None
    only_own = Scenario(name="only-1.6", path=EVACUATION, kubevirt_version="1.6")
    assert kubevirt_for(only_own, "v1.8.2") is None, "never a virt-controller Harvester lacks"
