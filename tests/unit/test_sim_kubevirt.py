"""The KubeVirt simulator's pure parts: the phase walk, the parallel limits, the objects it renders
(with the seeds' numbers), and the migration record and its waits on a fake clock."""

from __future__ import annotations

import asyncio

import pytest
from harvester_quota.testbench.clock import FakeClock
from harvester_quota.testbench.sim.kubevirt import (
    InFlight,
    KubeVirtConfig,
    MigrationLog,
    MigrationRecord,
    MigrationTimings,
    Outcome,
    ParallelLimits,
    Phase,
    VMSpec,
    limit_reached,
    next_step,
    render_launcher_pod,
    vm_resources,
)
from harvester_quota.testbench.sim.kubevirt.config import StartRefused, VMStart
from harvester_quota.testbench.sim.kubevirt.objects import (
    MAX_HOSTNAME,
    MigrationRef,
    hostname,
    parse_version,
    render_migration,
    render_vm,
    render_vmi,
)
from harvester_quota.testbench.sim.kubevirt.phases import Advance, Blocked, Wait
from harvester_quota.testbench.sim.kubevirt.record import MAX_REFUSAL_MESSAGES, Moment
from harvester_quota.testbench.sim.kubevirt.simulator import pod_grace_seconds
from harvester_quota.testbench.virtcontroller import note_create_failures
from harvester_quota.util.launcher import LauncherSettings
from harvester_quota.util.podusage import pod_quota_usage

TIMINGS = MigrationTimings(
    scheduling=1.0, scheduled=2.0, preparing_target=3.0, target_ready=4.0, running=10.0
)


# The phase walk ----------------------------------------------------------------------------------


def walk(phase: Phase, elapsed: float, *, ready: bool = True, duration: float | None = None):
    return next_step(
        phase,
        entered_at=100.0,
        now=100.0 + elapsed,
        timings=TIMINGS,
        target_pod_ready=ready,
        migration_duration=duration,
    )


def test_each_timed_phase_waits_its_duration_then_advances() -> None:
    expected = [
        (Phase.SCHEDULING, 1.0, Phase.SCHEDULED),
        (Phase.SCHEDULED, 2.0, Phase.PREPARING_TARGET),
        (Phase.PREPARING_TARGET, 3.0, Phase.TARGET_READY),
        (Phase.TARGET_READY, 4.0, Phase.RUNNING),
        (Phase.RUNNING, 10.0, Phase.SUCCEEDED),
    ]
    for phase, duration, following in expected:
        assert walk(phase, 0.0) == Wait(duration)
        assert walk(phase, duration - 0.25) == Wait(0.25)
        assert walk(phase, duration) == Advance(following)
        assert walk(phase, duration + 5) == Advance(following)


def test_scheduling_waits_for_a_ready_target_pod() -> None:
    assert isinstance(walk(Phase.SCHEDULING, 5.0, ready=False), Blocked)
    assert walk(Phase.SCHEDULING, 5.0, ready=True) == Advance(Phase.SCHEDULED)
    # Readiness only gates Scheduling.
    assert walk(Phase.RUNNING, 1.0, ready=False) == Wait(9.0)


def test_a_vm_migration_duration_overrides_running_only() -> None:
    assert walk(Phase.RUNNING, 2.0, duration=3.0) == Wait(1.0)
    assert walk(Phase.RUNNING, 3.0, duration=3.0) == Advance(Phase.SUCCEEDED)
    assert walk(Phase.TARGET_READY, 0.0, duration=3.0) == Wait(4.0)


@pytest.mark.parametrize("phase", [Phase.UNSET, Phase.PENDING, Phase.SUCCEEDED, Phase.FAILED])
def test_pending_and_final_phases_are_not_walked(phase: Phase) -> None:
    assert isinstance(walk(phase, 1000.0), Blocked)


def test_phase_parse_tolerates_unknown_values() -> None:
    assert Phase.parse("Running") is Phase.RUNNING
    assert Phase.parse(None) is Phase.UNSET
    assert Phase.parse("WaitingForSync") is Phase.UNSET


def test_timings_refuse_negative_durations_and_the_seed_pace() -> None:
    with pytest.raises(ValueError, match="running"):
        MigrationTimings(running=-1)
    seed = MigrationTimings.like_v121_seed()
    assert seed.source_pod_grace_seconds == 31
    assert seed.running == 5.0
    assert seed.limit_retry == 5.0


# Parallel limits ---------------------------------------------------------------------------------


def flight(key: str, phase: Phase, node: str, target: bool = False) -> InFlight:
    return InFlight(key, phase, target, node)


def test_outbound_limit_counts_running_migrations_from_the_same_node() -> None:
    limits = ParallelLimits(per_cluster=5, outbound_per_node=2)
    others = [flight("a", Phase.RUNNING, "n0"), flight("b", Phase.SCHEDULING, "n0")]
    reason = limit_reached("n0", others, limits)
    assert reason is not None and "outbound" in reason and "n0" in reason
    assert limit_reached("n1", others, limits) is None


def test_cluster_limit_counts_every_node() -> None:
    limits = ParallelLimits(per_cluster=3, outbound_per_node=2)
    others = [flight(f"m{i}", Phase.RUNNING, f"n{i}") for i in range(3)]
    reason = limit_reached("n9", others, limits)
    assert reason is not None and "global cluster limit" in reason
    assert limit_reached("n9", others[:2], limits) is None


def test_pending_counts_only_with_a_target_pod_and_final_never() -> None:
    limits = ParallelLimits(per_cluster=5, outbound_per_node=1)
    refused = flight("refused", Phase.PENDING, "n0", target=False)  # refused by quota: no pod
    assert limit_reached("n0", [refused], limits) is None
    created = flight("created", Phase.PENDING, "n0", target=True)
    assert limit_reached("n0", [created], limits) is not None
    done = [flight("ok", Phase.SUCCEEDED, "n0", True), flight("ko", Phase.FAILED, "n0", True)]
    assert limit_reached("n0", done, limits) is None


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="parallel migration limits"):
        ParallelLimits(per_cluster=0)


# Rendering ---------------------------------------------------------------------------------------


def launcher_usage(spec: VMSpec, version: str, ratio: str | None) -> dict[str, str]:
    kubevirt = parse_version(version)
    resources = vm_resources(spec, kubevirt, ratio)
    vm = render_vm(spec, "ns", resources, running=True)
    vm["metadata"]["uid"] = "vm-uid"
    vmi = render_vmi(vm)
    vmi["metadata"]["uid"] = "vmi-uid"
    pod = render_launcher_pod(
        vmi, node="n0", settings=LauncherSettings(kubevirt_version=kubevirt, ratio=ratio)
    )
    usage = pod_quota_usage(pod)
    return {key: str(usage[key]) for key in ("limits.cpu", "limits.memory", "requests.memory")}


def test_v170_seed_numbers() -> None:
    """KubeVirt v1.6, ratio 1.5: a 2-core 4Gi VM's launcher pod uses 2015m / 4797464313."""
    usage = launcher_usage(VMSpec("vm1"), "1.6", "1.5")
    assert usage["limits.cpu"] == "2015m"
    assert usage["limits.memory"] == "4797464313"
    assert launcher_usage(VMSpec("vm1"), "1.6", "4.5")["limits.memory"] == "5682461313"


def test_v121_seed_numbers() -> None:
    """KubeVirt v0.54, no ratio: 2 / 4531245057, requests.memory 3098890241."""
    usage = launcher_usage(VMSpec("vm1"), "0.54", None)
    assert usage == {
        "limits.cpu": "2",
        "limits.memory": "4531245057",
        "requests.memory": "3098890241",
    }


def test_harvester_mutator_requests_and_guest_memory() -> None:
    modern = vm_resources(VMSpec("vm1"), parse_version("1.6"), "1.5")
    assert modern.requests == {"cpu": "200m", "memory": "2730Mi"}
    assert modern.guest == "4Gi"
    old = vm_resources(VMSpec("vm1"), parse_version("0.54"), None)
    assert old.requests == {"cpu": "125m", "memory": "2730Mi"}
    assert old.guest == "3996Mi"
    override = vm_resources(
        VMSpec("vm1", requests={"cpu": "1", "memory": "4Gi"}), parse_version("1.6"), "1.5"
    )
    assert override.requests == {"cpu": "1", "memory": "4Gi"}


def test_vmi_and_pods_carry_kubevirt_labels_and_owners() -> None:
    spec = VMSpec("vm1", termination_grace_period_seconds=120)
    vm = render_vm(spec, "ns", vm_resources(spec, parse_version("1.6"), "1.5"), running=True)
    vm["metadata"]["uid"] = "vm-uid"
    vmi = render_vmi(vm)
    assert vmi["metadata"]["ownerReferences"][0]["uid"] == "vm-uid"
    assert vmi["metadata"]["labels"]["harvesterhci.io/vmName"] == "vm1"
    assert vmi["spec"]["domain"]["cpu"]["model"] == "host-model"
    assert vmi["spec"]["evictionStrategy"] == "LiveMigrate"
    vmi["metadata"]["uid"] = "vmi-uid"
    settings = LauncherSettings(kubevirt_version="1.6", ratio="1.5")
    source = render_launcher_pod(vmi, node="n0", settings=settings)
    labels = source["metadata"]["labels"]
    assert labels["kubevirt.io"] == "virt-launcher"
    assert labels["kubevirt.io/created-by"] == "vmi-uid"
    assert labels["vm.kubevirt.io/name"] == "vm1"
    assert labels["harvesterhci.io/vmName"] == "vm1"
    assert "kubevirt.io/migrationJobUID" not in labels
    assert source["spec"]["nodeName"] == "n0"
    assert source["spec"]["terminationGracePeriodSeconds"] == 135
    assert source["metadata"]["ownerReferences"][0]["kind"] == "VirtualMachineInstance"
    target = render_launcher_pod(
        vmi, node="n1", settings=settings, migration=MigrationRef("vmim-uid", "vm1-abcde")
    )
    assert target["metadata"]["labels"]["kubevirt.io/migrationJobUID"] == "vmim-uid"
    assert target["metadata"]["annotations"]["kubevirt.io/migrationJobName"] == "vm1-abcde"
    term = target["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ][0]
    assert term["labelSelector"]["matchLabels"] == {"kubevirt.io/created-by": "vmi-uid"}


def test_migrations_as_virtctl_harvester_and_the_evacuation_controller_write_them() -> None:
    plain = render_migration("ns", "vm1")
    assert plain["metadata"]["generateName"] == "vm1-"
    assert plain["metadata"]["labels"] == {"kubevirt.io/vmi-name": "vm1"}
    assert plain["metadata"]["finalizers"] == ["kubevirt.io/migrationJobFinalize"]
    evacuation = render_migration("ns", "vm1", evacuation_node="node-3")
    assert evacuation["metadata"]["generateName"] == "kubevirt-evacuation-"
    assert evacuation["metadata"]["annotations"] == {"kubevirt.io/evacuationMigration": "node-3"}
    targeted = render_migration("ns", "vm1", target_node="node-2", name="m1")
    assert targeted["metadata"]["name"] == "m1"
    assert targeted["spec"]["addedNodeSelector"] == {"kubernetes.io/hostname": "node-2"}


def test_bad_vm_specs_are_refused_with_the_offending_value() -> None:
    with pytest.raises(ValueError, match="cores"):
        VMSpec("vm1", cores=0)
    with pytest.raises(ValueError, match="4 Gi"):
        VMSpec("vm1", memory="4 Gi")
    with pytest.raises(ValueError, match="unknown KubeVirt version"):
        KubeVirtConfig(kubevirt_version="0.1")


def test_version_gates() -> None:
    old, new = KubeVirtConfig(kubevirt_version="0.54"), KubeVirtConfig(kubevirt_version="1.6")
    assert not old.quota_condition and new.quota_condition
    assert not old.migration_status_details and new.migration_status_details
    assert KubeVirtConfig(kubevirt_version="0.59").quota_condition


def test_a_refused_start_raises_only_when_checked() -> None:
    refused = VMStart("ns", "vm1", "uid", None, None, refusal="exceeded quota: default-x")
    assert not refused.started
    with pytest.raises(StartRefused, match="exceeded quota"):
        refused.check()
    started = VMStart("ns", "vm1", "uid", "virt-launcher-vm1-abcde", "n0")
    assert started.check() is started


# Records -----------------------------------------------------------------------------------------


def record(clock: FakeClock, uid: str = "u1") -> MigrationRecord:
    return MigrationRecord("ns", "m1", uid, "vm1", Moment.now(clock))


def test_blocked_seconds_run_from_the_first_refusal_to_admission() -> None:
    clock = FakeClock()
    entry = record(clock)
    assert entry.blocked_seconds == 0.0
    clock.step(1)
    entry.note_refusal("exceeded quota: a", Moment.now(clock))
    clock.step(4)
    entry.note_refusal("exceeded quota: a", Moment.now(clock))
    assert entry.blocked_seconds is None  # still blocked
    clock.step(2.5)
    entry.admitted = Moment.now(clock)
    assert entry.blocked_seconds == pytest.approx(6.5)
    assert entry.refusals == 2 and entry.refusal_messages == ["exceeded quota: a"]


QUOTA_CONFLICT = (
    'Error creating pod: Operation cannot be fulfilled on resourcequotas "default-quota": '
    "the object has been modified; please apply your changes to the latest version and try again"
)


def test_a_target_pod_create_lost_to_a_quota_conflict_is_a_stall_not_a_refusal() -> None:
    clock = FakeClock()
    entry = record(clock)
    note_create_failures(entry, QUOTA_CONFLICT, 1, Moment.now(clock))
    clock.step(50)
    assert entry.stalled_seconds is None, "still waiting for its target pod"
    note_create_failures(
        entry, 'Error creating pod: pods "t" is forbidden: exceeded quota: q', 2, Moment.now(clock)
    )
    clock.step(3)
    entry.admitted = Moment.now(clock)
    assert (entry.failed_creates, entry.refusals) == (1, 2)
    assert entry.stalled_seconds == pytest.approx(53)
    assert entry.blocked_seconds == pytest.approx(3)
    assert entry.failed_create_messages == [QUOTA_CONFLICT.removeprefix("Error creating pod: ")]
    assert entry.as_dict()["failedCreates"] == 1


@pytest.mark.parametrize(
    "message",
    [
        "Error creating a Migration: admission webhook denied the request",
        "Error creating attachment pod: pods is forbidden",
        "Error creating a PodDisruptionBudget: the server is unavailable",
        'Error creating attachment pod: pods "hp-volume-x" is forbidden: exceeded quota: q',
    ],
)
def test_a_failed_create_event_that_is_not_the_target_pods_counts_for_nothing(message: str) -> None:
    clock = FakeClock()
    entry = record(clock)
    note_create_failures(entry, message, 3, Moment.now(clock))
    assert (entry.failed_creates, entry.refusals) == (0, 0)
    assert entry.stalled_seconds == 0.0


def test_a_conflict_and_a_refusal_folded_into_combined_events_still_count() -> None:
    clock = FakeClock()
    entry = record(clock)
    combined = "(combined from similar events): "
    note_create_failures(entry, combined + QUOTA_CONFLICT, 2, Moment.now(clock))
    note_create_failures(
        entry, combined + "Error creating pod: exceeded quota: q", 1, Moment.now(clock)
    )
    assert (entry.failed_creates, entry.refusals) == (2, 1)


def test_refusal_messages_are_capped_but_counted() -> None:
    clock = FakeClock()
    entry = record(clock)
    for index in range(MAX_REFUSAL_MESSAGES + 5):
        entry.note_refusal(f"exceeded quota: pod {index}", Moment.now(clock))
    assert entry.refusals == MAX_REFUSAL_MESSAGES + 5
    assert len(entry.refusal_messages) == MAX_REFUSAL_MESSAGES


async def test_waiting_for_all_migrations_on_a_fake_clock() -> None:
    clock = FakeClock()
    log = MigrationLog(clock)
    entry = log.add(record(clock))
    waiter = asyncio.ensure_future(log.wait_all_finished(timeout=10))
    await clock.advance(5)
    assert not waiter.done()
    entry.outcome, entry.finished = Outcome.SUCCEEDED, Moment.now(clock)
    log.changed()
    await clock.advance(0)
    assert waiter.done() and waiter.result() is True
    assert log.summary()[0]["outcome"] == "Succeeded"

    second = log.add(record(clock, uid="u2"))
    timed_out = asyncio.ensure_future(log.wait_all_finished(timeout=3))
    await clock.advance(3)
    assert timed_out.done() and timed_out.result() is False
    assert second in log.unfinished()


async def test_waiting_for_source_pods_too() -> None:
    clock = FakeClock()
    log = MigrationLog(clock)
    entry = log.add(record(clock))
    entry.outcome, entry.finished = Outcome.SUCCEEDED, Moment.now(clock)
    assert await log.wait_all_finished(timeout=0.0)
    waiter = asyncio.ensure_future(log.wait_all_finished(timeout=5, source_pods_gone=True))
    await clock.advance(1)
    assert not waiter.done()
    entry.source_pod_gone = Moment.now(clock)
    log.changed()
    await clock.advance(0)
    assert waiter.result() is True


def test_a_pod_grace_of_zero_is_kept_and_an_unset_one_is_kubernetes_default() -> None:
    assert pod_grace_seconds({"spec": {"terminationGracePeriodSeconds": 0}}) == 0
    assert pod_grace_seconds({"spec": {"terminationGracePeriodSeconds": 45}}) == 45
    assert pod_grace_seconds({"spec": {}}) == 30
    assert pod_grace_seconds({}) == 30


def test_a_long_vm_name_gets_a_hostname_the_launcher_pod_may_carry() -> None:
    """The real virt-controller's launcher pod of a 75-character VM with that name as hostname is
    refused by the API server (spec.hostname and a label at most 63)."""
    long_name = "a-very-long-name-exceeds-the-63-length-and-it-reports-error-in-old-version"
    cut = hostname(long_name)
    assert len(cut) <= MAX_HOSTNAME and long_name.startswith(cut) and not cut.endswith("-")
    assert hostname("vm1") == "vm1"
    assert hostname("web.example") == "web"


def test_the_seed_pace_of_virt_handler_is_the_walk_s_node_side() -> None:
    """The real virt-controller's node side (HandlerTimings) runs at the same v1.2.1 seed pace as
    the simulator's walk: 1 s hand-off, 1 s to TargetReady, 5 s of Running, the source pod gone
    31 s after success, a failed target 5 s, an abort 1 s."""
    from harvester_quota.testbench.sim.kubevirt.handler import HandlerTimings

    assert HandlerTimings.like_v121_seed() == HandlerTimings(
        preparing_target=1.0,
        target_ready=1.0,
        migration=5.0,
        source_shutdown=31.0,
        target_exit=5.0,
        abort=1.0,
    )
