"""What a plain install carries: the product, never the test bench (issue 27's fence).

The wheel is built from a copy of the sources (no build isolation: setuptools and wheel come with
the test extra, so nothing is downloaded), installed into a folder of its own, and run there with
the site's .pth files switched off, so the checkout's editable install cannot stand in for it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("setup.py", "setup.cfg", "pyproject.toml", "README.md")

PROBE = """
import importlib.util, sys
import harvester_quota.main, harvester_quota.app, harvester_quota.explain
import harvester_quota.webhook.server
bench = sorted(m for m in sys.modules if ".testbench" in m)
print("bench modules loaded:", bench)
print("bench importable:", importlib.util.find_spec("harvester_quota.testbench") is not None)
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of a plain `pip install .`, installed into a folder of its own; returns it."""
    work = tmp_path_factory.mktemp("distribution")
    source = work / "source"
    source.mkdir()
    for name in SOURCES:
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "pkg", source / "pkg", ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "--quiet", "--disable-pip-version-check"]
    wheels = work / "wheels"
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("*.whl")
    site = work / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)], check=True)
    return site


def _run(site: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """`python -S *argv` that sees the installed wheel and the dependencies, not the checkout."""
    path = f"{site}:{sysconfig.get_paths()['purelib']}"
    return subprocess.run(
        [sys.executable, "-S", *argv],
        cwd=site.parent,
        env={"PYTHONPATH": path, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_wheel_carries_the_product_and_no_module_of_the_test_bench(installed: Path) -> None:
    files = {p.relative_to(installed).as_posix() for p in installed.rglob("*") if p.is_file()}
    ours = {f for f in files if f.startswith("harvester_quota/")}
    assert "harvester_quota/main.py" in ours
    assert "harvester_quota/controller/resourcequota/resourcequota_controller.py" in ours
    assert "harvester_quota/webhook/server.py" in ours
    assert [f for f in ours if "testbench" in f or f.endswith((".go", "go.mod"))] == []


@pytest.mark.parametrize("command", ["run", "webhook", "explain"])
def test_each_product_command_starts_from_a_plain_install(installed: Path, command: str) -> None:
    done = _run(installed, "-m", "harvester_quota.main", command, "--help")
    assert done.returncode == 0, done.stderr
    assert f"usage: harvester-quota {command}" in done.stdout


def test_a_plain_install_imports_no_bench_module_and_has_none_to_import(installed: Path) -> None:
    done = _run(installed, "-c", PROBE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["bench modules loaded: []", "bench importable: False"]


def test_the_checkout_still_runs_the_bench_commands() -> None:
    """In the checkout (`make venv`'s editable install) the bench is importable beside the
    product, and its command line answers."""
    done = subprocess.run(
        [sys.executable, "-m", "harvester_quota.testbench", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for command in ("cluster", "scenario", "scale", "demo"):
        assert command in done.stdout
