"""Docstrings and comments in pkg/ state contracts, not history: no issue, review or stop
numbers (what a reader cannot look up in the code); the history lives in git and the docs'
design notes."""

from __future__ import annotations

import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "pkg"
HISTORY = re.compile(
    r"\b(?:issue|review|stop|round)s? ?#?\d+|\b(?:first|second|third) review\b|"
    r"\breview (?:finding|major|minor|[Mm]\d)",
    re.IGNORECASE,
)
"""An issue, review or stop by its number ("issue 38", "review 51's", "second review, M1")."""


def test_no_issue_review_or_stop_numbers_in_the_product_or_the_test_bench() -> None:
    found = [
        f"{path.relative_to(PKG)}:{number}: {line.strip()}"
        for path in sorted(PKG.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if HISTORY.search(line)
    ]
    assert found == []


def test_the_pattern_finds_the_forms_history_took() -> None:
    for text in ("see issue 38", "review 51's rule", "(second review, M1)", "stop 50", "review M6"):
        assert HISTORY.search(text), text
    assert not HISTORY.search("harvester/harvester#7464 names the bug")
    assert not HISTORY.search("an AdmissionReview's uid")
