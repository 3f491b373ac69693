"""The scale run in the suite, at a third of `make scale SIZE=tiny` (SUITE_NAMESPACES): it
checks counts (every migration done, no drift, no stale annotation, every room seen; the
baseline's migrations done without a quota write; the API server's 409s and our writes by kind
read), never timings; `make scale` measures. The headroom arm is left out here (it added 35 s to
the run, measured loaded); its plan and namespaces are tests/unit/test_scale_arms.py's. The
failover arm (`--failover`) is left out too (35 s of the suite): what it counts is
tests/unit/test_scale_failover.py's, a standby that wins the Lease raising the room a migration
needs is test_warm_standby.py's, and a leader killed mid-migration replaced without leaking room
is test_controller_process.py's."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pytest
from harvester_quota.generic.client import ApiClient
from harvester_quota.testbench.localcluster import ClusterInfo
from harvester_quota.testbench.scale.plan import PRESETS
from harvester_quota.testbench.scale.run import ScaleOptions, ScaleRun

pytestmark = pytest.mark.integration

SUITE_NAMESPACES = (4, 2, 2)
"""The tiny preset's shape at a third of its VMs (8 and their 8 twins, not 24 and 24): two
namespace sizes, so two per-size steps and a drain wave over three namespaces."""
SUITE_PER_SIZE = 2
"""Two migrations at once in one namespace: they share its quota's room."""
SUITE_IN_FLIGHT = 4
"""The drain wave: migrations in every namespace at once, two in the largest."""


async def test_a_small_scale_run_finishes_every_migration_and_leaves_every_quota_at_its_base(
    kubevirt_cluster: ClusterInfo, kubevirt_api: ApiClient, tmp_path: Path
) -> None:
    plan = dataclasses.replace(
        PRESETS["tiny"],
        namespaces=SUITE_NAMESPACES,
        per_size=SUITE_PER_SIZE,
        in_flight=SUITE_IN_FLIGHT,
        prefix=f"scale-{uuid.uuid4().hex[:4]}-",
    )
    run = ScaleRun(
        kubevirt_api,
        kubevirt_cluster,
        plan,
        tmp_path,
        ScaleOptions(
            headroom=False, quiet_timeout=0, delete_namespaces=True, say=lambda _line: None
        ),
    )
    report = await run.run()

    assert report.vms_running == 2 * plan.vms, "the plan's VMs and the baseline's twins"
    assert [s.name for s in report.steps] == [s.name for s in plan.steps()]
    for step in report.steps:
        assert step.succeeded == step.migrations, step.to_json()
        # Every quota was closed to its usage: each migration needed, and got, a raise.
        assert step.not_raised == 0, step.to_json()
        assert step.quota_writes >= 1, step.to_json()
        assert step.drift == 0 and step.stale == 0, step.to_json()
        assert len(step.succeeded_after) == step.migrations, step.to_json()
        assert step.writes.get("spec", 0) >= 1, "our raises, counted by kind as sent"
        assert step.run_namespace_writes, "the audit log counts them in the run's namespaces"
        assert step.pod_create_409 is not None, "the API server's /metrics was read"
        assert step.pod_create_409 >= step.conflict_events, step.to_json()
        # Each migration's timeline from the audit log: its raise and its target pod found.
        assert step.timeline_counts["migrations"] == step.migrations, step.to_json()
        for hop in ("created → raised", "raised → status.hard", "created → admitted"):
            assert len(step.timeline[hop]) == step.migrations, (hop, step.to_json())
    # The same steps in the twin namespaces, which hold no quota: every migration succeeded and
    # the controller wrote no quota for them.
    assert [s.name for s in report.baseline_steps] == [s.name for s in plan.steps()]
    for step in report.baseline_steps:
        assert step.succeeded == step.migrations, step.to_json()
        assert step.quota_writes == 0 and step.latencies == (), step.to_json()
        assert len(step.target_admitted) == step.migrations, step.to_json()
        # Nothing migrates in the quota namespaces meanwhile: no write of ours there (counted
        # by namespace: another module's namespace on the session's cluster does not count).
        assert step.run_namespace_writes == 0, step.to_json()
        assert len(step.timeline["created → admitted"]) == step.migrations, step.to_json()
        assert "created → raised" not in step.timeline, "no quota, no raise"
    # Each migration pairs with its no-quota twin (bench/scaleruns.py's extra wait): the same
    # keys in both arms, one a migration, each with its Succeeded time.
    for step, twin in zip(report.steps, report.baseline_steps, strict=True):
        assert len(step.by_twin) == step.migrations and set(step.by_twin) == set(twin.by_twin)
        assert all(
            t.succeeded is not None for t in [*step.by_twin.values(), *twin.by_twin.values()]
        )
    assert len(report.to_json()["baseline_ratios"]) == len(report.steps)
    assert len(report.to_json()["arms"]) == 2 * len(report.steps), "ours and no quota, per step"
    assert report.drift == {} and report.stale == {}
    assert report.all_done
