"""metav1.LabelSelector evaluation, as apimachinery's LabelSelectorAsSelector does it."""

from __future__ import annotations

from typing import Any

import pytest
from harvester_quota.generic.labelselector import LabelSelector, selector_matches

LABELS = {"env": "prod", "tier": "web", "example.com/owner": "team-a"}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        (None, False),
        ({}, True),
        ({"matchLabels": {}}, True),
        ({"matchLabels": {"env": "prod"}}, True),
        ({"matchLabels": {"env": "prod", "tier": "db"}}, False),
        ({"matchLabels": {"example.com/owner": "team-a"}}, True),
        ({"matchLabels": {"missing": ""}}, False),
        ({"matchExpressions": [{"key": "env", "operator": "In", "values": ["dev", "prod"]}]}, True),
        ({"matchExpressions": [{"key": "env", "operator": "In", "values": ["dev"]}]}, False),
        ({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["dev"]}]}, True),
        ({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]}, False),
        ({"matchExpressions": [{"key": "gone", "operator": "NotIn", "values": ["x"]}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "gone", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "gone", "operator": "DoesNotExist"}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, False),
        (
            {
                "matchLabels": {"env": "prod"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["db"]}],
            },
            False,
        ),
    ],
)
def test_selectors_match_as_kubernetes_matches_them(selector: Any, expected: bool) -> None:
    assert selector_matches(selector, LABELS) is expected


def test_no_labels_match_only_selectors_without_positive_requirements() -> None:
    assert selector_matches({}, None) is True
    assert selector_matches({"matchLabels": {"env": "prod"}}, None) is False
    assert selector_matches({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {})


@pytest.mark.parametrize(
    "selector",
    [
        "env=prod",
        {"matchLabels": ["env"]},
        {"matchLabels": {"env": 3}},
        {"matchLabels": {"bad key": "x"}},
        {"matchLabels": {"a/b/c": "x"}},
        {"matchLabels": {"/name": "x"}},
        {"matchLabels": {"env": "not valid!"}},
        {"matchLabels": {"env": "x" * 64}},
        {"matchExpressions": {"key": "env"}},
        {"matchExpressions": ["env"]},
        {"matchExpressions": [{"key": "env", "operator": "Near", "values": ["x"]}]},
        {"matchExpressions": [{"key": "env", "operator": "In", "values": []}]},
        {"matchExpressions": [{"key": "env", "operator": "NotIn"}]},
        {"matchExpressions": [{"key": "env", "operator": "Exists", "values": ["x"]}]},
        {"matchExpressions": [{"key": "env", "operator": "In", "values": "prod"}]},
    ],
)
def test_invalid_selectors_are_value_errors(selector: Any) -> None:
    with pytest.raises(ValueError):
        LabelSelector.parse(selector)
