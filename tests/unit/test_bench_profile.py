"""bench/profile.py's reading of py-spy's collapsed stacks: every sample lands in one part,
the first that matches, in PARTS' order."""

from __future__ import annotations

from pathlib import Path

from bench.profile import OTHER, PARTS, collapsed, is_the_leader, shares, table

RAW = """\
<module> (pkg/main.py:3);_drive (pkg/generic/cputime.py:60) 7
<module> (pkg/main.py:3);cpu_timed (pkg/generic/cputime.py:40);QuotaReconciler.reconcile (pkg/controller/resourcequota/resourcequota_controller.py:190);plan_quota (pkg/util/resourcequota/plan.py:300);_room (pkg/util/resourcequota/rooms.py:50) 5
<module> (pkg/main.py:3);QuotaReconciler.reconcile (pkg/controller/resourcequota/resourcequota_controller.py:190);NamespaceReports.export (pkg/controller/resourcequota/reports.py:45) 2
<module> (pkg/main.py:3);Reflector._consume (pkg/generic/reflector.py:300);ZstdCodec.encode (pkg/generic/zstdcodec.py:90) 3

<module> (pkg/main.py:3);something (elsewhere.py:1) 1
"""


def test_each_sample_counts_once_in_the_first_part_that_matches() -> None:
    total, parts = shares(collapsed(RAW.splitlines()))
    assert total == 18
    assert sum(parts.values()) == total
    named = dict(parts)
    assert named["CPU accounting (clock reads, --cpu-accounting)"] == 7
    assert named["room plan (plan_quota)"] == 5, "the plan, though it ran inside a timed handler"
    assert named["rest of the namespace reconcile"] == 2
    assert named["watch streams: decode, store, notify"] == 3
    assert named[OTHER] == 1
    assert list(parts) == [*(name for name, _ in PARTS), OTHER]


def test_the_table_gives_each_part_its_share_of_the_samples() -> None:
    text = table(*shares(collapsed(RAW.splitlines())))
    assert "| room plan (plan_quota) | 5 | 27.8 % |" in text
    assert text.startswith("| part (18 samples) |")


def test_the_profiled_process_is_the_runs_leading_controller_not_a_standby_or_another_run() -> None:
    report = Path("/tmp/run-1/report")
    leader = ["python", "-m", "harvester_quota.main", "run", f"--kubeconfig={report}/work/c.kc"]
    assert is_the_leader([*leader, "--identity=scale-x-a"], report)
    assert not is_the_leader([*leader, "--identity=scale-x-b"], report), "the standby"
    other = [a.replace("run-1", "run-2") for a in leader]
    assert not is_the_leader([*other, "--identity=scale-x-a"], report), "another run's"
