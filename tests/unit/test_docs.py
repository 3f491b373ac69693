"""The docs say only what the repository holds: README.md, docs/*.md and bench/*.md.

Every relative link resolves (to a heading too, when it names one); every repository path
named (`pkg/...`, `tests/...`, `deploy/...`, `bench/...`, `scenarios/...`, `docs/...`, `cmd/...`,
with `::name`) exists and defines that name; every `harvester_quota.…` name imports; every flag
given for `harvester-quota` is one its parsers accept. Each checker is also run on a planted
mistake, so a check that stopped seeing anything would fail here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from harvester_quota.main import build_parser
from harvester_quota.testbench.cli import build_parser as build_bench_parser

from .docscheck import (
    REPO,
    Commands,
    FlagUse,
    broken_links,
    documents,
    flag_uses,
    heading_anchors,
    missing,
    named_paths,
    python_names,
    relative_links,
    unknown_commands,
    unknown_flags,
    unresolved_names,
)

DOCUMENTS = documents()
IDS = [str(path.relative_to(REPO)) for path in DOCUMENTS]


@pytest.fixture(scope="module")
def commands() -> Commands:
    return Commands(build_parser(), build_bench_parser())


def test_the_check_covers_the_readme_and_every_document_of_docs_and_bench() -> None:
    assert {"README.md", "docs/architecture.md", "docs/operations.md", "docs/security.md"} <= set(
        IDS
    )
    assert {"bench/RESULTS.md", "bench/SCALE.md", "bench/SCENARIOS.md"} <= set(IDS)


@pytest.mark.parametrize("document", DOCUMENTS, ids=IDS)
def test_every_relative_link_resolves_to_a_file_and_heading(document: Path) -> None:
    assert broken_links(document) == []


@pytest.mark.parametrize("document", DOCUMENTS, ids=IDS)
def test_every_repository_path_named_exists_and_defines_the_name_given(document: Path) -> None:
    assert missing(named_paths(document.read_text())) == []


@pytest.mark.parametrize("document", DOCUMENTS, ids=IDS)
def test_every_harvester_quota_python_name_imports(document: Path) -> None:
    assert unresolved_names(python_names(document.read_text())) == []


@pytest.mark.parametrize("document", DOCUMENTS, ids=IDS)
def test_every_command_and_flag_given_for_our_programs_exists(
    document: Path, commands: Commands
) -> None:
    text = document.read_text()
    assert unknown_commands(text, commands) == []
    assert unknown_flags(text, commands) == []


def test_the_docs_together_name_many_links_paths_names_and_flags(commands: Commands) -> None:
    """The checks above pass trivially on text they cannot read: they must have found plenty."""
    texts = [document.read_text() for document in DOCUMENTS]
    assert sum(len(relative_links(text)) for text in texts) > 70
    assert sum(len(named_paths(text)) for text in texts) > 300
    assert sum(len(python_names(text)) for text in texts) > 20
    flags = {use.flag for text in texts for use in flag_uses(text, commands) if use.commands}
    assert len(flags) > 35


@pytest.mark.parametrize("command", ["run", "webhook", "explain"])
def test_operations_gives_every_flag_of_the_product_commands(
    command: str, commands: Commands
) -> None:
    """The other direction, for what operators run: a flag added to `run`, `webhook` or
    `explain` is documented in its synopsis in docs/operations.md (a flag hidden from --help,
    retired, need not be)."""
    text = (REPO / "docs" / "operations.md").read_text()
    path = ("harvester-quota", command)
    given = {use.flag for use in flag_uses(text, commands) if path in use.commands}
    hidden = commands.hidden[path]
    assert commands.flags[path] - given - hidden - {"-h", "--help"} == set()


# --- the checkers, on planted mistakes ----------------------------------------------------------


def test_a_link_to_a_missing_file_or_heading_or_out_of_the_repository_is_broken(
    tmp_path: Path,
) -> None:
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "b.md").write_text("# B\n\n## Pods while room is held\n\n## `explain`\n")
    (tmp_path / "outside.md").write_text("# Outside\n")
    document = root / "docs" / "a.md"
    text = (
        "[fine](b.md), [section](b.md#pods-while-room-is-held), [code](b.md#explain),\n"
        "[here](#a), [web](https://example.com/x.md), [broken\nacross lines](b.md#nowhere)\n"
        "[gone](c.md), [no heading](b.md#pods-while-room-is-taken), [up](../README.md)\n"
        "[out](../../outside.md), `[not a link](d.md)`\n\n# A\n"
    )
    assert broken_links(document, text, root) == [
        "b.md#nowhere",
        "c.md",
        "b.md#pods-while-room-is-taken",
        "../README.md",
        "../../outside.md",
    ]


def test_heading_anchors_follow_github() -> None:
    text = "# Scale\n## MTQ mode (KubeVirt's VMMRQ)\n## `harvester-quota explain`\n## Scale\n"
    text += "```\n# not a heading\n```\n"
    assert heading_anchors(text) == {
        "scale",
        "mtq-mode-kubevirts-vmmrq",
        "harvester-quota-explain",
        "scale-1",
    }


def test_a_missing_path_glob_or_name_is_reported(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(
        "class Room:\n    def grow(self): ...\ndef plan(): ...\n"
    )
    text = (
        "`pkg/a.py::plan`, `pkg/a.py::Room.grow`, pkg/ and `pkg/*.py`, [x](pkg/gone.py).\n"
        "`pkg/b.py`, `pkg/a.py::Room.shrink`, `tests/test_*.py`, ../pkg/c.py, `gomod/pkg/d.py`\n"
    )
    named = named_paths(text)
    assert ("pkg/gone.py", None) not in named  # a link target: the link check's
    assert missing(named, tmp_path) == ["pkg/b.py", "pkg/a.py::Room.shrink", "tests/test_*.py"]


def test_a_python_name_that_does_not_import_is_reported() -> None:
    text = (
        "`harvester_quota.util.quantity.Quantity`, harvester_quota.testbench.clock.FakeClock,\n"
        "`harvester_quota.util.quantity.Gone`, `harvester_quota.nowhere.Thing`\n"
    )
    assert unresolved_names(python_names(text)) == [
        "harvester_quota.util.quantity.Gone",
        "harvester_quota.nowhere.Thing",
    ]


def test_a_flag_the_command_does_not_have_is_reported(commands: Commands) -> None:
    text = (
        "Run `harvester-quota run --workers 3 --no-mtq` or `harvester-quota run --port 1`;\n"
        "`--target-room-wait`, `--no-such-flag`, `--set image.tag=1` (helm's),\n"
        "`helm upgrade --reuse-values`, `python -m bench.reconcile --pending 50`.\n\n"
        "    harvester-quota webhook --cert-file F [--client-name CN]...\n"
        "                            [--workers 5]   # a run flag, not a webhook one\n"
        "    harvester-quota-bench cluster build|up [--nodes N] |down|status|env [--state-dir D]\n"
        "    harvester-quota-bench scale --webhook-arg=--target-room-wait=4 --webhook-arg=--nope\n"
        "    harvester-quota-bench demo --workers 2\n"
        "    helm install harvester-quota deploy/chart/harvester-quota \\\n"
        "      --namespace x --atomic\n"
    )
    assert sorted(unknown_flags(text, commands)) == [
        "any --no-such-flag",
        "harvester-quota run --port",
        "harvester-quota webhook --nope",
        "harvester-quota webhook --workers",
        "harvester-quota-bench demo --workers",
    ]


def test_a_command_the_program_does_not_have_is_reported(commands: Commands) -> None:
    text = (
        "`harvester-quota scale --size full` (the bench's), `harvester-quota-bench run`,\n"
        "`harvester-quota explain ns`, `harvester-quota --version`.\n\n"
        "    harvester-quota-bench cluster up\n"
        "    harvester-quota demo\n"
        "    helm install harvester-quota deploy/chart/harvester-quota\n"
    )
    assert unknown_commands(text, commands) == [
        "harvester-quota demo",
        "harvester-quota scale",
        "harvester-quota-bench run",
    ]


def test_flags_are_read_with_their_command_path(commands: Commands) -> None:
    text = (
        "    harvester-quota-bench cluster build|up [--nodes N] |down|status|env [--state-dir D]\n"
    )
    bench = "harvester-quota-bench"
    paths = ((bench, "cluster", "build"), (bench, "cluster", "up"))
    assert flag_uses(text, commands) == [FlagUse("--nodes", paths), FlagUse("--state-dir", paths)]
    assert commands.accepts(flag_uses(text, commands)[0])  # `up` has it, `build` does not
