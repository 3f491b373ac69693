"""Quantity and ResourceList tests.

The expected strings, formats and values in the tables were printed by a small Go program calling
k8s.io/apimachinery v0.36.1's `resource` package (ParseQuantity, String, Format, Value, MilliValue,
Add, Sub, Neg, NewQuantity, NewMilliQuantity, NewScaledQuantity). A row whose value differs from
Go's says why: Go overflows int64 (we stay exact), or Go's big-decimal path rounds a negative value
the other way (we always round away from zero, as its documentation and its int64 path do).
"""

from __future__ import annotations

import copy
import pickle

import pytest
from harvester_quota.util import resources
from harvester_quota.util.quantity import MAX_INTEGER_DIGITS, Format, Quantity
from harvester_quota.util.resources import ResourceList
from hypothesis import given
from hypothesis import strategies as st

BIN = Format.BINARY_SI
DEC = Format.DECIMAL_SI
EXP = Format.DECIMAL_EXPONENT

# (input, Go's String(), Go's Format, value(), milli_value())
PARSE_TABLE = [
    ("0", "0", DEC, 0, 0),
    ("1", "1", DEC, 1, 1000),
    ("-1", "-1", DEC, -1, -1000),
    ("+1", "+1", DEC, 1, 1000),
    ("01", "01", DEC, 1, 1000),
    ("1.", "1.", DEC, 1, 1000),
    (".5", "500m", DEC, 1, 500),
    ("-.5", "-500m", DEC, -1, -500),
    (".", "0", DEC, 0, 0),
    ("-", "0", DEC, 0, 0),
    ("+", "0", DEC, 0, 0),
    ("0.1", "100m", DEC, 1, 100),
    ("0.5", "500m", DEC, 1, 500),
    ("1.5", "1500m", DEC, 2, 1500),
    ("1000m", "1", DEC, 1, 1000),
    ("100m", "100m", DEC, 1, 100),
    ("1100m", "1100m", DEC, 2, 1100),
    ("1n", "1n", DEC, 1, 1),
    ("100u", "100u", DEC, 1, 1),
    ("1u", "1u", DEC, 1, 1),
    ("1m", "1m", DEC, 1, 1),
    ("1500n", "1500n", DEC, 1, 1),
    ("1k", "1k", DEC, 1000, 1000000),
    ("1M", "1M", DEC, 1000000, 1000000000),
    ("1G", "1G", DEC, 1000000000, 1000000000000),
    ("1T", "1T", DEC, 1000000000000, 1000000000000000),
    ("1P", "1P", DEC, 1000000000000000, 1000000000000000000),
    (
        "1E",
        "1E",
        DEC,
        1000000000000000000,
        1000000000000000000000,
    ),  # Go overflows int64: 1000000000000000000, 0
    ("10E", "10E", DEC, 10000000000000000000, 10000000000000000000000),  # Go overflows int64: 0, 0
    (
        "1000E",
        "1",
        DEC,
        1000000000000000000000,
        1000000000000000000000000,
    ),  # Go overflows int64: 0, 0
    ("1Ki", "1Ki", BIN, 1024, 1024000),
    ("1Mi", "1Mi", BIN, 1048576, 1048576000),
    ("1Gi", "1Gi", BIN, 1073741824, 1073741824000),
    ("1Ti", "1Ti", BIN, 1099511627776, 1099511627776000),
    ("1Pi", "1Pi", BIN, 1125899906842624, 1125899906842624000),
    (
        "1Ei",
        "1Ei",
        BIN,
        1152921504606846976,
        1152921504606846976000,
    ),  # Go overflows int64: 1152921504606846976, -9223372036854775808
    (
        "8Ei",
        "9223372036854775807",
        BIN,
        9223372036854775807,
        9223372036854775807000,
    ),  # Go overflows int64: 9223372036854775807, -1000
    ("1.5Gi", "1536Mi", BIN, 1610612736, 1610612736000),
    ("1024Ki", "1Mi", BIN, 1048576, 1048576000),
    ("1025Ki", "1025Ki", BIN, 1049600, 1049600000),
    ("2048Ki", "2Mi", BIN, 2097152, 2097152000),
    ("1536Ki", "1536Ki", BIN, 1572864, 1572864000),
    ("1023Ki", "1023Ki", BIN, 1047552, 1047552000),
    ("7Gi", "7Gi", BIN, 7516192768, 7516192768000),
    ("8Gi", "8Gi", BIN, 8589934592, 8589934592000),
    ("9Gi", "9Gi", BIN, 9663676416, 9663676416000),
    ("0Ki", "0", BIN, 0, 0),
    ("0.0Ki", "0", BIN, 0, 0),
    ("0.5Ki", "512", BIN, 512, 512000),
    ("0.0001Ki", "102400u", DEC, 1, 103),
    ("1.0001Ki", "1024102400u", BIN, 1025, 1024103),
    ("1.1Ki", "1126400m", BIN, 1127, 1126400),
    ("12e6", "12e6", EXP, 12000000, 12000000000),
    ("1e3", "1e3", EXP, 1000, 1000000),
    ("1E3", "1E3", EXP, 1000, 1000000),
    ("12E-3", "12E-3", EXP, 1, 12),
    ("1e-3", "1e-3", EXP, 1, 1),
    ("1e+3", "1e+3", EXP, 1000, 1000000),
    ("1e03", "1e03", EXP, 1000, 1000000),
    ("1e-9", "1e-9", EXP, 1, 1),
    ("1e-10", "1e-9", EXP, 1, 1),
    ("1e-100", "1e-9", EXP, 1, 1),
    ("1e4", "10e3", EXP, 10000, 10000000),
    ("10e3", "10e3", EXP, 10000, 10000000),
    (
        "1e21",
        "1e21",
        EXP,
        1000000000000000000000,
        1000000000000000000000000,
    ),  # Go overflows int64: 0, 0
    ("1.5e0", "1500e-3", EXP, 2, 1500),
    ("100e-3", "100e-3", EXP, 1, 100),
    ("1.1e3", "1100", EXP, 1100, 1100000),
    ("0e5", "0", EXP, 0, 0),
    (
        "1.E",
        "1.E",
        DEC,
        1000000000000000000,
        1000000000000000000000,
    ),  # Go overflows int64: 1000000000000000000, 0
    (".E", "0", DEC, 0, 0),
    ("4531245057", "4531245057", DEC, 4531245057, 4531245057000),
    ("68719476736", "68719476736", DEC, 68719476736, 68719476736000),
    (
        "9223372036854775807",
        "9223372036854775807",
        DEC,
        9223372036854775807,
        9223372036854775807000,
    ),  # Go overflows int64: 9223372036854775807, -1000
    (
        "9223372036854775808",
        "9223372036854775808",
        DEC,
        9223372036854775808,
        9223372036854775808000,
    ),  # Go overflows int64: -9223372036854775808, 0
    (
        "1180591620717411303424",
        "1180591620717411303424",
        DEC,
        1180591620717411303424,
        1180591620717411303424000,
    ),  # Go overflows int64: 0, 0
    ("0.000000000000000000000000000001", "1n", DEC, 1, 1),
    ("1.5e-9", "2e-9", EXP, 1, 1),
    ("5e-7", "500e-9", EXP, 1, 1),
    ("-0.1n", "-1n", DEC, -1, -1),  # Go's big-decimal path: 1, 1
    ("0.1n", "1n", DEC, 1, 1),
    ("1.1n", "2n", DEC, 1, 1),
    ("3000m", "3", DEC, 3, 3000),
    ("5000Mi", "5000Mi", BIN, 5242880000, 5242880000000),
    ("10240Mi", "10Gi", BIN, 10737418240, 10737418240000),
    ("10000m", "10", DEC, 10, 10000),
    ("2000m", "2", DEC, 2, 2000),
    ("4", "4", DEC, 4, 4000),
    ("100Mi", "100Mi", BIN, 104857600, 104857600000),
    ("1.G", "1.G", DEC, 1000000000, 1000000000000),
    ("1.Gi", "1.Gi", BIN, 1073741824, 1073741824000),
    ("1.Pi", "1Pi", BIN, 1125899906842624, 1125899906842624000),
    (".5Pi", "512Ti", BIN, 562949953421312, 562949953421312000),
    ("1.0", "1", DEC, 1, 1000),
    ("1.000", "1", DEC, 1, 1000),
    ("1000", "1k", DEC, 1000, 1000000),
    ("10000", "10k", DEC, 10000, 10000000),
    ("-1.5", "-1500m", DEC, -2, -1500),
    ("-1000m", "-1", DEC, -1, -1000),
    ("-1Ki", "-1Ki", BIN, -1024, -1024000),
    ("-1.5Gi", "-1536Mi", BIN, -1610612736, -1610612736000),
    ("123456789012345678e-9", "123456789012345678e-9", EXP, 123456790, 123456789013),
    ("1234567890123456789e-9", "1234567890123456789e-9", EXP, 1234567891, 1234567890124),
    (
        "999999999999999999",
        "999999999999999999",
        DEC,
        999999999999999999,
        999999999999999999000,
    ),  # Go overflows int64: 999999999999999999, 3875820019684211736
    ("0.999999999999", "1", DEC, 1, 1000),
    ("-0.000000000000000000000001Ki", "-1n", DEC, -1, -1),  # Go's big-decimal path: 1, 1
]


@pytest.mark.parametrize(("text", "expected", "fmt", "value", "milli"), PARSE_TABLE)
def test_parse_matches_go(text: str, expected: str, fmt: Format, value: int, milli: int) -> None:
    quantity = Quantity.parse(text)
    assert str(quantity) == expected
    assert quantity.format is fmt
    assert quantity.value() == value
    assert quantity.milli_value() == milli


# (operation, a, b, Go's String() of the result, Go's Format of the result)
OPERATION_TABLE = [
    ("add", "1Gi", "500m", "1073741824500m", BIN),
    ("add", "0", "1Gi", "1Gi", BIN),
    ("add", "0Ki", "1", "1", DEC),
    ("add", "1", "1Gi", "1073741825", DEC),
    ("add", "1Gi", "1", "1073741825", BIN),
    ("add", "2", "3", "5", DEC),
    ("add", "12e6", "1", "12000001", EXP),
    ("add", "1.5Gi", "512Mi", "2Gi", BIN),
    ("add", "4531245057", "1Gi", "5604986881", DEC),
    ("add", "3000m", "2000m", "5", DEC),
    ("add", "100m", "900m", "1", DEC),
    ("add", "1Ki", "1Ki", "2Ki", BIN),
    ("add", "1Ki", "-1Ki", "0", BIN),
    ("add", "5000Mi", "5000Mi", "10000Mi", BIN),
    ("sub", "1Gi", "1Gi", "0", BIN),
    ("sub", "0", "1Gi", "-1Gi", BIN),
    ("sub", "0", "500m", "-500m", DEC),
    ("sub", "1Gi", "1", "1073741823", BIN),
    ("sub", "2", "500m", "1500m", DEC),
    ("sub", "1Mi", "1Ki", "1023Ki", BIN),
    ("sub", "10Gi", "9Gi", "1Gi", BIN),
    ("sub", "12e6", "12e6", "0", EXP),
    ("sub", "100m", "1", "-900m", DEC),
    ("int", "68719476736", "BinarySI", "64Gi", BIN),
    ("int", "4531245057", "BinarySI", "4531245057", BIN),
    ("int", "1024", "BinarySI", "1Ki", BIN),
    ("int", "1023", "BinarySI", "1023", BIN),
    ("int", "1536", "BinarySI", "1536", BIN),
    ("int", "0", "BinarySI", "0", BIN),
    ("int", "1000", "DecimalSI", "1k", DEC),
    ("int", "1500", "DecimalSI", "1500", DEC),
    ("int", "1000000", "DecimalExponent", "1e6", EXP),
    ("int", "1500", "DecimalExponent", "1500", EXP),
    ("int", "-2048", "BinarySI", "-2Ki", BIN),
    ("milli", "500", "DecimalSI", "500m", DEC),
    ("milli", "1000", "DecimalSI", "1", DEC),
    ("milli", "1500", "BinarySI", "1500m", BIN),
    ("milli", "1024000", "BinarySI", "1Ki", BIN),
    ("milli", "1", "DecimalSI", "1m", DEC),
    ("milli", "1500", "DecimalExponent", "1500e-3", EXP),
    ("scaled", "15", "3", "15k", DEC),
    ("scaled", "1", "-9", "1n", DEC),
    ("scaled", "4", "9", "4G", DEC),
    ("scaled", "250", "6", "250M", DEC),
    ("neg", "1Gi", "", "-1Gi", BIN),
    ("neg", "-500m", "", "500m", DEC),
    ("neg", "12e6", "", "-12e6", EXP),
]


def _apply(operation: str, a: str, b: str) -> Quantity:
    if operation == "add":
        return Quantity.parse(a) + Quantity.parse(b)
    if operation == "sub":
        return Quantity.parse(a) - Quantity.parse(b)
    if operation == "neg":
        return -Quantity.parse(a)
    if operation == "int":
        return Quantity.from_int(int(a), b)
    if operation == "milli":
        return Quantity(nanos=int(a) * 1_000_000, fmt=b)  # Go's NewMilliQuantity
    assert operation == "scaled"
    return Quantity.from_scaled(int(a), int(b))


@pytest.mark.parametrize(("operation", "a", "b", "expected", "fmt"), OPERATION_TABLE)
def test_operations_match_go(operation: str, a: str, b: str, expected: str, fmt: Format) -> None:
    result = _apply(operation, a, b)
    assert str(result) == expected
    assert result.format is fmt


def test_brief_examples() -> None:
    assert str(Quantity.from_int(68719476736, "BinarySI")) == "64Gi"
    assert str(Quantity.from_int(4531245057, "BinarySI")) == "4531245057"
    assert str(Quantity(nanos=500_000_000)) == "500m"
    assert str(Quantity.parse("1000m")) == "1"
    assert str(Quantity.parse("0.1")) == "100m"
    assert str(Quantity.parse("1.5Gi")) == "1536Mi"
    assert str(Quantity.parse("1Gi")) == "1Gi"
    assert str(Quantity.parse("12e6")) == "12e6"
    assert str(Quantity.parse("1024Ki")) == "1Mi"
    assert str(Quantity.parse("0")) == "0"
    assert str(Quantity.parse("1n")) == "1n"
    assert str(Quantity.parse("100u")) == "100u"


INVALID = [
    "",
    " 1",
    "1 ",
    " ",
    "1.2.3",
    "10000m invalid",
    "2Gi invalid",
    "1Qi",
    "--1",
    "+-1",
    "1e",
    "1e+",
    "1e-",
    "1E+",
    "1e3.5",
    "1e1e1",
    "1Mi1",
    "1k-",
    "1K",
    "1ki",
    "1KI",
    "1mi",
    "1i",
    "NaN",
    "nan",
    "Inf",
    "-Inf",
    "0x10",
    "1_000",
    "\uff11",  # a full-width digit: Go reads bytes, only ASCII digits count
    "\u0661",  # an Arabic-Indic digit
    "1e99999999999999999999",  # the exponent does not fit an int64
    # No digit at all is an error on Go's exact-decimal path (but zero on its int64 path: "Ki").
    "Pi",
    "-Ei",
    ".Pi",
    ".e-10",
    "+e-10",
]


@pytest.mark.parametrize("text", INVALID)
def test_invalid_quantities_are_rejected_with_the_text(text: str) -> None:
    with pytest.raises(ValueError, match="invalid quantity") as caught:
        Quantity.parse(text)
    assert repr(text) in str(caught.value)


@pytest.mark.parametrize(
    ("text", "fmt"), [("Ki", BIN), ("m", DEC), ("-m", DEC), ("e3", EXP), ("E3", EXP), (".E", DEC)]
)
def test_go_reads_a_bare_suffix_as_zero(text: str, fmt: Format) -> None:
    quantity = Quantity.parse(text)
    assert quantity.is_zero()
    assert quantity.format is fmt
    assert str(quantity) == "0"


def test_parse_rejects_non_strings() -> None:
    with pytest.raises(TypeError):
        Quantity.parse(1)  # type: ignore[arg-type]


def test_huge_and_tiny_inputs_are_bounded() -> None:
    assert Quantity.parse(f"1e{MAX_INTEGER_DIGITS - 1}").value() == 10 ** (MAX_INTEGER_DIGITS - 1)
    for text in (
        f"1e{MAX_INTEGER_DIGITS}",
        "1e2147483647",
        "9" * 1001,
        "1e2147483648",
    ):
        with pytest.raises(ValueError, match="invalid quantity"):
            Quantity.parse(text)
    # Binary input is capped at int64 (as in Go), so any length of it is cheap and accepted.
    assert str(Quantity.parse("1" * 1001 + "Ki")) == "9223372036854775807"
    # Digits below a nano-unit only decide the rounding: any number of them is accepted, as in Go.
    assert str(Quantity.parse("1." + "0" * 5000 + "1")) == "1000000001n"
    # Far below a nano-unit is cheap and rounds up to 1n, as Go does.
    assert str(Quantity.parse("1e-2147483648")) == "1e-9"
    assert str(Quantity.parse("0." + "0" * 5000 + "1")) == "1n"
    assert str(Quantity.parse("-0." + "0" * 5000 + "1Ki")) == "-1n"
    assert str(Quantity.parse("0e2147483647")) == "0"


def test_binary_input_is_capped_at_max_int64_like_go() -> None:
    capped = Quantity.parse("16Ei")
    assert capped.value() == 2**63 - 1
    assert Quantity.parse("-16Ei").value() == -(2**63 - 1)
    # The decimal formats have no cap.
    assert Quantity.parse("16E").value() == 16 * 10**18


def test_go_bare_mantissa_beyond_the_largest_suffix() -> None:
    # Go has no suffix above E and Ei and prints the bare mantissa; we reproduce that.
    assert str(Quantity.parse("1000E")) == "1"
    assert str(Quantity.from_int(2**70, BIN)) == "1"
    assert Quantity.parse("1000E").value() == 10**21


def test_value_rounds_away_from_zero() -> None:
    assert Quantity.parse("1500m").value() == 2
    assert Quantity.parse("1n").value() == 1
    assert Quantity.parse("1n").milli_value() == 1
    assert Quantity.parse("-1500m").value() == -2
    assert Quantity.parse("-1n").milli_value() == -1
    assert Quantity.parse("1.5Gi").value() == 1610612736
    assert Quantity.parse("2").milli_value() == 2000
    assert Quantity.parse("1234567n").scaled_value(-6) == 1235
    assert Quantity.parse("15k").scaled_value(3) == 15


def test_from_scaled_rounds_below_a_nano_up() -> None:
    # Go would keep 5e-10 in its int64 form and print the suffix-less "500"; we keep 1n.
    assert str(Quantity.from_scaled(5, -10)) == "1n"
    assert str(Quantity.from_scaled(-5, -10)) == "-1n"
    assert str(Quantity.from_scaled(5, -9)) == "5n"


def test_arithmetic_keeps_the_left_format_unless_the_left_is_zero() -> None:
    one_gi = Quantity.parse("1Gi")
    one = Quantity.parse("1")
    assert (one_gi + one).format is BIN
    assert (one + one_gi).format is DEC
    assert (Quantity() + one_gi).format is BIN
    assert (Quantity() - one_gi).format is BIN
    assert str(Quantity() - one_gi) == "-1Gi"
    assert (one_gi * 3).format is BIN
    assert str(3 * one_gi) == "3Gi"
    assert (-one_gi).format is BIN


def test_arithmetic_forgets_the_input_text() -> None:
    plus_one = Quantity.parse("+1")
    assert str(plus_one) == "+1"  # Go keeps "+1" verbatim...
    assert str(plus_one + Quantity()) == "1"  # ...until the value changes hands
    negated = -plus_one
    assert str(-negated) == "1"
    assert plus_one.canonical() == "1"
    assert str(Quantity(nanos=plus_one.nanos, fmt=BIN)) == "1"


def test_comparisons_and_hash_are_by_value() -> None:
    a = Quantity.parse("1Gi")
    b = Quantity.parse("1073741824")
    c = Quantity.parse("1024Mi")
    assert a == b == c
    assert len({a, b, c}) == 1
    assert {a: 1}[b] == 1
    assert Quantity.parse("500m") < Quantity.parse("1")
    assert Quantity.parse("1") <= Quantity.parse("1000m")
    assert Quantity.parse("1Ki") > Quantity.parse("1k")
    assert Quantity.parse("1Ki") >= Quantity.parse("1024")
    assert Quantity.parse("-1") < Quantity()
    assert a > Quantity.parse("1G") and not a < Quantity.parse("1G")
    assert not a < c and not a > c
    assert a != "1Gi"
    assert (a == "1Gi") is False
    with pytest.raises(TypeError):
        _ = a < 5  # type: ignore[operator]
    with pytest.raises(TypeError):
        _ = a + 1  # type: ignore[operator]


def test_sign_zero_and_truthiness() -> None:
    assert Quantity.parse("-5m").sign() == -1
    assert Quantity.parse("0Gi").sign() == 0
    assert Quantity.parse("5m").sign() == 1
    assert Quantity.parse("0.0").is_zero()
    assert not Quantity.parse("1n").is_zero()
    assert not Quantity()
    assert Quantity.parse("1n")
    assert abs(Quantity.parse("-2Gi")) == Quantity.parse("2Gi")
    assert +Quantity.parse("2") == Quantity.parse("2")


def test_sum_starts_from_int_zero() -> None:
    total = sum([Quantity.parse("1Gi"), Quantity.parse("1Gi"), Quantity.parse("512Mi")])
    assert isinstance(total, Quantity)
    assert str(total) == "2560Mi"


def test_quantity_is_immutable_and_copies_are_itself() -> None:
    quantity = Quantity.parse("1Gi")
    assert copy.copy(quantity) is quantity
    assert copy.deepcopy(quantity) is quantity
    with pytest.raises(AttributeError):
        quantity.extra = 1  # type: ignore[attr-defined]


def test_repr_and_accessors() -> None:
    quantity = Quantity.parse("1.5Gi")
    assert repr(quantity) == "Quantity('1536Mi', BinarySI)"
    assert quantity.nanos == 1610612736 * 10**9
    assert Quantity(nanos=1500, fmt="DecimalSI") == Quantity.parse("1500n")
    with pytest.raises(ValueError):
        Quantity.from_int(1, "Binary")
    with pytest.raises(TypeError):
        Quantity.from_int(1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Quantity(nanos=True)


def test_pickle_round_trip() -> None:
    quantity = Quantity.parse("+1Gi")
    restored = pickle.loads(pickle.dumps(quantity))
    assert restored == quantity
    assert str(restored) == "+1Gi"
    assert restored.format is Format.BINARY_SI


# --------------------------------------------------------------------------- properties

FORMATS = st.sampled_from([BIN, DEC, EXP])
# Go renders faithfully up to E (10^18) and Ei (2^60); above, it drops the suffix (tested above).
NANOS = st.integers(min_value=-(10**27), max_value=10**27)


@st.composite
def quantities(draw: st.DrawFn) -> Quantity:
    return Quantity(nanos=draw(NANOS), fmt=draw(FORMATS))


@given(quantities())
def test_round_trip_through_string(quantity: Quantity) -> None:
    text = str(quantity)
    again = Quantity.parse(text)
    assert again == quantity
    # As in Go, the text may change once: a BinarySI integer that is no multiple of 1024 renders
    # without a suffix ("625000") and parses back as DecimalSI ("625k"); from then on it is stable.
    assert str(Quantity.parse(str(again))) == str(again)


@given(quantities(), quantities())
def test_add_then_subtract_is_identity(a: Quantity, b: Quantity) -> None:
    assert a + b - b == a
    assert a - b + b == a
    assert a + b == b + a
    assert (a + b).nanos == a.nanos + b.nanos


@given(quantities(), quantities())
def test_ordering_agrees_with_value(a: Quantity, b: Quantity) -> None:
    assert (a < b) == (a.nanos < b.nanos)
    assert (a == b) == (a.nanos == b.nanos)
    assert (a < b) == (b > a) and (a <= b) == (b >= a)
    if a.nanos > b.nanos:
        assert a.value() >= b.value()
        assert a.milli_value() >= b.milli_value()


@given(quantities())
def test_value_is_ceiling_away_from_zero(quantity: Quantity) -> None:
    nanos = quantity.nanos
    magnitude = -(-abs(nanos) // 10**9)
    assert quantity.value() == (magnitude if nanos >= 0 else -magnitude)
    magnitude_milli = -(-abs(nanos) // 10**6)
    assert quantity.milli_value() == (magnitude_milli if nanos >= 0 else -magnitude_milli)


@given(
    st.integers(min_value=0, max_value=10**6),
    st.sampled_from(["", "n", "u", "m", "k", "M", "G", "T", "Ki", "Mi", "Gi", "Ti", "e3", "e-3"]),
)
def test_parsed_canonical_text_is_stable(number: int, suffix: str) -> None:
    text = str(Quantity.parse(f"{number}{suffix}"))
    assert str(Quantity.parse(text)) == text


# --------------------------------------------------------------------------- ResourceList


def rl(**values: str) -> ResourceList:
    """A ResourceList from keyword arguments, '_' standing for '.' in the key."""
    return {key.replace("_", "."): Quantity.parse(value) for key, value in values.items()}


def test_parse_resource_list() -> None:
    parsed = resources.parse_resource_list({"limits.cpu": "2", "limits.memory": "4531245057"})
    assert parsed == {
        "limits.cpu": Quantity.from_int(2),
        "limits.memory": Quantity.from_int(4531245057),
    }
    assert resources.parse_resource_list(None) == {}
    assert resources.parse_resource_list({}) == {}
    # Decoded JSON numbers, a Quantity, null and padded strings are read as Go's decoder reads them.
    mixed = resources.parse_resource_list(
        {"pods": 10, "cpu": 0.5, "memory": Quantity.parse("1Gi"), "gpu": None, "x": " 2 "}
    )
    assert mixed == rl(pods="10", cpu="500m", memory="1Gi", gpu="0", x="2")


@pytest.mark.parametrize(
    "value", ["10000m invalid", "2Gi invalid", "", True, [1], {"a": 1}, float("nan")]
)
def test_parse_resource_list_names_the_key_and_value(value: object) -> None:
    with pytest.raises(ValueError, match=r"limits\.cpu") as caught:
        resources.parse_resource_list({"limits.memory": "1Gi", "limits.cpu": value})
    assert repr(value) in str(caught.value)


def test_parse_resource_list_rejects_non_objects() -> None:
    with pytest.raises(ValueError):
        resources.parse_resource_list(["cpu"])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        resources.parse_resource_list({1: "1"})  # type: ignore[dict-item]


def test_add_subtract_like_kubernetes_quota() -> None:
    a = rl(cpu="1", memory="1Gi")
    b = rl(memory="512Mi", pods="2")
    assert resources.add(a, b) == rl(cpu="1", memory="1536Mi", pods="2")
    assert str(resources.add(a, b)["memory"]) == "1536Mi"
    assert resources.subtract(a, b) == rl(cpu="1", memory="512Mi", pods="-2")
    assert resources.subtract_non_negative(b, a) == rl(memory="0", pods="2", cpu="0")
    assert resources.total([a, b, b]) == rl(cpu="1", memory="2Gi", pods="4")
    assert resources.total([]) == {}
    # Inputs are not modified.
    assert a == rl(cpu="1", memory="1Gi")


def test_add_keeps_left_format() -> None:
    summed = resources.add({"memory": Quantity.from_int(1, DEC)}, rl(memory="1Gi"))
    assert str(summed["memory"]) == "1073741825"
    summed = resources.add({"memory": Quantity.from_int(0, DEC)}, rl(memory="1Gi"))
    assert str(summed["memory"]) == "1Gi"


def test_maximum_mask_and_zero() -> None:
    a = rl(cpu="2", memory="1Gi", pods="5")
    b = rl(cpu="3", memory="512Mi", storage="1Ti")
    assert resources.maximum(a, b) == rl(cpu="3", memory="1Gi", pods="5", storage="1Ti")
    # On a tie, Go's Max takes b's value (visible in its format).
    tie = resources.maximum({"m": Quantity.parse("1024Mi")}, {"m": Quantity.parse("1073741824")})
    assert str(tie["m"]) == "1073741824"
    assert resources.mask(a, ["cpu", "storage"]) == rl(cpu="2")
    assert resources.is_zero({})
    assert resources.is_zero(rl(cpu="0", memory="0Gi"))
    assert not resources.is_zero(rl(cpu="0", memory="1n"))
    assert resources.negative_keys(rl(a="-1", b="1", c="-1n")) == ["a", "c"]


def test_less_or_equal_only_constrains_keys_of_b() -> None:
    usage = rl(limits_cpu="3", limits_memory="4Gi", pods="10")
    hard = rl(limits_cpu="2", limits_memory="8Gi", requests_cpu="1")
    assert resources.less_or_equal(usage, hard) == (False, ["limits.cpu"])
    assert resources.less_or_equal(rl(pods="100"), hard) == (True, [])
    assert resources.less_or_equal(hard, hard) == (True, [])
    over = resources.less_or_equal(rl(a="2", b="2", c="2"), rl(c="1", a="1", b="3"))
    assert over == (False, ["a", "c"])


def test_semantic_equality() -> None:
    assert resources.equal(rl(memory="1Gi"), rl(memory="1024Mi"))
    assert not resources.equal(rl(memory="1Gi"), rl(memory="1G"))
    assert not resources.equal(rl(memory="1Gi"), rl(memory="1Gi", cpu="0"))
    assert resources.equal({}, {})


def test_json_round_trip_matches_go() -> None:
    text = '{"limits.cpu":"2","limits.memory":"4531245057"}'
    parsed = resources.loads(text)
    assert parsed == {
        "limits.cpu": Quantity.from_int(2),
        "limits.memory": Quantity.from_int(4531245057),
    }
    assert resources.dumps(parsed) == text
    # Sorted keys, Go's String() per value, compact.
    built = {"memory": Quantity.from_int(68719476736, BIN), "cpu": Quantity(nanos=500_000_000)}
    assert resources.dumps(built) == '{"cpu":"500m","memory":"64Gi"}'
    assert resources.to_json_dict(built) == {"cpu": "500m", "memory": "64Gi"}
    assert list(resources.to_json_dict(built)) == ["cpu", "memory"]
    assert resources.dumps({}) == "{}"
    # Go's encoder escapes HTML characters and keeps other text as is.
    odd = {"a<b>&c": Quantity.from_int(1), "é": Quantity.from_int(2)}
    assert resources.dumps(odd) == '{"a\\u003cb\\u003e\\u0026c":"1","é":"2"}'


def test_dumps_of_equal_lists_written_differently_gives_each_its_own_text() -> None:
    gib, plain = {"memory": Quantity.parse("1Gi")}, {"memory": Quantity.parse("1073741824")}
    assert gib == plain
    assert resources.dumps(gib) == '{"memory":"1Gi"}'
    assert resources.dumps(plain) == '{"memory":"1073741824"}'
    assert resources.dumps(gib) == '{"memory":"1Gi"}'


def test_loads_reads_what_go_reads() -> None:
    assert resources.loads('{ "cpu" : 2 , "memory": 1.5e3, "x": " 1Gi ", "y": null }') == rl(
        cpu="2", memory="1500", x="1Gi", y="0"
    )
    # A JSON number keeps its exact text: no float rounding.
    exact = resources.loads('{"a": 0.30000000000000000001}')["a"]
    assert exact.nanos == 300000001  # 0.3 plus a tiny bit, rounded up to the next 1n as Go does
    assert str(resources.loads('{"a": 1e3}')["a"]) == "1e3"
    assert resources.loads("null") == {}
    assert resources.loads("{}") == {}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        "[]",
        '"2"',
        "2",
        '{"cpu": "2Gi invalid"}',
        '{"cpu": true}',
        '{"cpu": NaN}',
        '{"cpu": Infinity}',
        '{"cpu": {"a": 1}}',
        '{"cpu": "1"} x',
        '\ufeff{"cpu": "1"}',
    ],
)
def test_loads_rejects_bad_json_with_the_text(text: str) -> None:
    with pytest.raises(ValueError, match="invalid resource list JSON") as caught:
        resources.loads(text)
    assert repr(text) in str(caught.value)


def test_loads_refuses_json_nested_too_deep_with_a_value_error_quoting_its_start() -> None:
    """Deeper than the decoder's stack is a RecursionError inside json: it must be the same
    ValueError as any bad list (its readers skip the object), quoting only the text's start."""
    text = '{"cpu": ' + "[" * 200_000 + "]" * 200_000 + "}"
    with pytest.raises(ValueError, match=r"invalid resource list JSON .*nested too deep") as caught:
        resources.loads(text)
    assert f"({len(text)} characters)" in str(caught.value)
    assert len(str(caught.value)) < 400


@given(st.dictionaries(st.sampled_from(["cpu", "memory", "pods", "limits.cpu"]), quantities()))
def test_resource_list_json_round_trip(values: ResourceList) -> None:
    assert resources.equal(resources.loads(resources.dumps(values)), values)
