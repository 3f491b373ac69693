"""Migration phases and the walk from Scheduling to Succeeded (pure, time passed in).

KubeVirt's migration controller moves a VirtualMachineInstanceMigration through
Pending -> Scheduling (target pod created) -> Scheduled (target pod ready) -> PreparingTarget
(handed off to virt-handler) -> TargetReady -> Running -> Succeeded, each step gated by what the
pods and virt-handler report. Here virt-handler's share is a configurable duration per step, and
`next_step` decides, from the phase, when it was entered and now, whether to advance or how long to
wait. Pending is not walked here: leaving it needs the target pod, which quota may refuse.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final


class Phase(enum.StrEnum):
    """VirtualMachineInstanceMigration status.phase."""

    UNSET = ""
    PENDING = "Pending"
    SCHEDULING = "Scheduling"
    SCHEDULED = "Scheduled"
    PREPARING_TARGET = "PreparingTarget"
    TARGET_READY = "TargetReady"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"

    @classmethod
    def parse(cls, value: object) -> Phase:
        """The phase for a status value; anything unknown is treated as not started (unset)."""
        try:
            return cls(str(value or ""))
        except ValueError:
            return cls.UNSET


FINAL: Final = frozenset({Phase.SUCCEEDED, Phase.FAILED})
RUNNING_PHASES: Final = frozenset(
    {
        Phase.SCHEDULING,
        Phase.SCHEDULED,
        Phase.PREPARING_TARGET,
        Phase.TARGET_READY,
        Phase.RUNNING,
    }
)
"""VirtualMachineInstanceMigration.IsRunning(): counted against the parallel-migration limits."""
HANDED_OFF: Final = frozenset({Phase.PREPARING_TARGET, Phase.TARGET_READY, Phase.RUNNING})
"""Phases in which virt-handler owns the migration: an abort goes through the VMI's status."""


@dataclass(frozen=True)
class StepTimings:
    """Base of the dataclasses of step durations: every field must be >= 0, checked when built."""

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if value < 0:
                raise ValueError(f"{type(self).__name__}.{name} must be >= 0, not {value!r}")


@dataclass(frozen=True)
class MigrationTimings(StepTimings):
    """How long each step takes, in seconds of the simulator's clock (fast defaults for tests).

    - `scheduling`: Scheduling -> Scheduled once the target pod is ready (the launcher starting);
    - `scheduled`: Scheduled -> PreparingTarget (virt-controller hands off to virt-handler);
    - `preparing_target`: PreparingTarget -> TargetReady (the target virt-handler prepares);
    - `target_ready`: TargetReady -> Running (the source starts sending memory);
    - `running`: Running -> Succeeded, the migration itself (a VMSpec may override it);
    - `source_pod_linger`: Succeeded -> the source pod's deletion request;
    - `source_pod_grace_seconds`: that deletion's grace period: the source pod keeps counting
      against the quota until it is gone (about 31 s in the v1.2.1 seed);
    - `abort_duration`: abort requested while handed off -> virt-handler reports it aborted;
    - `failed_target_linger`: an aborted or failed migration's target pod stays that long before it
      is deleted (with `target_pod_grace_seconds`);
    - `limit_retry`: a migration held back by a parallel limit is looked at again after this
      (KubeVirt: 5 s); `active_pods_retry`: likewise while the VMI still has two pods (1 s).
    """

    scheduling: float = 0.1
    scheduled: float = 0.1
    preparing_target: float = 0.1
    target_ready: float = 0.1
    running: float = 0.5
    source_pod_linger: float = 0.0
    source_pod_grace_seconds: int = 1
    abort_duration: float = 0.1
    failed_target_linger: float = 1.0
    target_pod_grace_seconds: int = 1
    limit_retry: float = 5.0
    active_pods_retry: float = 1.0

    @classmethod
    def like_v121_seed(cls) -> MigrationTimings:
        """The v1.2.1 seed's pace: ~13 s from the migration object to Running (launcher start),
        5 s of Running, the source pod gone ~31 s after Succeeded."""
        return cls(
            scheduling=10.0,
            scheduled=1.0,
            preparing_target=1.0,
            target_ready=1.0,
            running=5.0,
            source_pod_linger=0.0,
            source_pod_grace_seconds=31,
            abort_duration=1.0,
            failed_target_linger=5.0,
            target_pod_grace_seconds=31,
        )

    def step(self, phase: Phase, migration_duration: float | None = None) -> float | None:
        """How long `phase` lasts before the walk moves on (None: not a timed step)."""
        durations = {
            Phase.SCHEDULING: self.scheduling,
            Phase.SCHEDULED: self.scheduled,
            Phase.PREPARING_TARGET: self.preparing_target,
            Phase.TARGET_READY: self.target_ready,
            Phase.RUNNING: self.running if migration_duration is None else migration_duration,
        }
        return durations.get(phase)


NEXT_PHASE: Final = {
    Phase.SCHEDULING: Phase.SCHEDULED,
    Phase.SCHEDULED: Phase.PREPARING_TARGET,
    Phase.PREPARING_TARGET: Phase.TARGET_READY,
    Phase.TARGET_READY: Phase.RUNNING,
    Phase.RUNNING: Phase.SUCCEEDED,
}


@dataclass(frozen=True)
class Advance:
    """Move to `phase` now."""

    phase: Phase


@dataclass(frozen=True)
class Wait:
    """Look again in `seconds`."""

    seconds: float


@dataclass(frozen=True)
class Blocked:
    """Nothing to do until something else changes (an event will bring the migration back)."""

    reason: str


Step = Advance | Wait | Blocked


def next_step(
    phase: Phase,
    *,
    entered_at: float,
    now: float,
    timings: MigrationTimings,
    target_pod_ready: bool,
    migration_duration: float | None = None,
) -> Step:
    """The walk's decision for a migration in `phase` since `entered_at` (monotonic seconds).

    Scheduling waits for the target pod to be ready (its duration counts from entering the phase);
    the other timed phases only wait out their duration. Pending, Succeeded and Failed are not
    walked.
    """
    duration = timings.step(phase, migration_duration)
    if duration is None:
        return Blocked(f"phase {phase.value or 'unset'} is not walked by time")
    if phase is Phase.SCHEDULING and not target_pod_ready:
        return Blocked("target pod is not ready yet")
    remaining = entered_at + duration - now
    if remaining > 0:
        return Wait(remaining)
    return Advance(NEXT_PHASE[phase])
