"""No import circle among the product's modules (pkg/ outside the test bench): a reader can
take the modules in an order where each needs only those before it. Imports made only for type
checking count too (a reader still has to read both sides)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "pkg"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: Path, root: Path, known: set[str]) -> set[str]:
    """The modules of `known` that `path` imports, relative or absolute (harvester_quota.x)."""
    name = module_name(path, root)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                stem = ".".join([*base, *(node.module.split(".") if node.module else [])])
            elif node.module and node.module.startswith("harvester_quota"):
                stem = node.module.removeprefix("harvester_quota").lstrip(".")
            else:
                continue
            for alias in node.names:
                child = f"{stem}.{alias.name}" if stem else alias.name
                found.add(child if child in known else stem)
    return {module for module in found if module in known and module != name}


def circles(root: Path = PKG) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan's algorithm)."""
    paths = [p for p in root.rglob("*.py") if "testbench" not in p.relative_to(root).parts]
    known = {module_name(p, root) for p in paths}
    graph = {module_name(p, root): sorted(imports_of(p, root, known)) for p in paths}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group: list[str] = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_no_import_circle_among_the_products_modules() -> None:
    assert circles() == []


def test_the_checker_sees_a_circle(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("from .b import x\n")
    (tmp_path / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import y\n"
    )
    (tmp_path / "c.py").write_text("from .a import z\n")
    assert circles(tmp_path) == [["a", "b"]]
