"""Log formats and levels: --log-format text|json, -v N before or after the subcommand, and the
fields (a migration's namespace and VM) both formats carry."""

from __future__ import annotations

import io
import json
import logging
import sys

import pytest
from harvester_quota.generic import logformat
from harvester_quota.generic.commandline import accept_logging_flags_everywhere
from harvester_quota.main import build_parser
from harvester_quota.testbench.cli import build_parser as build_bench_parser


def _log_one(log_format: logformat.LogFormat, **extra: object) -> str:
    stream = io.StringIO()
    logformat.configure(log_format, 0, stream)
    logging.getLogger("harvester_quota.test").warning(
        "target pod %s let through", "p1", extra=extra
    )
    return stream.getvalue()


def test_a_json_log_line_parses_and_carries_time_level_logger_message_and_fields() -> None:
    line = _log_one("json", **logformat.migration_fields("tenant-a", "vm1", migration="vm1-mig"))
    record = json.loads(line)
    assert record["level"] == "WARNING"
    assert record["logger"] == "harvester_quota.test"
    assert record["message"] == "target pod p1 let through"
    assert record["time"].endswith("Z") and "T" in record["time"]
    assert (record["namespace"], record["vm"], record["migration"]) == (
        "tenant-a",
        "vm1",
        "vm1-mig",
    )
    assert line.count("\n") == 1


def test_a_json_line_keeps_a_traceback_in_one_line_under_exception() -> None:
    stream = io.StringIO()
    logformat.configure("json", 0, stream)
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("harvester_quota.test").exception("failed", extra={"namespace": "ns"})
    (line,) = stream.getvalue().splitlines()
    record = json.loads(line)
    assert "ValueError: boom" in record["exception"]
    assert record["namespace"] == "ns"


def test_a_field_named_like_a_json_key_does_not_overwrite_it() -> None:
    record = json.loads(_log_one("json", level="mine"))
    assert (record["level"], record["field_level"]) == ("WARNING", "mine")


def test_a_text_line_appends_the_fields_as_key_value_after_the_message() -> None:
    line = _log_one("text", **logformat.migration_fields("tenant-a", "vm1"))
    assert line.rstrip("\n").endswith(
        "WARNING harvester_quota.test: target pod p1 let through namespace=tenant-a vm=vm1"
    )


def test_a_text_field_with_a_space_is_quoted_and_a_list_joined() -> None:
    line = _log_one("text", why="no room", migrations=["a", "b"])
    assert 'why="no room" migrations=a,b' in line


def test_a_field_that_is_none_is_left_out() -> None:
    assert logformat.migration_fields("tenant-a", None) == {"namespace": "tenant-a"}


def test_the_default_handler_writes_to_stderr_as_it_is_when_a_line_is_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A command line run in-process configures logging while sys.stderr is one test's capture,
    which pytest closes after that test: a later line goes to the stderr of then, whole, with no
    "--- Logging error ---" traceback in its place."""
    then = io.StringIO()
    monkeypatch.setattr(sys, "stderr", then)
    logformat.configure("text", 0)
    then.close()
    now = io.StringIO()
    monkeypatch.setattr(sys, "stderr", now)
    logging.getLogger("harvester_quota.test").warning("written after the first stderr closed")
    assert "Logging error" not in now.getvalue()
    (line,) = now.getvalue().splitlines()
    assert line.endswith("WARNING harvester_quota.test: written after the first stderr closed")


@pytest.mark.parametrize(
    ("verbosity", "ours", "library"),
    [(0, False, False), (1, True, False), (2, True, True)],
    ids=["0: info", "1: our debug", "2: libraries' debug too"],
)
def test_verbosity_opens_debug_for_us_then_for_the_libraries(
    verbosity: int, ours: bool, library: bool
) -> None:
    logformat.configure("text", verbosity, io.StringIO())
    assert logging.getLogger("harvester_quota.controller").isEnabledFor(logging.DEBUG) is ours
    assert logging.getLogger("aiohttp.client").isEnabledFor(logging.DEBUG) is library


@pytest.mark.parametrize(
    "argv",
    [
        ["-v", "2", "--log-format", "json", "explain", "ns"],
        ["explain", "ns", "-v", "2", "--log-format", "json"],
        ["explain", "-v", "2", "--log-format", "json", "-n", "ns"],
        ["preflight", "drain", "n1", "-v", "2", "--log-format", "json"],
        ["run", "--verbose", "2", "--log-format", "json"],
    ],
    ids=["before", "after", "after, before -n", "after a nested command", "run, long flag"],
)
def test_verbosity_and_log_format_are_accepted_before_or_after_the_subcommand(
    argv: list[str],
) -> None:
    args = build_parser().parse_args(argv)
    assert (args.verbose, args.log_format) == (2, "json")


@pytest.mark.parametrize(
    ("argv", "command"),
    [(["-v", "run"], "run"), (["run", "-v"], "run"), (["explain", "-v", "ns"], "explain")],
    ids=["the old on/off form before the command", "after it", "before a positional"],
)
def test_a_bare_v_is_verbosity_1_and_swallows_no_word_after_it(
    argv: list[str], command: str
) -> None:
    args = build_parser().parse_args(argv)
    assert (args.verbose, args.command) == (1, command)
    if command == "explain":
        assert args.namespace == "ns"


def test_no_v_is_verbosity_0_in_text() -> None:
    args = build_parser().parse_args(["run"])
    assert (args.verbose, args.log_format) == (0, "text")


def test_a_value_after_the_subcommand_wins_over_one_before() -> None:
    assert build_parser().parse_args(["-v", "1", "run", "-v", "2"]).verbose == 2


@pytest.mark.parametrize("value", ["-1", "loud"])
def test_a_verbosity_that_is_not_a_whole_number_from_0_is_refused(value: str) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", f"--verbose={value}"])


def test_every_bench_command_takes_the_logging_flags_after_it_without_a_clash() -> None:
    """run_command_line adds them to every subcommand: a bench flag of the same name would make
    argparse raise here, before any command ran."""
    parser = build_bench_parser()
    accept_logging_flags_everywhere(parser)
    args = parser.parse_args(["cluster", "status", "-v", "2", "--log-format", "json"])
    assert (args.verbose, args.log_format) == (2, "json")
