"""Kubernetes `resource.Quantity`, with the exact semantics of k8s.io/apimachinery/pkg/api/resource.

Quota arithmetic decides whether a migration target pod is admitted, so it must agree with the API
server to the last byte and the last milli-CPU. A `Quantity` therefore keeps its value as an exact
integer count of nano-units (never a float) plus the Go `Format` it was written in, and renders
itself exactly as Go's `Quantity.String()` does. That includes Go's habit of printing a short
input back verbatim when it "looks canonical": "+1", "01", "1." and "1.Gi" stay as written, while
"1000m" becomes "1" and "1024Ki" becomes "1Mi" (arithmetic results are always canonical).

Where Go is not self-consistent we follow its documented intent (see `value()`), and where Go's
int64/int32 arithmetic silently overflows we either stay exact (values) or refuse the input
(`ValueError`, see `MAX_INTEGER_DIGITS`), because a quota computed from a wrapped number is worse
than a clear error.
"""

from __future__ import annotations

import enum
import functools
import re
from typing import Final, final

__all__ = [
    "MAX_INTEGER_DIGITS",
    "Format",
    "Quantity",
]


class Format(enum.StrEnum):
    """How a quantity is written; a parsed quantity remembers it and renders with it again."""

    BINARY_SI = "BinarySI"  # 12Mi (12 * 2^20)
    DECIMAL_SI = "DecimalSI"  # 12M (12 * 10^6)
    DECIMAL_EXPONENT = "DecimalExponent"  # 12e6


# Go stores 10^-9 as the smallest step: anything finer is rounded up (away from zero) to 1n.
_NANO: Final = 10**9

# Go caps BinarySI input at the largest int64 (there is no cap for the decimal formats).
_MAX_INT64: Final = (1 << 63) - 1
_MAX_BINARY_NANOS: Final = _MAX_INT64 * _NANO
_INT64_DIGITS: Final = len(str(_MAX_INT64))

# Go keeps decimal exponents in an int32 and silently wraps larger ones ("1e4294967296" == 1).
_MIN_INT32: Final = -(1 << 31)
_MAX_INT32: Final = (1 << 31) - 1

MAX_INTEGER_DIGITS: Final = 1000
"""Largest number of integer digits we accept. Go has no limit (a Quantity can hold 1e999999999 as a
scaled decimal); an exact Python integer that big would cost memory and time on every operation, and
no resource is anywhere near 10^1000. Larger inputs get a ValueError instead of a slow sidecar.
Binary input is capped at int64 as in Go, and any number of fractional digits is accepted (digits
below one nano-unit only decide the rounding), so neither is limited here."""

_DIGITS: Final = frozenset("0123456789")
# The characters Go's scanner lets into a suffix before an optional sign and exponent digits.
_SUFFIX_CHARS: Final = frozenset("eEinumkKMGTP")
_EXPONENT_RE: Final = re.compile(r"[+-]?[0-9]+")

_DECIMAL_SUFFIX_BY_EXPONENT: Final = {
    -9: "n",
    -6: "u",
    -3: "m",
    3: "k",
    6: "M",
    9: "G",
    12: "T",
    15: "P",
    18: "E",
}
"""The decimal SI suffixes by power of ten (none for 10^0)."""
_BINARY_SUFFIX_BY_POWER_OF_1024: Final = {1: "Ki", 2: "Mi", 3: "Gi", 4: "Ti", 5: "Pi", 6: "Ei"}
"""The binary SI suffixes by power of 1024."""
_SUFFIXES: Final[dict[str, tuple[int, int, Format]]] = {
    "": (10, 0, Format.DECIMAL_SI),
    **{
        suffix: (10, exponent, Format.DECIMAL_SI)
        for exponent, suffix in _DECIMAL_SUFFIX_BY_EXPONENT.items()
    },
    **{
        suffix: (2, 10 * power, Format.BINARY_SI)
        for power, suffix in _BINARY_SUFFIX_BY_POWER_OF_1024.items()
    },
}
"""Every suffix a quantity may carry -> (base, exponent, format): "Mi" is 2^20, "m" 10^-3."""


def _pow10(exponent: int) -> int:
    """10^exponent for exponent >= 0, typed as int (mypy types `int ** int` as Any)."""
    result: int = 10**exponent
    return result


def _ceil_div_magnitude(value: int, divisor: int) -> int:
    """value / divisor rounded away from zero (Go's `inf.RoundUp` and `negativeScaleInt64`)."""
    quotient, remainder = divmod(abs(value), divisor)
    if remainder:
        quotient += 1
    return quotient if value >= 0 else -quotient


@final
class Quantity:
    """An immutable, exact Kubernetes quantity.

    `nanos` is the value times 10^9. Equality, ordering and hashing are by value only ("1Gi" equals
    "1073741824"), the way Go's `Cmp`/`Equal` and Kubernetes' semantic equality work; the format and
    the remembered input text only affect `str()`.
    """

    __slots__ = ("_format", "_nanos", "_text")

    _nanos: int
    _format: Format
    _text: str | None

    def __init__(self, *, nanos: int = 0, fmt: Format | str = Format.DECIMAL_SI) -> None:
        if isinstance(nanos, bool) or not isinstance(nanos, int):
            raise TypeError(f"a quantity is an exact integer of nano-units, not {nanos!r}")
        self._nanos = nanos
        self._format = Format(fmt)
        self._text = None

    # ----------------------------------------------------------------- construction

    @classmethod
    def _make(cls, nanos: int, fmt: Format, text: str | None = None) -> Quantity:
        """The constructor without argument checks, for values we computed ourselves."""
        quantity = object.__new__(cls)
        quantity._nanos = nanos
        quantity._format = fmt
        quantity._text = text
        return quantity

    @classmethod
    def from_int(cls, value: int, fmt: Format | str = Format.DECIMAL_SI) -> Quantity:
        """Go's `NewQuantity(value, format)`."""
        return cls(nanos=value * _NANO, fmt=fmt)

    @classmethod
    def from_scaled(cls, value: int, scale: int) -> Quantity:
        """Go's `NewScaledQuantity(value, scale)`: value * 10^scale, DecimalSI, rounded up to 1n."""
        shift = scale + 9
        if shift >= 0:
            return cls(nanos=value * _pow10(shift))
        return cls(nanos=_ceil_div_magnitude(value, _pow10(-shift)))

    @classmethod
    def parse(cls, text: str) -> Quantity:
        """Go's `ParseQuantity`: every valid form, or ValueError naming the text.

        Accepted: optional sign, digits with an optional '.', then a suffix (Ki..Ei, n u m k M G T P
        E, or e/E with a signed integer exponent). Surrounding whitespace is an error, as in Go.
        Results are cached (quantities are immutable and the same few strings recur in every pod).
        """
        if not isinstance(text, str):
            raise TypeError(f"quantity must be a string, not {type(text).__name__}: {text!r}")
        return _parse_cached(text)

    # ----------------------------------------------------------------- accessors

    @property
    def nanos(self) -> int:
        """The exact value times 10^9."""
        return self._nanos

    @property
    def format(self) -> Format:
        return self._format

    def value(self) -> int:
        """Go's `Value()`: the value rounded up to an integer, away from zero.

        Exact for any size (Go's int64 silently overflows above 2^63-1). For negative fractions Go
        itself is inconsistent (its int64 path gives -2 for "-1.5", its big-decimal path -1 or 0);
        we follow its documentation and its common path: away from zero.
        """
        return self.scaled_value(0)

    def milli_value(self) -> int:
        """Go's `MilliValue()`: ceil(value * 1000), away from zero."""
        return self.scaled_value(-3)

    def scaled_value(self, scale: int) -> int:
        """Go's `ScaledValue(scale)`: value / 10^scale, rounded away from zero."""
        shift = 9 + scale
        if shift <= 0:
            return self._nanos * _pow10(-shift)
        return _ceil_div_magnitude(self._nanos, _pow10(shift))

    def is_zero(self) -> bool:
        return self._nanos == 0

    def sign(self) -> int:
        """-1, 0 or 1."""
        return (self._nanos > 0) - (self._nanos < 0)

    # ----------------------------------------------------------------- arithmetic

    def _result_format(self, other: Quantity) -> Format:
        # Go's Add/Sub keep the receiver's format, except that a zero receiver takes the other's.
        return other._format if self._nanos == 0 else self._format

    def __add__(self, other: object) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity._make(self._nanos + other._nanos, self._result_format(other))

    def __radd__(self, other: object) -> Quantity:
        # Lets sum() start from its default int 0.
        if isinstance(other, int) and not isinstance(other, bool) and other == 0:
            return self
        return NotImplemented

    def __sub__(self, other: object) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity._make(self._nanos - other._nanos, self._result_format(other))

    def __mul__(self, other: object) -> Quantity:
        """Go's `Mul(int64)`: an exact integer multiple, same format."""
        if isinstance(other, bool) or not isinstance(other, int):
            return NotImplemented
        return Quantity._make(self._nanos * other, self._format)

    __rmul__ = __mul__

    def __neg__(self) -> Quantity:
        return Quantity._make(-self._nanos, self._format)

    def __pos__(self) -> Quantity:
        return self

    def __abs__(self) -> Quantity:
        return self if self._nanos >= 0 else -self

    def __bool__(self) -> bool:
        return self._nanos != 0

    # ----------------------------------------------------------------- comparison

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._nanos == other._nanos

    def __hash__(self) -> int:
        return hash(self._nanos)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._nanos < other._nanos

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._nanos <= other._nanos

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._nanos > other._nanos

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._nanos >= other._nanos

    # ----------------------------------------------------------------- rendering

    def __str__(self) -> str:
        """Go's `String()`: the input text when Go keeps it, else the canonical form (kept)."""
        if self._text is None:
            self._text = self.canonical()
        return self._text

    def canonical(self) -> str:
        """Go's `CanonicalizeBytes`: the largest suffix that loses nothing, no fractional digits."""
        return _canonical(self._nanos, self._format)

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r}, {self._format.value})"

    def __copy__(self) -> Quantity:
        return self

    def __deepcopy__(self, memo: object) -> Quantity:
        return self


# --------------------------------------------------------------------------- parsing

_PARSE_CACHE_SIZE: Final = 4096
"""Distinct quantity strings in a cluster are few (VM sizes, sidecar requests); 4096 covers them."""


def _parse(text: str) -> Quantity:
    if text == "":
        raise ValueError("invalid quantity '': quantities must not be empty")
    if text == "0":
        return Quantity._make(0, Format.DECIMAL_SI, "0")
    positive, has_digits, num, denom, suffix = _scan(text)
    base, exponent, fmt = _interpret_suffix(text, suffix)
    fast = _go_fast_path(num, denom, base, exponent)
    if not has_digits and not fast:
        # Go's exact-decimal path cannot read a number with no digit at all ("Pi", ".e-10"),
        # while its int64 path reads it as zero ("Ki", ".", "-").
        raise _invalid(text, "unable to parse numeric part of quantity")
    magnitude = _magnitude_nanos(text, num, denom, base, exponent)
    if fmt is Format.BINARY_SI:
        magnitude = min(magnitude, _MAX_BINARY_NANOS)
        if 0 < magnitude < _NANO:
            # Go: a non-zero binary quantity below 1 is remembered as DecimalSI.
            fmt = Format.DECIMAL_SI
    nanos = magnitude if positive else -magnitude
    cached = text if fast and _looks_canonical(num, denom, base, exponent) else None
    return Quantity._make(nanos, fmt, cached)


_parse_cached: Final = functools.lru_cache(maxsize=_PARSE_CACHE_SIZE)(_parse)


def _invalid(text: str, reason: str) -> ValueError:
    return ValueError(f"invalid quantity {text!r}: {reason}")


def _scan(text: str) -> tuple[bool, bool, str, str, str]:
    """Split text as Go's `parseQuantityString` does: sign, integer digits, fraction, suffix.

    Also says whether the number part has any digit at all. The integer digits come back without
    leading zeros ("0" when none are left), exactly the `num` that Go's fast path and its
    canonical-text check look at.
    """
    end = len(text)
    positive = text[0] != "-"
    pos = 1 if text[0] in "+-" else 0
    number_start = pos
    while pos < end and text[pos] == "0":
        pos += 1
    if pos == end:
        return positive, pos > number_start, "0", "", ""
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    has_digits = pos > number_start
    num = text[start:pos] or "0"
    denom = ""
    if pos < end and text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
        has_digits = has_digits or bool(denom)
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise _invalid(
            text,
            "quantities must match the regular expression "
            "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        )
    return positive, has_digits, num, denom, text[suffix_start:]


def _interpret_suffix(text: str, suffix: str) -> tuple[int, int, Format]:
    known = _SUFFIXES.get(suffix)
    if known is not None:
        return known
    if len(suffix) > 1 and suffix[0] in "eE" and _EXPONENT_RE.fullmatch(suffix[1:]):
        return 10, _exponent(text, suffix[1:]), Format.DECIMAL_EXPONENT
    raise _invalid(text, f"unable to parse quantity's suffix {suffix!r}")


def _exponent(text: str, written: str) -> int:
    """The exponent after 'e'/'E': any number of leading zeros, as Go's strconv.ParseInt allows.

    Beyond int64 Go refuses the text too; between int32 and int64 Go wraps it silently and we refuse
    it instead (see the module docstring).
    """
    sign = "-" if written[0] == "-" else ""
    magnitude = written.lstrip("+-").lstrip("0") or "0"
    if len(magnitude) > _INT64_DIGITS:
        raise _invalid(text, f"exponent {written} is out of range")
    exponent = int(sign + magnitude)
    if not _MIN_INT32 <= exponent <= _MAX_INT32:
        raise _invalid(text, f"exponent {written} is out of range")
    return exponent


def _magnitude_nanos(text: str, num: str, denom: str, base: int, exponent: int) -> int:
    """|value| * 10^9, rounded up to a whole nano-unit when the input is finer (as Go does).

    Any number of digits is accepted, as in Go: digits below one nano-unit only decide the rounding,
    so they are dropped before any integer conversion (see `_drop_sub_nano_digits`).
    """
    digits = (num + denom).lstrip("0")
    if not digits:
        return 0
    significant = digits.rstrip("0")
    # Decimal shift so that nanos = int(significant) * 10^shift (* 2^exponent for binary).
    shift = (len(digits) - len(significant)) - len(denom) + 9
    if base == 10:
        shift += exponent
        binary_factor = 1
        max_binary_digits = 0
    else:
        binary_factor = 1 << exponent
        max_binary_digits = len(str(binary_factor))
    if base == 2 and len(significant) + shift - 10 >= _INT64_DIGITS:
        # At least 10^19 before the binary factor: Go caps binary input at int64, so do we.
        return _MAX_BINARY_NANOS
    integer_digits = len(significant) + max_binary_digits + shift - 9
    if integer_digits > MAX_INTEGER_DIGITS:
        raise _invalid(text, f"too large: more than {MAX_INTEGER_DIGITS} integer digits")
    if shift >= 0:
        return _digits_to_int(significant) * binary_factor * _pow10(shift)
    if len(significant) + max_binary_digits + shift <= 0:
        # Smaller than one nano-unit: Go rounds any non-zero amount up to 1n.
        return 1
    return _ceil_nanos(significant, -shift, binary_factor, max_binary_digits)


def _ceil_nanos(significant: str, scale: int, binary_factor: int, max_binary_digits: int) -> int:
    """ceil(int(significant) * binary_factor / 10^scale), cheaply for very long digit strings."""
    # Digits this far below the nano-unit cannot move the result by a whole step.
    dropped = scale - max_binary_digits - 1
    if dropped <= 0:
        return _ceil_div_magnitude(_digits_to_int(significant) * binary_factor, _pow10(scale))
    # `significant` ends with a non-zero digit, so the dropped tail lies strictly between 0 and
    # 10^dropped: the exact value is inside an open interval whose two ends we can compute.
    floor_end = _digits_to_int(significant[:-dropped]) * _pow10(dropped) * binary_factor
    lowest = floor_end // _pow10(scale) + 1
    highest = _ceil_div_magnitude(floor_end + _pow10(dropped) * binary_factor, _pow10(scale))
    if lowest == highest:
        return lowest
    # Only a binary factor can make the interval straddle a nano-unit: compute exactly.
    return _ceil_div_magnitude(_digits_to_int(significant) * binary_factor, _pow10(scale))


_INT_CHUNK_DIGITS: Final = 4000
"""Below Python's default limit of 4300 digits for one str -> int conversion."""


def _digits_to_int(digits: str) -> int:
    """int(digits) for any length, without Python's str -> int digit limit (halves recursively)."""
    if len(digits) <= _INT_CHUNK_DIGITS:
        return int(digits)
    low_length = len(digits) // 2
    high = _digits_to_int(digits[:-low_length])
    return high * _pow10(low_length) + _digits_to_int(digits[-low_length:])


def _go_fast_path(num: str, denom: str, base: int, exponent: int) -> bool:
    """Whether Go's `ParseQuantity` takes its int64 fast path for this input.

    The value is the same either way; the path decides two Go quirks we reproduce: whether the input
    text is kept verbatim as `String()` (see `_looks_canonical`) and whether a number without any
    digit is an error.
    """
    if base == 2:
        # Go estimates the binary precision with float32(exponent)*3/10, exact for 10..60.
        return not denom and 15 - len(num) - (exponent * 3) // 10 - 1 >= 0
    return 18 - len(num) - len(denom) >= 0 and exponent - len(denom) >= -9


def _looks_canonical(num: str, denom: str, base: int, exponent: int) -> bool:
    """On the fast path, whether Go remembers the input text as the quantity's `String()`.

    That is why "+1", "01" or "1." print back unchanged while "1000m" prints as "1". We reproduce
    Go's exact test so that what we write is what the API server would store.
    """
    if base == 2:
        return int(num) & 0x07 != 0
    shifted = num + denom
    scale = exponent - len(denom)
    return scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0"


# --------------------------------------------------------------------------- rendering


def _canonical(nanos: int, fmt: Format) -> str:
    if nanos == 0:
        return "0"
    if fmt is Format.BINARY_SI:
        if -1024 * _NANO < nanos < 1024 * _NANO or nanos % _NANO:
            # Small or fractional binary amounts are shown in DecimalSI so nothing is rounded.
            fmt = Format.DECIMAL_SI
        else:
            return _canonical_binary(nanos // _NANO)
    mantissa, exponent = nanos, -9
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    remainder = exponent % 3
    mantissa *= _pow10(remainder)
    exponent -= remainder
    if fmt is Format.DECIMAL_EXPONENT:
        return f"{mantissa}e{exponent}" if exponent else str(mantissa)
    # Go has no DecimalSI suffix beyond E (10^18) and then prints the bare mantissa ("1000E" -> "1").
    return f"{mantissa}{_DECIMAL_SUFFIX_BY_EXPONENT.get(exponent, '')}"


def _canonical_binary(value: int) -> str:
    power = 0
    while value % 1024 == 0:
        value //= 1024
        power += 1
    # Go has no binary suffix beyond Ei (2^60) and then prints the bare mantissa.
    return f"{value}{_BINARY_SUFFIX_BY_POWER_OF_1024.get(power, '')}"
