"""The scale run's plan (counts into steps), its statistics and its metrics parsing."""

from __future__ import annotations

from collections import Counter

import pytest
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.testbench.scale.plan import PRESETS, ScalePlan, Step, parse_namespaces
from harvester_quota.testbench.scale.product import Metrics, parse_metrics
from harvester_quota.testbench.scale.run import is_quota_drain_wave, step_wall_seconds
from harvester_quota.testbench.scale.stats import (
    StepResult,
    baseline_ratios,
    baseline_table,
    percentile,
    summarize_step,
    table,
)
from harvester_quota.testbench.sim.kubevirt.record import MigrationRecord, Moment
from harvester_quota.testbench.virtcontroller import note_create_failures

from tests.unit.scalesteps import step_result


def test_the_full_preset_is_the_issues_counts() -> None:
    full = PRESETS["full"]
    assert (full.nodes, full.vms, max(full.namespaces), full.in_flight) == (1000, 10000, 3000, 500)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_step_of_every_preset_migrates_distinct_vms_that_exist(name: str) -> None:
    plan = PRESETS[name]
    existing = set(plan.all_vms())
    assert len(existing) == plan.vms
    for step in plan.steps():
        assert len(set(step.migrations)) == len(step.migrations), step.name
        assert set(step.migrations) <= existing, step.name


def test_one_step_per_namespace_size_smallest_first_then_the_waves() -> None:
    plan = ScalePlan(nodes=4, namespaces=(30, 10, 10, 20), per_size=5, in_flight=8, waves=2)
    steps = plan.steps()
    assert [s.name for s in steps] == [
        "10 VMs/ns",
        "20 VMs/ns",
        "30 VMs/ns",
        "drain wave 1",
        "drain wave 2",
    ]
    assert {ns for ns, _ in steps[1].migrations} == {plan.namespace(3)}
    assert steps[1].namespace_size == 20
    wave = Counter(ns for ns, _ in steps[3].migrations)
    assert wave == {plan.namespace(i): 2 for i in range(4)}
    assert steps[3].migrations != steps[4].migrations


def test_a_wave_larger_than_the_small_namespaces_takes_more_from_the_large_ones() -> None:
    plan = ScalePlan(nodes=4, namespaces=(10, 1, 1), per_size=1, in_flight=9)
    wave = Counter(ns for ns, _ in plan.steps()[-1].migrations)
    assert wave == {plan.namespace(0): 7, plan.namespace(1): 1, plan.namespace(2): 1}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"nodes": 1}, "2 nodes"),
        ({"namespaces": ()}, "every namespace"),
        ({"namespaces": (5, 0)}, "every namespace"),
        ({"per_size": 6}, "smallest namespace"),
        ({"in_flight": 11}, "only 10 VMs"),
        ({"waves": 0}, "waves"),
    ],
)
def test_impossible_counts_are_refused_with_the_reason(
    changes: dict[str, object], message: str
) -> None:
    counts: dict[str, object] = {"nodes": 4, "namespaces": (5, 5), "per_size": 2, "in_flight": 4}
    with pytest.raises(ValueError, match=message):
        ScalePlan(**{**counts, **changes})  # type: ignore[arg-type]


def test_namespace_counts_parse_with_repeats() -> None:
    assert parse_namespaces("3000, 1000,100x3") == (3000, 1000, 100, 100, 100)
    with pytest.raises(ValueError, match="NxK"):
        parse_namespaces("100y3")


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 51)]
    assert percentile(values, 0.5) == 25.0
    assert percentile(values, 0.99) == 50.0
    assert percentile([3.0], 0.99) == 3.0
    assert percentile([], 0.5) is None


EXPOSITION = """\
# TYPE harvester_quota_api_requests_total counter
harvester_quota_api_requests_total{verb="get",resource="pods",code="200"} 3.0
harvester_quota_api_requests_total{verb="get",resource="pods",code="404"} 1.0
harvester_quota_api_requests_total{verb="update",resource="resourcequotas",code="200"} 5.0
# TYPE harvester_quota_quota_writes_total counter
harvester_quota_quota_writes_total{outcome="written"} 4.0
harvester_quota_quota_writes_total{outcome="conflict"} 1.0
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 1.048576e+08
# TYPE harvester_quota_reconcile_duration_seconds histogram
harvester_quota_reconcile_duration_seconds_bucket{le="+Inf"} 7.0
harvester_quota_reconcile_duration_seconds_count 7.0
harvester_quota_reconcile_duration_seconds_sum 0.35
"""


def test_the_metrics_the_run_reads_are_summed_over_codes_and_subtracted() -> None:
    now = parse_metrics(EXPOSITION)
    assert now.requests == {("get", "pods"): 4.0, ("update", "resourcequotas"): 5.0}
    assert now.quota_writes == {"written": 4.0, "conflict": 1.0}
    before = Metrics({("get", "pods"): 4.0}, {"written": 1.0}, 10.0, 1.0)
    delta = now.minus(before)
    assert delta.requests == {("update", "resourcequotas"): 5.0}
    assert delta.quota_writes == {"written": 3.0, "conflict": 1.0}
    assert delta.cpu_seconds == 2.5
    assert delta.rss_bytes == 104857600.0
    assert (delta.reconciles, delta.reconcile_seconds) == (7.0, 0.35)


WEBHOOK_EXPOSITION = """\
# TYPE harvester_quota_api_requests_total counter
harvester_quota_api_requests_total{verb="update",resource="leases",code="200"} 2.0
# TYPE harvester_quota_webhook_target_pods_total counter
harvester_quota_webhook_target_pods_total{outcome="fits"} 40.0
harvester_quota_webhook_target_pods_total{outcome="fitted-after-wait"} 9.0
harvester_quota_webhook_target_pods_total{outcome="timed-out"} 1.0
# TYPE harvester_quota_webhook_target_wait_seconds histogram
harvester_quota_webhook_target_wait_seconds_sum 9.5
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 99.0
"""


def test_the_webhook_s_requests_and_target_waits_join_the_controller_s() -> None:
    both = parse_metrics(EXPOSITION).with_webhook(parse_metrics(WEBHOOK_EXPOSITION))
    assert both.quota_writes == {"written": 4.0, "conflict": 1.0}, "the controller's writes only"
    assert both.requests[("update", "leases")] == 2.0
    assert (both.targets_waited, both.target_wait_seconds) == (10.0, 9.5)
    assert both.cpu_seconds == 12.5, "CPU stays the controller's own"


def test_the_scale_command_takes_the_preset_and_the_counts_given() -> None:
    from harvester_quota.testbench.cli import build_parser
    from harvester_quota.testbench.scale.cli import plan_from

    args = build_parser().parse_args(
        [
            "scale",
            "--size",
            "tiny",
            "--namespaces",
            "10x2",
            "--in-flight",
            "8",
            "--controller-arg=--workers=10",
        ]
    )
    plan = plan_from(args)
    assert (plan.nodes, plan.namespaces, plan.in_flight) == (4, (10, 10), 8)
    assert args.controller_arg == ["--workers=10"]
    with pytest.raises(ValueError, match="only 20 VMs"):
        plan_from(build_parser().parse_args(["scale", "--namespaces", "10x2", "--per-size", "5"]))


async def test_a_kept_clusters_namespace_is_taken_over_with_its_quota_and_vms() -> None:
    """`scale --keep` reruns on the namespaces a kept cluster has: labelled with the new run
    (the webhook configuration selects by it), the quota and VMs left as they are."""
    from harvester_quota.generic import errors
    from harvester_quota.generic.resource import NAMESPACES, RESOURCE_QUOTAS
    from harvester_quota.testbench.scale.run import RUN_LABEL, ScaleReport, ScaleRun
    from harvester_quota.util.annotations import CATTLE_ANNOTATION_RESOURCE_QUOTA

    calls: list[tuple[str, str, object]] = []

    class KeptCluster:
        async def create(self, resource: object, body: object, namespace: str = "") -> None:
            calls.append(("create", str(resource), namespace))
            raise errors.AlreadyExists("exists", status=409)

        async def patch(self, resource: object, name: str, patch: object) -> None:
            calls.append(("patch", name, patch))

    run = object.__new__(ScaleRun)
    run.api = KeptCluster()  # type: ignore[assignment]
    run.run_id = "abc123"
    run.report = ScaleReport(PRESETS["tiny"], strategy="harvester")
    await run._create_namespace("scale-000")
    assert calls == [
        ("create", str(NAMESPACES), ""),
        ("patch", "scale-000", {"metadata": {"labels": {RUN_LABEL: "abc123"}}}),
        ("create", str(RESOURCE_QUOTAS), "scale-000"),
    ]
    # Ours after a Harvester run on the same cluster: Rancher's base annotation, which that run
    # wrote at its own closed keys, goes (our controller would take it for the base).
    calls.clear()
    run.report = ScaleReport(PRESETS["tiny"], strategy="ours")
    await run._create_namespace("scale-000")
    assert calls[1] == (
        "patch",
        "scale-000",
        {
            "metadata": {
                "labels": {RUN_LABEL: "abc123"},
                "annotations": {CATTLE_ANNOTATION_RESOURCE_QUOTA: None},
            }
        },
    )


async def test_a_migration_create_retried_after_it_landed_makes_no_second_migration() -> None:
    """The API server creates the migration, then answers 500 (an etcd timeout): the retry of
    the fixed name finds it (AlreadyExists) and the step goes on with that one migration; with a
    generated name the retry made the VM a second migration."""
    from harvester_quota.generic import errors
    from harvester_quota.testbench.scale.run import ScaleRun

    created: list[str] = []

    class KubeVirt:
        async def migrate(self, vm: str, namespace: str, *, name: str | None = None) -> str:
            assert name is not None, "a fixed name, never generateName"
            if name in created:
                raise errors.AlreadyExists("exists", status=409)
            created.append(name)
            if len(created) == 1:
                raise errors.ApiError("etcdserver: request timed out", status=500)
            return name

    run = object.__new__(ScaleRun)
    run.kubevirt = KubeVirt()  # type: ignore[assignment]
    name = await run._create_migration("scale-000", "vm-00001", "vm-00001-abc123-0")
    assert name == "vm-00001-abc123-0"
    assert created == ["vm-00001-abc123-0"]


def test_the_baseline_runs_each_step_on_the_same_vms_in_twin_namespaces() -> None:
    plan = PRESETS["tiny"]
    twins = set(plan.baseline_vms())
    assert len(twins) == plan.vms
    assert not twins & set(plan.all_vms()), "no twin is a quota namespace"
    for step in plan.steps():
        twin = plan.baseline_of(step)
        assert (twin.name, twin.namespace_size) == (step.name, step.namespace_size)
        assert [vm for _, vm in twin.migrations] == [vm for _, vm in step.migrations]
        assert set(twin.migrations) <= twins
        assert [ns for ns, _ in twin.migrations] == [
            plan.baseline_namespace(int(ns.removeprefix(plan.prefix))) for ns, _ in step.migrations
        ]


def _step(name: str, admitted: list[float], succeeded: list[float], seconds: float) -> StepResult:
    return step_result(
        name,
        migrations=len(admitted),
        succeeded=len(succeeded),
        seconds=seconds,
        target_admitted=tuple(admitted),
        succeeded_after=tuple(succeeded),
    )


def test_baseline_ratios_divide_what_users_feel_with_the_quota_by_without() -> None:
    ours = _step("drain", [1.0, 2.0, 4.0], [3.0, 6.0, 9.0], 12.0)
    none = _step("drain", [1.0, 1.0, 2.0], [3.0, 3.0, 9.0], 10.0)
    (row,) = baseline_ratios([ours], [none])
    assert row["step"] == "drain"
    assert row["target admitted p50"] == {"quota_s": 2.0, "no_quota_s": 1.0, "ratio": 2.0}
    assert row["target admitted p99"]["ratio"] == 2.0
    assert row["Succeeded p50"] == {"quota_s": 6.0, "no_quota_s": 3.0, "ratio": 2.0}
    assert row["Succeeded p99"]["ratio"] == 1.0
    assert row["wall"]["ratio"] == 1.2
    table = baseline_table([ours], [none])
    assert "| drain | 2.00 / 1.00 = **2.00** |" in table


def test_a_baseline_step_without_samples_has_no_ratio() -> None:
    (row,) = baseline_ratios([_step("s", [], [], 1.0)], [_step("s", [1.0], [1.0], 0.0)])
    assert row["target admitted p50"]["ratio"] is None
    assert row["wall"]["ratio"] is None, "a zero baseline divides nothing"


def test_a_step_counts_stalled_creates_apart_from_refusals() -> None:
    clock = FakeClock()
    conflict = 'Error creating pod: Operation cannot be fulfilled on resourcequotas "q"'
    records = [
        MigrationRecord("ns", f"m{i}", f"u{i}", f"vm{i}", Moment.now(clock)) for i in range(4)
    ]
    refusal = "Error creating pod: exceeded quota: q"
    note_create_failures(records[0], conflict, 2, Moment.now(clock))
    note_create_failures(records[1], refusal, 1, Moment.now(clock))
    note_create_failures(records[3], conflict, 1, Moment.now(clock))
    note_create_failures(records[3], refusal, 1, Moment.now(clock))
    clock.step(50)
    for entry in records:
        entry.admitted = Moment.now(clock)
    step = Step("s", tuple(("ns", f"vm{i}") for i in range(4)))
    result = summarize_step(
        step,
        records=records,
        latencies=(),
        create_seconds=(),
        metrics=Metrics(requests={}, quota_writes={}, cpu_seconds=0.0, rss_bytes=0.0),
        cpu={},
        seconds=60.0,
        settle_seconds=0.0,
        drift=0,
        stale=0,
    )
    assert (result.refused, result.failed_creates) == (2, 1), "refused once: refused, not both"
    assert result.stalled_seconds == pytest.approx(50)
    assert result.to_json()["failed_creates"] == 1
    assert "| 2 (100.0) | 1 (50.0) |" in table([result])


def test_a_failover_run_kills_the_leader_only_in_a_drain_wave_of_the_quota_namespaces() -> None:
    plan = PRESETS["tiny"]
    waves = [step for step in plan.steps() if is_quota_drain_wave(step, plan)]
    assert waves and all(step.namespace_size == 0 for step in waves)
    assert len({ns for ns, _ in waves[0].migrations}) > 1, "a wave spans namespaces"
    assert not any(is_quota_drain_wave(plan.baseline_of(step), plan) for step in plan.steps()), (
        "a baseline twin's wave has no leader of ours to kill"
    )
    assert not any(
        is_quota_drain_wave(step, plan) for step in plan.steps() if step.namespace_size
    ), "a one-namespace step is no drain wave"


def test_a_migration_finishing_after_the_steps_wait_timed_out_ends_the_steps_wall() -> None:
    clock = FakeClock()
    started = clock.monotonic()
    late, early = (MigrationRecord("ns", m, m, m, Moment.now(clock)) for m in ("a", "b"))
    clock.step(10)
    early.finished = Moment.now(clock)
    clock.step(310)
    waited_until = clock.monotonic()
    assert step_wall_seconds(started, waited_until, [early, late]) == pytest.approx(320), (
        "without every outcome, the wait's end"
    )
    clock.step(63.7)
    late.finished = Moment.now(clock)
    assert step_wall_seconds(started, waited_until, [early, late]) == pytest.approx(383.7)
    assert step_wall_seconds(started, waited_until, [early]) == pytest.approx(320), (
        "outcomes seen before the wait ended: its end, as before"
    )
