"""What every command line of ours does around its subcommands: the common flags, logging, and
turning an expected failure into a message and an exit code.

`harvester-quota` (main.py) and the test bench's `harvester-quota-bench` build their parsers
with `command_parser` and run them with `run_command_line`; a subcommand sets `handler` (the
function that runs it and returns the exit code) with `set_defaults`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

Handler = Callable[[argparse.Namespace], int]


def command_parser(
    prog: str, description: str, version: str
) -> tuple[argparse.ArgumentParser, Any]:
    """A parser with --version and -v/--verbose, and the subparsers its commands are added to."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--version", action="version", version=f"%(prog)s {version}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return parser, parser.add_subparsers(dest="command", required=True)


def run_command_line(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    expected: tuple[type[Exception], ...],
) -> int:
    """Parses `argv`, sets up logging (debug with --verbose) and runs the chosen handler.

    An `expected` error is printed as `<prog>: <error>` with exit code 1, no traceback; Ctrl-C
    exits 130; anything else propagates (a bug shows its traceback).
    """
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    handler: Handler = args.handler
    try:
        return handler(args)
    except expected as error:
        print(f"{parser.prog}: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
