"""What every command line of ours does around its subcommands: the common flags, logging, and
turning an expected failure into a message and an exit code.

`harvester-quota` (main.py) and the test bench's `harvester-quota-bench` build their parsers
with `command_parser` and run them with `run_command_line`; a subcommand sets `handler` (the
function that runs it and returns the exit code) with `set_defaults`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, get_args

from . import errors, logformat

Handler = Callable[[argparse.Namespace], int]

CONNECTION_ERROR_EXIT = 2
"""The exit code of a command that cannot reach the API server (refused, DNS, TLS, timeout):
kubectl's and argparse's usage code, preflight's "cannot judge"; 1 stays a command's own
"no" (a namespace not found, a config that cannot be loaded)."""


def command_parser(
    prog: str, description: str, version: str
) -> tuple[argparse.ArgumentParser, Any]:
    """A parser with --version, -v/--verbose and --log-format, and the subparsers its commands
    are added to; `run_command_line` adds the logging flags to every subcommand too."""
    parser = CommandParser(prog=prog, description=description)
    parser.add_argument("--version", action="version", version=f"%(prog)s {version}")
    add_logging_flags(parser, verbosity=0, log_format="text")
    return parser, parser.add_subparsers(dest="command", required=True)


def non_negative_seconds(text: str) -> float:
    """An argparse `type`: a finite number of seconds, 0 or more (argparse's error otherwise)."""
    return _seconds(text, zero_allowed=True)


def positive_seconds(text: str) -> float:
    """An argparse `type`: a finite number of seconds above 0 (argparse's error otherwise)."""
    return _seconds(text, zero_allowed=False)


def _seconds(text: str, *, zero_allowed: bool) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    in_range = seconds >= 0 if zero_allowed else seconds > 0  # NaN is in no range
    if not in_range or seconds == float("inf"):
        least = "0 or more" if zero_allowed else "more than 0"
        raise argparse.ArgumentTypeError(f"must be {least} seconds, finite: {text!r}")
    return seconds


VERBOSITY_FLAGS = ("-v", "--verbose")


def bare_verbosity_as_1(argv: Sequence[str]) -> list[str]:
    """`argv` with each -v/--verbose that no number follows written as --verbose=1: the flag
    was on/off (`prog -v run`), and an optional value would swallow the word after it (the
    command, or explain's NAMESPACE). Arguments after `--` are left alone."""
    out: list[str] = []
    for index, word in enumerate(argv):
        if word == "--":
            return [*out, *argv[index:]]
        following = argv[index + 1] if index + 1 < len(argv) else ""
        bare = word in VERBOSITY_FLAGS and not following.isdigit()
        out.append("--verbose=1" if bare else word)
    return out


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser that reads a bare -v as -v 1 (`bare_verbosity_as_1`) before parsing;
    its subcommands' parsers are of this class too (argparse makes them like their parent)."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        given = sys.argv[1:] if args is None else args
        return super().parse_known_args(bare_verbosity_as_1(given), namespace)


def parse_verbosity(text: str) -> int:
    """`-v N`'s N: a whole number from 0; ArgumentTypeError names anything else."""
    try:
        level = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a verbosity (0, 1, 2...): {text!r}") from None
    if level < 0:
        raise argparse.ArgumentTypeError(f"verbosity must be 0 or more: {text!r}")
    return level


def add_logging_flags(
    parser: argparse.ArgumentParser,
    *,
    verbosity: Any = argparse.SUPPRESS,
    log_format: Any = argparse.SUPPRESS,
) -> None:
    """-v/--verbose [N] and --log-format text|json on `parser`. The top-level parser gets the
    defaults; a subcommand's get SUPPRESS, so a value given before the subcommand is kept
    unless given again after it. A bare -v is -v 1 (it was an on/off flag; CommandParser)."""
    parser.add_argument(
        "-v",
        "--verbose",
        dest="verbose",
        type=parse_verbosity,
        default=verbosity,
        metavar="N",
        help="log verbosity: 0 info (default), 1 our debug lines, 2 also the libraries'; "
        "a bare -v is 1",
    )
    parser.add_argument(
        "--log-format",
        choices=get_args(logformat.LogFormat),
        default=log_format,
        help="text (default) or json: one object a line with time, level, logger, message and "
        "the line's fields (namespace, vm, ...)",
    )


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """Every subcommand's parser below `parser`, nested ones (preflight drain) included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                yield child
                yield from _subparsers(child)


def accept_logging_flags_everywhere(parser: argparse.ArgumentParser) -> None:
    """Adds the logging flags to each subcommand below `parser` that lacks them (idempotent):
    `prog run -v 2` as well as `prog -v 2 run`. run_command_line calls it; a parser builder
    calls it too so that its parser, read alone (the docs check), has them."""
    for child in _subparsers(parser):
        if "--log-format" not in child._option_string_actions:
            add_logging_flags(child)


def run_command_line(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    expected: tuple[type[Exception], ...],
) -> int:
    """Parses `argv`, sets up logging (--log-format, -v N; logformat.configure) and runs the
    chosen handler.

    An `expected` error is printed as `<prog>: <error>` with exit code 1, no traceback; an API
    server that cannot be reached (errors.ConnectionFailed: refused, DNS, TLS, timeout) as one
    line `<prog> <command>: cannot reach the API server: <why>` with exit code 2; Ctrl-C exits
    130; anything else propagates (a bug shows its traceback).
    """
    accept_logging_flags_everywhere(parser)
    args = parser.parse_args(argv)
    logformat.configure(args.log_format, args.verbose)
    handler: Handler = args.handler
    try:
        return handler(args)
    except expected as error:
        print(f"{parser.prog}: {error}", file=sys.stderr)
        return 1
    except errors.ConnectionFailed as error:
        print(f"{parser.prog} {args.command}: {connection_failure(error)}", file=sys.stderr)
        return CONNECTION_ERROR_EXIT
    except KeyboardInterrupt:
        return 130


def connection_failure(error: errors.ConnectionFailed) -> str:
    """The one line an operator reads for an API server that cannot be reached: what failed and
    the transport's reason, on one line (a reason spanning lines is joined)."""
    why = " ".join(error.message.split())
    return f"cannot reach the API server: {why}"
