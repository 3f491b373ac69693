"""The pace a scenario asks for reaches both KubeVirts the same way: the seed's or the fast
defaults, with the scenario's source_pod_grace where each side keeps a source pod alive."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest
from harvester_quota.generic.client import ApiClient
from harvester_quota.testbench.scenario.runner import ScenarioRun
from harvester_quota.testbench.scenario.schema import load
from harvester_quota.testbench.sim.kubevirt.handler import HandlerTimings
from harvester_quota.testbench.sim.kubevirt.phases import MigrationTimings

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "rancher-protected-quota.yaml"


def _run(tmp_path: Path, *, pace: str, grace: int | None) -> ScenarioRun:
    scenario = load(SCENARIO)
    scenario.timings = pace
    scenario.source_pod_grace = grace
    return ScenarioRun(scenario, cast(ApiClient, None), None, workdir=tmp_path)


@pytest.mark.parametrize("pace", ["fast", "seed"])
def test_without_a_grace_each_side_keeps_its_own_pace(tmp_path: Path, pace: str) -> None:
    run = _run(tmp_path, pace=pace, grace=None)
    seed = pace == "seed"

    assert run._sim_timings() == (MigrationTimings.like_v121_seed() if seed else MigrationTimings())
    assert run._handler_timings() == (HandlerTimings.like_v121_seed() if seed else HandlerTimings())


def test_the_scenario_grace_replaces_only_the_source_pods_time_on_each_side(
    tmp_path: Path,
) -> None:
    run = _run(tmp_path, pace="seed", grace=8)

    sim, handler = run._sim_timings(), run._handler_timings()

    assert sim == MigrationTimings(
        **{**vars(MigrationTimings.like_v121_seed()), "source_pod_grace_seconds": 8}
    )
    assert handler == HandlerTimings(
        **{**vars(HandlerTimings.like_v121_seed()), "source_shutdown": 8.0}
    )
    assert type(sim.source_pod_grace_seconds) is int
    assert type(handler.source_shutdown) is float
