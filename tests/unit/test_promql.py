"""The test bench's PromQL evaluator against results Prometheus documents or computes: its
increase() extrapolation, set operators' matching, absent()'s labels, staleness, one-to-one
matching, and a loud refusal of what it does not implement."""

from __future__ import annotations

import pytest
from harvester_quota.testbench.promql import (
    Evaluator,
    SeriesDatabase,
    Target,
    Unsupported,
    extrapolated_increase,
    parse,
    parse_duration,
)

MINUTE = 60.0


def load(db: SeriesDatabase, series: dict[str, str], step: float, values: list[float]) -> None:
    """Prometheus' test `load <step>` line: `series` (name{labels}) at 0, step, 2*step..."""
    name, _, rest = series.partition("{")
    labels = dict(pair.split("=") for pair in rest.rstrip("}").split(",") if pair)
    for i, value in enumerate(values):
        db.append(
            {"__name__": name, **{k: v.strip('"') for k, v in labels.items()}}, i * step, value
        )


def values(evaluator: Evaluator, expr: str, at: float) -> dict[tuple[tuple[str, str], ...], float]:
    return {s.labels: s.value for s in evaluator.vector(expr, at)}


def test_increase_of_a_counter_from_zero_over_its_whole_window_is_prometheus_own_result() -> None:
    """Prometheus' functions test: http_requests 0+10x10 loaded every 5m; increase()[50m] at 50m
    is 100 (with the left-open window the sample at 0 falls out and the counter's zero point
    bounds the extrapolation back)."""
    db = SeriesDatabase()
    load(db, 'http_requests{path="/foo"}', 5 * MINUTE, [10.0 * i for i in range(11)])
    assert values(Evaluator(db), "increase(http_requests[50m])", 50 * MINUTE) == {
        (("path", "/foo"),): pytest.approx(100.0)
    }


def test_increase_extrapolates_to_a_window_end_within_one_point_one_intervals() -> None:
    # 10..14 every minute from 1m: 1m to the window's start (< 1.1 intervals) is extrapolated
    # to, the zero point (10 minutes back) is further: 4 * (4m + 1m) / 4m.
    points = [(60.0 * i, 9.0 + i) for i in range(1, 6)]
    assert extrapolated_increase(points, 0.0, 300.0) == pytest.approx(5.0)


def test_increase_extrapolates_by_half_an_interval_where_the_series_starts_late() -> None:
    # 5..8 every 30s from 200s in (0, 300]: 200s from the start is beyond 33s, so 15s only;
    # 10s to the end is within it: 3 * (90 + 15 + 10) / 90.
    points = [(200.0, 5.0), (230.0, 6.0), (260.0, 7.0), (290.0, 8.0)]
    assert extrapolated_increase(points, 0.0, 300.0) == pytest.approx(3 * 115 / 90)


def test_increase_adds_a_reset_back_and_never_extrapolates_below_zero() -> None:
    # 5, 8, reset, 2, 4: 4 - 5 + 8 = 7, extrapolated by a minute at each end over 3 minutes.
    points = [(60.0, 5.0), (120.0, 8.0), (180.0, 2.0), (240.0, 4.0)]
    assert extrapolated_increase(points, 0.0, 300.0) == pytest.approx(7 * 300 / 180)
    from_zero = [(60.0 * i, float(i - 1)) for i in range(1, 6)]
    assert extrapolated_increase(from_zero, 0.0, 300.0) == pytest.approx(4.0)


def test_increase_needs_two_samples_in_its_window() -> None:
    db = SeriesDatabase()
    load(db, "c_total{}", MINUTE, [3.0])
    assert Evaluator(db).vector("increase(c_total[15m])", MINUTE) == []


def test_or_adds_the_right_sides_label_sets_the_left_lacks_ignoring_the_name() -> None:
    db = SeriesDatabase()
    load(db, 'a{ns="x"}', MINUTE, [1.0])
    load(db, 'b{ns="x"}', MINUTE, [2.0])
    load(db, 'b{ns="y"}', MINUTE, [3.0])
    found = {(s.get("__name__"), s.get("ns"), s.value) for s in Evaluator(db).vector("a or b", 0)}
    assert found == {("a", "x", 1.0), ("b", "y", 3.0)}


def test_unless_offset_finds_the_series_born_in_the_window() -> None:
    """The refusal rule's second branch: a counter present now and not 15 minutes ago."""
    db = SeriesDatabase()
    load(db, 'refused_total{namespace="old"}', MINUTE, [1.0] * 20)
    db.append({"__name__": "refused_total", "namespace": "new"}, 19 * MINUTE, 1.0)
    expr = "refused_total unless refused_total offset 15m"
    found = Evaluator(db).vector(expr, 19 * MINUTE)
    assert [s.get("namespace") for s in found] == ["new"]


def test_and_keeps_the_left_elements_with_a_match_on_the_right() -> None:
    db = SeriesDatabase()
    load(db, 'a{ns="x"}', MINUTE, [1.0])
    load(db, 'a{ns="y"}', MINUTE, [1.0])
    load(db, 'b{ns="y"}', MINUTE, [5.0])
    assert [(s.get("ns"), s.value) for s in Evaluator(db).vector("a and b", 0)] == [("y", 1.0)]


def test_absent_is_labelled_by_its_selectors_single_equality_matchers() -> None:
    """Prometheus' documented results: absent(nonexistent{job="myjob"}) is {job="myjob"} 1;
    a regex matcher gives no label; absent(sum(...)) is {} 1; a present series gives nothing."""
    db = SeriesDatabase()
    load(db, 'present{job="j"}', MINUTE, [0.0])
    evaluator = Evaluator(db)
    assert values(evaluator, 'absent(nonexistent{job="myjob"})', 0) == {(("job", "myjob"),): 1.0}
    regex = 'absent(nonexistent{job="myjob",instance=~".*"})'
    assert values(evaluator, regex, 0) == {(("job", "myjob"),): 1.0}
    assert values(evaluator, 'absent(sum(nonexistent{job="myjob"}))', 0) == {(): 1.0}
    assert values(evaluator, 'absent(present{job="j"})', 0) == {}
    assert values(evaluator, 'absent(present{job="j"} == 1)', 0) == {(): 1.0}


def test_a_failed_scrape_ends_the_targets_series_at_once_and_writes_up_0() -> None:
    db = SeriesDatabase()
    target = Target("ns/hq", "10.0.0.1:8080", {"pod": "hq-0"})
    db.record(0.0, target, "harvester_quota_leader 1.0\n")
    db.record(30.0, target, None)
    evaluator = Evaluator(db)
    assert values(evaluator, "harvester_quota_leader", 0.0) != {}
    assert values(evaluator, "harvester_quota_leader", 30.0) == {}
    (up,) = evaluator.vector('up{job="ns/hq"}', 30.0)
    assert up.value == 0.0 and up.get("pod") == "hq-0"


def test_a_series_without_a_new_point_is_seen_for_five_minutes_only() -> None:
    db = SeriesDatabase()
    db.append({"__name__": "g"}, 0.0, 1.0)
    evaluator = Evaluator(db)
    assert evaluator.vector("g", 299.0) and not evaluator.vector("g", 300.0)


def test_a_scrapes_own_labels_win_over_the_targets() -> None:
    """honorLabels, as the chart's PodMonitors set it: a tenant namespace stays the series'."""
    db = SeriesDatabase()
    target = Target("hq/c", "i", {"namespace": "harvester-system"})
    db.record(0.0, target, 'harvester_quota_target_pods_refused_total{namespace="t1"} 1.0\n')
    (sample,) = Evaluator(db).vector("harvester_quota_target_pods_refused_total", 0.0)
    assert sample.get("namespace") == "t1" and sample.get("job") == "hq/c"


def test_comparison_filters_and_keeps_the_left_sample_arithmetic_drops_the_name() -> None:
    db = SeriesDatabase()
    load(db, 'expiry{pod="a"}', MINUTE, [100.0])
    load(db, 'expiry{pod="b"}', MINUTE, [0.0])
    load(db, 'start{pod="a"}', MINUTE, [0.0])
    evaluator = Evaluator(db)
    assert values(evaluator, "expiry > 0", 0) == {(("__name__", "expiry"), ("pod", "a")): 100.0}
    assert values(evaluator, "expiry - start", 0) == {(("pod", "a"),): 100.0}
    assert values(evaluator, "1 < expiry", 0) == {(("__name__", "expiry"), ("pod", "a")): 100.0}
    assert evaluator.evaluate("time() + 2 * 3", 10.0) == 16.0


def test_one_to_one_matching_refuses_two_series_of_one_signature() -> None:
    db = SeriesDatabase()
    load(db, 'a{x="1"}', MINUTE, [1.0])
    load(db, 'b{x="1",y="1"}', MINUTE, [1.0])
    load(db, 'c{x="1",y="1"}', MINUTE, [1.0])
    with pytest.raises(ValueError, match="many-to-many"):
        Evaluator(db).vector('a - {__name__=~"b|c"}', 0)


def test_sum_by_groups_by_the_labels_given_and_sums_nothing_to_nothing() -> None:
    db = SeriesDatabase()
    load(db, 'r{namespace="x",pod="1"}', MINUTE, [1.0])
    load(db, 'r{namespace="x",pod="2"}', MINUTE, [2.0])
    load(db, 'r{namespace="y",pod="1"}', MINUTE, [4.0])
    evaluator = Evaluator(db)
    assert values(evaluator, "sum by (namespace) (r)", 0) == {
        (("namespace", "x"),): 3.0,
        (("namespace", "y"),): 4.0,
    }
    assert values(evaluator, "sum(r) by (namespace)", 0) == values(
        evaluator, "sum by (namespace) (r)", 0
    )
    assert values(evaluator, "sum(r)", 0) == {(): 7.0}
    assert values(evaluator, "sum(missing)", 0) == {}


def test_an_alert_fires_only_once_its_condition_held_for_its_for_duration() -> None:
    db = SeriesDatabase()
    target = Target("j", "i")
    for i in range(8):
        db.record(30.0 * i, target, None if i >= 3 else "x 1\n")
    evaluator = Evaluator(db)
    down = 'absent(up{job="j"} == 1)'
    assert evaluator.firing(down, 150.0, hold=120.0) == []  # down since 90 s only
    assert evaluator.firing(down, 210.0, hold=120.0) != []


@pytest.mark.parametrize(
    "expr",
    [
        "rate(x[5m])",
        "x > bool 1",
        "x + on(a) y",
        "x + ignoring(a) y",
        "sum without (a) (x)",
        "avg(x)",
        "x[5m:1m]",
        "x @ 100",
        '"text"',
        "-x",
        "increase(x)",
        "(x)[5m]",
        "1 > 2",
        "x and 1",
    ],
)
def test_an_unsupported_construct_is_refused_by_name(expr: str) -> None:
    with pytest.raises(Unsupported):
        Evaluator(SeriesDatabase()).evaluate(expr, 0.0)


def test_selectors_read_escapes_and_durations_as_prometheus_does() -> None:
    (matcher,) = parse('b{le=~"300|300\\\\.0"}').matchers  # type: ignore[union-attr]
    assert matcher.value == "300|300\\.0"
    assert matcher.matches("300.0") and matcher.matches("300") and not matcher.matches("300x0")
    assert parse_duration("1h30m") == 5400.0
    with pytest.raises(ValueError, match="duration"):
        parse_duration("15")


def test_present_over_time_sees_a_series_through_a_staleness_gap_in_its_window() -> None:
    """A failed scrape ends a series for a moment: `offset` alone then finds nothing there,
    present_over_time over the window still finds the series."""
    db = SeriesDatabase()
    target = Target("j", "i")
    for i in range(10):
        db.record(30.0 * i, target, None if i == 4 else 'c_total{namespace="n"} 1\n')
    evaluator = Evaluator(db)
    assert evaluator.vector("c_total offset 150s", 270.0) == []
    (present,) = evaluator.vector("present_over_time(c_total[150s] offset 150s)", 270.0)
    assert present.value == 1.0 and present.get("namespace") == "n"
    assert present.get("__name__") == ""


def test_groupings_and_selectors_take_comma_lists_with_a_trailing_comma() -> None:
    assert parse('x{a="1", b!="2",}') == parse('x{a="1",b!="2"}')
    assert parse("sum by (a, b,) (x)") == parse("sum by (a,b) (x)")
    assert parse("sum by () (x)").by == ()  # type: ignore[union-attr]
    for missing_comma in ('x{a="1" b="2"}', "sum by (a b) (x)", "sum by (,) (x)"):
        with pytest.raises(Unsupported):
            parse(missing_comma)
