"""The scale run's arms (issue 40 item 1): the headroom twins, the arms' order, and what each
step counts per arm: failed creates on a conflict, the API server's 409 pod creates, the stall,
and the writes per migration by kind."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path
from typing import Any

import pytest
from harvester_quota.generic.resource import NAMESPACES, RESOURCE_QUOTAS
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.testbench.scale.observe import count_pod_create_conflicts
from harvester_quota.testbench.scale.plan import PRESETS, Step
from harvester_quota.testbench.scale.product import Metrics, parse_metrics
from harvester_quota.testbench.scale.report import source_commit
from harvester_quota.testbench.scale.run import (
    OPEN_HARD,
    QUOTA_NAME,
    ScaleOptions,
    ScaleReport,
    ScaleRun,
    is_quota_drain_wave,
    rotated,
    step_wait_seconds,
)
from harvester_quota.testbench.scale.stats import (
    ARM_HEADROOM,
    ARM_NONE,
    ARM_OURS,
    MigrationTimes,
    StepResult,
    arm_rows,
    arms_table,
    migration_times,
    summarize_step,
)
from harvester_quota.testbench.sim.kubevirt.record import (
    MigrationRecord,
    Moment,
    Outcome,
    is_conflict,
)
from harvester_quota.testbench.virtcontroller import note_create_failures
from harvester_quota.util.annotations import LABEL_DEFAULT_RESOURCE_QUOTA

CONFLICT = (
    'Error creating pod: Operation cannot be fulfilled on resourcequotas "default-quota": the '
    "object has been modified; please apply your changes to the latest version and try again"
)
REFUSAL = 'Error creating pod: pods "t" is forbidden: exceeded quota: default-quota'


def test_the_headroom_arm_runs_each_step_on_the_same_vms_in_namespaces_of_its_own() -> None:
    plan = PRESETS["tiny"]
    headroom = set(plan.headroom_vms())
    assert len(headroom) == plan.vms
    assert not headroom & set(plan.all_vms()), "no headroom twin is a quota namespace"
    assert not headroom & set(plan.baseline_vms()), "nor a baseline twin"
    for step in plan.steps():
        twin = plan.headroom_of(step)
        assert (twin.name, twin.namespace_size) == (step.name, step.namespace_size)
        assert [vm for _, vm in twin.migrations] == [vm for _, vm in step.migrations]
        assert set(twin.migrations) <= headroom
        assert not is_quota_drain_wave(twin, plan), "no leader of ours to kill in a twin"


def test_the_arms_order_rotates_so_each_arm_goes_first_in_turn() -> None:
    arms = ["ours", "none", "headroom"]
    assert [rotated(arms, i)[0] for i in range(4)] == ["ours", "none", "headroom", "ours"]
    assert rotated(arms, 1) == ["none", "headroom", "ours"]
    assert [rotated(["ours", "none"], i) for i in range(2)] == [
        ["ours", "none"],
        ["none", "ours"],
    ], "two arms alternate, as the baseline always did"
    assert rotated([], 3) == []


async def test_a_runs_arm_offset_shifts_which_arm_goes_first_in_every_step() -> None:
    """Runs made one after the other would otherwise put the same arm in the same place of a
    step every time: `arm_offset` starts each run's rotation where the run asks."""
    plan = PRESETS["tiny"]
    arm_of: dict[str, str] = {}
    for i in range(len(plan.namespaces)):
        arm_of[plan.namespace(i)] = "ours"
        arm_of[plan.baseline_namespace(i)] = "no quota"
        arm_of[plan.headroom_namespace(i)] = ARM_HEADROOM

    class Ran:
        def line(self) -> str:
            return ""

    async def order_of_arms(offset: int, index: int) -> list[str]:
        ran: list[str] = []
        run = object.__new__(ScaleRun)
        run.options = ScaleOptions(arm_offset=offset)
        run.plan = plan
        run.report = ScaleReport(plan, cpu_accounting=False)
        run.say = lambda _line: None  # type: ignore[method-assign]
        run.headroom_namespaces = [plan.headroom_namespace(0)]

        async def step(arm: Step, _index: int) -> Any:
            ran.extend(arm_of[namespace] for namespace, _ in arm.migrations[:1])
            return Ran()

        run._step = step  # type: ignore[method-assign]
        await run._step_and_baseline(index, plan.steps()[index])
        return ran

    assert await order_of_arms(0, 0) == ["ours", "no quota", ARM_HEADROOM]
    assert await order_of_arms(1, 0) == await order_of_arms(0, 1), "the offset adds to the step"
    assert await order_of_arms(1, 0) == ["no quota", ARM_HEADROOM, "ours"]
    assert await order_of_arms(2, 1) == ["ours", "no quota", ARM_HEADROOM]


async def test_a_headroom_namespace_s_quota_is_open_on_the_same_keys_and_marked_for_nobody() -> (
    None
):
    """Nothing of ours may touch the headroom arm: its namespace carries no run label (the
    webhook's and KubeVirt policies' selector) and its quota not the managed label (the
    controller's, and Harvester's needs Rancher's namespace annotation, which it lacks)."""
    created: list[tuple[Any, dict[str, Any], str]] = []

    class Api:
        async def create(self, resource: Any, body: dict[str, Any], namespace: str = "") -> None:
            created.append((resource, body, namespace))

    run = object.__new__(ScaleRun)
    run.api = Api()  # type: ignore[assignment]
    await run._create_headroom_namespace("scale-headroom-000")
    (ns_resource, namespace, _), (quota_resource, quota, where) = created
    assert (ns_resource, quota_resource, where) == (
        NAMESPACES,
        RESOURCE_QUOTAS,
        "scale-headroom-000",
    )
    assert namespace == {"metadata": {"name": "scale-headroom-000"}}, "no label, no annotation"
    assert quota["metadata"] == {"name": QUOTA_NAME}
    assert LABEL_DEFAULT_RESOURCE_QUOTA not in str(quota)
    assert quota["spec"]["hard"] == OPEN_HARD


APISERVER = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 40
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 3
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="eviction",verb="POST",version="v1"} 7
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="resourcequotas",scope="resource",subresource="status",verb="PUT",version="v1"} 11
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="PATCH",version="v1"} 5
apiserver_request_duration_seconds_count{code="409",resource="pods",subresource="",verb="POST"} 2
"""


def test_the_api_server_s_409_pod_creates_are_its_conflicts_only() -> None:
    """Only pod creates: not evictions (a disruption budget's 409), not the quota's own status
    updates, not pod patches, not another metric's series."""
    assert count_pod_create_conflicts(APISERVER) == 3.0
    assert count_pod_create_conflicts("") == 0.0


def test_a_conflict_is_told_from_a_quota_refusal_and_other_failures() -> None:
    assert is_conflict(CONFLICT)
    assert not is_conflict(REFUSAL)
    assert not is_conflict("Error creating pod: Internal error occurred: webhook timed out")


def _records(clock: FakeClock, count: int) -> list[MigrationRecord]:
    return [
        MigrationRecord("ns", f"m{i}", f"u{i}", f"vm{i}", Moment.now(clock)) for i in range(count)
    ]


def _summarize(records: list[MigrationRecord], metrics: Metrics, **kwargs: Any) -> StepResult:
    step = Step("drain", tuple(("ns", r.vmi) for r in records))
    return summarize_step(
        step,
        records=records,
        latencies=(),
        create_seconds=(),
        metrics=metrics,
        cpu={},
        seconds=10.0,
        settle_seconds=0.0,
        drift=0,
        stale=0,
        **kwargs,
    )


def test_a_step_counts_conflicted_migrations_their_events_and_stalls() -> None:
    clock = FakeClock()
    records = _records(clock, 4)
    note_create_failures(records[0], CONFLICT, 2, Moment.now(clock))  # one Event, count 2
    note_create_failures(records[1], REFUSAL, 3, Moment.now(clock))
    note_create_failures(records[2], CONFLICT, 1, Moment.now(clock))
    note_create_failures(records[2], REFUSAL, 1, Moment.now(clock))
    clock.step(4)
    records[2].admitted = Moment.now(clock)
    clock.step(46)
    records[0].admitted = Moment.now(clock)
    metrics = Metrics({}, {}, 0.0, 0.0, writes={"spec": 6.0, "vmi": 8.0})
    result = _summarize(records, metrics, pod_create_409=3.0)
    assert (result.conflicted, result.conflict_events) == (2, 3), "a refused one counts too"
    assert result.conflict_stalls == pytest.approx((4.0, 50.0))
    assert result.pod_create_409 == 3.0
    assert result.to_json()["writes_per_migration_by_kind"] == {"spec": 1.5, "vmi": 2.0}
    assert "2 on a conflict (3 events, 3 pod creates 409)" in result.line()


def _arm_step(
    succeeded: list[float], writes: dict[str, float], api_409: float | None
) -> StepResult:
    clock = FakeClock()
    records = _records(clock, len(succeeded))
    result = _summarize(records, Metrics({}, {}, 0.0, 0.0, writes=writes), pod_create_409=api_409)
    return dataclasses.replace(result, succeeded_after=tuple(succeeded), succeeded=len(succeeded))


def test_the_arms_table_gives_each_arm_s_writes_and_its_ratio_to_no_quota() -> None:
    arms = {
        ARM_OURS: [_arm_step([2.0, 4.0], {"spec": 2.0, "status": 1.0, "vmi": 4.0}, 1.0)],
        ARM_NONE: [_arm_step([1.0, 2.0], {"vmi": 4.0, "vm": 4.0}, 0.0)],
        ARM_HEADROOM: [_arm_step([1.0, 3.0], {}, None)],
    }
    ours, none, headroom = arm_rows(arms)
    assert [r["arm"] for r in (ours, none, headroom)] == [ARM_OURS, ARM_NONE, ARM_HEADROOM]
    assert ours["writes_per_migration"] == {
        "spec": 1.0,
        "status": 0.5,
        "label": 0.0,
        "rancher": 0.0,
        "vmi": 2.0,
        "vm": 0.0,
    }
    assert (ours["ratio_p50"], ours["ratio_p99"]) == (2.0, 2.0)
    assert (none["ratio_p50"], headroom["ratio_p99"]) == (1.0, 1.5)
    table = arms_table(arms)
    assert (
        "| drain | ours | 2/2 | 0 (0) | 1 | 0.0 / 0.0 | 1.00 / 0.50 / 0.00 / 0.00 / 2.00 / 0.00"
        in (table)
    )
    assert f"| drain | {ARM_HEADROOM} | 2/2 | 0 (0) | - |" in table, "409s not scraped: -"
    (alone,) = arm_rows({ARM_OURS: arms[ARM_OURS]})
    assert alone["ratio_p50"] is None, "no ratio without the no-quota arm"


EXPOSITION = """\
# TYPE harvester_quota_api_writes_total counter
harvester_quota_api_writes_total{kind="spec"} 5.0
harvester_quota_api_writes_total{kind="status"} 2.0
harvester_quota_api_writes_total{kind="vmi"} 9.0
"""


def test_our_writes_by_kind_are_read_from_the_controller_and_subtracted() -> None:
    now = parse_metrics(EXPOSITION)
    assert now.writes == {"spec": 5.0, "status": 2.0, "vmi": 9.0}
    before = Metrics({}, {}, 0.0, 0.0, writes={"spec": 1.0, "status": 2.0})
    assert now.minus(before).writes == {"spec": 4.0, "vmi": 9.0}


def test_the_command_line_runs_three_arms_unless_told_fewer() -> None:
    from harvester_quota.testbench.cli import build_parser
    from harvester_quota.testbench.scale.cli import arm_count

    parse = build_parser().parse_args
    assert arm_count(parse(["scale"])) == 3
    assert arm_count(parse(["scale", "--no-headroom"])) == 2
    assert arm_count(parse(["scale", "--no-baseline"])) == 1, "--no-baseline: the quota arm only"
    assert arm_count(parse(["scale", "--no-baseline", "--no-headroom"])) == 1


async def test_a_kept_cluster_s_unfinished_migrations_are_deleted_and_finished_ones_kept() -> None:
    """A Harvester run leaves migrations Pending for good (its raise is 15m short of a target
    pod); the next run on the kept cluster deletes them, or they would hold their VMs and
    KubeVirt's parallel-migration slots through its steps."""
    from harvester_quota.apis.kubevirt import VIRTUAL_MACHINE_INSTANCE_MIGRATIONS

    deleted: list[tuple[str, str]] = []

    class Api:
        async def list(self, resource: Any, namespace: str) -> dict[str, Any]:
            assert resource is VIRTUAL_MACHINE_INSTANCE_MIGRATIONS
            phases = {"done": "Succeeded", "failed": "Failed", "stuck": "Pending", "new": None}
            return {
                "items": [
                    {"metadata": {"name": name}, "status": {"phase": phase} if phase else {}}
                    for name, phase in phases.items()
                ]
            }

        async def delete(self, resource: Any, name: str, namespace: str) -> None:
            deleted.append((namespace, name))

    run = object.__new__(ScaleRun)
    run.api = Api()  # type: ignore[assignment]
    run.say = lambda _line: None
    await run._delete_unfinished_migrations("scale-001")
    assert deleted == [("scale-001", "stuck"), ("scale-001", "new")]


async def test_closing_a_kept_quota_drops_every_room_an_earlier_run_left_on_it() -> None:
    """Harvester's raise that was never given back (its migratingUID- record) or ours: at the
    close no migration holds room, and a record left would be adopted as held."""
    quota: dict[str, Any] = {
        "metadata": {
            "name": QUOTA_NAME,
            "namespace": "scale-001",
            "annotations": {
                "harvesterhci.io/migratingUID-3e91": '{"limits.cpu":"1"}',
                "harvesterhci.io/migrating-vm-00001": '{"limits.cpu":"1"}',
                "harvesterhci.io/migratingScalingResyncNeeded": "false",
                "harvester-quota.io/base": '{"limits.cpu":"6"}',
            },
        },
        "spec": {"hard": {"limits.cpu": "7"}},
        "status": {"used": {"limits.cpu": "6", "limits.memory": "8Gi", "requests.memory": "6Gi"}},
    }
    updated: list[dict[str, Any]] = []

    class Api:
        async def get(self, resource: Any, name: str, namespace: str) -> dict[str, Any]:
            return quota

        async def update(self, resource: Any, body: dict[str, Any]) -> None:
            updated.append(body)

    run = object.__new__(ScaleRun)
    run.api = Api()  # type: ignore[assignment]
    run.report = ScaleReport(PRESETS["tiny"], strategy="ours")
    await run._close_quota("scale-001")
    (written,) = updated
    assert written["metadata"]["annotations"] == {"harvester-quota.io/base": '{"limits.cpu":"6"}'}
    assert written["spec"]["hard"] == {
        "limits.cpu": "6",
        "limits.memory": "8Gi",
        "requests.memory": "6Gi",
    }


def test_without_cpu_accounting_the_controller_runs_as_deployed_and_the_report_has_no_breakdown(
    tmp_path: Path,
) -> None:
    """`scale --no-cpu-accounting`: the controller's command line has no --cpu-accounting (the
    chart's default), and the report leaves the breakdown out rather than print zeros."""
    from harvester_quota.testbench.cli import build_parser
    from harvester_quota.testbench.scale.product import Product
    from harvester_quota.testbench.scale.report import render_markdown

    parse = build_parser().parse_args
    assert parse(["scale"]).no_cpu_accounting is False
    assert parse(["scale", "--no-cpu-accounting"]).no_cpu_accounting is True

    def controller_flags(accounting: bool) -> list[str]:
        product = Product(
            None,  # type: ignore[arg-type]  # the command line needs no client
            None,  # type: ignore[arg-type]
            tmp_path,
            match_labels={},
            kubevirt_version="1.6",
            lease_name="l",
            cpu_accounting=accounting,
        )
        return product._controller_args(tmp_path / "k", "a", 1)

    assert "--cpu-accounting" in controller_flags(True)
    assert "--cpu-accounting" not in controller_flags(False)
    step = _summarize(_records(FakeClock(), 1), Metrics({}, {}, 1.0, 0.0))
    on = ScaleReport(PRESETS["tiny"], steps=[step])
    off = dataclasses.replace(on, cpu_accounting=False)
    assert "Where the controller's CPU went" in render_markdown(on, "scale")
    assert "Where the controller's CPU went" not in render_markdown(off, "scale")
    assert off.to_json()["cpu_accounting"] is False


async def test_a_cluster_without_an_audit_log_counts_no_writes_rather_than_zero(
    tmp_path: Path,
) -> None:
    """A kept cluster started without an audit log: the step's writes by namespace are unknown
    (None), not 0, which test_scale and a reader would take for "nothing written"."""
    from harvester_quota.testbench.localcluster.audit import AuditLog
    from harvester_quota.testbench.scale.product import Product

    run = object.__new__(ScaleRun)
    run.product = object.__new__(Product)
    run.namespaces = ["scale-000"]
    run.audit = AuditLog(tmp_path / "logs" / "audit.log")
    assert await run._audit_mark() is None
    assert run._run_namespace_writes(await run._audited(await run._audit_mark())) is None
    run.audit.path.parent.mkdir()
    run.audit.path.write_text("")
    mark = await run._audit_mark()
    assert mark is not None and run._run_namespace_writes(await run._audited(mark)) == 0


def test_a_migration_and_its_twins_share_one_key_and_no_two_migrations_of_a_step_do() -> None:
    plan = PRESETS["small"]
    for step in plan.steps():
        keys = [plan.twin_key(ns, vm) for ns, vm in step.migrations]
        assert len(set(keys)) == len(keys), f"{step.name}: two migrations share a key"
        for twin in (plan.baseline_of(step), plan.headroom_of(step)):
            assert [plan.twin_key(ns, vm) for ns, vm in twin.migrations] == keys
    for stranger in ("default", "scale-", "scale-noquota-", "scale-other-001", "scale-012"):
        with pytest.raises(ValueError, match=stranger):
            plan.twin_key(stranger, "vm-00000")


def test_each_migration_s_times_pair_it_with_its_twin_and_say_which_stalled_on_a_conflict() -> None:
    clock = FakeClock()
    conflicted, plain, failed, stuck = _records(clock, 4)
    asked = clock.monotonic()
    note_create_failures(conflicted, CONFLICT, 1, Moment.now(clock))
    note_create_failures(stuck, CONFLICT, 3, Moment.now(clock))  # never admitted nor ended
    clock.step(7)
    for record in (conflicted, plain):
        record.admitted = Moment.now(clock)
    clock.step(2)
    for record, outcome in ((conflicted, Outcome.SUCCEEDED), (plain, Outcome.SUCCEEDED)):
        record.finished, record.outcome = Moment.now(clock), outcome
    failed.finished, failed.outcome = Moment.now(clock), Outcome.FAILED
    times = migration_times(
        [
            ("000/a", conflicted, asked),
            ("000/b", plain, asked + 1),
            ("001/a", failed, asked),
            ("001/b", None, asked),
            ("002/a", stuck, asked),
        ]
    )
    assert times["000/a"] == MigrationTimes(9.0, True, 7.0)
    assert times["000/b"] == MigrationTimes(8.0), "no conflict, no stall of one"
    assert times["001/a"].succeeded is None, "a failed migration has no Succeeded time"
    assert times["001/b"] == MigrationTimes(None)
    assert times["002/a"] == MigrationTimes(None, True, None), "conflicted, still waiting"
    step = _summarize([conflicted, plain, stuck], Metrics({}, {}, 0.0, 0.0), by_twin=times)
    assert step.to_json()["migrations_by_twin"]["002/a"] == {
        "succeeded_s": None,
        "conflict_stall_s": None,
    }, "a conflicted migration is never left out for waiting still"
    assert step.to_json()["migrations_by_twin"]["000/a"] == {
        "succeeded_s": 9.0,
        "conflict_stall_s": 7.0,
    }
    assert step.to_json()["migrations_by_twin"]["000/b"] == {"succeeded_s": 8.0}


def test_report_json_names_the_commit_it_ran_and_whether_files_differed(tmp_path: Path) -> None:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(tmp_path), *args], check=True, capture_output=True, text=True
        ).stdout.strip()

    assert source_commit(tmp_path) is None, "not a checkout: unknown, not a guess"
    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    head = git("rev-parse", "HEAD")
    (tmp_path / "untracked.txt").write_text("not code of the run\n")
    assert source_commit(tmp_path) == head
    (tmp_path / "a.py").write_text("x = 2\n")
    assert source_commit(tmp_path) == head + "+dirty"


def test_a_step_waits_the_step_timeout_asked_for_or_two_minutes_and_two_seconds_a_migration() -> (
    None
):
    from harvester_quota.testbench.cli import build_parser

    parse = build_parser().parse_args
    assert parse(["scale"]).step_timeout is None
    assert parse(["scale", "--step-timeout", "90"]).step_timeout == 90.0
    for bad in ("0", "-5", "soon", "inf", "nan"):
        with pytest.raises(SystemExit):
            parse(["scale", "--step-timeout", bad])
    assert step_wait_seconds(ScaleOptions(), 100) == 320.0
    assert step_wait_seconds(ScaleOptions(step_timeout=90.0), 100) == 90.0
