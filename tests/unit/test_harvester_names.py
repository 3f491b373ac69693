"""Harvester's names lead to their twins: a Go developer who greps pkg/ for a Harvester name lands
on the Python that does its job.

docs/architecture.md maps Harvester's Go files and functions to ours in two tables (go-twins by
file, go-functions by function). Held to the code here:
- every Go function the function tables give a twin of ours is named in the docstring of one of
  the twins its row names (the object's docstring for `path::name`, the module's for a bare
  path). A row without a twin of ours outside the test bench says why ("not ported" or "none
  needed"); the baseline port in pkg/testbench is not a twin;
- a file of ours at the path of a Harvester file (`controller/master/` dropped, `.go` -> `.py`)
  names that Go file in its module docstring, where it says what of the file's job it holds and
  where the rest went.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ARCHITECTURE = REPO / "docs" / "architecture.md"

TWIN = re.compile(r"`(pkg/[\w./-]+?\.py)(?:::([\w.]+))?`")
"""A file of ours in a table cell, optionally with `::name`
(`pkg/util/resourcequota/plan.py::plan_quota`)."""

GO_NAME = re.compile(r"[A-Za-z_]\w*")
"""A Go identifier in backticks in the Go column; `error.go` and paths are not functions."""

ASIDE = re.compile(r"\([^)]*\)")
"""A parenthesis in the Go column gives context (`(error.go)`, `(its last call is X)`): what it
names is not the row's function."""

BENCH = "pkg/testbench/"
"""The baseline port of Harvester: never the twin a grep should find."""

NO_TWIN_REASONS = ("not ported", "none needed")
"""How a row of the function tables says that no function of ours is the Go function's twin."""


@dataclass(frozen=True)
class Row:
    """One row of the function tables: the Go names, the twins of ours, the `ours` cell's text."""

    go_names: tuple[str, ...]
    twins: tuple[tuple[str, str | None], ...]
    ours: str


def _block(text: str, marker: str) -> str:
    """What stands between `<!-- marker -->` and `<!-- /marker -->`."""
    after = text.split(f"<!-- {marker} -->", maxsplit=1)[1]
    return after.split(f"<!-- /{marker} -->", maxsplit=1)[0]


def _rows(table: str) -> list[list[str]]:
    """The cells of every body row of the Markdown table(s) in `table` (headers and rules aside)."""
    rows = []
    for line in table.splitlines():
        if not line.startswith("| ") or set(line) <= set("|- "):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if cells[0] in ("Go function", "Harvester (Go)"):
            continue
        rows.append(cells)
    return rows


def function_rows(text: str | None = None) -> list[Row]:
    """The function tables' rows; a row whose `ours` cell starts "not ported" has no twin, even
    where it names a file of ours of the same path (it does another job)."""
    table = _block(text if text is not None else ARCHITECTURE.read_text(), "go-functions")
    rows = []
    for go, ours, *_baseline in _rows(table):
        named = re.findall(r"`([^`]+)`", ASIDE.sub("", go))
        names = tuple(n for n in named if GO_NAME.fullmatch(n))
        twins: tuple[tuple[str, str | None], ...] = ()
        if not ours.startswith("not ported"):
            twins = tuple(
                (path, name or None)
                for path, name in TWIN.findall(ours)
                if not path.startswith(BENCH)
            )
        rows.append(Row(names, twins, ours))
    return rows


def _docstring_after(body: list[ast.stmt], index: int) -> str | None:
    """The string literal right after an assignment: an attribute's or a constant's docstring."""
    if index + 1 < len(body):
        following = body[index + 1]
        if isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant):
            value = following.value.value
            return value if isinstance(value, str) else None
    return None


def docstring(source: Path, dotted: str | None) -> str | None:
    """The docstring of `dotted` (a function, class, method, class attribute or module-level
    name) in the Python file `source`, the module's without a name; None where there is none."""
    tree = ast.parse(source.read_text(), str(source))
    if dotted is None:
        return ast.get_docstring(tree)
    node: ast.AST = tree
    for part in dotted.split("."):
        body: list[ast.stmt] = getattr(node, "body", [])
        for index, statement in enumerate(body):
            if (
                isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                and statement.name == part
            ):
                node = statement
                break
            targets = (
                statement.targets
                if isinstance(statement, ast.Assign)
                else [statement.target]
                if isinstance(statement, ast.AnnAssign)
                else []
            )
            if any(isinstance(t, ast.Name) and t.id == part for t in targets):
                return _docstring_after(body, index)
        else:
            return None
    assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    return ast.get_docstring(node)


def names_word(text: str, name: str) -> bool:
    """Whether `text` has `name` as a whole word (`isEmpty` is not in `IsEmptyResourceQuota`)."""
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text) is not None


def unnamed(rows: list[Row], root: Path = REPO) -> list[str]:
    """Every Go name of a row that none of its twins' docstrings names, and every row that has
    no twin of ours and does not say why; each as `GoName -> twins` for the report."""
    found = []
    for row in rows:
        if not row.twins:
            if not any(reason in row.ours for reason in NO_TWIN_REASONS):
                found.append(f"{', '.join(row.go_names)} -> no twin of ours and no reason given")
            continue
        docs = [docstring(root / path, name) or "" for path, name in row.twins]
        for go_name in row.go_names:
            if not any(names_word(doc, go_name) for doc in docs):
                twins = ", ".join(f"{path}::{name}" if name else path for path, name in row.twins)
                found.append(f"{go_name} -> {twins}")
    return found


def test_every_go_function_is_named_in_the_docstring_of_its_twin() -> None:
    rows = function_rows()
    assert sum(len(row.go_names) for row in rows if row.twins) > 70
    missing = unnamed(rows)
    assert not missing, "Go names no twin's docstring gives:\n" + "\n".join(missing)


def test_the_name_checker_sees_a_go_name_its_twin_does_not_give(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(
        '"""Harvester\'s `Scale` and `Shrink`."""\n'
        "LIMIT = 1\n"
        '"""Harvester\'s `maxRooms`."""\n'
        "class Room:\n"
        "    size: int = 0\n"
        '    """`roomSize`."""\n'
        "    def grow(self) -> None:\n"
        '        """Harvester\'s `GrowRoom`."""\n'
        "def plan() -> None:\n"
        '    """`planRooms`, `IsEmptyResourceQuota`."""\n'
    )
    document = (
        "<!-- go-functions -->\n| Go function | ours | baseline |\n|---|---|---|\n"
        "| `planRooms`, `isEmpty` | `pkg/a.py::plan` | `pkg/testbench/x.py::plan` |\n"
        "| `GrowRoom`, `roomSize` | `pkg/a.py::Room.grow`, `pkg/a.py::Room.size` | none |\n"
        "| `maxRooms`, `Shrink` (`e.go`, calls `Grow`) | `pkg/a.py::LIMIT`, `pkg/a.py` | none |\n"
        "| `Scale` | `pkg/testbench/x.py::scale` | ported |\n"
        "| `Copy` | not ported: `pkg/a.py::plan` does another job | none |\n"
        "| `Restore` | none needed: nothing calls it | none |\n"
        "<!-- /go-functions -->\n"
    )
    rows = function_rows(document)
    assert rows[2].go_names == ("maxRooms", "Shrink")  # an aside names no function of the row
    assert unnamed(rows, tmp_path) == [
        "isEmpty -> pkg/a.py::plan",  # a word of its own, not part of IsEmptyResourceQuota
        "Scale -> no twin of ours and no reason given",  # the bench's port is no twin
    ]


def harvester_namesakes(text: str | None = None) -> list[tuple[str, str]]:
    """(Harvester's Go file, the file of ours at its path) for every Harvester file of the
    go-twins table (`pkg/controller/master/migration/vmi_controller.go` ->
    `pkg/controller/migration/vmi_controller.py`); KubeVirt's, MTQ's and Kubernetes' rows aside."""
    table = _block(text if text is not None else ARCHITECTURE.read_text(), "go-twins")
    pairs = []
    for cells in _rows(table):
        for go_path in re.findall(r"^`(pkg/[\w./-]+\.go)`", cells[0]):
            ours = go_path.replace("pkg/controller/master/", "pkg/controller/").removesuffix(".go")
            pairs.append((go_path, f"{ours}.py"))
    return pairs


def test_a_file_at_a_harvester_files_path_names_that_go_file() -> None:
    """A file of ours named after a Harvester file holds that file's job or says where it went;
    either way its module docstring names the Go file, so the grep finds it."""
    pairs = [(go, ours) for go, ours in harvester_namesakes() if (REPO / ours).exists()]
    assert len(pairs) >= 5
    silent = [
        f"{ours} does not name {Path(go).name}"
        for go, ours in pairs
        if not names_word(docstring(REPO / ours, None) or "", Path(go).name)
    ]
    assert not silent, "\n".join(silent)


def test_a_harvester_files_namesake_is_at_its_path_without_master() -> None:
    document = (
        "<!-- go-twins -->\n| Harvester (Go) | ours | baseline port |\n|---|---|---|\n"
        "| `pkg/controller/master/migration/vmi_controller.go` | `pkg/a.py` | none |\n"
        "| `pkg/util/resourcequota/utils.go` | `pkg/b.py`, `c.py` | none |\n"
        "| KubeVirt `pkg/hypervisor/kvm/hypervisorbackend.go` | `pkg/util/overhead.py` | none |\n"
        "<!-- /go-twins -->\n"
    )
    assert harvester_namesakes(document) == [
        (
            "pkg/controller/master/migration/vmi_controller.go",
            "pkg/controller/migration/vmi_controller.py",
        ),
        ("pkg/util/resourcequota/utils.go", "pkg/util/resourcequota/utils.py"),
    ]
