"""Scenario files: a typo, an unknown step or an impossible expectation is refused with the file,
the line and the reason, before anything runs; every shipped scenario is valid."""

from __future__ import annotations

from pathlib import Path

import pytest
from harvester_quota.testbench.scenario.schema import Scenario, ScenarioError, load

SCENARIOS = sorted((Path(__file__).resolve().parents[2] / "scenarios").glob("*.yaml"))

GOOD = """\
name: ok
rancher: {}
namespaces:
  - name: ns
    quota: {limitsCpu: "3", limitsMemory: 5000Mi}
vms:
  - {name: vm1, namespace: ns}
steps:
  - migrate: vm1
  - wait: migrations
expect:
  outcome: Succeeded
"""


def problems(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as error:
        load(path)
    return error.value.problems


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_shipped_scenario_is_valid(path: Path) -> None:
    scenario = load(path)
    assert scenario.vms and (scenario.expect or scenario.expect_harvester)


def test_a_good_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "good.yaml"
    path.write_text(GOOD)
    scenario = load(path)
    assert [step.kind for step in scenario.steps] == ["migrate", "wait"]
    assert scenario.steps[0].value == ["vm1"] and scenario.steps[0].line == 9


CASES = {
    "step-typo": (
        "  - migrate: vm1",
        "  - migrat: vm1",
        9,
        "unknown step 'migrat' (did you mean 'migrate'?)",
    ),
    "unknown-vm": ("  - migrate: vm1", "  - migrate: vm9", 9, "no VM named 'vm9'"),
    "field-typo": (
        "quota: {limitsCpu",
        "quota: {limitCpu",
        5,
        "unknown Rancher quota field 'limitCpu' (did you mean 'limitsCpu'?)",
    ),
    "bad-quantity": ("limitsMemory: 5000Mi}", "limitsMemory: 5000MiB}", 5, "invalid quantity"),
    "undeclared-namespace": (
        "  - {name: vm1, namespace: ns}",
        "  - {name: vm1, namespace: other}",
        7,
        "namespace 'other' is not declared",
    ),
    "bad-outcome": (
        "  outcome: Succeeded",
        "  outcome: Finished",
        12,
        "outcome must be one of Succeeded, Failed, Aborted",
    ),
    "impossible-writes": (
        "  outcome: Succeeded",
        "  max_writes_per_migration: 0",
        12,
        "is impossible",
    ),
    "quota-without-rancher": ("rancher: {}\n", "", 4, "add a rancher section, or use hard"),
    "top-level-typo": (
        "name: ok",
        "name: ok\nvmz: []",
        2,
        "unknown key 'vmz' in the scenario (did you mean 'vms'?)",
    ),
    "bad-harvester-switch": (
        "name: ok",
        "name: ok\nharvester: {compensation: maybe}",
        2,
        "harvester.compensation must be true or false, not 'maybe'",
    ),
    "bad-wait": (
        "  - wait: migrations",
        "  - wait: {for: forever}",
        10,
        "wait.for must be migrations or quota-at-base",
    ),
    "endless-wait": ("  - wait: migrations", "  - wait: inf", 10, "wait must be a finite number"),
    "nan-wait": ("  - wait: migrations", "  - wait: {seconds: nan}", 10, "must be a finite number"),
    "duplicate-key": ("name: ok", "name: ok\nname: again", 2, "'name' appears twice"),
    "duplicate-quota-field": (
        'limitsCpu: "3"',
        'limitsCpu: "3", limitsCpu: "4"',
        5,
        "'limitsCpu' appears twice",
    ),
    "negative-quota": ('limitsCpu: "3"', 'limitsCpu: "-3"', 5, "limitsCpu must be at least 0"),
    "negative-memory": (
        "{name: vm1, namespace: ns}",
        "{name: vm1, namespace: ns, memory: -4Gi}",
        7,
        "vms[0].memory must be more than 0",
    ),
    "empty-memory": (
        "{name: vm1, namespace: ns}",
        "{name: vm1, namespace: ns, memory: ''}",
        7,
        "vms[0].memory: invalid quantity",
    ),
    "bad-vm-name": ("{name: vm1,", "{name: VM_1,", 7, "vms[0].name 'VM_1' is not a valid name"),
    "empty-namespace-name": ("  - name: ns", "  - name: ''", 4, "'' is not a valid name"),
    "empty-drain": ("  - migrate: vm1", "  - drain: ''", 9, "drain '' is not a valid name"),
    "also-on-not-a-list": (
        "name: ok",
        'name: ok\nkubevirt: {also_on: "1.7"}',
        2,
        "kubevirt.also_on must be a list",
    ),
    "also-on-not-a-release": (
        "name: ok",
        'name: ok\nkubevirt: {also_on: ["seven"]}',
        2,
        "kubevirt.also_on:",
    ),
}


@pytest.mark.parametrize(("old", "new", "line", "reason"), CASES.values(), ids=CASES.keys())
def test_bad_files_are_refused_with_file_line_and_reason(
    tmp_path: Path, old: str, new: str, line: int, reason: str
) -> None:
    assert old in GOOD
    found = problems(tmp_path, GOOD.replace(old, new, 1))
    assert any(f"scenario.yaml:{line}:" in p and reason in p for p in found), found


def test_a_stuck_migration_can_be_expected_per_strategy(tmp_path: Path) -> None:
    path = tmp_path / "stuck.yaml"
    path.write_text(
        GOOD.replace("name: ok", "name: ok\nharvester: {compensation: false}")
        + "expect_harvester:\n  outcome: {vm1: Unfinished}\n"
    )
    scenario = load(path)
    assert scenario.harvester_compensation is False
    assert scenario.expects_unfinished("harvester")
    assert not scenario.expects_unfinished("ours")
    assert load_good(tmp_path).harvester_compensation is True


def load_good(tmp_path: Path) -> Scenario:
    path = tmp_path / "good.yaml"
    path.write_text(GOOD)
    return load(path)


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    text = GOOD.replace("migrate: vm1", "migrat: vm1").replace(
        "outcome: Succeeded", "outcome: Done"
    )
    found = problems(tmp_path, text)
    assert any("unknown step 'migrat'" in p for p in found)
    assert any("outcome must be one of" in p for p in found)


def test_unreadable_and_broken_yaml(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="cannot read the file"):
        load(tmp_path / "missing.yaml")
    assert "not valid YAML" in problems(tmp_path, "name: [unclosed\n")[0]
    assert "the file is empty" in problems(tmp_path, "")[0]
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe name: x\n")
    with pytest.raises(ScenarioError, match="cannot read the file"):
        load(binary)
