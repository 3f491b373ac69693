"""The seconds flags' argparse types (generic/commandline.py): finite, and above 0 or not below it."""

from __future__ import annotations

import argparse

import pytest
from harvester_quota.generic.commandline import non_negative_seconds, positive_seconds


@pytest.mark.parametrize("text", ["0", "0.5", "30", "1e3"])
def test_non_negative_seconds_takes_zero_and_more(text: str) -> None:
    assert non_negative_seconds(text) == float(text)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("-1", "must be 0 or more seconds, finite"),
        ("inf", "must be 0 or more seconds, finite"),
        ("nan", "must be 0 or more seconds, finite"),
        ("soon", "not a number of seconds"),
    ],
)
def test_non_negative_seconds_refuses_the_rest_saying_why(text: str, says: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=says):
        non_negative_seconds(text)


@pytest.mark.parametrize("text", ["0", "-5", "inf", "-inf", "nan"])
def test_positive_seconds_refuses_zero_negatives_and_non_finite_alike(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="must be more than 0 seconds, finite"):
        positive_seconds(text)
    assert positive_seconds("0.25") == 0.25
