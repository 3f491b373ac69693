"""No hub classes in the product: each class of pkg/ (the bench aside) stays within MAX_LINES
lines and MAX_METHODS methods, so a new feature becomes a collaborator of its own (as
controller/resourcequota/reports.py's RefusalTracker set the pattern) instead of more methods on a class that
already holds several concerns.

Measured from the source with `ast`: a class's lines run from its `class` line to its last line;
its methods are the functions defined in its body, dunder methods aside (a value type's
operators, `__init__`). The classes in KNOWN_LARGE are over for a reason given there; the list may
only shrink (a class on it that fits fails the test, so the entry goes with the split).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "pkg"
BENCH = "testbench"
MAX_LINES = 250
MAX_METHODS = 15

KNOWN_LARGE: dict[str, str] = {}
"""Classes over the limits, each with why; the list may only shrink."""


@dataclass(frozen=True)
class ClassSize:
    where: str
    """path::Class, the path relative to the repository."""
    lines: int
    methods: int

    def too_large(self) -> bool:
        return self.lines > MAX_LINES or self.methods > MAX_METHODS


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def class_sizes(source: str, path: str) -> list[ClassSize]:
    """Every class in `source` (nested ones too), measured."""
    sizes = []
    for node in ast.walk(ast.parse(source, path)):
        if not isinstance(node, ast.ClassDef):
            continue
        methods = [
            f
            for f in node.body
            if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and not _is_dunder(f.name)
        ]
        lines = (node.end_lineno or node.lineno) - node.lineno + 1
        sizes.append(ClassSize(f"{path}::{node.name}", lines, len(methods)))
    return sizes


def product_class_sizes(root: Path = PKG) -> list[ClassSize]:
    """Every class of the product (pkg/ without the bench), measured."""
    sizes = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[0] == BENCH or "__pycache__" in relative.parts:
            continue
        where = str(Path(root.name) / relative)
        sizes.extend(class_sizes(path.read_text(), where))
    return sizes


def test_no_product_class_is_over_the_limits_but_the_known_ones() -> None:
    over = {s.where: s for s in product_class_sizes() if s.too_large()}
    assert sorted(set(over) - set(KNOWN_LARGE)) == [], [
        f"{s.where}: {s.lines} lines, {s.methods} methods" for s in over.values()
    ]


def test_every_known_large_class_is_still_over_the_limits() -> None:
    """An entry whose class was split (or removed) goes from KNOWN_LARGE."""
    over = {s.where for s in product_class_sizes() if s.too_large()}
    assert sorted(set(KNOWN_LARGE) - over) == []


def test_the_checker_sees_a_class_with_too_many_methods_or_lines() -> None:
    """The rule can fail: a planted class with one method too many, another with one line too
    many, are caught; dunder methods do not count, and a class within both limits passes."""
    many = "\n".join(f"    def m{i}(self) -> None: ..." for i in range(MAX_METHODS + 1))
    dunders = "\n".join(f"    def __{op}__(self, o): ..." for op in ("add", "sub", "mul", "eq"))
    few = "\n".join(f"    def m{i}(self) -> None: ..." for i in range(MAX_METHODS))
    long_body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))  # + the class line
    source = (
        f"class Hub:\n{many}\n\n"
        f"class Long:\n{long_body}\n\n"
        f"class Fits:\n{few}\n{dunders}\n\n"
        f"def outer():\n    class Nested:\n{many.replace('    def', '        def')}\n"
    )
    sizes = {s.where.split("::")[1]: s for s in class_sizes(source, "pkg/planted.py")}
    assert sizes["Hub"].too_large() and sizes["Hub"].methods == MAX_METHODS + 1
    assert sizes["Long"].too_large() and sizes["Long"].lines == MAX_LINES + 1
    assert not sizes["Fits"].too_large() and sizes["Fits"].methods == MAX_METHODS
    assert sizes["Nested"].too_large()


def test_the_checker_measures_the_product_and_leaves_the_bench_out(tmp_path: Path) -> None:
    fake = tmp_path / "pkg"
    (fake / "controller").mkdir(parents=True)
    (fake / "testbench" / "sim").mkdir(parents=True)
    hub = "class Hub:\n" + "\n".join(f"    def m{i}(self): ..." for i in range(20)) + "\n"
    (fake / "controller" / "hub.py").write_text(hub)
    (fake / "testbench" / "sim" / "big.py").write_text(hub)
    assert [s.where for s in product_class_sizes(fake) if s.too_large()] == [
        "pkg/controller/hub.py::Hub"
    ]
