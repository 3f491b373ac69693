"""`Quantity` against Kubernetes' own resource.Quantity, on thousands of generated strings.

A tiny Go program (tests/gohelpers/quantity) built from k8s.io/apimachinery v0.36.5 (the version
the local cluster runs) answers for Go: valid or not, its `String()`, and (within int64) its
`MilliValue()`, `Value()` and `Sign()`. It is built once per machine, like the cluster binaries,
into the project cache, keyed by a hash of its sources. Without Go the test is skipped (a machine
with prebuilt cluster binaries needs no Go); with Go, a failed build fails the test.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from harvester_quota.localcluster.binaries import build_env, cache_root
from harvester_quota.util.quantity import Quantity
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

HELPER = Path(__file__).resolve().parents[1] / "gohelpers" / "quantity"
INT64 = 2**63


def _source_hash() -> str:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update((HELPER / name).read_bytes())
    return digest.hexdigest()[:16]


def build_oracle() -> Path:
    """The helper binary, built on first use (under a lock-free temp name, then renamed)."""
    target = cache_root() / "test-helpers" / f"quantity-oracle-{_source_hash()}"
    if target.exists():
        return target
    go = shutil.which("go")
    if go is None:
        pytest.skip("Go is not installed: the Quantity oracle cannot be built")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    done = subprocess.run(
        [go, "build", "-trimpath", "-o", str(partial), "."],
        cwd=HELPER,
        env=build_env(),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, f"building the Quantity oracle failed:\n{done.stderr[-3000:]}"
    partial.rename(target)
    return target


class Oracle:
    """One long-running oracle process answering a line per question."""

    def __init__(self, binary: Path) -> None:
        self.process = subprocess.Popen(
            [str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def ask(self, texts: list[str]) -> list[str]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write("".join(f"{t}\n" for t in texts))
        self.process.stdin.flush()
        return [self.process.stdout.readline().rstrip("\n") for _ in texts]

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(10)


@pytest.fixture(scope="module")
def oracle() -> Iterator[Oracle]:
    answering = Oracle(build_oracle())
    yield answering
    answering.close()


def ours(text: str) -> str:
    """Our answer in the oracle's format. MilliValue and Value are compared for non-negative
    quantities within int64 only: beyond it Go's int64 overflows, and for negative fractions Go
    rounds the magnitude up and drops the sign (-1e-12 has Value() 1); quotas are neither."""
    try:
        q = Quantity.parse(text)
    except ValueError:
        return "ERR"
    milli, value = q.milli_value(), q.value()
    if q.sign() < 0 or not (milli < INT64 and value < INT64):
        return f"OK {q} ? ? {q.sign()}"
    return f"OK {q} {milli} {value} {q.sign()}"


BEYOND_OUR_BOUND = ("integer digits", "significant digits")
"""Our documented deliberate refusals (quantity.MAX_INTEGER_DIGITS, MAX_SIGNIFICANT_DIGITS):
Go keeps 1e999999999 as a scaled decimal; we refuse numbers beyond 10^1000 with a ValueError
rather than hold thousand-digit integers. Everything else must agree."""


def beyond_our_bound(text: str) -> bool:
    try:
        Quantity.parse(text)
    except ValueError as error:
        return any(reason in str(error) for reason in BEYOND_OUR_BOUND)
    return False


def same(go: str, python: str) -> bool:
    if go == "ERR" or python == "ERR":
        return go == python
    g, p = go.split(), python.split()
    return all(a == b for a, b in zip(g, p, strict=True) if "?" not in (a, b))


# Inputs: Kubernetes' own quantity tests (apimachinery pkg/api/resource/quantity_test.go),
# the cases that fail or canonicalize unusually, and the seeds' numbers.
TABLE = [
    "0",
    "0m",
    "0Ki",
    "0Mi",
    "0e3",
    "-0",
    "+0",
    "1",
    "-1",
    "+1",
    "1m",
    "1u",
    "1n",
    "1k",
    "1M",
    "1G",
    "1T",
    "1P",
    "1E",
    "1Ki",
    "1Mi",
    "1Gi",
    "1Ti",
    "1Pi",
    "1Ei",
    "1e3",
    "1E3",
    "1e-3",
    "1e+3",
    "1.5",
    "1.5Gi",
    "100m",
    "0.1",
    ".5",
    "5.",
    "0.5Ki",
    "1024Mi",
    "1000Mi",
    "1.1Mi",
    "12e6",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "123456789012345678901234567890",
    "0.000000001",
    "0.0000000001",
    "1.000000001",
    "10000m",
    "3000m",
    "5000Mi",
    "4531245057",
    "4797464313",
    "5682461313",
    "60Gi",
    "320Gi",
    "2015m",
    "1.5e3",
    "1.5E3",
    "1e",
    "e3",
    "1i",
    "1Kib",
    "1 Ki",
    " 1",
    "1 ",
    "",
    "-",
    "+",
    ".",
    "..5",
    "1.2.3",
    "1e1.5",
    "1e-",
    "1e+",
    "ki",
    "Ki",
    "1KI",
    "1ki",
    "1mi",
    "0x10",
    "1_000",
    "٣",
    "1\t",
    "1e309",
    "1e-309",
    "999999999999999999999999999999Ei",
    "-1.5Gi",
    "-.5",
    "+.5m",
    "0.5m",
    "0.4m",
    "1.5n",
    "1.5u",
    "7Ei",
    "8Ei",
    "-8Ei",
    "1Pi1",
    "inf",
    "NaN",
    "1e18",
    "1e19",
    "1E1",
    "5e-1",
    "05",
    "005m",
    "1.50",
    "1.500Gi",
]


def test_the_table_agrees_with_go(oracle: Oracle) -> None:
    answers = oracle.ask(TABLE)
    differing = [
        (text, go, ours(text))
        for text, go in zip(TABLE, answers, strict=True)
        if not same(go, ours(text))
    ]
    assert differing == []


DIGITS = st.text("0123456789", min_size=0, max_size=25)
SUFFIXES = st.sampled_from(
    [
        "",
        "m",
        "u",
        "n",
        "k",
        "M",
        "G",
        "T",
        "P",
        "E",
        "Ki",
        "Mi",
        "Gi",
        "Ti",
        "Pi",
        "Ei",
        "e3",
        "E3",
        "e-3",
        "e+9",
        "e0",
        "E-12",
        "e",
        "i",
        "K",
        "mi",
        "x",
        " ",
    ]
)
NUMBERS = st.builds(
    lambda sign, whole, dot, frac, suffix: f"{sign}{whole}{dot}{frac}{suffix}",
    st.sampled_from(["", "", "-", "+"]),
    DIGITS,
    st.sampled_from(["", ".", "."]),
    DIGITS,
    SUFFIXES,
)
EXPONENTS = st.builds(
    lambda sign, whole, frac, e, esign, exp: f"{sign}{whole}.{frac}{e}{esign}{exp}",
    st.sampled_from(["", "-", "+"]),
    st.text("0123456789", min_size=0, max_size=60),
    st.text("0123456789", min_size=0, max_size=40),
    st.sampled_from(["e", "E"]),
    st.sampled_from(["", "-", "+"]),
    st.text("0123456789", min_size=0, max_size=3),
)
NOISE = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=12
)


@settings(
    max_examples=4000,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(texts=st.lists(st.one_of(NUMBERS, EXPONENTS, NOISE), min_size=1, max_size=20))
def test_generated_strings_agree_with_go(oracle: Oracle, texts: list[str]) -> None:
    asked = [t for t in texts if not beyond_our_bound(t)]
    answers = oracle.ask(asked)
    for text, go in zip(asked, answers, strict=True):
        assert same(go, ours(text)), (text, go, ours(text))
