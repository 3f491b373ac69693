"""bench/metricdump.py: which differences of two scenario runs' metric dumps fail the comparison."""

from __future__ import annotations

from pathlib import Path

from bench import metricdump

BEFORE = """\
# HELP harvester_quota_quota_writes_total Writes of managed ResourceQuotas.
# TYPE harvester_quota_quota_writes_total counter
harvester_quota_quota_writes_total{outcome="written",process="controller-1"} 4.0
harvester_quota_quota_writes_total{outcome="conflict",process="controller-1"} 0.0
# HELP harvester_quota_quota_writes_created Writes of managed ResourceQuotas.
# TYPE harvester_quota_quota_writes_created gauge
harvester_quota_quota_writes_created{outcome="written",process="controller-1"} 1.7e+09
# HELP harvester_quota_webhook_seconds Time to answer one admission request.
# TYPE harvester_quota_webhook_seconds histogram
harvester_quota_webhook_seconds_bucket{endpoint="pods",le="0.01",process="webhook"} 3.0
harvester_quota_webhook_seconds_bucket{endpoint="pods",le="+Inf",process="webhook"} 4.0
harvester_quota_webhook_seconds_count{endpoint="pods",process="webhook"} 4.0
harvester_quota_webhook_seconds_sum{endpoint="pods",process="webhook"} 0.03
# HELP harvester_quota_api_requests_total API requests.
# TYPE harvester_quota_api_requests_total counter
harvester_quota_api_requests_total{code="200",process="controller-1",resource="pods",verb="list"} 2.0
"""


def _dirs(tmp_path: Path, after: str) -> tuple[Path, Path]:
    for side, text in (("a", BEFORE), ("b", after)):
        (tmp_path / side / "scenario-x" / "ours").mkdir(parents=True)
        (tmp_path / side / "scenario-x" / "ours" / metricdump.DUMP).write_text(text)
    return tmp_path / "a", tmp_path / "b"


def test_a_judged_series_on_one_side_only_fails_and_is_named(tmp_path: Path) -> None:
    after = BEFORE.replace(
        'harvester_quota_quota_writes_total{outcome="conflict",process="controller-1"} 0.0\n', ""
    )
    code, lines = metricdump.compare_dirs(*_dirs(tmp_path, after))
    assert code == 1
    assert (
        '  series only in A: harvester_quota_quota_writes_total{outcome="conflict",'
        'process="controller-1"}' in lines
    )


def test_a_judged_value_that_differs_fails_with_both_values(tmp_path: Path) -> None:
    after = BEFORE.replace('"controller-1"} 4.0', '"controller-1"} 5.0')
    code, lines = metricdump.compare_dirs(*_dirs(tmp_path, after))
    assert code == 1
    assert any("quota_writes_total" in line and line.endswith(" 4 -> 5") for line in lines)


def test_time_valued_and_timing_dependent_differences_alone_pass(tmp_path: Path) -> None:
    after = (
        BEFORE.replace("1.7e+09", "1.8e+09")  # _created
        .replace('le="0.01",process="webhook"} 3.0', 'le="0.01",process="webhook"} 1.0')
        .replace(
            '_sum{endpoint="pods",process="webhook"} 0.03',
            '_sum{endpoint="pods",process="webhook"} 0.3',
        )
        .replace('verb="list"} 2.0', 'verb="list"} 3.0')  # timing-dependent
        .replace(  # a series of a time-valued family on one side only
            "# HELP harvester_quota_api_requests_total",
            'harvester_quota_webhook_seconds_count{endpoint="namespaces",process="webhook"} 1\n'
            "# HELP harvester_quota_api_requests_total",
        )
    )
    code, lines = metricdump.compare_dirs(*_dirs(tmp_path, after))
    assert code == 0, lines
    assert "  timing-dependent (not judged): 1 values differ, 0 series on one side only" in lines


def test_a_family_exported_on_one_side_only_fails_even_if_time_valued(tmp_path: Path) -> None:
    after = BEFORE + (
        "# HELP harvester_quota_migration_refused_since_timestamp_seconds x\n"
        "# TYPE harvester_quota_migration_refused_since_timestamp_seconds gauge\n"
        'harvester_quota_migration_refused_since_timestamp_seconds{process="controller-1"} 1.7e+09\n'
    )
    code, lines = metricdump.compare_dirs(*_dirs(tmp_path, after))
    assert code == 1
    assert "  family only in B: harvester_quota_migration_refused_since_timestamp_seconds" in lines


def test_no_dump_common_to_both_directories_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert metricdump.compare_dirs(tmp_path / "a", tmp_path / "b")[0] == 2
