"""A kubeconfig tokenFile is re-read once a minute, as kubectl does; a failed read keeps the token."""

from __future__ import annotations

from pathlib import Path

from harvester_quota.generic.config import TOKEN_FILE_REREAD, TokenFile, _bearer
from harvester_quota.testbench.clock import FakeClock


def test_rotation_is_picked_up_after_the_period(tmp_path: Path) -> None:
    clock, path = FakeClock(), tmp_path / "token"
    path.write_text("first\n")
    source = TokenFile(path, clock=clock)
    assert source.header() == "Bearer first"
    path.write_text("second")
    clock.step(TOKEN_FILE_REREAD - 1)
    assert source.header() == "Bearer first", "not read again within the period"
    clock.step(1)
    assert source.header() == "Bearer second"


def test_an_unreadable_file_keeps_the_last_token(tmp_path: Path) -> None:
    clock, path = FakeClock(), tmp_path / "token"
    path.write_text("first")
    source = TokenFile(path, clock=clock)
    assert source.header() == "Bearer first"
    path.unlink()
    clock.step(TOKEN_FILE_REREAD)
    assert source.header() == "Bearer first"


def test_no_token_yet_is_no_header(tmp_path: Path) -> None:
    assert TokenFile(tmp_path / "missing", clock=FakeClock()).header() is None


def test_headers_from_the_kubernetes_package_are_canonical() -> None:
    assert _bearer("bearer abc") == "Bearer abc"  # in-cluster loader
    assert _bearer("Bearer abc") == "Bearer abc"  # kubeconfig loader
    assert _bearer("Basic dXNlcjpwdw==") == "Basic dXNlcjpwdw=="
    assert _bearer("abc") == "Bearer abc"
    assert _bearer(None) is None and _bearer("") is None
