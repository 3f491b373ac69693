"""`Quantity` against Go's k8s.io/apimachinery v0.36.5 `resource` package, input by input.

Two sources of truth: a table of the inputs apimachinery's own tests use (quantity_test.go and its
neighbours), with the answers Go gives for them, which runs without Go; and a helper built from that
module (tests/gohelpers/quantity) that answers thousands of generated strings, valid and invalid.

Deliberate differences, where Go gives a number we refuse with a ValueError: exponents outside int32
(Go silently wraps "1e4294967296" to 1) and values of more than `MAX_INTEGER_DIGITS` integer digits
(see pkg/util/quantity.py).
"""

from __future__ import annotations

import shutil
from decimal import Decimal
from pathlib import Path

import pytest
from harvester_quota.util.quantity import Format, Quantity
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from . import go_quantity
from .go_quantity import GoParse

# (input, Go's String(), Go's AsDec().String(), Go's Format), or (input, None, None, None) when
# ParseQuantity refuses it. Inputs from apimachinery v0.36.5's quantity tests; answers from Go.
UPSTREAM_TABLE: list[tuple[str, str | None, str | None, str | None]] = [
    ("1", "1", "1", "DecimalSI"),
    ("10", "10", "10", "DecimalSI"),
    ("500", "500", "500", "DecimalSI"),
    ("8000", "8k", "8000", "DecimalSI"),
    ("2", "2", "2", "DecimalSI"),
    ("0.1", "100m", "0.1", "DecimalSI"),
    ("0.03", "30m", "0.03", "DecimalSI"),
    ("0.004", "4m", "0.004", "DecimalSI"),
    ("9223372036854775808", "9223372036854775808", "9223372036854775808.000000000", "DecimalSI"),
    ("92233720368547758080", "92233720368547758080", "92233720368547758080.000000000", "DecimalSI"),
    (
        "922337203685477580800",
        "922337203685477580800",
        "922337203685477580800.000000000",
        "DecimalSI",
    ),
    ("922337203685477580.8", "922337203685477580800m", "922337203685477580.800000000", "DecimalSI"),
    ("92233720368547758.08", "92233720368547758080m", "92233720368547758.080000000", "DecimalSI"),
    ("-9223372036854775809", "-9223372036854775809", "-9223372036854775809.000000000", "DecimalSI"),
    (
        "-92233720368547758090",
        "-92233720368547758090",
        "-92233720368547758090.000000000",
        "DecimalSI",
    ),
    (
        "-922337203685477580900",
        "-922337203685477580900",
        "-922337203685477580900.000000000",
        "DecimalSI",
    ),
    (
        "-922337203685477580.9",
        "-922337203685477580900m",
        "-922337203685477580.900000000",
        "DecimalSI",
    ),
    (
        "-92233720368547758.09",
        "-92233720368547758090m",
        "-92233720368547758.090000000",
        "DecimalSI",
    ),
    ("0", "0", "0", "DecimalSI"),
    ("Non-Numeric", None, None, None),
    ("100m", "100m", "0.100", "DecimalSI"),
    ("1Gi", "1Gi", "1073741824", "BinarySI"),
    ("1000m", "1", "1.000", "DecimalSI"),
    ("50m", "50m", "0.050", "DecimalSI"),
    ("10000T", "10P", "10000000000000000", "DecimalSI"),
    ("100Gi", "100Gi", "107374182400", "BinarySI"),
    ("0.025Ti", "27487790694400m", "27487790694.400000000", "BinarySI"),
    ("0.025", "25m", "0.025", "DecimalSI"),
    ("025", "025", "25", "DecimalSI"),
    ("Ti", "0", "0", "BinarySI"),
    ("1.025Ti", "1126999418470400m", "1126999418470.400000000", "BinarySI"),
    ("1.025", "1.025", "1.025", "DecimalSI"),
    ("-1.025Ti", "-1126999418470400m", "-1126999418470.400000000", "BinarySI"),
    ("-1.025", "-1.025", "-1.025", "DecimalSI"),
    (".", "0", "0", "DecimalSI"),
    ("", None, None, None),
    ("-.", "0", "0", "DecimalSI"),
    ("1E-3", "1E-3", "0.001", "DecimalExponent"),
    ("E-3", "0", "0.000", "DecimalExponent"),
    ("0n", "0", "0.000000000", "DecimalSI"),
    ("0u", "0", "0.000000", "DecimalSI"),
    ("0m", "0", "0.000", "DecimalSI"),
    ("0Ki", "0", "0", "BinarySI"),
    ("0k", "0", "0", "DecimalSI"),
    ("0Mi", "0", "0", "BinarySI"),
    ("0M", "0", "0", "DecimalSI"),
    ("0Gi", "0", "0", "BinarySI"),
    ("0G", "0", "0", "DecimalSI"),
    ("0Ti", "0", "0", "BinarySI"),
    ("0T", "0", "0", "DecimalSI"),
    ("1Ki", "1Ki", "1024", "BinarySI"),
    ("8Ki", "8Ki", "8192", "BinarySI"),
    ("7Mi", "7Mi", "7340032", "BinarySI"),
    ("6Gi", "6Gi", "6442450944", "BinarySI"),
    ("5Ti", "5Ti", "5497558138880", "BinarySI"),
    ("4Pi", "4Pi", "4503599627370496.000000000", "BinarySI"),
    ("3Ei", "3Ei", "3458764513820540928.000000000", "BinarySI"),
    ("10Ti", "10Ti", "10995116277760", "BinarySI"),
    ("100Ti", "100Ti", "109951162777600.000000000", "BinarySI"),
    ("5n", "5n", "0.000000005", "DecimalSI"),
    ("4u", "4u", "0.000004", "DecimalSI"),
    ("3m", "3m", "0.003", "DecimalSI"),
    ("9", "9", "9", "DecimalSI"),
    ("8k", "8k", "8000", "DecimalSI"),
    ("50k", "50k", "50000", "DecimalSI"),
    ("7M", "7M", "7000000", "DecimalSI"),
    ("6G", "6G", "6000000000", "DecimalSI"),
    ("5T", "5T", "5000000000000", "DecimalSI"),
    ("40T", "40T", "40000000000000", "DecimalSI"),
    ("300T", "300T", "300000000000000", "DecimalSI"),
    ("2P", "2P", "2000000000000000", "DecimalSI"),
    ("1E", "1E", "1000000000000000000", "DecimalSI"),
    ("1e3", "1e3", "1000", "DecimalExponent"),
    ("1E6", "1E6", "1000000", "DecimalExponent"),
    ("1e9", "1e9", "1000000000", "DecimalExponent"),
    ("1E12", "1E12", "1000000000000", "DecimalExponent"),
    ("1e15", "1e15", "1000000000000000", "DecimalExponent"),
    ("1E18", "1E18", "1000000000000000000", "DecimalExponent"),
    ("1e14", "100e12", "100000000000000", "DecimalExponent"),
    ("1e13", "10e12", "10000000000000", "DecimalExponent"),
    ("100.035k", "100.035k", "100035", "DecimalSI"),
    ("0.001", "1m", "0.001", "DecimalSI"),
    ("0.0005k", "500m", "0.5", "DecimalSI"),
    ("0.005", "5m", "0.005", "DecimalSI"),
    ("0.05", "50m", "0.05", "DecimalSI"),
    ("0.5", "500m", "0.5", "DecimalSI"),
    ("0.00050k", "500m", "0.50", "DecimalSI"),
    ("0.00500", "5m", "0.00500", "DecimalSI"),
    ("0.05000", "50m", "0.05000", "DecimalSI"),
    ("0.50000", "500m", "0.50000", "DecimalSI"),
    ("0.5e0", "500e-3", "0.5", "DecimalExponent"),
    ("0.5e-1", "50e-3", "0.05", "DecimalExponent"),
    ("0.5e-2", "5e-3", "0.005", "DecimalExponent"),
    ("10.035M", "10.035M", "10035000", "DecimalSI"),
    ("1.2e3", "1200", "1200", "DecimalExponent"),
    ("1.3E+6", "1300e3", "1300000", "DecimalExponent"),
    ("1.40e9", "1400e6", "1400000000", "DecimalExponent"),
    ("1.53E12", "1530e9", "1530000000000", "DecimalExponent"),
    ("1.6e15", "1600e12", "1600000000000000", "DecimalExponent"),
    ("1.7E18", "1700e15", "1700000000000000000", "DecimalExponent"),
    ("9.01", "9010m", "9.01", "DecimalSI"),
    ("8.1k", "8100", "8100", "DecimalSI"),
    ("7.123456M", "7.123456M", "7123456", "DecimalSI"),
    ("6.987654321G", "6.987654321G", "6987654321", "DecimalSI"),
    ("5.444T", "5.444T", "5444000000000", "DecimalSI"),
    ("40.1T", "40100G", "40100000000000", "DecimalSI"),
    ("300.2T", "300200G", "300200000000000", "DecimalSI"),
    ("2.5P", "2500T", "2500000000000000", "DecimalSI"),
    ("1.01E", "1010P", "1010000000000000000", "DecimalSI"),
    ("3.001n", "4n", "0.000000004", "DecimalSI"),
    ("1.1E-9", "2e-9", "0.000000002", "DecimalExponent"),
    ("0.0000000001", "1n", "0.000000001", "DecimalSI"),
    ("0.0000000005", "1n", "0.000000001", "DecimalSI"),
    ("0.00000000050", "1n", "0.000000001", "DecimalSI"),
    ("0.5e-9", "1e-9", "0.000000001", "DecimalExponent"),
    ("0.9n", "1n", "0.000000001", "DecimalSI"),
    ("0.00000012345", "124n", "0.000000124", "DecimalSI"),
    ("0.00000012354", "124n", "0.000000124", "DecimalSI"),
    ("9Ei", "9223372036854775807", "9223372036854775807", "BinarySI"),
    ("9223372036854775807Ki", "9223372036854775807", "9223372036854775807", "BinarySI"),
    ("12E", "12E", "12000000000000000000", "DecimalSI"),
    ("100.035Ki", "102435840m", "102435.840000000", "BinarySI"),
    ("0.5Mi", "512Ki", "524288.000000000", "BinarySI"),
    ("0.05Gi", "53687091200m", "53687091.200000000", "BinarySI"),
    ("0.000000000001Ki", "2n", "0.000000002", "DecimalSI"),
    (".001", "1m", "0.001", "DecimalSI"),
    (".0001k", "100m", "0.1", "DecimalSI"),
    ("1.", "1.", "1", "DecimalSI"),
    ("1.G", "1.G", "1000000000", "DecimalSI"),
    ("-", "0", "0", "DecimalSI"),
    ("+", "0", "0", "DecimalSI"),
    ("1.1.M", None, None, None),
    ("1+1.0M", None, None, None),
    ("0.1mi", None, None, None),
    ("0.1am", None, None, None),
    ("aoeu", None, None, None),
    (".5i", None, None, None),
    ("1i", None, None, None),
    ("-3.01i", None, None, None),
    ("-3.01e-", None, None, None),
    (" 1", None, None, None),
    ("1 ", None, None, None),
    ("-9.01", "-9010m", "-9.01", "DecimalSI"),
    ("-9010m", "-9010m", "-9.010", "DecimalSI"),
    ("1024Mi", "1Gi", "1073741824", "BinarySI"),
    ("300Mi", "300Mi", "314572800", "BinarySI"),
    ("307200Ki", "300Mi", "314572800", "BinarySI"),
    ("6Ki", "6Ki", "6144", "BinarySI"),
    ("1001Gi", "1001Gi", "1074815565824", "BinarySI"),
    ("1025024Mi", "1001Gi", "1074815565824", "BinarySI"),
    ("1Ti", "1Ti", "1099511627776", "BinarySI"),
    ("1024Gi", "1Ti", "1099511627776", "BinarySI"),
    ("5", "5", "5", "DecimalSI"),
    ("5000m", "5", "5.000", "DecimalSI"),
    ("500m", "500m", "0.500", "DecimalSI"),
    ("1G", "1G", "1000000000", "DecimalSI"),
    ("1000M", "1G", "1000000000", "DecimalSI"),
    ("0.001T", "1G", "1000000000", "DecimalSI"),
    ("1m", "1m", "0.001", "DecimalSI"),
    ("1000u", "1m", "0.001000", "DecimalSI"),
    ("80m", "80m", "0.080", "DecimalSI"),
    ("1080m", "1080m", "1.080", "DecimalSI"),
    ("1.08", "1080m", "1.08", "DecimalSI"),
    ("1080000000n", "1080m", "1.080000000", "DecimalSI"),
    ("300M", "300M", "300000000", "DecimalSI"),
    ("1T", "1T", "1000000000000", "DecimalSI"),
    ("1234567M", "1234567M", "1234567000000", "DecimalSI"),
    ("1234567m", "1234567m", "1234.567", "DecimalSI"),
    ("3k", "3k", "3000", "DecimalSI"),
    ("1025", "1025", "1025", "DecimalSI"),
    (".001e12", "1e9", "1000000000", "DecimalExponent"),
    ("1e-3", "1e-3", "0.001", "DecimalExponent"),
    ("0.001e0", "1e-3", "0.001", "DecimalExponent"),
    ("1e-9", "1e-9", "0.000000001", "DecimalExponent"),
    ("1000e-12", "1e-9", "0.000000001", "DecimalExponent"),
    ("80e-3", "80e-3", "0.080", "DecimalExponent"),
    ("300e6", "300e6", "300000000", "DecimalExponent"),
    ("1e12", "1e12", "1000000000000", "DecimalExponent"),
    ("3e3", "3e3", "3000", "DecimalExponent"),
    ("00", "0", "0", "DecimalSI"),
    ("1n", "1n", "0.000000001", "DecimalSI"),
    ("80n", "80n", "0.000000080", "DecimalSI"),
    ("1080n", "1080n", "0.000001080", "DecimalSI"),
    ("1u", "1u", "0.000001", "DecimalSI"),
    ("80u", "80u", "0.000080", "DecimalSI"),
    ("1080u", "1080u", "0.001080", "DecimalSI"),
    ("-0", "0", "0", "DecimalSI"),
    ("1Mi", "1Mi", "1048576", "BinarySI"),
    (".001Ki", "1024m", "1.024000000", "BinarySI"),
    ("1024m", "1024m", "1.024", "DecimalSI"),
    (".000001Ki", "1024u", "0.001024000", "DecimalSI"),
    ("1024u", "1024u", "0.001024", "DecimalSI"),
    (".000000001Ki", "1024n", "0.000001024", "DecimalSI"),
    ("1024n", "1024n", "0.000001024", "DecimalSI"),
    (".000000000001Ki", "2n", "0.000000002", "DecimalSI"),
    ("2n", "2n", "0.000000002", "DecimalSI"),
    ("-1", "-1", "-1", "DecimalSI"),
    ("1234", "1234", "1234", "DecimalSI"),
    ("1048576m", "1048576m", "1048.576", "DecimalSI"),
    ("1k", "1k", "1000", "DecimalSI"),
    ("1234k", "1234k", "1234000", "DecimalSI"),
    ("1e6", "1e6", "1000000", "DecimalExponent"),
    ("2Ki", "2Ki", "2048", "BinarySI"),
    ("1.1Ki", "1126400m", "1126.400000000", "BinarySI"),
    ("2Gi", "2Gi", "2147483648", "BinarySI"),
    ("invalid", None, None, None),
    ("mem", None, None, None),
    ("null", None, None, None),
    ("1M", "1M", "1000000", "DecimalSI"),
    ("5Gi", "5Gi", "5368709120", "BinarySI"),
    ("5G", "5G", "5000000000", "DecimalSI"),
    ("5300m", "5300m", "5.300", "DecimalSI"),
    ("5.4", "5400m", "5.4", "DecimalSI"),
    ("100", "100", "100", "DecimalSI"),
    ("1080", "1080", "1080", "DecimalSI"),
    (" \t\n\r1M \t\n\r", None, None, None),
]


# Inputs on which we differed from Go before this table existed (we refused them, or raised Python's
# own int-conversion error that does not name the text); answers from Go.
DIFFERED_BEFORE: list[tuple[str, str | None, str | None, str | None]] = [
    ("1." + "0" * 1500 + "1", "1000000001n", "1000000001e-9", "DecimalSI"),
    ("0." + "1" * 5000, "111111112n", "111111112e-9", "DecimalSI"),
    ("1." + "5" * 1001 + "Ki", "1592888888889n", "1592888888889e-9", "BinarySI"),
    (
        "0." + "0" * 9 + "1" * 9000 + "Ei",
        "128102389400760776n",
        "128102389400760776e-9",
        "BinarySI",
    ),
    ("1e" + "0" * 5000 + "5", "100e3", "1e5", "DecimalExponent"),
    (
        "1" * 999 + "." + "9" * 9000 + "Ki",
        "9223372036854775807",
        "9223372036854775807e0",
        "BinarySI",
    ),
    ("1" * 2000 + "Ei", "9223372036854775807", "9223372036854775807e0", "BinarySI"),
    ("-" + "1" * 20 + "Ki", "-9223372036854775807", "-9223372036854775807e0", "BinarySI"),
    ("1e" + "9" * 30, None, None, None),
    ("1e" + "0" * 4400, "1e" + "0" * 4400, "1e0", "DecimalExponent"),
]


def _our_answer(text: str) -> GoParse | ValueError:
    try:
        quantity = Quantity.parse(text)
    except ValueError as error:
        return error
    return GoParse(str(quantity), None, quantity.format.value)


def _same_value(quantity: Quantity, go_dec: str) -> bool:
    """Exact decimal comparison (no context rounding: both sides are built from strings)."""
    return Decimal(f"{quantity.nanos}E-9") == Decimal(go_dec)


def _is_deliberate_refusal(error: ValueError) -> bool:
    message = str(error)
    return "out of range" in message or "integer digits" in message


def assert_agrees(text: str, go: GoParse) -> None:
    """Our parse of `text` says what Go said: same String(), value and Format, or both invalid."""
    ours = _our_answer(text)
    if isinstance(ours, ValueError):
        assert repr(text) in str(ours), f"the error must name the text: {ours}"
        assert not go.valid or _is_deliberate_refusal(ours), (
            f"{text!r}: Go accepts it as {go.string!r} ({go.dec}), we refuse it: {ours}"
        )
        return
    assert go.valid, f"{text!r}: Go refuses it, we parse it as {ours.string!r}"
    quantity = Quantity.parse(text)
    assert (ours.string, ours.fmt) == (go.string, go.fmt), f"{text!r}: Go {go}, ours {ours}"
    assert go.dec is not None and _same_value(quantity, go.dec), (
        f"{text!r}: Go's value {go.dec}, ours {quantity.nanos}n"
    )


@pytest.mark.parametrize(("text", "string", "dec", "fmt"), [*UPSTREAM_TABLE, *DIFFERED_BEFORE])
def test_upstream_cases(text: str, string: str | None, dec: str | None, fmt: str | None) -> None:
    assert_agrees(text, GoParse(string, dec, fmt))


def test_upstream_table_has_valid_and_invalid_cases() -> None:
    valid = sum(1 for row in UPSTREAM_TABLE if row[1] is not None)
    assert valid > 150 and len(UPSTREAM_TABLE) - valid > 15


def test_invalid_text_is_a_value_error_never_zero() -> None:
    for text in ("", " 1", "1 ", "1.1.M", "0.1mi", "aoeu", "-3.01e-", "\u0661", "1Ki "):
        with pytest.raises(ValueError, match="invalid quantity"):
            Quantity.parse(text)


# --------------------------------------------------------------------------- the Go oracle


@pytest.fixture(scope="module")
def helper() -> Path:
    try:
        return go_quantity.build_helper()
    except go_quantity.GoUnavailable as error:
        pytest.skip(f"Go is needed to compare Quantity with apimachinery: {error}")


def test_helper_builds_when_go_is_present() -> None:
    """No silent skip: with Go on PATH the helper must build (and answer)."""
    if shutil.which("go") is None:
        pytest.skip("Go is not on PATH")
    built = go_quantity.build_helper()
    assert go_quantity.go_parse(built, ["1.5", "x"]) == [
        GoParse("1500m", "15e-1", "DecimalSI"),
        GoParse(None, None, None),
    ]


VALID_SUFFIXES = [
    "",
    "n",
    "u",
    "m",
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
]
_SIGNS = st.sampled_from(["", "", "+", "-"])
_SUFFIXES = st.sampled_from(
    [*VALID_SUFFIXES, "K", "i", "mi", "KI", "kb", "e", "E", "e+", "E-", "ee1", "eE", "Ei1", "Mi-1"]
)
_EXPONENTS = st.builds(
    lambda letter, sign, digits: f"{letter}{sign}{digits}",
    st.sampled_from(["e", "E"]),
    st.sampled_from(["", "+", "-"]),
    st.one_of(
        st.integers(0, 30).map(str),
        st.integers(0, 400).map(str),
        # Wrapping int32 exponents Go reads cheaply; never 2^31-1 and alike, which take Go minutes.
        st.sampled_from(["0", "00", "007", "4294967296", "4294967297", "4294967306", "-"]),
        st.integers(1, 5000).map(lambda zeros: "0" * zeros + "12"),
        st.text("9", min_size=19, max_size=25),
    ),
)
_DIGIT_RUNS = st.one_of(
    st.text("0123456789", max_size=4),
    st.text("0123456789", min_size=5, max_size=40),
    st.text("09", max_size=25),
    st.sampled_from(["9223372036854775807", "9223372036854775808", "1" + "0" * 18]),
    # Beyond Python's 4300-digit int conversion limit, and runs of zeros around one digit.
    st.integers(900, 9000).map(lambda count: "1" * count),
    st.builds(lambda a, b: "0" * a + "7" + "0" * b, st.integers(0, 5000), st.integers(0, 5000)),
)


@st.composite
def _number_like(draw: st.DrawFn) -> str:
    number = draw(_DIGIT_RUNS)
    if draw(st.booleans()):
        number += "." + draw(_DIGIT_RUNS)
    suffix = draw(st.one_of(_SUFFIXES, _EXPONENTS))
    return draw(_SIGNS) + number + suffix


_GARBAGE = st.one_of(
    st.text(alphabet="0123456789.+-eEinumkKMGTP ", max_size=12),
    st.text(max_size=8),
    st.builds(
        lambda pad, body, pad2: pad + body + pad2,
        st.sampled_from(["", " ", "\t", "\u00a0"]),
        _number_like(),
        st.sampled_from(["", " ", "\n", "x"]),
    ),
    st.sampled_from(
        ["", ".", "-.", "+.", ".5", "5.", "-0", "\u0663", "\uff11", "1e", "Ki", ".e-10"]
    ),
)
QUANTITY_TEXT = st.one_of(_number_like(), _number_like(), _GARBAGE)

BATCH = 250
BATCHES = 24  # 6000 generated strings per run, in 24 helper processes


@settings(
    max_examples=BATCHES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(QUANTITY_TEXT, min_size=BATCH, max_size=BATCH))
def test_generated_strings_parse_as_in_go(helper: Path, texts: list[str]) -> None:
    for text, go in zip(texts, go_quantity.go_parse(helper, texts), strict=True):
        assert_agrees(text, go)


_VALID_TEXT = st.builds(
    lambda sign, whole, fraction, suffix: f"{sign}{whole}{fraction}{suffix}",
    _SIGNS,
    st.text("0123456789", min_size=1, max_size=20),
    st.one_of(st.just(""), st.text("0123456789", max_size=12).map(lambda digits: "." + digits)),
    st.sampled_from([*VALID_SUFFIXES, "e3", "E-3", "e+6", "e0", "e-9", "e-12", "e18"]),
)


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.tuples(_VALID_TEXT, _VALID_TEXT), min_size=BATCH, max_size=BATCH))
def test_sum_and_order_as_in_go(helper: Path, pairs: list[tuple[str, str]]) -> None:
    for (a, b), go in zip(pairs, go_quantity.go_add(helper, pairs), strict=True):
        assert go is not None, f"Go refuses {a!r} or {b!r}, which we parse"
        left, right = Quantity.parse(a), Quantity.parse(b)
        order = (left > right) - (left < right)  # Go's Cmp, from our comparisons
        assert (str(left + right), order) == go, f"{a!r} + {b!r}"


def test_formats_are_go_names() -> None:
    assert {fmt.value for fmt in Format} == {"BinarySI", "DecimalSI", "DecimalExponent"}
