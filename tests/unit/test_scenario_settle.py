"""When a scenario run takes its final look: only once the quota is really back at its base.

Issue 44: the rancher-protected-quota scenario failed one full run in several with the quota one
room above its base. Its evidence (the report's `evidence`, kept since) showed the final look was
taken 10-50 ms before our release's copy into the quota, in every run: the runner took Rancher's
annotation, raised through as designed, for the base, so a quota copied from the raise looked
settled. It "passed" whenever no sample came between our release and the end, and failed when one
did. These tests replay that interleaving, step by step, on the runner's own check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from harvester_quota.generic.client import ApiClient
from harvester_quota.testbench.scenario.report import build_report
from harvester_quota.testbench.scenario.runner import ScenarioRun, rancher_base_of
from harvester_quota.testbench.scenario.schema import load
from harvester_quota.util import resources
from harvester_quota.util.annotations import (
    ANNOTATION_MIGRATING_SCALING_RESYNC_NEEDED,
    ANNOTATION_MIGRATING_UID_PREFIX,
    CATTLE_ANNOTATION_RESOURCE_QUOTA,
)
from harvester_quota.util.resourcequota.base import (
    ANNOTATION_RANCHER_APPLIED,
    ANNOTATION_RANCHER_BASE,
)

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "rancher-protected-quota.yaml"
BASE_TEXT = '{"limit":{"limitsCpu":"3000m","limitsMemory":"5000Mi"}}'
RAISED_TEXT = '{"limit":{"limitsCpu":"5015m","limitsMemory":"10040344313"}}'
BASE_HARD = {"limits.cpu": "3", "limits.memory": "5000Mi"}
RAISED_HARD = {"limits.cpu": "5015m", "limits.memory": "10040344313"}


def _run(tmp_path: Path) -> ScenarioRun:
    return ScenarioRun(load(SCENARIO), cast(ApiClient, None), None, workdir=tmp_path)


def _namespace(text: str, *, raised_through: bool) -> dict[str, Any]:
    annotations = {CATTLE_ANNOTATION_RESOURCE_QUOTA: text}
    if raised_through:
        annotations |= {ANNOTATION_RANCHER_BASE: BASE_TEXT, ANNOTATION_RANCHER_APPLIED: text}
    return {"metadata": {"name": "quota-test-x", "annotations": annotations}}


def _quota(hard: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "default-x", "annotations": annotations or {}},
        "spec": {"hard": hard},
    }


def test_the_base_of_a_namespace_raised_through_rancher_is_the_recorded_text() -> None:
    raised = _namespace(RAISED_TEXT, raised_through=True)
    assert rancher_base_of(raised) == resources.parse_resource_list(BASE_HARD)


def test_a_quota_copied_from_a_raise_through_rancher_is_not_at_its_base(tmp_path: Path) -> None:
    run = _run(tmp_path)
    run._last_namespace["quota-test-x"] = _namespace(RAISED_TEXT, raised_through=True)
    # The moment the old check took for settled: the annotation is the raise, the quota too.
    assert not run.at_base("quota-test-x", _quota(RAISED_HARD))


def test_a_released_annotation_not_yet_copied_into_the_quota_is_not_settled(
    tmp_path: Path,
) -> None:
    run = _run(tmp_path)
    run._last_namespace["quota-test-x"] = _namespace(BASE_TEXT, raised_through=False)
    assert not run.at_base("quota-test-x", _quota(RAISED_HARD))
    assert run.at_base("quota-test-x", _quota(BASE_HARD))


def test_harvesters_resync_flag_left_at_false_is_settled_and_at_true_or_beside_a_uid_key_not(
    tmp_path: Path,
) -> None:
    """The port of Harvester v1.9 leaves its resync flag at "false" after every migration: the
    settle ends there, not SETTLE_TIMEOUT later; the flag at "true" (a scale-up not yet applied)
    or a migration's UID key beside it is a raise still standing."""
    run = _run(tmp_path)
    run._last_namespace["quota-test-x"] = _namespace(BASE_TEXT, raised_through=False)
    flag = ANNOTATION_MIGRATING_SCALING_RESYNC_NEEDED
    assert run.at_base("quota-test-x", _quota(BASE_HARD, {flag: "false"}))
    assert not run.at_base("quota-test-x", _quota(BASE_HARD, {flag: "true"}))
    uid_key = f"{ANNOTATION_MIGRATING_UID_PREFIX}0433cc12"
    room = '{"limits.cpu":"1"}'
    assert not run.at_base("quota-test-x", _quota(BASE_HARD, {flag: "false", uid_key: room}))


def test_records_of_a_raise_left_on_the_namespace_are_not_settled(tmp_path: Path) -> None:
    run = _run(tmp_path)
    # The annotation is back at the base text, but our records of the raise stand.
    stale = _namespace(BASE_TEXT, raised_through=True)
    run._last_namespace["quota-test-x"] = stale
    assert not run.at_base("quota-test-x", _quota(BASE_HARD))


def test_the_report_names_records_of_a_raise_left_on_the_namespace(tmp_path: Path) -> None:
    run = _run(tmp_path)
    result = run.result
    result.final_quotas["quota-test"] = _quota(BASE_HARD)
    result.final_namespaces["quota-test"] = _namespace(BASE_TEXT, raised_through=True)
    report = build_report(result)
    assert report["quotas"]["quota-test"]["stale_annotations"] == [
        f"namespace {ANNOTATION_RANCHER_BASE}",
        f"namespace {ANNOTATION_RANCHER_APPLIED}",
    ]
    assert not report["invariants"]["no_stale_annotation"]
    assert (
        "evidence" in report
        and report["evidence"]["final_namespaces"]["quota-test"][ANNOTATION_RANCHER_BASE]
        == BASE_TEXT
    )
