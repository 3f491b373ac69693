"""How our processes log: plain text for a terminal, JSON lines for a log pipeline, and the
structured fields (a migration's namespace and VM) both carry.

A log call passes its fields as ``extra`` (``log.info("...", extra=fields(namespace=ns, vm=vm))``);
the record then holds them as attributes. `JsonFormatter` writes each as a key of the line's
object beside time, level, logger and message; `TextFormatter` appends them as ``key=value``
after the message, so a grep for ``vm=db-0`` finds a VM's lines in either format.

Verbosity is klog's ``-v N`` reduced to what Python's levels can say: 0 is INFO, 1 turns on
our own DEBUG lines, 2 and more also the libraries' (aiohttp, asyncio, the kubernetes package).
"""

from __future__ import annotations

import datetime
import logging
import sys
from collections.abc import Iterator
from typing import Any, Final, Literal, TextIO

import orjson

LogFormat = Literal["text", "json"]
LOG_FORMATS: Final = ("text", "json")

OUR_LOGGER: Final = "harvester_quota"
"""The import package's logger: `-v 1` opens DEBUG on it and what is below it only."""

_STANDARD_ATTRIBUTES: Final = frozenset(
    vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)).keys()
    | {"message", "asctime", "taskName"}
)
"""A LogRecord's own attributes: whatever else a record holds came in through ``extra``."""


def fields(**values: Any) -> dict[str, Any]:
    """The ``extra`` of a log call: the given fields without those that are None (a VM not
    known yet is left out rather than written as null)."""
    return {key: value for key, value in values.items() if value is not None}


def migration_fields(namespace: str | None, vm: str | None, **more: Any) -> dict[str, Any]:
    """The ``extra`` of a log line about one migration: its namespace and VM (the VMI's name,
    which is the VM's), then any further fields; None values are left out."""
    return fields(namespace=namespace, vm=vm, **more)


def extra_fields(record: logging.LogRecord) -> Iterator[tuple[str, Any]]:
    """The fields a log call added to `record` through ``extra``, in the order it gave them."""
    for key, value in vars(record).items():
        if key not in _STANDARD_ATTRIBUTES and not key.startswith("_"):
            yield key, value


class TextFormatter(logging.Formatter):
    """``<time> <LEVEL> <logger>: <message> key=value ...``; a value with a space is quoted."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        appended = " ".join(f"{key}={_text_value(value)}" for key, value in extra_fields(record))
        if not appended:
            return line
        head, newline, rest = line.partition("\n")  # a traceback stays below the fields
        return f"{head} {appended}{newline}{rest}"


def _text_value(value: Any) -> str:
    text = ",".join(map(str, value)) if isinstance(value, list | tuple | set) else str(value)
    return orjson.dumps(text).decode() if not text or any(c.isspace() for c in text) else text


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (RFC 3339, UTC, milliseconds), ``level``, ``logger``,
    ``message``, then the ``extra`` fields as keys (a field named as one of those four is
    prefixed with ``field_`` rather than overwrite it), and ``exception`` with the traceback
    when there is one. A value JSON cannot hold is written as its str()."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _rfc3339(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in extra_fields(record):
            line[f"field_{key}" if key in line else key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(line, default=str).decode()


def _rfc3339(created: float) -> str:
    moment = datetime.datetime.fromtimestamp(created, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def formatter(log_format: LogFormat) -> logging.Formatter:
    """The formatter of `log_format`; ValueError names an unknown one."""
    if log_format == "json":
        return JsonFormatter()
    if log_format == "text":
        return TextFormatter()
    raise ValueError(f"unknown log format {log_format!r}: expected one of {', '.join(LOG_FORMATS)}")


class StderrHandler(logging.StreamHandler[TextIO]):
    """A StreamHandler on the process's standard error as it is when a line is written, not as
    it was when the handler was made (as logging's own last-resort handler does).

    A command line run in-process (a test calling `main`, a second command line in one process)
    may configure logging while sys.stderr is a stream someone else later swaps out and closes
    (pytest's capture of one test); a handler holding that stream would fail every later line
    with "I/O operation on closed file", and logging would print a traceback per line into
    whatever sys.stderr is then. In a process whose stderr never changes, this is a plain
    StreamHandler on stderr."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self) -> TextIO:
        """sys.stderr now."""
        return sys.stderr

    @stream.setter
    def stream(self, _stream: TextIO) -> None:
        """Kept for StreamHandler's API (`setStream`); the handler always writes to sys.stderr
        as it is then, so a stream given here is not kept."""


def configure(
    log_format: LogFormat = "text", verbosity: int = 0, stream: TextIO | None = None
) -> logging.Handler:
    """Sends every log line to `stream` (stderr by default, as it is when each line is written:
    `StderrHandler`) in `log_format`, replacing the root logger's handlers, at the levels
    `verbosity` says (module docstring); returns the handler. Calling it again reconfigures (a
    test, a second command line in one process)."""
    handler = logging.StreamHandler(stream) if stream is not None else StderrHandler()
    handler.setFormatter(formatter(log_format))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbosity >= 2 else logging.INFO)
    ours = logging.getLogger(OUR_LOGGER)
    ours.setLevel(logging.DEBUG if verbosity >= 1 else logging.NOTSET)
    return handler
