"""Fixtures every test gets.

A command line run in-process (`main([...])`) configures logging as a process would: it replaces
the root logger's handlers (pytest's own among them) and sets levels. Each test gets them back
as they were, so one test's command line neither writes into the next tests' captures nor takes
pytest's log capture and live logging from them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from harvester_quota.generic import logformat


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """The root logger's handlers and level and our logger's level, put back after the test
    (pytest adds and removes the same handler objects at every phase, so they are safe to keep)."""
    root, ours = logging.getLogger(), logging.getLogger(logformat.OUR_LOGGER)
    handlers, root_level, our_level = list(root.handlers), root.level, ours.level
    yield
    root.handlers[:] = handlers
    root.setLevel(root_level)
    ours.setLevel(our_level)
