"""The import layers of `pkg/` (imported as harvester_quota): no module imports upward.

Read from the source with `ast`, so a new upward import fails here before anyone has to notice it
in review. Relative and absolute (`harvester_quota.x`) imports both count; imports inside
functions count too (a lazy import is still a dependency).

docs/architecture.md, which describes the layers, is held to the code here too: every file of ours
and every name in it that its Go-to-Python tables and its prose give exists.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from .docscheck import missing

PKG = Path(__file__).resolve().parents[2] / "pkg"
IMPORT_NAME = "harvester_quota"

PRODUCT_LAYERS: dict[str, int] = {
    "__init__": 0,
    "generic": 1,
    "apis": 2,
    "util": 3,
    "config": 4,
    "controller": 5,
    "webhook": 5,
    "app": 6,
    "explain": 6,
    "preflight": 6,
    "release": 7,
    "main": 9,
}
"""The product's top-level packages -> layer."""

UTIL = "util"
UTIL_LAYERS: dict[str, float] = {
    f"{UTIL}.quantity": 3.0,
    f"{UTIL}.resources": 3.1,
    f"{UTIL}.quotascope": 3.1,
    f"{UTIL}.vmispec": 3.1,
    f"{UTIL}.vmispecview": 3.1,
    f"{UTIL}.kubevirtversion": 3.1,
    f"{UTIL}.screen": 3.1,
    f"{UTIL}.migrationlimits": 3.1,
    f"{UTIL}.migrationpriority": 3.1,
    f"{UTIL}.annotations": 3.2,
    f"{UTIL}.podusage": 3.2,
    f"{UTIL}.overhead": 3.2,
    f"{UTIL}.hotplug": 3.2,
    f"{UTIL}.mtqlock": 3.2,
    f"{UTIL}.launcher": 3.3,
    f"{UTIL}.rancher": 3.3,
    f"{UTIL}.resourcequota": 3.5,
    f"{UTIL}.mtq": 3.6,
}
"""util/'s modules and sub-packages -> layer, all within util's layer 3: quantities; then the
facts of one object (a resource list, a quota's scopes, a VMI's spec, KubeVirt's version); then
what is read from them (annotations, a pod's usage, KubeVirt's overhead); then the launcher pod
KubeVirt renders and Rancher's model (its annotation, projects and project room); the room model
(resourcequota/); MTQ mode's model (mtq), which reports the room model's shortfalls.
A module of util/ not named here fails the layer test until it is placed."""

BENCH = "testbench"
BENCH_LAYERS: dict[str, int] = {
    BENCH: 10,
    f"{BENCH}.clock": 10,
    f"{BENCH}.codecs": 10,
    f"{BENCH}.decoding": 10,
    f"{BENCH}.harvestervm": 10,
    f"{BENCH}.promql": 10,
    f"{BENCH}.localcluster": 11,
    f"{BENCH}.sim": 12,
    f"{BENCH}.strategy": 12,
    f"{BENCH}.virtcontroller": 13,
    f"{BENCH}.scenario": 14,
    f"{BENCH}.scale": 14,
    f"{BENCH}.demo": 15,
    f"{BENCH}.cli": 16,
    f"{BENCH}.__main__": 17,
}
"""The test bench's sub-packages -> layer: every one above the whole product, so the bench may
use the product and the product never the bench."""

PRODUCT_UNITS: dict[str, float] = {**PRODUCT_LAYERS, **UTIL_LAYERS}
"""Every unit of the product: its top-level packages, and util/'s modules one by one."""

LAYERS: dict[str, float] = PRODUCT_UNITS | BENCH_LAYERS
"""Unit (a top-level package, or a sub-package of the bench) -> layer: a module may import its own
unit and lower layers only."""

FORBIDDEN_SIDEWAYS: dict[str, frozenset[str]] = {
    "controller": frozenset({"webhook"}),
    "webhook": frozenset({"controller"}),
    f"{BENCH}.sim": frozenset({f"{BENCH}.strategy"}),
    f"{BENCH}.strategy": frozenset({f"{BENCH}.sim"}),
}
"""Units on one layer that must not lean on each other: the webhook and the controllers share
the pure model in util/, and the Harvester port must stay a faithful, independent baseline."""


def _modules(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


SPLIT_UNITS = (UTIL, BENCH)
"""Top-level packages whose modules or sub-packages are units of their own."""


def _unit(parts: list[str]) -> str:
    """The unit a dotted path (below harvester_quota) belongs to: its top-level package, or for
    util/ and the bench its module or sub-package (`util.launcher`, `testbench.sim`)."""
    if not parts:
        return "__init__"
    if parts[0] in SPLIT_UNITS and len(parts) > 1 and parts[1] != "__init__":
        return f"{parts[0]}.{parts[1]}"
    return parts[0]


def _imported_units(path: Path, root: Path) -> set[str]:
    """The units of `root` that `path` imports."""
    rel = list(path.relative_to(root).with_suffix("").parts)
    package = rel[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            base = package[: len(package) - (node.level - 1)]
            target = base + (node.module.split(".") if node.module else [])
            if node.module is None or target in ([UTIL], [BENCH]):  # x may be a module
                found.update(_unit([*target, alias.name]) for alias in node.names)
            else:
                found.add(_unit(target))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(IMPORT_NAME):
            module = (node.module or "").split(".")[1:]
            if module in ([UTIL], [BENCH]):
                found.update(_unit([*module, alias.name]) for alias in node.names)
            elif module:
                found.add(_unit(module))
            else:
                found.update(_unit([alias.name]) for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == IMPORT_NAME:
                    found.add(_unit(alias.name.split(".")[1:]))
    return found


def _own_unit(path: Path, root: Path) -> str:
    return _unit(list(path.relative_to(root).with_suffix("").parts))


def _violations(root: Path = PKG) -> list[str]:
    problems = []
    for path in _modules(root):
        own = _own_unit(path, root)
        if own not in LAYERS:
            problems.append(f"{path.relative_to(root.parent)}: unit {own!r} has no layer in LAYERS")
            continue
        for target in _imported_units(path, root) - {own}:
            if target not in LAYERS:
                continue  # e.g. `from .. import __version__` resolves to a name, not a package
            if LAYERS[target] > LAYERS[own] or target in FORBIDDEN_SIDEWAYS.get(own, ()):
                problems.append(f"{path.relative_to(root.parent)} ({own}) imports {target}")
    return problems


def _bench_named_in_product_code(root: Path = PKG) -> list[str]:
    """Every string in a product module's code (docstrings aside) that names the bench: what an
    `importlib.import_module`, `__import__` or `find_spec` would reach it by, which the import
    walk above does not see."""
    found = []
    for path in _modules(root):
        if _own_unit(path, root) not in PRODUCT_UNITS:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and BENCH in node.value
                and not _is_docstring(tree, node)
            ):
                found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.value[:60]!r}")
    return found


def test_no_module_imports_upward_and_the_product_never_imports_the_bench() -> None:
    assert _violations() == []
    assert _bench_named_in_product_code() == []


def test_every_module_of_the_bench_is_under_pkg_testbench_and_none_of_the_product_is() -> None:
    """The fence is a folder: what is not the product lives under pkg/testbench/."""
    tops = {p.relative_to(PKG).parts[0].removesuffix(".py") for p in _modules(PKG)}
    assert tops - {"py"} == set(PRODUCT_LAYERS) | {BENCH}


def test_the_checker_sees_an_upward_import_inside_util(tmp_path: Path) -> None:
    """util/ has layers inside: quantities may not reach up into the room model, by a relative
    import of the module or of its package, or by an absolute one; the room model may use them."""
    fake = tmp_path / "pkg"
    (fake / "util" / "resourcequota").mkdir(parents=True)
    (fake / "util" / "quantity.py").write_text("from .resourcequota import plan\n")
    (fake / "util" / "resources.py").write_text("from . import launcher\n")
    (fake / "util" / "vmispec.py").write_text("from harvester_quota.util import rancher\n")
    (fake / "util" / "resourcequota" / "plan.py").write_text("from .. import quantity\n")
    (fake / "util" / "unplaced.py").write_text("")
    assert sorted(_violations(fake)) == [
        "pkg/util/quantity.py (util.quantity) imports util.resourcequota",
        "pkg/util/resources.py (util.resources) imports util.launcher",
        "pkg/util/unplaced.py: unit 'util.unplaced' has no layer in LAYERS",
        "pkg/util/vmispec.py (util.vmispec) imports util.rancher",
    ]


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    """The rule itself can fail: a util module importing the controllers is caught."""
    fake = tmp_path / "pkg"
    (fake / "util").mkdir(parents=True)
    (fake / "controller").mkdir()
    (fake / "util" / "quantity.py").write_text("from ..controller import thing\n")
    (fake / "controller" / "thing.py").write_text("from harvester_quota.webhook import x\n")
    assert sorted(_violations(fake)) == [
        "pkg/controller/thing.py (controller) imports webhook",
        "pkg/util/quantity.py (util.quantity) imports controller",
    ]


def test_the_checker_sees_the_product_reach_into_the_bench(tmp_path: Path) -> None:
    """A product module importing the bench, by a relative or absolute import or by importlib,
    is caught; the bench using the product and a sub-package of the bench using a lower one
    are not."""
    fake = tmp_path / "pkg"
    for folder in ("controller", "testbench/sim", "testbench/scale", "testbench/localcluster"):
        (fake / folder).mkdir(parents=True)
    (fake / "controller" / "a.py").write_text("from ..testbench.sim import driver\n")
    (fake / "controller" / "b.py").write_text(
        '"""Docstrings may name the testbench."""\nimport importlib\n'
        'importlib.import_module("harvester_quota.testbench.scale")\n'
    )
    (fake / "testbench" / "scale" / "run.py").write_text(
        "from harvester_quota.controller import a\nfrom ..localcluster import cluster\n"
    )
    (fake / "testbench" / "localcluster" / "cluster.py").write_text(
        "from harvester_quota.testbench.scale import run\n"
    )
    assert sorted(_violations(fake)) == [
        "pkg/controller/a.py (controller) imports testbench.sim",
        "pkg/testbench/localcluster/cluster.py (testbench.localcluster) imports testbench.scale",
    ]
    assert _bench_named_in_product_code(fake) == [
        "pkg/controller/b.py:3 'harvester_quota.testbench.scale'"
    ]


def _private_imports(root: Path = PKG) -> list[str]:
    """Every `from <module> import _name` in `root` whose module is one of ours: a private name
    used across modules is an interface nobody promised to keep (`__version__` and the like,
    dunder names, are public)."""
    found = []
    for path in _modules(root):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom) or node.module == "__future__":
                continue
            ours = node.level > 0 or (node.module or "").startswith(IMPORT_NAME)
            for alias in node.names if ours else ():
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {alias.name}")
    return found


def test_no_module_imports_another_modules_private_name() -> None:
    assert _private_imports() == []


def test_the_checker_sees_a_private_name_imported(tmp_path: Path) -> None:
    fake = tmp_path / "pkg"
    (fake / "util").mkdir(parents=True)
    (fake / "util" / "a.py").write_text(
        "from .b import _helper, public\nfrom .. import __version__\n"
    )
    (fake / "util" / "c.py").write_text("from harvester_quota.util.b import _other\n")
    assert _private_imports(fake) == ["pkg/util/a.py:1 _helper", "pkg/util/c.py:1 _other"]


KIND_WORDS = re.compile(r"kubevirt|harvesterhci|virtualmachine|vmim?\b", re.IGNORECASE)


def test_the_framework_knows_no_kubevirt_or_harvester_kind() -> None:
    """pkg/generic is a Kubernetes controller framework: its code (comments and docstrings
    aside) names no KubeVirt or Harvester kind; those live in harvester_quota.apis."""
    offenders = []
    for path in sorted((PKG / "generic").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Name | ast.Attribute | ast.FunctionDef | ast.ClassDef):
                text = getattr(node, "id", None) or getattr(node, "attr", None) or node.name  # type: ignore[union-attr]
                if KIND_WORDS.search(str(text)):
                    offenders.append(f"{path.name}:{node.lineno} {text}")
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and KIND_WORDS.search(node.value)
                and not _is_docstring(tree, node)
            ):
                offenders.append(f"{path.name}:{node.lineno} {node.value[:60]!r}")
    assert offenders == []


def _is_docstring(tree: ast.AST, constant: ast.Constant) -> bool:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            for statement in body:
                if isinstance(statement, ast.Expr) and statement.value is constant:
                    return True
    return False


ARCHITECTURE = PKG.parent / "docs" / "architecture.md"
"""Holds the Go-to-Python tables: by file (go-twins) and by function (go-functions)."""

PYTHON_NAME = re.compile(
    r"`((?:pkg|tests|bench|deploy|docs)/[\w./-]+?\.(?:py|md|yaml))(?:::([\w.]+))?`"
)
"""A file of ours named in backticks, optionally with `::name`, a function, class, method or
module-level name defined in it (`pkg/util/resourcequota/plan.py::plan_quota`)."""


def _block(text: str, marker: str) -> str:
    """What stands between `<!-- marker -->` and `<!-- /marker -->`."""
    after = text.split(f"<!-- {marker} -->", maxsplit=1)[1]
    return after.split(f"<!-- /{marker} -->", maxsplit=1)[0]


def _python_cells(table: str) -> list[str]:
    """Every cell but the first (the Go column) of every row of the table(s) in `table`."""
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    return [cell for row in rows for cell in row.strip("|").split("|")[1:]]


def _twin_paths(text: str | None = None) -> list[str]:
    """The paths of the file-level table; a bare name in a cell is in the folder of the cell's
    first path (`pkg/util/resourcequota/rooms.py`, `plan.py`)."""
    table = _block(text if text is not None else ARCHITECTURE.read_text(), "go-twins")
    paths: list[str] = []
    for cell in _python_cells(table):  # the header's cells name no file
        first = re.findall(r"`(pkg/[^`]+)`", cell)
        folder = first[0].rsplit("/", 1)[0] if first else ""
        for name in re.findall(r"`([^`]+)`", cell):
            paths.append(name if name.startswith("pkg/") else f"{folder}/{name}")
    return paths


def _function_twins(text: str | None = None) -> list[tuple[str, str | None]]:
    """(path, name or None) for every file of ours named in the function-level tables."""
    table = _block(text if text is not None else ARCHITECTURE.read_text(), "go-functions")
    return [
        (path, name or None)
        for cell in _python_cells(table)
        for path, name in PYTHON_NAME.findall(cell)
    ]


def test_every_python_twin_in_the_architecture_document_exists() -> None:
    paths = _twin_paths()
    assert len(paths) > 20
    assert [p for p in paths if not (PKG.parent / p).exists()] == []


def test_every_function_twin_is_defined_where_the_document_says() -> None:
    named = _function_twins()
    assert len({name for _path, name in named if name}) > 80
    assert missing(named) == []


def test_every_file_of_ours_the_architecture_document_names_exists() -> None:
    """The prose too: a path or `path::name` in backticks anywhere in the document."""
    named = [(path, name or None) for path, name in PYTHON_NAME.findall(ARCHITECTURE.read_text())]
    assert len(named) > 100
    assert missing(named) == []


def test_the_twin_checker_sees_a_missing_file_or_name(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(
        "LIMIT = 1\nclass Room:\n    size: int\n    def grow(self): ...\ndef plan(): ...\n"
    )
    document = (
        "<!-- go-functions -->\n| Go function | ours | baseline |\n|---|---|---|\n"
        "| `pkg/a.py::Gone` | `pkg/a.py::plan`, `pkg/a.py::Room.grow` | `pkg/a.py::Room.size` |\n"
        "| `Scale` | `pkg/a.py::LIMIT`, `pkg/a.py::Room.shrink` | `pkg/b.py`, not ported |\n"
        "<!-- /go-functions -->\n"
    )
    named = _function_twins(document)
    assert ("pkg/a.py", "Gone") not in named  # the Go column is not ours to check
    assert missing(named, tmp_path) == ["pkg/a.py::Room.shrink", "pkg/b.py"]


def test_installed_the_package_is_harvester_quota_and_nothing_named_pkg(tmp_path: Path) -> None:
    """From outside the checkout: `import harvester_quota` works, `import pkg` does not (a
    Go-style `pkg` in site-packages would collide with every other project doing the same)."""
    import subprocess
    import sys

    probe = (
        "import importlib.util, harvester_quota, harvester_quota.main;"
        "print(importlib.util.find_spec('pkg') is None, harvester_quota.__name__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["True", "harvester_quota"]


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_modules(path: Path, root: Path, known: set[str]) -> set[str]:
    """The modules of `root` (dotted, below the package) that `path` imports anywhere in it
    (function-local and TYPE_CHECKING imports too: a circle broken by a late import is still
    a circle to a reader)."""
    rel = list(path.relative_to(root).with_suffix("").parts)
    package = rel if rel[-1] == "__init__" else rel[:-1]
    package = [p for p in package if p != "__init__"]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level > 0:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + (node.module.split(".") if node.module else []))
            elif (node.module or "").startswith(IMPORT_NAME):
                target = (node.module or "").removeprefix(IMPORT_NAME).lstrip(".")
            else:
                continue
            names = [target] + [f"{target}.{a.name}".lstrip(".") for a in node.names]
            found.update(n for n in names if n in known)
    return found


def _import_circles(root: Path = PKG) -> list[list[str]]:
    """Every set of product modules (the bench aside) that import each other round a circle."""
    paths = {
        _module_name(p, root): p for p in _modules(root) if p.relative_to(root).parts[0] != BENCH
    }
    graph = {m: _imported_modules(p, root, set(paths)) - {m} for m, p in paths.items()}
    reaches: dict[str, set[str]] = {}
    for start, imported in graph.items():
        seen: set[str] = set()
        frontier = list(imported)
        while frontier:
            module = frontier.pop()
            if module not in seen:
                seen.add(module)
                frontier.extend(graph[module])
        reaches[start] = seen
    circles = {
        tuple(
            sorted(m for m in graph if m == start or (m in reaches[start] and start in reaches[m]))
        )
        for start in graph
        if start in reaches[start]
    }
    return [list(c) for c in sorted(circles)]


def test_no_product_modules_import_each_other_round_a_circle() -> None:
    assert _import_circles() == []


def test_the_checker_sees_an_import_circle(tmp_path: Path) -> None:
    (tmp_path / "util").mkdir()
    (tmp_path / "util" / "__init__.py").write_text("")
    (tmp_path / "util" / "first.py").write_text("from .second import b\n")
    (tmp_path / "util" / "second.py").write_text("def b() -> None:\n    from . import first\n")
    (tmp_path / "util" / "alone.py").write_text("from .first import x\n")
    assert _import_circles(tmp_path) == [["util.first", "util.second"]]
