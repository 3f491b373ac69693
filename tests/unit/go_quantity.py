"""The Go oracle for `Quantity`: a tiny helper built from k8s.io/apimachinery (tests/gohelpers/quantity).

It is built once per machine with the same Go environment as the local cluster's binaries
(`binaries.build_env`: CGO off, local toolchain, read-only modules verified by the committed go.sum)
into ``<cache>/gohelpers/quantity-<hash of its sources>/``, and answers many strings per process.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harvester_quota.testbench.localcluster import binaries

HELPER_DIR = Path(__file__).resolve().parents[1] / "gohelpers" / "quantity"
HELPER_SOURCES = ("go.mod", "go.sum", "main.go")
BUILD_TIMEOUT_SECONDS = 600  # a cold module download plus compile on two cores; warm it is ~1 s
RUN_TIMEOUT_SECONDS = 120


class GoUnavailable(Exception):
    """No usable Go toolchain on this machine: the oracle tests are skipped, saying so."""


@dataclass(frozen=True)
class GoParse:
    """What Go made of one string: None fields when ParseQuantity refused it."""

    string: str | None
    dec: str | None
    fmt: str | None

    @property
    def valid(self) -> bool:
        return self.string is not None


def sources_hash() -> str:
    """Digest of the helper's sources, so an edit builds a new helper instead of reusing a stale one."""
    digest = hashlib.sha256()
    for name in HELPER_SOURCES:
        digest.update(name.encode() + b"\0" + (HELPER_DIR / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def find_go() -> str:
    """The Go toolchain, or GoUnavailable with the reason."""
    try:
        return binaries.find_go()
    except binaries.ClusterError as error:
        raise GoUnavailable(str(error)) from error


def build_helper() -> Path:
    """The helper binary, built once into the project cache; RuntimeError if the build fails."""
    go = find_go()
    target = binaries.cache_root() / "gohelpers" / f"quantity-{sources_hash()}" / "quantity"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="quantity-helper-") as workdir:
        module = Path(workdir) / "quantity"
        shutil.copytree(HELPER_DIR, module)
        partial = target.parent / f".quantity.{Path(workdir).name}"
        result = subprocess.run(
            [go, "build", "-trimpath", "-o", str(partial), "."],
            cwd=module,
            env=binaries.build_env(),
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_SECONDS,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"go build of {HELPER_DIR} failed:\n{result.stdout}{result.stderr}")
        partial.replace(target)
    return target


def _quote(text: str) -> str:
    """A Go-quotable line: JSON's escapes are a subset of Go's (non-ASCII stays literal UTF-8)."""
    return json.dumps(text, ensure_ascii=False)


def _run(helper: Path, mode: str, lines: list[str]) -> list[str]:
    result = subprocess.run(
        [str(helper), mode],
        input="".join(line + "\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
        check=True,
    )
    answers = result.stdout.splitlines()
    if len(answers) != len(lines) or "bad-line" in answers:
        raise RuntimeError(f"the helper misread its input: {result.stdout[:2000]!r}")
    return answers


def go_parse(helper: Path, texts: list[str]) -> list[GoParse]:
    """Go's ParseQuantity, String(), AsDec().String() and Format for each text, in one process."""
    parsed = []
    for answer in _run(helper, "parse", [_quote(text) for text in texts]):
        fields = answer.split("\t")
        if fields[0] == "ok":
            parsed.append(GoParse(fields[1], fields[2], fields[3]))
        else:
            parsed.append(GoParse(None, None, None))
    return parsed


def go_add(helper: Path, pairs: list[tuple[str, str]]) -> list[tuple[str, int] | None]:
    """Go's (a+b).String() and a.Cmp(b) for each pair of valid texts, None if either is invalid."""
    answers = _run(helper, "add", [f"{_quote(a)}\t{_quote(b)}" for a, b in pairs])
    results: list[tuple[str, int] | None] = []
    for answer in answers:
        fields = answer.split("\t")
        results.append((fields[1], int(fields[2])) if fields[0] == "ok" else None)
    return results
