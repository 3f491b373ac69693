"""The command line's parsing (no command is run)."""

from __future__ import annotations

import pytest
from harvester_quota.main import build_parser


@pytest.mark.parametrize(
    "argv",
    [
        ["cluster", "--state-dir", "/tmp/s", "up"],
        ["cluster", "up", "--state-dir", "/tmp/s"],
        ["cluster", "--state-dir", "/tmp/other", "up", "--state-dir", "/tmp/s"],
    ],
    ids=["before the action", "after the action", "after wins"],
)
def test_state_dir_is_accepted_before_or_after_the_action(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert args.state_dir == "/tmp/s"
    assert args.action == "up"


@pytest.mark.parametrize("action", ["build", "up", "down", "status", "env"])
def test_state_dir_defaults_to_none_for_every_action(action: str) -> None:
    assert build_parser().parse_args(["cluster", action]).state_dir is None
