"""The real-node tests run with `make test` and `make test-realnode` (root, Debian packages,
kubelet and the image built by `make node-bin`, which both run first); elsewhere, or run by
pytest alone, they are skipped with the reason."""

from __future__ import annotations

import os

import pytest
from harvester_quota.testbench.localcluster import realnode

ENV_REAL_NODE = "HARVESTER_QUOTA_REAL_NODE"
"""Set to 1 by `make test` and `make test-realnode`, after `make node-bin` built what the node
needs."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skips every real-node test unless asked for, or when this machine cannot run one."""
    here = os.path.dirname(__file__)
    reason = None
    if os.environ.get(ENV_REAL_NODE) != "1":
        reason = (
            f"the real-node tests run with `make test` or `make test-realnode` ({ENV_REAL_NODE}=1)"
        )
    else:
        reason = realnode.missing_requirements()
    if reason is None:
        return
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.skip(reason=reason))
