"""Checks that hold the repository's Markdown to the repository: links, paths, names and flags.

Every checker takes a document's text (and, where it must look something up, a root directory or
a parser), so a planted mistake is a unit test. `tests/unit/test_docs.py` runs them over
README.md, docs/*.md and bench/*.md; `tests/unit/test_layers.py` uses `missing` for the
architecture document's Go-to-Python tables.

What counts as a reference:
- a link: `[text](target)` whose target is not a URL (`http:`, `https:`, `mailto:`); it resolves
  from the document's folder, and a `#fragment` must be a heading of the file it points at;
- a path: a word starting `pkg/`, `tests/`, `deploy/`, `bench/`, `scenarios/`, `docs/` or `cmd/`,
  anywhere in the text but a link's target, optionally followed by `::name` (a function, class,
  method or assigned name of that Python file); `*` globs must match something;
- a Python name: `harvester_quota.module.Name` (what `import` and `getattr` must find);
- a flag: in a `harvester-quota <command>` or `harvester-quota-bench <command>` line or code
  span, every flag belongs to that command's parser; in any other code span, every `--flag`
  belongs to some parser of ours, unless the span runs another program or the flag is one of
  `FOREIGN_FLAGS`.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def documents(root: Path = REPO) -> list[Path]:
    """The Markdown this check covers: the README and everything in docs/ and bench/."""
    return [
        root / "README.md",
        *sorted((root / "docs").glob("*.md")),
        *sorted(root.glob("bench/*.md")),
    ]


# --- Markdown structure -------------------------------------------------------------------------

FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def prose_lines(text: str) -> Iterator[str]:
    """The lines outside fenced code blocks."""
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            yield line


def code_lines(text: str) -> list[str]:
    """Lines of code blocks: fenced ones, and indented ones (4+ spaces after a blank line)."""
    lines: list[str] = []
    fenced = False
    indented = False
    previous_blank = True
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        blank = not line.strip()
        if fenced:
            lines.append(line)
        elif line.startswith("    ") and not blank and (indented or previous_blank):
            indented = True
            lines.append(line)
        elif not blank:
            indented = False
        previous_blank = blank
    return lines


def paragraphs(text: str) -> list[str]:
    """The blocks of lines outside fenced code, each joined into one line: a link or code span
    may break across lines."""
    blocks: list[list[str]] = [[]]
    for line in prose_lines(text):
        if line.strip():
            blocks[-1].append(line.strip())
        elif blocks[-1]:
            blocks.append([])
    return [" ".join(block) for block in blocks if block]


def code_spans(text: str) -> list[str]:
    """The contents of inline code spans outside fenced blocks."""
    return [match.group(2) for block in paragraphs(text) for match in CODE_SPAN.finditer(block)]


def heading_anchors(text: str) -> set[str]:
    """The fragments GitHub gives the document's headings (`## Pods while room is held` is
    `#pods-while-room-is-held`; a repeated heading gets `-1`, `-2`, ...)."""
    anchors: set[str] = set()
    for line in prose_lines(text):
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        title = LINK.sub(lambda link: link.group(0).split("](")[0][1:], match.group(1))
        slug = re.sub(r"[^\w\- ]", "", title.replace("`", "").lower()).replace(" ", "-")
        anchor, number = slug, 0
        while anchor in anchors:
            number += 1
            anchor = f"{slug}-{number}"
        anchors.add(anchor)
    return anchors


# --- links --------------------------------------------------------------------------------------


def relative_links(text: str) -> list[str]:
    """Link and image targets that point into the repository (URLs left out)."""
    targets = [
        match.group(1)
        for block in paragraphs(text)
        for pattern in (LINK, IMAGE)
        for match in pattern.finditer(CODE_SPAN.sub("", block))
    ]
    return [target for target in targets if not re.match(r"[a-z]+:", target)]


def broken_links(document: Path, text: str | None = None, root: Path = REPO) -> list[str]:
    """The relative links of `document` whose file, or heading, does not exist in the
    repository at `root` (a link out of it works in no clean checkout)."""
    text = document.read_text() if text is None else text
    broken = []
    for target in relative_links(text):
        name, _, fragment = target.partition("#")
        linked = (document.parent / name).resolve() if name else document
        if name and not (linked.is_relative_to(root.resolve()) and linked.exists()):
            broken.append(target)
        elif fragment and linked.suffix == ".md":
            headings = heading_anchors(linked.read_text() if name else text)
            if fragment not in headings:
                broken.append(target)
    return broken


# --- repository paths and the names in them -----------------------------------------------------

REPO_PATH = re.compile(
    r"(?<![\w./<>$-])((?:pkg|tests|deploy|bench|scenarios|docs|cmd)/(?:[\w.*-]+/?)*)"
    r"(?:::([A-Za-z_][\w.]*))?"
)


OUR_GO = "pkg/testbench/localcluster/gomod/"
"""Where our own Go lives (the wrapper modules the local cluster builds); any other `.go` path
the docs name is upstream's (Harvester's, KubeVirt's, Kubernetes'), as in the Go-to-Python
tables."""


def named_paths(text: str) -> list[tuple[str, str | None]]:
    """(path, name or None) for every repository path the text names outside link targets,
    upstream Go files left out."""
    without_targets = LINK.sub(lambda link: link.group(0).split("](")[0], text)
    named = []
    for match in REPO_PATH.finditer(without_targets):
        path = match.group(1).rstrip(".")
        upstream = path.endswith(".go") and not path.startswith(OUR_GO)
        if "..." not in match.group(0) and not upstream:
            named.append((path, match.group(2)))
    return named


def missing(named: list[tuple[str, str | None]], root: Path = REPO) -> list[str]:
    """What `named` points at that does not exist under `root`: a path (a glob matching
    nothing), or `path::name` where the Python file does not define the name."""
    gone = []
    for path, name in named:
        matches = sorted(root.glob(path.rstrip("/"))) if "*" in path else [root / path]
        if not matches or not all(match.exists() for match in matches):
            gone.append(path)
        elif name is not None and not all(defines(match, name) for match in matches):
            gone.append(f"{path}::{name}")
    return gone


def defines(source: Path, dotted: str) -> bool:
    """Whether `dotted` (`name` or `Class.member`) is a function, class or assigned name of the
    Python file `source`, a member looked up in its class's body."""
    if source.suffix != ".py":
        return False
    body: list[ast.stmt] = ast.parse(source.read_text(), str(source)).body
    for part in dotted.split("."):
        found = next((node for node in body if part in _names_defined(node)), None)
        if found is None:
            return False
        body = found.body if isinstance(found, ast.ClassDef) else []
    return True


def _names_defined(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    if isinstance(node, ast.Assign):
        return {target.id for target in node.targets if isinstance(target, ast.Name)}
    return set()


PYTHON_NAME = re.compile(r"(?<![\w.])harvester_quota(?:\.[A-Za-z_]\w*)+")


def python_names(text: str) -> list[str]:
    """Every dotted `harvester_quota.…` name the text gives."""
    return [match.group(0) for match in PYTHON_NAME.finditer(text)]


def unresolved_names(names: list[str]) -> list[str]:
    """The names that neither import as a module nor are an attribute of the longest prefix
    that does (`harvester_quota.util.quantity.Quantity`)."""
    return [name for name in names if not _resolves(name)]


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


# --- command-line flags -------------------------------------------------------------------------

PROGRAMS = ("harvester-quota", "harvester-quota-bench")
"""Our command lines: the product's and the test bench's."""

FOREIGN_FLAGS: dict[str, str] = {
    "--set": "helm install's values",
    "--admission-control-config-file": "kube-apiserver's admission configuration",
    "--from-file": "kubectl create configmap",
    "--reuse-values": "helm upgrade's: keep the installed values",
    "--reset-then-reuse-values": "helm upgrade's: the new chart's defaults, the installed values",
    "--force-conflicts": "kubectl apply --server-side's: take the fields over",
    "--no-hooks": "helm uninstall's: skip the pre-delete hook",
}
"""Flags of other programs the docs name in a code span of their own."""

FOREIGN_PROGRAMS = frozenset(
    {
        "python",
        "python3",
        "pytest",
        "helm",
        "kubectl",
        "kube-apiserver",
        "go",
        "make",
        "nice",
        "ruff",
        "mypy",
    }
)
"""A code span that runs one of these is not about our commands' flags."""

PASS_THROUGH: dict[str, tuple[str, ...]] = {
    "--controller-arg": ("harvester-quota", "run"),
    "--webhook-arg": ("harvester-quota", "webhook"),
}
"""`scale` flags whose value is a flag of a product command (`--webhook-arg=--target-room-wait=4`)."""

FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


@dataclass(frozen=True)
class FlagUse:
    """A flag the docs give, with the command paths it may belong to (`(("harvester-quota-bench",
    "cluster", "build"), ("harvester-quota-bench", "cluster", "up"))` for `cluster build|up`);
    none for a flag named on its own, which any parser of ours may accept."""

    flag: str
    commands: tuple[tuple[str, ...], ...] = ()


class Commands:
    """Our command lines' parser trees: which flags each command path (the program, then its
    subcommands) accepts."""

    def __init__(self, *parsers: argparse.ArgumentParser) -> None:
        self.flags: dict[tuple[str, ...], set[str]] = {}
        self.hidden: dict[tuple[str, ...], set[str]] = {}
        """Flags hidden from --help (argparse.SUPPRESS): retired ones, accepted and ignored."""
        self.children: dict[tuple[str, ...], set[str]] = {}
        for parser in parsers:
            self._walk(parser, (parser.prog,))

    def _walk(self, parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        self.flags[path] = set()
        self.hidden[path] = set()
        self.children[path] = set()
        for action in parser._actions:  # argparse offers no public walk of its tree
            self.flags[path].update(action.option_strings)
            if action.help == argparse.SUPPRESS:
                self.hidden[path].update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    self.children[path].add(name)
                    self._walk(child, (*path, name))

    def accepts(self, use: FlagUse) -> bool:
        """A flag given with command paths belongs to a parser on one of them (a parent's flag
        may come before the subcommand); one given alone, to any parser, or to another program
        the docs name (`FOREIGN_FLAGS`)."""
        if not use.commands:
            return use.flag in FOREIGN_FLAGS or any(use.flag in f for f in self.flags.values())
        return any(
            use.flag in self.flags.get(command[:depth], set())
            for command in use.commands
            for depth in range(1, len(command) + 1)
        )


def flag_uses(text: str, commands: Commands) -> list[FlagUse]:
    """Every flag the text gives: those on our command lines (code blocks, with their
    continuation lines) and in code spans, with their command; the other `--flags` of code spans
    that run no other program, alone."""
    uses: list[FlagUse] = []
    for line in _command_lines(code_lines(text)):
        uses.extend(_command_flags(line, commands) or [])
    for span in code_spans(text):
        on_command = _command_flags(span, commands)
        if on_command is not None:
            uses.extend(on_command)
        elif not FOREIGN_PROGRAMS & {Path(word).name for word in span.split()}:
            uses.extend(FlagUse(flag) for flag in FLAG.findall(span) if flag.startswith("--"))
    return uses


def unknown_flags(text: str, commands: Commands) -> list[str]:
    """The flags of `flag_uses` that no parser accepts, as `harvester-quota command --flag`
    (a flag named alone: `any --flag`)."""
    unknown = []
    for use in flag_uses(text, commands):
        if not commands.accepts(use):
            command = "|".join(" ".join(path) for path in use.commands) or "any"
            unknown.append(f"{command} {use.flag}")
    return unknown


def unknown_commands(text: str, commands: Commands) -> list[str]:
    """Subcommands the text runs that its program does not have (`harvester-quota scale`, a
    bench command given to the product's program), as `program subcommand`."""
    texts = _command_lines(code_lines(text)) + code_spans(text)
    unknown = []
    for match in filter(None, (COMMAND.search(line) for line in texts)):
        program, first = match.group(1), match.group(2).split()[0]
        if SUBCOMMAND.fullmatch(first) and first not in commands.children[(program,)]:
            unknown.append(f"{program} {first}")
    return unknown


SUBCOMMAND = re.compile(r"[a-z][a-z-]*")
"""What a subcommand looks like (a release name or a folder after the program's name does not)."""


def _command_lines(lines: list[str]) -> list[str]:
    """Code lines (comments cut) joined with their continuations: after a line ending in a
    backslash, or a synopsis line starting with `[` or `|` under a line of ours."""
    joined: list[str] = []
    for line in lines:
        code = line.split(" #")[0].strip()
        if (
            joined
            and COMMAND.search(joined[-1])
            and (joined[-1].endswith("\\") or code[:1] in ("[", "|"))
        ):
            joined[-1] = joined[-1].rstrip("\\") + " " + code
        else:
            joined.append(code)
    return joined


COMMAND = re.compile(r"(?:^|[\s(`]|/bin/|cmd/)(harvester-quota(?:-bench)?)\s+(\S.*)$")


def _command_flags(text: str, commands: Commands) -> list[FlagUse] | None:
    """The flags after `harvester-quota` or `harvester-quota-bench` in `text`, with the command
    paths they follow; None when `text` runs no command of ours (the word is a release name, a
    folder...)."""
    match = COMMAND.search(text)
    if match is None:
        return None
    program = match.group(1)
    words = re.sub(r"[\[\]]", " ", match.group(2)).split()
    if words[0] not in commands.children[(program,)] and not words[0].startswith("-"):
        return None
    paths: list[tuple[str, ...]] = [(program,)]
    uses = []
    for word in words:
        if word.startswith("-"):  # `-o|--output` gives both
            for spelling in word.split("|"):
                uses.extend(_uses_of(spelling, tuple(paths)))
            continue
        names = [name for name in word.split("|") if name]
        deeper = [(*p, name) for p in paths for name in names if name in commands.children[p]]
        paths = deeper or paths
    return uses


def _uses_of(word: str, paths: tuple[tuple[str, ...], ...]) -> list[FlagUse]:
    """The flag `word` gives (`--flag` or `--flag=value`); for a pass-through flag whose value
    is a flag (`--webhook-arg=--target-room-wait=4`), that flag too, for the other command."""
    flag, _, value = word.partition("=")
    if not FLAG.fullmatch(flag):
        return []
    uses = [FlagUse(flag, paths)]
    if flag in PASS_THROUGH and value.startswith("--"):
        uses.append(FlagUse(value.partition("=")[0], (PASS_THROUGH[flag],)))
    return uses
