"""The product's dependencies are declared: every module the product (pkg/ minus the test
bench) imports is the standard library's, ours, or from a distribution in install_requires, so
a plain `pip install harvester-quota` can run every command. What only the bench or the tests
import (PyYAML, matplotlib, pytest) belongs in the bench and test extras."""

from __future__ import annotations

import ast
import configparser
import importlib.metadata
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PKG = REPO / "pkg"
BENCH = PKG / "testbench"


def install_requires() -> set[str]:
    """The distribution names of setup.cfg's install_requires, normalised (PEP 503)."""
    parser = configparser.ConfigParser()
    parser.read(REPO / "setup.cfg")
    lines = parser["options"]["install_requires"].split("\n")
    return {_normalise(re.split(r"[<>=!~;\[ ]", line.strip())[0]) for line in lines if line.strip()}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def product_imports() -> dict[str, set[str]]:
    """Top-level module -> the product files importing it (absolute imports, function-level
    ones included: a lazy import is still a dependency), the bench left out."""
    found: dict[str, set[str]] = {}
    for path in sorted(PKG.rglob("*.py")):
        if BENCH in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(REPO)))
    return found


def undeclared(
    imports: dict[str, set[str]], declared: set[str], distributions: dict[str, list[str]]
) -> dict[str, list[str]]:
    """The imported modules (-> their files) that neither the standard library, this package
    nor a declared distribution provides."""
    missing = {}
    for module, files in imports.items():
        if module in sys.stdlib_module_names or module in ("harvester_quota", "__future__"):
            continue
        owners = {_normalise(d) for d in distributions.get(module, [module])}
        if not owners & declared:
            missing[module] = sorted(files)
    return missing


def test_every_module_the_product_imports_is_declared_in_install_requires() -> None:
    distributions = dict(importlib.metadata.packages_distributions())
    missing = undeclared(product_imports(), install_requires(), distributions)
    assert not missing, f"imported by the product, not in install_requires: {missing}"


def test_the_checker_sees_a_lazy_import_and_names_a_bench_only_module_imported_by_the_product() -> (
    None
):
    """The test above can fail: it finds the function-level `kubernetes` import of
    generic/config.py, and a product file importing PyYAML or matplotlib (the bench's) would be
    named."""
    imports = product_imports()
    assert "pkg/generic/config.py" in imports["kubernetes"]
    distributions = dict(importlib.metadata.packages_distributions())
    planted = {**imports, "yaml": {"pkg/x.py"}, "matplotlib": {"pkg/y.py"}}
    assert undeclared(planted, install_requires(), distributions) == {
        "yaml": ["pkg/x.py"],
        "matplotlib": ["pkg/y.py"],
    }
