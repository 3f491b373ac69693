"""The image build's commands: each is logged with its output, and a failure names its log."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from harvester_quota.testbench.localcluster import ClusterError, image


def test_a_failed_build_command_names_its_exit_code_and_log_after_logging_its_output(
    tmp_path: Path,
) -> None:
    log = tmp_path / "image.log"

    with pytest.raises(
        ClusterError, match=re.escape(f"`sh -c echo built; exit 4 ...` failed (exit 4); log: {log}")
    ):
        image._run(["sh", "-c", "echo built; exit 4"], log)

    assert log.read_text().splitlines() == ["", "$ sh -c echo built; exit 4", "built"]


def test_a_build_command_reads_the_stdin_it_is_given_in_its_folder(tmp_path: Path) -> None:
    log = tmp_path / "image.log"
    source = tmp_path / "input"
    source.write_text("fed\n")

    with source.open("rb") as stdin:
        image._run(["sh", "-c", "cat; pwd"], log, stdin=stdin.fileno(), cwd=tmp_path)

    assert log.read_text().splitlines()[-2:] == ["fed", str(tmp_path)]
